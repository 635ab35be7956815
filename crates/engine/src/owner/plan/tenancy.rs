//! ② admit / ③ execute, plan — who goes first when requests compete, pure:
//! the rank a waiting or running request holds (batch lines last, then
//! `priority` under `--scheduling-policy priority`, then the tenant's
//! virtual token counter under `--fair-share`, then arrival), the counters
//! themselves, and which running sequence a waiting one may preempt.
//!
//! Fair share is the Virtual Token Counter of Sheng et al., "Fairness in
//! Serving Large Language Models" (OSDI '24), weighted: every tenant (API
//! key name) has a counter that grows by the tokens computed for it (prompt
//! and generated alike) divided by its weight; the waiting request of the
//! tenant with the lowest counter is admitted first. A tenant that becomes
//! active (nothing waiting, parked or running before) has its counter set
//! to the lowest counter among active tenants, so credit is never banked
//! while idle and a newcomer is never starved by a tenant busy for an hour
//! (it starts level with the least-served active tenant). The paper's
//! scheme is admission-only; here a tenant holding fewer slots than its
//! weighted share may also take a slot from one holding more than its share
//! (preemption by swap, `owner/preempt.rs`), so a newcomer's first token
//! does not wait for another tenant's request to finish.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use crate::config::SchedulingPolicy;
use crate::request::Tenancy;

/// Tenants whose counters are kept at most; past it the inactive tenant
/// with the lowest counter is forgotten (it would be lifted on return).
pub const MAX_TENANTS: usize = 4096;

/// The scheduling settings the rank reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    pub policy: SchedulingPolicy,
    pub fair_share: bool,
    pub preempt: bool,
}

impl Policy {
    /// Ranks are plain arrival order (today's behaviour) unless a policy
    /// or a batch line says otherwise.
    pub fn ranked(&self) -> bool {
        self.policy == SchedulingPolicy::Priority || self.fair_share
    }
}

/// A request's place in line; lower goes first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rank {
    pub background: bool,
    /// The request's priority (0 under fcfs).
    pub priority: i32,
    /// Its tenant's virtual token counter (0 without fair share).
    pub counter: f64,
    /// Its tenant's running sequences per unit of weight (ties between
    /// equal counters go to the tenant holding less).
    pub held: f64,
    /// Arrival order.
    pub order: u64,
}

impl Rank {
    pub fn cmp(&self, o: &Rank) -> Ordering {
        self.background
            .cmp(&o.background)
            .then(self.priority.cmp(&o.priority))
            .then(self.counter.total_cmp(&o.counter))
            .then(self.held.total_cmp(&o.held))
            .then(self.order.cmp(&o.order))
    }
}

/// The virtual token counters, by tenant.
#[derive(Debug, Default)]
pub struct Counters {
    by_tenant: HashMap<Arc<str>, f64>,
    /// Tokens computed per tenant (unweighted; tests and the stats).
    served: HashMap<Arc<str>, u64>,
}

impl Counters {
    pub fn get(&self, tenant: &str) -> f64 {
        self.by_tenant.get(tenant).copied().unwrap_or(0.0)
    }

    #[cfg(test)]
    pub fn served(&self, tenant: &str) -> u64 {
        self.served.get(tenant).copied().unwrap_or(0)
    }

    /// `tenant` becomes active while the tenants in `active` are: its
    /// counter starts at their lowest (none active: it keeps its own).
    /// VTC lifts only (`max`); here an idle period also forgives what the
    /// tenant was served before it, so a key that sends one request at a
    /// time always starts level with the least-served active tenant (with
    /// `max`, a one-stream key whose last request cost more tokens than a
    /// busy key's per-slot share waited behind it).
    pub fn activate<'a>(&mut self, tenant: &Arc<str>, active: impl Iterator<Item = &'a str>) {
        let floor = active.map(|t| self.get(t)).min_by(|a, b| a.total_cmp(b));
        if !self.by_tenant.contains_key(tenant) && self.by_tenant.len() >= MAX_TENANTS {
            // Forget the lowest counter (an inactive tenant's return lifts it anyway).
            if let Some(k) = self
                .by_tenant
                .iter()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .map(|(k, _)| k.clone())
            {
                self.by_tenant.remove(&k);
                self.served.remove(&k);
            }
        }
        let c = self.by_tenant.entry(tenant.clone()).or_insert(0.0);
        if let Some(f) = floor {
            *c = f;
        }
    }

    /// `tokens` were computed for `t`.
    pub fn charge(&mut self, t: &Tenancy, tokens: u64) {
        if tokens == 0 {
            return;
        }
        let w = if t.weight > 0.0 { t.weight } else { 1.0 };
        *self.by_tenant.entry(t.tenant.clone()).or_insert(0.0) += tokens as f64 / w;
        if self.served.contains_key(&t.tenant) || self.served.len() < MAX_TENANTS {
            *self.served.entry(t.tenant.clone()).or_insert(0) += tokens;
        }
    }
}

