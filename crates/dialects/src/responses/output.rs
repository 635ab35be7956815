//! A chat answer as a Response object, whole or streamed. Both are built
//! from one accumulator (the output items in order), so the stream's final
//! response and `response()` cannot differ for the same content.

use serde_json::{json, Map, Value};
use steward_protocol::ChatCompletionResponse;

use super::{Echo, RTranslated};
use crate::error::DialectError;
use crate::{Finish, Out, Piece, Usage};

/// One output item as accumulated.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Reasoning(String),
    Message(String),
    Call {
        call_id: String,
        name: String,
        arguments: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    InProgress,
    Completed,
    Incomplete,
    Failed,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Incomplete => "incomplete",
            Status::Failed => "failed",
        }
    }
}

/// The output item ID at `index` of response `id`: the item kind's prefix,
/// the response ID's suffix, the index.
fn item_id(resp_id: &str, item: &Item, index: usize) -> String {
    let prefix = match item {
        Item::Reasoning(_) => "rs",
        Item::Message(_) => "msg",
        Item::Call { .. } => "fc",
    };
    let suffix = resp_id.strip_prefix("resp_").unwrap_or(resp_id);
    format!("{prefix}_{suffix}_{index}")
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn reasoning_part(text: &str) -> Value {
    json!({"type": "reasoning_text", "text": text})
}

/// An item as the API shows it, with `status` (not shown on reasoning).
fn item_json(resp_id: &str, index: usize, item: &Item, status: Status) -> Value {
    let id = item_id(resp_id, item, index);
    match item {
        Item::Reasoning(t) => {
            json!({"id": id, "type": "reasoning", "summary": [], "content": [reasoning_part(t)]})
        }
        Item::Message(t) => json!({
            "id": id, "type": "message", "status": status.as_str(), "role": "assistant",
            "content": [text_part(t)],
        }),
        Item::Call {
            call_id,
            name,
            arguments,
        } => json!({
            "id": id, "type": "function_call", "status": status.as_str(),
            "call_id": call_id, "name": name, "arguments": arguments,
        }),
    }
}

/// The items, each `completed` but the last, which is `last`.
fn items_json(resp_id: &str, items: &[Item], last: Status) -> Vec<Value> {
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let s = if i + 1 == items.len() {
                last
            } else {
                Status::Completed
            };
            item_json(resp_id, i, it, s)
        })
        .collect()
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input_tokens + u.output_tokens,
    })
}

/// What a Response object is made of besides the request's echo.
struct Parts<'a> {
    id: &'a str,
    created_at: u64,
    model: &'a str,
    status: Status,
    output: Vec<Value>,
    usage: Option<&'a Usage>,
    error: Value,
}

fn build(p: Parts, echo: &Echo, previous_response_id: Option<&str>) -> Value {
    let incomplete = match p.status {
        Status::Incomplete => json!({"reason": "max_output_tokens"}),
        _ => Value::Null,
    };
    json!({
        "id": p.id,
        "object": "response",
        "created_at": p.created_at,
        "status": p.status.as_str(),
        "background": false,
        "error": p.error,
        "incomplete_details": incomplete,
        "instructions": echo.instructions,
        "max_output_tokens": echo.max_output_tokens,
        "model": p.model,
        "output": p.output,
        "parallel_tool_calls": echo.parallel_tool_calls,
        "previous_response_id": previous_response_id,
        "reasoning": echo.reasoning,
        "store": echo.store,
        "temperature": echo.temperature,
        "text": echo.text,
        "tool_choice": echo.tool_choice,
        "tools": echo.tools,
        "top_p": echo.top_p,
        "truncation": echo.truncation,
        "usage": p.usage.map_or(Value::Null, usage_json),
        "user": echo.user,
        "metadata": echo.metadata,
    })
}

/// The whole answer as a Response object: a reasoning item, a message
/// item and function-call items, in that order, those with content.
pub fn response(
    id: &str,
    created_at: u64,
    resp: &ChatCompletionResponse,
    t: &RTranslated,
) -> Value {
    let mut items = Vec::new();
    let mut status = Status::Completed;
    if let Some(c) = resp.choices.first() {
        let m = &c.message;
        if let Some(r) = m.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
            items.push(Item::Reasoning(r.to_string()));
        }
        if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty()) {
            items.push(Item::Message(text.to_string()));
        }
        for call in m.tool_calls.iter().flatten() {
            items.push(Item::Call {
                call_id: call.id.clone(),
                name: call.function.name.clone(),
                arguments: call.function.arguments.clone(),
            });
        }
        if c.finish_reason.as_deref() == Some("length") {
            status = Status::Incomplete;
        }
    }
    let usage = Usage::from(&resp.usage);
    let parts = Parts {
        id,
        created_at,
        model: &resp.model,
        status,
        output: items_json(id, &items, status),
        usage: Some(&usage),
        error: Value::Null,
    };
    build(parts, &t.echo, t.previous_response_id.as_deref())
}

