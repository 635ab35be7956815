//! Engine integration tests against the real default GGUF (SmolLM2-135M
//! Instruct, Q4_1: a quantized model, so an AMX/SIGILL regression shows)
//! through llama.cpp. Token counts are kept small: the machine is slow.

use std::time::{Duration, Instant};

use steward_engine::{
    Engine, EngineConfig, EngineHandle, Event, Finished, GenerateRequest, SamplingParams, TokenId,
};

async fn engine(max_seqs: usize, budget: usize) -> EngineHandle {
    engine_with(max_seqs, budget, |_| {}).await
}

async fn engine_with(
    max_seqs: usize,
    budget: usize,
    f: impl FnOnce(&mut EngineConfig),
) -> EngineHandle {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.max_seqs = max_seqs;
    c.ctx_per_seq = 1024;
    c.prompt_budget = budget;
    c.max_prefill_seqs = 8;
    f(&mut c);
    let h = Engine::start(c).expect("engine starts");
    assert!(h.wait_ready().await);
    h
}

fn greedy() -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        ..Default::default()
    }
}

async fn prompt_tokens(h: &EngineHandle, text: &str) -> Vec<TokenId> {
    h.preparer()
        .chat(steward_engine::chat::ChatPrompt::new(vec![
            serde_json::json!({"role": "user", "content": text}),
        ]))
        .await
        .unwrap()
        .tokens
}

fn request(prompt: Vec<TokenId>, max_tokens: u32, sampling: SamplingParams) -> GenerateRequest {
    GenerateRequest {
        id: "t".into(),
        prompt,
        max_tokens,
        sampling,
        stop: vec![],
        ignore_eos: false,
        logprobs: None,
        prompt_logprobs: false,
        arrival: Instant::now(),
        tokenized: Instant::now(),
        deadline: None,
        constraint: None,
        markers: None,
        adapters: Vec::new(),
        speculative: None,
    }
}

async fn run(h: &EngineHandle, r: GenerateRequest) -> (String, Finished) {
    h.submit(r).unwrap().collect().await.unwrap()
}

const PROMPTS: [&str; 8] = [
    "What is the capital of France?",
    "Write a haiku about rain.",
    "Count from one to ten.",
    "Name three colors.",
    "What is 2 + 2?",
    "Describe a cat in one sentence.",
    "Give me a word that rhymes with blue.",
    "What day comes after Monday?",
];

