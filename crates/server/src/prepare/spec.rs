//! The checked request, stage ①'s result: `GenSpec` (the settings both
//! endpoints share), `PromptInput` (what the prompt is made from) and
//! `Api` (which endpoint's rules apply). A leaf: validation writes these,
//! limits, forcing, the handlers and the reply read them.

use steward_engine::chat::ChatPrompt;
use steward_engine::constraint::Grammar;
use steward_engine::SamplingParams;

use super::media::MediaPart;
use super::tools::ToolPlan;

/// Which endpoint's body a request came as (the dialects take `Chat`).
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Api {
    Chat,
    Completion,
}

/// Settings shared by both endpoints, checked.
#[derive(Debug, Clone)]
pub struct GenSpec {
    pub model: Option<String>,
    pub sampling: SamplingParams,
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub timings: bool,
    pub ignore_eos: bool,
    /// Requested total timeout, seconds.
    pub timeout_s: Option<f64>,
    /// Alternatives per token when logprobs were asked for.
    pub logprobs: Option<usize>,
    /// Completions `echo`: return (and, with logprobs, score) the prompt.
    pub echo: bool,
    /// Choices to generate (`n`), each its own sequence and RNG stream.
    pub n: u32,
    /// The output's grammar and the parameter it came from.
    pub grammar: Option<(Grammar, &'static str)>,
    /// Chat tools in play (`None`: none given or `tool_choice: "none"`).
    pub tools: Option<ToolPlan>,
    /// Chat: split reasoning out of the text (`reasoning_format` not `none`).
    pub reasoning: bool,
    /// Speculative decoding asked for (`None`: the server's default).
    pub speculative: Option<steward_engine::SpecRequest>,
    /// `priority` asked for (lower runs first; `None`: none given).
    pub priority: Option<i32>,
    /// Pin the prompt's state (`prepare::pin`: Anthropic `cache_control`,
    /// `prompt_cache_key`; `None`: no pin). Its `tokens` are set once the
    /// prompt is tokenized.
    pub pin: Option<steward_engine::Pin>,
    /// Chat messages the pin covers from the start (`None`: all of them).
    pub pin_messages: Option<usize>,
}

// One per request, moved a few times: boxing the chat would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum PromptInput {
    /// A chat's prompt and its media parts, not yet decoded.
    Chat(ChatPrompt, Vec<MediaPart>),
    Text(String),
    Tokens(Vec<i32>),
}
