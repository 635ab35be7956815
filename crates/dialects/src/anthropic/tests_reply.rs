use serde_json::{json, Value};
use steward_protocol::ChatCompletionResponse;

use super::*;
use crate::{DialectError, Finish, Out, Piece, Usage};

// ---- whole message -----------------------------------------------------

fn chat_response(message: Value, finish: &str, cached: u32) -> ChatCompletionResponse {
    serde_json::from_value(json!({
        "id": "chatcmpl-abc123", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                  "prompt_tokens_details": {"cached_tokens": cached}},
    }))
    .unwrap()
}

#[test]
fn message_with_thinking_text_and_calls() {
    let r = chat_response(
        json!({"role": "assistant", "content": "Checking.", "reasoning_content": "think",
               "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
                   {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
                   {"id": "c3", "type": "function", "function": {"name": "h", "arguments": ""}}]}),
        "tool_calls",
        30,
    );
    assert_eq!(
        message(&r, None),
        json!({
            "id": "msg_abc123", "type": "message", "role": "assistant", "model": "m",
            "content": [
                {"type": "thinking", "thinking": "think", "signature": ""},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "c2", "name": "g", "input": {"_raw": "not json"}},
                {"type": "tool_use", "id": "c3", "name": "h", "input": {}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 70, "output_tokens": 20,
                      "cache_read_input_tokens": 30, "cache_creation_input_tokens": 0,
                      "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                         "ephemeral_1h_input_tokens": 0}},
        })
    );
}

#[test]
fn message_stop_reasons_and_empty_text() {
    let text = json!({"role": "assistant", "content": "hi"});
    let m = message(&chat_response(text.clone(), "stop", 0), None);
    assert_eq!(
        (m["stop_reason"].clone(), m["stop_sequence"].clone()),
        (json!("end_turn"), Value::Null)
    );
    let m = message(&chat_response(text.clone(), "stop", 0), Some("END"));
    assert_eq!(
        (m["stop_reason"].clone(), m["stop_sequence"].clone()),
        (json!("stop_sequence"), json!("END"))
    );
    let m = message(&chat_response(text, "length", 0), Some("END"));
    assert_eq!(
        (m["stop_reason"].clone(), m["stop_sequence"].clone()),
        (json!("max_tokens"), Value::Null)
    );
    let m = message(
        &chat_response(json!({"role": "assistant", "content": ""}), "stop", 0),
        None,
    );
    assert_eq!(m["content"], json!([]));
    let m = message(
        &chat_response(json!({"role": "assistant", "content": null}), "stop", 0),
        None,
    );
    assert_eq!(m["content"], json!([]));
    assert_eq!(m["usage"]["input_tokens"], json!(100));
    assert_eq!(message_id("xyz"), "msg_xyz");
    assert_eq!(message_id("msg_1"), "msg_1");
}

// ---- stream --------------------------------------------------------------

/// `event` and, for block events, the index and the block or delta type.
fn summary(outs: &[Out]) -> Vec<String> {
    outs.iter()
        .map(|o| {
            assert_eq!(o.data["type"], json!(o.event), "{o:?}");
            match o.event {
                "content_block_start" => format!(
                    "start {} {}",
                    o.data["index"],
                    o.data["content_block"]["type"].as_str().unwrap()
                ),
                "content_block_delta" => format!(
                    "delta {} {}",
                    o.data["index"],
                    o.data["delta"]["type"].as_str().unwrap()
                ),
                "content_block_stop" => format!("stop {}", o.data["index"]),
                e => e.to_string(),
            }
        })
        .collect()
}

#[test]
fn stream_event_order_reasoning_text_two_calls() {
    let mut s = MessageStream::new("msg_1", "m", 100);
    let mut outs = s.start();
    assert!(s.start().is_empty(), "start twice");
    for p in [
        Piece::Reasoning("Let me ".into()),
        Piece::Reasoning("think.".into()),
        Piece::Text("Calling.".into()),
        Piece::CallStart {
            index: 0,
            id: "c0".into(),
            name: "f".into(),
        },
        Piece::Args {
            index: 0,
            text: "{\"a\":".into(),
        },
        Piece::Args {
            index: 0,
            text: "1}".into(),
        },
        Piece::CallStart {
            index: 1,
            id: "c1".into(),
            name: "g".into(),
        },
        Piece::Args {
            index: 1,
            text: "{}".into(),
        },
    ] {
        outs.extend(s.piece(p));
    }
    outs.extend(s.finish(
        Finish::ToolCalls,
        Usage {
            input_tokens: 100,
            output_tokens: 9,
            cached_tokens: 40,
            pinned_tokens: 0,
            pin_ttl_s: 0,
        },
    ));
    assert_eq!(
        summary(&outs),
        [
            "message_start",
            "ping",
            "start 0 thinking",
            "delta 0 thinking_delta",
            "delta 0 thinking_delta",
            "delta 0 signature_delta",
            "stop 0",
            "start 1 text",
            "delta 1 text_delta",
            "stop 1",
            "start 2 tool_use",
            "delta 2 input_json_delta",
            "delta 2 input_json_delta",
            "stop 2",
            "start 3 tool_use",
            "delta 3 input_json_delta",
            "stop 3",
            "message_delta",
            "message_stop",
        ]
    );
    assert_eq!(
        outs[0].data["message"],
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
               "content": [], "stop_reason": null, "stop_sequence": null,
               "usage": {"input_tokens": 100, "output_tokens": 0}})
    );
    assert_eq!(
        outs[3].data["delta"],
        json!({"type": "thinking_delta", "thinking": "Let me "})
    );
    assert_eq!(
        outs[8].data["delta"],
        json!({"type": "text_delta", "text": "Calling."})
    );
    assert_eq!(
        outs[10].data["content_block"],
        json!({"type": "tool_use", "id": "c0", "name": "f", "input": {}})
    );
    assert_eq!(
        outs[12].data["delta"],
        json!({"type": "input_json_delta", "partial_json": "1}"})
    );
    assert_eq!(
        outs[17].data,
        json!({"type": "message_delta",
               "delta": {"stop_reason": "tool_use", "stop_sequence": null},
               "usage": {"input_tokens": 60, "output_tokens": 9,
                         "cache_read_input_tokens": 40, "cache_creation_input_tokens": 0,
                         "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                            "ephemeral_1h_input_tokens": 0}}})
    );
    assert!(s.piece(Piece::Text("late".into())).is_empty());
    assert!(s.finish(Finish::Stop, Usage::default()).is_empty());
}

#[test]
fn stream_edge_cases() {
    // No start call, no pieces: the skeleton is still sent.
    let mut s = MessageStream::new("msg_2", "m", 5);
    let outs = s.finish(Finish::StopSequence("END".into()), Usage::default());
    assert_eq!(
        summary(&outs),
        ["message_start", "ping", "message_delta", "message_stop"]
    );
    assert_eq!(
        outs[2].data["delta"],
        json!({"stop_reason": "stop_sequence", "stop_sequence": "END"})
    );

    // Empty text opens nothing; text after text stays in one block; args
    // for a call that is not open are dropped.
    let mut s = MessageStream::new("msg_3", "m", 5);
    let mut outs = s.start();
    outs.extend(s.piece(Piece::Text(String::new())));
    outs.extend(s.piece(Piece::Args {
        index: 0,
        text: "{}".into(),
    }));
    outs.extend(s.piece(Piece::Text("a".into())));
    outs.extend(s.piece(Piece::Text("b".into())));
    outs.extend(s.piece(Piece::CallStart {
        index: 0,
        id: "c".into(),
        name: "f".into(),
    }));
    outs.extend(s.piece(Piece::Args {
        index: 1,
        text: "{}".into(),
    }));
    outs.extend(s.finish(Finish::Length, Usage::default()));
    assert_eq!(
        summary(&outs),
        [
            "message_start",
            "ping",
            "start 0 text",
            "delta 0 text_delta",
            "delta 0 text_delta",
            "stop 0",
            "start 1 tool_use",
            "stop 1",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(outs[8].data["delta"]["stop_reason"], json!("max_tokens"));
}

#[test]
fn stream_error_ends_it() {
    let mut s = MessageStream::new("msg_4", "m", 5);
    s.start();
    s.piece(Piece::Text("partial".into()));
    let e = DialectError {
        status: 529,
        kind: "overloaded_error",
        message: "busy".into(),
        param: None,
    };
    let outs = s.error(&e);
    assert_eq!(outs.len(), 1);
    assert_eq!(outs[0].event, "error");
    assert_eq!(
        outs[0].data,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    );
    assert!(outs[0]
        .to_sse()
        .starts_with("event: error\ndata: {\"type\":\"error\""));
    assert!(s.finish(Finish::Stop, Usage::default()).is_empty());
    assert!(s.error(&e).is_empty());
}

#[test]
fn error_shapes() {
    let kinds = [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "overloaded_error"),
        (529, "overloaded_error"),
        (418, "api_error"),
        (502, "api_error"),
    ];
    for (status, kind) in kinds {
        assert_eq!(error_kind_for_status(status), kind, "{status}");
    }
    let e = DialectError::invalid("max_tokens", "`max_tokens` is required");
    assert_eq!(
        error_body(&e),
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "`max_tokens` is required"}})
    );
    let oai = json!({"error": {"message": "Incorrect API key", "type": "authentication_error",
                               "param": null, "code": "invalid_api_key"}});
    assert_eq!(
        from_openai_error(401, &oai),
        json!({"type": "error", "error": {"type": "authentication_error", "message": "Incorrect API key"}})
    );
    let oai = json!({"error": {"message": "too many", "type": "server_busy", "param": null, "code": "x"}});
    assert_eq!(
        from_openai_error(503, &oai)["error"]["type"],
        json!("overloaded_error")
    );
    assert_eq!(
        from_openai_error(404, &Value::Null),
        json!({"type": "error", "error": {"type": "not_found_error",
                                          "message": "request failed with HTTP status 404"}})
    );
    let already =
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "m"}});
    assert_eq!(from_openai_error(400, &already), already);
}

