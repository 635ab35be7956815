//! One request's record: what the HTTP layer saw (route, model, key,
//! status, first text sent, the longest gap between texts) and every
//! choice's engine timeline (`steward_engine::Timeline`, put by the owner
//! at retirement). Shared by the handler, the reply stream and the
//! engine's sequences; when the last of them lets go, `Drop` hands the
//! whole record to the records task (a bounded channel: a full one drops
//! the record and counts it; nothing here ever waits).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use steward_engine::{Timeline, TimelineSink};
use tokio::sync::mpsc;

use super::context::TraceCtx;

/// What the HTTP layer knows of a request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    /// `POST /v1/chat/completions`, `POST /v1/messages`, ...
    pub route: &'static str,
    pub model: String,
    pub adapters: String,
    /// The API key's name (never the key).
    pub key: Option<Arc<str>>,
    pub priority: i32,
    pub stream: bool,
    /// Choices asked for (`n`).
    pub choices: u32,
    /// The HTTP status (a stream's is 200 once it starts).
    pub status: u16,
    /// The error's code, for a refusal or an error inside a stream.
    pub error: Option<&'static str>,
    /// Prepared: validated, rendered, tokenized (media encoded).
    pub tokenized: Option<Instant>,
    pub media: bool,
    pub prompt_tokens: u32,
    pub first_text: Option<Instant>,
    pub last_text: Option<Instant>,
    /// The longest gap between two texts sent.
    pub max_gap: Duration,
    /// Finish reasons as the API names them, one per choice.
    pub finish: Vec<String>,
}

/// A finished request: the record's parts, for the records task.
#[derive(Debug)]
pub(crate) struct Done {
    pub id: String,
    pub ctx: TraceCtx,
    pub head_sampled: bool,
    pub arrival: Instant,
    /// When the last holder let go: the reply sent and every choice
    /// retired.
    pub ended: Instant,
    pub seen: Seen,
    pub lines: Vec<Timeline>,
}

#[derive(Debug)]
pub(crate) struct Record {
    pub id: String,
    pub ctx: TraceCtx,
    pub head_sampled: bool,
    pub arrival: Instant,
    seen: Mutex<Seen>,
    lines: Mutex<Vec<Timeline>>,
    /// Record each prefill step (traces on).
    chunks: bool,
    tx: mpsc::Sender<Done>,
    dropped: Arc<AtomicU64>,
}

impl Record {
    pub(super) fn new(
        id: String,
        ctx: TraceCtx,
        head_sampled: bool,
        arrival: Instant,
        chunks: bool,
        tx: mpsc::Sender<Done>,
        dropped: Arc<AtomicU64>,
    ) -> Self {
        Record {
            id,
            ctx,
            head_sampled,
            arrival,
            seen: Mutex::default(),
            lines: Mutex::default(),
            chunks,
            tx,
            dropped,
        }
    }

    /// Update what the HTTP layer saw.
    pub fn note(&self, f: impl FnOnce(&mut Seen)) {
        f(&mut self.seen.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The trace id for a histogram's exemplar: only a head-sampled
    /// trace's (one that will exist at the collector).
    pub fn exemplar(&self) -> Option<[u8; 16]> {
        self.head_sampled.then_some(self.ctx.trace_id)
    }

    /// A text went to the client now.
    pub fn text_sent(&self) {
        let now = Instant::now();
        self.note(|s| {
            if let Some(prev) = s.last_text.replace(now) {
                s.max_gap = s.max_gap.max(now - prev);
            }
            s.first_text.get_or_insert(now);
        });
    }
}

impl TimelineSink for Record {
    fn chunks(&self) -> bool {
        self.chunks
    }

    fn put(&self, t: Timeline) {
        let mut l = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        // One per choice; `n` is bounded by the limits.
        if l.len() < 128 {
            l.push(t);
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let seen = std::mem::take(self.seen.get_mut().unwrap_or_else(|e| e.into_inner()));
        let lines = std::mem::take(self.lines.get_mut().unwrap_or_else(|e| e.into_inner()));
        let done = Done {
            id: std::mem::take(&mut self.id),
            ctx: self.ctx,
            head_sampled: self.head_sampled,
            arrival: self.arrival,
            ended: Instant::now(),
            seen,
            lines,
        };
        if self.tx.try_send(done).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}
