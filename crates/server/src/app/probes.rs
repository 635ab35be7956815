//! `/health` (liveness) and `/ready` (readiness): read from the published
//! snapshots, never the engine thread.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::api::state::Shared;

/// Liveness: 200 while the engine can serve, 503 once it has failed (a
/// panic on the owner thread): an orchestrator then restarts the process,
/// which `serve` also ends itself.
pub(crate) async fn health(State(s): State<Shared>) -> Response {
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

/// 503 once the runtime is lost (a dead RPC worker): the process is exiting.
fn lost(why: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"status": "failed", "reason": why})),
    )
        .into_response()
}

pub(crate) async fn ready(State(s): State<Shared>) -> Response {
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
