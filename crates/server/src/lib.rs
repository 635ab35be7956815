//! Steward's HTTP layer: the router (`app()`, testable without a socket),
//! routes, auth, metrics text; replies and SSE framing in `reply`. Every
//! failure goes through `error::ApiError`, the one mapping to HTTP.
//!
//! A request's path here: validate wire → prepare (template + tokenize on the
//! engine's bounded pool) → context check → submit (bounded inbox) → relay
//! events as JSON or SSE. Dropping the response body (client gone) drops the
//! `RequestStream`, which the engine treats as a cancellation.

pub mod access;
mod body;
pub mod chat_input;
pub mod conn;
pub mod dashboard;
mod dialect;
mod embed;
pub mod error;
mod forcing;
mod gateway;
mod generate;
mod introspect;
pub mod kvevents;
mod labels;
pub mod limits;
pub mod logprobs;
pub mod metrics;
mod models;
mod openapi;
pub mod output;
mod reply;
pub mod tools;
pub mod validate;
mod web;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use steward_engine::EngineHandle;

use crate::error::ApiError;
pub(crate) use crate::generate::Api;

pub struct AppState {
    /// Set once the models are known; until then the server answers
    /// `/health`, and everything else says it is loading.
    registry: std::sync::OnceLock<Arc<steward_registry::Registry>>,
    /// The API keys in force (none: no auth) and their rate limits.
    pub keys: Arc<access::Keys>,
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
    /// Stored responses (`store: true`), for `previous_response_id` and
    /// `GET /v1/responses/{id}`: bounded in count, bytes and age.
    pub responses: Arc<steward_dialects::responses::Store>,
    /// Serve the web chat (`/`) and the dashboard (`/dashboard`).
    pub web: bool,
    next_seq: AtomicU64,
}

/// How the HTTP layer treats requests (`steward serve` flags).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub api_key: Option<String>,
    /// Keys from `--api-key-file` and rate limits, already read (None:
    /// `api_key` alone, unlimited).
    pub keys: Option<Arc<access::Keys>>,
    pub sse_keepalive: std::time::Duration,
    pub request_timeout: Option<std::time::Duration>,
    pub limits: limits::Limits,
    /// `--body-timeout-s`.
    pub body_timeout: std::time::Duration,
    /// `--cors-origin` (repeatable; `*` allows any origin).
    pub cors_origins: Vec<String>,
    /// The Responses API's store: most responses, bytes, lifetime
    /// (`--responses-store-entries`, `--responses-store-mb`,
    /// `--responses-ttl-s`).
    pub responses_store: (usize, u64, std::time::Duration),
    /// The built-in pages (`--no-web` turns them off).
    pub web: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            api_key: None,
            keys: None,
            sse_keepalive: std::time::Duration::from_secs(5),
            request_timeout: None,
            limits: limits::Limits::default(),
            body_timeout: std::time::Duration::from_secs(30),
            cors_origins: Vec::new(),
            responses_store: (1024, 64 << 20, std::time::Duration::from_secs(3600)),
            web: true,
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
            keys: o.keys.unwrap_or_else(|| {
                access::Keys::new(o.api_key.clone(), None, 0).expect("no key file to read")
            }),
            metrics: Arc::default(),
            model_metrics: Default::default(),
            sse_keepalive: o.sse_keepalive,
            request_timeout: o.request_timeout,
            limits: o.limits,
            body_timeout: o.body_timeout,
            cors_origins: o.cors_origins,
            conns: Arc::default(),
            responses: Arc::new(steward_dialects::responses::Store::new(
                o.responses_store.0,
                o.responses_store.1 as usize,
                o.responses_store.2,
            )),
            web: o.web,
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

/// `--metrics-port`: `/metrics`, `/get_load`, `/health` and `/ready` without a key,
/// for scrapers and load balancers on a port the operator keeps private.
pub fn metrics_app(state: Shared) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/get_load", get(gateway::get_load))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .fallback(|req: Request| async move { ApiError::not_found(req.uri().path()) })
        .with_state(state)
}

/// The router. `/health` and `/ready` answer without the API key and without
/// touching the engine thread.
pub fn app(state: Shared) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(generate::chat_completions))
        .route("/v1/completions", post(generate::completions))
        .route("/v1/messages", post(dialect::messages))
        .route("/v1/messages/count_tokens", post(dialect::count_tokens))
        .route("/v1/responses", post(dialect::create_response))
        .route(
            "/v1/responses/{id}",
            get(dialect::get_response).delete(dialect::delete_response),
        )
        .route("/v1/responses/{id}/input_items", get(dialect::input_items))
        .route("/v1/embeddings", post(embed::embeddings))
        .route("/v1/rerank", post(embed::rerank))
        .route("/rerank", post(embed::rerank))
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
        .route("/get_load", get(gateway::get_load))
        .route("/debug/ledger", get(debug_ledger))
        .route("/debug/requests", get(debug_requests))
        .route("/debug/cells", get(debug_cells))
        .route("/dashboard/events", get(dashboard::events))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth));
    let cors = cors_layer(&state.cors_origins);
    let mut router = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/openapi.json", get(openapi::spec));
    if state.web {
        router = router
            .route("/", get(web::chat))
            .route("/dashboard", get(web::dashboard))
            .route("/ui/{name}", get(web::file));
    }
    let router = router
        .merge(api)
        .fallback(|req: Request| async move { ApiError::not_found(req.uri().path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            body::read_body,
        ))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn(json_rejections))
        .layer(axum::middleware::from_fn(dialect::anthropic_errors))
        .with_state(state);
    match cors {
        Some(c) => router.layer(c),
        None => router,
    }
}

