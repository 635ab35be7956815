//! ③ execute — interrupting the step in flight for a request that outranks
//! it.
//!
//! A step on these CPUs takes 20–200 ms. A request that should go first
//! would otherwise wait for the step in flight, then share the next step
//! with every decoder: an interactive request beside batch lines only;
//! under `--scheduling-policy priority` one ranked above every row of the
//! step; under `--fair-share` the first request of a tenant with nothing on
//! the engine. Here the handle, as it hands such a request to the owner,
//! raises a flag that llama.cpp's abort callback reads between graph nodes
//! (`runtime::Runtime::set_interrupt`): the step ends early
//! (`StepError::Interrupted`), its rows are rewound as if it never ran
//! (`faults.rs::rewind_step`), and the newcomer's first prompt chunk runs in a
//! step of its own (`Sequence::urgent`, `preempt.rs::step_order`). Then
//! everything else goes on, with its outputs unchanged.
//!
//! Bounds (no client controls unbounded waste): only a step whose rows can
//! be rewound exactly is interruptible (attention memory; no media span, no
//! drafts, no suspect running alone), and never two steps in a row, so at
//! least every other step completes whatever clients send; a tenant's
//! later requests interrupt nothing while it has work on the engine; under
//! plain fcfs only steps of batch lines alone are interrupted. The
//! interrupted steps and their compute are counters
//! (`steward_steps_interrupted_total`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::SchedulingPolicy;
use crate::owner::plan::scheduler::Plan;
use crate::owner::Owner;
use crate::request::Tenancy;
use crate::runtime::backend::Backend;
use crate::runtime::MemoryKind;

/// What the work on the engine is, as far as a newcomer may outrank it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct InFlight {
    /// Every row is a batch line.
    pub only_background: bool,
    /// The best (lowest) priority among the rows (priority policy only).
    pub best_priority: Option<i32>,
    /// The tenants with work on the engine (fair share only).
    pub tenants: Option<Vec<Arc<str>>>,
}

impl InFlight {
    /// Whether a request of `t` goes before this work.
    pub fn outranked_by(&self, t: &Tenancy) -> bool {
        if t.background {
            return false;
        }
        self.only_background
            || self.best_priority.is_some_and(|p| t.priority < p)
            || self
                .tenants
                .as_ref()
                .is_some_and(|ts| !ts.is_empty() && !ts.contains(&t.tenant))
    }
}

/// Shared by the handle (which raises the flag) and the owner (which says
/// what runs). The flag is what the runtime's abort callback reads.
#[derive(Default)]
pub struct Interrupt {
    flag: Arc<AtomicBool>,
    in_flight: Mutex<Option<InFlight>>,
}

impl Interrupt {
    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        self.flag.clone()
    }

    /// The step about to be submitted, when it may be interrupted.
    pub(crate) fn begin(&self, step: Option<InFlight>) {
        *self.in_flight.lock().unwrap_or_else(|p| p.into_inner()) = step;
        self.flag.store(false, Ordering::Release);
    }

    /// The step returned; a flag raised from now on is for nobody.
    pub(crate) fn end(&self) {
        *self.in_flight.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.flag.store(false, Ordering::Release);
    }

    /// A request of `t` was handed to the owner: interrupt the step in
    /// flight if `t` outranks it. Returns whether it did.
    pub(crate) fn arrived(&self, t: &Tenancy) -> bool {
        let g = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let hit = g.as_ref().is_some_and(|f| f.outranked_by(t));
        if hit {
            self.flag.store(true, Ordering::Release);
        }
        hit
    }
}

impl<B: Backend> Owner<B> {
    /// What the sequences in `keys` (None: every admitted one) are, for a
    /// newcomer to outrank; None when no policy lets anyone outrank them.
    /// `skip`: the waiting request (by arrival order) asking, not counted
    /// among the tenants with work.
    fn in_flight(&self, keys: Option<&[u64]>, skip: Option<u64>) -> Option<InFlight> {
        let rows: Vec<&Tenancy> = self
            .seqs
            .iter()
            .filter(|s| keys.is_none_or(|k| k.contains(&s.key)))
            .map(|s| &s.tenancy)
            .collect();
        if rows.is_empty() {
            return None;
        }
        let only_background = rows.iter().all(|t| t.background);
        let best_priority = (self.policy.policy == SchedulingPolicy::Priority)
            .then(|| rows.iter().map(|t| t.priority).min())
            .flatten();
        let tenants = self.policy.fair_share.then(|| {
            let waiting = self
                .queue
                .waiting
                .iter()
                .filter(|w| Some(w.order) != skip)
                .map(|w| &w.sub.req.tenancy);
            let parked = self.queue.parked.iter().map(|p| &p.seq.tenancy);
            let mut v: Vec<Arc<str>> = self
                .seqs
                .iter()
                .map(|s| &s.tenancy)
                .chain(waiting)
                .chain(parked)
                .filter(|t| !t.background)
                .map(|t| t.tenant.clone())
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        });
        let any = only_background || best_priority.is_some() || tenants.is_some();
        any.then_some(InFlight {
            only_background,
            best_priority,
            tenants,
        })
    }

