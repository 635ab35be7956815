//! The prefix cache on models whose memory cannot be cut anywhere: a
//! sliding window whose old cells are overwritten, a recurrent state that
//! holds only its last position. On the fake backend, which computes a
//! token wrongly when the state it needs is gone: for repeated, extended,
//! branched and cancelled requests every output equals a cold run's, the
//! window the cell map records is the runtime's after every iteration, and
//! reuse still happens (directly or through checkpoints).

use super::*;

const WINDOW: FakeMemory = FakeMemory::Window { n_swa: 8, size: 24 };

fn cfg(slots: usize, cache: bool) -> EngineConfig {
    let mut c = config(slots, 16);
    c.admit.prefix_cache = cache;
    c.admit.prefix_copy_min = 8;
    c.admit.ctx_per_seq = 160;
    c.admit.checkpoint_min_tokens = 16;
    c
}

fn text(first: TokenId, len: usize) -> Vec<TokenId> {
    (0..len as i32)
        .map(|i| (first * 13 + i * 7) % 60 + 1)
        .collect()
}

/// `p`'s output alone on a fresh owner with the cache off.
fn cold(memory: FakeMemory, p: &[TokenId], max_tokens: u32) -> Vec<TokenId> {
    let mut h = harness_kind(cfg(2, false), memory);
    let mut rx = h.submit_tokens(p, max_tokens, "cold");
    h.run_idle();
    done(&events(&mut rx)).output_tokens.clone()
}

/// Run `p` on `h` to the end; its output and the prompt tokens it reused.
fn run(h: &mut Harness, p: &[TokenId], max_tokens: u32, id: &str) -> (Vec<TokenId>, u64) {
    let before = h.stats.borrow().prefix_reused_tokens;
    let mut rx = h.submit_tokens(p, max_tokens, id);
    h.run_idle();
    let out = done(&events(&mut rx)).output_tokens.clone();
    (out, h.stats.borrow().prefix_reused_tokens - before)
}

/// A conversation and its variants, each checked against a cold run: a
/// repeat, the next turn, a branch of the last line, a long decode past the
/// window then an extension of its prompt, a mid-decode cancel.
fn conversation(memory: FakeMemory) -> Harness {
    let mut h = harness_kind(cfg(2, true), memory);
    let p = text(1, 40);
    let check = |h: &mut Harness, p: &[TokenId], n: u32, id: &str| {
        let (out, reused) = run(h, p, n, id);
        assert_eq!(
            out,
            cold(memory, p, n),
            "{id}: output differs from a cold run"
        );
        reused
    };
    check(&mut h, &p, 6, "first");
    check(&mut h, &p, 6, "repeat");
    let (a, _) = run(&mut h, &p, 6, "turn1");
    let mut turn2 = p.clone();
    turn2.extend(&a);
    turn2.extend(text(2, 10));
    let r = check(&mut h, &turn2, 6, "turn2");
    assert!(r > 40, "the next turn reuses the conversation ({r})");
    let mut branch = p[..34].to_vec();
    branch.extend(text(3, 8));
    check(&mut h, &branch, 6, "branch");
    // Past the window: the slot's early window cells are overwritten.
    check(&mut h, &p, 60, "long");
    let mut ext = p.clone();
    ext.extend(text(4, 5));
    check(&mut h, &ext, 6, "after-long");
    check(&mut h, &p[..30], 6, "prefix-after-long");
    // Cancelled mid-decode, then the same prompt and its extension.
    let mut rx = h.submit_tokens(&ext, 100, "cancelled");
    h.ticks(12);
    h.cancel("cancelled");
    h.run_idle();
    let _ = events(&mut rx);
    check(&mut h, &ext, 6, "after-cancel");
    ext.extend(text(5, 6));
    check(&mut h, &ext, 6, "after-cancel-ext");
    h.assert_idle_cached();
    h
}

