//! Ending requests from outside a step: the client left, a deadline or
//! the queue time ran out, a reader lags past the policy, an explicit
//! cancel by ID, the end of a drain. Every admitted one still ends through
//! `Owner::retire`; cancellation latency is counted here.

use std::time::Instant;

use crate::deliver::stats::CancelState;
use crate::deliver::stream::{Event, GenerationError};
use crate::owner::sequence::Outcome;
use crate::owner::Owner;
use crate::runtime::backend::Backend;

impl<B: Backend> Owner<B> {
    /// Count a cancellation and its latency (from when it was noticed).
    pub(super) fn record_cancel(&mut self, id: &str, state: CancelState, noticed: Option<Instant>) {
        let ms = noticed.map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
        let samples = &mut self.clock.cancel_samples[state.index()];
        if samples.len() == 4096 {
            samples.pop_front();
        }
        samples.push_back(ms);
        let mut sorted: Vec<f64> = samples.iter().copied().collect();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let q =
            |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        let quantiles = [q(0.5), q(0.99), sorted[sorted.len() - 1]];
        self.stats.send_modify(|s| {
            s.requests_cancelled += 1;
            s.cancelled_by_state[state.index()] += 1;
            s.cancel_latency[state.index()].observe(ms);
            s.cancel_latency_quantiles[state.index()] = quantiles;
            let rec = crate::deliver::stats::CancelRecord {
                n: s.requests_cancelled,
                id: id.to_string(),
                state: state.as_str(),
                latency_ms: ms,
                at_ms: crate::deliver::stats::unix_ms(),
            };
            crate::deliver::stats::push_bounded(
                &mut s.recent_cancels,
                crate::deliver::stats::CANCEL_HISTORY,
                rec,
            );
        });
    }

    /// End of a drain: every queued and admitted request ends with `Shutdown`.
    pub(super) fn cancel_all(&mut self) {
        while let Some(w) = self.queue.waiting.pop_front() {
            let _ = w
                .sub
                .outbox
                .try_send(Event::Error(GenerationError::Shutdown));
            self.dequeue();
        }
        while let Some(seq) = self.seqs.pop() {
            self.retire(seq, Some(Outcome::Failed(GenerationError::Shutdown)));
        }
        while !self.queue.parked.is_empty() {
            self.end_parked(0, Some(GenerationError::Shutdown), None);
        }
    }

    /// Explicit cancel: idempotent; unknown or retired IDs are ignored.
    pub(super) fn cancel_by_id(&mut self, id: &str) {
        let t = Instant::now();
        if let Some(i) = self.queue.waiting.iter().position(|w| w.sub.req.id == id) {
            if let Some(w) = self.queue.waiting.remove(i) {
                let _ = w
                    .sub
                    .outbox
                    .try_send(Event::Error(GenerationError::Cancelled));
            }
            self.dequeue();
            self.record_cancel(id, CancelState::Queued, Some(t));
        } else if let Some(i) = self.seqs.iter().position(|s| s.id == id) {
            let seq = self.seqs.remove(i);
            let state = seq.cancel_state();
            self.retire(seq, Some(Outcome::Failed(GenerationError::Cancelled)));
            self.record_cancel(id, state, Some(t));
        } else if let Some(i) = self.queue.parked.iter().position(|p| p.seq.id == id) {
            self.end_parked(i, Some(GenerationError::Cancelled), Some(t));
        }
    }

    /// Drop waiting requests whose client left or whose time ran out, and
    /// end admitted sequences whose client left, whose deadline passed, or
    /// whose reader lags past the policy.
    pub(super) fn reap(&mut self) {
        let now = Instant::now();
        let timeout = self.config.admit.queue_timeout;
        let mut i = 0;
        while i < self.queue.waiting.len() {
            let w = &self.queue.waiting[i];
            let err = if w.sub.outbox.is_closed() {
                None
            } else if w.sub.req.deadline.is_some_and(|d| now >= d) {
                let secs = w.sub.req.deadline.map_or(0.0, |d| {
                    d.saturating_duration_since(w.sub.req.arrival).as_secs_f64()
                });
                Some(GenerationError::DeadlineExceeded(secs))
            } else if timeout.is_some_and(|t| w.enqueued.elapsed() >= t) {
                Some(GenerationError::QueueTimeout(
                    w.enqueued.elapsed().as_secs_f64(),
                ))
            } else {
                i += 1;
                continue;
            };
            let Some(w) = self.queue.waiting.remove(i) else {
                break;
            };
            self.dequeue();
            match err {
                None => {
                    tracing::debug!(request_id = %w.sub.req.id, "cancelled while queued");
                    self.record_cancel(&w.sub.req.id, CancelState::Queued, w.sub.note.noticed());
                }
                Some(e) => {
                    tracing::info!(request_id = %w.sub.req.id, error = %e, "ended while queued");
                    self.stats.send_modify(|s| match e {
                        GenerationError::DeadlineExceeded(_) => s.requests_deadline_exceeded += 1,
                        _ => s.requests_timed_out_in_queue += 1,
                    });
                    let _ = w.sub.outbox.try_send(Event::Error(e));
                }
            }
        }
        let mut i = 0;
        while i < self.seqs.len() {
            let seq = &self.seqs[i];
            let lag = seq.lag_tokens();
            let end = if seq.outbox.is_closed() {
                Some(None)
            } else if seq.deadline.is_some_and(|d| now >= d) {
                let secs = seq.deadline.map_or(0.0, |d| {
                    d.saturating_duration_since(seq.arrival()).as_secs_f64()
                });
                Some(Some(GenerationError::DeadlineExceeded(secs)))
            } else if seq.lagging()
                && (self.config.deliver.slow_reader == crate::config::SlowReaderPolicy::Terminate
                    || seq
                        .paused_since
                        .zip(self.config.deliver.slow_reader_timeout)
                        .is_some_and(|(since, limit)| since.elapsed() >= limit))
            {
                Some(Some(GenerationError::SlowReader(lag)))
            } else {
                None
            };
            let Some(end) = end else {
                i += 1;
                continue;
            };
            let seq = self.seqs.remove(i);
            match end {
                None => {
                    tracing::debug!(request_id = %seq.id, "cancelled (client gone)");
                    let (state, noticed) = (seq.cancel_state(), seq.note.noticed());
                    let id = seq.id.clone();
                    self.retire(seq, None);
                    self.record_cancel(&id, state, noticed);
                }
                Some(e) => {
                    tracing::info!(request_id = %seq.id, error = %e, "ended");
                    self.stats.send_modify(|s| match e {
                        GenerationError::DeadlineExceeded(_) => s.requests_deadline_exceeded += 1,
                        _ => s.requests_slow_reader_terminated += 1,
                    });
                    self.retire(seq, Some(Outcome::Failed(e)));
                }
            }
        }
        self.reap_parked();
    }
}
