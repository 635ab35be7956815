//! The APIs served by translation (`steward-dialects`): Anthropic Messages
//! (`/v1/messages`, `/v1/messages/count_tokens`) and OpenAI Responses
//! (`/v1/responses` and its stored responses). A request is translated into
//! a chat-completions body and takes the chat path unchanged (`generate`):
//! the same validation, limits, admission, cancellation and metrics. Its
//! answer is given in the API's own shape: whole through `Dialect::whole`,
//! streamed through a `DialectStream` fed by `reply::Sink` (the traits are
//! `deliver::shape`'s, below this file: the reply never reaches up here).
//!
//! Errors: the Responses API's are OpenAI's shape already; every error
//! answered on a `/v1/messages` path (auth, body limits, validation,
//! admission) is rewritten into Anthropic's by `anthropic_errors`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::Value;
use steward_dialects::{self as d, DialectError, Finish, Out, Piece, Usage};

use super::generate::generate;
use super::models;
use super::state::{now_secs, Shared};
use crate::deliver::shape::{Dialect, DialectStream};
use crate::http::access::Admitted;
use crate::http::error::ApiError;
use crate::prepare::spec::Api;
use crate::prepare::validate;

/// A translation failure as an OpenAI-shaped error (rewritten for
/// Anthropic's paths by `anthropic_errors`).
fn api_error(e: DialectError) -> ApiError {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    ApiError {
        status,
        code: if e.status == 400 {
            "invalid_request"
        } else {
            "dialect_error"
        },
        ..ApiError::invalid(e.message, e.param.as_deref())
    }
}

fn parse(body: &[u8]) -> Result<Value, ApiError> {
    validate::json_object(body).map(Value::Object)
}

fn unique_id(s: &Shared, prefix: &str) -> String {
    let seq = s.next_seq.fetch_add(1, Ordering::Relaxed);
    // Unique within the process (sequence) and across restarts (time and
    // the process id), whatever `x-request-id` the client sent.
    format!("{prefix}_{:x}{:x}{seq:06x}", now_secs(), std::process::id())
}

// ---- Anthropic Messages ----------------------------------------------------

struct Anthropic {
    id: String,
}

impl DialectStream for d::anthropic::MessageStream {
    fn start(&mut self) -> Vec<Out> {
        d::anthropic::MessageStream::start(self)
    }
    fn piece(&mut self, p: Piece) -> Vec<Out> {
        d::anthropic::MessageStream::piece(self, p)
    }
    fn finish(&mut self, f: Finish, u: Usage) -> Vec<Out> {
        d::anthropic::MessageStream::finish(self, f, u)
    }
    fn error(&mut self, e: &DialectError) -> Vec<Out> {
        d::anthropic::MessageStream::error(self, e)
    }
}

impl Dialect for Anthropic {
    fn id(&self) -> String {
        self.id.clone()
    }
    fn route(&self) -> &'static str {
        "POST /v1/messages"
    }
    fn whole(&self, _created: u64, model: &str, pieces: Vec<Piece>, f: Finish, u: Usage) -> Value {
        let mut st = d::anthropic::MessageStream::new(&self.id, model, u.input_tokens);
        let mut outs = st.start();
        for p in pieces {
            outs.extend(st.piece(p));
        }
        outs.extend(st.finish(f, u));
        d::anthropic::message_from_events(&outs)
    }
    fn stream(
        &self,
        id: &str,
        _created: u64,
        model: &str,
        prompt_tokens: u32,
    ) -> Box<dyn DialectStream> {
        Box::new(d::anthropic::MessageStream::new(id, model, prompt_tokens))
    }
}