#[test]
fn a_sliding_window_model_reuses_only_what_its_window_still_holds() {
    let h = conversation(WINDOW);
    let st = h.stats.borrow().clone();
    assert!(st.prefix_hits >= 4, "{st:?}");
    assert!(
        st.checkpoint_restores >= 1,
        "a branch behind the window rewinds to a checkpoint"
    );
    assert!(st.checkpoints_taken > 0 && st.checkpoint_bytes > 0);
}

#[test]
fn a_recurrent_model_reuses_whole_states_and_checkpoints() {
    let h = conversation(FakeMemory::Recurrent);
    let st = h.stats.borrow().clone();
    assert!(st.prefix_hits >= 3, "{st:?}");
    assert!(st.checkpoint_restores >= 1, "{st:?}");
    assert_eq!(h.owner.rt.copies, 0, "a recurrent state is never copied");
}

#[test]
fn without_checkpoints_a_window_model_recomputes_rather_than_reads_overwritten_cells() {
    let mut c = cfg(1, true);
    c.admit.checkpoint_bytes = 0;
    let mut h = harness_kind(c, WINDOW);
    let p = text(6, 40);
    run(&mut h, &p, 60, "long");
    assert!(h.owner.kv.memory.lo(0) > 0, "the window moved on");
    let (out, reused) = run(&mut h, &p[..35], 4, "behind");
    assert_eq!(reused, 0, "the window at position 34 is gone");
    assert_eq!(out, cold(WINDOW, &p[..35], 4));
}

/// Random traffic with cancels and clients leaving, on both kinds: one
/// terminal event each, the cell map and window exact after every
/// iteration (`check_cells`), and every completed output equal to a cold
/// run's.
/// A prompt, its max_tokens, its events.
type Stream = (Vec<TokenId>, u32, mpsc::Receiver<Event>, Vec<Event>);

#[test]
fn random_traffic_on_windows_and_recurrent_states_matches_cold_runs() {
    for (memory, unified) in [
        (WINDOW, false),
        (WINDOW, true),
        (FakeMemory::Recurrent, false),
        (FakeMemory::Recurrent, true),
    ] {
        let mut c = cfg(3, true);
        c.model.kv_unified = unified;
        let mut h = harness_kind(c, memory);
        let mut state = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let base = text(7, 30);
        let mut streams: Vec<Stream> = Vec::new();
        let mut checked = 0;
        let mut history: Vec<Vec<TokenId>> = Vec::new();
        for i in 0..300 {
            if next(4) == 0 && streams.len() < 4 {
                // A new prompt, or the next turn of a finished one.
                let mut p = match history.len() {
                    n if n > 0 && next(2) == 0 => history[next(n)].clone(),
                    _ => base[..10 + next(20)].to_vec(),
                };
                p.truncate(100);
                for _ in 0..next(6) {
                    p.push(1 + next(50) as TokenId);
                }
                let n = 1 + next(40) as u32;
                let rx = h.submit_tokens(&p, n, &format!("r{i}"));
                streams.push((p, n, rx, Vec::new()));
            }
            if !streams.is_empty() && next(15) == 0 {
                streams.swap_remove(next(streams.len()));
            }
            h.ticks(1);
            let mut finished = Vec::new();
            streams.retain_mut(|(p, n, rx, got)| {
                while let Ok(e) = rx.try_recv() {
                    got.push(e);
                }
                match got.last() {
                    Some(Event::Done(d)) => {
                        finished.push((p.clone(), *n, d.output_tokens.clone()));
                        false
                    }
                    Some(Event::Error(e)) => panic!("{e:?}"),
                    _ => true,
                }
            });
            for (p, n, out) in finished {
                assert_eq!(out, cold(memory, &p, n), "{memory:?}: {p:?}");
                checked += 1;
                history.push([p, out].concat());
            }
        }
        h.run_idle();
        assert!(checked > 20, "{checked} checked");
        let st = h.stats.borrow().clone();
        assert!(
            st.prefix_hits > 3 && st.checkpoint_restores > 0,
            "{memory:?}: {} hits, {} through checkpoints",
            st.prefix_hits,
            st.checkpoint_restores
        );
    }
}

