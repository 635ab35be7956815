use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use steward_protocol::ChatCompletionResponse;

use super::*;

/// An entry of about `n` bytes.
fn entry(n: usize) -> Stored {
    Stored {
        response: json!({"pad": "x".repeat(n.saturating_sub(10))}),
        conversation: vec![],
    }
}

#[test]
fn sizes_count_response_and_conversation() {
    let s = Stored {
        response: json!({"a": 1}),
        conversation: vec![json!("xy"), json!([1])],
    };
    assert_eq!(
        s.json_bytes(),
        r#"{"a":1}"#.len() + r#""xy""#.len() + "[1]".len()
    );
    let store = Store::new(10, 1000, Duration::from_secs(60));
    store.put("r", s.clone()).unwrap();
    assert_eq!(store.bytes(), s.json_bytes());
    assert_eq!(store.len(), 1);
    assert_eq!(store.get("r"), Some(s));
    assert_eq!(store.capacity_bytes(), 1000);
}

#[test]
fn entry_cap_evicts_oldest_first() {
    let store = Store::new(2, 1 << 20, Duration::from_secs(60));
    let t0 = Instant::now();
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        store
            .put_at(id, entry(50), t0 + Duration::from_secs(i as u64))
            .unwrap();
    }
    assert_eq!(store.len(), 2);
    assert_eq!(store.evicted_total(), 1);
    assert!(store.get_at("a", t0).is_none());
    assert!(store.get_at("b", t0).is_some() && store.get_at("c", t0).is_some());
    // Replacing an entry is no eviction, and makes it the newest.
    store
        .put_at("b", entry(60), t0 + Duration::from_secs(3))
        .unwrap();
    assert_eq!(store.evicted_total(), 1);
    store
        .put_at("d", entry(50), t0 + Duration::from_secs(4))
        .unwrap();
    assert!(store.get_at("c", t0).is_none(), "c was the oldest");
    assert!(store.get_at("b", t0).is_some());
    assert_eq!(store.evicted_total(), 2);
}

#[test]
fn byte_cap_evicts_until_it_fits_and_refuses_the_oversized() {
    let store = Store::new(100, 300, Duration::from_secs(60));
    let t0 = Instant::now();
    store.put_at("a", entry(100), t0).unwrap();
    store.put_at("b", entry(100), t0).unwrap();
    store.put_at("c", entry(100), t0).unwrap();
    assert_eq!(store.bytes(), 300);
    assert_eq!(store.evicted_total(), 0);
    store.put_at("d", entry(150), t0).unwrap();
    // a and b had to go for 150 bytes to fit.
    assert_eq!(store.evicted_total(), 2);
    assert_eq!(store.bytes(), 250);
    assert!(store.get_at("a", t0).is_none() && store.get_at("b", t0).is_none());
    assert!(store.get_at("c", t0).is_some() && store.get_at("d", t0).is_some());

    let big = entry(301);
    assert_eq!(big.json_bytes(), 301);
    let e = store.put_at("big", big, t0).unwrap_err();
    assert_eq!(
        e,
        StoreFull {
            bytes: 301,
            capacity_bytes: 300
        }
    );
    assert!(e.to_string().contains("301"));
    // A refusal evicts nothing.
    assert_eq!(store.len(), 2);
    assert_eq!(store.evicted_total(), 2);
    store.put_at("exact", entry(300), t0).unwrap();
    assert_eq!(store.len(), 1);
    assert_eq!(store.bytes(), 300);

    let none = Store::new(0, 1000, Duration::from_secs(60));
    assert!(none.put("a", entry(10)).is_err());
    assert!(none.is_empty());
}

#[test]
fn ttl_expires_and_expired_go_first() {
    let ttl = Duration::from_secs(10);
    let store = Store::new(3, 1 << 20, ttl);
    let t0 = Instant::now();
    store.put_at("old", entry(20), t0).unwrap();
    store
        .put_at("mid", entry(20), t0 + Duration::from_secs(5))
        .unwrap();
    assert!(store.get_at("old", t0 + Duration::from_secs(9)).is_some());
    // At its age limit an entry is gone, and counted as evicted.
    assert!(store.get_at("old", t0 + ttl).is_none());
    assert_eq!(store.evicted_total(), 1);
    assert_eq!(store.len(), 1);
    // A put evicts every expired entry, before any capacity eviction.
    store
        .put_at("n1", entry(20), t0 + Duration::from_secs(6))
        .unwrap();
    store
        .put_at("n2", entry(20), t0 + Duration::from_secs(7))
        .unwrap();
    store
        .put_at("n3", entry(20), t0 + Duration::from_secs(15))
        .unwrap();
    assert_eq!(
        store.evicted_total(),
        2,
        "only `mid` expired; nothing else had to go"
    );
    assert_eq!(store.len(), 3);
    assert!(store.get_at("mid", t0 + Duration::from_secs(15)).is_none());
    assert!(store.get_at("n1", t0 + Duration::from_secs(15)).is_some());
    // Deleting an expired entry reports it absent.
    assert!(!store.delete_at("n1", t0 + Duration::from_secs(16)));
    assert_eq!(store.evicted_total(), 3);
}