/// The rank of a request of `t` arriving `order`-th, where its tenant
/// holds `held` slots.
pub fn rank(p: &Policy, t: &Tenancy, order: u64, counters: &Counters, held: usize) -> Rank {
    let w = if t.weight > 0.0 { t.weight } else { 1.0 };
    Rank {
        background: t.background,
        priority: if p.policy == SchedulingPolicy::Priority {
            t.priority
        } else {
            0
        },
        counter: if p.fair_share {
            counters.get(&t.tenant)
        } else {
            0.0
        },
        held: if p.fair_share { held as f64 / w } else { 0.0 },
        order,
    }
}

/// A running sequence as preemption sees it.
#[derive(Debug, Clone)]
pub struct Running<'a> {
    pub key: u64,
    pub tenancy: &'a Tenancy,
    pub rank: Rank,
    /// It may be moved out (no draft model's slot, not a copy source).
    pub movable: bool,
}

/// Slots each active tenant should hold under fair share: `slots` split by
/// weight over the tenants with work (`active`: tenant, weight).
fn share(slots: usize, active: &[(&str, f64)], tenant: &str) -> f64 {
    let total: f64 = active.iter().map(|a| a.1).sum();
    let w = active.iter().find(|a| a.0 == tenant).map_or(0.0, |a| a.1);
    if total <= 0.0 {
        return slots as f64;
    }
    slots as f64 * w / total
}

/// Whether `cand` may take `victim`'s slot: an interactive request over a
/// batch line always; under the priority policy a strictly better
/// priority; under fair share (same class and priority) a tenant below its
/// weighted share of `slots`, served no more than the victim's tenant by
/// its counter, over one above its share. `held`: running sequences
/// per tenant; `active`: tenants with work and their weights.
pub fn may_preempt(
    p: &Policy,
    cand: (&Tenancy, &Rank),
    victim: (&Tenancy, &Rank),
    held: &HashMap<&str, usize>,
    active: &[(&str, f64)],
    slots: usize,
) -> bool {
    let ((ct, cr), (vt, vr)) = (cand, victim);
    if !p.preempt {
        return false;
    }
    if cr.background != vr.background {
        return !cr.background;
    }
    if cr.priority != vr.priority {
        return cr.priority < vr.priority;
    }
    if !p.fair_share || ct.tenant == vt.tenant {
        return false;
    }
    // Below its weighted share of slots, taking from a tenant above its
    // share that has been served at least as much (by its counter): the
    // slots converge to the shares without undoing what the counters
    // decided.
    let h = |t: &str| held.get(t).copied().unwrap_or(0) as f64;
    h(&ct.tenant) + 1.0 <= share(slots, active, &ct.tenant)
        && h(&vt.tenant) - 1.0 >= share(slots, active, &vt.tenant)
        && cr.counter <= vr.counter
}

