//! [4/8] over HTTP against the real model: clients that leave (mid-decode,
//! mid-prefill) cost nothing after they leave and do not disturb the others;
//! a slow reader is paused, bounded, and does not slow the fast ones.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use steward_engine::{Engine, EngineConfig, EngineHandle};
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
    c.served_name = "smol".into();
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

/// Greedy tokens of a streamed request, read to the end.
async fn stream_tokens(client: &reqwest::Client, base: &str, b: &Value) -> Vec<String> {
    let raw = client
        .post(format!("{base}/v1/chat/completions"))
        .json(b)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut toks = Vec::new();
    for line in raw.lines() {
        if let Some(d) = line.strip_prefix("data: ") {
            if let Ok(v) = serde_json::from_str::<Value>(d) {
                if let Some(c) = v["choices"][0]["logprobs"]["content"].as_array() {
                    toks.extend(
                        c.iter()
                            .map(|x| x["token"].as_str().unwrap_or("").to_string()),
                    );
                }
            }
        }
    }
    toks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_leaving_mid_decode_and_mid_prefill_cost_nothing_after() {
    let (base, engine) = start(|c| {
        c.max_seqs = 22;
        c.ctx_per_seq = 3300;
        c.prompt_budget = 64;
    })
    .await;
    let client = reqwest::Client::new();
    let keepers = ["Name three rivers.", "Describe the sea."];
    let mut solo = Vec::new();
    for k in keepers {
        solo.push(stream_tokens(&client, &base, &body(k, 40, true)).await);
    }
    // Two streams that stay, sixteen that leave after 20 chunks, four that
    // leave 0.2 s into a ~3,000-token prefill.
    let mut stay = Vec::new();
    for k in keepers {
        let (c, b, bd) = (client.clone(), base.clone(), body(k, 40, true));
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
            Instant::now()
        }));
    }
    let long = "The keeper wrote down the weather and the ships. ".repeat(270);
    for _ in 0..4 {
        let (c, b, l) = (client.clone(), base.clone(), long.clone());
        leavers.push(tokio::spawn(async move {
            let fut = c
                .post(format!("{b}/v1/chat/completions"))
                .json(&body(&l, 8, true))
                .send();
            let _ = tokio::time::timeout(Duration::from_millis(200), async {
                let mut r = fut.await.unwrap();
                assert_eq!(r.status(), 200, "long prompt accepted");
                while let Ok(Some(_)) = r.chunk().await {}
            })
            .await;
            Instant::now()
        }));
    }
    let mut last_close = Instant::now() - Duration::from_secs(100);
    for l in leavers {
        last_close = last_close.max(l.await.unwrap());
    }
    // Within a second of the last close, nothing of theirs is left.
    let deadline = last_close + Duration::from_secs(1);
    loop {
        let st = engine.stats();
        let alive = st.running + st.prefilling;
        if st.requests_cancelled == 20 && alive <= 2 && st.waiting == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "not retired within 1 s: {st:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for (i, h) in stay.into_iter().enumerate() {
        assert_eq!(
            h.await.unwrap(),
            solo[i],
            "stream {i} differs from its solo output"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let st = engine.stats();
        if st.running + st.prefilling == 0 && st.kv_cells_used == 0 && st.live_outboxes == 0 {
            assert_eq!(st.permits, 0);
            assert_eq!(st.kv_cells_reserved, 0);
            assert_eq!(st.prompt_tokens_after_cancel, 0);
            break;
        }
        assert!(Instant::now() < deadline, "not idle: {st:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

/// Mean time between chunks for `n` fast streams.
async fn fast_streams(client: &reqwest::Client, base: &str, n: usize) -> f64 {
    let mut hs = Vec::new();
    for i in 0..n {
        let (c, b) = (client.clone(), base.to_string());
        hs.push(tokio::spawn(async move {
            let t = Instant::now();
            let toks = stream_tokens(&c, &b, &body(&format!("Count to {i}."), 48, true)).await;
            t.elapsed().as_secs_f64() / toks.len().max(1) as f64
        }));
    }
    let mut total = 0.0;
    for h in hs {
        total += h.await.unwrap();
    }
    total / n as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_is_paused_and_does_not_slow_the_others() {
    let (base, engine) = start_with(
        |c| {
            c.max_seqs = 4;
            c.ctx_per_seq = 1024;
            c.outbox_capacity = 4;
            c.max_lag_tokens = 16;
        },
        Some(8192),
    )
    .await;
    let client = reqwest::Client::new();
    let alone = fast_streams(&client, &base, 3).await;
    // A raw client with a tiny receive window that reads 200 bytes a second.
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
    let slow = tokio::spawn(async move {
        let mut buf = [0u8; 200];
        for _ in 0..30 {
            let _ = conn.read(&mut buf).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        conn
    });
    // The slow request reaches its lag bound and pauses.
    let t = Instant::now();
    while engine.stats().paused == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "never paused: {:?}",
            engine.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let with_slow = fast_streams(&client, &base, 3).await;
    assert_eq!(engine.stats().paused, 1, "still paused, still bounded");
    // Sanity bound only (speed is compared in benchmarks, not tests).
    assert!(
        with_slow < alone * 2.0,
        "fast streams slowed from {alone:.4} to {with_slow:.4} s/token"
    );
    slow.abort();
    let t = Instant::now();
    loop {
        let st = engine.stats();
        if st.running + st.prefilling == 0 && st.live_outboxes == 0 && st.permits == 0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "not idle: {st:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
