//! `steward top`'s frame, drawn from the board: a header (the link, the
//! server), the models (slots, KV, rates, counters), the requests (state,
//! prompt progress, tokens generated, age), and for the selected model
//! the memory ledger term by term and the recent steps (durations and
//! tokens per step as sparklines). Pure: `draw` reads the board only, so
//! a `TestBackend` renders it (the tests, `--once`).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Sparkline, Table};
use ratatui::Frame;

use super::feed::{Board, Link, ModelSnap};

/// The ledger's terms, in the web dashboard's order (bottom to top).
const TERMS: &[(&str, &str)] = &[
    ("weights", "weights"),
    ("compute_buffers", "compute buffers"),
    ("live_state", "live state"),
    ("reserved_growth", "reserved growth"),
    ("cached_prefixes", "cached prefixes"),
    ("window_state", "window state"),
    ("kv_free", "KV free"),
    ("host_prefixes", "host prefixes"),
    ("preempted", "preempted"),
    ("pinned_prefixes", "pinned prefixes"),
    ("checkpoints", "checkpoints"),
    ("projector", "projector"),
    ("media_cache", "media cache"),
    ("disk_queued", "disk queued"),
    ("other", "other"),
];

pub(crate) fn draw(f: &mut Frame, b: &Board) {
    let models = b.snap.as_ref().map_or(&[][..], |s| &s.models[..]);
    let model_rows = (models.len().max(1) as u16 + 3).min(10);
    let [head, top, reqs, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(model_rows),
        Constraint::Min(5),
        Constraint::Length(12),
    ])
    .areas(f.area());
    f.render_widget(header(b), head);
    f.render_widget(models_table(b, models), top);
    f.render_widget(requests_table(models), reqs);
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(bottom);
    match models.get(b.selected) {
        Some(m) => {
            f.render_widget(ledger(m, left.width), left);
            steps(f, b, m, right);
        }
        None => {
            f.render_widget(Block::bordered().title(" Ledger "), left);
            f.render_widget(Block::bordered().title(" Steps "), right);
        }
    }
}

fn header(b: &Board) -> Paragraph<'static> {
    let stalled = b.at.map(|t| t.elapsed().as_secs_f64()).filter(|s| *s > 3.0);
    let link = match (&b.link, stalled) {
        (Link::Live, None) => Span::styled("● live", Style::new().fg(Color::Green)),
        (Link::Live, Some(s)) => Span::styled(
            format!("● stalled ({s:.0} s)"),
            Style::new().fg(Color::Yellow),
        ),
        (Link::Connecting, _) => Span::styled("○ connecting…", Style::new().fg(Color::Yellow)),
        (Link::Down(why), _) => Span::styled(format!("✕ {why}"), Style::new().fg(Color::Red)),
    };
    let conns = b.snap.as_ref().map_or(String::new(), |s| {
        format!("  {} connections", s.connections_open)
    });
    Paragraph::new(Line::from(vec![
        Span::styled("steward top ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!("{}  ", b.url)),
        link,
        Span::raw(conns),
        Span::styled("   Tab: next model  q: quit", Style::new().dim()),
    ]))
}

fn models_table<'a>(b: &Board, models: &'a [ModelSnap]) -> Table<'a> {
    let rows = models.iter().enumerate().map(|(i, m)| {
        let state = if m.draining {
            "draining"
        } else if m.ready {
            "ready"
        } else {
            "loading"
        };
        let kv = &m.kv;
        let kv_pct = pct(kv.cells_used + kv.cells_reserved, kv.cells_total);
        let rate = b
            .tokens_per_s(&m.model)
            .map_or("–".into(), |r| format!("{r:.1}"));
        let c = &m.counters;
        let mark = if i == b.selected { "▸ " } else { "  " };
        Row::new(vec![
            Cell::from(format!("{mark}{}", m.model)),
            Cell::from(state),
            Cell::from(format!("{}/{}", m.running, m.slots_total)),
            Cell::from(format!("{}/{}/{}", m.prefilling, m.waiting, m.paused)),
            Cell::from(format!(
                "{}+{}/{} {kv_pct:.0}%",
                kv.cells_used, kv.cells_reserved, kv.cells_total
            )),
            Cell::from(kv.cells_cached.to_string()),
            Cell::from(rate),
            Cell::from(format!("{}/{}/{}", c.finished, c.cancelled, c.failed)),
        ])
    });
    let head = Row::new(vec![
        "model",
        "state",
        "running",
        "pre/wait/pause",
        "KV used+rsv/all",
        "cached",
        "tok/s",
        "done/canc/fail",
    ])
    .style(Style::new().bold());
    Table::new(
        rows,
        [
            Constraint::Min(10),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(14),
            Constraint::Length(22),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(14),
        ],
    )
    .header(head)
    .block(Block::bordered().title(" Models "))
}

