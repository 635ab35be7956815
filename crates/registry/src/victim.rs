//! Making room in the memory budget (pure): which loaded models to unload
//! for a model about to start, least recently used first, and whether it
//! then fits. `Registry::make_room` takes a snapshot of the other models,
//! unloads the plan's first victim, and plans again (the snapshot may
//! change while an engine stops).

use std::time::Instant;

/// What another model holds in the budget, as the plan sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Candidate {
    /// Bytes it holds (a loaded model's footprint; a loading model's share).
    pub bytes: u64,
    pub last_used: Instant,
    pub role: Role,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Loaded, unpinned, no request in flight: may be unloaded.
    Idle,
    /// Loaded and pinned: never unloaded (even when busy).
    Pinned,
    /// Loaded with requests in flight: not unloaded.
    Busy,
    /// Loading: its share is held, it is not unloaded.
    Loading,
}

/// The plan: unload `victims` (indices into the candidates, least recently
/// used first), after which `outcome` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub victims: Vec<usize>,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It fits in `left` bytes: all of `need`, or (with nothing left to
    /// unload) at least `min` (fewer slots), or the budget holds nothing
    /// else (the engine's own sizing then says what fits, or why not).
    Fits { left: u64 },
    /// No room even after unloading every victim; `left` bytes were free.
    NoRoom { left: u64 },
}

/// Plan room for `need` bytes (at least `min`: one slot) in `budget`
/// beside `others` (every other model that holds memory). Idle models are
/// unloaded least recently used first (ties: the earlier candidate), and
/// only while `need` does not fit. When every idle model is gone and the
/// rest still leaves less than `min`, the plan still lists them all (the
/// registry unloads them before it refuses: today's rule).
pub(crate) fn plan(others: &[Candidate], budget: u64, need: u64, min: u64) -> Plan {
    let mut held: u64 = others.iter().map(|c| c.bytes).sum();
    let mut idle: Vec<usize> = (0..others.len())
        .filter(|&i| others[i].role == Role::Idle)
        .collect();
    idle.sort_by_key(|&i| others[i].last_used);
    let mut victims = Vec::new();
    let mut next = idle.into_iter();
    loop {
        let left = budget.saturating_sub(held);
        let more = next.len() > 0;
        if left >= need || (!more && (left >= min || held == 0)) {
            return Plan {
                victims,
                outcome: Outcome::Fits { left },
            };
        }
        let Some(v) = next.next() else {
            return Plan {
                victims,
                outcome: Outcome::NoRoom { left },
            };
        };
        held -= others[v].bytes;
        victims.push(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const G: u64 = 1 << 30;

    fn cands(list: &[(u64, u64, Role)]) -> Vec<Candidate> {
        let t0 = Instant::now();
        list.iter()
            .map(|&(gib, age_s, role)| Candidate {
                bytes: gib * G,
                last_used: t0 - Duration::from_secs(age_s),
                role,
            })
            .collect()
    }

    #[test]
    fn least_recently_used_first_and_only_as_many_as_needed() {
        // Budget 10, three idle models of 3 (used 5 s, 50 s, 20 s ago).
        let c = cands(&[(3, 5, Role::Idle), (3, 50, Role::Idle), (3, 20, Role::Idle)]);
        // 1 free: need 4 → the oldest goes (4 free).
        let p = plan(&c, 10 * G, 4 * G, G);
        assert_eq!(p.victims, vec![1]);
        assert_eq!(p.outcome, Outcome::Fits { left: 4 * G });
        // Need 6: the two oldest, not the third.
        let p = plan(&c, 10 * G, 6 * G, G);
        assert_eq!(p.victims, vec![1, 2]);
        assert_eq!(p.outcome, Outcome::Fits { left: 7 * G });
        // Need 1: it fits already, nothing goes.
        let p = plan(&c, 10 * G, G, G);
        assert_eq!(p.victims, Vec::<usize>::new());
        assert_eq!(p.outcome, Outcome::Fits { left: G });
    }

    #[test]
    fn ties_go_to_the_earlier_model() {
        let t = Instant::now();
        let c = vec![
            Candidate {
                bytes: 2 * G,
                last_used: t,
                role: Role::Idle,
            };
            2
        ];
        assert_eq!(plan(&c, 4 * G, 2 * G, G).victims, vec![0]);
    }

    #[test]
    fn pinned_busy_and_loading_models_stay() {
        // The oldest models are pinned, busy, loading: only the idle one goes.
        let c = cands(&[
            (2, 90, Role::Pinned),
            (2, 80, Role::Busy),
            (2, 70, Role::Loading),
            (2, 10, Role::Idle),
        ]);
        let p = plan(&c, 8 * G, 2 * G, G);
        assert_eq!(p.victims, vec![3]);
        assert_eq!(p.outcome, Outcome::Fits { left: 2 * G });
    }

    #[test]
    fn refused_when_nothing_can_go() {
        let c = cands(&[(4, 90, Role::Pinned), (3, 80, Role::Busy)]);
        let p = plan(&c, 8 * G, 2 * G, 2 * G);
        assert_eq!(p.victims, Vec::<usize>::new());
        assert_eq!(p.outcome, Outcome::NoRoom { left: G });
    }

    #[test]
    fn every_idle_model_listed_when_even_all_are_not_enough() {
        // Pinned 6 of 8; two idle of 1: even with both gone only 2 are
        // free, under the minimum of 3 → no room (after unloading both:
        // the registry's rule today).
        let c = cands(&[
            (6, 90, Role::Pinned),
            (1, 5, Role::Idle),
            (1, 50, Role::Idle),
        ]);
        let p = plan(&c, 8 * G, 4 * G, 3 * G);
        assert_eq!(p.victims, vec![2, 1]);
        assert_eq!(p.outcome, Outcome::NoRoom { left: 2 * G });
    }

    #[test]
    fn fewer_slots_only_once_nothing_is_left_to_unload() {
        // need 5, min 2: the idle model goes first (3 + 3 free), it fits whole.
        let c = cands(&[(3, 5, Role::Busy), (3, 50, Role::Idle)]);
        let p = plan(&c, 8 * G, 5 * G, 2 * G);
        assert_eq!(p.victims, vec![1]);
        assert_eq!(p.outcome, Outcome::Fits { left: 5 * G });
        // need 6 > 5 even so: with no idle model left, the minimum fits.
        let p = plan(&c, 8 * G, 6 * G, 2 * G);
        assert_eq!(p.victims, vec![1]);
        assert_eq!(p.outcome, Outcome::Fits { left: 5 * G });
        // Nothing idle at all: the minimum fits without unloading.
        let c = cands(&[(3, 5, Role::Busy)]);
        let p = plan(&c, 8 * G, 6 * G, 2 * G);
        assert_eq!(p.victims, Vec::<usize>::new());
        assert_eq!(p.outcome, Outcome::Fits { left: 5 * G });
    }

    #[test]
    fn an_empty_budget_leaves_the_sizing_to_the_engine() {
        // Nothing else holds memory: it "fits" whatever it needs (the
        // engine's own sizing then fits fewer slots or says why not).
        let p = plan(&[], 2 * G, 6 * G, 3 * G);
        assert_eq!(p.victims, Vec::<usize>::new());
        assert_eq!(p.outcome, Outcome::Fits { left: 2 * G });
        // Also once every idle model is gone.
        let c = cands(&[(1, 5, Role::Idle)]);
        let p = plan(&c, 2 * G, 6 * G, 3 * G);
        assert_eq!(p.victims, vec![0]);
        assert_eq!(p.outcome, Outcome::Fits { left: 2 * G });
    }
}
