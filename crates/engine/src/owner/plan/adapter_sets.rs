//! ③ execute, plan — adapter sets, pure: a set's canonical form, the
//! prefix-cache key of state computed under it, and whose turn a step is
//! (`Turns`; the policy is described in `owner/adapters.rs`, which loads
//! adapters and applies the turn).

use std::hash::{Hash, Hasher};

use crate::owner::kv::key::PrefixKey;

/// An adapter set: (adapter id, scale), sorted by id, no zero scales.
pub(crate) type AdapterSet = Vec<(usize, f32)>;

/// The set in canonical form: zero scales dropped (llama.cpp skips them:
/// scale 0 is the base model), one entry per adapter (the last wins),
/// sorted by id.
pub(crate) fn canonical(set: &[(usize, f32)]) -> AdapterSet {
    let mut out: AdapterSet = Vec::with_capacity(set.len());
    for &(id, scale) in set {
        out.retain(|e| e.0 != id);
        if scale != 0.0 && scale.is_finite() {
            out.push((id, scale));
        }
    }
    out.sort_by_key(|e| e.0);
    out
}

/// The prefix-cache key of state computed under `set`.
pub(crate) fn key_for(base: PrefixKey, set: &[(usize, f32)]) -> PrefixKey {
    if set.is_empty() {
        return base;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    base.adapters.hash(&mut h);
    for &(id, scale) in set {
        id.hash(&mut h);
        scale.to_bits().hash(&mut h);
    }
    PrefixKey {
        adapters: h.finish() | 1,
        ..base
    }
}

/// Whose turn it is.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    current: AdapterSet,
    /// Consecutive steps the current set has had.
    run: usize,
    /// Step counter when each set last had a step.
    served: Vec<(AdapterSet, u64)>,
    steps: u64,
}

impl Turns {
    /// The set this step runs under, among the sets that have work.
    pub fn pick(&mut self, with_work: &[&AdapterSet], slice: usize) -> AdapterSet {
        self.steps += 1;
        let mut sets: Vec<&AdapterSet> = Vec::new();
        for s in with_work {
            if !sets.contains(s) {
                sets.push(s);
            }
        }
        let keep = sets.contains(&&self.current) && (sets.len() == 1 || self.run < slice.max(1));
        if !keep {
            let last = |s: &AdapterSet| self.served.iter().find(|e| &e.0 == s).map_or(0, |e| e.1);
            if let Some(next) = sets.iter().min_by_key(|s| last(s)) {
                self.current = (*next).clone();
                self.run = 0;
            }
        }
        self.run += 1;
        let now = self.steps;
        match self.served.iter_mut().find(|e| e.0 == self.current) {
            Some(e) => e.1 = now,
            None => self.served.push((self.current.clone(), now)),
        }
        // Forget sets that have not run for a long time (bounded).
        if self.served.len() > 64 {
            self.served.sort_by_key(|e| std::cmp::Reverse(e.1));
            self.served.truncate(32);
        }
        self.current.clone()
    }
}
