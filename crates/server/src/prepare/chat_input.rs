//! A chat request's prompt as the template gets it: OpenAI messages as
//! Hugging Face dicts, and the template fields (`chat_template_kwargs`,
//! `enable_thinking`, `reasoning_effort`, `add_generation_prompt`,
//! `continue_final_message`, `reasoning_format`, `chat_template_name`).

use serde_json::Value;
use steward_engine::chat::ChatPrompt;
use steward_engine::prepare::media::MEDIA_MARKER;
use steward_protocol::{ChatCompletionRequest, ContentPart, MessageContent};

use super::limits::Limits;
use super::media::{Collector, MediaPart};
use crate::http::error::ApiError;

/// The prompt, whether reasoning is split out of the reply, and its media
/// parts (each a `MEDIA_MARKER` in its message's text, in order; decoded
/// later by `media::resolve`).
pub fn prompt(
    r: &mut ChatCompletionRequest,
    tools: Option<Value>,
    l: &Limits,
) -> Result<(ChatPrompt, bool, Vec<MediaPart>), ApiError> {
    let mut messages = Vec::with_capacity(r.messages.len());
    let mut media = Collector::new(&l.media);
    for (i, m) in std::mem::take(&mut r.messages).into_iter().enumerate() {
        messages.push(hf_message(i, m, &mut media)?);
    }
    let media = media.parts;
    let flag = |v: Option<Value>, name: &str| -> Result<Option<bool>, ApiError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(ApiError::invalid_value(
                format!("`{name}` must be a boolean"),
                name,
            )),
        }
    };
    let mut kwargs = match r.chat_template_kwargs.take() {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(o)) => o,
        Some(_) => {
            return Err(ApiError::invalid_value(
                "`chat_template_kwargs` must be an object",
                "chat_template_kwargs",
            ))
        }
    };
    let depth = super::limits::json_depth(&Value::Object(kwargs.clone()));
    if depth > l.max_schema_depth {
        return Err(ApiError::invalid_value(
            format!(
                "`chat_template_kwargs` nests {depth} levels deep; the limit is {} (--max-schema-depth)",
                l.max_schema_depth
            ),
            "chat_template_kwargs",
        ));
    }
    if let Some(t) = flag(r.enable_thinking.take(), "enable_thinking")? {
        kwargs.entry("enable_thinking").or_insert(t.into());
        kwargs.entry("thinking").or_insert(t.into());
    }
    match r.reasoning_effort.take() {
        None | Some(Value::Null) => {}
        Some(Value::String(e)) if matches!(e.as_str(), "minimal" | "low" | "medium" | "high") => {
            kwargs.entry("reasoning_effort").or_insert(e.into());
        }
        Some(_) => {
            return Err(ApiError::invalid_value(
                "`reasoning_effort` must be one of minimal, low, medium, high",
                "reasoning_effort",
            ))
        }
    }
    let reasoning = match r.reasoning_format.take() {
        None | Some(Value::Null) => true,
        Some(Value::String(f)) if f == "none" => false,
        Some(Value::String(f)) if matches!(f.as_str(), "auto" | "deepseek" | "parsed") => true,
        Some(_) => {
            return Err(ApiError::invalid_value(
                "`reasoning_format` must be one of auto, none",
                "reasoning_format",
            ))
        }
    };
    // A final assistant message is continued (prefill) unless told otherwise.
    let last_assistant = messages.last().is_some_and(|m| m["role"] == "assistant");
    let agp = flag(r.add_generation_prompt.take(), "add_generation_prompt")?;
    let cfm = flag(r.continue_final_message.take(), "continue_final_message")?;
    let (add_generation_prompt, continue_final_message) = match (agp, cfm) {
        (None, None) => (!last_assistant, last_assistant),
        (Some(a), None) => (a, !a && last_assistant),
        (None, Some(c)) => (!c, c),
        (Some(a), Some(c)) => (a, c),
    };
    let variant = match r.chat_template_name.take() {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) => Some(n),
        Some(_) => {
            return Err(ApiError::invalid_value(
                "`chat_template_name` must be a string",
                "chat_template_name",
            ))
        }
    };
    let prompt = ChatPrompt {
        messages,
        tools,
        kwargs,
        add_generation_prompt,
        continue_final_message,
        variant,
        media: Vec::new(),
    };
    Ok((prompt, reasoning, media))
}

