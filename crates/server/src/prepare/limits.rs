//! Limits on everything a client controls (the rule of [1/8]: every such
//! resource has a stated limit, a flag and a default, and exceeding it is a
//! 400 naming the field, or a 413 for the body). The table of limits and
//! what happens past each is docs/LIMITS.md.

use serde_json::Value;
use steward_engine::constraint::Grammar;

pub use super::media::MediaLimits;
use super::spec::GenSpec;
use crate::http::error::ApiError;

/// Every resource a client controls, bounded (`steward serve` flags; the
/// table in docs/LIMITS.md). Past a limit the request is a 400 naming the
/// field; the body limit is a 413.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `--max-body-bytes`: request body (413 past it).
    pub max_body_bytes: usize,
    /// `--max-messages`: entries of `messages`.
    pub max_messages: usize,
    /// `--max-tools`: entries of `tools`.
    pub max_tools: usize,
    /// `--max-stop`: `stop` sequences.
    pub max_stop: usize,
    /// `--max-stop-bytes`: bytes of one stop sequence (the detokenizer
    /// holds back and scans that much per token).
    pub max_stop_bytes: usize,
    /// `--max-grammar-bytes`: a `grammar`, a `response_format` schema or
    /// the tool schemas of a forced call, as JSON/Lark text.
    pub max_grammar_bytes: usize,
    /// `--max-schema-depth`: nesting of a JSON schema (objects and arrays).
    pub max_schema_depth: usize,
    /// `--max-n`: choices per request.
    pub max_n: u32,
    /// `--max-logprob-entries`: logprob values one whole (non-streamed)
    /// response may carry: choices x tokens x (1 + alternatives).
    pub max_logprob_entries: u64,
    /// Longest `timeout` a request may ask for, seconds.
    pub max_timeout_s: f64,
    /// Images and audio clips (`prepare/media/`).
    pub media: MediaLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 2 << 20,
            max_messages: 1024,
            max_tools: 128,
            max_stop: 4,
            max_stop_bytes: 256,
            max_grammar_bytes: 64 << 10,
            max_schema_depth: 64,
            max_n: 16,
            max_logprob_entries: 1 << 20,
            max_timeout_s: 86_400.0 * 365.0,
            media: MediaLimits::default(),
        }
    }
}

/// Depth of nested arrays and objects in a JSON value (a scalar is 0).
/// Iterative: a hostile value cannot overflow the stack here.
pub fn json_depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        let kids: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(a) => Box::new(a.iter()),
            Value::Object(o) => Box::new(o.values()),
            _ => continue,
        };
        max = max.max(d + 1);
        stack.extend(kids.map(|k| (k, d + 1)));
    }
    max
}

/// A grammar's or schema's size and depth within the limits.
pub fn check_grammar(g: &Grammar, param: &str, l: &Limits) -> Result<(), ApiError> {
    let (bytes, depth) = match g {
        Grammar::JsonObject => (0, 0),
        Grammar::JsonSchema(v) => (v.to_string().len(), json_depth(v)),
        Grammar::Lark(s) => (s.len(), 0),
    };
    if bytes > l.max_grammar_bytes {
        return Err(ApiError::invalid_value(
            format!(
                "`{param}` is {bytes} bytes; the limit is {} (--max-grammar-bytes)",
                l.max_grammar_bytes
            ),
            param,
        ));
    }
    if depth > l.max_schema_depth {
        return Err(ApiError::invalid_value(
            format!(
                "`{param}` nests {depth} levels deep; the limit is {} (--max-schema-depth)",
                l.max_schema_depth
            ),
            param,
        ));
    }
    Ok(())
}

/// A whole response's logprob values within `--max-logprob-entries`
/// (`tokens`: the generated tokens one choice may carry, or the prompt's
/// when it is scored). Streamed responses send them as they come.
pub fn check_logprob_volume(spec: &GenSpec, tokens: u64, l: &Limits) -> Result<(), ApiError> {
    let Some(top) = spec.logprobs else {
        return Ok(());
    };
    if spec.stream {
        return Ok(());
    }
    let entries = u64::from(spec.n) * tokens * (1 + top as u64);
    if entries > l.max_logprob_entries {
        return Err(ApiError::invalid_value(
            format!(
                "this request could return {entries} logprob values (n x tokens x (1 + top_logprobs)); \
                 the limit is {} (--max-logprob-entries): lower `max_tokens`, `n` or `top_logprobs`, or stream",
                l.max_logprob_entries
            ),
            "logprobs",
        ));
    }
    Ok(())
}
