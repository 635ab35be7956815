//! Owner tests on the deterministic fake backend: every ending path
//! releases its slot, its KV cells and its reservation exactly once, with
//! exactly one terminal event; queue bounds, timeouts and fairness.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::*;
use crate::config::EngineConfig;
use crate::deliver::stream::{Event, FinishReason, GenerationError};
use crate::owner::inbox::Command;
use crate::request::GenerateRequest;
use crate::runtime::fake::{self, FakeBackend, FakeMemory};
use crate::runtime::TokenId;

struct Harness {
    owner: Owner<FakeBackend>,
    tx: mpsc::Sender<Command>,
    queued: Arc<AtomicUsize>,
    stats: watch::Receiver<EngineStats>,
}

fn config(slots: usize, budget: usize) -> EngineConfig {
    let mut c = EngineConfig::new("fake.gguf".into());
    c.admit.max_seqs = slots;
    c.admit.ctx_per_seq = 512;
    c.step.prompt_budget = budget;
    c.step.max_prefill_seqs = 4;
    c.step.max_decode_seqs = slots;
    c.admit.max_waiting = 8;
    // Most tests check that every cell is released; the prefix cache keeps
    // cells on purpose and has its own tests below.
    c.admit.prefix_cache = false;
    c
}

/// A greedy request.
fn request(
    prompt: Vec<TokenId>,
    max_tokens: u32,
    stop: &[&str],
    deadline: Option<Instant>,
    id: &str,
    prompt_logprobs: bool,
) -> GenerateRequest {
    GenerateRequest {
        stop: stop.iter().map(|s| s.to_string()).collect(),
        prompt_logprobs,
        deadline,
        ..GenerateRequest::greedy(id, prompt, max_tokens)
    }
}
/// A generation submission (for owners that must refuse one).
pub(crate) fn submission_for_test(outbox: mpsc::Sender<Event>) -> crate::owner::Submission {
    crate::owner::Submission {
        req: request(vec![1, 2], 2, &[], None, "gen", false),
        outbox,
        note: Default::default(),
    }
}

fn harness(c: EngineConfig) -> Harness {
    harness_kind(c, FakeMemory::Attention)
}

/// A harness over a fake backend that models a memory kind.
fn harness_kind(c: EngineConfig, memory: FakeMemory) -> Harness {
    let (tx, rx) = mpsc::channel(c.admit.max_waiting);
    let (stats_tx, stats) = watch::channel(EngineStats::default());
    let queued = Arc::new(AtomicUsize::new(0));
    let slots = c.admit.max_seqs;
    let args = OwnerParts {
        config: c,
        inbox: rx,
        stats: stats_tx,
        queued: queued.clone(),
        prefix_key: PrefixKey {
            model: 7,
            ..Default::default()
        },
        adapters: Default::default(),
        cores: None,
        wake: None,
        interrupt: Default::default(),
    };
    let kind = match memory {
        FakeMemory::Attention => MemoryKind::Attention,
        FakeMemory::Window { n_swa, .. } => MemoryKind::Window {
            n_swa: n_swa as u32,
        },
        FakeMemory::Recurrent => MemoryKind::Recurrent { hybrid: false },
    };
    let rt = FakeBackend::with_memory(slots, memory);
    let owner = Owner::new(rt, fake::vocab(), kind, 512, args);
    Harness {
        owner,
        tx,
        queued,
        stats,
    }
}

impl Harness {
    fn submit(
        &mut self,
        prompt_len: usize,
        max_tokens: u32,
        stop: &[&str],
    ) -> mpsc::Receiver<Event> {
        self.submit_with(
            prompt_len,
            max_tokens,
            stop,
            None,
            &format!("r{prompt_len}"),
        )
    }

    fn submit_with(
        &mut self,
        prompt_len: usize,
        max_tokens: u32,
        stop: &[&str],
        deadline: Option<Instant>,
        id: &str,
    ) -> mpsc::Receiver<Event> {
        let prompt = (1..=prompt_len as i32).map(|t| t % 60 + 1).collect();
        self.submit_req(prompt, max_tokens, stop, deadline, id, false)
    }

