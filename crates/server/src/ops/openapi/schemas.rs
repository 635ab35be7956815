//! The hand-described schemas of `/openapi.json`: the types utoipa
//! registers as placeholders where an operation names them, and the
//! JSON Schema `document` puts in their place (the Anthropic and
//! Responses dialects' in `dialects`).

use serde_json::{json, Value};
use utoipa::openapi::{self, RefOr};

mod batch;
mod dialects;
mod parts;

use dialects::{
    anthropic_message, anthropic_request, anthropic_stream_event, response_object,
    response_output_item, response_stream_event, responses_request,
};
use parts::{count, nullable, obj};

/// Types whose schema is written by hand (`hand_schemas`): utoipa
/// registers a placeholder under the name wherever an operation names the
/// type, and `document` puts the real schema there.
macro_rules! hand_types {
    ($($name:ident),* $(,)?) => {
        $(
            pub(super) struct $name;
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
    FileUpload,
    FileObject,
    FileList,
    FileDeleted,
    FileContent,
    BatchCreateRequest,
    Batch,
    BatchList,
);

/// Every hand-described schema, from the code that reads or writes it.
// check-layout: table (one entry per schema)
pub(super) fn hand_schemas() -> Vec<(&'static str, Value)> {
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
            "prompt_token_ids": {"type": "array", "items": {"type": "integer", "description": "A token ID; negative: a media row's placeholder"}},
            "num_tokens": count(),
            "image_tokens": count(),
            "audio_tokens": count(),
            "starts_in_reasoning": {"type": "boolean"},
        }))),
        ("ApplyTemplateResponse", obj(&["prompt"], json!({"prompt": {"type": "string"}}))),
        ("TokenizeRequest", json!({
            "type": "object",
            "anyOf": [{"required": ["content"]}, {"required": ["messages"]}],
            "properties": {
                "model": {"type": ["string", "null"]},
                "content": {"type": "string"},
                "messages": {"type": "array", "description": "A chat (vLLM's form), through the template; media parts count as the rows they take", "items": {"type": "object"}},
                "add_special": {"type": ["boolean", "null"], "default": false},
                "parse_special": {"type": ["boolean", "null"], "default": true},
                "with_pieces": {"type": ["boolean", "null"], "default": false},
            },
        })),
        ("TokenizeResponse", obj(&["tokens"], json!({
            "count": count(),
            "image_tokens": count(),
            "audio_tokens": count(),
            "tokens": {"anyOf": [
            {"type": "array", "items": {"type": "integer", "description": "A token ID; negative: a media row's placeholder (`messages` with media)"}},
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
    .into_iter()
    .chain(batch::schemas())
    .collect()
}

/// `/debug/ledger`: the default model's memory ledger (the engine's
/// `MemoryLedger`, bytes) at the top level, each loaded model's under `models`.
fn ledger() -> Value {
    let terms = [
        "weights",
        "kv_pool",
        "live_state",
        "reserved_growth",
        "kv_free",
        "cached_prefixes",
        "host_prefixes",
        "preempted",
        "window_state",
        "checkpoints",
        "pinned_prefixes",
        "disk_queued",
        "disk_prefixes",
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
