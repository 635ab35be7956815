//! Wire validation: body bytes → a checked request, or the `ApiError` that
//! says exactly which field is wrong. Runs on the HTTP task, before any
//! engine resource is touched.

use serde::de::DeserializeOwned;
use serde_json::Value;
use steward_engine::constraint::Grammar;
use steward_engine::SamplingParams;
use steward_protocol::{ChatCompletionRequest, CompletionRequest, PromptSpec, SamplingFields};

pub use super::limits::{check_grammar, check_logprob_volume, Limits};
pub use super::spec::{GenSpec, PromptInput};
use super::tools;
use super::{chat_input, fields, pin};
use crate::http::error::ApiError;

pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    typed(object(body)?)
}

/// A body checked field by field (`fields::check`), and the pin it asks for.
fn parse_known<T: DeserializeOwned>(
    body: &[u8],
    known: &fields::Known,
) -> Result<(T, pin::Asked), ApiError> {
    let v = object(body)?;
    fields::check(&v, known)?;
    let asked = pin::asked(&v)?;
    Ok((typed(v)?, asked))
}

fn object(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("Request body is not valid JSON: {e}"), None))?;
    if !v.is_object() {
        return Err(ApiError::invalid(
            "Request body must be a JSON object",
            None,
        ));
    }
    Ok(v)
}

fn typed<T: DeserializeOwned>(v: Value) -> Result<T, ApiError> {
    serde_json::from_value(v).map_err(|e| {
        let msg = e.to_string();
        let param = msg
            .split('`')
            .nth(1)
            .map(str::to_string)
            .filter(|p| !p.is_empty());
        ApiError::invalid(format!("Invalid request: {msg}"), param.as_deref())
    })
}

/// A request body that must be one JSON object (the routes that read it
/// as JSON themselves: embeddings, rerank, the dialects).
pub(crate) fn json_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::invalid(
            "the request body must be a JSON object",
            None,
        )),
        Err(e) => Err(ApiError::invalid(
            format!("the request body is not valid JSON: {e}"),
            None,
        )),
    }
}

fn range(v: Option<f64>, name: &str, lo: f64, hi: f64, default: f64) -> Result<f32, ApiError> {
    match v {
        None => Ok(default as f32),
        Some(x) if x.is_finite() && x >= lo && x <= hi => Ok(x as f32),
        Some(x) => Err(ApiError::invalid_value(
            format!("`{name}` must be between {lo} and {hi}; got {x}"),
            name,
        )),
    }
}