#[test]
fn delete_and_deleted_body() {
    let store = Store::new(10, 1000, Duration::from_secs(60));
    store.put("a", entry(20)).unwrap();
    assert!(store.delete("a"));
    assert!(!store.delete("a"));
    assert_eq!(store.bytes(), 0);
    assert_eq!(store.evicted_total(), 0);
    assert_eq!(
        deleted("resp_1"),
        json!({"id": "resp_1", "object": "response", "deleted": true})
    );
}

#[test]
fn store_is_shared_across_threads() {
    let store = Arc::new(Store::new(1000, 1 << 20, Duration::from_secs(60)));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let s = store.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    s.put(&format!("{t}-{i}"), entry(30)).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(store.len(), 200);
    assert_eq!(store.bytes(), 200 * 30);
}

// ---- a conversation over previous_response_id --------------------------

fn chat_answer(message: Value, finish: &str) -> ChatCompletionResponse {
    serde_json::from_value(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }))
    .unwrap()
}

/// One turn: translate (with the stored previous response), answer, store.
fn turn(store: &Store, id: &str, body: Value, answer: Value, finish: &str) -> (RTranslated, Value) {
    let prev = body["previous_response_id"]
        .as_str()
        .and_then(|p| store.get(p));
    let t = to_chat(&body, prev.as_ref()).unwrap();
    let r = response(id, 7, &chat_answer(answer, finish), &t);
    let conversation = conversation(prev.as_ref(), &t, &r);
    store
        .put(
            id,
            Stored {
                response: r.clone(),
                conversation,
            },
        )
        .unwrap();
    (t, r)
}

#[test]
fn multi_turn_conversation_is_rebuilt_in_order() {
    let store = Store::new(10, 1 << 20, Duration::from_secs(60));
    let tools = json!([{"type": "function", "name": "weather"}]);
    turn(
        &store,
        "resp_1",
        json!({"model": "m", "instructions": "first rules", "input": "Hi, I'm in Paris."}),
        json!({"role": "assistant", "content": "Hello!", "reasoning_content": "greet"}),
        "stop",
    );
    let (t2, r2) = turn(
        &store,
        "resp_2",
        json!({"model": "m", "previous_response_id": "resp_1", "tools": tools,
               "input": [{"role": "user", "content": "Weather?"}]}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
        "tool_calls",
    );
    // Turn 2 does not inherit turn 1's instructions.
    assert_eq!(
        t2.chat["messages"][0],
        json!({"role": "user", "content": "Hi, I'm in Paris."})
    );
    assert_eq!(r2["previous_response_id"], json!("resp_1"));
    assert_eq!(r2["output"][0]["call_id"], json!("call_9"));
    let (t3, _) = turn(
        &store,
        "resp_3",
        json!({"model": "m", "previous_response_id": "resp_2", "tools": tools,
               "instructions": "third rules",
               "input": [{"type": "function_call_output", "call_id": "call_9", "output": "18C"}]}),
        json!({"role": "assistant", "content": "It is 18C."}),
        "stop",
    );
    assert_eq!(
        t3.chat["messages"],
        json!([
            {"role": "system", "content": "third rules"},
            {"role": "user", "content": "Hi, I'm in Paris."},
            {"role": "assistant", "content": "Hello!", "reasoning_content": "greet"},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_9", "type": "function",
                 "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_9", "content": "18C"},
        ])
    );
    // The stored conversation: every input and output item in order.
    let s3 = store.get("resp_3").unwrap();
    let kinds: Vec<&str> = s3
        .conversation
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "message",
            "message",
            "function_call",
            "function_call_output",
            "message"
        ]
    );
    assert_eq!(s3.conversation[1]["id"], json!("rs_1_0"));
    assert_eq!(s3.conversation[4]["id"], json!("fc_2_0"));
    assert_eq!(s3.conversation[6]["id"], json!("msg_3_0"));

    // input_items: everything but resp_3's own output, oldest first.
    let list = input_items(&s3);
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 6);
    assert_eq!(list["object"], "list");
    assert_eq!(list["has_more"], json!(false));
    assert_eq!(list["first_id"], data[0]["id"]);
    assert_eq!(list["last_id"], data[5]["id"]);
    assert_eq!(data[5]["type"], "function_call_output");
    assert!(data.iter().all(|i| i["id"].is_string()));

    // Pages: newest first by default, `after` and `limit`.
    let page = input_items_page(
        &s3,
        &ItemsQuery {
            limit: 2,
            ..Default::default()
        },
    );
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    assert_eq!(page["data"][0], data[5]);
    assert_eq!(page["has_more"], json!(true));
    let after = page["last_id"].as_str().unwrap().to_string();
    let next = input_items_page(
        &s3,
        &ItemsQuery {
            limit: 10,
            after: Some(after),
            desc: true,
        },
    );
    assert_eq!(next["data"].as_array().unwrap().len(), 4);
    assert_eq!(next["data"][0], data[3]);
    assert_eq!(next["has_more"], json!(false));
    let asc = input_items_page(
        &s3,
        &ItemsQuery {
            desc: false,
            after: None,
            limit: 100,
        },
    );
    assert_eq!(asc["data"], list["data"]);
}
