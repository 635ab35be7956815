//! Models whose memory cannot be cut anywhere, through the real runtime:
//! Gemma 3 270M (a real sliding-window model: window 512, llama.cpp's SWA
//! cache of window + ubatch cells per slot) and random-weight GGUFs of a
//! small-window Gemma 3, Mamba-2, RWKV-7 (recurrent), LFM2 and
//! Granite-4.0-H (hybrid) from `scripts/gen-random-gguf.py arch`
//! (`scripts/test.sh` writes them to `target/arch-ggufs/`). With the prefix
//! cache on, greedy output equals the cache-off output for requests that
//! repeat, extend, branch, follow a decode that ran past the window, and
//! follow a request cancelled mid-decode; the ledger counts what llama.cpp
//! holds, per layer kind.
//!
//! State reused from the cache (or restored from a checkpoint or the host
//! tier) was computed in other shapes than the cache-off run's, so outputs
//! are compared through `steward_engine::compare`: equal, or parted at a
//! near-tie of the cache-off run (`TIE_NATS`). Waits poll the engine's
//! stats with a generous deadline (a hang guard).

use crate::common;
use common::wait_for;
use std::path::PathBuf;

use steward_engine::compare::{self, Scored, TIE_NATS};
use steward_engine::{
    Engine, EngineConfig, EngineHandle, EngineStats, Event, GenerateRequest, TokenId,
};

fn gemma() -> PathBuf {
    steward_engine::fetch::ensure_known_model("gemma3-270m").expect("Gemma 3 270M")
}

fn arch(name: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/arch-ggufs")
        .join(format!("{name}.gguf"));
    common::fixture(p, "scripts/test-fixtures.sh")
}

async fn engine(path: PathBuf, prefix_cache: bool, ctx: u32) -> EngineHandle {
    engine_with(path, prefix_cache, ctx, false).await
}

async fn engine_with(path: PathBuf, prefix_cache: bool, ctx: u32, unified: bool) -> EngineHandle {
    let mut c = EngineConfig::new(path);
    c.model.kv_unified = unified;
    if ctx <= 1024 {
        // The random models: llama.cpp's window cache (window + ubatch,
        // padded to 256) is then 256 cells for the 32-token window of the
        // random Gemma 3, so a 300-token decode overwrites old cells.
        c.model.n_ubatch = 64;
    }
    c.admit.max_seqs = 2;
    c.admit.ctx_per_seq = ctx;
    c.step.prompt_budget = 512;
    c.admit.prefix_cache = prefix_cache;
    c.admit.checkpoint_min_tokens = 16;
    c.admit.checkpoint_interval = 128;
    c.admit.prefix_host_bytes = 64 << 20;
    c.admit.prefix_host_min = 32;
    c.model.progress = false;
    // A request whose reader stops is held at the lag bound (paused) until
    // it is dropped: `cancelled` then cancels it mid-decode whatever the
    // timing. (Readers that keep reading are not held back.)
    c.deliver.outbox_capacity = 2;
    c.deliver.max_lag_tokens = 1;
    c.deliver.slow_reader_timeout = None;
    common::start(c).await
}

fn request(prompt: Vec<TokenId>, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        ignore_eos: true,
        ..GenerateRequest::greedy("w", prompt, max_tokens)
    }
}

async fn run(h: &EngineHandle, prompt: &[TokenId], n: u32) -> (Vec<TokenId>, u32) {
    let (_, f) = h
        .submit(request(prompt.to_vec(), n))
        .unwrap()
        .collect()
        .await
        .unwrap();
    (f.output_tokens, f.cached_tokens)
}

/// A greedy run with the top-2 logprobs of every token (a reference).
async fn run_lp(h: &EngineHandle, prompt: &[TokenId], n: u32) -> Scored<TokenId> {
    let mut r = request(prompt.to_vec(), n);
    r.logprobs = Some(2);
    compare::collect_scored(h.submit(r).unwrap())
        .await
        .unwrap()
        .1
}