#[test]
fn the_whole_message_from_stream_events_keeps_block_order_and_inputs() {
    let mut s = MessageStream::new("msg_1", "m", 10);
    let mut outs = s.start();
    outs.extend(s.piece(Piece::Reasoning("think".into())));
    outs.extend(s.piece(Piece::CallStart {
        index: 0,
        id: "call_a".into(),
        name: "f".into(),
    }));
    outs.extend(s.piece(Piece::Args {
        index: 0,
        text: "{\"x\":".into(),
    }));
    outs.extend(s.piece(Piece::Args {
        index: 0,
        text: " 1}".into(),
    }));
    outs.extend(s.piece(Piece::Text("after".into())));
    outs.extend(s.piece(Piece::Text(" it".into())));
    outs.extend(s.finish(
        Finish::ToolCalls,
        Usage {
            input_tokens: 10,
            output_tokens: 7,
            cached_tokens: 4,
            pinned_tokens: 0,
            pin_ttl_s: 0,
        },
    ));
    let m = message_from_events(&outs);
    assert_eq!(
        m["content"],
        serde_json::json!([
            {"type": "thinking", "thinking": "think", "signature": ""},
            {"type": "tool_use", "id": "call_a", "name": "f", "input": {"x": 1}},
            {"type": "text", "text": "after it"},
        ])
    );
    assert_eq!(m["stop_reason"], "tool_use");
    assert_eq!(m["usage"]["input_tokens"], 6);
    assert_eq!(m["usage"]["cache_read_input_tokens"], 4);
    assert_eq!(m["id"], "msg_1");
}
