//! Grammars (llguidance's Lark) that force a call or a schema in the
//! family's own syntax: the markers it was trained on (special tokens as
//! `<[id]>`, so a marker is the token the model knows, not its spelling in
//! pieces), the arguments under their JSON schema, and the reasoning block
//! allowed before the constrained part when the family reasons.

use crate::family::Family;
use serde_json::{json, Value};

/// One function the request offers: its name and parameters schema.
#[derive(Debug, Clone)]
pub struct Function {
    pub name: String,
    pub params: Value,
}

#[derive(Debug, Clone)]
pub enum Force<'a> {
    /// One or more calls (`required`), or one named call.
    Calls {
        functions: &'a [Function],
        named: Option<&'a str>,
        parallel: bool,
    },
    /// `response_format`: the text is one JSON value under this schema.
    Json(Value),
}

/// The syntax variant a family's template uses (Mistral and DeepSeek
/// changed theirs between versions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Plain,
    /// Mistral `[TOOL_CALLS]NAME[ARGS]{…}`; DeepSeek V3.1 `NAME<｜tool▁sep｜>{…}`.
    Newer,
}

impl Variant {
    pub fn detect(family: Family, template: &str) -> Variant {
        match family {
            Family::Mistral if template.contains("[ARGS]") => Variant::Newer,
            Family::DeepSeek if !template.contains("```json") => Variant::Newer,
            _ => Variant::Plain,
        }
    }
}

/// `special(text)`: the id of the control token whose text this is.
pub type Special<'a> = &'a dyn Fn(&str) -> Option<u32>;

/// Literal text: the control token when the vocabulary has one, else the
/// characters.
fn lit(text: &str, special: Special) -> String {
    match special(text) {
        Some(id) => format!("<[{id}]>"),
        None => serde_json::to_string(text).unwrap_or_default(),
    }
}

/// A sequence of literal pieces, each marker as its token.
fn seq(parts: &[&str], special: Special) -> String {
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| lit(p, special))
        .collect::<Vec<_>>()
        .join(" ")
}

