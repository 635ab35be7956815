//! The runtime adapter: the only module that names llama.cpp types.
//!
//! Owns: the process-wide llama backend (initialised once), model loading
//! (with a progress bar on a terminal), the vocabulary tables (token → bytes,
//! end-of-generation flags), tokenization, and [`Runtime`]: one llama context
//! plus its batch, through which the execution owner submits a step and waits
//! for its completion, reads logits and edits per-slot KV state.
//!
//! Invariants: a [`Runtime`] is created and used on the execution owner thread
//! only (it is `!Sync`); [`LoadedModel`] is immutable after load and shared by
//! `Arc` (the tokenizer pool reads it concurrently, which llama.cpp allows for
//! tokenization). `llama_decode` on the CPU backend returns when the step's
//! work is complete; `Runtime::decode` additionally synchronises, so logits
//! and KV edits after it never race a running kernel.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::OnceLock;

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

pub mod backend;
pub mod ceiling;
mod convert;
mod embed;
#[cfg(test)]
pub(crate) mod fake;
mod lora;
mod media;
pub use convert::{convert, WeightFormat};
pub mod mtmd;
pub mod rpc;
mod state;
pub use embed::{EmbedParams, EmbedRuntime, Pooling};
pub use state::MemoryKind;

/// A token ID as the engine sees it.
pub type TokenId = i32;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("model file not found: {0}")]
    NotFound(String),
    #[error("cannot read model file {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("{0} is not a GGUF file (bad magic bytes)")]
    NotGguf(String),
    #[error("llama.cpp could not load {0} (corrupt or unsupported GGUF; run with RUST_LOG=llama-cpp-2=info for the runtime's reason)")]
    LoadFailed(String),
    #[error("llama.cpp backend init failed: {0}")]
    Backend(String),
    /// An RPC worker (`--rpc`) cannot be used.
    #[error("{0}")]
    Rpc(String),
    #[error("could not create a llama context: {0}")]
    Context(String),
    #[error("{0}")]
    Budget(String),
    /// The chat template cannot serve (does not compile, unknown name).
    #[error("{0}")]
    Template(String),
    /// A LoRA adapter named at start did not load.
    #[error("{0}")]
    Adapter(String),
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StepError {
    #[error("no KV cache space for this step")]
    NoKvSpace,
    #[error("llama_decode failed: {0}")]
    Decode(String),
    #[error("batch overflow: {0}")]
    Batch(String),
    /// The step was interrupted for a request that outranks it
    /// (`owner/interrupt.rs`): its rows are rewound and run again.
    #[error("the step was interrupted")]
    Interrupted,
}

fn backend() -> Result<&'static LlamaBackend, LoadError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            // Dynamic backends: load every module found beside the
            // executable (and ggml's default places) before anything else.
            #[cfg(feature = "gpu-dl")]
            unsafe {
                llama_cpp_sys_2::ggml_backend_load_all()
            };
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| LoadError::Backend(e.clone()))
}

/// GPU devices the runtime can offload to (names), after its backends are
/// loaded. Empty on a CPU build or a machine without a usable GPU.
pub fn gpu_devices() -> Result<Vec<String>, LoadError> {
    Ok(gpu_memory()?.into_iter().map(|d| d.name).collect())
}

/// One GPU's memory as the runtime reports it (`ggml_backend_dev_memory`):
/// bytes in total and free now, for every process on the device.
#[derive(Debug, Clone, serde::Serialize, PartialEq, Default)]
pub struct DeviceMemory {
    pub name: String,
    pub total: u64,
    pub free: u64,
}

