//! Speculative decoding on the fake backend: drafts (n-gram from the
//! history, or a draft model: here a second fake runtime, which drafts the
//! target's own tokens) never change a request's output, and every ending
//! path (length, cancel mid-step with drafts in flight, a stop string)
//! releases slot, cells and reservation exactly as without speculation.

use super::*;
use crate::owner::spec::speculate::SpecMode;

/// Prompts holding many distinct token pairs, so the n-gram drafter often
/// finds the output's last two tokens earlier in the history (the fake's
/// continuation seldom follows them: mostly rejections).
fn prompts() -> Vec<Vec<TokenId>> {
    (0..6)
        .map(|i| {
            (0..150 + 7 * i)
                .map(|j| (1 + (j * j * 5 + j * 11 + 17 * i) % 63) as TokenId)
                .collect()
        })
        .collect()
}

fn spec_harness(mode: SpecMode, drafter: bool) -> Harness {
    let mut c = config(6, 256);
    c.step.max_prefill_seqs = 6;
    c.step.speculative = mode;
    c.step.draft_max = 4;
    let h = harness(c);
    if !drafter {
        return h;
    }
    let Harness {
        owner,
        tx,
        queued,
        stats,
    } = h;
    Harness {
        owner: owner.with_drafter(FakeBackend::new(6)),
        tx,
        queued,
        stats,
    }
}

/// Runs every prompt together; returns each output's tokens and the
/// engine's draft counters (drafted, accepted).
fn run_all(h: &mut Harness, max_tokens: u32) -> (Vec<Vec<TokenId>>, (u64, u64)) {
    let mut rxs: Vec<_> = prompts()
        .iter()
        .enumerate()
        .map(|(i, p)| h.submit_tokens(p, max_tokens, &format!("s{i}")))
        .collect();
    h.run_idle();
    h.assert_released();
    let out = rxs
        .iter_mut()
        .map(|rx| done(&events(rx)).output_tokens.clone())
        .collect();
    let st = h.stats.borrow().clone();
    (
        out,
        (st.spec_draft_tokens_total, st.spec_accepted_tokens_total),
    )
}

#[test]
fn drafts_never_change_output_and_release_everything() {
    let (plain, none) = run_all(&mut spec_harness(SpecMode::Off, false), 24);
    assert_eq!(none, (0, 0), "no drafts without speculation");

    let mut ng = spec_harness(SpecMode::Ngram, false);
    let (ngram, (drafted, accepted)) = run_all(&mut ng, 24);
    assert_eq!(ngram, plain, "n-gram drafts changed the output");
    assert!(drafted > 0, "the repeated prompts gave n-gram drafts");
    assert!(accepted < drafted, "the fake rejects most n-gram drafts");

    let mut dm = spec_harness(SpecMode::Draft, true);
    let (model, (drafted, accepted)) = run_all(&mut dm, 24);
    assert_eq!(model, plain, "draft-model drafts changed the output");
    assert!(drafted > 0);
    assert_eq!(accepted, drafted, "a draft model equal to the target");
    // Accepted drafts mean fewer steps for the same tokens.
    let steps = |h: &Harness| h.owner.rt.step_sizes.len();
    let mut off = spec_harness(SpecMode::Off, false);
    run_all(&mut off, 24);
    assert!(
        steps(&dm) < steps(&off),
        "{} steps with drafts, {} without",
        steps(&dm),
        steps(&off)
    );
}

/// A cancel while drafts are in the batch (between ticks, mid-decode),
/// a stop string inside an accepted run of drafts, and the length limit
/// reached inside one: each ends once, exactly, and frees everything.
#[test]
fn cancel_stop_and_length_with_drafts_in_flight() {
    for drafter in [false, true] {
        let mode = if drafter {
            SpecMode::Draft
        } else {
            SpecMode::Ngram
        };
        let mut h = spec_harness(mode, drafter);
        let ps = prompts();
        let mut a = h.submit_tokens(&ps[0], 40, "a");
        let mut b = h.submit_tokens(&ps[1], 40, "b");
        // Length 5 with up to 4 drafts a step: the limit falls inside a run.
        let mut c = h.submit_tokens(&ps[2], 5, "c");
        let mut drafted_live = false;
        for _ in 0..40 {
            h.ticks(1);
            drafted_live |= h.owner.seqs.iter().any(|s| !s.drafts.is_empty());
            let st = h.stats.borrow().clone();
            // Drafts' cells stay inside the ledger: held and promised
            // cells within capacity, and no slot past its own promise
            // (prompt + max_tokens), drafts included.
            let l = &h.owner.ledger;
            assert!(
                l.used() + l.reserved() <= l.capacity(),
                "used {} + reserved {} > capacity {}",
                l.used(),
                l.reserved(),
                l.capacity()
            );
            for s in &h.owner.seqs {
                let cells = h.owner.rt.kv[s.slot].len();
                let max_tokens = if s.id == "c" { 5 } else { 40 };
                assert!(
                    cells <= s.prompt.len() + max_tokens,
                    "slot {} holds {cells} cells",
                    s.slot
                );
            }
            // Cancel "a" as soon as drafts have run, while it still decodes.
            if st.spec_draft_tokens_total > 0 && h.owner.seqs.iter().any(|s| s.id == "a") {
                break;
            }
        }
        assert!(drafted_live || h.stats.borrow().spec_draft_tokens_total > 0);
        h.cancel("a");
        h.run_idle();
        h.assert_released();
        let ea = events(&mut a);
        assert!(
            matches!(ea.last(), Some(Event::Error(GenerationError::Cancelled))),
            "{ea:?}"
        );
        let eb = events(&mut b);
        assert_eq!(done(&eb).output_tokens.len(), 40);
        let ec = events(&mut c);
        assert_eq!(done(&ec).output_tokens.len(), 5, "length inside drafts");
        assert_eq!(done(&ec).reason, FinishReason::Length);
    }
}

/// What the server's drafts earned is where a new request's estimate
/// starts (per class: greedy n-gram here; the sampled class is untouched).
#[test]
fn new_requests_start_from_the_learned_acceptance() {
    use crate::owner::spec::speculate::Priors;
    let mut h = spec_harness(SpecMode::Ngram, false);
    let (_, (drafted, accepted)) = run_all(&mut h, 24);
    assert!(drafted > 0 && accepted < drafted);
    let greedy = Priors::class(SpecMode::Ngram, false);
    let sampled = Priors::class(SpecMode::Ngram, true);
    let prior = h.owner.spec.priors.prior(greedy);
    assert!(prior < 0.4, "mostly rejected drafts, prior {prior}");
    assert_eq!(h.owner.spec.priors.prior(sampled), 0.5);
    let _rx = h.submit_tokens(&prompts()[3], 4, "late");
    h.ticks(1);
    let s = h
        .owner
        .seqs
        .iter()
        .find(|s| s.id == "late")
        .expect("admitted");
    let st = s.spec.as_ref().expect("speculating");
    assert_eq!((st.class, st.acceptance()), (greedy, prior));
}
