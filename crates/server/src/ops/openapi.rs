//! `GET /openapi.json`: the OpenAPI 3.1 description of the API, generated
//! by `utoipa` so that it cannot drift from the code.
//!
//! - The OpenAI wire types (`steward_protocol`: chat and legacy completion
//!   requests, responses and stream chunks, model cards, the error body)
//!   derive `ToSchema`: their schemas come from the same definitions serde
//!   reads and writes.
//! - Every route of `app()` is declared below by `#[utoipa::path]` on a
//!   placeholder function (the handlers stay as they are); the test
//!   `crates/server/tests/it/openapi.rs` fails when the router and this list differ.
//! - The bodies a handler reads as JSON by hand (the Anthropic and
//!   Responses dialects, embeddings, rerank, the introspection and admin
//!   routes) and the answers it builds with `json!` are described by hand
//!   in `schemas::hand_schemas` (`openapi/schemas.rs`, the dialects' in
//!   `openapi/schemas/dialects.rs`), from the code that reads and writes them;
//!   `scripts/schemathesis_check.sh` holds the live server to them.
//! - Errors: each operation lists the statuses it can answer with
//!   (`errors!` groups), OpenAI's error body everywhere but under
//!   `/v1/messages`, which answers Anthropic's.

mod schemas;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use steward_protocol as p;
use utoipa::openapi::{self, RefOr};
use utoipa::OpenApi;

// The hand-described types the operations name, and `hand_schemas`.
use schemas::*;

/// The document, built once.
pub(crate) async fn spec() -> Response {
    static DOC: OnceLock<String> = OnceLock::new();
    let body = DOC.get_or_init(|| document().to_string());
    ([(header::CONTENT_TYPE, "application/json")], body.as_str()).into_response()
}

/// The OpenAPI document: utoipa's, with the hand-described schemas in
/// place and `Retry-After` required where the server always sends it.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let schemas = &mut doc["components"]["schemas"];
    for (name, schema) in hand_schemas() {
        // Each hand type is registered by utoipa (as a placeholder) where
        // an operation names it; an unused one is a mistake here.
        debug_assert!(
            schemas.get(name).is_some(),
            "hand schema {name} is not used"
        );
        schemas[name] = schema;
    }
    if let Some(paths) = doc["paths"].as_object_mut() {
        for op in paths.values_mut().filter_map(Value::as_object_mut) {
            for o in op.values_mut() {
                if let Some(h) = o.pointer_mut("/responses/429/headers/retry-after") {
                    h["required"] = json!(true);
                }
                // A header is a string, present or not (utoipa writes an
                // optional one as nullable).
                let params = o.get_mut("parameters").and_then(Value::as_array_mut);
                for prm in params.into_iter().flatten() {
                    if prm["in"] == "header" {
                        prm["schema"] = json!({"type": "string"});
                    }
                }
            }
        }
    }
    doc
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Steward",
        description = "An OpenAI-compatible inference server (chat and legacy completions, \
embeddings, rerank), with Anthropic's Messages API and OpenAI's Responses API served by \
translation.\n\n\
Authentication: with `--api-key` or `--api-key-file`, every route but `/health`, `/ready`, \
`/openapi.json` and the web pages needs `Authorization: Bearer KEY` or `x-api-key: KEY` \
(401 otherwise; 429 past a key's rate limit). A server started without a key accepts requests \
without one, and then refuses the admin routes (403 `admin_disabled`).\n\n\
Every POST body must be JSON (`content-type: application/json`, 415 otherwise), at most \
`--max-body-bytes` (413) and arrive within `--body-timeout-s` (408). A method a path does not \
serve answers 405, an unknown path 404, both with the error body. Past the connection cap any \
request may get 503 `too_many_connections`; malformed HTTP gets 400, 414 or 431 from the \
connection layer.\n\n\
Errors are `{\"error\": {\"message\", \"type\", \"param\", \"code\"}}` (`ErrorBody`), except \
under `/v1/messages`, which answers Anthropic's `{\"type\": \"error\", \"error\": {\"type\", \
\"message\"}}` (`AnthropicError`). A 429, and a 503 that will pass, carry `Retry-After`."
    ),
    paths(
        chat_completions,
        completions,
        messages,
        count_tokens,
        create_response,
        get_response,
        delete_response,
        input_items,
        embeddings,
        rerank_v1,
        rerank,
        list_models,
        get_model,
        admin_load,
        admin_unload,
        admin_adapters,
        render,
        apply_template,
        tokenize,
        detokenize,
        metrics,
        get_load,
        debug_ledger,
        debug_requests,
        debug_cells,
        dashboard_events,
        health,
        ready,
        openapi_json,
        web_chat,
        web_dashboard,
        web_file,
        batch::upload_file,
        batch::list_files,
        batch::get_file,
        batch::delete_file,
        batch::file_content,
        batch::create_batch,
        batch::list_batches,
        batch::get_batch,
        batch::cancel_batch,
    ),
    components(schemas(
        p::ErrorBody,
        p::ChatCompletionChunk,
        p::CompletionResponse,
        AnthropicError,
        AnthropicStreamEvent,
        AnthropicUsage,
        ResponseStreamEvent,
        ResponseOutputItem,
    )),
    modifiers(&Security),
    tags(
        (name = "openai", description = "OpenAI's API: chat and legacy completions, Responses, embeddings, models"),
        (name = "anthropic", description = "Anthropic's Messages API, served by translation into a chat request"),
        (name = "rerank", description = "Rerank (the Jina/Cohere shape llama-server serves)"),
        (name = "introspection", description = "What the server would do with a request, without generating"),
        (name = "admin", description = "Load and unload models and adapters (only with an API key set)"),
        (name = "operations", description = "Health, readiness, metrics, debugging views, this document"),
        (name = "web", description = "The built-in web chat and dashboard (`--no-web` removes them)"),
        (name = "batch", description = "OpenAI's Batch API: JSONL files, batches run in the background, kept in `--state-dir`"),
    )
)]
struct ApiDoc;

