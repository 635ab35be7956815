use serde_json::{json, Value};
use steward_protocol::ChatCompletionResponse;

use super::*;
use crate::{DialectError, Finish, Out, Piece, Usage};

fn translated(extra: Value) -> RTranslated {
    let mut b = json!({"model": "m", "input": "hi"});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    to_chat(&b, None).unwrap()
}

fn chat(message: Value, finish: &str) -> ChatCompletionResponse {
    serde_json::from_value(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                  "prompt_tokens_details": {"cached_tokens": 30}},
    }))
    .unwrap()
}

fn full_message() -> Value {
    json!({"role": "assistant", "content": "Checking.", "reasoning_content": "think",
           "tool_calls": [
               {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
               {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]})
}

const USAGE: Usage = Usage {
    input_tokens: 100,
    output_tokens: 20,
    cached_tokens: 30,
    pinned_tokens: 0,
    pin_ttl_s: 0,
};

#[test]
fn whole_response_object() {
    let t = translated(json!({"instructions": "rules", "metadata": {"k": "v"},
                              "tools": [{"type": "function", "name": "f"}],
                              "temperature": 0.5, "max_output_tokens": 99}));
    let r = response("resp_abc", 7, &chat(full_message(), "tool_calls"), &t);
    assert_eq!(
        r,
        json!({
            "id": "resp_abc", "object": "response", "created_at": 7, "status": "completed",
            "background": false, "error": null, "incomplete_details": null,
            "instructions": "rules", "max_output_tokens": 99, "model": "m",
            "output": [
                {"id": "rs_abc_0", "type": "reasoning", "summary": [],
                 "content": [{"type": "reasoning_text", "text": "think"}]},
                {"id": "msg_abc_1", "type": "message", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}]},
                {"id": "fc_abc_2", "type": "function_call", "status": "completed",
                 "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
                {"id": "fc_abc_3", "type": "function_call", "status": "completed",
                 "call_id": "c2", "name": "g", "arguments": "{}"}],
            "parallel_tool_calls": true, "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null}, "store": true, "temperature": 0.5,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto",
            "tools": [{"type": "function", "name": "f"}], "top_p": null, "truncation": "disabled",
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 30},
                      "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": 120},
            "user": null, "metadata": {"k": "v"},
        })
    );
}

#[test]
fn whole_response_incomplete_and_empty() {
    let t = translated(json!({}));
    let r = response(
        "resp_x",
        7,
        &chat(json!({"role": "assistant", "content": "cut"}), "length"),
        &t,
    );
    assert_eq!(r["status"], "incomplete");
    assert_eq!(
        r["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(r["output"][0]["status"], "incomplete");
    let r = response(
        "resp_x",
        7,
        &chat(json!({"role": "assistant", "content": ""}), "stop"),
        &t,
    );
    assert_eq!(r["output"], json!([]));
    assert_eq!(r["status"], "completed");
}

fn names(outs: &[Out]) -> Vec<&'static str> {
    outs.iter().map(|o| o.event).collect()
}

/// Every event's `type` is its name and its `sequence_number` follows the
/// previous one's.
fn assert_sequenced(outs: &[Out]) {
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.data["type"], json!(o.event), "{o:?}");
        assert_eq!(o.data["sequence_number"], json!(i), "event {i}: {o:?}");
    }
}

fn stream_all(t: &RTranslated, pieces: Vec<Piece>, f: Finish) -> (ResponseStream, Vec<Out>) {
    let mut s = ResponseStream::new("resp_abc", 7, "m", t);
    let mut outs = s.start();
    for p in pieces {
        outs.extend(s.piece(p));
    }
    outs.extend(s.finish(f, USAGE));
    (s, outs)
}

#[test]
fn stream_reasoning_text_two_calls_matches_whole() {
    let t = translated(json!({"metadata": {"k": "v"}}));
    let pieces = vec![
        Piece::Reasoning("th".into()),
        Piece::Reasoning("ink".into()),
        Piece::Text("Check".into()),
        Piece::Text("ing.".into()),
        Piece::CallStart {
            index: 0,
            id: "c1".into(),
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
            id: "c2".into(),
            name: "g".into(),
        },
        Piece::Args {
            index: 1,
            text: "{}".into(),
        },
    ];
    let (s, outs) = stream_all(&t, pieces, Finish::ToolCalls);
    assert_sequenced(&outs);
    assert_eq!(
        names(&outs),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let created = &outs[0].data["response"];
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["output"], json!([]));
    assert_eq!(created["usage"], Value::Null);
    assert_eq!(created["metadata"], json!({"k": "v"}));
    assert_eq!(
        outs[3].data,
        json!({"type": "response.content_part.added", "sequence_number": 3, "item_id": "rs_abc_0",
               "output_index": 0, "content_index": 0, "part": {"type": "reasoning_text", "text": ""}})
    );
    assert_eq!(
        outs[11].data,
        json!({"type": "response.output_text.delta", "sequence_number": 11, "item_id": "msg_abc_1",
               "output_index": 1, "content_index": 0, "delta": "Check", "logprobs": []})
    );
    assert_eq!(outs[13].data["text"], json!("Checking."));
    assert_eq!(
        outs[16].data["item"],
        json!({"id": "fc_abc_2", "type": "function_call", "status": "in_progress",
               "call_id": "c1", "name": "f", "arguments": ""})
    );
    assert_eq!(outs[17].data["item_id"], json!("fc_abc_2"));
    assert_eq!(outs[19].data["arguments"], json!("{\"a\":1}"));
    assert_eq!(outs[20].data["item"]["status"], json!("completed"));
    let whole = response("resp_abc", 7, &chat(full_message(), "tool_calls"), &t);
    let last = &outs.last().unwrap().data["response"];
    assert_eq!(last, &whole);
    assert_eq!(s.final_response().as_ref(), Some(&whole));
    // Each item's `.done` is the item as the final response holds it.
    for o in outs
        .iter()
        .filter(|o| o.event == "response.output_item.done")
    {
        let i = o.data["output_index"].as_u64().unwrap() as usize;
        assert_eq!(o.data["item"], whole["output"][i]);
    }
}

