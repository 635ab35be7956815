//! The cell map: a radix tree over token IDs whose nodes are runs of KV
//! cells, shared by reference. Pure (no FFI); the owner thread mirrors every
//! change it makes to a slot's cells here, so this is the one account of
//! what the KV cache physically holds.
//!
//! Every slot (a live sequence or a prefix-cache entry) holds one path from
//! its key's root: the tokens in its cells, positions 0..len. A node's
//! `refs` counts the slots whose path runs through it, so:
//! - a node's cells exist as long as `refs > 0`, and are counted once
//!   (`cells`), however many slots read them;
//! - clearing or truncating a slot frees only the nodes no other slot
//!   references (its private cells);
//! - eviction (`lru_leaf`) cuts the least recently used leaf whose slots are
//!   all idle; a node that a live sequence reads is never a candidate.
//!
//! Sharing follows the runtime. With llama.cpp's unified KV pool a copy
//! adds the destination sequence to the source's cells (zero-copy): `copy`
//! references the source's nodes. With per-slot KV streams a copy
//! duplicates the cells into the destination's stream: `copy` makes a new
//! private path with the same tokens. A radix tree of *physical* runs may
//! therefore hold two sibling runs with the same tokens (two copies of the
//! same prefix computed separately); `longest` searches them all.
//!
//! Keyed by identity: each `PrefixKey` (model, adapters, media) has its own
//! root, so a lookup under another key never matches; a match always starts
//! at position 0, so a suffix under a different preceding context misses.

use std::collections::{BTreeMap, HashSet};

use crate::owner::kv::blocks::BlockTracker;
use crate::owner::kv::events::{KvEvent, BLOCK_TOKENS};
use crate::owner::kv::key::{common_prefix, PrefixKey};
use crate::runtime::TokenId;

/// One slot of the cell map (`EngineHandle::cell_map`).
#[derive(Debug, Clone)]
pub struct CellSlot {
    pub slot: usize,
    /// The prefix identity its cells were computed under (model, adapters,
    /// media hashes): part of every KV event block hash.
    pub key: [u64; 3],
    pub tokens: Vec<TokenId>,
}

const NONE: usize = usize::MAX;

#[derive(Debug, Clone)]
struct Node {
    /// `NONE` for a root.
    parent: usize,
    /// Position of the run's first cell.
    start: usize,
    run: Vec<TokenId>,
    children: Vec<usize>,
    /// Slots whose path runs through this node (0: freed).
    refs: u32,
    /// Tick of the last extension or copy through this node.
    last_used: u64,
}

#[derive(Debug, Clone, Copy)]
struct Path {
    key: PrefixKey,
    end: usize,
    len: usize,
}

#[derive(Debug)]
pub(crate) struct CellTrie {
    nodes: Vec<Node>,
    free: Vec<usize>,
    roots: Vec<(PrefixKey, usize)>,
    /// slot → its path (absent: the slot holds no cells).
    paths: BTreeMap<usize, Path>,
    /// Copies share cells (unified KV pool) or duplicate them.
    share: bool,
    cells: u64,
    /// Full blocks for KV events (`--kv-events`; None: not tracked).
    blocks: Option<BlockTracker>,
}

impl CellTrie {
    pub fn new(share: bool) -> Self {
        CellTrie {
            nodes: Vec::new(),
            free: Vec::new(),
            roots: Vec::new(),
            paths: BTreeMap::new(),
            share,
            cells: 0,
            blocks: None,
        }
    }

    /// Track full blocks from now on (the cell map must be empty).
    pub fn track_blocks(&mut self) {
        debug_assert!(self.paths.is_empty());
        self.blocks = Some(BlockTracker::default());
    }

    /// Block events since the last call (empty when not tracked).
    pub fn take_block_events(&mut self) -> Vec<KvEvent> {
        self.blocks
            .as_mut()
            .map(|b| b.take_events())
            .unwrap_or_default()
    }

    /// Every slot holding cells, with its tokens.
    pub fn dump(&self) -> Vec<CellSlot> {
        self.paths
            .iter()
            .map(|(&slot, p)| CellSlot {
                slot,
                key: [p.key.model, p.key.adapters, p.key.media],
                tokens: self.tokens(slot),
            })
            .collect()
    }

