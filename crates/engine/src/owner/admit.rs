//! ② admit, on the owner: waiting requests into slots, in arrival order,
//! each with a KV reservation, and with the best reuse of computed state
//! the prefix cache (slots, then its host tier) can offer. The decision is
//! pure (`owner/plan/admit.rs`); this file looks up the offers and applies
//! it: pins, evictions, the reservation, takeovers, copies, restores, and
//! the new sequence. Owner-thread only.

use std::time::{Duration, Instant};

use crate::admission::kv::{self as admission, Permit};
use crate::deliver::stream::Event;
use crate::owner::kv::key::PrefixKey;
use crate::owner::kv::prefix::{Entry, Reuse};
use crate::owner::plan::adapter_sets::{canonical, key_for};
use crate::owner::plan::admit::{decide, Decision, Offer};
use crate::owner::preempt::Candidate;
use crate::owner::sequence::{SeqLimits, Sequence};
use crate::owner::slots::fragments;
use crate::owner::{Owner, Waiting};
use crate::request::{reuse_bound, GenerateRequest, MediaSpan};
use crate::runtime::backend::Backend;
use crate::runtime::{MemoryKind, TokenId};

impl<B: Backend> Owner<B> {
    /// Admit in rank order (arrival order unless a policy or a batch line
    /// says otherwise: `owner/preempt.rs`) while a slot is free and the
    /// ledger can reserve prompt + max_tokens; the first that must wait
    /// holds the rest back, unless it may preempt.
    pub(super) fn admit(&mut self) {
        self.check_pressure();
        // Under measured OS memory pressure, admit slowly (one request per
        // iteration, and only while fewer than half the slots are busy)
        // before the host swaps.
        let mut budget = if self.pressure {
            usize::from(self.seqs.len() * 2 < self.config.admit.max_seqs)
        } else {
            usize::MAX
        };
        self.kv.pinned.clear();
        // Each preemption frees a slot for one candidate; a few a pass.
        let mut preemptions = 4;
        while budget > 0 {
            let Some(c) = self.next_candidate() else {
                break;
            };
            budget -= 1;
            let admitted = match c {
                Candidate::Waiting(i) => self.admit_at(i),
                Candidate::Parked(i) => self.resume(i),
            };
            if admitted {
                continue;
            }
            // It must wait, unless it may take a worse-ranked sequence's
            // slot (`owner/preempt.rs`).
            if preemptions == 0 || !self.preempt_for(c) {
                break;
            }
            preemptions -= 1;
            budget += 1;
        }
        self.disk_trim();
    }

    fn check_pressure(&mut self) {
        if self.pressure_checked.elapsed() >= Duration::from_millis(500) {
            self.pressure_checked = Instant::now();
            let p = crate::admission::memory::under_pressure();
            if p != self.pressure {
                tracing::warn!(pressure = p, "host memory pressure changed");
                self.pressure = p;
                self.stats.send_modify(|s| s.memory_pressure = p);
            }
        }
    }

