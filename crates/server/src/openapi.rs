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
//!   in `hand_schemas`, from the code that reads and writes them;
//!   `scripts/schemathesis_check.sh` holds the live server to them.
//! - Errors: each operation lists the statuses it can answer with
//!   (`errors!` groups), OpenAI's error body everywhere but under
//!   `/v1/messages`, which answers Anthropic's.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use steward_protocol as p;
use utoipa::openapi::{self, RefOr};
use utoipa::OpenApi;

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
        404 => "No such model (`model_not_found`) or stored response (`response_not_found`)",
        408 => "The body did not arrive within `--body-timeout-s` (`body_timeout`), a streamed reader fell too far behind (`slow_reader`), or the time allowed for the request (its own `timeout`, or `--request-timeout-s`) ran out (`timeout`)",
        413 => "The body is larger than `--max-body-bytes` (`request_too_large`)",
        415 => "A POST body without `content-type: application/json` (`unsupported_media_type`)",
        429 => "The waiting queue is full (`queue_full`), a key's rate limit (`rate_limit_exceeded`) or too many open dashboard feeds (`too_many_feeds`)",
        500 => "An internal failure (`internal_error`)",
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

// ---- hand-described schemas ------------------------------------------------

/// Types whose schema is written by hand (`hand_schemas`): utoipa
/// registers a placeholder under the name wherever an operation names the
/// type, and `document` puts the real schema there.
macro_rules! hand_types {
    ($($name:ident),* $(,)?) => {
        $(
            struct $name;
            impl utoipa::PartialSchema for $name {
                fn schema() -> RefOr<openapi::schema::Schema> {
                    RefOr::T(openapi::schema::Schema::Object(Default::default()))
                }
            }
            impl utoipa::ToSchema for $name {}
        )*
    };
}

hand_types!(
    ChatCompletionStream,
    CompletionStream,
    AnthropicMessagesRequest,
    AnthropicCountTokensRequest,
    AnthropicMessage,
    AnthropicMessageStream,
    AnthropicTokenCount,
    AnthropicError,
    AnthropicStreamEvent,
    AnthropicUsage,
    ResponsesRequest,
    ResponseObject,
    ResponseStream,
    ResponseStreamEvent,
    ResponseOutputItem,
    ResponseDeleted,
    ResponseItemList,
    EmbeddingsRequest,
    EmbeddingsResponse,
    RerankRequest,
    RerankResponse,
    RenderResponse,
    ApplyTemplateResponse,
    TokenizeRequest,
    TokenizeResponse,
    DetokenizeRequest,
    DetokenizeResponse,
    AdminLoadResponse,
    AdminUnloadResponse,
    AdminAdapterRequest,
    AdminAdapterResponse,
    MetricsText,
    Ledger,
    LiveRequests,
    CellMap,
    Load,
    DashboardStream,
    Health,
    HealthFailed,
    Ready,
    NotReady,
    OpenApiDocument,
    WebPage,
    WebAsset,
);

fn nullable(t: &str) -> Value {
    json!({"type": [t, "null"]})
}

fn obj(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "required": required, "properties": properties})
}

/// An integer of at least 0.
fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}

