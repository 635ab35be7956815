//! OpenAI's two logprobs shapes, built from the engine's `TokenLogprob`s:
//! chat (`{"content":[{token, logprob, bytes, top_logprobs}]}`) and legacy
//! completions (`{tokens, token_logprobs, top_logprobs, text_offset}`).

use serde_json::{json, Map, Value};
use steward_engine::{EngineHandle, TokenId, TokenLogprob};

fn text(e: &EngineHandle, t: TokenId) -> String {
    String::from_utf8_lossy(e.token_bytes(t)).into_owned()
}

pub fn chat(e: &EngineHandle, lps: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = lps
        .iter()
        .map(|lp| {
            let top: Vec<Value> = lp
                .top
                .iter()
                .map(|(t, l)| json!({"token": text(e, *t), "logprob": l, "bytes": e.token_bytes(*t)}))
                .collect();
            json!({
                "token": text(e, lp.token),
                "logprob": lp.logprob,
                "bytes": e.token_bytes(lp.token),
                "top_logprobs": top,
            })
        })
        .collect();
    json!({ "content": content })
}

/// Legacy completions logprobs. `first_prompt_token` is the unscored first
/// token of an echoed prompt (its logprob is `null`, as OpenAI's).
pub fn completion(
    e: &EngineHandle,
    first_prompt_token: Option<TokenId>,
    scored: &[TokenLogprob],
    offset0: usize,
) -> Value {
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut top_logprobs = Vec::new();
    let mut text_offset = Vec::new();
    let mut off = offset0;
    if let Some(t) = first_prompt_token {
        let s = text(e, t);
        text_offset.push(off);
        off += s.len();
        tokens.push(Value::String(s));
        token_logprobs.push(Value::Null);
        top_logprobs.push(Value::Null);
    }
    for lp in scored {
        let s = text(e, lp.token);
        text_offset.push(off);
        off += s.len();
        tokens.push(Value::String(s));
        token_logprobs.push(json!(lp.logprob));
        let mut m = Map::new();
        for (t, l) in &lp.top {
            m.insert(text(e, *t), json!(l));
        }
        top_logprobs.push(Value::Object(m));
    }
    json!({
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": text_offset,
    })
}