    fn submit_tokens(
        &mut self,
        prompt: &[TokenId],
        max_tokens: u32,
        id: &str,
    ) -> mpsc::Receiver<Event> {
        self.submit_req(prompt.to_vec(), max_tokens, &[], None, id, false)
    }

    fn submit_req(
        &mut self,
        prompt: Vec<TokenId>,
        max_tokens: u32,
        stop: &[&str],
        deadline: Option<Instant>,
        id: &str,
        prompt_logprobs: bool,
    ) -> mpsc::Receiver<Event> {
        let req = request(prompt, max_tokens, stop, deadline, id, prompt_logprobs);
        self.send(req, 4096)
    }

    /// Queue `req` with an outbox of `capacity` events.
    fn send(&mut self, req: GenerateRequest, capacity: usize) -> mpsc::Receiver<Event> {
        let (otx, orx) = mpsc::channel(capacity);
        self.queued.fetch_add(1, Ordering::AcqRel);
        self.tx
            .try_send(Command::Submit(Box::new(Submission {
                req,
                outbox: otx,
                note: Default::default(),
            })))
            .unwrap();
        orx
    }

    fn busy(&self) -> bool {
        !self.owner.idle()
            || !self.owner.queue.draining.is_empty()
            || self.tx.capacity() < self.tx.max_capacity()
    }

    fn ticks(&mut self, n: usize) {
        for _ in 0..n {
            if !self.busy() {
                return;
            }
            assert!(self.owner.tick());
        }
    }

    fn run_idle(&mut self) {
        for _ in 0..10_000 {
            if !self.busy() {
                return;
            }
            assert!(self.owner.tick());
        }
        panic!("never idle");
    }

    fn cancel(&mut self, id: &str) {
        self.tx.try_send(Command::Cancel(id.to_string())).unwrap();
    }

    fn assert_released(&self) {
        let st = self.stats.borrow().clone();
        assert_eq!(st.live_outboxes, 0, "outboxes");
        assert_eq!((st.running, st.prefilling, st.kv_cells_reserved), (0, 0, 0));
        let l = &self.owner.ledger;
        assert_eq!((l.permits(), l.used(), l.reserved()), (0, 0, 0), "ledger");
        assert_eq!(
            self.owner.kv.free_slots.len(),
            self.owner.config.admit.max_seqs,
            "slots"
        );
        assert!(self.owner.rt.kv.iter().all(|s| s.is_empty()), "kv cells");
        assert_eq!(self.queued.load(Ordering::Acquire), 0, "queued");
    }
}

/// Every event of a finished stream; asserts exactly one terminal event, last.
fn events(rx: &mut mpsc::Receiver<Event>) -> Vec<Event> {
    let mut v = Vec::new();
    while let Ok(e) = rx.try_recv() {
        v.push(e);
    }
    let terminals = v
        .iter()
        .filter(|e| matches!(e, Event::Done(_) | Event::Error(_)))
        .count();
    assert_eq!(terminals, 1, "exactly one terminal event: {v:?}");
    assert!(matches!(v.last(), Some(Event::Done(_) | Event::Error(_))));
    v
}

