//! Owner tests of the prefix cache, its host tier and the cell map, on the
//! fake backend.

use super::*;
use crate::admission::kv::StateModel;

fn cached_config(slots: usize) -> EngineConfig {
    let mut c = config(slots, 16);
    c.admit.prefix_cache = true;
    c.admit.prefix_copy_min = 8;
    c
}

impl Harness {
    /// Idle with the prefix cache on: nothing live, every slot free or
    /// cached, a cached slot's cells are exactly its entry's tokens, free
    /// slots hold nothing, and the ledger counts the cached cells.
    pub(super) fn assert_idle_cached(&self) {
        let st = self.stats.borrow().clone();
        assert_eq!(st.live_outboxes, 0, "outboxes");
        let l = &self.owner.ledger;
        assert_eq!((l.permits(), l.used(), l.reserved()), (0, 0, 0), "ledger");
        let cache = &self.owner.kv.cache;
        assert_eq!(
            self.owner.kv.free_slots.len() + cache.len(),
            self.owner.config.admit.max_seqs,
            "slots"
        );
        for e in cache.entries() {
            assert_eq!(
                self.owner.rt.kv[e.slot],
                self.owner.kv.cells.tokens(e.slot),
                "slot {}",
                e.slot
            );
        }
        for &s in &self.owner.kv.free_slots {
            assert!(self.owner.rt.kv[s].is_empty(), "free slot {s} holds cells");
        }
        // Idle: every held cell is cached; per-slot streams hold each
        // entry's cells on their own, a unified pool shares them.
        let entries: u64 = cache
            .entries()
            .iter()
            .map(|e| self.owner.kv.cells.len(e.slot) as u64)
            .sum();
        if self.owner.state_model == StateModel::PerSequence {
            // One recurrent state per entry.
            assert_eq!(l.cached(), cache.len() as u64);
            return;
        }
        let held = self.owner.kv.cells.cells();
        if self.owner.config.model.kv_unified {
            assert!(held <= entries);
        } else {
            assert_eq!(held, entries);
        }
        assert_eq!(l.cached(), held);
        assert_eq!(st.kv_cells_cached, held);
    }
}

fn prompt(first: TokenId, len: usize) -> Vec<TokenId> {
    (0..len as i32).map(|i| (first + i) % 60 + 1).collect()
}

/// The output of `p` run alone on a fresh owner with config `c` (the
/// reference a cached run must match).
fn reference(c: EngineConfig, p: &[TokenId], max_tokens: u32) -> Vec<TokenId> {
    let mut h = harness(c);
    let mut rx = h.submit_tokens(p, max_tokens, "ref");
    h.run_idle();
    done(&events(&mut rx)).output_tokens.clone()
}

#[test]
fn a_repeated_prompt_reuses_all_but_its_last_token_with_the_same_output() {
    let p = prompt(3, 40);
    // Reference: the cache off.
    let want = reference(config(2, 16), &p, 6);

    let mut h = harness(cached_config(2));
    let mut a = h.submit_tokens(&p, 6, "a");
    h.run_idle();
    assert_eq!(done(&events(&mut a)).cached_tokens, 0);
    h.assert_idle_cached();
    // The finished sequence's prompt and decoded output stay cached.
    assert_eq!(h.owner.kv.cells.cells(), 40 + 5);
    let steps_before = h.owner.rt.step_sizes.len();
    let mut b = h.submit_tokens(&p, 6, "b");
    h.run_idle();
    let ev = events(&mut b);
    let f = done(&ev);
    assert_eq!(f.cached_tokens, 39);
    assert_eq!(f.output_tokens, want, "same output as without the cache");
    // One prompt token computed, not 40 (first step of b holds 1 token).
    assert_eq!(h.owner.rt.step_sizes[steps_before], 1);
    let st = h.stats.borrow().clone();
    assert_eq!(
        (st.prefix_lookups, st.prefix_hits, st.prefix_reused_tokens),
        (2, 1, 39)
    );
    h.assert_idle_cached();
}

/// One slot with a host tier: `p` runs (6 tokens), then another prompt
/// evicts its entry, which goes to the host tier.
fn spilled(p: &[TokenId]) -> Harness {
    spilled_in(p, 512)
}

