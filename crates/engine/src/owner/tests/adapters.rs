//! LoRA adapter sets on the fake backend, whose tokens an adapter shifts
//! and which computes garbage from cells computed under another set: every
//! output of mixed traffic equals its solo run, a step never mixes sets,
//! the prefix cache never reuses state across sets, and sets take turns.

use super::*;

fn cfg(slots: usize, cache: bool) -> EngineConfig {
    let mut c = config(slots, 16);
    c.admit.prefix_cache = cache;
    c.admit.prefix_copy_min = 8;
    c
}

fn with_adapters(c: EngineConfig, n: usize) -> Harness {
    let mut h = harness(c);
    for i in 0..n {
        let spec = crate::config::AdapterSpec {
            name: format!("a{i}"),
            path: format!("a{i}.gguf").into(),
            scale: 1.0,
        };
        h.owner.load_adapter(&spec).unwrap();
    }
    h
}

fn req(prompt: &[TokenId], n: u32, id: &str, set: &[(usize, f32)]) -> GenerateRequest {
    let mut r = request(prompt.to_vec(), n, &[], None, id, false);
    r.adapters = set.to_vec();
    r
}

fn prompt(first: TokenId, len: usize) -> Vec<TokenId> {
    (0..len as i32)
        .map(|i| (first * 11 + i * 5) % 60 + 1)
        .collect()
}

/// The output of `p` under `set`, alone on a fresh owner.
fn solo(p: &[TokenId], n: u32, set: &[(usize, f32)]) -> Vec<TokenId> {
    let mut h = with_adapters(cfg(4, false), 2);
    let mut rx = h.send(req(p, n, "solo", set), 4096);
    h.run_idle();
    done(&events(&mut rx)).output_tokens.clone()
}

#[test]
fn an_adapter_changes_output_and_scale_zero_is_the_base() {
    let p = prompt(1, 12);
    let base = solo(&p, 6, &[]);
    assert_ne!(solo(&p, 6, &[(0, 1.0)]), base);
    assert_ne!(solo(&p, 6, &[(0, 1.0)]), solo(&p, 6, &[(1, 1.0)]));
    assert_eq!(solo(&p, 6, &[(0, 0.0)]), base);
}

#[test]
fn mixed_traffic_equals_solo_runs_and_sets_take_turns() {
    let sets: [&[(usize, f32)]; 4] = [&[], &[(0, 1.0)], &[(1, 0.5)], &[(0, 1.0), (1, 1.0)]];
    let mut c = cfg(4, false);
    c.step.adapter_slice = 1;
    let mut h = with_adapters(c, 2);
    let mut rxs = Vec::new();
    for (i, set) in sets.iter().enumerate() {
        let p = prompt(i as TokenId + 1, 10 + i);
        let rx = h.send(req(&p, 8, &format!("r{i}"), set), 4096);
        rxs.push((p, *set, rx));
    }
    h.run_idle();
    for (p, set, mut rx) in rxs {
        let ev = events(&mut rx);
        assert_eq!(done(&ev).output_tokens, solo(&p, 8, set), "set {set:?}");
    }
    // Four sets decoding together switch every step (slice 1).
    assert!(h.owner.rt.adapter_switches >= 4 * 7);
    h.assert_released();
}

#[test]
fn a_longer_slice_switches_less_and_outputs_stay_the_same() {
    let mut c = cfg(4, false);
    c.step.adapter_slice = 4;
    let mut h = with_adapters(c, 1);
    let p = prompt(3, 10);
    let mut a = h.send(req(&p, 12, "a", &[]), 4096);
    let mut b = h.send(req(&p, 12, "b", &[(0, 1.0)]), 4096);
    h.run_idle();
    assert_eq!(done(&events(&mut a)).output_tokens, solo(&p, 12, &[]));
    assert_eq!(
        done(&events(&mut b)).output_tokens,
        solo(&p, 12, &[(0, 1.0)])
    );
    let switches = h.owner.rt.adapter_switches;
    assert!((3..=10).contains(&switches), "{switches} switches");
}

#[test]
fn no_prefix_reuse_across_adapter_sets() {
    let mut h = with_adapters(cfg(2, true), 1);
    let p = prompt(5, 30);
    let reused = |h: &Harness| h.stats.borrow().prefix_reused_tokens;
    let mut rx = h.send(req(&p, 4, "base", &[]), 4096);
    h.run_idle();
    let base = done(&events(&mut rx)).output_tokens.clone();
    // The same prompt under the adapter: nothing reused, its own output.
    let mut rx = h.send(req(&p, 4, "lora", &[(0, 1.0)]), 4096);
    h.run_idle();
    assert_eq!(reused(&h), 0, "state reused across adapter sets");
    assert_eq!(
        done(&events(&mut rx)).output_tokens,
        solo(&p, 4, &[(0, 1.0)])
    );
    // Under the same set again: reused, same output.
    let mut rx = h.send(req(&p, 4, "lora2", &[(0, 1.0)]), 4096);
    h.run_idle();
    assert!(reused(&h) > 0);
    assert_eq!(
        done(&events(&mut rx)).output_tokens,
        solo(&p, 4, &[(0, 1.0)])
    );
    // The base entry is still there for the base model, and a different
    // scale is another set.
    let mut rx = h.send(req(&p, 4, "base2", &[(0, 0.0)]), 4096);
    h.run_idle();
    assert_eq!(done(&events(&mut rx)).output_tokens, base);
    let before = reused(&h);
    let mut rx = h.send(req(&p, 4, "half", &[(0, 0.5)]), 4096);
    h.run_idle();
    assert_eq!(reused(&h), before);
    assert_eq!(
        done(&events(&mut rx)).output_tokens,
        solo(&p, 4, &[(0, 0.5)])
    );
}

#[test]
fn adapters_load_while_running_and_a_bad_one_is_refused() {
    let mut h = with_adapters(cfg(2, false), 0);
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let spec = crate::config::AdapterSpec {
        name: "x".into(),
        path: "x.gguf".into(),
        scale: 1.0,
    };
    h.tx.try_send(Command::LoadAdapter(spec.clone(), tx))
        .unwrap();
    h.owner.tick();
    assert_eq!(rx.try_recv().unwrap().unwrap().id, 0);
    // The same name twice, and a file the runtime refuses.
    assert!(h.owner.load_adapter(&spec).is_err());
    let bad = crate::config::AdapterSpec {
        name: "y".into(),
        path: "bad.gguf".into(),
        ..spec
    };
    assert!(h.owner.load_adapter(&bad).is_err());
    assert_eq!(h.owner.adapters.read().unwrap().len(), 1);
}
