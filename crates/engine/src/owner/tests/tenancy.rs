//! Priorities, fair share and preemption on the fake backend: admission
//! and step order by rank, preemption by swap that recomputes nothing and
//! leaves the victim's output equal to its solo run, recompute when the
//! host tier has no room, weighted fair share converging to the weights,
//! a newcomer's first token within one step cycle, batch lines yielding.

use std::sync::Arc;

use super::*;
use crate::config::SchedulingPolicy;
use crate::request::Tenancy;

pub(super) fn tenancy(tenant: &str, weight: f64, priority: i32, background: bool) -> Tenancy {
    Tenancy {
        tenant: Arc::from(tenant),
        weight,
        priority,
        background,
    }
}

pub(super) fn prompt(first: TokenId, len: usize) -> Vec<TokenId> {
    (0..len as i32)
        .map(|i| (first * 13 + i * 7) % 60 + 1)
        .collect()
}

pub(super) fn req(id: &str, p: Vec<TokenId>, n: u32, t: Tenancy) -> GenerateRequest {
    GenerateRequest {
        ignore_eos: true,
        tenancy: t,
        ..GenerateRequest::greedy(id, p, n)
    }
}

pub(super) fn cfg(slots: usize, host: u64) -> EngineConfig {
    let mut c = config(slots, 64);
    c.admit.max_waiting = 512;
    c.admit.prefix_host_bytes = host;
    c
}

/// The output of `r` alone on a fresh owner, and the rows it computed.
pub(super) fn solo(r: &GenerateRequest, memory: FakeMemory) -> (Vec<TokenId>, usize) {
    let mut h = harness_kind(cfg(1, 0), memory);
    let mut rx = h.send(r.clone(), 4096);
    h.run_idle();
    let rows = h.owner.rt.step_sizes.iter().sum();
    (done(&events(&mut rx)).output_tokens.clone(), rows)
}

fn ids(h: &Harness) -> Vec<String> {
    h.owner.seqs.iter().map(|s| s.id.clone()).collect()
}

#[test]
fn priority_orders_admission_and_fcfs_ignores_it() {
    for policy in [SchedulingPolicy::Priority, SchedulingPolicy::Fcfs] {
        let mut c = cfg(1, 0);
        c.admit.policy = policy;
        let mut h = harness(c);
        let mut rxs = Vec::new();
        for (id, p) in [("late9", 9), ("p0", 0), ("p3", 3)] {
            rxs.push(h.send(req(id, prompt(1, 4), 3, tenancy("", 1.0, p, false)), 64));
        }
        let mut order = Vec::new();
        while h.busy() {
            assert!(h.owner.tick());
            for id in ids(&h) {
                if !order.contains(&id) {
                    order.push(id);
                }
            }
        }
        let want = match policy {
            SchedulingPolicy::Priority => ["p0", "p3", "late9"],
            SchedulingPolicy::Fcfs => ["late9", "p0", "p3"],
        };
        assert_eq!(order, want, "{policy:?}");
        for mut rx in rxs {
            assert_eq!(done(&events(&mut rx)).completion_tokens, 3);
        }
        h.assert_released();
    }
}