/// Also the parallel output path: 16 streams decode together, so each
/// step's rows are sampled and emitted on helper threads (`core/rows.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_is_deterministic_and_batched_equals_solo() {
    let h = engine_with(16, 64, |c| c.sample_threads = 4).await;
    let mut solo = Vec::new();
    for p in PROMPTS {
        let toks = prompt_tokens(&h, p).await;
        let (_, f) = run(&h, request(toks, 24, greedy())).await;
        solo.push(f.output_tokens);
    }
    // Same request again, alone: identical.
    let toks = prompt_tokens(&h, PROMPTS[0]).await;
    let (_, again) = run(&h, request(toks, 24, greedy())).await;
    assert_eq!(again.output_tokens, solo[0], "greedy output must repeat");
    // All eight at once, twice over, in one continuous batch.
    let mut streams = Vec::new();
    for p in PROMPTS.iter().chain(&PROMPTS) {
        let toks = prompt_tokens(&h, p).await;
        streams.push(h.submit(request(toks, 24, greedy())).unwrap());
    }
    let mut batched = Vec::new();
    for s in streams {
        batched.push(s.collect().await.unwrap().1.output_tokens);
    }
    for (i, (a, b)) in solo.iter().cycle().zip(&batched).enumerate() {
        assert_eq!(a, b, "stream {i}: batched tokens differ from solo");
    }
    assert!(h.stats().steps > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_prefill_equals_single_chunk() {
    let text = "Summarize the following in one line: ".to_string()
        + &"The quick brown fox jumps over the lazy dog. ".repeat(8);
    let big = engine(2, 512).await;
    let toks = prompt_tokens(&big, &text).await;
    assert!(
        toks.len() > 64,
        "prompt long enough to chunk: {}",
        toks.len()
    );
    let (_, one) = run(&big, request(toks.clone(), 16, greedy())).await;
    drop(big);
    let small = engine(2, 16).await;
    let (_, chunked) = run(&small, request(toks, 16, greedy())).await;
    assert_eq!(one.output_tokens, chunked.output_tokens);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_sampling_is_independent_of_batch() {
    let h = engine(8, 64).await;
    let sampled = |seed| SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        seed,
        ..Default::default()
    };
    let toks = prompt_tokens(&h, "Tell me a story about a dragon.").await;
    let (_, alone) = run(&h, request(toks.clone(), 20, sampled(1234))).await;
    let mut others = Vec::new();
    for (i, p) in PROMPTS.iter().enumerate().take(7) {
        let t = prompt_tokens(&h, p).await;
        others.push(h.submit(request(t, 20, sampled(i as u64))).unwrap());
    }
    let mine = h.submit(request(toks.clone(), 20, sampled(1234))).unwrap();
    let (_, batched) = mine.collect().await.unwrap();
    for o in others {
        let _ = o.collect().await;
    }
    assert_eq!(alone.output_tokens, batched.output_tokens);
    let (_, other_seed) = run(&h, request(toks, 20, sampled(999))).await;
    assert_ne!(
        alone.output_tokens, other_seed.output_tokens,
        "a different seed should (almost surely) sample differently"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multibyte_text_streams_without_replacement_chars() {
    let h = engine(2, 64).await;
    for p in [
        "Repeat exactly: 🎉🎉🎉 🚀🚀🚀 😀😀😀",
        "请用中文回答：你好吗？",
    ] {
        let toks = prompt_tokens(&h, p).await;
        let mut s = h.submit(request(toks, 24, greedy())).unwrap();
        let mut text = String::new();
        let mut pieces = 0;
        loop {
            match s.next().await.unwrap() {
                Event::Text { text: t, .. } => {
                    assert!(!t.contains('\u{FFFD}'), "replacement char in {t:?}");
                    text.push_str(&t);
                    pieces += 1;
                }
                Event::Done(_) => break,
                Event::Error(e) => panic!("{e}"),
                Event::Admitted => {}
            }
        }
        assert!(pieces > 0);
        assert!(
            text.chars().any(|c| c.len_utf8() > 1),
            "expected multi-byte output for {p:?}, got {text:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_string_spanning_tokens_is_cut_exactly() {
    let h = engine(2, 64).await;
    let toks = prompt_tokens(&h, "Write a sentence about the sea.").await;
    let (full, f) = run(&h, request(toks.clone(), 24, greedy())).await;
    // Find a boundary between two tokens that both render text, and make a
    // stop string of the last char of one and the first char of the next.
    let pieces: Vec<String> = f
        .output_tokens
        .iter()
        .map(|&t| String::from_utf8_lossy(h.token_bytes(t)).into_owned())
        .collect();
    let mut stop = None;
    let mut offset = 0;
    for i in 2..pieces.len().saturating_sub(1) {
        offset += pieces[i - 1].len();
        let (a, b) = (&pieces[i], &pieces[i + 1]);
        if a.chars().count() >= 2 && !b.is_empty() {
            let tail: String = a
                .chars()
                .rev()
                .take(2)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let head: String = b.chars().take(1).collect();
            stop = Some(tail + &head);
            break;
        }
    }
    let _ = offset;
    let stop = stop.expect("a token boundary to stop at");
    let cut = full
        .find(&stop)
        .expect("stop string occurs in the full output");
    let mut r = request(toks, 24, greedy());
    r.stop = vec![stop.clone()];
    let (stopped, f2) = run(&h, r).await;
    assert_eq!(stopped, full[..cut], "stop {stop:?}");
    assert_eq!(f2.reason, steward_engine::FinishReason::Stop);
    assert!(!stopped.contains(&stop));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_stream_cancels_and_frees_the_slot() {
    let h = engine(2, 64).await;
    let toks = prompt_tokens(&h, "Write a long essay about oceans.").await;
    let mut s = h.submit(request(toks.clone(), 200, greedy())).unwrap();
    // Wait for the first text, then walk away.
    loop {
        if let Some(Event::Text { .. }) = s.next().await {
            break;
        }
    }
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = h.stats();
        if st.requests_cancelled == 1 && st.running == 0 && st.kv_cells_used == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "not retired: {st:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The engine still serves, and the slot is reusable.
    let (_, f) = run(&h, request(toks, 4, greedy())).await;
    assert_eq!(f.completion_tokens, 4);
    assert_eq!(h.stats().requests_finished, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_prompt_does_not_freeze_decoders_and_outputs_match_solo() {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.max_seqs = 5;
    c.ctx_per_seq = 3300;
    c.prompt_budget = 64;
    c.max_prefill_seqs = 4;
    let h = Engine::start(c).expect("engine");
    assert!(h.wait_ready().await);
    let mut long_text = String::new();
    while long_text.split_whitespace().count() < 2700 {
        long_text
            .push_str("The keeper wrote down the weather, the ships and the birds every day. ");
    }
    let long = prompt_tokens(&h, &format!("Summarize: {long_text}")).await;
    assert!(
        (2900..3200).contains(&long.len()),
        "long prompt {}",
        long.len()
    );
    let decode_req = |p: Vec<TokenId>| {
        let mut r = request(p, 120, greedy());
        r.ignore_eos = true;
        r
    };
    // Solo references.
    let mut solo = Vec::new();
    let mut prompts = Vec::new();
    for p in &PROMPTS[..4] {
        let t = prompt_tokens(&h, p).await;
        solo.push(run(&h, decode_req(t.clone())).await.1.output_tokens);
        prompts.push(t);
    }
    let long_solo = run(&h, request(long.clone(), 4, greedy()))
        .await
        .1
        .output_tokens;
    // Four decoders, then the long prompt once they are all streaming.
    let mut streams = Vec::new();
    for p in &prompts {
        streams.push(h.submit(decode_req(p.clone())).unwrap());
    }
    let mut handles = Vec::new();
    let (started_tx, mut started_rx) = tokio::sync::mpsc::channel(4);
    for mut s in streams {
        let started_tx = started_tx.clone();
        handles.push(tokio::spawn(async move {
            let mut times = Vec::new();
            let mut out = None;
            while let Some(ev) = s.next().await {
                match ev {
                    Event::Text { .. } => {
                        if times.is_empty() {
                            let _ = started_tx.send(()).await;
                        }
                        times.push(Instant::now());
                    }
                    Event::Done(f) => out = Some(f.output_tokens),
                    _ => {}
                }
            }
            (times, out.expect("done"))
        }));
    }
    for _ in 0..4 {
        started_rx.recv().await.unwrap();
    }
    let long_sent = Instant::now();
    let (_, long_out) = run(&h, request(long, 4, greedy())).await;
    let long_done = Instant::now();
    assert_eq!(
        long_out.output_tokens, long_solo,
        "long prompt output differs from solo"
    );
    for (i, hd) in handles.into_iter().enumerate() {
        let (times, out) = hd.await.unwrap();
        assert_eq!(out, solo[i], "decoder {i}: batched tokens differ from solo");
        let during: Vec<&Instant> = times
            .iter()
            .filter(|t| **t >= long_sent && **t <= long_done)
            .collect();
        assert!(
            !during.is_empty(),
            "decoder {i} produced nothing during the long prefill"
        );
        // Structure, not speed (the target is met in benchmarks): a decoder
        // frozen by the prefill would wait for all of it; relative, so a
        // loaded machine slows both alike.
        let prefill = long_done.duration_since(long_sent);
        for w in times.windows(2) {
            let gap = w[1].duration_since(w[0]);
            assert!(
                gap < prefill / 2,
                "decoder {i} stalled {gap:?} during a {prefill:?} prefill"
            );
        }
    }
    // Stats are published at the end of the owner's iteration: poll briefly.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let st = h.stats();
        if (st.permits, st.kv_cells_used, st.kv_cells_reserved) == (0, 0, 0) {
            break;
        }
        assert!(Instant::now() < deadline, "not released: {st:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logit_bias_bans_and_forces_tokens_on_the_real_model() {
    let h = engine(2, 64).await;
    let toks = prompt_tokens(&h, "What is the capital of France?").await;
    let (_, plain) = run(&h, request(toks.clone(), 4, greedy())).await;
    let first = plain.output_tokens[0];
    // -100 on the greedy choice: another token comes first.
    let banned = SamplingParams {
        logit_bias: vec![(first, -100.0)],
        ..greedy()
    };
    let (_, f) = run(&h, request(toks.clone(), 4, banned)).await;
    assert_ne!(f.output_tokens[0], first);
    assert!(!f.output_tokens.contains(&first));
    // +100 on an unlikely token: it is chosen every step.
    let forced = SamplingParams {
        logit_bias: vec![(1000, 100.0)],
        ..greedy()
    };
    let (_, f) = run(&h, request(toks, 4, forced)).await;
    assert_eq!(f.output_tokens, vec![1000; 4]);
}

/// The warm-up an offloaded model gets (a full-width prompt chunk, then a
/// decode step across every slot) runs through the same runtime on the CPU
/// (llama.cpp ignores the layer count without a GPU): the engine gets
/// ready, and the first request's output is the one a plain engine gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offloaded_warm_up_leaves_the_engine_ready_and_every_slot_empty() {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.max_seqs = 4;
    c.ctx_per_seq = 256;
    c.n_gpu_layers = 99;
    let h = Engine::start(c).expect("engine starts");
    assert!(h.wait_ready().await, "the warm-up step failed");
    let plain = engine(1, 64).await;
    let p = prompt_tokens(&h, "Name a colour.").await;
    let (_, a) = run(&h, request(p.clone(), 8, greedy())).await;
    let (_, b) = run(&plain, request(p, 8, greedy())).await;
    assert_eq!(a.output_tokens, b.output_tokens);
}

/// Aligned prompt chunks (`--chunk-align`, the GPU default with per-slot
/// streams): prompts started together are cut to multiples of 16 tokens
/// and their last pieces recomputed back to 16; greedy output equals each
/// prompt's output alone (one chunk: no alignment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aligned_chunks_equal_solo() {
    let h = engine_with(4, 512, |c| {
        c.chunk_align = 16;
        c.prefix_cache = false;
    })
    .await;
    let mut prompts = Vec::new();
    for p in &PROMPTS[..4] {
        prompts.push(prompt_tokens(&h, p).await);
    }
    assert!(prompts.iter().any(|p| p.len() % 16 != 0), "uneven prompts");
    let mut solo = Vec::new();
    for p in &prompts {
        solo.push(
            run(&h, request(p.clone(), 12, greedy()))
                .await
                .1
                .output_tokens,
        );
    }
    let computed = h.stats().prompt_tokens_total;
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| h.submit(request(p.clone(), 12, greedy())).unwrap())
        .collect();
    for (i, s) in streams.into_iter().enumerate() {
        let (_, f) = s.collect().await.unwrap();
        assert_eq!(f.output_tokens, solo[i], "prompt {i}");
    }
    // Last pieces recomputed back to the granule: more prompt tokens
    // computed than the prompts hold.
    let batch = h.stats().prompt_tokens_total - computed;
    let whole: usize = prompts.iter().map(Vec::len).sum();
    assert!(
        batch > whole as u64,
        "{batch} computed for {whole} prompt tokens"
    );
}

/// Grammar compiles have their own bounded pool: while it is full (compiles
/// queued past `grammar_queue` are refused at once), tokenization still
/// answers. (They shared the one tokenizer thread: a slow compile held up
/// every request.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grammar_compiles_do_not_hold_up_tokenization() {
    use steward_engine::constraint::Grammar;
    use steward_engine::PrepareError;
    let h = engine_with(1, 64, |c| {
        c.grammar_threads = 1;
        c.grammar_queue = 1;
    })
    .await;
    // A grammar that takes a while to compile (thousands of alternatives).
    let mut lark = String::from("start: w\nw: ");
    for i in 0..3000 {
        if i > 0 {
            lark.push_str(" | ");
        }
        lark.push_str(&format!("\"word{i}x{}\"", i * 7919 % 10007));
    }
    let compiles: Vec<_> = (0..4)
        .map(|_| {
            let h = h.clone();
            let g = Grammar::Lark(lark.clone());
            tokio::spawn(async move { h.preparer().constraint(g).await.map(|_| ()) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let toks = prompt_tokens(&h, "Still answering?").await;
    assert!(!toks.is_empty());
    let mut busy = 0;
    for c in compiles {
        match c.await.unwrap() {
            Ok(()) => {}
            Err(PrepareError::GrammarBusy(_)) => busy += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(busy >= 1, "a full grammar queue refuses at once");
}
