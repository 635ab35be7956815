//! The engine's handle (`EngineHandle`): what the server holds of a loaded
//! model. It submits to the owner's bounded inbox, cancels, drains and
//! reads the published stats; it never touches the owner's state.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use crate::admission::memory;
use crate::config::{AdapterInfo, AdapterSpec, EngineConfig};
use crate::deliver::stats::EngineStats;
use crate::deliver::stream::{GenerationError, RequestStream};
use crate::identity::ModelIdentity;
use crate::owner::inbox::EmbedOutput;
use crate::owner::inbox::{Command, EmbedSubmission, Submission};
use crate::owner::kv::cells::CellSlot;
use crate::prepare::Preparer;
use crate::request::{GenerateRequest, SubmitError};
use crate::runtime::{self as model, TokenId};

pub(crate) struct Shared {
    pub(crate) config: EngineConfig,
    pub(crate) identity: ModelIdentity,
    pub(crate) preparer: Preparer,
    pub(crate) inbox: mpsc::Sender<Command>,
    pub(crate) stats: watch::Receiver<EngineStats>,
    pub(crate) queued: Arc<std::sync::atomic::AtomicUsize>,
    /// Set once, when the drain begins.
    pub(crate) drain_started: std::sync::OnceLock<Instant>,
    pub(crate) model: Arc<model::LoadedModel>,
    /// The owner thread, joined by `stop`.
    pub(crate) owner: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// What serving holds: weights, KV pool, buffers (`Loaded::need`).
    pub(crate) footprint: u64,
    /// LoRA adapters the owner has loaded (index = adapter id).
    pub(crate) adapters: Arc<std::sync::RwLock<Vec<AdapterInfo>>>,
    /// Unique per engine started in this process.
    pub(crate) instance: u64,
    /// Interrupting the owner's step for a request that outranks it.
    pub(crate) interrupt: Arc<crate::owner::interrupt::Interrupt>,
}

/// Cheap to clone; every clone talks to the same execution owner.
#[derive(Clone)]
pub struct EngineHandle {
    pub(crate) shared: Arc<Shared>,
}

pub struct Engine;
// `Engine::start` and `Engine::load` are in `loaded.rs`, beside the `Loaded`
// they build.

impl EngineHandle {
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// This engine's number, unique in the process (clones share it).
    pub fn instance(&self) -> u64 {
        self.shared.instance
    }

    /// What serving this model holds (weights, KV pool, buffers, host
    /// tiers' budgets): what a registry counts against its budget.
    pub fn footprint(&self) -> u64 {
        self.shared.footprint
    }

    /// The LoRA adapters loaded now.
    pub fn adapters(&self) -> Vec<AdapterInfo> {
        self.shared
            .adapters
            .read()
            .map(|a| a.clone())
            .unwrap_or_default()
    }

