//! The engine's read-only snapshot (`EngineStats`), published by the
//! execution owner through a `watch` channel after every step, and the small
//! fixed-bucket histogram it carries. `/ready`, `/metrics` and tests read it
//! without touching the owner thread.

use crate::config::EngineConfig;

/// Upper bounds, in milliseconds, shared by every engine histogram.
pub const BUCKETS_MS: [f64; 14] = [
    1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0,
];

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Cumulative counts per bucket of `BUCKETS_MS`.
    pub counts: [u64; BUCKETS_MS.len()],
    pub sum_ms: f64,
    pub n: u64,
    pub max_ms: f64,
}

impl Histogram {
    pub fn observe(&mut self, ms: f64) {
        for (i, b) in BUCKETS_MS.iter().enumerate() {
            if ms <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum_ms += ms;
        self.n += 1;
        self.max_ms = self.max_ms.max(ms);
    }
}

/// Where a request was when its client left or it was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelState {
    Queued,
    Prefilling,
    Decoding,
}

impl CancelState {
    pub const ALL: [CancelState; 3] = [Self::Queued, Self::Prefilling, Self::Decoding];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Prefilling => "prefilling",
            Self::Decoding => "decoding",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One live request, for `/debug/requests`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LiveRequest {
    pub id: String,
    /// queued, prefilling, decoding, paused or retiring.
    pub state: &'static str,
    pub prompt_tokens: usize,
    pub prompt_computed: usize,
    pub generated: u32,
    pub age_ms: f64,
}

/// Steps kept in `EngineStats::recent_steps` (the dashboard's timeline).
pub const STEP_HISTORY: usize = 256;
/// Cancellations kept in `EngineStats::recent_cancels`.
pub const CANCEL_HISTORY: usize = 64;

/// Milliseconds since the Unix epoch (the dashboard's clock).
pub fn unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// One step of the owner, as the dashboard draws it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StepRecord {
    /// The step's number (`EngineStats::steps` after it).
    pub n: u64,
    /// When it ended, Unix milliseconds.
    pub at_ms: f64,
    /// Sequences that decoded one token; prompt tokens computed; chunks.
    pub decode: u32,
    pub prompt: u32,
    pub chunks: u32,
    /// Planning, building the batch, the runtime (submit + wait), reading
    /// the outputs (sample, detokenize, emit), the whole step.
    pub plan_ms: f32,
    pub build_ms: f32,
    pub wait_ms: f32,
    pub out_ms: f32,
    pub ms: f32,
}

/// One cancellation, from notice to retirement.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CancelRecord {
    /// Its number (`EngineStats::requests_cancelled` after it).
    pub n: u64,
    pub id: String,
    /// queued, prefilling or decoding.
    pub state: &'static str,
    pub latency_ms: f64,
    pub at_ms: f64,
}

/// Push onto a bounded history, dropping the oldest.
pub(crate) fn push_bounded<T>(q: &mut std::collections::VecDeque<T>, cap: usize, v: T) {
    if q.len() >= cap {
        q.pop_front();
    }
    q.push_back(v);
}

/// The prefix cache's disk tier: what it holds, what it wrote and read.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct DiskStats {
    pub enabled: bool,
    /// Bytes and entries on disk; their budget.
    pub bytes: u64,
    pub entries: usize,
    pub budget: u64,
    /// Bytes queued to the disk thread (host memory until written).
    pub queued_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub write_failures: u64,
    /// Writes not queued because the queue was full.
    pub write_drops: u64,
    /// Entries read back to restore a prompt, and their bytes.
    pub reads: u64,
    pub read_bytes: u64,
    /// Entries deleted because a check failed.
    pub corrupt: u64,
    pub evictions: u64,
    /// Matches left on disk because recomputing was estimated cheaper.
    pub skipped: u64,
    /// Measured bandwidth, MB/s (0: not measured).
    pub read_mb_s: f64,
    pub write_mb_s: f64,
}

