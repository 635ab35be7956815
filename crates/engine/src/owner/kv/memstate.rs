//! What each slot's memory holds beyond its token cells, per layer kind,
//! and which prefixes of it a new request can start from (pure), plus the
//! checkpoints that let a request start where the memory cannot be rewound.
//!
//! - Full attention (`MemoryKind::Attention`): any prefix of the cells.
//! - Sliding window (`Window`): the window layers hold positions
//!   `lo..len` only (llama.cpp overwrites cells older than the window once
//!   its `n_swa + n_ubatch` cells per stream are full, always dropping the
//!   lowest positions; `lo` is read back from the runtime after every
//!   edit). A prefix `m` is reusable when the window of the next token is
//!   still held: `lo == 0` or `m >= lo + n_swa`.
//! - Recurrent or hybrid (`Recurrent`): the state is that of the last
//!   position; only the whole (`m == len`) is reusable.
//!
//! A checkpoint is the part of a slot's state that cannot be rewound (the
//! window cells, the recurrent state; llama.cpp's partial sequence state)
//! saved when the slot held `len` cells. Restored into the same slot, whose
//! other cells still hold the same tokens, it makes `len` reusable again.
//! Checkpoints are taken one token before a prompt's end and, for a
//! recurrent or hybrid model, at every multiple of `--checkpoint-interval`
//! (prompt chunks are cut there). They live in
//! host memory under one byte budget, at most `PER_SLOT` per slot, least
//! recently used first out.

use crate::runtime::MemoryKind;

/// Checkpoints kept per slot (the newest).
pub(crate) const PER_SLOT: usize = 8;

#[derive(Debug)]
pub(crate) struct Checkpoint {
    pub len: usize,
    pub data: Vec<u8>,
    pub last_used: u64,
}

#[derive(Debug)]
pub(crate) struct SlotMemory {
    pub kind: MemoryKind,
    /// Per slot: lowest position every layer still holds.
    lo: Vec<usize>,
    cps: Vec<Vec<Checkpoint>>,
    pub budget: u64,
    bytes: u64,
    /// The model's sliding window, also under `--swa-full` (full
    /// attention in place): llama.cpp's whole-state save leaves out the
    /// window cells outside the window of the last position.
    pub saved_window: usize,
}

/// A prefix of a slot a request can start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reach {
    pub len: usize,
    /// Only through the checkpoint taken at `len`.
    pub checkpoint: bool,
}

impl SlotMemory {
    pub fn new(kind: MemoryKind, slots: usize, budget: u64) -> Self {
        SlotMemory {
            kind,
            lo: vec![0; slots],
            cps: (0..slots).map(|_| Vec::new()).collect(),
            budget: if kind == MemoryKind::Attention {
                0
            } else {
                budget
            },
            bytes: 0,
            saved_window: match kind {
                MemoryKind::Window { n_swa } => n_swa as usize,
                _ => 0,
            },
        }
    }

    /// Whether a slot can be cut short (its memory rewound) in place.
    pub fn rewinds(&self) -> bool {
        !matches!(self.kind, MemoryKind::Recurrent { .. })
    }

    pub fn lo(&self, slot: usize) -> usize {
        self.lo.get(slot).copied().unwrap_or(0)
    }

    /// The runtime's lowest position for a slot holding `len` cells (`None`:
    /// the window layers hold nothing).
    pub fn set_lo(&mut self, slot: usize, pos_min: Option<usize>, len: usize) {
        if let Some(l) = self.lo.get_mut(slot) {
            *l = if len == 0 { 0 } else { pos_min.unwrap_or(len) };
        }
    }

    /// The longest prefix, at most `m` of a slot's `len` cells, reusable
    /// without a checkpoint.
    pub fn direct(&self, slot: usize, len: usize, m: usize) -> usize {
        self.direct_from(self.lo(slot), len, m)
    }

    /// The same for state holding `len` cells from `lo` (a slot, or state
    /// saved to the host tier).
    pub fn direct_from(&self, lo: usize, len: usize, m: usize) -> usize {
        let m = m.min(len);
        match self.kind {
            MemoryKind::Attention => m,
            MemoryKind::Window { n_swa } => window_reach(lo, n_swa as usize, m),
            MemoryKind::Recurrent { .. } => {
                if m == len {
                    m
                } else {
                    0
                }
            }
        }
    }

