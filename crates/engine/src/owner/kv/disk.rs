//! The prefix cache's third tier: entries on disk, below the host tier.
//!
//! What lands here: entries the host tier evicts (or cannot hold), and,
//! while the owner is idle and at shutdown, the idle slots' entries (every
//! finished conversation's tail). A prompt whose longest match is here,
//! and whose restore is estimated cheaper than recomputing it (bytes over
//! the measured read bandwidth against the step cost model's per-token
//! prompt cost), is read back into the host tier and restored from there.
//!
//! This module is the index and its policy, pure bookkeeping: the files
//! and the thread writing them are `diskfile.rs`; the owner's side
//! (`owner/disk.rs`) saves, reads and polls. The budget is kept least
//! recently used out; an entry that is a prefix of another is redundant
//! (the longer one serves every prompt the shorter one would).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::owner::kv::diskfile::Header;
use crate::owner::kv::events::{block_hash, lora_id, KvEvent, BLOCK_TOKENS};
use crate::owner::kv::key::{common_prefix, PrefixKey};
use crate::runtime::TokenId;

/// An entry on disk, as the index holds it.
#[derive(Debug)]
pub(crate) struct DiskEntry {
    pub head: Header,
    pub path: PathBuf,
    /// The file's size.
    pub bytes: u64,
    /// Last use, ms since the epoch (the file's modification time after
    /// a restart).
    pub last_used: u64,
}

/// Counters, published with the engine's stats.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct DiskCounters {
    pub writes: u64,
    pub write_bytes: u64,
    pub write_failures: u64,
    /// Writes not queued: the queue was full (the entry stays in memory
    /// until evicted, never blocking a step).
    pub write_drops: u64,
    pub reads: u64,
    pub read_bytes: u64,
    /// Entries deleted because a check failed (scan or restore).
    pub corrupt: u64,
    pub evictions: u64,
    /// Matches not read because recomputing was estimated cheaper.
    pub skipped: u64,
}

#[derive(Debug)]
pub(crate) struct DiskTier {
    pub dir: PathBuf,
    /// Most bytes the files may hold.
    pub budget: u64,
    /// Shortest prefix worth writing or reading.
    pub min_tokens: usize,
    entries: Vec<DiskEntry>,
    /// Writes queued and not yet reported: not written twice meanwhile.
    pending: Vec<(PrefixKey, Vec<TokenId>)>,
    pub pending_bytes: u64,
    /// The start-up scan has reported every file.
    pub scanned: bool,
    /// Measured bandwidth, bytes per ms (a moving average).
    pub read_bw: Option<f64>,
    pub write_bw: Option<f64>,
    pub counters: DiskCounters,
    /// KV events (`--kv-events`, medium `DISK`): the full blocks the
    /// entries hold, each with how many entries hold it (None: not
    /// tracked), and the events not yet sent.
    blocks: Option<HashMap<u64, u32>>,
    pub events: Vec<KvEvent>,
}

/// The bandwidth assumed before any read is measured: 1 GB/s.
const READ_BW_PRIOR: f64 = 1e6;

impl DiskTier {
    pub fn new(dir: PathBuf, budget: u64, min_tokens: usize) -> Self {
        DiskTier {
            dir,
            budget,
            min_tokens: min_tokens.max(1),
            entries: Vec::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            scanned: false,
            read_bw: None,
            write_bw: None,
            counters: DiskCounters::default(),
            blocks: None,
            events: Vec::new(),
        }
    }

    /// Report the blocks entries hold as KV events.
    pub fn track_blocks(&mut self) {
        self.blocks = Some(HashMap::new());
    }

