//! The router (`app()`, testable without a socket; `metrics_app()` for
//! `--metrics-port`): every route, which need the API key, and the layers
//! around them (body, JSON rejections, Anthropic-shaped errors, CORS).

use std::sync::Arc;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::{auth, body, probes, web};
use crate::api::state::{AppState, Shared};
use crate::api::{dialect, embed, generate, introspect, models};
use crate::batch::api as batch;
use crate::http::conn;
use crate::http::error::ApiError;
use crate::ops::{dashboard, gateway, openapi, routes};

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

/// Open the Batch API's state directory (`o.dir`) and start its runner,
/// which sends each batch line through this server's router, as a
/// client's request goes.
pub fn start_batch(state: &Shared, o: crate::batch::Options) -> anyhow::Result<()> {
    crate::batch::start(state, o, app(state.clone()))
}

/// `--metrics-port`: `/metrics`, `/get_load`, `/health` and `/ready` without a key,
/// for scrapers and load balancers on a port the operator keeps private.
pub fn metrics_app(state: Shared) -> Router {
    Router::new()
        .route("/metrics", get(routes::metrics_text))
        .route("/get_load", get(gateway::get_load))
        .route("/health", get(probes::health))
        .route("/ready", get(probes::ready))
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
        .route("/v1/files", post(batch::upload).get(batch::list_files))
        .route(
            "/v1/files/{id}",
            get(batch::get_file).delete(batch::delete_file),
        )
        .route("/v1/files/{id}/content", get(batch::file_content))
        .route("/v1/batches", post(batch::create).get(batch::list))
        .route("/v1/batches/{id}", get(batch::get))
        .route("/v1/batches/{id}/cancel", post(batch::cancel))
        .route("/metrics", get(routes::metrics_text))
        .route("/get_load", get(gateway::get_load))
        .route("/debug/ledger", get(routes::debug_ledger))
        .route("/debug/requests", get(routes::debug_requests))
        .route("/debug/cells", get(routes::debug_cells))
        .route("/dashboard/events", get(dashboard::events))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::auth,
        ));
    let cors = cors_layer(&state.cors_origins);
    let mut router = Router::new()
        .route("/health", get(probes::health))
        .route("/ready", get(probes::ready))
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
