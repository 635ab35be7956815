//! A Responses API request as a chat-completions request body, its input
//! items normalized (for the store), and the fields its response repeats.

use serde_json::{json, Map, Value};

use super::items::{input, Conversation};
use super::Stored;
use crate::error::DialectError;
use crate::fields::{check_known, empty_list, idx, unsupported, wrong_type, Known, Obj, Rule, R};

/// What `to_chat` made of a Responses request.
#[derive(Debug, Clone, PartialEq)]
pub struct RTranslated {
    /// The chat-completions request body.
    pub chat: Value,
    pub stream: bool,
    /// Keep the response (`store`, default true).
    pub store: bool,
    /// The requested model (empty when the request named none).
    pub model: String,
    pub previous_response_id: Option<String>,
    /// This request's input as items, each with an `id` and a `type`
    /// (`message`, `function_call`, `function_call_output`, `reasoning`).
    pub input_items: Vec<Value>,
    /// The request fields the response object repeats.
    pub echo: Echo,
}

/// The request fields a Response object repeats, with the API's defaults
/// for those the request left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Echo {
    pub instructions: Value,
    pub tools: Value,
    pub tool_choice: Value,
    pub text: Value,
    pub temperature: Value,
    pub top_p: Value,
    pub max_output_tokens: Value,
    pub metadata: Value,
    pub reasoning: Value,
    pub parallel_tool_calls: Value,
    pub store: bool,
    pub truncation: Value,
    pub user: Value,
}

/// Translate a Responses API request body (`POST /v1/responses`).
/// `previous`: the stored response `previous_response_id` names (the
/// server looks it up); its conversation comes before this input. Its
/// `instructions` are not carried over.
pub fn to_chat(body: &Value, previous: Option<&Stored>) -> Result<RTranslated, DialectError> {
    let b = Obj::of(body, "")?;
    check_known(&b, FIELDS)?;
    let mut chat = Map::new();
    let model = b.str("model")?.unwrap_or_default().to_string();
    if !model.is_empty() {
        chat.insert("model".into(), model.clone().into());
    }
    let previous_response_id = b.str("previous_response_id")?.map(str::to_string);
    if let (Some(id), None) = (&previous_response_id, previous) {
        let shown: String = id.chars().take(128).collect();
        return Err(DialectError::not_found(
            Some("previous_response_id"),
            format!("Previous response with id '{shown}' not found."),
        ));
    }
    let history = previous.map_or(&[][..], |p| &p.conversation[..]);
    let input_items = input(&b, previous_response_id.as_deref(), history.len())?;
    let instructions = b.str("instructions")?;
    chat.insert(
        "messages".into(),
        messages(history, &input_items, instructions)?,
    );
    // The model always answers in a new turn: a final assistant item is
    // history, not a prefix to continue.
    chat.insert("add_generation_prompt".into(), true.into());
    let sampling = sampling(&b, &mut chat)?;
    let (tools, tool_choice, parallel) = tools(&b, &mut chat)?;
    let (text, reasoning) = output_format(&b, &mut chat)?;
    let metadata = metadata(&b)?;
    let user = b.str("user")?;
    if let Some(u) = user {
        chat.insert("user".into(), u.into());
    }
    let truncation = truncation(&b)?;
    include(&b)?;
    let echo = Echo {
        instructions: instructions.map_or(Value::Null, Value::from),
        tools: Value::Array(tools),
        tool_choice,
        text,
        temperature: sampling.temperature.unwrap_or(Value::Null),
        top_p: sampling.top_p.unwrap_or(Value::Null),
        max_output_tokens: sampling.max_output_tokens.map_or(Value::Null, Value::from),
        metadata,
        reasoning,
        parallel_tool_calls: parallel.unwrap_or(true).into(),
        store: sampling.store,
        truncation: truncation.into(),
        user: user.map_or(Value::Null, Value::from),
    };
    Ok(RTranslated {
        chat: Value::Object(chat),
        stream: sampling.stream,
        store: sampling.store,
        model,
        previous_response_id,
        input_items,
        echo,
    })
}

