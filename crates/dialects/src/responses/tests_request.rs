use serde_json::{json, Value};

use super::*;
use crate::DialectError;

fn ok(v: Value) -> RTranslated {
    to_chat(&v, None).unwrap_or_else(|e| panic!("{v}: {e}"))
}

fn err(v: Value) -> DialectError {
    match to_chat(&v, None) {
        Ok(t) => panic!("expected an error for {v}, got {}", t.chat),
        Err(e) => e,
    }
}

fn req(extra: Value) -> Value {
    let mut b = json!({"model": "m", "input": "hi"});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn assert_400(e: &DialectError, param: &str) {
    assert_eq!(e.status, 400, "{e}");
    assert_eq!(e.kind, "invalid_request_error");
    assert_eq!(e.param.as_deref(), Some(param), "{e}");
    assert!(
        e.message.contains(param),
        "message `{}` names `{param}`",
        e.message
    );
}

/// The chat messages without their IDs' noise: role and content (and
/// calls, reasoning, call IDs where present).
fn messages(t: &RTranslated) -> Vec<Value> {
    t.chat["messages"].as_array().unwrap().clone()
}

#[test]
fn string_input_and_defaults() {
    let t = ok(req(json!({})));
    assert_eq!(
        t.chat,
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
               "add_generation_prompt": true})
    );
    assert!(!t.stream);
    assert!(t.store);
    assert_eq!(t.previous_response_id, None);
    assert_eq!(t.input_items.len(), 1);
    let item = &t.input_items[0];
    assert!(item["id"].as_str().unwrap().starts_with("msg_"), "{item}");
    assert_eq!(item["type"], "message");
    assert_eq!(
        item["content"],
        json!([{"type": "input_text", "text": "hi"}])
    );
    // IDs are deterministic.
    assert_eq!(ok(req(json!({}))).input_items, t.input_items);
    let e = &t.echo;
    assert_eq!(e.instructions, Value::Null);
    assert_eq!(e.tools, json!([]));
    assert_eq!(e.tool_choice, json!("auto"));
    assert_eq!(e.text, json!({"format": {"type": "text"}}));
    assert_eq!(e.reasoning, json!({"effort": null, "summary": null}));
    assert_eq!(e.metadata, json!({}));
    assert_eq!(e.parallel_tool_calls, json!(true));
    assert_eq!(e.truncation, json!("disabled"));
    assert!(e.store);
}

#[test]
fn input_is_required_and_typed() {
    let mut b = req(json!({}));
    b.as_object_mut().unwrap().remove("input");
    assert_400(&err(b.clone()), "input");
    b["instructions"] = json!("sys");
    assert_400(&err(b), "input");
    assert_400(&err(req(json!({"input": []}))), "input");
    assert_400(&err(req(json!({"input": 5}))), "input");
    assert_400(&err(req(json!({"input": [7]}))), "input[0]");
    assert_400(
        &err(req(json!({"input": [{"content": "x"}]}))),
        "input[0].type",
    );
    let e = err(req(json!({"input": [{"role": "tool", "content": "x"}]})));
    assert_400(&e, "input[0].role");
    assert_400(
        &err(req(json!({"input": [{"role": "user"}]}))),
        "input[0].content",
    );
    assert_400(
        &err(req(json!({"input": [{"role": "user", "content": 1}]}))),
        "input[0].content",
    );
}

#[test]
fn message_items_roles_and_parts() {
    let t = ok(req(json!({"instructions": "Be terse.", "input": [
        {"role": "developer", "content": "dev rules"},
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "sys"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "message", "role": "assistant", "id": "msg_x", "status": "completed",
         "content": [{"type": "output_text", "text": "answer", "annotations": []}]},
        {"role": "user", "content": "again"}]})));
    assert_eq!(
        messages(&t),
        vec![
            json!({"role": "system", "content": "Be terse."}),
            json!({"role": "system", "content": "dev rules"}),
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "a\n\nb"}),
            json!({"role": "assistant", "content": "answer"}),
            json!({"role": "user", "content": "again"}),
        ]
    );
    assert_eq!(t.echo.instructions, json!("Be terse."));
    assert_eq!(t.input_items[3]["id"], json!("msg_x"));
    assert_eq!(t.input_items[3]["status"], json!("completed"));
    // A string `content` is normalized to parts of the role's text type.
    assert_eq!(
        t.input_items[0]["content"],
        json!([{"type": "input_text", "text": "dev rules"}])
    );
    let t = ok(req(
        json!({"input": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]}),
    ));
    assert_eq!(
        t.input_items[0]["content"],
        json!([{"type": "output_text", "text": "x"}])
    );
    // Distinct positions give distinct IDs even for equal content.
    let t = ok(req(
        json!({"input": [{"role": "user", "content": "y"}, {"role": "user", "content": "y"}]}),
    ));
    assert_ne!(t.input_items[0]["id"], t.input_items[1]["id"]);
}