pub(crate) async fn messages(
    State(s): State<Shared>,
    caller: Option<Extension<Admitted>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let t = match parse(&body).and_then(|v| d::anthropic::to_chat(&v).map_err(api_error)) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let chat = Bytes::from(serde_json::to_vec(&t.chat).unwrap_or_default());
    let dialect = Arc::new(Anthropic {
        id: unique_id(&s, "msg"),
    });
    let caller = caller.map(|c| c.0);
    generate(s, headers, chat, Api::Chat, Some(dialect), caller).await
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens as the model's
/// template renders it (system, messages and tools).
pub(crate) async fn count_tokens(State(s): State<Shared>, body: Bytes) -> Response {
    match count(&s, &body).await {
        Ok(n) => Json(serde_json::json!({ "input_tokens": n })).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn count(s: &Shared, body: &[u8]) -> Result<usize, ApiError> {
    let mut v = parse(body)?;
    // count_tokens takes no `max_tokens`; the translation needs one.
    if v.get("max_tokens").is_none() {
        v["max_tokens"] = Value::from(1);
    }
    let t = d::anthropic::to_chat(&v).map_err(api_error)?;
    let chat = serde_json::to_vec(&t.chat).unwrap_or_default();
    let routed = models::route(s, &models::Peek::of(&chat)).await?;
    let seq = s.next_seq.fetch_add(1, Ordering::Relaxed);
    let (_, input) = validate::chat(&chat, seq, &s.limits)?;
    match input {
        validate::PromptInput::Chat(c, parts) => {
            let (t, _) = super::generate::chat_tokens(s, &routed.engine, c, parts).await?;
            Ok(t.tokens.len())
        }
        _ => Err(ApiError::internal(
            "a chat body translated into something else",
        )),
    }
}

/// Errors answered on `/v1/messages…` in Anthropic's shape:
/// `{"type":"error","error":{"type","message"}}`.
pub(crate) async fn anthropic_errors(req: Request, next: Next) -> Response {
    if !req.uri().path().starts_with("/v1/messages") {
        return next.run(req).await;
    }
    let resp = next.run(req).await;
    let status = resp.status();
    if status.is_success() {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let out = d::anthropic::from_openai_error(status.as_u16(), &v);
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    (parts, Json(out)).into_response()
}

// ---- OpenAI Responses ------------------------------------------------------

struct Responses {
    id: String,
    t: Arc<d::responses::RTranslated>,
    /// The conversation before this response (a previous response's).
    before: Vec<Value>,
    store: Arc<crate::state::Responses>,
}

impl Responses {
    fn keep(&self, response: &Value) {
        if !self.t.store {
            return;
        }
        let mut conversation = self.before.clone();
        conversation.extend(self.t.input_items.iter().cloned());
        if let Some(out) = response.get("output").and_then(Value::as_array) {
            conversation.extend(out.iter().cloned());
        }
        let stored = d::responses::Stored {
            response: response.clone(),
            conversation,
        };
        if self.store.put(&self.id, stored).is_err() {
            tracing::warn!(id = %self.id, "response not stored: larger than the store");
        }
    }
}

struct ResponsesStream {
    inner: d::responses::ResponseStream,
    owner: Arc<Responses>,
}

impl DialectStream for ResponsesStream {
    fn start(&mut self) -> Vec<Out> {
        self.inner.start()
    }
    fn piece(&mut self, p: Piece) -> Vec<Out> {
        self.inner.piece(p)
    }
    fn finish(&mut self, f: Finish, u: Usage) -> Vec<Out> {
        let outs = self.inner.finish(f, u);
        if let Some(r) = self.inner.final_response() {
            self.owner.keep(&r);
        }
        outs
    }
    fn error(&mut self, e: &DialectError) -> Vec<Out> {
        self.inner.error(e)
    }
}

struct ResponsesHandle(Arc<Responses>);

impl Dialect for ResponsesHandle {
    fn id(&self) -> String {
        self.0.id.clone()
    }
    fn route(&self) -> &'static str {
        "POST /v1/responses"
    }
    fn whole(&self, created: u64, model: &str, pieces: Vec<Piece>, f: Finish, u: Usage) -> Value {
        let mut st = d::responses::ResponseStream::new(&self.0.id, created, model, &self.0.t);
        st.start();
        for p in pieces {
            st.piece(p);
        }
        st.finish(f, u);
        let v = st.final_response().unwrap_or(Value::Null);
        self.0.keep(&v);
        v
    }
    fn stream(
        &self,
        id: &str,
        created: u64,
        model: &str,
        _prompt_tokens: u32,
    ) -> Box<dyn DialectStream> {
        Box::new(ResponsesStream {
            inner: d::responses::ResponseStream::new(id, created, model, &self.0.t),
            owner: self.0.clone(),
        })
    }
}

fn not_found(id: &str, param: Option<&str>) -> ApiError {
    let shown: String = id.chars().take(128).collect();
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "response_not_found",
        ..ApiError::invalid(format!("Response with id '{shown}' not found."), param)
    }
}

pub(crate) async fn create_response(
    State(s): State<Shared>,
    caller: Option<Extension<Admitted>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let v = match parse(&body) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let store = s.responses.clone();
    let prev = match v.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => match store.get(id) {
            Some(p) => Some(p),
            None => return not_found(id, Some("previous_response_id")).into_response(),
        },
        Some(_) => {
            return ApiError::invalid_value(
                "`previous_response_id` must be a string",
                "previous_response_id",
            )
            .into_response()
        }
    };
    let t = match d::responses::to_chat(&v, prev.as_ref()) {
        Ok(t) => t,
        Err(e) => return api_error(e).into_response(),
    };
    let chat = Bytes::from(serde_json::to_vec(&t.chat).unwrap_or_default());
    let dialect = Arc::new(ResponsesHandle(Arc::new(Responses {
        id: unique_id(&s, "resp"),
        before: prev.map(|p| p.conversation).unwrap_or_default(),
        t: Arc::new(t),
        store,
    })));
    let caller = caller.map(|c| c.0);
    generate(s, headers, chat, Api::Chat, Some(dialect), caller).await
}

pub(crate) async fn get_response(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    match s.responses.get(&id) {
        Some(r) => Json(r.response).into_response(),
        None => not_found(&id, None).into_response(),
    }
}

/// `GET /v1/responses/{id}/input_items?order=asc|desc&after=ID&limit=1..100`
/// (OpenAI's defaults: newest first, 20 per page).
pub(crate) async fn input_items(
    State(s): State<Shared>,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    let mut page = d::responses::ItemsQuery::default();
    match q.get("order").map(String::as_str) {
        None | Some("desc") => {}
        Some("asc") => page.desc = false,
        Some(_) => {
            return ApiError::invalid_value("`order` must be asc or desc", "order").into_response()
        }
    }
    if let Some(l) = q.get("limit") {
        match l.parse::<usize>() {
            Ok(n) if (1..=100).contains(&n) => page.limit = n,
            _ => {
                return ApiError::invalid_value("`limit` must be from 1 to 100", "limit")
                    .into_response()
            }
        }
    }
    page.after = q.get("after").cloned();
    match s.responses.get(&id) {
        Some(r) => Json(d::responses::input_items_page(&r, &page)).into_response(),
        None => not_found(&id, None).into_response(),
    }
}

pub(crate) async fn delete_response(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    if s.responses.delete(&id) {
        Json(d::responses::deleted(&id)).into_response()
    } else {
        not_found(&id, None).into_response()
    }
}