fn fields(
    s: SamplingFields,
    request_seq: u64,
    completions: bool,
    l: &Limits,
) -> Result<GenSpec, ApiError> {
    let n = match s.n {
        None => 1,
        Some(n) if (1..=i64::from(l.max_n)).contains(&n) => n as u32,
        Some(n) => {
            return Err(ApiError::invalid_value(
                format!("`n` must be between 1 and {}; got {n}", l.max_n),
                "n",
            ))
        }
    };
    let grammar = match &s.grammar {
        None | Some(Value::Null) => None,
        Some(Value::String(g)) => Some((Grammar::Lark(g.clone()), "grammar")),
        Some(_) => {
            return Err(ApiError::invalid_value(
                "`grammar` must be a string (llguidance's Lark syntax)",
                "grammar",
            ))
        }
    };
    let logprobs = logprobs_field(completions, &s.logprobs, &s.top_logprobs)?;
    let logit_bias = parse_logit_bias(s.logit_bias.as_ref())?;
    let temperature = range(s.temperature, "temperature", 0.0, 2.0, 1.0)?;
    let top_p = range(s.top_p, "top_p", 0.0, 1.0, 1.0)?;
    if top_p == 0.0 {
        return Err(ApiError::invalid_value(
            "`top_p` must be greater than 0",
            "top_p",
        ));
    }
    let min_p = range(s.min_p, "min_p", 0.0, 1.0, 0.0)?;
    let frequency_penalty = range(s.frequency_penalty, "frequency_penalty", -2.0, 2.0, 0.0)?;
    let presence_penalty = range(s.presence_penalty, "presence_penalty", -2.0, 2.0, 0.0)?;
    let repetition_penalty = range(s.repetition_penalty, "repetition_penalty", 0.01, 10.0, 1.0)?;
    let top_k = match s.top_k {
        None | Some(-1) => 0,
        Some(k) if (0..=100_000).contains(&k) => k as usize,
        Some(k) => {
            return Err(ApiError::invalid_value(
                format!("`top_k` must be -1, 0 or positive; got {k}"),
                "top_k",
            ))
        }
    };
    let max_tokens = max_tokens_field(completions, s.max_completion_tokens, s.max_tokens)?;
    let stop = stop_field(s.stop, l)?;
    let seed = match s.seed {
        Some(v) => v as u64,
        None => fresh_seed(request_seq),
    };
    Ok(GenSpec {
        model: None,
        sampling: SamplingParams {
            temperature,
            top_p,
            top_k,
            min_p,
            repetition_penalty,
            frequency_penalty,
            presence_penalty,
            seed,
            logit_bias,
        },
        max_tokens,
        stop,
        stream: s.stream,
        include_usage: s.stream_options.is_some_and(|o| o.include_usage),
        timings: s.timings,
        ignore_eos: s.ignore_eos,
        timeout_s: match s.timeout {
            None => None,
            Some(t) if t > 0.0 && t <= l.max_timeout_s => Some(t),
            Some(t) => {
                return Err(ApiError::invalid_value(
                    format!(
                        "`timeout` must be a number of seconds above 0 and at most {}; got {t}",
                        l.max_timeout_s
                    ),
                    "timeout",
                ))
            }
        },
        logprobs,
        echo: false,
        n,
        grammar,
        tools: None,
        reasoning: true,
        speculative: parse_speculative(s.speculative.as_ref())?,
        priority: priority_field(s.priority.as_ref())?,
        pin: None,
        pin_messages: None,
    })
}

/// `priority`: an integer in i32's range (`null`: none).
fn priority_field(v: Option<&Value>) -> Result<Option<i32>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_i64().and_then(|p| i32::try_from(p).ok()) {
            Some(p) => Ok(Some(p)),
            None => Err(ApiError::invalid_value(
                format!(
                    "`priority` must be an integer from {} to {}; got {x}",
                    i32::MIN,
                    i32::MAX
                ),
                "priority",
            )),
        },
    }
}

/// `logprobs` (and chat's `top_logprobs`): the alternatives per token, when
/// asked for.
fn logprobs_field(
    completions: bool,
    lp: &Option<Value>,
    top: &Option<Value>,
) -> Result<Option<usize>, ApiError> {
    Ok(match (completions, lp, top) {
        // Chat: `logprobs: bool` plus `top_logprobs: 0..=20`.
        (false, lp, top) => {
            let on = match lp {
                None | Some(Value::Null) | Some(Value::Bool(false)) => false,
                Some(Value::Bool(true)) => true,
                Some(_) => {
                    return Err(ApiError::invalid_value(
                        "`logprobs` must be a boolean",
                        "logprobs",
                    ))
                }
            };
            let n = match top {
                None | Some(Value::Null) => 0,
                Some(v) => match v.as_u64() {
                    Some(n) if n <= 20 && on => n as usize,
                    Some(n) if n <= 20 => {
                        return Err(ApiError::invalid_value(
                            "`top_logprobs` requires `logprobs: true`",
                            "top_logprobs",
                        ))
                    }
                    _ => {
                        return Err(ApiError::invalid_value(
                            "`top_logprobs` must be an integer from 0 to 20",
                            "top_logprobs",
                        ))
                    }
                },
            };
            on.then_some(n)
        }
        // Legacy completions: `logprobs: 0..=20` alternatives.
        (true, lp, _) => match lp {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(n) if n <= 20 => Some(n as usize),
                _ => {
                    return Err(ApiError::invalid_value(
                        "`logprobs` must be an integer from 0 to 20",
                        "logprobs",
                    ))
                }
            },
        },
    })
}