/// Every hand-described schema, from the code that reads or writes it.
fn hand_schemas() -> Vec<(&'static str, Value)> {
    // One server-sent event (`event`, `data`), its `data` JSON of
    // `payload` (or `[DONE]` where `done`); comment lines keep a quiet
    // stream open.
    let sse = |what: &str, event: Value, payload: Value, done: bool| {
        let json_data = json!({"contentMediaType": "application/json", "contentSchema": payload});
        let data = if done {
            json!({"type": "string", "if": {"const": "[DONE]"}, "else": json_data})
        } else {
            let mut d = json_data;
            d["type"] = json!("string");
            d
        };
        json!({
            "type": "object",
            "description": format!("One server-sent event of the stream (`stream: true`): {what}. While the stream has nothing to send, comment lines keep it open."),
            "required": ["data"],
            "properties": {"event": event, "data": data},
        })
    };
    let r = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
    let usage = obj(
        &["prompt_tokens", "total_tokens"],
        json!({"prompt_tokens": count(), "total_tokens": count()}),
    );
    vec![
        ("ChatCompletionStream", sse(
            "one `data: {ChatCompletionChunk}` event per piece of the answer (the final usage chunk \
             with `stream_options.include_usage`), then `data: [DONE]`; a failure after the start is \
             an `ErrorBody` event before `[DONE]`",
            json!({"type": "string"}),
            json!({"anyOf": [r("ChatCompletionChunk"), r("ErrorBody")]}),
            true,
        )),
        ("CompletionStream", sse(
            "one `data: {CompletionResponse}` event per piece of text (the final usage chunk with \
             `stream_options.include_usage`), then `data: [DONE]`; a failure after the start is an \
             `ErrorBody` event before `[DONE]`",
            json!({"type": "string"}),
            json!({"anyOf": [r("CompletionResponse"), r("ErrorBody")]}),
            true,
        )),
        ("AnthropicMessagesRequest", anthropic_request(true)),
        ("AnthropicCountTokensRequest", anthropic_request(false)),
        ("AnthropicMessage", anthropic_message()),
        ("AnthropicMessageStream", sse(
            "Anthropic's events: `message_start`, `ping`, per block `content_block_start`, \
             `content_block_delta` (`text_delta`, `thinking_delta`, `signature_delta`, \
             `input_json_delta`), `content_block_stop`, then `message_delta` and `message_stop`; \
             a failure is an `error` event",
            json!({"enum": ["message_start", "ping", "content_block_start", "content_block_delta",
                "content_block_stop", "message_delta", "message_stop", "error"]}),
            r("AnthropicStreamEvent"),
            false,
        )),
        ("AnthropicStreamEvent", anthropic_stream_event()),
        ("AnthropicUsage", obj(&["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"], json!({
            "input_tokens": {"type": "integer", "minimum": 0, "description": "Prompt tokens not read from the prefix cache"},
            "output_tokens": count(),
            "cache_read_input_tokens": count(),
            "cache_creation_input_tokens": count(),
        }))),
        ("AnthropicTokenCount", obj(&["input_tokens"], json!({"input_tokens": count()}))),
        ("AnthropicError", json!({
            "type": "object",
            "description": "Anthropic's error shape: every error answered under `/v1/messages`.",
            "required": ["type", "error"],
            "properties": {
                "type": {"const": "error"},
                "error": obj(&["type", "message"], json!({
                    "type": {"enum": ["invalid_request_error", "authentication_error",
                        "permission_error", "not_found_error", "request_too_large",
                        "rate_limit_error", "overloaded_error", "api_error"]},
                    "message": {"type": "string"},
                })),
            },
        })),
        ("ResponsesRequest", responses_request()),
        ("ResponseObject", response_object()),
        ("ResponseStream", sse(
            "the Responses API's events, each with `type` (also the event's name) and an \
             increasing `sequence_number`: `response.created`, `response.in_progress`, \
             `response.output_item.added`, `response.content_part.added`, \
             `response.output_text.delta`, `response.reasoning_text.delta`, \
             `response.function_call_arguments.delta`, their `.done` events, \
             `response.output_item.done`, then `response.completed` (or `response.incomplete` at \
             the token limit); a failure is `error` and `response.failed`",
            json!({"type": "string"}),
            r("ResponseStreamEvent"),
            false,
        )),
        ("ResponseStreamEvent", response_stream_event()),
        ("ResponseOutputItem", response_output_item()),
        ("ResponseDeleted", obj(&["id", "object", "deleted"], json!({
            "id": {"type": "string"},
            "object": {"const": "response"},
            "deleted": {"const": true},
        }))),
        ("ResponseItemList", obj(&["object", "data", "first_id", "last_id", "has_more"], json!({
            "object": {"const": "list"},
            "data": {
                "type": "array",
                "description": "The stored response's input items (its conversation before its own output), canonical: each with an `id`.",
                "items": obj(&["id", "type"], json!({
                    "id": {"type": "string"},
                    "type": {"enum": ["message", "function_call", "function_call_output", "reasoning"]},
                })),
            },
            "first_id": nullable("string"),
            "last_id": nullable("string"),
            "has_more": {"type": "boolean"},
        }))),
        ("EmbeddingsRequest", json!({
            "type": "object",
            "required": ["input"],
            "properties": {
                "model": {"type": ["string", "null"], "description": "The model (default: the first); an embedding or reranking GGUF"},
                "input": {
                    "description": "A string, a list of strings, a list of token IDs, or a list of token-ID lists: at most 2048 inputs, each at most 65536 bytes of text and the model's context in tokens, 300000 tokens in all",
                    "anyOf": [
                        {"type": "string"},
                        {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"anyOf": [
                            {"type": "string"},
                            {"type": "array", "items": count()},
                        ]}},
                    ],
                },
                "encoding_format": {"enum": ["float", "base64", null]},
                "dimensions": {"type": ["integer", "null"], "minimum": 1, "description": "The first N of each vector, renormalised (at most the model's width)"},
            },
        })),
        ("EmbeddingsResponse", obj(&["object", "data", "model", "usage"], json!({
            "object": {"const": "list"},
            "data": {"type": "array", "items": obj(&["object", "index", "embedding"], json!({
                "object": {"const": "embedding"},
                "index": count(),
                "embedding": {
                    "description": "L2-normalised floats, or their little-endian f32 bytes in base64 (`encoding_format: base64`)",
                    "anyOf": [{"type": "array", "items": {"type": "number"}}, {"type": "string"}],
                },
            }))},
            "model": {"type": "string"},
            "usage": usage.clone(),
        }))),
        ("RerankRequest", json!({
            "type": "object",
            "required": ["query", "documents"],
            "properties": {
                "model": {"type": ["string", "null"]},
                "query": {"type": "string", "minLength": 1},
                "documents": {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"anyOf": [
                    {"type": "string"},
                    obj(&["text"], json!({"text": {"type": "string"}})),
                ]}},
                "top_n": {"type": ["integer", "null"], "minimum": 1},
                "return_documents": nullable("boolean"),
            },
        })),
        ("RerankResponse", obj(&["id", "object", "model", "results", "usage", "meta"], json!({
            "id": {"type": "string"},
            "object": {"const": "list"},
            "model": {"type": "string"},
            "results": {
                "type": "array",
                "description": "Best first: a cross-encoder's score, or the cosine similarity of the query's and the document's embeddings",
                "items": obj(&["index", "relevance_score"], json!({
                    "index": count(),
                    "relevance_score": {"type": "number"},
                    "document": obj(&["text"], json!({"text": {"type": "string"}})),
                })),
            },
            "usage": usage.clone(),
            "meta": obj(&["billed_units"], json!({
                "billed_units": obj(&["search_units"], json!({"search_units": count()})),
            })),
        }))),
        ("RenderResponse", obj(&["prompt", "prompt_token_ids", "num_tokens", "starts_in_reasoning"], json!({
            "prompt": {"type": "string"},
            "prompt_token_ids": {"type": "array", "items": count()},
            "num_tokens": count(),
            "starts_in_reasoning": {"type": "boolean"},
        }))),
        ("ApplyTemplateResponse", obj(&["prompt"], json!({"prompt": {"type": "string"}}))),
        ("TokenizeRequest", json!({
            "type": "object",
            "required": ["content"],
            "properties": {
                "model": {"type": ["string", "null"]},
                "content": {"type": "string"},
                "add_special": {"type": ["boolean", "null"], "default": false},
                "parse_special": {"type": ["boolean", "null"], "default": true},
                "with_pieces": {"type": ["boolean", "null"], "default": false},
            },
        })),
        ("TokenizeResponse", obj(&["tokens"], json!({"tokens": {"anyOf": [
            {"type": "array", "items": count()},
            {"type": "array", "description": "`with_pieces`", "items": obj(&["id", "piece"], json!({
                "id": count(),
                "piece": {
                    "description": "The token's text, or its bytes when they are not UTF-8",
                    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}}],
                },
            }))},
        ]}}))),
        ("DetokenizeRequest", json!({
            "type": "object",
            "required": ["tokens"],
            "properties": {
                "model": {"type": ["string", "null"]},
                "tokens": {"type": "array", "description": "Token IDs of the model's vocabulary", "items": {"type": "integer", "minimum": -2147483648_i64, "maximum": 2147483647}},
            },
        })),
        ("DetokenizeResponse", obj(&["content"], json!({"content": {"type": "string"}}))),
        ("AdminLoadResponse", obj(&["model", "state"], json!({
            "model": {"type": "string"},
            "state": {"const": "loaded"},
        }))),
        ("AdminUnloadResponse", obj(&["model", "state", "was_loaded"], json!({
            "model": {"type": "string"},
            "state": {"const": "unloaded"},
            "was_loaded": {"type": "boolean"},
        }))),
        ("AdminAdapterRequest", json!({
            "type": "object",
            "required": ["name", "path"],
            "properties": {
                "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
                "path": {"type": "string", "description": "The adapter GGUF, on the server's file system"},
                "scale": {"type": ["number", "null"], "default": 1.0},
            },
        })),
        ("AdminAdapterResponse", obj(&["model", "adapter"], json!({
            "model": {"type": "string", "description": "`MODEL:ADAPTER`, the name requests use"},
            "adapter": obj(&["id", "name", "path", "scale"], json!({
                "id": count(),
                "name": {"type": "string"},
                "path": {"type": "string"},
                "scale": {"type": "number"},
            })),
        }))),
        ("MetricsText", json!({"type": "string", "description": "Prometheus text exposition (version 0.0.4); every sample of a model labelled `model=\"…\"`"})),
        ("Ledger", ledger()),
        ("CellMap", obj(&["block_tokens", "models"], json!({
            "block_tokens": count(),
            "models": {"type": "object", "description": "Per loaded model", "additionalProperties": obj(&["slots"], json!({
                "slots": {"type": "array", "items": obj(&["slot", "key", "tokens"], json!({
                    "slot": count(),
                    "key": {"type": "array", "items": count(), "minItems": 3, "maxItems": 3, "description": "The prefix identity (model, adapters, media hashes) the cells were computed under"},
                    "tokens": {"type": "array", "items": {"type": "integer"}, "description": "Token IDs in the slot's KV cells, positions 0.."},
                }))},
            }))},
        }))),
        ("LiveRequests", obj(&["requests"], json!({"requests": {"type": "array", "items": obj(
            &["id", "state", "prompt_tokens", "prompt_computed", "generated", "age_ms", "model"],
            json!({
                "id": {"type": "string"},
                "state": {"enum": ["queued", "prefilling", "decoding", "paused", "retiring"]},
                "prompt_tokens": count(),
                "prompt_computed": count(),
                "generated": count(),
                "age_ms": {"type": "number"},
                "model": {"type": "string"},
            }),
        )}}))),
        ("DashboardStream", sse(
            "endless, one `snapshot` event per tick: every loaded model's requests, memory ledger, \
             KV cells, prefix cache, the steps and cancellations since the last event, latency \
             histograms",
            json!({"const": "snapshot"}),
            obj(&["t_ms", "connections_open", "response_store", "models"], json!({
                "t_ms": {"type": "number"},
                "connections_open": count(),
                "response_store": {"type": "object"},
                "models": {"type": "array", "items": obj(&["model"], json!({"model": {"type": "string"}}))},
            })),
            false,
        )),
        ("Load", obj(&["load", "num_reqs", "num_waiting_reqs", "num_tokens", "models"], json!({
            "load": count(),
            "num_reqs": count(),
            "num_waiting_reqs": count(),
            "num_tokens": count(),
            "models": {"type": "object", "additionalProperties": obj(
                &["load", "num_reqs", "num_waiting_reqs", "num_tokens", "max_seqs"],
                json!({
                    "load": count(),
                    "num_reqs": count(),
                    "num_waiting_reqs": count(),
                    "num_tokens": count(),
                    "max_seqs": count(),
                }),
            )},
        }))),
        ("Health", obj(&["status"], json!({"status": {"enum": ["ok", "failed"]}}))),
        ("HealthFailed", json!({"anyOf": [{"$ref": "#/components/schemas/Health"}, {"$ref": "#/components/schemas/ErrorBody"}]})),
        ("NotReady", json!({"anyOf": [{"$ref": "#/components/schemas/Ready"}, {"$ref": "#/components/schemas/ErrorBody"}]})),
        ("Ready", obj(&["status"], json!({"status": {"enum": ["ready", "loading", "draining", "stopped"]}}))),
        ("OpenApiDocument", obj(&["openapi", "info", "paths"], json!({
            "openapi": {"type": "string"},
            "info": {"type": "object"},
            "paths": {"type": "object"},
        }))),
        ("WebPage", json!({"type": "string", "description": "An HTML page"})),
        ("WebAsset", json!({"type": "string", "description": "A page, style sheet or script of the web UI"})),
    ]
}