    /// The same for state saved whole (the host tier): its window holds
    /// only the last position's window, whatever the slot held, so a window
    /// model's saved state restarts only near its end.
    pub fn saved_reach(&self, lo: usize, len: usize, m: usize) -> usize {
        let w = self.saved_window;
        let m = m.min(len);
        match self.kind {
            MemoryKind::Recurrent { .. } => self.direct_from(lo, len, m),
            _ if w > 0 => window_reach(lo.max(len.saturating_sub(w)), w, m),
            _ => m,
        }
    }

    /// The longest prefix, at most `m`, a request can start from: directly
    /// or through a checkpoint (when `checkpoints`).
    pub fn reach(&self, slot: usize, len: usize, m: usize, checkpoints: bool) -> Reach {
        let direct = self.direct(slot, len, m);
        let cp = if checkpoints {
            self.cps
                .get(slot)
                .into_iter()
                .flatten()
                .map(|c| c.len)
                .filter(|&c| c > direct && c <= m.min(len))
                .max()
        } else {
            None
        };
        match cp {
            Some(len) => Reach {
                len,
                checkpoint: true,
            },
            None => Reach {
                len: direct,
                checkpoint: false,
            },
        }
    }

    /// The checkpoint a slot took at `len` (marked used).
    pub fn checkpoint(&mut self, slot: usize, len: usize, tick: u64) -> Option<&[u8]> {
        let c = self.cps.get_mut(slot)?.iter_mut().find(|c| c.len == len)?;
        c.last_used = tick;
        Some(&c.data)
    }

    /// Whether a checkpoint of `bytes` is worth taking now.
    pub fn wants(&self, bytes_hint: usize) -> bool {
        self.budget > 0 && (bytes_hint as u64) <= self.budget
    }

    /// Keep a checkpoint of `slot` at `len`; the least recently used go
    /// (this slot's oldest past `PER_SLOT`, then any) until it fits.
    pub fn add(&mut self, slot: usize, len: usize, data: Vec<u8>, tick: u64) {
        let size = data.len() as u64;
        if slot >= self.cps.len() || size > self.budget {
            return;
        }
        self.drop_where(slot, |c| c.len == len);
        while self.cps[slot].len() >= PER_SLOT {
            let oldest = self.cps[slot]
                .iter()
                .enumerate()
                .min_by_key(|(_, c)| c.last_used)
                .map(|(i, _)| i);
            let Some(i) = oldest else { break };
            let c = self.cps[slot].swap_remove(i);
            self.bytes -= c.data.len() as u64;
        }
        while self.bytes + size > self.budget {
            let lru = self
                .cps
                .iter()
                .enumerate()
                .flat_map(|(s, v)| v.iter().enumerate().map(move |(i, c)| (c.last_used, s, i)))
                .min();
            let Some((_, s, i)) = lru else { break };
            let c = self.cps[s].swap_remove(i);
            self.bytes -= c.data.len() as u64;
        }
        self.bytes += size;
        self.cps[slot].push(Checkpoint {
            len,
            data,
            last_used: tick,
        });
    }

    fn drop_where(&mut self, slot: usize, f: impl Fn(&Checkpoint) -> bool) {
        let Some(v) = self.cps.get_mut(slot) else {
            return;
        };
        let before: u64 = v.iter().map(|c| c.data.len() as u64).sum();
        v.retain(|c| !f(c));
        let after: u64 = v.iter().map(|c| c.data.len() as u64).sum();
        self.bytes -= before - after;
    }

    /// The slot now holds `len` cells of the same tokens: checkpoints past
    /// them are stale.
    pub fn truncate(&mut self, slot: usize, len: usize) {
        self.drop_where(slot, |c| c.len > len);
    }

