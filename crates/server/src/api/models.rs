//! Models: a request's `model` (and `lora`) to an engine and its adapter
//! set (`route`); `/v1/models`; the admin routes that load and unload
//! models and adapters; a stream that waits for its model's load with
//! keep-alive pings (`loading_stream`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde_json::{json, Value};
use steward_engine::EngineHandle;
use steward_protocol as p;
use steward_registry::{ModelState, RegistryError};

use super::state::Shared;
use crate::http::counters::HttpMetrics;
use crate::http::error::ApiError;

/// The fields routing reads, before the API's own validation (which
/// reports wrong types in detail).
#[derive(serde::Deserialize, Default)]
pub(crate) struct Peek {
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    stream: Option<Value>,
    #[serde(default)]
    lora: Option<Value>,
}

impl Peek {
    pub fn of(body: &[u8]) -> Self {
        serde_json::from_slice(body).unwrap_or_default()
    }
    pub fn model(&self) -> &str {
        self.model.as_ref().and_then(Value::as_str).unwrap_or("")
    }
    pub fn stream(&self) -> bool {
        self.stream
            .as_ref()
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// A request's model: its engine, the name replies carry, the adapter set
/// (`id`, scale) it runs under, and the model's HTTP metrics.
pub(crate) struct Routed {
    pub name: String,
    pub engine: EngineHandle,
    pub adapters: Vec<(usize, f32)>,
    pub metrics: Arc<HttpMetrics>,
}

/// Most entries of a request's `lora` list.
const MAX_LORA: usize = 64;
/// Largest adapter scale magnitude a request may ask for.
const MAX_SCALE: f64 = 100.0;

pub(crate) fn registry_error(e: RegistryError) -> ApiError {
    let unavailable = |message: String, code: &'static str, retry: Option<u32>| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message,
        kind: "server_error",
        param: Some("model".into()),
        code,
        retry_after: retry,
    };
    match e {
        RegistryError::NotFound(m) => ApiError::model_not_found(&m),
        e @ RegistryError::Failed { .. } => unavailable(e.to_string(), "model_failed", None),
        e @ RegistryError::NoRoom { .. } => {
            unavailable(e.to_string(), "model_does_not_fit", Some(10))
        }
        e @ RegistryError::Unloaded(_) => unavailable(e.to_string(), "model_unloaded", Some(1)),
        RegistryError::Admin(m) => ApiError::invalid(m, None),
    }
}

/// Resolve the model (loading it if it must) and the adapters a request
/// asks for: `model: "base:adapter"` (the adapter's scale) and/or
/// `lora: [{"id": N | "name": S, "scale": X}]` (llama-server's field; a
/// later entry for the same adapter wins, scale 0 turns it off).
pub(crate) async fn route(s: &Shared, peek: &Peek) -> Result<Routed, ApiError> {
    let reg = s.registry()?;
    let r = reg.get(peek.model()).await.map_err(registry_error)?;
    let list = r.engine.adapters();
    let mut set: Vec<(usize, f32)> = Vec::new();
    let mut name = r.name.clone();
    if let Some(a) = &r.adapter {
        set.push((a.id, a.scale));
        name = format!("{}:{}", r.name, a.name);
    }
    match &peek.lora {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            if items.len() > MAX_LORA {
                return Err(ApiError::invalid_value(
                    format!("`lora` lists {} adapters; at most {MAX_LORA}", items.len()),
                    "lora",
                ));
            }
            for it in items {
                let found = match (it.get("id"), it.get("name")) {
                    (Some(id), _) => id
                        .as_u64()
                        .and_then(|i| list.iter().find(|a| a.id as u64 == i)),
                    (None, Some(n)) => n.as_str().and_then(|n| list.iter().find(|a| a.name == n)),
                    (None, None) => None,
                };
                let Some(a) = found else {
                    let known: Vec<String> = list
                        .iter()
                        .map(|a| format!("{} ({})", a.id, a.name))
                        .collect();
                    return Err(ApiError::invalid_value(
                        format!(
                            "`lora` entry {it} names no adapter of `{}`; loaded: [{}]",
                            r.name,
                            known.join(", ")
                        ),
                        "lora",
                    ));
                };
                let scale = match it.get("scale") {
                    None => f64::from(a.scale),
                    Some(v) => v.as_f64().filter(|x| x.abs() <= MAX_SCALE).ok_or_else(|| {
                        ApiError::invalid_value(
                            format!("`lora` scale must be a number within ±{MAX_SCALE}"),
                            "lora",
                        )
                    })?,
                };
                set.retain(|e| e.0 != a.id);
                set.push((a.id, scale as f32));
            }
        }
        Some(_) => {
            return Err(ApiError::invalid_value(
                "`lora` must be a list of {\"id\" or \"name\", \"scale\"}",
                "lora",
            ))
        }
    }
    Ok(Routed {
        metrics: s.model_metrics(&r.name),
        name,
        engine: r.engine,
        adapters: set,
    })
}

