//! A batch's input file read against OpenAI's rules: one JSON object a
//! line with a `custom_id` (a string, unique in the file), `method`
//! `POST`, `url` the batch's endpoint, `body` an object (not streamed).
//! Blank lines are skipped. The errors are the Batch object's
//! `errors.data` entries, numbered by line (from 1).

use std::collections::HashSet;

use axum::body::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The endpoints a batch may run.
pub(crate) const ENDPOINTS: &[&str] =
    &["/v1/chat/completions", "/v1/completions", "/v1/embeddings"];

/// Most errors a failed validation lists.
const MAX_ERRORS: usize = 100;

/// One line to run.
#[derive(Debug, Clone)]
pub(crate) struct InputLine {
    pub custom_id: String,
    /// The request body, as JSON text.
    pub body: Bytes,
}

/// One entry of a Batch object's `errors.data`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LineError {
    pub code: String,
    pub message: String,
    pub param: Option<String>,
    pub line: Option<u64>,
}

impl LineError {
    pub(crate) fn new(
        code: &str,
        message: impl Into<String>,
        param: Option<&str>,
        line: Option<u64>,
    ) -> Self {
        LineError {
            code: code.into(),
            message: message.into(),
            param: param.map(str::to_string),
            line,
        }
    }
}

/// The lines of `content` for a batch on `endpoint`, or why not (at most
/// `MAX_ERRORS` listed).
pub(crate) fn parse(
    content: &[u8],
    endpoint: &str,
    max_lines: usize,
) -> Result<Vec<InputLine>, Vec<LineError>> {
    let mut lines = Vec::new();
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    let text = match std::str::from_utf8(content) {
        Ok(t) => t,
        Err(e) => {
            return Err(vec![LineError::new(
                "invalid_file_format",
                format!("the file is not UTF-8 text (at byte {})", e.valid_up_to()),
                None,
                None,
            )])
        }
    };
    for (i, raw) in text.split('\n').enumerate() {
        let n = i as u64 + 1;
        if raw.trim().is_empty() {
            continue;
        }
        if lines.len() + errors.len() >= max_lines {
            errors.push(LineError::new(
                "too_many_requests",
                format!("the file has more than {max_lines} requests (--batch-max-lines)"),
                None,
                Some(n),
            ));
            break;
        }
        match line(raw, endpoint, n) {
            Ok(l) if !seen.insert(l.custom_id.clone()) => errors.push(LineError::new(
                "duplicate_custom_id",
                format!(
                    "`custom_id` {:?} is used by an earlier line; each must be unique",
                    short(&l.custom_id)
                ),
                Some("custom_id"),
                Some(n),
            )),
            Ok(l) => lines.push(l),
            Err(e) => errors.push(e),
        }
        if errors.len() >= MAX_ERRORS {
            break;
        }
    }
    if lines.is_empty() && errors.is_empty() {
        errors.push(LineError::new(
            "empty_file",
            "the input file has no requests",
            None,
            None,
        ));
    }
    if errors.is_empty() {
        Ok(lines)
    } else {
        Err(errors)
    }
}

/// A value quoted in a message: at most 64 characters.
fn short(s: &str) -> String {
    s.chars().take(64).collect()
}