/// The Responses API's top-level fields (the Python SDK's
/// `ResponseCreateParams`) and what this server does with each;
/// docs/LIMITS.md's table says why.
pub(crate) const FIELDS: &Known = &[
    ("model", Rule::Honoured),
    ("input", Rule::Honoured),
    ("instructions", Rule::Honoured),
    ("previous_response_id", Rule::Honoured),
    ("max_output_tokens", Rule::Honoured),
    ("temperature", Rule::Honoured),
    ("top_p", Rule::Honoured),
    ("stream", Rule::Honoured),
    ("store", Rule::Honoured),
    ("tools", Rule::Honoured),
    ("tool_choice", Rule::Honoured),
    ("parallel_tool_calls", Rule::Honoured),
    ("text", Rule::Honoured),
    ("reasoning", Rule::Honoured),
    ("metadata", Rule::Honoured),
    ("user", Rule::Honoured),
    ("truncation", Rule::Honoured),
    ("include", Rule::Honoured),
    ("priority", Rule::Honoured),
    ("service_tier", Rule::Ignored),
    ("safety_identifier", Rule::Ignored),
    ("prompt_cache_key", Rule::Honoured),
    ("prompt_cache_retention", Rule::Honoured),
    ("prompt_cache_options", Rule::Ignored),
    ("stream_options", Rule::Ignored),
    ("max_tool_calls", Rule::Ignored),
    ("access_programs", Rule::Ignored),
    ("background_options", Rule::Ignored),
    (
        "background",
        Rule::RefusedUnless(|v| v == false, " by this server: a response is answered while the request waits"),
    ),
    (
        "conversation",
        Rule::Refused(" by this server: it keeps no conversations (`previous_response_id` continues a stored response)"),
    ),
    ("prompt", Rule::Refused(" by this server: it stores no prompt templates")),
    (
        "context_management",
        Rule::RefusedUnless(empty_list, " by this server: it never compacts the conversation it is sent"),
    ),
    ("moderation", Rule::Refused(" by this server: it runs no moderation model")),
    (
        "image",
        Rule::RefusedUnless(
            |v| v["context_compression"] != "enabled",
            " with `context_compression: enabled` by this server: it does not compress images",
        ),
    ),
    (
        "top_logprobs",
        Rule::RefusedUnless(|v| v == 0, " by this server's Responses API: its output carries no logprobs"),
    ),
];

/// `include`: the API's values; those whose data this server's output
/// holds anyway (or never has) are taken, logprobs refused.
fn include(b: &Obj) -> R<()> {
    let Some(list) = b.arr("include")? else {
        return Ok(());
    };
    for (i, v) in list.iter().enumerate() {
        let path = idx("include", i);
        match v.as_str() {
            None => return Err(wrong_type(&path, "a string", v)),
            Some(
                "reasoning.encrypted_content"
                | "message.input_image.image_url"
                | "file_search_call.results"
                | "web_search_call.results"
                | "web_search_call.action.sources"
                | "computer_call_output.output.image_url"
                | "code_interpreter_call.outputs",
            ) => {}
            Some("message.output_text.logprobs") => {
                return Err(unsupported(
                    &path,
                    "`message.output_text.logprobs`",
                    " by this server's Responses API: its output carries no logprobs",
                ))
            }
            Some(other) => {
                let shown: String = other.chars().take(64).collect();
                return Err(DialectError::invalid(
                    path.clone(),
                    format!("`{path}`: `{shown}` is not a value `include` takes"),
                ));
            }
        }
    }
    Ok(())
}

/// The chat messages: the instructions, then the previous conversation's
/// items and this input's.
fn messages(history: &[Value], input_items: &[Value], instructions: Option<&str>) -> R<Value> {
    let mut messages = Vec::new();
    if let Some(i) = instructions.filter(|i| !i.is_empty()) {
        messages.push(json!({"role": "system", "content": i}));
    }
    let mut conv = Conversation::default();
    for item in history.iter().chain(input_items) {
        conv.push(item, &mut messages);
    }
    if !messages.iter().any(|m| m["role"] != "system") {
        return Err(DialectError::invalid("input", "`input` is required"));
    }
    Ok(Value::Array(messages))
}