/// `bearerAuth` (`Authorization: Bearer KEY`) and `apiKey` (`x-api-key`).
struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, doc: &mut openapi::OpenApi) {
        use openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
        let c = doc.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "bearerAuth",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("`--api-key` or a key of `--api-key-file`"))
                    .build(),
            ),
        );
        c.add_security_scheme(
            "apiKey",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "x-api-key",
                "The same key, as Anthropic's clients send it",
            ))),
        );
    }
}

// ---- error responses -------------------------------------------------------

/// What each error status means here.
fn status_description(status: u16) -> &'static str {
    match status {
        400 => "Invalid request: a field's type or value, a body that is not a JSON object, a prompt longer than the context (`context_length_exceeded`), a grammar that does not compile, a path or query parameter that cannot be read",
        401 => "Missing or wrong API key (`invalid_api_key`)",
        403 => "Admin routes on a server started without an API key (`admin_disabled`)",
        404 => "No such model (`model_not_found`), stored response (`response_not_found`), file (`file_not_found`) or batch (`batch_not_found`); the Batch API off (`batch_disabled`)",
        408 => "The body did not arrive within `--body-timeout-s` (`body_timeout`), a streamed reader fell too far behind (`slow_reader`), or the time allowed for the request (its own `timeout`, or `--request-timeout-s`) ran out (`timeout`)",
        409 => "A batch that has ended cannot be cancelled (`batch_not_cancellable`); a file a batch still reads cannot be deleted (`file_in_use`)",
        413 => "The body is larger than `--max-body-bytes` (`request_too_large`); an upload past `--batch-max-file-bytes` (`file_too_large`) or the state directory's `--batch-max-bytes` (`storage_full`)",
        415 => "A POST body without `content-type: application/json` (`unsupported_media_type`; `/v1/files` takes `multipart/form-data`)",
        429 => "The waiting queue is full (`queue_full`), a key's rate limit or token quota (`rate_limit_exceeded`) or too many open dashboard feeds (`too_many_feeds`)",
        500 => "An internal failure (`internal_error`; the Batch API's state directory could not be written)",
        503 => "Not ready, draining or stopped, a bounded pool full (`tokenizer_busy`, `grammar_busy`), a queue timeout, a model that failed or does not fit, or the connection cap",
        _ => "An error",
    }
}

