//! The execution owner: one named thread that alone touches the llama
//! context, the batch, the slot table, KV state, samplers and detokenizers.
//!
//! The only way in is the bounded inbox; the only ways out are the bounded
//! per-request outboxes and the `watch` stats snapshot.
//!
//! Step loop (`Owner::tick`): intake (inbox → waiting queue) → reap
//! (cancelled, timed out) → admit (slot + ledger permit) → plan (pure) →
//! submit → (while an asynchronous device computes: the step's cell-map
//! bookkeeping) → wait → sample/detokenize/emit (on helper threads when
//! there are many rows: `rows.rs`) → retire → publish stats.
//!
//! Invariants: a slot's KV cells are released only after the step that
//! touched them completed (between `submit` and `wait` the owner does not
//! touch the runtime); every request gets exactly
//! one terminal event; `retire` is the only place an admitted sequence ends,
//! and dropping its `Permit` there releases its reservation exactly once.

mod adapters;
mod admit;
mod budget;
mod drafts;
pub mod embed;
mod faults;
pub mod inbox;
pub mod kv;
mod kvpublish;
pub mod plan;
mod reap;
mod rows;
mod sequence;
mod slots;
pub mod spec;
mod start;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::admission::kv::{Ledger, StateModel};
use crate::config::EngineConfig;
use crate::deliver::stats::EngineStats;
use crate::deliver::stream::{Event, GenerationError};
use crate::runtime::backend::Backend;
use crate::runtime::{LoadedModel, MemoryKind, Vocab};
pub(crate) use inbox::{Command, Submission};
use kv::key::PrefixKey;
use kv::prefix::PrefixCache;
use kv::{cells, memstate, spill};
use plan::cost::StepCostModel;
use plan::scheduler::{self, SeqView, StepLimits};
use sequence::{Outcome, Sequence};
use spec::{drafter, speculate};
pub(crate) use start::{runtime_params, spawn};

pub(crate) struct OwnerArgs {
    pub model: Arc<LoadedModel>,
    /// The draft model (`--draft-model`), checked against the model.
    pub draft: Option<Arc<LoadedModel>>,
    pub parts: OwnerParts,
}

/// What the owner needs besides its backend and vocabulary.
pub(crate) struct OwnerParts {
    pub config: EngineConfig,
    pub inbox: mpsc::Receiver<Command>,
    pub stats: watch::Sender<EngineStats>,
    pub queued: Arc<AtomicUsize>,
    pub prefix_key: PrefixKey,
    /// The loaded adapters, published to the handle.
    pub adapters: Arc<std::sync::RwLock<Vec<crate::config::AdapterInfo>>>,
}

/// A submitted request waiting for a slot: nothing allocated yet.
struct Waiting {
    sub: Submission,
    enqueued: Instant,
}

/// A terminal event (and text before it) the client has not taken yet. The
/// sequence's slot and permit are already released; only the events wait.
struct Draining {
    id: String,
    outbox: mpsc::Sender<Event>,
    events: VecDeque<Event>,
}

