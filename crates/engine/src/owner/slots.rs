//! Slot placement: which slot a new sequence gets, the prefix cache's
//! evictions, and every KV edit the owner makes outside a step (each one
//! mirrored in the cell map, `owner/kv/cells.rs`). Owner-thread only, like the
//! rest of `core`.
//!
//! With per-slot KV streams llama.cpp makes one pass over the weights per
//! run of consecutive busy slot ids, every step (see `Owner::step`), so a
//! new sequence goes next to the busy ones whenever it can.

use crate::owner::kv::prefix;
use crate::owner::Owner;
use crate::runtime::backend::Backend;
use crate::runtime::TokenId;

impl<B: Backend> Owner<B> {
    /// `slot` keeps its first `len` cells.
    /// Keep a slot's first `len` cells. A memory that cannot be cut there
    /// (recurrent state) is cleared instead; returns the cells kept.
    pub(super) fn kv_truncate(&mut self, slot: usize, len: usize) -> usize {
        if len >= self.kv.cells.len(slot) {
            return self.kv.cells.len(slot);
        }
        if len == 0 || !self.rt.truncate_slot(slot, len as u32) {
            self.kv_clear(slot);
            return 0;
        }
        self.kv.cells.truncate(slot, len);
        self.kv.memory.truncate(slot, len);
        self.sync_lo(slot);
        len
    }

    pub(super) fn kv_clear(&mut self, slot: usize) {
        self.rt.clear_slot(slot);
        self.kv.cells.clear(slot);
        self.kv.memory.clear(slot);
    }

    /// The empty slot `dst` gets the first `len` cells of `src` (llama.cpp
    /// shares them in a unified pool, copies them between per-slot streams).
    /// Never for a memory that cannot be rewound (the cache makes no such
    /// copies).
    pub(super) fn kv_copy(&mut self, src: usize, dst: usize, len: usize) {
        debug_assert!(self.kv.memory.rewinds());
        self.rt.copy_slot(src, dst);
        self.rt.truncate_slot(dst, len as u32);
        self.kv.cells.copy(src, dst, len, self.next_key);
        self.sync_lo(dst);
    }

    /// Read back the lowest position a slot's layers still hold (a
    /// sliding-window cache overwrites old cells as the slot grows).
    /// Every slot's window, in a shared (unified) pool: another slot's
    /// step or restore may overwrite an idle slot's old window cells.
    pub(super) fn sync_shared_lo(&mut self) {
        if self.kv.cache.share {
            for slot in 0..self.config.admit.max_seqs {
                self.sync_lo(slot);
            }
        }
    }

    pub(super) fn sync_lo(&mut self, slot: usize) {
        if matches!(
            self.kv.memory.kind,
            crate::runtime::MemoryKind::Window { .. }
        ) {
            let min = self.rt.slot_pos_min(slot);
            self.kv.memory.set_lo(slot, min, self.kv.cells.len(slot));
        }
    }

    /// Make `slot` (a cache entry holding more cells) hold its first `len`
    /// cells, reusable: cut directly, or rewound to the checkpoint it took
    /// at `len`. Returns the cells a request can start from (0 when the
    /// runtime refused the checkpoint: the slot is then empty).
    pub(super) fn rewind(&mut self, slot: usize, len: usize) -> usize {
        let have = self.kv.cells.len(slot);
        if self.kv.memory.direct(slot, have, len) >= len {
            return self.kv_truncate(slot, len);
        }
        let tick = self.next_key;
        let restored = match self.kv.memory.checkpoint(slot, len, tick) {
            Some(data) => self.rt.restore_partial(slot, data, len as u32),
            None => false,
        };
        if !restored {
            self.kv_clear(slot);
            return 0;
        }
        self.kv.cells.truncate(slot, len);
        self.kv.memory.truncate(slot, len);
        self.sync_lo(slot);
        self.sync_shared_lo();
        self.stats.send_modify(|s| s.checkpoint_restores += 1);
        len
    }

