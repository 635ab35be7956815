//! What a template can take, learned once at load by rendering probes
//! (`Profile::probe`), and a request's messages fitted to it (`fit`):
//!
//! - a template that renders `tools` itself gets them as sent;
//! - one that does not (SmolLM2, Gemma, Phi-3.5) gets Steward's tool
//!   instructions (the Hermes convention, read back by the Hermes parser)
//!   in its system message, or in the first user message when it refuses a
//!   system role (Gemma 2), and assistant calls and tool results written
//!   as Hermes text;
//! - Phi-4-mini's template reads tools from the system message's `tools`
//!   key: they go there;
//! - `developer` stays `developer` only where the template names it
//!   (gpt-oss); elsewhere it is the system message it means.

use crate::template::{ChatTemplates, RenderArgs};
use serde_json::{json, Map, Value};

const PROBE_TOOL: &str = "steward_probe_tool_7q";
const PROBE_SYSTEM: &str = "steward probe system 7q";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The template prints `tools` (its `tool_use` variant included).
    pub native_tools: bool,
    /// It reads tools from the system message's `tools` key (Phi-4-mini).
    pub system_tools_key: bool,
    /// It renders a system message (Gemma 2 raises on one).
    pub system_ok: bool,
    /// It knows the `developer` role by name.
    pub developer_role: bool,
    /// It takes a call's `arguments` as JSON text, not an object
    /// (Functionary v3.2 concatenates them to strings).
    pub args_as_text: bool,
    /// It prints assistant `tool_calls` and `tool` results itself, even if
    /// it does not print `tools` (DeepSeek V3.1, the R1 distills).
    pub history_calls: bool,
    /// The family whose call syntax the model is told to use and is read
    /// back in (`fit`'s instructions); `Generic` (Hermes) when the
    /// template knows none.
    pub family: crate::family::Family,
    /// The family's newer syntax (`grammar::Variant::Newer`).
    pub newer: bool,
}

impl Profile {
    pub fn probe(t: &ChatTemplates, kwargs: &Map<String, Value>) -> Profile {
        let detected = crate::family::detect(t);
        let user = json!({"role": "user", "content": "hi"});
        let tools = json!([{"type": "function", "function": {"name": PROBE_TOOL,
            "description": "probe", "parameters": {"type": "object", "properties": {}}}}]);
        let render = |messages: &[Value], tools: Option<&Value>| {
            t.render(&RenderArgs {
                messages,
                tools,
                kwargs,
                add_generation_prompt: true,
                ..Default::default()
            })
        };
        let native_tools = render(std::slice::from_ref(&user), Some(&tools))
            .map(|s| s.contains(PROBE_TOOL))
            .unwrap_or(false);
        let sys = [
            json!({"role": "system", "content": PROBE_SYSTEM}),
            user.clone(),
        ];
        let system_ok = render(&sys, None)
            .map(|s| s.contains(PROBE_SYSTEM))
            .unwrap_or(false);
        let src = t.default_source();
        let system_tools_key = !native_tools
            && (src.contains("['tools']") || src.contains(".tools"))
            && src.contains("<|tool|>");
        let tool_src = t.source_for(None, true).unwrap_or_default();
        let developer_role = ["'developer'", "\"developer\""]
            .iter()
            .any(|d| src.contains(d) || tool_src.contains(d));
        let turn = |args: Value| {
            let call = json!({"role": "assistant", "content": "", "tool_calls": [{"id": "a1B2c3D4e",
                "type": "function", "function": {"name": PROBE_TOOL, "arguments": args}}]});
            let result = json!({"role": "tool", "tool_call_id": "a1B2c3D4e", "content": "ok"});
            render(&[user.clone(), call, result], Some(&tools))
        };
        let as_object = turn(json!({"x": 1}));
        let as_text = turn(json!("{\"x\": 1}"));
        let args_as_text = as_object.is_err() && as_text.is_ok();
        let history_calls = as_object.or(as_text).is_ok_and(|s| s.contains(PROBE_TOOL));
        let family = if native_tools || history_calls {
            detected
        } else if system_tools_key {
            // Phi-4-mini: tools in the system message, calls written as
            // `functools[…]` (or after `<|tool_call|>`).
            crate::family::Family::ToolCallToken
        } else {
            crate::family::Family::Generic
        };
        let newer =
            crate::grammar::Variant::detect(family, &tool_src) == crate::grammar::Variant::Newer;
        Profile {
            native_tools,
            system_tools_key,
            system_ok,
            developer_role,
            args_as_text,
            history_calls,
            family,
            newer,
        }
    }
}