pub(crate) struct Owner<B: Backend> {
    rt: B,
    vocab: Arc<Vocab>,
    config: EngineConfig,
    limits: StepLimits,
    cost: StepCostModel,
    state_model: StateModel,
    ledger: Ledger,
    ctx_limit: u32,
    /// Slots holding nothing (unordered: `take_slot` chooses).
    free_slots: Vec<usize>,
    waiting: VecDeque<Waiting>,
    /// Admitted sequences, oldest first.
    seqs: Vec<Sequence>,
    draining: Vec<Draining>,
    inbox: mpsc::Receiver<Command>,
    stats: watch::Sender<EngineStats>,
    /// Requests submitted and not yet admitted or dropped (shared with the
    /// handle, which refuses submissions past `max_waiting`).
    queued: Arc<AtomicUsize>,
    next_key: u64,
    inbox_closed: bool,
    /// Last cancellation latencies per state (bounded), for quantiles.
    cancel_samples: [VecDeque<f64>; 3],
    pressure: bool,
    pressure_checked: Instant,
    /// Duration and tokens of this iteration's step, for the one publish.
    last_step: Option<(f64, usize)>,
    /// When the last step's outputs were handled, if the loop has gone
    /// straight on since (taken by the next step: the device's idle gap).
    last_done: Option<Instant>,
    cache: PrefixCache,
    /// The prefix cache's host-memory tier (evicted entries' saved state).
    host: spill::HostTier,
    /// The runtime's state size when no cell is in use, and when it was
    /// last sampled (`EngineStats::kv_bytes_physical`).
    state_base: Option<usize>,
    state_sampled: Option<Instant>,
    prefix_key: PrefixKey,
    /// Slots this admission pass must not evict: copy sources (the copy
    /// runs at the start of this iteration's step) and taken-over entries.
    pinned: Vec<usize>,
    /// What every slot's KV cells hold, shared cells once (`owner/kv/cells.rs`):
    /// the ledger's `held` and the evictions' order come from it.
    cells: cells::CellTrie,
    /// KV events out (`--kv-events`; `owner/kvpublish.rs`).
    kv: Option<kvpublish::KvOut>,
    /// What slots hold beyond their cells' tokens, per layer kind (the
    /// sliding window's lowest position, checkpoints): `owner/kv/memstate.rs`.
    memory: memstate::SlotMemory,
    /// Rows one step may carry (the runtime's `n_batch`).
    n_batch: usize,
    /// Sequences of a failed step, to run alone until the cause is found
    /// (`faults.rs`).
    suspects: Vec<u64>,
    /// Loaded LoRA adapters (published) and whose turn a step is.
    adapters: Arc<std::sync::RwLock<Vec<crate::config::AdapterInfo>>>,
    turns: plan::adapter_sets::Turns,
    /// Step time against the step's tokens, for pricing draft rows.
    spec_fit: speculate::StepFit,
    /// Acceptance new requests start from, per class (learned).
    spec_priors: speculate::Priors,
    /// The draft model's runtime (`--draft-model`).
    drafter: Option<drafter::Drafter<B>>,
}

impl<B: Backend> Owner<B> {
    pub(crate) fn new(
        rt: B,
        vocab: Arc<Vocab>,
        kind: MemoryKind,
        ctx_limit: u32,
        args: OwnerParts,
    ) -> Self {
        let c = args.config;
        // Attention KV grows per token (hybrids too); a pure recurrent
        // state is one per sequence.
        let state_model = match kind {
            MemoryKind::Recurrent { hybrid: false } => StateModel::PerSequence,
            _ => StateModel::PerToken,
        };
        let mut cache = PrefixCache::new(c.prefix_cache, c.prefix_copy_min, c.kv_unified);
        cache.exact = kind == MemoryKind::Attention;
        // No copies of a recurrent state (a copy cannot be cut short), nor
        // of window cells in a unified pool: llama.cpp never overwrites a
        // cell two sequences hold, so shared cells behind both windows
        // would fill its window pool (`n_swa * slots + ubatch` cells) until
        // a step finds no room.
        cache.copies = match kind {
            MemoryKind::Recurrent { .. } => false,
            MemoryKind::Window { .. } => !c.kv_unified,
            MemoryKind::Attention => true,
        };
        let state_base = rt.state_bytes();
        // KV events: blocks are only meaningful where cells are reusable at
        // any length (full attention).
        let kv = c
            .kv_events
            .clone()
            .filter(|_| kind == MemoryKind::Attention)
            .map(|s| kvpublish::KvOut::new(s, c.n_gpu_layers > 0));
        Owner {
            rt,
            vocab,
            limits: StepLimits {
                prompt_budget: c.prompt_budget,
                max_prefill_seqs: c.max_prefill_seqs.max(1),
                max_decode_seqs: c.max_decode_seqs.clamp(1, c.max_seqs),
                expedite: Vec::new(),
                min_chunk: scheduler::EFFICIENT_CHUNK,
            },
            cost: StepCostModel::default(),
            state_model,
            ledger: Ledger::new(match state_model {
                StateModel::PerToken => u64::from(c.ctx_per_seq) * c.max_seqs as u64,
                StateModel::PerSequence => c.max_seqs as u64,
            }),
            ctx_limit,
            free_slots: (0..c.max_seqs).collect(),
            waiting: VecDeque::new(),
            seqs: Vec::new(),
            draining: Vec::new(),
            inbox: args.inbox,
            stats: args.stats,
            queued: args.queued,
            next_key: 0,
            inbox_closed: false,
            cancel_samples: Default::default(),
            pressure: false,
            pressure_checked: Instant::now(),
            last_step: None,
            last_done: None,
            state_base,
            state_sampled: None,
            // (Its entries restart only where their saved state reaches.)
            host: spill::HostTier::new(
                if c.prefix_cache {
                    c.prefix_host_bytes
                } else {
                    0
                },
                c.prefix_host_min,
            ),
            cache,
            memory: memstate::SlotMemory::new(kind, c.max_seqs, c.checkpoint_bytes),
            prefix_key: args.prefix_key,
            pinned: Vec::new(),
            cells: {
                let mut t = cells::CellTrie::new(c.kv_unified);
                if kv.is_some() {
                    t.track_blocks();
                }
                t
            },
            kv,
            n_batch: runtime_params(&c).n_batch as usize,
            suspects: Vec::new(),
            adapters: args.adapters,
            turns: plan::adapter_sets::Turns::default(),
            spec_fit: speculate::StepFit::default(),
            spec_priors: speculate::Priors::default(),
            drafter: None,
            config: c,
        }
    }

