//! The operators' routes: `/metrics` (every loaded model's engine and HTTP
//! metrics as one text, `labels::merge`), `/debug/ledger`,
//! `/debug/requests`, `/debug/cells`. Read from the published snapshots
//! (the cell map is the one owner command).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::{labels, metrics};
use crate::api::models;
use crate::api::state::Shared;
use crate::http::counters;
use crate::http::error::ApiError;

/// The default model's ledger (top level, as with one model), and every
/// loaded model's under `models`.
pub(crate) async fn debug_ledger(
    State(s): State<Shared>,
) -> Result<Json<serde_json::Value>, ApiError> {
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

pub(crate) async fn debug_requests(
    State(s): State<Shared>,
) -> Result<Json<serde_json::Value>, ApiError> {
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
pub(crate) async fn debug_cells(
    State(s): State<Shared>,
) -> Result<Json<serde_json::Value>, ApiError> {
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
pub(crate) async fn metrics_text(
    State(s): State<Shared>,
    headers: axum::http::HeaderMap,
) -> Response {
    // OpenMetrics when the scraper asks for it (exemplars need it).
    let om = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
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
        if let Some(enc) = engine.preparer().encoder() {
            metrics::render_media(&mut b, enc);
        }
        let http = s.model_metrics(name);
        counters::render_http(&mut b, &http, om);
        counters::render_vllm_latency(&mut b, &http, om);
        blocks.push((name.clone(), b));
    }
    for name in reg.names() {
        if !loaded.iter().any(|(n, _)| *n == name) {
            let mut b = String::new();
            counters::render_http(&mut b, &s.model_metrics(&name), om);
            blocks.push((name, b));
        }
    }
    let mut b = String::new();
    counters::render_http(&mut b, &s.metrics, om);
    blocks.push((String::new(), b));
    let mut body = labels::merge(&blocks);
    models::render_states(&mut body, reg);
    metrics::render_store(&mut body, &s.responses);
    s.keys.metrics(&mut body);
    s.keys.usage.render(&mut body);
    s.recorder().render(&mut body);
    if om {
        let ct = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        return ([("content-type", ct)], labels::openmetrics(&body)).into_response();
    }
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}
