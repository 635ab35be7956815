//! The prefix cache: computed KV state kept after its sequence ends, reused
//! by later requests whose prompts start with the same tokens.
//!
//! Layout. A cache entry is a slot (a llama.cpp sequence id): an idle slot
//! whose cells still hold the tokens of the sequence that last ran there.
//! There are at most `max_seqs` entries, so a lookup is a scan of common
//! prefixes. The tokens an entry holds, and what the cells physically are
//! — which runs are shared between
//! slots, what clearing a slot frees, which leaf to evict — is the cell
//! map's business (`owner/kv/cells.rs`): with per-slot KV streams (the default,
//! measured 2.2× faster than the unified pool at 32 streams) every slot's
//! cells are its own; with `--kv-unified` a copy shares them.
//!
//! Reuse, in order of preference:
//! 1. **Takeover** (zero-copy): a new request takes the cached slot with the
//!    longest common prefix; the slot is truncated after it and the request
//!    computes only the rest.
//! 2. **Copy** from a live sequence (whose cells must never change under
//!    it) or an entry: llama.cpp copies a whole stream between slots, a
//!    fixed cost per copy (measured in docs/BENCHMARKS.md), so it is done
//!    only for a shared prefix of at least `copy_min` tokens. In a unified
//!    pool (`share`) a copy only adds the new sequence to the cells: any
//!    shared prefix is copied while a slot is free, and an entry is taken
//!    over (its tail destroyed) only when no slot is.
//!
//! Keyed by identity: an entry records the `PrefixKey` it was computed
//! under (model identity, adapters and their load generation, media
//! inputs); a lookup under any other key never matches. Positions are
//! always 0..n: a prefix matches only from the first token, exact token IDs.
//!
//! The cache owns its entries' cells: it is the only code that truncates,
//! copies or evicts them, and the ledger counts them as `cached`. An entry
//! is removed (taken over or evicted) before its slot is used again.

pub(crate) use super::key::PrefixKey;
use crate::owner::kv::cells::CellTrie;
use crate::runtime::TokenId;

/// An idle slot whose cells are kept; what they hold is the cell map's.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub slot: usize,
    pub key: PrefixKey,
    /// Owner tick of the last insertion or hit (LRU).
    pub last_used: u64,
}

/// How a new request can reuse computed state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// Take over a cached slot; keep its first `len` tokens.
    Takeover { slot: usize, len: usize },
    /// Copy a live sequence's slot, keep the first `len` tokens.
    Copy { src_slot: usize, len: usize },
}

