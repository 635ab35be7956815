//! Fault injection on the fake backend: a fault that belongs to one
//! sequence fails that sequence alone; the others finish with the output
//! they would have had without it; everything is released.

use super::*;
use crate::runtime::StepError;

/// Three requests decoding together; the fault hits the second one's slot.
/// Returns the three streams' events and the reference output (no fault).
fn run_with(fault: impl FnOnce(&mut FakeBackend, usize)) -> (Vec<Vec<Event>>, Vec<Vec<TokenId>>) {
    let reference = {
        let mut h = harness(config(3, 64));
        let mut rx: Vec<_> = (0..3).map(|i| h.submit(10 + i, 12, &[])).collect();
        h.run_idle();
        rx.iter_mut()
            .map(|r| done(&events(r)).output_tokens.clone())
            .collect()
    };
    let mut h = harness(config(3, 64));
    let mut rx: Vec<_> = (0..3).map(|i| h.submit(10 + i, 12, &[])).collect();
    h.ticks(3);
    let slot = h.owner.seqs.iter().find(|s| s.id == "r11").unwrap().slot;
    fault(&mut h.owner.rt, slot);
    h.run_idle();
    let ev = rx.iter_mut().map(events).collect();
    h.assert_released();
    (ev, reference)
}

fn only_the_second_fails(ev: &[Vec<Event>], reference: &[Vec<TokenId>]) {
    for (i, e) in ev.iter().enumerate() {
        if i == 1 {
            assert!(
                matches!(e.last(), Some(Event::Error(GenerationError::Runtime(_)))),
                "{e:?}"
            );
        } else {
            assert_eq!(done(e).output_tokens, reference[i], "request {i}");
        }
    }
}

#[test]
fn a_decode_error_of_one_sequence_fails_only_it() {
    let (ev, reference) = run_with(|rt, slot| {
        rt.fail_slot = Some((slot, StepError::Decode("injected".into())));
    });
    only_the_second_fails(&ev, &reference);
}

#[test]
fn kv_full_for_one_sequence_fails_only_it() {
    let (ev, reference) = run_with(|rt, slot| rt.fail_slot = Some((slot, StepError::NoKvSpace)));
    only_the_second_fails(&ev, &reference);
}

#[test]
fn nan_logits_fail_only_their_sequence() {
    let (ev, reference) = run_with(|rt, slot| rt.nan_slot = Some(slot));
    only_the_second_fails(&ev, &reference);
}

#[test]
fn a_fault_during_a_padded_prefill_is_undone_before_the_retry() {
    // One long prompt prefilling in chunks beside a decoder; the decoder's
    // slot faults once: the prompt's chunk is undone and computed again.
    let mut c = config(2, 8);
    c.step.max_prefill_seqs = 1;
    let mut h = harness(c);
    let mut a = h.submit(4, 30, &[]);
    h.ticks(2);
    let mut b = h.submit(40, 3, &[]);
    h.ticks(2);
    h.owner.rt.fail_next = true;
    h.run_idle();
    let ea = events(&mut a);
    let eb = events(&mut b);
    // A one-off failure of a two-sequence step: both retried alone, both
    // succeed.
    assert_eq!(done(&ea).completion_tokens, 30);
    assert_eq!(done(&eb).completion_tokens, 3);
    h.assert_released();
}

#[test]
fn a_panic_in_the_runtime_fails_the_engine_and_ends_every_stream() {
    let mut h = harness(config(2, 64));
    let mut a = h.submit(10, 20, &[]);
    let mut b = h.submit(12, 20, &[]);
    h.ticks(2);
    h.owner.rt.panic_slot = Some(0);
    let Harness {
        owner, tx, stats, ..
    } = h;
    crate::owner::faults::run(owner);
    let st = stats.borrow().clone();
    assert!(st.failed && st.stopped && !st.ready, "{st:?}");
    // The owner is gone: both streams end (no terminal event to forge).
    for rx in [&mut a, &mut b] {
        while let Ok(e) = rx.try_recv() {
            assert!(!matches!(e, Event::Done(_)), "{e:?}");
        }
        assert!(rx.is_closed());
    }
    drop(tx);
}

#[test]
fn tokens_without_text_are_not_a_readers_lag() {
    // Reference output, then the same request with a stop string that
    // holds back every token's text as a possible prefix (a long one that
    // never matches): nothing is undelivered, so nothing pauses.
    let mut h = harness(config(1, 64));
    let mut rx = h.submit(10, 12, &[]);
    h.run_idle();
    let want = text(&events(&mut rx));
    let words: Vec<&str> = want.split_inclusive(' ').collect();
    let stop = format!("{}zz", words[..8].concat());
    let mut c = config(1, 64);
    c.deliver.max_lag_tokens = 2;
    let mut h = harness(c);
    let mut rx = h.submit(10, 12, &[stop.as_str()]);
    h.run_idle();
    let ev = events(&mut rx);
    assert_eq!(done(&ev).completion_tokens, 12, "{ev:?}");
    assert_eq!(text(&ev), want);
    h.assert_released();
}
