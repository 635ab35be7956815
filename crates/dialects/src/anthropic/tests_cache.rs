//! `cache_control` breakpoints → the chat body's `cache_pin`, and the
//! cache's share of the prompt in `usage`.

use serde_json::{json, Value};

use super::cache::{split, usage_json};
use super::*;
use crate::{DialectError, Finish, Usage};

const EPH: fn() -> Value = || json!({"type": "ephemeral"});

fn pin_of(body: Value) -> Value {
    let t = to_chat(&body).unwrap_or_else(|e| panic!("{body}: {e}"));
    t.chat.get("cache_pin").cloned().unwrap_or(Value::Null)
}

fn err(body: Value) -> DialectError {
    match to_chat(&body) {
        Ok(t) => panic!("expected an error for {body}, got {}", t.chat),
        Err(e) => e,
    }
}

fn body(extra: Value) -> Value {
    let mut b = json!({"model": "m", "max_tokens": 8,
                       "messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn assert_400(e: &DialectError, param: &str) {
    assert_eq!(e.status, 400, "{e}");
    assert_eq!(e.param.as_deref(), Some(param), "{e}");
    assert!(e.message.contains(param), "`{}` names `{param}`", e.message);
}

#[test]
fn no_breakpoint_no_pin() {
    assert_eq!(pin_of(body(json!({"system": "s"}))), Value::Null);
    assert_eq!(pin_of(body(json!({"cache_control": null}))), Value::Null);
}

#[test]
fn a_system_breakpoint_pins_through_the_system_message() {
    let b = body(json!({"system": [
        {"type": "text", "text": "long rules", "cache_control": EPH()},
        {"type": "text", "text": "more"}]}));
    assert_eq!(pin_of(b), json!({"ttl_s": 300, "messages": 1}));
    // An empty system prompt is no message: nothing before the user's.
    let b = body(json!({"system": [{"type": "text", "text": "", "cache_control": EPH()}]}));
    assert_eq!(pin_of(b), json!({"ttl_s": 300, "messages": 0}));
}

#[test]
fn the_last_breakpoint_and_the_longest_ttl() {
    let b = json!({"model": "m", "max_tokens": 8,
        "system": [{"type": "text", "text": "s", "cache_control": EPH()}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q1",
              "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "q2"}]});
    assert_eq!(pin_of(b), json!({"ttl_s": 3600, "messages": 2}));
    // On the last message: the whole prompt.
    let b = json!({"model": "m", "max_tokens": 8,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "q", "cache_control": EPH()},
            {"type": "text", "text": "r"}]}]});
    assert_eq!(pin_of(b), json!({"ttl_s": 300}));
    // The request's own: the whole prompt too.
    let b = body(
        json!({"system": [{"type": "text", "text": "s", "cache_control": EPH()}],
                        "cache_control": {"type": "ephemeral", "ttl": "1h"}}),
    );
    assert_eq!(pin_of(b), json!({"ttl_s": 3600}));
}

#[test]
fn tool_breakpoints_cover_the_system_message() {
    let tools = json!([{"name": "f", "input_schema": {}, "cache_control": EPH()}]);
    assert_eq!(
        pin_of(body(json!({"tools": tools, "system": "s"}))),
        json!({"ttl_s": 300, "messages": 1})
    );
    assert_eq!(
        pin_of(body(json!({"tools": tools}))),
        json!({"ttl_s": 300, "messages": 0})
    );
}

#[test]
fn tool_results_and_assistant_blocks_cover_their_own_message() {
    let b = json!({"model": "m", "max_tokens": 8, "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "f", "input": {}, "cache_control": EPH()},
            {"type": "tool_use", "id": "c2", "name": "f", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "one"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "two"},
            {"type": "text", "text": "go on"}]}]});
    // user, assistant, tool, tool, user: the assistant message is the 2nd.
    assert_eq!(pin_of(b.clone()), json!({"ttl_s": 300, "messages": 2}));
    let mut b1 = b.clone();
    b1["messages"][2]["content"][0]["cache_control"] = EPH();
    assert_eq!(pin_of(b1), json!({"ttl_s": 300, "messages": 3}));
    // A breakpoint inside a tool result's content: the same message.
    let mut b2 = b;
    b2["messages"][2]["content"][1]["content"] =
        json!([{"type": "text", "text": "two", "cache_control": EPH()}]);
    assert_eq!(pin_of(b2), json!({"ttl_s": 300, "messages": 4}));
}

