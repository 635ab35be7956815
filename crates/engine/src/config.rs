//! What the engine needs to start (`EngineConfig`), the LoRA adapters it
//! loads, and the slow-reader policy. The server builds one from its flags
//! (`crates/server`'s CLI); every stage reads its own fields.

use std::path::PathBuf;
use std::time::Duration;

use crate::owner::kv::events as kvevents;
use crate::owner::spec::speculate::SpecMode;

/// Everything the engine needs to start, grouped by the stage that reads
/// it. The server builds one from its flags in one place
/// (`crates/server`'s `cli/config.rs`).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Loading the model and sizing the runtime (`runtime/`, `loaded.rs`, `owner/start.rs`).
    pub model: ModelConfig,
    /// ① prepare: the template, the tokenizer and grammar pools, the output cap (`prepare/`).
    pub prepare: PrepareConfig,
    /// ② admit: slots, context, the waiting queue, the memory budget, what the prefix cache keeps (`admission/`, `owner/admit.rs`, `owner/kv/`).
    pub admit: AdmitConfig,
    /// ③ execute: what one step carries and how its budget is set; adapter turns; speculation (`owner/plan/`, `owner/budget.rs`, `owner/spec/`).
    pub step: StepConfig,
    /// ④ sample: where rows are sampled (`sample/`, `owner/rows.rs`).
    pub sample: SampleConfig,
    /// ⑤ deliver: outboxes, slow readers, KV events out (`deliver/`, `owner/reap.rs`, `owner/kvpublish.rs`).
    pub deliver: DeliverConfig,
}

/// Loading the model and sizing the runtime (`runtime/`, `loaded.rs`, `owner/start.rs`).
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub model_path: PathBuf,
    /// Name the model is served under (`model` field of requests).
    pub served_name: String,
    pub n_gpu_layers: u32,
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
    /// Draw a progress bar while loading (stderr on a terminal).
    pub progress: bool,
    /// LoRA adapters loaded at start (more can be loaded while running).
    pub adapters: Vec<AdapterSpec>,
    /// A small model with the same vocabulary that drafts for
    /// `speculative: draft` (`--draft-model`).
    pub draft_model: Option<PathBuf>,
    /// A multimodal projector (`--mmproj`): images or audio in, through
    /// llama.cpp's libmtmd.
    pub mmproj: Option<PathBuf>,
}

/// ① prepare: the template, the tokenizer and grammar pools, the output cap (`prepare/`).
#[derive(Debug, Clone)]
pub struct PrepareConfig {
    /// `--chat-template`: a label and the template's source, replacing the
    /// GGUF's.
    pub chat_template: Option<(String, String)>,
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
    /// The media encoder (`prepare/encoder.rs`): its threads, its queue,
    /// how long an item may wait in it, and the bytes of encoded media it
    /// keeps by hash.
    pub encoder_threads: i32,
    pub encoder_queue: usize,
    pub encoder_timeout: Duration,
    pub encoder_cache_bytes: usize,
    /// Encoding stalls the steps, as in a loop that encodes inline
    /// (llama-server's): a comparison knob for benchmarks.
    pub encoder_on_owner: bool,
}

/// The order waiting requests are admitted in (`--scheduling-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchedulingPolicy {
    /// Arrival order (batch lines after every interactive request).
    #[default]
    Fcfs,
    /// A request's `priority` first (lower runs first), then arrival; a
    /// better-priority request may preempt a worse one.
    Priority,
}