/// A streamed request whose model is not loaded yet: answer 200 at once
/// and send SSE keep-alive comments while it loads, then the request's own
/// stream (its error, if it fails, as an SSE `error` event).
pub(crate) fn loading_stream(
    s: &Shared,
    fut: impl std::future::Future<Output = Response> + Send + 'static,
) -> Response {
    let every = s.sse_keepalive;
    let body = async_stream(fut, every);
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| ApiError::internal("response").into_response())
}

fn async_stream(
    fut: impl std::future::Future<Output = Response> + Send + 'static,
    every: Duration,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    enum St<F> {
        Waiting(std::pin::Pin<Box<F>>, tokio::time::Interval),
        Body(axum::body::BodyDataStream),
        Done,
    }
    let mut iv = tokio::time::interval(every);
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    futures::stream::unfold(St::Waiting(Box::pin(fut), iv), |st| async move {
        match st {
            St::Waiting(mut f, mut iv) => {
                tokio::select! {
                    resp = &mut f => {
                        if resp.status().is_success() {
                            let mut body = resp.into_body().into_data_stream();
                            let first = body.next().await;
                            match first {
                                Some(Ok(b)) => Some((Ok(b), St::Body(body))),
                                _ => None,
                            }
                        } else {
                            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                                .await
                                .unwrap_or_default();
                            let v: Value = serde_json::from_slice(&bytes)
                                .unwrap_or_else(|_| json!({"error": {"message": "the request failed"}}));
                            let text = format!("data: {v}\n\ndata: [DONE]\n\n");
                            Some((Ok(Bytes::from(text)), St::Done))
                        }
                    }
                    _ = iv.tick() => Some((Ok(Bytes::from_static(b": loading model\n\n")), St::Waiting(f, iv))),
                }
            }
            St::Body(mut b) => match b.next().await {
                Some(Ok(x)) => Some((Ok(x), St::Body(b))),
                Some(Err(e)) => Some((Err(std::io::Error::other(e.to_string())), St::Done)),
                None => None,
            },
            St::Done => None,
        }
    })
}

fn state_name(s: ModelState) -> &'static str {
    match s {
        ModelState::Unloaded => "unloaded",
        ModelState::Loading => "loading",
        ModelState::Loaded => "loaded",
        ModelState::Failed => "failed",
    }
}

/// `GET /v1/models/{id}`: one entry of the list, or 404.
pub(crate) async fn one(
    State(s): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<p::ModelCard>, ApiError> {
    let Json(list) = list(State(s)).await?;
    list.data
        .into_iter()
        .find(|c| c.id == id)
        .map(Json)
        .ok_or_else(|| ApiError::model_not_found(&id))
}

/// `GET /v1/models`: every model with its state, and each adapter as a
/// model of its own (`base:adapter`, `parent`).
pub(crate) async fn list(State(s): State<Shared>) -> Result<Json<p::ModelList>, ApiError> {
    let reg = s.registry()?;
    let created = super::state::now_secs();
    let data = reg
        .cards()
        .into_iter()
        .map(|c| {
            let e = c.engine.as_ref();
            let status = json!({
                "value": state_name(c.state),
                "pinned": c.pinned,
                "footprint_bytes": c.footprint_bytes,
                "load_ms": c.load_ms,
                "loads": c.loads,
                "unloads": c.unloads,
                "error": c.error,
            });
            p::ModelCard {
                id: c.id.clone(),
                object: "model".into(),
                created,
                owned_by: "steward".into(),
                identity: e.and_then(|e| serde_json::to_value(e.identity()).ok()),
                chat_template: e
                    .and_then(|e| serde_json::to_value(e.preparer().template_info()).ok()),
                memory: e.map(|e| memory_card(&e.stats(), e.config())),
                status: Some(status),
                parent: c.parent.clone(),
                adapter: c
                    .adapter
                    .as_ref()
                    .and_then(|a| serde_json::to_value(a).ok()),
                modalities: e.map(modalities),
            }
        })
        .collect();
    Ok(Json(p::ModelList {
        object: "list".into(),
        data,
    }))
}

/// What a loaded model takes in: text, and what its projector reads.
fn modalities(e: &EngineHandle) -> Vec<String> {
    let mut m = vec!["text".to_string()];
    if let Some(enc) = e.preparer().encoder() {
        if enc.info.vision {
            m.push("image".into());
        }
        if enc.info.audio {
            m.push("audio".into());
        }
    }
    m
}

/// Admin routes change what the server holds: only with `--api-key` set
/// (the auth layer then checks it), never on an open server.
fn admin(s: &Shared) -> Result<&Arc<steward_registry::Registry>, ApiError> {
    if !s.keys.enabled() {
        return Err(ApiError {
            status: StatusCode::FORBIDDEN,
            message: "admin routes need the server started with --api-key".into(),
            kind: "permission_error",
            param: None,
            code: "admin_disabled",
            retry_after: None,
        });
    }
    s.registry()
}

fn admin_reply(r: Result<Value, RegistryError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => registry_error(e).into_response(),
    }
}

