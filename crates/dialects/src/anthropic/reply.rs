//! A chat answer as a Messages API message, whole or streamed, and errors
//! in the Messages API's shape.

use serde_json::{json, Value};
use steward_protocol::ChatCompletionResponse;

use super::cache::usage_json;
pub use crate::error::error_kind_for_status;
use crate::error::DialectError;
use crate::{Finish, Out, Piece, Usage};

/// The message ID for a chat completion's ID: `msg_` and its suffix.
pub fn message_id(chat_id: &str) -> String {
    let suffix = chat_id
        .strip_prefix("chatcmpl-")
        .or_else(|| chat_id.strip_prefix("chatcmpl_"))
        .unwrap_or(chat_id);
    if suffix.starts_with("msg_") {
        suffix.to_string()
    } else {
        format!("msg_{suffix}")
    }
}

/// A tool call's `arguments` as the `input` object: `{}` when empty, the
/// parsed object, or `{"_raw": text}` when it is not a JSON object.
pub fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({"_raw": arguments}),
    }
}

/// `stop_reason` and `stop_sequence` for a finish.
fn stop_fields(f: &Finish) -> (&'static str, Value) {
    match f {
        Finish::Stop => ("end_turn", Value::Null),
        Finish::Length => ("max_tokens", Value::Null),
        Finish::ToolCalls => ("tool_use", Value::Null),
        Finish::StopSequence(s) => ("stop_sequence", Value::String(s.clone())),
    }
}

/// The chat answer's finish: `finish_reason` and the stop sequence that
/// matched, if the server knows it.
fn finish_of(reason: Option<&str>, calls: bool, stop_sequence: Option<&str>) -> Finish {
    match (reason, stop_sequence) {
        (Some("length"), _) => Finish::Length,
        (Some("tool_calls"), _) => Finish::ToolCalls,
        _ if calls => Finish::ToolCalls,
        (_, Some(s)) => Finish::StopSequence(s.to_string()),
        _ => Finish::Stop,
    }
}

/// The whole answer as a Messages API `message` object. `stop_sequence`:
/// the request's stop sequence that ended the answer, if one did.
pub fn message(resp: &ChatCompletionResponse, stop_sequence: Option<&str>) -> Value {
    let mut content = Vec::new();
    let mut reason = None;
    let mut calls = false;
    if let Some(c) = resp.choices.first() {
        let m = &c.message;
        reason = c.finish_reason.as_deref();
        if let Some(r) = m.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
            content.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
        }
        if let Some(t) = m.content.as_deref().filter(|t| !t.is_empty()) {
            content.push(json!({"type": "text", "text": t}));
        }
        for call in m.tool_calls.iter().flatten() {
            calls = true;
            content.push(json!({
                "type": "tool_use", "id": call.id, "name": call.function.name,
                "input": tool_input(&call.function.arguments),
            }));
        }
    }
    let (stop_reason, stop_sequence) = stop_fields(&finish_of(reason, calls, stop_sequence));
    json!({
        "id": message_id(&resp.id),
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_json(&Usage::from(&resp.usage)),
    })
}

/// What the open content block is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    Thinking,
    /// A `tool_use` block for the call of this index.
    Tool(u32),
}

/// A streamed answer as Messages API events: `message_start`, `ping`,
/// content blocks (`content_block_start`, `content_block_delta`,
/// `content_block_stop`), `message_delta`, `message_stop`.
#[derive(Debug, Clone)]
pub struct MessageStream {
    id: String,
    model: String,
    input_tokens: u32,
    started: bool,
    done: bool,
    /// The open block: its index and kind.
    open: Option<(u32, Block)>,
    next_index: u32,
}

impl MessageStream {
    /// `input_tokens`: the prompt's tokens as far as known when the stream
    /// starts (`message_delta` carries the final split with the cache).
    pub fn new(id: &str, model: &str, input_tokens: u32) -> Self {
        MessageStream {
            id: id.to_string(),
            model: model.to_string(),
            input_tokens,
            started: false,
            done: false,
            open: None,
            next_index: 0,
        }
    }

    fn ev(event: &'static str, data: Value) -> Out {
        Out { event, data }
    }