/// `max_completion_tokens` or `max_tokens`.
fn max_tokens_field(
    completions: bool,
    max_completion_tokens: Option<i64>,
    max_tokens: Option<i64>,
) -> Result<Option<u32>, ApiError> {
    // Both fields are checked when both are given; `max_completion_tokens`
    // wins.
    let check = |v: Option<i64>, name: &'static str| -> Result<Option<u32>, ApiError> {
        match v {
            None => Ok(None),
            Some(0) if completions => Ok(Some(0)),
            Some(v) if (1..=i64::from(u32::MAX)).contains(&v) => Ok(Some(v as u32)),
            Some(v) => Err(ApiError::invalid_value(
                format!("`{name}` must be between 1 and {}; got {v}", u32::MAX),
                name,
            )),
        }
    };
    Ok(check(max_completion_tokens, "max_completion_tokens")?.or(check(max_tokens, "max_tokens")?))
}

/// `stop`: at most `--max-stop` sequences, none empty or past
/// `--max-stop-bytes`.
fn stop_field(
    stop: Option<steward_protocol::StopSpec>,
    l: &Limits,
) -> Result<Vec<String>, ApiError> {
    let stop = stop.map(|s| s.into_vec()).unwrap_or_default();
    if stop.len() > l.max_stop {
        return Err(ApiError::invalid_value(
            format!(
                "`stop` takes at most {} sequences; got {}",
                l.max_stop,
                stop.len()
            ),
            "stop",
        ));
    }
    if let Some(long) = stop.iter().find(|s| s.len() > l.max_stop_bytes) {
        return Err(ApiError::invalid_value(
            format!(
                "a `stop` sequence is {} bytes; the limit is {} (--max-stop-bytes)",
                long.len(),
                l.max_stop_bytes
            ),
            "stop",
        ));
    }
    if stop.iter().any(|s| s.is_empty()) {
        return Err(ApiError::invalid_value(
            "`stop` sequences must not be empty",
            "stop",
        ));
    }
    Ok(stop)
}

/// `response_format`: text (no constraint), `json_object`, or `json_schema`
/// (`{"json_schema": {"name", "schema", "strict"}}`; the schema is enforced
/// whatever `strict` says).
fn response_format(rf: Option<Value>) -> Result<Option<Grammar>, ApiError> {
    let Some(rf) = rf.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let p = "response_format";
    match rf.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Grammar::JsonObject)),
        Some("json_schema") => {
            let js = rf
                .get("json_schema")
                .filter(|v| v.is_object())
                .ok_or_else(|| {
                    ApiError::invalid_value(
                        "`response_format.json_schema` must be an object with a `schema`",
                        p,
                    )
                })?;
            match js.get("schema") {
                Some(schema @ Value::Object(_)) => Ok(Some(Grammar::JsonSchema(schema.clone()))),
                None | Some(Value::Null) => Ok(Some(Grammar::JsonObject)),
                Some(_) => Err(ApiError::invalid_value(
                    "`response_format.json_schema.schema` must be a JSON schema object",
                    p,
                )),
            }
        }
        _ => Err(ApiError::invalid_value(
            "`response_format.type` must be one of text, json_object, json_schema",
            p,
        )),
    }
}