/// `spilled` with `ctx` cells in the slot.
fn spilled_in(p: &[TokenId], ctx: u32) -> Harness {
    let mut c = cached_config(1);
    c.admit.ctx_per_seq = ctx;
    c.admit.prefix_host_bytes = 1 << 20;
    c.admit.prefix_host_min = 8;
    let mut h = harness(c);
    let mut a = h.submit_tokens(p, 6, "a");
    h.run_idle();
    events(&mut a);
    let mut b = h.submit_tokens(&prompt(30, 20), 2, "b");
    h.run_idle();
    events(&mut b);
    h
}

#[test]
fn an_evicted_prefix_is_restored_from_the_host_tier_with_the_same_output() {
    let p = prompt(3, 40);
    let want = reference(config(1, 16), &p, 6);

    let mut h = spilled(&p);
    let st = h.stats.borrow().clone();
    assert_eq!(st.prefix_spills, 1);
    assert!(st.prefix_host_bytes > 0 && st.prefix_host_entries == 1);
    h.assert_idle_cached();
    // The first prompt again: restored (not recomputed), same output.
    let steps_before = h.owner.rt.step_sizes.len();
    let mut again = h.submit_tokens(&p, 6, "again");
    h.run_idle();
    let ev = events(&mut again);
    assert_eq!(done(&ev).cached_tokens, 39);
    assert_eq!(done(&ev).output_tokens, want);
    assert_eq!(h.owner.rt.restores, 1);
    assert_eq!(
        h.owner.rt.step_sizes[steps_before], 1,
        "one prompt token computed"
    );
    let st = h.stats.borrow().clone();
    assert_eq!((st.prefix_restores, st.prefix_restored_tokens), (1, 39));
    h.assert_idle_cached();
    // Another identity key: the tier does not match.
    h.owner.prefix_key.adapters = 7;
    let mut other = h.submit_tokens(&p, 2, "other-key");
    h.run_idle();
    assert_eq!(done(&events(&mut other)).cached_tokens, 0);
}

/// A planned restore (39 tokens) the runtime refuses, in a slot of `ctx`
/// cells: the request computes its whole prompt, and its reservation must
/// cover all of it.
fn refused_restore_reserves_the_whole_growth(ctx: u32) {
    let p = prompt(3, 40);
    let mut h = spilled_in(&p, ctx);
    assert_eq!(h.stats.borrow().prefix_spills, 1);
    h.owner.rt.refuse_restore = true;
    let mut again = h.submit_tokens(&p, 6, "again");
    h.ticks(1); // admitted; its first 16-token chunk computed
    assert_eq!(h.owner.seqs[0].reused, 0);
    assert_eq!(h.owner.ledger.reserved(), 40 + 6 - 16);
    h.run_idle();
    assert_eq!(done(&events(&mut again)).cached_tokens, 0);
    h.assert_idle_cached();
}

#[test]
fn a_refused_restore_leaves_the_whole_growth_reserved() {
    refused_restore_reserves_the_whole_growth(512);
}

#[test]
fn a_restore_with_no_room_for_twice_its_history_reserves_its_exact_need() {
    // 64 cells: the restored 39 and the whole growth (46) cannot both be
    // reserved, the exact need (46) can: restored, not recomputed.
    let p = prompt(3, 40);
    let mut c = config(1, 16);
    c.admit.ctx_per_seq = 64;
    let want = reference(c, &p, 6);
    let mut h = spilled_in(&p, 64);
    let mut again = h.submit_tokens(&p, 6, "again");
    h.ticks(1);
    assert_eq!(h.owner.seqs[0].reused, 39);
    assert_eq!(
        h.owner.ledger.reserved(),
        46 - 39 - 1,
        "growth, its first token computed"
    );
    h.run_idle();
    let ev = events(&mut again);
    assert_eq!(done(&ev).cached_tokens, 39);
    assert_eq!(done(&ev).output_tokens, want);
    assert_eq!(h.owner.rt.restores, 1);
    h.assert_idle_cached();
}