    /// Whether a request of `t` admitted now outranks everything running:
    /// its first prompt chunk then runs in a step of its own. `waiting`:
    /// its arrival order while it is still in the queue.
    pub(super) fn claims_urgency(&self, t: &Tenancy, waiting: Option<u64>) -> bool {
        self.in_flight(None, waiting)
            .is_some_and(|f| f.outranked_by(t))
    }

    /// What `plan` is, when it may be interrupted: rows that can be rewound
    /// exactly, and not right after an interrupted step.
    pub(super) fn interruptible(&self, plan: &Plan, isolated: Option<u64>) -> Option<InFlight> {
        // The default policy with no batch line running: nothing can
        // outrank a step (and nothing is allocated per step to learn it).
        let batch = || self.seqs.iter().any(|s| s.tenancy.background);
        if self.clock.interrupted_last
            || isolated.is_some()
            || self.kv.memory.kind != MemoryKind::Attention
            || !(self.policy.ranked() || batch())
        {
            return None;
        }
        let keys: Vec<u64> = plan.keys();
        let rewindable = self
            .seqs
            .iter()
            .filter(|s| keys.contains(&s.key))
            .all(|s| s.drafts.is_empty() && s.media.is_empty());
        if !rewindable {
            return None;
        }
        self.in_flight(Some(&keys), None)
    }

    /// After a step: an urgent sequence that has had its step is urgent no
    /// more.
    pub(super) fn urgency_served(&mut self, plan: &Plan) {
        for s in self.seqs.iter_mut().filter(|s| s.urgent) {
            if plan.decode.contains(&s.key) || plan.chunks.iter().any(|c| c.key == s.key) {
                s.urgent = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(tenant: &str, priority: i32, background: bool) -> Tenancy {
        Tenancy {
            tenant: Arc::from(tenant),
            priority,
            background,
            ..Tenancy::default()
        }
    }

    #[test]
    fn who_outranks_what() {
        let batch = InFlight {
            only_background: true,
            ..Default::default()
        };
        assert!(batch.outranked_by(&t("", 0, false)));
        assert!(!batch.outranked_by(&t("", 0, true)), "a batch line never");
        let ranked = InFlight {
            best_priority: Some(5),
            ..Default::default()
        };
        assert!(ranked.outranked_by(&t("", 0, false)));
        assert!(!ranked.outranked_by(&t("", 5, false)), "equal: no");
        assert!(!ranked.outranked_by(&t("", 9, false)));
        let fair = InFlight {
            tenants: Some(vec![Arc::from("heavy")]),
            ..Default::default()
        };
        assert!(fair.outranked_by(&t("light", 0, false)), "a new tenant");
        assert!(!fair.outranked_by(&t("heavy", 0, false)), "a busy one");
        let empty = InFlight {
            tenants: Some(Vec::new()),
            ..Default::default()
        };
        assert!(!empty.outranked_by(&t("light", 0, false)));
    }

    #[test]
    fn the_flag_is_raised_only_while_an_outranked_step_runs() {
        let i = Interrupt::default();
        let light = t("light", 0, false);
        assert!(!i.arrived(&light), "nothing in flight");
        i.begin(Some(InFlight {
            tenants: Some(vec![Arc::from("heavy")]),
            ..Default::default()
        }));
        assert!(!i.arrived(&t("heavy", 0, false)));
        assert!(!i.flag().load(Ordering::Acquire));
        assert!(i.arrived(&light));
        assert!(i.flag().load(Ordering::Acquire));
        i.end();
        assert!(!i.flag().load(Ordering::Acquire), "cleared at the end");
        assert!(!i.arrived(&light));
        i.begin(None);
        assert!(!i.arrived(&light), "a step that may not be interrupted");
    }
}
