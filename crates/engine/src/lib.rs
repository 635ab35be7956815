//! Steward's engine: generate requests in, streams of events out. No HTTP.
//!
//! Public surface: [`Engine::start`] loads a model and spawns the execution
//! owner; [`EngineHandle`] prepares (template + tokenize on a bounded pool),
//! submits (bounded inbox), and reads stats (a `watch` snapshot). Dropping a
//! [`RequestStream`] cancels its request.

pub mod ceiling;
pub mod chat;
pub mod compare;
pub mod constraint;
pub mod core;
pub mod detok;
pub mod fatal;
pub mod fetch;
pub mod identity;
pub mod kvevents;
pub mod literal;
mod loaded;
pub mod memory;
pub mod model;
pub mod prepare;
pub mod stats;
pub mod stream;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

pub use crate::core::sampler::SamplingParams;
pub use crate::core::speculate::SpecMode;

/// Most tokens a request may draft per step.
pub const MAX_DRAFT: usize = 32;

/// A request's speculative decoding, where it asked (each part `None`:
/// the server's default).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpecRequest {
    pub mode: Option<SpecMode>,
    pub max_draft: Option<usize>,
}

/// The text of a caught panic's payload (empty when it is neither `&str`
/// nor `String`).
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
pub use crate::core::embed::EmbedOutput;
pub use crate::identity::ModelIdentity;
pub use crate::loaded::Loaded;
pub use crate::model::{LoadError, Pooling, TokenId};
pub use crate::prepare::{PrepareError, Preparer};
pub use crate::stats::{CancelState, EngineStats, Histogram};
pub use crate::stream::{
    Event, FinishReason, Finished, GenerationError, RequestStream, Timings, TokenLogprob,
};

