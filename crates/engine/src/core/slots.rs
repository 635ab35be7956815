//! Slot placement: which slot a new sequence gets, and the prefix cache's
//! evictions. Owner-thread only, like the rest of `core`.
//!
//! With per-slot KV streams llama.cpp makes one pass over the weights per
//! run of consecutive busy slot ids, every step (see `Owner::step`), so a
//! new sequence goes next to the busy ones whenever it can.

use super::backend::Backend;
use super::{prefix, Owner};
use crate::model::TokenId;

impl<B: Backend> Owner<B> {
    /// Some admitted sequence is still prefilling a prefix of `prompt` of at
    /// least `--prefix-copy-min` tokens.
    pub(super) fn sharing_pending(&self, prompt: &[TokenId]) -> bool {
        let cap = prompt.len().saturating_sub(1);
        self.seqs.iter().any(|s| {
            let shared = prefix::common_prefix(&s.prompt, prompt).min(cap);
            shared >= self.cache.copy_min && s.computed_prompt().len() < shared
        })
    }

    /// Busy slot ids, for `fragments`.
    pub(super) fn busy_slots(&self) -> Vec<usize> {
        self.seqs.iter().map(|s| s.slot).collect()
    }

    /// Second tier: save a cache entry's state (its slot's cells, still
    /// intact) to host memory when it is long enough to be worth it.
    pub(super) fn spill(&mut self, e: prefix::Entry) {
        if !self.host.enabled() || e.tokens.len() < self.host.min_tokens {
            return;
        }
        // Only what the slot really holds (it always equals the entry).
        if self.rt.slot_len(e.slot) < e.tokens.len() {
            return;
        }
        if let Some(data) = self.rt.save_slot(e.slot) {
            self.host.insert(super::spill::Spilled {
                key: e.key,
                tokens: e.tokens,
                data,
                last_used: e.last_used,
            });
            self.stats.send_modify(|s| s.prefix_spills += 1);
        }
    }

    /// Load a host-tier entry into `slot` and keep its first `len` cells;
    /// the entry goes back into the tier. Returns the prompt tokens reused
    /// (0 when llama.cpp refused the state: the slot is then empty).
    pub(super) fn restore(
        &mut self,
        slot: usize,
        mut e: super::spill::Spilled,
        len: usize,
    ) -> usize {
        let t = std::time::Instant::now();
        // The restored cells must cover the prefix.
        let ok = self.rt.restore_slot(slot, &e.data) && self.rt.slot_len(slot) >= len;
        if ok {
            self.rt.truncate_slot(slot, len as u32);
        } else {
            self.rt.clear_slot(slot);
        }
        let ms = t.elapsed().as_secs_f64() * 1e3;
        e.last_used = self.next_key;
        self.host.insert(e);
        self.stats.send_modify(|s| {
            s.prefix_host_ms_total += ms;
            if ok {
                s.prefix_restores += 1;
                s.prefix_restored_tokens += len as u64;
            }
        });
        if ok {
            len
        } else {
            0
        }
    }

    /// Drop a cached entry's cells; its slot becomes free.
    pub(super) fn evict(&mut self, slot: usize) {
        if let Some(e) = self.cache.take(slot) {
            let t = std::time::Instant::now();
            self.spill(e);
            self.rt.clear_slot(slot);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            self.free_slots.push(slot);
            self.ledger.set_cached(self.cache.cells());
            self.stats.send_modify(|s| {
                s.prefix_evictions += 1;
                s.prefix_eviction_ms_total += ms;
            });
        }
    }

    /// An empty slot for a new sequence, free or only cached (that entry is
    /// evicted; never a slot pinned as a copy source). Busy slots stay
    /// contiguous first, then a free slot beats a cached one, then the
    /// lowest id.
    pub(super) fn take_slot(&mut self) -> Option<usize> {
        let busy = self.busy_slots();
        let (_, cached, slot) = self
            .free_slots
            .iter()
            .map(|&s| (fragments(&busy, s), false, s))
            .chain(
                self.cache
                    .slots()
                    .filter(|s| !self.pinned.contains(s))
                    .map(|s| (fragments(&busy, s), true, s)),
            )
            .min()?;
        if cached {
            self.evict(slot);
        }
        let i = self.free_slots.iter().position(|&s| s == slot)?;
        Some(self.free_slots.swap_remove(i))
    }
}

/// Whether running a sequence in `slot` adds a run of consecutive busy
/// slots.
pub(super) fn fragments(busy: &[usize], slot: usize) -> bool {
    !busy.is_empty()
        && !busy
            .iter()
            .any(|&b| b + 1 == slot || slot + 1 == b || b == slot)
}
