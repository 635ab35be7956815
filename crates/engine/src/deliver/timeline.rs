//! ⑤ deliver — a request's life as the owner saw it, handed at its end to
//! whoever asked (`GenerateRequest::timeline`): the server's access log and
//! its traces. The owner only fills plain fields (and, when the sink asks,
//! one entry per prefill chunk's step, bounded) and calls `put` once, at
//! the sequence's end; the sink must never block.

use std::sync::Arc;
use std::time::Instant;

/// At most this many prefill steps are kept apart; later ones are merged
/// into the last (a 64k-token prompt in 512-token chunks is 128 steps).
pub const MAX_CHUNKS: usize = 64;

/// Who receives a request's timeline.
pub trait TimelineSink: Send + Sync + std::fmt::Debug {
    /// Whether to record each prefill chunk's step (traces want them; the
    /// access log does not).
    fn chunks(&self) -> bool;
    /// The sequence ended. Called once per sequence (once per choice), on
    /// the owner thread: it must not block.
    fn put(&self, t: Timeline);
}

/// How a sequence ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum TimelineEnd {
    /// It finished: its finish reason's name (`stop`, `length`, ...).
    Finished(&'static str),
    /// Its client left (or it was cancelled by id).
    #[default]
    Cancelled,
    /// It ended with an error (deadline, slow reader, runtime, ...).
    Failed(String),
}

/// One prefill chunk's step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChunkStep {
    /// The step's build and its end (outputs emitted).
    pub start: Instant,
    pub end: Instant,
    /// This sequence's prompt tokens in the step (several merged steps:
    /// their sum).
    pub tokens: u32,
    /// The owner's step number (the first, for merged steps).
    pub step: u64,
    /// Steps merged into this entry (1: one step).
    pub steps: u32,
}

/// One sequence's timeline; instants are the owner's.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// The sequence id (`{request}-{i}` for choice i when `n` > 1).
    pub id: String,
    /// The admission pass that admitted it began (the queue wait ends).
    pub admit_began: Option<Instant>,
    /// Admitted: a slot, a reservation, any reuse restored.
    pub admitted: Option<Instant>,
    pub prefill_done: Option<Instant>,
    pub first_token: Option<Instant>,
    /// When the transport noticed the client left.
    pub cancel_noticed: Option<Instant>,
    pub retired: Option<Instant>,
    pub chunks: Vec<ChunkStep>,
    pub end: TimelineEnd,
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub completion_tokens: u32,
    pub preemptions: u32,
}

impl Timeline {
    /// Record a prefill chunk's step, merging past `MAX_CHUNKS`.
    pub fn push_chunk(&mut self, c: ChunkStep) {
        let full = self.chunks.len() >= MAX_CHUNKS;
        match self.chunks.last_mut() {
            Some(last) if full => {
                last.end = c.end;
                last.tokens += c.tokens;
                last.steps += c.steps;
            }
            _ => self.chunks.push(c),
        }
    }
}

/// A sequence's timeline in the making and where it goes.
#[derive(Debug)]
pub(crate) struct Trace {
    pub sink: Arc<dyn TimelineSink>,
    pub line: Timeline,
    pub chunks: bool,
}

impl Trace {
    pub fn new(sink: Arc<dyn TimelineSink>, id: &str) -> Self {
        Trace {
            chunks: sink.chunks(),
            sink,
            line: Timeline {
                id: id.to_string(),
                ..Timeline::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_past_the_bound_merge_into_the_last() {
        let t0 = Instant::now();
        let mut t = Timeline::default();
        for i in 0..(MAX_CHUNKS as u64 + 10) {
            t.push_chunk(ChunkStep {
                start: t0,
                end: t0 + std::time::Duration::from_millis(i),
                tokens: 2,
                step: i,
                steps: 1,
            });
        }
        assert_eq!(t.chunks.len(), MAX_CHUNKS);
        let last = t.chunks.last().unwrap();
        assert_eq!((last.tokens, last.steps), (22, 11));
        assert_eq!(t.chunks.iter().map(|c| c.tokens).sum::<u32>(), 2 * 74);
    }
}