/// Each GPU's memory as the runtime reports it now (total and free, for
/// every process on the device). Empty without a GPU.
pub fn gpu_memory() -> Result<Vec<DeviceMemory>, LoadError> {
    use llama_cpp_sys_2 as sys;
    backend()?;
    let mut out = Vec::new();
    // SAFETY: ggml's device registry is initialised by `backend()`; names
    // are static C strings owned by the registry; `ggml_backend_dev_memory`
    // writes the two sizes it is given.
    unsafe {
        for i in 0..sys::ggml_backend_dev_count() {
            let d = sys::ggml_backend_dev_get(i);
            if sys::ggml_backend_dev_type(d) != sys::GGML_BACKEND_DEVICE_TYPE_GPU {
                continue;
            }
            let (mut free, mut total) = (0usize, 0usize);
            sys::ggml_backend_dev_memory(d, &mut free, &mut total);
            let name = std::ffi::CStr::from_ptr(sys::ggml_backend_dev_name(d));
            out.push(DeviceMemory {
                name: name.to_string_lossy().into_owned(),
                total: total as u64,
                free: free as u64,
            });
        }
    }
    Ok(out)
}

/// Facts read from the GGUF at load time.
#[derive(Debug, Clone)]
pub struct ModelFacts {
    pub architecture: String,
    pub description: String,
    pub file_type: String,
    pub n_ctx_train: u32,
    pub n_vocab: usize,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    /// Key and value head sizes (`{arch}.attention.key_length` /
    /// `value_length`; `n_embd / n_head` when the file does not say: Gemma
    /// 3's heads are 256 wide on a 640-wide model).
    pub head_dim_k: u32,
    pub head_dim_v: u32,
    pub n_params: u64,
    pub weights_bytes: u64,
    /// A recurrent state per sequence (pure recurrent: no attention KV).
    pub recurrent: bool,
    /// Attention layers beside recurrent ones (llama.cpp's hybrid memory).
    pub hybrid: bool,
    /// Sliding-window attention width (0: none).
    pub n_swa: u32,
    pub chat_template: Option<String>,
    /// Named template variants (`tokenizer.chat_template.<name>`, e.g.
    /// `tool_use`, `rag`), in file order.
    pub chat_template_variants: Vec<(String, String)>,
    pub bos: Option<TokenId>,
    pub eos: Option<TokenId>,
    pub add_bos: bool,
    /// An embedding or reranking model: the pooling its GGUF names
    /// (`{arch}.pooling_type`); `None` for a generative model.
    pub pooling: Option<Pooling>,
}

/// Immutable per-token tables, shared by `Arc` with the execution owner
/// (and built by hand for the fake backend in unit tests).
#[derive(Debug, Default)]
pub struct Vocab {
    /// Bytes of each token as output text (control tokens render as nothing).
    pub token_bytes: Vec<Box<[u8]>>,
    /// Bytes of each token with special tokens rendered (for templates).
    pub token_text_special: Vec<Box<[u8]>>,
    /// End-of-generation flags per token.
    pub eog: Vec<bool>,
    /// The end-of-generation token IDs.
    pub eog_ids: Vec<TokenId>,
}

impl Vocab {
    pub fn bytes(&self, t: TokenId) -> &[u8] {
        self.token_bytes
            .get(t as usize)
            .map(|b| &b[..])
            .unwrap_or(&[])
    }
    /// A token's text with control tokens spelled out.
    pub fn special_text(&self, t: TokenId) -> &[u8] {
        self.token_text_special
            .get(t as usize)
            .map(|b| &b[..])
            .unwrap_or(&[])
    }
    pub fn is_eog(&self, t: TokenId) -> bool {
        self.eog.get(t as usize).copied().unwrap_or(false)
    }
}

/// A loaded GGUF: weights plus immutable vocabulary tables.
pub struct LoadedModel {
    model: LlamaModel,
    pub facts: ModelFacts,
    pub vocab: std::sync::Arc<Vocab>,
}

