//! Engine integration tests against the real default GGUF (SmolLM2-135M
//! Instruct, Q4_1: a quantized model, so an AMX/SIGILL regression shows)
//! through llama.cpp. Token counts are kept small: the machine is slow.
//!
//! Outputs computed in other batch shapes, chunkings or cache states are
//! compared through `steward_engine::compare` (a parting only at a
//! near-tie); exactly only where the computation is provably the same.
//! Waits poll the engine's stats with a generous deadline (a hang guard,
//! never a claim about speed).

use crate::common;
use common::wait_for;
use std::time::Duration;

use steward_engine::compare::{self, Scored, TIE_NATS};
use steward_engine::{
    Engine, EngineConfig, EngineHandle, Event, Finished, GenerateRequest, SamplingParams, TokenId,
};

/// A greedy reference run: its tokens and their top-2 logprob rows.
async fn scored(h: &EngineHandle, mut r: GenerateRequest) -> Scored<TokenId> {
    r.logprobs = Some(2);
    compare::collect_scored(h.submit(r).unwrap())
        .await
        .unwrap()
        .1
}

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
    c.admit.max_seqs = max_seqs;
    c.admit.ctx_per_seq = 1024;
    c.step.prompt_budget = budget;
    c.step.max_prefill_seqs = 8;
    f(&mut c);
    common::start(c).await
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
        sampling,
        ..GenerateRequest::new("t", prompt, max_tokens)
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
/// step's rows are sampled and emitted on helper threads (`owner/rows.rs`);
/// and bursts (`owner/budget.rs::burst`): the 16 prompts are submitted in a
/// tight loop (microseconds) while a step takes milliseconds, so some step
/// sees more prompts waiting than sequences decoding and computes them
/// whole, with the outputs of their solo runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_is_deterministic_and_batched_equals_solo() {
    let h = engine_with(16, 64, |c| {
        c.sample.sample_threads = 4;
        c.step.burst_prefill = true;
    })
    .await;
    let mut solo = Vec::new();
    for p in PROMPTS {
        let toks = prompt_tokens(&h, p).await;
        solo.push(scored(&h, request(toks, 24, greedy())).await);
    }
    // Same request again, alone (its prompt now from the prefix cache).
    let toks = prompt_tokens(&h, PROMPTS[0]).await;
    let (_, again) = run(&h, request(toks, 24, greedy())).await;
    compare::assert_greedy_agree(&again.output_tokens, &solo[0], TIE_NATS, "repeat");
    // All eight at once, twice over, in one continuous batch.
    let mut prompts = Vec::new();
    for p in PROMPTS.iter().chain(&PROMPTS) {
        prompts.push(prompt_tokens(&h, p).await);
    }
    let bursts = h.stats().burst_steps;
    let streams: Vec<_> = prompts
        .into_iter()
        .map(|toks| h.submit(request(toks, 24, greedy())).unwrap())
        .collect();
    let mut batched = Vec::new();
    for s in streams {
        batched.push(s.collect().await.unwrap().1.output_tokens);
    }
    for (i, (a, b)) in solo.iter().cycle().zip(&batched).enumerate() {
        compare::assert_greedy_agree(b, a, TIE_NATS, &format!("stream {i}, batched"));
    }
    assert!(h.stats().steps > 0);
    assert!(
        h.stats().burst_steps > bursts,
        "the 16 prompts made a burst"
    );
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
    let one = scored(&big, request(toks.clone(), 16, greedy())).await;
    drop(big);
    let small = engine(2, 16).await;
    let (_, chunked) = run(&small, request(toks, 16, greedy())).await;
    compare::assert_greedy_agree(&chunked.output_tokens, &one, TIE_NATS, "chunked");
}