/// The Hermes tool instructions Steward writes for a template that does not
/// render `tools`.
pub fn hermes_preamble(tools: &Value) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools.as_array().into_iter().flatten() {
        s.push('\n');
        s.push_str(&t.to_string());
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// Tool instructions in the family's own call syntax, for a template that
/// prints calls but not `tools` (DeepSeek V3.1 and the R1 distills are
/// given tools in the system prompt this way).
pub fn family_preamble(p: &Profile, tools: &Value) -> String {
    let Some(example) = p
        .family
        .call_text(p.newer, "<function-name>", "<args-json-object>")
    else {
        return hermes_preamble(tools);
    };
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query. \
         The functions, as JSON schemas:\n",
    );
    for t in tools.as_array().into_iter().flatten() {
        s.push('\n');
        s.push_str(&t.to_string());
    }
    s.push_str("\n\nTo call a function, write exactly:\n");
    s.push_str(&example);
    s
}

/// One call as Hermes text.
pub fn hermes_call(name: &str, arguments: &Value) -> String {
    format!(
        "<tool_call>\n{}\n</tool_call>",
        json!({"name": name, "arguments": arguments})
    )
}

fn text_of(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The messages and tools this template gets for a request.
pub fn fit(p: &Profile, messages: &[Value], tools: Option<&Value>) -> (Vec<Value>, Option<Value>) {
    let mut out: Vec<Value> = messages.to_vec();
    if !p.developer_role {
        for m in &mut out {
            if m["role"] == "developer" {
                m["role"] = "system".into();
            }
        }
    }
    // Call arguments as the template takes them: objects (Hugging Face's
    // convention; OpenAI sends JSON text), or text for the few that
    // concatenate them (written as Python's json.dumps would).
    for m in &mut out {
        for c in m["tool_calls"].as_array_mut().into_iter().flatten() {
            let a = &mut c["function"]["arguments"];
            match (p.args_as_text, &*a) {
                (false, Value::String(t)) => {
                    if let Ok(v) = serde_json::from_str::<Value>(t) {
                        *a = v;
                    }
                }
                (true, v) if !v.is_string() && !v.is_null() => {
                    let mv = minijinja::Value::from_serialize(v);
                    if let Ok(t) = crate::template::pyjson::dumps(&mv, &Default::default()) {
                        *a = Value::String(t);
                    }
                }
                _ => {}
            }
        }
    }
    let Some(tools) = tools else {
        return (out, None);
    };
    if p.native_tools {
        return (out, Some(tools.clone()));
    }
    if p.system_tools_key {
        let list = Value::String(tools.to_string());
        match out.first_mut() {
            Some(m) if m["role"] == "system" => m["tools"] = list,
            _ => out.insert(0, json!({"role": "system", "content": "", "tools": list})),
        }
        return (out, Some(tools.clone()));
    }
    let pre = if p.history_calls {
        family_preamble(p, tools)
    } else {
        hermes_preamble(tools)
    };
    let mut fitted = Vec::with_capacity(out.len() + 1);
    let mut rest = out.into_iter().peekable();
    if p.system_ok {
        match rest.peek() {
            Some(m) if m["role"] == "system" => {
                let m = rest.next().unwrap_or_default();
                fitted.push(
                    json!({"role": "system", "content": format!("{}\n\n{pre}", text_of(&m))}),
                );
            }
            _ => fitted.push(json!({"role": "system", "content": pre.clone()})),
        }
    }
    let mut pending = (!p.system_ok).then_some(pre);
    for m in rest {
        let role = m["role"].as_str().unwrap_or_default().to_string();
        match role.as_str() {
            // The template prints calls and results in its own syntax.
            "assistant" | "tool" if p.history_calls => fitted.push(m),
            "assistant" if m["tool_calls"].is_array() => {
                let mut content = text_of(&m);
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let f = &c["function"];
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    content.push_str(&hermes_call(
                        f["name"].as_str().unwrap_or_default(),
                        &f["arguments"],
                    ));
                }
                fitted.push(json!({"role": "assistant", "content": content}));
            }
            "tool" => fitted.push(json!({"role": "user",
                "content": format!("<tool_response>\n{}\n</tool_response>", text_of(&m))})),
            "user" => {
                let mut m = m;
                if let Some(pre) = pending.take() {
                    m["content"] = format!("{pre}\n\n{}", text_of(&m)).into();
                }
                fitted.push(m);
            }
            _ => fitted.push(m),
        }
    }
    (fitted, None)
}