    /// An entry joins (`held` true) or leaves the index: its blocks'
    /// counts, and the events for those first held or last released.
    fn note(&mut self, head: &Header, held: bool) {
        let Some(blocks) = self.blocks.as_mut() else {
            return;
        };
        let (mut parent, mut first) = (0u64, None);
        let mut hashes = Vec::new();
        for (i, chunk) in head.tokens.chunks_exact(BLOCK_TOKENS).enumerate() {
            let h = block_hash(parent, &head.key, chunk);
            let n = blocks.entry(h).or_insert(0);
            if held {
                *n += 1;
                if *n == 1 {
                    first.get_or_insert((i, (i > 0).then_some(parent)));
                    hashes.push(h);
                }
            } else {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    blocks.remove(&h);
                    hashes.push(h);
                }
            }
            parent = h;
        }
        if hashes.is_empty() {
            return;
        }
        self.events.push(match (held, first) {
            (true, Some((i, parent))) => KvEvent::Stored {
                tokens: head.tokens[i * BLOCK_TOKENS..(i + hashes.len()) * BLOCK_TOKENS].to_vec(),
                hashes,
                parent,
                lora_id: lora_id(&head.key),
            },
            _ => KvEvent::Removed { hashes },
        });
    }

    /// Every block the entries hold, as `Stored` events (a resync).
    pub fn block_snapshot(&mut self) -> Vec<KvEvent> {
        if self.blocks.is_none() {
            return Vec::new();
        }
        self.blocks = Some(HashMap::new());
        self.events.clear();
        let heads: Vec<Header> = self.entries.iter().map(|e| e.head.clone()).collect();
        for h in &heads {
            self.note(h, true);
        }
        std::mem::take(&mut self.events)
    }

    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn entry(&self, i: usize) -> Option<&DiskEntry> {
        self.entries.get(i)
    }

    /// Whether an entry on disk, or a write on its way, already holds
    /// these tokens (or more after them) under `key`.
    pub fn covers(&self, key: PrefixKey, tokens: &[TokenId]) -> bool {
        self.entries
            .iter()
            .any(|e| e.head.key == key && e.head.tokens.starts_with(tokens))
            || self
                .pending
                .iter()
                .any(|(k, t)| *k == key && t.starts_with(tokens))
    }

    /// Whether a write of `tokens` (`bytes`) is worth queueing.
    pub fn wants(&self, key: PrefixKey, tokens: &[TokenId], bytes: u64) -> bool {
        tokens.len() >= self.min_tokens && bytes <= self.budget && !self.covers(key, tokens)
    }

    pub fn queued(&mut self, key: PrefixKey, tokens: Vec<TokenId>, bytes: u64) {
        self.pending.push((key, tokens));
        self.pending_bytes += bytes;
    }

    /// A queued write ended (written or not).
    pub fn unqueue(&mut self, key: PrefixKey, tokens: &[TokenId], bytes: u64) {
        if let Some(i) = self
            .pending
            .iter()
            .position(|(k, t)| *k == key && t.as_slice() == tokens)
        {
            self.pending.swap_remove(i);
        }
        self.pending_bytes = self.pending_bytes.saturating_sub(bytes);
    }

    /// Index an entry written or found; returns the files to delete: the
    /// new one if another entry extends it, the entries it extends, and
    /// the least recently used past the budget.
    pub fn add(&mut self, e: DiskEntry) -> Vec<PathBuf> {
        let (key, tokens) = (e.head.key, &e.head.tokens);
        if self
            .entries
            .iter()
            .any(|x| x.head.key == key && x.path != e.path && x.head.tokens.starts_with(tokens))
        {
            return vec![e.path];
        }
        let mut gone = Vec::new();
        let mut left = Vec::new();
        self.entries.retain(|x| {
            let redundant = x.head.key == key && tokens.starts_with(&x.head.tokens);
            if redundant {
                left.push(x.head.clone());
                if x.path != e.path {
                    gone.push(x.path.clone());
                }
            }
            !redundant
        });
        self.note(&e.head, true);
        for h in &left {
            self.note(h, false);
        }
        self.entries.push(e);
        while self.bytes() > self.budget && self.entries.len() > 1 {
            let Some(i) = self.lru() else { break };
            let x = self.entries.swap_remove(i);
            self.note(&x.head, false);
            gone.push(x.path);
            self.counters.evictions += 1;
        }
        gone
    }

    fn lru(&self) -> Option<usize> {
        self.entries
            .iter()
            .enumerate()
            .min_by_key(|(_, x)| x.last_used)
            .map(|(i, _)| i)
    }

    /// The entry sharing the longest prefix with `prompt` under `key` and
    /// that length (at most `prompt.len() - 1`), when it reaches
    /// `min_tokens`; `reach` as for the host tier.
    pub fn best(
        &self,
        key: PrefixKey,
        prompt: &[TokenId],
        reach: impl Fn(&DiskEntry, usize) -> usize,
    ) -> Option<(usize, usize)> {
        if prompt.len() < 2 {
            return None;
        }
        let cap = prompt.len() - 1;
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.head.key == key)
            .map(|(i, e)| (i, reach(e, common_prefix(&e.head.tokens, prompt).min(cap))))
            .filter(|&(_, len)| len >= self.min_tokens)
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
    }

    /// Whether reading entry `i` back (its bytes at the measured read
    /// bandwidth) is cheaper than computing `tokens` at `token_ms` each
    /// (None: not measured yet, when a restore is assumed cheaper: it is a
    /// copy, the computation a forward pass).
    pub fn worth_reading(&self, i: usize, tokens: usize, token_ms: Option<f64>) -> bool {
        let Some(e) = self.entries.get(i) else {
            return false;
        };
        let read_ms = e.bytes as f64 / self.read_bw.unwrap_or(READ_BW_PRIOR);
        token_ms.is_none_or(|ms| read_ms < ms * tokens as f64)
    }

    /// Drop entry `i` from the index (its file is the caller's to delete).
    pub fn remove(&mut self, i: usize) -> Option<DiskEntry> {
        let x = (i < self.entries.len()).then(|| self.entries.swap_remove(i))?;
        self.note(&x.head, false);
        Some(x)
    }

    pub fn touch(&mut self, i: usize, now_ms: u64) {
        if let Some(e) = self.entries.get_mut(i) {
            e.last_used = now_ms;
        }
    }

    /// What the engine's stats publish.
    pub fn stats(&self) -> crate::deliver::stats::DiskStats {
        let c = &self.counters;
        crate::deliver::stats::DiskStats {
            enabled: true,
            bytes: self.bytes(),
            entries: self.len(),
            budget: self.budget,
            queued_bytes: self.pending_bytes,
            writes: c.writes,
            write_bytes: c.write_bytes,
            write_failures: c.write_failures,
            write_drops: c.write_drops,
            reads: c.reads,
            read_bytes: c.read_bytes,
            corrupt: c.corrupt,
            evictions: c.evictions,
            skipped: c.skipped,
            read_mb_s: self.read_bw.unwrap_or(0.0) / 1e3,
            write_mb_s: self.write_bw.unwrap_or(0.0) / 1e3,
        }
    }

    /// Fold a measured transfer into a bandwidth average.
    pub fn observe(bw: &mut Option<f64>, bytes: u64, ms: f64) {
        if ms <= 0.0 || bytes == 0 {
            return;
        }
        let x = bytes as f64 / ms;
        *bw = Some(bw.map_or(x, |b| 0.7 * b + 0.3 * x));
    }
}