/// Eight seeded requests alone, then all eight at once with other work:
/// each draws its own numbers, so the batch changes nothing but a draw on
/// a border (`compare`: at most 3 of 8 may part; false failure < 1e-6 at a
/// 1e-2 parting chance each). A shared or reordered random stream parts
/// them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_sampling_is_independent_of_batch() {
    let h = engine(16, 64).await;
    let sampled = |seed| SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        seed,
        ..Default::default()
    };
    let toks = prompt_tokens(&h, "Tell me a story about a dragon.").await;
    let seeds: Vec<u64> = (0..8).map(|i| 1234 + 7 * i).collect();
    let mut alone = Vec::new();
    for &seed in &seeds {
        alone.push(
            run(&h, request(toks.clone(), 20, sampled(seed)))
                .await
                .1
                .output_tokens,
        );
    }
    let mut others = Vec::new();
    for (i, p) in PROMPTS.iter().enumerate().take(7) {
        let t = prompt_tokens(&h, p).await;
        others.push(h.submit(request(t, 20, sampled(i as u64))).unwrap());
    }
    let mine: Vec<_> = seeds
        .iter()
        .map(|&seed| h.submit(request(toks.clone(), 20, sampled(seed))).unwrap())
        .collect();
    let mut batched = Vec::new();
    for s in mine {
        batched.push(s.collect().await.unwrap().1.output_tokens);
    }
    for o in others {
        let _ = o.collect().await;
    }
    assert!(compare::seeded_false_failure(8, 3, 1e-2) < 1e-6);
    let pairs: Vec<(&[TokenId], &[TokenId])> = batched
        .iter()
        .zip(&alone)
        .map(|(b, a)| (b.as_slice(), a.as_slice()))
        .collect();
    compare::assert_seeded_agree(&pairs, 3, "seeded, batched vs alone");
    let distinct: std::collections::HashSet<&Vec<TokenId>> = alone.iter().collect();
    assert!(
        distinct.len() >= 4,
        "different seeds should (almost surely) sample differently: {} distinct of 8",
        distinct.len()
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
    // No prefix cache: both runs compute alone in the same shapes, so they
    // are identical up to the stop.
    let h = engine_with(2, 64, |c| c.admit.prefix_cache = false).await;
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
    // The unread request pauses one token past its reader (and is never
    // ended as a slow reader), so it cannot finish before the drop however
    // long the test thread is descheduled.
    let h = engine_with(2, 64, |c| {
        c.deliver.outbox_capacity = 2;
        c.deliver.max_lag_tokens = 1;
        c.deliver.slow_reader_timeout = None;
    })
    .await;
    let toks = prompt_tokens(&h, "Write a long essay about oceans.").await;
    let mut s = h.submit(request(toks.clone(), 200, greedy())).unwrap();
    // Wait for the first text, then walk away.
    loop {
        if let Some(Event::Text { .. }) = s.next().await {
            break;
        }
    }
    drop(s);
    wait_for(&h, "retired", |st| {
        st.requests_cancelled == 1 && st.running == 0 && st.kv_cells_used == 0
    })
    .await;
    // The engine still serves, and the slot is reusable.
    let (_, f) = run(&h, request(toks, 4, greedy())).await;
    assert_eq!(f.completion_tokens, 4);
    wait_for(&h, "finished", |st| st.requests_finished == 1).await;
    assert_eq!(h.stats().requests_cancelled, 1);
}

/// A long prompt arrives while four requests decode: it is prefilled in
/// chunks beside them, never alone. Structure, not speed (the stall is
/// measured in benchmarks): every step that computed prompt tokens after
/// the decoders were streaming also decoded all four, by the engine's step
/// records. Outputs agree with each request alone (`compare`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_prompt_does_not_freeze_decoders_and_outputs_match_solo() {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.admit.max_seqs = 5;
    c.admit.ctx_per_seq = 1800;
    c.step.prompt_budget = 64;
    c.step.max_prefill_seqs = 4;
    // The long prompt is computed in full each time (no cache hit).
    c.admit.prefix_cache = false;
    let h = Engine::start(c).expect("engine");
    assert!(h.wait_ready().await);
    let mut long_text = String::new();
    while long_text.split_whitespace().count() < 1350 {
        long_text
            .push_str("The keeper wrote down the weather, the ships and the birds every day. ");
    }
    let long = prompt_tokens(&h, &format!("Summarize: {long_text}")).await;
    assert!(
        (1400..1700).contains(&long.len()),
        "long prompt {}",
        long.len()
    );
    // Decoders outlast the long prefill by construction: one token per
    // step each, and the prefill takes ~len/60 steps.
    let decode_len = 2 * long.len() as u32 / 60 + 40;
    let decode_req = |p: Vec<TokenId>| {
        let mut r = request(p, decode_len, greedy());
        r.ignore_eos = true;
        r
    };
    // Solo references.
    let mut solo = Vec::new();
    let mut prompts = Vec::new();
    for p in &PROMPTS[..4] {
        let t = prompt_tokens(&h, p).await;
        solo.push(scored(&h, decode_req(t.clone())).await);
        prompts.push(t);
    }
    let long_solo = scored(&h, request(long.clone(), 4, greedy())).await;
    // Four decoders, then the long prompt once they are all streaming.
    let mut handles = Vec::new();
    let (started_tx, mut started_rx) = tokio::sync::mpsc::channel(4);
    for p in &prompts {
        let mut s = h.submit(decode_req(p.clone())).unwrap();
        let started_tx = started_tx.clone();
        handles.push(tokio::spawn(async move {
            let mut out = None;
            let mut started = false;
            while let Some(ev) = s.next().await {
                match ev {
                    Event::Text { .. } if !started => {
                        started = true;
                        let _ = started_tx.send(()).await;
                    }
                    Event::Done(f) => out = Some(f.output_tokens),
                    _ => {}
                }
            }
            out.expect("done")
        }));
    }
    for _ in 0..4 {
        started_rx.recv().await.unwrap();
    }
    // Every decoder has emitted, so every decoder's prompt is computed:
    // prompt steps numbered after this are the long prompt's.
    wait_for(&h, "four decoding", |st| {
        st.running == 4 && st.prefilling == 0
    })
    .await;
    let before = h.stats().steps;
    let (_, long_out) = run(&h, request(long.clone(), 4, greedy())).await;
    compare::assert_greedy_agree(&long_out.output_tokens, &long_solo, TIE_NATS, "long");
    let steps: Vec<_> = h
        .stats()
        .recent_steps
        .iter()
        .filter(|r| r.n > before && r.prompt > 0)
        .cloned()
        .collect();
    let computed: u64 = steps.iter().map(|r| u64::from(r.prompt)).sum();
    assert!(
        computed >= long.len() as u64 - 1,
        "the long prompt's chunks are all in the step records: {computed} of {}",
        long.len()
    );
    for r in &steps {
        assert_eq!(r.decode, 4, "a prompt step without every decoder: {r:?}");
    }
    for (i, hd) in handles.into_iter().enumerate() {
        let out = hd.await.unwrap();
        compare::assert_greedy_agree(&out, &solo[i], TIE_NATS, &format!("decoder {i}"));
    }
    wait_for(&h, "released", |st| {
        (st.permits, st.kv_cells_used, st.kv_cells_reserved) == (0, 0, 0)
    })
    .await;
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
    c.admit.max_seqs = 4;
    c.admit.ctx_per_seq = 256;
    c.model.n_gpu_layers = 99;
    let h = Engine::start(c).expect("engine starts");
    assert!(h.wait_ready().await, "the warm-up step failed");
    let plain = engine(1, 64).await;
    let p = prompt_tokens(&h, "Name a colour.").await;
    let (_, a) = run(&h, request(p.clone(), 8, greedy())).await;
    // Another pool size: other attention shapes.
    let b = scored(&plain, request(p, 8, greedy())).await;
    compare::assert_greedy_agree(&a.output_tokens, &b, TIE_NATS, "after the warm-up");
}

