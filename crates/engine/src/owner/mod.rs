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
mod intake;
pub mod kv;
mod kvpublish;
pub mod plan;
mod publish;
mod reap;
mod retire;
mod rows;
mod sequence;
mod slots;
pub mod spec;
mod start;
mod step;

use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use crate::admission::kv::{Ledger, StateModel};
use crate::config::EngineConfig;
use crate::deliver::stats::EngineStats;
use crate::runtime::backend::Backend;
use crate::runtime::{LoadedModel, MemoryKind, Vocab};
pub(crate) use inbox::{Command, Submission};
use kv::key::PrefixKey;
use kv::prefix::PrefixCache;
use kv::{cells, memstate, spill};
use plan::cost::StepCostModel;
use plan::scheduler::{self, StepLimits};
use sequence::Sequence;
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
    draining: Vec<retire::Draining>,
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
}

#[cfg(test)]
mod tests;
