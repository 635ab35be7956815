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
