//! Steward's HTTP layer: the router (`app()`, testable without a socket),
//! routes, auth, metrics text; replies and SSE framing in `reply`. Every
//! failure goes through `error::ApiError`, the one mapping to HTTP.
//!
//! A request's path here: validate wire → prepare (template + tokenize on the
//! engine's bounded pool) → context check → submit (bounded inbox) → relay
//! events as JSON or SSE. Dropping the response body (client gone) drops the
//! `RequestStream`, which the engine treats as a cancellation.

pub mod error;
pub mod logprobs;
pub mod metrics;
mod reply;
pub mod tools;
pub mod validate;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use steward_engine::{EngineHandle, Event, GenerateRequest, PrepareError, Preparer};
use steward_protocol as p;

use crate::error::ApiError;
use crate::reply::{collect, ctx_timeout, sse_response, ReplyCtx};
use crate::validate::PromptInput;

pub struct AppState {
    /// Set once the model is loaded; until then the server answers
    /// `/health`, and everything else says it is loading.
    engine: std::sync::OnceLock<EngineHandle>,
    pub api_key: Option<String>,
    pub metrics: metrics::HttpMetrics,
    /// Interval of SSE comment pings while a stream has nothing to send.
    pub sse_keepalive: std::time::Duration,
    /// Longest any request may take, end to end (None: no limit).
    pub request_timeout: Option<std::time::Duration>,
    next_seq: AtomicU64,
}

impl AppState {
    pub fn new(engine: EngineHandle, api_key: Option<String>) -> Arc<Self> {
        Self::with_keepalive(engine, api_key, std::time::Duration::from_secs(5))
    }

    pub fn with_keepalive(
        engine: EngineHandle,
        api_key: Option<String>,
        sse_keepalive: std::time::Duration,
    ) -> Arc<Self> {
        let s = Self::loading(api_key, sse_keepalive, None);
        s.set_engine(engine);
        s
    }

    /// A state with no engine yet: serve it while the model loads.
    pub fn loading(
        api_key: Option<String>,
        sse_keepalive: std::time::Duration,
        request_timeout: Option<std::time::Duration>,
    ) -> Arc<Self> {
        Arc::new(AppState {
            engine: std::sync::OnceLock::new(),
            api_key: api_key.filter(|k| !k.is_empty()),
            metrics: metrics::HttpMetrics::default(),
            sse_keepalive,
            request_timeout,
            next_seq: AtomicU64::new(1),
        })
    }
}

type Shared = Arc<AppState>;

impl AppState {
    /// Attach the loaded engine (once).
    pub fn set_engine(&self, engine: EngineHandle) {
        let _ = self.engine.set(engine);
    }

    pub fn engine(&self) -> Option<&EngineHandle> {
        self.engine.get()
    }

    fn eng(&self) -> Result<&EngineHandle, ApiError> {
        self.engine
            .get()
            .ok_or_else(|| ApiError::from(steward_engine::SubmitError::NotReady))
    }
}

/// Bind the listening socket. `send_buffer` caps each connection's kernel
/// send buffer (accepted sockets inherit it): without a cap the kernel
/// absorbs megabytes of a slow reader's stream before the engine's outbox
/// sees any back-pressure, and the slow-reader policy acts late.
/// The listening socket: every accepted connection gets TCP_NODELAY, so a
/// streamed token is sent at once instead of possibly waiting, under
/// Nagle's algorithm, for the client's (delayed) acknowledgement of the
/// previous one. (It did not change the H200 stall measurement: those
/// ~110 ms gaps were tokens that complete no UTF-8 character,
/// docs/BENCHMARKS.md [8/8].)
pub type Listener = axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)>;

fn no_delay(s: &mut tokio::net::TcpStream) {
    if let Err(e) = s.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
}

pub fn bind(addr: std::net::SocketAddr, send_buffer: Option<u32>) -> std::io::Result<Listener> {
    use axum::serve::ListenerExt;
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    if let Some(n) = send_buffer {
        sock.set_send_buffer_size(n)?;
    }
    sock.bind(addr)?;
    let tap: fn(&mut tokio::net::TcpStream) = no_delay;
    Ok(sock.listen(1024)?.tap_io(tap))
}

/// The router. `/health` and `/ready` answer without the API key and without
/// touching the engine thread.
pub fn app(state: Shared) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics_text))
        .route("/debug/ledger", get(debug_ledger))
        .route("/debug/requests", get(debug_requests))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/ready", get(ready))
        .merge(api)
        .fallback(|req: Request| async move { ApiError::not_found(req.uri().path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .with_state(state)
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    // Constant time in the key's length: no early exit on the first mismatch.
    let mut diff = (a.len() != b.len()) as u8;
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff);
    }
    diff == 0
}