fn text(ev: &[Event]) -> String {
    ev.iter()
        .filter_map(|e| match e {
            Event::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn done(ev: &[Event]) -> &crate::Finished {
    match ev.last() {
        Some(Event::Done(f)) => f,
        other => panic!("not done: {other:?}"),
    }
}

#[test]
fn finish_by_length_releases_everything() {
    let mut h = harness(config(2, 16));
    let mut rx = h.submit(20, 5, &[]);
    h.run_idle();
    let ev = events(&mut rx);
    assert!(matches!(ev[0], Event::Admitted));
    let f = done(&ev);
    assert_eq!(f.reason, FinishReason::Length);
    assert_eq!(f.completion_tokens, 5);
    assert_eq!(text(&ev).split_whitespace().count(), 5);
    h.assert_released();
    assert_eq!(h.stats.borrow().requests_finished, 1);
}

#[test]
fn end_of_generation_token_stops() {
    let mut h = harness(config(1, 64));
    h.owner.rt.eog_from_pos = Some(12);
    let mut rx = h.submit(8, 50, &[]);
    h.run_idle();
    let ev = events(&mut rx);
    let f = done(&ev);
    assert_eq!(f.reason, FinishReason::Stop);
    assert_eq!(f.completion_tokens, 5, "positions 8..12 then EOG");
    assert!(!text(&ev).is_empty());
    h.assert_released();
}

#[test]
fn stop_string_ends_and_is_not_emitted() {
    let mut h = harness(config(1, 64));
    // Learn the unconstrained output, then stop on its third word.
    let mut rx = h.submit(6, 8, &[]);
    h.run_idle();
    let full = text(&events(&mut rx));
    let third = full.split_whitespace().nth(2).unwrap().to_string();
    let mut rx = h.submit(6, 8, &[&third]);
    h.run_idle();
    let ev = events(&mut rx);
    assert_eq!(done(&ev).reason, FinishReason::Stop);
    assert_eq!(text(&ev), full[..full.find(&third).unwrap()]);
    h.assert_released();
}

#[test]
fn a_failed_step_fails_its_sequences_and_the_engine_goes_on() {
    let mut h = harness(config(2, 64));
    let mut a = h.submit(10, 20, &[]);
    h.ticks(3);
    h.owner.rt.fail_next = true;
    h.ticks(1);
    let ev = events(&mut a);
    assert!(matches!(
        ev.last(),
        Some(Event::Error(GenerationError::Runtime(_)))
    ));
    h.assert_released();
    assert_eq!(h.stats.borrow().requests_failed, 1);
    let mut b = h.submit(10, 3, &[]);
    h.run_idle();
    assert_eq!(done(&events(&mut b)).completion_tokens, 3);
    h.assert_released();
}

#[test]
fn cancel_while_queued_prefilling_or_decoding_releases_everything() {
    // Queued: one slot busy, the second request waits and its client leaves.
    let mut h = harness(config(1, 8));
    let a = h.submit(40, 4, &[]);
    let b = h.submit(10, 4, &[]);
    h.ticks(1);
    assert_eq!(h.owner.queue.waiting.len(), 1);
    drop(b);
    h.ticks(1);
    assert!(h.owner.queue.waiting.is_empty());
    assert_eq!(h.stats.borrow().requests_cancelled, 1);
    // Prefilling: `a` is mid-prompt (40 tokens at 8 per step).
    assert!(!h.owner.seqs[0].is_decoding());
    assert!(!h.owner.rt.kv[h.owner.seqs[0].slot].is_empty());
    drop(a);
    h.run_idle();
    h.assert_released();
    assert_eq!(h.stats.borrow().requests_cancelled, 2);
    // Decoding.
    let mut c = h.submit(4, 100, &[]);
    h.ticks(4);
    assert!(h.owner.seqs[0].is_decoding());
    let _ = c.try_recv();
    drop(c);
    h.run_idle();
    h.assert_released();
    assert_eq!(h.stats.borrow().requests_cancelled, 3);
}

#[test]
fn queue_timeout_answers_and_leaves_nothing_behind() {
    let mut h = harness(config(1, 64));
    let mut a = h.submit(10, 200, &[]);
    h.ticks(1);
    assert_eq!(h.owner.seqs.len(), 1, "`a` holds the only slot");
    // The timeout from here on (set before, a stall between `a`'s intake and
    // admission on a loaded machine would time `a` out too).
    h.owner.config.admit.queue_timeout = Some(Duration::from_millis(20));
    let mut b = h.submit(10, 5, &[]);
    h.ticks(1);
    std::thread::sleep(Duration::from_millis(30));
    h.ticks(1);
    let ev = events(&mut b);
    assert!(
        matches!(ev[0], Event::Error(GenerationError::QueueTimeout(_))),
        "{ev:?}"
    );
    assert_eq!(h.owner.ledger.permits(), 1, "only `a` holds a reservation");
    assert_eq!(h.queued.load(Ordering::Acquire), 0);
    h.run_idle();
    let _ = events(&mut a);
    h.assert_released();
    assert_eq!(h.stats.borrow().requests_timed_out_in_queue, 1);
}

/// A step-time target with `target_min_prompt` bounds only the steps in
/// which a long prompt prefills: a short prompt arriving beside decoders
/// takes the whole budget in one step, a long one the target's share.
#[test]
fn step_target_applies_only_while_a_long_prompt_prefills() {
    let mut c = config(4, 256);
    c.step.target_step_ms = Some(50.0);
    c.step.target_min_prompt = 200;
    let mut h = harness(c);
    let decoder = h.submit(4, 400, &[]);
    h.ticks(3);
    assert!(h.owner.seqs[0].is_decoding());
    // Learned costs: a decode step 10 ms, a prompt token 2 ms, so a 50 ms
    // step has room for 20 prompt tokens.
    let prime = |o: &mut Owner<FakeBackend>| {
        o.cost = StepCostModel::default();
        o.cost.observe(1, 0, 10.0, 0.0);
        o.cost.observe(1, 100, 210.0, 50.0);
    };
    let mut short = h.submit(150, 1, &[]);
    prime(&mut h.owner);
    h.ticks(1);
    assert_eq!(
        h.owner.limits.prompt_budget, 256,
        "no long prompt: whole budget"
    );
    assert_eq!(
        *h.owner.rt.step_sizes.last().unwrap(),
        1 + 150,
        "the short prompt in one step"
    );
    let mut long = h.submit(300, 1, &[]);
    prime(&mut h.owner);
    h.ticks(1);
    assert_eq!(
        h.owner.limits.prompt_budget, 20,
        "a long prompt: the target's budget"
    );
    assert!(*h.owner.rt.step_sizes.last().unwrap() <= 1 + 20);
    drop(decoder);
    h.run_idle();
    let _ = events(&mut short);
    let _ = events(&mut long);
    h.assert_released();
}

#[test]
fn decoders_advance_every_step_while_a_long_prompt_prefills() {
    let mut h = harness(config(4, 16));
    let mut decoders: Vec<_> = (0..3).map(|_| h.submit(4, 200, &[])).collect();
    h.ticks(3);
    assert!(h.owner.seqs.iter().all(|s| s.is_decoding()));
    let mut long = h.submit(300, 2, &[]);
    h.ticks(1);
    for _ in 0..10 {
        let before: Vec<u32> = h.owner.seqs.iter().take(3).map(|s| s.generated()).collect();
        h.ticks(1);
        let after: Vec<u32> = h.owner.seqs.iter().take(3).map(|s| s.generated()).collect();
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(a, &(b + 1), "each decoder gets a token every step");
        }
        // Step = 3 decode tokens + at most the 16-token prompt budget.
        assert!(*h.owner.rt.step_sizes.last().unwrap() <= 3 + 16);
    }
    drop(decoders.drain(..));
    h.run_idle();
    let _ = events(&mut long);
    h.assert_released();
}

#[test]
fn short_request_after_a_long_one_gets_its_first_token_quickly() {
    let mut h = harness(config(4, 32));
    let mut long = h.submit(400, 1, &[]);
    h.ticks(2);
    let mut short = h.submit(10, 1, &[]);
    let mut ticks = 0;
    loop {
        h.ticks(1);
        ticks += 1;
        let mut finished = false;
        while let Ok(e) = short.try_recv() {
            finished |= matches!(e, Event::Done(_));
        }
        if finished {
            break;
        }
        assert!(ticks < 5, "short request stuck behind the long prompt");
    }
    h.run_idle();
    let _ = events(&mut long);
    h.assert_released();
}

/// Drain whatever is there without asserting on terminal events.
fn drain(rx: &mut mpsc::Receiver<Event>) -> Vec<Event> {
    let mut v = Vec::new();
    while let Ok(e) = rx.try_recv() {
        v.push(e);
    }
    v
}

#[test]
fn stop_token_and_disconnect_in_the_same_step_end_once() {
    let mut h = harness(config(1, 64));
    h.owner.rt.eog_from_pos = Some(9);
    let rx = h.submit(8, 50, &[]);
    h.ticks(1); // prefill: the first token is sampled
    drop(rx); // the client leaves...
    h.ticks(1); // ...and in this step the end-of-generation token arrives
    h.run_idle();
    let st = h.stats.borrow().clone();
    assert_eq!(
        st.requests_finished + st.requests_cancelled,
        1,
        "one terminal path"
    );
    h.assert_released();
}

#[test]
fn deadline_and_finish_in_the_same_step_end_once() {
    let mut h = harness(config(1, 64));
    let deadline = Instant::now() + Duration::from_millis(30);
    let mut rx = h.submit_with(8, 3, &[], Some(deadline), "d");
    h.ticks(2);
    std::thread::sleep(Duration::from_millis(40));
    // The deadline has passed and the next step would finish it: the reap
    // (deadline) runs first, so exactly one of them ends it.
    h.run_idle();
    let ev = events(&mut rx);
    let ends = ev
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Done(_) | Event::Error(GenerationError::DeadlineExceeded(_))
            )
        })
        .count();
    assert_eq!(ends, 1, "{ev:?}");
    h.assert_released();
}

