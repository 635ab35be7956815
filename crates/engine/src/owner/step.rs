//! ③ execute — one step, as named phases: plan → build → submit → commit
//! → wait → emit → record → retire. `Owner::step` is that sequence and
//! nothing else; each phase below is one method.
//!
//! Invariant: between `submit` and `wait` the runtime is not touched (an
//! asynchronous device is computing); `commit` does only the cell map's
//! bookkeeping, which needs none of the step's outputs.

use std::time::Instant;

use crate::deliver::stats;
use crate::deliver::timeline::ChunkStep;
use crate::owner::plan::adapter_sets::{key_for, AdapterSet};
use crate::owner::plan::scheduler::{self, Plan, SeqView};
use crate::owner::rows;
use crate::owner::Owner;
use crate::runtime::backend::Backend;
use crate::runtime::{MemoryKind, StepError, TokenId};

/// What building the batch put where.
#[derive(Default)]
struct Built {
    /// (sequence index, batch row) of every row to sample.
    rows: Vec<(usize, usize)>,
    /// (sequence index, chunk index, first row) of prompt chunks scored.
    scored: Vec<(usize, usize, usize)>,
    /// (slot, token) of every decode row: the cell map's new tokens.
    decoded: Vec<(usize, TokenId)>,
}

/// What the emit phase counted.
struct Emitted {
    drafts: usize,
    /// Passes over the weights (only when tracing: it walks the plan).
    passes: Option<usize>,
    tokens: u64,
}

/// Milliseconds each phase took.
struct Times {
    plan: f64,
    build: f64,
    submit: f64,
    overlap: f64,
    wait: f64,
    out: f64,
    /// Build to the end of emit: the step's time.
    total: f64,
    /// The device's idle gap before this step (the loop went straight on).
    gap: Option<f64>,
}

fn ms(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64() * 1e3
}

impl<B: Backend> Owner<B> {
    pub(super) fn step(&mut self) {
        let t_plan = Instant::now();
        let Some((plan, set, isolated)) = self.plan_step() else {
            return;
        };
        let t_build = Instant::now();
        let (built, ok) = self.build(&plan);
        let wasted = self.wasted_prompt(&plan);
        let t_submit = Instant::now();
        let gap = self.clock.last_done.take().map(|d| ms(d, t_submit));
        self.interrupt.begin(
            ok.is_ok()
                .then(|| self.interruptible(&plan, isolated))
                .flatten(),
        );
        let submitted = ok.and_then(|_| self.rt.submit());
        self.interrupt.end();
        let submit = ms(t_submit, Instant::now());
        self.clock.interrupted_last = matches!(submitted, Err(StepError::Interrupted));
        match submitted {
            Err(StepError::Interrupted) => {
                return self.step_interrupted(&plan, ms(t_build, Instant::now()))
            }
            Err(e) => return self.step_failed(&plan, &e),
            Ok(()) => {}
        }
        self.step_ok(isolated);
        let t_commit = Instant::now();
        self.commit(&plan, &built, &set);
        self.urgency_served(&plan);
        let t_wait = Instant::now();
        self.rt.wait();
        let done = Instant::now();
        let emitted = self.emit(&plan, &built);
        self.clock.steps += 1;
        for s in &mut self.seqs {
            s.mark_first(self.clock.steps);
        }
        self.charge(&plan);
        let end = Instant::now();
        let times = Times {
            plan: ms(t_plan, t_build),
            build: ms(t_build, t_submit),
            submit,
            overlap: ms(t_commit, t_wait),
            wait: ms(t_wait, done),
            out: ms(done, end),
            total: ms(t_build, end),
            gap,
        };
        self.record(&plan, &emitted, &times, wasted);
        self.trace_chunks(&plan, t_build, end);
        self.retire_finished();
        self.clock.last_step = Some((times.total, plan.n_tokens()));
        self.clock.last_done = Some(done);
    }

