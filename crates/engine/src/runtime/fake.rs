//! A deterministic fake backend for the owner's unit tests: a tiny
//! vocabulary, "logits" that make the next token a pure function of the
//! slot's last token and position, per-slot KV bookkeeping that rejects
//! position gaps, and fault injection.
//!
//! Memory kinds as llama.cpp holds them (`FakeMemory`): a sliding window
//! whose stream keeps `size` cells (older ones overwritten, lowest first)
//! and whose next token depends on the window's tokens, and a recurrent
//! state (a running hash of every token) that cannot be cut short. A token
//! computed without the state it needs (a window cell already overwritten,
//! a checkpoint restored into the wrong slot) comes out different, so a
//! reuse the real runtime would get wrong shows up as different text.

use std::sync::Arc;

use crate::runtime::backend::Backend;
use crate::runtime::{StepError, TokenId, Vocab};

pub const N_VOCAB: usize = 64;
pub const EOG: TokenId = 0;

pub fn vocab() -> Arc<Vocab> {
    let mut v = Vocab::default();
    for i in 0..N_VOCAB {
        let text = if i == 0 {
            String::new()
        } else {
            format!("w{i} ")
        };
        v.token_bytes
            .push(text.clone().into_bytes().into_boxed_slice());
        v.token_text_special
            .push(text.into_bytes().into_boxed_slice());
        v.eog.push(i == 0);
    }
    v.eog_ids = vec![EOG];
    Arc::new(v)
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FakeMemory {
    #[default]
    Attention,
    Window {
        n_swa: usize,
        size: usize,
    },
    Recurrent,
}

#[derive(Default)]
pub struct FakeBackend {
    pub memory: FakeMemory,
    /// Window: lowest position held per slot; recurrent: the state hash.
    pub lo: Vec<usize>,
    pub state: Vec<u64>,
    /// A slot whose state was restored wrongly computes garbage.
    pub corrupt: Vec<bool>,
    /// Checkpoints restored (partial state).
    pub partial_restores: usize,
    batch: Vec<(TokenId, u32, usize, bool)>,
    rows: Vec<Vec<f32>>,
    pub kv: Vec<Vec<TokenId>>,
    pub fail_next: bool,
    /// The next step is interrupted after its first half of rows is
    /// applied (llama.cpp keeps the ubatches it finished).
    pub interrupt_next: bool,
    /// Steps interrupted so far.
    pub interrupted: usize,
    /// Every step carrying this slot fails, with this error: the fault
    /// belongs to one sequence.
    pub fail_slot: Option<(usize, StepError)>,
    /// Every step carrying this slot panics (a bug in the runtime adapter).
    pub panic_slot: Option<usize>,
    /// Rows of this slot get NaN logits.
    pub nan_slot: Option<usize>,
    /// From this position on, the next token is end-of-generation.
    pub eog_from_pos: Option<u32>,
    /// Tokens per step, for assertions.
    pub step_sizes: Vec<usize>,
    /// Slot copies made (prefix reuse from a live sequence).
    pub copies: usize,
    /// Slots restored from saved state (host tier).
    pub restores: usize,
    /// The next restore is refused (as llama.cpp refuses a state that does
    /// not fit).
    pub refuse_restore: bool,
    /// LoRA adapters "loaded" (their paths), the set applied now, how many
    /// times it changed, and per slot the set its cells were computed
    /// under: a token computed under another set than the slot's cells is
    /// garbage, and each set shifts the tokens it computes.
    pub adapters: Vec<std::path::PathBuf>,
    pub active: Vec<(usize, f32)>,
    pub adapter_switches: usize,
    slot_tag: Vec<Option<u64>>,
    /// Media spans decoded: (slot, first position, rows).
    pub spans: Vec<(usize, u32, usize)>,
}

impl FakeBackend {
    pub fn new(slots: usize) -> Self {
        FakeBackend {
            kv: vec![Vec::new(); slots],
            lo: vec![0; slots],
            state: vec![0; slots],
            corrupt: vec![false; slots],
            slot_tag: vec![None; slots],
            ..Default::default()
        }
    }

    pub fn with_memory(slots: usize, memory: FakeMemory) -> Self {
        FakeBackend {
            memory,
            ..FakeBackend::new(slots)
        }
    }

    fn mix(state: u64, tok: TokenId) -> u64 {
        (state ^ tok as u64)
            .wrapping_mul(0x100_0000_01b3)
            .rotate_left(7)
    }

    /// The token after `pos` in `slot`, from the state the kind reads.
    fn next_in(&self, slot: usize, tok: TokenId, pos: u32) -> TokenId {
        let garbage = |p: u32| 1 + ((p * 5 + 11) % (N_VOCAB as u32 - 1)) as TokenId;
        if self.corrupt[slot] {
            return garbage(pos);
        }
        match self.memory {
            FakeMemory::Attention => self.next_token(tok, pos + 1),
            FakeMemory::Window { n_swa, .. } => {
                let p = pos as usize;
                let from = (p + 1).saturating_sub(n_swa);
                if from < self.lo[slot] {
                    return garbage(pos);
                }
                let sum: u32 = self.kv[slot][from..=p]
                    .iter()
                    .fold(0u32, |a, &t| a.wrapping_add(t as u32));
                self.next_token((sum % N_VOCAB as u32) as TokenId, pos + 1)
            }
            FakeMemory::Recurrent => {
                let h = (self.state[slot] % N_VOCAB as u64) as TokenId;
                self.next_token(h, pos + 1)
            }
        }
    }

    /// The active adapter set as a number (0: the base model).
    fn tag(&self) -> u64 {
        self.active.iter().fold(0u64, |h, &(i, s)| {
            Self::mix(h ^ (i as u64 + 1), s.to_bits() as TokenId)
        })
    }

    pub fn next_token(&self, last: TokenId, pos: u32) -> TokenId {
        if self.eog_from_pos.is_some_and(|p| pos >= p) {
            return EOG;
        }
        1 + ((last as u32).wrapping_mul(7).wrapping_add(pos * 3) % (N_VOCAB as u32 - 1)) as TokenId
    }
}

impl Backend for FakeBackend {
    fn clear(&mut self) {
        self.batch.clear();
    }

    fn push(
        &mut self,
        token: TokenId,
        pos: u32,
        slot: usize,
        logits: bool,
    ) -> Result<usize, StepError> {
        let pending = self.batch.iter().filter(|b| b.2 == slot).count();
        let expected = (self.kv[slot].len() + pending) as u32;
        if pos != expected {
            return Err(StepError::Batch(format!(
                "slot {slot}: position {pos}, expected {expected}"
            )));
        }
        self.batch.push((token, pos, slot, logits));
        Ok(self.batch.len() - 1)
    }

    /// A span's rows enter the cells as the ids whose bits their first
    /// floats hold (tests write the engine's placeholders there).
    fn push_span(
        &mut self,
        embd: std::sync::Arc<[f32]>,
        n_tokens: usize,
        pos0: u32,
        slot: usize,
        _non_causal: bool,
    ) -> Result<(), StepError> {
        let width = embd.len() / n_tokens.max(1);
        for i in 0..n_tokens {
            let tok = embd[i * width].to_bits() as TokenId;
            self.push(tok, pos0 + i as u32, slot, false)?;
        }
        self.spans.push((slot, pos0, n_tokens));
        Ok(())
    }

    fn submit(&mut self) -> Result<(), StepError> {
        if std::mem::take(&mut self.fail_next) {
            return Err(StepError::Decode("injected failure".into()));
        }
        if std::mem::take(&mut self.interrupt_next) {
            let half = self.batch.len() / 2;
            for &(tok, _, slot, _) in &self.batch[..half] {
                self.kv[slot].push(tok);
            }
            self.batch.clear();
            self.interrupted += 1;
            return Err(StepError::Interrupted);
        }
        if let Some((slot, e)) = &self.fail_slot {
            if self.batch.iter().any(|b| b.2 == *slot) {
                return Err(e.clone());
            }
        }
        if let Some(slot) = self.panic_slot {
            assert!(
                !self.batch.iter().any(|b| b.2 == slot),
                "injected panic in the runtime"
            );
        }
        self.step_sizes.push(self.batch.len());
        self.rows.clear();
        let batch = std::mem::take(&mut self.batch);
        let tag = self.tag();
        for &(tok, pos, slot, want) in &batch {
            match self.slot_tag[slot] {
                Some(t) if t != tag => self.corrupt[slot] = true,
                _ => self.slot_tag[slot] = Some(tag),
            }
            self.kv[slot].push(tok);
            self.state[slot] = Self::mix(self.state[slot], tok);
            let mut l = vec![0.0f32; N_VOCAB];
            if want {
                let t = self.next_in(slot, tok, pos);
                // An adapter shifts the tokens it computes (never onto EOG).
                let shift = (tag % (N_VOCAB as u64 - 1)) as TokenId;
                let t = if t == EOG || shift == 0 {
                    t
                } else {
                    1 + (t - 1 + shift) % (N_VOCAB as TokenId - 1)
                };
                l[t as usize] = 1.0;
            }
            if let FakeMemory::Window { size, .. } = self.memory {
                // The stream is full: the lowest position is overwritten.
                let len = self.kv[slot].len();
                self.lo[slot] = self.lo[slot].max(len.saturating_sub(size));
            }
            if self.nan_slot == Some(slot) {
                l.fill(f32::NAN);
            }
            self.rows.push(l);
        }
        self.batch = batch;
        Ok(())
    }

    fn logits(&self, row: usize) -> &[f32] {
        &self.rows[row]
    }

    fn clear_slot(&mut self, slot: usize) {
        self.kv[slot].clear();
        self.lo[slot] = 0;
        self.state[slot] = 0;
        self.corrupt[slot] = false;
        self.slot_tag[slot] = None;
    }

    fn truncate_slot(&mut self, slot: usize, from: u32) -> bool {
        let from = from as usize;
        let len = self.kv[slot].len();
        if from >= len {
            return true;
        }
        if from == 0 {
            self.clear_slot(slot);
            return true;
        }
        match self.memory {
            // llama.cpp refuses to cut a recurrent state short.
            FakeMemory::Recurrent => return false,
            FakeMemory::Window { .. } => {
                if from <= self.lo[slot] {
                    // Nothing of the window is left below the cut.
                    self.lo[slot] = from;
                }
            }
            FakeMemory::Attention => {}
        }
        self.kv[slot].truncate(from);
        true
    }

    fn copy_slot(&mut self, src: usize, dst: usize) {
        self.kv[dst] = self.kv[src].clone();
        self.lo[dst] = self.lo[src];
        self.state[dst] = self.state[src];
        self.corrupt[dst] = self.corrupt[src];
        self.slot_tag[dst] = self.slot_tag[src];
        self.copies += 1;
    }
    fn slot_pos_min(&self, slot: usize) -> Option<usize> {
        let len = self.kv.get(slot).map_or(0, Vec::len);
        match self.memory {
            _ if len == 0 => None,
            FakeMemory::Window { .. } if self.lo[slot] >= len => None,
            FakeMemory::Window { .. } => Some(self.lo[slot]),
            FakeMemory::Recurrent => Some(len - 1),
            FakeMemory::Attention => Some(0),
        }
    }
    fn save_partial(&self, slot: usize) -> Option<Vec<u8>> {
        // (length, lowest position, state hash, then the window's tokens)
        let kv = self.kv.get(slot)?;
        if kv.is_empty() || self.memory == FakeMemory::Attention {
            return None;
        }
        let lo = self.lo[slot].min(kv.len());
        let mut out = Vec::new();
        for v in [kv.len() as u64, lo as u64, self.state[slot]] {
            out.extend(v.to_le_bytes());
        }
        for t in &kv[lo..] {
            out.extend(t.to_le_bytes());
        }
        Some(out)
    }
    fn restore_partial(&mut self, slot: usize, data: &[u8], len: u32) -> bool {
        let word = |i: usize| {
            data.get(i * 8..i * 8 + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        };
        let (Some(n), Some(lo), Some(state)) = (word(0), word(1), word(2)) else {
            self.clear_slot(slot);
            return false;
        };
        let (n, lo) = (n as usize, lo as usize);
        if std::mem::take(&mut self.refuse_restore) || n != len as usize || self.kv[slot].len() < n
        {
            self.clear_slot(slot);
            return false;
        }
        let window: Vec<TokenId> = data[24..]
            .chunks_exact(4)
            .map(|b| TokenId::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // State restored into a slot whose tokens are not the ones it was
        // taken over computes garbage from here on.
        self.corrupt[slot] = self.kv[slot][lo..n] != window[..];
        self.kv[slot].truncate(n);
        self.lo[slot] = lo;
        self.state[slot] = state;
        self.partial_restores += 1;
        true
    }
    fn slot_state_size(&self, slot: usize, partial: bool) -> usize {
        let len = self.kv.get(slot).map_or(0, Vec::len);
        match (partial, self.memory) {
            (true, FakeMemory::Attention) => 0,
            (true, FakeMemory::Window { .. }) => 24 + 4 * len.saturating_sub(self.lo[slot]),
            (true, FakeMemory::Recurrent) => 24,
            (false, _) => 4 * len,
        }
    }
    fn slot_len(&self, slot: usize) -> usize {
        self.kv.get(slot).map_or(0, Vec::len)
    }
    fn save_slot(&self, slot: usize) -> Option<Vec<u8>> {
        // The tokens; other kinds first their lowest position and state.
        let kv = self.kv.get(slot)?;
        let mut out = Vec::new();
        if self.memory != FakeMemory::Attention {
            // As llama.cpp, window cells outside the last position's window
            // are not written.
            let lo = match self.memory {
                FakeMemory::Window { n_swa, .. } => {
                    self.lo[slot].max(kv.len().saturating_sub(n_swa))
                }
                _ => self.lo[slot],
            };
            out.extend((lo as u64).to_le_bytes());
            out.extend(self.state[slot].to_le_bytes());
        }
        out.extend(kv.iter().flat_map(|t| t.to_le_bytes()));
        (!kv.is_empty()).then_some(out)
    }
    fn restore_slot(&mut self, slot: usize, data: &[u8]) -> bool {
        let head = if self.memory == FakeMemory::Attention {
            0
        } else {
            16
        };
        if data.len() < head
            || !(data.len() - head).is_multiple_of(4)
            || std::mem::take(&mut self.refuse_restore)
        {
            return false;
        }
        self.clear_slot(slot);
        if head > 0 {
            let word = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().unwrap_or([0; 8]));
            self.lo[slot] = word(0) as usize;
            self.state[slot] = word(8);
        }
        self.kv[slot] = data[head..]
            .chunks_exact(4)
            .map(|b| TokenId::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        self.restores += 1;
        true
    }
    fn load_adapter(&mut self, path: &std::path::Path) -> Result<usize, String> {
        if path.as_os_str().to_string_lossy().contains("bad") {
            return Err(format!("not an adapter: {}", path.display()));
        }
        self.adapters.push(path.to_path_buf());
        Ok(self.adapters.len() - 1)
    }
    fn set_adapters(&mut self, set: &[(usize, f32)]) -> Result<(), String> {
        if set.iter().any(|&(i, _)| i >= self.adapters.len()) {
            return Err("unknown adapter".into());
        }
        if self.active != set {
            self.active = set.to_vec();
            self.adapter_switches += 1;
        }
        Ok(())
    }
}