/// Evicted entries go to the host tier with the lowest position their
/// window held (or their recurrent state); restored, they give a cold
/// run's output, and only as far as that state reaches.
#[test]
fn the_host_tier_restores_window_and_recurrent_state_only_where_it_reaches() {
    for memory in [WINDOW, FakeMemory::Recurrent] {
        let mut c = cfg(1, true);
        c.admit.prefix_host_min = 8;
        c.admit.prefix_host_bytes = 1 << 20;
        c.admit.checkpoint_bytes = 0;
        let mut h = harness_kind(c, memory);
        let a = text(8, 40);
        let b = text(9, 40);
        let (out_a, _) = run(&mut h, &a, 4, "a");
        // `b` takes the only slot: `a`'s state goes to the host tier.
        run(&mut h, &b, 4, "b");
        assert!(h.stats.borrow().prefix_spills >= 1, "{memory:?}");
        // Saved whole, a window holds only its last position's window: a
        // prompt sharing most but not the end of it restores nothing.
        let early = [&a[..30], &text(14, 6)[..]].concat();
        let (got, reused) = run(&mut h, &early, 4, "a-early");
        assert_eq!(got, cold(memory, &early, 4), "{memory:?}");
        assert_eq!(reused, 0, "{memory:?}: the saved state does not reach 30");
        run(&mut h, &b, 4, "b-again");
        let next = [&a[..], &out_a[..3], &text(10, 5)].concat();
        let (got, reused) = run(&mut h, &next, 6, "a-next");
        assert_eq!(got, cold(memory, &next, 6), "{memory:?}");
        assert_eq!(reused, 43, "{memory:?}: restored whole");
        // Behind the saved window (or inside the recurrent state): nothing.
        run(&mut h, &b, 60, "b-long");
        let (got, reused) = run(&mut h, &b[..20], 4, "b-short");
        assert_eq!(got, cold(memory, &b[..20], 4), "{memory:?}");
        assert_eq!(reused, 0, "{memory:?}");
        h.assert_idle_cached();
    }
}

/// One slot and a long prompt: restoring its saved prefix and reserving the
/// whole growth cannot both fit even with the cache empty. The request is
/// computed instead of waiting at the head of the queue for ever.
#[test]
fn a_restore_that_can_never_fit_is_computed_instead() {
    let mut c = cfg(1, true);
    c.admit.prefix_host_min = 8;
    c.admit.prefix_host_bytes = 1 << 20;
    let mut h = harness_kind(c, FakeMemory::Attention);
    let a = text(11, 100);
    run(&mut h, &a, 4, "a");
    run(&mut h, &text(12, 20), 4, "b");
    assert!(h.stats.borrow().prefix_spills >= 1);
    let next = [&a[..], &text(13, 30)].concat();
    let (got, _) = run(&mut h, &next, 20, "long");
    assert_eq!(got, cold(FakeMemory::Attention, &next, 20));
    h.assert_idle_cached();
}

/// Requests sharing only a system prompt: every `--checkpoint-interval`
/// tokens a prompt chunk's end is checkpointed, so the second request
/// restarts from the last checkpoint inside the shared part (a recurrent
/// state otherwise only reuses whole).
#[test]
fn a_shared_system_prompt_restarts_from_an_interval_checkpoint() {
    let mut c = cfg(2, true);
    c.admit.checkpoint_interval = 16;
    let mut h = harness_kind(c, FakeMemory::Recurrent);
    let system = text(15, 40);
    let a = [&system[..], &text(16, 10)[..]].concat();
    let b = [&system[..], &text(17, 10)[..]].concat();
    run(&mut h, &a, 4, "a");
    assert!(
        h.owner
            .kv
            .memory
            .positions(h.owner.kv.cache.entries()[0].slot)
            .len()
            >= 3
    );
    let (got, reused) = run(&mut h, &b, 4, "b");
    assert_eq!(got, cold(FakeMemory::Recurrent, &b, 4));
    assert_eq!(
        reused, 32,
        "from the checkpoint at 32, inside the shared 40"
    );
    h.assert_idle_cached();
}