#[test]
fn deadline_while_queued_and_while_decoding() {
    let mut h = harness(config(1, 64));
    let soon = Instant::now() + Duration::from_millis(20);
    let mut a = h.submit_with(8, 400, &[], Some(soon), "a");
    let mut b = h.submit_with(8, 4, &[], Some(soon), "b");
    h.ticks(3);
    std::thread::sleep(Duration::from_millis(30));
    h.run_idle();
    for rx in [&mut a, &mut b] {
        let ev = events(rx);
        assert!(
            matches!(
                ev.last(),
                Some(Event::Error(GenerationError::DeadlineExceeded(_)))
            ),
            "{ev:?}"
        );
    }
    assert_eq!(h.stats.borrow().requests_deadline_exceeded, 2);
    h.assert_released();
}

#[test]
fn explicit_cancel_in_each_state_double_cancel_and_unknown_ids() {
    let mut h = harness(config(1, 8));
    let mut a = h.submit_with(40, 100, &[], None, "a");
    let mut b = h.submit_with(10, 4, &[], None, "b");
    h.ticks(1);
    // b queued, a prefilling.
    h.cancel("b");
    h.cancel("b");
    h.cancel("nobody");
    h.ticks(1);
    assert!(matches!(
        events(&mut b)[0],
        Event::Error(GenerationError::Cancelled)
    ));
    assert!(!h.owner.seqs[0].is_decoding());
    h.cancel("a");
    h.ticks(1);
    let ev = events(&mut a);
    assert!(matches!(
        ev.last(),
        Some(Event::Error(GenerationError::Cancelled))
    ));
    h.cancel("a"); // already retired
    let mut c = h.submit_with(4, 100, &[], None, "c");
    h.ticks(4);
    assert!(h.owner.seqs[0].is_decoding());
    h.cancel("c");
    h.run_idle();
    assert!(matches!(
        events(&mut c).last(),
        Some(Event::Error(GenerationError::Cancelled))
    ));
    let st = h.stats.borrow().clone();
    assert_eq!(st.cancelled_by_state, [1, 1, 1]);
    assert_eq!(st.requests_cancelled, 3);
    assert!(st.cancel_latency.iter().all(|hist| hist.n == 1));
    h.assert_released();
}