    /// Load a LoRA adapter GGUF into the running engine (the owner loads
    /// it between two steps).
    pub async fn load_adapter(&self, spec: AdapterSpec) -> Result<AdapterInfo, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared
            .inbox
            .send(Command::LoadAdapter(spec, tx))
            .await
            .map_err(|_| "the engine is not running".to_string())?;
        rx.await
            .map_err(|_| "the engine stopped before loading the adapter".to_string())?
    }
    /// What every slot's KV cells hold, from the owner.
    pub async fn cell_map(&self) -> Result<Vec<CellSlot>, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared
            .inbox
            .send(Command::CellMap(tx))
            .await
            .map_err(|_| "the engine is not running".to_string())?;
        rx.await
            .map_err(|_| "the engine stopped before answering".to_string())
    }
    pub fn identity(&self) -> &ModelIdentity {
        &self.shared.identity
    }
    pub fn preparer(&self) -> &Preparer {
        &self.shared.preparer
    }
    pub fn stats(&self) -> EngineStats {
        self.shared.stats.borrow().clone()
    }
    pub fn stats_watch(&self) -> watch::Receiver<EngineStats> {
        self.shared.stats.clone()
    }
    /// Stop admitting: every later `submit` is refused with `Draining`;
    /// work already submitted goes on.
    pub fn begin_drain(&self) {
        let _ = self.shared.drain_started.set(Instant::now());
    }

    pub fn is_draining(&self) -> bool {
        self.shared.drain_started.get().is_some()
    }

    /// How long the drain has been running (None before it begins).
    pub fn drain_elapsed(&self) -> Option<std::time::Duration> {
        self.shared.drain_started.get().map(Instant::elapsed)
    }

    /// Stop the execution owner and wait until it has released the
    /// runtime (the llama context and its device buffers). Call before the
    /// process exits: a GPU context freed while the CUDA driver shuts down
    /// aborts the process. Queued requests get a `Shutdown` error.
    /// Blocking; idempotent.
    pub fn stop(&self) {
        let Some(owner) = self.shared.owner.lock().ok().and_then(|mut o| o.take()) else {
            return;
        };
        if self.shared.inbox.blocking_send(Command::Stop).is_ok() {
            let _ = owner.join();
        }
    }

    /// End everything in flight with a `Shutdown` error (end of a drain).
    pub fn cancel_all(&self) -> bool {
        self.shared.inbox.try_send(Command::CancelAll).is_ok()
    }

    /// Requests still holding engine state: queued, admitted, or with
    /// undelivered terminal events.
    pub fn in_flight(&self) -> usize {
        let s = self.shared.stats.borrow();
        s.live_outboxes.max(s.running + s.prefilling) + self.waiting()
    }

    /// Cancel a request by ID (idempotent; unknown IDs are ignored). Its
    /// stream receives a `Cancelled` error as its terminal event. Returns
    /// false if the inbox is full (dropping the stream always works).
    pub fn cancel(&self, id: &str) -> bool {
        self.shared
            .inbox
            .try_send(Command::Cancel(id.to_string()))
            .is_ok()
    }

    /// The memory ledger now.
    pub fn ledger(&self) -> memory::MemoryLedger {
        self.ledger_of(&self.stats())
    }

    /// The ledger from a snapshot already read (`stats()`).
    pub fn ledger_of(&self, s: &EngineStats) -> memory::MemoryLedger {
        let rss = memory::rss_bytes().unwrap_or(0);
        let (c, f) = (&self.shared.config, &self.shared.model.facts);
        let at = memory::Placement::of(c.model.n_gpu_layers, f.n_layer);
        let gpus = if at.layers_on_device > 0 {
            model::gpu_memory().unwrap_or_default()
        } else {
            Vec::new()
        };
        let l = memory::MemoryLedger::placed(
            s,
            self.shared.model.facts.weights_bytes,
            self.shared.config.admit.memory_budget,
            rss,
            at,
            gpus,
        );
        match self.shared.preparer.encoder() {
            Some(e) => l.with_media(e.projector_bytes, e.cache_bytes()),
            None => l,
        }
    }

    /// Requests submitted and not yet admitted (the inbox's length).
    pub fn waiting(&self) -> usize {
        self.shared
            .queued
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Per-request context limit (prompt + completion).
    pub fn context_limit(&self) -> u32 {
        self.shared
            .config
            .admit
            .ctx_per_seq
            .min(self.shared.model.facts.n_ctx_train.max(1))
    }

    /// The bytes a token renders as in output text.
    pub fn token_bytes(&self, t: TokenId) -> &[u8] {
        self.shared.model.vocab.bytes(t)
    }

    /// A token's text, control tokens spelled out.
    pub fn token_text(&self, t: TokenId) -> &[u8] {
        self.shared.model.vocab.special_text(t)
    }

    /// Resolves once the engine has failed (its owner thread panicked).
    pub async fn wait_failed(&self) {
        let mut w = self.shared.stats.clone();
        loop {
            if w.borrow_and_update().failed {
                return;
            }
            if w.changed().await.is_err() {
                // The owner is gone without saying it failed: stay pending
                // (a normal stop ends the server by its own path).
                return std::future::pending().await;
            }
        }
    }

    /// Wait until the warm-up step has run (or the engine died).
    pub async fn wait_ready(&self) -> bool {
        let mut w = self.shared.stats.clone();
        loop {
            {
                let s = w.borrow_and_update();
                if s.ready {
                    return true;
                }
                if s.stopped {
                    return false;
                }
            }
            if w.changed().await.is_err() {
                return false;
            }
        }
    }

    /// The pooling of an embedding or reranking model; `None` for a
    /// generative one.
    pub fn pooling(&self) -> Option<model::Pooling> {
        self.shared.model.facts.pooling
    }

    /// Tokens of the longest input an embedding model takes.
    pub fn max_embed_input(&self) -> usize {
        crate::owner::embed::longest_input(&self.shared.model, &self.shared.config) as usize
    }

    /// Hand tokenized inputs to an embedding model's owner. Never blocks;
    /// the same waiting bound as `submit`. Dropping the receiver cancels
    /// what is not yet computed.
    pub fn embed(
        &self,
        id: String,
        inputs: Vec<Vec<TokenId>>,
        deadline: Option<Instant>,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<EmbedOutput, GenerationError>>, SubmitError>
    {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let sub = EmbedSubmission {
            id,
            inputs,
            reply,
            deadline,
        };
        self.enqueue(Command::Embed(Box::new(sub)))?;
        Ok(rx)
    }

    /// Hand a prepared request to the execution owner. Never blocks: a full
    /// inbox is an immediate `QueueFull`.
    pub fn submit(&self, req: GenerateRequest) -> Result<RequestStream, SubmitError> {
        let (tx, rx) = mpsc::channel(self.shared.config.deliver.outbox_capacity.max(2));
        let id = req.id.clone();
        let tenancy = req.tenancy.clone();
        let note = Arc::new(crate::deliver::stream::CancelNote::default());
        let sub = Submission {
            req,
            outbox: tx,
            note: note.clone(),
        };
        self.enqueue(Command::Submit(Box::new(sub)))?;
        // In the inbox now: a step it outranks ends early for it.
        self.shared.interrupt.arrived(&tenancy);
        Ok(RequestStream::new(id, rx, note))
    }

    /// Send a request's command to the owner, within the waiting bound
    /// (which covers the inbox and the owner's queue together).
    fn enqueue(&self, cmd: Command) -> Result<(), SubmitError> {
        if !self.shared.stats.borrow().ready {
            return Err(SubmitError::NotReady);
        }
        if self.is_draining() {
            return Err(SubmitError::Draining);
        }
        use std::sync::atomic::Ordering;
        let max = self.shared.config.admit.max_waiting;
        if self.shared.queued.fetch_add(1, Ordering::AcqRel) >= max {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::QueueFull(max));
        }
        self.shared.inbox.try_send(cmd).map_err(|e| {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            match e {
                mpsc::error::TrySendError::Full(_) => SubmitError::QueueFull(max),
                mpsc::error::TrySendError::Closed(_) => SubmitError::Stopped,
            }
        })
    }
}