/// Everything the engine needs to start. Server flags map onto this.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub model_path: PathBuf,
    /// Name the model is served under (`model` field of requests).
    pub served_name: String,
    /// Concurrent sequences (llama `seq_id` slots).
    pub max_seqs: usize,
    /// KV cells per slot: the context limit of one request.
    pub ctx_per_seq: u32,
    /// Prompt tokens per step (chunked prefill).
    pub prompt_budget: usize,
    pub max_prefill_seqs: usize,
    /// Sequences that may decode in one step.
    pub max_decode_seqs: usize,
    /// Derive the prompt budget from this step-time target (ms), learned
    /// from measured step costs; `prompt_budget` is then the maximum.
    pub target_step_ms: Option<f64>,
    /// Prompt chunks of a step of two or more are cut (or padded back) to
    /// multiples of this many tokens (0: off; see `scheduler::align_chunks`).
    pub chunk_align: usize,
    /// The target applies only while a prompt of at least this many tokens
    /// is prefilling (0: always); other steps take the whole budget.
    pub target_min_prompt: usize,
    pub min_prompt_budget: usize,
    /// TTFT target (ms since arrival): a prompt of at most
    /// `expedite_max_tokens` tokens that has waited this long is
    /// finished in the next step even if that step runs past
    /// `target_step_ms` (see `scheduler::overdue_budget`).
    pub ttft_target_ms: Option<f64>,
    pub expedite_max_tokens: usize,
    /// Most overdue prompts finished in one step.
    pub expedite_max_seqs: usize,
    /// Longest a request may wait for a slot (None: no limit).
    pub queue_timeout: Option<std::time::Duration>,
    pub n_threads: i32,
    pub n_threads_batch: i32,
    pub n_ubatch: u32,
    pub flash_attn: bool,
    /// Q8_0 KV cache (implies flash attention).
    pub kv_q8: bool,
    /// Unified KV pool (see `RuntimeParams::kv_unified`).
    pub kv_unified: bool,
    /// Sliding-window layers keep every cell (see `RuntimeParams::swa_full`).
    pub swa_full: bool,
    /// Checkpoints of state that cannot be rewound (sliding-window cells,
    /// recurrent state): host bytes they may hold in all (0: none taken).
    pub checkpoint_bytes: u64,
    /// Prompts shorter than this take no checkpoint.
    pub checkpoint_min_tokens: usize,
    /// Also a checkpoint at the end of a prompt chunk this many tokens past
    /// the slot's last one (a later prompt sharing only the start, e.g. a
    /// system prompt, starts there); 0: only near a prompt's end.
    pub checkpoint_interval: usize,
    pub n_gpu_layers: u32,
    /// Bounded queue of submitted, not yet admitted requests.
    pub max_waiting: usize,
    /// Events buffered per request before text is coalesced.
    pub outbox_capacity: usize,
    /// Slow readers: tokens allowed to wait undelivered (coalesced) before
    /// the policy applies.
    pub max_lag_tokens: u32,
    pub slow_reader: SlowReaderPolicy,
    /// A paused reader that has not caught up after this long is ended.
    pub slow_reader_timeout: Option<std::time::Duration>,
    pub tokenizer_threads: usize,
    pub tokenizer_queue: usize,
    /// Grammar compiles: their own threads (a large stack each: llguidance
    /// recurses over a schema's `$ref` chain) and bounded queue, so a slow
    /// compile never holds up tokenization.
    pub grammar_threads: usize,
    pub grammar_queue: usize,
    /// A compile that takes longer is answered 400 (the thread finishes it
    /// and drops it; the grammar size limits bound how long that is).
    pub grammar_timeout: Duration,
    /// Largest `max_tokens` accepted (also the default when absent, capped
    /// by the context).
    pub max_tokens_limit: u32,
    /// Draw a progress bar while loading (stderr on a terminal).
    pub progress: bool,
    /// Operational memory budget in bytes: the KV pool (and so `max_seqs`)
    /// is sized to fit it; startup fails if the weights alone exceed it.
    pub memory_budget: Option<u64>,
    /// Keep finished sequences' KV state in idle slots and reuse it for
    /// prompts with the same leading tokens (see `core::prefix`).
    pub prefix_cache: bool,
    /// Shortest prefix shared with a *running* sequence worth copying its
    /// whole KV stream (a cached idle slot is taken over at no copy cost).
    pub prefix_copy_min: usize,
    /// Sample plain-greedy requests on the device (llama.cpp's backend
    /// sampling: the argmax runs in the step's graph and only the token
    /// comes back); every other request samples on the host.
    pub device_sampling: bool,
    /// Threads that sample and emit a step's rows (one more per 8 rows, up
    /// to this many): with an offloaded model the host's per-row work sits
    /// between two device steps.
    pub sample_threads: usize,
    /// Host-memory tier of the prefix cache: bytes of evicted entries' KV
    /// state kept to restore instead of recompute (0: off).
    pub prefix_host_bytes: u64,
    /// Shortest prefix (tokens) worth saving to or restoring from it.
    pub prefix_host_min: usize,
    /// `--chat-template`: a label and the template's source, replacing the
    /// GGUF's.
    pub chat_template: Option<(String, String)>,
    /// LoRA adapters loaded at start (more can be loaded while running).
    pub adapters: Vec<AdapterSpec>,
    /// With traffic of several adapter sets, steps a set keeps before the
    /// next set's turn (`core/adapters.rs`).
    pub adapter_slice: usize,
    /// Publish KV-cache block events here (`crate::kvevents`; full
    /// attention models only).
    pub kv_events: Option<kvevents::KvSink>,
    /// Speculative decoding for requests that do not say (`--speculative`),
    /// and the most tokens drafted per step (`--draft-max`).
    pub speculative: SpecMode,
    pub draft_max: usize,
    /// A small model with the same vocabulary that drafts for
    /// `speculative: draft` (`--draft-model`).
    pub draft_model: Option<PathBuf>,
    /// A fixed step-time line, (ms a step, ms a row), for sizing drafts
    /// instead of the line fitted to measured steps (None, the default):
    /// tests and benchmarks that need the same draft decisions on any
    /// machine under any load.
    pub spec_cost_line: Option<(f64, f64)>,
}