/// The sampling and delivery fields, as the request gave them.
struct Sampling {
    max_output_tokens: Option<u64>,
    temperature: Option<Value>,
    top_p: Option<Value>,
    stream: bool,
    store: bool,
}

fn sampling(b: &Obj, chat: &mut Map<String, Value>) -> R<Sampling> {
    let max_output_tokens = b.positive("max_output_tokens")?;
    if let Some(n) = max_output_tokens {
        chat.insert("max_tokens".into(), n.into());
    }
    let temperature = b.num("temperature")?.cloned();
    let top_p = b.num("top_p")?.cloned();
    for (k, v) in [("temperature", &temperature), ("top_p", &top_p)] {
        if let Some(v) = v {
            chat.insert(k.into(), v.clone());
        }
    }
    let stream = b.bool("stream")?.unwrap_or(false);
    if stream {
        chat.insert("stream".into(), true.into());
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    let store = b.bool("store")?.unwrap_or(true);
    // Extension (vLLM's `priority`), and a pin of the prompt asked for
    // (`prompt_cache_key`, `prompt_cache_retention`): passed on, checked
    // on the chat path.
    for key in ["priority", "prompt_cache_key", "prompt_cache_retention"] {
        if let Some(v) = b.get(key) {
            chat.insert(key.into(), v.clone());
        }
    }
    Ok(Sampling {
        max_output_tokens,
        temperature,
        top_p,
        stream,
        store,
    })
}

/// The tools, `tool_choice` and `parallel_tool_calls` into the chat body;
/// returned as given (for the echo).
fn tools(b: &Obj, chat: &mut Map<String, Value>) -> R<(Vec<Value>, Value, Option<bool>)> {
    let tools = match b.arr("tools")? {
        None => Vec::new(),
        Some(list) => list.clone(),
    };
    let chat_tools = tools
        .iter()
        .enumerate()
        .map(|(i, t)| tool(t, &idx("tools", i)))
        .collect::<R<Vec<_>>>()?;
    if !chat_tools.is_empty() {
        chat.insert("tools".into(), Value::Array(chat_tools));
    }
    let tool_choice = match b.get("tool_choice") {
        None => json!("auto"),
        Some(c) => {
            chat.insert("tool_choice".into(), tool_choice(c)?);
            c.clone()
        }
    };
    let parallel = b.bool("parallel_tool_calls")?;
    if let Some(p) = parallel {
        chat.insert("parallel_tool_calls".into(), p.into());
    }
    Ok((tools, tool_choice, parallel))
}

/// `text` (the output format) and `reasoning` into the chat body; their
/// echoes.
fn output_format(b: &Obj, chat: &mut Map<String, Value>) -> R<(Value, Value)> {
    let text = match b.obj("text")? {
        None => json!({"format": {"type": "text"}}),
        Some(t) => {
            if let Some(f) = text_format(&t)? {
                chat.insert("response_format".into(), f);
            }
            Value::Object(t.map.clone())
        }
    };
    let reasoning = match b.obj("reasoning")? {
        None => json!({"effort": null, "summary": null}),
        Some(r) => {
            reasoning_effort(&r, chat)?;
            let mut echo = r.map.clone();
            echo.entry("effort").or_insert(Value::Null);
            echo.entry("summary").or_insert(Value::Null);
            Value::Object(echo)
        }
    };
    Ok((text, reasoning))
}

fn truncation(b: &Obj) -> R<&'static str> {
    match b.str("truncation")? {
        None | Some("disabled") => Ok("disabled"),
        Some("auto") => Ok("auto"),
        Some(other) => Err(DialectError::invalid(
            "truncation",
            format!("`truncation` must be `disabled` or `auto`, got `{other}`"),
        )),
    }
}

/// A function tool as a chat tool; other tool types are refused.
fn tool(t: &Value, path: &str) -> R<Value> {
    let o = Obj::of(t, path)?;
    match o.req_str("type")? {
        "function" => {}
        other => {
            return Err(unsupported(
                &o.p("type"),
                &format!("tool type `{other}`"),
                " by this server (only `function` tools are)",
            ))
        }
    }
    let mut f = Map::new();
    f.insert("name".into(), o.req_str("name")?.into());
    if let Some(d) = o.str("description")? {
        f.insert("description".into(), d.into());
    }
    let parameters = match o.get("parameters") {
        None => json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(v) => return Err(wrong_type(&o.p("parameters"), "an object", v)),
    };
    f.insert("parameters".into(), parameters);
    if let Some(s) = o.bool("strict")? {
        f.insert("strict".into(), s.into());
    }
    Ok(json!({"type": "function", "function": f}))
}

