//! Tool calling: the checked `tools` / `tool_choice` plan, the grammar that
//! enforces `required` and named choices, and the parser that reads calls
//! back out of the model's text (one implementation for streamed and
//! non-streamed replies, so both give the same calls).
//!
//! Wire format of a call in the model's output (the Hermes convention, which
//! the chat template is told about; see `steward_engine::prepare`):
//! `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`.

use serde_json::{json, Value};

use crate::error::ApiError;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    Auto,
    Required,
    Named(String),
}

/// What the request asked of tools, checked.
#[derive(Debug, Clone)]
pub struct ToolPlan {
    /// The request's `tools`, as given (rendered by the template).
    pub tools: Value,
    pub choice: Choice,
    pub parallel: bool,
    /// (name, parameters schema) per function.
    pub functions: Vec<(String, Value)>,
}

fn bad(msg: impl Into<String>, param: &str) -> ApiError {
    ApiError::invalid_value(msg, param)
}

/// Check `tools`, `tool_choice` and `parallel_tool_calls`. `None`: the
/// request uses no tools (none given, or `tool_choice: "none"`).
pub fn plan(
    tools: Option<Value>,
    choice: Option<Value>,
    parallel: Option<Value>,
) -> Result<Option<ToolPlan>, ApiError> {
    let parallel = match parallel {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => b,
        Some(_) => {
            return Err(bad(
                "`parallel_tool_calls` must be a boolean",
                "parallel_tool_calls",
            ))
        }
    };
    let tools = match tools {
        None | Some(Value::Null) => Value::Array(vec![]),
        Some(v @ Value::Array(_)) => v,
        Some(_) => return Err(bad("`tools` must be an array", "tools")),
    };
    let mut functions = Vec::new();
    for (i, t) in tools.as_array().into_iter().flatten().enumerate() {
        let p = format!("tools[{i}]");
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(format!("{p}.type must be \"function\""), &p));
        }
        let f = t
            .get("function")
            .filter(|f| f.is_object())
            .ok_or_else(|| bad(format!("{p}.function must be an object"), &p))?;
        let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(bad(
                format!("{p}.function.name must be 1 to 64 letters, digits, `_` or `-`"),
                &format!("{p}.function.name"),
            ));
        }
        if functions.iter().any(|(n, _)| n == name) {
            return Err(bad(
                format!("{p}.function.name `{name}` is defined twice"),
                &format!("{p}.function.name"),
            ));
        }
        let params = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => {
                return Err(bad(
                    format!("{p}.function.parameters must be a JSON schema object"),
                    &format!("{p}.function.parameters"),
                ))
            }
        };
        functions.push((name.to_string(), params));
    }
    let choice = match choice {
        None | Some(Value::Null) => Choice::Auto,
        Some(Value::String(s)) if s == "auto" => Choice::Auto,
        Some(Value::String(s)) if s == "none" => return Ok(None),
        Some(Value::String(s)) if s == "required" => Choice::Required,
        Some(v @ Value::Object(_)) => {
            let name = v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| v.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| {
                    bad(
                        "`tool_choice` object must be {\"type\":\"function\",\"function\":{\"name\":...}}",
                        "tool_choice",
                    )
                })?;
            if !functions.iter().any(|(n, _)| n == name) {
                return Err(bad(
                    format!("`tool_choice` names function `{name}`, which is not in `tools`"),
                    "tool_choice",
                ));
            }
            Choice::Named(name.to_string())
        }
        Some(_) => {
            return Err(bad(
                "`tool_choice` must be \"none\", \"auto\", \"required\" or a named function",
                "tool_choice",
            ))
        }
    };
    if functions.is_empty() {
        return match choice {
            Choice::Auto => Ok(None),
            _ => Err(bad(
                "`tool_choice` requires at least one tool in `tools`",
                "tool_choice",
            )),
        };
    }
    Ok(Some(ToolPlan {
        tools,
        choice,
        parallel,
        functions,
    }))
}