    /// Plan: the budget, the adapter set whose turn it is, the scheduler's
    /// plan over that set's sequences, its adapters set on the runtime and
    /// the drafts. None: nothing to run (or the adapters failed, which
    /// fails their sequences).
    fn plan_step(&mut self) -> Option<(Plan, AdapterSet, Option<u64>)> {
        self.set_budget();
        // One adapter set per step (llama.cpp applies adapters per context).
        let set = self.step_set();
        let mut views: Vec<SeqView> = Vec::with_capacity(self.seqs.len());
        for s in self.seqs.iter().filter(|s| s.adapters == set) {
            let mut v = s.view();
            // A copy from this slot runs at the start of this step's decode.
            v.can_pad &= !self.kv.pinned.contains(&s.slot);
            // In a unified pool a padded tail would cut into cells shared
            // with other slots and recompute private copies of them.
            v.can_pad &= !(self.kv.cache.share && s.reused > 0);
            // A window or a recurrent state may not hold the earlier point.
            v.can_pad &= self.kv.memory.kind == MemoryKind::Attention;
            views.push(v);
        }
        self.step_order(&mut views);
        let mut plan = scheduler::plan(&views, &self.limits);
        scheduler::pad_tails(&mut plan, &views);
        scheduler::align_chunks(&mut plan, &views, self.config.step.chunk_align);
        scheduler::fit(&mut plan, &views, self.n_batch);
        let isolated = self.isolate(&mut plan);
        self.stop_before_last(&mut plan);
        scheduler::media_cuts(&mut plan, &views);
        if plan.is_empty() {
            return None;
        }
        if let Err(e) = self.rt.set_adapters(&set) {
            let keys: Vec<u64> = views.iter().map(|v| v.key).collect();
            self.fail(
                &keys,
                format!("the step's LoRA adapters could not be set: {e}"),
            );
            return None;
        }
        self.plan_drafts(&plan);
        Some((plan, set, isolated))
    }

    /// Build: the batch's rows, in slot order. With per-slot KV streams
    /// llama.cpp splits a batch into one ubatch (one pass over the weights)
    /// per run of consecutive slot ids in batch order: 8 decoders pushed in
    /// arrival order could cost 8 passes instead of 1 (measured: 52 vs 29 ms).
    fn build(&mut self, plan: &Plan) -> (Built, Result<(), StepError>) {
        self.rt.clear();
        let mut b = Built::default();
        let mut ok = Ok(());
        let mut order: Vec<usize> = (0..self.seqs.len()).collect();
        order.sort_unstable_by_key(|&i| self.seqs[i].slot);
        for si in order {
            let seq = &mut self.seqs[si];
            if plan.decode.contains(&seq.key) {
                let tok = seq.pending();
                match seq.push_decode(&mut self.rt) {
                    Ok(row) => {
                        b.rows.push((si, row));
                        b.decoded.extend(tok.map(|t| (seq.slot, t)));
                        b.decoded.extend(seq.drafts.iter().map(|&d| (seq.slot, d)));
                    }
                    Err(e) => ok = Err(e),
                }
            } else if let Some(ci) = plan.chunks.iter().position(|c| c.key == seq.key) {
                match seq.push_chunk(&mut self.rt, &plan.chunks[ci]) {
                    Ok(r) => {
                        b.rows.extend(r.sample.map(|row| (si, row)));
                        b.scored.extend(r.all_from.map(|first| (si, ci, first)));
                    }
                    Err(e) => ok = Err(e),
                }
            }
        }
        (b, ok)
    }

    /// Each traced sequence's prefill chunk in this step
    /// (`deliver/timeline.rs`).
    /// (With tracing off, one pass over the sequences finding none.)
    fn trace_chunks(&mut self, plan: &Plan, start: Instant, end: Instant) {
        let step = self.clock.steps;
        for s in &mut self.seqs {
            let Some(t) = s.trace.as_mut().filter(|t| t.chunks) else {
                continue;
            };
            if let Some(c) = plan.chunks.iter().find(|c| c.key == s.key) {
                t.line.push_chunk(ChunkStep {
                    start,
                    end,
                    tokens: c.len as u32,
                    step,
                    steps: 1,
                });
            }
        }
    }

    /// Prompt tokens submitted for a client already gone when the step was
    /// built (the reap just before makes this ~0 by construction).
    fn wasted_prompt(&self, plan: &Plan) -> usize {
        plan.chunks
            .iter()
            .filter(|c| {
                self.seqs
                    .iter()
                    .any(|s| s.key == c.key && s.outbox.is_closed())
            })
            .map(|c| c.len)
            .sum()
    }

    /// Commit, while an asynchronous device computes the step: the step's
    /// cells into the cell map (each decoder's token, each chunk's run; a
    /// padded tail replaces the cells it recomputed).
    fn commit(&mut self, plan: &Plan, built: &Built, set: &AdapterSet) {
        let tick = self.next_key;
        let pkey = key_for(self.prefix_key, set);
        for &(slot, tok) in &built.decoded {
            self.kv.cells.extend(slot, pkey, &[tok], tick);
        }
        for c in &plan.chunks {
            if let Some(seq) = self.seqs.iter_mut().find(|s| s.key == c.key) {
                self.kv.cells.truncate(seq.slot, c.start);
                let run: Vec<TokenId> = (c.start..c.start + c.len)
                    .map(|i| seq.token_at(i))
                    .collect();
                self.kv.cells.extend(seq.slot, pkey, &run, tick);
                seq.chunk_done(c);
            }
        }
    }

