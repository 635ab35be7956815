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
mod disk;
mod drafts;
pub mod embed;
mod faults;
pub mod inbox;
mod intake;
pub mod interrupt;
pub mod kv;
mod kvpublish;
mod pins;
pub mod plan;
mod preempt;
mod publish;
mod reap;
mod retire;
mod rows;
mod sequence;
mod slots;
pub mod spec;
mod start;
mod state;
mod step;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use crate::admission::kv::{KvLedger, StateModel};
use crate::config::EngineConfig;
use crate::deliver::stats::EngineStats;
use crate::runtime::backend::Backend;
use crate::runtime::{LoadedModel, MemoryKind, Vocab};
pub(crate) use inbox::{Command, Submission};
use kv::key::PrefixKey;
use plan::cost::StepCostModel;
use plan::scheduler::{self, StepLimits};
use sequence::Sequence;
use spec::drafter;
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
    /// The cores the steps share with the media encoder, turn by turn
    /// (a model with a projector).
    pub cores: Option<Arc<crate::cores::Cores>>,
    /// The inbox, for the alarm that wakes an idle owner (pins' holds).
    pub wake: Option<mpsc::WeakSender<Command>>,
    /// The flag a newcomer raises to interrupt the step in flight
    /// (`owner/interrupt.rs`), shared with the handle.
    pub interrupt: Arc<interrupt::Interrupt>,
}

/// A submitted request waiting for a slot: nothing allocated yet.
struct Waiting {
    sub: Submission,
    enqueued: Instant,
    /// Arrival order (ranks break ties by it).
    order: u64,
    /// The owner's step count when it arrived.
    step: u64,
}

pub(crate) struct Owner<B: Backend> {
    rt: B,
    vocab: Arc<Vocab>,
    config: EngineConfig,
    /// The step's limits and cost model, the adapter sets' turns, the
    /// sequences of a failed step to run alone (`faults.rs`).
    limits: StepLimits,
    cost: StepCostModel,
    turns: plan::adapter_sets::Turns,
    suspects: Vec<u64>,
    /// Rows one step may carry (the runtime's `n_batch`).
    n_batch: usize,
    ctx_limit: u32,
    /// Admission: the KV ledger, its state model, host memory pressure.
    state_model: StateModel,
    ledger: KvLedger,
    pressure: bool,
    pressure_checked: Instant,
    queue: state::Queue,
    /// Admitted sequences, oldest first.
    seqs: Vec<Sequence>,
    next_key: u64,
    kv: state::KvState,
    prefix_key: PrefixKey,
    spec: state::SpecState<B>,
    clock: state::Clock,
    stats: watch::Sender<EngineStats>,
    /// Loaded LoRA adapters (published).
    adapters: Arc<std::sync::RwLock<Vec<crate::config::AdapterInfo>>>,
    cores: Option<Arc<crate::cores::Cores>>,
    /// Who goes first: the policy, the fair-share counters, the arrival
    /// counter (`owner/plan/tenancy.rs`, `owner/preempt.rs`).
    policy: plan::tenancy::Policy,
    tenants: plan::tenancy::Counters,
    next_order: u64,
    /// Wakes the owner when a pin's hold ends (`owner/pins.rs`).
    pin_alarm: Option<pins::Alarm>,
    /// Interrupting the step in flight (`owner/interrupt.rs`).
    interrupt: Arc<interrupt::Interrupt>,
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
        let kv = state::KvState::new(&c, kind, rt.state_bytes());
        let mut rt = rt;
        rt.set_interrupt(args.interrupt.flag());
        let mut owner = Owner {
            rt,
            vocab,
            limits: StepLimits {
                prompt_budget: c.step.prompt_budget,
                max_prefill_seqs: c.step.max_prefill_seqs.max(1),
                max_decode_seqs: c.step.max_decode_seqs.clamp(1, c.admit.max_seqs),
                expedite: Vec::new(),
                min_chunk: scheduler::EFFICIENT_CHUNK,
            },
            cost: StepCostModel::default(),
            turns: plan::adapter_sets::Turns::default(),
            suspects: Vec::new(),
            n_batch: runtime_params(&c).n_batch as usize,
            ctx_limit,
            state_model,
            ledger: KvLedger::new(match state_model {
                StateModel::PerToken => u64::from(c.admit.ctx_per_seq) * c.admit.max_seqs as u64,
                StateModel::PerSequence => c.admit.max_seqs as u64,
            }),
            pressure: false,
            pressure_checked: Instant::now(),
            queue: state::Queue::new(args.inbox, args.queued),
            seqs: Vec::new(),
            next_key: 0,
            kv,
            prefix_key: args.prefix_key,
            spec: state::SpecState::default(),
            clock: state::Clock::default(),
            stats: args.stats,
            adapters: args.adapters,
            cores: args.cores,
            policy: plan::tenancy::Policy {
                policy: c.admit.policy,
                fair_share: c.admit.fair_share,
                preempt: c.admit.preempt,
            },
            tenants: plan::tenancy::Counters::default(),
            next_order: 0,
            pin_alarm: args
                .wake
                .filter(|_| c.admit.pin_bytes > 0)
                .and_then(pins::Alarm::start),
            interrupt: args.interrupt,
            config: c,
        };
        owner.disk_start();
        owner
    }

    /// Draft with this runtime of a draft model (same vocabulary, same
    /// slots and context size; checked by the caller).
    pub(crate) fn with_drafter(mut self, rt: B) -> Self {
        let slots = self.config.admit.max_seqs;
        self.spec.drafter = Some(drafter::Drafter::new(rt, slots, self.n_batch));
        self
    }

    /// One iteration of the loop. Returns false when the engine should stop.
    pub(crate) fn tick(&mut self) -> bool {
        let t0 = Instant::now();
        // The disk tier's reports; while nothing runs, idle slots' entries
        // are written (before the intake blocks).
        self.disk_idle();
        self.pins_tick();
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
        // The encoder's slice ends before a step that has work.
        let cores = self.cores.clone().filter(|_| !self.seqs.is_empty());
        if let Some(c) = &cores {
            c.step_begin();
        }
        self.step();
        let t5 = Instant::now();
        let step = self.clock.last_step.take();
        if let Some(c) = &cores {
            c.step_end(step.map(|s| std::time::Duration::from_secs_f64(s.0 / 1e3)));
        }
        if step.is_none() {
            self.clock.last_done = None;
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
        self.seqs.is_empty() && self.queue.waiting.is_empty() && self.queue.parked.is_empty()
    }
}

#[cfg(test)]
mod tests;