    pub fn clear(&mut self, slot: usize) {
        self.drop_where(slot, |_| true);
        if let Some(l) = self.lo.get_mut(slot) {
            *l = 0;
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn count(&self) -> usize {
        self.cps.iter().map(Vec::len).sum()
    }

    /// Window cells held over all slots, given each slot's length.
    pub fn window_cells(&self, len: impl Fn(usize) -> usize) -> u64 {
        match self.kind {
            MemoryKind::Window { .. } => (0..self.lo.len())
                .map(|s| len(s).saturating_sub(self.lo(s)) as u64)
                .sum(),
            _ => 0,
        }
    }

    /// Checkpoint positions of a slot (tests).
    #[cfg(test)]
    pub fn positions(&self, slot: usize) -> Vec<usize> {
        let mut v: Vec<usize> = self.cps[slot].iter().map(|c| c.len).collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_reuse_needs_the_window_of_the_next_token() {
        let mut m = SlotMemory::new(MemoryKind::Window { n_swa: 8 }, 2, 1 << 20);
        m.set_lo(0, Some(0), 30);
        assert_eq!(m.direct(0, 30, 5), 5, "nothing overwritten: any prefix");
        m.set_lo(0, Some(10), 30);
        assert_eq!(
            m.direct(0, 30, 17),
            0,
            "positions 9.. of the window are gone"
        );
        assert_eq!(m.direct(0, 30, 18), 18);
        assert_eq!(m.direct(0, 30, 40), 30, "never past the cells");
        m.set_lo(1, None, 12);
        assert_eq!(m.lo(1), 12, "window layers empty: nothing below len");
        assert_eq!(m.direct(1, 12, 12), 0);
        m.add(0, 12, vec![0; 100], 1);
        assert_eq!(
            m.reach(0, 30, 15, true),
            Reach {
                len: 12,
                checkpoint: true
            }
        );
        assert_eq!(m.reach(0, 30, 15, false).len, 0);
        assert_eq!(m.reach(0, 30, 11, true).len, 0, "a checkpoint past m");
        m.truncate(0, 11);
        assert_eq!(m.count(), 0, "stale after a cut below it");
        assert_eq!(m.bytes(), 0);
    }

    #[test]
    fn saved_window_state_restarts_only_within_its_last_window() {
        let mut m = SlotMemory::new(MemoryKind::Window { n_swa: 8 }, 1, 0);
        assert_eq!(m.saved_reach(0, 30, 30), 30, "the last window: 22..30");
        assert_eq!(
            m.saved_reach(0, 30, 29),
            0,
            "position 29's window (conservatively) 21..29"
        );
        assert_eq!(
            m.saved_reach(0, 30, 25),
            0,
            "position 25's window reaches 18"
        );
        assert_eq!(
            m.saved_reach(0, 6, 3),
            3,
            "shorter than a window: all of it"
        );
        m.kind = MemoryKind::Attention;
        m.saved_window = 8;
        assert_eq!(
            m.saved_reach(0, 30, 25),
            0,
            "full attention in place, not once saved"
        );
        m.saved_window = 0;
        assert_eq!(m.saved_reach(0, 30, 25), 25);
    }

    #[test]
    fn recurrent_reuse_is_the_whole_or_a_checkpoint() {
        let mut m = SlotMemory::new(MemoryKind::Recurrent { hybrid: false }, 1, 1 << 20);
        assert!(!m.rewinds());
        assert_eq!(m.direct(0, 20, 20), 20);
        assert_eq!(m.direct(0, 20, 19), 0);
        m.add(0, 10, vec![1; 8], 1);
        m.add(0, 16, vec![2; 8], 2);
        assert_eq!(m.reach(0, 20, 19, true).len, 16);
        assert_eq!(m.reach(0, 20, 15, true).len, 10);
        assert_eq!(m.checkpoint(0, 16, 3), Some(&[2u8; 8][..]));
        m.clear(0);
        assert_eq!((m.count(), m.bytes()), (0, 0));
    }

    #[test]
    fn a_full_slot_holds_its_cells_its_capped_window_and_its_state() {
        let s = Sizes {
            per_cell: 10,
            window_per_cell: 100,
            per_slot: 7,
        };
        let w = MemoryKind::Window { n_swa: 512 };
        assert_eq!(s.per_seq(w, 4096, 512), 4096 * 10 + 1024 * 100 + 7);
        assert_eq!(
            s.per_seq(w, 600, 512),
            600 * 10 + 768 * 100 + 7,
            "the smaller, padded, as llama.cpp"
        );
        assert_eq!(
            s.per_seq(MemoryKind::Window { n_swa: 32 }, 4096, 64),
            4096 * 10 + 256 * 100 + 7
        );
        let r = MemoryKind::Recurrent { hybrid: true };
        assert_eq!(s.per_seq(r, 4096, 512), 4096 * 10 + 7);
    }

    #[test]
    fn checkpoints_stay_within_budget_and_per_slot_cap_lru_first() {
        let mut m = SlotMemory::new(MemoryKind::Recurrent { hybrid: true }, 2, 300);
        for (i, len) in (1..=PER_SLOT + 1).map(|k| 10 * k).enumerate() {
            m.add(0, len, vec![0; 10], i as u64);
        }
        let kept: Vec<usize> = (2..=PER_SLOT + 1).map(|k| 10 * k).collect();
        assert_eq!(m.positions(0), kept, "per-slot cap: oldest out");
        m.add(1, 5, vec![0; 280], 100);
        assert!(m.bytes() <= 300);
        assert_eq!(m.positions(1), vec![5]);
        let newest = 10 * (PER_SLOT + 1);
        assert_eq!(
            m.positions(0),
            vec![newest - 10, newest],
            "global LRU out first"
        );
        m.add(1, 6, vec![0; 400], 101);
        assert_eq!(m.positions(1), vec![5], "larger than the budget: not kept");
        let none = SlotMemory::new(MemoryKind::Attention, 1, 300);
        assert!(!none.wants(1), "full attention takes no checkpoints");
    }
}

impl Sizes {
    /// Bytes one slot of `ctx` cells holds at most: its per-token cells,
    /// its window (llama.cpp's SWA cache: window + ubatch, padded to 256,
    /// never more than `ctx`) and its recurrent state.
    pub fn per_seq(&self, kind: MemoryKind, ctx: u32, n_ubatch: u32) -> u64 {
        // (llama.cpp: the smaller of the two, then padded to 256.)
        let window = match kind {
            MemoryKind::Window { n_swa } => (n_swa + n_ubatch).min(ctx).div_ceil(256) * 256,
            _ => 0,
        };
        u64::from(ctx) * self.per_cell + u64::from(window) * self.window_per_cell + self.per_slot
    }
}

/// A window model's reach: `m` when the next token's window is held.
fn window_reach(lo: usize, n_swa: usize, m: usize) -> usize {
    if lo == 0 || m >= lo + n_swa {
        m
    } else {
        0
    }
}

/// Bytes of each kind of state, measured from the runtime's own state
/// sizes (one prompt in slot 0, then one token more): per cell of the
/// layers that grow per token, per sliding-window cell, per slot of
/// recurrent state. Zeros where the runtime does not say.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Sizes {
    pub per_cell: u64,
    pub window_per_cell: u64,
    pub per_slot: u64,
}

pub(crate) fn measure<B: crate::runtime::backend::Backend>(
    rt: &mut B,
    kind: MemoryKind,
    prompt: &[crate::runtime::TokenId],
) -> Sizes {
    let n = prompt.len();
    if n == 0 {
        return Sizes::default();
    }
    let run = |rt: &mut B, toks: &[crate::runtime::TokenId], from: usize| {
        rt.clear();
        for (i, &t) in toks.iter().enumerate() {
            if rt
                .push(t, (from + i) as u32, 0, i + 1 == toks.len())
                .is_err()
            {
                return false;
            }
        }
        rt.decode().is_ok()
    };
    rt.clear_slot(0);
    if !run(rt, prompt, 0) {
        rt.clear_slot(0);
        return Sizes::default();
    }
    let (a_all, a_part) = (rt.slot_state_size(0, false), rt.slot_state_size(0, true));
    let ok = run(rt, &prompt[..1], n);
    let (b_all, b_part) = (rt.slot_state_size(0, false), rt.slot_state_size(0, true));
    rt.clear_slot(0);
    rt.clear();
    if !ok {
        return Sizes::default();
    }
    let all = b_all.saturating_sub(a_all) as u64;
    let part = b_part.saturating_sub(a_part) as u64;
    match kind {
        MemoryKind::Attention => Sizes {
            per_cell: all,
            ..Sizes::default()
        },
        MemoryKind::Window { .. } => Sizes {
            per_cell: all.saturating_sub(part),
            window_per_cell: part,
            per_slot: 0,
        },
        MemoryKind::Recurrent { .. } => Sizes {
            per_cell: all.saturating_sub(part),
            window_per_cell: 0,
            per_slot: a_part as u64,
        },
    }
}
