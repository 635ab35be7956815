//! Input items: checked and normalized into their canonical shape (each
//! with an `id`), and canonical items (stored or new) as chat messages.

use serde_json::{json, Map, Value};

use crate::error::DialectError;
use crate::fields::{idx, missing, unsupported, wrong_type, Obj, R};

const TEXT_ONLY: &str = " by this server: its models read text and images only";

/// Separates texts joined into one chat message.
const JOIN: &str = "\n\n";

/// `input`: a string (one user message) or a list of items, normalized.
pub(super) fn input(b: &Obj, previous: Option<&str>, before: usize) -> R<Vec<Value>> {
    let mut items = match b.get("input") {
        None => Vec::new(),
        Some(Value::String(s)) => {
            vec![json!({"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": s}]})]
        }
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, item)| normalize(item, &idx("input", i)))
            .collect::<R<Vec<_>>>()?,
        Some(v) => return Err(wrong_type("input", "a string or an array of items", v)),
    };
    for (i, item) in items.iter_mut().enumerate() {
        if item.get("id").is_none() {
            let id = item_id(item, previous, before + i);
            // `id` first, as the API lists it.
            let mut o = Map::new();
            o.insert("id".into(), id.into());
            if let Value::Object(rest) = std::mem::take(item) {
                o.extend(rest);
            }
            *item = Value::Object(o);
        }
    }
    Ok(items)
}

/// A deterministic ID for an input item that came without one: its kind's
/// prefix and a hash of the previous response, its position in the
/// conversation and its content.
fn item_id(item: &Value, previous: Option<&str>, position: usize) -> String {
    let prefix = match item["type"].as_str() {
        Some("function_call") => "fc",
        Some("function_call_output") => "fco",
        Some("reasoning") => "rs",
        _ => "msg",
    };
    // FNV-1a, 64 bits.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(previous.unwrap_or_default().as_bytes());
    eat(&(position as u64).to_le_bytes());
    eat(item.to_string().as_bytes());
    format!("{prefix}_{h:016x}")
}

/// One input item, checked, in its canonical shape.
fn normalize(item: &Value, path: &str) -> R<Value> {
    let o = Obj::of(item, path)?;
    let kind = match o.str("type")? {
        Some(k) => k,
        None if o.get("role").is_some() => "message",
        None => return Err(missing(&o.p("type"))),
    };
    let mut out = Map::new();
    if let Some(id) = o.str("id")? {
        out.insert("id".into(), id.into());
    }
    out.insert("type".into(), kind.into());
    match kind {
        "message" => {
            let role = o.req_str("role")?;
            if !matches!(role, "user" | "assistant" | "system" | "developer") {
                return Err(DialectError::invalid(
                    o.p("role"),
                    format!(
                        "`{}` must be one of user, assistant, system, developer; got `{role}`",
                        o.p("role")
                    ),
                ));
            }
            let text_type = if role == "assistant" {
                "output_text"
            } else {
                "input_text"
            };
            let content = match o.req("content")? {
                Value::String(s) => vec![json!({"type": text_type, "text": s})],
                Value::Array(parts) => parts
                    .iter()
                    .enumerate()
                    .map(|(j, p)| part(p, &idx(&o.p("content"), j), text_type))
                    .collect::<R<Vec<_>>>()?,
                v => {
                    return Err(wrong_type(
                        &o.p("content"),
                        "a string or an array of content parts",
                        v,
                    ))
                }
            };
            out.insert("role".into(), role.into());
            out.insert("content".into(), Value::Array(content));
            if let Some(s) = o.str("status")? {
                out.insert("status".into(), s.into());
            }
        }
        "function_call" => {
            for key in ["call_id", "name", "arguments"] {
                out.insert(key.into(), o.req_str(key)?.into());
            }
            if let Some(s) = o.str("status")? {
                out.insert("status".into(), s.into());
            }
        }
        "function_call_output" => {
            out.insert("call_id".into(), o.req_str("call_id")?.into());
            let output = match o.req("output")? {
                s @ Value::String(_) => s.clone(),
                Value::Array(parts) => Value::Array(
                    parts
                        .iter()
                        .enumerate()
                        .map(|(j, p)| part(p, &idx(&o.p("output"), j), "input_text"))
                        .collect::<R<Vec<_>>>()?,
                ),
                v => {
                    return Err(wrong_type(
                        &o.p("output"),
                        "a string or an array of content parts",
                        v,
                    ))
                }
            };
            out.insert("output".into(), output);
        }
        "reasoning" => {
            for (key, part_type) in [("summary", "summary_text"), ("content", "reasoning_text")] {
                let Some(list) = o.arr(key)? else {
                    if key == "summary" {
                        out.insert(key.into(), json!([]));
                    }
                    continue;
                };
                let mut parts = Vec::new();
                for (j, p) in list.iter().enumerate() {
                    let po = Obj::of(p, idx(&o.p(key), j))?;
                    let t = po.str("type")?.unwrap_or(part_type);
                    parts.push(json!({"type": t, "text": po.req_str("text")?}));
                }
                out.insert(key.into(), Value::Array(parts));
            }
            if let Some(e) = o.str("encrypted_content")? {
                out.insert("encrypted_content".into(), e.into());
            }
        }
        "item_reference" => {
            return Err(unsupported(
                &o.p("type"),
                "input item type `item_reference`",
                " by this server (send the items, or `previous_response_id`)",
            ))
        }
        other => {
            return Err(unsupported(
                &o.p("type"),
                &format!("input item type `{other}`"),
                " by this server",
            ))
        }
    }
    Ok(Value::Object(out))
}

