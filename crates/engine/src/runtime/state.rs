//! A slot's memory in the runtime: clearing, truncating and copying it,
//! and saving and restoring it whole (the prefix cache's host tier) or in
//! part (checkpoints: the part that cannot be rewound, i.e. the
//! sliding-window cells of an SWA model or the recurrent state of a
//! recurrent or hybrid one).

use super::{ModelFacts, Runtime};

/// How a model's memory holds a sequence, per layer kind, as llama.cpp
/// builds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Full attention: one cell per token, any prefix can be kept.
    Attention,
    /// Full-attention layers plus sliding-window layers whose cells older
    /// than the window may be overwritten (llama.cpp's SWA cache of
    /// `n_swa + n_ubatch` cells per stream, unless `swa_full`).
    Window { n_swa: u32 },
    /// A recurrent state per sequence (Mamba, RWKV), with attention layers
    /// beside it when `hybrid` (Granite-4.0-H, LFM2, Qwen3-Next): the state
    /// holds only the last position and cannot be rewound.
    Recurrent { hybrid: bool },
}

impl MemoryKind {
    pub fn of(facts: &ModelFacts, swa_full: bool) -> Self {
        if facts.recurrent || facts.hybrid {
            MemoryKind::Recurrent {
                hybrid: facts.hybrid,
            }
        } else if facts.n_swa > 0 && !swa_full {
            MemoryKind::Window { n_swa: facts.n_swa }
        } else {
            MemoryKind::Attention
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            MemoryKind::Attention => "attention",
            MemoryKind::Window { .. } => "sliding_window",
            MemoryKind::Recurrent { hybrid: false } => "recurrent",
            MemoryKind::Recurrent { hybrid: true } => "hybrid",
        }
    }
}

/// `LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY` (llama.h; a macro the bindings omit).
const PARTIAL: u32 = 1;

impl Runtime<'_> {
    /// Drop every KV cell of a slot. Idempotent.
    pub fn clear_slot(&mut self, slot: usize) {
        unsafe { llama_cpp_sys_2::llama_memory_seq_rm(self.mem(), slot as i32, -1, -1) };
    }

    /// Drop a slot's cells from position `from` on (keep its prefix). False
    /// when the memory cannot (a recurrent state is never cut short); the
    /// slot is then unchanged.
    pub fn truncate_slot(&mut self, slot: usize, from: u32) -> bool {
        unsafe { llama_cpp_sys_2::llama_memory_seq_rm(self.mem(), slot as i32, from as i32, -1) }
    }

    /// Copy every cell of slot `src` into slot `dst` (whose cells are
    /// replaced). With per-slot KV streams llama.cpp copies the whole stream
    /// buffer at the start of the next `decode`, before that step computes,
    /// so `src` may take part in that step; with a unified pool it only
    /// tags the cells (zero-copy).
    pub fn copy_slot(&mut self, src: usize, dst: usize) {
        unsafe { llama_cpp_sys_2::llama_memory_seq_cp(self.mem(), src as i32, dst as i32, -1, -1) };
    }

    fn save(&self, slot: usize, flags: u32) -> Option<Vec<u8>> {
        use llama_cpp_sys_2 as sys;
        // SAFETY: the buffer holds `size` bytes; llama.cpp writes at most that.
        unsafe {
            let size = sys::llama_state_seq_get_size_ext(self.ctx.as_ptr(), slot as i32, flags);
            if size == 0 {
                return None;
            }
            let mut buf = vec![0u8; size];
            let n = sys::llama_state_seq_get_data_ext(
                self.ctx.as_ptr(),
                buf.as_mut_ptr(),
                size,
                slot as i32,
                flags,
            );
            (n == size).then_some(buf)
        }
    }

    /// A slot's KV state as bytes (llama.cpp's per-sequence state format),
    /// for the prefix cache's host tier.
    pub fn save_slot(&self, slot: usize) -> Option<Vec<u8>> {
        self.save(slot, 0)
    }

    /// The part of a slot's state that cannot be rewound (sliding-window
    /// cells, recurrent state): a checkpoint at the slot's current length.
    pub fn save_partial(&self, slot: usize) -> Option<Vec<u8>> {
        self.save(slot, PARTIAL)
    }

    /// Bytes of a slot's saved state, whole or its partial part (the ledger
    /// measures its bytes per cell from these).
    pub fn slot_state_size(&self, slot: usize, partial: bool) -> usize {
        let flags = if partial { PARTIAL } else { 0 };
        unsafe {
            llama_cpp_sys_2::llama_state_seq_get_size_ext(self.ctx.as_ptr(), slot as i32, flags)
        }
    }

    /// Replace a slot's cells with saved state; false if llama.cpp refused
    /// it (the slot is then empty).
    pub fn restore_slot(&mut self, slot: usize, data: &[u8]) -> bool {
        self.clear_slot(slot);
        // SAFETY: reads `data.len()` bytes.
        let n = unsafe {
            llama_cpp_sys_2::llama_state_seq_set_data(
                self.ctx.as_ptr(),
                data.as_ptr(),
                data.len(),
                slot as i32,
            )
        };
        if n == 0 {
            self.clear_slot(slot);
        }
        n > 0
    }

    /// Rewind a slot to a checkpoint taken when it held `len` cells: the
    /// partial state replaces the slot's own, then the rest is cut after
    /// `len`. False (and the slot cleared) if llama.cpp refused either.
    pub fn restore_partial(&mut self, slot: usize, data: &[u8], len: u32) -> bool {
        // SAFETY: reads `data.len()` bytes.
        let n = unsafe {
            llama_cpp_sys_2::llama_state_seq_set_data_ext(
                self.ctx.as_ptr(),
                data.as_ptr(),
                data.len(),
                slot as i32,
                PARTIAL,
            )
        };
        let ok = n > 0 && self.truncate_slot(slot, len);
        if !ok {
            self.clear_slot(slot);
        }
        ok
    }

    /// Size of the whole context state as llama.cpp would serialize it:
    /// model info plus every KV cell in use, each once (a cell shared by
    /// several sequences in a unified pool is written once). Computed by
    /// counting, without copying.
    pub fn state_bytes(&self) -> usize {
        unsafe { llama_cpp_sys_2::llama_state_get_size(self.ctx.as_ptr()) }
    }

    /// Highest position stored for a slot, or -1 when empty.
    pub fn slot_pos_max(&self, slot: usize) -> i32 {
        unsafe { llama_cpp_sys_2::llama_memory_seq_pos_max(self.mem(), slot as i32) }
    }

    /// Lowest position stored for a slot in every layer (above 0 once a
    /// sliding-window cache has overwritten old cells), or -1 when empty.
    pub fn slot_pos_min(&self, slot: usize) -> i32 {
        unsafe { llama_cpp_sys_2::llama_memory_seq_pos_min(self.mem(), slot as i32) }
    }
}