    /// `Cleared`, then every block held (a resync).
    pub fn block_snapshot(&mut self) -> Vec<KvEvent> {
        let Some(mut b) = self.blocks.take() else {
            return Vec::new();
        };
        let ev = b.snapshot(|s| self.tokens(s));
        self.blocks = Some(b);
        ev
    }

    /// A slot's tokens from the block boundary at or before `len` to `len`.
    fn block_tail(&self, slot: usize, len: usize) -> Vec<TokenId> {
        if self.blocks.is_none() || len.is_multiple_of(BLOCK_TOKENS) {
            return Vec::new();
        }
        let t = self.tokens(slot);
        t[(len / BLOCK_TOKENS) * BLOCK_TOKENS..len.min(t.len())].to_vec()
    }

    /// Cells held, each counted once.
    pub fn cells(&self) -> u64 {
        self.cells
    }

    /// Slots holding cells under `key`.
    pub fn slots(&self, key: PrefixKey) -> impl Iterator<Item = usize> + '_ {
        self.paths
            .iter()
            .filter(move |(_, p)| p.key == key && p.len > 0)
            .map(|(&s, _)| s)
    }

    /// Cells in a slot's path (0 when it holds none).
    pub fn len(&self, slot: usize) -> usize {
        self.paths.get(&slot).map_or(0, |p| p.len)
    }

    /// A slot's nodes, root side first.
    fn runs(&self, slot: usize) -> Vec<usize> {
        let mut runs = Vec::new();
        if let Some(p) = self.paths.get(&slot) {
            let mut n = p.end;
            while self.nodes[n].parent != NONE {
                runs.push(n);
                n = self.nodes[n].parent;
            }
        }
        runs.reverse();
        runs
    }

    /// The tokens in a slot's cells, positions 0..len.
    pub fn tokens(&self, slot: usize) -> Vec<TokenId> {
        self.runs(slot)
            .iter()
            .flat_map(|&n| self.nodes[n].run.iter().copied())
            .collect()
    }

    /// How many of `prompt`'s first tokens `slot`'s cells hold.
    pub fn common_prefix(&self, slot: usize, prompt: &[TokenId]) -> usize {
        let mut len = 0;
        for n in self.runs(slot) {
            let run = &self.nodes[n].run;
            let m = common_prefix(run, &prompt[len.min(prompt.len())..]);
            len += m;
            if m < run.len() {
                break;
            }
        }
        len
    }

    fn alloc(&mut self, n: Node) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i] = n;
                i
            }
            None => {
                self.nodes.push(n);
                self.nodes.len() - 1
            }
        }
    }

    fn root(&mut self, key: PrefixKey) -> usize {
        if let Some(&(_, r)) = self.roots.iter().find(|(k, _)| *k == key) {
            return r;
        }
        let r = self.alloc(Node {
            parent: NONE,
            start: 0,
            run: Vec::new(),
            children: Vec::new(),
            refs: 0,
            last_used: 0,
        });
        self.roots.push((key, r));
        r
    }

    fn touch(&mut self, mut n: usize, tick: u64) {
        while n != NONE {
            let node = &mut self.nodes[n];
            node.last_used = node.last_used.max(tick);
            n = node.parent;
        }
    }

    /// `slot` computed `tokens` after its current cells (under `key`).
    pub fn extend(&mut self, slot: usize, key: PrefixKey, tokens: &[TokenId], tick: u64) {
        if tokens.is_empty() {
            return;
        }
        if let Some(b) = &mut self.blocks {
            b.extend(slot, key, tokens);
        }
        let (end, len) = match self.paths.get(&slot) {
            Some(p) => {
                debug_assert!(p.key == key, "a slot's cells are under one key");
                (p.end, p.len)
            }
            None => (self.root(key), 0),
        };
        let n = &mut self.nodes[end];
        let end = if n.parent != NONE && n.refs == 1 && n.children.is_empty() {
            // A private leaf: the run grows in place.
            n.run.extend_from_slice(tokens);
            end
        } else {
            let child = self.alloc(Node {
                parent: end,
                start: len,
                run: tokens.to_vec(),
                children: Vec::new(),
                refs: 1,
                last_used: tick,
            });
            self.nodes[end].children.push(child);
            child
        };
        self.cells += tokens.len() as u64;
        self.paths.insert(
            slot,
            Path {
                key,
                end,
                len: len + tokens.len(),
            },
        );
        self.touch(end, tick);
    }

    /// Split `n` after `keep` of its cells; returns the upper part (the
    /// lower part keeps the id, so paths ending at `n` still end there).
    fn split(&mut self, n: usize, keep: usize) -> usize {
        let node = &self.nodes[n];
        debug_assert!(keep > 0 && keep < node.run.len());
        let upper = Node {
            parent: node.parent,
            start: node.start,
            run: node.run[..keep].to_vec(),
            children: vec![n],
            refs: node.refs,
            last_used: node.last_used,
        };
        let parent = node.parent;
        let u = self.alloc(upper);
        for c in &mut self.nodes[parent].children {
            if *c == n {
                *c = u;
            }
        }
        let node = &mut self.nodes[n];
        node.parent = u;
        node.start += keep;
        node.run.drain(..keep);
        u
    }

    /// One slot stops reading `n`; frees it when nobody else does.
    fn release(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.refs -= 1;
        if node.refs > 0 {
            return;
        }
        debug_assert!(node.children.is_empty(), "children outlive no parent");
        self.cells -= node.run.len() as u64;
        node.run = Vec::new();
        let parent = node.parent;
        self.nodes[parent].children.retain(|&c| c != n);
        self.free.push(n);
    }

    /// `slot` keeps its first `len` cells.
    pub fn truncate(&mut self, slot: usize, len: usize) {
        let Some(p) = self.paths.get(&slot).copied() else {
            return;
        };
        if len >= p.len {
            return;
        }
        let tail = self.block_tail(slot, len);
        if let Some(b) = &mut self.blocks {
            b.truncate(slot, len, &tail);
        }
        let mut end = p.end;
        while self.nodes[end].parent != NONE && self.nodes[end].start >= len {
            let parent = self.nodes[end].parent;
            self.release(end);
            end = parent;
        }
        let node = &self.nodes[end];
        if node.parent != NONE && node.start + node.run.len() > len {
            let keep = len - node.start;
            if node.refs == 1 && node.children.is_empty() {
                self.cells -= (node.run.len() - keep) as u64;
                self.nodes[end].run.truncate(keep);
            } else {
                let upper = self.split(end, keep);
                self.release(end);
                end = upper;
            }
        }
        if len == 0 {
            self.paths.remove(&slot);
        } else {
            self.paths.insert(slot, Path { end, len, ..p });
        }
    }

    pub fn clear(&mut self, slot: usize) {
        self.truncate(slot, 0);
    }

    /// `dst` (empty) gets the first `len` cells of `src`: shared by
    /// reference, or duplicated (see the module note).
    pub fn copy(&mut self, src: usize, dst: usize, len: usize, tick: u64) {
        debug_assert!(self.len(dst) == 0, "a copy goes into an empty slot");
        let Some(p) = self.paths.get(&src).copied() else {
            return;
        };
        let len = len.min(p.len);
        if len == 0 {
            return;
        }
        if !self.share {
            let tokens = self.tokens(src);
            self.extend(dst, p.key, &tokens[..len], tick);
            return;
        }
        let tail = self.block_tail(src, len);
        if let Some(b) = &mut self.blocks {
            b.copy(src, dst, len, &tail);
        }
        let mut n = p.end;
        while self.nodes[n].start >= len {
            n = self.nodes[n].parent;
        }
        let node = &self.nodes[n];
        if node.start + node.run.len() > len {
            n = self.split(n, len - node.start);
        }
        let mut m = n;
        while self.nodes[m].parent != NONE {
            self.nodes[m].refs += 1;
            m = self.nodes[m].parent;
        }
        self.paths.insert(dst, Path { end: n, len, ..p });
        self.touch(n, tick);
    }

    /// Whether `slot`'s path runs through node `n`.
    fn through(&self, slot: usize, n: usize) -> bool {
        let Some(p) = self.paths.get(&slot) else {
            return false;
        };
        let mut m = p.end;
        while m != NONE {
            if m == n {
                return true;
            }
            m = self.nodes[m].parent;
        }
        false
    }

    /// The longest cached prefix of `prompt` under `key`: (its length, the
    /// lowest slot holding it).
    pub fn longest(&self, key: PrefixKey, prompt: &[TokenId]) -> Option<(usize, usize)> {
        let &(_, root) = self.roots.iter().find(|(k, _)| *k == key)?;
        let mut best = (0, NONE);
        let mut stack = vec![(root, 0usize)];
        while let Some((n, depth)) = stack.pop() {
            for &c in &self.nodes[n].children {
                let run = &self.nodes[c].run;
                let m = common_prefix(run, &prompt[depth.min(prompt.len())..]);
                if m == 0 {
                    continue;
                }
                if depth + m > best.0 {
                    best = (depth + m, c);
                }
                if m == run.len() {
                    stack.push((c, depth + m));
                }
            }
        }
        let (len, node) = best;
        if len == 0 {
            return None;
        }
        let slot = self
            .paths
            .keys()
            .copied()
            .find(|&s| self.through(s, node))?;
        Some((len, slot))
    }

    /// Cells clearing `slot` would free (those no other slot reads).
    pub fn private_cells(&self, slot: usize) -> u64 {
        let Some(p) = self.paths.get(&slot) else {
            return 0;
        };
        let mut n = p.end;
        let mut cells = 0;
        while self.nodes[n].parent != NONE {
            if self.nodes[n].refs == 1 {
                cells += self.nodes[n].run.len() as u64;
            }
            n = self.nodes[n].parent;
        }
        cells
    }

    /// Cells that no slot for which `live` holds reads (the prefix cache's
    /// evictable cells when `live` names the running sequences).
    pub fn idle_cells(&self, live: impl Fn(usize) -> bool) -> u64 {
        let mut read = HashSet::new();
        for (&slot, p) in &self.paths {
            if !live(slot) {
                continue;
            }
            let mut n = p.end;
            while self.nodes[n].parent != NONE && read.insert(n) {
                n = self.nodes[n].parent;
            }
        }
        let live_cells: u64 = read.iter().map(|&n| self.nodes[n].run.len() as u64).sum();
        self.cells - live_cells
    }

    /// The eviction candidate: the least recently used leaf none of whose
    /// slots is `protected` (running, or a copy source). Returns where its
    /// slots are cut (the leaf's first position) and the slots.
    pub fn lru_leaf(&self, protected: impl Fn(usize) -> bool) -> Option<(usize, Vec<usize>)> {
        let mut best: Option<(u64, usize, usize, Vec<usize>)> = None;
        for (i, n) in self.nodes.iter().enumerate() {
            if n.parent == NONE || n.refs == 0 || !n.children.is_empty() {
                continue;
            }
            // Every path through a leaf ends at it.
            let slots: Vec<usize> = self
                .paths
                .iter()
                .filter(|(_, p)| p.end == i)
                .map(|(&s, _)| s)
                .collect();
            if slots.iter().any(|&s| protected(s)) {
                continue;
            }
            let k = (n.last_used, slots.first().copied().unwrap_or(NONE));
            if best.as_ref().is_none_or(|b| k < (b.0, b.1)) {
                best = Some((k.0, k.1, n.start, slots));
            }
        }
        best.map(|(_, _, cut, slots)| (cut, slots))
    }

    /// Consistency of the counts (tests).
    #[cfg(test)]
    pub fn check(&self) {
        let mut cells = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            if n.parent == NONE || n.refs == 0 {
                continue;
            }
            cells += n.run.len() as u64;
            let through = self.paths.keys().filter(|&&s| self.through(s, i)).count();
            assert_eq!(n.refs as usize, through, "refs of node {i}");
            assert!(!n.run.is_empty(), "empty run in node {i}");
        }
        assert_eq!(cells, self.cells);
        for (s, p) in &self.paths {
            assert_eq!(self.tokens(*s).len(), p.len, "slot {s}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::kv::prefix::tests::key;

    fn seq(a: TokenId, n: usize) -> Vec<TokenId> {
        (a..a + n as TokenId).collect()
    }

    #[test]
    fn insert_and_longest_prefix_match() {
        let mut t = CellTrie::new(true);
        t.extend(0, key(1), &seq(1, 10), 1);
        t.extend(1, key(1), &seq(1, 4), 2);
        t.check();
        // Separately computed: two physical runs with the same tokens.
        assert_eq!(t.cells(), 14);
        let mut p = seq(1, 6);
        p.push(99);
        assert_eq!(t.longest(key(1), &p), Some((6, 0)));
        assert_eq!(t.longest(key(1), &[1, 2, 7]), Some((2, 0)));
        assert_eq!(t.longest(key(1), &[5, 6]), None);
        assert_eq!(t.tokens(0), seq(1, 10));
    }

    #[test]
    fn a_suffix_under_another_prefix_or_another_identity_misses() {
        let mut t = CellTrie::new(true);
        t.extend(0, key(1), &seq(1, 10), 1);
        // The same tokens from position 3 on, after a different first token.
        let mut other = vec![42, 2, 3];
        other.extend(seq(4, 7));
        assert_eq!(t.longest(key(1), &other), None);
        assert_eq!(t.longest(key(2), &seq(1, 10)), None);
    }

    #[test]
    fn a_shared_copy_splits_the_run_and_counts_its_cells_once() {
        let mut t = CellTrie::new(true);
        t.extend(0, key(1), &seq(1, 10), 1);
        t.copy(0, 1, 6, 2);
        t.check();
        assert_eq!(t.cells(), 10, "zero-copy: no new cells");
        assert_eq!(t.tokens(1), seq(1, 6));
        // Both continue privately.
        t.extend(1, key(1), &[50, 51], 3);
        t.extend(0, key(1), &[60], 4);
        t.check();
        assert_eq!(t.cells(), 13);
        assert_eq!(t.private_cells(0), 5); // 7..=10 and 60
        assert_eq!(t.private_cells(1), 2);
        // Divergent: each finds its own continuation.
        assert_eq!(t.longest(key(1), &[1, 2, 3, 4, 5, 6, 50, 9]), Some((7, 1)));
        assert_eq!(t.longest(key(1), &[1, 2, 3, 4, 5, 6, 7, 9]), Some((7, 0)));
    }

    #[test]
    fn a_duplicating_copy_holds_its_own_cells() {
        let mut t = CellTrie::new(false);
        t.extend(0, key(1), &seq(1, 10), 1);
        t.copy(0, 1, 6, 2);
        t.check();
        assert_eq!(t.cells(), 16);
        assert_eq!(t.private_cells(0), 10);
        assert_eq!(t.private_cells(1), 6);
        t.clear(0);
        t.check();
        assert_eq!(t.cells(), 6);
        assert_eq!(t.longest(key(1), &seq(1, 9)), Some((6, 1)));
    }

    #[test]
    fn refcounts_release_only_private_cells() {
        let mut t = CellTrie::new(true);
        t.extend(0, key(1), &seq(1, 100), 1); // a system prompt, cached
        t.copy(0, 1, 100, 2); // a live request shares it
        t.extend(1, key(1), &seq(500, 20), 3);
        assert_eq!(t.cells(), 120);
        // The request is cancelled: its 20 private cells go, the prefix stays.
        t.clear(1);
        t.check();
        assert_eq!(t.cells(), 100);
        assert_eq!(t.tokens(0), seq(1, 100));
        // The other way round: the entry goes, the live copy keeps the cells.
        t.copy(0, 1, 100, 4);
        t.clear(0);
        t.check();
        assert_eq!(t.cells(), 100);
        assert_eq!(t.len(1), 100);
        // Truncating inside a shared run splits it; the other holder keeps
        // all of it.
        t.copy(1, 2, 100, 5);
        t.truncate(2, 40);
        t.check();
        assert_eq!((t.cells(), t.len(1), t.len(2)), (100, 100, 40));
        t.clear(1);
        t.check();
        assert_eq!(t.cells(), 40);
    }

    #[test]
    fn eviction_is_lru_over_leaves_and_never_touches_a_live_node() {
        let mut t = CellTrie::new(true);
        t.extend(0, key(1), &seq(1, 50), 1); // entry A: sys + a
        t.copy(0, 1, 30, 2); // entry B: sys + b
        t.extend(1, key(1), &seq(200, 10), 3);
        t.copy(0, 2, 30, 4); // live C: sys + c
        t.extend(2, key(1), &seq(300, 5), 5);
        let live = |s: usize| s == 2;
        assert_eq!(t.idle_cells(live), 30, "A's and B's tails");
        // Oldest leaf first: A's tail (touched at 1; C's copy touched only
        // the shared run).
        let (cut, slots) = t.lru_leaf(live).unwrap();
        assert_eq!((cut, slots.clone()), (30, vec![0]));
        t.truncate(0, cut);
        let (cut, slots) = t.lru_leaf(live).unwrap();
        assert_eq!((cut, slots.clone()), (30, vec![1]));
        t.truncate(1, cut);
        t.check();
        // What is left of A and B is the shared run C reads: never evicted
        // (the only leaf is C's own tail).
        assert_eq!(t.lru_leaf(live), None);
        assert_eq!(t.cells(), 35);
        assert_eq!(t.idle_cells(live), 0);
        // Once C ends, the shared run is a leaf held by idle slots only.
        t.clear(2);
        let (cut, slots) = t.lru_leaf(|_| false).unwrap();
        assert_eq!((cut, slots), (0, vec![0, 1]));
    }

    #[test]
    fn extending_a_shared_path_branches_instead_of_writing_into_it() {
        let mut t = CellTrie::new(true);
        t.extend(0, key(1), &seq(1, 8), 1);
        t.copy(0, 1, 8, 2);
        t.extend(1, key(1), &[70], 3);
        t.extend(0, key(1), &[80], 4);
        t.check();
        assert_eq!(t.tokens(0).last(), Some(&80));
        assert_eq!(t.tokens(1).last(), Some(&70));
        assert_eq!(t.cells(), 10);
    }

    /// The tracker's blocks, the blocks recomputed from every slot's
    /// tokens, and the set a subscriber rebuilds from the events: all equal
    /// after any sequence of extends, truncations, copies and clears.
    #[test]
    fn kv_block_events_follow_the_cell_map() {
        use crate::owner::kv::events::{block_hash, KvEvent, BLOCK_TOKENS};
        use std::collections::HashSet;
        for share in [false, true] {
            let mut t = CellTrie::new(share);
            t.track_blocks();
            let mut seen: HashSet<u64> = HashSet::new();
            let (mut most, mut removed) = (0, 0);
            let mut rng = 0x9e3779b97f4a7c15u64;
            let mut next = |m: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % m
            };
            for tick in 0..4000u64 {
                let slot = next(4) as usize;
                match next(10) {
                    0..=5 => {
                        let n = 1 + next(90) as usize;
                        // Few distinct token values: slots share prefixes.
                        let toks: Vec<TokenId> = (0..n).map(|_| next(2) as TokenId).collect();
                        let k = key(1 + (slot as u64 % 2));
                        if t.paths.get(&slot).is_none_or(|p| p.key == k) {
                            t.extend(slot, k, &toks, tick);
                        }
                    }
                    6 | 7 => {
                        let len = next(t.len(slot) as u64 + 1) as usize;
                        t.truncate(slot, len);
                    }
                    8 => {
                        let dst = next(4) as usize;
                        if dst != slot && t.len(dst) == 0 {
                            let len = next(t.len(slot) as u64 + 1) as usize;
                            t.copy(slot, dst, len, tick);
                        }
                    }
                    _ => t.clear(slot),
                }
                for e in t.take_block_events() {
                    match e {
                        KvEvent::Stored {
                            hashes,
                            parent,
                            tokens,
                            ..
                        } => {
                            assert_eq!(tokens.len(), hashes.len() * BLOCK_TOKENS);
                            if let Some(p) = parent {
                                assert!(seen.contains(&p), "a parent is stored before its child");
                            }
                            for h in hashes {
                                assert!(seen.insert(h), "stored twice without a removal");
                            }
                        }
                        KvEvent::Removed { hashes } => {
                            removed += hashes.len();
                            for h in hashes {
                                assert!(seen.remove(&h), "removed without being stored");
                            }
                        }
                        KvEvent::Cleared => seen.clear(),
                    }
                }
                let mut want = HashSet::new();
                for (&s, p) in &t.paths {
                    let toks = t.tokens(s);
                    let mut parent = 0;
                    for b in toks.chunks_exact(BLOCK_TOKENS) {
                        parent = block_hash(parent, &p.key, b);
                        want.insert(parent);
                    }
                }
                assert_eq!(t.blocks.as_ref().unwrap().blocks(), want, "tick {tick}");
                assert_eq!(seen, want, "tick {tick}: the subscriber's view");
                most = most.max(want.len());
            }
            assert!(
                most >= 8 && removed >= 50,
                "the run exercised blocks: {most} at most, {removed} removed"
            );
            // A resync rebuilds the same set from nothing.
            let mut again = HashSet::new();
            for e in t.block_snapshot() {
                if let KvEvent::Stored { hashes, .. } = e {
                    again.extend(hashes);
                }
            }
            assert_eq!(again, seen);
        }
    }
}
