//! The seam between the execution owner and the model runtime: what a step
//! needs, nothing more. `runtime::Runtime` implements it over llama.cpp; a
//! deterministic fake implements it for the owner's unit tests.

use crate::runtime::{Runtime, StepError, TokenId};

pub trait Backend {
    /// Start building a new step.
    fn clear(&mut self);
    /// Add one token for `slot` at `pos`; returns its batch row.
    fn push(
        &mut self,
        token: TokenId,
        pos: u32,
        slot: usize,
        logits: bool,
    ) -> Result<usize, StepError>;
    /// Add a media span: `n_tokens` embedding rows for `slot` at
    /// positions `pos0..`, decoded before the step's token rows (at most
    /// one span a step).
    fn push_span(
        &mut self,
        _embd: std::sync::Arc<[f32]>,
        _n_tokens: usize,
        _pos0: u32,
        _slot: usize,
        _non_causal: bool,
    ) -> Result<(), StepError> {
        Err(StepError::Batch("this backend takes no media".into()))
    }
    /// Submit the step. On an asynchronous device (CUDA) it returns once
    /// the step is queued: the host may do work that needs none of the
    /// step's outputs, and must not touch the runtime, until `wait`.
    fn submit(&mut self) -> Result<(), StepError>;
    /// Wait until the submitted step has completed (its outputs readable).
    fn wait(&mut self) {}
    /// A raised `flag` ends the step in flight early with
    /// `StepError::Interrupted` (`owner/interrupt.rs`).
    fn set_interrupt(&mut self, _flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {}
    /// Submit the step and wait until it has completed.
    fn decode(&mut self) -> Result<(), StepError> {
        self.submit()?;
        self.wait();
        Ok(())
    }
    /// Logits of a batch row of the last completed step.
    fn logits(&self, row: usize) -> &[f32];
    /// Release every KV cell of a slot (idempotent).
    fn clear_slot(&mut self, slot: usize);
    /// Release a slot's cells from position `from` on (keep its prefix).
    /// False when the memory cannot be cut there (a recurrent state): the
    /// slot is then unchanged.
    fn truncate_slot(&mut self, slot: usize, from: u32) -> bool;
    /// Lowest position every layer of a slot still holds (`None`: empty);
    /// above 0 once a sliding-window cache has overwritten old cells.
    fn slot_pos_min(&self, _slot: usize) -> Option<usize> {
        Some(0)
    }
    /// The part of a slot's state that cannot be rewound (window cells,
    /// recurrent state), as bytes: a checkpoint at its current length.
    fn save_partial(&self, _slot: usize) -> Option<Vec<u8>> {
        None
    }
    /// Put a checkpoint back into the slot it was taken from and cut the
    /// slot to `len` cells (the checkpoint's length); false, and the slot
    /// cleared, if refused.
    fn restore_partial(&mut self, slot: usize, _data: &[u8], _len: u32) -> bool {
        self.clear_slot(slot);
        false
    }
    /// Bytes of a slot's saved state: whole, or its partial part.
    fn slot_state_size(&self, _slot: usize, _partial: bool) -> usize {
        0
    }
    /// Make `dst` hold a copy of `src`'s cells (before the next step runs;
    /// `src` is only read).
    fn copy_slot(&mut self, src: usize, dst: usize);
    /// Sample a slot's outputs greedily on the device, never choosing the
    /// `banned` tokens (`Some`), or leave them to the host (`None`); returns
    /// whether the slot now samples on the device.
    fn set_device_greedy(&mut self, _slot: usize, _mode: Option<&[TokenId]>) -> bool {
        false
    }
    /// The device-sampled token of a batch row of the last step.
    fn sampled(&self, _row: usize) -> Option<TokenId> {
        None
    }
    /// A slot's KV state as bytes (host tier of the prefix cache).
    fn save_slot(&self, slot: usize) -> Option<Vec<u8>>;
    /// Cells a slot holds (positions 0..n).
    fn slot_len(&self, slot: usize) -> usize;
    /// The runtime's own count of its state's bytes (every KV cell in use
    /// once), where it has one.
    fn state_bytes(&self) -> Option<usize> {
        None
    }
    /// Replace a slot's cells with saved state; false if refused.
    fn restore_slot(&mut self, slot: usize, data: &[u8]) -> bool;
    /// Load a LoRA adapter; its index for `set_adapters`.
    fn load_adapter(&mut self, _path: &std::path::Path) -> Result<usize, String> {
        Err("this backend takes no adapters".into())
    }
    /// The adapters (index, scale) every later step runs under (empty: the
    /// base model).
    fn set_adapters(&mut self, set: &[(usize, f32)]) -> Result<(), String> {
        if set.is_empty() {
            Ok(())
        } else {
            Err("this backend takes no adapters".into())
        }
    }
}

impl Backend for Runtime<'_> {
    fn clear(&mut self) {
        Runtime::clear(self)
    }
    fn push(
        &mut self,
        token: TokenId,
        pos: u32,
        slot: usize,
        logits: bool,
    ) -> Result<usize, StepError> {
        Runtime::push(self, token, pos, slot, logits)
    }
    fn push_span(
        &mut self,
        embd: std::sync::Arc<[f32]>,
        n_tokens: usize,
        pos0: u32,
        slot: usize,
        non_causal: bool,
    ) -> Result<(), StepError> {
        Runtime::push_span(self, embd, n_tokens, pos0, slot, non_causal)
    }
    fn submit(&mut self) -> Result<(), StepError> {
        Runtime::submit(self)
    }
    fn wait(&mut self) {
        Runtime::wait(self)
    }
    fn set_interrupt(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        Runtime::set_interrupt(self, flag)
    }
    fn logits(&self, row: usize) -> &[f32] {
        Runtime::logits(self, row)
    }
    fn clear_slot(&mut self, slot: usize) {
        Runtime::clear_slot(self, slot)
    }
    fn truncate_slot(&mut self, slot: usize, from: u32) -> bool {
        Runtime::truncate_slot(self, slot, from)
    }
    fn slot_pos_min(&self, slot: usize) -> Option<usize> {
        usize::try_from(Runtime::slot_pos_min(self, slot)).ok()
    }
    fn save_partial(&self, slot: usize) -> Option<Vec<u8>> {
        Runtime::save_partial(self, slot)
    }
    fn restore_partial(&mut self, slot: usize, data: &[u8], len: u32) -> bool {
        Runtime::restore_partial(self, slot, data, len)
    }
    fn slot_state_size(&self, slot: usize, partial: bool) -> usize {
        Runtime::slot_state_size(self, slot, partial)
    }
    fn copy_slot(&mut self, src: usize, dst: usize) {
        Runtime::copy_slot(self, src, dst)
    }
    fn set_device_greedy(&mut self, slot: usize, mode: Option<&[TokenId]>) -> bool {
        Runtime::set_device_greedy(self, slot, mode)
    }
    fn sampled(&self, row: usize) -> Option<TokenId> {
        Runtime::sampled(self, row)
    }
    fn save_slot(&self, slot: usize) -> Option<Vec<u8>> {
        Runtime::save_slot(self, slot)
    }
    fn slot_len(&self, slot: usize) -> usize {
        (Runtime::slot_pos_max(self, slot) + 1).max(0) as usize
    }
    fn state_bytes(&self) -> Option<usize> {
        Some(Runtime::state_bytes(self))
    }
    fn restore_slot(&mut self, slot: usize, data: &[u8]) -> bool {
        Runtime::restore_slot(self, slot, data)
    }
    fn load_adapter(&mut self, path: &std::path::Path) -> Result<usize, String> {
        Runtime::load_adapter(self, path)
    }
    fn set_adapters(&mut self, set: &[(usize, f32)]) -> Result<(), String> {
        Runtime::set_adapters(self, set)
    }
}