    /// After a step: the slots it touched, as the runtime now holds them
    /// (the window's lowest position), and a checkpoint for each prompt it
    /// completed.
    pub(super) fn mirror_memory(&mut self, plan: &crate::owner::plan::scheduler::Plan) {
        if self.kv.memory.kind == crate::runtime::MemoryKind::Attention {
            return;
        }
        // (slot, a checkpoint is due: one token before the prompt's end, or
        // a chunk's end an interval past the slot's last checkpoint)
        let every = match self.kv.memory.kind {
            crate::runtime::MemoryKind::Recurrent { .. } => self.config.admit.checkpoint_interval,
            _ => 0,
        };
        let mut touched: Vec<(usize, bool)> = Vec::new();
        for s in &self.seqs {
            if plan.decode.contains(&s.key) {
                touched.push((s.slot, false));
            } else if let Some(c) = plan.chunks.iter().find(|c| c.key == s.key) {
                let end = c.start + c.len;
                let near_end = end + 1 == s.prompt.len();
                let interval = every > 0 && end < s.prompt.len() && end.is_multiple_of(every);
                touched.push((s.slot, near_end || interval));
            }
        }
        for (slot, due) in touched {
            self.sync_lo(slot);
            if due && self.kv.cache.enabled {
                self.take_checkpoint(slot);
            }
        }
        self.sync_shared_lo();
        let cells = &self.kv.cells;
        let held = self.kv.memory.window_cells(|s| cells.len(s));
        let recurrent = match self.kv.memory.kind {
            // (A pure recurrent state is the ledger's own unit.)
            crate::runtime::MemoryKind::Recurrent { hybrid: true } => {
                (0..self.config.admit.max_seqs)
                    .filter(|&s| cells.len(s) > 0)
                    .count() as u64
            }
            _ => 0,
        };
        self.stats.send_modify(|s| {
            s.window_cells_held = held;
            s.recurrent_slots_held = recurrent;
        });
    }

    /// With checkpoints, prompt chunks end where a checkpoint is taken:
    /// one token short of a long prompt's end (where a repeat of the
    /// prompt, which recomputes at least its last token, can start; the
    /// last token rides in the next step) and, for a recurrent or hybrid
    /// model, at every multiple of `--checkpoint-interval` (a later prompt
    /// sharing only the start, e.g. a system prompt, restarts there).
    pub(super) fn stop_before_last(&mut self, plan: &mut crate::owner::plan::scheduler::Plan) {
        if self.kv.memory.budget == 0 || !self.kv.cache.enabled {
            return;
        }
        let min = self.config.admit.checkpoint_min_tokens.max(2);
        let every = match self.kv.memory.kind {
            crate::runtime::MemoryKind::Recurrent { .. } => self.config.admit.checkpoint_interval,
            _ => 0,
        };
        for c in &mut plan.chunks {
            let Some(s) = self.seqs.iter().find(|s| s.key == c.key) else {
                continue;
            };
            if !s.prompt_logprobs_off() {
                continue;
            }
            let p = s.prompt.len();
            // (A 65-token chunk, `EFFICIENT_CHUNK`, becomes 64: one slower
            // step per prompt, for a checkpoint that saves recomputing it.)
            if p > min && c.completes(p) && c.len > 1 {
                c.len -= 1;
            }
            if let Some(k) = c.start.checked_div(every) {
                let boundary = (k + 1) * every;
                if boundary < c.start + c.len && boundary >= min {
                    c.len = boundary - c.start;
                }
            }
        }
    }

    /// A prompt but its last token was just computed in `slot`: keep a checkpoint of the state
    /// that cannot be rewound, for a later request that shares the prompt
    /// but not what this one generates after it.
    pub(super) fn take_checkpoint(&mut self, slot: usize) {
        let len = self.kv.cells.len(slot);
        if len < self.config.admit.checkpoint_min_tokens || !self.kv.memory.wants(0) {
            return;
        }
        if let Some(data) = self
            .rt
            .save_partial(slot)
            .filter(|d| self.kv.memory.wants(d.len()))
        {
            self.kv.memory.add(slot, len, data, self.next_key);
            let (n, b) = (self.kv.memory.count(), self.kv.memory.bytes());
            self.stats.send_modify(|s| {
                s.checkpoints_taken += 1;
                s.checkpoints = n;
                s.checkpoint_bytes = b;
            });
        }
    }

    /// The ledger's `held` and `cached`, from the cell map.
    pub(super) fn sync_ledger(&self) {
        let busy = self.busy_slots();
        if self.state_model == crate::admission::kv::StateModel::PerSequence {
            // One recurrent state per slot holding one, whatever its length.
            let holding = (0..self.config.admit.max_seqs).filter(|&s| self.kv.cells.len(s) > 0);
            let (held, cached) = holding.fold((0, 0), |(h, c), s| {
                (h + 1, c + u64::from(!busy.contains(&s)))
            });
            self.ledger.set_held(held, cached);
            return;
        }
        let cached = self.kv.cells.idle_cells(|s| busy.contains(&s));
        self.ledger.set_held(self.kv.cells.cells(), cached);
    }

