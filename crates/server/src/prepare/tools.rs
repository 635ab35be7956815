//! Tool calling: the checked `tools` / `tool_choice` plan, and the grammar
//! that enforces `required` and named choices in the model family's own
//! call syntax (`steward_formats::grammar`). Calls are read back from the
//! output by `crate::output` (`steward_formats::parse`).

use serde_json::{json, Value};

use crate::http::error::ApiError;
use steward_formats::family::Family;
use steward_formats::grammar::{grammar, Force, Function, Reasoning, Special, Variant};

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
    /// `required` or a named function: the output is constrained to calls.
    pub fn forced(&self) -> bool {
        self.choice != Choice::Auto
    }

    /// For a forced choice: the grammar of the call(s) in the model
    /// family's own syntax (`steward_formats::grammar`), with its reasoning
    /// block allowed first. `special`: control token ids by text.
    pub fn forced_grammar(
        &self,
        family: Family,
        variant: Variant,
        reasoning: Reasoning,
        special: Special,
    ) -> Option<Result<String, String>> {
        let named = match &self.choice {
            Choice::Auto => return None,
            Choice::Named(n) => Some(n.as_str()),
            Choice::Required => None,
        };
        let functions: Vec<Function> = self
            .functions
            .iter()
            .map(|(name, params)| Function {
                name: name.clone(),
                params: params.clone(),
            })
            .collect();
        Some(grammar(
            family,
            variant,
            &Force::Calls {
                functions: &functions,
                named,
                parallel: self.parallel,
            },
            reasoning,
            special,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let none = |_: &str| None;
        let g = p
            .forced_grammar(
                Family::Hermes,
                Variant::Plain,
                Reasoning {
                    trained: true,
                    open: true,
                    budget: 64,
                },
                &none,
            )
            .unwrap()
            .unwrap();
        assert!(g.starts_with("start: think call\n"), "{g}");
        assert!(g.contains("\"const\":\"get_weather\""), "{g}");
        assert!(plan(Some(tools.clone()), None, None)
            .unwrap()
            .unwrap()
            .forced_grammar(
                Family::Hermes,
                Variant::Plain,
                Reasoning {
                    trained: false,
                    open: false,
                    budget: 64
                },
                &none
            )
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