#[test]
fn unsupported_parts_and_items() {
    for kind in ["input_file", "input_audio"] {
        let e = err(req(json!({"input": [{"role": "user", "content": [
            {"type": "input_text", "text": "look"}, {"type": kind, "image_url": "x"}]}]})));
        assert_400(&e, "input[0].content[1]");
        assert!(
            e.message.contains(kind) && e.message.contains("not supported"),
            "{}",
            e.message
        );
    }
    assert_400(
        &err(req(
            json!({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
        )),
        "input[0].content[0].text",
    );
    for kind in ["web_search_call", "item_reference", "computer_call"] {
        let e = err(req(
            json!({"input": [{"role": "user", "content": "q"}, {"type": kind, "id": "x"}]}),
        ));
        assert_400(&e, "input[1].type");
        assert!(e.message.contains(kind));
    }
}

#[test]
fn function_calls_merge_and_attach() {
    let t = ok(req(json!({"input": [
        {"role": "user", "content": "weather in Paris and Rome?"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "sum"}],
         "content": [{"type": "reasoning_text", "text": "two calls"}]},
        {"type": "message", "role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{\"city\":\"Rome\"}", "id": "fc_2"},
        {"type": "function_call_output", "call_id": "c1", "output": "20C"},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "25C"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "only summary"}]},
        {"type": "function_call", "call_id": "c3", "name": "w", "arguments": "{}"}]})));
    let call = |id: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": "w", "arguments": args}});
    assert_eq!(
        messages(&t),
        vec![
            json!({"role": "user", "content": "weather in Paris and Rome?"}),
            json!({"role": "assistant", "content": "Checking.", "reasoning_content": "two calls",
                   "tool_calls": [call("c1", "{\"city\":\"Paris\"}"), call("c2", "{\"city\":\"Rome\"}")]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "20C"}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "25C"}),
            json!({"role": "assistant", "content": null, "tool_calls": [call("c3", "{}")],
                   "reasoning_content": "only summary"}),
        ]
    );
    assert_eq!(t.input_items[4]["id"], json!("fc_2"));
    assert!(t.input_items[3]["id"].as_str().unwrap().starts_with("fc_"));
    assert!(t.input_items[5]["id"].as_str().unwrap().starts_with("fco_"));
    assert!(t.input_items[7]["id"].as_str().unwrap().starts_with("rs_"));
    assert_eq!(
        t.input_items[7]["summary"],
        json!([{"type": "summary_text", "text": "only summary"}])
    );
}

