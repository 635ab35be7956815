//! Embedding and reranking contexts: llama.cpp with `embeddings` on and the
//! pooling the GGUF names (`{arch}.pooling_type`), so each sequence of a
//! batch comes back as one pooled vector (mean, CLS or last token) or, for a
//! reranker (rank pooling), as its classifier scores.
//!
//! Invariants: an [`EmbedRuntime`] is created and used on its owner thread
//! only. Every sequence of a batch gets its own sequence id and starts at
//! position 0; a non-causal (encoder) model has no KV memory at all, and a
//! causal one's memory is cleared after every batch, so no batch sees
//! another's state.

use super::{LoadError, LoadedModel, StepError, TokenId};
use llama_cpp_sys_2 as sys;

/// How a sequence's token states become its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    Mean,
    Cls,
    Last,
    /// A reranker: the classifier head's scores.
    Rank,
}

impl Pooling {
    /// From a GGUF `pooling_type` value (llama.cpp's enum); `None` for none
    /// or unknown (not an embedding model).
    pub fn from_gguf(v: i64) -> Option<Self> {
        match v {
            1 => Some(Self::Mean),
            2 => Some(Self::Cls),
            3 => Some(Self::Last),
            4 => Some(Self::Rank),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Mean => "mean",
            Self::Cls => "cls",
            Self::Last => "last",
            Self::Rank => "rank",
        }
    }

    fn sys(self) -> sys::llama_pooling_type {
        match self {
            Self::Mean => sys::LLAMA_POOLING_TYPE_MEAN,
            Self::Cls => sys::LLAMA_POOLING_TYPE_CLS,
            Self::Last => sys::LLAMA_POOLING_TYPE_LAST,
            Self::Rank => sys::LLAMA_POOLING_TYPE_RANK,
        }
    }
}

/// Sizing of an embedding context.
#[derive(Debug, Clone)]
pub struct EmbedParams {
    /// Sequences one batch may carry.
    pub n_seqs: usize,
    /// Tokens one batch may carry; also the longest input (a sequence is
    /// computed in one micro-batch: non-causal attention cannot be split).
    pub n_batch: u32,
    pub n_threads: i32,
    pub n_threads_batch: i32,
}

/// One embedding context and its batch.
pub struct EmbedRuntime<'m> {
    ctx: std::ptr::NonNull<sys::llama_context>,
    batch: sys::llama_batch,
    capacity: usize,
    n_seqs: usize,
    n_out: usize,
    pooling: Pooling,
    _model: std::marker::PhantomData<&'m LoadedModel>,
}

impl LoadedModel {
    /// Create the embedding context (the model must be an embedding or
    /// reranking model: `facts.pooling` set). Call on its owner thread.
    pub fn new_embed_runtime(&self, p: &EmbedParams) -> Result<EmbedRuntime<'_>, LoadError> {
        let pooling = self
            .facts
            .pooling
            .ok_or_else(|| LoadError::Context("the model names no pooling".into()))?;
        super::backend()?;
        // SAFETY: plain-data defaults from llama.cpp.
        let mut cp = unsafe { sys::llama_context_default_params() };
        cp.n_ctx = p.n_batch;
        cp.n_batch = p.n_batch;
        cp.n_ubatch = p.n_batch;
        cp.n_seq_max = p.n_seqs as u32;
        cp.n_threads = p.n_threads;
        cp.n_threads_batch = p.n_threads_batch;
        cp.embeddings = true;
        cp.pooling_type = pooling.sys();
        cp.kv_unified = true;
        cp.no_perf = true;
        let model_ptr = self.raw();
        // SAFETY: the model outlives the context ('m).
        let ctx = unsafe { sys::llama_init_from_model(model_ptr, cp) };
        let ctx = std::ptr::NonNull::new(ctx)
            .ok_or_else(|| LoadError::Context("llama_init_from_model returned null".into()))?;
        // SAFETY: the model pointer is live; plain getters.
        let n_out = unsafe {
            if pooling == Pooling::Rank {
                sys::llama_model_n_cls_out(model_ptr) as usize
            } else {
                sys::llama_model_n_embd_out(model_ptr).max(0) as usize
            }
        };
        // SAFETY: a batch of `n_batch` token entries, one sequence each.
        let batch = unsafe { sys::llama_batch_init(p.n_batch as i32, 0, 1) };
        Ok(EmbedRuntime {
            ctx,
            batch,
            capacity: p.n_batch as usize,
            n_seqs: p.n_seqs,
            n_out: n_out.max(1),
            pooling,
            _model: std::marker::PhantomData,
        })
    }

    pub(super) fn raw(&self) -> *mut sys::llama_model {
        // SAFETY: `LlamaModel` is `repr(transparent)` over a non-null pointer.
        unsafe {
            *(&self.model as *const llama_cpp_2::model::LlamaModel as *const *mut sys::llama_model)
        }
    }
}

