//! ③ execute — the owner's state, in parts: the queue (`Queue`), what the
//! KV cells hold (`KvState`), speculation's learned state (`SpecState`)
//! and the step clock (`Clock`). Each is built here from the
//! configuration; `Owner` (in `mod.rs`) holds one of each beside the
//! runtime, the sequences, the ledger and the step's limits.

use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::config::EngineConfig;
use crate::owner::inbox::Command;
use crate::owner::kv::cells::CellTrie;
use crate::owner::kv::memstate::SlotMemory;
use crate::owner::kv::prefix::PrefixCache;
use crate::owner::kv::spill::HostTier;
use crate::owner::kvpublish::KvOut;
use crate::owner::retire::Draining;
use crate::owner::spec::drafter::Drafter;
use crate::owner::spec::speculate;
use crate::owner::Waiting;
use crate::runtime::backend::Backend;
use crate::runtime::MemoryKind;

/// Commands in, requests waiting for a slot, terminal events waiting for
/// their client.
pub(crate) struct Queue {
    pub inbox: mpsc::Receiver<Command>,
    /// The inbox closed (every handle dropped, or `Stop`).
    pub closed: bool,
    pub waiting: VecDeque<Waiting>,
    /// Sequences preempted off their slots, waiting to resume
    /// (`owner/preempt.rs`).
    pub parked: Vec<crate::owner::preempt::Parked>,
    /// Requests submitted and not yet admitted or dropped (shared with the
    /// handle, which refuses submissions past `max_waiting`).
    pub queued: Arc<AtomicUsize>,
    pub draining: Vec<Draining>,
}

impl Queue {
    pub fn new(inbox: mpsc::Receiver<Command>, queued: Arc<AtomicUsize>) -> Self {
        Queue {
            inbox,
            closed: false,
            waiting: VecDeque::new(),
            parked: Vec::new(),
            queued,
            draining: Vec::new(),
        }
    }
}

/// What the KV cells hold and who may reuse them.
pub(crate) struct KvState {
    /// Slots holding nothing (unordered: `take_slot` chooses).
    pub free_slots: Vec<usize>,
    pub cache: PrefixCache,
    /// The prefix cache's host-memory tier (evicted entries' saved state).
    pub host: HostTier,
    /// The disk tier below it and its thread (`owner/disk.rs`; None: off).
    pub disk: Option<crate::owner::kv::disk::DiskTier>,
    pub disk_io: Option<crate::owner::kv::diskfile::DiskIo>,
    /// What every slot's KV cells hold, shared cells once
    /// (`owner/kv/cells.rs`): the ledger's `held` and the evictions' order
    /// come from it.
    pub cells: CellTrie,
    /// What slots hold beyond their cells' tokens, per layer kind (the
    /// sliding window's lowest position, checkpoints): `owner/kv/memstate.rs`.
    pub memory: SlotMemory,
    /// Slots this admission pass must not evict: copy sources (the copy
    /// runs at the start of this iteration's step) and taken-over entries.
    pub pinned: Vec<usize>,
    /// The runtime's state size when no cell is in use, and when it was
    /// last sampled (`EngineStats::kv_bytes_physical`).
    pub state_base: Option<usize>,
    pub state_sampled: Option<Instant>,
    /// KV events out (`--kv-events`; `owner/kvpublish.rs`).
    pub out: Option<KvOut>,
}

impl KvState {
    pub fn new(c: &EngineConfig, kind: MemoryKind, state_base: Option<usize>) -> Self {
        let mut cache = PrefixCache::new(
            c.admit.prefix_cache,
            c.admit.prefix_copy_min,
            c.model.kv_unified,
        );
        cache.exact = kind == MemoryKind::Attention;
        // No copies of a recurrent state (a copy cannot be cut short), nor
        // of window cells in a unified pool: llama.cpp never overwrites a
        // cell two sequences hold, so shared cells behind both windows
        // would fill its window pool (`n_swa * slots + ubatch` cells) until
        // a step finds no room.
        cache.copies = match kind {
            MemoryKind::Recurrent { .. } => false,
            MemoryKind::Window { .. } => !c.model.kv_unified,
            MemoryKind::Attention => true,
        };
        // KV events: blocks are only meaningful where cells are reusable at
        // any length (full attention).
        let out = c
            .deliver
            .kv_events
            .clone()
            .filter(|_| kind == MemoryKind::Attention)
            .map(|s| KvOut::new(s, c.model.n_gpu_layers > 0));
        let mut cells = CellTrie::new(c.model.kv_unified);
        if out.is_some() {
            cells.track_blocks();
        }
        // (The host tier's entries restart only where their saved state
        // reaches.)
        let host_bytes = if c.admit.prefix_cache {
            c.admit.prefix_host_bytes
        } else {
            0
        };
        let mut host = HostTier::new(host_bytes, c.admit.prefix_host_min);
        host.park_budget = c.admit.prefix_host_bytes;
        host.pin_budget = if c.admit.prefix_cache {
            c.admit.pin_bytes
        } else {
            0
        };
        KvState {
            free_slots: (0..c.admit.max_seqs).collect(),
            cache,
            host,
            disk: None,
            disk_io: None,
            cells,
            memory: SlotMemory::new(kind, c.admit.max_seqs, c.admit.checkpoint_bytes),
            pinned: Vec::new(),
            state_base,
            state_sampled: None,
            out,
        }
    }
}

/// Speculation's learned state and the draft model.
pub(crate) struct SpecState<B: Backend> {
    /// Step time against the step's tokens, for pricing draft rows.
    pub fit: speculate::StepFit,
    /// Acceptance new requests start from, per class (learned).
    pub priors: speculate::Priors,
    /// The draft model's runtime (`--draft-model`).
    pub drafter: Option<Drafter<B>>,
}

impl<B: Backend> Default for SpecState<B> {
    fn default() -> Self {
        SpecState {
            fit: speculate::StepFit::default(),
            priors: speculate::Priors::default(),
            drafter: None,
        }
    }
}

/// The step clock: what the one publish per iteration reports.
#[derive(Default)]
pub(crate) struct Clock {
    /// Steps run (a request's `wait_steps` counts them).
    pub steps: u64,
    /// Duration and tokens of this iteration's step, for the one publish.
    pub last_step: Option<(f64, usize)>,
    /// When the last step's outputs were handled, if the loop has gone
    /// straight on since (taken by the next step: the device's idle gap).
    pub last_done: Option<Instant>,
    /// Last cancellation latencies per state (bounded), for quantiles.
    pub cancel_samples: [VecDeque<f64>; 3],
    /// The last step was interrupted (`owner/interrupt.rs`): the next one
    /// may not be.
    pub interrupted_last: bool,
}