/// A text content part (`input_text`, `output_text`, `text`, `refusal`).
fn part(p: &Value, path: &str, text_type: &str) -> R<Value> {
    let o = Obj::of(p, path)?;
    match o.req_str("type")? {
        "input_text" | "output_text" => {
            o.req_str("text")?;
            Ok(p.clone())
        }
        "text" => Ok(json!({"type": text_type, "text": o.req_str("text")?})),
        "refusal" => Ok(json!({"type": "refusal", "refusal": o.req_str("refusal")?})),
        "input_image" if text_type == "input_text" && path.contains(".content[") => {
            if o.get("file_id").is_some() {
                return Err(unsupported(
                    &o.p("file_id"),
                    "`file_id`",
                    " by this server (send `image_url`: a data URI or a URL)",
                ));
            }
            let url = o.req_str("image_url")?;
            let mut out = json!({"type": "input_image", "image_url": url});
            if let Some(d) = o.str("detail")? {
                out["detail"] = d.into();
            }
            Ok(out)
        }
        kind @ ("input_image" | "input_file" | "input_audio") => Err(unsupported(
            path,
            &format!("content part type `{kind}`"),
            if kind == "input_image" {
                " by this server here (images go in a user, system or developer message)"
            } else {
                TEXT_ONLY
            },
        )),
        other => Err(unsupported(
            path,
            &format!("content part type `{other}`"),
            " by this server",
        )),
    }
}

/// The text of canonical content parts (or a string), joined.
fn parts_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str().or(p["refusal"].as_str()))
            .collect::<Vec<_>>()
            .join(JOIN),
        _ => String::new(),
    }
}

/// A message's canonical content as chat content: its text joined, or,
/// with an image, the parts in order (texts between images joined).
fn message_content(v: &Value) -> Value {
    let Some(parts) = v.as_array() else {
        return parts_text(v).into();
    };
    if !parts.iter().any(|p| p["type"] == "input_image") {
        return parts_text(v).into();
    }
    let mut out = Vec::new();
    let mut texts: Vec<Value> = Vec::new();
    for p in parts {
        if p["type"] == "input_image" {
            if !texts.is_empty() {
                out.push(json!({"type": "text", "text": parts_text(&Value::Array(std::mem::take(&mut texts)))}));
            }
            out.push(json!({"type": "image_url", "image_url": {"url": p["image_url"]}}));
        } else {
            texts.push(p.clone());
        }
    }
    if !texts.is_empty() {
        out.push(json!({"type": "text", "text": parts_text(&Value::Array(texts))}));
    }
    Value::Array(out)
}

/// Canonical items into chat messages: reasoning waits for the next
/// assistant turn; consecutive function calls make one assistant turn (the
/// preceding assistant message's, when adjacent).
#[derive(Default)]
pub(super) struct Conversation {
    reasoning: Option<String>,
    /// The last message is an assistant turn calls may join.
    open_assistant: bool,
}

impl Conversation {
    pub(super) fn push(&mut self, item: &Value, out: &mut Vec<Value>) {
        match item["type"].as_str().unwrap_or("message") {
            "message" => {
                let role = match item["role"].as_str().unwrap_or("user") {
                    "developer" => "system",
                    r => r,
                };
                let mut m = Map::new();
                m.insert("role".into(), role.into());
                m.insert("content".into(), message_content(&item["content"]));
                if role == "assistant" {
                    if let Some(r) = self.reasoning.take() {
                        m.insert("reasoning_content".into(), r.into());
                    }
                } else {
                    self.reasoning = None;
                }
                out.push(Value::Object(m));
                self.open_assistant = role == "assistant";
            }
            "function_call" => {
                let call = json!({
                    "id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                });
                let last = out
                    .last_mut()
                    .filter(|_| self.open_assistant && self.reasoning.is_none());
                match last {
                    Some(Value::Object(m)) => match m.get_mut("tool_calls") {
                        Some(Value::Array(calls)) => calls.push(call),
                        _ => {
                            m.insert("tool_calls".into(), json!([call]));
                        }
                    },
                    _ => {
                        let mut m = Map::new();
                        m.insert("role".into(), "assistant".into());
                        m.insert("content".into(), Value::Null);
                        m.insert("tool_calls".into(), json!([call]));
                        if let Some(r) = self.reasoning.take() {
                            m.insert("reasoning_content".into(), r.into());
                        }
                        out.push(Value::Object(m));
                    }
                }
                self.open_assistant = true;
            }
            "function_call_output" => {
                out.push(json!({
                    "role": "tool", "tool_call_id": item["call_id"],
                    "content": parts_text(&item["output"]),
                }));
                self.reasoning = None;
                self.open_assistant = false;
            }
            "reasoning" => {
                let content = parts_text(&item["content"]);
                let text = if content.is_empty() {
                    parts_text(&item["summary"])
                } else {
                    content
                };
                if !text.is_empty() {
                    match &mut self.reasoning {
                        Some(r) => {
                            r.push_str(JOIN);
                            r.push_str(&text);
                        }
                        None => self.reasoning = Some(text),
                    }
                }
            }
            _ => {}
        }
    }
}