/// A Messages API request, as `steward_dialects::anthropic::to_chat`
/// reads it (`null` reads as absent). The chat request it becomes is then
/// validated as any chat request (value ranges, context, limits).
fn anthropic_request(messages_api: bool) -> Value {
    let text_block = obj(
        &["type", "text"],
        json!({"type": {"const": "text"}, "text": {"type": "string"}}),
    );
    let block = json!({
        "description": "User turns: `text` and `tool_result` blocks; assistant turns: `text`, `thinking`, `redacted_thinking` and `tool_use` blocks. Images, documents and server-side blocks are refused (400): the models read text only.",
        "anyOf": [
            text_block.clone(),
            obj(&["type", "thinking"], json!({"type": {"const": "thinking"}, "thinking": {"type": "string"}, "signature": {"type": ["string", "null"]}})),
            obj(&["type"], json!({"type": {"const": "redacted_thinking"}})),
            obj(&["type", "id", "name"], json!({"type": {"const": "tool_use"}, "id": {"type": "string"}, "name": {"type": "string"}, "input": {}})),
            obj(&["type", "tool_use_id"], json!({
                "type": {"const": "tool_result"},
                "tool_use_id": {"type": "string"},
                "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": text_block.clone()}, {"type": "null"}]},
                "is_error": nullable("boolean"),
            })),
        ],
    });
    let json_format = obj(
        &["type", "schema"],
        json!({"type": {"const": "json_schema"}, "schema": {"type": "object"}}),
    );
    let mut required = vec!["messages"];
    if messages_api {
        required.insert(0, "max_tokens");
    }
    json!({
        "type": "object",
        "description": if messages_api {
            "A Messages API request: translated into a chat-completions request and run as one."
        } else {
            "A Messages API request without `max_tokens`: its prompt is rendered and counted."
        },
        "required": required,
        "properties": {
            "model": nullable("string"),
            "max_tokens": {"type": if messages_api { json!("integer") } else { json!(["integer", "null"]) }, "minimum": 1},
            "messages": {"type": "array", "minItems": 1, "items": obj(&["role", "content"], json!({
                "role": {"enum": ["user", "assistant"]},
                "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": block}]},
            }))},
            "system": {"anyOf": [{"type": "string"}, {"type": "array", "items": text_block}, {"type": "null"}]},
            "stop_sequences": {"type": ["array", "null"], "items": {"type": "string"}},
            "temperature": nullable("number"),
            "top_p": nullable("number"),
            "top_k": {"type": ["integer", "null"], "minimum": 0},
            "stream": nullable("boolean"),
            "tools": {"type": ["array", "null"], "description": "Client tools only (`custom` or no `type`)", "items": obj(&["name"], json!({
                "type": {"enum": ["custom", null]},
                "name": {"type": "string"},
                "description": nullable("string"),
                "input_schema": {"type": ["object", "null"]},
                "strict": nullable("boolean"),
            }))},
            "tool_choice": {"anyOf": [{"type": "null"}, {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"enum": ["auto", "any", "tool", "none"]},
                    "name": {"description": "The tool (`type: tool` only; read as nothing otherwise)"},
                    "disable_parallel_tool_use": nullable("boolean"),
                },
                "if": {"properties": {"type": {"const": "tool"}}},
                "then": {"required": ["name"], "properties": {"name": {"type": "string"}}},
            }]},
            "thinking": {"anyOf": [{"type": "null"}, {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"enum": ["enabled", "adaptive", "disabled"]},
                    "budget_tokens": {"description": "`type: enabled` only (read as nothing otherwise)"},
                },
                "if": {"properties": {"type": {"const": "enabled"}}},
                "then": {"properties": {"budget_tokens": {"type": ["integer", "null"], "minimum": 0}}},
            }]},
            "output_format": {"anyOf": [{"type": "null"}, json_format.clone()]},
            "output_config": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
                "format": {"anyOf": [{"type": "null"}, json_format]},
                "effort": {"enum": ["low", "medium", "high", "max", null]},
            }}]},
            "metadata": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"user_id": nullable("string")}}]},
        },
    })
}