    /// Draft with this runtime of a draft model (same vocabulary, same
    /// slots and context size; checked by the caller).
    pub(crate) fn with_drafter(mut self, rt: B) -> Self {
        let slots = self.config.max_seqs;
        self.drafter = Some(drafter::Drafter::new(rt, slots, self.n_batch));
        self
    }

    /// One iteration of the loop. Returns false when the engine should stop.
    pub(crate) fn tick(&mut self) -> bool {
        let t0 = Instant::now();
        if !self.intake() {
            return false;
        }
        let t1 = Instant::now();
        self.reap();
        let t2 = Instant::now();
        let before = self.seqs.len();
        self.admit();
        if self.seqs.len() > before {
            // Gauges (running, waiting) true during the step, not only
            // after it: the retire at the last step's end is already
            // published, and a router reading it would see a free slot.
            self.publish(None);
        }
        let t3 = Instant::now();
        self.flush_draining();
        let t4 = Instant::now();
        self.step();
        let t5 = Instant::now();
        let step = self.last_step.take();
        if step.is_none() {
            self.last_done = None;
        }
        self.publish(step);
        self.emit_kv_events();
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
        tracing::trace!(
            intake_ms = ms(t0, t1),
            reap_ms = ms(t1, t2),
            admit_ms = ms(t2, t3),
            flush_ms = ms(t3, t4),
            step_ms = ms(t4, t5),
            publish_ms = ms(t5, Instant::now()),
            "tick"
        );
        #[cfg(test)]
        self.check_cells();
        true
    }

    fn idle(&self) -> bool {
        self.seqs.is_empty() && self.waiting.is_empty()
    }

    /// Move submissions from the inbox into the waiting queue. Blocks only
    /// when there is nothing at all to do.
    fn intake(&mut self) -> bool {
        let mut may_block = true;
        loop {
            if self.inbox_closed {
                return !(self.idle() && self.draining.is_empty());
            }
            // Block only at the start of an iteration with nothing to do; a
            // command that leaves the owner idle (a cancel) ends the intake.
            let block = std::mem::take(&mut may_block) && self.idle() && self.draining.is_empty();
            let cmd = if block {
                match self.inbox.blocking_recv() {
                    Some(c) => c,
                    None => {
                        self.inbox_closed = true;
                        continue;
                    }
                }
            } else {
                match self.inbox.try_recv() {
                    Ok(c) => c,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        if self.seqs.is_empty() {
                            // Only queue timeouts or undelivered events: poll gently.
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        return true;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        self.inbox_closed = true;
                        continue;
                    }
                }
            };
            match cmd {
                Command::Submit(sub) => self.waiting.push_back(Waiting {
                    sub: *sub,
                    enqueued: Instant::now(),
                }),
                Command::Cancel(id) => self.cancel_by_id(&id),
                Command::CancelAll => self.cancel_all(),
                Command::Stop => self.inbox_closed = true,
                Command::LoadAdapter(spec, reply) => {
                    let _ = reply.send(self.load_adapter(&spec));
                }
                Command::CellMap(reply) => {
                    let _ = reply.send(self.cells.dump());
                }
                Command::Embed(sub) => {
                    self.queued.fetch_sub(1, Ordering::AcqRel);
                    let _ = sub.reply.send(Err(GenerationError::Runtime(
                        "this model generates text; it serves no embeddings".into(),
                    )));
                }
            }
        }
    }

