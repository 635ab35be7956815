//! Multi-tenancy on the server side, on the real default model: a key's
//! token quota (`tpd=`) reserves a request's bound, settles to the tokens
//! used (whole answers, streams, a client that left), refuses past it
//! with a 429 naming the quota, and reports itself in OpenAI's
//! `x-ratelimit-*-tokens` headers; per-key counters in `/metrics`; the
//! `priority` field checked on every generation API. (Which priority a
//! request runs at under its key's ceiling is unit-tested:
//! `access::tests::quotas_priorities_and_weights`.)
//!
//! The quota is a day's, so what refills during a test is a fraction of
//! a token per minute: remaining counts are exact up to that refill,
//! which the checks allow for from the time they measured.

use crate::common;

use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

const ALICE: &str = "alice-key-0001";
const BOB: &str = "bob-key-000002";
/// Alice's tokens per day.
const TPD: u64 = 1000;

struct Tenants {
    s: common::Server,
    _keys: tempfile::NamedTempFile,
}

async fn server() -> Tenants {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        f.path(),
        format!("{ALICE} name=alice tpd={TPD}\n{BOB} name=bob priority=5 weight=2\n"),
    )
    .unwrap();
    let keys = steward_server::access::Keys::new(None, Some(f.path().into()), 0).unwrap();
    let opts = steward_server::ServerOptions {
        keys: Some(keys),
        ..Default::default()
    };
    let s = common::server_opts(|_| {}, opts, Default::default()).await;
    Tenants { s, _keys: f }
}

impl Tenants {
    async fn post(&self, key: &str, path: &str, body: &Value) -> (u16, HeaderMap, Value) {
        let r = self
            .s
            .client
            .post(format!("{}{path}", self.s.base))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .unwrap();
        let (st, h) = (r.status().as_u16(), r.headers().clone());
        let text = r.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (st, h, v)
    }

