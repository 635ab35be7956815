//! ③ execute → ⑤ deliver — publish: the owner's gauges, ledger and live
//! requests into the `watch` snapshot the server reads (only when something
//! changed, or after a step); the physical KV size sampled at most once a
//! second while busy.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::deliver::stats;
use crate::owner::sequence::Sequence;
use crate::owner::Owner;
use crate::runtime::backend::Backend;

impl<B: Backend> Owner<B> {
    pub(super) fn publish(&mut self, step: Option<(f64, usize)>) {
        self.sync_ledger();
        let running = self.seqs.iter().filter(|s| s.is_decoding()).count();
        let prefilling = self.seqs.len() - running;
        let (used, reserved, permits) = (
            self.ledger.used(),
            self.ledger.reserved(),
            self.ledger.permits(),
        );
        let waiting = self.queue.queued.load(Ordering::Acquire);
        let budget = self.limits.prompt_budget;
        let paused = self
            .seqs
            .iter()
            .filter(|s| s.paused_since.is_some())
            .count();
        let outboxes = self.seqs.len()
            + self.queue.draining.len()
            + self.queue.waiting.len()
            + self.queue.parked.len();
        let (cached_cells, cached_entries) = (self.ledger.cached(), self.kv.cache.len());
        let (host_bytes, host_entries) = (self.kv.host.bytes(), self.kv.host.len());
        let (preempted, preempted_bytes) = (self.queue.parked.len(), self.kv.host.parked);
        let disk = self.kv.disk.as_ref().map(|d| d.stats()).unwrap_or_default();
        let (pinned_entries, pinned_bytes) = self.kv.host.pinned();
        let (checkpoints, checkpoint_bytes) = (self.kv.memory.count(), self.kv.memory.bytes());
        let physical = match (self.kv.state_base, self.kv.state_sampled) {
            // Every second while busy (it walks every cell: ~1-4 ms at 64 slots of 512), and always once idle (the loop then
            // blocks until the next command).
            (Some(base), t) if self.idle() || t.is_none_or(|t| t.elapsed().as_millis() >= 1000) => {
                self.kv.state_sampled = Some(Instant::now());
                self.rt.state_bytes().map(|b| b.saturating_sub(base) as u64)
            }
            _ => None,
        };
        let live = self.live_requests();
        if let Some((run, wait)) = self.lora_names() {
            self.stats.send_if_modified(|s| {
                let changed = s.lora_running != run || s.lora_waiting != wait;
                s.lora_running = run;
                s.lora_waiting = wait;
                changed
            });
        }
        self.stats.send_if_modified(|s| {
            let before = (
                s.running,
                s.prefilling,
                s.kv_cells_used,
                s.kv_cells_reserved,
                s.waiting,
                s.paused,
                s.live_outboxes,
                s.kv_cells_cached,
                s.prefix_host_bytes,
                s.checkpoint_bytes,
                s.preempted_bytes,
            );
            s.running = running;
            s.prefilling = prefilling;
            s.kv_cells_used = used;
            s.kv_cells_reserved = reserved;
            s.permits = permits;
            s.waiting = waiting;
            s.prompt_budget = budget;
            s.paused = paused;
            s.live_outboxes = outboxes;
            s.kv_cells_cached = cached_cells;
            s.prefix_entries = cached_entries;
            s.prefix_host_bytes = host_bytes;
            s.prefix_host_entries = host_entries;
            s.checkpoints = checkpoints;
            s.checkpoint_bytes = checkpoint_bytes;
            s.preempted = preempted;
            s.preempted_bytes = preempted_bytes;
            let disk_changed = s.disk != disk || s.pinned_bytes != pinned_bytes;
            s.disk = disk;
            s.pinned_entries = pinned_entries;
            s.pinned_bytes = pinned_bytes;
            if let Some(p) = physical {
                s.kv_bytes_physical = p;
            }
            let live_changed = s.live.len() != live.len()
                || s.live
                    .iter()
                    .zip(&live)
                    .any(|(a, b)| a.id != b.id || a.state != b.state);
            s.live = live;
            if let Some((ms, n)) = step {
                s.last_step_ms = ms;
                s.last_step_tokens = n;
                return true;
            }
            live_changed
                || disk_changed
                || before
                    != (
                        running,
                        prefilling,
                        used,
                        reserved,
                        waiting,
                        paused,
                        outboxes,
                        cached_cells,
                        host_bytes,
                        checkpoint_bytes,
                        preempted_bytes,
                    )
        });
    }

    /// Every request the owner holds, by state (for `/debug` and the dashboard).
    fn live_requests(&self) -> Vec<stats::LiveRequest> {
        self.queue
            .waiting
            .iter()
            .map(|w| stats::LiveRequest {
                id: w.sub.req.id.clone(),
                state: "queued",
                prompt_tokens: w.sub.req.prompt.len(),
                prompt_computed: 0,
                generated: 0,
                age_ms: w.sub.req.arrival.elapsed().as_secs_f64() * 1e3,
            })
            .chain(self.seqs.iter().map(Sequence::live))
            .chain(self.queue.parked.iter().map(|p| p.live()))
            .chain(self.queue.draining.iter().map(|d| stats::LiveRequest {
                id: d.id.clone(),
                state: "retiring",
                ..Default::default()
            }))
            .collect()
    }
}
