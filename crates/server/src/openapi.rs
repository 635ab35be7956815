//! `GET /openapi.json`: the OpenAPI 3.1 description of the API.

use axum::Json;
use serde_json::{json, Value};

pub(crate) async fn spec() -> Json<Value> {
    Json(json!({"openapi": "3.1.0", "info": {"title": "Steward", "version": env!("CARGO_PKG_VERSION")}, "paths": {}}))
}
