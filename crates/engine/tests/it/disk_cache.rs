//! The prompt cache's disk tier through the real runtime: a conversation's
//! state, written when its engine stops, is found by a new engine on the
//! same directory and restored for the next turn (its `cached_tokens` cover
//! the history), whose greedy output equals a cold engine's (the near-tie
//! rule: the restored state was computed in other batch shapes). For the
//! default model (full attention), Gemma 3 270M (a sliding window) and a
//! random Mamba-2 (recurrent state). A byte flipped in an entry's data is
//! caught by its checksum: the entry is deleted and the prompt computed
//! (on the small model: it computes the prompt once more).
//! Assertions are on counters and outputs, never on time.

use crate::common;

use std::path::{Path, PathBuf};

use common::wait_for;
use steward_engine::compare::{self, Scored, TIE_NATS};
use steward_engine::{EngineConfig, EngineHandle, GenerateRequest, TokenId};

/// A directory per test and process.
fn state_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("steward-disk-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

async fn engine(path: &Path, disk: Option<&Path>, ctx: u32) -> EngineHandle {
    let mut c = EngineConfig::new(path.to_path_buf());
    c.model.n_threads = 1;
    c.model.n_threads_batch = 1;
    c.model.progress = false;
    if ctx <= 1024 {
        c.model.n_ubatch = 64;
    }
    // One slot (a restore holds its loaded cells and the prompt's whole
    // growth at once: twice the history).
    c.admit.max_seqs = 1;
    c.admit.ctx_per_seq = ctx;
    c.step.prompt_budget = 512;
    c.admit.prefix_host_bytes = 256 << 20;
    c.admit.prefix_host_min = 32;
    c.admit.checkpoint_min_tokens = 16;
    match disk {
        Some(d) => {
            c.admit.disk_dir = Some(d.to_path_buf());
            c.admit.disk_bytes = 2 << 30;
        }
        // The reference: every token computed.
        None => c.admit.prefix_cache = false,
    }
    common::start(c).await
}

async fn stop(h: EngineHandle) {
    let _ = tokio::task::spawn_blocking(move || h.stop()).await;
}

fn text(lines: usize) -> String {
    (0..lines)
        .map(|i| {
            format!(
                "Entry {i}: the ferry from dock {} left {} minutes late with {} crates.\n",
                i % 9,
                3 + i % 11,
                20 + i % 17
            )
        })
        .collect()
}

fn request(prompt: Vec<TokenId>, n: u32) -> GenerateRequest {
    GenerateRequest {
        ignore_eos: true,
        logprobs: Some(2),
        ..GenerateRequest::greedy("d", prompt, n)
    }
}

/// Output tokens with their top-2 logprobs, and the cached prompt tokens.
async fn run(h: &EngineHandle, prompt: &[TokenId], n: u32) -> (Scored<TokenId>, u32) {
    let (f, s) = compare::collect_scored(h.submit(request(prompt.to_vec(), n)).unwrap())
        .await
        .expect("finishes");
    (s, f.cached_tokens)
}

/// Turn one on an engine over `dir`, stopped; turn two on a new engine
/// over the same directory. Returns turn two's prompt, output and cached
/// tokens, the history's length, and the second engine (still running).
async fn restart(
    path: &Path,
    dir: &Path,
    ctx: u32,
    lines: usize,
) -> (Vec<TokenId>, Scored<TokenId>, u32, usize, EngineHandle) {
    let a = engine(path, Some(dir), ctx).await;
    let history = a.preparer().text(text(lines)).await.unwrap();
    let (turn1, _) = run(&a, &history, 4).await;
    stop(a).await;
    let b = engine(path, Some(dir), ctx).await;
    wait_for(&b, "the disk tier's scan", |s| s.disk.entries >= 1).await;
    let mut next = history.clone();
    next.extend(&turn1.tokens);
    next.extend(b.preparer().text("\nAnd then?".into()).await.unwrap());
    let (out, cached) = run(&b, &next, 8).await;
    assert_eq!(b.stats().disk.reads, 1, "{:?}", b.stats().disk);
    (next, out, cached, history.len(), b)
}

async fn cold(path: &Path, ctx: u32, prompt: &[TokenId]) -> Scored<TokenId> {
    let h = engine(path, None, ctx).await;
    let (want, cached) = run(&h, prompt, 8).await;
    assert_eq!(cached, 0);
    stop(h).await;
    want
}

/// The longest entry file in a model directory under `dir`, the only one
/// left there: the shorter ones are its prefixes, and one whose delete the
/// full queue dropped would otherwise be indexed by the next scan, maybe
/// before it (a test waiting for one entry could then read the wrong one).
fn only_longest_entry(dir: &Path) -> PathBuf {
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    for m in std::fs::read_dir(dir).unwrap().flatten() {
        for e in std::fs::read_dir(m.path()).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "kv") {
                files.push((e.metadata().unwrap().len(), e.path()));
            }
        }
    }
    files.sort();
    let longest = files.pop().expect("an entry on disk").1;
    for (_, f) in files {
        std::fs::remove_file(f).unwrap();
    }
    longest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_model_restores_a_conversation_after_a_restart() {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let dir = state_dir("default");
    let (next, got, cached, history, b) = restart(&path, &dir, 8192, 125).await;
    assert!(history > 2500, "a ~3,000-token history: {history}");
    assert!(
        cached as usize >= history,
        "cached {cached} of a {history}-token history"
    );
    stop(b).await;
    let want = cold(&path, 8192, &next).await;
    compare::assert_greedy_agree(&got.tokens, &want, TIE_NATS, "restored vs cold");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemma3_restores_past_its_window_after_a_restart() {
    let path = steward_engine::fetch::ensure_known_model("gemma3-270m").expect("Gemma 3 270M");
    let dir = state_dir("gemma");
    // ~3,000 tokens: six times its 512-token window.
    let (next, got, cached, history, b) = restart(&path, &dir, 8192, 125).await;
    assert!(history > 2500, "a ~3,000-token history: {history}");
    assert_eq!(b.stats().memory_kind, "sliding_window");
    let st = b.stats();
    assert!(
        cached as usize >= history,
        "cached {cached} of a {history}-token history: restores {} spills {} checkpoints {} {:?}",
        st.prefix_restores,
        st.prefix_spills,
        st.checkpoints,
        st.disk
    );
    stop(b).await;
    let want = cold(&path, 8192, &next).await;
    compare::assert_greedy_agree(&got.tokens, &want, TIE_NATS, "restored vs cold");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurrent_model_restores_its_state_after_a_restart() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/arch-ggufs/mamba2.gguf");
    let Some(path) = common::fixture(p, "scripts/test-fixtures.sh") else {
        return;
    };
    let dir = state_dir("mamba2");
    let (next, got, cached, history, b) = restart(&path, &dir, 8192, 125).await;
    assert_eq!(b.stats().memory_kind, "recurrent");
    assert!(history > 2500, "a ~3,000-token history: {history}");
    assert!(
        cached as usize >= history,
        "cached {cached} of a {history}-token history"
    );
    // The second engine's stop writes the longer entry (its slot's: turn
    // two's prompt and output; the first entry is its prefix, deleted). A
    // byte flipped in its data: the next engine finds it at the scan (its
    // header is intact); turn three, which extends it (a recurrent state
    // restarts only at its end), fails the checksum at the restore; the
    // entry is deleted and the prompt computed.
    stop(b).await;
    let want = cold(&path, 8192, &next).await;
    compare::assert_greedy_agree(&got.tokens, &want, TIE_NATS, "restored vs cold");
    let file = only_longest_entry(&dir);
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 7] ^= 0x10;
    std::fs::write(&file, &bytes).unwrap();
    let c = engine(&path, Some(&dir), 8192).await;
    wait_for(&c, "the scan", |s| s.disk.entries >= 1).await;
    let mut third = next.clone();
    third.extend(&got.tokens);
    third.extend(c.preparer().text("\nAnd?".into()).await.unwrap());
    let (again, cached) = run(&c, &third, 8).await;
    let st = c.stats();
    assert_eq!(
        (st.disk.corrupt, st.disk.reads, cached),
        (1, 0, 0),
        "{:?}",
        st.disk
    );
    assert!(!file.exists(), "the corrupt entry is deleted");
    let want = cold(&path, 8192, &third).await;
    compare::assert_greedy_agree(
        &again.tokens,
        &want,
        TIE_NATS,
        "computed after corruption vs cold",
    );
    stop(c).await;
    let _ = std::fs::remove_dir_all(&dir);
}
