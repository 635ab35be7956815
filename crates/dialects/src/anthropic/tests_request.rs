use serde_json::{json, Value};

use super::*;
use crate::DialectError;

fn ok(v: Value) -> Translated {
    to_chat(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
}

fn err(v: Value) -> DialectError {
    match to_chat(&v) {
        Ok(t) => panic!("expected an error for {v}, got {}", t.chat),
        Err(e) => e,
    }
}

/// A request with one user message and `extra` fields on top.
fn req(extra: Value) -> Value {
    let mut b = json!({"model": "m", "max_tokens": 64,
                       "messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// A 400 naming `param` in its param and its message.
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

#[test]
fn minimal_request() {
    let t = ok(req(json!({})));
    assert_eq!(
        t.chat,
        json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
    );
    assert!(!t.stream);
    assert_eq!(t.model, "m");
    assert_eq!(t.max_tokens, 64);
    assert_eq!(t.thinking, None);
    assert!(t.stop_sequences.is_empty());
}

#[test]
fn model_may_be_absent_but_not_mistyped() {
    let mut b = req(json!({}));
    b.as_object_mut().unwrap().remove("model");
    let t = ok(b);
    assert_eq!(t.model, "");
    assert!(t.chat.get("model").is_none());
    assert_400(&err(req(json!({"model": 3}))), "model");
}

#[test]
fn max_tokens_is_required_and_positive() {
    let mut b = req(json!({}));
    b.as_object_mut().unwrap().remove("max_tokens");
    assert_400(&err(b), "max_tokens");
    for bad in [json!(0), json!(-5), json!(1.5), json!("10"), json!(true)] {
        assert_400(&err(req(json!({"max_tokens": bad}))), "max_tokens");
    }
}

#[test]
fn body_must_be_an_object() {
    let e = err(json!([1, 2]));
    assert_eq!(e.status, 400);
    assert!(e.message.contains("JSON object"), "{}", e.message);
}

#[test]
fn system_string_and_blocks() {
    let t = ok(req(json!({"system": "be brief"})));
    assert_eq!(
        t.chat["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    let t = ok(req(json!({"system": [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "b"}]})));
    assert_eq!(
        t.chat["messages"][0],
        json!({"role": "system", "content": "a\n\nb"})
    );
    assert_eq!(t.chat["messages"].as_array().unwrap().len(), 2);
    // An empty system prompt adds no message.
    let t = ok(req(json!({"system": ""})));
    assert_eq!(t.chat["messages"][0]["role"], "user");
    assert_400(&err(req(json!({"system": 5}))), "system");
    let e = err(req(json!({"system": [{"type": "image", "source": {}}]})));
    assert_400(&e, "system[0]");
    assert!(e.message.contains("image"));
    assert_400(
        &err(req(json!({"system": [{"type": "text"}]}))),
        "system[0].text",
    );
}

#[test]
fn messages_shape_errors() {
    let mut b = req(json!({}));
    b.as_object_mut().unwrap().remove("messages");
    assert_400(&err(b), "messages");
    assert_400(&err(req(json!({"messages": []}))), "messages");
    assert_400(&err(req(json!({"messages": "hi"}))), "messages");
    assert_400(&err(req(json!({"messages": [5]}))), "messages[0]");
    let e = err(req(
        json!({"messages": [{"role": "system", "content": "x"}]}),
    ));
    assert_400(&e, "messages[0].role");
    assert!(e.message.contains("`system`"));
    assert_400(
        &err(req(json!({"messages": [{"role": "user", "content": 1}]}))),
        "messages[0].content",
    );
    assert_400(
        &err(req(json!({"messages": [{"role": "user"}]}))),
        "messages[0].content",
    );
    assert_400(
        &err(req(
            json!({"messages": [{"role": "user", "content": [{"text": "x"}]}]}),
        )),
        "messages[0].content[0].type",
    );
    assert_400(
        &err(req(
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}),
        )),
        "messages[0].content[0].text",
    );
}

#[test]
fn user_tool_results_come_first_then_text() {
    let t = ok(req(json!({"messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
            {"type": "tool_use", "id": "t2", "name": "g", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
            {"type": "text", "text": "and"},
            {"type": "tool_result", "tool_use_id": "t2", "is_error": true,
             "content": [{"type": "text", "text": "bad"}, {"type": "text", "text": "input"}]},
            {"type": "text", "text": "more"}]}]})));
    let m = t.chat["messages"].as_array().unwrap();
    assert_eq!(m.len(), 5);
    assert_eq!(
        m[1],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
            {"id": "t2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]})
    );
    assert_eq!(
        m[2],
        json!({"role": "tool", "tool_call_id": "t1", "content": "one"})
    );
    assert_eq!(
        m[3],
        json!({"role": "tool", "tool_call_id": "t2", "content": "Error: bad\n\ninput"})
    );
    assert_eq!(m[4], json!({"role": "user", "content": "and\n\nmore"}));
}

#[test]
fn tool_results_alone_make_no_user_message() {
    let t = ok(req(json!({"messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]})));
    assert_eq!(
        t.chat["messages"],
        json!([{"role": "tool", "tool_call_id": "x", "content": ""}])
    );
    // An empty block list is still a (blank) user turn.
    let t = ok(req(json!({"messages": [{"role": "user", "content": []}]})));
    assert_eq!(t.chat["messages"], json!([{"role": "user", "content": ""}]));
}

#[test]
fn tool_result_errors_name_their_path() {
    let e = err(req(json!({"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "x",
         "content": [{"type": "text", "text": "ok"}, {"type": "image", "source": {}}]}]}]})));
    assert_400(&e, "messages[0].content[0].content[1]");
    assert!(
        e.message.contains("image") && e.message.contains("user message's content"),
        "{}",
        e.message
    );
    assert_400(
        &err(req(json!({"messages": [{"role": "user", "content": [
            {"type": "tool_result", "content": "x"}]}]}))),
        "messages[0].content[0].tool_use_id",
    );
    assert_400(
        &err(req(json!({"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "x", "content": 3}]}]}))),
        "messages[0].content[0].content",
    );
    assert_400(
        &err(req(json!({"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "x", "is_error": "yes"}]}]}))),
        "messages[0].content[0].is_error",
    );
}

#[test]
fn assistant_thinking_text_and_calls() {
    let t = ok(req(json!({"messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "xyz"},
            {"type": "thinking", "thinking": "ok"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "c1", "name": "look", "input": {"q": "x"}}]}]})));
    assert_eq!(
        t.chat["messages"][1],
        json!({"role": "assistant", "content": "Let me look.",
               "tool_calls": [{"id": "c1", "type": "function",
                               "function": {"name": "look", "arguments": "{\"q\":\"x\"}"}}],
               "reasoning_content": "hmm\n\nok"})
    );
    // A final assistant message (prefill) stays last.
    let t = ok(req(json!({"messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "The answer is"}]})));
    assert_eq!(
        t.chat["messages"][1],
        json!({"role": "assistant", "content": "The answer is"})
    );
    assert_400(
        &err(req(json!({"messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "name": "f", "input": {}}]}]}))),
        "messages[0].content[0].id",
    );
    assert_400(
        &err(req(json!({"messages": [{"role": "assistant", "content": [
            {"type": "thinking", "signature": "s"}]}]}))),
        "messages[0].content[0].thinking",
    );
}

#[test]
fn unsupported_blocks_are_refused_with_their_path() {
    for kind in [
        "document",
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
    ] {
        let e = err(req(json!({"messages": [
            {"role": "user", "content": "q"},
            {"role": if kind.starts_with("server") || kind.starts_with("web") { "assistant" } else { "user" },
             "content": [{"type": kind, "source": {}}]}]})));
        assert_400(&e, "messages[1].content[0]");
        assert!(e.message.contains(kind), "{}", e.message);
        assert!(e.message.contains("not supported"), "{}", e.message);
    }
    let e = err(req(json!({"messages": [{"role": "user", "content": [
        {"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]})));
    assert_400(&e, "messages[0].content[0]");
    assert!(e.message.contains("assistant"));
    let e = err(req(json!({"messages": [{"role": "assistant", "content": [
        {"type": "tool_result", "tool_use_id": "a"}]}]})));
    assert_400(&e, "messages[0].content[0]");
    assert!(e.message.contains("user message"));
}

#[test]
fn sampling_stop_and_stream() {
    let t = ok(req(
        json!({"stop_sequences": ["END", "\n\n"], "temperature": 0.5,
                          "top_p": 0.9, "top_k": 40, "stream": true, "priority": 3}),
    ));
    // vLLM's `priority` passes through (checked on the chat path).
    assert_eq!(t.chat["priority"], json!(3));
    assert_eq!(t.chat["stop"], json!(["END", "\n\n"]));
    assert_eq!(
        t.stop_sequences,
        vec!["END".to_string(), "\n\n".to_string()]
    );
    assert_eq!(t.chat["temperature"], json!(0.5));
    assert_eq!(t.chat["top_p"], json!(0.9));
    assert_eq!(t.chat["top_k"], json!(40));
    assert_eq!(t.chat["stream"], json!(true));
    assert_eq!(t.chat["stream_options"], json!({"include_usage": true}));
    assert!(t.stream);
    let t = ok(req(json!({"stop_sequences": [], "stream": false})));
    assert!(t.chat.get("stop").is_none());
    assert!(t.chat.get("priority").is_none());
    assert!(t.chat.get("stream").is_none() && t.chat.get("stream_options").is_none());
    assert_400(
        &err(req(json!({"stop_sequences": ["a", 1]}))),
        "stop_sequences[1]",
    );
    assert_400(&err(req(json!({"stop_sequences": "a"}))), "stop_sequences");
    assert_400(&err(req(json!({"temperature": "hot"}))), "temperature");
    assert_400(&err(req(json!({"top_p": []}))), "top_p");
    assert_400(&err(req(json!({"top_k": -1}))), "top_k");
    assert_400(&err(req(json!({"stream": "yes"}))), "stream");
}

#[test]
fn tools_translate_and_server_tools_are_refused() {
    let t = ok(req(json!({"tools": [
        {"name": "get_weather", "description": "Weather", "cache_control": {"type": "ephemeral"},
         "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"type": "custom", "name": "noop", "strict": true}]})));
    assert_eq!(
        t.chat["tools"],
        json!([
            {"type": "function", "function": {"name": "get_weather", "description": "Weather",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "noop",
             "parameters": {"type": "object", "properties": {}}, "strict": true}}])
    );
    let e = err(req(json!({"tools": [
        {"name": "a", "input_schema": {}},
        {"type": "web_search_20250305", "name": "web_search"}]})));
    assert_400(&e, "tools[1].type");
    assert!(e.message.contains("web_search_20250305"), "{}", e.message);
    assert_400(
        &err(req(
            json!({"tools": [{"type": "bash_20250124", "name": "bash"}]}),
        )),
        "tools[0].type",
    );
    assert_400(
        &err(req(json!({"tools": [{"input_schema": {}}]}))),
        "tools[0].name",
    );
    assert_400(
        &err(req(json!({"tools": [{"name": "a", "input_schema": "x"}]}))),
        "tools[0].input_schema",
    );
    assert_400(&err(req(json!({"tools": {"name": "a"}}))), "tools");
}

#[test]
fn tool_choice_variants() {
    let cases = [
        (json!({"type": "auto"}), json!("auto")),
        (json!({"type": "any"}), json!("required")),
        (json!({"type": "none"}), json!("none")),
        (
            json!({"type": "tool", "name": "f"}),
            json!({"type": "function", "function": {"name": "f"}}),
        ),
    ];
    for (given, want) in cases {
        let t = ok(req(json!({"tool_choice": given})));
        assert_eq!(t.chat["tool_choice"], want);
        assert!(t.chat.get("parallel_tool_calls").is_none());
    }
    let t = ok(req(
        json!({"tool_choice": {"type": "any", "disable_parallel_tool_use": true}}),
    ));
    assert_eq!(t.chat["parallel_tool_calls"], json!(false));
    let t = ok(req(
        json!({"tool_choice": {"type": "auto", "disable_parallel_tool_use": false}}),
    ));
    assert!(t.chat.get("parallel_tool_calls").is_none());
    assert_400(
        &err(req(json!({"tool_choice": {"type": "tool"}}))),
        "tool_choice.name",
    );
    assert_400(
        &err(req(json!({"tool_choice": {"type": "maybe"}}))),
        "tool_choice.type",
    );
    assert_400(&err(req(json!({"tool_choice": "auto"}))), "tool_choice");
    assert_400(
        &err(req(
            json!({"tool_choice": {"type": "auto", "disable_parallel_tool_use": 1}}),
        )),
        "tool_choice.disable_parallel_tool_use",
    );
}

#[test]
fn thinking_switch() {
    let t = ok(req(
        json!({"thinking": {"type": "enabled", "budget_tokens": 2048}}),
    ));
    assert_eq!(
        t.chat["chat_template_kwargs"],
        json!({"enable_thinking": true})
    );
    assert_eq!(t.thinking, Some(true));
    let t = ok(req(json!({"thinking": {"type": "disabled"}})));
    assert_eq!(
        t.chat["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
    assert_eq!(t.thinking, Some(false));
    let t = ok(req(json!({})));
    assert!(t.chat.get("chat_template_kwargs").is_none());
    assert_400(
        &err(req(json!({"thinking": {"type": "sometimes"}}))),
        "thinking.type",
    );
    assert_400(
        &err(req(
            json!({"thinking": {"type": "enabled", "budget_tokens": "lots"}}),
        )),
        "thinking.budget_tokens",
    );
    assert_400(&err(req(json!({"thinking": true}))), "thinking");
}

#[test]
fn metadata_and_fields_that_change_nothing() {
    let t = ok(req(json!({
        "metadata": {"user_id": "u-1"}, "service_tier": "auto", "inference_geo": "us",
        "speed": "fast", "cache_control": {"type": "ephemeral"},
        "diagnostics": {"previous_message_id": "msg_1"}, "billing_policy": {"bill_to": "self"},
        "fallback_credit_token": "t", "user_profile_id": "p", "workspace_id": "w",
        "fallbacks": "default", "mcp_servers": [], "container": null, "thread": null,
    })));
    assert_eq!(t.chat["user"], json!("u-1"));
    for field in [
        "service_tier",
        "speed",
        "cache_control",
        "diagnostics",
        "fallbacks",
    ] {
        assert!(t.chat.get(field).is_none(), "{field}");
    }
    assert_400(
        &err(req(json!({"metadata": {"user_id": 7}}))),
        "metadata.user_id",
    );
    assert_400(&err(req(json!({"metadata": "u"}))), "metadata");
}

/// A field that would change the answer and is not implemented is refused
/// naming it; an unknown field is refused (as Anthropic's API does).
#[test]
fn fields_refused_or_unknown() {
    for (field, value) in [
        ("container", json!("c")),
        (
            "mcp_servers",
            json!([{"type": "url", "url": "https://m", "name": "m"}]),
        ),
        ("context_management", json!({"edits": []})),
        ("compaction", json!({"type": "summarize"})),
        ("fallbacks", json!([{"model": "other"}])),
    ] {
        let e = err(req(json!({ field: value })));
        assert_400(&e, field);
        assert!(e.message.contains("not supported"), "{e}");
        assert_eq!(error_code(&e), None);
    }
    for field in [
        "frobnicate",
        "betas",
        "seed",
        "n",
        "stop",
        "max_completion_tokens",
    ] {
        let e = err(req(json!({ field: 1 })));
        assert_400(&e, field);
        assert!(e.message.contains("unknown field"), "{e}");
    }
}

/// docs/LIMITS.md lists every field of the table with what is done with
/// it, and no other.
#[test]
fn the_limits_table_matches() {
    assert_eq!(
        crate::fields::doc_rows("messages"),
        crate::fields::table_rows(super::request::FIELDS)
    );
}

/// `thread` (Anthropic's server-held conversations, sent by its SDK's
/// tool runner) is refused whatever its value, with the error code on
/// which the SDK sends the whole conversation again without a thread; so
/// is a `previous_message_id`.
#[test]
fn threads_refused_with_the_sdk_fallback_code() {
    for (field, value) in [
        ("thread", json!({"type": "create"})),
        (
            "thread",
            json!({"type": "continue", "previous_message_id": "msg_1"}),
        ),
        ("thread", json!("yes")),
        ("thread", json!(false)),
        ("previous_message_id", json!("msg_1")),
    ] {
        let e = err(req(json!({ field: value })));
        assert_400(&e, field);
        assert!(e.message.contains("`messages`"), "{e}");
        assert_eq!(error_code(&e), Some("thread_unsupported_request"));
        let body = crate::anthropic::error_body(&e);
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(
            body["error"]["details"],
            json!({"error_code": "thread_unsupported_request"})
        );
        assert!(body["error"]["message"].as_str().unwrap().contains(field));
    }
    // Through the server's path: an OpenAI-shaped 400 naming the field
    // comes out in Anthropic's shape with the code.
    let openai = json!({"error": {"message": "no threads", "type": "invalid_request_error",
                                  "param": "thread", "code": "invalid_request"}});
    let body = crate::anthropic::from_openai_error(400, &openai);
    assert_eq!(
        body["error"]["details"]["error_code"],
        "thread_unsupported_request"
    );
    // Another refusal carries no details.
    let e = err(req(json!({"container": "c"})));
    assert!(crate::anthropic::error_body(&e)["error"]
        .get("details")
        .is_none());
}

#[test]
fn structured_output_and_effort() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let want = json!({"type": "json_schema",
                      "json_schema": {"name": "output", "schema": schema, "strict": true}});
    let t = ok(req(
        json!({"output_format": {"type": "json_schema", "schema": schema}}),
    ));
    assert_eq!(t.chat["response_format"], want);
    let t = ok(req(
        json!({"output_config": {"format": {"type": "json_schema", "schema": schema},
                                            "effort": "low"}}),
    ));
    assert_eq!(t.chat["response_format"], want);
    assert_eq!(t.chat["reasoning_effort"], json!("low"));
    assert_400(
        &err(req(json!({"output_format": {"type": "xml"}}))),
        "output_format.type",
    );
    assert_400(
        &err(req(json!({"output_config": {"effort": "huge"}}))),
        "output_config.effort",
    );
}

#[test]
fn image_blocks_become_image_url_parts() {
    let t = ok(req(json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is"}, {"type": "text", "text": "this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://a.example/b.png"}},
        {"type": "text", "text": "thanks"}]}]})));
    assert_eq!(
        t.chat["messages"][0]["content"],
        json!([{"type": "text", "text": "what is\n\nthis?"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
               {"type": "image_url", "image_url": {"url": "https://a.example/b.png"}},
               {"type": "text", "text": "thanks"}])
    );
    for (source, param) in [
        (json!(null), "messages[0].content[0].source"),
        (
            json!({"type": "file", "file_id": "x"}),
            "messages[0].content[0].source.type",
        ),
        (
            json!({"type": "base64", "media_type": "image/png"}),
            "messages[0].content[0].source.data",
        ),
    ] {
        let mut block = json!({"type": "image"});
        if !source.is_null() {
            block["source"] = source;
        }
        assert_400(
            &err(req(
                json!({"messages": [{"role": "user", "content": [block]}]}),
            )),
            param,
        );
    }
    // An image in an assistant turn is refused with its path.
    let e = err(req(json!({"messages": [{"role": "assistant", "content": [
        {"type": "image", "source": {"type": "url", "url": "u"}}]}]})));
    assert_400(&e, "messages[0].content[0]");
}
