//! Chat templates rendered as transformers' `apply_chat_template` renders
//! them (the environment in `env`; Python's JSON and printing in
//! `pyjson`; `strftime_now` in `strftime`).
//!
//! A model carries one default template and possibly named variants
//! (GGUF `tokenizer.chat_template.<name>`, transformers' dict of
//! templates): `tool_use` is chosen when the request sends `tools`, a
//! name asks for one explicitly, otherwise the default. The template sees
//! `messages`, `tools` (`None` when absent, as in Python),
//! `documents`, `add_generation_prompt` and every keyword argument (the
//! special tokens' texts and the request's `chat_template_kwargs`).
//! `continue_final_message` cuts the render after the final message's
//! text, exactly as transformers does.

pub(crate) mod env;
mod literals;
pub mod pyjson;
pub mod strftime;

pub use env::FUEL;

use minijinja::{Environment, ErrorKind, Value};
use serde_json::{Map, Value as Json};

/// The names a render passes itself; a keyword argument may not reuse one.
pub const RESERVED: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TemplateError {
    /// The template's source does not compile (a startup error).
    #[error("chat template {name:?} does not compile: {msg}")]
    Compile { name: String, msg: String },
    /// The template refused the conversation (`raise_exception`) or failed
    /// on it; transformers raises for the same input.
    #[error("{0}")]
    Render(String),
    /// The request asks for something no render can give.
    #[error("{0}")]
    Input(String),
}

/// What one render is given.
#[derive(Debug, Clone)]
pub struct RenderArgs<'a> {
    /// Hugging Face message dicts (`role`, `content`, `tool_calls` with
    /// `arguments` as objects, `tool_call_id`, `name`, `reasoning_content`).
    pub messages: &'a [Json],
    pub tools: Option<&'a Json>,
    pub documents: Option<&'a Json>,
    pub add_generation_prompt: bool,
    pub continue_final_message: bool,
    /// Keyword arguments: special tokens (`bos_token`, `eos_token`, …) and
    /// the request's `chat_template_kwargs`, later keys winning.
    pub kwargs: &'a Map<String, Json>,
    /// A named variant (`tool_use`, `rag`, …); `None`: transformers' choice.
    pub variant: Option<&'a str>,
}

static NO_KWARGS: std::sync::LazyLock<Map<String, Json>> = std::sync::LazyLock::new(Map::new);

impl Default for RenderArgs<'_> {
    fn default() -> Self {
        RenderArgs {
            messages: &[],
            tools: None,
            documents: None,
            add_generation_prompt: false,
            continue_final_message: false,
            kwargs: &NO_KWARGS,
            variant: None,
        }
    }
}

/// One model's templates, compiled.
pub struct ChatTemplates {
    env: Environment<'static>,
    names: Vec<String>,
    has_default: bool,
    default_source: String,
}

impl std::fmt::Debug for ChatTemplates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplates")
            .field("variants", &self.names)
            .finish()
    }
}