    fn dequeue(&self) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
    }

    fn step(&mut self) {
        let t_plan = Instant::now();
        self.set_budget();
        // One adapter set per step (llama.cpp applies adapters per context).
        let set = self.step_set();
        let mut views: Vec<SeqView> = Vec::with_capacity(self.seqs.len());
        for s in self.seqs.iter().filter(|s| s.adapters == set) {
            let mut v = s.view();
            // A copy from this slot runs at the start of this step's decode.
            v.can_pad &= !self.pinned.contains(&s.slot);
            // In a unified pool a padded tail would cut into cells shared
            // with other slots and recompute private copies of them.
            v.can_pad &= !(self.cache.share && s.reused > 0);
            // A window or a recurrent state may not hold the earlier point.
            v.can_pad &= self.memory.kind == MemoryKind::Attention;
            views.push(v);
        }
        let mut plan = scheduler::plan(&views, &self.limits);
        scheduler::pad_tails(&mut plan, &views);
        scheduler::align_chunks(&mut plan, &views, self.config.chunk_align);
        scheduler::fit(&mut plan, &views, self.n_batch);
        let isolated = self.isolate(&mut plan);
        self.stop_before_last(&mut plan);
        if plan.is_empty() {
            return;
        }
        if let Err(e) = self.rt.set_adapters(&set) {
            let keys: Vec<u64> = views.iter().map(|v| v.key).collect();
            self.fail(
                &keys,
                format!("the step's LoRA adapters could not be set: {e}"),
            );
            return;
        }
        self.plan_drafts(&plan);
        let t = Instant::now();
        self.rt.clear();
        let mut rows: Vec<(usize, usize)> = Vec::new(); // (seq index, batch row)
        let mut scored: Vec<(usize, usize, usize)> = Vec::new(); // (seq, chunk, first row)
        let mut decoded_tokens: Vec<(usize, crate::runtime::TokenId)> = Vec::new(); // (slot, token)
        let mut built = Ok(());
        // Batch rows in slot order. With per-slot KV streams llama.cpp splits
        // a batch into one ubatch (one pass over the weights) per run of
        // consecutive slot ids in batch order: 8 decoders pushed in arrival
        // order could cost 8 passes instead of 1 (measured: 52 vs 29 ms).
        let mut order: Vec<usize> = (0..self.seqs.len()).collect();
        order.sort_unstable_by_key(|&i| self.seqs[i].slot);
        for si in order {
            let seq = &mut self.seqs[si];
            if plan.decode.contains(&seq.key) {
                let tok = seq.pending();
                match seq.push_decode(&mut self.rt) {
                    Ok(row) => {
                        rows.push((si, row));
                        decoded_tokens.extend(tok.map(|t| (seq.slot, t)));
                        decoded_tokens.extend(seq.drafts.iter().map(|&d| (seq.slot, d)));
                    }
                    Err(e) => built = Err(e),
                }
            } else if let Some(ci) = plan.chunks.iter().position(|c| c.key == seq.key) {
                match seq.push_chunk(&mut self.rt, &plan.chunks[ci]) {
                    Ok(r) => {
                        if let Some(row) = r.sample {
                            rows.push((si, row));
                        }
                        if let Some(first) = r.all_from {
                            scored.push((si, ci, first));
                        }
                    }
                    Err(e) => built = Err(e),
                }
            }
        }
        // Prompt tokens submitted for a client already gone when the step
        // was built (the reap just before makes this ~0 by construction).
        let wasted: usize = plan
            .chunks
            .iter()
            .filter(|c| {
                self.seqs
                    .iter()
                    .any(|s| s.key == c.key && s.outbox.is_closed())
            })
            .map(|c| c.len)
            .sum();
        let t_submit = Instant::now();
        // The device idled from the last step's completion to here when
        // the loop went straight on (host work on the critical path).
        let gap_ms = self
            .last_done
            .take()
            .map(|d| t_submit.saturating_duration_since(d).as_secs_f64() * 1e3);
        let submitted = built.and_then(|_| self.rt.submit());
        let submit_ms = t_submit.elapsed().as_secs_f64() * 1e3;
        if let Err(e) = submitted {
            self.step_failed(&plan, &e);
            return;
        }
        self.step_ok(isolated);
        // While an asynchronous device computes the step: bookkeeping that
        // needs none of its outputs (the runtime is not touched until
        // `wait`). The step's cells, into the cell map: each decoder's
        // token, each chunk's run (a padded tail replaces the cells it
        // recomputed).
        let t_overlap = Instant::now();
        let n_prompt: usize = plan.chunks.iter().map(|c| c.len).sum();
        let tick = self.next_key;
        let pkey = plan::adapter_sets::key_for(self.prefix_key, &set);
        for &(slot, tok) in &decoded_tokens {
            self.cells.extend(slot, pkey, &[tok], tick);
        }
        for c in &plan.chunks {
            if let Some(seq) = self.seqs.iter_mut().find(|s| s.key == c.key) {
                self.cells.truncate(seq.slot, c.start);
                let run = &seq.prompt[c.start..c.start + c.len];
                self.cells.extend(seq.slot, pkey, run, tick);
                seq.chunk_done(c);
            }
        }
        let overlap_ms = t_overlap.elapsed().as_secs_f64() * 1e3;
        let t_wait = Instant::now();
        self.rt.wait();
        let done = Instant::now();
        let wait_ms = done.saturating_duration_since(t_wait).as_secs_f64() * 1e3;
        let runtime_ms = submit_ms + wait_ms;
        let t_out = Instant::now();
        self.mirror_memory(&plan);
        for &(si, ci, first) in &scored {
            self.seqs[si].score_chunk(&self.rt, &plan.chunks[ci], first);
        }
        let mut row_of: Vec<Option<usize>> = vec![None; self.seqs.len()];
        for &(si, row) in &rows {
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
        rows::emit(jobs, &self.vocab, self.config.sample_threads);
        let n_drafts: usize = self.seqs.iter().map(|s| s.drafts.len()).sum();
        // For the trace only (the drafts it counts end below).
        let passes = tracing::enabled!(tracing::Level::TRACE).then(|| self.passes(&plan));
        let emitted: u64 = self.seqs.iter().map(|s| u64::from(s.step_emitted)).sum();
        self.end_drafts();
        let out_ms = t_out.elapsed().as_secs_f64() * 1e3;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        tracing::trace!(
            decode = plan.decode.len(),
            drafts = n_drafts,
            passes = passes.unwrap_or(0),
            chunks = plan.chunks.len(),
            prompt = n_prompt,
            runtime_ms = runtime_ms,
            ms = ms,
            plan_ms = t.saturating_duration_since(t_plan).as_secs_f64() * 1e3,
            build_ms = t_submit.saturating_duration_since(t).as_secs_f64() * 1e3,
            submit_ms,
            wait_ms,
            overlap_ms,
            out_ms,
            gap_ms = gap_ms.unwrap_or(-1.0),
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
        self.cost
            .observe(plan.decode.len() + n_drafts, n_prompt, ms, ctx);
        // The draft cost line is fitted on decode steps only: a prompt
        // chunk's tokens cost less each than a decoder's extra rows (on
        // the CPU the second row of a step costs most of the first).
        if n_prompt == 0 {
            self.spec_fit.observe(plan.decode.len() + n_drafts, ms);
        }
        let record = crate::deliver::stats::StepRecord {
            n: 0,
            at_ms: crate::deliver::stats::unix_ms(),
            decode: plan.decode.len() as u32,
            prompt: n_prompt as u32,
            chunks: plan.chunks.len() as u32,
            plan_ms: (t.saturating_duration_since(t_plan).as_secs_f64() * 1e3) as f32,
            build_ms: (t_submit.saturating_duration_since(t).as_secs_f64() * 1e3) as f32,
            wait_ms: runtime_ms as f32,
            out_ms: (overlap_ms + out_ms) as f32,
            ms: ms as f32,
        };
        let cost = self.cost.cost();
        self.stats.send_modify(|s| {
            s.steps += 1;
            let rec = crate::deliver::stats::StepRecord {
                n: s.steps,
                ..record
            };
            crate::deliver::stats::push_bounded(
                &mut s.recent_steps,
                crate::deliver::stats::STEP_HISTORY,
                rec,
            );
            s.step_runtime_ms_total += runtime_ms;
            s.step_ms.observe(ms);
            s.step_cost = cost;
            s.prompt_tokens_after_cancel += wasted as u64;
            s.step_host_ms_total += ms - runtime_ms;
            if let Some(g) = gap_ms {
                s.step_gap_ms_total += g;
                s.step_gaps += 1;
            }
            s.generated_tokens_total += emitted;
            s.prompt_tokens_total += n_prompt as u64;
        });
        let mut i = 0;
        while i < self.seqs.len() {
            if let Some(out) = self.seqs[i].outcome.take() {
                let seq = self.seqs.remove(i);
                self.retire(seq, Some(out));
            } else {
                i += 1;
            }
        }
        self.last_step = Some((ms, plan.n_tokens()));
        self.last_done = Some(done);
    }

    fn fail(&mut self, keys: &[u64], msg: String) {
        let mut i = 0;
        while i < self.seqs.len() {
            if keys.contains(&self.seqs[i].key) {
                let seq = self.seqs.remove(i);
                let err = GenerationError::Runtime(msg.clone());
                self.retire(seq, Some(Outcome::Failed(err)));
            } else {
                i += 1;
            }
        }
    }

    /// The one place an admitted sequence ends: clear its slot's KV cells
    /// (the step that used them has completed), return the slot, drop the
    /// permit (releasing its reservation), queue its terminal event.
    fn retire(&mut self, mut seq: Sequence, outcome: Option<Outcome>) {
        // Finished or cancelled between steps, the slot's cells are sound:
        // the prefix cache keeps them. A failed step's cells are not.
        let sound = !matches!(outcome, Some(Outcome::Failed(_)));
        let kept = if sound && self.cache.enabled {
            // (Cleared instead where the memory cannot be cut there.)
            self.kv_truncate(seq.slot, seq.kv_len())
        } else {
            0
        };
        if kept == 0 {
            self.kv_clear(seq.slot);
            self.free_slots.push(seq.slot);
        } else {
            self.cache.insert(kv::prefix::Entry {
                slot: seq.slot,
                key: plan::adapter_sets::key_for(self.prefix_key, &seq.adapters),
                last_used: self.next_key,
            });
        }
        if let Some((ns, steps)) = seq.constraint_cost() {
            self.stats.send_modify(|s| {
                s.constraint_ns_total += ns;
                s.constraint_tokens_total += steps;
                s.constrained_requests_total += 1;
            });
        }
        let Some(outcome) = outcome else {
            return; // cancelled: nobody to tell; `seq` (and its permit) drop here.
        };
        let failed = matches!(outcome, Outcome::Failed(_));
        let events = seq.terminal_events(outcome);
        self.stats.send_modify(|s| {
            if failed {
                s.requests_failed += 1
            } else {
                s.requests_finished += 1
            }
        });
        let mut d = Draining {
            id: seq.id.clone(),
            outbox: seq.outbox.clone(),
            events,
        };
        drop(seq);
        if flush(&mut d) {
            self.draining.push(d);
        }
    }

    fn flush_draining(&mut self) {
        self.draining.retain_mut(flush);
        for seq in &mut self.seqs {
            seq.flush_text();
        }
    }

    fn publish(&mut self, step: Option<(f64, usize)>) {
        self.sync_ledger();
        let running = self.seqs.iter().filter(|s| s.is_decoding()).count();
        let prefilling = self.seqs.len() - running;
        let (used, reserved, permits) = (
            self.ledger.used(),
            self.ledger.reserved(),
            self.ledger.permits(),
        );
        let waiting = self.queued.load(Ordering::Acquire);
        let budget = self.limits.prompt_budget;
        let paused = self
            .seqs
            .iter()
            .filter(|s| s.paused_since.is_some())
            .count();
        let outboxes = self.seqs.len() + self.draining.len() + self.waiting.len();
        let (cached_cells, cached_entries) = (self.ledger.cached(), self.cache.len());
        let (host_bytes, host_entries) = (self.host.bytes(), self.host.len());
        let (checkpoints, checkpoint_bytes) = (self.memory.count(), self.memory.bytes());
        let physical = match (self.state_base, self.state_sampled) {
            // Every second while busy (it walks every cell: ~1-4 ms at 64 slots of 512), and always once idle (the loop then
            // blocks until the next command).
            (Some(base), t) if self.idle() || t.is_none_or(|t| t.elapsed().as_millis() >= 1000) => {
                self.state_sampled = Some(Instant::now());
                self.rt.state_bytes().map(|b| b.saturating_sub(base) as u64)
            }
            _ => None,
        };
        let live: Vec<crate::deliver::stats::LiveRequest> = self
            .waiting
            .iter()
            .map(|w| crate::deliver::stats::LiveRequest {
                id: w.sub.req.id.clone(),
                state: "queued",
                prompt_tokens: w.sub.req.prompt.len(),
                prompt_computed: 0,
                generated: 0,
                age_ms: w.sub.req.arrival.elapsed().as_secs_f64() * 1e3,
            })
            .chain(self.seqs.iter().map(Sequence::live))
            .chain(
                self.draining
                    .iter()
                    .map(|d| crate::deliver::stats::LiveRequest {
                        id: d.id.clone(),
                        state: "retiring",
                        ..Default::default()
                    }),
            )
            .collect();
        if let Some((run, wait)) = self.lora_names() {
            self.stats.send_if_modified(|s| {
                let changed = s.lora_running != run || s.lora_waiting != wait;
                s.lora_running = run;
                s.lora_waiting = wait;
                changed
            });
        }
        self.stats.send_if_modified(|s| {
            let before = (
                s.running,
                s.prefilling,
                s.kv_cells_used,
                s.kv_cells_reserved,
                s.waiting,
                s.paused,
                s.live_outboxes,
                s.kv_cells_cached,
                s.prefix_host_bytes,
                s.checkpoint_bytes,
            );
            s.running = running;
            s.prefilling = prefilling;
            s.kv_cells_used = used;
            s.kv_cells_reserved = reserved;
            s.permits = permits;
            s.waiting = waiting;
            s.prompt_budget = budget;
            s.paused = paused;
            s.live_outboxes = outboxes;
            s.kv_cells_cached = cached_cells;
            s.prefix_entries = cached_entries;
            s.prefix_host_bytes = host_bytes;
            s.prefix_host_entries = host_entries;
            s.checkpoints = checkpoints;
            s.checkpoint_bytes = checkpoint_bytes;
            if let Some(p) = physical {
                s.kv_bytes_physical = p;
            }
            let live_changed = s.live.len() != live.len()
                || s.live
                    .iter()
                    .zip(&live)
                    .any(|(a, b)| a.id != b.id || a.state != b.state);
            s.live = live;
            if let Some((ms, n)) = step {
                s.last_step_ms = ms;
                s.last_step_tokens = n;
                return true;
            }
            live_changed
                || before
                    != (
                        running,
                        prefilling,
                        used,
                        reserved,
                        waiting,
                        paused,
                        outboxes,
                        cached_cells,
                        host_bytes,
                        checkpoint_bytes,
                    )
        });
    }

    /// The inbox closed: fail what is still queued, deliver what we can.
    fn shutdown(&mut self) {
        for w in self.waiting.drain(..) {
            let _ = w
                .sub
                .outbox
                .try_send(Event::Error(GenerationError::Shutdown));
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
        for mut d in self.draining.drain(..) {
            while let Some(ev) = d.events.pop_front() {
                let _ = d.outbox.try_send(ev);
            }
        }
        self.stats.send_modify(|s| s.stopped = true);
        self.kv_stopped();
        tracing::info!("engine stopped");
    }
}

/// Try to deliver queued events; true while some remain (and the client is
/// still there).
fn flush(d: &mut Draining) -> bool {
    while let Some(ev) = d.events.pop_front() {
        match d.outbox.try_send(ev) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(ev)) => {
                d.events.push_front(ev);
                return true;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests;