#[test]
fn disconnect_in_each_state_is_counted_by_state_with_latency() {
    let mut h = harness(config(1, 8));
    let a = h.submit_with(40, 100, &[], None, "a");
    let b = h.submit_with(10, 4, &[], None, "b");
    h.ticks(1);
    drop(b); // queued
    h.ticks(1);
    drop(a); // prefilling
    h.ticks(1);
    let mut c = h.submit_with(4, 100, &[], None, "c");
    h.ticks(4);
    let _ = drain(&mut c);
    drop(c); // decoding
    h.run_idle();
    let st = h.stats.borrow().clone();
    assert_eq!(st.cancelled_by_state, [1, 1, 1]);
    assert_eq!(st.prompt_tokens_after_cancel, 0);
    h.assert_released();
}

#[test]
fn slow_reader_is_paused_then_bounded_then_ended() {
    let mut c = config(2, 64);
    c.deliver.max_lag_tokens = 8;
    // No timeout while the ticks below run (they may take any time on a
    // loaded machine); it is set, and waited past, further down.
    c.deliver.slow_reader_timeout = None;
    let mut h = harness(c);
    // A reader whose outbox holds only 2 events and never reads.
    let mut slow = h.send(request(vec![1, 2, 3], 500, &[], None, "slow", false), 2);
    let mut fast = h.submit(3, 60, &[]);
    for _ in 0..80 {
        h.ticks(1);
    }
    // The slow sequence stopped decoding at the lag bound; the fast one went on.
    let slow_seq = h.owner.seqs.iter().find(|s| s.id == "slow").unwrap();
    assert!(slow_seq.lagging() && slow_seq.paused_since.is_some());
    assert!(slow_seq.lag_tokens() <= 8);
    assert_eq!(h.stats.borrow().paused, 1);
    let f = events(&mut fast);
    assert_eq!(done(&f).completion_tokens, 60);
    // Past the timeout it is ended with a clear error, queued behind its
    // backlog (paused for 60 ms at least by then, whatever the load).
    h.owner.config.deliver.slow_reader_timeout = Some(Duration::from_millis(50));
    std::thread::sleep(Duration::from_millis(60));
    h.ticks(1);
    assert_eq!(h.stats.borrow().requests_slow_reader_terminated, 1);
    let mut got = Vec::new();
    for _ in 0..10 {
        got.extend(drain(&mut slow));
        h.ticks(1);
    }
    got.extend(drain(&mut slow));
    assert!(
        matches!(
            got.last(),
            Some(Event::Error(GenerationError::SlowReader(_)))
        ),
        "{got:?}"
    );
    h.run_idle();
    h.assert_released();
}

