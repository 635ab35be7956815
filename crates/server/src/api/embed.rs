//! Embeddings (`POST /v1/embeddings`, OpenAI's shape) and rerank
//! (`POST /v1/rerank` and `/rerank`, the Jina/Cohere shape llama-server
//! serves), for embedding and reranking GGUFs. They take the same route as
//! generation: the registry (load on demand), the model's owner thread
//! through its bounded inbox, its waiting bound and queue timeout, and the
//! model's HTTP metrics. A client that goes drops the reply, and the owner
//! computes nothing more for it.
//!
//! Limits: at most `MAX_INPUTS` inputs (documents), `MAX_INPUT_BYTES` of
//! text each, `MAX_TOTAL_TOKENS` per request, and every input within the
//! model's longest (one micro-batch: llama.cpp's non-causal attention
//! cannot split a sequence).

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde_json::{json, Value};
use steward_engine::{EngineHandle, Pooling, TokenId};

use super::models;
use super::state::{request_id, Shared};
use crate::http::error::ApiError;

/// Most inputs of one embeddings request (OpenAI's limit), and most
/// documents of one rerank.
pub(crate) const MAX_INPUTS: usize = 2048;
/// Most bytes of one text input.
pub(crate) const MAX_INPUT_BYTES: usize = 64 << 10;
/// Most tokens of one request, all inputs together (OpenAI: 300,000).
pub(crate) const MAX_TOTAL_TOKENS: usize = 300_000;

/// One input as sent: text, or token ids used as they are.
enum Input {
    Text(String),
    Tokens(Vec<TokenId>),
}

pub(crate) async fn embeddings(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(s, headers, body, Kind::Embed).await
}

pub(crate) async fn rerank(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    serve(s, headers, body, Kind::Rerank).await
}

#[derive(Clone, Copy)]
enum Kind {
    Embed,
    Rerank,
}

/// Route to the model, answer, record the status on the model's metrics.
async fn serve(s: Shared, headers: HeaderMap, body: Bytes, kind: Kind) -> Response {
    let seq = s.next_seq.fetch_add(1, Ordering::Relaxed);
    let prefix = match kind {
        Kind::Embed => "embd",
        Kind::Rerank => "rerank",
    };
    let id = request_id(&headers, prefix, seq);
    let (r, m) = match models::route(&s, &models::Peek::of(&body)).await {
        Ok(routed) => {
            let (name, engine) = (&routed.name, &routed.engine);
            let r = match kind {
                Kind::Embed => embed_on(&s, &id, &body, name, engine).await,
                Kind::Rerank => rerank_on(&s, &id, &body, name, engine).await,
            };
            (r, routed.metrics.clone())
        }
        Err(e) => (Err(e), s.metrics.clone()),
    };
    finish(r, m, &id)
}

fn finish(
    r: Result<Value, ApiError>,
    m: std::sync::Arc<crate::http::counters::HttpMetrics>,
    id: &str,
) -> Response {
    let mut resp = match r {
        Ok(v) => {
            m.record_status(200);
            Json(v).into_response()
        }
        Err(e) => {
            tracing::info!(request_id = %id, status = e.status.as_u16(), code = e.code, "request rejected");
            m.record_status(e.status.as_u16());
            m.record_failure(e.code);
            e.into_response()
        }
    };
    if let Ok(v) = axum::http::HeaderValue::from_str(id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// `input`: a string, a list of strings, a list of token ids, or a list of
/// token-id lists.
fn inputs(v: Option<&Value>, n_vocab: usize) -> Result<Vec<Input>, ApiError> {
    let bad = |m: String| ApiError::invalid_value(m, "input");
    let one = |v: &Value, i: usize| -> Result<Input, ApiError> {
        match v {
            Value::String(t) => Ok(Input::Text(t.clone())),
            Value::Array(a) => Ok(Input::Tokens(
                a.iter()
                    .map(|x| token(x, n_vocab))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        bad(format!("`input[{i}]` must list token ids in 0..{n_vocab}"))
                    })?,
            )),
            _ => Err(bad(format!(
                "`input[{i}]` must be a string or a list of token ids"
            ))),
        }
    };
    let list = match v {
        None => return Err(ApiError::invalid("`input` is required", Some("input"))),
        Some(Value::String(t)) => vec![Input::Text(t.clone())],
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_number) => {
            vec![one(&Value::Array(a.clone()), 0)?]
        }
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, x)| one(x, i))
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(bad(
                "`input` must be a string, a list of strings or token ids".into(),
            ))
        }
    };
    check_count(list.len(), "input")?;
    Ok(list)
}

fn token(v: &Value, n_vocab: usize) -> Option<TokenId> {
    v.as_u64()
        .filter(|&t| (t as usize) < n_vocab)
        .map(|t| t as TokenId)
}