    async fn get(&self, key: &str, path: &str) -> (u16, HeaderMap, String) {
        let r = self
            .s
            .client
            .get(format!("{}{path}", self.s.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        let (st, h) = (r.status().as_u16(), r.headers().clone());
        (st, h, r.text().await.unwrap())
    }

    /// The server as a client with `key` sees it (for `Server::stream`).
    fn as_key(&self, key: &str) -> common::Server {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", format!("Bearer {key}").parse().unwrap());
        common::Server {
            base: self.s.base.clone(),
            client: reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .unwrap(),
            conns: self.s.conns.clone(),
            state: self.s.state.clone(),
        }
    }

    /// Alice's remaining tokens, read from a cheap request's headers.
    async fn remaining(&self) -> u64 {
        let (st, h, _) = self.get(ALICE, "/v1/models").await;
        assert_eq!(st, 200);
        tokens(&h).1
    }
}

/// `x-ratelimit-{limit,remaining,reset}-tokens`.
fn tokens(h: &HeaderMap) -> (u64, u64, String) {
    let get = |k: &str| {
        h.get(k)
            .unwrap_or_else(|| panic!("no {k} in {h:?}"))
            .to_str()
            .unwrap()
            .to_string()
    };
    (
        get("x-ratelimit-limit-tokens").parse().unwrap(),
        get("x-ratelimit-remaining-tokens").parse().unwrap(),
        get("x-ratelimit-reset-tokens"),
    )
}

/// The most a day's quota can have refilled since `t0` (TPD tokens in
/// 86,400 s).
fn refill(t0: Instant) -> u64 {
    (t0.elapsed().as_secs_f64() * TPD as f64 / 86_400.0).ceil() as u64
}

/// `remaining` is `want` plus at most what refilled since `t0`.
fn assert_remaining(remaining: u64, want: u64, t0: Instant, what: &str) {
    let refill = refill(t0);
    assert!(
        (want..=want + refill).contains(&remaining),
        "{what}: remaining {remaining}, want {want} (+ up to {refill} refilled)"
    );
}

fn used(v: &Value) -> (u64, u64) {
    let u = &v["usage"];
    (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_quota_reserves_settles_and_refuses() {
    let t = server().await;
    let t0 = Instant::now();
    // Alice's quota is in the headers of every answer, full at first.
    let (limit, left, reset) = {
        let (st, h, _) = t.get(ALICE, "/v1/models").await;
        assert_eq!(st, 200);
        tokens(&h)
    };
    assert_eq!((limit, left, reset.as_str()), (TPD, TPD, "0s"));
    // Bob has no token quota: no token headers.
    let (_, h, _) = t.get(BOB, "/v1/models").await;
    assert!(h.get("x-ratelimit-limit-tokens").is_none(), "{h:?}");

    // A whole answer settles before its headers: the remaining count is
    // the limit less exactly the tokens used.
    let body = common::chat_body("Say hi.", json!({"max_tokens": 8}));
    let (st, h, v) = t.post(ALICE, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    let (p, c) = used(&v);
    assert!(p > 0 && (1..=8).contains(&c), "{v}");
    let (limit, left, reset) = tokens(&h);
    assert_eq!(limit, TPD);
    assert_remaining(left, TPD - p - c, t0, "after one answer");
    assert!(reset.ends_with('s') && reset != "0s", "{reset}");
    let mut spent = p + c;

    // A bound past the whole quota can never run: 429 naming the quota,
    // no Retry-After, nothing taken.
    let big = common::chat_body("Say hi.", json!({"max_tokens": 200, "n": 6}));
    let (st, h, v) = t.post(ALICE, "/v1/chat/completions", &big).await;
    common::assert_error(st, &v, 429, "rate_limit_exceeded");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded", "{v}");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains(&format!("tokens per day (tpd={TPD}) for key 'alice'")) && m.contains("never"),
        "{m}"
    );
    assert!(h.get("retry-after").is_none(), "{h:?}");
    assert_remaining(
        tokens(&h).1,
        TPD - spent,
        t0,
        "after a bound past the quota",
    );

    // A bound a few tokens past what is left: 429 with the tokens in use
    // and the bound, Retry-After, the headers; nothing taken.
    let left = t.remaining().await;
    let mt = (left + 3 - p).div_ceil(4);
    let need = p + 4 * mt;
    let over = common::chat_body("Say hi.", json!({"max_tokens": mt, "n": 4}));
    let (st, h, v) = t.post(ALICE, "/v1/chat/completions", &over).await;
    common::assert_error(st, &v, 429, "rate_limit_exceeded");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains(&format!("tokens per day (tpd={TPD}) for key 'alice': "))
            && m.contains(&format!("this request needs up to {need}")),
        "{m}"
    );
    assert!(h.get("retry-after").is_some(), "{h:?}");
    assert_eq!(tokens(&h).0, TPD);
    assert_remaining(tokens(&h).1, TPD - spent, t0, "after a refusal");

    // A stream holds its bound while it runs and settles when it ends.
    let body = common::chat_body(
        "Say hi.",
        json!({"max_tokens": 8, "stream": true, "stream_options": {"include_usage": true}}),
    );
    let (_, chunks, done) = t.as_key(ALICE).stream("/v1/chat/completions", body).await;
    assert!(done);
    let (p2, c2) = used(chunks.last().unwrap());
    spent += p2 + c2;
    let left = settled(&t, TPD - spent).await;
    assert_remaining(left, TPD - spent, t0, "after a stream");

    // A client that leaves mid-stream: settled to what was computed (the
    // prompt and the tokens before the engine noticed).
    let body = common::chat_body(
        "Say hi.",
        json!({"max_tokens": 256, "ignore_eos": true, "stream": true}),
    );
    let r =
        t.s.client
            .post(format!("{}/v1/chat/completions", t.s.base))
            .bearer_auth(ALICE)
            .json(&body)
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 200);
    // While it runs, its whole bound is reserved.
    let reserved = tokens(r.headers()).1;
    assert_remaining(reserved, TPD - spent - p - 256, t0, "while a stream runs");
    drop(r);
    let left = settled(&t, reserved + 1).await;
    assert!(
        left + p <= TPD - spent + refill(t0),
        "the prompt was counted: {left}"
    );

    // Per-key counters, by name.
    let (_, _, text) = t.get(ALICE, "/metrics").await;
    let metric = |line: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(line)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{line} missing:\n{text}"))
    };
    assert_eq!(
        metric(r#"steward_key_rate_limited_total{key="alice",quota="tpd"}"#),
        2.0
    );
    assert_eq!(
        metric(r#"steward_key_rate_limited_total{key="bob",quota="tpd"}"#),
        0.0
    );
    assert!(metric(r#"steward_key_tokens_total{key="alice",kind="prompt"}"#) >= (p + p2) as f64);
    assert!(
        metric(r#"steward_key_tokens_total{key="alice",kind="completion"}"#) >= (c + c2) as f64
    );
    assert!(metric(r#"steward_key_requests_total{key="alice"}"#) >= 7.0);
    assert_eq!(metric(r#"steward_key_requests_total{key="bob"}"#), 1.0);
}

/// Alice's remaining tokens once a reply's charge has settled (at least
/// `floor`: a stream's state drops just after its last event is sent).
async fn settled(t: &Tenants, floor: u64) -> u64 {
    let deadline = Instant::now() + common::HANG_GUARD;
    loop {
        let left = t.remaining().await;
        if left >= floor {
            return left;
        }
        assert!(Instant::now() < deadline, "never settled: {left} < {floor}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_is_an_integer_on_every_generation_api() {
    let t = server().await;
    for bad in [
        json!("high"),
        json!(1.5),
        json!(2_147_483_648i64),
        json!([1]),
    ] {
        let body = common::chat_body("hi", json!({"max_tokens": 1, "priority": bad}));
        let (st, _, v) = t.post(BOB, "/v1/chat/completions", &body).await;
        common::assert_error(st, &v, 400, "invalid_value");
        assert_eq!(v["error"]["param"], "priority", "{v}");
        let body = json!({"model": "smol", "prompt": "hi", "max_tokens": 1, "priority": bad});
        let (st, _, v) = t.post(BOB, "/v1/completions", &body).await;
        assert_eq!((st, &v["error"]["param"]), (400, &json!("priority")), "{v}");
    }
    let msg = json!([{"role": "user", "content": "hi"}]);
    let body = json!({"model": "smol", "max_tokens": 1, "messages": msg, "priority": "x"});
    let (st, _, v) = t.post(BOB, "/v1/messages", &body).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("priority"),
        "{v}"
    );
    let body = json!({"model": "smol", "max_output_tokens": 16, "input": "hi", "priority": "x"});
    let (st, _, v) = t.post(BOB, "/v1/responses", &body).await;
    assert_eq!((st, &v["error"]["param"]), (400, &json!("priority")), "{v}");
    // In range, better or worse than the key's floor: served.
    for p in [-7, 0, 5, 9] {
        let body = common::chat_body("hi", json!({"max_tokens": 1, "priority": p}));
        let (st, _, v) = t.post(BOB, "/v1/chat/completions", &body).await;
        assert_eq!(st, 200, "{p}: {v}");
    }
}