    /// Admit waiting request `i`; false when it must wait (and the rest of
    /// the queue behind it).
    fn admit_at(&mut self, i: usize) -> bool {
        let began = Instant::now();
        let Some(w) = self.queue.waiting.get(i) else {
            return false;
        };
        let r = &w.sub.req;
        // State is reused only under the same adapter set.
        let set = canonical(&r.adapters);
        let pkey = key_for(self.prefix_key, &set);
        let need = admission::cells_needed(self.state_model, r.prompt.len(), r.max_tokens);
        if self.kv.free_slots.is_empty() && self.kv.cache.len() == 0 {
            return false;
        }
        // Prompt scoring needs logits for every prompt token: no reuse.
        // Media under a window or recurrent state: no reuse either (a
        // cut at a span's start may lie where no checkpoint reaches).
        let eligible = self.kv.cache.enabled
            && !r.prompt_logprobs
            && (r.media.is_empty() || self.kv.memory.kind == MemoryKind::Attention);
        // A long prefix that an admitted sequence is still computing:
        // wait for it and copy it, rather than compute it twice.
        if eligible && self.sharing_pending(&r.prompt, &set) {
            return false;
        }
        // A newcomer that outranks everything running has its first step
        // alone (`owner/interrupt.rs`): a copy there stalls no stream that
        // was not waiting anyway, and pays for itself from ~10 shared
        // tokens (docs/BENCHMARKS.md [6/8]), so a short shared prefix (a
        // chat template's) is copied rather than computed.
        let copy_min = self.kv.cache.copy_min;
        if self.claims_urgency(&r.tenancy, Some(w.order)) {
            self.kv.cache.copy_min = copy_min.min(URGENT_COPY_MIN);
        }
        let mut offer = bound_offer(self.offer(pkey, &r.prompt, eligible), &r.media);
        self.kv.cache.copy_min = copy_min;
        if eligible && self.kv.disk.is_some() {
            // A longer prefix on disk is read into the host tier first.
            let offered = offer
                .host_len
                .max(offer.slots.as_ref().map_or(0, Reuse::len));
            let prompt = r.prompt.clone();
            if self.disk_promote(pkey, &prompt, offered) {
                let r = &self.queue.waiting[i].sub.req;
                offer = bound_offer(self.offer(pkey, &r.prompt, eligible), &r.media);
            }
        }
        let (share, min) = (self.kv.cache.share, self.kv.host.min_tokens);
        let mut d = decide(need, offer, eligible, share, min, self.state_model);
        // A takeover's entry leaves the cache; it and a copy source must
        // survive the evictions below.
        let taken = match d.reuse {
            Some(Reuse::Takeover { slot, .. }) => {
                self.kv.pinned.push(slot);
                self.kv.cache.take(slot)
            }
            Some(Reuse::Copy { src_slot, .. }) => {
                self.kv.pinned.push(src_slot);
                None
            }
            None => None,
        };
        let Some(mut permit) = self.reserve(&mut d) else {
            if let Some(e) = taken {
                self.kv.cache.insert(e);
            }
            return false;
        };
        let Some(w) = self.queue.waiting.remove(i) else {
            return false;
        };
        let req = &w.sub.req;
        let Some((slot, reused)) = self.place(&d, taken, &mut permit, pkey, req) else {
            // No slot after all (the only entries are pinned): the request
            // waits at the head of the queue.
            self.queue.waiting.insert(i, w);
            return false;
        };
        self.start(w, slot, reused, permit, eligible);
        if let Some(t) = self.seqs.last_mut().and_then(|s| s.trace.as_mut()) {
            t.line.admit_began = Some(began);
        }
        true
    }

    /// What the slots and the host tier offer this prompt.
    fn offer(&self, pkey: PrefixKey, prompt: &[TokenId], eligible: bool) -> Offer {
        let slots = if eligible {
            let runs = self.stream_runs();
            let free = !self.kv.free_slots.is_empty();
            let (memory, cells) = (&self.kv.memory, &self.kv.cells);
            self.kv.cache.lookup(
                pkey,
                prompt,
                cells,
                |s| fragments(&runs, s),
                free,
                |s, m, takeover| memory.reach(s, cells.len(s), m, takeover).len,
            )
        } else {
            None
        };
        let host_len = self.host_best(pkey, prompt).map_or(0, |(_, len)| len);
        Offer { slots, host_len }
    }

    /// The host tier's entry with the longest usable prefix of `prompt`
    /// (index, tokens), as far as the memory kind lets a saved state reach.
    fn host_best(&self, pkey: PrefixKey, prompt: &[TokenId]) -> Option<(usize, usize)> {
        let memory = &self.kv.memory;
        self.kv.host.best(pkey, prompt, |e, m| {
            memory.saved_reach(e.lo, e.tokens.len(), m)
        })
    }

    /// The reservation, evicting cached entries (least recently used
    /// first) until it fits; None when it cannot. (A takeover through a
    /// checkpoint the runtime refuses computes its prefix in the cells the
    /// entry held: beyond its reservation, as held.)
    pub(super) fn reserve(&mut self, d: &mut Decision) -> Option<Permit> {
        self.sync_ledger();
        loop {
            if let Some(p) = self.ledger.try_reserve(d.growth, d.adds as u64) {
                return Some(p);
            }
            if !self.evict_lru() {
                if d.restore && d.adds > 0 && !d.tight {
                    // The restore's cells and the whole growth cannot both
                    // fit even with the cache empty (one slot, a history
                    // near the context): reserve the exact need, the
                    // loaded cells as the reused prefix (a restore that
                    // then fails reserves its prefix again, beyond the
                    // ledger, as a refused takeover does).
                    d.tight = true;
                    d.growth = d.growth.saturating_sub(d.adds as u64);
                    continue;
                }
                if d.restore && d.adds > 0 {
                    // Not even that: compute the prompt instead of waiting
                    // for room that never comes.
                    d.restore = false;
                    d.tight = false;
                    d.growth += d.adds as u64;
                    d.adds = 0;
                    continue;
                }
                return None;
            }
        }
    }