fn json_rule(schema: &Value) -> String {
    let mut s = schema.clone();
    if let Value::Object(o) = &mut s {
        o.insert(
            "x-guidance".into(),
            json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    format!("%json {s}")
}

fn call_object(name_key: &str, name: &str, args_key: &str, params: &Value) -> Value {
    json!({
        "type": "object",
        "properties": {name_key: {"const": name}, args_key: params},
        "required": [name_key, args_key],
        "additionalProperties": false,
    })
}

/// The grammar, or why this family cannot be forced.
/// How the model may reason before the constrained part.
#[derive(Debug, Clone, Copy)]
pub struct Reasoning {
    /// The family's template prints reasoning (the model was trained to).
    pub trained: bool,
    /// The prompt opened the block: it must be closed first.
    pub open: bool,
    /// Most tokens of reasoning.
    pub budget: usize,
}

pub fn grammar(
    family: Family,
    variant: Variant,
    force: &Force,
    reasoning: Reasoning,
    special: Special,
) -> Result<String, String> {
    let (in_reasoning, think_budget) = (reasoning.open, reasoning.budget);
    let budget = think_budget.max(1);
    let mut rules = Vec::new();
    let body = match force {
        Force::Json(schema) => {
            rules.push(format!("value: {}", json_rule(schema)));
            "value".to_string()
        }
        Force::Calls {
            functions,
            named,
            parallel,
        } => {
            let chosen: Vec<&Function> = match named {
                Some(n) => functions.iter().filter(|f| f.name == *n).collect(),
                None => functions.iter().collect(),
            };
            if chosen.is_empty() {
                return Err("no function to call".into());
            }
            let mut alts = Vec::new();
            for (i, f) in chosen.iter().enumerate() {
                let r = format!("call{i}");
                rules.push(format!("{r}: {}", one_call(family, variant, f, special)?));
                alts.push(r);
            }
            rules.push(format!("call: {}", alts.join(" | ")));
            let many = *parallel && named.is_none();
            calls_rule(family, many, special)
        }
    };
    let markers = family
        .reasoning()
        .filter(|_| reasoning.trained || reasoning.open);
    let start = match (markers, family) {
        (_, Family::Harmony) if reasoning.trained => {
            // The analysis channel may come first; the call is on commentary.
            rules.push(format!(
                "think: think_text {}\nthink_text[max_tokens={budget}]: /(?s:.*)/",
                seq(&["<|end|>", "<|start|>", "assistant"], special)
            ));
            format!(
                "({} think)? {body}",
                seq(&["<|channel|>", "analysis", "<|message|>"], special)
            )
        }
        (Some((open, close)), _) => {
            // Free text, at most `budget` tokens, then the close marker.
            rules.push(format!(
                "think: think_text {} /\\n{{0,2}}/\nthink_text[max_tokens={budget}]: /(?s:.*)/",
                lit(close, special)
            ));
            if in_reasoning {
                format!("think {body}")
            } else {
                format!("({} think)? {body}", lit(open, special))
            }
        }
        (None, _) => body,
    };
    rules.insert(0, format!("start: {start}"));
    Ok(rules.join("\n") + "\n")
}

/// How several calls follow each other.
fn calls_rule(family: Family, many: bool, special: Special) -> String {
    if !many {
        return "call".to_string();
    }
    match family {
        Family::Hermes | Family::Generic | Family::QwenXml | Family::Glm => {
            "call (\"\\n\" call)*".into()
        }
        Family::Llama3 => "call".into(),
        Family::DeepSeek => "call+".into(),
        Family::Kimi => "call+".into(),
        Family::Harmony => format!("call ({} call)*", seq(&["<|start|>", "assistant"], special)),
        _ => "call+".into(),
    }
}

fn one_call(
    family: Family,
    variant: Variant,
    f: &Function,
    special: Special,
) -> Result<String, String> {
    let n = f.name.as_str();
    let p = &f.params;
    let obj = |nk: &str, ak: &str| json_rule(&call_object(nk, n, ak, p));
    Ok(match family {
        Family::Hermes | Family::Generic => format!(
            "{} {} {}",
            seq(&["<tool_call>", "\n"], special),
            obj("name", "arguments"),
            seq(&["\n", "</tool_call>"], special)
        ),
        Family::QwenXml => format!(
            "{} {} {}",
            seq(&["<tool_call>", &format!("\n<function={n}>\n")], special),
            text_params(p, |k| (
                lit(&format!("<parameter={k}>\n"), special),
                lit("\n</parameter>\n", special)
            )),
            seq(&["</function>\n", "</tool_call>"], special)
        ),
        Family::Llama3 => obj("name", "parameters"),
        Family::Mistral if variant == Variant::Newer => format!(
            "{} {}",
            seq(&["[TOOL_CALLS]", n, "[ARGS]"], special),
            json_rule(p)
        ),
        Family::Mistral => format!("{} {} {}", seq(&["[TOOL_CALLS]", "["], special), obj("name", "arguments"), lit("]", special)),
        Family::DeepSeek if variant == Variant::Newer => format!(
            "{} {} {}",
            seq(&["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", n, "<｜tool▁sep｜>"], special),
            json_rule(p),
            seq(&["<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"], special)
        ),
        Family::DeepSeek => format!(
            "{} {} {}",
            seq(&["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function", "<｜tool▁sep｜>", &format!("{n}\n```json\n")], special),
            json_rule(p),
            seq(&["\n```", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"], special)
        ),
        Family::Harmony => format!(
            "{} {} {}",
            seq(&["<|channel|>", &format!("commentary to=functions.{n} "), "<|constrain|>", "json", "<|message|>"], special),
            json_rule(p),
            lit("<|call|>", special)
        ),
        Family::FunctionaryV31 => format!(
            "{} {} {}",
            seq(&[&format!("<function={n}>")], special),
            json_rule(p),
            lit("</function>", special)
        ),
        Family::FunctionaryV32 => format!("{} {}", lit(&format!("{n}\n"), special), json_rule(p)),
        Family::CommandR => format!(
            "{} {} {}",
            seq(&["<|START_ACTION|>", "["], special),
            json_rule(&json!({
                "type": "object",
                "properties": {"tool_call_id": {"type": "string", "pattern": "^[0-9]{1,3}$"}, "tool_name": {"const": n}, "parameters": p},
                "required": ["tool_call_id", "tool_name", "parameters"],
                "additionalProperties": false,
            })),
            seq(&["]", "<|END_ACTION|>"], special)
        ),
        Family::ToolCallToken => format!("{} {} {}", seq(&["<|tool_call|>", "["], special), obj("name", "arguments"), lit("]", special)),
        Family::Functools => format!("{} {} {}", lit("functools[", special), obj("name", "arguments"), lit("]", special)),
        Family::Kimi => format!(
            "{} {} {}",
            seq(&["<|tool_calls_section_begin|>", "<|tool_call_begin|>", &format!("functions.{n}:0"), "<|tool_call_argument_begin|>"], special),
            json_rule(p),
            seq(&["<|tool_call_end|>", "<|tool_calls_section_end|>"], special)
        ),
        Family::Glm => format!(
            "{} {} {}",
            seq(&["<tool_call>", &format!("{n}\n")], special),
            text_params(p, |k| (
                seq(&["<arg_key>", k, "</arg_key>", "\n", "<arg_value>"], special),
                seq(&["</arg_value>", "\n"], special)
            )),
            lit("</tool_call>", special)
        ),
        Family::Gemma4 => {
            return Err("forcing a call is not supported for Gemma 4's call syntax yet; use tool_choice \"auto\"".into())
        }
    })
}

/// The required properties of a parameters schema, in schema order, each
/// as `before(key) value after` with the value written as text
/// (`text_value`): Qwen3-Coder's XML parameters, GLM's key/value pairs.
fn text_params(p: &Value, wrap: impl Fn(&str) -> (String, String)) -> String {
    let required: Vec<&str> = p["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let parts: Vec<String> = p["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| required.contains(&k.as_str()))
        .map(|(k, schema)| {
            let (before, after) = wrap(k);
            format!("{before} {} {after}", text_value(schema))
        })
        .collect();
    if parts.is_empty() {
        "\"\"".into()
    } else {
        parts.join(" ")
    }
}

/// A parameter value written as text (XML formats): one of its `enum`
/// strings, a string without markup, or JSON for other types.
fn text_value(schema: &Value) -> String {
    if let Some(e) = schema["enum"]
        .as_array()
        .filter(|e| e.iter().all(Value::is_string))
    {
        let alts: Vec<String> = e
            .iter()
            .map(|v| serde_json::to_string(v.as_str().unwrap_or_default()).unwrap_or_default())
            .collect();
        if !alts.is_empty() {
            return format!("({})", alts.join(" | "));
        }
    }
    if schema["type"] == "string" {
        "/[^<]*/".to_string()
    } else {
        json_rule(schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hermes_grammar_uses_special_tokens() {
        let f = [Function {
            name: "get_weather".into(),
            params: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }];
        let special = |t: &str| (t == "<tool_call>").then_some(7);
        let g = grammar(
            Family::Hermes,
            Variant::Plain,
            &Force::Calls {
                functions: &f,
                named: None,
                parallel: false,
            },
            Reasoning {
                trained: true,
                open: false,
                budget: 64,
            },
            &special,
        )
        .unwrap();
        assert!(g.contains("<[7]>"), "{g}");
        assert!(g.contains("\"</tool_call>\""), "{g}");
        assert!(g.starts_with("start: (\"<think>\" think)? call\n"), "{g}");
    }
}
