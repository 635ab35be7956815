//! The APIs Steward serves by translation: Anthropic Messages
//! ([`anthropic`]) and OpenAI Responses ([`responses`]).
//!
//! A request in either API is translated into an OpenAI chat-completions
//! request body (a `serde_json::Value`), which the server validates and
//! runs as any chat request. The answer comes back as a
//! [`steward_protocol::ChatCompletionResponse`] (whole) or as neutral
//! [`Piece`]s (streamed), and is given in the API's own shape here.
//!
//! Everything in this crate is pure and deterministic: no clock (except the
//! store's TTL, whose clock can be injected), no randomness, no I/O.

use serde::Serialize;
use serde_json::Value;

pub mod anthropic;
mod error;
mod fields;
pub mod responses;

pub use error::DialectError;

/// One piece of a streamed answer, in the order the model produced it.
///
/// Contract: the `Args` of a call follow its `CallStart` with no piece of
/// another kind or call in between (a piece of another kind closes the
/// call's block; arguments for a call that is not the open one are
/// dropped).
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Answer text.
    Text(String),
    /// Reasoning ("thinking") text.
    Reasoning(String),
    /// A tool call begins: its index among the answer's calls, its ID and
    /// the function's name.
    CallStart {
        index: u32,
        id: String,
        name: String,
    },
    /// More of the arguments (JSON text) of call `index`.
    Args { index: u32, text: String },
}

/// Why the answer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its turn.
    Stop,
    /// The token limit (`max_tokens`, `max_output_tokens`) was reached.
    Length,
    /// The model called tools.
    ToolCalls,
    /// One of the request's stop sequences matched (this one).
    StopSequence(String),
}

/// Token counts of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Every prompt token, those read from the prefix cache included
    /// (OpenAI's `prompt_tokens`).
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Prompt tokens whose state came from the prefix cache.
    pub cached_tokens: u32,
    /// Prompt tokens this request newly pinned (Anthropic's
    /// `cache_creation_input_tokens`).
    pub pinned_tokens: u32,
    /// The TTL the request's pin asked for, seconds (0: no pin).
    pub pin_ttl_s: u64,
}

impl From<&steward_protocol::Usage> for Usage {
    fn from(u: &steward_protocol::Usage) -> Self {
        Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
            cached_tokens: u
                .prompt_tokens_details
                .as_ref()
                .map_or(0, |d| d.cached_tokens),
            ..Usage::default()
        }
    }
}

/// One server-sent event: `event: {event}\ndata: {data}\n\n`.
#[derive(Debug, Clone, PartialEq)]
pub struct Out {
    pub event: &'static str,
    pub data: Value,
}

impl Out {
    /// The event as it goes on the wire, blank line included.
    pub fn to_sse(&self) -> String {
        format!("event: {}\ndata: {}\n\n", self.event, self.data)
    }
}
