//! Admission: the KV-cell ledger and the permit a sequence holds while it
//! lives.
//!
//! The ledger has two parts. `held`: the cells the KV cache physically
//! holds, each counted once however many sequences read it (the owner sets
//! it from the cell map, `owner/kv/cells.rs`, after every change), of which
//! `cached` are read by no running sequence (the prefix cache's, evictable).
//! `reserved`: growth promised to admitted sequences and not yet computed.
//! A request is admitted only when `held + reserved` plus its own growth
//! (prompt + max_tokens, less the cells it reuses) and the cells its reuse
//! adds at once (a duplicating copy) fit the capacity. The permit starts as
//! that reservation and shrinks as the sequence computes; dropping it (the
//! sequence retiring, whatever the reason) releases the rest, exactly once.
//! Owner-thread only (`Rc`, `Cell`): no locks.
//!
//! State model: attention KV grows one cell per token; a recurrent model's
//! state is fixed per sequence, so its permit reserves one unit.

use std::cell::Cell;
use std::rc::Rc;

#[derive(Debug, Default)]
struct Counters {
    capacity: Cell<u64>,
    reserved: Cell<u64>,
    permits: Cell<u64>,
    /// Cells held, each once.
    held: Cell<u64>,
    /// Of `held`, the cells no running sequence reads (prefix cache).
    cached: Cell<u64>,
}

#[derive(Debug, Clone)]
pub struct KvLedger(Rc<Counters>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateModel {
    /// Cells grow with every token (full attention).
    PerToken,
    /// A fixed state per sequence (recurrent).
    PerSequence,
}

#[derive(Debug)]
pub struct Permit {
    ledger: Rc<Counters>,
    reserved: u64,
}

impl KvLedger {
    pub fn new(capacity_cells: u64) -> Self {
        let c = Counters::default();
        c.capacity.set(capacity_cells);
        KvLedger(Rc::new(c))
    }

    /// Reserve `growth` cells for a new sequence whose admission also adds
    /// `adds` held cells at once, if both fit.
    pub fn try_reserve(&self, growth: u64, adds: u64) -> Option<Permit> {
        let c = &self.0;
        if c.held.get() + c.reserved.get() + growth + adds > c.capacity.get() {
            return None;
        }
        c.reserved.set(c.reserved.get() + growth);
        c.permits.set(c.permits.get() + 1);
        Some(Permit {
            ledger: self.0.clone(),
            reserved: growth,
        })
    }

    /// Held cells that running sequences read.
    pub fn used(&self) -> u64 {
        self.0.held.get() - self.0.cached.get()
    }
    pub fn reserved(&self) -> u64 {
        self.0.reserved.get()
    }
    pub fn permits(&self) -> u64 {
        self.0.permits.get()
    }
    pub fn capacity(&self) -> u64 {
        self.0.capacity.get()
    }
    pub fn cached(&self) -> u64 {
        self.0.cached.get()
    }
    /// The cell map's owner reports what is held after every change.
    pub fn set_held(&self, held: u64, cached: u64) {
        debug_assert!(cached <= held);
        self.0.held.set(held);
        self.0.cached.set(cached.min(held));
    }
}

impl Permit {
    /// `n` more cells are now computed: the reservation shrinks (past it,
    /// they are simply held).
    pub fn consume(&mut self, n: u64) {
        let from_reserved = n.min(self.reserved);
        self.reserved -= from_reserved;
        let c = &self.ledger;
        c.reserved.set(c.reserved.get() - from_reserved);
    }
}

impl Permit {
    /// Cells still reserved (what a preempted sequence reserves again when
    /// it resumes).
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// `n` cells counted as computed were not (a failed step): reserve
    /// them again.
    pub fn unconsume(&mut self, n: u64) {
        self.reserved += n;
        let c = &self.ledger;
        c.reserved.set(c.reserved.get() + n);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let c = &self.ledger;
        c.reserved.set(c.reserved.get() - self.reserved);
        c.permits.set(c.permits.get() - 1);
    }
}

/// Units a restore of `cells` saved cells holds at once, beyond the
/// request's own growth: the cells (full attention), or nothing (a
/// recurrent state is the one unit the request reserves anyway).
pub fn restore_adds(model: StateModel, cells: usize) -> usize {
    match model {
        StateModel::PerToken => cells,
        StateModel::PerSequence => 0,
    }
}

/// Cells a request needs under a state model.
pub fn cells_needed(model: StateModel, prompt: usize, max_tokens: u32) -> u64 {
    match model {
        StateModel::PerToken => prompt as u64 + u64::from(max_tokens),
        StateModel::PerSequence => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_consume_release_exactly_once() {
        let l = KvLedger::new(100);
        let mut a = l.try_reserve(60, 0).unwrap();
        assert!(l.try_reserve(41, 0).is_none(), "over capacity");
        let b = l.try_reserve(40, 0).unwrap();
        a.consume(10);
        l.set_held(10, 0);
        assert_eq!((l.used(), l.reserved()), (10, 90));
        drop(b);
        assert_eq!((l.used(), l.reserved(), l.permits()), (10, 50, 1));
        a.consume(55); // beyond the reservation: only held
        l.set_held(65, 0);
        assert_eq!((l.used(), l.reserved()), (65, 0));
        drop(a);
        l.set_held(0, 0);
        assert_eq!((l.used(), l.reserved(), l.permits()), (0, 0, 0));
    }

    #[test]
    fn held_cells_count_until_freed_and_immediate_adds_count_too() {
        let l = KvLedger::new(100);
        l.set_held(70, 70);
        assert!(l.try_reserve(31, 0).is_none(), "cached cells still count");
        l.set_held(60, 60);
        assert!(
            l.try_reserve(30, 11).is_none(),
            "a duplicating copy adds cells"
        );
        let p = l.try_reserve(40, 0).unwrap();
        assert_eq!(l.cached() + l.reserved(), 100);
        drop(p);
    }

    #[test]
    fn recurrent_state_is_one_unit() {
        assert_eq!(cells_needed(StateModel::PerSequence, 5000, 100), 1);
        assert_eq!(cells_needed(StateModel::PerToken, 5000, 100), 5100);
    }
}