/// Milliseconds since the epoch, for `last_used`.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn de(tokens: &[TokenId], bytes: u64, t: u64) -> DiskEntry {
        DiskEntry {
            head: Header::new(PrefixKey::default(), 0, tokens.to_vec(), &[]),
            path: PathBuf::from(format!("{tokens:?}")),
            bytes,
            last_used: t,
        }
    }

    #[test]
    fn the_index_keeps_the_longest_and_the_newest_within_budget() {
        let mut d = DiskTier::new(PathBuf::new(), 100, 2);
        assert!(d.add(de(&[1, 2], 10, 1)).is_empty());
        // An extension replaces the prefix it extends.
        assert_eq!(d.add(de(&[1, 2, 3], 10, 2)), vec![PathBuf::from("[1, 2]")]);
        // A prefix of an entry present is not kept.
        assert_eq!(d.add(de(&[1], 10, 3)), vec![PathBuf::from("[1]")]);
        assert!(d.covers(PrefixKey::default(), &[1, 2]));
        assert!(!d.covers(PrefixKey::default(), &[1, 2, 3, 4]));
        let (i, len) = d
            .best(PrefixKey::default(), &[1, 2, 3, 4], |_, m| m)
            .unwrap();
        assert_eq!((d.entry(i).unwrap().head.tokens.len(), len), (3, 3));
        // Past the budget the least recently used goes.
        d.add(de(&[5, 6], 60, 4));
        let gone = d.add(de(&[7, 8], 60, 5));
        assert_eq!(
            gone,
            vec![PathBuf::from("[1, 2, 3]"), PathBuf::from("[5, 6]")]
        );
        assert_eq!(d.len(), 1);
        assert_eq!(d.counters.evictions, 2);
        // Pending writes count as covered until reported.
        d.queued(PrefixKey::default(), vec![9, 9, 9], 5);
        assert!(!d.wants(PrefixKey::default(), &[9, 9], 5));
        d.unqueue(PrefixKey::default(), &[9, 9, 9], 5);
        assert!(d.wants(PrefixKey::default(), &[9, 9], 5));
        assert!(!d.wants(PrefixKey::default(), &[9], 5), "too short");
        assert!(
            !d.wants(PrefixKey::default(), &[9, 9], 500),
            "past the budget"
        );
    }

    #[test]
    fn blocks_are_reported_once_while_any_entry_holds_them() {
        let mut d = DiskTier::new(PathBuf::new(), 1 << 30, 2);
        d.track_blocks();
        let a: Vec<TokenId> = (0..130).collect();
        let mut b: Vec<TokenId> = (0..64).collect();
        b.extend(1000..1064);
        d.add(de(&a, 10, 1));
        let KvEvent::Stored {
            hashes,
            parent,
            tokens,
            ..
        } = d.events.remove(0)
        else {
            panic!("stored")
        };
        assert_eq!((hashes.len(), parent, tokens.len()), (2, None, 128));
        // A second entry shares the first block: only its second is new.
        d.add(de(&b, 10, 2));
        let KvEvent::Stored {
            hashes: hb, parent, ..
        } = d.events.remove(0)
        else {
            panic!("stored")
        };
        assert_eq!((hb.len(), parent), (1, Some(hashes[0])));
        // The first leaves: only its own second block goes.
        let i = (0..d.len())
            .find(|&i| d.entry(i).unwrap().head.tokens == a)
            .unwrap();
        d.remove(i);
        assert_eq!(
            d.events.remove(0),
            KvEvent::Removed {
                hashes: vec![hashes[1]]
            }
        );
        assert_eq!(d.block_snapshot().len(), 1, "the one entry's chain");
    }

    #[test]
    fn reading_is_chosen_by_measured_cost() {
        let mut d = DiskTier::new(PathBuf::new(), 1 << 30, 2);
        d.add(de(&[1, 2, 3], 10_000_000, 1));
        // Unmeasured prompt cost: read.
        assert!(d.worth_reading(0, 3, None));
        // 10 MB at 1 GB/s is 10 ms: against 3 tokens at 1 ms, compute;
        // against 3,000 tokens, read.
        assert!(!d.worth_reading(0, 3, Some(1.0)));
        assert!(d.worth_reading(0, 3000, Some(1.0)));
        // A slow disk measured: 10 MB at 1 MB/s is 10 s: compute.
        DiskTier::observe(&mut d.read_bw, 1_000_000, 1000.0);
        assert!(!d.worth_reading(0, 3000, Some(1.0)));
    }
}