fn check_gguf(path: &Path) -> Result<(), LoadError> {
    let shown = path.display().to_string();
    if !path.exists() {
        return Err(LoadError::NotFound(shown));
    }
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path).map_err(|e| LoadError::Unreadable {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    use std::io::Read;
    f.read_exact(&mut magic)
        .map_err(|e| LoadError::Unreadable {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
    if &magic != b"GGUF" {
        return Err(LoadError::NotGguf(shown));
    }
    Ok(())
}

fn file_type_name(ft: &str) -> String {
    // llama_ftype values (llama.h); the common ones by name.
    let name = match ft.trim() {
        "0" => "F32",
        "1" => "F16",
        "2" => "Q4_0",
        "3" => "Q4_1",
        "7" => "Q8_0",
        "8" => "Q5_0",
        "9" => "Q5_1",
        "10" => "Q2_K",
        "11" => "Q3_K_S",
        "12" => "Q3_K_M",
        "13" => "Q3_K_L",
        "14" => "Q4_K_S",
        "15" => "Q4_K_M",
        "16" => "Q5_K_S",
        "17" => "Q5_K_M",
        "18" => "Q6_K",
        "32" => "BF16",
        other => return format!("ftype-{other}"),
    };
    name.to_string()
}

impl LoadedModel {
    /// Load a GGUF, drawing a progress bar on stderr when it is a terminal.
    pub fn load(path: &Path, progress: bool, n_gpu_layers: u32) -> Result<Self, LoadError> {
        check_gguf(path)?;
        let backend = backend()?;
        let mut params = LlamaModelParams::default().with_n_gpu_layers(n_gpu_layers);
        if progress && std::io::stderr().is_terminal() {
            let mut last = -1i32;
            params = params.with_progress_callback(move |p| {
                let pct = (p * 100.0) as i32;
                if pct != last {
                    last = pct;
                    let filled = (pct / 5) as usize;
                    eprint!(
                        "\rloading model [{}{}] {pct:3}%",
                        "#".repeat(filled),
                        " ".repeat(20 - filled.min(20))
                    );
                    if pct >= 100 {
                        eprintln!();
                    }
                    let _ = std::io::stderr().flush();
                }
                true
            });
        }
        let model = LlamaModel::load_from_file(backend, path, &params)
            .map_err(|_| LoadError::LoadFailed(path.display().to_string()))?;
        let meta = |k: &str| model.meta_val_str(k).ok();
        let vocab = model.vocab();
        let n_vocab = vocab.n_tokens().max(0) as usize;
        let mut token_bytes = Vec::with_capacity(n_vocab);
        let mut token_text_special = Vec::with_capacity(n_vocab);
        let mut eog = Vec::with_capacity(n_vocab);
        for id in 0..n_vocab as i32 {
            token_bytes.push(piece(&model, id, false).into_boxed_slice());
            token_text_special.push(piece(&model, id, true).into_boxed_slice());
            eog.push(vocab.is_eog(LlamaToken(id)));
        }
        let arch = meta("general.architecture").unwrap_or_default();
        let plain_head = (model.n_embd().max(0) as u32)
            .checked_div(model.n_head())
            .unwrap_or(0);
        let head_dim = |k: &str| {
            meta(&format!("{arch}.attention.{k}"))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .filter(|&d| d > 0)
                .unwrap_or(plain_head)
        };
        let tok_opt = |t: LlamaToken| (t.0 >= 0 && (t.0 as usize) < n_vocab).then_some(t.0);
        let facts = ModelFacts {
            architecture: meta("general.architecture").unwrap_or_else(|| "unknown".into()),
            description: desc(&model),
            file_type: meta("general.file_type")
                .map(|s| file_type_name(&s))
                .unwrap_or_else(|| "unknown".into()),
            n_ctx_train: model.n_ctx_train(),
            n_vocab,
            n_layer: model.n_layer(),
            n_embd: model.n_embd().max(0) as u32,
            n_head: model.n_head(),
            n_head_kv: model.n_head_kv(),
            head_dim_k: head_dim("key_length"),
            head_dim_v: head_dim("value_length"),
            n_params: model.n_params(),
            weights_bytes: model.size(),
            recurrent: model.is_recurrent(),
            hybrid: model.is_hybrid(),
            n_swa: n_swa(&model),
            chat_template: meta("tokenizer.chat_template"),
            chat_template_variants: (0..model.meta_count())
                .filter_map(|i| {
                    let k = model.meta_key_by_index(i).ok()?;
                    let name = k.strip_prefix("tokenizer.chat_template.")?.to_string();
                    Some((name, model.meta_val_str_by_index(i).ok()?))
                })
                .collect(),
            bos: tok_opt(vocab.bos()),
            eos: tok_opt(vocab.eos()),
            add_bos: vocab.should_add_bos(),
            pooling: meta(&format!("{arch}.pooling_type"))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .and_then(Pooling::from_gguf),
        };
        let eog_ids = (0..eog.len() as TokenId)
            .filter(|&t| eog[t as usize])
            .collect();
        Ok(LoadedModel {
            model,
            facts,
            vocab: std::sync::Arc::new(Vocab {
                token_bytes,
                token_text_special,
                eog,
                eog_ids,
            }),
        })
    }

    /// Tokenize text. `parse_special` lets control-token text (e.g.
    /// `<|im_start|>`) become control tokens, as a rendered template needs.
    pub fn tokenize(&self, text: &str, add_bos: bool, parse_special: bool) -> Vec<TokenId> {
        let v = self.model.vocab();
        let mut out: Vec<TokenId> = v
            .tokenize(text.as_bytes(), false, parse_special)
            .into_iter()
            .map(|t| t.0)
            .collect();
        if add_bos {
            if let Some(b) = self.facts.bos {
                if out.first() != Some(&b) {
                    out.insert(0, b);
                }
            }
        }
        out
    }

    /// Tokenize an embedding input with the vocabulary's own special tokens
    /// around it (BERT: `[CLS] … [SEP]`; a decoder: its BOS, and EOS where
    /// the GGUF asks for one), as llama-server does.
    pub fn tokenize_with_specials(&self, text: &str) -> Vec<TokenId> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), true, false)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// KV bytes one token of one sequence occupies (K and V, f16, all layers).
    pub fn kv_bytes_per_token(&self, kv_q8: bool) -> u64 {
        let f = &self.facts;
        let elems =
            u64::from(f.n_layer) * u64::from(f.n_head_kv) * u64::from(f.head_dim_k + f.head_dim_v);
        if kv_q8 {
            // Q8_0: 34 bytes per block of 32.
            elems * 34 / 32
        } else {
            elems * 2
        }
    }

    /// Create the execution context. Call on the thread that will own it.
    ///
    /// The context is created through llama.cpp's C API (not the safe
    /// wrapper's `LlamaContext`, which exposes neither `llama_set_sampler`
    /// nor the context pointer that backend sampling needs).
    pub fn new_runtime(&self, p: &RuntimeParams) -> Result<Runtime<'_>, LoadError> {
        use llama_cpp_sys_2 as sys;
        backend()?;
        let n_ctx = p.ctx_per_seq.saturating_mul(p.n_seqs as u32);
        // SAFETY: plain-data defaults from llama.cpp.
        let mut cp = unsafe { sys::llama_context_default_params() };
        cp.n_ctx = n_ctx;
        cp.n_batch = p.n_batch;
        cp.n_ubatch = p.n_ubatch;
        cp.n_seq_max = p.n_seqs as u32;
        cp.n_threads = p.n_threads;
        cp.n_threads_batch = p.n_threads_batch;
        cp.kv_unified = p.kv_unified;
        cp.swa_full = p.swa_full;
        cp.flash_attn_type = if p.flash_attn || p.kv_q8 {
            sys::LLAMA_FLASH_ATTN_TYPE_ENABLED
        } else {
            sys::LLAMA_FLASH_ATTN_TYPE_DISABLED
        };
        cp.no_perf = false;
        if p.kv_q8 {
            cp.type_k = sys::GGML_TYPE_Q8_0;
            cp.type_v = sys::GGML_TYPE_Q8_0;
        }
        // The model outlives the runtime ('m), and llama.cpp only reads the
        // model while creating and using contexts.
        let model_ptr = self.raw();
        let ctx = unsafe { sys::llama_init_from_model(model_ptr, cp) };
        let ctx = std::ptr::NonNull::new(ctx)
            .ok_or_else(|| LoadError::Context("llama_init_from_model returned null".into()))?;
        // SAFETY: a batch of `n_batch` token entries, one sequence each.
        let batch = unsafe { sys::llama_batch_init(p.n_batch as i32, 0, 1) };
        Ok(Runtime {
            ctx,
            batch,
            capacity: p.n_batch as usize,
            n_vocab: self.facts.n_vocab,
            device: vec![std::ptr::null_mut(); p.n_seqs],
            device_ban: vec![Vec::new(); p.n_seqs],
            model: std::ptr::NonNull::new(model_ptr)
                .ok_or_else(|| LoadError::Context("null model".into()))?,
            adapters: Vec::new(),
            active_adapters: Vec::new(),
            span: None,
            interrupt: None,
            _model: std::marker::PhantomData,
        })
    }
}