/// Two priority-5 streams hold both slots; a priority-0 request takes one
/// at once. Every output equals its solo run, and with room in the host
/// tier no row is computed twice.
fn preempt_case(memory: FakeMemory, host: u64) -> (Harness, usize) {
    let mut c = cfg(2, host);
    c.admit.policy = SchedulingPolicy::Priority;
    let mut h = harness_kind(c, memory);
    let reqs = [
        req("a", prompt(1, 20), 12, tenancy("", 1.0, 5, false)),
        req("b", prompt(2, 24), 12, tenancy("", 1.0, 5, false)),
        req("urgent", prompt(3, 10), 6, tenancy("", 1.0, 0, false)),
    ];
    let mut rxs = vec![h.send(reqs[0].clone(), 4096), h.send(reqs[1].clone(), 4096)];
    h.ticks(3);
    assert!(
        h.owner.seqs.iter().all(|s| s.is_decoding()),
        "both decoding"
    );
    rxs.push(h.send(reqs[2].clone(), 4096));
    // One iteration: admitted (a victim parked) and its prompt computed,
    // its first token sampled.
    h.ticks(1);
    assert!(ids(&h).contains(&"urgent".to_string()));
    assert_eq!(h.owner.queue.parked.len(), 1, "one victim parked");
    assert_eq!(h.owner.queue.parked[0].seq.id, "b", "the latest arrival");
    let urgent = h.owner.seqs.iter().find(|s| s.id == "urgent").unwrap();
    assert_eq!(urgent.generated(), 1, "first token in the same iteration");
    h.run_idle();
    let mut rows = 0;
    for (r, rx) in reqs.iter().zip(rxs.iter_mut()) {
        let (want, n) = solo(r, memory);
        let ev = events(rx);
        assert!(!ev.iter().any(|e| matches!(e, Event::Error(_))), "{}", r.id);
        assert_eq!(
            done(&ev).output_tokens,
            want,
            "{} equals its solo run",
            r.id
        );
        rows += n;
    }
    h.assert_released();
    assert_eq!(h.owner.kv.host.parked, 0, "parked bytes released");
    let all: usize = h.owner.rt.step_sizes.iter().sum();
    (h, all - rows)
}

#[test]
fn a_better_priority_preempts_by_swap_and_nothing_is_recomputed() {
    for memory in [FakeMemory::Attention, FakeMemory::Recurrent] {
        let (h, extra) = preempt_case(memory, 1 << 20);
        let st = h.stats.borrow().clone();
        assert_eq!(
            (st.preempt_swapped, st.preempt_resumed),
            (1, 1),
            "{memory:?}"
        );
        assert_eq!(st.preempt_recomputed, 0);
        assert_eq!(extra, 0, "{memory:?}: rows computed twice");
        assert_eq!(h.owner.rt.restores, 1);
    }
}

#[test]
fn without_host_room_the_victim_is_recomputed_and_still_equal() {
    let (h, extra) = preempt_case(FakeMemory::Attention, 0);
    let st = h.stats.borrow().clone();
    assert_eq!((st.preempt_swapped, st.preempt_recomputed), (0, 1));
    assert!(
        st.preempt_recomputed_tokens > 24,
        "prompt and generated cells"
    );
    assert_eq!(extra as u64, st.preempt_recomputed_tokens);
}

#[test]
fn fcfs_without_fair_share_never_preempts() {
    let mut h = harness(cfg(1, 1 << 20));
    let mut a = h.send(req("a", prompt(1, 8), 10, tenancy("x", 1.0, 5, false)), 64);
    h.ticks(2);
    let mut b = h.send(req("b", prompt(2, 8), 2, tenancy("y", 1.0, 0, false)), 64);
    h.ticks(1);
    assert_eq!(ids(&h), ["a"]);
    h.run_idle();
    events(&mut a);
    events(&mut b);
    assert_eq!(h.stats.borrow().preempt_swapped, 0);
}

#[test]
fn weighted_fair_share_converges_to_the_weights() {
    let mut c = cfg(4, 1 << 22);
    c.admit.fair_share = true;
    let mut h = harness(c);
    let mut rxs = Vec::new();
    for i in 0..150 {
        for (t, w) in [("a", 1.0), ("b", 3.0)] {
            let r = req(
                &format!("{t}{i}"),
                prompt(i, 8),
                40,
                tenancy(t, w, 0, false),
            );
            rxs.push(h.send(r, 4096));
        }
    }
    h.ticks(200);
    let served = |h: &Harness| (h.owner.tenants.served("a"), h.owner.tenants.served("b"));
    let (a0, b0) = served(&h);
    h.ticks(1200);
    let (a1, b1) = served(&h);
    let backlogged = |t: &str| {
        h.owner
            .queue
            .waiting
            .iter()
            .any(|w| &*w.sub.req.tenancy.tenant == t)
    };
    assert!(
        backlogged("a") && backlogged("b"),
        "both still have waiting work"
    );
    let ratio = (b1 - b0) as f64 / (a1 - a0) as f64;
    assert!(
        (ratio / 3.0 - 1.0).abs() <= 0.05,
        "b/a = {ratio:.3}, weights 3/1"
    );
    drop(rxs);
    h.run_idle();
    h.assert_released();
}

