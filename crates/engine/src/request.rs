//! A generation request after prepare (`GenerateRequest`), what a request
//! may ask of speculation, and why a submission can be refused.

use std::sync::Arc;
use std::time::Instant;

use crate::owner::spec::speculate::SpecMode;
use crate::prepare::constraint;
use crate::runtime::TokenId;
use crate::sample::sampler::SamplingParams;

/// Most tokens a request may draft per step.
pub const MAX_DRAFT: usize = 32;

/// A request's speculative decoding, where it asked (each part `None`:
/// the server's default).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpecRequest {
    pub mode: Option<SpecMode>,
    pub max_draft: Option<usize>,
}

/// A generation request after prepare: token IDs and settings, validated.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub id: String,
    pub prompt: Vec<TokenId>,
    pub max_tokens: u32,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// Never end on an end-of-generation token (they are masked out).
    pub ignore_eos: bool,
    /// Return each sampled token's logprob with this many alternatives.
    pub logprobs: Option<usize>,
    /// Score the prompt: the logprob of every prompt token after the first
    /// (with `logprobs` alternatives). `max_tokens` may then be 0.
    pub prompt_logprobs: bool,
    pub arrival: Instant,
    pub tokenized: Instant,
    /// End the request (whatever its state) at this instant.
    pub deadline: Option<Instant>,
    /// Grammar the output must match (compiled by
    /// `Preparer::constraint`); `ignore_eos` does not apply under one.
    pub constraint: Option<constraint::Constraint>,
    /// Control tokens emitted as their text (`Preparer::markers`: the chat
    /// format's markers, read by the server's parser); others emit nothing.
    pub markers: Option<Arc<Vec<bool>>>,
    /// LoRA adapters (id from `EngineHandle::adapters`, scale) the request
    /// runs under; empty: the base model. Zero scales are dropped.
    pub adapters: Vec<(usize, f32)>,
    /// Speculative decoding (`None`: the engine's default).
    pub speculative: Option<SpecRequest>,
    /// The prompt's media spans, in order (their prompt positions hold
    /// `placeholder` ids).
    pub media: Vec<MediaSpan>,
    /// Whom the request runs for and how it ranks.
    pub tenancy: Tenancy,
    /// Keep this prompt's state pinned in host memory for a while
    /// (Anthropic's `cache_control`, `owner/pins.rs`).
    pub pin: Option<Pin>,
    /// Who receives the request's timeline at its end (the server's access
    /// log and traces; `deliver/timeline.rs`). Shared by every choice.
    pub timeline: Option<Arc<dyn crate::deliver::timeline::TimelineSink>>,
}

/// A pinned prefix: the prompt's state (its first `tokens`, or all of it)
/// kept in host memory until `ttl` after its last use, within the pin
/// budget (`--pin-budget-mb`); a later prompt starting with it restores it
/// instead of computing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin {
    pub ttl: std::time::Duration,
    /// Prompt tokens the pin covers (None: the whole prompt).
    pub tokens: Option<usize>,
}

/// Whom a request runs for and how it ranks against others: the API key's
/// name and weight (`--fair-share`), its priority (`--scheduling-policy
/// priority`), and whether it is a batch line (background: admitted only
/// when no interactive request waits, preempted by any).
#[derive(Debug, Clone, PartialEq)]
pub struct Tenancy {
    /// The API key's name (fair share's unit); empty: anonymous.
    pub tenant: Arc<str>,
    /// Fair-share weight (> 0; 1 by default).
    pub weight: f64,
    /// Lower runs first (vLLM's field); 0 by default.
    pub priority: i32,
    /// A batch line: runs only on capacity interactive requests leave.
    pub background: bool,
}

impl Default for Tenancy {
    fn default() -> Self {
        Tenancy {
            tenant: Arc::from(""),
            weight: 1.0,
            priority: 0,
            background: false,
        }
    }
}

/// A span of the prompt that is media: embedding rows from the projector,
/// not tokens. Its prompt positions hold `placeholder(hash, i)`, so the
/// prefix cache, the host tier and KV events key the span by its media.
#[derive(Debug, Clone)]
pub struct MediaSpan {
    /// First prompt position, and rows.
    pub start: usize,
    pub len: usize,
    /// SHA-256 of the media's encoded bytes: its identity.
    pub hash: [u8; 32],
    /// `len` rows of the model's input embedding width.
    pub embd: Arc<[f32]>,
    /// The rows attend both ways (decoded whole, causal attention off).
    pub non_causal: bool,
}

/// The id at row `i` of a media span: negative (never a vocabulary id),
/// from the media's hash and the row, so two different pictures part at
/// their first row (but for a 2^-31 chance, which `reuse_bound` makes
/// harmless: a match never ends inside a span).
pub fn placeholder(hash: &[u8; 32], i: usize) -> TokenId {
    let mut h = u64::from_le_bytes(hash[..8].try_into().unwrap_or_default());
    h ^= (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h = (h ^ (h >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 29;
    -1 - (h & 0x7FFF_FFFE) as TokenId
}

/// The longest reuse of `len` prompt tokens that does not end inside a
/// media span (a cached prefix holds a whole picture or stops before it).
pub fn reuse_bound(len: usize, media: &[MediaSpan]) -> usize {
    media
        .iter()
        .find(|m| m.start < len && len < m.start + m.len)
        .map_or(len, |m| m.start)
}

impl GenerateRequest {
    /// A request with every setting at its default: sampled as
    /// `SamplingParams::default()`, no stop strings, no logprobs, no
    /// deadline, no grammar, the base model, the engine's speculation;
    /// arrival and tokenization now. Set the rest with struct update syntax.
    pub fn new(id: impl Into<String>, prompt: Vec<TokenId>, max_tokens: u32) -> Self {
        let now = Instant::now();
        GenerateRequest {
            id: id.into(),
            prompt,
            max_tokens,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            prompt_logprobs: false,
            arrival: now,
            tokenized: now,
            deadline: None,
            constraint: None,
            markers: None,
            adapters: Vec::new(),
            speculative: None,
            media: Vec::new(),
            tenancy: Tenancy::default(),
            pin: None,
            timeline: None,
        }
    }

    /// The same, sampled greedily (temperature 0).
    pub fn greedy(id: impl Into<String>, prompt: Vec<TokenId>, max_tokens: u32) -> Self {
        GenerateRequest {
            sampling: SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
            ..Self::new(id, prompt, max_tokens)
        }
    }
}

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SubmitError {
    #[error("the server is at capacity: {0} requests are already waiting")]
    QueueFull(usize),
    #[error("the engine is not running")]
    Stopped,
    #[error("the engine is not ready yet")]
    NotReady,
    #[error("the server is draining for shutdown and admits no new requests")]
    Draining,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_never_ends_inside_a_span() {
        let span = |start, len| MediaSpan {
            start,
            len,
            hash: [0; 32],
            embd: Arc::from(Vec::new()),
            non_causal: false,
        };
        let m = [span(4, 3), span(10, 2)];
        let bounds: Vec<usize> = (0..14).map(|l| reuse_bound(l, &m)).collect();
        assert_eq!(bounds, [0, 1, 2, 3, 4, 4, 4, 7, 8, 9, 10, 10, 12, 13]);
        assert!(placeholder(&[9; 32], 0) < 0 && placeholder(&[9; 32], 1 << 20) < 0);
    }
}