/// ② admit: slots, context, the waiting queue, the memory budget, what the prefix cache keeps (`admission/`, `owner/admit.rs`, `owner/kv/`).
#[derive(Debug, Clone)]
pub struct AdmitConfig {
    /// Concurrent sequences (llama `seq_id` slots).
    pub max_seqs: usize,
    /// KV cells per slot: the context limit of one request.
    pub ctx_per_seq: u32,
    /// Bounded queue of submitted, not yet admitted requests.
    pub max_waiting: usize,
    /// Longest a request may wait for a slot (None: no limit).
    pub queue_timeout: Option<std::time::Duration>,
    /// Operational memory budget in bytes: the KV pool (and so `max_seqs`)
    /// is sized to fit it; startup fails if the weights alone exceed it.
    pub memory_budget: Option<u64>,
    /// Keep finished sequences' KV state in idle slots and reuse it for
    /// prompts with the same leading tokens (see `owner::kv::prefix`).
    pub prefix_cache: bool,
    /// Shortest prefix shared with a *running* sequence worth copying its
    /// whole KV stream (a cached idle slot is taken over at no copy cost).
    pub prefix_copy_min: usize,
    /// Host-memory tier of the prefix cache: bytes of evicted entries' KV
    /// state kept to restore instead of recompute (0: off).
    pub prefix_host_bytes: u64,
    /// Shortest prefix (tokens) worth saving to or restoring from it.
    pub prefix_host_min: usize,
    /// Disk tier of the prefix cache (`owner/kv/disk.rs`): the directory
    /// its entries live in (this model's own subdirectory is made under
    /// it; None: no disk tier).
    pub disk_dir: Option<std::path::PathBuf>,
    /// Most bytes the disk tier's entries may hold (0: off).
    pub disk_bytes: u64,
    /// Host bytes pinned prefixes may hold (`GenerateRequest::pin`; 0: no
    /// pins), beside the host tier's budget.
    pub pin_bytes: u64,
    /// The longest a pin is kept, whatever it asks (None: as asked).
    pub pin_max_ttl: Option<std::time::Duration>,
    /// Checkpoints of state that cannot be rewound (sliding-window cells,
    /// recurrent state): host bytes they may hold in all (0: none taken).
    pub checkpoint_bytes: u64,
    /// Prompts shorter than this take no checkpoint.
    pub checkpoint_min_tokens: usize,
    /// Which waiting request is admitted first, and which running one may be
    /// preempted for it (`owner/plan/tenancy.rs`).
    pub policy: SchedulingPolicy,
    /// Keys with waiting work share the tokens by weight (virtual token
    /// counters, `owner/plan/tenancy.rs`).
    pub fair_share: bool,
    /// A request that must wait may move a worse-ranked running sequence's
    /// state to host memory and take its slot (the victim resumes later).
    pub preempt: bool,
    /// Also a checkpoint at the end of a prompt chunk this many tokens past
    /// the slot's last one (a later prompt sharing only the start, e.g. a
    /// system prompt, starts there); 0: only near a prompt's end.
    pub checkpoint_interval: usize,
}

/// ③ execute: what one step carries and how its budget is set; adapter turns; speculation (`owner/plan/`, `owner/budget.rs`, `owner/spec/`).
#[derive(Debug, Clone)]
pub struct StepConfig {
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
    /// Inter-token latency target (ms): with decoders running, a step's
    /// prompt tokens are sized to keep the step within it
    /// (`owner/budget.rs`); None: `target_step_ms` alone.
    pub itl_target_ms: Option<f64>,
    pub expedite_max_tokens: usize,
    /// Most overdue prompts finished in one step.
    pub expedite_max_seqs: usize,
    /// A burst of short prompts (more waiting for their first token than
    /// sequences decoding) is computed whole in one step
    /// (`owner/budget.rs::burst`), up to this many prompt tokens.
    pub burst_prefill: bool,
    pub burst_max_tokens: usize,
    /// With traffic of several adapter sets, steps a set keeps before the
    /// next set's turn (`owner/adapters.rs`).
    pub adapter_slice: usize,
    /// Speculative decoding for requests that do not say (`--speculative`),
    /// and the most tokens drafted per step (`--draft-max`).
    pub speculative: SpecMode,
    pub draft_max: usize,
    /// A fixed step-time line, (ms a step, ms a row), for sizing drafts
    /// instead of the line fitted to measured steps (None, the default):
    /// tests and benchmarks that need the same draft decisions on any
    /// machine under any load.
    pub spec_cost_line: Option<(f64, f64)>,
}