    /// Emit, after the step completed: the memory kinds' mirror, scored
    /// prompt chunks, then every row sampled, detokenized and sent (on
    /// helper threads when there are many: `rows.rs`); drafts end here.
    fn emit(&mut self, plan: &Plan, built: &Built) -> Emitted {
        self.mirror_memory(plan);
        for &(si, ci, first) in &built.scored {
            self.seqs[si].score_chunk(&self.rt, &plan.chunks[ci], first);
        }
        let mut row_of: Vec<Option<usize>> = vec![None; self.seqs.len()];
        for &(si, row) in &built.rows {
            row_of[si] = Some(row);
        }
        let rt = &self.rt;
        let jobs: Vec<rows::Job<'_>> = self
            .seqs
            .iter_mut()
            .zip(row_of)
            .filter_map(|(seq, row)| {
                let row = row?;
                let out = |r: usize| {
                    if seq.device {
                        rows::Out::Device(rt.sampled(r))
                    } else {
                        rows::Out::Logits(rt.logits(r))
                    }
                };
                // Speculation: the drafts' rows follow the pending token's.
                let drafts = (1..=seq.drafts.len()).map(|j| out(row + j)).collect();
                Some(rows::Job(out(row), drafts, seq))
            })
            .collect();
        rows::emit(jobs, &self.vocab, self.config.sample.sample_threads);
        let drafts: usize = self.seqs.iter().map(|s| s.drafts.len()).sum();
        // For the trace only (the drafts it counts end below).
        let passes = tracing::enabled!(tracing::Level::TRACE).then(|| self.passes(plan));
        let tokens: u64 = self.seqs.iter().map(|s| u64::from(s.step_emitted)).sum();
        self.end_drafts();
        Emitted {
            drafts,
            passes,
            tokens,
        }
    }

    /// Record: the trace line, the cost models' observations, the step
    /// record and counters in the published stats.
    fn record(&mut self, plan: &Plan, e: &Emitted, t: &Times, wasted: usize) {
        let n_prompt: usize = plan.chunks.iter().map(|c| c.len).sum();
        let runtime_ms = t.submit + t.wait;
        tracing::trace!(
            decode = plan.decode.len(),
            drafts = e.drafts,
            passes = e.passes.unwrap_or(0),
            chunks = plan.chunks.len(),
            prompt = n_prompt,
            runtime_ms = runtime_ms,
            ms = t.total,
            plan_ms = t.plan,
            build_ms = t.build,
            submit_ms = t.submit,
            wait_ms = t.wait,
            overlap_ms = t.overlap,
            out_ms = t.out,
            gap_ms = t.gap.unwrap_or(-1.0),
            "step"
        );
        let ctx = if n_prompt > 0 {
            plan.chunks
                .iter()
                .map(|c| c.len as f64 * (c.start as f64 + c.len as f64 / 2.0))
                .sum::<f64>()
                / n_prompt as f64
        } else {
            0.0
        };
        // Draft rows cost what decode rows do (both are single-position rows).
        let rows = plan.decode.len() + e.drafts;
        self.cost.observe(rows, n_prompt, t.total, ctx);
        // The draft cost line is fitted on decode steps only: a prompt
        // chunk's tokens cost less each than a decoder's extra rows (on
        // the CPU the second row of a step costs most of the first).
        if n_prompt == 0 {
            self.spec.fit.observe(rows, t.total);
        }
        let record = stats::StepRecord {
            n: 0,
            at_ms: stats::unix_ms(),
            decode: plan.decode.len() as u32,
            prompt: n_prompt as u32,
            chunks: plan.chunks.len() as u32,
            plan_ms: t.plan as f32,
            build_ms: t.build as f32,
            wait_ms: runtime_ms as f32,
            out_ms: (t.overlap + t.out) as f32,
            ms: t.total as f32,
        };
        let cost = self.cost.cost();
        let (total, gap, tokens) = (t.total, t.gap, e.tokens);
        self.stats.send_modify(|s| {
            s.steps += 1;
            let rec = stats::StepRecord {
                n: s.steps,
                ..record
            };
            stats::push_bounded(&mut s.recent_steps, stats::STEP_HISTORY, rec);
            s.step_runtime_ms_total += runtime_ms;
            s.step_ms.observe(total);
            s.step_cost = cost;
            s.prompt_tokens_after_cancel += wasted as u64;
            s.step_host_ms_total += total - runtime_ms;
            if let Some(g) = gap {
                s.step_gap_ms_total += g;
                s.step_gaps += 1;
            }
            s.generated_tokens_total += tokens;
            s.prompt_tokens_total += n_prompt as u64;
        });
    }
}