#[test]
fn invalid_cache_control_is_a_400_naming_the_field() {
    let e = err(body(json!({"system": [{"type": "text", "text": "s",
                                        "cache_control": {"type": "persistent"}}]})));
    assert_400(&e, "system[0].cache_control.type");
    let e = err(
        json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user",
        "content": [{"type": "text", "text": "q",
                     "cache_control": {"type": "ephemeral", "ttl": "2h"}}]}]}),
    );
    assert_400(&e, "messages[0].content[0].cache_control.ttl");
    assert!(e.message.contains("`5m` or `1h`"), "{}", e.message);
    let e = err(body(json!({"cache_control": {"ttl": "5m"}})));
    assert_400(&e, "cache_control.type");
    let e = err(body(json!({"cache_control": "ephemeral"})));
    assert_400(&e, "cache_control");
    let e = err(body(json!({"tools": [{"name": "f", "input_schema": {},
                                       "cache_control": {"type": "ephemeral", "scope": "x"}}]})));
    assert_400(&e, "tools[0].cache_control.scope");
    let e = err(body(
        json!({"cache_control": {"type": "ephemeral", "ttl": 300}}),
    ));
    assert_400(&e, "cache_control.ttl");
}

#[test]
fn at_most_four_breakpoints() {
    let block = |t: &str| json!({"type": "text", "text": t, "cache_control": EPH()});
    let four = json!([block("a"), block("b"), block("c"), block("d")]);
    assert_eq!(
        pin_of(body(json!({"system": four}))),
        json!({"ttl_s": 300, "messages": 1})
    );
    let e = err(body(json!({"system": four, "cache_control": EPH()})));
    assert_eq!(e.status, 400);
    assert!(
        e.message.contains("maximum of 4 blocks with cache_control"),
        "{}",
        e.message
    );
    assert!(e.message.contains("Found 5"), "{}", e.message);
    assert_eq!(e.param.as_deref(), Some("system[3].cache_control"));
}

fn usage(input: u32, cached: u32, pinned: u32, ttl: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: 5,
        cached_tokens: cached,
        pinned_tokens: pinned,
        pin_ttl_s: ttl,
    }
}

#[test]
fn usage_splits_the_prompt_three_ways() {
    // (input, read, creation), adding up to the prompt.
    assert_eq!(split(&usage(420, 0, 400, 300)), (20, 0, 400));
    assert_eq!(split(&usage(430, 400, 0, 300)), (30, 400, 0));
    assert_eq!(split(&usage(100, 0, 0, 0)), (100, 0, 0));
    // Never more than the prompt, whatever the engine says.
    assert_eq!(split(&usage(100, 60, 80, 300)), (0, 60, 40));
    assert_eq!(split(&usage(10, 50, 0, 0)), (0, 10, 0));
    let u = usage_json(&usage(420, 0, 400, 300));
    assert_eq!(
        u,
        json!({"input_tokens": 20, "output_tokens": 5, "cache_read_input_tokens": 0,
               "cache_creation_input_tokens": 400,
               "cache_creation": {"ephemeral_5m_input_tokens": 400,
                                  "ephemeral_1h_input_tokens": 0}})
    );
    let u = usage_json(&usage(420, 10, 400, 3600));
    assert_eq!(u["cache_creation"]["ephemeral_1h_input_tokens"], 400);
    assert_eq!(u["cache_creation"]["ephemeral_5m_input_tokens"], 0);
    assert_eq!(u["input_tokens"], 10);
}

#[test]
fn streamed_and_whole_usage_agree() {
    let mut s = MessageStream::new("msg_1", "m", 420);
    let mut outs = s.start();
    assert_eq!(
        outs[0].data["message"]["usage"]["input_tokens"], 420,
        "message_start: the prompt as known"
    );
    outs.extend(s.finish(Finish::Stop, usage(420, 0, 400, 300)));
    let delta = outs.iter().find(|o| o.event == "message_delta").unwrap();
    assert_eq!(delta.data["usage"]["cache_creation_input_tokens"], 400);
    assert_eq!(delta.data["usage"]["input_tokens"], 20);
    let m = message_from_events(&outs);
    assert_eq!(m["usage"], delta.data["usage"]);
}
