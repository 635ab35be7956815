//! [6/8] The dashboard's feed against the real default model: a running
//! request appears with its state and progress, the step timeline and the
//! ledger arrive, a client that leaves shows up as a cancellation with its
//! latency, and the feed is bounded. The pages themselves are served with
//! their CSP (the browser test, scripts/browser_check.sh, drives them).

use crate::common::{self, HANG_GUARD};

use std::time::Instant;

use futures::StreamExt;
use serde_json::{json, Value};

/// Read `snapshot` events from an open feed until `want` holds for one, or
/// [`HANG_GUARD`] passes (a hang: None); every event read is passed to
/// `want`.
async fn until<B: AsRef<[u8]>>(
    feed: &mut (impl futures::Stream<Item = reqwest::Result<B>> + Unpin),
    buf: &mut String,
    mut want: impl FnMut(&Value) -> bool,
) -> Option<Value> {
    let end = Instant::now() + HANG_GUARD;
    while Instant::now() < end {
        while let Some(i) = buf.find("\n\n") {
            let ev: String = buf.drain(..i + 2).collect();
            if let Some(data) = ev.lines().find_map(|l| l.strip_prefix("data: ")) {
                let v: Value = serde_json::from_str(data).expect("snapshot is JSON");
                if want(&v) {
                    return Some(v);
                }
            }
        }
        match tokio::time::timeout_at(end.into(), feed.next()).await {
            Ok(Some(Ok(b))) => buf.push_str(&String::from_utf8_lossy(b.as_ref())),
            _ => return None,
        }
    }
    None
}

/// Each step arrives once, in order, with its parts.
fn check_steps(v: &Value, last_n: &mut u64, steps: &mut usize) {
    for st in v["models"][0]["steps"].as_array().unwrap() {
        let n = st["n"].as_u64().unwrap();
        assert!(
            n > *last_n,
            "step {n} after {last_n}: sent twice or out of order"
        );
        *last_n = n;
        *steps += 1;
        assert!(st["ms"].as_f64().unwrap() >= st["wait_ms"].as_f64().unwrap());
        assert!(st["decode"].as_u64().unwrap() + st["prompt"].as_u64().unwrap() > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_shows_requests_steps_ledger_and_cancellations() {
    // The feed count is the server's (once the process's: the lock stays).
    let _feeds = common::DASHBOARD_FEEDS.lock().await;
    let s = common::server().await;
    common::feeds_closed(&s, 0).await;
    // The pages, with a CSP that allows nothing from elsewhere.
    for path in ["/", "/dashboard", "/ui/chat.js", "/ui/app.css"] {
        let r = s
            .client
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let csp = r.headers()["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
    }
    assert_eq!(
        s.client
            .get(format!("{}/ui/nope.js", s.base))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    let (st, _, v) = s.post("/dashboard/events?interval_ms=5", "").await;
    assert_eq!(st, 405, "{v}");
    let r = s
        .client
        .get(format!("{}/dashboard/events?interval_ms=5", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    let r = s
        .client
        .get(format!("{}/dashboard/events?interval_ms=100", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut feed = r.bytes_stream();
    let mut buf = String::new();
    let first = until(&mut feed, &mut buf, |_| true)
        .await
        .expect("a snapshot");
    let m = &first["models"][0];
    assert_eq!(m["model"], "smol");
    assert!(m["ledger"]["weights"].as_u64().unwrap() > 0, "{m}");
    assert_eq!(m["kv"]["cells_total"], 4 * 512);

    // A long streamed request, read by nobody after its first chunk: it
    // runs while the feed watches it (400 tokens, no end-of-generation:
    // longer than the feed needs to see five steps), then its client
    // leaves.
    let id = "dash-req-1";
    let body = json!({"messages": [{"role": "user", "content": "Tell a long story."}],
                      "max_tokens": 400, "ignore_eos": true, "stream": true, "temperature": 1});
    let resp = s
        .client
        .post(format!("{}/v1/chat/completions", s.base))
        .header("x-request-id", id)
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut answer = resp.bytes_stream();
    let (leave, told) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        // Read the first chunk, then leave when told.
        answer.next().await;
        let _ = told.await;
    });
    let (mut last_n, mut steps) = (0, 0);
    let seen = until(&mut feed, &mut buf, |v| {
        check_steps(v, &mut last_n, &mut steps);
        v["models"][0]["requests"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["id"] == id && r["state"] == "decoding"))
    })
    .await
    .expect("the running request appears, decoding");
    let req = seen["models"][0]["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap()
        .clone();
    assert!(req["prompt_tokens"].as_u64().unwrap() > 0, "{req}");
    assert_eq!(req["prompt_computed"], req["prompt_tokens"], "{req}");
    assert!(seen["models"][0]["kv"]["cells_used"].as_u64().unwrap() > 0);
    // Let it decode a while (the feed keeps up with the steps), then leave.
    let _ = until(&mut feed, &mut buf, |v| {
        check_steps(v, &mut last_n, &mut steps);
        steps >= 5
    })
    .await;
    leave.send(()).unwrap();
    reader.await.unwrap();
    let cancelled = until(&mut feed, &mut buf, |v| {
        check_steps(v, &mut last_n, &mut steps);
        v["models"][0]["cancellations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == id)
    })
    .await
    .expect("the cancellation appears");
    assert!(steps >= 5, "{steps} steps seen");
    let c = cancelled["models"][0]["cancellations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap()
        .clone();
    assert_eq!(c["state"], "decoding", "{c}");
    assert!(c["latency_ms"].as_f64().unwrap() >= 0.0);
    assert!(
        cancelled["models"][0]["counters"]["cancelled"]
            .as_u64()
            .unwrap()
            >= 1
    );
    let quiet = until(&mut feed, &mut buf, |v| {
        v["models"][0]["requests"].as_array().unwrap().is_empty()
    })
    .await;
    assert!(quiet.is_some(), "the request leaves the list");

    // At most MAX_FEEDS open feeds; the next is refused.
    let mut open = Vec::new();
    while s.state.open_feeds() < steward_server::dashboard::MAX_FEEDS {
        let r = s
            .client
            .get(format!("{}/dashboard/events", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        open.push(r);
    }
    let r = s
        .client
        .get(format!("{}/dashboard/events", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "too_many_feeds");
    drop(open);
    drop(feed);
    common::feeds_closed(&s, 0).await;
}