fn requests_table(models: &[ModelSnap]) -> Table<'_> {
    let mut rows = Vec::new();
    for m in models {
        for r in &m.requests {
            let prompt = if r.prompt_tokens > 0 {
                r.prompt_computed as f64 / r.prompt_tokens as f64
            } else {
                1.0
            };
            rows.push(Row::new(vec![
                Cell::from(r.id.clone()),
                Cell::from(m.model.clone()),
                Cell::from(Span::styled(r.state.clone(), state_style(&r.state))),
                Cell::from(format!("{}/{}", r.prompt_computed, r.prompt_tokens)),
                Cell::from(bar(prompt, 10)),
                Cell::from(r.generated.to_string()),
                Cell::from(secs(r.age_ms)),
            ]));
        }
    }
    let n = rows.len();
    let head = Row::new(vec![
        "id",
        "model",
        "state",
        "prompt",
        "prefill",
        "generated",
        "age",
    ])
    .style(Style::new().bold());
    let title = if n == 0 {
        " Requests: none running ".to_string()
    } else {
        format!(" Requests: {n} ")
    };
    Table::new(
        rows,
        [
            Constraint::Min(16),
            Constraint::Length(12),
            Constraint::Length(10),
            Constraint::Length(11),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(8),
        ],
    )
    .header(head)
    .block(Block::bordered().title(title))
}

fn state_style(s: &str) -> Style {
    match s {
        "queued" => Style::new().fg(Color::Yellow),
        "prefilling" => Style::new().fg(Color::Magenta),
        "decoding" => Style::new().fg(Color::Green),
        "paused" => Style::new().fg(Color::Red),
        _ => Style::new().dim(),
    }
}

fn ledger(m: &ModelSnap, width: u16) -> Paragraph<'static> {
    let get = |k: &str| m.ledger.get(k).and_then(|v| v.as_u64());
    let rss = get("rss").unwrap_or(0);
    let bar_w = (width as usize)
        .saturating_sub(2 + 16 + 11 + 1)
        .clamp(4, 30);
    let mut lines: Vec<Line> = TERMS
        .iter()
        .filter_map(|(k, name)| {
            let v = get(k)?;
            (v > 0 || *k == "weights").then(|| {
                Line::from(vec![
                    Span::raw(format!("{name:<16}")),
                    Span::raw(format!("{:>10} ", bytes(v))),
                    Span::styled(bar(frac(v, rss), bar_w), Style::new().fg(Color::Blue)),
                ])
            })
        })
        .take(9)
        .collect();
    let mut total = format!("rss {}", bytes(rss));
    if let Some(b) = get("budget") {
        total.push_str(&format!(" · budget {}", bytes(b)));
    }
    if let Some(p) = m.ledger.get("placement").and_then(|v| v.as_str()) {
        total.push_str(&format!(" · {p}"));
    }
    lines.push(Line::styled(total, Style::new().bold()));
    Paragraph::new(lines).block(Block::bordered().title(format!(" Ledger: {} ", m.model)))
}

fn steps(f: &mut Frame, b: &Board, m: &ModelSnap, area: Rect) {
    let block = Block::bordered().title(format!(" Steps: {} ", m.model));
    let inner = block.inner(area);
    f.render_widget(block, area);
    let [l1, s1, l2, s2, sum, cancel] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(inner);
    let w = inner.width as usize;
    let recent: Vec<_> = b
        .steps
        .get(&m.model)
        .map(|q| q.iter().skip(q.len().saturating_sub(w)).collect())
        .unwrap_or_default();
    let ms: Vec<u64> = recent
        .iter()
        .map(|s| (s.ms * 10.0).round() as u64)
        .collect();
    let toks: Vec<u64> = recent.iter().map(|s| s.decode + s.prompt).collect();
    let max_ms = recent.iter().map(|s| s.ms).fold(0.0, f64::max);
    let label = format!(
        "step time, last {} steps (max {})",
        recent.len(),
        secs(max_ms)
    );
    f.render_widget(Paragraph::new(label).dim(), l1);
    f.render_widget(
        Sparkline::default()
            .data(&ms)
            .style(Style::new().fg(Color::Blue)),
        s1,
    );
    let max_t = toks.iter().copied().max().unwrap_or(0);
    f.render_widget(
        Paragraph::new(format!("tokens per step (max {max_t})")).dim(),
        l2,
    );
    f.render_widget(
        Sparkline::default()
            .data(&toks)
            .style(Style::new().fg(Color::Yellow)),
        s2,
    );
    f.render_widget(Paragraph::new(step_summary(&recent)), sum);
    let last = b.cancels.get(&m.model).and_then(|q| q.back());
    let c = match last {
        Some(c) => format!(
            "last cancel: {} ({}) in {}",
            c.id,
            c.state,
            secs(c.latency_ms)
        ),
        None => "no cancellation seen".into(),
    };
    f.render_widget(Paragraph::new(c).dim(), cancel);
}