fn n_swa(model: &LlamaModel) -> u32 {
    // SAFETY: `LlamaModel` is `repr(transparent)` over a live model pointer.
    let ptr = unsafe { *(model as *const LlamaModel as *const *mut llama_cpp_sys_2::llama_model) };
    unsafe { llama_cpp_sys_2::llama_model_n_swa(ptr) }.max(0) as u32
}

fn piece(model: &LlamaModel, id: i32, special: bool) -> Vec<u8> {
    model.vocab().token_to_piece(LlamaToken(id), special, None)
}

fn desc(model: &LlamaModel) -> String {
    let p = model.n_params() as f64;
    let size = if p >= 1e9 {
        format!("{:.1}B", p / 1e9)
    } else {
        format!("{:.0}M", p / 1e6)
    };
    format!(
        "{} {size}",
        model
            .meta_val_str("general.name")
            .unwrap_or_else(|_| "model".into())
    )
}

/// Context sizing for one execution owner.
#[derive(Debug, Clone)]
pub struct RuntimeParams {
    pub n_seqs: usize,
    pub ctx_per_seq: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub n_threads: i32,
    pub n_threads_batch: i32,
    pub flash_attn: bool,
    /// Store K and V as Q8_0 instead of F16 (half the KV bytes; needs flash
    /// attention, which it turns on).
    pub kv_q8: bool,
    /// One KV pool shared by all slots (llama.cpp's unified KV) instead of a
    /// stream of `ctx_per_seq` cells per slot.
    pub kv_unified: bool,
    /// Sliding-window layers keep a cell for every position (llama.cpp's
    /// `swa_full`): more memory, any prefix reusable. Off (llama-server's
    /// default): they hold `n_swa + n_ubatch` cells per stream.
    pub swa_full: bool,
}

