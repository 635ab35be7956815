//! The top-level fields of OpenAI's chat completions and legacy
//! completions, and what Steward does with each (docs/LIMITS.md, "Request
//! fields", says why for each). A field the table does not name is refused
//! (as OpenAI's API does): a field that would change the answer is never
//! silently ignored. The Anthropic and Responses tables are the dialects'
//! (`steward_dialects`, checked the same way before translation).

use serde_json::Value;

use crate::http::error::ApiError;

/// What the server does with a field.
pub(crate) enum Rule {
    /// Read and acted on.
    Honoured,
    /// Accepted and not acted on: it changes nothing in the answer.
    Ignored,
    /// Refused whenever it is given (not `null`); the text says why.
    Refused(&'static str),
    /// Refused unless the value asks for what the server does anyway.
    RefusedUnless(fn(&Value) -> bool, &'static str),
}

use Rule::{Honoured, Ignored, Refused, RefusedUnless};

/// One API's fields: a name and its rule.
pub(crate) type Known = [(&'static str, Rule)];

/// The sampling and delivery fields both APIs share (`SamplingFields`,
/// Steward's extensions included) and the router's `lora`.
const SHARED: &Known = &[
    ("model", Honoured),
    ("max_tokens", Honoured),
    ("max_completion_tokens", Honoured),
    ("temperature", Honoured),
    ("top_p", Honoured),
    ("top_k", Honoured),
    ("min_p", Honoured),
    ("frequency_penalty", Honoured),
    ("presence_penalty", Honoured),
    ("repetition_penalty", Honoured),
    ("seed", Honoured),
    ("stop", Honoured),
    ("stream", Honoured),
    ("stream_options", Honoured),
    ("n", Honoured),
    ("logprobs", Honoured),
    ("logit_bias", Honoured),
    ("ignore_eos", Honoured),
    ("timeout", Honoured),
    ("timings", Honoured),
    ("grammar", Honoured),
    ("speculative", Honoured),
    ("priority", Honoured),
    ("lora", Honoured),
    ("user", Ignored),
    // llama-server's: Steward reuses cached prefixes whatever it says.
    ("cache_prompt", Ignored),
];

/// `/v1/chat/completions`'s own fields (OpenAI's `CompletionCreateParams`,
/// and Steward's template extensions).
pub(crate) const CHAT: &Known = &[
    ("messages", Honoured),
    ("top_logprobs", Honoured),
    ("tools", Honoured),
    ("tool_choice", Honoured),
    ("parallel_tool_calls", Honoured),
    ("response_format", Honoured),
    ("reasoning_effort", Honoured),
    ("chat_template_kwargs", Honoured),
    ("enable_thinking", Honoured),
    ("add_generation_prompt", Honoured),
    ("continue_final_message", Honoured),
    ("reasoning_format", Honoured),
    ("chat_template_name", Honoured),
    // Pins (`pin`): Steward's, and OpenAI's prompt cache fields.
    ("cache_pin", Honoured),
    ("prompt_cache_key", Honoured),
    ("prompt_cache_retention", Honoured),
    ("metadata", Ignored),
    ("store", Ignored),
    ("service_tier", Ignored),
    ("safety_identifier", Ignored),
    ("prompt_cache_options", Ignored),
    ("prediction", Ignored),
    ("audio", Refused(": its models answer in text only")),
    (
        "modalities",
        RefusedUnless(
            |v| *v == serde_json::json!(["text"]),
            " other than `[\"text\"]`: its models answer in text only",
        ),
    ),
    ("functions", Refused(": send them as `tools`")),
    ("function_call", Refused(": send it as `tool_choice`")),
    ("web_search_options", Refused(": it searches nothing")),
    ("moderation", Refused(": it runs no moderation model")),
    (
        "verbosity",
        RefusedUnless(
            |v| v == "medium",
            " other than `medium` (the default): its models take no verbosity",
        ),
    ),
];

/// `/v1/completions`'s own fields (OpenAI's legacy `CompletionCreateParams`).
pub(crate) const COMPLETIONS: &Known = &[
    ("prompt", Honoured),
    ("echo", Honoured),
    // Checked by `validate::completion`: only 1, only empty.
    ("best_of", Honoured),
    ("suffix", Honoured),
    (
        "top_logprobs",
        RefusedUnless(
            |v| v == 0,
            " on legacy completions: `logprobs` (0 to 20) asks for the alternatives",
        ),
    ),
];

/// Every top-level field of `body` against the shared table and `own`: a
/// refused one is a 400 whose `param` names it (`null` reads as absent).
/// An unknown field passes: gateways in front of OpenAI-compatible servers
/// (the vLLM Router) re-serialize requests with fields of their own, and
/// llama-server and vLLM accept them; every field OpenAI defines is in the
/// tables, so what passes unknown is no OpenAI field.
pub(crate) fn check(body: &Value, own: &Known) -> Result<(), ApiError> {
    let Some(map) = body.as_object() else {
        return Ok(());
    };
    for (key, v) in map {
        if v.is_null() {
            continue;
        }
        let rule = own
            .iter()
            .chain(SHARED)
            .find(|(k, _)| k == key)
            .map(|(_, r)| r);
        let why = match rule {
            None | Some(Honoured | Ignored) => continue,
            Some(RefusedUnless(fine, _)) if fine(v) => continue,
            Some(Refused(why) | RefusedUnless(_, why)) => why,
        };
        return Err(ApiError::unsupported(
            format!("`{key}` is not supported by this server{why}"),
            key,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(body: Value, own: &Known) -> ApiError {
        match check(&body, own) {
            Ok(()) => panic!("expected a refusal of {body}"),
            Err(e) => e,
        }
    }

    #[test]
    fn chat_fields() {
        let fine = json!({
            "model": "m", "messages": [], "user": "u", "metadata": {"a": "b"}, "store": true,
            "service_tier": "flex", "safety_identifier": "s", "prompt_cache_key": "k",
            "prompt_cache_retention": "24h", "prompt_cache_options": {"mode": "implicit"},
            "prediction": {"type": "content", "content": "x"}, "cache_prompt": false,
            "modalities": ["text"], "verbosity": "medium", "lora": [], "top_k": 3,
            "audio": null, "frobnicate": null,
        });
        check(&fine, CHAT).unwrap();
        for (field, value) in [
            ("audio", json!({"voice": "alloy", "format": "wav"})),
            ("modalities", json!(["text", "audio"])),
            ("functions", json!([{"name": "f"}])),
            ("function_call", json!("auto")),
            ("web_search_options", json!({})),
            ("moderation", json!({"model": "omni-moderation-latest"})),
            ("verbosity", json!("low")),
        ] {
            let e = refused(json!({ field: value }), CHAT);
            assert_eq!(
                (e.status.as_u16(), e.code, e.param.as_deref()),
                (400, "unsupported_parameter", Some(field))
            );
            assert!(e.message.contains(field), "{}", e.message);
        }
        // Unknown fields pass (a gateway's own fields).
        for field in ["frobnicate", "echo", "min_tokens", "guided_json", "best_of"] {
            check(&json!({ field: 1 }), CHAT).unwrap();
        }
    }

    #[test]
    fn completion_fields() {
        check(
            &json!({"prompt": "x", "echo": true, "best_of": 1, "suffix": "", "user": "u",
                    "top_logprobs": 0, "logprobs": 2, "cache_prompt": true}),
            COMPLETIONS,
        )
        .unwrap();
        let e = refused(json!({"top_logprobs": 3}), COMPLETIONS);
        assert_eq!(
            (e.code, e.param.as_deref()),
            ("unsupported_parameter", Some("top_logprobs"))
        );
        for field in ["messages", "tools", "response_format", "metadata", "store"] {
            check(&json!({ field: [] }), COMPLETIONS).unwrap();
        }
    }

    /// docs/LIMITS.md lists every field of both tables with what is done
    /// with it, and no other.
    #[test]
    fn the_limits_table_matches() {
        let doc = include_str!("../../../../docs/LIMITS.md");
        for (api, own) in [("chat", CHAT), ("completions", COMPLETIONS)] {
            let rows = doc_rows(doc, api);
            let mut want: Vec<(String, &str)> = own
                .iter()
                .chain(
                    SHARED
                        .iter()
                        .filter(|(k, _)| !own.iter().any(|(o, _)| o == k)),
                )
                .map(|(k, r)| (k.to_string(), word(r)))
                .collect();
            want.sort();
            assert_eq!(rows, want, "docs/LIMITS.md's `{api}` rows");
        }
    }

    fn word(r: &Rule) -> &'static str {
        match r {
            Honoured => "honoured",
            Ignored => "ignored",
            Refused(_) | RefusedUnless(..) => "refused",
        }
    }

    /// The rows `| `field` | api[, api] | what … |` of the request-fields
    /// table for `api`: the field and the first word of what is done.
    fn doc_rows(doc: &str, api: &str) -> Vec<(String, &'static str)> {
        let mut rows: Vec<(String, &'static str)> = doc
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                if cells.len() < 4 || !cells[2].split(", ").any(|a| a == api) {
                    return None;
                }
                let field = cells[1].strip_prefix('`')?.strip_suffix('`')?;
                let what = ["honoured", "ignored", "refused"]
                    .into_iter()
                    .find(|w| cells[3].starts_with(w))?;
                Some((field.to_string(), what))
            })
            .collect();
        rows.sort();
        rows
    }
}