/// The whole answer as `steward_dialects::anthropic::message_from_events`
/// assembles it.
fn anthropic_message() -> Value {
    obj(
        &[
            "id",
            "type",
            "role",
            "model",
            "content",
            "stop_reason",
            "stop_sequence",
            "usage",
        ],
        json!({
            "id": {"type": "string"},
            "type": {"const": "message"},
            "role": {"const": "assistant"},
            "model": {"type": "string"},
            "content": {"type": "array", "items": {"anyOf": [
                obj(&["type", "text"], json!({"type": {"const": "text"}, "text": {"type": "string"}})),
                obj(&["type", "thinking", "signature"], json!({"type": {"const": "thinking"}, "thinking": {"type": "string"}, "signature": {"type": "string"}})),
                obj(&["type", "id", "name", "input"], json!({"type": {"const": "tool_use"}, "id": {"type": "string"}, "name": {"type": "string"}, "input": {"type": "object"}})),
            ]}},
            "stop_reason": {"enum": ["end_turn", "max_tokens", "tool_use", "stop_sequence"]},
            "stop_sequence": nullable("string"),
            "usage": {"$ref": "#/components/schemas/AnthropicUsage"},
        }),
    )
}

/// The data of one Messages stream event, as `MessageStream` writes it.
fn anthropic_stream_event() -> Value {
    let ev = |t: &str, required: &[&str], mut props: Value| {
        props["type"] = json!({"const": t});
        let mut req = vec!["type"];
        req.extend_from_slice(required);
        obj(&req, props)
    };
    let block = json!({"anyOf": [
        obj(&["type", "text"], json!({"type": {"const": "text"}, "text": {"type": "string"}})),
        obj(&["type", "thinking", "signature"], json!({"type": {"const": "thinking"}, "thinking": {"type": "string"}, "signature": {"type": "string"}})),
        obj(&["type", "id", "name", "input"], json!({"type": {"const": "tool_use"}, "id": {"type": "string"}, "name": {"type": "string"}, "input": {"type": "object"}})),
    ]});
    let delta = json!({"anyOf": [
        obj(&["type", "text"], json!({"type": {"const": "text_delta"}, "text": {"type": "string"}})),
        obj(&["type", "thinking"], json!({"type": {"const": "thinking_delta"}, "thinking": {"type": "string"}})),
        obj(&["type", "signature"], json!({"type": {"const": "signature_delta"}, "signature": {"type": "string"}})),
        obj(&["type", "partial_json"], json!({"type": {"const": "input_json_delta"}, "partial_json": {"type": "string"}})),
    ]});
    let start = obj(
        &[
            "id",
            "type",
            "role",
            "model",
            "content",
            "stop_reason",
            "stop_sequence",
            "usage",
        ],
        json!({
            "id": {"type": "string"},
            "type": {"const": "message"},
            "role": {"const": "assistant"},
            "model": {"type": "string"},
            "content": {"type": "array", "maxItems": 0},
            "stop_reason": {"type": "null"},
            "stop_sequence": {"type": "null"},
            "usage": obj(&["input_tokens", "output_tokens"], json!({"input_tokens": count(), "output_tokens": count()})),
        }),
    );
    json!({"anyOf": [
        ev("message_start", &["message"], json!({"message": start})),
        ev("ping", &[], json!({})),
        ev("content_block_start", &["index", "content_block"], json!({"index": count(), "content_block": block})),
        ev("content_block_delta", &["index", "delta"], json!({"index": count(), "delta": delta})),
        ev("content_block_stop", &["index"], json!({"index": count()})),
        ev("message_delta", &["delta", "usage"], json!({
            "delta": obj(&["stop_reason", "stop_sequence"], json!({
                "stop_reason": {"enum": ["end_turn", "max_tokens", "tool_use", "stop_sequence"]},
                "stop_sequence": nullable("string"),
            })),
            "usage": {"$ref": "#/components/schemas/AnthropicUsage"},
        })),
        ev("message_stop", &[], json!({})),
        {"$ref": "#/components/schemas/AnthropicError"},
    ]})
}

