//! The owner's side of KV events: after each iteration, the cell map's
//! block events go to the publisher as one batch. The owner never waits on
//! it: a full queue drops the batch and marks a resync, and the next batch
//! that fits is a snapshot (`Cleared`, then every block held). Blocks the
//! disk tier holds go in batches of their own, medium `DISK`.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::owner::kv::events::{KvBatch, KvEvent, KvSink};
use crate::owner::Owner;
use crate::runtime::backend::Backend;

/// The medium the disk tier's blocks are reported under.
const DISK: &str = "DISK";

#[derive(Debug)]
pub(super) struct KvOut {
    pub sink: KvSink,
    /// A batch was dropped: send a snapshot next.
    pub resync: bool,
    pub medium: &'static str,
}

impl KvOut {
    /// Starting: subscribers hear `Cleared` first (a restarted replica
    /// holds nothing, whatever they knew of it).
    pub fn new(sink: KvSink, gpu: bool) -> Self {
        let mut k = KvOut {
            sink,
            resync: false,
            medium: if gpu { "GPU" } else { "CPU" },
        };
        k.send(vec![KvEvent::Cleared]);
        k
    }

    fn send(&mut self, events: Vec<KvEvent>) {
        self.send_as(events, self.medium);
    }

    fn send_as(&mut self, events: Vec<KvEvent>, medium: &'static str) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let batch = KvBatch {
            topic: self.sink.topic.clone(),
            ts,
            events,
            medium,
        };
        if self.sink.tx.try_send(batch).is_err() {
            self.resync = true;
        }
    }
}

impl<B: Backend> Owner<B> {
    pub(super) fn emit_kv_events(&mut self) {
        let Some(kv) = self.kv.out.as_mut() else {
            return;
        };
        if kv.resync {
            if kv.sink.tx.capacity() == 0 {
                return;
            }
            kv.resync = false;
            let snap = self.kv.cells.block_snapshot();
            tracing::warn!(
                events = snap.len(),
                "KV events: a batch was dropped (slow publisher); sent a full snapshot"
            );
            kv.send(snap);
            if let Some(d) = self.kv.disk.as_mut() {
                kv.send_as(d.block_snapshot(), DISK);
            }
            return;
        }
        let events = self.kv.cells.take_block_events();
        if !events.is_empty() {
            kv.send(events);
        }
        // The disk tier's blocks, as their own medium (vLLM's tiers do).
        if let Some(d) = self.kv.disk.as_mut().filter(|d| !d.events.is_empty()) {
            kv.send_as(std::mem::take(&mut d.events), DISK);
        }
    }

    /// Stopping (unload, shutdown): the model's blocks are gone.
    pub(super) fn kv_stopped(&mut self) {
        if let Some(kv) = self.kv.out.as_mut() {
            kv.send(vec![KvEvent::Cleared]);
        }
    }
}
