//! The schemas of the Anthropic Messages and OpenAI Responses bodies,
//! as `steward_dialects` reads and writes them.

use serde_json::{json, Value};

use super::parts::{count, nullable, obj};

/// A Messages API request, as `steward_dialects::anthropic::to_chat`
/// reads it (`null` reads as absent). The chat request it becomes is then
/// validated as any chat request (value ranges, context, limits).
pub(super) fn anthropic_request(messages_api: bool) -> Value {
    let text_block = obj(
        &["type", "text"],
        json!({"type": {"const": "text"}, "text": {"type": "string"}}),
    );
    let block = json!({
        "description": "User turns: `text`, `image` (a `base64` source; a `url` source where the server allows media URLs) and `tool_result` blocks; assistant turns: `text`, `thinking`, `redacted_thinking` and `tool_use` blocks. Documents and server-side blocks are refused (400).",
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

/// One content block of a Messages answer: text, thinking or a tool call.
fn anthropic_block() -> Value {
    json!({"anyOf": [
        obj(&["type", "text"], json!({"type": {"const": "text"}, "text": {"type": "string"}})),
        obj(&["type", "thinking", "signature"], json!({"type": {"const": "thinking"}, "thinking": {"type": "string"}, "signature": {"type": "string"}})),
        obj(&["type", "id", "name", "input"], json!({"type": {"const": "tool_use"}, "id": {"type": "string"}, "name": {"type": "string"}, "input": {"type": "object"}})),
    ]})
}

/// The whole answer as `steward_dialects::anthropic::message_from_events`
/// assembles it.
pub(super) fn anthropic_message() -> Value {
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
            "content": {"type": "array", "items": anthropic_block()},
            "stop_reason": {"enum": ["end_turn", "max_tokens", "tool_use", "stop_sequence"]},
            "stop_sequence": nullable("string"),
            "usage": {"$ref": "#/components/schemas/AnthropicUsage"},
        }),
    )
}

/// The data of one Messages stream event, as `MessageStream` writes it.
pub(super) fn anthropic_stream_event() -> Value {
    let ev = |t: &str, required: &[&str], mut props: Value| {
        props["type"] = json!({"const": t});
        let mut req = vec!["type"];
        req.extend_from_slice(required);
        obj(&req, props)
    };
    let block = anthropic_block();
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
pub(super) fn responses_request() -> Value {
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
pub(super) fn response_output_item() -> Value {
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
pub(super) fn response_stream_event() -> Value {
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
pub(super) fn response_object() -> Value {
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
