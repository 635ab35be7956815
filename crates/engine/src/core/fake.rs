//! A deterministic fake backend for the owner's unit tests: a tiny
//! vocabulary, "logits" that make the next token a pure function of the
//! slot's last token and position, per-slot KV bookkeeping that rejects
//! position gaps, and fault injection.

use std::sync::Arc;

use super::backend::Backend;
use crate::model::{StepError, TokenId, Vocab};

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

#[derive(Default)]
pub struct FakeBackend {
    batch: Vec<(TokenId, u32, usize, bool)>,
    rows: Vec<Vec<f32>>,
    pub kv: Vec<Vec<TokenId>>,
    pub fail_next: bool,
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
}

impl FakeBackend {
    pub fn new(slots: usize) -> Self {
        FakeBackend {
            kv: vec![Vec::new(); slots],
            ..Default::default()
        }
    }

    pub fn next_token(&self, last: TokenId, pos: u32) -> TokenId {
        if self.eog_from_pos.is_some_and(|p| pos >= p) {
            return EOG;
        }
        1 + ((last as u32 * 7 + pos * 3) % (N_VOCAB as u32 - 1)) as TokenId
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

    fn submit(&mut self) -> Result<(), StepError> {
        if std::mem::take(&mut self.fail_next) {
            return Err(StepError::Decode("injected failure".into()));
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
        for &(tok, pos, slot, want) in &self.batch {
            self.kv[slot].push(tok);
            let mut l = vec![0.0f32; N_VOCAB];
            if want {
                l[self.next_token(tok, pos + 1) as usize] = 1.0;
            }
            if self.nan_slot == Some(slot) {
                l.fill(f32::NAN);
            }
            self.rows.push(l);
        }
        Ok(())
    }

    fn logits(&self, row: usize) -> &[f32] {
        &self.rows[row]
    }

    fn clear_slot(&mut self, slot: usize) {
        self.kv[slot].clear();
    }

    fn truncate_slot(&mut self, slot: usize, from: u32) {
        self.kv[slot].truncate(from as usize);
    }

    fn copy_slot(&mut self, src: usize, dst: usize) {
        self.kv[dst] = self.kv[src].clone();
        self.copies += 1;
    }
    fn slot_len(&self, slot: usize) -> usize {
        self.kv.get(slot).map_or(0, Vec::len)
    }
    fn save_slot(&self, slot: usize) -> Option<Vec<u8>> {
        let kv = self.kv.get(slot)?;
        (!kv.is_empty()).then(|| kv.iter().flat_map(|t| t.to_le_bytes()).collect())
    }
    fn restore_slot(&mut self, slot: usize, data: &[u8]) -> bool {
        if !data.len().is_multiple_of(4) || std::mem::take(&mut self.refuse_restore) {
            return false;
        }
        self.kv[slot] = data
            .chunks_exact(4)
            .map(|b| TokenId::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        self.restores += 1;
        true
    }
}
