//! A failed step fails only the sequences that caused it.
//!
//! When the runtime refuses a step of several sequences, nobody is failed
//! yet: every slot in it is put back as it was before the step (llama.cpp
//! restores its memory for some errors and keeps processed ubatches for
//! others; a padded chunk's recomputed cells were dropped before it was
//! pushed, so its sequence computes them again), and its sequences become
//! suspects. Each suspect then runs alone, one step each, while the others
//! wait: a suspect whose own step succeeds is cleared, one whose own step
//! fails is the cause and fails. A failure costs the others one step per
//! suspect, never their requests.
//!
//! And the owner loop's panic policy (`run`): a panic outside one request's
//! sampling fails the engine, which ends the process.

use crate::owner::plan::scheduler::Plan;
use crate::owner::Owner;
use crate::runtime::backend::Backend;
use crate::runtime::StepError;

impl<B: Backend> Owner<B> {
    /// With suspects, plan only the first of them. Returns its key.
    pub(super) fn isolate(&mut self, plan: &mut Plan) -> Option<u64> {
        let seqs = &self.seqs;
        self.suspects.retain(|k| seqs.iter().any(|s| s.key == *k));
        let k = *self.suspects.first()?;
        plan.decode.retain(|d| *d == k);
        plan.chunks.retain(|c| c.key == k);
        Some(k)
    }

    /// The step ran without error: a suspect that ran alone is cleared.
    pub(super) fn step_ok(&mut self, isolated: Option<u64>) {
        if let Some(k) = isolated {
            self.suspects.retain(|s| *s != k);
        }
    }

    /// Put every slot of `plan` back as it was before the step. Returns the
    /// step's sequences and those whose state could not be rewound.
    fn rewind_step(&mut self, plan: &Plan) -> (Vec<u64>, Vec<u64>) {
        let keys: Vec<u64> = plan.keys();
        let mut undone = Vec::new();
        for seq in self.seqs.iter_mut().filter(|s| keys.contains(&s.key)) {
            let chunk_start = plan
                .chunks
                .iter()
                .find(|c| c.key == seq.key)
                .map(|c| c.start);
            seq.undo_step(chunk_start, plan.decode.contains(&seq.key));
            undone.push((seq.key, seq.slot, seq.n_past()));
        }
        let mut lost = Vec::new();
        for (key, slot, keep) in undone {
            // The ubatches llama.cpp applied before the failure may have
            // overwritten window cells the retry needs; a recurrent state
            // cannot be cut back at all.
            let cut = self.rt.truncate_slot(slot, keep);
            self.kv.cells.truncate(slot, keep as usize);
            self.kv.memory.truncate(slot, keep as usize);
            self.sync_lo(slot);
            let keep = keep as usize;
            if !cut || self.kv.memory.direct(slot, keep, keep) < keep {
                lost.push(key);
            }
        }
        self.sync_shared_lo();
        (keys, lost)
    }

    /// The step was interrupted for a newcomer (`owner/interrupt.rs`): its
    /// rows are rewound and run in a later step; `spent` ms of compute
    /// are lost.
    pub(super) fn step_interrupted(&mut self, plan: &Plan, spent: f64) {
        let (_, lost) = self.rewind_step(plan);
        if !lost.is_empty() {
            // Not expected: only steps that can be rewound are interrupted.
            tracing::error!(
                sequences = lost.len(),
                "an interrupted step could not be rewound; failing its sequences"
            );
            self.fail(
                &lost,
                "the step was interrupted and could not be rewound".into(),
            );
        }
        self.stats.send_modify(|s| {
            s.steps_interrupted += 1;
            s.interrupted_ms_total += spent;
        });
    }

    /// The runtime refused `plan`: undo it, then fail its one sequence, or
    /// make its sequences suspects.
    pub(super) fn step_failed(&mut self, plan: &Plan, e: &StepError) {
        let (keys, lost) = self.rewind_step(plan);
        if !lost.is_empty() {
            tracing::error!(error = %e, sequences = lost.len(), "step failed and its state cannot be rewound (recurrent, or window cells overwritten); failing its sequences");
            self.suspects.retain(|k| !lost.contains(k));
            self.fail(&lost, e.to_string());
            if lost.len() == keys.len() {
                return;
            }
        }
        let keys: Vec<u64> = keys.into_iter().filter(|k| !lost.contains(k)).collect();
        if keys.len() == 1 {
            tracing::error!(error = %e, "step of one sequence failed; failing it");
            self.suspects.retain(|k| *k != keys[0]);
            self.fail(&keys, e.to_string());
            return;
        }
        tracing::warn!(
            error = %e,
            sequences = keys.len(),
            "step failed; running its sequences one at a time to find the cause"
        );
        for k in keys {
            if !self.suspects.contains(&k) {
                self.suspects.push(k);
            }
        }
    }
}

/// The owner's loop. A panic here leaves the owner's state unknown (a
/// half-applied step, the cell map out of step with the runtime): nothing
/// is retried. The engine is marked failed, which makes the process unready
/// and unhealthy and `serve` end with a non-zero status (an orchestrator
/// restarts it); every in-flight request's stream ends with an error as the
/// owner is dropped. Per-request panics while sampling are contained in
/// `rows`.
pub(super) fn run<B: Backend>(mut owner: Owner<B>) {
    let stats = owner.stats.clone();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        while owner.tick() {}
        owner.shutdown();
    }));
    if let Err(p) = r {
        let what = crate::fatal::panic_text(p.as_ref());
        tracing::error!(panic = %what, "the engine thread panicked; the engine has stopped");
        stats.send_modify(|s| {
            s.failed = true;
            s.stopped = true;
            s.ready = false;
        });
    }
}