/// A seed for requests that give none: distinct per request.
/// OpenAI `logit_bias`: an object from token IDs (as strings) to biases
/// in [-100, 100], at most 300 entries. Token IDs are checked against the
/// vocabulary by the handler. Sorted by token for the sampler.
fn parse_logit_bias(v: Option<&Value>) -> Result<Vec<(i32, f32)>, ApiError> {
    let bad = |m: String| ApiError::invalid_value(&m, "logit_bias");
    let m = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(bad(
                "`logit_bias` must be an object mapping token IDs to biases".into(),
            ))
        }
    };
    if m.len() > 300 {
        return Err(bad(format!(
            "`logit_bias` may name at most 300 tokens, not {}",
            m.len()
        )));
    }
    let mut out = Vec::with_capacity(m.len());
    for (k, v) in m {
        let t: i32 = k
            .parse()
            .ok()
            .filter(|t| *t >= 0)
            .ok_or_else(|| bad(format!("`logit_bias` key {k:?} is not a token ID")))?;
        let b = v
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .ok_or_else(|| {
                bad(format!(
                    "`logit_bias` for token {k} must be a number from -100 to 100"
                ))
            })?;
        out.push((t, b as f32));
    }
    out.sort_by_key(|b| b.0);
    Ok(out)
}

fn fresh_seed(request_seq: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(request_seq);
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

pub fn chat(body: &[u8], seq: u64, l: &Limits) -> Result<(GenSpec, PromptInput), ApiError> {
    let (mut r, asked): (ChatCompletionRequest, _) = parse_known(body, fields::CHAT)?;
    if let Some(n) = r.tools.as_ref().and_then(Value::as_array).map(Vec::len) {
        if n > l.max_tools {
            return Err(ApiError::invalid_value(
                format!(
                    "`tools` has {n} entries; the limit is {} (--max-tools)",
                    l.max_tools
                ),
                "tools",
            ));
        }
    }
    if let Some(Value::Array(ts)) = &r.tools {
        for (i, t) in ts.iter().enumerate() {
            let depth = super::limits::json_depth(&t["function"]["parameters"]);
            if depth > l.max_schema_depth {
                return Err(ApiError::invalid_value(
                    format!(
                        "`tools[{i}].function.parameters` nests {depth} levels deep; the limit is {} (--max-schema-depth)",
                        l.max_schema_depth
                    ),
                    "tools",
                ));
            }
        }
    }
    let plan = tools::plan(
        r.tools.take(),
        r.tool_choice.take(),
        r.parallel_tool_calls.take(),
    )?;
    let format = response_format(r.response_format.take())?;
    if r.messages.is_empty() {
        return Err(ApiError::invalid(
            "`messages` must contain at least one message",
            Some("messages"),
        ));
    }
    if r.messages.len() > l.max_messages {
        return Err(ApiError::invalid_value(
            format!(
                "`messages` has {} entries; the limit is {} (--max-messages)",
                r.messages.len(),
                l.max_messages
            ),
            "messages",
        ));
    }
    let (prompt, reasoning, media) =
        chat_input::prompt(&mut r, plan.as_ref().map(|p| p.tools.clone()), l)?;
    let mut spec = fields(r.sampling, seq, false, l)?;
    spec.model = r.model;
    spec.reasoning = reasoning;
    asked.apply(&mut spec);
    let forced = plan.as_ref().is_some_and(tools::ToolPlan::forced);
    match (&spec.grammar, format, forced) {
        (_, Some(_), true) => {
            return Err(ApiError::invalid_value(
                "`response_format` cannot be combined with a required or named `tool_choice`",
                "response_format",
            ))
        }
        (Some(_), Some(_), _) | (Some(_), _, true) => {
            return Err(ApiError::invalid_value(
                "`grammar` cannot be combined with `response_format` or a forced tool call",
                "grammar",
            ))
        }
        // A forced call's grammar is written after the template (it depends
        // on the family and on whether the prompt opened a reasoning block).
        (None, Some(f), false) => spec.grammar = Some((f, "response_format")),
        _ => {}
    }
    if let Some((g, param)) = &spec.grammar {
        check_grammar(g, param, l)?;
    }
    spec.tools = plan;
    Ok((spec, PromptInput::Chat(prompt, media)))
}

pub fn completion(
    body: &[u8],
    seq: u64,
    n_vocab: usize,
    l: &Limits,
) -> Result<(GenSpec, PromptInput), ApiError> {
    let (r, _): (CompletionRequest, _) = parse_known(body, fields::COMPLETIONS)?;

    if r.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported(
            "`suffix` is not supported by this model",
            "suffix",
        ));
    }
    if r.best_of.is_some_and(|b| b != 1) {
        return Err(ApiError::unsupported(
            "`best_of` other than 1 is not supported",
            "best_of",
        ));
    }
    let empty = || ApiError::invalid("`prompt` must not be empty", Some("prompt"));
    let tokens_ok = |t: &[i64]| -> Result<Vec<i32>, ApiError> {
        if t.is_empty() {
            return Err(empty());
        }
        t.iter()
            .map(|&x| {
                if x >= 0 && (x as usize) < n_vocab {
                    Ok(x as i32)
                } else {
                    Err(ApiError::invalid_value(
                        format!("token {x} in `prompt` is outside the vocabulary (0..{n_vocab})"),
                        "prompt",
                    ))
                }
            })
            .collect()
    };
    let one = || {
        ApiError::unsupported(
            "`prompt` with several prompts is not supported yet; send one prompt per request",
            "prompt",
        )
    };
    // An empty list is an empty prompt (refused below, or by `tokens_ok`).
    let input = match r.prompt {
        PromptSpec::Text(s) => PromptInput::Text(s),
        PromptSpec::Texts(v) if v.len() <= 1 => {
            PromptInput::Text(v.into_iter().next().unwrap_or_default())
        }
        PromptSpec::Texts(_) => return Err(one()),
        PromptSpec::Tokens(t) => PromptInput::Tokens(tokens_ok(&t)?),
        PromptSpec::TokenLists(v) if v.len() <= 1 => {
            PromptInput::Tokens(tokens_ok(v.first().map_or(&[][..], |t| t))?)
        }
        PromptSpec::TokenLists(_) => return Err(one()),
    };
    if matches!(&input, PromptInput::Text(s) if s.is_empty()) {
        return Err(empty());
    }
    let mut spec = fields(r.sampling, seq, true, l)?;
    spec.model = r.model;
    spec.echo = r.echo == Some(true);
    if let Some((g, param)) = &spec.grammar {
        check_grammar(g, param, l)?;
    }
    if spec.max_tokens == Some(0) && !spec.echo {
        return Err(ApiError::invalid_value(
            "`max_tokens` must be at least 1 (0 is allowed only with `echo` to score a prompt)",
            "max_tokens",
        ));
    }
    Ok((spec, input))
}

