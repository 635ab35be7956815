//! Another API's shape for an answer: the traits a translated API
//! (`api::dialect`: Anthropic Messages, OpenAI Responses) implements
//! (`Dialect` for the whole answer, `DialectStream` for its events), and a
//! chat outcome in the dialects' terms (`piece_of`, `finish_of`,
//! `usage_of`, `error_of`). Here, under the reply, so that the reply feeds
//! a dialect without knowing any: `api::dialect` depends on this file,
//! never the reverse.

use serde_json::Value;
use steward_dialects::{DialectError, Finish, Out, Piece, Usage};
use steward_engine::{FinishReason, Finished};

use crate::http::error::ApiError;

/// A streamed answer in another API's events.
pub(crate) trait DialectStream: Send {
    fn start(&mut self) -> Vec<Out>;
    fn piece(&mut self, p: Piece) -> Vec<Out>;
    fn finish(&mut self, f: Finish, u: Usage) -> Vec<Out>;
    fn error(&mut self, e: &DialectError) -> Vec<Out>;
}

/// Another API's shape for one request's answer.
pub(crate) trait Dialect: Send + Sync {
    /// The request's ID (also its stored response's, for Responses).
    fn id(&self) -> String;
    /// Its route, for the access log and traces (`POST /v1/messages`).
    fn route(&self) -> &'static str;
    /// The whole answer, from the output's pieces in the order the model
    /// wrote them (through the same event machine as a stream, so the two
    /// cannot differ).
    fn whole(&self, created: u64, model: &str, pieces: Vec<Piece>, f: Finish, u: Usage) -> Value;
    /// The stream's encoder.
    fn stream(
        &self,
        id: &str,
        created: u64,
        model: &str,
        prompt_tokens: u32,
    ) -> Box<dyn DialectStream>;
}

/// A chat output piece as a dialect's.
pub(crate) fn piece_of(p: super::output::Piece) -> Piece {
    use super::output::Piece as O;
    match p {
        O::Content(t) => Piece::Text(t),
        O::Reasoning(t) => Piece::Reasoning(t),
        O::CallStart { index, id, name } => Piece::CallStart { index, id, name },
        O::Args { index, text } => Piece::Args { index, text },
    }
}

pub(crate) fn finish_of(fins: &[&Finished], calls: u32) -> Finish {
    let f = fins.first();
    match f.map(|f| (f.reason, f.stop_sequence.clone())) {
        Some((FinishReason::Length, _)) => Finish::Length,
        _ if calls > 0 => Finish::ToolCalls,
        Some((FinishReason::Stop, Some(s))) => Finish::StopSequence(s),
        _ => Finish::Stop,
    }
}

/// The answer's usage; `pin`: the request's (what it pinned, and for how
/// long it asked).
pub(crate) fn usage_of(fins: &[&Finished], pin: Option<steward_engine::Pin>) -> Usage {
    Usage {
        input_tokens: fins.first().map_or(0, |f| f.prompt_tokens),
        output_tokens: fins.iter().map(|f| f.completion_tokens).sum(),
        cached_tokens: fins.first().map_or(0, |f| f.cached_tokens),
        pinned_tokens: fins.iter().map(|f| f.pinned_tokens).max().unwrap_or(0),
        pin_ttl_s: pin.map_or(0, |p| p.ttl.as_secs()),
    }
}

pub(crate) fn error_of(e: &ApiError) -> DialectError {
    DialectError {
        status: e.status.as_u16(),
        kind: e.kind,
        message: e.message.clone(),
        param: e.param.clone(),
    }
}