fn check_count(n: usize, param: &str) -> Result<(), ApiError> {
    if n == 0 {
        return Err(ApiError::invalid_value(
            format!("`{param}` must not be empty"),
            param,
        ));
    }
    if n > MAX_INPUTS {
        return Err(ApiError::invalid_value(
            format!("`{param}` has {n} entries; at most {MAX_INPUTS} are allowed"),
            param,
        ));
    }
    Ok(())
}

/// Tokenize text inputs (on the tokenizer pool), check every length.
async fn tokenize(
    engine: &EngineHandle,
    list: Vec<Input>,
    param: &str,
) -> Result<Vec<Vec<TokenId>>, ApiError> {
    let mut texts = Vec::new();
    for (i, x) in list.iter().enumerate() {
        if let Input::Text(t) = x {
            if t.is_empty() {
                return Err(ApiError::invalid_value(
                    format!("`{param}[{i}]` is an empty string"),
                    param,
                ));
            }
            if t.len() > MAX_INPUT_BYTES {
                return Err(ApiError::invalid_value(
                    format!(
                        "`{param}[{i}]` has {} bytes; at most {MAX_INPUT_BYTES} are allowed",
                        t.len()
                    ),
                    param,
                ));
            }
            texts.push(t.clone());
        }
    }
    let mut toks = engine.preparer().embed_inputs(texts).await?.into_iter();
    let out: Vec<Vec<TokenId>> = list
        .into_iter()
        .map(|x| match x {
            Input::Text(_) => toks.next().unwrap_or_default(),
            Input::Tokens(t) => t,
        })
        .collect();
    check_lengths(engine, &out, param)?;
    Ok(out)
}

fn check_lengths(
    engine: &EngineHandle,
    seqs: &[Vec<TokenId>],
    param: &str,
) -> Result<(), ApiError> {
    let longest = engine.max_embed_input();
    for (i, t) in seqs.iter().enumerate() {
        if t.is_empty() {
            return Err(ApiError::invalid_value(
                format!("`{param}[{i}]` has no tokens"),
                param,
            ));
        }
        if t.len() > longest {
            return Err(ApiError {
                code: "context_length_exceeded",
                ..ApiError::invalid_value(
                    format!(
                        "`{param}[{i}]` has {} tokens; this model embeds at most {longest} per input",
                        t.len()
                    ),
                    param,
                )
            });
        }
    }
    let total: usize = seqs.iter().map(Vec::len).sum();
    if total > MAX_TOTAL_TOKENS {
        return Err(ApiError::invalid_value(
            format!("the request has {total} tokens; at most {MAX_TOTAL_TOKENS} are allowed"),
            param,
        ));
    }
    Ok(())
}

/// Compute on the owner thread; the engine's result, or its error.
async fn compute(
    s: &Shared,
    engine: &EngineHandle,
    id: &str,
    seqs: Vec<Vec<TokenId>>,
) -> Result<steward_engine::EmbedOutput, ApiError> {
    let deadline = s
        .request_timeout
        .and_then(|t| Instant::now().checked_add(t));
    let rx = engine.embed(id.to_string(), seqs, deadline)?;
    match rx.await {
        Ok(r) => Ok(r?),
        Err(_) => Err(ApiError::internal(
            "the engine ended this request without a result",
        )),
    }
}

fn require_pooling(engine: &EngineHandle, name: &str) -> Result<Pooling, ApiError> {
    engine.pooling().ok_or_else(|| ApiError {
        code: "model_not_embedding",
        ..ApiError::invalid(
            format!(
                "model `{name}` generates text; embeddings and rerank need an embedding or \
                 reranking model (a GGUF with a pooling type)"
            ),
            Some("model"),
        )
    })
}

fn l2_normalize(v: &mut [f32]) {
    let n = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x = (f64::from(*x) / n) as f32);
    }
}

