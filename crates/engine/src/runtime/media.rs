//! A step's media span: embedding rows (from the projector) decoded into a
//! slot's cells before the step's token rows. llama.cpp takes a batch of
//! tokens or of embeddings, never both, so a span is its own decode; a
//! span whose rows attend both ways (`non_causal`) runs with causal
//! attention off, whole, in one ubatch (the prepare stage refuses spans
//! longer than the runtime's ubatch).

use std::sync::Arc;

use llama_cpp_sys_2 as sys;

use super::{Runtime, StepError};

/// The span a step carries (at most one).
pub(super) struct PendingSpan {
    embd: Arc<[f32]>,
    n_tokens: usize,
    pos0: u32,
    slot: usize,
    non_causal: bool,
}

impl Runtime<'_> {
    /// Add a media span (`n_tokens` rows of `embd`) for `slot` at
    /// positions `pos0..`; decoded first when the step is submitted.
    pub fn push_span(
        &mut self,
        embd: Arc<[f32]>,
        n_tokens: usize,
        pos0: u32,
        slot: usize,
        non_causal: bool,
    ) -> Result<(), StepError> {
        if self.span.is_some() {
            return Err(StepError::Batch("one media span per step".into()));
        }
        if n_tokens == 0 || !embd.len().is_multiple_of(n_tokens) || n_tokens > self.capacity {
            return Err(StepError::Batch(format!(
                "a media span of {n_tokens} rows does not fit the step"
            )));
        }
        self.span = Some(PendingSpan {
            embd,
            n_tokens,
            pos0,
            slot,
            non_causal,
        });
        Ok(())
    }

    /// Decode the pending span, if any (before the step's tokens; waits
    /// for it, since the token rows that follow may read its cells).
    pub(super) fn decode_span(&mut self) -> Result<(), StepError> {
        let Some(s) = self.span.take() else {
            return Ok(());
        };
        let n = s.n_tokens;
        let mut pos: Vec<i32> = (0..n).map(|i| s.pos0 as i32 + i as i32).collect();
        let mut n_seq: Vec<i32> = vec![1; n];
        let mut seq: Vec<i32> = vec![s.slot as i32; n];
        let mut seq_ptrs: Vec<*mut i32> = seq.iter_mut().map(|p| p as *mut i32).collect();
        let mut logits: Vec<i8> = vec![0; n];
        let batch = sys::llama_batch {
            n_tokens: n as i32,
            token: std::ptr::null_mut(),
            // llama.cpp only reads the rows.
            embd: s.embd.as_ptr() as *mut f32,
            pos: pos.as_mut_ptr(),
            n_seq_id: n_seq.as_mut_ptr(),
            seq_id: seq_ptrs.as_mut_ptr(),
            logits: logits.as_mut_ptr(),
        };
        // SAFETY: every array holds `n` entries and outlives the call; the
        // context is ours; causal attention is restored before returning.
        let r = unsafe {
            if s.non_causal {
                sys::llama_set_causal_attn(self.ctx.as_ptr(), false);
            }
            let r = sys::llama_decode(self.ctx.as_ptr(), batch);
            sys::llama_synchronize(self.ctx.as_ptr());
            if s.non_causal {
                sys::llama_set_causal_attn(self.ctx.as_ptr(), true);
            }
            r
        };
        match r {
            0 => Ok(()),
            1 => Err(StepError::NoKvSpace),
            e => Err(StepError::Decode(format!(
                "llama_decode of a media span returned {e}"
            ))),
        }
    }
}