    /// `message_start` (the message with no content yet) and a `ping`.
    pub fn start(&mut self) -> Vec<Out> {
        if self.started {
            return Vec::new();
        }
        self.started = true;
        vec![
            Self::ev(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant",
                    "model": self.model, "content": [],
                    "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
                }}),
            ),
            Self::ev("ping", json!({"type": "ping"})),
        ]
    }

    /// Events for one piece: the open block's delta, or the open block
    /// closed and a new one opened.
    pub fn piece(&mut self, p: Piece) -> Vec<Out> {
        let mut out = self.start();
        if self.done {
            return out;
        }
        match p {
            Piece::Text(t) if !t.is_empty() => {
                let i = self.ensure(Block::Text, json!({"type": "text", "text": ""}), &mut out);
                out.push(delta(i, json!({"type": "text_delta", "text": t})));
            }
            Piece::Reasoning(t) if !t.is_empty() => {
                let start = json!({"type": "thinking", "thinking": "", "signature": ""});
                let i = self.ensure(Block::Thinking, start, &mut out);
                out.push(delta(i, json!({"type": "thinking_delta", "thinking": t})));
            }
            Piece::Text(_) | Piece::Reasoning(_) => {}
            Piece::CallStart { index, id, name } => {
                self.close(&mut out);
                let start = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                self.ensure(Block::Tool(index), start, &mut out);
            }
            Piece::Args { index, text } => {
                if let Some((i, Block::Tool(k))) = self.open {
                    if k == index && !text.is_empty() {
                        out.push(delta(
                            i,
                            json!({"type": "input_json_delta", "partial_json": text}),
                        ));
                    }
                }
            }
        }
        out
    }

    /// The open block's index, after opening `kind` (closing another).
    fn ensure(&mut self, kind: Block, start: Value, out: &mut Vec<Out>) -> u32 {
        if let Some((i, k)) = self.open {
            if k == kind {
                return i;
            }
        }
        self.close(out);
        let i = self.next_index;
        self.next_index += 1;
        self.open = Some((i, kind));
        out.push(Self::ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        ));
        i
    }

    fn close(&mut self, out: &mut Vec<Out>) {
        if let Some((i, kind)) = self.open.take() {
            if kind == Block::Thinking {
                out.push(delta(
                    i,
                    json!({"type": "signature_delta", "signature": ""}),
                ));
            }
            out.push(Self::ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": i}),
            ));
        }
    }

    /// Close the open block; `message_delta` (stop reason, usage) and
    /// `message_stop`.
    pub fn finish(&mut self, f: Finish, u: Usage) -> Vec<Out> {
        let mut out = self.start();
        if self.done {
            return out;
        }
        self.done = true;
        self.close(&mut out);
        let (stop_reason, stop_sequence) = stop_fields(&f);
        out.push(Self::ev(
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                   "usage": usage_json(&u)}),
        ));
        out.push(Self::ev("message_stop", json!({"type": "message_stop"})));
        out
    }

    /// An `error` event; the stream ends with it.
    pub fn error(&mut self, e: &DialectError) -> Vec<Out> {
        if self.done {
            return Vec::new();
        }
        self.done = true;
        self.open = None;
        vec![Self::ev("error", error_body(e))]
    }
}

fn delta(index: u32, d: Value) -> Out {
    Out {
        event: "content_block_delta",
        data: json!({"type": "content_block_delta", "index": index, "delta": d}),
    }
}

/// `{"type":"error","error":{"type","message"}}`, and `details:
/// {"error_code"}` where the API defines a code for the error
/// ([`super::error_code`]).
pub fn error_body(e: &DialectError) -> Value {
    let mut error = json!({"type": e.kind, "message": e.message});
    if let Some(code) = super::request::error_code(e) {
        error["details"] = json!({ "error_code": code });
    }
    json!({"type": "error", "error": error})
}

/// An OpenAI-shaped error body (`{"error":{"message","type","param",
/// "code"}}`) answered with `status`, in the Messages API's shape (its type
/// chosen by the status). A body already in Anthropic's shape is kept.
pub fn from_openai_error(status: u16, body: &Value) -> Value {
    if body["type"] == "error" && body["error"]["type"].is_string() {
        return body.clone();
    }
    error_body(&DialectError::from_openai(status, body))
}

/// The whole `message` a stream's events describe: `message_start`'s
/// message with every block assembled from its deltas, in stream order,
/// and `message_delta`'s stop reason and usage. A whole answer built this
/// way cannot differ from the same answer streamed.
pub fn message_from_events(outs: &[Out]) -> Value {
    let mut msg = json!({});
    let mut blocks: Vec<Value> = Vec::new();
    let mut args: Vec<String> = Vec::new();
    for o in outs {
        let d = &o.data;
        match o.event {
            "message_start" => msg = d["message"].clone(),
            "content_block_start" => {
                blocks.push(d["content_block"].clone());
                args.push(String::new());
            }
            "content_block_delta" => {
                let Some(i) = d["index"].as_u64().map(|i| i as usize) else {
                    continue;
                };
                let (Some(b), Some(a)) = (blocks.get_mut(i), args.get_mut(i)) else {
                    continue;
                };
                let delta = &d["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => append(b, "text", delta["text"].as_str()),
                    Some("thinking_delta") => append(b, "thinking", delta["thinking"].as_str()),
                    Some("signature_delta") => append(b, "signature", delta["signature"].as_str()),
                    Some("input_json_delta") => {
                        a.push_str(delta["partial_json"].as_str().unwrap_or(""))
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                msg["stop_reason"] = d["delta"]["stop_reason"].clone();
                msg["stop_sequence"] = d["delta"]["stop_sequence"].clone();
                msg["usage"] = d["usage"].clone();
            }
            _ => {}
        }
    }
    for (b, a) in blocks.iter_mut().zip(&args) {
        if b["type"] == "tool_use" {
            b["input"] = tool_input(a);
        }
    }
    msg["content"] = Value::Array(blocks);
    msg
}

fn append(b: &mut Value, field: &str, s: Option<&str>) {
    let now = b[field].as_str().unwrap_or("").to_string();
    b[field] = Value::String(now + s.unwrap_or(""));
}
