//! A workload's `[mix]` table (the request kinds and their fractions) and
//! those kinds on the wire: the `response_format` of a grammar request, the
//! bytes and content type of each bad input, and the check that an error
//! answer has the OpenAI shape (`{"error": {"message", "type", "param",
//! "code"}}`). Pure.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// `[mix]`: fractions of requests of each kind (drawn independently per
/// request; a bad input is nothing else).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MixSpec {
    /// Requests asking for `n` choices.
    #[serde(default)]
    pub n_fraction: f64,
    #[serde(default = "d_n")]
    pub n: u32,
    /// Requests with a `response_format` (half `json_object`, half a small
    /// JSON schema).
    #[serde(default)]
    pub grammar_fraction: f64,
    /// Requests sent without `stream` (one JSON body).
    #[serde(default)]
    pub unstreamed_fraction: f64,
    /// Malformed or invalid requests, each to be refused with a 4xx in the
    /// OpenAI error shape.
    #[serde(default)]
    pub bad_fraction: f64,
    /// Which bad inputs to send (default: every kind, in turn at random).
    #[serde(default)]
    pub bad_kinds: Vec<BadKind>,
}

fn d_n() -> u32 {
    3
}

impl Default for MixSpec {
    fn default() -> Self {
        MixSpec {
            n_fraction: 0.0,
            n: d_n(),
            grammar_fraction: 0.0,
            unstreamed_fraction: 0.0,
            bad_fraction: 0.0,
            bad_kinds: Vec::new(),
        }
    }
}

impl MixSpec {
    pub fn validate(&self) -> Result<(), String> {
        for (name, f) in [
            ("mix.n_fraction", self.n_fraction),
            ("mix.grammar_fraction", self.grammar_fraction),
            ("mix.unstreamed_fraction", self.unstreamed_fraction),
            ("mix.bad_fraction", self.bad_fraction),
        ] {
            if !(0.0..=1.0).contains(&f) {
                return Err(format!("{name} must be within [0, 1]; got {f}"));
            }
        }
        if self.n < 2 {
            return Err(format!("mix.n must be at least 2; got {}", self.n));
        }
        Ok(())
    }
}

/// A planned request's kind; the default is a plain streamed request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Kind {
    /// Choices asked for (None: the default, 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<GrammarKind>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unstreamed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad: Option<BadKind>,
}

impl Kind {
    pub fn is_plain(&self) -> bool {
        *self == Kind::default()
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GrammarKind {
    /// `response_format: {"type": "json_object"}`.
    JsonObject,
    /// `response_format` with a small `json_schema`.
    JsonSchema,
}

/// Malformed or invalid requests; each has one right answer (a 4xx).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BadKind {
    /// A body cut off in the middle of the JSON.
    BrokenJson,
    /// `max_tokens` as a string.
    WrongType,
    /// `temperature: 5` (the range is 0 to 2).
    Temperature,
    /// A message whose role is `wizard`.
    UnknownRole,
    /// A 3 MB body (past the 2 MiB default `--max-body-bytes`).
    HugeBody,
    /// A JSON body sent as `text/plain`.
    TextPlain,
    /// `max_tokens` far beyond any limit (10,000,000).
    MaxTokens,
    /// A `json_schema` whose schema is not an object.
    BadSchema,
}

impl BadKind {
    pub const ALL: [BadKind; 8] = [
        BadKind::BrokenJson,
        BadKind::WrongType,
        BadKind::Temperature,
        BadKind::UnknownRole,
        BadKind::HugeBody,
        BadKind::TextPlain,
        BadKind::MaxTokens,
        BadKind::BadSchema,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            BadKind::BrokenJson => "broken_json",
            BadKind::WrongType => "wrong_type",
            BadKind::Temperature => "temperature",
            BadKind::UnknownRole => "unknown_role",
            BadKind::HugeBody => "huge_body",
            BadKind::TextPlain => "text_plain",
            BadKind::MaxTokens => "max_tokens",
            BadKind::BadSchema => "bad_schema",
        }
    }
}

/// The `response_format` a grammar request sends.
pub fn response_format(g: GrammarKind) -> Value {
    match g {
        GrammarKind::JsonObject => json!({"type": "json_object"}),
        GrammarKind::JsonSchema => json!({
            "type": "json_schema",
            "json_schema": {
                "name": "item",
                "strict": true,
                "schema": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "maxLength": 40},
                        "count": {"type": "integer"},
                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}
                    },
                    "required": ["name", "count"],
                    "additionalProperties": false
                }
            }
        }),
    }
}

/// Whether a finished grammar choice's text is what its grammar promises:
/// one JSON object (a schema's required fields present).
pub fn grammar_output_ok(g: GrammarKind, text: &str) -> bool {
    let Ok(Value::Object(o)) = serde_json::from_str::<Value>(text.trim()) else {
        return false;
    };
    match g {
        GrammarKind::JsonObject => true,
        GrammarKind::JsonSchema => {
            o.get("name").is_some_and(Value::is_string)
                && o.get("count").is_some_and(|c| c.is_i64() || c.is_u64())
        }
    }
}