/// One OpenAI message as the Hugging Face dict templates read: the same
/// keys, text parts joined (a media part is the media marker where it
/// was), call `arguments` parsed into objects, the reasoning under
/// `reasoning_content`.
fn hf_message(
    i: usize,
    m: steward_protocol::ChatMessage,
    media: &mut Collector,
) -> Result<Value, ApiError> {
    let param = format!("messages[{i}]");
    if !matches!(
        m.role.as_str(),
        "system" | "user" | "assistant" | "developer" | "tool"
    ) {
        return Err(ApiError::invalid_value(
            format!(
                "{param}.role must be one of system, developer, user, assistant, tool; got `{}`",
                m.role
            ),
            &format!("{param}.role"),
        ));
    }
    let tool_calls = match (m.role.as_str(), m.tool_calls) {
        (_, None | Some(Value::Null)) => None,
        ("assistant", Some(Value::Array(calls))) => {
            Some(template_calls(calls, &format!("{param}.tool_calls"))?)
        }
        _ => {
            return Err(ApiError::invalid_value(
                format!("{param}.tool_calls must be an array on an assistant message"),
                &format!("{param}.tool_calls"),
            ))
        }
    };
    let content = match m.content {
        None => Value::Null,
        Some(MessageContent::Text(t)) => Value::String(t),
        Some(MessageContent::Parts(parts)) => Value::String(parts_text(&param, parts, media)?),
    };
    // An assistant turn that only called tools: content "" (OpenAI clients
    // send null; many templates read `message.content` unguarded, and
    // transformers drops a null key, so they would fail on every tool turn).
    let content = match (&content, &tool_calls) {
        (Value::Null, Some(_)) => Value::String(String::new()),
        _ => content,
    };
    let mut o = serde_json::Map::new();
    o.insert("role".into(), m.role.into());
    o.insert("content".into(), content);
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            o.insert(k.into(), v);
        }
    };
    put("name", m.name.map(Value::String));
    put("tool_calls", tool_calls.map(Value::Array));
    put("tool_call_id", m.tool_call_id.map(Value::String));
    put(
        "reasoning_content",
        m.reasoning_content
            .or(m.thinking)
            .or(m.reasoning)
            .map(Value::String),
    );
    Ok(Value::Object(o))
}

/// A message's content parts as one text: text parts joined, each image
/// or audio part the media marker (its bytes to `media`).
fn parts_text(
    param: &str,
    parts: Vec<ContentPart>,
    media: &mut Collector,
) -> Result<String, ApiError> {
    let mut s = String::new();
    for (j, p) in parts.into_iter().enumerate() {
        let label = format!("{param}.content[{j}]");
        match (p.kind.as_str(), p.text, p.image_url, p.input_audio) {
            ("text", Some(t), ..) => s.push_str(&t),
            ("text", None, ..) => {
                return Err(ApiError::invalid_value(
                    format!("{label}: a `text` part needs a string `text`"),
                    &format!("{param}.content"),
                ))
            }
            ("image_url", _, Some(u), _) => {
                media.image(label, u.into_url())?;
                s.push_str(MEDIA_MARKER);
            }
            ("input_audio", _, _, Some(a)) => {
                media.audio(label, a.data, a.format)?;
                s.push_str(MEDIA_MARKER);
            }
            (kind @ ("image_url" | "input_audio"), ..) => {
                return Err(ApiError::invalid_value(
                    format!("{label}: an `{kind}` part needs its `{kind}` object"),
                    &label,
                ))
            }
            (kind, ..) => {
                return Err(ApiError::unsupported(
                    format!("{label}: content part type `{kind}` is not supported (text, image_url, input_audio are)"),
                    &format!("{param}.content"),
                ))
            }
        }
    }
    Ok(s)
}

/// Assistant `tool_calls`, checked (each names its function).
fn template_calls(calls: Vec<Value>, param: &str) -> Result<Vec<Value>, ApiError> {
    calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            // `arguments` stay as sent: the template's own convention
            // (objects, or text for a few) is applied by
            // `steward_formats::adapt::fit`.
            if c["function"]["name"].is_string() {
                Ok(c)
            } else {
                Err(ApiError::invalid_value(
                    format!("{param}[{i}].function must have a string `name`"),
                    param,
                ))
            }
        })
        .collect()
}