#[test]
fn a_newcomer_gets_its_first_token_within_one_step_cycle() {
    let mut c = cfg(4, 1 << 22);
    c.admit.fair_share = true;
    let mut h = harness(c);
    let mut heavy = Vec::new();
    for i in 0..12 {
        let r = req(
            &format!("h{i}"),
            prompt(i, 8),
            200,
            tenancy("heavy", 1.0, 0, false),
        );
        heavy.push(h.send(r, 4096));
    }
    // Busy for a long while: its counter is far ahead of the newcomer's.
    h.ticks(150);
    assert_eq!(h.owner.seqs.len(), 4);
    let light = req("light", prompt(40, 12), 4, tenancy("light", 1.0, 0, false));
    let mut rx = h.send(light.clone(), 4096);
    h.ticks(1);
    let l = h
        .owner
        .seqs
        .iter()
        .find(|s| s.id == "light")
        .expect("admitted at once");
    assert_eq!(
        l.generated(),
        1,
        "first token in the iteration it arrived in"
    );
    h.run_idle();
    assert_eq!(
        done(&events(&mut rx)).output_tokens,
        solo(&light, FakeMemory::Attention).0
    );
    for mut r in heavy {
        assert!(matches!(events(&mut r).last(), Some(Event::Done(_))));
    }
    h.assert_released();
}

#[test]
fn batch_lines_yield_to_interactive_requests() {
    let mut h = harness(cfg(1, 1 << 20));
    let line = req("line", prompt(5, 16), 20, tenancy("k", 1.0, 0, true));
    let mut b = h.send(line.clone(), 4096);
    h.ticks(3);
    let chat = req("chat", prompt(6, 8), 5, tenancy("k", 1.0, 0, false));
    let mut c = h.send(chat.clone(), 4096);
    h.ticks(1);
    assert_eq!(ids(&h), ["chat"], "the line parked, the chat admitted");
    assert_eq!(h.owner.seqs[0].generated(), 1);
    h.run_idle();
    assert_eq!(
        done(&events(&mut c)).output_tokens,
        solo(&chat, FakeMemory::Attention).0
    );
    assert_eq!(
        done(&events(&mut b)).output_tokens,
        solo(&line, FakeMemory::Attention).0
    );
    h.assert_released();
}

#[test]
fn a_parked_sequence_cancelled_or_abandoned_ends_once() {
    let mut c = cfg(1, 1 << 20);
    c.admit.policy = SchedulingPolicy::Priority;
    let mut h = harness(c);
    let p = |n: i32| tenancy("", 1.0, n, false);
    let mut a = h.send(req("a", prompt(1, 8), 30, p(5)), 64);
    h.ticks(2);
    let b = h.send(req("b", prompt(2, 8), 30, p(0)), 64);
    h.ticks(1);
    assert_eq!(h.owner.queue.parked.len(), 1);
    // Cancelled by id while parked.
    h.cancel("a");
    h.ticks(1);
    assert!(h.owner.queue.parked.is_empty());
    assert!(matches!(
        events(&mut a).last(),
        Some(Event::Error(GenerationError::Cancelled))
    ));
    // Parked, then its client leaves.
    let mut e = h.send(req("e", prompt(3, 8), 6, p(-1)), 64);
    h.ticks(1);
    assert_eq!(h.owner.queue.parked.len(), 1, "b parked");
    drop(b);
    h.ticks(1);
    assert!(h.owner.queue.parked.is_empty(), "reaped while parked");
    h.run_idle();
    assert!(matches!(events(&mut e).last(), Some(Event::Done(_))));
    h.assert_released();
    assert_eq!(h.owner.kv.host.parked, 0);
    assert_eq!(h.stats.borrow().requests_cancelled, 2);
}
