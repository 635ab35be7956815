//! Admission: waiting requests into slots, in arrival order, each with a
//! KV reservation, and with the best reuse of computed state the prefix
//! cache (slots, then its host tier) can offer. Owner-thread only.

use std::time::{Duration, Instant};

use crate::admission::kv as admission;
use crate::deliver::stream::Event;
use crate::owner::kv::prefix::Reuse;
use crate::owner::sequence::{SeqLimits, Sequence};
use crate::owner::slots::fragments;
use crate::owner::Owner;
use crate::runtime::backend::Backend;

impl<B: Backend> Owner<B> {
    /// Admit from the head of the queue (arrival order) while a slot is free
    /// and the ledger can reserve prompt + max_tokens.
    pub(super) fn admit(&mut self) {
        // Under measured OS memory pressure, admit slowly (one request per
        // iteration, and only while fewer than half the slots are busy)
        // before the host swaps.
        if self.pressure_checked.elapsed() >= Duration::from_millis(500) {
            self.pressure_checked = Instant::now();
            let p = crate::admission::memory::under_pressure();
            if p != self.pressure {
                tracing::warn!(pressure = p, "host memory pressure changed");
                self.pressure = p;
                self.stats.send_modify(|s| s.memory_pressure = p);
            }
        }
        let mut budget = if self.pressure {
            usize::from(self.seqs.len() * 2 < self.config.max_seqs)
        } else {
            usize::MAX
        };
        self.pinned.clear();
        while let Some(w) = self.waiting.front() {
            if budget == 0 {
                break;
            }
            budget -= 1;
            let r = &w.sub.req;
            // State is reused only under the same adapter set.
            let set = crate::owner::plan::adapter_sets::canonical(&r.adapters);
            let pkey = crate::owner::plan::adapter_sets::key_for(self.prefix_key, &set);
            let need = admission::cells_needed(self.state_model, r.prompt.len(), r.max_tokens);
            if self.free_slots.is_empty() && self.cache.len() == 0 {
                break;
            }
            // Prompt scoring needs logits for every prompt token: no reuse.
            let eligible = self.cache.enabled && !r.prompt_logprobs;
            // A long prefix that an admitted sequence is still computing:
            // wait for it and copy it, rather than compute it twice.
            if eligible && self.sharing_pending(&r.prompt, &set) {
                break;
            }
            let reuse = if eligible {
                let runs = self.stream_runs();
                let free = !self.free_slots.is_empty();
                let (memory, cells) = (&self.memory, &self.cells);
                self.cache.lookup(
                    pkey,
                    &r.prompt,
                    cells,
                    |s| fragments(&runs, s),
                    free,
                    |s, m, takeover| memory.reach(s, cells.len(s), m, takeover).len,
                )
            } else {
                None
            };
            // The host tier, when it holds a clearly longer prefix than the
            // slots do: restore it into a fresh slot instead.
            let reuse_len = match &reuse {
                Some(Reuse::Takeover { len, .. } | Reuse::Copy { len, .. }) => *len,
                None => 0,
            };
            let host_len = self
                .host
                .best(pkey, &r.prompt, |e, m| {
                    self.memory.saved_reach(e.lo, e.tokens.len(), m)
                })
                .map_or(0, |(_, len)| len);
            let mut restore = eligible && host_len > reuse_len + self.host.min_tokens;
            let reuse = if restore { None } else { reuse };
            // The reservation is the growth beyond the reused cells; cells a
            // copy duplicates or a restore loads are held at once. A restore
            // may fail or find its entry gone (evictions below spill into
            // the tier, which drops its own LRU entries): it reserves the
            // whole growth and gives back what it really reused. (A takeover
            // through a checkpoint the runtime refuses computes its prefix
            // in the cells the entry held: beyond its reservation, as held.)
            let (reserved_reuse, mut adds) = match &reuse {
                Some(Reuse::Takeover { len, .. }) => (*len, 0),
                Some(Reuse::Copy { len, .. }) if self.cache.share => (*len, 0),
                Some(Reuse::Copy { len, .. }) => (*len, *len),
                // (A recurrent state is the one unit the growth reserves.)
                None if restore => (0, admission::restore_adds(self.state_model, host_len)),
                None => (0, 0),
            };
            let growth = need.saturating_sub(reserved_reuse as u64);
            // A takeover's entry leaves the cache; it and a copy source must
            // survive the evictions below.
            let taken = match reuse {
                Some(Reuse::Takeover { slot, .. }) => {
                    self.pinned.push(slot);
                    self.cache.take(slot)
                }
                Some(Reuse::Copy { src_slot, .. }) => {
                    self.pinned.push(src_slot);
                    None
                }
                None => None,
            };
            self.sync_ledger();
            let permit = loop {
                if let Some(p) = self.ledger.try_reserve(growth, adds as u64) {
                    break Some(p);
                }
                if !self.evict_lru() {
                    if restore && adds > 0 {
                        // The restore's cells and the whole growth cannot
                        // both fit even with the cache empty (one slot, a
                        // long prompt): compute the prompt instead of
                        // waiting for room that never comes.
                        restore = false;
                        adds = 0;
                        continue;
                    }
                    break None;
                }
            };
            let Some(mut permit) = permit else {
                if let Some(e) = taken {
                    self.cache.insert(e);
                }
                break;
            };
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            let (slot, reused) = match (reuse, taken) {
                (Some(Reuse::Takeover { len, .. }), Some(e)) => {
                    // The takeover destroys the entry after the shared
                    // prefix: a long tail goes to the host tier first.
                    let slot = e.slot;
                    if self.cells.len(slot) >= len + self.host.min_tokens {
                        self.spill(e);
                    }
                    let reused = self.rewind(slot, len);
                    // A checkpoint the runtime refused: the prefix is
                    // computed after all, so reserve it.
                    permit.unconsume((len - reused) as u64);
                    (slot, reused)
                }
                (Some(Reuse::Copy { src_slot, len }), _) => {
                    // The source (pinned above) is read at the next decode.
                    let Some(dst) = self.take_slot() else {
                        // No slot after all (the only entries are pinned):
                        // the request waits at the head of the queue.
                        self.waiting.push_front(w);
                        break;
                    };
                    self.kv_copy(src_slot, dst, len);
                    self.stats.send_modify(|s| s.prefix_copies += 1);
                    (dst, len)
                }
                _ => {
                    // Out of the tier while a slot is found (finding one may
                    // evict, and so spill, other entries).
                    // (Looked up again: evictions above may have spilled
                    // entries into the tier and moved its indices.)
                    let saved = if restore {
                        self.host
                            .best(pkey, &w.sub.req.prompt, |e, m| {
                                self.memory.saved_reach(e.lo, e.tokens.len(), m)
                            })
                            .filter(|&(_, len)| len > reuse_len + self.host.min_tokens)
                            .and_then(|(i, len)| Some((self.host.take(i)?, len)))
                    } else {
                        None
                    };
                    let Some(slot) = self.take_slot() else {
                        if let Some((e, _)) = saved {
                            self.host.insert(e);
                        }
                        self.waiting.push_front(w);
                        break;
                    };
                    match saved {
                        Some((e, len)) => {
                            let reused = self.restore(slot, e, len);
                            permit.consume(reused as u64);
                            (slot, reused)
                        }
                        None => (slot, 0),
                    }
                }
            };
            self.dequeue();
            if eligible {
                let per_token = self.cost.prompt_token_ms().unwrap_or(0.0);
                self.stats.send_modify(|s| {
                    s.prefix_lookups += 1;
                    if reused > 0 {
                        s.prefix_hits += 1;
                        s.prefix_reused_tokens += reused as u64;
                        s.prefix_saved_ms_estimate += reused as f64 * per_token;
                    }
                });
            }
            self.next_key += 1;
            let waited = w.enqueued.elapsed().as_secs_f64() * 1e3;
            self.stats.send_modify(|s| s.queue_wait_ms.observe(waited));
            let _ = w.sub.outbox.try_send(Event::Admitted);
            let limits = SeqLimits {
                ctx_limit: self.ctx_limit,
                max_lag_tokens: self.config.max_lag_tokens,
            };
            let (spec_mode, spec_max) = self.spec_for(w.sub.req.speculative);
            let mut seq = Sequence::new(self.next_key, slot, w.sub, limits, permit, reused);
            seq.speculate(spec_mode, spec_max, &self.spec_priors);
            // Device sampling where the request's sampler is plain greedy;
            // the slot keeps its path until a request needs the other one.
            let want = self.config.device_sampling && seq.device_eligible();
            let mode = want.then(|| seq.banned(&self.vocab));
            seq.device = self.rt.set_device_greedy(slot, mode);
            tracing::debug!(request_id = %seq.id, slot, prompt = seq.prompt.len(), reused = seq.reused, "admitted");
            self.seqs.push(seq);
        }
    }
}
