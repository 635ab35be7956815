//! What routers and inference gateways read besides `/metrics`:
//! `GET /get_load`, the load figure SGLang's and the vLLM Router's
//! load-aware policies poll (`load`), with SGLang's per-server fields.
//! Read from the owners' published snapshots only, never a command.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::api::state::Shared;

/// `{"load": running + waiting, "num_reqs", "num_waiting_reqs",
/// "num_tokens" (KV cells in use), "models": {name: {...}}}` summed over
/// every loaded model.
pub async fn get_load(State(s): State<Shared>) -> Response {
    let mut models = Map::new();
    let (mut run, mut wait, mut tokens) = (0u64, 0u64, 0u64);
    if let Ok(reg) = s.registry() {
        for (name, engine) in reg.loaded() {
            let st = engine.stats();
            let r = (st.running + st.prefilling) as u64;
            let w = engine.waiting() as u64;
            run += r;
            wait += w;
            tokens += st.kv_cells_used;
            models.insert(
                name,
                json!({
                    "load": r + w,
                    "num_reqs": r,
                    "num_waiting_reqs": w,
                    "num_tokens": st.kv_cells_used,
                    "max_seqs": st.slots_total,
                }),
            );
        }
    }
    Json(json!({
        "load": run + wait,
        "num_reqs": run,
        "num_waiting_reqs": wait,
        "num_tokens": tokens,
        "models": Value::Object(models),
    }))
    .into_response()
}