fn step_summary(recent: &[&super::feed::Step]) -> String {
    if recent.is_empty() {
        return "no step yet".into();
    }
    let mut ms: Vec<f64> = recent.iter().map(|s| s.ms).collect();
    ms.sort_by(f64::total_cmp);
    let p50 = ms[ms.len() / 2];
    let n = recent.len() as f64;
    let dec = recent.iter().map(|s| s.decode).sum::<u64>() as f64 / n;
    let pr = recent.iter().map(|s| s.prompt).sum::<u64>() as f64 / n;
    format!(
        "p50 {} · decode {dec:.1}/step · prompt {pr:.1}/step",
        secs(p50)
    )
}

fn pct(a: u64, b: u64) -> f64 {
    frac(a, b) * 100.0
}

fn frac(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        (a as f64 / b as f64).clamp(0.0, 1.0)
    }
}

/// A bar of `w` cells, `f` of them full.
pub(crate) fn bar(f: f64, w: usize) -> String {
    let full = ((f.clamp(0.0, 1.0) * w as f64).round() as usize).min(w);
    format!("{}{}", "█".repeat(full), "·".repeat(w - full))
}

pub(crate) fn bytes(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    match i {
        0 => format!("{n} B"),
        _ if v >= 100.0 => format!("{v:.0} {}", U[i]),
        _ if v >= 10.0 => format!("{v:.1} {}", U[i]),
        _ => format!("{v:.2} {}", U[i]),
    }
}

/// Milliseconds, as the dashboard writes them.
pub(crate) fn secs(ms: f64) -> String {
    let s = ms / 1e3;
    if !s.is_finite() {
        "–".into()
    } else if s < 1.0 {
        format!("{ms:.*} ms", if ms < 10.0 { 1 } else { 0 })
    } else if s < 60.0 {
        format!("{s:.*} s", if s < 10.0 { 2 } else { 1 })
    } else {
        format!("{}m {:.0}s", (s / 60.0).floor(), s % 60.0)
    }
}

/// The frame as plain text: `w` × `h` cells, trailing spaces cut.
pub(crate) fn text(b: &Board, w: u16, h: u16) -> anyhow::Result<String> {
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h))?;
    t.draw(|f| draw(f, b))?;
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let line: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::feed::tests::sample;
    use super::*;

    #[test]
    fn a_frame_from_a_snapshot() {
        let mut b = Board::new("http://127.0.0.1:8080");
        b.absorb(sample(1000.0, 10, &[(1, 5.0), (2, 12.0)]));
        b.absorb(sample(1500.0, 30, &[(3, 8.0)]));
        let t = text(&b, 110, 34).unwrap();
        for want in [
            "steward top",
            "● live",
            "Models",
            "smol",
            "1/4",
            "57+100/4096 4%",
            "Requests: 1",
            "term-check-1",
            "decoding",
            "40/40",
            "██████████",
            "1.52 s",
            "Ledger: smol",
            "weights",
            "100 MiB",
            "rss 238 MiB",
            "Steps: smol",
            "last 3 steps (max 12 ms)",
            "tokens per step (max 8)",
            "last cancel: old (decoding) in 3.5 ms",
        ] {
            assert!(t.contains(want), "{want:?} not in the frame:\n{t}");
        }
        // The selected model is marked; Tab with one model stays on it.
        assert!(t.contains("▸ smol"), "{t}");
        b.select_next();
        assert_eq!(b.selected, 0);
    }

    #[test]
    fn a_frame_before_any_snapshot() {
        let b = Board::new("http://h:1");
        let t = text(&b, 80, 24).unwrap();
        assert!(t.contains("connecting"), "{t}");
        assert!(t.contains("Requests: none running"), "{t}");
    }

    #[test]
    fn numbers() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(105_000_000), "100 MiB");
        assert_eq!(bytes(1_750_000), "1.67 MiB");
        assert_eq!(secs(3.5), "3.5 ms");
        assert_eq!(secs(1520.0), "1.52 s");
        assert_eq!(secs(125_000.0), "2m 5s");
        assert_eq!(bar(0.5, 4), "██··");
        assert_eq!(bar(2.0, 3), "███");
    }
}