/// A Responses API request, as `steward_dialects::responses::to_chat`
/// reads it (`null` reads as absent).
fn responses_request() -> Value {
    let part = json!({"anyOf": [
        obj(&["type", "text"], json!({"type": {"enum": ["input_text", "output_text", "text"]}, "text": {"type": "string"}})),
        obj(&["type", "refusal"], json!({"type": {"const": "refusal"}, "refusal": {"type": "string"}})),
    ]});
    let parts = json!({"anyOf": [{"type": "string"}, {"type": "array", "items": part}]});
    let summary = json!({"type": ["array", "null"], "items": obj(&["text"], json!({"type": nullable("string"), "text": {"type": "string"}}))});
    let item = json!({
        "description": "An input item (`type` may be left out of a message that has a `role`); images, files, audio and item references are refused (400)",
        "anyOf": [
            obj(&["role", "content"], json!({
                "type": {"enum": ["message", null]},
                "id": nullable("string"),
                "role": {"enum": ["user", "assistant", "system", "developer"]},
                "content": parts.clone(),
                "status": nullable("string"),
            })),
            obj(&["type", "call_id", "name", "arguments"], json!({
                "type": {"const": "function_call"},
                "id": nullable("string"),
                "call_id": {"type": "string"},
                "name": {"type": "string"},
                "arguments": {"type": "string"},
                "status": nullable("string"),
            })),
            obj(&["type", "call_id", "output"], json!({
                "type": {"const": "function_call_output"},
                "id": nullable("string"),
                "call_id": {"type": "string"},
                "output": parts,
            })),
            obj(&["type"], json!({
                "type": {"const": "reasoning"},
                "id": nullable("string"),
                "summary": summary.clone(),
                "content": summary,
                "encrypted_content": nullable("string"),
            })),
        ],
    });
    json!({
        "type": "object",
        "description": "A Responses API request: translated into a chat-completions request and run as one. `input` (or `previous_response_id`'s conversation) must hold a message other than a system one.",
        "properties": {
            "model": nullable("string"),
            "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": item}, {"type": "null"}]},
            "instructions": nullable("string"),
            "previous_response_id": {"type": ["string", "null"], "description": "A stored response (404 when it is not, or no longer, stored)"},
            "max_output_tokens": {"type": ["integer", "null"], "minimum": 1},
            "temperature": nullable("number"),
            "top_p": nullable("number"),
            "stream": nullable("boolean"),
            "store": {"type": ["boolean", "null"], "default": true},
            "tools": {"type": ["array", "null"], "description": "Function tools only", "items": obj(&["type", "name"], json!({
                "type": {"const": "function"},
                "name": {"type": "string"},
                "description": nullable("string"),
                "parameters": {"type": ["object", "null"]},
                "strict": nullable("boolean"),
            }))},
            "tool_choice": {"anyOf": [
                {"enum": ["auto", "none", "required", null]},
                obj(&["type", "name"], json!({"type": {"const": "function"}, "name": {"type": "string"}})),
            ]},
            "parallel_tool_calls": nullable("boolean"),
            "text": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
                "format": {"anyOf": [{"type": "null"}, {
                    "type": "object",
                    "description": "`name`, `description`, `schema` and `strict` are read with `type: json_schema` only",
                    "required": ["type"],
                    "properties": {"type": {"enum": ["text", "json_object", "json_schema"]}},
                    "if": {"properties": {"type": {"const": "json_schema"}}},
                    "then": {"required": ["schema"], "properties": {
                        "name": nullable("string"),
                        "description": nullable("string"),
                        "schema": {"type": "object"},
                        "strict": nullable("boolean"),
                    }},
                }]},
            }}]},
            "reasoning": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
                "effort": {"enum": ["none", "minimal", "low", "medium", "high", "xhigh", null]},
                "summary": nullable("string"),
            }}]},
            "metadata": {"anyOf": [{"type": "null"}, {
                "type": "object",
                "maxProperties": 16,
                "propertyNames": {"maxLength": 64},
                "additionalProperties": {"type": "string", "maxLength": 512},
            }]},
            "user": nullable("string"),
            "truncation": {"enum": ["disabled", "auto", null]},
            "include": {"type": ["array", "null"], "items": {"type": "string"}},
            "background": {"enum": [false, null], "description": "Not supported: absent, null or false"},
            "conversation": {"enum": [false, null], "description": "Not supported: absent, null or false"},
            "prompt": {"enum": [false, null], "description": "Not supported: absent, null or false"},
        },
    })
}

