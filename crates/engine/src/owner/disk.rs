//! ② admit / ③ execute — the disk tier on the owner: entries leaving the
//! host tier (and idle slots' entries while nothing runs, and everything
//! at shutdown) are queued to the disk thread; a prompt whose best match
//! is on disk and whose read is estimated cheaper than its computation is
//! read back into the host tier, from where admission restores it. The
//! index and its policy: `kv/disk.rs`; the files and the thread:
//! `kv/diskfile.rs`. Only the read at admission and the state copy of an
//! idle slot run on the owner thread; writes never do.

use std::time::{Duration, Instant};

use crate::owner::kv::disk::{now_ms, DiskEntry, DiskTier};
use crate::owner::kv::diskfile::{self, DiskIo, Done, Header, Job};
use crate::owner::kv::key::PrefixKey;
use crate::owner::kv::spill::Spilled;
use crate::owner::Owner;
use crate::runtime::backend::Backend;
use crate::runtime::TokenId;

/// Writes queued at once (each holds one entry's bytes).
const QUEUE: usize = 2;
/// Longest a shutdown waits for the disk thread.
const FLUSH_DEADLINE: Duration = Duration::from_secs(60);

impl<B: Backend> Owner<B> {
    /// Start the disk tier in its model's directory (configured, with the
    /// prefix cache on); it scans its files on its own thread.
    pub(super) fn disk_start(&mut self) {
        let c = &self.config.admit;
        let (Some(root), true) = (c.disk_dir.as_ref(), c.disk_bytes > 0 && c.prefix_cache) else {
            return;
        };
        let dir = root.join(format!("{:016x}", self.prefix_key.model));
        match DiskIo::start(dir.clone(), QUEUE) {
            Ok(io) => {
                let mut disk = DiskTier::new(dir, c.disk_bytes, c.prefix_host_min);
                if self.kv.out.is_some() {
                    disk.track_blocks();
                }
                self.kv.disk = Some(disk);
                self.kv.disk_io = Some(io);
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "disk cache: cannot use its directory; off")
            }
        }
    }

    /// Take the disk thread's reports: entries found by the scan or
    /// written join the index; files made redundant or past the budget are
    /// deleted (by the thread).
    pub(super) fn disk_poll(&mut self) {
        let (Some(disk), Some(io)) = (self.kv.disk.as_mut(), self.kv.disk_io.as_ref()) else {
            return;
        };
        let (mut gone, mut any) = (Vec::new(), false);
        while let Ok(done) = io.done.try_recv() {
            any = true;
            match done {
                Done::Found(head, path, bytes, mtime) => {
                    gone.extend(disk.add(DiskEntry {
                        head,
                        path,
                        bytes,
                        last_used: mtime,
                    }));
                }
                Done::Scanned { bad } => {
                    disk.scanned = true;
                    disk.counters.corrupt += bad as u64;
                    tracing::info!(entries = disk.len(), bytes = disk.bytes(), deleted = bad, dir = %disk.dir.display(), "disk cache: scanned");
                }
                Done::Written {
                    head,
                    path,
                    ok,
                    bytes,
                    secs,
                } => {
                    disk.unqueue(head.key, &head.tokens, head.data_len);
                    if !ok {
                        disk.counters.write_failures += 1;
                        continue;
                    }
                    disk.counters.writes += 1;
                    disk.counters.write_bytes += bytes;
                    DiskTier::observe(&mut disk.write_bw, bytes, secs * 1e3);
                    gone.extend(disk.add(DiskEntry {
                        head,
                        path,
                        bytes,
                        last_used: now_ms(),
                    }));
                }
            }
        }
        for p in gone {
            // A full queue leaves the file: the next scan indexes it, and
            // the budget deletes it again.
            io.try_send(Job::Delete(p));
        }
        if any {
            // Published now: the loop may block on its inbox next.
            self.publish(None);
            self.emit_kv_events();
        }
    }

    /// Whether the disk thread has reports to come (the scan, writes).
    pub(super) fn disk_busy(&self) -> bool {
        self.kv
            .disk
            .as_ref()
            .is_some_and(|d| !d.scanned || d.pending_bytes > 0)
    }

    /// Entries leaving the host tier go to disk.
    pub(super) fn send_to_disk(&mut self, out: Vec<Spilled>) {
        for s in out {
            self.disk_write(s.key, s.tokens, s.lo, s.data, false);
        }
    }

    /// Queue one entry's write unless the disk holds it already (or it is
    /// under adapters, whose ids do not survive a restart); `wait` only at
    /// shutdown.
    fn disk_write(
        &mut self,
        key: PrefixKey,
        tokens: Vec<TokenId>,
        lo: usize,
        data: Vec<u8>,
        wait: bool,
    ) {
        let base = self.prefix_key.adapters;
        let (Some(disk), Some(io)) = (self.kv.disk.as_mut(), self.kv.disk_io.as_ref()) else {
            return;
        };
        if key.adapters != base || !disk.wants(key, &tokens, data.len() as u64) {
            return;
        }
        let head = Header::unsealed(key, lo, tokens, data.len() as u64);
        let path = disk.dir.join(head.file_name());
        let (bytes, kept) = (head.data_len, head.tokens.clone());
        let job = Job::Write { path, head, data };
        if if wait { io.send(job) } else { io.try_send(job) } {
            disk.queued(key, kept, bytes);
        } else {
            // Never waits in a step: the entry is simply not written.
            disk.counters.write_drops += 1;
        }
    }

    /// Before admission offers: when the disk holds a longer prefix of
    /// `prompt` than the host tier and the slots (`offered` tokens), and
    /// reading it is estimated cheaper than computing the difference, read
    /// it into the host tier. A file that fails its checks is deleted.
    pub(super) fn disk_promote(
        &mut self,
        pkey: PrefixKey,
        prompt: &[TokenId],
        offered: usize,
    ) -> bool {
        let token_ms = self.cost.prompt_token_ms();
        let memory = &self.kv.memory;
        let Some(disk) = self.kv.disk.as_mut() else {
            return false;
        };
        let Some((i, len)) = disk.best(pkey, prompt, |e, m| {
            memory.saved_reach(e.head.lo, e.head.tokens.len(), m)
        }) else {
            return false;
        };
        if len <= offered + disk.min_tokens {
            return false;
        }
        if !disk.worth_reading(i, len - offered, token_ms) {
            disk.counters.skipped += 1;
            return false;
        }
        let Some(e) = disk.entry(i) else { return false };
        let (head, path, bytes) = (e.head.clone(), e.path.clone(), e.bytes);
        let t = Instant::now();
        match diskfile::read_data(&path, &head) {
            Ok(data) => {
                let ms = t.elapsed().as_secs_f64() * 1e3;
                DiskTier::observe(&mut disk.read_bw, bytes, ms);
                disk.counters.reads += 1;
                disk.counters.read_bytes += bytes;
                disk.touch(i, now_ms());
                if let Some(io) = self.kv.disk_io.as_ref() {
                    io.try_send(Job::Touch(path));
                }
                tracing::debug!(tokens = len, ms, "disk cache: read an entry back");
                self.kv.host.stage(Spilled {
                    key: head.key,
                    tokens: head.tokens,
                    data,
                    last_used: self.next_key,
                    lo: head.lo,
                    pin: None,
                });
                true
            }
            Err(err) => {
                tracing::warn!(file = %path.display(), error = %err, "disk cache: a corrupt entry, deleted; the prompt is computed");
                disk.remove(i);
                disk.counters.corrupt += 1;
                let _ = std::fs::remove_file(path);
                false
            }
        }
    }

    /// After an admission pass: what a staged read left past the host
    /// tier's budget leaves it (it is on disk).
    pub(super) fn disk_trim(&mut self) {
        if self.kv.disk.is_some() {
            let out = self.kv.host.trim();
            self.send_to_disk(out);
        }
    }

    /// While nothing runs: write idle slots' entries the disk lacks (one
    /// state copy each on this thread; the write on the disk thread), as
    /// many as the queue takes.
    pub(super) fn disk_idle(&mut self) {
        self.disk_poll();
        if self.kv.disk.is_none() || !self.idle() {
            return;
        }
        for slot in self.disk_unwritten() {
            if !self.disk_save_slot(slot, false) {
                break;
            }
        }
    }

    /// Idle slots holding an entry the disk lacks.
    fn disk_unwritten(&self) -> Vec<usize> {
        let Some(disk) = self.kv.disk.as_ref() else {
            return Vec::new();
        };
        self.kv
            .cache
            .entries()
            .iter()
            .filter(|e| e.key.adapters == self.prefix_key.adapters)
            .filter(|e| {
                let t = self.kv.cells.tokens(e.slot);
                t.len() >= disk.min_tokens && !disk.covers(e.key, &t)
            })
            .map(|e| e.slot)
            .collect()
    }

    /// Save one idle slot's entry to disk; false when the queue is full.
    fn disk_save_slot(&mut self, slot: usize, wait: bool) -> bool {
        let Some(e) = self.kv.cache.entries().iter().find(|e| e.slot == slot) else {
            return true;
        };
        let key = e.key;
        let tokens = self.kv.cells.tokens(slot);
        if self.rt.slot_len(slot) < tokens.len() {
            return true;
        }
        let Some(data) = self.rt.save_slot(slot) else {
            return true;
        };
        let drops = self.kv.disk.as_ref().map_or(0, |d| d.counters.write_drops);
        let lo = self.kv.memory.lo(slot);
        self.disk_write(key, tokens, lo, data, wait);
        self.kv.disk.as_ref().map_or(0, |d| d.counters.write_drops) == drops
    }

    /// At shutdown: every idle slot's entry and the host tier's go to
    /// disk, and the disk thread finishes (bounded by `FLUSH_DEADLINE`).
    pub(super) fn disk_flush(&mut self) {
        if self.kv.disk.is_none() {
            return;
        }
        let t = Instant::now();
        self.disk_poll();
        for slot in self.disk_unwritten() {
            if t.elapsed() > FLUSH_DEADLINE {
                break;
            }
            self.disk_save_slot(slot, true);
            self.disk_poll();
        }
        for s in self.kv.host.drain() {
            if t.elapsed() > FLUSH_DEADLINE {
                break;
            }
            self.disk_write(s.key, s.tokens, s.lo, s.data, true);
            self.disk_poll();
        }
        if let Some(mut io) = self.kv.disk_io.take() {
            io.finish();
        }
        let c = self
            .kv
            .disk
            .as_ref()
            .map(|d| d.counters)
            .unwrap_or_default();
        tracing::info!(
            writes = c.writes,
            bytes = c.write_bytes,
            ms = t.elapsed().as_millis() as u64,
            "disk cache: flushed"
        );
    }
}