/// `speculative`: a mode and a cap, both checked.
fn parse_speculative(
    o: Option<&steward_protocol::SpeculativeOptions>,
) -> Result<Option<steward_engine::SpecRequest>, ApiError> {
    let Some(o) = o else { return Ok(None) };
    let mode = match o.mode.as_deref() {
        None => None,
        Some(m) => Some(steward_engine::SpecMode::parse(m).ok_or_else(|| {
            ApiError::invalid_value(
                format!("`speculative.mode` must be `off`, `ngram` or `draft`; got `{m}`"),
                "speculative.mode",
            )
        })?),
    };
    let max_draft = match o.max_draft {
        None => None,
        Some(k) if (0..=steward_engine::MAX_DRAFT as i64).contains(&k) => Some(k as usize),
        Some(k) => {
            return Err(ApiError::invalid_value(
                format!(
                    "`speculative.max_draft` must be between 0 and {}; got {k}",
                    steward_engine::MAX_DRAFT
                ),
                "speculative.max_draft",
            ))
        }
    };
    Ok(Some(steward_engine::SpecRequest { mode, max_draft }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat_err(body: &str) -> ApiError {
        match chat(body.as_bytes(), 1, &Limits::default()) {
            Ok(_) => panic!("expected an error for {body}"),
            Err(e) => e,
        }
    }

    #[test]
    fn bad_inputs_name_their_param() {
        let cases = [
            ("{", None, "invalid_request"),
            ("[]", None, "invalid_request"),
            (r#"{"messages":"hi"}"#, None, "invalid_request"),
            (r#"{"messages":[]}"#, Some("messages"), "invalid_request"),
            (
                r#"{"messages":[{"role":"wizard","content":"x"}]}"#,
                Some("messages[0].role"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"temperature":3}"#,
                Some("temperature"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#,
                None,
                "invalid_request",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#,
                Some("max_tokens"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"n":17}"#,
                Some("n"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"priority":"high"}"#,
                Some("priority"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"priority":2147483648}"#,
                Some("priority"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"priority":1.5}"#,
                Some("priority"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}"#,
                Some("response_format"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":[1]}}}"#,
                Some("response_format"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"grammar":"start: \"a\"","response_format":{"type":"json_object"}}"#,
                Some("grammar"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"assistant","content":"x","tool_calls":[{"function":{}}]}]}"#,
                Some("messages[0].tool_calls"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}"#,
                Some("tool_choice"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"top_p":0}"#,
                Some("top_p"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]}"#,
                Some("stop"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"top_logprobs":3}"#,
                Some("top_logprobs"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":99}"#,
                Some("top_logprobs"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#,
                Some("messages[0].content[0]"),
                "invalid_value",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"file"}]}]}"#,
                Some("messages[0].content"),
                "unsupported_parameter",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://a.b/c.png"}}]}]}"#,
                Some("messages[0].content[0]"),
                "invalid_value",
            ),
        ];
        for (body, param, code) in cases {
            let e = chat_err(body);
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.code, code, "{body}");
            if param.is_some() {
                assert_eq!(e.param.as_deref(), param, "{body}");
            }
        }
    }

    #[test]
    fn good_chat_request_maps_fields() {
        let (s, p) = chat(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0,"max_completion_tokens":7,"seed":5,"stop":"Z","stream":true,"stream_options":{"include_usage":true},"priority":-3}"#,
            1,
            &Limits::default(),
        )
        .ok()
        .unwrap();
        assert_eq!(s.sampling.temperature, 0.0);
        assert_eq!(s.sampling.seed, 5);
        assert_eq!(s.max_tokens, Some(7));
        assert_eq!(s.stop, vec!["Z".to_string()]);
        assert!(s.stream && s.include_usage);
        assert_eq!(s.priority, Some(-3));
        assert!(matches!(p, PromptInput::Chat(m, _) if m.messages.len() == 1));
    }

    #[test]
    fn completion_prompt_shapes() {
        assert!(completion(br#"{"prompt":"hi"}"#, 1, 10, &Limits::default()).is_ok());
        assert!(completion(br#"{"prompt":[1,2,3]}"#, 1, 10, &Limits::default()).is_ok());
        assert_eq!(
            completion(br#"{"prompt":[1,99]}"#, 1, 10, &Limits::default())
                .err()
                .unwrap()
                .code,
            "invalid_value"
        );
        assert_eq!(
            completion(br#"{"prompt":["a","b"]}"#, 1, 10, &Limits::default())
                .err()
                .unwrap()
                .code,
            "unsupported_parameter"
        );
        assert_eq!(
            completion(br#"{"prompt":""}"#, 1, 10, &Limits::default())
                .err()
                .unwrap()
                .status,
            400
        );
        assert!(completion(
            br#"{"prompt":"x","echo":true,"max_tokens":0,"logprobs":1}"#,
            1,
            10,
            &Limits::default()
        )
        .is_ok());
        assert_eq!(
            completion(
                br#"{"prompt":"x","max_tokens":0}"#,
                1,
                10,
                &Limits::default()
            )
            .err()
            .unwrap()
            .param
            .as_deref(),
            Some("max_tokens")
        );
        assert_eq!(
            completion(
                br#"{"prompt":"x","logprobs":true}"#,
                1,
                10,
                &Limits::default()
            )
            .err()
            .unwrap()
            .code,
            "invalid_value"
        );
    }
}
