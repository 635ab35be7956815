//! Why a request could not be translated, in the shape every API's error
//! needs (`DialectError`), and the Messages API's error type for a status:
//! a leaf the translations and the crate root share.

use std::fmt;

use serde_json::Value;

/// A request that cannot be translated (or a failure to report in an
/// API's shape): an HTTP status, an error type (`invalid_request_error`,
/// …), a message, and the parameter at fault (a path such as
/// `messages[1].content[0]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DialectError {
    pub status: u16,
    pub kind: &'static str,
    pub message: String,
    pub param: Option<String>,
}

impl DialectError {
    /// A 400 `invalid_request_error` about `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        DialectError {
            status: 400,
            kind: "invalid_request_error",
            message: message.into(),
            param: Some(param.into()),
        }
    }

    /// A 404 `not_found_error`-class failure (`invalid_request_error` in
    /// OpenAI's vocabulary, which the Responses API uses).
    pub fn not_found(param: Option<&str>, message: impl Into<String>) -> Self {
        DialectError {
            status: 404,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(str::to_string),
        }
    }

    /// An OpenAI-shaped error body (`{"error":{"message","type","param",
    /// "code"}}`) answered with `status`, as a `DialectError`. A body of
    /// another shape still gives a message (its text, or the status).
    pub fn from_openai(status: u16, body: &Value) -> Self {
        let e = body.get("error").unwrap_or(body);
        let message = match e.get("message").and_then(Value::as_str) {
            Some(m) => m.to_string(),
            None => match body {
                Value::String(s) if !s.is_empty() => s.clone(),
                _ => format!("request failed with HTTP status {status}"),
            },
        };
        DialectError {
            status,
            kind: error_kind_for_status(status),
            message,
            param: e.get("param").and_then(Value::as_str).map(str::to_string),
        }
    }
}

impl fmt::Display for DialectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.kind, self.message)
    }
}

impl std::error::Error for DialectError {}

/// The Messages API's error type for an HTTP status.
pub fn error_kind_for_status(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}
