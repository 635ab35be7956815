//! A Messages API request as a chat-completions request body.

use serde_json::{json, Map, Value};

use super::cache::Breakpoints;
use crate::error::DialectError;
use crate::fields::{
    at, check_known, empty_list, idx, missing, unsupported, wrong_type, Known, Obj, Rule, R,
};

/// What `to_chat` made of a Messages request.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    /// The chat-completions request body.
    pub chat: Value,
    pub stream: bool,
    /// The requested model (empty when the request named none).
    pub model: String,
    /// The request's `stop_sequences` (also the chat body's `stop`).
    pub stop_sequences: Vec<String>,
    pub max_tokens: u64,
    /// `thinking`: enabled (`true`), disabled (`false`) or left to the
    /// model's default (`None`).
    pub thinking: Option<bool>,
}

/// Why a block outside a user message's content cannot be taken.
const TEXT_ONLY: &str = " by this server here (images go in a user message's content)";

/// Separates text blocks joined into one chat message.
const JOIN: &str = "\n\n";

/// Why a request that names a server-side thread is refused: Anthropic's
/// SDK (its tool runner, threads) then sends the whole conversation again
/// without one (`error.details.error_code`, see [`error_code`]).
const NO_THREADS: &str =
    " by this server: it keeps no conversation between requests; send the whole conversation in `messages` without `thread`";

/// The Messages API's top-level fields (the Python SDK's
/// `MessageCreateParams`, beta ones included) and what this server does
/// with each; docs/LIMITS.md's table says why.
pub(crate) const FIELDS: &Known = &[
    ("model", Rule::Honoured),
    ("max_tokens", Rule::Honoured),
    ("messages", Rule::Honoured),
    ("system", Rule::Honoured),
    ("stop_sequences", Rule::Honoured),
    ("stream", Rule::Honoured),
    ("temperature", Rule::Honoured),
    ("top_p", Rule::Honoured),
    ("top_k", Rule::Honoured),
    ("tools", Rule::Honoured),
    ("tool_choice", Rule::Honoured),
    ("thinking", Rule::Honoured),
    ("output_config", Rule::Honoured),
    ("output_format", Rule::Honoured),
    ("metadata", Rule::Honoured),
    ("priority", Rule::Honoured),
    ("service_tier", Rule::Ignored),
    ("inference_geo", Rule::Ignored),
    ("speed", Rule::Ignored),
    ("cache_control", Rule::Honoured),
    ("diagnostics", Rule::Ignored),
    ("billing_policy", Rule::Ignored),
    ("fallback_credit_token", Rule::Ignored),
    ("user_profile_id", Rule::Ignored),
    ("workspace_id", Rule::Ignored),
    ("thread", Rule::Refused(NO_THREADS)),
    ("previous_message_id", Rule::Refused(NO_THREADS)),
    (
        "fallbacks",
        Rule::RefusedUnless(
            |v| v == "default",
            " by this server: it has no substitute models (`\"default\"` runs the model alone)",
        ),
    ),
    (
        "container",
        Rule::Refused(" by this server: it runs no server tools, so it has no containers"),
    ),
    (
        "mcp_servers",
        Rule::RefusedUnless(empty_list, " by this server: it connects to no MCP servers"),
    ),
    (
        "context_management",
        Rule::Refused(" by this server: it never edits the conversation it is sent"),
    ),
    (
        "compaction",
        Rule::Refused(" by this server: it does not summarize conversations"),
    ),
];

/// The Messages API's `error.details.error_code` for a refusal, where the
/// API defines one: a refused `thread` (or `previous_message_id`) is
/// `thread_unsupported_request`, on which Anthropic's SDK falls back to
/// sending the whole conversation without a thread.
pub fn error_code(e: &DialectError) -> Option<&'static str> {
    match (e.status, e.param.as_deref()) {
        (400, Some("thread" | "previous_message_id")) => Some("thread_unsupported_request"),
        _ => None,
    }
}