#[test]
fn a_refused_tight_restore_reserves_its_prefix_again() {
    // 64 cells: the restore was reserved tight (its exact need).
    refused_restore_reserves_the_whole_growth(64);
}

#[test]
fn a_restore_planned_before_evictions_finds_its_entry_again() {
    // Admission plans a host-tier restore, then has to evict a cached slot
    // for cells; that eviction spills into the (full) tier, which drops the
    // planned entry. The restore must notice, not take whatever now sits at
    // the planned index.
    let d = prompt(3, 41);
    let mut c = config(2, 16);
    c.admit.ctx_per_seq = 256;
    let want = reference(c, &d, 200);

    let mut c = cached_config(2);
    c.admit.ctx_per_seq = 256;
    c.admit.prefix_host_bytes = 200; // one 45-token entry (4 bytes a token here)
    c.admit.prefix_host_min = 8;
    let mut h = harness(c);
    for (p, id) in [
        (prompt(3, 40), "a"),
        (prompt(20, 40), "b"),
        (prompt(40, 230), "c"),
    ] {
        let mut rx = h.submit_tokens(&p, 6, id);
        h.run_idle();
        events(&mut rx);
    }
    // a was evicted for c and spilled; b and c are cached in the slots.
    assert_eq!(h.stats.borrow().prefix_spills, 1);
    let mut rx = h.submit_tokens(&d, 200, "d");
    h.run_idle();
    let ev = events(&mut rx);
    let f = done(&ev);
    assert_eq!(f.output_tokens, want);
    assert_eq!(f.cached_tokens, 0, "a's entry left the tier when b spilled");
    assert_eq!(h.owner.rt.restores, 0);
    h.assert_idle_cached();
}

#[test]
fn a_request_that_finds_no_slot_after_reserving_waits_instead_of_vanishing() {
    // Three slots: F (older) and E cached, one free. In one admission pass,
    // b1 copies E's prefix into the free slot (E pinned as the copy source);
    // b2 shares F's prefix but F's slot would split the busy slots, so b2
    // copies from F (pinned too): no slot is left. b2 must wait, then run.
    let f = prompt(3, 40);
    let e = prompt(20, 40);
    let mut b1 = e[..20].to_vec();
    b1.extend(prompt(50, 20));
    let mut b2 = f[..20].to_vec();
    b2.extend(prompt(45, 20));
    let want = reference(config(3, 16), &b2, 4);

    let mut h = harness(cached_config(3));
    for (p, id) in [(&f, "f"), (&e, "e")] {
        let mut rx = h.submit_tokens(p, 6, id);
        h.run_idle();
        events(&mut rx);
    }
    let mut r1 = h.submit_tokens(&b1, 4, "b1");
    let mut r2 = h.submit_tokens(&b2, 4, "b2");
    h.run_idle();
    let e1 = events(&mut r1);
    let e2 = events(&mut r2);
    assert!(matches!(e1.last(), Some(Event::Done(_))), "{e1:?}");
    assert_eq!(done(&e2).output_tokens, want, "b2 ran, with its own output");
    assert_eq!(h.stats.borrow().waiting, 0);
    h.assert_idle_cached();
}

#[test]
fn a_different_first_token_or_prompt_scoring_reuses_nothing() {
    let mut h = harness(cached_config(2));
    let mut a = h.submit_tokens(&prompt(3, 30), 4, "a");
    h.run_idle();
    events(&mut a);
    // Same tokens after a different first token: no match.
    let mut other = prompt(3, 30);
    other[0] = 59;
    let mut b = h.submit_tokens(&other, 4, "b");
    h.run_idle();
    assert_eq!(done(&events(&mut b)).cached_tokens, 0);
    // Prompt scoring needs every prompt token's logits: never reuses.
    let mut c = h.submit_req(prompt(3, 30), 0, &[], None, "c", true);
    h.run_idle();
    let ev = events(&mut c);
    assert_eq!(done(&ev).cached_tokens, 0);
    assert_eq!(done(&ev).prompt_logprobs.as_ref().map(Vec::len), Some(29));
    h.assert_idle_cached();
}

