//! LoRA adapter sets on the owner: loading, prefix-cache keys, and which
//! set a step runs under.
//!
//! llama.cpp applies adapters per context, not per sequence: every row of
//! a step runs under one adapter set. A step therefore carries only the
//! sequences of one set (the base model is the empty set). Sets with work
//! take turns: the current set keeps the step for up to `--adapter-slice`
//! consecutive steps, then the set served least recently gets it. A set's
//! decoders wait at most (sets − 1) × slice steps between tokens; traffic
//! of one set (the usual case) never switches.
//!
//! State computed under one set is never reused under another: a
//! sequence's `PrefixKey` carries its set (ids and scales; ids are never
//! reused while the engine runs), so the cell map, the prefix cache and
//! the host tier keep each set's cells apart.

use std::hash::{Hash, Hasher};

use crate::config::{AdapterInfo, AdapterSpec};
use crate::owner::kv::key::PrefixKey;
use crate::owner::Owner;
use crate::runtime::backend::Backend;

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

impl<B: Backend> Owner<B> {
    /// Load an adapter (on this thread: llama.cpp records it in the
    /// model, which a step reads) and publish it.
    pub(super) fn load_adapter(&mut self, spec: &AdapterSpec) -> Result<AdapterInfo, String> {
        let mut list = self
            .adapters
            .write()
            .map_err(|_| "adapter table poisoned")?;
        if list.iter().any(|a| a.name == spec.name) {
            return Err(format!(
                "an adapter named {:?} is already loaded",
                spec.name
            ));
        }
        let id = self.rt.load_adapter(&spec.path)?;
        let info = AdapterInfo {
            id,
            name: spec.name.clone(),
            path: spec.path.display().to_string(),
            scale: spec.scale,
        };
        tracing::info!(adapter = %info.name, id, path = %info.path, "LoRA adapter loaded");
        list.push(info.clone());
        Ok(info)
    }

    /// Names of the adapters admitted and waiting requests run under
    /// (None when no adapter is loaded).
    pub(super) fn lora_names(&self) -> Option<(Vec<String>, Vec<String>)> {
        let list = self.adapters.read().ok()?;
        if list.is_empty() {
            return None;
        }
        let names = |sets: &mut dyn Iterator<Item = &[(usize, f32)]>| {
            let mut v: Vec<String> = sets
                .flat_map(|s| s.iter().filter(|e| e.1 != 0.0))
                .filter_map(|&(id, _)| list.get(id).map(|a| a.name.clone()))
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let run = names(&mut self.seqs.iter().map(|s| s.adapters.as_slice()));
        let wait = names(&mut self.waiting.iter().map(|w| w.sub.req.adapters.as_slice()));
        Some((run, wait))
    }

    /// The adapter set this step runs under.
    pub(super) fn step_set(&mut self) -> AdapterSet {
        let with_work: Vec<&AdapterSet> = self
            .seqs
            .iter()
            .filter(|s| {
                let v = s.view();
                v.decoding || v.computed < v.prompt_len
            })
            .map(|s| &s.adapters)
            .collect();
        self.turns.pick(&with_work, self.config.adapter_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_drops_zero_scales_and_sorts() {
        assert_eq!(
            canonical(&[(2, 1.0), (1, 0.5), (3, 0.0)]),
            vec![(1, 0.5), (2, 1.0)]
        );
        assert_eq!(canonical(&[(1, 0.5), (1, 0.0)]), vec![]);
        assert!(canonical(&[(0, 0.0)]).is_empty());
    }

    #[test]
    fn keys_differ_by_set_and_scale() {
        let base = PrefixKey::default();
        assert_eq!(key_for(base, &[]), base);
        let a = key_for(base, &[(0, 1.0)]);
        assert_ne!(a, base);
        assert_ne!(a, key_for(base, &[(0, 0.5)]));
        assert_ne!(a, key_for(base, &[(1, 1.0)]));
        assert_eq!(a, key_for(base, &[(0, 1.0)]));
    }

    #[test]
    fn turns_alternate_by_slice_and_stay_with_one_set() {
        let (a, b): (AdapterSet, AdapterSet) = (vec![], vec![(0, 1.0)]);
        let mut t = Turns::default();
        let picks: Vec<AdapterSet> = (0..6).map(|_| t.pick(&[&a, &b], 2)).collect();
        assert_eq!(
            picks,
            vec![
                a.clone(),
                a.clone(),
                b.clone(),
                b.clone(),
                a.clone(),
                a.clone()
            ]
        );
        // One set alone keeps every step.
        assert!((0..5).all(|_| t.pick(&[&b], 1) == b));
        // A set that comes back is served next (it waited longest).
        let c: AdapterSet = vec![(1, 1.0)];
        assert_eq!(t.pick(&[&b, &c], 1), c);
    }
}
