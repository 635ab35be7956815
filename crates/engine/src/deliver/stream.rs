//! The per-request outbox: events from the execution owner to one client.
//!
//! Owns: the receiving end of a bounded channel. Invariants: the owner only
//! ever `try_send`s into it (never blocks on a client); when the channel is
//! full, text deltas are coalesced in the sequence until there is room; the
//! last event of every request is exactly one `Done` or `Error`. Dropping the
//! [`RequestStream`] closes the channel, which the owner treats as a
//! cancellation at its next step.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// End-of-generation token or a stop string.
    Stop,
    /// `max_tokens` or the context limit.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// Milliseconds since arrival for each lifecycle point.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timings {
    pub tokenized_ms: f64,
    pub admitted_ms: f64,
    pub prefill_done_ms: f64,
    pub first_token_ms: f64,
    pub retired_ms: f64,
}

/// Log-probability of a token under the model's raw distribution (log
/// softmax of the logits, before penalties and temperature), with the most
/// likely alternatives when asked.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: crate::runtime::TokenId,
    pub logprob: f32,
    pub top: Vec<(crate::runtime::TokenId, f32)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub reason: FinishReason,
    /// The stop string that ended the output (`reason` is `Stop`).
    pub stop_sequence: Option<String>,
    pub prompt_tokens: u32,
    /// Prompt tokens whose state came from the prefix cache.
    pub cached_tokens: u32,
    /// Prompt tokens this request newly pinned (`GenerateRequest::pin`;
    /// 0 when a pin already held them, or the pin budget had no room):
    /// Anthropic's `cache_creation_input_tokens`.
    pub pinned_tokens: u32,
    pub completion_tokens: u32,
    /// Every sampled token, the end-of-generation token included.
    pub output_tokens: Vec<crate::runtime::TokenId>,
    /// With `prompt_logprobs`: entry i scores prompt token i + 1.
    pub prompt_logprobs: Option<Vec<TokenLogprob>>,
    pub timings: Timings,
    /// Owner-thread time spent in the grammar constraint, milliseconds
    /// (0 without one).
    pub constraint_ms: f64,
    /// Tokens were sampled on the device (greedy argmax in the step's
    /// graph) rather than from host logits.
    pub device_sampled: bool,
    /// Speculative decoding: tokens drafted, and how many of them were
    /// accepted (0, 0 without speculation).
    pub draft_tokens: u64,
    pub draft_accepted: u64,
    /// Steps the owner ran from when the request reached it to its first
    /// token, that step included (0: no token). A count, not a time: tests
    /// of who goes first assert on it.
    pub wait_steps: u64,
    /// Times it was preempted (moved off its slot and resumed).
    pub preemptions: u32,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum GenerationError {
    #[error("the model runtime failed on this request's step: {0}")]
    Runtime(String),
    #[error("the server is shutting down")]
    Shutdown,
    #[error("the request waited {0:.1} s in the queue without getting a slot")]
    QueueTimeout(f64),
    #[error("the request exceeded its deadline of {0:.1} s")]
    DeadlineExceeded(f64),
    #[error("the client read too slowly: {0} tokens waited undelivered; the request was ended")]
    SlowReader(u32),
    #[error("the request was cancelled")]
    Cancelled,
    #[error("constrained decoding failed: {0}")]
    Constraint(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The request got a slot and its reservation (sent once, first).
    Admitted,
    /// New text, and how many tokens produced it (0 is possible: a token may
    /// complete nothing yet; several tokens may be coalesced into one event).
    Text {
        text: String,
        tokens: u32,
        /// One entry per token covered, when the request asked for logprobs.
        logprobs: Vec<TokenLogprob>,
    },
    Done(Finished),
    Error(GenerationError),
}

/// The client's end of one request.
#[derive(Debug)]
pub struct RequestStream {
    pub id: String,
    rx: mpsc::Receiver<Event>,
    note: Arc<CancelNote>,
    ended: bool,
}

/// When the transport noticed that a request's client left: the start of
/// its cancellation latency. Written once, by the `RequestStream`'s drop.
#[derive(Debug, Default)]
pub struct CancelNote(OnceLock<Instant>);

impl CancelNote {
    pub fn mark(&self) {
        let _ = self.0.set(Instant::now());
    }
    pub fn noticed(&self) -> Option<Instant> {
        self.0.get().copied()
    }
}

impl RequestStream {
    pub(crate) fn new(id: String, rx: mpsc::Receiver<Event>, note: Arc<CancelNote>) -> Self {
        RequestStream {
            id,
            rx,
            note,
            ended: false,
        }
    }

    /// Next event; `None` only if the engine vanished without a terminal
    /// event (it never does on purpose).
    /// A lost runtime (see [`crate::fatal`]) ends it with an error.
    pub async fn next(&mut self) -> Option<Event> {
        if self.ended {
            return None;
        }
        let ev = tokio::select! {
            biased;
            ev = self.rx.recv() => ev,
            why = crate::fatal::lost() => Some(Event::Error(GenerationError::Runtime(format!(
                "the model runtime was lost ({why}); the server is exiting"
            )))),
        };
        if matches!(ev, Some(Event::Done(_) | Event::Error(_)) | None) {
            self.ended = true;
        }
        ev
    }

    /// Drain the stream into (text, finish) for a non-streaming answer.
    pub async fn collect(mut self) -> Result<(String, Finished), GenerationError> {
        let mut text = String::new();
        while let Some(ev) = self.next().await {
            match ev {
                Event::Admitted => {}
                Event::Text { text: t, .. } => text.push_str(&t),
                Event::Done(f) => return Ok((text, f)),
                Event::Error(e) => return Err(e),
            }
        }
        Err(GenerationError::Shutdown)
    }
}

impl Drop for RequestStream {
    /// Dropping an unfinished stream is the cancellation: note the moment.
    /// The channel closes with it, and the owner retires the request at its
    /// next step.
    fn drop(&mut self) {
        if !self.ended {
            self.note.mark();
        }
    }
}