#[test]
fn a_cancelled_sequence_donates_its_cells_and_a_failed_one_does_not() {
    let mut h = harness(cached_config(2));
    let a = h.submit_tokens(&prompt(5, 48), 50, "a");
    h.ticks(2); // two 16-token chunks computed
    drop(a);
    h.run_idle();
    assert_eq!(
        h.owner.kv.cells.cells(),
        32,
        "the computed part of the prompt"
    );
    h.assert_idle_cached();
    let mut b = h.submit_tokens(&prompt(5, 48), 2, "b");
    h.run_idle();
    assert_eq!(done(&events(&mut b)).cached_tokens, 32);
    // A failed step: the slot is cleared, not cached.
    let mut h = harness(cached_config(1));
    let mut c = h.submit_tokens(&prompt(9, 20), 10, "c");
    h.ticks(2);
    h.owner.rt.fail_next = true;
    h.ticks(1);
    events(&mut c);
    assert_eq!(h.owner.kv.cache.len(), 0);
    h.assert_idle_cached();
}

#[test]
fn entries_are_evicted_lru_when_slots_or_cells_are_needed() {
    let mut c = cached_config(2);
    c.admit.ctx_per_seq = 64; // ledger: 128 cells
    let mut h = harness(c);
    for (i, first) in [3, 20].into_iter().enumerate() {
        let mut rx = h.submit_tokens(&prompt(first, 30), 2, &format!("f{i}"));
        h.run_idle();
        events(&mut rx);
    }
    assert_eq!(h.owner.kv.cache.len(), 2);
    // A new prompt that matches neither needs a slot: one entry goes.
    let mut rx = h.submit_tokens(&prompt(40, 10), 2, "n");
    h.run_idle();
    events(&mut rx);
    assert_eq!(h.stats.borrow().prefix_evictions, 1);
    h.assert_idle_cached();
    // A request needing more cells than are uncached evicts until it fits.
    let mut rx = h.submit_tokens(&prompt(50, 60), 60, "big");
    h.run_idle();
    assert_eq!(done(&events(&mut rx)).completion_tokens, 60);
    assert!(h.stats.borrow().prefix_evictions >= 2);
    h.assert_idle_cached();
}

#[test]
fn a_long_prefix_of_a_running_sequence_is_copied_not_recomputed() {
    let mut h = harness(cached_config(3));
    let shared = prompt(7, 32);
    let mut a_prompt = shared.clone();
    a_prompt.extend([1, 2, 3]);
    let mut a = h.submit_tokens(&a_prompt, 30, "a");
    h.ticks(4); // a's prompt is computed and it decodes
    let mut b_prompt = shared.clone();
    b_prompt.extend([9, 9]);
    let mut b = h.submit_tokens(&b_prompt, 3, "b");
    h.run_idle();
    assert_eq!(h.owner.rt.copies, 1);
    let fb = done(&events(&mut b)).clone();
    assert_eq!(fb.cached_tokens, 32);
    events(&mut a);
    // Same output as computing b alone.
    let mut h2 = harness(config(1, 16));
    let mut r = h2.submit_tokens(&b_prompt, 3, "solo");
    h2.run_idle();
    assert_eq!(done(&events(&mut r)).output_tokens, fb.output_tokens);
    assert_eq!(h.stats.borrow().prefix_copies, 1);
    h.assert_idle_cached();
}

#[test]
fn prompts_arriving_together_compute_a_shared_prefix_once() {
    let mut h = harness(cached_config(4));
    let shared = prompt(11, 48);
    let mut rxs = Vec::new();
    for i in 0..3 {
        let mut p = shared.clone();
        p.extend([50 + i, 51, 52]);
        rxs.push(h.submit_tokens(&p, 2, &format!("t{i}")));
    }
    h.run_idle();
    let mut cached = Vec::new();
    for rx in &mut rxs {
        cached.push(done(&events(rx)).cached_tokens);
    }
    assert_eq!(cached, vec![0, 48, 48]);
    // One copy of the shared prefix plus each private part.
    assert_eq!(h.stats.borrow().prompt_tokens_total, 48 + 3 * 3);
    assert_eq!(h.owner.rt.copies, 2);
    h.assert_idle_cached();
}