/// A bad request as sent: the body bytes, the content type, and the
/// status a correct server answers.
pub struct BadRequest {
    pub body: Vec<u8>,
    pub content_type: &'static str,
    pub expect_status: u16,
}

/// Build the bad request of `kind` from an otherwise valid body.
pub fn bad_request(kind: BadKind, valid: &Value) -> BadRequest {
    let json = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
    let with = |k: &str, x: Value| {
        let mut v = valid.clone();
        v[k] = x;
        json(&v)
    };
    let (body, content_type, expect_status) = match kind {
        BadKind::BrokenJson => {
            let mut b = json(valid);
            b.truncate(b.len() / 2);
            (b, "application/json", 400)
        }
        BadKind::WrongType => (with("max_tokens", json!("many")), "application/json", 400),
        BadKind::Temperature => (with("temperature", json!(5)), "application/json", 400),
        BadKind::UnknownRole => (
            with(
                "messages",
                json!([{"role": "wizard", "content": "Tell me a story."}]),
            ),
            "application/json",
            400,
        ),
        BadKind::HugeBody => (
            with(
                "messages",
                json!([{"role": "user", "content": "a ".repeat(1_500_000)}]),
            ),
            "application/json",
            413,
        ),
        BadKind::TextPlain => (json(valid), "text/plain", 415),
        BadKind::MaxTokens => (
            with("max_tokens", json!(10_000_000)),
            "application/json",
            400,
        ),
        BadKind::BadSchema => (
            with(
                "response_format",
                json!({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}),
            ),
            "application/json",
            400,
        ),
    };
    BadRequest {
        body,
        content_type,
        expect_status,
    }
}

/// What an error body said, when it has the OpenAI shape: an `error`
/// object with a string `message` and `type`, and a `param` and `code`
/// each a string or null. `Err` says what is wrong with it.
pub fn error_code(body: &str) -> Result<Option<String>, String> {
    let v: Value = serde_json::from_str(body).map_err(|_| "not JSON".to_string())?;
    let e = v.get("error").ok_or("no `error` object")?;
    for k in ["message", "type"] {
        if !e.get(k).is_some_and(Value::is_string) {
            return Err(format!("`error.{k}` is not a string"));
        }
    }
    for k in ["param", "code"] {
        match e.get(k) {
            Some(Value::String(_)) | Some(Value::Null) => {}
            Some(_) => return Err(format!("`error.{k}` is neither a string nor null")),
            None => return Err(format!("`error.{k}` is missing")),
        }
    }
    Ok(e["code"].as_str().map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_shape_is_checked_field_by_field() {
        let ok =
            r#"{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"x"}}"#;
        assert_eq!(error_code(ok), Ok(Some("x".into())));
        let null_code = r#"{"error":{"message":"m","type":"t","param":"p","code":null}}"#;
        assert_eq!(error_code(null_code), Ok(None));
        for (bad, why) in [
            ("oops", "not JSON"),
            (r#"{"message":"m"}"#, "no `error`"),
            (
                r#"{"error":{"type":"t","param":null,"code":null}}"#,
                "message",
            ),
            (
                r#"{"error":{"message":"m","type":"t","code":null}}"#,
                "param",
            ),
            (
                r#"{"error":{"message":"m","type":"t","param":1,"code":null}}"#,
                "param",
            ),
        ] {
            let e = error_code(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_requests_are_bad_in_the_named_way() {
        let valid =
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8});
        for k in BadKind::ALL {
            let b = bad_request(k, &valid);
            let parsed = serde_json::from_slice::<Value>(&b.body);
            match k {
                BadKind::BrokenJson => assert!(parsed.is_err()),
                BadKind::TextPlain => assert_eq!(b.content_type, "text/plain"),
                BadKind::HugeBody => assert!(b.body.len() > 3_000_000),
                _ => assert!(parsed.is_ok(), "{k:?}"),
            }
            assert!((400..500).contains(&b.expect_status));
        }
        assert_eq!(
            serde_json::from_slice::<Value>(&bad_request(BadKind::Temperature, &valid).body)
                .unwrap()["temperature"],
            5
        );
    }

    #[test]
    fn grammar_outputs_are_checked() {
        assert!(grammar_output_ok(GrammarKind::JsonObject, r#" {"a": 1} "#));
        assert!(!grammar_output_ok(GrammarKind::JsonObject, r#"[1]"#));
        assert!(!grammar_output_ok(GrammarKind::JsonObject, r#"{"a": "#));
        assert!(grammar_output_ok(
            GrammarKind::JsonSchema,
            r#"{"name": "x", "count": 3}"#
        ));
        assert!(!grammar_output_ok(
            GrammarKind::JsonSchema,
            r#"{"name": "x"}"#
        ));
        assert!(response_format(GrammarKind::JsonSchema)["json_schema"]["schema"].is_object());
    }
}
