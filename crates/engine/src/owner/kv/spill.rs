//! The prefix cache's second tier: KV state of evicted cache entries, saved
//! to host memory through llama.cpp's per-sequence state API, and restored
//! into a free slot when a later prompt starts with the same tokens.
//!
//! Pure bookkeeping: the owner saves (`Backend::save_slot`) before it clears
//! an evicted slot and restores (`Backend::restore_slot`) at admission; this
//! module only keeps the bytes, keyed like the first tier (identity key +
//! exact tokens from position 0), within its own byte budget, evicting the
//! least recently used entry first.
//!
//! Why it pays on the CPU: restoring 1,500 tokens of state is a copy of
//! ~35 MB; recomputing them is ~2.4 s (docs/BENCHMARKS.md [6/8]).

use crate::owner::kv::key::{common_prefix, PrefixKey};
use crate::runtime::TokenId;

#[derive(Debug)]
pub(crate) struct Spilled {
    pub key: PrefixKey,
    pub tokens: Vec<TokenId>,
    pub data: Vec<u8>,
    pub last_used: u64,
    /// Lowest position every layer held when saved (a sliding window's
    /// `lo`; 0 for full attention).
    pub lo: usize,
    /// Pinned (`owner/pins.rs`): never evicted before `until`, counted in
    /// the pin budget instead of the tier's. None: an ordinary entry.
    pub pin: Option<PinHold>,
}

/// How long a pinned entry is held: until `until`, which each use moves
/// to `ttl` from then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PinHold {
    pub until: std::time::Instant,
    pub ttl: std::time::Duration,
}

#[derive(Debug, Default)]
pub(crate) struct HostTier {
    entries: Vec<Spilled>,
    /// Most bytes held (0: the tier is off).
    pub budget: u64,
    /// Bytes of preempted sequences' state (`owner/preempt.rs`), held in
    /// the same budget before any cache entry (and kept even with the
    /// prefix cache off: `park_budget`).
    pub parked: u64,
    pub park_budget: u64,
    /// Shortest prefix worth saving or restoring, tokens.
    pub min_tokens: usize,
    /// Most bytes pinned entries may hold (0: no pins).
    pub pin_budget: u64,
}

impl HostTier {
    pub fn new(budget: u64, min_tokens: usize) -> Self {
        HostTier {
            entries: Vec::new(),
            budget,
            parked: 0,
            park_budget: budget,
            min_tokens: min_tokens.max(1),
            pin_budget: 0,
        }
    }

    /// Room for a preempted sequence's `size` bytes, evicting cache
    /// entries (least recently used first) as needed; None when even an
    /// empty tier cannot hold them (the sequence is then recomputed).
    /// The entries evicted (for the disk tier).
    pub fn make_room(&mut self, size: u64) -> Option<Vec<Spilled>> {
        if self.parked + size > self.park_budget {
            return None;
        }
        let mut out = Vec::new();
        while self.bytes() + self.parked + size > self.park_budget {
            let Some(i) = self.lru() else { break };
            out.push(self.entries.swap_remove(i));
        }
        self.parked += size;
        Some(out)
    }

    /// A preempted sequence's bytes leave (resumed or ended).
    pub fn unpark(&mut self, size: u64) {
        self.parked = self.parked.saturating_sub(size);
    }

