//! Prompt caching in the Messages API: `cache_control` breakpoints in, a
//! pin out, and the cache's share of the prompt in `usage`.
//!
//! A breakpoint (`cache_control: {"type": "ephemeral", "ttl"?: "5m" |
//! "1h"}`, on a system block, a message's content block, a tool, or the
//! request itself) asks for the prompt up to it to be kept. The request
//! becomes one pin: the chat body's `cache_pin` (a Steward extension of
//! chat completions) with the longest TTL asked and the chat messages up
//! to the last breakpoint (`messages`; absent: the whole prompt), which the
//! server turns into the prompt's tokens up to there. A breakpoint inside a
//! message covers that whole chat message (text blocks are joined into
//! one); on a tool, the system message when there is one (templates render
//! tools beside it).

use serde_json::{json, Map, Value};

use crate::error::DialectError;
use crate::fields::{Obj, R};
use crate::Usage;

/// Most breakpoints a request may carry (the request's own included), as
/// Anthropic's API allows.
pub(crate) const MAX_BREAKPOINTS: usize = 4;

/// TTLs a breakpoint may ask for, and their seconds.
const TTLS: &[(&str, u64)] = &[("5m", 300), ("1h", 3600)];

/// Seconds from which a pin counts as Anthropic's 1-hour cache.
const LONG_S: u64 = 3600;

/// The breakpoints read so far.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Breakpoints {
    count: usize,
    /// Longest TTL asked, seconds (0: no breakpoint).
    ttl_s: u64,
    /// Chat messages the last breakpoint covers (`None`: the whole prompt).
    covered: Option<usize>,
    whole: bool,
}

impl Breakpoints {
    /// `o`'s `cache_control`, if it has one: checked and counted, the
    /// prompt through chat message `covered` (a count) kept.
    pub fn mark(&mut self, o: &Obj, covered: usize) -> R<()> {
        if let Some(ttl_s) = self.read(o)? {
            self.keep(ttl_s, Some(covered));
        }
        Ok(())
    }

    /// The request's own `cache_control`: the whole prompt (Anthropic
    /// puts it on the last block).
    pub fn mark_all(&mut self, o: &Obj) -> R<()> {
        if let Some(ttl_s) = self.read(o)? {
            self.keep(ttl_s, None);
        }
        Ok(())
    }

    /// A breakpoint read by [`Self::read`] kept: its TTL, and the chat
    /// messages it covers (`None`: the whole prompt).
    pub fn keep(&mut self, ttl_s: u64, covered: Option<usize>) {
        self.ttl_s = self.ttl_s.max(ttl_s);
        match covered {
            None => self.whole = true,
            Some(n) => self.covered = Some(self.covered.map_or(n, |c| c.max(n))),
        }
    }

    /// `o`'s `cache_control` checked and counted: its TTL in seconds
    /// (`None`: it has none).
    pub fn read(&mut self, o: &Obj) -> R<Option<u64>> {
        let Some(cc) = o.obj("cache_control")? else {
            return Ok(None);
        };
        self.count += 1;
        if self.count > MAX_BREAKPOINTS {
            return Err(DialectError::invalid(
                cc.path.clone(),
                format!(
                    "`{}`: a maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.",
                    cc.path, self.count
                ),
            ));
        }
        for key in cc.map.keys() {
            if !matches!(key.as_str(), "type" | "ttl") {
                let p = cc.p(key);
                return Err(DialectError::invalid(
                    p.clone(),
                    format!("`{p}`: unknown field (`cache_control` takes `type` and `ttl`)"),
                ));
            }
        }
        let kind = cc.req_str("type")?;
        if kind != "ephemeral" {
            let p = cc.p("type");
            return Err(DialectError::invalid(
                p.clone(),
                format!("`{p}` must be `ephemeral`, got `{kind}`"),
            ));
        }
        match cc.str("ttl")? {
            None => Ok(Some(TTLS[0].1)),
            Some(t) => match TTLS.iter().find(|(name, _)| *name == t) {
                Some(&(_, s)) => Ok(Some(s)),
                None => {
                    let p = cc.p("ttl");
                    let shown: String = t.chars().take(32).collect();
                    Err(DialectError::invalid(
                        p.clone(),
                        format!("`{p}` must be `5m` or `1h`, got `{shown}`"),
                    ))
                }
            },
        }
    }

    /// The pin the breakpoints ask for, as the chat body's `cache_pin`
    /// (`None`: no breakpoint). `messages`: the chat body's message count.
    pub fn cache_pin(&self, messages: usize) -> Option<Value> {
        if self.count == 0 {
            return None;
        }
        let mut pin = Map::new();
        pin.insert("ttl_s".into(), self.ttl_s.into());
        match self.covered {
            Some(n) if !self.whole && n < messages => {
                pin.insert("messages".into(), n.into());
            }
            _ => {}
        }
        Some(Value::Object(pin))
    }
}

/// Anthropic's split of the prompt: (`input_tokens`,
/// `cache_read_input_tokens`, `cache_creation_input_tokens`), which add up
/// to every prompt token. Read: those restored from any cache; creation:
/// those this request pinned (never more than the rest); input: the rest.
pub(crate) fn split(u: &Usage) -> (u32, u32, u32) {
    let read = u.cached_tokens.min(u.input_tokens);
    let created = u.pinned_tokens.min(u.input_tokens - read);
    (u.input_tokens - read - created, read, created)
}

/// Anthropic's `usage` for an answer: the prompt's split, the output, and
/// `cache_creation` by TTL (all of it under the pin's).
pub(crate) fn usage_json(u: &Usage) -> Value {
    let (input, read, created) = split(u);
    let long = u.pin_ttl_s >= LONG_S;
    json!({
        "input_tokens": input,
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": created,
        "cache_creation": {
            "ephemeral_5m_input_tokens": if long { 0 } else { created },
            "ephemeral_1h_input_tokens": if long { created } else { 0 },
        },
    })
}