/// The open item: its output index, and its call's index for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Open {
    index: usize,
    call: Option<u32>,
}

/// A streamed answer as Responses API events, each with `type` (its event
/// name) and an increasing `sequence_number` from 0.
#[derive(Debug, Clone)]
pub struct ResponseStream {
    id: String,
    created_at: u64,
    model: String,
    echo: Echo,
    previous_response_id: Option<String>,
    seq: u64,
    items: Vec<Item>,
    open: Option<Open>,
    started: bool,
    done: bool,
    last: Option<Value>,
}

impl ResponseStream {
    pub fn new(id: &str, created_at: u64, model: &str, t: &RTranslated) -> Self {
        ResponseStream {
            id: id.to_string(),
            created_at,
            model: model.to_string(),
            echo: t.echo.clone(),
            previous_response_id: t.previous_response_id.clone(),
            seq: 0,
            items: Vec::new(),
            open: None,
            started: false,
            done: false,
            last: None,
        }
    }

    /// The response the stream ended with (`completed`, `incomplete` or
    /// `failed`); `None` before the end.
    pub fn final_response(&self) -> Option<Value> {
        self.last.clone()
    }

    fn ev(&mut self, event: &'static str, fields: Value) -> Out {
        let mut m = Map::new();
        m.insert("type".into(), event.into());
        m.insert("sequence_number".into(), self.seq.into());
        self.seq += 1;
        if let Value::Object(f) = fields {
            m.extend(f);
        }
        Out {
            event,
            data: Value::Object(m),
        }
    }