/// `POST /admin/models/{name}/load`: load now (a failed model is tried
/// again); answers when it is ready.
pub(crate) async fn admin_load(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    let reg = match admin(&s) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    admin_reply(
        reg.load_now(&name)
            .await
            .map(|_| json!({"model": name, "state": "loaded"})),
    )
}

/// `POST /admin/models/{name}/unload`: in-flight requests get the drain
/// grace, then are cancelled.
pub(crate) async fn admin_unload(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    let reg = match admin(&s) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    admin_reply(
        reg.unload(&name, Duration::from_secs(10))
            .await
            .map(|was| json!({"model": name, "state": "unloaded", "was_loaded": was})),
    )
}

/// `POST /admin/models/{name}/adapters` `{"name", "path", "scale"}`: load a
/// LoRA adapter GGUF into a model (loaded first if it must be).
pub(crate) async fn admin_adapter(
    State(s): State<Shared>,
    Path(model): Path<String>,
    body: Bytes,
) -> Response {
    let reg = match admin(&s) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return ApiError::invalid(format!("bad JSON: {e}"), None).into_response(),
    };
    let (Some(name), Some(path)) = (
        v.get("name").and_then(Value::as_str),
        v.get("path").and_then(Value::as_str),
    ) else {
        return ApiError::invalid("give the adapter's `name` and `path`", None).into_response();
    };
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !valid {
        return ApiError::invalid_value(
            "an adapter name is 1-64 characters of letters, digits, `-`, `_`, `.`",
            "name",
        )
        .into_response();
    }
    let scale = v.get("scale").and_then(Value::as_f64).unwrap_or(1.0) as f32;
    let spec = steward_engine::AdapterSpec {
        name: name.to_string(),
        path: path.into(),
        scale,
    };
    admin_reply(
        reg.add_adapter(&model, spec)
            .await
            .map(|a| json!({"model": format!("{model}:{}", a.name), "adapter": a})),
    )
}

/// Each known model's state (one-hot), load time, loads, unloads and
/// footprint; the registry's budget.
pub(crate) fn render_states(o: &mut String, reg: &steward_registry::Registry) {
    use std::fmt::Write;
    let cards: Vec<_> = reg
        .cards()
        .into_iter()
        .filter(|c| c.parent.is_none())
        .collect();
    let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let _ = writeln!(o, "# HELP steward_model_state Each known model's state (1 for the current one)\n# TYPE steward_model_state gauge");
    for c in &cards {
        for st in [
            ModelState::Unloaded,
            ModelState::Loading,
            ModelState::Loaded,
            ModelState::Failed,
        ] {
            let _ = writeln!(
                o,
                "steward_model_state{{model=\"{}\",state=\"{}\"}} {}",
                esc(&c.id),
                state_name(st),
                u8::from(c.state == st)
            );
        }
    }
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        fn(&steward_registry::ModelCard) -> Option<f64>,
    );
    let rows: [Row; 4] = [
        (
            "steward_model_load_seconds",
            "gauge",
            "The model's last load, request to ready",
            |c| c.load_ms.map(|m| m / 1e3),
        ),
        (
            "steward_model_loads_total",
            "counter",
            "Times the model was loaded",
            |c| Some(c.loads as f64),
        ),
        (
            "steward_model_unloads_total",
            "counter",
            "Times the model was unloaded (idle, made room, admin)",
            |c| Some(c.unloads as f64),
        ),
        (
            "steward_model_footprint_bytes",
            "gauge",
            "What the loaded model holds against the budget",
            |c| c.footprint_bytes.map(|b| b as f64),
        ),
    ];
    for (name, kind, help, f) in rows {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for c in &cards {
            if let Some(v) = f(c) {
                let _ = writeln!(o, "{name}{{model=\"{}\"}} {v}", esc(&c.id));
            }
        }
    }
    if let Some(b) = reg.options().budget {
        let _ = writeln!(o, "# HELP steward_models_budget_bytes Memory budget every loaded model shares\n# TYPE steward_models_budget_bytes gauge\nsteward_models_budget_bytes {b}");
    }
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