async fn auth(State(s): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(key) = &s.api_key {
        let given = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !ct_eq(given.as_bytes(), key.as_bytes()) {
            s.metrics.record_status(401);
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

async fn ready(State(s): State<Shared>) -> Response {
    let Some(engine) = s.engine() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "loading"})),
        )
            .into_response();
    };
    let st = engine.stats();
    if engine.is_draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "draining"})),
        )
            .into_response();
    }
    if st.ready && !st.stopped {
        Json(json!({"status": "ready"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": if st.stopped { "stopped" } else { "loading" }})),
        )
            .into_response()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn models(State(s): State<Shared>) -> Result<Json<p::ModelList>, ApiError> {
    let engine = s.eng()?;
    Ok(Json(p::ModelList {
        object: "list".into(),
        data: vec![p::ModelCard {
            id: engine.config().served_name.clone(),
            object: "model".into(),
            created: now_secs(),
            owned_by: "steward".into(),
            identity: serde_json::to_value(engine.identity()).ok(),
        }],
    }))
}

async fn debug_ledger(State(s): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    let l = s.eng()?.ledger();
    let mut v = serde_json::to_value(&l).unwrap_or_default();
    v["sum_of_terms"] = json!(l.sum());
    Ok(Json(v))
}

async fn debug_requests(State(s): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    let st = s.eng()?.stats();
    Ok(Json(json!({ "requests": st.live })))
}

async fn metrics_text(State(s): State<Shared>) -> Response {
    let Some(engine) = s.engine() else {
        let body = "# HELP steward_phase Readiness phase (1 for the current one)\n# TYPE steward_phase gauge\nsteward_phase{phase=\"loading\"} 1\n";
        return ([("content-type", "text/plain; version=0.0.4")], body).into_response();
    };
    let mut body = metrics::render(&engine.stats(), engine.waiting(), &s.metrics);
    metrics::render_phase(&mut body, &engine.stats(), engine.drain_elapsed());
    metrics::render_ledger(&mut body, &engine.ledger());
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

fn request_id(headers: &HeaderMap, prefix: &str, seq: u64) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.is_ascii())
        .map(str::to_string)
        .unwrap_or_else(|| format!("{prefix}-{:x}{:06x}", now_secs(), seq))
}

#[derive(Clone, Copy, PartialEq)]
enum Api {
    Chat,
    Completion,
}

async fn chat_completions(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    generate(s, headers, body, Api::Chat).await
}

async fn completions(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    generate(s, headers, body, Api::Completion).await
}

async fn generate(s: Shared, headers: HeaderMap, body: Bytes, api: Api) -> Response {
    let arrival = Instant::now();
    let seq = s.next_seq.fetch_add(1, Ordering::Relaxed);
    let id = request_id(
        &headers,
        if api == Api::Chat { "chatcmpl" } else { "cmpl" },
        seq,
    );
    let span = tracing::info_span!("request", request_id = %id);
    let result = tracing::Instrument::instrument(run(&s, &id, seq, body, api, arrival), span).await;
    let mut resp = match result {
        Ok(r) => r,
        Err(e) => {
            tracing::info!(request_id = %id, status = e.status.as_u16(), code = e.code, "request rejected");
            s.metrics.record_status(e.status.as_u16());
            s.metrics.record_failure(e.code);
            e.into_response()
        }
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

async fn run(
    s: &Shared,
    id: &str,
    seq: u64,
    body: Bytes,
    api: Api,
    arrival: Instant,
) -> Result<Response, ApiError> {
    let engine = s.eng()?;
    let (spec, input) = match api {
        Api::Chat => validate::chat(&body, seq)?,
        Api::Completion => validate::completion(&body, seq, engine.preparer().n_vocab())?,
    };
    let n_vocab = engine.preparer().n_vocab();
    if let Some(&(t, _)) = spec
        .sampling
        .logit_bias
        .iter()
        .find(|b| b.0 as usize >= n_vocab)
    {
        return Err(ApiError::invalid_value(
            format!("`logit_bias` names token {t}, outside the vocabulary (0..{n_vocab})"),
            "logit_bias",
        ));
    }
    let served = &engine.config().served_name;
    if let Some(m) = spec.model.as_deref() {
        if !m.is_empty() && m != served {
            return Err(ApiError::model_not_found(m));
        }
    }
    let score_prompt = spec.echo && spec.logprobs.is_some();
    if score_prompt && spec.stream {
        return Err(ApiError::unsupported(
            "`echo` with `logprobs` is supported without `stream` only",
            "echo",
        ));
    }
    let mut echo_text = None;
    let prompt = match input {
        PromptInput::Chat(m) => {
            let tools = spec
                .tools
                .as_ref()
                .map(|t| steward_engine::prepare::ToolSpec {
                    tools: t.tools.clone(),
                });
            engine.preparer().chat(m, tools).await?
        }
        PromptInput::Text(t) => {
            if spec.echo {
                echo_text = Some(t.clone());
            }
            engine.preparer().text(t).await?
        }
        PromptInput::Tokens(t) => {
            if spec.echo {
                let bytes: Vec<u8> = t
                    .iter()
                    .flat_map(|&x| engine.token_bytes(x).to_vec())
                    .collect();
                echo_text = Some(String::from_utf8_lossy(&bytes).into_owned());
            }
            t
        }
    };
    let first_prompt_token = prompt.first().copied();
    let tokenized = Instant::now();
    let max_tokens = Preparer::resolve_max_tokens(
        prompt.len(),
        spec.max_tokens,
        engine.context_limit(),
        engine.config().max_tokens_limit,
    )?;
    let mut constraint = match &spec.grammar {
        None => None,
        Some((g, param)) => Some(engine.preparer().constraint(g.clone()).await.map_err(
            |e| match e {
                PrepareError::Grammar(m) => ApiError {
                    code: "invalid_grammar",
                    ..ApiError::invalid_value(format!("`{param}` does not compile: {m}"), param)
                },
                e => ApiError::from(e),
            },
        )?),
    };
    let deadline = {
        let asked = ctx_timeout(&spec);
        let limit = s.request_timeout;
        match (asked, limit) {
            (Some(a), Some(l)) => Some(arrival + a.min(l)),
            (a, l) => a.or(l).map(|d| arrival + d),
        }
    };
    // One sequence per choice: the same prompt (computed once and shared
    // through the prefix cache), its own RNG stream (seed + index), its own
    // copy of the grammar state.
    let n = spec.n;
    let mut streams = Vec::with_capacity(n as usize);
    for i in 0..n {
        let mut sampling = spec.sampling.clone();
        sampling.seed = sampling.seed.wrapping_add(u64::from(i));
        streams.push(engine.submit(GenerateRequest {
            id: if n == 1 {
                id.to_string()
            } else {
                format!("{id}-{i}")
            },
            prompt: prompt.clone(),
            max_tokens,
            sampling,
            stop: spec.stop.clone(),
            ignore_eos: spec.ignore_eos,
            logprobs: spec.logprobs,
            prompt_logprobs: score_prompt,
            arrival,
            tokenized,
            deadline,
            // Each choice advances its own grammar state; the last takes
            // the compiled one.
            constraint: if i + 1 == n {
                constraint.take()
            } else {
                constraint.clone()
            },
        })?);
    }
    let ctx = ReplyCtx {
        id: id.to_string(),
        model: served.clone(),
        created: now_secs(),
        api,
        spec,
        arrival,
        engine: engine.clone(),
        echo_text,
        first_prompt_token,
    };
    // Wait for admission (or a queue timeout, which is then a real 503).
    let mut firsts = Vec::with_capacity(streams.len());
    for st in streams.iter_mut() {
        firsts.push(match st.next().await {
            Some(Event::Admitted) => None,
            Some(Event::Error(e)) => return Err(ApiError::from(e)),
            other => other,
        });
    }
    if ctx.spec.stream {
        s.metrics.record_status(200);
        Ok(sse_response(s.clone(), ctx, streams, firsts))
    } else {
        let results = futures::future::join_all(
            streams
                .into_iter()
                .zip(firsts)
                .map(|(st, first)| collect(st, first)),
        )
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        s.metrics.record_status(200);
        for r in &results {
            s.metrics.observe_finished(&r.2);
        }
        // Non-streaming: the first text leaves with the whole body.
        s.metrics
            .observe_first_text(ctx.arrival.elapsed().as_secs_f64());
        Ok(Json(ctx.full_response(results)).into_response())
    }
}

#[cfg(test)]
mod tests {
    /// Streamed tokens are small writes: every accepted connection must
    /// have Nagle's algorithm off.
    #[tokio::test]
    async fn accepted_connections_have_tcp_nodelay() {
        use axum::serve::Listener as _;
        let mut l = super::bind("127.0.0.1:0".parse().unwrap(), None).unwrap();
        let addr = l.local_addr().unwrap();
        let client = tokio::spawn(tokio::net::TcpStream::connect(addr));
        let (server_side, _) = l.accept().await;
        assert!(server_side.nodelay().unwrap());
        drop(client.await.unwrap().unwrap());
    }
}