    /// Make room: cut the least recently used leaf of the cell map that no
    /// running sequence (or pinned slot) reads. Slots cut to nothing are
    /// evicted (their entry may go to the host tier); the others keep the
    /// shared prefix before the leaf. False when nothing can go.
    pub(super) fn evict_lru(&mut self) -> bool {
        let busy = self.busy_slots();
        let pinned = &self.kv.pinned;
        let Some((cut, slots)) = self
            .kv
            .cells
            .lru_leaf(|s| busy.contains(&s) || pinned.contains(&s))
        else {
            return false;
        };
        let mut freed = false;
        for slot in slots {
            // A cut that leaves nothing a request could start from (a
            // recurrent state cut short, a window behind its cells, no
            // checkpoint below) evicts the entry whole.
            let len = self.kv.cells.len(slot);
            let gone =
                !self.kv.memory.rewinds() || self.kv.memory.reach(slot, len, cut, true).len == 0;
            if cut == 0 || gone {
                freed |= self.evict(slot);
            } else if self.kv.cache.contains_slot(slot) {
                let t = std::time::Instant::now();
                self.kv_truncate(slot, cut);
                let ms = t.elapsed().as_secs_f64() * 1e3;
                self.stats.send_modify(|s| {
                    s.prefix_evictions += 1;
                    s.prefix_eviction_ms_total += ms;
                });
                freed = true;
            }
        }
        self.sync_ledger();
        freed
    }

    /// Every slot's cells in the cell map equal what its owner says they
    /// are (tests: checked after every iteration).
    #[cfg(test)]
    pub(super) fn check_cells(&self) {
        self.kv.cells.check();
        for s in &self.seqs {
            assert_eq!(
                self.kv.cells.tokens(s.slot),
                s.kv_tokens(),
                "slot {}",
                s.slot
            );
        }
        for e in self.kv.cache.entries() {
            assert!(
                self.kv.cells.len(e.slot) > 0,
                "entry {} holds no cells",
                e.slot
            );
        }
        for &f in &self.kv.free_slots {
            assert_eq!(self.kv.cells.len(f), 0, "free slot {f}");
        }
        // Every slot's window, as the runtime holds it.
        if matches!(
            self.kv.memory.kind,
            crate::runtime::MemoryKind::Window { .. }
        ) {
            for slot in 0..self.config.admit.max_seqs {
                let len = self.kv.cells.len(slot);
                assert_eq!(self.rt.slot_len(slot), len, "slot {slot} length");
                if len > 0 {
                    let lo = self.rt.slot_pos_min(slot).unwrap_or(len);
                    assert_eq!(
                        self.kv.memory.lo(slot),
                        lo,
                        "slot {slot}: lowest position held"
                    );
                }
            }
        }
    }

    /// Some admitted sequence is still prefilling a prefix of `prompt` of at
    /// least `--prefix-copy-min` tokens.
    pub(super) fn sharing_pending(&self, prompt: &[TokenId], set: &[(usize, f32)]) -> bool {
        if !self.kv.cache.copies {
            return false;
        }
        let cap = prompt.len().saturating_sub(1);
        self.seqs.iter().filter(|s| s.adapters == set).any(|s| {
            let shared = crate::owner::kv::key::common_prefix(&s.prompt, prompt).min(cap);
            shared >= self.kv.cache.copy_min && s.computed_prompt().len() < shared
        })
    }

    /// Busy slot ids.
    pub(super) fn busy_slots(&self) -> Vec<usize> {
        self.seqs.iter().map(|s| s.slot).collect()
    }

    /// The busy slots whose KV streams `fragments` keeps in runs: none in a
    /// unified pool (one stream for every slot).
    pub(super) fn stream_runs(&self) -> Vec<usize> {
        if self.kv.cache.share {
            Vec::new()
        } else {
            self.busy_slots()
        }
    }

    /// Second tier: save a cache entry's state (its slot's cells, still
    /// intact) to host memory when it is long enough to be worth it.
    pub(super) fn spill(&mut self, e: prefix::Entry) {
        let len = self.kv.cells.len(e.slot);
        if (!self.kv.host.enabled() && self.kv.disk.is_none()) || len < self.kv.host.min_tokens {
            return;
        }
        // Only what the slot really holds (it always equals the cell map).
        if self.rt.slot_len(e.slot) < len {
            return;
        }
        // With no host tier, an entry the disk holds already is not copied.
        if !self.kv.host.enabled()
            && self.kv.disk.as_ref().is_some_and(|d| {
                let tokens = self.kv.cells.tokens(e.slot);
                !d.wants(e.key, &tokens, 0)
            })
        {
            return;
        }
        if let Some(data) = self.rt.save_slot(e.slot) {
            let out = self.kv.host.insert(crate::owner::kv::spill::Spilled {
                key: e.key,
                tokens: self.kv.cells.tokens(e.slot),
                data,
                last_used: e.last_used,
                lo: self.kv.memory.lo(e.slot),
                pin: None,
            });
            self.send_to_disk(out);
            self.stats.send_modify(|s| s.prefix_spills += 1);
        }
    }