/// ④ sample: where rows are sampled (`sample/`, `owner/rows.rs`).
#[derive(Debug, Clone)]
pub struct SampleConfig {
    /// Sample plain-greedy requests on the device (llama.cpp's backend
    /// sampling: the argmax runs in the step's graph and only the token
    /// comes back); every other request samples on the host.
    pub device_sampling: bool,
    /// Threads that sample and emit a step's rows (one more per 8 rows, up
    /// to this many): with an offloaded model the host's per-row work sits
    /// between two device steps.
    pub sample_threads: usize,
}

/// ⑤ deliver: outboxes, slow readers, KV events out (`deliver/`, `owner/reap.rs`, `owner/kvpublish.rs`).
#[derive(Debug, Clone)]
pub struct DeliverConfig {
    /// Events buffered per request before text is coalesced.
    pub outbox_capacity: usize,
    /// Slow readers: tokens allowed to wait undelivered (coalesced) before
    /// the policy applies.
    pub max_lag_tokens: u32,
    pub slow_reader: SlowReaderPolicy,
    /// A paused reader that has not caught up after this long is ended.
    pub slow_reader_timeout: Option<std::time::Duration>,
    /// Publish KV-cache block events here (`crate::owner::kv::events`; full
    /// attention models only).
    pub kv_events: Option<kvevents::KvSink>,
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
            model: ModelConfig {
                model_path,
                served_name,
                n_gpu_layers: 0,
                n_threads: cores,
                n_threads_batch: cores,
                n_ubatch: 512,
                // Measured here: +16% batched decode at 8-32 sequences and faster
                // decode at long context, -12% single-sequence decode.
                flash_attn: true,
                kv_q8: false,
                kv_unified: false,
                swa_full: false,
                progress: false,
                adapters: Vec::new(),
                draft_model: None,
                mmproj: None,
            },
            prepare: PrepareConfig {
                chat_template: None,
                tokenizer_threads: 1,
                tokenizer_queue: 64,
                grammar_threads: 1,
                grammar_queue: 16,
                grammar_timeout: Duration::from_secs(10),
                encoder_threads: 1,
                encoder_queue: 32,
                encoder_timeout: Duration::from_secs(60),
                encoder_cache_bytes: 256 << 20,
                encoder_on_owner: false,
                max_tokens_limit: 4096,
            },
            admit: AdmitConfig {
                max_seqs: 32,
                ctx_per_seq: 4096,
                max_waiting: 256,
                queue_timeout: None,
                memory_budget: None,
                prefix_cache: true,
                prefix_copy_min: 64,
                prefix_host_bytes: 0,
                prefix_host_min: 128,
                disk_dir: None,
                disk_bytes: 0,
                pin_bytes: 0,
                pin_max_ttl: None,
                checkpoint_bytes: 256 << 20,
                checkpoint_min_tokens: 64,
                checkpoint_interval: 512,
                policy: SchedulingPolicy::Fcfs,
                fair_share: false,
                preempt: true,
            },
            step: StepConfig {
                prompt_budget: 256,
                max_prefill_seqs: 2,
                max_decode_seqs: 32,
                target_step_ms: None,
                chunk_align: 0,
                target_min_prompt: 0,
                min_prompt_budget: 16,
                ttft_target_ms: None,
                itl_target_ms: None,
                expedite_max_tokens: 512,
                expedite_max_seqs: 2,
                burst_prefill: false,
                burst_max_tokens: 2048,
                adapter_slice: 4,
                speculative: SpecMode::Off,
                draft_max: 8,
                spec_cost_line: None,
            },
            sample: SampleConfig {
                device_sampling: false,
                sample_threads: 1,
            },
            deliver: DeliverConfig {
                outbox_capacity: 64,
                max_lag_tokens: 256,
                slow_reader: SlowReaderPolicy::Pause,
                slow_reader_timeout: Some(std::time::Duration::from_secs(60)),
                kv_events: None,
            },
        }
    }
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