mod faults;
mod prefix;

/// Many rows sampled and emitted on helper threads (`owner/rows.rs`) give
/// every request the same text, length and stop as on the owner thread
/// alone, and release everything.
#[test]
fn rows_on_helper_threads_match_one_thread() {
    let run = |threads: usize| {
        let mut c = config(24, 1024);
        c.step.max_prefill_seqs = 24;
        c.admit.max_waiting = 32;
        c.sample.sample_threads = threads;
        let mut h = harness(c);
        let mut rxs: Vec<_> = (0..24)
            .map(|i| {
                let stop: &[&str] = if i % 3 == 0 { &["7"] } else { &[] };
                h.submit_with(5 + i, 10 + i as u32, stop, None, &format!("r{i}"))
            })
            .collect();
        h.run_idle();
        h.assert_released();
        let sizes = h.owner.rt.step_sizes.clone();
        let out: Vec<(String, u32, FinishReason)> = rxs
            .iter_mut()
            .map(|rx| {
                let ev = events(rx);
                let f = done(&ev);
                (text(&ev), f.completion_tokens, f.reason)
            })
            .collect();
        (out, sizes)
    };
    let (one, one_steps) = run(1);
    let (four, four_steps) = run(4);
    assert!(
        one_steps.iter().any(|&n| n >= 16),
        "steps wide enough for helper threads"
    );
    assert_eq!(one_steps, four_steps);
    assert_eq!(one, four);
    assert!(
        one.iter().any(|o| o.2 == FinishReason::Stop),
        "some stop strings hit"
    );
}

/// Aligned chunks (`scheduler::align_chunks`): prompts cut to multiples of
/// the granule and final pieces recomputed back to it give every request
/// the text it gets unaligned, keep the cell map exact (checked every tick)
/// and release everything.
#[test]
fn aligned_chunks_match_unaligned_output() {
    let run = |align: usize| {
        let mut c = config(8, 1024);
        c.step.max_prefill_seqs = 8;
        c.step.chunk_align = align;
        let mut h = harness(c);
        let mut rxs: Vec<_> = (0..8)
            .map(|i| h.submit_with(40 + 13 * i, 6, &[], None, &format!("r{i}")))
            .collect();
        h.run_idle();
        h.assert_released();
        let steps = h.owner.rt.step_sizes.len();
        let out: Vec<String> = rxs.iter_mut().map(|rx| text(&events(rx))).collect();
        (out, steps)
    };
    let (plain, plain_steps) = run(0);
    let (aligned, aligned_steps) = run(32);
    assert_eq!(plain, aligned);
    assert!(
        aligned_steps > plain_steps,
        "cut prompts finish a step later"
    );
}
mod memory;

mod adapters;
mod burst;
mod interrupt;
mod media;
mod speculate;
mod tenancy;
