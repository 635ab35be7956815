//! ② admit — who goes first and preemption that loses nothing. The ranks
//! (`owner/plan/tenancy.rs`, pure) choose which waiting request or parked
//! sequence admission tries next and the order a step serves sequences in;
//! when the best-ranked one must wait, it may take the slot of a
//! worse-ranked running sequence (a batch line, a worse priority, a tenant
//! above its fair share). The victim is *parked*: its slot's state saved to
//! host memory in the host tier's budget (cache entries make room), its
//! slot and reservation released; it resumes later by restoring that state
//! into a free slot, with nothing recomputed. Only when the host tier
//! cannot hold the state are its cells recomputed on resume (prompt chunks,
//! then its generated tokens, under the step budget), its sampled token
//! kept. Its client sees a pause, never an error. Owner-thread only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::admission::kv::restore_adds;
use crate::deliver::stats::LiveRequest;
use crate::deliver::stream::GenerationError;
use crate::owner::plan::adapter_sets::key_for;
use crate::owner::plan::scheduler::{Plan, SeqView};
use crate::owner::plan::tenancy::{self, Rank, Running};
use crate::owner::sequence::{Outcome, Sequence};
use crate::owner::spec::speculate::SpecMode;
use crate::owner::Owner;
use crate::request::Tenancy;
use crate::runtime::backend::Backend;

/// A sequence moved off its slot.
pub(crate) struct Parked {
    pub(super) seq: Sequence,
    /// The slot's saved state (None: its cells are recomputed).
    data: Option<Vec<u8>>,
    /// The reservation it gave back (taken again on resume).
    growth: u64,
    since: Instant,
}

impl Parked {
    pub(super) fn live(&self) -> LiveRequest {
        LiveRequest {
            state: "preempted",
            ..self.seq.live()
        }
    }

    fn bytes(&self) -> u64 {
        self.data.as_ref().map_or(0, |d| d.len() as u64)
    }
}

/// What admission tries next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Candidate {
    Waiting(usize),
    Parked(usize),
}

impl<B: Backend> Owner<B> {
    /// Running sequences per tenant.
    fn held(&self) -> HashMap<Arc<str>, usize> {
        let mut h: HashMap<Arc<str>, usize> = HashMap::new();
        for s in &self.seqs {
            *h.entry(s.tenancy.tenant.clone()).or_default() += 1;
        }
        h
    }

    /// Every request with work (waiting, parked, running) by tenancy.
    fn with_work(&self) -> impl Iterator<Item = &Tenancy> {
        let w = self.queue.waiting.iter().map(|w| &w.sub.req.tenancy);
        let p = self.queue.parked.iter().map(|p| &p.seq.tenancy);
        w.chain(p).chain(self.seqs.iter().map(|s| &s.tenancy))
    }

    /// Tenants with work and their weights (the first request's).
    fn active(&self) -> Vec<(Arc<str>, f64)> {
        let mut out: Vec<(Arc<str>, f64)> = Vec::new();
        for t in self.with_work() {
            if !out.iter().any(|a| a.0 == t.tenant) {
                out.push((t.tenant.clone(), t.weight.max(f64::MIN_POSITIVE)));
            }
        }
        out
    }

    /// A request of `t` arrived: a tenant with no work before has its
    /// counter lifted to the least-served active tenant's.
    pub(super) fn activate(&mut self, t: &Tenancy) {
        if !self.policy.fair_share || self.with_work().any(|x| x.tenant == t.tenant) {
            return;
        }
        let active = self.active();
        self.tenants
            .activate(&t.tenant, active.iter().map(|a| &*a.0));
    }

    fn rank(&self, t: &Tenancy, order: u64, held: &HashMap<Arc<str>, usize>) -> Rank {
        let h = held.get(&t.tenant).copied().unwrap_or(0);
        tenancy::rank(&self.policy, t, order, &self.tenants, h)
    }

    /// The request admission tries next: the head of the queue in plain
    /// arrival order, else the best-ranked waiting or parked one.
    pub(super) fn next_candidate(&self) -> Option<Candidate> {
        let plain = !self.policy.ranked()
            && self.queue.parked.is_empty()
            && !self
                .queue
                .waiting
                .iter()
                .any(|w| w.sub.req.tenancy.background);
        if plain {
            return (!self.queue.waiting.is_empty()).then_some(Candidate::Waiting(0));
        }
        let held = self.held();
        let waiting = self.queue.waiting.iter().enumerate().map(|(i, w)| {
            let r = self.rank(&w.sub.req.tenancy, w.order, &held);
            (Candidate::Waiting(i), r)
        });
        let parked = self.queue.parked.iter().enumerate().map(|(i, p)| {
            let r = self.rank(&p.seq.tenancy, p.seq.order, &held);
            (Candidate::Parked(i), r)
        });
        waiting
            .chain(parked)
            .min_by(|a, b| a.1.cmp(&b.1))
            .map(|c| c.0)
    }