impl ToolPlan {
    /// For `required` and named choices: a Lark grammar whose every
    /// sentence is one call (or several, with `parallel_tool_calls`) whose
    /// arguments match the function's parameter schema.
    pub fn forced_grammar(&self) -> Option<String> {
        let one = |name: &str, params: &Value| {
            json!({
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        };
        let mut schema = match &self.choice {
            Choice::Auto => return None,
            Choice::Named(n) => {
                let (_, p) = self.functions.iter().find(|(f, _)| f == n)?;
                one(n, p)
            }
            Choice::Required if self.functions.len() == 1 => {
                one(&self.functions[0].0, &self.functions[0].1)
            }
            Choice::Required => json!({
                "anyOf": self.functions.iter().map(|(n, p)| one(n, p)).collect::<Vec<_>>()
            }),
        };
        schema["x-guidance"] = json!({
            "whitespace_flexible": false,
            "item_separator": ", ",
            "key_separator": ": ",
        });
        // A named function is called once; `required` may make several
        // calls when parallel calls are allowed.
        let calls = if self.parallel && self.choice == Choice::Required {
            "call (\"\\n\" call)*"
        } else {
            "call"
        };
        Some(format!(
            "start: {calls}\ncall: \"<tool_call>\\n\" %json {schema} \"\\n</tool_call>\"\n"
        ))
    }
}

/// What the parser hands on, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Content(String),
    /// A call begins: its index among this choice's calls and its name.
    CallStart {
        index: u32,
        name: String,
    },
    /// More of the current call's `arguments` JSON text.
    Args {
        index: u32,
        text: String,
    },
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Content,
    /// Inside `<tool_call>`: the body so far.
    Call,
}

/// Incremental parser of calls out of generated text. Text outside calls is
/// content; inside a call, the name is announced as soon as the text before
/// `"arguments":` parses, and the arguments are streamed as written, holding
/// back only what may turn out to be the call object's closing brace.
#[derive(Debug, Default)]
pub struct ToolStream {
    buf: String,
    state: State,
    calls: u32,
    /// Byte offset in `buf` where the arguments begin, once the name is out.
    args_at: Option<usize>,
    emitted: usize,
}

/// `s` minus its longest suffix that is a proper prefix of `tag`.
fn safe_len(s: &str, tag: &str) -> usize {
    for k in (1..tag.len()).rev() {
        if s.len() >= k && s.is_char_boundary(s.len() - k) && tag.starts_with(&s[s.len() - k..]) {
            return s.len() - k;
        }
    }
    s.len()
}

/// The arguments text of a call body from `args_at`: up to (not including)
/// its last `}` (the call object's own), trimmed.
fn args_text(region: &str) -> &str {
    match region.rfind('}') {
        Some(i) => region[..i].trim(),
        None => "",
    }
}

impl ToolStream {
    pub fn calls(&self) -> u32 {
        self.calls
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        self.advance(&mut out, false);
        out
    }

    /// The text ended: flush whatever is held.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        self.advance(&mut out, true);
        out
    }

    fn advance(&mut self, out: &mut Vec<Piece>, end: bool) {
        loop {
            match self.state {
                State::Content => {
                    if let Some(i) = self.buf.find(OPEN) {
                        if i > 0 {
                            out.push(Piece::Content(self.buf[..i].to_string()));
                        }
                        self.buf.drain(..i + OPEN.len());
                        self.state = State::Call;
                        self.args_at = None;
                        self.emitted = 0;
                        continue;
                    }
                    let n = if end {
                        self.buf.len()
                    } else {
                        safe_len(&self.buf, OPEN)
                    };
                    if n > 0 {
                        out.push(Piece::Content(self.buf[..n].to_string()));
                        self.buf.drain(..n);
                    }
                    return;
                }
                State::Call => {
                    let close = self.buf.find(CLOSE);
                    let body_end = close.unwrap_or(self.buf.len());
                    if self.args_at.is_none() {
                        if let Some((name, at)) = find_name(&self.buf[..body_end]) {
                            out.push(Piece::CallStart {
                                index: self.calls,
                                name,
                            });
                            self.args_at = Some(at);
                            self.emitted = 0;
                        }
                    }
                    if close.is_none() && !end {
                        if let Some(a) = self.args_at {
                            let t = args_text(&self.buf[a..]);
                            if t.len() > self.emitted {
                                out.push(Piece::Args {
                                    index: self.calls,
                                    text: t[self.emitted..].to_string(),
                                });
                                self.emitted = t.len();
                            }
                        }
                        return;
                    }
                    // The call is complete (or the text ended inside it).
                    match self.args_at {
                        Some(a) => {
                            let t = args_text(&self.buf[a..body_end]);
                            if t.len() > self.emitted {
                                out.push(Piece::Args {
                                    index: self.calls,
                                    text: t[self.emitted..].to_string(),
                                });
                            }
                            self.calls += 1;
                        }
                        None => {
                            // No name could be read: the block was not a call.
                            let mut s = String::from(OPEN);
                            s.push_str(&self.buf[..body_end]);
                            if close.is_some() {
                                s.push_str(CLOSE);
                            }
                            out.push(Piece::Content(s));
                        }
                    }
                    let rest = close.map_or(self.buf.len(), |c| c + CLOSE.len());
                    self.buf.drain(..rest);
                    self.state = State::Content;
                    self.args_at = None;
                    if end && self.buf.is_empty() {
                        return;
                    }
                }
            }
        }
    }
}

