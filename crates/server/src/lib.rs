//! Steward's HTTP layer: the router (`app()`, testable without a socket),
//! routes, auth, metrics text; replies and SSE framing in `reply`. Every
//! failure goes through `error::ApiError`, the one mapping to HTTP.
//!
//! A request's path here: validate wire → prepare (template + tokenize on the
//! engine's bounded pool) → context check → submit (bounded inbox) → relay
//! events as JSON or SSE. Dropping the response body (client gone) drops the
//! `RequestStream`, which the engine treats as a cancellation.

mod body;
pub mod chat_input;
pub mod conn;
pub mod error;
mod forcing;
mod introspect;
mod labels;
pub mod limits;
pub mod logprobs;
pub mod metrics;
mod models;
pub mod output;
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

use crate::error::ApiError;
use crate::output::OutputCtx;
use crate::reply::{collect, ctx_timeout, sse_response, ReplyCtx};
use crate::validate::PromptInput;

pub struct AppState {
    /// Set once the models are known; until then the server answers
    /// `/health`, and everything else says it is loading.
    registry: std::sync::OnceLock<Arc<steward_registry::Registry>>,
    pub api_key: Option<String>,
    /// HTTP metrics of requests no model was found for (`model=""`).
    pub metrics: Arc<metrics::HttpMetrics>,
    /// Each model's HTTP metrics.
    model_metrics: std::sync::Mutex<std::collections::BTreeMap<String, Arc<metrics::HttpMetrics>>>,
    /// Interval of SSE comment pings while a stream has nothing to send.
    pub sse_keepalive: std::time::Duration,
    /// Longest any request may take, end to end (None: no limit).
    pub request_timeout: Option<std::time::Duration>,
    /// What a request may ask for.
    pub limits: limits::Limits,
    /// Longest a request body may take to arrive.
    pub body_timeout: std::time::Duration,
    /// Origins allowed to call from a browser (CORS); empty: none.
    pub cors_origins: Vec<String>,
    /// Open connections (`conn::serve` keeps them).
    pub conns: Arc<conn::ConnStats>,
    next_seq: AtomicU64,
}

/// How the HTTP layer treats requests (`steward serve` flags).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub api_key: Option<String>,
    pub sse_keepalive: std::time::Duration,
    pub request_timeout: Option<std::time::Duration>,
    pub limits: limits::Limits,
    /// `--body-timeout-s`.
    pub body_timeout: std::time::Duration,
    /// `--cors-origin` (repeatable; `*` allows any origin).
    pub cors_origins: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            api_key: None,
            sse_keepalive: std::time::Duration::from_secs(5),
            request_timeout: None,
            limits: limits::Limits::default(),
            body_timeout: std::time::Duration::from_secs(30),
            cors_origins: Vec::new(),
        }
    }
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
        Self::with_options(ServerOptions {
            api_key,
            sse_keepalive,
            request_timeout,
            ..Default::default()
        })
    }

    pub fn with_options(o: ServerOptions) -> Arc<Self> {
        Arc::new(AppState {
            registry: std::sync::OnceLock::new(),
            api_key: o.api_key.filter(|k| !k.is_empty()),
            metrics: Arc::default(),
            model_metrics: Default::default(),
            sse_keepalive: o.sse_keepalive,
            request_timeout: o.request_timeout,
            limits: o.limits,
            body_timeout: o.body_timeout,
            cors_origins: o.cors_origins,
            conns: Arc::default(),
            next_seq: AtomicU64::new(1),
        })
    }
}

type Shared = Arc<AppState>;

impl AppState {
    /// Serve one engine already running (once).
    pub fn set_engine(&self, engine: EngineHandle) {
        self.set_registry(steward_registry::Registry::single(engine));
    }

    /// Serve the registry's models (once).
    pub fn set_registry(&self, r: Arc<steward_registry::Registry>) {
        let _ = self.registry.set(r);
    }

    /// The registry, once set.
    pub fn models(&self) -> Option<Arc<steward_registry::Registry>> {
        self.registry.get().cloned()
    }

    /// The default model's engine, when it is loaded.
    pub fn engine(&self) -> Option<EngineHandle> {
        self.registry.get()?.default_engine()
    }