    /// The candidate must wait: park the sequence it may preempt, if any.
    pub(super) fn preempt_for(&mut self, c: Candidate) -> bool {
        if !self.policy.preempt {
            return false;
        }
        let held = self.held();
        let (t, order) = match c {
            Candidate::Waiting(i) => {
                let w = &self.queue.waiting[i];
                (w.sub.req.tenancy.clone(), w.order)
            }
            Candidate::Parked(i) => {
                let p = &self.queue.parked[i].seq;
                (p.tenancy.clone(), p.order)
            }
        };
        let cr = self.rank(&t, order, &held);
        let running: Vec<Running<'_>> = self
            .seqs
            .iter()
            .map(|s| Running {
                key: s.key,
                tenancy: &s.tenancy,
                rank: self.rank(&s.tenancy, s.order, &held),
                movable: self.movable(s),
            })
            .collect();
        let active = self.active();
        let active: Vec<(&str, f64)> = active.iter().map(|a| (&*a.0, a.1)).collect();
        let slots = self.config.admit.max_seqs;
        let Some(key) = tenancy::victim(&self.policy, (&t, &cr), &running, &active, slots) else {
            return false;
        };
        self.park(key);
        true
    }

    /// A sequence that can leave its slot now: no draft model's state
    /// beside it, not a copy source this pass, no prompt scoring (its
    /// scores would be computed twice if recomputed).
    fn movable(&self, s: &Sequence) -> bool {
        s.spec_mode() != Some(SpecMode::Draft)
            && !self.kv.pinned.contains(&s.slot)
            && s.prompt_logprobs_off()
            && s.outcome.is_none()
    }

    /// Move a running sequence off its slot: save the slot's state to the
    /// host tier (or, with no room, mark its cells for recompute), release
    /// the slot and the reservation.
    fn park(&mut self, key: u64) {
        let Some(i) = self.seqs.iter().position(|s| s.key == key) else {
            return;
        };
        let t = Instant::now();
        let slot = self.seqs[i].slot;
        let cells = self.seqs[i].kv_len();
        let mut data = (cells > 0 && self.rt.slot_len(slot) == cells)
            .then(|| self.rt.save_slot(slot))
            .flatten();
        if let Some(d) = &data {
            match self.kv.host.make_room(d.len() as u64) {
                Some(out) => self.send_to_disk(out),
                None => data = None,
            }
        }
        let mut seq = self.seqs.remove(i);
        let mut growth = seq.release_permit();
        seq.preemptions += 1;
        if data.is_none() {
            growth += seq.recompute() as u64;
        }
        self.kv_clear(slot);
        self.kv.free_slots.push(slot);
        self.sync_ledger();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let swapped = data.is_some();
        tracing::debug!(request_id = %seq.id, slot, cells, swapped, "preempted");
        self.stats.send_modify(|s| {
            if swapped {
                s.preempt_swapped += 1;
            } else {
                s.preempt_recomputed += 1;
                s.preempt_recomputed_tokens += cells as u64;
            }
            s.preempt_save_ms_total += ms;
        });
        self.queue.parked.push(Parked {
            seq,
            data,
            growth,
            since: Instant::now(),
        });
    }

    /// Resume parked sequence `i`: a slot, its reservation again, its state
    /// restored (or left to recompute). False when it must wait.
    pub(super) fn resume(&mut self, i: usize) -> bool {
        let p = &self.queue.parked[i];
        let cells = p.seq.kv_len();
        let adds = if p.data.is_some() {
            restore_adds(self.state_model, cells)
        } else {
            0
        };
        let mut d = crate::owner::plan::admit::Decision {
            reuse: None,
            restore: false,
            offered_len: 0,
            adds,
            growth: p.growth,
            tight: false,
        };
        let Some(permit) = self.reserve(&mut d) else {
            return false;
        };
        let Some(slot) = self.take_slot() else {
            return false;
        };
        let mut p = self.queue.parked.swap_remove(i);
        self.kv.host.unpark(p.bytes());
        let t = Instant::now();
        let mut permit = permit;
        if let Some(data) = p.data.take() {
            let ok = self.rt.restore_slot(slot, &data) && self.rt.slot_len(slot) == cells;
            if ok {
                let pkey = key_for(self.prefix_key, &p.seq.adapters);
                let tokens = p.seq.kv_tokens();
                self.kv.cells.extend(slot, pkey, &tokens, self.next_key);
                self.sync_lo(slot);
                self.sync_shared_lo();
            } else {
                // Refused: compute it again (its cells become growth).
                self.kv_clear(slot);
                let n = p.seq.recompute();
                tracing::warn!(request_id = %p.seq.id, cells = n, "saved state refused on resume: recomputing");
                self.stats
                    .send_modify(|s| s.preempt_recomputed_tokens += n as u64);
                permit.unconsume(n as u64);
            }
        }
        p.seq.resume(slot, permit);
        let want = self.config.sample.device_sampling && p.seq.device_eligible();
        let mode = want.then(|| p.seq.banned(&self.vocab));
        p.seq.device = self.rt.set_device_greedy(slot, mode);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let parked_ms = p.since.elapsed().as_secs_f64() * 1e3;
        tracing::debug!(request_id = %p.seq.id, slot, parked_ms, "resumed");
        self.stats.send_modify(|s| {
            s.preempt_resumed += 1;
            s.preempt_restore_ms_total += ms;
        });
        self.seqs.push(p.seq);
        self.sync_ledger();
        true
    }

