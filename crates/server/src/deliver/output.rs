//! A chat choice's output read back in the model family's own format
//! (`steward_formats::parse`): text, `reasoning_content` and `tool_calls`,
//! the same for whole and streamed replies (the whole reply is the stream's
//! pieces put together). Call ids take the shape the family's template
//! accepts on the next turn.

use serde_json::Value;
use steward_formats::family::Family;
use steward_formats::parse::{Event, Options, OutputParser};
use steward_protocol as p;

/// How a request's output is read (one per request; each choice has its
/// own `Reader`).
#[derive(Debug, Clone)]
pub struct OutputCtx {
    pub family: Family,
    /// Tools in play (calls are read).
    pub tools: Option<Value>,
    pub reasoning: bool,
    pub in_reasoning: bool,
}

/// What a reader hands on.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Content(String),
    Reasoning(String),
    CallStart {
        index: u32,
        id: String,
        name: String,
    },
    Args {
        index: u32,
        text: String,
    },
}

pub struct Reader {
    parser: OutputParser,
    family: Family,
    seed: String,
    calls: u32,
}

impl Reader {
    pub fn new(ctx: &OutputCtx, request_id: &str, choice: u32) -> Reader {
        Reader {
            parser: OutputParser::new(Options {
                family: ctx.family,
                tools: ctx.tools.is_some(),
                reasoning: ctx.reasoning,
                in_reasoning: ctx.in_reasoning,
                tool_defs: ctx.tools.clone(),
            }),
            family: ctx.family,
            seed: format!("{request_id}/{choice}"),
            calls: 0,
        }
    }

    pub fn calls(&self) -> u32 {
        self.calls
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let ev = self.parser.push(text);
        self.pieces(ev)
    }

    pub fn finish(&mut self) -> Vec<Piece> {
        let ev = self.parser.finish();
        self.pieces(ev)
    }

    fn pieces(&mut self, events: Vec<Event>) -> Vec<Piece> {
        let mut out = Vec::with_capacity(events.len());
        for e in events {
            match e {
                Event::Content(t) => out.push(Piece::Content(t)),
                Event::Reasoning(t) => out.push(Piece::Reasoning(t)),
                Event::Call { index, name, id } => {
                    self.calls = self.calls.max(index + 1);
                    let id = id
                        .filter(|_| self.family == Family::Kimi)
                        .unwrap_or_else(|| self.family.call_id(&self.seed, index, &name));
                    out.push(Piece::CallStart { index, id, name });
                }
                Event::Args { index, delta } => out.push(Piece::Args { index, text: delta }),
                Event::Note(n) => {
                    tracing::warn!(request = %self.seed, "model output kept as text: {n}")
                }
            }
        }
        out
    }
}

/// A whole choice: (content, reasoning, calls).
pub fn whole(
    ctx: &OutputCtx,
    request_id: &str,
    choice: u32,
    text: &str,
) -> (Option<String>, Option<String>, Vec<p::ToolCall>) {
    let mut r = Reader::new(ctx, request_id, choice);
    let mut pieces = r.push(text);
    pieces.extend(r.finish());
    let (mut content, mut reasoning) = (String::new(), String::new());
    let mut calls: Vec<p::ToolCall> = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Content(t) => content.push_str(&t),
            Piece::Reasoning(t) => reasoning.push_str(&t),
            Piece::CallStart { id, name, .. } => calls.push(p::ToolCall {
                id,
                kind: "function".into(),
                function: p::FunctionCall {
                    name,
                    arguments: String::new(),
                },
            }),
            Piece::Args { index, text } => {
                if let Some(c) = calls.get_mut(index as usize) {
                    c.function.arguments.push_str(&text);
                }
            }
        }
    }
    let content = if content.is_empty() && !calls.is_empty() {
        None
    } else {
        Some(content)
    };
    (content, (!reasoning.is_empty()).then_some(reasoning), calls)
}