    fn registry(&self) -> Result<&Arc<steward_registry::Registry>, ApiError> {
        self.registry
            .get()
            .ok_or_else(|| ApiError::from(steward_engine::SubmitError::NotReady))
    }

    /// The default model's engine, or 503 while it is not loaded.
    fn eng(&self) -> Result<EngineHandle, ApiError> {
        self.engine()
            .ok_or_else(|| ApiError::from(steward_engine::SubmitError::NotReady))
    }

    /// A model's HTTP metrics (created on first use; one per known model).
    fn model_metrics(&self, model: &str) -> Arc<metrics::HttpMetrics> {
        let mut g = self.model_metrics.lock().unwrap_or_else(|e| e.into_inner());
        g.entry(model.to_string()).or_default().clone()
    }
}

/// Bind the listening socket. `send_buffer` caps each connection's kernel
/// send buffer (accepted sockets inherit it): without a cap the kernel
/// absorbs megabytes of a slow reader's stream before the engine's outbox
/// sees any back-pressure, and the slow-reader policy acts late. Serve it
/// with `conn::serve` (connection limits, timeouts, TCP_NODELAY).
pub fn bind(
    addr: std::net::SocketAddr,
    send_buffer: Option<u32>,
) -> std::io::Result<tokio::net::TcpListener> {
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
    sock.listen(1024)
}

/// Serve `state`'s router on `listener` with `limits` until the process
/// ends (tests, and anything embedding the server without a shutdown).
pub async fn serve_forever(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    limits: conn::ConnLimits,
) {
    let app = app(state.clone());
    conn::serve(
        listener,
        app,
        limits,
        state.conns.clone(),
        std::future::pending(),
    )
    .await
}

/// The router. `/health` and `/ready` answer without the API key and without
/// touching the engine thread.
pub fn app(state: Shared) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models::list))
        .route("/v1/models/{*id}", get(models::one))
        .route("/admin/models/{name}/load", post(models::admin_load))
        .route("/admin/models/{name}/unload", post(models::admin_unload))
        .route("/admin/models/{name}/adapters", post(models::admin_adapter))
        .route("/v1/chat/completions/render", post(introspect::render))
        .route("/apply-template", post(introspect::apply_template))
        .route("/tokenize", post(introspect::tokenize))
        .route("/detokenize", post(introspect::detokenize))
        .route("/metrics", get(metrics_text))
        .route("/debug/ledger", get(debug_ledger))
        .route("/debug/requests", get(debug_requests))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth));
    let cors = cors_layer(&state.cors_origins);
    let router = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .merge(api)
        .fallback(|req: Request| async move { ApiError::not_found(req.uri().path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            body::read_body,
        ))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state);
    match cors {
        Some(c) => router.layer(c),
        None => router,
    }
}

/// CORS is off unless `--cors-origin` names origins: a web page on another
/// origin then cannot read any answer (and, with the JSON content type
/// required on POST, cannot send a request without a preflight, which is
/// refused).
fn cors_layer(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{header, Method};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect::<Vec<_>>(),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::HeaderName::from_static("x-request-id"),
            ])
            .expose_headers([header::HeaderName::from_static("x-request-id")]),
    )
}

/// Liveness: 200 while the engine can serve, 503 once it has failed (a
/// panic on the owner thread): an orchestrator then restarts the process,
/// which `serve` also ends itself.
async fn health(State(s): State<Shared>) -> Response {
    match s.engine() {
        Some(e) if e.stats().failed => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "failed"})),
        )
            .into_response(),
        _ => Json(json!({"status": "ok"})).into_response(),
    }
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

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The `memory` block of a model card.
pub(crate) fn memory_card(
    st: &steward_engine::EngineStats,
    c: &steward_engine::EngineConfig,
) -> serde_json::Value {
    json!({
        "kind": st.memory_kind,
        "swa_window": st.swa_window,
        "swa_full": c.swa_full,
        "bytes_per_cell": st.kv_bytes_per_cell,
        "window_bytes_per_cell": st.window_bytes_per_cell,
        "recurrent_bytes_per_slot": st.recurrent_bytes_per_slot,
        "checkpoints": st.memory_kind != "attention" && c.checkpoint_bytes > 0 && c.prefix_cache,
        "slots": st.slots_total,
    })
}