fn unified_config(slots: usize) -> EngineConfig {
    let mut c = cached_config(slots);
    c.model.kv_unified = true;
    c
}

/// Request `a` (a 40-token system prompt and its own 4 tokens, 4 generated)
/// runs to the end and stays cached; returns (system prompt, a's prompt).
fn finish_a(h: &mut Harness) -> (Vec<TokenId>, Vec<TokenId>) {
    let sys = prompt(3, 40);
    let mut pa = sys.clone();
    pa.extend(prompt(50, 4));
    let mut a = h.submit_tokens(&pa, 4, "a");
    h.run_idle();
    events(&mut a);
    (sys, pa)
}

fn slot_of(h: &Harness, id: &str) -> usize {
    h.owner.seqs.iter().find(|s| s.id == id).unwrap().slot
}

#[test]
fn in_a_unified_pool_a_hit_shares_cells_and_a_cancel_releases_only_its_own() {
    let mut h = harness(unified_config(3));
    let (sys, pa) = finish_a(&mut h);
    assert_eq!(
        h.owner.kv.cells.cells(),
        44 + 3,
        "a's prompt and decoded output"
    );
    let mut pb = sys.clone();
    pb.extend([7, 7, 7]);
    let mut b = h.submit_tokens(&pb, 50, "b");
    h.ticks(3);
    // b reads a's first 40 cells: held once, the ledger counts b's own.
    let own = h.owner.kv.cells.private_cells(slot_of(&h, "b"));
    assert!(own >= 3, "b's tail and decoded tokens: {own}");
    assert_eq!(h.owner.kv.cells.cells(), 47 + own);
    assert_eq!(h.stats.borrow().prefix_copies, 1);
    h.owner.sync_ledger();
    assert_eq!(
        h.owner.ledger.used(),
        40 + own,
        "b reads 40 shared + its own"
    );
    assert_eq!(h.owner.ledger.cached(), 7, "a's tail only");
    // Cancelled while decoding: b's own cells go, the shared prefix and a's
    // entry stay whole.
    h.cancel("b");
    h.run_idle();
    events(&mut b);
    assert_eq!(h.owner.kv.cells.cells(), 47);
    assert_eq!(h.owner.kv.cache.len(), 1);
    h.assert_idle_cached();
    let mut again = h.submit_tokens(&pa, 4, "again");
    h.run_idle();
    assert_eq!(done(&events(&mut again)).cached_tokens, 43);
}

#[test]
fn in_a_unified_pool_eviction_cuts_idle_tails_never_a_prefix_a_live_sequence_reads() {
    let mut c = unified_config(3);
    c.admit.ctx_per_seq = 33; // ledger: 99 cells
    let mut h = harness(c);
    let (sys, _) = finish_a(&mut h);
    let mut pb = sys.clone();
    pb.extend([7, 7, 7]);
    let mut b = h.submit_tokens(&pb, 8, "b");
    h.ticks(2);
    // Held: a's 47 cells (40 shared with b) + b's own; reserved: b's
    // growth left; c needs 45 more. Only a's idle tail (7) can go, and it
    // must.
    let mut c = h.submit_tokens(&prompt(30, 35), 10, "c");
    h.ticks(1);
    assert_eq!(h.owner.seqs.len(), 2, "c admitted");
    let entry = &h.owner.kv.cache.entries()[0];
    assert_eq!(
        h.owner.kv.cells.tokens(entry.slot),
        sys,
        "a's entry keeps the shared prefix"
    );
    assert!(h.stats.borrow().prefix_evictions >= 1);
    h.run_idle();
    let fb = done(&events(&mut b)).clone();
    events(&mut c);
    assert_eq!(fb.cached_tokens, 40);
    // Same output as computing b alone.
    let mut h2 = harness(config(1, 16));
    let mut r = h2.submit_tokens(&pb, 8, "solo");
    h2.run_idle();
    assert_eq!(done(&events(&mut r)).output_tokens, fb.output_tokens);
    h.assert_idle_cached();
}