#[test]
fn function_call_without_a_preceding_assistant_and_reasoning_dropped_at_user() {
    let t = ok(req(json!({"input": [
        {"type": "reasoning", "summary": [{"text": "lost"}]},
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"}]})));
    let m = messages(&t);
    assert_eq!(m.len(), 2);
    assert_eq!(m[0], json!({"role": "user", "content": "q"}));
    assert_eq!(m[1]["tool_calls"].as_array().unwrap().len(), 2);
    assert!(m[1].get("reasoning_content").is_none());
}

#[test]
fn item_field_errors() {
    let cases = [
        (
            json!({"type": "function_call", "name": "f", "arguments": "{}"}),
            "input[0].call_id",
        ),
        (
            json!({"type": "function_call", "call_id": "c", "arguments": "{}"}),
            "input[0].name",
        ),
        (
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}),
            "input[0].arguments",
        ),
        (
            json!({"type": "function_call_output", "output": "x"}),
            "input[0].call_id",
        ),
        (
            json!({"type": "function_call_output", "call_id": "c"}),
            "input[0].output",
        ),
        (
            json!({"type": "function_call_output", "call_id": "c", "output": 3}),
            "input[0].output",
        ),
        (
            json!({"type": "function_call_output", "call_id": "c",
                "output": [{"type": "input_image", "image_url": "u"}]}),
            "input[0].output[0]",
        ),
        (
            json!({"type": "reasoning", "summary": [{"type": "summary_text"}]}),
            "input[0].summary[0].text",
        ),
        (
            json!({"type": "reasoning", "summary": "x"}),
            "input[0].summary",
        ),
    ];
    for (item, param) in cases {
        assert_400(&err(req(json!({"input": [item]}))), param);
    }
}

#[test]
fn sampling_stream_store_user() {
    let t = ok(req(
        json!({"max_output_tokens": 50, "temperature": 0.2, "top_p": 0.8,
                          "stream": true, "store": false, "user": "u1",
                          "truncation": "auto", "include": ["reasoning.encrypted_content"],
                          "safety_identifier": "s", "service_tier": "auto",
                          "priority": "high"}),
    ));
    // vLLM's `priority` passes through as given (checked on the chat path).
    assert_eq!(t.chat["priority"], json!("high"));
    assert_eq!(t.chat["max_tokens"], json!(50));
    assert_eq!(t.chat["temperature"], json!(0.2));
    assert_eq!(t.chat["top_p"], json!(0.8));
    assert_eq!(t.chat["stream"], json!(true));
    assert_eq!(t.chat["stream_options"], json!({"include_usage": true}));
    assert_eq!(t.chat["user"], json!("u1"));
    assert!(t.stream && !t.store && !t.echo.store);
    assert_eq!(t.echo.max_output_tokens, json!(50));
    assert_eq!(t.echo.temperature, json!(0.2));
    assert_eq!(t.echo.top_p, json!(0.8));
    assert_eq!(t.echo.user, json!("u1"));
    assert_eq!(t.echo.truncation, json!("auto"));
    for (field, bad) in [
        ("max_output_tokens", json!(0)),
        ("max_output_tokens", json!("5")),
        ("temperature", json!("x")),
        ("top_p", json!(true)),
        ("stream", json!(1)),
        ("store", json!("no")),
        ("user", json!(1)),
        ("truncation", json!("middle")),
        ("include", json!("x")),
        ("instructions", json!(["x"])),
        ("model", json!(1)),
        ("previous_response_id", json!(5)),
    ] {
        assert_400(&err(req(json!({field: bad}))), field);
    }
    assert_400(
        &err(req(json!({"include": ["reasoning.encrypted_content", 2]}))),
        "include[1]",
    );
    for field in ["background", "conversation", "prompt"] {
        assert_400(&err(req(json!({field: {"id": "x"}}))), field);
    }
    ok(req(json!({"background": false})));
}

/// docs/LIMITS.md lists every field of the table with what is done with
/// it, and no other.
#[test]
fn the_limits_table_matches() {
    assert_eq!(
        crate::fields::doc_rows("responses"),
        crate::fields::table_rows(super::request::FIELDS)
    );
}

/// Every field a request may carry is in the table: one that would change
/// the answer and is not implemented is refused naming it, one that
/// changes nothing is taken, an unknown one is refused.
#[test]
fn fields_refused_ignored_or_unknown() {
    ok(req(json!({
        "service_tier": "flex", "safety_identifier": "s", "prompt_cache_key": "k",
        "prompt_cache_retention": "24h", "prompt_cache_options": {"mode": "implicit"},
        "stream_options": {"include_obfuscation": false}, "max_tool_calls": 3,
        "access_programs": {"cyber": "standard"}, "background_options": {"completion_window": "2h"},
        "context_management": [], "image": {"context_compression": "disabled"}, "top_logprobs": 0,
        "include": ["reasoning.encrypted_content", "message.input_image.image_url",
                    "web_search_call.action.sources"],
        "moderation": null, "frobnicate": null,
    })));
    for (field, value) in [
        ("background", json!(true)),
        ("conversation", json!("conv_1")),
        ("prompt", json!({"id": "pmpt_1"})),
        ("context_management", json!([{"type": "compaction"}])),
        ("moderation", json!({"model": "omni-moderation-latest"})),
        ("image", json!({"context_compression": "enabled"})),
        ("top_logprobs", json!(5)),
    ] {
        let e = err(req(json!({ field: value })));
        assert_400(&e, field);
        assert!(e.message.contains("not supported"), "{e}");
    }
    let e = err(req(json!({"include": ["message.output_text.logprobs"]})));
    assert_400(&e, "include[0]");
    assert!(e.message.contains("logprobs"), "{e}");
    assert_400(&err(req(json!({"include": ["everything"]}))), "include[0]");
    for field in ["frobnicate", "seed", "n", "logprobs", "verbosity"] {
        let e = err(req(json!({ field: 1 })));
        assert_400(&e, field);
        assert!(e.message.contains("unknown field"), "{e}");
    }
}

#[test]
fn tools_and_tool_choice() {
    let tools = json!([{"type": "function", "name": "w", "description": "Weather",
                        "parameters": {"type": "object"}, "strict": true},
                       {"type": "function", "name": "n"}]);
    let t = ok(req(
        json!({"tools": tools, "tool_choice": {"type": "function", "name": "w"},
                          "parallel_tool_calls": false}),
    ));
    assert_eq!(
        t.chat["tools"],
        json!([{"type": "function", "function": {"name": "w", "description": "Weather",
                "parameters": {"type": "object"}, "strict": true}},
               {"type": "function", "function": {"name": "n",
                "parameters": {"type": "object", "properties": {}}}}])
    );
    assert_eq!(
        t.chat["tool_choice"],
        json!({"type": "function", "function": {"name": "w"}})
    );
    assert_eq!(t.chat["parallel_tool_calls"], json!(false));
    assert_eq!(t.echo.tools, tools);
    assert_eq!(t.echo.tool_choice, json!({"type": "function", "name": "w"}));
    assert_eq!(t.echo.parallel_tool_calls, json!(false));
    for c in ["auto", "none", "required"] {
        assert_eq!(
            ok(req(json!({"tool_choice": c}))).chat["tool_choice"],
            json!(c)
        );
    }
    let e = err(req(
        json!({"tools": [tools[0].clone(), {"type": "web_search_preview"}]}),
    ));
    assert_400(&e, "tools[1].type");
    assert!(e.message.contains("web_search_preview"));
    assert_400(
        &err(req(json!({"tools": [{"type": "file_search"}]}))),
        "tools[0].type",
    );
    assert_400(
        &err(req(json!({"tools": [{"name": "x"}]}))),
        "tools[0].type",
    );
    assert_400(
        &err(req(json!({"tools": [{"type": "function"}]}))),
        "tools[0].name",
    );
    assert_400(
        &err(req(
            json!({"tools": [{"type": "function", "name": "x", "parameters": []}]}),
        )),
        "tools[0].parameters",
    );
    assert_400(
        &err(req(json!({"tool_choice": "sometimes"}))),
        "tool_choice",
    );
    assert_400(&err(req(json!({"tool_choice": 3}))), "tool_choice");
    assert_400(
        &err(req(json!({"tool_choice": {"type": "function"}}))),
        "tool_choice.name",
    );
    assert_400(
        &err(req(
            json!({"tool_choice": {"type": "allowed_tools", "tools": []}}),
        )),
        "tool_choice.type",
    );
    assert_400(
        &err(req(json!({"parallel_tool_calls": "no"}))),
        "parallel_tool_calls",
    );
}

#[test]
fn text_format_and_reasoning() {
    let t = ok(req(json!({"text": {"format": {"type": "text"}}})));
    assert!(t.chat.get("response_format").is_none());
    let t = ok(req(json!({"text": {"format": {"type": "json_object"}}})));
    assert_eq!(t.chat["response_format"], json!({"type": "json_object"}));
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let text = json!({"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": true},
                      "verbosity": "low"});
    let t = ok(req(json!({"text": text})));
    assert_eq!(
        t.chat["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": true}})
    );
    assert_eq!(t.echo.text, text);
    let t = ok(req(
        json!({"text": {"format": {"type": "json_schema", "schema": schema}}}),
    ));
    assert_eq!(
        t.chat["response_format"]["json_schema"]["name"],
        json!("response")
    );
    assert_400(
        &err(req(json!({"text": {"format": {"type": "json_schema"}}}))),
        "text.format.schema",
    );
    assert_400(
        &err(req(json!({"text": {"format": {"type": "yaml"}}}))),
        "text.format.type",
    );
    assert_400(&err(req(json!({"text": "json"}))), "text");

    let t = ok(req(
        json!({"reasoning": {"effort": "low", "summary": "auto"}}),
    ));
    assert_eq!(t.chat["reasoning_effort"], json!("low"));
    assert_eq!(
        t.echo.reasoning,
        json!({"effort": "low", "summary": "auto"})
    );
    let t = ok(req(json!({"reasoning": {"effort": "none"}})));
    assert_eq!(
        t.chat["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
    assert!(t.chat.get("reasoning_effort").is_none());
    assert_eq!(
        ok(req(json!({"reasoning": {"effort": "xhigh"}}))).chat["reasoning_effort"],
        json!("high")
    );
    assert_400(
        &err(req(json!({"reasoning": {"effort": "max"}}))),
        "reasoning.effort",
    );
    assert_400(&err(req(json!({"reasoning": "high"}))), "reasoning");
}

#[test]
fn metadata_bounds() {
    let t = ok(req(json!({"metadata": {"a": "1", "b": "2"}})));
    assert_eq!(t.echo.metadata, json!({"a": "1", "b": "2"}));
    let sixteen: serde_json::Map<String, Value> =
        (0..16).map(|i| (format!("k{i}"), json!("v"))).collect();
    ok(req(json!({"metadata": sixteen})));
    let seventeen: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let e = err(req(json!({"metadata": seventeen})));
    assert_400(&e, "metadata");
    assert!(e.message.contains("16"));
    ok(req(json!({"metadata": {"k".repeat(64): "v".repeat(512)}})));
    assert_400(
        &err(req(json!({"metadata": {"k".repeat(65): "v"}}))),
        "metadata",
    );
    let e = err(req(json!({"metadata": {"key": "v".repeat(513)}})));
    assert_400(&e, "metadata.key");
    assert_400(&err(req(json!({"metadata": {"key": 1}}))), "metadata.key");
    assert_400(&err(req(json!({"metadata": ["x"]}))), "metadata");
}

#[test]
fn previous_response_comes_first_without_its_instructions() {
    let first = ok(req(json!({"instructions": "old rules", "input": "one"})));
    let prev = Stored {
        response: json!({"id": "resp_1", "output": [
            {"id": "msg_1_0", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "uno", "annotations": [], "logprobs": []}]}]}),
        conversation: vec![
            first.input_items[0].clone(),
            json!({"id": "msg_1_0", "type": "message", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": "uno", "annotations": [], "logprobs": []}]}),
        ],
    };
    let t = to_chat(
        &req(json!({"previous_response_id": "resp_1", "input": "two",
                                "instructions": "new rules"})),
        Some(&prev),
    )
    .unwrap();
    assert_eq!(
        messages(&t),
        vec![
            json!({"role": "system", "content": "new rules"}),
            json!({"role": "user", "content": "one"}),
            json!({"role": "assistant", "content": "uno"}),
            json!({"role": "user", "content": "two"}),
        ]
    );
    assert_eq!(t.previous_response_id.as_deref(), Some("resp_1"));
    assert_eq!(t.input_items.len(), 1, "only this request's input");
    // Same text, another place in the conversation: another ID.
    assert_ne!(
        t.input_items[0]["id"],
        ok(req(json!({"input": "two"}))).input_items[0]["id"]
    );
    // Continuing with no new input is allowed: a new turn, not a prefill.
    let t = to_chat(&json!({"previous_response_id": "resp_1"}), Some(&prev)).unwrap();
    assert_eq!(messages(&t).len(), 2);
    assert_eq!(t.chat["add_generation_prompt"], json!(true));
    // An ID given without its stored response: not found.
    let e = err(req(json!({"previous_response_id": "resp_gone"})));
    assert_eq!(e.status, 404);
    assert_eq!(e.param.as_deref(), Some("previous_response_id"));
    assert!(e.message.contains("resp_gone"));
}

#[test]
fn input_images_become_image_url_parts() {
    let t = ok(req(json!({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
        {"type": "input_text", "text": "and"}, {"type": "input_text", "text": "this"}]}]})));
    assert_eq!(
        t.chat["messages"][0]["content"],
        json!([{"type": "text", "text": "look"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
               {"type": "text", "text": "and\n\nthis"}])
    );
    // Text alone stays a string.
    let t = ok(req(json!({"input": "hi"})));
    assert_eq!(t.chat["messages"][0]["content"], json!("hi"));
    for (item, param) in [
        (
            json!({"role": "user", "content": [{"type": "input_image"}]}),
            "input[0].content[0].image_url",
        ),
        (
            json!({"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}),
            "input[0].content[0].file_id",
        ),
        (
            json!({"role": "assistant", "content": [{"type": "input_image", "image_url": "u"}]}),
            "input[0].content[0]",
        ),
    ] {
        assert_400(&err(req(json!({"input": [item]}))), param);
    }
}

/// `prompt_cache_key` and `prompt_cache_retention` ask for a pin of the
/// prompt: passed on to the chat body as they are (checked there).
#[test]
fn prompt_cache_fields_pass_on() {
    let t = ok(req(
        json!({"prompt_cache_key": "k", "prompt_cache_retention": "24h"}),
    ));
    assert_eq!(t.chat["prompt_cache_key"], "k");
    assert_eq!(t.chat["prompt_cache_retention"], "24h");
    let t = ok(req(json!({"prompt_cache_options": {"mode": "implicit"}})));
    assert!(t.chat.get("prompt_cache_key").is_none());
    assert!(t.chat.get("prompt_cache_options").is_none());
}
