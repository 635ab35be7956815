//! ③ execute — the end of a sequence: `retire` is the one place an
//! admitted sequence ends (its slot's cells kept for the prefix cache or
//! cleared, the slot returned, the permit dropped, its terminal event
//! queued); finished sequences leave after each step; terminal events a
//! slow client has not taken wait in `draining`; the shutdown when the
//! inbox closes.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use crate::deliver::stream::{Event, GenerationError};

use crate::owner::kv::prefix;
use crate::owner::plan::adapter_sets::key_for;
use crate::owner::sequence::{Outcome, Sequence};
use crate::owner::Owner;
use crate::runtime::backend::Backend;

/// A terminal event (and text before it) the client has not taken yet. The
/// sequence's slot and permit are already released; only the events wait.
pub(super) struct Draining {
    pub(super) id: String,
    pub(super) outbox: mpsc::Sender<Event>,
    pub(super) events: VecDeque<Event>,
}

impl<B: Backend> Owner<B> {
    /// Retire every sequence whose step gave it an outcome.
    pub(super) fn retire_finished(&mut self) {
        let mut i = 0;
        while i < self.seqs.len() {
            if let Some(out) = self.seqs[i].outcome.take() {
                let seq = self.seqs.remove(i);
                self.retire(seq, Some(out));
            } else {
                i += 1;
            }
        }
    }

    pub(super) fn fail(&mut self, keys: &[u64], msg: String) {
        let mut i = 0;
        while i < self.seqs.len() {
            if keys.contains(&self.seqs[i].key) {
                let seq = self.seqs.remove(i);
                let err = GenerationError::Runtime(msg.clone());
                self.retire(seq, Some(Outcome::Failed(err)));
            } else {
                i += 1;
            }
        }
    }

    /// The one place an admitted sequence ends: clear its slot's KV cells
    /// (the step that used them has completed), return the slot, drop the
    /// permit (releasing its reservation), queue its terminal event.
    pub(super) fn retire(&mut self, mut seq: Sequence, outcome: Option<Outcome>) {
        // Finished or cancelled between steps, the slot's cells are sound:
        // the prefix cache keeps them. A failed step's cells are not.
        let sound = !matches!(outcome, Some(Outcome::Failed(_)));
        let kept = if sound && self.kv.cache.enabled {
            // (Cleared instead where the memory cannot be cut there.)
            self.kv_truncate(seq.slot, seq.kv_len())
        } else {
            0
        };
        if kept > 0 && outcome.is_some() {
            // Its state pinned while the cells are whole (`owner/pins.rs`).
            self.pin_retiring(&mut seq);
        }
        if kept == 0 {
            self.kv_clear(seq.slot);
            self.kv.free_slots.push(seq.slot);
        } else {
            self.kv.cache.insert(prefix::Entry {
                slot: seq.slot,
                key: key_for(self.prefix_key, &seq.adapters),
                last_used: self.next_key,
            });
        }
        self.tell(seq, outcome);
    }

    /// A sequence off its slot ends: its counters, its terminal events
    /// (none when cancelled: nobody to tell).
    pub(super) fn tell(&mut self, mut seq: Sequence, outcome: Option<Outcome>) {
        seq.trace_end(outcome.as_ref());
        if let Some((ns, steps)) = seq.constraint_cost() {
            self.stats.send_modify(|s| {
                s.constraint_ns_total += ns;
                s.constraint_tokens_total += steps;
                s.constrained_requests_total += 1;
            });
        }
        let Some(outcome) = outcome else {
            return; // cancelled: nobody to tell; `seq` (and its permit) drop here.
        };
        let failed = matches!(outcome, Outcome::Failed(_));
        let events = seq.terminal_events(outcome);
        self.stats.send_modify(|s| {
            if failed {
                s.requests_failed += 1
            } else {
                s.requests_finished += 1
            }
        });
        let mut d = Draining {
            id: seq.id.clone(),
            outbox: seq.outbox.clone(),
            events,
        };
        drop(seq);
        if flush(&mut d) {
            self.queue.draining.push(d);
        }
    }

    pub(super) fn flush_draining(&mut self) {
        self.queue.draining.retain_mut(flush);
        for seq in &mut self.seqs {
            seq.flush_text();
        }
        for p in &mut self.queue.parked {
            p.seq.flush_text();
        }
    }

    /// The inbox closed: fail what is still queued, deliver what we can.
    pub(super) fn shutdown(&mut self) {
        for w in self.queue.waiting.drain(..) {
            let _ = w
                .sub
                .outbox
                .try_send(Event::Error(GenerationError::Shutdown));
            self.queue.queued.fetch_sub(1, Ordering::AcqRel);
        }
        for mut d in self.queue.draining.drain(..) {
            while let Some(ev) = d.events.pop_front() {
                let _ = d.outbox.try_send(ev);
            }
        }
        self.disk_flush();
        self.stats.send_modify(|s| s.stopped = true);
        self.kv_stopped();
        tracing::info!("engine stopped");
    }
}

/// Try to deliver queued events; true while some remain (and the client is
/// still there).
fn flush(d: &mut Draining) -> bool {
    while let Some(ev) = d.events.pop_front() {
        match d.outbox.try_send(ev) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(ev)) => {
                d.events.push_front(ev);
                return true;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
        }
    }
    false
}