impl ChatTemplates {
    /// Compile the default template and the named variants; the first that
    /// does not compile is the error.
    pub fn new(
        default: Option<&str>,
        variants: &[(String, String)],
    ) -> Result<Self, TemplateError> {
        let mut env = env::environment();
        // String literals as Jinja2 reads them (`literals`), then the
        // `{% generation %}` blocks.
        let compile = |env: &mut Environment<'static>, name: &str, src: &str| {
            let src = generation_blocks(&literals::python_literals(src));
            env.add_template_owned(name.to_string(), src)
                .map_err(|e| TemplateError::Compile {
                    name: name.to_string(),
                    msg: detail(&e),
                })
        };
        if let Some(src) = default {
            compile(&mut env, "default", src)?;
        }
        let mut names = Vec::new();
        for (name, src) in variants {
            if name == "default" {
                continue;
            }
            compile(&mut env, name, src)?;
            names.push(name.clone());
        }
        if default.is_none() && names.is_empty() {
            return Err(TemplateError::Input("no chat template".into()));
        }
        Ok(ChatTemplates {
            env,
            names,
            has_default: default.is_some(),
            default_source: default.unwrap_or_default().to_string(),
        })
    }

    /// The default template's text (family detection reads it).
    pub fn default_source(&self) -> &str {
        &self.default_source
    }

    /// The named variants (besides the default).
    pub fn variants(&self) -> &[String] {
        &self.names
    }

    /// The source of the template a render with these arguments uses.
    pub fn source_for(&self, variant: Option<&str>, tools: bool) -> Option<String> {
        let name = self.choose(variant, tools).ok()?;
        self.env
            .get_template(name)
            .ok()
            .map(|t| t.source().to_string())
    }

    /// transformers' choice: the name asked for; else `tool_use` when tools
    /// are sent and the model has it; else the default.
    fn choose<'s>(
        &'s self,
        variant: Option<&'s str>,
        tools: bool,
    ) -> Result<&'s str, TemplateError> {
        match variant {
            Some("default") if self.has_default => Ok("default"),
            Some(v) if self.names.iter().any(|n| n == v) => Ok(v),
            Some(v) => Err(TemplateError::Input(format!(
                "the model has no chat template named {v:?} (it has: {})",
                std::iter::once("default")
                    .filter(|_| self.has_default)
                    .chain(self.names.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
            None if tools && self.names.iter().any(|n| n == "tool_use") => Ok("tool_use"),
            None if self.has_default => Ok("default"),
            None => Err(TemplateError::Input(
                "the model has no default chat template; name one of its variants".into(),
            )),
        }
    }

    pub fn render(&self, a: &RenderArgs) -> Result<String, TemplateError> {
        if a.add_generation_prompt && a.continue_final_message {
            return Err(TemplateError::Input(
                "continue_final_message and add_generation_prompt are not compatible: use \
                 continue_final_message to continue a final assistant message, \
                 add_generation_prompt to start a new one"
                    .into(),
            ));
        }
        if let Some(k) = RESERVED.iter().find(|k| a.kwargs.contains_key(**k)) {
            return Err(TemplateError::Input(format!(
                "chat_template_kwargs may not set {k:?}: Steward passes it itself"
            )));
        }
        let name = self.choose(a.variant, a.tools.is_some())?;
        let tmpl = self
            .env
            .get_template(name)
            .map_err(|e| TemplateError::Render(detail(&e)))?;
        let mut messages = normalize(a.messages);
        let final_text = if a.continue_final_message {
            Some(tag_final(&mut messages, tmpl.source())?)
        } else {
            None
        };
        let mut ctx: Vec<(String, Value)> = a
            .kwargs
            .iter()
            .map(|(k, v)| (k.clone(), Value::from_serialize(v)))
            .collect();
        let opt = |v: Option<&Json>| v.map(Value::from_serialize).unwrap_or_else(env::py_none);
        ctx.push(("messages".into(), Value::from_serialize(&messages)));
        ctx.push(("tools".into(), opt(a.tools)));
        ctx.push(("documents".into(), opt(a.documents)));
        ctx.push((
            "add_generation_prompt".into(),
            Value::from(a.add_generation_prompt),
        ));
        let ctx = Value::from_iter(ctx);
        let rendered = tmpl
            .render(ctx)
            .map_err(|e| TemplateError::Render(detail(&e)))?;
        match final_text {
            Some(text) => cut_at_tag(rendered, &text),
            None => Ok(rendered),
        }
    }
}

/// transformers' message normalization: keys whose value is `None` are
/// dropped (templates handle a missing key, not a `None`); a message's
/// reasoning (`reasoning_content`, `thinking` or `reasoning`, first
/// present) is given under `thinking` (first) and `reasoning_content`.
fn normalize(messages: &[Json]) -> Vec<Json> {
    messages
        .iter()
        .map(|m| {
            let Json::Object(o) = m else {
                return m.clone();
            };
            let mut o: Map<String, Json> = o
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let reasoning = ["reasoning_content", "thinking", "reasoning"]
                .iter()
                .find_map(|k| o.get(*k).cloned());
            if let Some(r) = reasoning {
                let mut out = Map::new();
                out.insert("thinking".into(), r.clone());
                for (k, v) in o {
                    out.insert(k, v);
                }
                out.insert("reasoning_content".into(), r);
                o = out;
            }
            Json::Object(o)
        })
        .collect()
}

/// transformers marks the final message's text with this tag, renders, and
/// cuts the render at the tag.
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// Tag the final message's `content` (its last text block when it is a
/// list); the text to continue is returned.
fn tag_final(messages: &mut [Json], source: &str) -> Result<String, TemplateError> {
    let input = |m: &str| TemplateError::Input(m.to_string());
    let last = messages
        .last_mut()
        .ok_or_else(|| input("continue_final_message is set but the conversation is empty"))?;
    let content = last.get_mut("content").ok_or_else(|| {
        input("continue_final_message is set but the final message has no \"content\" to continue")
    })?;
    if !source.contains("content") {
        return Err(input(
            "continue_final_message is set to \"content\" but this is not an accepted field in the chat_template",
        ));
    }
    match content {
        Json::String(s) => {
            let text = s.clone();
            s.push_str(CONTINUE_TAG);
            Ok(text)
        }
        Json::Array(blocks) => {
            for b in blocks.iter_mut().rev() {
                if let Some(Json::String(t)) = b.get_mut("text") {
                    let text = t.clone();
                    t.push_str(CONTINUE_TAG);
                    return Ok(text);
                }
            }
            Err(input(
                "continue_final_message is set but we could not find any text to continue in the final message",
            ))
        }
        _ => Err(input(
            "continue_final_message: the final message's content is not text",
        )),
    }
}

fn cut_at_tag(rendered: String, text: &str) -> Result<String, TemplateError> {
    let tag = CONTINUE_TAG.trim();
    if !rendered.contains(text.trim()) || !rendered.contains(tag) {
        return Err(TemplateError::Render(
            "continue_final_message is set but the final message does not appear in the chat \
             after applying the chat template (the template deletes portions of it)"
                .into(),
        ));
    }
    let at = rendered.rfind(tag).unwrap_or(rendered.len());
    let exact = rendered[at..].starts_with(CONTINUE_TAG);
    let mut r = rendered;
    r.truncate(at);
    if !exact {
        let keep = r.trim_end().len();
        r.truncate(keep);
    }
    Ok(r)
}

/// transformers' `{% generation %}…{% endgeneration %}` (it marks the
/// assistant's tokens for training masks and renders its body as is) as an
/// always-true `if`, whitespace control kept.
fn generation_blocks(src: &str) -> String {
    if !src.contains("generation") {
        return src.to_string();
    }
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            rest = "";
            break;
        };
        let inner = &tag[2..end];
        let (lead, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, trail) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[b.len()..]),
            None => (body, ""),
        };
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{lead} if true {trail}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{lead} endif {trail}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// A template error in one line: its message and where it happened.
fn detail(e: &minijinja::Error) -> String {
    let mut s = match e.kind() {
        ErrorKind::InvalidOperation => e.detail().unwrap_or("invalid operation").to_string(),
        _ => e.to_string(),
    };
    if let (Some(line), ErrorKind::InvalidOperation) = (e.line(), e.kind()) {
        s.push_str(&format!(" (template line {line})"));
    }
    if e.kind() == ErrorKind::OutOfFuel {
        s = "the chat template ran past its instruction budget".into();
    }
    s
}

#[cfg(test)]
mod tests;
