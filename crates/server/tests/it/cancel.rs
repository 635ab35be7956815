//! [4/8] over HTTP against the real model: clients that leave (mid-decode,
//! mid-prefill) cost nothing after they leave and do not disturb the others;
//! a slow reader is paused, bounded, and does not hold back the fast ones.
//!
//! Structure, not speed: what "cost nothing" and "does not hold back" mean
//! here is read from the engine's counters and step records (the latencies
//! are measured in benchmarks). Waits poll under `common::HANG_GUARD`.

use crate::common::{self, HANG_GUARD};

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use steward_engine::compare::{self, Scored, TIE_NATS};
use steward_engine::{Engine, EngineConfig, EngineHandle, EngineStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn start(tweak: impl FnOnce(&mut EngineConfig)) -> (String, EngineHandle) {
    start_with(tweak, None).await
}

async fn start_with(
    tweak: impl FnOnce(&mut EngineConfig),
    sndbuf: Option<u32>,
) -> (String, EngineHandle) {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.model.served_name = "smol".into();
    tweak(&mut c);
    let engine = Engine::start(c).expect("engine");
    assert!(engine.wait_ready().await);
    let state = steward_server::AppState::new(engine.clone(), None);
    let listener = steward_server::bind("127.0.0.1:0".parse().unwrap(), sndbuf).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(steward_server::serve_forever(
        listener,
        state,
        Default::default(),
    ));
    (format!("http://{addr}"), engine)
}

fn body(content: &str, max_tokens: u32, stream: bool) -> Value {
    json!({"messages": [{"role": "user", "content": content}], "temperature": 0,
           "max_tokens": max_tokens, "ignore_eos": true, "stream": stream,
           "logprobs": true})
}

/// `body` with the top two alternatives of every token (a reference run).
fn scored_body(content: &str, max_tokens: u32) -> Value {
    let mut b = body(content, max_tokens, true);
    b["top_logprobs"] = json!(2);
    b
}

/// Greedy tokens (and their logprob rows) of a streamed request, read to
/// the end.
async fn stream_tokens(client: &reqwest::Client, base: &str, b: &Value) -> Scored<String> {
    let raw = client
        .post(format!("{base}/v1/chat/completions"))
        .json(b)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let chunks: Vec<Value> = raw
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    common::scored_stream(&chunks)
}

/// Polls the engine's stats until `done` holds.
async fn wait_for(engine: &EngineHandle, what: &str, done: impl Fn(&EngineStats) -> bool) {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let st = engine.stats();
        if done(&st) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: never happened: {st:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_leaving_mid_decode_and_mid_prefill_cost_nothing_after() {
    let (base, engine) = start(|c| {
        c.admit.max_seqs = 22;
        c.admit.ctx_per_seq = 3300;
        c.step.prompt_budget = 64;
    })
    .await;
    let client = reqwest::Client::new();
    let keepers = ["Name three rivers.", "Describe the sea."];
    let mut solo = Vec::new();
    for k in keepers {
        solo.push(stream_tokens(&client, &base, &scored_body(k, 40)).await);
    }
    // Two streams that stay, sixteen that leave after 20 chunks, four that
    // leave once admitted, while their ~3,000-token prompts prefill (a
    // streamed answer starts at admission; 47 steps of prompt follow).
    let mut stay = Vec::new();
    for k in keepers {
        let (c, b, bd) = (client.clone(), base.clone(), scored_body(k, 40));
        stay.push(tokio::spawn(
            async move { stream_tokens(&c, &b, &bd).await },
        ));
    }
    let mut leavers = Vec::new();
    for i in 0..16 {
        let (c, b) = (client.clone(), base.clone());
        leavers.push(tokio::spawn(async move {
            let mut r = c
                .post(format!("{b}/v1/chat/completions"))
                .json(&body(&format!("Tell story number {i}."), 300, true))
                .send()
                .await
                .unwrap();
            let mut chunks = 0;
            while chunks < 20 {
                match r.chunk().await {
                    Ok(Some(bytes)) => {
                        chunks += bytes.windows(6).filter(|w| w == b"data: ").count()
                    }
                    _ => break,
                }
            }
            drop(r);
        }));
    }
    let long = "The keeper wrote down the weather and the ships. ".repeat(270);
    for _ in 0..4 {
        let (c, b, l) = (client.clone(), base.clone(), long.clone());
        leavers.push(tokio::spawn(async move {
            // 100 tokens after the prompt: it cannot end before its client
            // hangs up just after admission.
            let r = c
                .post(format!("{b}/v1/chat/completions"))
                .json(&body(&l, 100, true))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "long prompt admitted");
            drop(r);
        }));
    }
    for l in leavers {
        l.await.unwrap();
    }
    // Every leaver retired (the latency is a benchmark's: a deadline here
    // only guards against a hang).
    wait_for(&engine, "the leavers retired", |st| {
        st.requests_cancelled == 20 && st.running + st.prefilling <= 2 && st.waiting == 0
    })
    .await;
    for (i, h) in stay.into_iter().enumerate() {
        // Batched with the leavers, their prompts from the cache: the solo
        // run's tokens up to a near-tie (`compare`).
        compare::assert_greedy_agree(
            &h.await.unwrap().tokens,
            &solo[i],
            TIE_NATS,
            &format!("stream {i} beside the leavers"),
        );
    }
    wait_for(&engine, "idle", |st| {
        st.running + st.prefilling == 0 && st.kv_cells_used == 0 && st.live_outboxes == 0
    })
    .await;
    let st = engine.stats();
    assert_eq!(st.permits, 0);
    assert_eq!(st.kv_cells_reserved, 0);
    // Nothing was computed for a client already gone.
    assert_eq!(st.prompt_tokens_after_cancel, 0);
    // The ledger is back at its idle level, and its terms still add up.
    let l = engine.ledger();
    assert_eq!(l.live_state, 0, "{l:?}");
    assert_eq!(l.reserved_growth, 0, "{l:?}");
    assert_eq!(l.kv_free + l.cached_prefixes, l.kv_pool, "{l:?}");
    assert_eq!(
        l.weights + l.kv_pool + l.compute_buffers + l.other,
        l.rss,
        "{l:?}"
    );
    let st = engine.stats();
    assert!(
        st.cancelled_by_state[2] >= 16,
        "{:?}",
        st.cancelled_by_state
    );
}

/// `n` fast streams run to the end; each one's token count.
async fn fast_streams(client: &reqwest::Client, base: &str, n: usize) -> Vec<usize> {
    let mut hs = Vec::new();
    for i in 0..n {
        let (c, b) = (client.clone(), base.to_string());
        hs.push(tokio::spawn(async move {
            stream_tokens(&c, &b, &body(&format!("Count to {i}."), 48, true))
                .await
                .tokens
                .len()
        }));
    }
    let mut out = Vec::new();
    for h in hs {
        out.push(h.await.unwrap());
    }
    out
}

/// A client that stops reading: its request pauses at the lag bound and
/// stays paused (no token decoded for it while its reader is away), and
/// the fast streams beside it run to their end in steps it takes no row
/// of. Then it hangs up and everything is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_is_paused_and_does_not_slow_the_others() {
    let (base, engine) = start_with(
        |c| {
            c.admit.max_seqs = 4;
            c.admit.ctx_per_seq = 1024;
            c.deliver.outbox_capacity = 4;
            c.deliver.max_lag_tokens = 16;
            // Paused for as long as the test needs (the timeout that ends
            // a paused reader has its own test on the fake backend).
            c.deliver.slow_reader_timeout = None;
        },
        Some(8192),
    )
    .await;
    let client = reqwest::Client::new();
    // A raw client with a tiny receive window that reads the answer's head,
    // then nothing.
    let addr = base.trim_start_matches("http://").parse().unwrap();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(2048).unwrap();
    let mut conn = sock.connect(addr).await.unwrap();
    let req = body("Write a very long story.", 900, true).to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{req}",
        req.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut first = [0u8; 64];
    let n = conn.read(&mut first).await.unwrap();
    assert!(
        first[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&first[..n])
    );
    // The slow request fills the socket and its outbox, reaches its lag
    // bound and pauses.
    wait_for(&engine, "the slow reader paused", |st| st.paused == 1).await;
    let slow_generated = |st: &EngineStats| {
        let paused: Vec<_> = st.live.iter().filter(|r| r.state == "paused").collect();
        assert_eq!(paused.len(), 1, "{:?}", st.live);
        paused[0].generated
    };
    let st = engine.stats();
    let (generated, steps) = (slow_generated(&st), st.steps);
    assert!(generated < 900, "{st:?}");
    let fast = fast_streams(&client, &base, 3).await;
    assert_eq!(fast, [48, 48, 48], "the fast streams ran to their end");
    let st = engine.stats();
    assert_eq!(st.paused, 1, "still paused");
    assert_eq!(
        slow_generated(&st),
        generated,
        "bounded: nothing decoded for a reader that is away"
    );
    let during: Vec<_> = st.recent_steps.iter().filter(|r| r.n > steps).collect();
    assert!(!during.is_empty(), "{st:?}");
    assert!(
        during.iter().all(|r| r.decode <= 3),
        "the paused request took a row: {during:?}"
    );
    drop(conn);
    wait_for(&engine, "idle after the slow client left", |st| {
        st.running + st.prefilling == 0 && st.live_outboxes == 0 && st.permits == 0
    })
    .await;
    assert_eq!(engine.stats().requests_cancelled, 1);
}