/// The responses of `statuses`, each with the error body schema `body`.
fn error_responses(body: &str, statuses: &[u16]) -> BTreeMap<String, RefOr<openapi::Response>> {
    use openapi::header::Header;
    use openapi::{Content, ObjectBuilder, ResponseBuilder, Type};
    statuses
        .iter()
        .map(|&s| {
            let mut r = ResponseBuilder::new()
                .description(status_description(s))
                .content(
                    "application/json",
                    Content::new(Some(openapi::Ref::from_schema_name(body))),
                );
            if s == 429 || s == 503 {
                let schema = ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .build();
                let mut h = Header::new(schema);
                h.description = Some("Seconds to wait before retrying".into());
                r = r.header("retry-after", h);
            }
            (s.to_string(), RefOr::T(r.build()))
        })
        .collect()
}

/// A set of error responses an operation lists (`responses(..., Name)`).
macro_rules! errors {
    ($($name:ident($body:literal): [$($status:literal),*];)*) => {
        $(
            struct $name;
            impl utoipa::IntoResponses for $name {
                fn responses() -> BTreeMap<String, RefOr<openapi::Response>> {
                    error_responses($body, &[$($status),*])
                }
            }
        )*
    };
}

errors! {
    GenErrors("ErrorBody"): [400, 401, 404, 408, 413, 415, 429, 500, 503];
    AnthropicGenErrors("AnthropicError"): [400, 401, 404, 408, 413, 415, 429, 500, 503];
    AnthropicCountErrors("AnthropicError"): [400, 401, 404, 408, 413, 415, 429, 500, 503];
    PostErrors("ErrorBody"): [400, 401, 404, 408, 413, 415, 429, 500, 503];
    AdminErrors("ErrorBody"): [400, 401, 403, 404, 408, 413, 415, 429, 500, 503];
    StoredErrors("ErrorBody"): [400, 401, 404, 429, 503];
    PageErrors("ErrorBody"): [400, 401, 404, 429, 503];
    ReadErrors("ErrorBody"): [401, 429, 503];
    ModelErrors("ErrorBody"): [400, 401, 404, 429, 503];
    FeedErrors("ErrorBody"): [400, 401, 429, 503];
    WebErrors("ErrorBody"): [500, 503];
    CapErrors("ErrorBody"): [503];
    WebFileErrors("ErrorBody"): [400, 404, 500, 503];
}

// The Batch API's operations (after `errors!`, which they use).
mod batch;

// ---- the operations ----------------------------------------------------------
//
// Placeholders: each names a route of `app()`; the handlers live in their
// modules and do not change for this document.