/// Aligned prompt chunks (`--chunk-align`, the GPU default with per-slot
/// streams): prompts started together are cut to multiples of 16 tokens
/// and their last pieces recomputed back to 16; greedy output equals each
/// prompt's output alone (one chunk: no alignment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aligned_chunks_equal_solo() {
    let h = engine_with(4, 512, |c| {
        c.step.chunk_align = 16;
        c.admit.prefix_cache = false;
    })
    .await;
    let mut prompts = Vec::new();
    for p in &PROMPTS[..4] {
        prompts.push(prompt_tokens(&h, p).await);
    }
    assert!(prompts.iter().any(|p| p.len() % 16 != 0), "uneven prompts");
    let mut solo = Vec::new();
    for p in &prompts {
        solo.push(scored(&h, request(p.clone(), 12, greedy())).await);
    }
    let computed = h.stats().prompt_tokens_total;
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| h.submit(request(p.clone(), 12, greedy())).unwrap())
        .collect();
    for (i, s) in streams.into_iter().enumerate() {
        let (_, f) = s.collect().await.unwrap();
        compare::assert_greedy_agree(&f.output_tokens, &solo[i], TIE_NATS, &format!("prompt {i}"));
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
        c.prepare.grammar_threads = 1;
        c.prepare.grammar_queue = 1;
        // A hang guard only: the machine may be loaded.
        c.prepare.grammar_timeout = Duration::from_secs(600);
    })
    .await;
    // Grammars that take a while to compile (thousands of alternatives),
    // each its own text.
    let lark = |k: usize| {
        let mut g = String::from("start: w\nw: ");
        for i in 0..3000 {
            if i > 0 {
                g.push_str(" | ");
            }
            g.push_str(&format!("\"word{k}x{i}x{}\"", i * 7919 % 10007));
        }
        Grammar::Lark(g)
    };
    let p = h.preparer();
    // All four are offered in one poll, in order: the first goes to the
    // thread or the queue, the next takes the queue's one place, and the
    // rest are refused at once (the thread could free the queue only by
    // finishing a whole compile within that poll). Tokenization, polled
    // last, answers while they are pending.
    let (a, b, c, d, toks) = tokio::join!(
        p.constraint(lark(0)),
        p.constraint(lark(1)),
        p.constraint(lark(2)),
        p.constraint(lark(3)),
        prompt_tokens(&h, "Still answering?"),
    );
    assert!(!toks.is_empty());
    let mut busy = 0;
    for c in [a, b, c, d] {
        match c.map(|_| ()) {
            Ok(()) => {}
            Err(PrepareError::GrammarBusy(_)) => busy += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(busy >= 1, "a full grammar queue refuses at once");
}