/// Translate a Messages API request body (`POST /v1/messages`).
pub fn to_chat(body: &Value) -> Result<Translated, DialectError> {
    let b = Obj::of(body, "")?;
    check_known(&b, FIELDS)?;
    let mut chat = Map::new();

    let model = b.str("model")?.unwrap_or_default().to_string();
    if !model.is_empty() {
        chat.insert("model".into(), model.clone().into());
    }
    let max_tokens = b
        .positive("max_tokens")?
        .ok_or_else(|| missing("max_tokens"))?;
    chat.insert("max_tokens".into(), max_tokens.into());

    // `cache_control` breakpoints, the request's own first (`cache`).
    let mut bp = Breakpoints::default();
    bp.mark_all(&b)?;
    let mut messages = Vec::new();
    if let Some(s) = system(&b, &mut bp)? {
        messages.push(json!({"role": "system", "content": s}));
    }
    let system_messages = messages.len();
    let list = b.arr("messages")?.ok_or_else(|| missing("messages"))?;
    if list.is_empty() {
        return Err(DialectError::invalid(
            "messages",
            "`messages` must hold at least one message",
        ));
    }
    for (i, m) in list.iter().enumerate() {
        message(m, &idx("messages", i), &mut messages, &mut bp)?;
    }
    let message_count = messages.len();
    chat.insert("messages".into(), Value::Array(messages));

    let mut stop_sequences = Vec::new();
    if let Some(list) = b.arr("stop_sequences")? {
        for (i, s) in list.iter().enumerate() {
            match s {
                Value::String(s) => stop_sequences.push(s.clone()),
                v => return Err(wrong_type(&idx("stop_sequences", i), "a string", v)),
            }
        }
    }
    if !stop_sequences.is_empty() {
        chat.insert("stop".into(), json!(stop_sequences));
    }
    for key in ["temperature", "top_p"] {
        if let Some(v) = b.num(key)? {
            chat.insert(key.into(), v.clone());
        }
    }
    if let Some(k) = b.uint("top_k")? {
        chat.insert("top_k".into(), k.into());
    }
    // Extension (vLLM's `priority`): passed on, checked on the chat path.
    if let Some(p) = b.get("priority") {
        chat.insert("priority".into(), p.clone());
    }
    let stream = b.bool("stream")?.unwrap_or(false);
    if stream {
        chat.insert("stream".into(), true.into());
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(list) = b.arr("tools")? {
        let tools = list
            .iter()
            .enumerate()
            .map(|(i, t)| tool(t, &idx("tools", i), &mut bp, system_messages))
            .collect::<R<Vec<_>>>()?;
        if !tools.is_empty() {
            chat.insert("tools".into(), Value::Array(tools));
        }
    }
    if let Some(c) = b.obj("tool_choice")? {
        tool_choice(&c, &mut chat)?;
    }
    let thinking = match b.obj("thinking")? {
        None => None,
        Some(t) => Some(thinking_flag(&t)?),
    };
    let mut kwargs = Map::new();
    if let Some(on) = thinking {
        kwargs.insert("enable_thinking".into(), on.into());
    }
    output_config(&b, &mut chat)?;
    if !kwargs.is_empty() {
        chat.insert("chat_template_kwargs".into(), Value::Object(kwargs));
    }
    if let Some(m) = b.obj("metadata")? {
        if let Some(u) = m.str("user_id")? {
            chat.insert("user".into(), u.into());
        }
    }
    if let Some(pin) = bp.cache_pin(message_count) {
        chat.insert("cache_pin".into(), pin);
    }
    Ok(Translated {
        chat: Value::Object(chat),
        stream,
        model,
        stop_sequences,
        max_tokens,
        thinking,
    })
}

/// `system`: a string, or text blocks (joined; a breakpoint on one covers
/// the system message).
fn system(b: &Obj, bp: &mut Breakpoints) -> R<Option<String>> {
    let text = match b.get("system") {
        None => return Ok(None),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => {
            let mut parts = Vec::new();
            let mut objs = Vec::new();
            for (i, block) in blocks.iter().enumerate() {
                let o = Obj::of(block, idx("system", i))?;
                match o.req_str("type")? {
                    "text" => parts.push(o.req_str("text")?),
                    other => {
                        return Err(unsupported(
                            &o.path,
                            &format!("a system block of type `{other}`"),
                            " (only `text` blocks are)",
                        ))
                    }
                }
                objs.push(o);
            }
            let text = parts.join(JOIN);
            let covered = usize::from(!text.is_empty());
            for o in &objs {
                bp.mark(o, covered)?;
            }
            text
        }
        Some(v) => {
            return Err(wrong_type(
                "system",
                "a string or an array of text blocks",
                v,
            ))
        }
    };
    Ok((!text.is_empty()).then_some(text))
}

/// One message: a user turn may become tool messages (its `tool_result`
/// blocks, first, in order) and a user message (its text). A block's
/// breakpoint covers the chat message it went into.
fn message(m: &Value, path: &str, out: &mut Vec<Value>, bp: &mut Breakpoints) -> R<()> {
    let o = Obj::of(m, path)?;
    let role = o.req_str("role")?;
    if !matches!(role, "user" | "assistant") {
        return Err(DialectError::invalid(
            o.p("role"),
            format!(
                "`{}` must be `user` or `assistant`, got `{role}`",
                o.p("role")
            ),
        ));
    }
    let content_path = o.p("content");
    let blocks = match o.req("content")? {
        Value::String(s) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Value::Array(blocks) => blocks,
        v => {
            return Err(wrong_type(
                &content_path,
                "a string or an array of content blocks",
                v,
            ))
        }
    };
    if role == "user" {
        user_blocks(blocks, &content_path, out, bp)
    } else {
        assistant_blocks(blocks, &content_path, out, bp)
    }
}

fn user_blocks(blocks: &[Value], path: &str, out: &mut Vec<Value>, bp: &mut Breakpoints) -> R<()> {
    let mut texts = Vec::new();
    // With an image: the message's parts in order (texts joined between).
    let mut parts: Vec<Value> = Vec::new();
    let mut results = 0;
    // The longest TTL of the breakpoints on the user message's blocks.
    let mut pending = None;
    for (j, block) in blocks.iter().enumerate() {
        let b = Obj::of(block, idx(path, j))?;
        let ttl = bp.read(&b)?;
        match b.req_str("type")? {
            "text" => texts.push(b.req_str("text")?),
            "image" => {
                if !texts.is_empty() {
                    parts.push(json!({"type": "text", "text": texts.join(JOIN)}));
                    texts.clear();
                }
                parts.push(image_part(&b)?);
            }
            "tool_result" => {
                let id = b.req_str("tool_use_id")?;
                let (mut content, inner) = tool_result_text(&b, bp)?;
                if b.bool("is_error")? == Some(true) {
                    content.insert_str(0, "Error: ");
                }
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                results += 1;
                if let Some(t) = ttl.max(inner) {
                    bp.keep(t, Some(out.len()));
                }
                continue;
            }
            kind @ ("tool_use" | "thinking" | "redacted_thinking") => {
                return Err(DialectError::invalid(
                    b.path.clone(),
                    format!(
                        "`{}`: a `{kind}` block belongs in an assistant message",
                        b.path
                    ),
                ))
            }
            other => return Err(block_unsupported(&b.path, other)),
        }
        pending = pending.max(ttl);
    }
    if !parts.is_empty() {
        if !texts.is_empty() {
            parts.push(json!({"type": "text", "text": texts.join(JOIN)}));
        }
        out.push(json!({"role": "user", "content": parts}));
    } else if !texts.is_empty() || results == 0 {
        out.push(json!({"role": "user", "content": texts.join(JOIN)}));
    }
    if let Some(t) = pending {
        bp.keep(t, Some(out.len()));
    }
    Ok(())
}

/// An `image` block as a chat `image_url` part: a base64 source as a data
/// URI, a URL source as its URL (which the server takes only where URLs
/// are allowed).
fn image_part(b: &Obj) -> R<Value> {
    let src = b.obj("source")?.ok_or_else(|| missing(&b.p("source")))?;
    let url = match src.req_str("type")? {
        "base64" => format!(
            "data:{};base64,{}",
            src.req_str("media_type")?,
            src.req_str("data")?
        ),
        "url" => src.req_str("url")?.to_string(),
        other => {
            return Err(unsupported(
                &src.p("type"),
                &format!("an image source of type `{other}`"),
                " (send `base64` or `url`)",
            ))
        }
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// A `tool_result`'s `content`: a string or text blocks (absent: empty),
/// and the longest TTL of its blocks' breakpoints.
fn tool_result_text(b: &Obj, bp: &mut Breakpoints) -> R<(String, Option<u64>)> {
    match b.get("content") {
        None => Ok((String::new(), None)),
        Some(Value::String(s)) => Ok((s.clone(), None)),
        Some(Value::Array(parts)) => {
            let path = b.p("content");
            let mut texts = Vec::new();
            let mut ttl = None;
            for (k, part) in parts.iter().enumerate() {
                let p = Obj::of(part, idx(&path, k))?;
                ttl = ttl.max(bp.read(&p)?);
                match p.req_str("type")? {
                    "text" => texts.push(p.req_str("text")?),
                    other => return Err(block_unsupported(&p.path, other)),
                }
            }
            Ok((texts.join(JOIN), ttl))
        }
        Some(v) => Err(wrong_type(
            &b.p("content"),
            "a string or an array of text blocks",
            v,
        )),
    }
}

fn assistant_blocks(
    blocks: &[Value],
    path: &str,
    out: &mut Vec<Value>,
    bp: &mut Breakpoints,
) -> R<()> {
    let mut texts = Vec::new();
    let mut reasoning = Vec::new();
    let mut calls = Vec::new();
    let mut pending = None;
    for (j, block) in blocks.iter().enumerate() {
        let b = Obj::of(block, idx(path, j))?;
        pending = pending.max(bp.read(&b)?);
        match b.req_str("type")? {
            "text" => texts.push(b.req_str("text")?),
            "thinking" => reasoning.push(b.req_str("thinking")?),
            // Encrypted by another server: nothing a local model can read.
            "redacted_thinking" => {}
            "tool_use" => {
                let id = b.req_str("id")?;
                let name = b.req_str("name")?;
                let arguments = match b.get("input") {
                    None => "{}".to_string(),
                    Some(v) => v.to_string(),
                };
                calls.push(json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }));
            }
            "tool_result" => {
                return Err(DialectError::invalid(
                    b.path.clone(),
                    format!(
                        "`{}`: a `tool_result` block belongs in a user message",
                        b.path
                    ),
                ))
            }
            other => return Err(block_unsupported(&b.path, other)),
        }
    }
    let mut m = Map::new();
    m.insert("role".into(), "assistant".into());
    let content = if texts.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        texts.join(JOIN).into()
    };
    m.insert("content".into(), content);
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    if !reasoning.is_empty() {
        m.insert("reasoning_content".into(), reasoning.join(JOIN).into());
    }
    out.push(Value::Object(m));
    if let Some(t) = pending {
        bp.keep(t, Some(out.len()));
    }
    Ok(())
}