/// One llama context and its batch. Slot = llama `seq_id`; each slot has its
/// own KV stream of `ctx_per_seq` cells (non-unified KV), so a sequence's
/// attention never spans another's cells and its numerics do not depend on
/// what else is in the batch. Owns the context, the batch and the device
/// samplers attached to slots; frees them on drop.
pub struct Runtime<'m> {
    ctx: std::ptr::NonNull<llama_cpp_sys_2::llama_context>,
    batch: llama_cpp_sys_2::llama_batch,
    capacity: usize,
    n_vocab: usize,
    /// Per slot: the backend (device) greedy sampler chain attached to it,
    /// or null (the host samples from the logits).
    device: Vec<*mut llama_cpp_sys_2::llama_sampler>,
    /// The tokens each slot's device chain never picks.
    device_ban: Vec<Vec<TokenId>>,
    /// The model (for loading adapters), alive for `'m`.
    model: std::ptr::NonNull<llama_cpp_sys_2::llama_model>,
    /// LoRA adapters this runtime loaded, and the set applied now.
    adapters: Vec<lora::Adapter>,
    active_adapters: Vec<(usize, f32)>,
    /// The step's media span, decoded before its tokens (`media.rs`).
    span: Option<media::PendingSpan>,
    /// The flag llama.cpp's abort callback reads (`set_interrupt`); kept
    /// alive here while the context may read it.
    interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    _model: std::marker::PhantomData<&'m LlamaModel>,
}

