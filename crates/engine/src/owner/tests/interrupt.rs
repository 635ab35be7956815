//! Interrupting the step in flight (`owner/interrupt.rs`) on the fake
//! backend: an interrupted step (the runtime's abort callback, here the
//! fake's knob, which leaves half the batch applied as llama.cpp leaves the
//! ubatches it finished) is rewound, every output still equals its solo
//! run, the newcomer's first step runs alone, and who may interrupt what
//! follows the policy.

use super::tenancy::{cfg, prompt, req, solo, tenancy};
use super::*;
use crate::config::SchedulingPolicy;
use crate::owner::plan::scheduler::Plan;
use crate::request::Tenancy;

#[test]
fn an_interrupted_step_is_rewound_and_the_newcomer_runs_alone() {
    let mut c = cfg(4, 1 << 22);
    c.admit.fair_share = true;
    let mut h = harness(c);
    let heavy: Vec<GenerateRequest> = (0..3)
        .map(|i| {
            req(
                &format!("h{i}"),
                prompt(i, 8),
                12,
                tenancy("heavy", 1.0, 0, false),
            )
        })
        .collect();
    let mut rxs: Vec<_> = heavy.iter().map(|r| h.send(r.clone(), 4096)).collect();
    h.ticks(3);
    assert!(h.owner.seqs.iter().all(|s| s.is_decoding()));
    let light = req("light", prompt(40, 12), 4, tenancy("light", 1.0, 0, false));
    assert!(h.owner.claims_urgency(&light.tenancy, None));
    assert!(
        !h.owner.claims_urgency(&heavy[0].tenancy, None),
        "a busy tenant"
    );
    // The step of the three decoders is interrupted as the light request
    // arrives.
    let before: Vec<u32> = h.owner.seqs.iter().map(|s| s.generated()).collect();
    h.owner.rt.interrupt_next = true;
    h.ticks(1);
    assert_eq!(h.owner.rt.interrupted, 1);
    let after: Vec<u32> = h.owner.seqs.iter().map(|s| s.generated()).collect();
    assert_eq!(before, after, "nothing of the interrupted step stays");
    assert_eq!(h.stats.borrow().steps_interrupted, 1);
    assert!(h.owner.clock.interrupted_last);
    let keys: Vec<u64> = h.owner.seqs.iter().map(|s| s.key).collect();
    let plan = Plan {
        decode: keys,
        chunks: Vec::new(),
    };
    assert!(
        h.owner.interruptible(&plan, None).is_none(),
        "never two steps in a row"
    );
    // Admitted, it runs its whole prompt in a step of its own.
    rxs.push(h.send(light.clone(), 4096));
    h.ticks(1);
    assert_eq!(
        h.owner.rt.step_sizes.last(),
        Some(&12),
        "the light prompt alone"
    );
    let l = h.owner.seqs.iter().find(|s| s.id == "light").unwrap();
    assert_eq!(l.generated(), 1);
    assert!(!l.urgent, "urgent for one step only");
    assert!(
        h.owner.interruptible(&plan, None).is_some(),
        "a heavy step may be again"
    );
    h.run_idle();
    for (r, rx) in heavy.iter().chain([&light]).zip(rxs.iter_mut()) {
        let ev = events(rx);
        assert_eq!(
            done(&ev).output_tokens,
            solo(r, FakeMemory::Attention).0,
            "{}",
            r.id
        );
    }
    h.assert_released();
}

#[test]
fn a_chunk_interrupted_halfway_is_computed_again() {
    let mut h = harness(cfg(2, 1 << 22));
    let line = req("line", prompt(5, 40), 6, tenancy("k", 1.0, 0, true));
    let mut b = h.send(line.clone(), 4096);
    h.owner.rt.interrupt_next = true;
    h.ticks(1);
    assert_eq!(h.owner.rt.interrupted, 1);
    assert_eq!(h.owner.seqs[0].generated(), 0);
    h.run_idle();
    assert_eq!(
        done(&events(&mut b)).output_tokens,
        solo(&line, FakeMemory::Attention).0
    );
    h.assert_released();
}

/// A change to the configuration.
type Set<'a> = &'a dyn Fn(&mut EngineConfig);

#[test]
fn who_may_interrupt_follows_the_policy() {
    let plain = |c: &mut EngineConfig| c.admit.fair_share = false;
    let ranked = |c: &mut EngineConfig| c.admit.policy = SchedulingPolicy::Priority;
    let cases: [(Set, i32, bool, Tenancy, bool); 5] = [
        // fcfs: an interactive request outranks only batch lines.
        (&plain, 0, false, tenancy("b", 1.0, 0, false), false),
        (&plain, 0, true, tenancy("b", 1.0, 0, false), true),
        (&plain, 0, true, tenancy("b", 1.0, 0, true), false),
        // priority: a better one outranks, an equal one does not.
        (&ranked, 5, false, tenancy("a", 1.0, 0, false), true),
        (&ranked, 5, false, tenancy("a", 1.0, 5, false), false),
    ];
    for (i, (set, p, background, newcomer, want)) in cases.into_iter().enumerate() {
        let mut c = cfg(2, 1 << 22);
        set(&mut c);
        let mut h = harness(c);
        let _rx = h.send(
            req("r", prompt(1, 8), 50, tenancy("a", 1.0, p, background)),
            4096,
        );
        h.ticks(2);
        assert_eq!(h.owner.claims_urgency(&newcomer, None), want, "case {i}");
        let keys: Vec<u64> = h.owner.seqs.iter().map(|s| s.key).collect();
        let plan = Plan {
            decode: keys,
            chunks: Vec::new(),
        };
        let f = h.owner.interruptible(&plan, None);
        assert_eq!(
            f.is_some_and(|f| f.outranked_by(&newcomer)),
            want,
            "case {i}"
        );
    }
}