fn block_unsupported(path: &str, kind: &str) -> DialectError {
    let why = match kind {
        "image" => TEXT_ONLY,
        "document" | "search_result" | "container_upload" => {
            " by this server: its models read text and images only"
        }
        _ => " by this server",
    };
    unsupported(path, &format!("content block type `{kind}`"), why)
}

/// A client tool as a chat function tool; server tools are refused. Its
/// breakpoint covers the `system` chat messages before the conversation
/// (templates render tools beside the system message).
fn tool(t: &Value, path: &str, bp: &mut Breakpoints, system_messages: usize) -> R<Value> {
    let o = Obj::of(t, path)?;
    bp.mark(&o, system_messages)?;
    if let Some(kind) = o.str("type")? {
        if kind != "custom" {
            return Err(unsupported(
                &o.p("type"),
                &format!("tool type `{kind}`"),
                " by this server (only client tools: `custom` or no `type`)",
            ));
        }
    }
    let name = o.req_str("name")?;
    let mut f = Map::new();
    f.insert("name".into(), name.into());
    if let Some(d) = o.str("description")? {
        f.insert("description".into(), d.into());
    }
    let schema = match o.get("input_schema") {
        None => json!({"type": "object", "properties": {}}),
        Some(s @ Value::Object(_)) => s.clone(),
        Some(v) => return Err(wrong_type(&o.p("input_schema"), "an object", v)),
    };
    f.insert("parameters".into(), schema);
    if let Some(s) = o.bool("strict")? {
        f.insert("strict".into(), s.into());
    }
    Ok(json!({"type": "function", "function": f}))
}

