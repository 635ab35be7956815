//! ③ execute — intake: commands from the bounded inbox into the waiting
//! queue (or answered at once: cancels, adapter loads, the cell map).
//! Blocks only when the owner has nothing at all to do.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::deliver::stream::GenerationError;
use crate::owner::inbox::Command;
use crate::owner::{Owner, Waiting};
use crate::runtime::backend::Backend;

impl<B: Backend> Owner<B> {
    /// Move submissions from the inbox into the waiting queue. Blocks only
    /// when there is nothing at all to do.
    pub(super) fn intake(&mut self) -> bool {
        let mut may_block = true;
        loop {
            if self.queue.closed {
                return !(self.idle() && self.queue.draining.is_empty());
            }
            // Block only at the start of an iteration with nothing to do; a
            // command that leaves the owner idle (a cancel) ends the intake.
            // (Nor while the disk thread has reports to come: they are
            // polled and published by the loop.)
            let block = std::mem::take(&mut may_block)
                && self.idle()
                && self.queue.draining.is_empty()
                && !self.disk_busy();
            let cmd = if block {
                match self.queue.inbox.blocking_recv() {
                    Some(c) => c,
                    None => {
                        self.queue.closed = true;
                        continue;
                    }
                }
            } else {
                match self.queue.inbox.try_recv() {
                    Ok(c) => c,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        if self.seqs.is_empty() {
                            // Only queue timeouts or undelivered events: poll gently.
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        return true;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        self.queue.closed = true;
                        continue;
                    }
                }
            };
            match cmd {
                Command::Submit(sub) => {
                    self.activate(&sub.req.tenancy);
                    self.next_order += 1;
                    self.queue.waiting.push_back(Waiting {
                        sub: *sub,
                        enqueued: Instant::now(),
                        order: self.next_order,
                        step: self.clock.steps,
                    });
                }
                Command::Cancel(id) => self.cancel_by_id(&id),
                Command::CancelAll => self.cancel_all(),
                Command::Stop => self.queue.closed = true,
                Command::Wake => return true,
                Command::LoadAdapter(spec, reply) => {
                    let _ = reply.send(self.load_adapter(&spec));
                }
                Command::CellMap(reply) => {
                    let _ = reply.send(self.kv.cells.dump());
                }
                Command::Embed(sub) => {
                    self.queue.queued.fetch_sub(1, Ordering::AcqRel);
                    let _ = sub.reply.send(Err(GenerationError::Runtime(
                        "this model generates text; it serves no embeddings".into(),
                    )));
                }
            }
        }
    }

    pub(super) fn dequeue(&self) {
        self.queue.queued.fetch_sub(1, Ordering::AcqRel);
    }
}