    fn lru(&self) -> Option<usize> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, x)| x.pin.is_none())
            .min_by_key(|(_, x)| x.last_used)
            .map(|(i, _)| i)
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// Bytes of the ordinary (unpinned) entries: the tier's budget's.
    pub fn bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.pin.is_none())
            .map(|e| e.data.len() as u64)
            .sum()
    }

    /// Entries, pinned included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Pinned entries and their bytes.
    pub fn pinned(&self) -> (usize, u64) {
        self.entries
            .iter()
            .filter(|e| e.pin.is_some())
            .fold((0, 0), |(n, b), e| (n + 1, b + e.data.len() as u64))
    }

    /// The pinned entry holding `tokens` (or more after them) under `key`:
    /// its hold moves to `ttl` from `now` (at least); true when there is one.
    pub fn refresh_pin(
        &mut self,
        key: PrefixKey,
        tokens: &[TokenId],
        now: std::time::Instant,
        ttl: std::time::Duration,
    ) -> bool {
        let mut found = false;
        for e in &mut self.entries {
            if let Some(p) = e
                .pin
                .as_mut()
                .filter(|_| e.key == key && e.tokens.starts_with(tokens))
            {
                p.ttl = p.ttl.max(ttl);
                p.until = p.until.max(now + p.ttl);
                found = true;
            }
        }
        found
    }

    /// Keep a pinned entry within the pin budget (entries it extends are
    /// replaced; pins never evict pins); the entry back when it is not
    /// pinned or the budget has no room.
    pub fn pin(&mut self, mut e: Spilled) -> Result<(), Spilled> {
        let size = e.data.len() as u64;
        let redundant = |x: &Spilled| x.key == e.key && e.tokens.starts_with(&x.tokens);
        let freed: u64 = self
            .entries
            .iter()
            .filter(|x| x.pin.is_some() && redundant(x))
            .map(|x| x.data.len() as u64)
            .sum();
        if e.pin.is_none() || self.pinned().1 - freed + size > self.pin_budget {
            return Err(e);
        }
        let until = self
            .entries
            .iter()
            .filter(|x| redundant(x))
            .filter_map(|x| x.pin.map(|p| p.until))
            .max();
        let (key, tokens) = (e.key, std::mem::take(&mut e.tokens));
        self.entries
            .retain(|x| !(x.key == key && tokens.starts_with(&x.tokens)));
        e.tokens = tokens;
        if let (Some(p), Some(u)) = (e.pin.as_mut(), until) {
            p.until = p.until.max(u);
        }
        self.entries.push(e);
        Ok(())
    }

    /// Pins whose hold has passed become ordinary entries (then kept or
    /// evicted like any: `trim`). Returns how many, and the earliest hold
    /// still running.
    pub fn expire(&mut self, now: std::time::Instant) -> (usize, Option<std::time::Instant>) {
        let mut n = 0;
        let mut next: Option<std::time::Instant> = None;
        for e in &mut self.entries {
            match e.pin {
                Some(p) if p.until <= now => {
                    e.pin = None;
                    n += 1;
                }
                Some(p) => next = Some(next.map_or(p.until, |t| t.min(p.until))),
                None => {}
            }
        }
        (n, next)
    }

    /// Keep `e`, evicting least recently used entries to fit the budget.
    /// An entry whose tokens another entry already covers, or too short,
    /// is dropped. Returns what did not stay and is not covered (the
    /// entries evicted, or `e` itself when it cannot fit): the disk tier's.
    pub fn insert(&mut self, e: Spilled) -> Vec<Spilled> {
        // A pinned entry (back from a restore): pinned again, or, with no
        // room after all, an ordinary one.
        let mut e = match self.pin(e) {
            Ok(()) => return Vec::new(),
            Err(e) => e,
        };
        e.pin = None;
        let size = e.data.len() as u64;
        if e.tokens.len() < self.min_tokens {
            return Vec::new();
        }
        // An entry that is a prefix of the new one is redundant; the new one
        // is redundant if an existing entry extends it.
        if self
            .entries
            .iter()
            .any(|x| x.key == e.key && x.tokens.starts_with(&e.tokens))
        {
            return Vec::new();
        }
        if !self.enabled() || size > self.budget || self.parked + size > self.budget {
            return vec![e];
        }
        self.entries
            .retain(|x| x.pin.is_some() || !(x.key == e.key && e.tokens.starts_with(&x.tokens)));
        let mut out = Vec::new();
        while self.bytes() + self.parked + size > self.budget {
            let Some(i) = self.lru() else {
                break;
            };
            out.push(self.entries.swap_remove(i));
        }
        self.entries.push(e);
        out
    }

    /// Hold `e` (read back from the disk tier) until an admission restores
    /// it, even past the budget; `trim` evicts what the budget cannot keep.
    pub fn stage(&mut self, e: Spilled) {
        self.entries
            .retain(|x| !(x.key == e.key && e.tokens.starts_with(&x.tokens)));
        self.entries.push(e);
    }

    /// Every entry, out (shutdown: to the disk tier).
    pub fn drain(&mut self) -> Vec<Spilled> {
        std::mem::take(&mut self.entries)
    }

    /// Evict least recently used entries until the tier fits its budget.
    pub fn trim(&mut self) -> Vec<Spilled> {
        let mut out = Vec::new();
        while !self.entries.is_empty() && self.bytes() + self.parked > self.budget {
            let Some(i) = self.lru() else { break };
            out.push(self.entries.swap_remove(i));
        }
        out
    }

    /// The entry sharing the longest prefix with `prompt` under `key`, and
    /// that length (at most `prompt.len() - 1`: the last prompt token is
    /// always computed), when it reaches `min_tokens`. `reach(entry, m)`:
    /// how much of a shared `m` the saved state can restart from (a window
    /// or recurrent state may not hold the point; `owner/kv/memstate.rs`).
    pub fn best(
        &self,
        key: PrefixKey,
        prompt: &[TokenId],
        reach: impl Fn(&Spilled, usize) -> usize,
    ) -> Option<(usize, usize)> {
        if self.entries.is_empty() || prompt.len() < 2 {
            return None;
        }
        let cap = prompt.len() - 1;
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.key == key)
            .map(|(i, e)| (i, reach(e, common_prefix(&e.tokens, prompt).min(cap))))
            .filter(|&(_, len)| len >= self.min_tokens)
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
    }

    /// Take an entry out (to restore it; `insert` it back after).
    pub fn take(&mut self, i: usize) -> Option<Spilled> {
        (i < self.entries.len()).then(|| self.entries.swap_remove(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(tokens: &[TokenId], bytes: usize, t: u64) -> Spilled {
        Spilled {
            key: PrefixKey::default(),
            tokens: tokens.to_vec(),
            data: vec![0; bytes],
            last_used: t,
            lo: 0,
            pin: None,
        }
    }

    #[test]
    fn longest_match_by_key_and_lru_within_budget() {
        let mut h = HostTier::new(100, 2);
        h.insert(sp(&[1, 2, 3, 4], 40, 1));
        h.insert(sp(&[1, 2, 9], 40, 2));
        assert_eq!(h.len(), 2);
        // Longest common prefix, capped below the prompt's last token.
        let (i, len) = h
            .best(PrefixKey::default(), &[1, 2, 3, 4, 5], |_, m| m)
            .unwrap();
        assert_eq!(len, 4);
        assert_eq!(h.entries[i].tokens, vec![1, 2, 3, 4]);
        assert_eq!(
            h.best(PrefixKey::default(), &[1, 2, 3, 4], |_, m| m)
                .unwrap()
                .1,
            3
        );
        // A suffix under a different first token is a miss; so is another key.
        assert!(h
            .best(PrefixKey::default(), &[7, 2, 3, 4, 5], |_, m| m)
            .is_none());
        let other = PrefixKey {
            adapters: 1,
            ..Default::default()
        };
        assert!(h.best(other, &[1, 2, 3, 4, 5], |_, m| m).is_none());
        // Over budget: the least recently used goes.
        assert_eq!(h.insert(sp(&[5, 6, 7], 40, 3)).len(), 1);
        assert!(h.bytes() <= 100);
        // [1, 2, 3, 4] (the oldest) is gone: only [1, 2, 9]'s two tokens match.
        assert_eq!(
            h.best(PrefixKey::default(), &[1, 2, 3, 4, 5], |_, m| m)
                .unwrap()
                .1,
            2
        );
        // Too big or too short: not kept.
        assert_eq!(
            h.insert(sp(&[8, 8, 8], 101, 4)).len(),
            1,
            "too big: for the disk"
        );
        h.insert(sp(&[8], 1, 5));
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn prefixes_of_each_other_are_kept_once() {
        let mut h = HostTier::new(1000, 2);
        h.insert(sp(&[1, 2], 10, 1));
        h.insert(sp(&[1, 2, 3], 10, 2));
        assert_eq!(h.len(), 1, "the longer one covers the shorter");
        h.insert(sp(&[1, 2], 10, 3));
        assert_eq!(h.len(), 1);
        assert_eq!(h.entries[0].tokens, vec![1, 2, 3]);
    }

    #[test]
    fn pins_hold_past_eviction_until_they_expire() {
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let hold = |s: u64| {
            Some(PinHold {
                until: t0 + Duration::from_secs(s),
                ttl: Duration::from_secs(s),
            })
        };
        let mut h = HostTier::new(50, 2);
        h.pin_budget = 100;
        let pinned = Spilled {
            pin: hold(10),
            ..sp(&[1, 2, 3], 60, 1)
        };
        assert!(h.pin(pinned).is_ok());
        assert_eq!(
            (h.pinned(), h.bytes()),
            ((1, 60), 0),
            "outside the tier's budget"
        );
        // Ordinary entries come and go; the pin stays.
        h.insert(sp(&[4, 5], 40, 2));
        h.insert(sp(&[6, 7], 40, 3));
        assert_eq!(h.len(), 2);
        assert!(h
            .best(PrefixKey::default(), &[1, 2, 3, 9], |_, m| m)
            .is_some());
        // An ordinary entry it extends does not replace it.
        h.insert(sp(&[1, 2], 10, 4));
        assert_eq!(h.pinned().0, 1);
        // No room in the pin budget: the entry comes back.
        assert!(h
            .pin(Spilled {
                pin: hold(10),
                ..sp(&[8, 8], 60, 5)
            })
            .is_err());
        // A use moves the hold; past it the pin is an ordinary entry.
        assert!(h.refresh_pin(PrefixKey::default(), &[1, 2], t0, Duration::from_secs(20)));
        assert_eq!(
            h.expire(t0 + Duration::from_secs(15)),
            (0, Some(t0 + Duration::from_secs(20)))
        );
        assert_eq!(h.expire(t0 + Duration::from_secs(21)).0, 1);
        assert_eq!(h.pinned(), (0, 0));
        assert!(!h.trim().is_empty(), "then evicted like any");
        assert!(h.bytes() <= 50);
    }

    #[test]
    fn a_staged_entry_stays_past_the_budget_until_trimmed() {
        let mut h = HostTier::new(50, 2);
        h.insert(sp(&[1, 2], 40, 1));
        h.stage(sp(&[5, 6, 7], 100, 2));
        assert_eq!(h.len(), 2);
        assert!(h
            .best(PrefixKey::default(), &[5, 6, 7, 8], |_, m| m)
            .is_some());
        let out = h.trim();
        assert_eq!(
            out.len(),
            2,
            "both go: the staged one alone is past the budget"
        );
        assert!(h.bytes() <= 50);
        // A tier that is off still holds a staged entry until trimmed.
        let mut off = HostTier::new(0, 2);
        off.stage(sp(&[5, 6, 7], 100, 2));
        assert!(off
            .best(PrefixKey::default(), &[5, 6, 7, 8], |_, m| m)
            .is_some());
        assert_eq!(off.trim().len(), 1);
    }
}