/// A LoRA adapter to load: its name (clients ask for `model:name`), its
/// GGUF file, and the scale it runs at unless a request names another.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterSpec {
    pub name: String,
    pub path: PathBuf,
    pub scale: f32,
}

/// A loaded adapter.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AdapterInfo {
    /// Index in load order (never reused while the engine runs).
    pub id: usize,
    pub name: String,
    pub path: String,
    /// Default scale.
    pub scale: f32,
}

impl EngineConfig {
    pub fn new(model_path: PathBuf) -> Self {
        let served_name = model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2) as i32;
        EngineConfig {
            model_path,
            served_name,
            max_seqs: 32,
            ctx_per_seq: 4096,
            prompt_budget: 256,
            max_prefill_seqs: 2,
            max_decode_seqs: 32,
            target_step_ms: None,
            target_min_prompt: 0,
            chunk_align: 0,
            min_prompt_budget: 16,
            ttft_target_ms: None,
            expedite_max_tokens: 512,
            expedite_max_seqs: 2,
            queue_timeout: None,
            n_threads: cores,
            n_threads_batch: cores,
            n_ubatch: 512,
            // Measured here: +16% batched decode at 8-32 sequences and faster
            // decode at long context, -12% single-sequence decode.
            flash_attn: true,
            kv_q8: false,
            kv_unified: false,
            swa_full: false,
            checkpoint_bytes: 256 << 20,
            checkpoint_min_tokens: 64,
            checkpoint_interval: 512,
            n_gpu_layers: 0,
            max_waiting: 256,
            outbox_capacity: 64,
            max_lag_tokens: 256,
            slow_reader: SlowReaderPolicy::Pause,
            slow_reader_timeout: Some(std::time::Duration::from_secs(60)),
            tokenizer_threads: 1,
            tokenizer_queue: 64,
            grammar_threads: 1,
            grammar_queue: 16,
            grammar_timeout: Duration::from_secs(10),
            max_tokens_limit: 4096,
            progress: false,
            memory_budget: None,
            prefix_cache: true,
            prefix_copy_min: 64,
            device_sampling: false,
            sample_threads: 1,
            prefix_host_bytes: 0,
            prefix_host_min: 128,
            chat_template: None,
            adapters: Vec::new(),
            adapter_slice: 4,
            kv_events: None,
            speculative: SpecMode::Off,
            draft_max: 8,
            draft_model: None,
            spec_cost_line: None,
        }
    }
}

/// A generation request after prepare: token IDs and settings, validated.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub id: String,
    pub prompt: Vec<TokenId>,
    pub max_tokens: u32,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// Never end on an end-of-generation token (they are masked out).
    pub ignore_eos: bool,
    /// Return each sampled token's logprob with this many alternatives.
    pub logprobs: Option<usize>,
    /// Score the prompt: the logprob of every prompt token after the first
    /// (with `logprobs` alternatives). `max_tokens` may then be 0.
    pub prompt_logprobs: bool,
    pub arrival: Instant,
    pub tokenized: Instant,
    /// End the request (whatever its state) at this instant.
    pub deadline: Option<Instant>,
    /// Grammar the output must match (compiled by
    /// `Preparer::constraint`); `ignore_eos` does not apply under one.
    pub constraint: Option<constraint::Constraint>,
    /// Control tokens emitted as their text (`Preparer::markers`: the chat
    /// format's markers, read by the server's parser); others emit nothing.
    pub markers: Option<Arc<Vec<bool>>>,
    /// LoRA adapters (id from `EngineHandle::adapters`, scale) the request
    /// runs under; empty: the base model. Zero scales are dropped.
    pub adapters: Vec<(usize, f32)>,
    /// Speculative decoding (`None`: the engine's default).
    pub speculative: Option<SpecRequest>,
}

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SubmitError {
    #[error("the server is at capacity: {0} requests are already waiting")]
    QueueFull(usize),
    #[error("the engine is not running")]
    Stopped,
    #[error("the engine is not ready yet")]
    NotReady,
    #[error("the server is draining for shutdown and admits no new requests")]
    Draining,
}