fn tool_choice(c: &Value) -> R<Value> {
    match c {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => Ok(c.clone()),
        Value::String(s) => Err(DialectError::invalid(
            "tool_choice",
            format!("`tool_choice` must be one of auto, none, required, or a function; got `{s}`"),
        )),
        Value::Object(_) => {
            let o = Obj::of(c, "tool_choice")?;
            match o.req_str("type")? {
                "function" => Ok(json!({"type": "function",
                                        "function": {"name": o.req_str("name")?}})),
                other => Err(unsupported(
                    &o.p("type"),
                    &format!("tool_choice type `{other}`"),
                    " by this server",
                )),
            }
        }
        v => Err(wrong_type("tool_choice", "a string or an object", v)),
    }
}

/// `text.format` as a chat `response_format` (`None` for plain text).
fn text_format(t: &Obj) -> R<Option<Value>> {
    let Some(f) = t.obj("format")? else {
        return Ok(None);
    };
    match f.req_str("type")? {
        "text" => Ok(None),
        "json_object" => Ok(Some(json!({"type": "json_object"}))),
        "json_schema" => {
            let schema = match f.req("schema")? {
                s @ Value::Object(_) => s.clone(),
                v => return Err(wrong_type(&f.p("schema"), "an object", v)),
            };
            let mut js = Map::new();
            js.insert("name".into(), f.str("name")?.unwrap_or("response").into());
            if let Some(d) = f.str("description")? {
                js.insert("description".into(), d.into());
            }
            js.insert("schema".into(), schema);
            if let Some(s) = f.bool("strict")? {
                js.insert("strict".into(), s.into());
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": js})))
        }
        other => Err(DialectError::invalid(
            f.p("type"),
            format!(
                "`{}` must be one of text, json_object, json_schema; got `{other}`",
                f.p("type")
            ),
        )),
    }
}

/// `reasoning.effort`: `none` turns thinking off; `xhigh` is `high`.
fn reasoning_effort(r: &Obj, chat: &mut Map<String, Value>) -> R<()> {
    match r.str("effort")? {
        None => {}
        Some("none") => {
            chat.insert(
                "chat_template_kwargs".into(),
                json!({"enable_thinking": false}),
            );
        }
        Some(e @ ("minimal" | "low" | "medium" | "high")) => {
            chat.insert("reasoning_effort".into(), e.into());
        }
        Some("xhigh") => {
            chat.insert("reasoning_effort".into(), "high".into());
        }
        Some(other) => {
            return Err(DialectError::invalid(
                r.p("effort"),
                format!(
                    "`{}` must be one of none, minimal, low, medium, high, xhigh; got `{other}`",
                    r.p("effort")
                ),
            ))
        }
    }
    r.str("summary")?;
    Ok(())
}

/// `metadata`: at most 16 string pairs, keys up to 64 characters, values
/// up to 512.
fn metadata(b: &Obj) -> R<Value> {
    let Some(m) = b.obj("metadata")? else {
        return Ok(json!({}));
    };
    if m.map.len() > 16 {
        return Err(DialectError::invalid(
            "metadata",
            format!("`metadata` may hold at most 16 pairs, got {}", m.map.len()),
        ));
    }
    for (k, v) in m.map {
        if k.chars().count() > 64 {
            let shown: String = k.chars().take(64).collect();
            return Err(DialectError::invalid(
                "metadata",
                format!("`metadata` keys may be at most 64 characters; `{shown}…` is longer"),
            ));
        }
        let Value::String(s) = v else {
            return Err(wrong_type(&m.p(k), "a string", v));
        };
        if s.chars().count() > 512 {
            return Err(DialectError::invalid(
                m.p(k),
                format!("`{}` may be at most 512 characters", m.p(k)),
            ));
        }
    }
    Ok(Value::Object(m.map.clone()))
}