/// An output item of a Response (whole, or as a stream adds and ends it).
fn response_output_item() -> Value {
    let status = json!({"enum": ["in_progress", "completed", "incomplete"]});
    json!({"anyOf": [
        obj(&["id", "type", "summary", "content"], json!({
            "id": {"type": "string"},
            "type": {"const": "reasoning"},
            "summary": {"type": "array"},
            "content": {"type": "array", "items": obj(&["type", "text"], json!({"type": {"const": "reasoning_text"}, "text": {"type": "string"}}))},
        })),
        obj(&["id", "type", "status", "role", "content"], json!({
            "id": {"type": "string"},
            "type": {"const": "message"},
            "status": status.clone(),
            "role": {"const": "assistant"},
            "content": {"type": "array", "items": obj(&["type", "text", "annotations", "logprobs"], json!({
                "type": {"const": "output_text"},
                "text": {"type": "string"},
                "annotations": {"type": "array"},
                "logprobs": {"type": "array"},
            }))},
        })),
        obj(&["id", "type", "status", "call_id", "name", "arguments"], json!({
            "id": {"type": "string"},
            "type": {"const": "function_call"},
            "status": status,
            "call_id": {"type": "string"},
            "name": {"type": "string"},
            "arguments": {"type": "string", "description": "JSON text"},
        })),
    ]})
}