    fn snapshot(&self, status: Status, usage: Option<&Usage>, error: Value) -> Value {
        let output = match status {
            Status::InProgress => Vec::new(),
            // A failed response's last item was cut short.
            Status::Failed => items_json(&self.id, &self.items, Status::Incomplete),
            s => items_json(&self.id, &self.items, s),
        };
        let parts = Parts {
            id: &self.id,
            created_at: self.created_at,
            model: &self.model,
            status,
            output,
            usage,
            error,
        };
        build(parts, &self.echo, self.previous_response_id.as_deref())
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> Vec<Out> {
        if self.started {
            return Vec::new();
        }
        self.started = true;
        let r = self.snapshot(Status::InProgress, None, Value::Null);
        vec![
            self.ev("response.created", json!({"response": r})),
            self.ev("response.in_progress", json!({"response": r})),
        ]
    }

    /// Events for one piece: a delta of the open item, or the open item
    /// done and a new one added.
    pub fn piece(&mut self, p: Piece) -> Vec<Out> {
        let mut out = self.start();
        if self.done {
            return out;
        }
        match p {
            Piece::Text(t) if !t.is_empty() => {
                let i = self.ensure(Item::Message(String::new()), None, &mut out);
                if let Item::Message(s) = &mut self.items[i] {
                    s.push_str(&t);
                }
                let item_id = self.item_id(i);
                let e = json!({"item_id": item_id, "output_index": i, "content_index": 0,
                               "delta": t, "logprobs": []});
                out.push(self.ev("response.output_text.delta", e));
            }
            Piece::Reasoning(t) if !t.is_empty() => {
                let i = self.ensure(Item::Reasoning(String::new()), None, &mut out);
                if let Item::Reasoning(s) = &mut self.items[i] {
                    s.push_str(&t);
                }
                let item_id = self.item_id(i);
                let e = json!({"item_id": item_id, "output_index": i, "content_index": 0,
                               "delta": t});
                out.push(self.ev("response.reasoning_text.delta", e));
            }
            Piece::Text(_) | Piece::Reasoning(_) => {}
            Piece::CallStart { index, id, name } => {
                self.close(Status::Completed, &mut out);
                let item = Item::Call {
                    call_id: id,
                    name,
                    arguments: String::new(),
                };
                self.ensure(item, Some(index), &mut out);
            }
            Piece::Args { index, text } => {
                let Some(Open {
                    index: i,
                    call: Some(k),
                }) = self.open
                else {
                    return out;
                };
                if k != index || text.is_empty() {
                    return out;
                }
                if let Item::Call { arguments, .. } = &mut self.items[i] {
                    arguments.push_str(&text);
                }
                let item_id = self.item_id(i);
                let e = json!({"item_id": item_id, "output_index": i, "delta": text});
                out.push(self.ev("response.function_call_arguments.delta", e));
            }
        }
        out
    }

    fn item_id(&self, i: usize) -> String {
        item_id(&self.id, &self.items[i], i)
    }

    /// The open item's index after opening one like `item` (closing
    /// another kind).
    fn ensure(&mut self, item: Item, call: Option<u32>, out: &mut Vec<Out>) -> usize {
        if let Some(o) = self.open {
            let same = matches!(
                (&self.items[o.index], &item),
                (Item::Message(_), Item::Message(_)) | (Item::Reasoning(_), Item::Reasoning(_))
            );
            if same && call.is_none() {
                return o.index;
            }
        }
        self.close(Status::Completed, out);
        let i = self.items.len();
        self.items.push(item);
        self.open = Some(Open { index: i, call });
        let item_id = self.item_id(i);
        let added = match &self.items[i] {
            Item::Reasoning(_) => {
                json!({"id": item_id, "type": "reasoning", "summary": [], "content": []})
            }
            Item::Message(_) => json!({"id": item_id, "type": "message", "status": "in_progress",
                                       "role": "assistant", "content": []}),
            Item::Call { call_id, name, .. } => json!({
                "id": item_id, "type": "function_call", "status": "in_progress",
                "call_id": call_id, "name": name, "arguments": "",
            }),
        };
        let part = match &self.items[i] {
            Item::Reasoning(_) => Some(reasoning_part("")),
            Item::Message(_) => Some(text_part("")),
            Item::Call { .. } => None,
        };
        out.push(self.ev(
            "response.output_item.added",
            json!({"output_index": i, "item": added}),
        ));
        if let Some(part) = part {
            let e = json!({"item_id": item_id, "output_index": i, "content_index": 0,
                           "part": part});
            out.push(self.ev("response.content_part.added", e));
        }
        i
    }

    /// The open item's `.done` events, the item with `status`.
    fn close(&mut self, status: Status, out: &mut Vec<Out>) {
        let Some(Open { index: i, .. }) = self.open.take() else {
            return;
        };
        let item_id = self.item_id(i);
        let item = self.items[i].clone();
        match &item {
            Item::Reasoning(t) => {
                let e = json!({"item_id": item_id, "output_index": i, "content_index": 0,
                               "text": t});
                out.push(self.ev("response.reasoning_text.done", e));
                let e = json!({"item_id": item_id, "output_index": i, "content_index": 0,
                               "part": reasoning_part(t)});
                out.push(self.ev("response.content_part.done", e));
            }
            Item::Message(t) => {
                let e = json!({"item_id": item_id, "output_index": i, "content_index": 0,
                               "text": t, "logprobs": []});
                out.push(self.ev("response.output_text.done", e));
                let e = json!({"item_id": item_id, "output_index": i, "content_index": 0,
                               "part": text_part(t)});
                out.push(self.ev("response.content_part.done", e));
            }
            Item::Call {
                name, arguments, ..
            } => {
                let e = json!({"item_id": item_id, "output_index": i, "name": name,
                               "arguments": arguments});
                out.push(self.ev("response.function_call_arguments.done", e));
            }
        }
        let e = json!({"output_index": i, "item": item_json(&self.id, i, &item, status)});
        out.push(self.ev("response.output_item.done", e));
    }

    /// The open item done; `response.completed` (or `response.incomplete`
    /// at the token limit) with the final response.
    pub fn finish(&mut self, f: Finish, u: Usage) -> Vec<Out> {
        let mut out = self.start();
        if self.done {
            return out;
        }
        self.done = true;
        let status = if f == Finish::Length {
            Status::Incomplete
        } else {
            Status::Completed
        };
        self.close(status, &mut out);
        let r = self.snapshot(status, Some(&u), Value::Null);
        self.last = Some(r.clone());
        let event = if status == Status::Incomplete {
            "response.incomplete"
        } else {
            "response.completed"
        };
        out.push(self.ev(event, json!({"response": r})));
        out
    }

    /// An `error` event and `response.failed` (the output so far; the open
    /// item `incomplete`).
    pub fn error(&mut self, e: &DialectError) -> Vec<Out> {
        let mut out = self.start();
        if self.done {
            return out;
        }
        self.done = true;
        self.open = None;
        let code = error_code(e);
        let ev = json!({"code": code, "message": e.message, "param": e.param});
        out.push(self.ev("error", ev));
        let error = json!({"code": code, "message": e.message});
        let r = self.snapshot(Status::Failed, None, error);
        self.last = Some(r.clone());
        out.push(self.ev("response.failed", json!({"response": r})));
        out
    }
}

/// The Response error `code` for a failure.
fn error_code(e: &DialectError) -> &'static str {
    match e.status {
        429 => "rate_limit_exceeded",
        500..=599 => "server_error",
        _ => e.kind,
    }
}

/// An OpenAI-shaped error body: `{"error":{"message","type","param",
/// "code"}}`.
pub fn error_body(e: &DialectError) -> Value {
    json!({"error": {"message": e.message, "type": e.kind, "param": e.param, "code": Value::Null}})
}