/// The default model's ledger (top level, as with one model), and every
/// loaded model's under `models`.
async fn debug_ledger(State(s): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    let l = s.eng()?.ledger();
    let mut v = serde_json::to_value(&l).unwrap_or_default();
    v["sum_of_terms"] = json!(l.sum());
    let reg = s.registry()?;
    let models: serde_json::Map<String, serde_json::Value> = reg
        .loaded()
        .into_iter()
        .map(|(n, e)| (n, serde_json::to_value(e.ledger()).unwrap_or_default()))
        .collect();
    v["models"] = serde_json::Value::Object(models);
    v["registry_budget"] = json!(reg.options().budget);
    Ok(Json(v))
}

async fn debug_requests(State(s): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    let reg = s.registry()?;
    let mut live = Vec::new();
    for (name, e) in reg.loaded() {
        for r in e.stats().live {
            let mut v = serde_json::to_value(&r).unwrap_or_default();
            v["model"] = json!(name);
            live.push(v);
        }
    }
    Ok(Json(json!({ "requests": live })))
}

/// Every loaded model's engine and HTTP metrics labelled with the model,
/// the requests no model was found for (`model=""`), and each known
/// model's state.
async fn metrics_text(State(s): State<Shared>) -> Response {
    let Ok(reg) = s.registry() else {
        let body = "# HELP steward_phase Readiness phase (1 for the current one)\n# TYPE steward_phase gauge\nsteward_phase{phase=\"loading\"} 1\n";
        return ([("content-type", "text/plain; version=0.0.4")], body).into_response();
    };
    let mut blocks = Vec::new();
    let loaded = reg.loaded();
    for (name, engine) in &loaded {
        let st = engine.stats();
        let mut b = metrics::render(&st, engine.waiting());
        metrics::render_phase(&mut b, &st, engine.drain_elapsed());
        metrics::render_ledger(&mut b, &engine.ledger());
        metrics::render_lora(&mut b, &st, engine.adapters().len());
        metrics::render_http(&mut b, &s.model_metrics(name));
        blocks.push((name.clone(), b));
    }
    for name in reg.names() {
        if !loaded.iter().any(|(n, _)| *n == name) {
            let mut b = String::new();
            metrics::render_http(&mut b, &s.model_metrics(&name));
            blocks.push((name, b));
        }
    }
    let mut b = String::new();
    metrics::render_http(&mut b, &s.metrics);
    blocks.push((String::new(), b));
    let mut body = labels::merge(&blocks);
    models::render_states(&mut body, reg);
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

fn request_id(headers: &HeaderMap, prefix: &str, seq: u64) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        // A token of safe characters only: it goes into every log line.
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 128
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+".contains(&b))
        })
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
    let peek = models::Peek::of(&body);
    // A stream whose model must load first answers at once and pings
    // while it loads.
    let waits = peek.stream() && s.registry().is_ok_and(|r| r.would_wait(peek.model()));
    let name = s
        .registry
        .get()
        .and_then(|r| r.model_of(peek.model()))
        .unwrap_or_default();
    let fut = answer(s.clone(), id.clone(), seq, body, api, arrival, peek);
    let mut resp = if waits {
        s.model_metrics(&name).record_status(200);
        models::loading_stream(&s, fut)
    } else {
        fut.await
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

async fn answer(
    s: Shared,
    id: String,
    seq: u64,
    body: Bytes,
    api: Api,
    arrival: Instant,
    peek: models::Peek,
) -> Response {
    let span = tracing::info_span!("request", request_id = %id);
    let result =
        tracing::Instrument::instrument(run(&s, &id, seq, body, api, arrival, peek), span).await;
    match result {
        Ok(r) => r,
        Err((e, m)) => {
            tracing::info!(request_id = %id, status = e.status.as_u16(), code = e.code, "request rejected");
            let m = m.unwrap_or_else(|| s.metrics.clone());
            m.record_status(e.status.as_u16());
            m.record_failure(e.code);
            e.into_response()
        }
    }
}

async fn run(
    s: &Shared,
    id: &str,
    seq: u64,
    body: Bytes,
    api: Api,
    arrival: Instant,
    peek: models::Peek,
) -> Result<Response, (ApiError, Option<Arc<metrics::HttpMetrics>>)> {
    let routed = models::route(s, &peek).await.map_err(|e| (e, None))?;
    let m = routed.metrics.clone();
    generate_on(s, id, seq, body, api, arrival, routed)
        .await
        .map_err(|e| (e, Some(m)))
}

async fn generate_on(
    s: &Shared,
    id: &str,
    seq: u64,
    body: Bytes,
    api: Api,
    arrival: Instant,
    routed: models::Routed,
) -> Result<Response, ApiError> {
    let engine = &routed.engine;
    let adapters = &routed.adapters;
    let (mut spec, input) = match api {
        Api::Chat => validate::chat(&body, seq, &s.limits)?,
        Api::Completion => {
            validate::completion(&body, seq, engine.preparer().n_vocab(), &s.limits)?
        }
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
    let served = &routed.name;
    let score_prompt = spec.echo && spec.logprobs.is_some();
    if score_prompt && spec.stream {
        return Err(ApiError::unsupported(
            "`echo` with `logprobs` is supported without `stream` only",
            "echo",
        ));
    }
    // Text certainly longer than the context is refused before the template
    // and the tokenizer spend time on it (a token covers at most the
    // vocabulary's longest token of text).
    let tool_bytes = spec.tools.as_ref().map_or(0, |t| t.tools.to_string().len());
    let text_bytes = match &input {
        PromptInput::Chat(c) => {
            tool_bytes
                + c.messages
                    .iter()
                    .map(|m| m.to_string().len())
                    .sum::<usize>()
        }
        PromptInput::Text(t) => t.len(),
        PromptInput::Tokens(_) => 0,
    };
    engine
        .preparer()
        .check_text_fits(text_bytes, engine.context_limit())?;
    let mut echo_text = None;
    let mut output = None;
    let mut in_reasoning = false;
    let prompt = match input {
        PromptInput::Chat(c) => {
            let pr = engine.preparer();
            let t = pr.chat(c).await?;
            in_reasoning = t.in_reasoning;
            output = Some(OutputCtx {
                family: pr.family(),
                tools: spec.tools.as_ref().map(|p| p.tools.clone()),
                reasoning: spec.reasoning,
                in_reasoning: t.in_reasoning,
            });
            t.tokens
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
    let lp_tokens = if score_prompt {
        prompt.len() as u64 + u64::from(max_tokens)
    } else {
        u64::from(max_tokens)
    };
    validate::check_logprob_volume(&spec, lp_tokens, &s.limits)?;
    forcing::chat_grammar(&mut spec, api, engine, in_reasoning, max_tokens)?;
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
        let d = match (asked, limit) {
            (Some(a), Some(l)) => Some(a.min(l)),
            (a, l) => a.or(l),
        };
        // A deadline past what `Instant` can hold is no deadline.
        d.and_then(|d| arrival.checked_add(d))
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
            markers: (api == Api::Chat).then(|| engine.preparer().markers(spec.tools.is_some())),
            adapters: adapters.clone(),
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
        metrics: routed.metrics.clone(),
        echo_text,
        first_prompt_token,
        output,
    };
    // Wait for the first choice's admission (or a queue timeout, which is
    // then a real 503). Only the first: with fewer free slots than `n` the
    // later choices are admitted as earlier ones finish, which needs their
    // output read meanwhile (waiting for every admission first deadlocked
    // until the slow-reader timeout).
    let mut firsts = vec![None; streams.len()];
    if let Some(st) = streams.first_mut() {
        firsts[0] = match st.next().await {
            Some(Event::Admitted) => None,
            Some(Event::Error(e)) => return Err(ApiError::from(e)),
            other => other,
        };
    }
    if ctx.spec.stream {
        ctx.metrics.record_status(200);
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
        ctx.metrics.record_status(200);
        for r in &results {
            ctx.metrics.observe_finished(&r.2);
        }
        // Non-streaming: the first text leaves with the whole body.
        ctx.metrics
            .observe_first_text(ctx.arrival.elapsed().as_secs_f64());
        Ok(Json(ctx.full_response(results)).into_response())
    }
}
