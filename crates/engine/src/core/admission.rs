//! Admission: the KV-cell ledger and the permit a sequence holds while it
//! lives.
//!
//! A request is admitted only when cells for prompt + max_tokens can be
//! reserved. The permit starts as that reservation; as the sequence computes
//! tokens, cells move from "reserved growth" to "used"; dropping the permit
//! (the sequence retiring, whatever the reason) releases all of it, exactly
//! once. Owner-thread only (`Rc`, `Cell`): no locks.
//!
//! State model: attention KV grows one cell per token; a recurrent model's
//! state is fixed per sequence, so its permit reserves one unit.

use std::cell::Cell;
use std::rc::Rc;

#[derive(Debug, Default)]
struct Counters {
    capacity: Cell<u64>,
    used: Cell<u64>,
    reserved: Cell<u64>,
    permits: Cell<u64>,
    /// Cells held by the prefix cache: evictable, but counted until evicted.
    cached: Cell<u64>,
}

#[derive(Debug, Clone)]
pub struct Ledger(Rc<Counters>);

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
    used: u64,
    reserved: u64,
}

impl Ledger {
    pub fn new(capacity_cells: u64) -> Self {
        let c = Counters::default();
        c.capacity.set(capacity_cells);
        Ledger(Rc::new(c))
    }

    /// Reserve `cells` for a new sequence, if they fit.
    pub fn try_reserve(&self, cells: u64) -> Option<Permit> {
        let c = &self.0;
        if c.used.get() + c.reserved.get() + c.cached.get() + cells > c.capacity.get() {
            return None;
        }
        c.reserved.set(c.reserved.get() + cells);
        c.permits.set(c.permits.get() + 1);
        Some(Permit {
            ledger: self.0.clone(),
            used: 0,
            reserved: cells,
        })
    }

    pub fn used(&self) -> u64 {
        self.0.used.get()
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
    /// The prefix cache's owner reports what it holds after every change.
    pub fn set_cached(&self, cells: u64) {
        self.0.cached.set(cells);
    }
}

impl Permit {
    /// `n` more cells are now computed (taken from the reservation first).
    pub fn consume(&mut self, n: u64) {
        let from_reserved = n.min(self.reserved);
        self.reserved -= from_reserved;
        self.used += n;
        let c = &self.ledger;
        c.reserved.set(c.reserved.get() - from_reserved);
        c.used.set(c.used.get() + n);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let c = &self.ledger;
        c.reserved.set(c.reserved.get() - self.reserved);
        c.used.set(c.used.get() - self.used);
        c.permits.set(c.permits.get() - 1);
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
        let l = Ledger::new(100);
        let mut a = l.try_reserve(60).unwrap();
        assert!(l.try_reserve(41).is_none(), "over capacity");
        let b = l.try_reserve(40).unwrap();
        a.consume(10);
        assert_eq!((l.used(), l.reserved()), (10, 90));
        drop(b);
        assert_eq!((l.used(), l.reserved(), l.permits()), (10, 50, 1));
        a.consume(55); // beyond the reservation: counted as used
        assert_eq!((l.used(), l.reserved()), (65, 0));
        drop(a);
        assert_eq!((l.used(), l.reserved(), l.permits()), (0, 0, 0));
    }

    #[test]
    fn cached_cells_count_until_evicted() {
        let l = Ledger::new(100);
        l.set_cached(70);
        assert!(l.try_reserve(31).is_none(), "cached cells still count");
        l.set_cached(60);
        let p = l.try_reserve(40).unwrap();
        assert_eq!(l.cached() + l.reserved(), 100);
        drop(p);
    }

    #[test]
    fn recurrent_state_is_one_unit() {
        assert_eq!(cells_needed(StateModel::PerSequence, 5000, 100), 1);
        assert_eq!(cells_needed(StateModel::PerToken, 5000, 100), 5100);
    }
}
