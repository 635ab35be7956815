//! A burst of short prompts (`owner/budget.rs::burst`) on the fake
//! backend: more prompts waiting than sequences decoding are computed
//! whole in one step past the chunked budget, their outputs equal to their
//! solo runs; with the rule off, or with fewer prompts than decoders, the
//! step budget chunks them as before.

use super::tenancy::{cfg, prompt, req, solo, tenancy};
use super::*;

fn burst_cfg(on: bool) -> EngineConfig {
    let mut c = cfg(8, 0);
    c.step.prompt_budget = 16;
    c.step.max_prefill_seqs = 2;
    c.step.burst_prefill = on;
    c.step.burst_max_tokens = 90;
    c
}

fn plain(id: &str, first: TokenId, len: usize, n: u32) -> GenerateRequest {
    req(id, prompt(first, len), n, tenancy("t", 1.0, 0, false))
}

/// One request decoding, then `n` prompts of 20 tokens arrive together.
fn after_one_decoder(on: bool, n: usize) -> (Harness, Vec<GenerateRequest>, Vec<Receiver>) {
    let mut h = harness(burst_cfg(on));
    let first = plain("first", 1, 8, 12);
    let mut rxs = vec![h.send(first.clone(), 4096)];
    h.ticks(1);
    assert!(h.owner.seqs[0].is_decoding());
    let mut reqs = vec![first];
    for i in 0..n {
        let r = plain(&format!("p{i}"), 10 + i as TokenId, 20, 6);
        rxs.push(h.send(r.clone(), 4096));
        reqs.push(r);
    }
    (h, reqs, rxs)
}

type Receiver = mpsc::Receiver<Event>;

#[test]
fn a_burst_is_computed_whole_in_one_step_and_loses_nothing() {
    let (mut h, reqs, mut rxs) = after_one_decoder(true, 4);
    h.ticks(1);
    // Four prompts of 20 (80 tokens, past the budget of 16) and the
    // decoder: one step.
    assert_eq!(h.owner.rt.step_sizes.last(), Some(&81));
    assert!(h.owner.seqs.iter().all(|s| s.is_decoding()));
    // Past the burst's most tokens (90): of five prompts, four in this step.
    let (mut h5, _, _rx5) = after_one_decoder(true, 5);
    h5.ticks(1);
    assert_eq!(h5.owner.rt.step_sizes.last(), Some(&81));
    h.run_idle();
    for (r, rx) in reqs.iter().zip(rxs.iter_mut()) {
        let ev = events(rx);
        assert_eq!(
            done(&ev).output_tokens,
            solo(r, FakeMemory::Attention).0,
            "{}",
            r.id
        );
    }
}

#[test]
fn without_the_rule_or_with_more_decoders_prompts_are_chunked() {
    let (mut h, _, _rx) = after_one_decoder(false, 4);
    h.ticks(1);
    assert!(*h.owner.rt.step_sizes.last().unwrap() <= 1 + 16);
    // Three decoders, two prompts: no burst.
    let mut h = harness(burst_cfg(true));
    let mut rxs = Vec::new();
    for i in 0..3 {
        rxs.push(h.send(plain(&format!("d{i}"), i, 8, 12), 4096));
    }
    h.ticks(1);
    assert!(h.owner.seqs.iter().all(|s| s.is_decoding()));
    for i in 0..2 {
        rxs.push(h.send(plain(&format!("p{i}"), 20 + i, 20, 4), 4096));
    }
    h.ticks(1);
    assert!(*h.owner.rt.step_sizes.last().unwrap() <= 3 + 16);
}
