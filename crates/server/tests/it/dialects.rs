//! Anthropic Messages and OpenAI Responses keep [1/8]'s rules, on the real
//! default model through the real runtime: every refusal on a
//! `/v1/messages` path (auth, body limits, validation, admission) in
//! Anthropic's error shape; a stream whose client goes is cancelled; the
//! Responses store bounded in entries, evicting oldest first, counted in
//! the metrics and the ledger. (The official SDKs' flows are
//! scripts/agent_api_check.py's.)

use crate::common;

use std::time::Duration;

use serde_json::{json, Value};

async fn server(store: (usize, u64)) -> common::Server {
    let opts = steward_server::ServerOptions {
        api_key: Some("k".into()),
        responses_store: (store.0, store.1, Duration::from_secs(3600)),
        limits: steward_server::limits::Limits {
            max_body_bytes: 64 << 10,
            ..Default::default()
        },
        ..Default::default()
    };
    let s = common::server_opts(|_| {}, opts, Default::default()).await;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-api-key", "k".parse().unwrap());
    common::Server {
        client: reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap(),
        ..s
    }
}

fn anthropic_error(status: u16, v: &Value, want_status: u16, want_type: &str) {
    assert_eq!(status, want_status, "{v}");
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], want_type, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_errors_are_anthropic_shaped_and_a_gone_stream_is_cancelled() {
    let s = server((8, 1 << 20)).await;
    let msg = json!([{"role": "user", "content": "Count to fifty."}]);
    // Validation: max_tokens is required.
    let (st, _, v) = s
        .post(
            "/v1/messages",
            &json!({"model": "smol", "messages": msg}).to_string(),
        )
        .await;
    anthropic_error(st, &v, 400, "invalid_request_error");
    // Not JSON at all.
    let (st, _, v) = s.post("/v1/messages", "{").await;
    anthropic_error(st, &v, 400, "invalid_request_error");
    // The chat path's own checks come back in Anthropic's shape too.
    let body = json!({"model": "smol", "max_tokens": 4, "messages": msg, "temperature": 7});
    let (st, _, v) = s.post("/v1/messages", &body.to_string()).await;
    anthropic_error(st, &v, 400, "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("temperature"),
        "{v}"
    );
    // Unknown model, body too large, wrong key.
    let body = json!({"model": "nope", "max_tokens": 4, "messages": msg});
    let (st, _, v) = s.post("/v1/messages", &body.to_string()).await;
    anthropic_error(st, &v, 404, "not_found_error");
    let big = json!({"model": "smol", "max_tokens": 4, "messages": [{"role": "user", "content": "x".repeat(70 << 10)}]});
    let (st, _, v) = s.post("/v1/messages", &big.to_string()).await;
    anthropic_error(st, &v, 413, "request_too_large");
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages/count_tokens", s.base))
        .header("x-api-key", "wrong")
        .json(&json!({"model": "smol", "messages": msg}))
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    anthropic_error(st, &r.json().await.unwrap(), 401, "authentication_error");
    // Bearer still works on the same route.
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages/count_tokens", s.base))
        .header("authorization", "Bearer k")
        .json(&json!({"model": "smol", "messages": msg}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.json::<Value>().await.unwrap()["input_tokens"]
            .as_u64()
            .unwrap()
            > 3
    );
    // Other APIs keep OpenAI's shape.
    let (st, _, v) = s
        .post(
            "/v1/responses",
            &json!({"model": "nope", "input": "x"}).to_string(),
        )
        .await;
    common::assert_error(st, &v, 404, "model_not_found");

    // A streamed message whose client goes after the first events.
    let before = s.metric("steward_requests_cancelled_total").await;
    let body = json!({"model": "smol", "max_tokens": 400, "stream": true, "messages": msg, "temperature": 0});
    let mut r = s
        .client
        .post(format!("{}/v1/messages", s.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut seen = String::new();
    while !seen.contains("content_block_delta") {
        seen.push_str(&String::from_utf8_lossy(&r.chunk().await.unwrap().unwrap()));
    }
    assert!(seen.starts_with("event: message_start"), "{seen}");
    drop(r);
    let after = s
        .metric_settled("steward_requests_cancelled_total", before + 1.0)
        .await;
    assert_eq!(after, before + 1.0, "the abandoned stream was cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responses_store_is_bounded_oldest_out_and_counted() {
    let s = server((2, 1 << 20)).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let body = json!({"model": "smol", "input": format!("Say {i}."), "max_output_tokens": 2, "temperature": 0});
        let (st, _, v) = s.post("/v1/responses", &body.to_string()).await;
        assert_eq!(st, 200, "{v}");
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    // Two entries at most: the first went.
    let r = s
        .client
        .get(format!("{}/v1/responses/{}", s.base, ids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    for id in &ids[1..] {
        let v = s.get_json(&format!("/v1/responses/{id}")).await;
        assert_eq!(v["id"], json!(id), "{v}");
    }
    assert_eq!(s.metric("steward_responses_stored").await, 2.0);
    assert_eq!(s.metric("steward_responses_evicted_total").await, 1.0);
    let l = s.get_json("/debug/ledger").await;
    let bytes = l["response_store"]["bytes"].as_u64().unwrap();
    assert!(
        bytes > 100 && bytes == s.metric("steward_responses_store_bytes").await as u64,
        "{l}"
    );
    assert_eq!(l["response_store"]["capacity_bytes"], json!(1 << 20), "{l}");
    // A continuation of the evicted one is refused, of a kept one served.
    let body = json!({"model": "smol", "input": "More.", "previous_response_id": ids[0], "max_output_tokens": 2});
    let (st, _, v) = s.post("/v1/responses", &body.to_string()).await;
    common::assert_error(st, &v, 404, "response_not_found");
    let body = json!({"model": "smol", "input": "More.", "previous_response_id": ids[2], "max_output_tokens": 2});
    let (st, _, v) = s.post("/v1/responses", &body.to_string()).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["previous_response_id"], json!(ids[2]));
    // Delete, then it is gone.
    let r = s
        .client
        .delete(format!("{}/v1/responses/{}", s.base, ids[2]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["deleted"], json!(true));
    let r = s
        .client
        .delete(format!("{}/v1/responses/{}", s.base, ids[2]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}