    /// Load a host-tier entry into `slot` and keep its first `len` cells;
    /// the entry goes back into the tier. Returns the prompt tokens reused
    /// (0 when llama.cpp refused the state: the slot is then empty).
    pub(super) fn restore(
        &mut self,
        slot: usize,
        mut e: crate::owner::kv::spill::Spilled,
        len: usize,
    ) -> usize {
        let t = std::time::Instant::now();
        // The restored cells must cover the prefix.
        let mut ok = self.rt.restore_slot(slot, &e.data) && self.rt.slot_len(slot) >= len;
        if ok {
            // What the runtime really restored must reach `len`.
            let have = self.rt.slot_len(slot);
            let lo = self.rt.slot_pos_min(slot).unwrap_or(have);
            ok = self.kv.memory.saved_reach(lo, have, len) >= len;
        }
        if ok {
            // `best` picked `len` where the saved state reaches (a window's
            // or a recurrent state's cut is then valid, or none is needed).
            self.rt.truncate_slot(slot, len as u32);
            self.kv
                .cells
                .extend(slot, e.key, &e.tokens[..len], self.next_key);
            self.sync_lo(slot);
            self.sync_shared_lo();
        } else {
            self.kv_clear(slot);
        }
        let ms = t.elapsed().as_secs_f64() * 1e3;
        e.last_used = self.next_key;
        if let Some(p) = e.pin.as_mut() {
            // A use extends a pin's hold.
            p.until = p.until.max(std::time::Instant::now() + p.ttl);
        }
        let out = self.kv.host.insert(e);
        self.send_to_disk(out);
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

    /// Drop a cached entry's cells (those no other slot reads); its slot
    /// becomes free. False when `slot` held no entry.
    pub(super) fn evict(&mut self, slot: usize) -> bool {
        let Some(e) = self.kv.cache.take(slot) else {
            return false;
        };
        let t = std::time::Instant::now();
        self.spill(e);
        self.kv_clear(slot);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        self.kv.free_slots.push(slot);
        self.stats.send_modify(|s| {
            s.prefix_evictions += 1;
            s.prefix_eviction_ms_total += ms;
        });
        true
    }

    /// An empty slot for a new sequence, free or only cached (that entry is
    /// evicted; never a pinned slot). Busy slots stay contiguous first, then
    /// a free slot beats a cached one, then the entry whose eviction frees
    /// the fewest cells (in a unified pool, one whose cells others share),
    /// then the lowest id.
    pub(super) fn take_slot(&mut self) -> Option<usize> {
        let busy = self.stream_runs();
        let (_, cached, _, slot) = self
            .kv
            .free_slots
            .iter()
            .map(|&s| (fragments(&busy, s), false, 0, s))
            .chain(
                self.kv
                    .cache
                    .slots()
                    .filter(|s| !self.kv.pinned.contains(s))
                    .map(|s| (fragments(&busy, s), true, self.kv.cells.private_cells(s), s)),
            )
            .min()?;
        if cached {
            self.evict(slot);
        }
        let i = self.kv.free_slots.iter().position(|&s| s == slot)?;
        Some(self.kv.free_slots.swap_remove(i))
    }
}

impl<B: Backend> Owner<B> {
    /// Passes over the weights this step's batch costs the runtime
    /// (`scheduler::passes`; a unified pool splits by `n_ubatch` alone).
    pub(super) fn passes(&self, plan: &crate::owner::plan::scheduler::Plan) -> usize {
        let mut rows: Vec<(usize, usize)> = self
            .seqs
            .iter()
            .filter_map(|s| {
                let n = if plan.decode.contains(&s.key) {
                    1 + s.drafts.len()
                } else {
                    plan.chunks.iter().find(|c| c.key == s.key)?.len
                };
                Some((s.slot, n))
            })
            .collect();
        rows.sort_unstable();
        let n_ubatch = (self.config.model.n_ubatch as usize)
            .min(self.n_batch)
            .max(1);
        if self.kv.cache.share {
            rows.iter().map(|r| r.1).sum::<usize>().div_ceil(n_ubatch)
        } else {
            crate::owner::plan::scheduler::passes(&rows, n_ubatch)
        }
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