impl Reuse {
    /// The tokens it reuses.
    pub fn len(&self) -> usize {
        match self {
            Reuse::Takeover { len, .. } | Reuse::Copy { len, .. } => *len,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct PrefixCache {
    entries: Vec<Entry>,
    pub enabled: bool,
    /// Shortest shared prefix worth a whole-stream copy.
    pub copy_min: usize,
    /// Copies share cells (unified KV pool): zero-copy.
    pub share: bool,
    /// Copies are made at all (not for a recurrent state, which a copy
    /// cannot cut short).
    pub copies: bool,
    /// Whether cells are reusable wherever the cell map says they are
    /// (full attention); otherwise `lookup`'s `reach` says how far.
    pub exact: bool,
}

impl PrefixCache {
    pub fn new(enabled: bool, copy_min: usize, share: bool) -> Self {
        PrefixCache {
            entries: Vec::new(),
            enabled,
            copy_min: copy_min.max(1),
            share,
            copies: true,
            exact: true,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.entries.iter().map(|e| e.slot)
    }

    pub fn contains_slot(&self, slot: usize) -> bool {
        self.entries.iter().any(|e| e.slot == slot)
    }

    /// Best reuse for `prompt` under `key`. At least the prompt's last token
    /// is always computed (its logits give the first sampled token).
    /// `cells`: what every slot holds; the copy source is the slot, running
    /// or cached, with the longest computed prefix of `prompt`.
    /// `fragments(slot)`: running a sequence in `slot` would split the busy
    /// slots into one more run (llama.cpp then makes one more pass over the
    /// weights every step, for the sequence's whole life: far dearer than
    /// recomputing a short prefix). Such a takeover is taken only as a copy
    /// source, and only for a prefix worth a copy.
    ///
    /// Retention: a takeover destroys the entry's tokens after the shared
    /// prefix. It is taken when it reuses at least as much as it destroys
    /// (a repeated prompt, the next turn of a conversation), when no slot is
    /// free (something must go anyway), or on the LRU entry (the next to
    /// go). Otherwise a long shared prefix is copied out of the entry (which
    /// stays), and a short one (a chat template's first tokens) is
    /// recomputed in a free slot.
    ///
    /// `reach(slot, m, takeover)`: how many of the first `m` tokens a slot
    /// holds a request can start from (`owner/kv/memstate.rs`: a sliding window
    /// or a recurrent state may not hold an earlier point; a takeover may
    /// rewind to a checkpoint, a copy may not).
    pub fn lookup(
        &self,
        key: PrefixKey,
        prompt: &[TokenId],
        cells: &CellTrie,
        fragments: impl Fn(usize) -> bool,
        free_slot: bool,
        reach: impl Fn(usize, usize, bool) -> usize,
    ) -> Option<Reuse> {
        if !self.enabled || prompt.len() < 2 {
            return None;
        }
        let cap = prompt.len() - 1;
        let copy_min = if self.share { 1 } else { self.copy_min };
        // Longest match; among equals the lowest slot.
        let longest = |it: &mut dyn Iterator<Item = (usize, usize)>| {
            it.filter(|&(len, _)| len > 0)
                .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
        };
        let matches: Vec<(usize, usize, usize)> = self
            .entries
            .iter()
            .filter(|e| e.key == key)
            .map(|e| {
                (
                    reach(e.slot, cells.common_prefix(e.slot, prompt).min(cap), true),
                    e.slot,
                    cells.len(e.slot),
                )
            })
            .collect();
        // The least recently used entry is the next to be evicted anyway:
        // reusing its prefix costs the cache nothing it would keep.
        let lru = self.lru_slot(&[]);
        let takeover = longest(
            &mut matches
                .iter()
                .filter(|&&(len, s, n)| {
                    let keeps = if self.share {
                        // A free slot makes the copy free of loss.
                        !free_slot
                    } else {
                        n - len <= len || !free_slot || Some(s) == lru
                    };
                    !fragments(s) && keeps
                })
                .map(|&(len, s, _)| (len, s)),
        );
        let copy = if !self.copies {
            None
        } else if self.exact {
            cells.longest(key, prompt).map(|(len, s)| (len.min(cap), s))
        } else {
            longest(
                &mut cells
                    .slots(key)
                    .map(|s| (reach(s, cells.common_prefix(s, prompt).min(cap), false), s)),
            )
        }
        .filter(|&(len, _)| len >= copy_min);
        match (takeover, copy) {
            (Some((len, _)), Some((clen, src))) if clen > len + copy_min => Some(Reuse::Copy {
                src_slot: src,
                len: clen,
            }),
            (Some((len, slot)), _) => Some(Reuse::Takeover { slot, len }),
            (None, Some((len, src))) => Some(Reuse::Copy { src_slot: src, len }),
            (None, None) => None,
        }
    }

    /// Remove and return the entry in `slot` (taken over or evicted).
    pub fn take(&mut self, slot: usize) -> Option<Entry> {
        let i = self.entries.iter().position(|e| e.slot == slot)?;
        Some(self.entries.swap_remove(i))
    }

    /// The least recently used entry's slot, `pinned` slots aside.
    pub fn lru_slot(&self, pinned: &[usize]) -> Option<usize> {
        self.entries
            .iter()
            .filter(|e| !pinned.contains(&e.slot))
            .min_by_key(|e| (e.last_used, e.slot))
            .map(|e| e.slot)
    }

    pub fn insert(&mut self, e: Entry) {
        debug_assert!(!self.contains_slot(e.slot));
        self.entries.push(e);
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(in crate::owner) fn key(m: u64) -> PrefixKey {
        PrefixKey {
            model: m,
            ..Default::default()
        }
    }

    /// Cache entries in these slots (oldest first), with their cells in a
    /// per-slot-stream cell map.
    fn cache_with(entries: &[(usize, u64, &[TokenId])]) -> (PrefixCache, CellTrie) {
        let mut c = PrefixCache::new(true, 8, false);
        let mut t = CellTrie::new(false);
        for (i, &(slot, m, toks)) in entries.iter().enumerate() {
            c.insert(Entry {
                slot,
                key: key(m),
                last_used: i as u64,
            });
            t.extend(slot, key(m), toks, 0);
        }
        (c, t)
    }

    #[test]
    fn longest_match_wins_and_the_last_prompt_token_is_always_computed() {
        let (c, t) = cache_with(&[(3, 1, &[1, 2, 3]), (5, 1, &[1, 2, 3, 4, 5, 6])]);
        assert_eq!(
            c.lookup(key(1), &[1, 2, 3, 4, 9], &t, |_| false, true, |_, m, _| m),
            Some(Reuse::Takeover { slot: 5, len: 4 })
        );
        // The whole prompt is cached: all but its last token are reused
        // (both entries give 3; the lower slot wins the tie).
        assert_eq!(
            c.lookup(key(1), &[1, 2, 3, 4], &t, |_| false, true, |_, m, _| m),
            Some(Reuse::Takeover { slot: 3, len: 3 })
        );
        assert_eq!(
            c.lookup(
                key(1),
                &[1, 2, 3, 4, 5, 6, 7],
                &t,
                |_| false,
                true,
                |_, m, _| m
            ),
            Some(Reuse::Takeover { slot: 5, len: 6 })
        );
    }

    #[test]
    fn other_identity_or_other_preceding_context_never_matches() {
        let (c, t) = cache_with(&[(0, 1, &[1, 2, 3, 4, 5])]);
        assert_eq!(
            c.lookup(
                key(2),
                &[1, 2, 3, 4, 5, 6],
                &t,
                |_| false,
                true,
                |_, m, _| m
            ),
            None
        );
        // Same suffix under a different first token: no match.
        assert_eq!(
            c.lookup(
                key(1),
                &[9, 2, 3, 4, 5, 6],
                &t,
                |_| false,
                true,
                |_, m, _| m
            ),
            None
        );
    }

    #[test]
    fn ties_prefer_the_lowest_slot_and_lru_is_the_oldest() {
        let (c, t) = cache_with(&[(7, 1, &[1, 2, 8]), (2, 1, &[1, 2, 9])]);
        assert_eq!(
            c.lookup(key(1), &[1, 2, 5], &t, |_| false, true, |_, m, _| m),
            Some(Reuse::Takeover { slot: 2, len: 2 })
        );
        assert_eq!(c.lru_slot(&[]), Some(7));
        assert_eq!(c.lru_slot(&[7]), Some(2));
    }

    #[test]
    fn copies_only_long_shared_prefixes_of_live_sequences() {
        let (c, mut t) = cache_with(&[(0, 1, &[1, 2])]);
        let long: Vec<TokenId> = (1..40).collect();
        let mut prompt = long.clone();
        prompt.push(99);
        t.extend(4, key(1), &long, 0); // a running sequence
        assert_eq!(
            c.lookup(key(1), &prompt, &t, |_| false, true, |_, m, _| m),
            Some(Reuse::Copy {
                src_slot: 4,
                len: 39
            })
        );
        // Shorter than copy_min: only the cached takeover.
        t.truncate(4, 5);
        assert_eq!(
            c.lookup(key(1), &prompt, &t, |_| false, true, |_, m, _| m),
            Some(Reuse::Takeover { slot: 0, len: 2 })
        );
    }

    #[test]
    fn a_fragmenting_takeover_becomes_a_copy_or_nothing() {
        let long: Vec<TokenId> = (1..40).collect();
        let (c, t) = cache_with(&[(9, 1, &long)]);
        let mut prompt = long.clone();
        prompt.push(99);
        // Slot 9 would split the busy slots: copy it (long prefix)...
        assert_eq!(
            c.lookup(key(1), &prompt, &t, |s| s == 9, true, |_, m, _| m),
            Some(Reuse::Copy {
                src_slot: 9,
                len: 39
            })
        );
        // ...or, for a short one, reuse nothing.
        assert_eq!(
            c.lookup(key(1), &[1, 2, 3, 7], &t, |s| s == 9, true, |_, m, _| m),
            None
        );
    }

    #[test]
    fn a_short_match_keeps_a_long_entry_while_a_slot_is_free() {
        let long: Vec<TokenId> = (1..60).collect();
        // (The other entry is older: the LRU, next to be evicted.)
        let (c, t) = cache_with(&[(5, 1, &[7, 7]), (0, 1, &long)]);
        // Only the first 3 tokens match: taking the slot over would destroy
        // 56 cached tokens to reuse 3. With a free slot: recompute.
        assert_eq!(
            c.lookup(key(1), &[1, 2, 3, 99, 98], &t, |_| false, true, |_, m, _| m),
            None
        );
        // No free slot: the entry goes anyway, so reuse what matches.
        assert_eq!(
            c.lookup(
                key(1),
                &[1, 2, 3, 99, 98],
                &t,
                |_| false,
                false,
                |_, m, _| m
            ),
            Some(Reuse::Takeover { slot: 0, len: 3 })
        );
        // The LRU entry is the next to go anyway: reuse what matches.
        let (lru, lt) = cache_with(&[(0, 1, &long), (5, 1, &[7, 7])]);
        assert_eq!(
            lru.lookup(key(1), &[1, 2, 3, 9], &lt, |_| false, true, |_, m, _| m),
            Some(Reuse::Takeover { slot: 0, len: 3 })
        );
        // A long shared prefix that is not most of the entry: copied out.
        let mut p: Vec<TokenId> = (1..20).collect();
        p.push(99);
        assert_eq!(
            c.lookup(key(1), &p, &t, |_| false, true, |_, m, _| m),
            Some(Reuse::Copy {
                src_slot: 0,
                len: 19
            })
        );
    }

    #[test]
    fn in_a_shared_pool_a_free_slot_makes_every_match_a_copy() {
        let long: Vec<TokenId> = (1..60).collect();
        let (mut c, t) = cache_with(&[(0, 1, &long)]);
        c.share = true;
        let p = [1, 2, 3, 99];
        // Zero-copy: even a short prefix is shared, and the entry is kept.
        assert_eq!(
            c.lookup(key(1), &p, &t, |_| false, true, |_, m, _| m),
            Some(Reuse::Copy {
                src_slot: 0,
                len: 3
            })
        );
        // No free slot: the entry is taken over.
        assert_eq!(
            c.lookup(key(1), &p, &t, |_| false, false, |_, m, _| m),
            Some(Reuse::Takeover { slot: 0, len: 3 })
        );
    }

    #[test]
    fn disabled_cache_finds_nothing() {
        let (mut c, t) = cache_with(&[(0, 1, &[1, 2, 3])]);
        c.enabled = false;
        assert_eq!(
            c.lookup(key(1), &[1, 2, 3, 4], &t, |_| false, true, |_, m, _| m),
            None
        );
        assert_eq!(c.take(0).map(|e| e.slot), Some(0));
        assert_eq!(c.len(), 0);
    }
}
