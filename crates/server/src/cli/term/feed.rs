//! `/dashboard/events` read and kept: the snapshot's shape (the fields
//! `top` draws; every one defaulted, so a server with fewer still draws),
//! the board that accumulates steps and cancellations across ticks, and
//! the feed task that reconnects with backoff when the stream drops.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::sse::SseParser;
use super::{error_message, Endpoint};

/// Steps kept per model for the timeline (the feed sends only new ones).
pub(crate) const STEP_WINDOW: usize = 240;
/// Cancellations kept per model.
const CANCEL_WINDOW: usize = 20;
/// No byte for this long (the server pings every 15 s): the feed is gone.
const SILENCE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Snapshot {
    pub(crate) t_ms: f64,
    pub(crate) connections_open: u64,
    pub(crate) models: Vec<ModelSnap>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ModelSnap {
    pub(crate) model: String,
    pub(crate) ready: bool,
    pub(crate) draining: bool,
    pub(crate) slots_total: u64,
    pub(crate) running: u64,
    pub(crate) prefilling: u64,
    pub(crate) waiting: u64,
    pub(crate) paused: u64,
    pub(crate) requests: Vec<LiveReq>,
    pub(crate) kv: Kv,
    /// The memory ledger term by term (bytes), `rss`, `placement`, ...
    pub(crate) ledger: Map<String, Value>,
    pub(crate) counters: Counters,
    pub(crate) steps: Vec<Step>,
    pub(crate) cancellations: Vec<Cancel>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct LiveReq {
    pub(crate) id: String,
    pub(crate) state: String,
    pub(crate) prompt_tokens: u64,
    pub(crate) prompt_computed: u64,
    pub(crate) generated: u64,
    pub(crate) age_ms: f64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Kv {
    pub(crate) cells_used: u64,
    pub(crate) cells_reserved: u64,
    pub(crate) cells_cached: u64,
    pub(crate) cells_total: u64,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Counters {
    pub(crate) steps: u64,
    pub(crate) prompt_tokens: u64,
    pub(crate) generated_tokens: u64,
    pub(crate) finished: u64,
    pub(crate) cancelled: u64,
    pub(crate) failed: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Step {
    pub(crate) n: u64,
    pub(crate) decode: u64,
    pub(crate) prompt: u64,
    pub(crate) ms: f64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Cancel {
    pub(crate) n: u64,
    pub(crate) id: String,
    pub(crate) state: String,
    pub(crate) latency_ms: f64,
}

/// The feed's state as the header shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Link {
    Connecting,
    Live,
    Down(String),
}

/// What reaches the drawing loop.
pub(crate) enum Msg {
    Snapshot(Box<Snapshot>),
    Link(Link),
    Key(ratatui::crossterm::event::KeyEvent),
    Resize,
}

/// Everything `view` draws: the last snapshot and what accumulates.
pub(crate) struct Board {
    pub(crate) url: String,
    pub(crate) snap: Option<Snapshot>,
    pub(crate) link: Link,
    pub(crate) at: Option<Instant>,
    /// Per model: recent steps, recent cancellations, the last step seen.
    pub(crate) steps: HashMap<String, VecDeque<Step>>,
    pub(crate) cancels: HashMap<String, VecDeque<Cancel>>,
    seen: HashMap<String, (u64, u64)>,
    /// Per model: the counters ~5 s ago, for rates.
    rates: HashMap<String, VecDeque<(f64, Counters)>>,
    /// The model whose ledger and steps are shown (Tab moves on).
    pub(crate) selected: usize,
}

impl Board {
    pub(crate) fn new(url: &str) -> Board {
        Board {
            url: url.to_string(),
            snap: None,
            link: Link::Connecting,
            at: None,
            steps: HashMap::new(),
            cancels: HashMap::new(),
            seen: HashMap::new(),
            rates: HashMap::new(),
            selected: 0,
        }
    }

    /// A tick: kept, and its new steps and cancellations appended.
    pub(crate) fn absorb(&mut self, s: Snapshot) {
        for m in &s.models {
            let (last_step, last_cancel) = self.seen.get(&m.model).copied().unwrap_or((0, 0));
            let steps = self.steps.entry(m.model.clone()).or_default();
            for st in m.steps.iter().filter(|st| st.n > last_step) {
                push_bounded(steps, STEP_WINDOW, st.clone());
            }
            let cancels = self.cancels.entry(m.model.clone()).or_default();
            for c in m.cancellations.iter().filter(|c| c.n > last_cancel) {
                push_bounded(cancels, CANCEL_WINDOW, c.clone());
            }
            let seen = (
                steps.back().map_or(last_step, |st| st.n.max(last_step)),
                cancels.back().map_or(last_cancel, |c| c.n.max(last_cancel)),
            );
            self.seen.insert(m.model.clone(), seen);
            let r = self.rates.entry(m.model.clone()).or_default();
            r.push_back((s.t_ms, m.counters));
            while r.len() > 2 && s.t_ms - r[0].0 > 5000.0 {
                r.pop_front();
            }
        }
        let n = s.models.len().max(1);
        self.selected %= n;
        self.snap = Some(s);
        self.at = Some(Instant::now());
        self.link = Link::Live;
    }

    /// A new connection: its first snapshot brings the server's recent
    /// steps again (numbered anew if the server restarted).
    pub(crate) fn link(&mut self, l: Link) {
        if l == Link::Connecting {
            self.steps.clear();
            self.cancels.clear();
            self.seen.clear();
            self.rates.clear();
        }
        self.link = l;
    }

    /// Generated tokens per second over the last ~5 s.
    pub(crate) fn tokens_per_s(&self, model: &str) -> Option<f64> {
        let r = self.rates.get(model)?;
        let (a, b) = (r.front()?, r.back()?);
        let dt = (b.0 - a.0) / 1e3;
        (dt > 0.2).then(|| b.1.generated_tokens.saturating_sub(a.1.generated_tokens) as f64 / dt)
    }

    pub(crate) fn select_next(&mut self) {
        let n = self.snap.as_ref().map_or(0, |s| s.models.len());
        if n > 0 {
            self.selected = (self.selected + 1) % n;
        }
    }
}

fn push_bounded<T>(q: &mut VecDeque<T>, cap: usize, v: T) {
    if q.len() >= cap {
        q.pop_front();
    }
    q.push_back(v);
}

/// Read the feed until the receiver is gone; reconnect when it drops
/// (1 s, doubling to 8 s; reset by a connection that answered).
pub(crate) async fn run(ep: Endpoint, interval_ms: u64, tx: mpsc::Sender<Msg>) {
    let mut backoff = Duration::from_secs(1);
    loop {
        if tx.send(Msg::Link(Link::Connecting)).await.is_err() {
            return;
        }
        let why = match connect(&ep, interval_ms, &tx, &mut backoff).await {
            Ok(()) => "the feed closed".to_string(),
            Err(e) => root_cause(e.as_ref()),
        };
        let down = Link::Down(format!("retrying in {} s: {why}", backoff.as_secs()));
        if tx.send(Msg::Link(down)).await.is_err() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(8));
    }
}

/// The innermost error's words ("Connection refused (os error 111)"),
/// short enough for the header.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut e = e;
    while let Some(s) = e.source() {
        e = s;
    }
    e.to_string()
}

async fn connect(
    ep: &Endpoint,
    interval_ms: u64,
    tx: &mpsc::Sender<Msg>,
    backoff: &mut Duration,
) -> anyhow::Result<()> {
    let path = format!("/dashboard/events?interval_ms={interval_ms}");
    let mut resp = ep.get(&path).send().await?;
    if !resp.status().is_success() {
        let st = resp.status();
        let text = resp.text().await.unwrap_or_default();
        anyhow::bail!("GET /dashboard/events: {}", error_message(st, &text));
    }
    *backoff = Duration::from_secs(1);
    let mut p = SseParser::default();
    loop {
        let chunk = match tokio::time::timeout(SILENCE, resp.chunk()).await {
            Err(_) => anyhow::bail!("no byte for {} s", SILENCE.as_secs()),
            Ok(c) => c?,
        };
        let Some(chunk) = chunk else {
            return Ok(());
        };
        for ev in p.push(&chunk) {
            if ev.event != "snapshot" {
                continue;
            }
            let s: Snapshot = serde_json::from_str(&ev.data)?;
            if tx.send(Msg::Snapshot(Box::new(s))).await.is_err() {
                return Ok(());
            }
        }
    }
}

/// The first snapshot (for `--once`), within `wait`.
pub(crate) async fn first(ep: &Endpoint, wait: Duration) -> anyhow::Result<Snapshot> {
    let (tx, mut rx) = mpsc::channel(4);
    let mut backoff = Duration::from_secs(1);
    let got = tokio::time::timeout(wait, async {
        tokio::select! {
            r = connect(ep, 100, &tx, &mut backoff) => {
                r?;
                anyhow::bail!("the feed closed before its first event")
            }
            m = rx.recv() => match m {
                Some(Msg::Snapshot(s)) => Ok(*s),
                _ => anyhow::bail!("the feed closed before its first event"),
            },
        }
    })
    .await;
    match got {
        Ok(r) => r,
        Err(_) => anyhow::bail!("no snapshot within {} s", wait.as_secs()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A snapshot as `ops/dashboard.rs` writes it (trimmed).
    pub(crate) fn sample(t_ms: f64, generated: u64, steps: &[(u64, f64)]) -> Snapshot {
        let steps: Vec<Value> = steps
            .iter()
            .map(|&(n, ms)| serde_json::json!({"n": n, "at_ms": t_ms, "decode": 1, "prompt": 7, "chunks": 1, "ms": ms}))
            .collect();
        let v = serde_json::json!({
            "t_ms": t_ms, "connections_open": 3,
            "response_store": {"bytes": 0, "capacity_bytes": 1, "entries": 0},
            "models": [{
                "model": "smol", "ready": true, "draining": false, "memory_kind": "kv",
                "slots_total": 4, "running": 1, "prefilling": 0, "waiting": 0, "paused": 0,
                "prompt_budget": 256,
                "requests": [{"id": "term-check-1", "state": "decoding", "prompt_tokens": 40,
                              "prompt_computed": 40, "generated": 17, "age_ms": 1520.0}],
                "kv": {"cells_used": 57, "cells_reserved": 100, "cells_cached": 10,
                       "cells_total": 4096, "bytes_per_cell": 30720},
                "ledger": {"weights": 105_000_000u64, "compute_buffers": 12_000_000u64,
                           "live_state": 1_750_000u64, "kv_free": 100_000_000u64,
                           "other": 30_000_000u64, "rss": 250_000_000u64,
                           "placement": "host", "sum_of_terms": 250_000_000u64},
                "counters": {"steps": 99, "prompt_tokens": 40, "generated_tokens": generated,
                             "finished": 2, "cancelled": 1, "failed": 0},
                "steps": steps,
                "cancellations": [{"n": 1, "id": "old", "state": "decoding",
                                   "latency_ms": 3.5, "at_ms": t_ms}],
                "latency": {}
            }]
        });
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn steps_accumulate_without_repeats() {
        let mut b = Board::new("http://x");
        b.absorb(sample(1000.0, 10, &[(1, 5.0), (2, 6.0)]));
        // The server sends only new steps; a repeat is not counted twice.
        b.absorb(sample(1500.0, 20, &[(2, 6.0), (3, 7.0)]));
        let n: Vec<u64> = b.steps["smol"].iter().map(|s| s.n).collect();
        assert_eq!(n, vec![1, 2, 3]);
        assert_eq!(b.cancels["smol"].len(), 1);
        assert_eq!(b.tokens_per_s("smol"), Some(20.0));
        assert_eq!(b.link, Link::Live);
        // A reconnection (a restarted server numbers its steps anew).
        b.link(Link::Connecting);
        b.absorb(sample(9000.0, 5, &[(1, 4.0)]));
        assert_eq!(b.steps["smol"].len(), 1);
    }

    #[test]
    fn steps_window_is_bounded() {
        let mut b = Board::new("http://x");
        let steps: Vec<(u64, f64)> = (1..=300).map(|n| (n, 1.0)).collect();
        b.absorb(sample(1000.0, 0, &steps));
        assert_eq!(b.steps["smol"].len(), STEP_WINDOW);
        assert_eq!(b.steps["smol"].back().unwrap().n, 300);
    }

    #[test]
    fn unknown_and_missing_fields_are_fine() {
        let s: Snapshot = serde_json::from_str(r#"{"models":[{"model":"m","new":1}]}"#).unwrap();
        assert_eq!(s.models[0].model, "m");
        assert!(s.models[0].requests.is_empty());
    }
}