async fn embed_on(
    s: &Shared,
    id: &str,
    body: &[u8],
    name: &str,
    engine: &EngineHandle,
) -> Result<Value, ApiError> {
    let pooling = require_pooling(engine, name)?;
    if pooling == Pooling::Rank {
        return Err(ApiError {
            code: "model_not_embedding",
            ..ApiError::invalid(
                format!("model `{name}` is a reranker: it scores pairs at /v1/rerank, it embeds nothing"),
                Some("model"),
            )
        });
    }
    let req = crate::prepare::validate::json_object(body)?;
    let base64 = match req.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(_) => {
            return Err(ApiError::invalid_value(
                "`encoding_format` must be `float` or `base64`",
                "encoding_format",
            ))
        }
    };
    let list = inputs(req.get("input"), engine.preparer().n_vocab())?;
    let seqs = tokenize(engine, list, "input").await?;
    let out = compute(s, engine, id, seqs).await?;
    let width = out.vectors.first().map_or(0, Vec::len);
    // `dimensions`: the first N of each vector, renormalised (Matryoshka
    // truncation, as OpenAI's v3 models and Ollama do); at most the width.
    let dims = match req.get("dimensions") {
        None | Some(Value::Null) => width,
        Some(v) => match v.as_u64() {
            Some(d) if d >= 1 && d as usize <= width => d as usize,
            _ => {
                return Err(ApiError::invalid_value(
                    format!("`dimensions` must be an integer from 1 to this model's {width}"),
                    "dimensions",
                ))
            }
        },
    };
    let data: Vec<Value> = out
        .vectors
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            v.truncate(dims);
            l2_normalize(&mut v);
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(json!({
        "object": "list",
        "data": data,
        "model": name,
        "usage": {"prompt_tokens": out.tokens, "total_tokens": out.tokens},
    }))
}

/// A document: a string, or an object with `text` (Cohere's and Jina's
/// structured documents).
fn doc_text(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("text").and_then(Value::as_str),
        _ => None,
    }
}

async fn rerank_on(
    s: &Shared,
    id: &str,
    body: &[u8],
    name: &str,
    engine: &EngineHandle,
) -> Result<Value, ApiError> {
    let pooling = require_pooling(engine, name)?;
    let req = crate::prepare::validate::json_object(body)?;
    let query = match req.get("query") {
        Some(Value::String(q)) if !q.is_empty() => q.clone(),
        _ => {
            return Err(ApiError::invalid(
                "`query` must be a non-empty string",
                Some("query"),
            ))
        }
    };
    let docs = match req.get("documents") {
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, d)| {
                doc_text(d).map(str::to_string).ok_or_else(|| {
                    ApiError::invalid_value(
                        format!("`documents[{i}]` must be a string or an object with `text`"),
                        "documents",
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => {
            return Err(ApiError::invalid(
                "`documents` must be a list",
                Some("documents"),
            ))
        }
    };
    check_count(docs.len(), "documents")?;
    let top_n = match req.get("top_n") {
        None | Some(Value::Null) => docs.len(),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => (n as usize).min(docs.len()),
            _ => {
                return Err(ApiError::invalid_value(
                    "`top_n` must be a positive integer",
                    "top_n",
                ))
            }
        },
    };
    let return_documents = match req.get("return_documents") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::invalid_value(
                "`return_documents` must be a boolean",
                "return_documents",
            ))
        }
    };
    let mut list = vec![Input::Text(query.clone())];
    list.extend(docs.iter().cloned().map(Input::Text));
    let toks = tokenize(engine, list, "documents").await?;
    let (scores, tokens) = if pooling == Pooling::Rank {
        // A cross-encoder: one sequence per (query, document) pair, scored
        // by the classifier head.
        let (q, ds) = toks
            .split_first()
            .ok_or_else(|| ApiError::internal("no query tokens"))?;
        let pairs: Vec<Vec<TokenId>> = ds.iter().map(|d| pair(q, d)).collect();
        check_lengths(engine, &pairs, "documents")?;
        let out = compute(s, engine, id, pairs).await?;
        let scores = out
            .vectors
            .iter()
            .map(|v| v.first().copied().unwrap_or(0.0))
            .collect::<Vec<_>>();
        (scores, out.tokens)
    } else {
        // A bi-encoder: cosine similarity of the query's and each
        // document's normalised embeddings.
        let out = compute(s, engine, id, toks).await?;
        let mut vs = out.vectors;
        vs.iter_mut().for_each(|v| l2_normalize(v));
        let (q, ds) = vs
            .split_first()
            .ok_or_else(|| ApiError::internal("no query embedding"))?;
        let scores = ds
            .iter()
            .map(|d| q.iter().zip(d).map(|(a, b)| a * b).sum::<f32>())
            .collect();
        (scores, out.tokens)
    };
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let results: Vec<Value> = order
        .into_iter()
        .take(top_n)
        .map(|i| {
            let mut r = json!({"index": i, "relevance_score": scores[i]});
            if return_documents {
                r["document"] = json!({"text": docs[i]});
            }
            r
        })
        .collect();
    Ok(json!({
        "id": id,
        "object": "list",
        "model": name,
        "results": results,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "meta": {"billed_units": {"search_units": 1}},
    }))
}

/// A cross-encoder's input: the query's tokens with its own specials, then
/// the document's without its leading one (BERT: `[CLS] q [SEP] d [SEP]`).
fn pair(q: &[TokenId], d: &[TokenId]) -> Vec<TokenId> {
    let mut t = q.to_vec();
    t.extend_from_slice(if d.len() > 1 { &d[1..] } else { d });
    t
}