impl Runtime<'_> {
    fn mem(&self) -> llama_cpp_sys_2::llama_memory_t {
        // SAFETY: the context is alive for `self`'s lifetime.
        unsafe { llama_cpp_sys_2::llama_get_memory(self.ctx.as_ptr()) }
    }

    pub fn clear(&mut self) {
        self.batch.n_tokens = 0;
        self.span = None;
    }

    pub fn batch_len(&self) -> usize {
        self.batch.n_tokens.max(0) as usize
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Add one token to the step; returns its index in the batch (the index
    /// to read logits from when `logits` is set).
    pub fn push(
        &mut self,
        token: TokenId,
        pos: u32,
        slot: usize,
        logits: bool,
    ) -> Result<usize, StepError> {
        let idx = self.batch_len();
        if idx >= self.capacity {
            return Err(StepError::Batch(format!(
                "the batch holds at most {} tokens",
                self.capacity
            )));
        }
        // SAFETY: `idx` < the `n_batch` entries `llama_batch_init` allocated,
        // each with room for one sequence id.
        unsafe {
            *self.batch.token.add(idx) = token;
            *self.batch.pos.add(idx) = pos as i32;
            *self.batch.n_seq_id.add(idx) = 1;
            *(*self.batch.seq_id.add(idx)) = slot as i32;
            *self.batch.logits.add(idx) = i8::from(logits);
        }
        self.batch.n_tokens += 1;
        Ok(idx)
    }

    /// Submit the step. llama.cpp returns once the step's graph is queued
    /// on an asynchronous device (CUDA); on the CPU it returns when the step
    /// is computed. Errors (no KV space, a bad batch) are known here.
    pub fn submit(&mut self) -> Result<(), StepError> {
        self.decode_span()?;
        if self.batch.n_tokens == 0 {
            return Ok(());
        }
        // SAFETY: the batch entries up to `n_tokens` were written by `push`.
        let r = unsafe { llama_cpp_sys_2::llama_decode(self.ctx.as_ptr(), self.batch) };
        if r != 0 {
            self.wait();
        }
        match r {
            0 => Ok(()),
            1 => Err(StepError::NoKvSpace),
            2 => Err(StepError::Interrupted),
            e => Err(StepError::Decode(format!("llama_decode returned {e}"))),
        }
    }

    /// Interrupt a step when `flag` is raised: llama.cpp's CPU backend
    /// checks it between graph nodes, ends `llama_decode` with 2 and removes
    /// the positions of the ubatch it was computing (ubatches it had
    /// finished stay: the owner rewinds them, `owner/faults.rs`).
    pub fn set_interrupt(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        extern "C" fn raised(data: *mut std::ffi::c_void) -> bool {
            // SAFETY: `data` is the `AtomicBool` this runtime keeps alive
            // in `interrupt` for as long as the context exists.
            let flag = unsafe { &*(data as *const std::sync::atomic::AtomicBool) };
            flag.load(std::sync::atomic::Ordering::Acquire)
        }
        let data = std::sync::Arc::as_ptr(&flag) as *mut std::ffi::c_void;
        // SAFETY: the context is alive; the callback's data outlives it
        // (the `Arc` is a field, dropped after the context is freed).
        unsafe { llama_cpp_sys_2::llama_set_abort_callback(self.ctx.as_ptr(), Some(raised), data) };
        self.interrupt = Some(flag);
    }

    /// Wait until the last submitted step has completed.
    pub fn wait(&mut self) {
        // SAFETY: the context is alive; synchronising an idle context is a no-op.
        unsafe { llama_cpp_sys_2::llama_synchronize(self.ctx.as_ptr()) };
    }

    /// Logits of batch entry `idx` from the last completed step (empty when
    /// the entry produced none).
    pub fn logits(&self, idx: usize) -> &[f32] {
        // SAFETY: llama.cpp returns a row of `n_vocab` floats that stays
        // valid until the next decode (which needs `&mut self`), or null.
        unsafe {
            let p = llama_cpp_sys_2::llama_get_logits_ith(self.ctx.as_ptr(), idx as i32);
            if p.is_null() {
                &[]
            } else {
                std::slice::from_raw_parts(p, self.n_vocab)
            }
        }
    }

    /// The token the device sampler of batch entry `idx`'s slot chose in
    /// the last step, if it has one.
    pub fn sampled(&self, idx: usize) -> Option<TokenId> {
        // SAFETY: reads the last step's sampled-token buffer.
        let t =
            unsafe { llama_cpp_sys_2::llama_get_sampled_token_ith(self.ctx.as_ptr(), idx as i32) };
        (t >= 0).then_some(t)
    }

    /// Attach (or detach) a device greedy sampler to a slot: its outputs
    /// are then argmax'd inside the step's graph and only the token comes
    /// back. Returns whether the slot now samples on the device. A change
    /// makes llama.cpp re-reserve its graph at the next step, so callers
    /// change it only when a slot's next request needs the other path.
    pub fn set_device_greedy(&mut self, slot: usize, mode: Option<&[TokenId]>) -> bool {
        use llama_cpp_sys_2 as sys;
        let Some(cur) = self.device.get(slot).copied() else {
            return false;
        };
        match mode {
            Some(ban) if !cur.is_null() && self.device_ban[slot] == ban => return true,
            None if cur.is_null() => return false,
            _ => {}
        }
        // SAFETY: the context and the chains are ours; a chain is freed only
        // after llama.cpp has let go of it.
        unsafe {
            if !cur.is_null() {
                sys::llama_set_sampler(self.ctx.as_ptr(), slot as i32, std::ptr::null_mut());
                sys::llama_sampler_free(cur);
                self.device[slot] = std::ptr::null_mut();
            }
            let Some(ban) = mode else {
                return false;
            };
            let chain = sys::llama_sampler_chain_init(sys::llama_sampler_chain_default_params());
            if !ban.is_empty() {
                // Banned tokens (end of generation under `ignore_eos`) at
                // -inf before the argmax: what the host sampler does.
                let bias: Vec<sys::llama_logit_bias> = ban
                    .iter()
                    .map(|&token| sys::llama_logit_bias {
                        token,
                        bias: f32::NEG_INFINITY,
                    })
                    .collect();
                sys::llama_sampler_chain_add(
                    chain,
                    sys::llama_sampler_init_logit_bias(
                        self.n_vocab as i32,
                        bias.len() as i32,
                        bias.as_ptr(),
                    ),
                );
            }
            sys::llama_sampler_chain_add(chain, sys::llama_sampler_init_greedy());
            if sys::llama_set_sampler(self.ctx.as_ptr(), slot as i32, chain) {
                self.device[slot] = chain;
                self.device_ban[slot] = ban.to_vec();
                true
            } else {
                sys::llama_sampler_free(chain);
                false
            }
        }
    }
}

impl Drop for Runtime<'_> {
    fn drop(&mut self) {
        for slot in 0..self.device.len() {
            self.set_device_greedy(slot, None);
        }
        // SAFETY: allocated in `new_runtime`, freed once here.
        unsafe {
            llama_cpp_sys_2::llama_batch_free(self.batch);
            llama_cpp_sys_2::llama_free(self.ctx.as_ptr());
        }
    }
}