#[test]
fn an_overdue_short_prompt_is_finished_in_one_step_a_long_one_is_not() {
    let mut c = config(4, 16);
    c.step.ttft_target_ms = Some(0.0); // every prompt is overdue at once
    c.step.expedite_max_tokens = 64;
    let mut h = harness(c);
    let mut short = h.submit(40, 2, &[]);
    let mut long = h.submit(100, 2, &[]);
    h.ticks(1);
    // The short prompt (40 ≤ 64) is finished whole; the budget grew by
    // twice its tokens (16 + 80), the rest goes to the long one.
    assert_eq!(h.owner.rt.step_sizes[0], 16 + 80);
    assert_eq!(h.owner.seqs[0].prompt_left(), 0);
    assert_eq!(h.owner.seqs[1].prompt_left(), 100 - 56);
    // The long prompt's tail (≤ 64 left) is never expedited: 16 per step.
    let long_left = |h: &Harness| {
        h.owner
            .seqs
            .iter()
            .find(|s| s.prompt.len() == 100)
            .map_or(0, |s| s.prompt_left())
    };
    while long_left(&h) > 0 {
        let left = long_left(&h);
        h.ticks(1);
        assert!(left - long_left(&h) <= 16, "{left} -> {}", long_left(&h));
    }
    h.run_idle();
    events(&mut short);
    events(&mut long);
    h.assert_released();
}

/// Random traffic under a tight ledger (shared system prompts, random tails,
/// cancels, clients leaving), in both KV layouts: the cell map matches every
/// slot after every iteration (`check_cells`), every stream gets exactly one
/// terminal event, and once idle the ledger holds only cached cells.
#[test]
fn random_traffic_keeps_the_cell_map_and_the_ledger_exact() {
    for unified in [false, true] {
        let mut c = cached_config(4);
        c.model.kv_unified = unified;
        // A tight ledger (160 cells; 112 in one pool, where shared cells
        // count once): evictions for cells all the time.
        c.admit.ctx_per_seq = if unified { 28 } else { 40 };
        c.admit.prefix_copy_min = 4;
        let mut h = harness(c);
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let systems: Vec<Vec<TokenId>> = (0..3)
            .map(|i| prompt(5 + 7 * i, 20 + 10 * i as usize))
            .collect();
        let mut streams: Vec<(String, mpsc::Receiver<Event>, Vec<Event>)> = Vec::new();
        let mut ended = 0;
        for i in 0..400 {
            if next(3) == 0 && streams.len() < 6 {
                let mut p = systems[next(3)].clone();
                for _ in 0..1 + next(8) {
                    p.push(1 + next(50) as TokenId);
                }
                let id = format!("r{i}");
                let rx = h.submit_tokens(&p, 1 + next(8) as u32, &id);
                streams.push((id, rx, Vec::new()));
            }
            if !streams.is_empty() {
                match next(12) {
                    0 => {
                        let id = streams[next(streams.len())].0.clone();
                        h.cancel(&id);
                    }
                    1 => {
                        // The client goes away: no event is owed.
                        streams.swap_remove(next(streams.len()));
                    }
                    _ => {}
                }
            }
            h.ticks(1);
            streams.retain_mut(|(_, rx, got)| {
                while let Ok(e) = rx.try_recv() {
                    got.push(e);
                }
                let terminals = got
                    .iter()
                    .filter(|e| matches!(e, Event::Done(_) | Event::Error(_)))
                    .count();
                assert!(terminals <= 1, "{got:?}");
                if terminals == 1 {
                    ended += 1;
                }
                terminals == 0
            });
        }
        h.run_idle();
        for (_, rx, got) in &mut streams {
            while let Ok(e) = rx.try_recv() {
                got.push(e);
            }
            let terminals = got
                .iter()
                .filter(|e| matches!(e, Event::Done(_) | Event::Error(_)))
                .count();
            assert_eq!(terminals, 1, "{got:?}");
            ended += 1;
        }
        h.assert_idle_cached();
        let st = h.stats.borrow().clone();
        assert!(ended > 50, "{ended} requests ended");
        assert!(st.prefix_hits > 10 && st.prefix_evictions > 10, "{st:?}");
    }
}
