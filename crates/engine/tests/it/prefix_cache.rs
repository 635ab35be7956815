//! Prefix cache on the real default model through llama.cpp: reused state
//! gives the greedy output of computing it, a different preceding context
//! is never reused, and sharing a running request's prefix (a whole-stream
//! copy on this runtime) matches a solo run.
//!
//! Reused state was computed in other shapes (another chunk, another batch)
//! than the uncached run's, so their outputs are compared through
//! `steward_engine::compare` (a parting only at a near-tie of the uncached
//! run); exactly only where the computation is the same. A request that
//! must still be running at a given moment is held there: its reader stops
//! and the engine pauses it at the lag bound (`held`). Waits poll the
//! engine's stats with a generous deadline (a hang guard).

use crate::common;
use common::wait_for;

use steward_engine::chat::ChatPrompt;
use steward_engine::compare::{self, Scored, TIE_NATS};
use steward_engine::{
    Engine, EngineConfig, EngineHandle, EngineStats, Event, Finished, GenerateRequest, TokenId,
};

async fn engine(prefix_cache: bool) -> EngineHandle {
    engine_with(prefix_cache, |_| {}).await
}

async fn engine_with(prefix_cache: bool, tweak: impl FnOnce(&mut EngineConfig)) -> EngineHandle {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.admit.max_seqs = 4;
    c.admit.ctx_per_seq = 1024;
    c.step.prompt_budget = 128;
    c.admit.prefix_cache = prefix_cache;
    c.admit.prefix_copy_min = 64;
    tweak(&mut c);
    common::start(c).await
}

/// A request whose reader stops stays admitted, paused at the lag bound,
/// for as long as the test needs: two events buffered, one token of lag,
/// no timeout. (Readers that keep reading are not held back.)
fn held(c: &mut EngineConfig) {
    c.deliver.outbox_capacity = 2;
    c.deliver.max_lag_tokens = 1;
    c.deliver.slow_reader_timeout = None;
}

/// Idle: nothing admitted or queued (the state size is sampled then).
fn idle(st: &EngineStats) -> bool {
    st.running == 0 && st.prefilling == 0 && st.waiting == 0 && st.kv_cells_used == 0
}

/// What llama.cpp holds (its own state size, each cell once) is the cached
/// prefixes the ledger counts, plus its few bytes of per-cell metadata
/// (position, sequence ids).
fn physical_matches_ledger(st: &EngineStats) -> bool {
    let ledger = st.kv_cells_cached * st.kv_bytes_per_cell;
    ledger > 0
        && st.kv_bytes_physical >= ledger
        && st.kv_bytes_physical <= ledger + 64 * st.kv_cells_cached
}

/// A greedy reference run: its text, end, and top-2 logprob rows.
async fn scored(
    h: &EngineHandle,
    prompt: Vec<TokenId>,
    max_tokens: u32,
) -> (String, Finished, Scored<TokenId>) {
    let mut r = request(prompt, max_tokens);
    r.logprobs = Some(2);
    let mut s = h.submit(r).unwrap();
    let mut text = String::new();
    let mut lps = Vec::new();
    while let Some(ev) = s.next().await {
        match ev {
            Event::Admitted => {}
            Event::Text {
                text: t, logprobs, ..
            } => {
                text.push_str(&t);
                lps.extend(logprobs);
            }
            Event::Done(f) => {
                let mut sc = Scored::from_logprobs(&lps);
                sc.tokens = f.output_tokens.clone();
                return (text, f, sc);
            }
            Event::Error(e) => panic!("{e}"),
        }
    }
    panic!("the stream ended without a result");
}

fn msg(role: &str, content: &str) -> serde_json::Value {
    serde_json::json!({"role": role, "content": content})
}

async fn chat(h: &EngineHandle, m: Vec<serde_json::Value>) -> Vec<TokenId> {
    h.preparer().chat(ChatPrompt::new(m)).await.unwrap().tokens
}