/// A request dropped after its first tokens, while it decodes (its reader
/// gone, it is held at the lag bound: it cannot end first); the engine
/// cancels it.
async fn cancelled(h: &EngineHandle, prompt: &[TokenId]) {
    let before = h.stats().requests_cancelled;
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
    drop(s);
    wait_for(h, "cancelled", |st| st.requests_cancelled == before + 1).await;
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

/// One step of a scenario: a prompt (built from earlier outputs) and how
/// many tokens to generate; `long` steps run past the window and are not
/// compared themselves (a long greedy run may part at a near-tie, the
/// state having been computed in other batch shapes), only what follows.
struct Step {
    prompt: Vec<TokenId>,
    n: u32,
    compare: bool,
    cancel_first: bool,
    /// The prompt follows this earlier step's prompt and output (the next
    /// turn of that conversation).
    extends: Option<usize>,
}

/// Repeat, next turn, branch of the last line, a decode past the window
/// then a repeat, an extension and a shorter prefix, a cancel then the
/// same prompt and its extension, two unrelated prompts (the two slots'
/// entries go to the host tier) then the extension again (restored).
fn scenario(base: &[TokenId], branch: &[TokenId], short: u32, long: u32) -> Vec<Step> {
    let s = |prompt: &[TokenId], n, compare, cancel_first| Step {
        prompt: prompt.to_vec(),
        n,
        compare,
        cancel_first,
        extends: None,
    };
    // Longer than the entries they displace: the cache evicts those.
    let other = |from: usize| [&base[from..], base].concat();
    let tail: Vec<TokenId> = base[base.len() / 2..base.len() / 2 + 8].to_vec();
    let ext = [base, &tail].concat();
    vec![
        s(base, short, true, false),
        s(base, short, true, false),
        s(&ext, short, true, false),
        s(branch, short, true, false),
        s(base, long, false, false),
        s(base, short, true, false),
        s(&ext, short, true, false),
        s(&base[..base.len() * 3 / 4], short, true, false),
        s(&ext, short, true, true),
        s(&[&ext[..], &tail].concat(), short, true, false),
        s(&other(base.len() / 3), short, true, false),
        s(&other(base.len() / 2), short, true, false),
        Step {
            extends: Some(9),
            ..s(&tail, short, true, false)
        },
    ]
}

/// Runs the scenario (with each step's prompt followed by the previous
/// step's output when `turns`) cache off, then on; returns the prompt
/// tokens the cache-on run reused.
async fn on_equals_off(path: PathBuf, ctx: u32, steps: Vec<Step>) -> (u32, EngineStats) {
    on_equals_off_with(path, ctx, steps, false).await
}

async fn on_equals_off_with(
    path: PathBuf,
    ctx: u32,
    steps: Vec<Step>,
    unified: bool,
) -> (u32, EngineStats) {
    let mut want: Vec<Scored<TokenId>> = Vec::new();
    let mut prompts: Vec<Vec<TokenId>> = Vec::new();
    let off = engine(path.clone(), false, ctx).await;
    for st in &steps {
        let p = match st.extends {
            Some(j) => [&prompts[j][..], &want[j].tokens, &st.prompt].concat(),
            None => st.prompt.clone(),
        };
        want.push(run_lp(&off, &p, st.n).await);
        prompts.push(p);
    }
    let _ = tokio::task::spawn_blocking(move || off.stop()).await;
    let on = engine_with(path.clone(), true, ctx, unified).await;
    let mut reused = 0;
    for (i, st) in steps.iter().enumerate() {
        if st.cancel_first {
            cancelled(&on, &prompts[i]).await;
        }
        let (got, cached) = run(&on, &prompts[i], st.n).await;
        reused += cached;
        if st.compare {
            compare::assert_greedy_agree(
                &got,
                &want[i],
                TIE_NATS,
                &format!(
                    "{}: step {i} ({} tokens, {cached} reused)",
                    path.display(),
                    prompts[i].len()
                ),
            );
        }
    }
    let stats = on.stats();
    let _ = tokio::task::spawn_blocking(move || on.stop()).await;
    (reused, stats)
}

async fn tokens(path: PathBuf, text: &str) -> Vec<TokenId> {
    let h = engine(path, false, 512).await;
    let t = h.preparer().text(text.to_string()).await.unwrap();
    let _ = tokio::task::spawn_blocking(move || h.stop()).await;
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemma3_prefix_cache_on_equals_off_past_the_window() {
    let base = tokens(gemma(), &log_text(70)).await;
    let branch = tokens(
        gemma(),
        &format!("{}Entry 69: the lamp failed.\n", log_text(69)),
    )
    .await;
    assert!(
        base.len() > 1200,
        "{} tokens: past the 512-token window",
        base.len()
    );
    // 600 tokens past the prompt: the slot's window cells before the
    // prompt's end are overwritten (1024 cells per slot).
    let (reused, st) = on_equals_off(gemma(), 4096, scenario(&base, &branch, 12, 600)).await;
    assert_eq!(st.memory_kind, "sliding_window");
    assert!(reused > 5000, "the cache was used: {reused} tokens reused");
    assert!(st.checkpoint_restores >= 1, "{st:?}");
    assert!(
        st.prefix_restores >= 1,
        "restored from the host tier: {st:?}"
    );
}

/// Two sequences in one batch give what each gives alone (up to a
/// near-tie: other shapes): the model's state batches (served with several
/// slots).
async fn batched_equals_alone(path: PathBuf, a: &[TokenId], b: &[TokenId]) {
    let h = engine(path.clone(), false, 1024).await;
    let alone = (run_lp(&h, a, 24).await, run_lp(&h, b, 24).await);
    let together = tokio::join!(run(&h, a, 24), run(&h, b, 24));
    let what = |x: &str| format!("{}: {x} batched vs alone", path.display());
    compare::assert_greedy_agree(&together.0 .0, &alone.0, TIE_NATS, &what("a"));
    compare::assert_greedy_agree(&together.1 .0, &alone.1, TIE_NATS, &what("b"));
    let _ = tokio::task::spawn_blocking(move || h.stop()).await;
}

/// Two requests sharing only a long system prompt: the second restarts
/// from a checkpoint inside the shared part (taken every 128 tokens at a
/// chunk's end), with the output of a cold run.
async fn shared_system_prompt(path: PathBuf, base: &[TokenId]) {
    let a = [base, &base[5..15]].concat();
    let b = [base, &base[40..50]].concat();
    let off = engine(path.clone(), false, 1024).await;
    let want = run_lp(&off, &b, 12).await;
    let _ = tokio::task::spawn_blocking(move || off.stop()).await;
    let on = engine(path.clone(), true, 1024).await;
    run(&on, &a, 12).await;
    let (got, cached) = run(&on, &b, 12).await;
    compare::assert_greedy_agree(&got, &want, TIE_NATS, &path.display().to_string());
    assert!(
        cached >= 128 && cached as usize <= base.len(),
        "{}: {cached} reused of a {}-token shared prefix",
        path.display(),
        base.len()
    );
    let _ = tokio::task::spawn_blocking(move || on.stop()).await;
}

async fn random_arch(name: &str, kind: &str) {
    let Some(path) = arch(name) else { return };
    let base = tokens(path.clone(), &log_text(12)).await;
    batched_equals_alone(path.clone(), &base, &base[10..]).await;
    shared_system_prompt(path.clone(), &base).await;
    let mut branch = base[..base.len() - 10].to_vec();
    branch.extend(&base[20..28]);
    let (reused, st) = on_equals_off(path, 1024, scenario(&base, &branch, 12, 300)).await;
    assert_eq!(st.memory_kind, kind);
    assert!(reused > base.len() as u32, "{name}: {reused} tokens reused");
    assert!(
        st.prefix_restores >= 1,
        "{name}: restored from the host tier: {st:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_gemma3_small_window() {
    random_arch("gemma3", "sliding_window").await;
}

/// One KV pool for every slot (`--kv-unified`): a slot's step may overwrite
/// another idle slot's old window cells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_gemma3_small_window_in_a_unified_pool() {
    let Some(path) = arch("gemma3") else { return };
    let base = tokens(path.clone(), &log_text(12)).await;
    let mut branch = base[..base.len() - 10].to_vec();
    branch.extend(&base[20..28]);
    let steps = scenario(&base, &branch, 12, 300);
    let (reused, st) = on_equals_off_with(path, 1024, steps, true).await;
    assert_eq!(st.memory_kind, "sliding_window");
    assert!(reused > base.len() as u32, "{reused} tokens reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_mamba2() {
    random_arch("mamba2", "recurrent").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_rwkv7() {
    random_arch("rwkv7", "recurrent").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_lfm2_hybrid() {
    random_arch("lfm2", "hybrid").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_granite_hybrid() {
    random_arch("granitehybrid", "hybrid").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_counts_what_llama_cpp_holds_per_layer_kind() {
    let path = gemma();
    let h = engine(path.clone(), true, 4096).await;
    let p = h.preparer().text(log_text(70)).await.unwrap();
    let _ = run(&h, &p, 16).await;
    // Idle: llama.cpp's state size is sampled then (and stays: the owner
    // waits for the next command).
    let st = wait_for(&h, "idle with the prompt cached", |st| {
        st.running == 0
            && st.prefilling == 0
            && st.waiting == 0
            && st.kv_cells_used == 0
            && st.kv_cells_cached > 0
            && st.kv_bytes_physical > 0
    })
    .await;
    // Gemma 3 270M: 18 layers, K and V of 256 per KV head, f16; 3 layers
    // attend to everything, 15 to a 512-token window.
    let layer = 2 * 256 * 2;
    assert!(
        (3 * layer..3 * layer + 32).contains(&st.kv_bytes_per_cell),
        "{st:?}"
    );
    assert!(
        (15 * layer..15 * layer + 32).contains(&st.window_bytes_per_cell),
        "{st:?}"
    );
    assert!(
        st.window_cells_held > 0 && st.window_cells_held < st.kv_cells_cached,
        "the window holds fewer cells than the prompt: {} of {}",
        st.window_cells_held,
        st.kv_cells_cached
    );
    let ledger =
        st.kv_cells_cached * st.kv_bytes_per_cell + st.window_cells_held * st.window_bytes_per_cell;
    assert!(
        st.kv_bytes_physical + 4096 >= ledger && st.kv_bytes_physical <= ledger + 4096,
        "llama.cpp holds {} bytes, the ledger counts {ledger}",
        st.kv_bytes_physical
    );
    // The memory ledger: the pool holds the per-token cells (3 layers) and
    // the window layers' 1,024 cells per slot; its terms add up.
    let l = h.ledger();
    assert_eq!(l.sum(), l.rss, "{l:?}");
    assert_eq!(
        l.kv_pool,
        l.live_state + l.reserved_growth + l.kv_free + l.cached_prefixes + l.window_state,
        "{l:?}"
    );
    let slots = st.slots_total as u64;
    let want = slots * (4096 * st.kv_bytes_per_cell + 1024 * st.window_bytes_per_cell);
    assert_eq!(l.kv_pool, want, "{l:?}");
    assert!(l.window_state > 0 && l.checkpoints > 0, "{l:?}");
    let _ = tokio::task::spawn_blocking(move || h.stop()).await;
}

/// `--memory-budget` sizes slots by what each layer kind holds: a budget
/// that fits 4 slots of Gemma 3 270M if every layer kept every cell fits
/// more than twice as many with its 15 window layers at 1,024 cells each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_budget_counts_window_layers_at_their_size() {
    let path = gemma();
    let weights = std::fs::metadata(&path).unwrap().len();
    let ctx = 4096u64;
    let full_slot = ctx * 18 * 2 * 256 * 2;
    let mut c = EngineConfig::new(path);
    c.admit.max_seqs = 16;
    c.admit.ctx_per_seq = ctx as u32;
    c.model.progress = false;
    c.admit.prefix_host_bytes = 0;
    c.admit.checkpoint_bytes = 0;
    c.admit.memory_budget = Some(weights + (256 << 20) + 4 * full_slot);
    let h = Engine::start(c).expect("engine starts");
    assert!(h.wait_ready().await);
    let slots = h.stats().slots_total;
    assert!((9..16).contains(&slots), "{slots} slots fit");
    let _ = tokio::task::spawn_blocking(move || h.stop()).await;
}