    /// The slot the request runs in and the tokens it reuses there: a
    /// taken-over entry rewound, a copy, a restore from the host tier, or a
    /// fresh slot. None: no slot after all.
    fn place(
        &mut self,
        d: &Decision,
        taken: Option<Entry>,
        permit: &mut Permit,
        pkey: PrefixKey,
        req: &GenerateRequest,
    ) -> Option<(usize, usize)> {
        match (d.reuse.clone(), taken) {
            (Some(Reuse::Takeover { len, .. }), Some(e)) => {
                // The takeover destroys the entry after the shared prefix:
                // a long tail goes to the host tier first.
                let slot = e.slot;
                if self.kv.cells.len(slot) >= len + self.kv.host.min_tokens {
                    self.spill(e);
                }
                let reused = self.rewind(slot, len);
                // A checkpoint the runtime refused: the prefix is computed
                // after all, so reserve it.
                permit.unconsume((len - reused) as u64);
                Some((slot, reused))
            }
            (Some(Reuse::Copy { src_slot, len }), _) => {
                // The source (pinned above) is read at the next decode.
                let dst = self.take_slot()?;
                self.kv_copy(src_slot, dst, len);
                self.stats.send_modify(|s| s.prefix_copies += 1);
                Some((dst, len))
            }
            _ => self.place_fresh(d, permit, pkey, req),
        }
    }

    /// A fresh slot, restored from the host tier where decided. (Looked up
    /// again: evictions may have spilled entries into the tier and moved
    /// its indices; taken out while a slot is found, since finding one may
    /// evict, and so spill, other entries.)
    fn place_fresh(
        &mut self,
        d: &Decision,
        permit: &mut Permit,
        pkey: PrefixKey,
        req: &GenerateRequest,
    ) -> Option<(usize, usize)> {
        let saved = if d.restore {
            self.host_best(pkey, &req.prompt)
                .map(|(i, len)| (i, reuse_bound(len, &req.media)))
                .filter(|&(_, len)| len > d.offered_len + self.kv.host.min_tokens)
                .and_then(|(i, len)| Some((self.kv.host.take(i)?, len)))
        } else {
            None
        };
        let Some(slot) = self.take_slot() else {
            if let Some((e, _)) = saved {
                let out = self.kv.host.insert(e);
                self.send_to_disk(out);
            }
            return None;
        };
        let reused = match saved {
            Some((e, len)) => self.restore(slot, e, len),
            None => 0,
        };
        if d.tight {
            // Reserved as if `adds` cells came back: settle to what did.
            let planned = d.adds as u64;
            match (reused as u64).cmp(&planned) {
                std::cmp::Ordering::Less => permit.unconsume(planned - reused as u64),
                std::cmp::Ordering::Greater => permit.consume(reused as u64 - planned),
                std::cmp::Ordering::Equal => {}
            }
        } else {
            permit.consume(reused as u64);
        }
        Some((slot, reused))
    }

    /// The admitted request becomes a sequence: counters, its `Admitted`
    /// event, speculation and the sampling path.
    fn start(&mut self, w: Waiting, slot: usize, reused: usize, permit: Permit, eligible: bool) {
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
            max_lag_tokens: self.config.deliver.max_lag_tokens,
        };
        let (spec_mode, spec_max) = self.spec_for(w.sub.req.speculative);
        let mut seq = Sequence::new(self.next_key, slot, w.sub, limits, permit, reused, w.order);
        seq.arrival_step = w.step;
        seq.urgent = self.claims_urgency(&seq.tenancy, None);
        seq.speculate(spec_mode, spec_max, &self.spec.priors);
        // Device sampling where the request's sampler is plain greedy;
        // the slot keeps its path until a request needs the other one.
        let want = self.config.sample.device_sampling && seq.device_eligible();
        let mode = want.then(|| seq.banned(&self.vocab));
        seq.device = self.rt.set_device_greedy(slot, mode);
        tracing::debug!(request_id = %seq.id, slot, prompt = seq.prompt.len(), reused = seq.reused, "admitted");
        self.seqs.push(seq);
    }
}

/// The shortest shared prefix copied for a newcomer whose first step runs
/// alone (the break-even is ~10 tokens).
const URGENT_COPY_MIN: usize = 16;

/// An offer cut back so that no reuse ends inside a media span.
fn bound_offer(mut o: Offer, media: &[MediaSpan]) -> Offer {
    if media.is_empty() {
        return o;
    }
    if let Some(Reuse::Takeover { len, .. } | Reuse::Copy { len, .. }) = o.slots.as_mut() {
        *len = reuse_bound(*len, media);
        if *len == 0 {
            o.slots = None;
        }
    }
    o.host_len = reuse_bound(o.host_len, media);
    o
}