fn request(prompt: Vec<TokenId>, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        ignore_eos: true,
        ..GenerateRequest::greedy("p", prompt, max_tokens)
    }
}

async fn run(h: &EngineHandle, prompt: Vec<TokenId>, max_tokens: u32) -> (String, Finished) {
    h.submit(request(prompt, max_tokens))
        .unwrap()
        .collect()
        .await
        .unwrap()
}

fn system() -> String {
    "You are the harbour master's assistant. You answer questions about ships, tides, \
     weather and the lighthouse, briefly and precisely. "
        .repeat(6)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_state_gives_the_uncached_output_and_other_contexts_are_not_reused() {
    let plain = engine(false).await;
    let cached = engine(true).await;
    let first = vec![msg("system", &system()), msg("user", "When is high tide?")];
    let p1 = chat(&cached, first.clone()).await;
    assert!(p1.len() > 150, "{}", p1.len());
    let (want_text, want, want_scored) = scored(&plain, p1.clone(), 16).await;

    let (_, a) = run(&cached, p1.clone(), 16).await;
    assert_eq!(a.cached_tokens, 0, "cold cache");
    // Exactly: a cold cache computes what no cache does, the first request
    // of a fresh engine alone in the same chunks.
    assert_eq!(a.output_tokens, want.output_tokens);
    // The same prompt again: all but its last token come from the cache,
    // and the output is the one computed without it (the last token alone:
    // other shapes, so up to a near-tie).
    let (_, b) = run(&cached, p1.clone(), 16).await;
    assert_eq!(b.cached_tokens as usize, p1.len() - 1);
    compare::assert_greedy_agree(&b.output_tokens, &want_scored, TIE_NATS, "a full hit");

    // The next turn of the conversation reuses the whole first turn.
    let mut second = first.clone();
    second.push(msg("assistant", &want_text));
    second.push(msg("user", "And low tide?"));
    let p2 = chat(&cached, second).await;
    let (_, c) = run(&cached, p2.clone(), 12).await;
    assert!(
        c.cached_tokens as usize >= p1.len() - 1,
        "{} of {}",
        c.cached_tokens,
        p2.len()
    );
    let (_, _, c_plain) = scored(&plain, p2, 12).await;
    drop(plain);
    compare::assert_greedy_agree(&c.output_tokens, &c_plain, TIE_NATS, "the next turn");

    // The same question under a different system prompt: only the template's
    // first tokens match; the question's tokens are never reused.
    let other = vec![
        msg("system", "You are a cheerful pastry chef."),
        msg("user", "When is high tide?"),
    ];
    let p3 = chat(&cached, other).await;
    // (Its output is not compared: the few template tokens it reuses were
    // computed in a batch of another size, and llama.cpp's CPU kernels are
    // not bit-identical across batch sizes; see ARCHITECTURE.md.)
    // (The only cache entry is the least recently used, so its first
    // tokens may be reused; never more than the template's.)
    let (_, d) = run(&cached, p3.clone(), 8).await;
    assert!(d.cached_tokens < 8, "reused {} tokens", d.cached_tokens);

    let st = cached.stats();
    assert_eq!(st.prefix_lookups, 4);
    assert!((2..=3).contains(&st.prefix_hits), "{}", st.prefix_hits);
    assert!(st.prefix_reused_tokens as usize >= 2 * (p1.len() - 1));

    // Everything ended: what llama.cpp holds is what the ledger counts
    // (sampled once the owner is idle).
    let st = wait_for(&cached, "idle, llama.cpp's state as the ledger", |st| {
        idle(st) && physical_matches_ledger(st)
    })
    .await;
    assert_eq!(st.kv_cells_reserved, 0);
}

/// Two prompts under the same long system prompt, different questions.
async fn two_questions(h: &EngineHandle) -> (Vec<TokenId>, Vec<TokenId>) {
    let sys = system();
    let ask = |q: &str| vec![msg("system", &sys), msg("user", q)];
    (
        chat(h, ask("Describe the lighthouse.")).await,
        chat(h, ask("Which ships are due today?")).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_requests_prefix_is_shared_by_copy_and_matches_solo() {
    let plain = engine(false).await;
    let cached = engine_with(true, held).await;
    let (pa, pb) = two_questions(&cached).await;
    // A runs; once it decodes and its reader stops, it is held (paused),
    // and B arrives sharing A's long system prompt: A is running then,
    // whatever the timing.
    let mut a = cached.submit(request(pa.clone(), 40)).unwrap();
    loop {
        match a.next().await {
            Some(Event::Text { .. }) => break,
            Some(Event::Admitted) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    wait_for(&cached, "A held", |st| st.paused == 1).await;
    let (_, b) = run(&cached, pb.clone(), 16).await;
    let shared = pa.iter().zip(&pb).take_while(|(x, y)| x == y).count();
    assert!(shared >= 64, "{shared}");
    assert_eq!(b.cached_tokens as usize, shared);
    assert_eq!(cached.stats().prefix_copies, 1);
    let (_, _, b_solo) = scored(&plain, pb, 16).await;
    compare::assert_greedy_agree(&b.output_tokens, &b_solo, TIE_NATS, "B beside A");
    while a.next().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_prefix_restored_from_host_memory_gives_the_uncached_output() {
    let plain = engine(false).await;
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.admit.max_seqs = 1;
    c.admit.ctx_per_seq = 1024;
    c.step.prompt_budget = 128;
    c.admit.prefix_cache = true;
    c.admit.prefix_host_bytes = 256 << 20;
    c.admit.prefix_host_min = 64;
    let h = Engine::start(c).expect("engine starts");
    assert!(h.wait_ready().await);
    let p1 = chat(
        &h,
        vec![msg("system", &system()), msg("user", "When is high tide?")],
    )
    .await;
    let other = chat(&h, vec![msg("user", "Name three birds.")]).await;
    let (_, _, want) = scored(&plain, p1.clone(), 16).await;
    run(&h, p1.clone(), 16).await;
    // One slot: the other prompt evicts the first, which is saved to host
    // memory (llama.cpp's per-sequence state) ...
    run(&h, other, 4).await;
    let st = h.stats();
    assert_eq!(st.prefix_spills, 1, "{st:?}");
    assert!(st.prefix_host_bytes > 0);
    // ... and restored for the same prompt: nothing recomputed but the last
    // token, and the output computed without any cache.
    let (_, b) = run(&h, p1.clone(), 16).await;
    assert_eq!(b.cached_tokens as usize, p1.len() - 1);
    compare::assert_greedy_agree(&b.output_tokens, &want, TIE_NATS, "restored from the host");
    let st = h.stats();
    assert_eq!(st.prefix_restores, 1);
    assert_eq!(st.prefix_restored_tokens as usize, p1.len() - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_unified_pool_a_hit_is_held_once_and_a_cancel_releases_only_its_own_cells() {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.admit.max_seqs = 4;
    c.admit.ctx_per_seq = 1024;
    c.step.prompt_budget = 128;
    c.admit.prefix_cache = true;
    c.model.kv_unified = true;
    held(&mut c);
    let h = Engine::start(c).expect("engine starts");
    assert!(h.wait_ready().await);
    let (pa, pb) = two_questions(&h).await;
    let shared = pa.iter().zip(&pb).take_while(|(x, y)| x == y).count();
    assert!(shared > 100, "{shared}");
    let (_, a) = run(&h, pa.clone(), 8).await;
    let a_cells = (pa.len() + 7) as u64;
    // B shares A's cached prefix (zero-copy in one pool) and decodes; its
    // reader stops, so it is held there (paused) while the test looks.
    let mut rb = request(pb.clone(), 64);
    rb.id = "b".into();
    let mut b = h.submit(rb).unwrap();
    loop {
        match b.next().await {
            Some(Event::Text { .. }) => break,
            Some(Event::Admitted) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let st = wait_for(&h, "B held while decoding", |st| {
        st.running == 1 && st.paused == 1 && st.kv_cells_used > 0
    })
    .await;
    // Held once: A's cells plus B's own, not B's whole prompt again.
    let held = st.kv_cells_used + st.kv_cells_cached;
    assert!(
        held < a_cells + pb.len() as u64,
        "held {held}: the shared prefix is counted twice"
    );
    assert!(
        st.kv_cells_used >= shared as u64,
        "B reads the shared cells"
    );
    // Cancelled while decoding: only B's own cells go, and what llama.cpp
    // holds is what the ledger counts (sampled once the owner is idle).
    assert!(h.cancel("b"));
    while b.next().await.is_some() {}
    let st = wait_for(&h, "B released", |st| {
        idle(st) && st.requests_cancelled == 1
    })
    .await;
    assert_eq!(st.cancelled_by_state, [0, 0, 1], "cancelled while decoding");
    assert_eq!(st.kv_cells_cached, a_cells, "A's entry, whole");
    let st = wait_for(
        &h,
        "llama.cpp's state as the ledger",
        physical_matches_ledger,
    )
    .await;
    assert_eq!(st.kv_cells_cached, a_cells);
    // A's cells were never touched: its prompt again reuses all but the
    // last token.
    let (_, again) = run(&h, pa.clone(), 8).await;
    assert_eq!(again.cached_tokens as usize, pa.len() - 1);
    assert_eq!(a.cached_tokens, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_prefix_outlives_eviction_until_its_hold_ends() {
    // No host tier: only the pin keeps the state once its slot is reused.
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.model.n_threads = 1;
    c.admit.max_seqs = 1;
    c.admit.ctx_per_seq = 1024;
    c.step.prompt_budget = 128;
    c.admit.prefix_host_bytes = 0;
    c.admit.prefix_host_min = 64;
    c.admit.pin_bytes = 64 << 20;
    let h = common::start(c).await;
    let sys = msg("system", &system());
    let p1 = chat(&h, vec![sys.clone(), msg("user", "When is high tide?")]).await;
    let p2 = chat(&h, vec![sys, msg("user", "Is the lighthouse lit?")]).await;
    let other = chat(&h, vec![msg("user", "Name three birds.")]).await;
    // The pin covers the system prompt (Anthropic's breakpoint on it).
    let shared = p1.iter().zip(&p2).take_while(|(x, y)| x == y).count();
    let pin = steward_engine::Pin {
        ttl: std::time::Duration::from_secs(2),
        tokens: Some(shared),
    };
    let mut r = request(p1.clone(), 4);
    r.pin = Some(pin);
    let (_, a) = h.submit(r).unwrap().collect().await.unwrap();
    assert_eq!(a.pinned_tokens as usize, shared, "{a:?}");
    // The slot is taken by another prompt; the pin holds the state.
    run(&h, other, 4).await;
    let st = h.stats();
    assert_eq!((st.pinned_entries, st.pins_created), (1, 1), "{st:?}");
    // A prompt sharing the system prompt restores it from the pin; asking
    // for the same pin again creates nothing (its hold is extended).
    let mut r = request(p2.clone(), 4);
    r.pin = Some(pin);
    let (_, b) = h.submit(r).unwrap().collect().await.unwrap();
    assert!(
        shared > 100 && b.cached_tokens as usize >= shared - 1,
        "{b:?}"
    );
    assert_eq!(b.pinned_tokens, 0, "already pinned: a read");
    let st = h.stats();
    assert_eq!(
        (st.prefix_restores, st.pins_created, st.pinned_entries),
        (1, 1, 1)
    );
    // Idle, the hold ends and the pin's memory is released (the alarm
    // wakes the owner; no request arrives).
    let st = wait_for(&h, "the pin's hold to end", |s| s.pins_expired >= 1).await;
    assert_eq!((st.pinned_entries, st.pinned_bytes), (0, 0), "{st:?}");
}