/// The call's name once `{"name": "...", "arguments":` has arrived, and
/// where its arguments begin.
fn find_name(body: &str) -> Option<(String, usize)> {
    let k = body.find("\"arguments\"")?;
    let colon = body[k + 11..].find(':').map(|c| k + 11 + c)?;
    let head = body[..k].trim_end().trim_end_matches(',');
    let v: Value = serde_json::from_str(&format!("{head}}}")).ok()?;
    let name = v.get("name").and_then(Value::as_str)?;
    Some((name.to_string(), colon + 1))
}

/// A whole reply's text, parsed: content (None when empty and there are
/// calls) and the calls as (name, arguments).
pub fn parse_all(text: &str) -> (Option<String>, Vec<(String, String)>) {
    let mut ts = ToolStream::default();
    let mut pieces = ts.push(text);
    pieces.extend(ts.finish());
    let (content, calls) = assemble(pieces);
    let content = if calls.is_empty() {
        Some(content)
    } else {
        Some(content.trim().to_string()).filter(|c| !c.is_empty())
    };
    (content, calls)
}

/// Pieces put back together: all content, and (name, arguments) per call.
fn assemble(pieces: Vec<Piece>) -> (String, Vec<(String, String)>) {
    let mut content = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for p in pieces {
        match p {
            Piece::Content(c) => content.push_str(&c),
            Piece::CallStart { name, .. } => calls.push((name, String::new())),
            Piece::Args { text, .. } => {
                if let Some(c) = calls.last_mut() {
                    c.1.push_str(&text);
                }
            }
        }
    }
    (content, calls)
}

/// A call ID unique to the request, choice and call.
pub fn call_id(request_id: &str, choice: u32, index: u32) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (request_id, choice, index).hash(&mut h);
    format!("call_{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALLS: &str = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": {\"x\": 1}}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";

    #[test]
    fn whole_text_parses_into_calls() {
        let (content, calls) = parse_all(CALLS);
        assert_eq!(content.as_deref(), Some("Sure."));
        assert_eq!(
            calls,
            vec![
                (
                    "get_weather".to_string(),
                    r#"{"city": "Paris", "n": {"x": 1}}"#.to_string()
                ),
                ("f".to_string(), "{}".to_string())
            ]
        );
        let (content, calls) = parse_all("no tools here");
        assert_eq!(content.as_deref(), Some("no tools here"));
        assert!(calls.is_empty());
    }

    #[test]
    fn streamed_in_any_split_gives_the_same_calls() {
        let whole = parse_all(CALLS);
        for step in 1..7 {
            let mut ts = ToolStream::default();
            let mut pieces = Vec::new();
            let chars: Vec<char> = CALLS.chars().collect();
            for c in chars.chunks(step) {
                pieces.extend(ts.push(&c.iter().collect::<String>()));
            }
            pieces.extend(ts.finish());
            // Every piece names the call it belongs to: the next one, or
            // the current one.
            let mut n = 0;
            for p in &pieces {
                match p {
                    Piece::CallStart { index, .. } => {
                        assert_eq!(*index, n);
                        n += 1;
                    }
                    Piece::Args { index, .. } => assert_eq!(*index + 1, n),
                    Piece::Content(_) => {}
                }
            }
            let (content, calls) = assemble(pieces);
            assert_eq!(content.trim(), whole.0.clone().unwrap(), "step {step}");
            assert_eq!(calls, whole.1, "step {step}");
            assert!(
                !content.contains('<'),
                "a tag leaked into content: {content:?}"
            );
        }
    }

    #[test]
    fn unparseable_block_stays_content() {
        let (content, calls) = parse_all("<tool_call>oops</tool_call> done");
        assert!(calls.is_empty());
        assert_eq!(content.as_deref(), Some("<tool_call>oops</tool_call> done"));
    }

    #[test]
    fn plan_checks_and_grammar() {
        let tools = json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
        assert!(plan(Some(tools.clone()), Some(json!("none")), None)
            .unwrap()
            .is_none());
        let p = plan(
            Some(tools.clone()),
            Some(json!({"type": "function", "function": {"name": "get_weather"}})),
            Some(json!(false)),
        )
        .unwrap()
        .unwrap();
        let g = p.forced_grammar().unwrap();
        assert!(g.starts_with("start: call\n"), "{g}");
        assert!(g.contains("\"const\":\"get_weather\""), "{g}");
        assert!(plan(Some(tools.clone()), None, None)
            .unwrap()
            .unwrap()
            .forced_grammar()
            .is_none());
        for (t, c, param) in [
            (json!([{"type": "x"}]), json!("auto"), "tools[0]"),
            (
                json!([{"type": "function", "function": {"name": "a b"}}]),
                json!("auto"),
                "tools[0].function.name",
            ),
            (tools.clone(), json!("sometimes"), "tool_choice"),
            (
                tools.clone(),
                json!({"type": "function", "function": {"name": "nope"}}),
                "tool_choice",
            ),
            (json!([]), json!("required"), "tool_choice"),
        ] {
            let e = plan(Some(t), Some(c), None).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param));
        }
    }
}