/// The data of one Responses stream event, as `ResponseStream` writes it.
fn response_stream_event() -> Value {
    let types = [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.reasoning_text.delta",
        "response.function_call_arguments.delta",
        "response.output_text.done",
        "response.reasoning_text.done",
        "response.function_call_arguments.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
        "response.incomplete",
        "error",
        "response.failed",
    ];
    obj(
        &["type", "sequence_number"],
        json!({
            "type": {"enum": types},
            "sequence_number": count(),
            "response": {"$ref": "#/components/schemas/ResponseObject"},
            "item": {"$ref": "#/components/schemas/ResponseOutputItem"},
            "item_id": {"type": "string"},
            "output_index": count(),
            "content_index": count(),
            "part": obj(&["type", "text"], json!({"type": {"enum": ["output_text", "reasoning_text"]}, "text": {"type": "string"}})),
            "delta": {"type": "string"},
            "text": {"type": "string"},
            "logprobs": {"type": "array"},
            "name": {"type": "string"},
            "arguments": {"type": "string"},
            "code": {"type": "string"},
            "message": {"type": "string"},
            "param": nullable("string"),
        }),
    )
}

/// A Response object as `steward_dialects::responses` builds it (whole,
/// stored, or the stream's final one).
fn response_object() -> Value {
    let all = [
        "id",
        "object",
        "created_at",
        "status",
        "background",
        "error",
        "incomplete_details",
        "instructions",
        "max_output_tokens",
        "model",
        "output",
        "parallel_tool_calls",
        "previous_response_id",
        "reasoning",
        "store",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_p",
        "truncation",
        "usage",
        "user",
        "metadata",
    ];
    obj(
        &all,
        json!({
            "id": {"type": "string"},
            "object": {"const": "response"},
            "created_at": count(),
            "status": {"enum": ["in_progress", "completed", "incomplete", "failed"]},
            "background": {"const": false},
            "error": {"anyOf": [{"type": "null"}, obj(&["code", "message"], json!({"code": {"type": "string"}, "message": {"type": "string"}}))]},
            "incomplete_details": {"anyOf": [{"type": "null"}, obj(&["reason"], json!({"reason": {"type": "string"}}))]},
            "instructions": nullable("string"),
            "max_output_tokens": {"type": ["integer", "null"], "minimum": 1},
            "model": {"type": "string"},
            "output": {"type": "array", "items": {"$ref": "#/components/schemas/ResponseOutputItem"}},
            "parallel_tool_calls": {"type": "boolean"},
            "previous_response_id": nullable("string"),
            "reasoning": obj(&["effort", "summary"], json!({"effort": nullable("string"), "summary": nullable("string")})),
            "store": {"type": "boolean"},
            "temperature": nullable("number"),
            "text": {"type": "object"},
            "tool_choice": {"anyOf": [{"type": "string"}, {"type": "object"}]},
            "tools": {"type": "array", "items": {"type": "object"}},
            "top_p": nullable("number"),
            "truncation": {"enum": ["disabled", "auto"]},
            "usage": {"anyOf": [{"type": "null"}, obj(
                &["input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"],
                json!({
                    "input_tokens": count(),
                    "input_tokens_details": obj(&["cached_tokens"], json!({"cached_tokens": count()})),
                    "output_tokens": count(),
                    "output_tokens_details": obj(&["reasoning_tokens"], json!({"reasoning_tokens": count()})),
                    "total_tokens": count(),
                }),
            )]},
            "user": nullable("string"),
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        }),
    )
}