pub(crate) enum Command {
    Submit(Box<core::Submission>),
    /// Cancel by request ID; unknown or already retired IDs are ignored.
    Cancel(String),
    /// End every queued and admitted request with a `Shutdown` error.
    CancelAll,
    /// Stop the owner as if every handle had been dropped.
    Stop,
    /// Load a LoRA adapter while running.
    LoadAdapter(
        AdapterSpec,
        tokio::sync::oneshot::Sender<Result<AdapterInfo, String>>,
    ),
    /// Embed (or score) tokenized inputs: embedding models only.
    Embed(Box<core::embed::EmbedSubmission>),
    /// Every slot's tokens in the cell map (`/debug/cells`).
    CellMap(tokio::sync::oneshot::Sender<Vec<CellSlot>>),
}

/// One slot of the cell map (`EngineHandle::cell_map`).
#[derive(Debug, Clone)]
pub struct CellSlot {
    pub slot: usize,
    /// The prefix identity its cells were computed under (model, adapters,
    /// media hashes): part of every KV event block hash.
    pub key: [u64; 3],
    pub tokens: Vec<TokenId>,
}

/// What happens to a request whose client reads slower than it generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowReaderPolicy {
    /// Stop decoding it (its KV stays reserved, others go on) until the
    /// client catches up; past `slow_reader_timeout`, end it.
    Pause,
    /// End it with a `SlowReader` error as soon as the lag bound is passed.
    Terminate,
}

struct Shared {
    config: EngineConfig,
    identity: ModelIdentity,
    preparer: Preparer,
    inbox: mpsc::Sender<Command>,
    stats: watch::Receiver<EngineStats>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    /// Set once, when the drain begins.
    drain_started: std::sync::OnceLock<Instant>,
    model: Arc<model::LoadedModel>,
    /// The owner thread, joined by `stop`.
    owner: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// What serving holds: weights, KV pool, buffers (`Loaded::need`).
    footprint: u64,
    /// LoRA adapters the owner has loaded (index = adapter id).
    adapters: Arc<std::sync::RwLock<Vec<AdapterInfo>>>,
    /// Unique per engine started in this process.
    instance: u64,
}

/// Cheap to clone; every clone talks to the same execution owner.
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
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
    pub fn ledger(&self) -> memory::Ledger {
        self.ledger_of(&self.stats())
    }

    /// The ledger from a snapshot already read (`stats()`).
    pub fn ledger_of(&self, s: &EngineStats) -> memory::Ledger {
        let rss = memory::rss_bytes().unwrap_or(0);
        let (c, f) = (&self.shared.config, &self.shared.model.facts);
        let at = memory::Placement::of(c.n_gpu_layers, f.n_layer);
        let gpus = if at.layers_on_device > 0 {
            model::gpu_memory().unwrap_or_default()
        } else {
            Vec::new()
        };
        memory::Ledger::placed(
            s,
            self.shared.model.facts.weights_bytes,
            self.shared.config.memory_budget,
            rss,
            at,
            gpus,
        )
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
        core::embed::longest_input(&self.shared.model, &self.shared.config) as usize
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
        let sub = core::embed::EmbedSubmission {
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
        let (tx, rx) = mpsc::channel(self.shared.config.outbox_capacity.max(2));
        let id = req.id.clone();
        let note = Arc::new(stream::CancelNote::default());
        let sub = core::Submission {
            req,
            outbox: tx,
            note: note.clone(),
        };
        self.enqueue(Command::Submit(Box::new(sub)))?;
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
        let max = self.shared.config.max_waiting;
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
