//! `steward top URL`: the live engine view, full screen. The feed task
//! (`feed::run`) and a key-reading thread send into one channel; the loop
//! redraws on each message and every 250 ms (ages, a stalled feed). The
//! terminal is restored on return, on error and on panic (ratatui's
//! `init` hook).

use std::io::IsTerminal;
use std::time::Duration;

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use tokio::sync::mpsc;

use super::feed::{self, Board, Msg};
use super::{runtime, view, Endpoint, TopArgs};

pub(crate) fn top(a: TopArgs) -> anyhow::Result<()> {
    if !(100..=5000).contains(&a.interval_ms) {
        anyhow::bail!("--interval-ms must be within 100..=5000");
    }
    let ep = Endpoint::new(&a.url, a.api_key)?;
    let rt = runtime()?;
    if a.once {
        return rt.block_on(once(ep));
    }
    if !std::io::stdout().is_terminal() {
        anyhow::bail!("steward top draws on a terminal; --once prints one frame as text");
    }
    rt.block_on(live(ep, a.interval_ms))
}

/// One frame as text: the terminal's size, else `COLUMNS` × `LINES`, else
/// 120 × 40.
async fn once(ep: Endpoint) -> anyhow::Result<()> {
    let snap = feed::first(&ep, Duration::from_secs(15)).await?;
    let mut b = Board::new(&ep.base);
    b.absorb(snap);
    let (w, h) = ratatui::crossterm::terminal::size()
        .ok()
        .filter(|_| std::io::stdout().is_terminal())
        .unwrap_or_else(|| (env_u16("COLUMNS", 120), env_u16("LINES", 40)));
    print!("{}", view::text(&b, w.max(60), h.max(24))?);
    Ok(())
}

fn env_u16(k: &str, d: u16) -> u16 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// Leaves raw mode and the alternate screen however `live` ends.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

async fn live(ep: Endpoint, interval_ms: u64) -> anyhow::Result<()> {
    let (tx, mut rx) = mpsc::channel(64);
    let feed = tokio::spawn(feed::run(ep.clone(), interval_ms, tx.clone()));
    let mut term = ratatui::try_init()?;
    let _restore = Restore;
    keys(tx);
    let mut board = Board::new(&ep.base);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let r = loop {
        if let Err(e) = term.draw(|f| view::draw(f, &board)) {
            break Err(e.into());
        }
        tokio::select! {
            m = rx.recv() => match m {
                Some(Msg::Snapshot(s)) => board.absorb(*s),
                Some(Msg::Link(l)) => board.link(l),
                Some(Msg::Key(k)) => {
                    let ctrl_c = k.code == KeyCode::Char('c')
                        && k.modifiers.contains(KeyModifiers::CONTROL);
                    match k.code {
                        _ if ctrl_c => break Ok(()),
                        KeyCode::Char('q') | KeyCode::Esc => break Ok(()),
                        KeyCode::Tab => board.select_next(),
                        _ => {}
                    }
                }
                Some(Msg::Resize) => {}
                None => break Ok(()),
            },
            _ = tick.tick() => {}
        }
    };
    feed.abort();
    r
}

/// Keys and resizes, read on a thread of their own (crossterm's reads
/// block); it ends when the loop is gone.
fn keys(tx: mpsc::Sender<Msg>) {
    std::thread::spawn(move || loop {
        if tx.is_closed() {
            return;
        }
        match event::poll(Duration::from_millis(200)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => return,
        }
        let m = match event::read() {
            Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => Msg::Key(k),
            Ok(Event::Resize(..)) => Msg::Resize,
            Ok(_) => continue,
            Err(_) => return,
        };
        if tx.blocking_send(m).is_err() {
            return;
        }
    });
}