/// `/debug/ledger`: the default model's memory ledger (the engine's
/// `Ledger`, bytes) at the top level, each loaded model's under `models`.
fn ledger() -> Value {
    let terms = [
        "weights",
        "kv_pool",
        "live_state",
        "reserved_growth",
        "kv_free",
        "cached_prefixes",
        "host_prefixes",
        "window_state",
        "checkpoints",
        "compute_buffers",
        "other",
        "rss",
        "device_bytes",
    ];
    let mut props = serde_json::Map::new();
    for t in terms {
        props.insert(t.into(), count());
    }
    props.insert(
        "placement".into(),
        json!({"type": "string", "enum": ["host", "device", "split"]}),
    );
    props.insert(
        "devices".into(),
        json!({"type": "array", "items": obj(&["name", "total", "free"], json!({
            "name": {"type": "string"}, "total": count(), "free": count(),
        }))}),
    );
    for t in ["budget", "mem_available", "mem_total"] {
        props.insert(t.into(), json!({"type": ["integer", "null"], "minimum": 0}));
    }
    props.insert("psi_some_avg10".into(), nullable("number"));
    let model = Value::Object(props.clone());
    props.insert("sum_of_terms".into(), count());
    props.insert(
        "models".into(),
        json!({"type": "object", "additionalProperties": {"type": "object", "properties": model}}),
    );
    props.insert(
        "registry_budget".into(),
        json!({"type": ["integer", "null"], "minimum": 0}),
    );
    props.insert(
        "response_store".into(),
        obj(
            &["bytes", "capacity_bytes", "entries"],
            json!({
                "bytes": count(), "capacity_bytes": count(), "entries": count(),
            }),
        ),
    );
    let mut required: Vec<&str> = terms.to_vec();
    required.extend([
        "placement",
        "devices",
        "sum_of_terms",
        "models",
        "registry_budget",
        "response_store",
    ]);
    obj(&required, Value::Object(props))
}

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