#[test]
fn stream_incomplete_matches_whole() {
    let t = translated(json!({"max_output_tokens": 20}));
    let pieces = vec![
        Piece::Text("calling".into()),
        Piece::CallStart {
            index: 0,
            id: "c1".into(),
            name: "f".into(),
        },
        Piece::Args {
            index: 0,
            text: "{\"a\":".into(),
        },
    ];
    let (s, outs) = stream_all(&t, pieces, Finish::Length);
    assert_sequenced(&outs);
    assert_eq!(outs.last().unwrap().event, "response.incomplete");
    let message = json!({"role": "assistant", "content": "calling", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":"}}]});
    let whole = response("resp_abc", 7, &chat(message, "length"), &t);
    assert_eq!(s.final_response(), Some(whole.clone()));
    assert_eq!(whole["status"], "incomplete");
    // Only the item cut short is incomplete.
    assert_eq!(whole["output"][0]["status"], "completed");
    assert_eq!(whole["output"][1]["status"], "incomplete");
    let done: Vec<_> = outs
        .iter()
        .filter(|o| o.event == "response.output_item.done")
        .map(|o| o.data["item"]["status"].clone())
        .collect();
    assert_eq!(done, [json!("completed"), json!("incomplete")]);
}

#[test]
fn stream_edge_cases() {
    let t = translated(json!({}));
    // No start, no pieces: created, in_progress, completed.
    let mut s = ResponseStream::new("resp_e", 1, "m", &t);
    assert_eq!(s.final_response(), None);
    let outs = s.finish(Finish::StopSequence("END".into()), Usage::default());
    assert_sequenced(&outs);
    assert_eq!(
        names(&outs),
        [
            "response.created",
            "response.in_progress",
            "response.completed"
        ]
    );
    assert_eq!(outs[2].data["response"]["output"], json!([]));
    assert!(s.finish(Finish::Stop, Usage::default()).is_empty());
    assert!(s.piece(Piece::Text("late".into())).is_empty());

    // Empty pieces and args for a call not open add nothing.
    let (_, outs) = stream_all(
        &t,
        vec![
            Piece::Text(String::new()),
            Piece::Args {
                index: 0,
                text: "{}".into(),
            },
            Piece::CallStart {
                index: 0,
                id: "c".into(),
                name: "f".into(),
            },
            Piece::Args {
                index: 3,
                text: "{}".into(),
            },
            Piece::Args {
                index: 0,
                text: String::new(),
            },
        ],
        Finish::ToolCalls,
    );
    assert_sequenced(&outs);
    assert_eq!(
        names(&outs),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(outs[3].data["arguments"], json!(""));
}

#[test]
fn stream_text_after_call_opens_a_new_message() {
    let t = translated(json!({}));
    let (s, outs) = stream_all(
        &t,
        vec![
            Piece::Text("a".into()),
            Piece::CallStart {
                index: 0,
                id: "c".into(),
                name: "f".into(),
            },
            Piece::Text("b".into()),
        ],
        Finish::Stop,
    );
    assert_sequenced(&outs);
    let out = &s.final_response().unwrap()["output"];
    assert_eq!(out.as_array().unwrap().len(), 3);
    assert_eq!(out[2]["id"], json!("msg_abc_2"));
    assert_eq!(out[2]["content"][0]["text"], json!("b"));
}

#[test]
fn stream_error_then_failed() {
    let t = translated(json!({}));
    let mut s = ResponseStream::new("resp_f", 1, "m", &t);
    let mut outs = s.start();
    outs.extend(s.piece(Piece::Text("part".into())));
    let e = DialectError {
        status: 500,
        kind: "server_error",
        message: "engine died".into(),
        param: None,
    };
    outs.extend(s.error(&e));
    assert_sequenced(&outs);
    let n = outs.len();
    assert_eq!(outs[n - 2].event, "error");
    assert_eq!(
        outs[n - 2].data,
        json!({"type": "error", "sequence_number": n - 2, "code": "server_error",
               "message": "engine died", "param": null})
    );
    let failed = &outs[n - 1].data["response"];
    assert_eq!(outs[n - 1].event, "response.failed");
    assert_eq!(failed["status"], "failed");
    assert_eq!(
        failed["error"],
        json!({"code": "server_error", "message": "engine died"})
    );
    assert_eq!(failed["output"][0]["status"], "incomplete");
    assert_eq!(failed["output"][0]["content"][0]["text"], "part");
    assert_eq!(s.final_response().as_ref(), Some(failed));
    assert!(s.error(&e).is_empty());
    assert!(s.finish(Finish::Stop, Usage::default()).is_empty());
    let e = DialectError {
        status: 429,
        kind: "rate_limit_error",
        message: "slow".into(),
        param: None,
    };
    let outs = ResponseStream::new("resp_g", 1, "m", &t).error(&e);
    assert_eq!(outs[2].data["code"], "rate_limit_exceeded");
}

#[test]
fn openai_error_body() {
    let e = DialectError::invalid("input[0].type", "`input[0].type` is required");
    assert_eq!(
        error_body(&e),
        json!({"error": {"message": "`input[0].type` is required", "type": "invalid_request_error",
                         "param": "input[0].type", "code": null}})
    );
}