impl EmbedRuntime<'_> {
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Floats per sequence: the embedding width, or the reranker's number of
    /// classifier outputs.
    pub fn width(&self) -> usize {
        self.n_out
    }

    pub fn capacity(&self) -> (usize, usize) {
        (self.capacity, self.n_seqs)
    }

    /// Compute one batch: every sequence its own id, from position 0.
    /// Returns one output per sequence, in order.
    pub fn run(&mut self, seqs: &[&[TokenId]]) -> Result<Vec<Vec<f32>>, StepError> {
        let total: usize = seqs.iter().map(|s| s.len()).sum();
        if total > self.capacity || seqs.len() > self.n_seqs {
            return Err(StepError::Batch(format!(
                "{} sequences of {total} tokens; the batch holds {} of {}",
                seqs.len(),
                self.n_seqs,
                self.capacity
            )));
        }
        self.batch.n_tokens = 0;
        for (sid, s) in seqs.iter().enumerate() {
            for (pos, &t) in s.iter().enumerate() {
                let idx = self.batch.n_tokens as usize;
                // SAFETY: idx < capacity (checked above); one seq id each.
                unsafe {
                    *self.batch.token.add(idx) = t;
                    *self.batch.pos.add(idx) = pos as i32;
                    *self.batch.n_seq_id.add(idx) = 1;
                    *(*self.batch.seq_id.add(idx)) = sid as i32;
                    *self.batch.logits.add(idx) = 1;
                }
                self.batch.n_tokens += 1;
            }
        }
        // SAFETY: entries up to n_tokens written above. On a model without
        // KV memory llama_decode runs the encoder.
        let r = unsafe { sys::llama_decode(self.ctx.as_ptr(), self.batch) };
        let out = if r == 0 {
            let mut out = Vec::with_capacity(seqs.len());
            for sid in 0..seqs.len() {
                // SAFETY: pooled outputs of `n_out` floats per sequence, valid
                // until the next decode.
                let p = unsafe { sys::llama_get_embeddings_seq(self.ctx.as_ptr(), sid as i32) };
                if p.is_null() {
                    return Err(StepError::Decode(format!(
                        "no pooled output for sequence {sid}"
                    )));
                }
                out.push(unsafe { std::slice::from_raw_parts(p, self.n_out) }.to_vec());
            }
            Ok(out)
        } else {
            Err(StepError::Decode(format!("llama_decode returned {r}")))
        };
        // A causal model's cells from this batch go; an encoder has none.
        // SAFETY: the context is alive; a null memory is skipped.
        unsafe {
            let mem = sys::llama_get_memory(self.ctx.as_ptr());
            if !mem.is_null() {
                sys::llama_memory_clear(mem, true);
            }
        }
        out
    }
}

impl Drop for EmbedRuntime<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated in `new_embed_runtime`, freed once here.
        unsafe {
            sys::llama_batch_free(self.batch);
            sys::llama_free(self.ctx.as_ptr());
        }
    }
}