#[utoipa::path(
    post, path = "/v1/chat/completions", tag = "openai",
    summary = "Chat completion (whole or streamed)",
    params(("x-request-id" = Option<String>, Header, description = "The request's ID (letters, digits, `-_.:/+`, up to 128): the response `id` and every log line's")),
    request_body(content = p::ChatCompletionRequest, example = json!({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, "temperature": 0})),
    responses(
        (status = 200, description = "The completion; `text/event-stream` with `stream: true`",
            headers(("x-request-id" = String, description = "The request's ID")),
            content((p::ChatCompletionResponse = "application/json"), (ChatCompletionStream = "text/event-stream"))),
        GenErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn chat_completions() {}

#[utoipa::path(
    post, path = "/v1/completions", tag = "openai",
    summary = "Legacy text completion (whole or streamed)",
    params(("x-request-id" = Option<String>, Header, description = "The request's ID")),
    request_body(content = p::CompletionRequest, example = json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0})),
    responses(
        (status = 200, description = "The completion; `text/event-stream` with `stream: true`",
            headers(("x-request-id" = String, description = "The request's ID")),
            content((p::CompletionResponse = "application/json"), (CompletionStream = "text/event-stream"))),
        GenErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn completions() {}

#[utoipa::path(
    post, path = "/v1/messages", tag = "anthropic",
    summary = "Anthropic Messages API (whole or streamed)",
    request_body(content = AnthropicMessagesRequest, example = json!({"max_tokens": 8, "messages": [{"role": "user", "content": "Say hi."}]})),
    responses(
        (status = 200, description = "The message; `text/event-stream` with `stream: true`",
            headers(("x-request-id" = String, description = "The message's ID")),
            content((AnthropicMessage = "application/json"), (AnthropicMessageStream = "text/event-stream"))),
        AnthropicGenErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn messages() {}

#[utoipa::path(
    post, path = "/v1/messages/count_tokens", tag = "anthropic",
    summary = "The prompt's tokens as the model's template renders it",
    request_body(content = AnthropicCountTokensRequest, example = json!({"system": "Be brief.", "messages": [{"role": "user", "content": "Say hi."}]})),
    responses(
        (status = 200, description = "The count", body = AnthropicTokenCount),
        AnthropicCountErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn count_tokens() {}

#[utoipa::path(
    post, path = "/v1/responses", tag = "openai",
    summary = "OpenAI Responses API (whole or streamed; kept for `previous_response_id` unless `store: false`)",
    request_body(content = ResponsesRequest, example = json!({"input": "Say hi.", "max_output_tokens": 8})),
    responses(
        (status = 200, description = "The response; `text/event-stream` with `stream: true`",
            headers(("x-request-id" = String, description = "The response's ID")),
            content((ResponseObject = "application/json"), (ResponseStream = "text/event-stream"))),
        GenErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn create_response() {}

#[utoipa::path(
    get, path = "/v1/responses/{id}", tag = "openai",
    summary = "A stored response",
    params(("id" = String, Path, description = "The response's ID")),
    responses((status = 200, description = "The response", body = ResponseObject), StoredErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn get_response() {}

#[utoipa::path(
    delete, path = "/v1/responses/{id}", tag = "openai",
    summary = "Delete a stored response",
    params(("id" = String, Path, description = "The response's ID")),
    responses((status = 200, description = "Deleted", body = ResponseDeleted), StoredErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn delete_response() {}

#[utoipa::path(
    get, path = "/v1/responses/{id}/input_items", tag = "openai",
    summary = "A page of a stored response's input items",
    params(
        ("id" = String, Path, description = "The response's ID"),
        ("order" = Option<String>, Query, description = "`asc` or `desc` (default: newest first)", pattern = "^(asc|desc)$"),
        ("after" = Option<String>, Query, description = "Items after the item of this ID, in that order"),
        ("limit" = Option<u32>, Query, description = "Items per page (default 20)", minimum = 1, maximum = 100),
    ),
    responses((status = 200, description = "The page", body = ResponseItemList), PageErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn input_items() {}

#[utoipa::path(
    post, path = "/v1/embeddings", tag = "openai",
    summary = "Embeddings (an embedding or reranking model)",
    params(("x-request-id" = Option<String>, Header, description = "The request's ID")),
    request_body(content = EmbeddingsRequest, example = json!({"input": ["A cat sat on the mat.", "Stocks fell today."]})),
    responses(
        (status = 200, description = "One vector per input", body = EmbeddingsResponse,
            headers(("x-request-id" = String, description = "The request's ID"))),
        PostErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn embeddings() {}

#[utoipa::path(
    post, path = "/v1/rerank", tag = "rerank",
    summary = "Rerank documents against a query",
    params(("x-request-id" = Option<String>, Header, description = "The request's ID")),
    request_body(content = RerankRequest, example = json!({"query": "What is a cat?", "documents": ["A cat is a small animal.", "Stocks fell today."], "top_n": 1, "return_documents": true})),
    responses(
        (status = 200, description = "The documents' scores, best first", body = RerankResponse,
            headers(("x-request-id" = String, description = "The request's ID"))),
        PostErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn rerank_v1() {}

#[utoipa::path(
    post, path = "/rerank", tag = "rerank",
    summary = "Rerank documents against a query (the same as `/v1/rerank`)",
    params(("x-request-id" = Option<String>, Header, description = "The request's ID")),
    request_body(content = RerankRequest, example = json!({"query": "What is a cat?", "documents": ["A cat is a small animal.", "Stocks fell today."], "top_n": 1, "return_documents": true})),
    responses(
        (status = 200, description = "The documents' scores, best first", body = RerankResponse,
            headers(("x-request-id" = String, description = "The request's ID"))),
        PostErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn rerank() {}

#[utoipa::path(
    get, path = "/v1/models", tag = "openai",
    summary = "Every model (its state) and each adapter as a model of its own",
    responses((status = 200, description = "The models", body = p::ModelList), ReadErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn list_models() {}

#[utoipa::path(
    get, path = "/v1/models/{id}", tag = "openai",
    summary = "One model (the ID may hold `/` and `:`)",
    params(("id" = String, Path, description = "The model's ID")),
    responses((status = 200, description = "The model", body = p::ModelCard), ModelErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn get_model() {}

#[utoipa::path(
    post, path = "/admin/models/{name}/load", tag = "admin",
    summary = "Load a model now (a failed one is tried again); answers when it is ready",
    params(("name" = String, Path, description = "The model's name")),
    responses((status = 200, description = "Loaded", body = AdminLoadResponse), AdminErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn admin_load() {}

#[utoipa::path(
    post, path = "/admin/models/{name}/unload", tag = "admin",
    summary = "Unload a model (in-flight requests get 10 s, then are cancelled)",
    params(("name" = String, Path, description = "The model's name")),
    responses((status = 200, description = "Unloaded", body = AdminUnloadResponse), AdminErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn admin_unload() {}

#[utoipa::path(
    post, path = "/admin/models/{name}/adapters", tag = "admin",
    summary = "Load a LoRA adapter GGUF into a model (loaded first if it must be)",
    params(("name" = String, Path, description = "The model's name")),
    request_body(content = AdminAdapterRequest, example = json!({"name": "style", "path": "/models/style-lora.gguf", "scale": 1.0})),
    responses((status = 200, description = "The adapter", body = AdminAdapterResponse), AdminErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn admin_adapters() {}

#[utoipa::path(
    post, path = "/v1/chat/completions/render", tag = "introspection",
    summary = "A chat request's prompt: its text and token IDs",
    request_body(content = p::ChatCompletionRequest, example = json!({"messages": [{"role": "user", "content": "Say hi."}]})),
    responses((status = 200, description = "The prompt", body = RenderResponse), PostErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn render() {}

#[utoipa::path(
    post, path = "/apply-template", tag = "introspection",
    summary = "A chat request's prompt text",
    request_body(content = p::ChatCompletionRequest, example = json!({"messages": [{"role": "user", "content": "Say hi."}]})),
    responses((status = 200, description = "The prompt", body = ApplyTemplateResponse), PostErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn apply_template() {}

#[utoipa::path(
    post, path = "/tokenize", tag = "introspection",
    summary = "Text into token IDs (llama-server's shape)",
    request_body(content = TokenizeRequest, example = json!({"content": "Hello world", "with_pieces": true})),
    responses((status = 200, description = "The tokens", body = TokenizeResponse), PostErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn tokenize() {}

#[utoipa::path(
    post, path = "/detokenize", tag = "introspection",
    summary = "Token IDs into text (llama-server's shape)",
    request_body(content = DetokenizeRequest, example = json!({"tokens": [19556, 905]})),
    responses((status = 200, description = "The text", body = DetokenizeResponse), PostErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn detokenize() {}

#[utoipa::path(
    get, path = "/metrics", tag = "operations",
    summary = "Prometheus metrics (also on `--metrics-port`, without a key)",
    responses(
        (status = 200, description = "The metrics", content((MetricsText = "text/plain"))),
        ReadErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn metrics() {}

#[utoipa::path(
    get, path = "/get_load", tag = "operations",
    summary = "Load for routers (SGLang's and the vLLM Router's `load`): running + waiting, summed and per model (also on `--metrics-port`)",
    responses((status = 200, description = "The load", body = Load), ReadErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn get_load() {}

#[utoipa::path(
    get, path = "/debug/ledger", tag = "operations",
    summary = "The memory ledger, term by term",
    responses((status = 200, description = "The ledger", body = Ledger), ReadErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn debug_ledger() {}

#[utoipa::path(
    get, path = "/debug/requests", tag = "operations",
    summary = "Every live request of every loaded model",
    responses((status = 200, description = "The requests", body = LiveRequests), ReadErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn debug_requests() {}

#[utoipa::path(
    get, path = "/debug/cells", tag = "operations",
    summary = "Every loaded model's cell map: the tokens each slot's KV cells hold",
    responses((status = 200, description = "The cell maps", body = CellMap), ReadErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn debug_cells() {}

#[utoipa::path(
    get, path = "/dashboard/events", tag = "operations",
    summary = "The dashboard's live feed (endless server-sent events; at most 16 open)",
    params(("interval_ms" = Option<u64>, Query, description = "Tick interval (default 500)", minimum = 100, maximum = 5000)),
    responses(
        (status = 200, description = "The feed", content((DashboardStream = "text/event-stream"))),
        FeedErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
fn dashboard_events() {}

#[utoipa::path(
    get, path = "/health", tag = "operations",
    summary = "Liveness: 503 once the engine has failed (no key needed)",
    responses(
        (status = 200, description = "Serving", body = Health),
        (status = 503, description = "The engine failed (`{\"status\": \"failed\"}`), or the connection cap (the error body)",
            body = HealthFailed),
    )
)]
#[allow(dead_code)]
fn health() {}

#[utoipa::path(
    get, path = "/ready", tag = "operations",
    summary = "Readiness: 200 once the default model can take requests (no key needed)",
    responses(
        (status = 200, description = "Ready", body = Ready),
        (status = 503, description = "Loading, draining or stopped, or the connection cap (the error body)",
            body = NotReady),
    )
)]
#[allow(dead_code)]
fn ready() {}

#[utoipa::path(
    get, path = "/openapi.json", tag = "operations",
    summary = "This document (no key needed)",
    responses((status = 200, description = "The OpenAPI 3.1 document", body = OpenApiDocument), CapErrors)
)]
#[allow(dead_code)]
fn openapi_json() {}

#[utoipa::path(
    get, path = "/", tag = "web",
    summary = "The web chat",
    responses((status = 200, description = "The page", content((WebPage = "text/html"))), WebErrors)
)]
#[allow(dead_code)]
fn web_chat() {}

#[utoipa::path(
    get, path = "/dashboard", tag = "web",
    summary = "The live engine view",
    responses((status = 200, description = "The page", content((WebPage = "text/html"))), WebErrors)
)]
#[allow(dead_code)]
fn web_dashboard() {}

#[utoipa::path(
    get, path = "/ui/{name}", tag = "web",
    summary = "A file of the web UI",
    params(("name" = String, Path, example = "app.css", description = "`index.html`, `dashboard.html`, `app.css`, `chat.js`, `dashboard.js` or `md.js`")),
    responses(
        (status = 200, description = "The file",
            content((WebAsset = "text/html"), (WebAsset = "text/css"), (WebAsset = "text/javascript"))),
        WebFileErrors,
    )
)]
#[allow(dead_code)]
fn web_file() {}
