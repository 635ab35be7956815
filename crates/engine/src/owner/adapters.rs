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

use crate::config::{AdapterInfo, AdapterSpec};
use crate::owner::plan::adapter_sets::AdapterSet;
use crate::owner::Owner;
use crate::runtime::backend::Backend;

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
        let wait = names(
            &mut self
                .queue
                .waiting
                .iter()
                .map(|w| w.sub.req.adapters.as_slice()),
        );
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
        self.turns.pick(&with_work, self.config.step.adapter_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::kv::key::PrefixKey;
    use crate::owner::plan::adapter_sets::*;

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