fn line(raw: &str, endpoint: &str, n: u64) -> Result<InputLine, LineError> {
    let err = |code: &str, message: String, param: Option<&str>| {
        Err(LineError::new(code, message, param, Some(n)))
    };
    let v: Value = match serde_json::from_str(raw) {
        Ok(v) => v,
        Err(e) => {
            return err(
                "invalid_json_line",
                format!("this line is not valid JSON: {e}"),
                None,
            )
        }
    };
    let Some(o) = v.as_object() else {
        return err(
            "invalid_json_line",
            "this line is not a JSON object".into(),
            None,
        );
    };
    let custom_id = match o.get("custom_id") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 512 => s.clone(),
        Some(Value::String(_)) => {
            return err(
                "invalid_custom_id",
                "`custom_id` must have 1 to 512 bytes".into(),
                Some("custom_id"),
            )
        }
        Some(_) => {
            return err(
                "invalid_custom_id",
                "`custom_id` must be a string".into(),
                Some("custom_id"),
            )
        }
        None => {
            return err(
                "missing_required_parameter",
                "the line has no `custom_id`".into(),
                Some("custom_id"),
            )
        }
    };
    match o.get("method").and_then(Value::as_str) {
        Some("POST") => {}
        _ => {
            return err(
                "invalid_method",
                "`method` must be `POST`".into(),
                Some("method"),
            )
        }
    }
    match o.get("url").and_then(Value::as_str) {
        Some(u) if u == endpoint => {}
        Some(u) if ENDPOINTS.contains(&u) => {
            return err(
                "mismatched_url",
                format!("`url` {u:?} is not the batch's endpoint {endpoint:?}"),
                Some("url"),
            )
        }
        Some(u) => {
            return err(
                "invalid_url",
                format!(
                    "`url` {:?} is not one of {}",
                    short(u),
                    ENDPOINTS.join(", ")
                ),
                Some("url"),
            )
        }
        None => {
            return err(
                "invalid_url",
                "the line has no `url` string".into(),
                Some("url"),
            )
        }
    }
    let Some(body) = o.get("body").filter(|b| b.is_object()) else {
        return err(
            "invalid_body",
            "`body` must be a JSON object".into(),
            Some("body"),
        );
    };
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        return err(
            "invalid_body",
            "`body.stream` must not be true in a batch".into(),
            Some("body.stream"),
        );
    }
    Ok(InputLine {
        custom_id,
        body: Bytes::from(body.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EP: &str = "/v1/chat/completions";

    fn l(id: &str, url: &str) -> String {
        format!(
            r#"{{"custom_id": "{id}", "method": "POST", "url": "{url}", "body": {{"max_tokens": 2}}}}"#
        )
    }

    #[test]
    fn good_lines_are_read_and_blank_ones_skipped() {
        let f = format!("{}\n\n{}\n", l("a", EP), l("b", EP));
        let v = parse(f.as_bytes(), EP, 10).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].custom_id, "b");
        assert_eq!(&v[0].body[..], br#"{"max_tokens":2}"#);
    }

    #[test]
    fn each_broken_rule_is_named_with_its_line() {
        let f = [
            l("a", EP),
            l("a", EP),
            l("c", "/v1/completions"),
            l("d", "/v1/nope"),
            "{not json".to_string(),
            r#"{"custom_id": "e", "method": "GET", "url": "/v1/chat/completions", "body": {}}"#.into(),
            r#"{"custom_id": "f", "method": "POST", "url": "/v1/chat/completions", "body": {"stream": true}}"#.into(),
            r#"{"method": "POST", "url": "/v1/chat/completions", "body": {}}"#.into(),
        ]
        .join("\n");
        let e = parse(f.as_bytes(), EP, 100).unwrap_err();
        let got: Vec<(&str, Option<u64>)> = e.iter().map(|e| (e.code.as_str(), e.line)).collect();
        assert_eq!(
            got,
            [
                ("duplicate_custom_id", Some(2)),
                ("mismatched_url", Some(3)),
                ("invalid_url", Some(4)),
                ("invalid_json_line", Some(5)),
                ("invalid_method", Some(6)),
                ("invalid_body", Some(7)),
                ("missing_required_parameter", Some(8)),
            ]
        );
    }

    #[test]
    fn an_empty_file_and_too_many_lines_fail() {
        assert_eq!(parse(b"\n\n", EP, 10).unwrap_err()[0].code, "empty_file");
        let f = [l("a", EP), l("b", EP), l("c", EP)].join("\n");
        assert_eq!(
            parse(f.as_bytes(), EP, 2).unwrap_err()[0].code,
            "too_many_requests"
        );
    }
}
