//! A step's outputs into its sequences: each row's token is chosen (from
//! the logits on the host, or the device's pick) and emitted (detokenized,
//! stop strings checked, text sent to the request's outbox). Sequences are
//! independent here, so with many rows the work is split across threads:
//! at 64 rows the host reads 12.6 MB of logits per step (SmolLM2's
//! vocabulary), which one thread does in ~1.5 ms while the device idles.

use crate::owner::sequence::Sequence;
use crate::runtime::{TokenId, Vocab};

/// One row's output.
#[derive(Clone, Copy)]
pub(super) enum Out<'a> {
    /// Logits to sample from on the host.
    Logits(&'a [f32]),
    /// The device sampler's token (None: it returned none).
    Device(Option<TokenId>),
}

/// Fewest rows worth one more thread (spawning one costs ~20-40 µs, a
/// row's argmax ~25 µs). On the H200 host, 64 rows took 2.4 ms on one
/// thread and 1.0 ms on four.
const ROWS_PER_THREAD: usize = 8;

/// One sequence's rows, for a helper thread: its pending token's output,
/// then its drafts' (speculation; empty without), and the sequence.
pub(super) struct Job<'a>(pub Out<'a>, pub Vec<Out<'a>>, pub &'a mut Sequence);

// SAFETY: a `Sequence` is not `Send` only because its admission `Permit`
// holds an `Rc` to the owner's ledger. A helper thread runs `one` alone on
// its job, which samples and emits: it never touches, clones or drops the
// permit (`retire`, on the owner thread, drops it after the scope below
// has joined every helper). Every other field is owned by the sequence and
// `Send`, and the vocabulary is only read.
unsafe impl Send for Job<'_> {}

/// Sample and emit every row, on up to `threads` threads.
pub(super) fn emit(mut jobs: Vec<Job<'_>>, vocab: &Vocab, threads: usize) {
    let n = threads.min(jobs.len() / ROWS_PER_THREAD).max(1);
    if n == 1 {
        for job in &mut jobs {
            one(job, vocab);
        }
        return;
    }
    let per = jobs.len().div_ceil(n);
    std::thread::scope(|sc| {
        let mut chunks = jobs.chunks_mut(per);
        let mine = chunks.next();
        for chunk in chunks {
            sc.spawn(move || {
                for job in chunk {
                    one(job, vocab);
                }
            });
        }
        for job in mine.into_iter().flatten() {
            one(job, vocab);
        }
    });
}

/// One row. A panic while sampling or emitting (a bug, or input nothing
/// anticipated) fails this request alone: what it touched is its own
/// sampler, detokenizer and grammar state, and a failed sequence's KV cells
/// are cleared at retirement, never cached.
///
/// With drafts, the rows are drawn in order with the request's own sampler:
/// row `i + 1` is drawn only while the draw from row `i` equals draft `i`
/// (its logits then follow the emitted tokens); the first draw that differs
/// is the step's last token (`owner/spec/speculate.rs` says why this is exact).
fn one(job: &mut Job<'_>, vocab: &Vocab) {
    let Job(out, drafts, seq) = job;
    let take = |seq: &mut Sequence, out: Out<'_>| match out {
        Out::Logits(l) => seq.sample_and_emit(l, vocab),
        Out::Device(Some(tok)) => seq.emit(tok, vocab),
        Out::Device(None) => seq.fail_runtime("the device sampler returned no token"),
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        take(seq, *out);
        for (i, &o) in drafts.iter().enumerate() {
            if !seq.draft_holds(i) {
                break;
            }
            take(seq, o);
        }
    }));
    if r.is_err() {
        tracing::error!(request_id = %seq.id, "sampling panicked; this request fails");
        seq.fail_runtime("internal error while sampling this request");
    }
}
