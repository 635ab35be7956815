//! The replica's set of full KV blocks, kept beside the cell map and turned
//! into [`KvEvent`]s (see `crate::owner::kv::events`). Pure: the cell map calls it on
//! every change to a slot's cells, with the tokens involved.

use std::collections::HashMap;

use crate::owner::kv::events::{block_hash, lora_id, KvEvent, BLOCK_TOKENS};
use crate::owner::kv::key::PrefixKey;
use crate::runtime::TokenId;

#[derive(Debug)]
struct SlotBlocks {
    key: PrefixKey,
    /// The hashes of the slot's full blocks, in order (a chain).
    blocks: Vec<u64>,
    /// Tokens after the last full block.
    partial: Vec<TokenId>,
}

#[derive(Debug, Default)]
pub(crate) struct BlockTracker {
    slots: HashMap<usize, SlotBlocks>,
    /// Block → slots holding it.
    refs: HashMap<u64, u32>,
    pending: Vec<KvEvent>,
}

impl BlockTracker {
    /// `slot` computed `tokens` after its cells.
    pub fn extend(&mut self, slot: usize, key: PrefixKey, tokens: &[TokenId]) {
        let s = self.slots.entry(slot).or_insert_with(|| SlotBlocks {
            key,
            blocks: Vec::new(),
            partial: Vec::new(),
        });
        s.partial.extend_from_slice(tokens);
        let mut run: Option<(Option<u64>, Vec<u64>, Vec<TokenId>)> = None;
        while s.partial.len() >= BLOCK_TOKENS {
            let block: Vec<TokenId> = s.partial.drain(..BLOCK_TOKENS).collect();
            let parent = s.blocks.last().copied();
            let h = block_hash(parent.unwrap_or(0), &s.key, &block);
            s.blocks.push(h);
            let r = self.refs.entry(h).or_insert(0);
            *r += 1;
            if *r == 1 {
                let e = run.get_or_insert_with(|| (parent, Vec::new(), Vec::new()));
                e.1.push(h);
                e.2.extend_from_slice(&block);
            } else if let Some((parent, hashes, tokens)) = run.take() {
                self.pending.push(stored(parent, hashes, tokens, &s.key));
            }
        }
        if let Some((parent, hashes, tokens)) = run {
            self.pending.push(stored(parent, hashes, tokens, &s.key));
        }
    }

    /// `slot` keeps its first `len` cells; `kept_tail` are its tokens from
    /// the last full block boundary at or before `len` up to `len`.
    pub fn truncate(&mut self, slot: usize, len: usize, kept_tail: &[TokenId]) {
        let Some(s) = self.slots.get_mut(&slot) else {
            return;
        };
        let keep = len / BLOCK_TOKENS;
        let held = s.blocks.len() * BLOCK_TOKENS + s.partial.len();
        let mut gone = Vec::new();
        while s.blocks.len() > keep {
            let h = s.blocks.pop().expect("len > keep");
            if let Some(r) = self.refs.get_mut(&h) {
                *r -= 1;
                if *r == 0 {
                    self.refs.remove(&h);
                    gone.push(h);
                }
            }
        }
        if len < held {
            s.partial.clear();
            s.partial.extend_from_slice(kept_tail);
        }
        if len == 0 {
            self.slots.remove(&slot);
        }
        if !gone.is_empty() {
            gone.reverse();
            self.pending.push(KvEvent::Removed { hashes: gone });
        }
    }

    /// `dst` (empty) now holds `src`'s first `len` cells; `tail` as in
    /// [`Self::truncate`].
    pub fn copy(&mut self, src: usize, dst: usize, len: usize, tail: &[TokenId]) {
        let Some(s) = self.slots.get(&src) else {
            return;
        };
        let blocks: Vec<u64> = s.blocks[..(len / BLOCK_TOKENS).min(s.blocks.len())].to_vec();
        let key = s.key;
        for h in &blocks {
            *self.refs.entry(*h).or_insert(0) += 1;
        }
        self.slots.insert(
            dst,
            SlotBlocks {
                key,
                blocks,
                partial: tail.to_vec(),
            },
        );
    }

    pub fn take_events(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.pending)
    }

    /// Every block now, as a `Cleared` then chains of `Stored` (each block
    /// once); `tokens(slot)` gives a slot's tokens. Pending events are
    /// dropped (the snapshot covers them).
    pub fn snapshot(&mut self, tokens: impl Fn(usize) -> Vec<TokenId>) -> Vec<KvEvent> {
        self.pending.clear();
        let mut out = vec![KvEvent::Cleared];
        let mut seen = std::collections::HashSet::new();
        let mut slots: Vec<_> = self.slots.iter().collect();
        slots.sort_by_key(|(s, _)| **s);
        for (&slot, s) in slots {
            let toks = tokens(slot);
            let mut run: Option<(Option<u64>, Vec<u64>, Vec<TokenId>)> = None;
            for (i, &h) in s.blocks.iter().enumerate() {
                let parent = i.checked_sub(1).map(|p| s.blocks[p]);
                if seen.insert(h) {
                    let e = run.get_or_insert_with(|| (parent, Vec::new(), Vec::new()));
                    e.1.push(h);
                    e.2.extend_from_slice(&toks[i * BLOCK_TOKENS..(i + 1) * BLOCK_TOKENS]);
                } else if let Some((p, hs, ts)) = run.take() {
                    out.push(stored(p, hs, ts, &s.key));
                }
            }
            if let Some((p, hs, ts)) = run {
                out.push(stored(p, hs, ts, &s.key));
            }
        }
        out
    }

    /// Blocks held (tests and the resync).
    #[cfg(test)]
    pub fn blocks(&self) -> std::collections::HashSet<u64> {
        self.refs.keys().copied().collect()
    }
}

fn stored(parent: Option<u64>, hashes: Vec<u64>, tokens: Vec<TokenId>, key: &PrefixKey) -> KvEvent {
    KvEvent::Stored {
        hashes,
        parent,
        tokens,
        lora_id: lora_id(key),
    }
}