    /// The step's order: best-ranked first (the planner serves its input
    /// in order); batch lines yield the step while an interactive prompt
    /// is prefilling.
    pub(super) fn step_order(&self, views: &mut Vec<SeqView>) {
        // A newcomer that outranked everything running has its first step
        // alone (`owner/interrupt.rs`).
        let urgent: Vec<u64> = self
            .seqs
            .iter()
            .filter(|s| s.urgent)
            .map(|s| s.key)
            .collect();
        if views.iter().any(|v| urgent.contains(&v.key) && !v.decoding) {
            views.retain(|v| urgent.contains(&v.key));
        }
        let background: Vec<u64> = self
            .seqs
            .iter()
            .filter(|s| s.tenancy.background)
            .map(|s| s.key)
            .collect();
        if !background.is_empty() {
            let fg_prompt = views
                .iter()
                .any(|v| !background.contains(&v.key) && !v.decoding && v.computed < v.prompt_len);
            if fg_prompt {
                views.retain(|v| !background.contains(&v.key));
            }
        }
        if !self.policy.ranked() && background.is_empty() {
            return;
        }
        let held = self.held();
        let rank = |k: u64| {
            self.seqs
                .iter()
                .find(|s| s.key == k)
                .map(|s| self.rank(&s.tenancy, s.order, &held))
        };
        let mut ranked: Vec<(Option<Rank>, SeqView)> =
            views.drain(..).map(|v| (rank(v.key), v)).collect();
        ranked.sort_by(|a, b| match (&a.0, &b.0) {
            (Some(x), Some(y)) => x.cmp(y),
            _ => std::cmp::Ordering::Equal,
        });
        views.extend(ranked.into_iter().map(|r| r.1));
    }

    /// Fair share: charge each tenant the tokens this step computed for it.
    pub(super) fn charge(&mut self, plan: &Plan) {
        if !self.policy.fair_share {
            return;
        }
        for s in &self.seqs {
            let chunk = plan.chunks.iter().find(|c| c.key == s.key).map(|c| c.len);
            let tokens = chunk.unwrap_or(0) as u64 + u64::from(s.step_emitted);
            self.tenants.charge(&s.tenancy, tokens);
        }
    }

    /// Parked sequences whose client left or whose deadline passed end
    /// here (nothing of theirs is on a slot).
    pub(super) fn reap_parked(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.queue.parked.len() {
            let s = &self.queue.parked[i].seq;
            let end = if s.outbox.is_closed() {
                Some(None)
            } else if s.deadline.is_some_and(|d| now >= d) {
                let secs = s.deadline.map_or(0.0, |d| {
                    d.saturating_duration_since(s.arrival()).as_secs_f64()
                });
                Some(Some(GenerationError::DeadlineExceeded(secs)))
            } else {
                None
            };
            match end {
                None => i += 1,
                Some(e) => {
                    if e.is_some() {
                        self.stats
                            .send_modify(|s| s.requests_deadline_exceeded += 1);
                    }
                    self.end_parked(i, e, None);
                }
            }
        }
    }

    /// End parked sequence `i`: with `err` (None: its client is gone).
    pub(super) fn end_parked(
        &mut self,
        i: usize,
        err: Option<GenerationError>,
        noticed: Option<Instant>,
    ) {
        let p = self.queue.parked.swap_remove(i);
        self.kv.host.unpark(p.bytes());
        let id = p.seq.id.clone();
        let cancelled = matches!(err, None | Some(GenerationError::Cancelled));
        let noticed = noticed.or_else(|| p.seq.note.noticed());
        let state = p.seq.cancel_state();
        self.tell(p.seq, err.map(Outcome::Failed));
        if cancelled {
            self.record_cancel(&id, state, noticed);
        }
    }
}