/// axum's own refusals of a path or query it cannot read (`Path`, `Query`)
/// are plain text; every error leaves in the API's JSON shape instead,
/// with the same status and axum's message.
async fn json_rejections(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let plain = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    if !resp.status().is_client_error() || !plain {
        return resp;
    }
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 64 << 10)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    ApiError {
        status,
        ..ApiError::invalid(text.trim().to_string(), None)
    }
    .into_response()
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
                header::HeaderName::from_static("x-api-key"),
                header::HeaderName::from_static("anthropic-version"),
            ])
            .expose_headers([header::HeaderName::from_static("x-request-id")]),
    )
}

/// Liveness: 200 while the engine can serve, 503 once it has failed (a
/// panic on the owner thread): an orchestrator then restarts the process,
/// which `serve` also ends itself.
async fn health(State(s): State<Shared>) -> Response {
    if let Some(why) = steward_engine::fatal::runtime_lost() {
        return lost(why);
    }
    match s.engine() {
        Some(e) if e.stats().failed => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "failed"})),
        )
            .into_response(),
        _ => Json(json!({"status": "ok"})).into_response(),
    }
}

async fn auth(State(s): State<Shared>, req: Request, next: Next) -> Response {
    if !s.keys.enabled() {
        return next.run(req).await;
    }
    // `Authorization: Bearer KEY` (OpenAI) or `x-api-key: KEY` (Anthropic's
    // clients).
    let h = req.headers();
    let given = h
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()));
    let admitted = match s.keys.check(given) {
        Ok(a) => a,
        Err(access::Refused::Unauthorized) => {
            s.metrics.record_status(401);
            return ApiError::unauthorized().into_response();
        }
        Err(access::Refused::Limited { retry_after, rpm }) => {
            s.metrics.record_status(429);
            let mut r = ApiError::rate_limited(
                format!("Rate limit reached for this key: {rpm} requests per minute. Retry in {retry_after} s."),
                "rate_limit_exceeded",
                retry_after,
            )
            .into_response();
            r.headers_mut()
                .insert("x-ratelimit-limit-requests", HeaderValue::from(rpm));
            r.headers_mut()
                .insert("x-ratelimit-remaining-requests", HeaderValue::from(0));
            return r;
        }
    };
    let mut r = next.run(req).await;
    if let Some((limit, left)) = admitted.and_then(|a| a.rate) {
        r.headers_mut()
            .insert("x-ratelimit-limit-requests", HeaderValue::from(limit));
        r.headers_mut()
            .insert("x-ratelimit-remaining-requests", HeaderValue::from(left));
    }
    r
}

/// 503 once the runtime is lost (a dead RPC worker): the process is exiting.
fn lost(why: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"status": "failed", "reason": why})),
    )
        .into_response()
}

async fn ready(State(s): State<Shared>) -> Response {
    if let Some(why) = steward_engine::fatal::runtime_lost() {
        return lost(why);
    }
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
        "swa_full": c.model.swa_full,
        "bytes_per_cell": st.kv_bytes_per_cell,
        "window_bytes_per_cell": st.window_bytes_per_cell,
        "recurrent_bytes_per_slot": st.recurrent_bytes_per_slot,
        "checkpoints": st.memory_kind != "attention" && c.admit.checkpoint_bytes > 0 && c.admit.prefix_cache,
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
    // Server-side memory beside the models: the Responses store, bounded
    // by its byte cap (reserved out of `--memory-budget`).
    v["response_store"] = json!({
        "bytes": s.responses.bytes(),
        "capacity_bytes": s.responses.capacity_bytes(),
        "entries": s.responses.len(),
    });
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

/// Every loaded model's cell map: what each slot's KV cells hold (token
/// IDs from position 0), and the block size of `--kv-events`.
async fn debug_cells(State(s): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    let reg = s.registry()?;
    let mut models = serde_json::Map::new();
    for (name, e) in reg.loaded() {
        let cells = e.cell_map().await.map_err(ApiError::internal)?;
        let slots: Vec<_> = cells
            .into_iter()
            .map(|c| json!({"slot": c.slot, "key": c.key, "tokens": c.tokens}))
            .collect();
        models.insert(name, json!({ "slots": slots }));
    }
    Ok(Json(json!({
        "block_tokens": steward_engine::kvevents::BLOCK_TOKENS,
        "models": models,
    })))
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
        let http = s.model_metrics(name);
        metrics::render_http(&mut b, &http);
        metrics::render_vllm_latency(&mut b, &http);
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
    metrics::render_store(&mut body, &s.responses);
    s.keys.metrics(&mut body);
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