fn tool_choice(c: &Obj, chat: &mut Map<String, Value>) -> R<()> {
    let choice = match c.req_str("type")? {
        "auto" => json!("auto"),
        "any" => json!("required"),
        "none" => json!("none"),
        "tool" => json!({"type": "function", "function": {"name": c.req_str("name")?}}),
        other => {
            return Err(DialectError::invalid(
                c.p("type"),
                format!(
                    "`{}` must be one of auto, any, tool, none; got `{other}`",
                    c.p("type")
                ),
            ))
        }
    };
    chat.insert("tool_choice".into(), choice);
    if c.bool("disable_parallel_tool_use")? == Some(true) {
        chat.insert("parallel_tool_calls".into(), false.into());
    }
    Ok(())
}

/// `thinking`: `enabled` (or `adaptive`) or `disabled`.
fn thinking_flag(t: &Obj) -> R<bool> {
    match t.req_str("type")? {
        "enabled" => {
            t.uint("budget_tokens")?;
            Ok(true)
        }
        "adaptive" => Ok(true),
        "disabled" => Ok(false),
        other => Err(DialectError::invalid(
            t.p("type"),
            format!(
                "`{}` must be `enabled` or `disabled`, got `{other}`",
                t.p("type")
            ),
        )),
    }
}

/// Structured output (`output_format`, or `output_config.format`) and
/// `output_config.effort`.
fn output_config(b: &Obj, chat: &mut Map<String, Value>) -> R<()> {
    let config = b.obj("output_config")?;
    let format = match (b.obj("output_format")?, &config) {
        (Some(f), _) => Some(f),
        (None, Some(c)) => c.obj("format")?,
        (None, None) => None,
    };
    if let Some(f) = format {
        match f.req_str("type")? {
            "json_schema" => {
                let schema = match f.req("schema")? {
                    s @ Value::Object(_) => s.clone(),
                    v => return Err(wrong_type(&f.p("schema"), "an object", v)),
                };
                chat.insert(
                    "response_format".into(),
                    json!({"type": "json_schema",
                           "json_schema": {"name": "output", "schema": schema, "strict": true}}),
                );
            }
            other => {
                return Err(DialectError::invalid(
                    f.p("type"),
                    format!("`{}` must be `json_schema`, got `{other}`", f.p("type")),
                ))
            }
        }
    }
    if let Some(c) = config {
        match c.str("effort")? {
            None => {}
            Some(e @ ("low" | "medium" | "high")) => {
                chat.insert("reasoning_effort".into(), e.into());
            }
            Some("max") => {
                chat.insert("reasoning_effort".into(), "high".into());
            }
            Some(other) => {
                let p = at(&c.path, "effort");
                return Err(DialectError::invalid(
                    p.clone(),
                    format!("`{p}` must be one of low, medium, high, max; got `{other}`"),
                ));
            }
        }
    }
    Ok(())
}