/// The sequence `cand` should preempt, if any: among the movable ones it
/// may preempt, the worst ranked (a batch line, the worst priority, the
/// most-served tenant, the latest arrival).
pub fn victim(
    p: &Policy,
    cand: (&Tenancy, &Rank),
    running: &[Running<'_>],
    active: &[(&str, f64)],
    slots: usize,
) -> Option<u64> {
    if !p.preempt {
        return None;
    }
    let mut held: HashMap<&str, usize> = HashMap::new();
    for r in running {
        *held.entry(&r.tenancy.tenant).or_default() += 1;
    }
    running
        .iter()
        .filter(|r| r.movable)
        .filter(|r| may_preempt(p, cand, (r.tenancy, &r.rank), &held, active, slots))
        .max_by(|a, b| {
            // Fair share: the tenant furthest above its share goes first.
            let over = |r: &Running<'_>| {
                held.get(&*r.tenancy.tenant).copied().unwrap_or(0) as f64
                    - share(slots, active, &r.tenancy.tenant)
            };
            a.rank
                .background
                .cmp(&b.rank.background)
                .then(a.rank.priority.cmp(&b.rank.priority))
                .then(over(a).total_cmp(&over(b)))
                .then(a.rank.counter.total_cmp(&b.rank.counter))
                .then(a.rank.order.cmp(&b.rank.order))
        })
        .map(|r| r.key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, weight: f64, priority: i32) -> Tenancy {
        Tenancy {
            tenant: Arc::from(name),
            weight,
            priority,
            background: false,
        }
    }

    const PRIO: Policy = Policy {
        policy: SchedulingPolicy::Priority,
        fair_share: false,
        preempt: true,
    };
    const FAIR: Policy = Policy {
        policy: SchedulingPolicy::Fcfs,
        fair_share: true,
        preempt: true,
    };

    #[test]
    fn ranks_order_background_priority_counter_then_arrival() {
        let c = Counters::default();
        let a = rank(&PRIO, &t("a", 1.0, 5), 1, &c, 0);
        let b = rank(&PRIO, &t("b", 1.0, 0), 2, &c, 0);
        assert_eq!(b.cmp(&a), Ordering::Less, "priority before arrival");
        let fcfs = Policy {
            policy: SchedulingPolicy::Fcfs,
            ..PRIO
        };
        let a = rank(&fcfs, &t("a", 1.0, 5), 1, &c, 0);
        let b = rank(&fcfs, &t("b", 1.0, 0), 2, &c, 0);
        assert_eq!(a.cmp(&b), Ordering::Less, "fcfs ignores priority");
        let mut bg = t("a", 1.0, -100);
        bg.background = true;
        let g = rank(&PRIO, &bg, 0, &c, 0);
        assert_eq!(b.cmp(&g), Ordering::Less, "batch lines last");
    }

    #[test]
    fn counters_charge_by_weight_and_lift_newcomers() {
        let mut c = Counters::default();
        let (a, b) = (t("a", 1.0, 0), t("b", 4.0, 0));
        c.activate(&a.tenant, std::iter::empty());
        c.charge(&a, 1000);
        c.charge(&b, 400);
        assert_eq!((c.get("a"), c.get("b")), (1000.0, 100.0));
        // A newcomer starts level with the least-served active tenant.
        let n = Arc::from("n");
        c.activate(&n, ["a", "b"].into_iter());
        assert_eq!(c.get("n"), 100.0);
        // A returning tenant starts level with the active floor, from
        // below it or above it.
        c.activate(&b.tenant, ["a"].into_iter());
        assert_eq!(c.get("b"), 1000.0);
        c.charge(&b, 8000);
        c.activate(&b.tenant, ["a"].into_iter());
        assert_eq!(c.get("b"), 1000.0);
    }

    #[test]
    fn preemption_rules() {
        let c = Counters::default();
        let held: HashMap<&str, usize> = [("a", 4)].into_iter().collect();
        let (ta, tb) = (t("a", 1.0, 5), t("b", 1.0, 0));
        let (ra, rb) = (rank(&PRIO, &ta, 1, &c, 4), rank(&PRIO, &tb, 2, &c, 0));
        let active = [("a", 1.0), ("b", 1.0)];
        assert!(may_preempt(
            &PRIO,
            (&tb, &rb),
            (&ta, &ra),
            &held,
            &active,
            4
        ));
        assert!(!may_preempt(
            &PRIO,
            (&ta, &ra),
            (&tb, &rb),
            &held,
            &active,
            4
        ));
        let off = Policy {
            preempt: false,
            ..PRIO
        };
        assert!(!may_preempt(
            &off,
            (&tb, &rb),
            (&ta, &ra),
            &held,
            &active,
            4
        ));
        // Fair share: b holds 0 of its 2, a holds 4 of its 2.
        let (ta, tb) = (t("a", 1.0, 0), t("b", 1.0, 0));
        let (ra, rb) = (rank(&FAIR, &ta, 1, &c, 4), rank(&FAIR, &tb, 2, &c, 0));
        assert!(may_preempt(
            &FAIR,
            (&tb, &rb),
            (&ta, &ra),
            &held,
            &active,
            4
        ));
        // At 2 and 2 nobody moves.
        let even: HashMap<&str, usize> = [("a", 2), ("b", 2)].into_iter().collect();
        assert!(!may_preempt(
            &FAIR,
            (&tb, &rb),
            (&ta, &ra),
            &even,
            &active,
            4
        ));
        // Weights 1:3 over 4 slots: b's share is 3.
        let w = [("a", 1.0), ("b", 3.0)];
        let at: HashMap<&str, usize> = [("a", 2), ("b", 2)].into_iter().collect();
        assert!(may_preempt(&FAIR, (&tb, &rb), (&ta, &ra), &at, &w, 4));
        let at: HashMap<&str, usize> = [("a", 1), ("b", 3)].into_iter().collect();
        assert!(!may_preempt(&FAIR, (&tb, &rb), (&ta, &ra), &at, &w, 4));
    }

    #[test]
    fn the_victim_is_the_worst_movable() {
        let c = Counters::default();
        let ts = [
            t("a", 1.0, 3),
            t("a", 1.0, 7),
            t("a", 1.0, 7),
            t("a", 1.0, 9),
        ];
        let running: Vec<Running<'_>> = ts
            .iter()
            .enumerate()
            .map(|(i, x)| Running {
                key: i as u64,
                tenancy: x,
                rank: rank(&PRIO, x, i as u64, &c, 0),
                movable: i != 3,
            })
            .collect();
        let cand = t("b", 1.0, 0);
        let cr = rank(&PRIO, &cand, 9, &c, 0);
        // Key 3 (priority 9) is not movable; of the two at 7, the later.
        assert_eq!(victim(&PRIO, (&cand, &cr), &running, &[], 4), Some(2));
        let mid = t("b", 1.0, 7);
        let mr = rank(&PRIO, &mid, 9, &c, 0);
        assert_eq!(victim(&PRIO, (&mid, &mr), &running, &[], 4), None);
    }
}
