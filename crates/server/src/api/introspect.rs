//! What the server would do with a request, without generating:
//! `POST /apply-template` (a chat body → its prompt text), `POST /tokenize`
//! and `POST /detokenize` (llama-server's shapes), and
//! `POST /v1/chat/completions/render` (a chat body → the prompt's text and
//! token IDs, for routers that place requests by prefix; media parts are
//! decoded and encoded, their positions counted, their placeholder IDs
//! negative).

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::generate::chat_tokens;
use super::state::Shared;
use crate::http::error::ApiError;
use crate::prepare::media::{span_tokens, MediaPart};
use crate::prepare::validate::{self, PromptInput};

/// A chat body's prompt (media parts as markers in its text) and its
/// media parts, not yet decoded.
fn chat_prompt(
    s: &Shared,
    body: &Bytes,
) -> Result<(steward_engine::chat::ChatPrompt, Vec<MediaPart>), ApiError> {
    match validate::chat(body, 0, &s.limits)?.1 {
        PromptInput::Chat(c, parts) => Ok((c, parts)),
        _ => Err(ApiError::internal("a chat body gave no chat prompt")),
    }
}

pub(crate) async fn apply_template(
    State(s): State<Shared>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let engine = super::models::route(&s, &super::models::Peek::of(&body))
        .await?
        .engine;
    // The media markers show where each part goes; nothing is decoded.
    let (c, _) = chat_prompt(&s, &body)?;
    let prompt = engine.preparer().render(c).await?;
    Ok(Json(json!({ "prompt": prompt })))
}

pub(crate) async fn render(State(s): State<Shared>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let engine = super::models::route(&s, &super::models::Peek::of(&body))
        .await?
        .engine;
    let (c, parts) = chat_prompt(&s, &body)?;
    let prompt = engine.preparer().render(c.clone()).await?;
    let (t, kinds) = chat_tokens(&s, &engine, c, parts).await?;
    let (image_tokens, audio_tokens) = span_tokens(&t.media, &kinds);
    Ok(Json(json!({
        "prompt": prompt,
        "prompt_token_ids": t.tokens,
        "num_tokens": t.tokens.len(),
        "image_tokens": image_tokens.unwrap_or(0),
        "audio_tokens": audio_tokens.unwrap_or(0),
        "starts_in_reasoning": t.in_reasoning,
    })))
}

fn bool_field(v: &Value, name: &str, default: bool) -> Result<bool, ApiError> {
    match v.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid_value(
            format!("`{name}` must be a boolean"),
            name,
        )),
    }
}

pub(crate) async fn tokenize(
    State(s): State<Shared>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let engine = super::models::route(&s, &super::models::Peek::of(&body))
        .await?
        .engine;
    let v: Value = validate::parse_json(&body)?;
    if v.get("messages").is_some() {
        // vLLM's chat form: the messages through the template, media
        // parts counted as the rows they take.
        let (c, parts) = chat_prompt(&s, &body)?;
        let (t, kinds) = chat_tokens(&s, &engine, c, parts).await?;
        let (image_tokens, audio_tokens) = span_tokens(&t.media, &kinds);
        return Ok(Json(json!({
            "tokens": t.tokens,
            "count": t.tokens.len(),
            "image_tokens": image_tokens.unwrap_or(0),
            "audio_tokens": audio_tokens.unwrap_or(0),
        })));
    }
    let content = match v.get("content") {
        Some(Value::String(c)) => c.clone(),
        _ => {
            return Err(ApiError::invalid_value(
                "`content` must be a string (or send `messages`, as for a chat)",
                "content",
            ))
        }
    };
    let add_special = bool_field(&v, "add_special", false)?;
    let parse_special = bool_field(&v, "parse_special", true)?;
    let with_pieces = bool_field(&v, "with_pieces", false)?;
    let pr = engine.preparer();
    let tokens = pr.tokenize(content, add_special, parse_special).await?;
    if !with_pieces {
        return Ok(Json(json!({ "tokens": tokens })));
    }
    let pieces: Vec<Value> = tokens
        .iter()
        .map(|&t| {
            let bytes = engine.token_text(t);
            match std::str::from_utf8(bytes) {
                Ok(p) => json!({"id": t, "piece": p}),
                Err(_) => json!({"id": t, "piece": bytes}),
            }
        })
        .collect();
    Ok(Json(json!({ "tokens": pieces })))
}

pub(crate) async fn detokenize(
    State(s): State<Shared>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let engine = super::models::route(&s, &super::models::Peek::of(&body))
        .await?
        .engine;
    let v: Value = validate::parse_json(&body)?;
    let bad = || ApiError::invalid_value("`tokens` must be an array of token IDs", "tokens");
    let tokens: Vec<i32> = v
        .get("tokens")
        .and_then(Value::as_array)
        .ok_or_else(bad)?
        .iter()
        .map(|t| {
            t.as_i64()
                .and_then(|t| i32::try_from(t).ok())
                .ok_or_else(bad)
        })
        .collect::<Result<_, _>>()?;
    let content = engine.preparer().detokenize(&tokens).map_err(|t| {
        ApiError::invalid_value(
            format!(
                "token {t} is outside the vocabulary (0..{})",
                engine.preparer().n_vocab()
            ),
            "tokens",
        )
    })?;
    Ok(Json(json!({ "content": content })))
}