/// Read-only snapshot published after every step.
#[derive(Debug, Clone, Default)]
pub struct EngineStats {
    pub ready: bool,
    pub stopped: bool,
    /// The owner thread panicked: the engine is gone and the process should
    /// end (`/health` answers 503, `serve` exits non-zero).
    pub failed: bool,
    pub draining: bool,
    pub load_ms: f64,
    pub warmup_ms: f64,
    pub slots_total: usize,
    pub running: usize,
    /// Adapters of admitted and of waiting requests (names, sorted; for
    /// `vllm:lora_requests_info`).
    pub lora_running: Vec<String>,
    pub lora_waiting: Vec<String>,
    pub prefilling: usize,
    pub waiting: usize,
    /// Decoding sequences paused because their reader lags.
    pub paused: usize,
    /// Admitted sequences plus undelivered terminal events plus queued
    /// requests: every outbox the owner still holds.
    pub live_outboxes: usize,
    pub kv_cells_used: u64,
    pub kv_cells_reserved: u64,
    pub kv_cells_total: u64,
    pub kv_bytes_per_cell: u64,
    /// Bytes of every slot's state when full: per-token cells, window
    /// layers' cells (capped), recurrent state (0: `kv_cells_total` cells).
    pub kv_pool_bytes: u64,
    /// Compute buffers, measured at startup (RSS growth across context
    /// creation and warm-up, minus the KV pool).
    pub compute_bytes: u64,
    /// Admission is throttled because the host is short of memory.
    pub memory_pressure: bool,
    pub permits: u64,
    pub steps: u64,
    pub prompt_tokens_total: u64,
    pub generated_tokens_total: u64,
    /// Speculative decoding: tokens drafted, drafts accepted, drafts (one
    /// per sequence per step that carried any).
    pub spec_draft_tokens_total: u64,
    pub spec_accepted_tokens_total: u64,
    pub spec_drafts_total: u64,
    /// The draft model: cells its KV holds (every slot), its steps and
    /// their time.
    pub draft_kv_cells: u64,
    pub draft_steps_total: u64,
    pub draft_ms_total: f64,
    pub requests_finished: u64,
    pub requests_cancelled: u64,
    pub requests_failed: u64,
    pub requests_timed_out_in_queue: u64,
    pub requests_deadline_exceeded: u64,
    pub requests_slow_reader_terminated: u64,
    /// Cancellations by the state they happened in (`CancelState::index`).
    pub cancelled_by_state: [u64; 3],
    /// From the moment the transport noticed (the stream was dropped) or the
    /// cancel command arrived, to the final retirement of all state.
    pub cancel_latency: [Histogram; 3],
    /// p50, p99 and max (ms) of the last 4,096 cancellation latencies per state.
    pub cancel_latency_quantiles: [[f64; 3]; 3],
    /// Prompt tokens computed for sequences whose client had already left
    /// when the step was planned (should stay 0).
    pub prompt_tokens_after_cancel: u64,
    pub step_ms: Histogram,
    pub queue_wait_ms: Histogram,
    pub last_step_ms: f64,
    pub last_step_tokens: usize,
    /// Time inside the runtime (llama_decode) summed over steps.
    pub step_runtime_ms_total: f64,
    /// Steward's own work per step (planning, batch building, sampling,
    /// detokenizing, event delivery) summed over steps.
    pub step_host_ms_total: f64,
    /// Time from a step's completion to the next step's submission, summed
    /// over back-to-back steps (the device idles), and their count.
    pub step_gap_ms_total: f64,
    pub step_gaps: u64,
    pub prompt_budget: usize,
    /// Prefix cache: admitted requests looked up, those that reused state,
    /// prompt tokens reused, entries evicted, whole-stream copies, cells and
    /// entries held now.
    pub prefix_lookups: u64,
    pub prefix_hits: u64,
    pub prefix_reused_tokens: u64,
    pub prefix_evictions: u64,
    pub prefix_copies: u64,
    /// Reused tokens × the learned per-prompt-token step cost.
    pub prefix_saved_ms_estimate: f64,
    /// The step cost model's fitted terms (`cost::StepCostModel`),
    /// None before a step with prompt tokens.
    pub step_cost: Option<crate::owner::plan::cost::StepCost>,
    /// Time spent evicting (releasing the entries' cells).
    pub prefix_eviction_ms_total: f64,
    pub kv_cells_cached: u64,
    pub prefix_entries: usize,
    /// KV bytes llama.cpp really holds (its state size now minus when
    /// empty: each cell once, shared cells of a unified pool included once),
    /// sampled at most every second while busy.
    pub kv_bytes_physical: u64,
    /// Host tier: entries saved on eviction, entries restored into a slot,
    /// bytes and entries held now, time spent saving and restoring.
    pub prefix_spills: u64,
    pub prefix_restores: u64,
    pub prefix_restored_tokens: u64,
    pub prefix_host_bytes: u64,
    pub prefix_host_entries: usize,
    pub prefix_host_ms_total: f64,
    /// Preemption (`owner/preempt.rs`): sequences moved off their slots
    /// with their state saved to host memory, or to be recomputed (no
    /// room); resumed; time saving and restoring; cells recomputed; held
    /// now (sequences and host bytes).
    pub preempt_swapped: u64,
    pub preempt_recomputed: u64,
    pub preempt_resumed: u64,
    pub preempt_save_ms_total: f64,
    pub preempt_restore_ms_total: f64,
    pub preempt_recomputed_tokens: u64,
    pub preempted: usize,
    pub preempted_bytes: u64,
    /// Steps interrupted for a request that outranked them
    /// (`owner/interrupt.rs`), and the compute they had spent.
    pub steps_interrupted: u64,
    pub interrupted_ms_total: f64,
    /// Steps that computed a burst of short prompts whole
    /// (`owner/budget.rs::burst`).
    pub burst_steps: u64,
    /// The disk tier (`owner/kv/disk.rs`; zero when off).
    pub disk: DiskStats,
    /// Pinned prefixes (`owner/pins.rs`): held now (entries, host bytes),
    /// made, past their hold, refused for want of pin budget.
    pub pinned_entries: usize,
    pub pinned_bytes: u64,
    pub pins_created: u64,
    pub pins_expired: u64,
    pub pins_refused: u64,
    /// How the model's memory holds a sequence: `attention`,
    /// `sliding_window`, `recurrent` or `hybrid` (`MemoryKind::name`).
    pub memory_kind: &'static str,
    /// `EngineConfig::prefix_cache` (`vllm:cache_config_info`).
    pub prefix_cache_enabled: bool,
    /// Sliding-window width (0: none, or kept whole with `--swa-full`).
    pub swa_window: u32,
    /// Bytes of the state that cannot be rewound, measured from llama.cpp at
    /// startup: per sliding-window cell, per slot of recurrent state.
    pub window_bytes_per_cell: u64,
    pub recurrent_bytes_per_slot: u64,
    /// Sliding-window cells held over all slots now (each slot's `lo..len`).
    pub window_cells_held: u64,
    /// Slots holding a recurrent state now.
    pub recurrent_slots_held: u64,
    /// Checkpoints of state that cannot be rewound: taken, restored into a
    /// slot (a prefix reused through one), held now and their bytes.
    pub checkpoints_taken: u64,
    pub checkpoint_restores: u64,
    pub checkpoints: usize,
    pub checkpoint_bytes: u64,
    /// Constrained decoding (grammars, JSON schemas, forced tool calls):
    /// owner-thread time spent masking and advancing, the tokens it covered,
    /// and the requests that carried a constraint (counted at retirement).
    pub constraint_ns_total: u64,
    pub constraint_tokens_total: u64,
    pub constrained_requests_total: u64,
    /// Every queued and admitted request, refreshed each iteration (and
    /// finished ones still flushing to their client: `retiring`).
    pub live: Vec<LiveRequest>,
    /// The last `STEP_HISTORY` steps and `CANCEL_HISTORY` cancellations.
    pub recent_steps: std::collections::VecDeque<StepRecord>,
    pub recent_cancels: std::collections::VecDeque<CancelRecord>,
}

impl EngineStats {
    pub(crate) fn starting(c: &EngineConfig, load_ms: f64) -> Self {
        EngineStats {
            load_ms,
            slots_total: c.admit.max_seqs,
            kv_cells_total: u64::from(c.admit.ctx_per_seq) * c.admit.max_seqs as u64,
            prompt_budget: c.step.prompt_budget,
            prefix_cache_enabled: c.admit.prefix_cache,
            ..Default::default()
        }
    }
}
