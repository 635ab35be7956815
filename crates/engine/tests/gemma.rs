//! Gemma 3 270M (a real sliding-window model, window 512, heads 256 wide on
//! a 640-wide model) through the real runtime: the ledger counts what
//! llama.cpp holds for its cells, and with the prefix cache on, short
//! greedy continuations equal the cache-off ones for prompts longer than
//! the window that repeat, extend, branch, and follow a request cancelled
//! mid-decode. (Longer greedy runs may part at near-ties: reused cells were
//! computed in other batch shapes; see ARCHITECTURE.md.)

use std::time::Instant;

use steward_engine::{
    Engine, EngineConfig, EngineHandle, Event, GenerateRequest, SamplingParams, TokenId,
};

async fn engine(prefix_cache: bool) -> EngineHandle {
    let path = steward_engine::fetch::ensure_known_model("gemma3-270m").expect("Gemma 3 270M");
    let mut c = EngineConfig::new(path);
    c.max_seqs = 2;
    c.ctx_per_seq = 4096;
    c.prompt_budget = 512;
    c.prefix_cache = prefix_cache;
    c.progress = false;
    let h = Engine::start(c).expect("engine starts");
    assert!(h.wait_ready().await);
    h
}

fn request(prompt: Vec<TokenId>, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        id: "w".into(),
        prompt,
        max_tokens,
        sampling: SamplingParams {
            temperature: 0.0,
            ..Default::default()
        },
        stop: vec![],
        ignore_eos: true,
        logprobs: None,
        prompt_logprobs: false,
        arrival: Instant::now(),
        tokenized: Instant::now(),
        deadline: None,
        constraint: None,
        markers: None,
    }
}

async fn run(h: &EngineHandle, prompt: &[TokenId]) -> (String, u32) {
    let (text, f) = h
        .submit(request(prompt.to_vec(), 16))
        .unwrap()
        .collect()
        .await
        .unwrap();
    (text, f.cached_tokens)
}

/// A request dropped after its first tokens (the engine cancels it).
async fn cancelled(h: &EngineHandle, prompt: &[TokenId]) {
    let mut s = h.submit(request(prompt.to_vec(), 64)).unwrap();
    let mut seen = 0;
    while let Some(e) = s.next().await {
        if matches!(e, Event::Text { .. }) {
            seen += 1;
            if seen >= 3 {
                break;
            }
        }
    }
}

fn log_text(lines: usize) -> String {
    (0..lines)
        .map(|i| {
            format!(
                "Entry {i}: the tide at pier {} rose {} centimetres before the lamp was lit.\n",
                i % 7,
                10 + i % 13
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_cache_on_equals_off_past_the_window() {
    let long = log_text(70);
    let prompts = [
        long.clone(),
        long.clone(),
        format!("{long}Summary:"),
        format!("{}Entry 69: the lamp failed.\n", log_text(69)),
        long.clone(),
    ];
    let off = engine(false).await;
    let tok = |t: &str| {
        let t = t.to_string();
        let h = off.clone();
        async move { h.preparer().text(t).await.unwrap() }
    };
    let mut ids = Vec::new();
    for p in &prompts {
        ids.push(tok(p).await);
    }
    assert!(
        ids[0].len() > 1200,
        "{} tokens: longer than the 512-token window",
        ids[0].len()
    );
    let mut want = Vec::new();
    for p in &ids {
        want.push(run(&off, p).await.0);
    }
    let _ = tokio::task::spawn_blocking(move || off.stop()).await;
    let on = engine(true).await;
    let mut reused = 0;
    for (i, p) in ids.iter().enumerate() {
        if i == 4 {
            // A request cancelled mid-decode before the last repeat.
            cancelled(&on, p).await;
        }
        let (got, cached) = run(&on, p).await;
        reused += cached;
        assert_eq!(
            got,
            want[i],
            "prompt {i} ({} tokens, {cached} reused)",
            p.len()
        );
    }
    assert!(reused > 1000, "the cache was used: {reused} tokens reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_counts_what_llama_cpp_holds() {
    let h = engine(true).await;
    let p = h.preparer().text(log_text(70)).await.unwrap();
    let _ = run(&h, &p).await;
    let t = Instant::now();
    let st = loop {
        let st = h.stats();
        if st.running == 0 && st.kv_cells_cached > 0 && st.kv_bytes_physical > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
            break h.stats();
        }
        assert!(t.elapsed().as_secs() < 10, "{st:?}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    // Two layers' K and V of 256 per KV head, f16, 18 layers: 18,432 bytes
    // a cell (n_embd / n_head would give 11,520 and undercount by 37%).
    assert_eq!(st.kv_bytes_per_cell, 18 * 2 * 256 * 2);
    let ledger = st.kv_cells_cached * st.kv_bytes_per_cell;
    assert!(
        st.kv_bytes_physical >= ledger && st.kv_bytes_physical <= ledger + 64 * st.kv_cells_cached,
        "llama.cpp holds {} bytes, the ledger counts {ledger} ({} cells)",
        st.kv_bytes_physical,
        st.kv_cells_cached
    );
}
