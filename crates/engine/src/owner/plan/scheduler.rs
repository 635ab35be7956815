//! The step planner. Pure: sequence views in, plan out. No FFI, no clock,
//! no channels.
//!
//! Rule (vLLM v1's token budget): every decoding sequence gets its one decode
//! token first; the prompt-token budget is then filled with chunks of
//! prefilling sequences' prompts, at most `max_prefill_seqs` of them per
//! step. There is no prefill phase: a 10k prompt advances by chunks while
//! decoders keep going.
//!
//! Fairness: the oldest prompt gets half the budget (it never starves); the
//! other half goes to the prompts with the fewest tokens left, shortest first
//! (a short prompt is never stuck behind a long one); whatever is left goes
//! oldest first.

/// What the planner needs to know about one admitted sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct SeqView {
    pub key: u64,
    /// Tokens that must be in the KV cache before the next token is sampled.
    pub prompt_len: usize,
    /// Prompt tokens already computed.
    pub computed: usize,
    /// Prompt done; has a sampled token waiting to be decoded.
    pub decoding: bool,
    /// Computed prompt cells may be recomputed (see `pad_tails`): no prompt
    /// scoring, and no other sequence is copying them this step.
    pub can_pad: bool,
    /// The next media span not yet computed (start, rows): decoded whole,
    /// in a chunk of its own.
    pub span: Option<(usize, usize)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StepLimits {
    /// Prompt tokens per step (decode tokens are not counted against it).
    pub prompt_budget: usize,
    pub max_prefill_seqs: usize,
    pub max_decode_seqs: usize,
    /// Overdue short prompts (see `overdue`): finished first, whole.
    pub expedite: Vec<u64>,
    /// The oldest prompt's chunk is at least this long when the budget
    /// allows (`EFFICIENT_CHUNK` on the real runtime).
    pub min_chunk: usize,
}

/// llama.cpp's CPU flash attention uses its tiled kernel only for ubatches
/// of at least 64 query rows, and a chunk's first token rides in the
/// decoders' ubatch: chunks of 65+ keep the rest tiled. Measured at 3,000
/// tokens of context (Q4_0): 67 tokens in 266 ms, 64 in 439 ms.
pub const EFFICIENT_CHUNK: usize = 65;

#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub key: u64,
    pub start: usize,
    pub len: usize,
}

impl Chunk {
    /// This chunk computes the last prompt token: sample after it.
    pub fn completes(&self, prompt_len: usize) -> bool {
        self.start + self.len == prompt_len
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub decode: Vec<u64>,
    pub chunks: Vec<Chunk>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.decode.is_empty() && self.chunks.is_empty()
    }
    /// The sequences with a row in the step: decoders, then chunks.
    pub fn keys(&self) -> Vec<u64> {
        self.decode
            .iter()
            .copied()
            .chain(self.chunks.iter().map(|c| c.key))
            .collect()
    }
    pub fn n_tokens(&self) -> usize {
        self.decode.len() + self.chunks.iter().map(|c| c.len).sum::<usize>()
    }
}

/// `seqs` in admission order (oldest first).
pub fn plan(seqs: &[SeqView], limits: &StepLimits) -> Plan {
    let mut p = Plan::default();
    for s in seqs.iter().filter(|s| s.decoding) {
        if p.decode.len() == limits.max_decode_seqs {
            break;
        }
        p.decode.push(s.key);
    }
    let prefilling: Vec<&SeqView> = seqs
        .iter()
        .filter(|s| !s.decoding && s.computed < s.prompt_len)
        .collect();
    if prefilling.is_empty() || limits.max_prefill_seqs == 0 {
        return p;
    }
    let mut budget = limits.prompt_budget;
    // Expedited prompts do not count against `max_prefill_seqs`.
    let chunk_limit = limits.max_prefill_seqs + limits.expedite.len();
    let give = |p: &mut Plan, s: &SeqView, want: usize, budget: &mut usize| {
        let have = p.chunks.iter().position(|c| c.key == s.key);
        let done = have.map_or(0, |i| p.chunks[i].len);
        let len = (s.prompt_len - s.computed - done).min(want).min(*budget);
        if len == 0 {
            return;
        }
        match have {
            Some(i) => p.chunks[i].len += len,
            None if p.chunks.len() < chunk_limit => p.chunks.push(Chunk {
                key: s.key,
                start: s.computed,
                len,
            }),
            None => return,
        }
        *budget -= len;
    };
    // 1. The oldest prompt always advances by (at least) half the budget.
    // (Up to 3/4 of the budget to reach an efficient chunk; the express
    // lane always keeps a quarter.)
    let b = limits.prompt_budget;
    let half = (b - b / 2).max(limits.min_chunk.min(b - b / 4));
    give(&mut p, prefilling[0], half, &mut budget);
    // 1b. Overdue short prompts are finished whole (the caller added twice
    //     their tokens to the budget, so the oldest keeps its half).
    for k in &limits.expedite {
        if let Some(s) = prefilling.iter().find(|s| s.key == *k) {
            give(&mut p, s, usize::MAX, &mut budget);
        }
    }
    // 2. Express lane: the rest goes to the prompts with the fewest tokens
    //    left, shortest first.
    let mut by_left: Vec<&SeqView> = prefilling[1..].to_vec();
    by_left.sort_by_key(|s| s.prompt_len - s.computed);
    for s in by_left {
        give(&mut p, s, usize::MAX, &mut budget);
    }
    // 3. Anything left (short prompts done): oldest first.
    for s in &prefilling {
        give(&mut p, s, usize::MAX, &mut budget);
    }
    p
}

/// Context from which a short final chunk is padded (below it the untiled
/// kernel's extra cost is small).
pub const PAD_MIN_CONTEXT: usize = 512;

/// Pad short final chunks at long context: a prompt's last chunk of fewer
/// than `EFFICIENT_CHUNK` tokens would run llama.cpp's untiled flash
/// attention, which at 3,000 tokens of context costs ~1.9× per token
/// (measured: 58 tokens in 552 ms where 65 took 300–320 ms). The chunk is
/// moved back to cover the last `EFFICIENT_CHUNK` prompt tokens; the owner
/// drops the cells it recomputes first. Some tokens are computed twice; the
/// step stays as long as an ordinary one. Only tails of more than half an
/// efficient chunk: a shorter one costs less untiled than 65 tiled.
pub fn pad_tails(plan: &mut Plan, seqs: &[SeqView]) {
    for c in plan.chunks.iter_mut() {
        let Some(s) = seqs.iter().find(|s| s.key == c.key) else {
            continue;
        };
        let end = c.start + c.len;
        if s.can_pad
            && end == s.prompt_len
            && c.len < EFFICIENT_CHUNK
            && c.len * 2 > EFFICIENT_CHUNK
            && c.start >= PAD_MIN_CONTEXT
        {
            c.start = end - EFFICIENT_CHUNK;
            c.len = EFFICIENT_CHUNK;
        }
    }
}

/// Align a step's prompt chunks to multiples of `granule` tokens (0: off;
/// only steps of two or more chunks). With per-slot KV streams llama.cpp
/// splits a batch equally: a ubatch takes the same number of tokens from
/// every sequence of a run of consecutive slots, so it ends where the
/// run's shortest chunk ends, and chunks of many different lengths in
/// adjacent slots cost one pass over the weights per distinct length
/// (on the H200, 43 prompts of ~150 tokens in one step: 544 ms, ~14k
/// prompt tokens/s, where equal chunks run at ~24k). A prompt's final
/// chunk is moved back to the next multiple of `granule` (recomputing the
/// cells before it, as `pad_tails`) where the prompt is that long and its
/// cells may be recomputed; any other chunk of at least `granule` tokens
/// is cut to a multiple of it, the rest waiting for the next step (where
/// it is a final piece, padded back). Left uneven: whole prompts shorter
/// than `granule`.
pub fn align_chunks(plan: &mut Plan, seqs: &[SeqView], granule: usize) {
    if granule == 0 || plan.chunks.len() < 2 {
        return;
    }
    for c in plan.chunks.iter_mut() {
        let Some(s) = seqs.iter().find(|s| s.key == c.key) else {
            continue;
        };
        let end = c.start + c.len;
        let up = c.len.div_ceil(granule) * granule;
        if end == s.prompt_len && s.can_pad && end >= up {
            c.start = end - up;
            c.len = up;
        } else if c.len >= granule {
            c.len -= c.len % granule;
        }
    }
}

/// Keep a step within the runtime's batch (`n_batch` rows): `pad_tails`
/// and `align_chunks` move chunks back to recompute cells, and the TTFT
/// rule adds tokens on top of the budget, so a plan can outgrow it (the
/// runtime then refused the whole step and every sequence in it failed).
/// Decode rows always stay; the youngest chunks give back their padding
/// first, then their tokens (a chunk left empty waits for the next step).
pub fn fit(plan: &mut Plan, seqs: &[SeqView], n_batch: usize) {
    let mut over = plan.n_tokens().saturating_sub(n_batch);
    for c in plan.chunks.iter_mut().rev() {
        if over == 0 {
            break;
        }
        let Some(s) = seqs.iter().find(|s| s.key == c.key) else {
            continue;
        };
        if c.start < s.computed {
            // Undo padding: start where the computed cells end.
            let pad = (s.computed - c.start).min(c.len);
            c.start += pad;
            c.len -= pad;
            over = over.saturating_sub(pad);
        }
        let cut = over.min(c.len);
        c.len -= cut;
        over -= cut;
    }
    plan.chunks.retain(|c| c.len > 0);
}

/// Media spans in the plan: a span is decoded whole (non-causal rows need
/// one ubatch) and apart from text (llama.cpp takes tokens or embeddings
/// in a batch, not both), at most one a step. A chunk that starts at its
/// sequence's next span becomes exactly that span (the first such chunk;
/// later ones wait a step), even past the prompt budget: a span is at
/// most one ubatch, so a step overruns its target by at most that much.
/// A chunk that runs into a span stops where it starts.
pub fn media_cuts(plan: &mut Plan, seqs: &[SeqView]) {
    let mut taken = false;
    for c in plan.chunks.iter_mut() {
        let Some((start, len)) = seqs.iter().find(|s| s.key == c.key).and_then(|s| s.span) else {
            continue;
        };
        if c.start == start {
            c.len = if taken { 0 } else { len };
            taken = true;
        } else if c.start < start && c.start + c.len > start {
            c.len = start - c.start;
        }
    }
    plan.chunks.retain(|c| c.len > 0);
}

/// The TTFT side of the budget. `prompts`: (key, tokens left, overdue: a
/// short prompt that waited past the TTFT target) of prefilling sequences,
/// oldest first. An overdue prompt (at most `max_left` tokens left) is not
/// kept waiting to protect the decoders' rhythm: the step's budget grows to finish the
/// first `max_seqs` such prompts. Long prompts are never expedited: they
/// advance by chunks under the step-time target.
/// Returns their keys and the tokens they add to the budget.
pub fn overdue(
    prompts: &[(u64, usize, bool)],
    max_left: usize,
    max_seqs: usize,
) -> (Vec<u64>, usize) {
    let picked: Vec<(u64, usize)> = prompts
        .iter()
        .filter(|&&(_, left, overdue)| overdue && left > 0 && left <= max_left)
        .take(max_seqs)
        .map(|&(k, left, _)| (k, left))
        .collect();
    let tokens = picked.iter().map(|p| p.1).sum();
    (picked.into_iter().map(|p| p.0).collect(), tokens)
}

/// The TTFT target's claim on a step when nothing is overdue yet: the
/// prompt tokens per step that let every short prompt finish by its target
/// if each is spread evenly over the steps it has left (`(tokens left, ms
/// waited)` each; a step lasts about `step_ms`; a prompt past or at its
/// last step needs all it has left). The step's budget is the larger of
/// this and the inter-token latency target's: whichever binds.
pub fn ttft_need(prompts: &[(usize, f64)], ttft_ms: f64, step_ms: f64) -> usize {
    if step_ms <= 0.0 {
        return 0;
    }
    prompts
        .iter()
        .map(|&(left, waited)| {
            let steps = ((ttft_ms - waited) / step_ms).floor().max(1.0);
            (left as f64 / steps).ceil() as usize
        })
        .sum()
}

/// Passes over the weights llama.cpp makes for one batch with per-slot KV
/// streams (`split_equal`, sequential): each ubatch is a run of consecutive
/// slot ids (in batch order, which is slot order here) taking the same
/// number of tokens from each, at most `n_ubatch` in all. `rows` is
/// (slot, tokens) in slot order. For the step trace: what a batch's layout
/// costs beyond its tokens.
pub fn passes(rows: &[(usize, usize)], n_ubatch: usize) -> usize {
    let mut left: Vec<(usize, usize)> = rows.iter().copied().filter(|r| r.1 > 0).collect();
    let n_ubatch = n_ubatch.max(1);
    let mut n = 0;
    while !left.is_empty() {
        // The run starting at the first sequence with tokens left.
        let mut end = 1;
        while end < left.len() && left[end].0 == left[end - 1].0 + 1 && end < n_ubatch {
            end += 1;
        }
        let run = &mut left[..end];
        let min = run.iter().map(|r| r.1).min().unwrap_or(1);
        let take = min.min((n_ubatch / end).max(1));
        for r in run.iter_mut() {
            r.1 -= take;
        }
        left.retain(|r| r.1 > 0);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(key: u64) -> SeqView {
        SeqView {
            key,
            prompt_len: 5,
            computed: 5,
            decoding: true,
            can_pad: true,
            span: None,
        }
    }
    fn pre(key: u64, prompt_len: usize, computed: usize) -> SeqView {
        SeqView {
            key,
            prompt_len,
            computed,
            decoding: false,
            can_pad: true,
            span: None,
        }
    }

    #[test]
    fn media_spans_get_a_chunk_of_their_own_one_a_step() {
        let with = |s: SeqView, span| SeqView {
            span: Some(span),
            ..s
        };
        let seqs = [
            with(pre(1, 100, 10), (10, 30)), // at its span: whole, past the budget
            with(pre(2, 100, 0), (20, 30)),  // text runs into its span: cut
            with(pre(3, 100, 40), (40, 8)),  // at a span too: waits a step
            pre(4, 50, 0),                   // no media: as planned
        ];
        let chunk = |key, start, len| Chunk { key, start, len };
        let mut plan = Plan {
            decode: vec![],
            chunks: vec![
                chunk(1, 10, 5),
                chunk(2, 0, 25),
                chunk(3, 40, 8),
                chunk(4, 0, 9),
            ],
        };
        media_cuts(&mut plan, &seqs);
        assert_eq!(
            plan.chunks,
            vec![chunk(1, 10, 30), chunk(2, 0, 20), chunk(4, 0, 9)]
        );
    }

    #[test]
    fn short_tails_at_long_context_are_padded_to_an_efficient_chunk() {
        let mut views = vec![
            pre(1, 3000, 2960),
            pre(2, 300, 260),
            pre(3, 3000, 2900),
            pre(4, 3000, 2990),
        ];
        let mut p = Plan {
            decode: vec![],
            chunks: vec![
                Chunk {
                    key: 1,
                    start: 2960,
                    len: 40,
                },
                Chunk {
                    key: 2,
                    start: 260,
                    len: 40,
                },
                Chunk {
                    key: 3,
                    start: 2900,
                    len: 65,
                },
                Chunk {
                    key: 4,
                    start: 2990,
                    len: 10,
                },
            ],
        };
        let before = p.clone();
        pad_tails(&mut p, &views);
        // The long prompt's 40-token tail becomes its last 65 tokens.
        assert_eq!(
            p.chunks[0],
            Chunk {
                key: 1,
                start: 2935,
                len: 65
            }
        );
        // Short context, a chunk that does not finish, a tail short enough
        // to be cheaper untiled: unchanged.
        assert_eq!(p.chunks[1..], before.chunks[1..]);
        // Not while its cells are being copied (or scored).
        views[0].can_pad = false;
        let mut q = before.clone();
        pad_tails(&mut q, &views);
        assert_eq!(q, before);
    }
    fn lim(budget: usize, pf: usize, dc: usize) -> StepLimits {
        StepLimits {
            prompt_budget: budget,
            max_prefill_seqs: pf,
            max_decode_seqs: dc,
            expedite: Vec::new(),
            min_chunk: 0,
        }
    }

    #[test]
    fn the_oldest_chunk_stays_efficient_when_the_budget_allows() {
        let seqs = [pre(1, 3000, 2000), pre(2, 40, 0), dec(9)];
        let mut l = lim(100, 2, 8);
        l.min_chunk = EFFICIENT_CHUNK;
        // Half would be 50; the oldest gets 65, the short one the rest.
        assert_eq!(plan(&seqs, &l).chunks, vec![ch(1, 2000, 65), ch(2, 0, 35)]);
        // Never more than 3/4: the short prompt keeps its lane.
        l.prompt_budget = 40;
        assert_eq!(plan(&seqs, &l).chunks, vec![ch(1, 2000, 30), ch(2, 0, 10)]);
    }

    fn ch(key: u64, start: usize, len: usize) -> Chunk {
        Chunk { key, start, len }
    }

    #[test]
    fn only_short_overdue_prompts_raise_the_budget() {
        // A 3,000-token prompt is overdue but long: never expedited.
        assert_eq!(overdue(&[(1, 3000, true)], 512, 2), (vec![], 0));
        // Two short overdue prompts (a third waits its turn); fresh ones not.
        let p = [
            (1, 3000, true),
            (2, 150, true),
            (3, 120, false),
            (4, 90, true),
            (5, 80, true),
        ];
        assert_eq!(overdue(&p, 512, 2), (vec![2, 4], 240));
        assert_eq!(overdue(&p, 512, 0), (vec![], 0));
        // The planner finishes them whole after the oldest's half, then the
        // usual rule (budget 32 + 2 × 150, as the owner sets it).
        let seqs = [pre(1, 3000, 0), pre(2, 150, 0), dec(9)];
        let mut l = lim(32 + 300, 2, 8);
        l.expedite = vec![2];
        let plan = plan(&seqs, &l);
        assert_eq!(plan.chunks, vec![ch(1, 0, 166 + 16), ch(2, 0, 150)]);
    }

    #[test]
    fn align_chunks_pads_final_pieces_back_and_cuts_the_rest() {
        let seqs = [
            pre(1, 150, 0),   // fresh, whole: cut to 128
            pre(2, 150, 128), // final piece of 22: back to 32
            pre(3, 300, 100), // final chunk of 200: back to 224
            SeqView {
                can_pad: false, // may not recompute: cut to 192
                ..pre(4, 300, 100)
            },
            pre(5, 20, 0),  // shorter than the granule: as is
            pre(6, 400, 0), // budget-cut middle chunk of 70: 64
        ];
        let chunk = |key, start, len| Chunk { key, start, len };
        let mut p = Plan {
            decode: vec![9],
            chunks: vec![
                chunk(1, 0, 150),
                chunk(2, 128, 22),
                chunk(3, 100, 200),
                chunk(4, 100, 200),
                chunk(5, 0, 20),
                chunk(6, 0, 70),
            ],
        };
        align_chunks(&mut p, &seqs, 32);
        assert_eq!(
            p.chunks,
            vec![
                chunk(1, 0, 128),
                chunk(2, 118, 32),
                chunk(3, 76, 224),
                chunk(4, 100, 192),
                chunk(5, 0, 20),
                chunk(6, 0, 64),
            ]
        );
        // One chunk alone, or granule 0: untouched.
        let mut one = Plan {
            decode: vec![],
            chunks: vec![chunk(1, 0, 150)],
        };
        align_chunks(&mut one, &seqs, 32);
        assert_eq!(one.chunks, vec![chunk(1, 0, 150)]);
        let mut off = p.clone();
        off.chunks[0].len = 150;
        align_chunks(&mut off, &seqs, 0);
        assert_eq!(off.chunks[0].len, 150);
    }

    #[test]
    fn decoders_first_then_budget_split_across_prompts() {
        let seqs = [pre(1, 100, 0), dec(2), pre(3, 30, 10), dec(4), pre(5, 8, 0)];
        let p = plan(&seqs, &lim(64, 8, 8));
        assert_eq!(p.decode, vec![2, 4]);
        // Oldest gets half (32), the shortest prompts the rest, leftovers oldest.
        assert_eq!(p.chunks, vec![ch(1, 0, 36), ch(5, 0, 8), ch(3, 10, 20)]);
        let p = plan(
            &[pre(3, 30, 10), pre(5, 8, 0), pre(6, 100, 0)],
            &lim(64, 8, 8),
        );
        assert_eq!(p.chunks, vec![ch(3, 10, 20), ch(5, 0, 8), ch(6, 0, 36)]);
        assert_eq!(p.n_tokens(), 64);
    }

    #[test]
    fn prefill_and_decode_limits_hold() {
        let seqs = [dec(1), dec(2), dec(3), pre(4, 10, 0), pre(5, 10, 0)];
        let p = plan(&seqs, &lim(100, 1, 2));
        assert_eq!(p.decode, vec![1, 2]);
        assert_eq!(p.chunks.len(), 1);
        assert_eq!(p.chunks[0].key, 4);
    }

    #[test]
    fn long_prompt_is_chunked_until_done() {
        let mut s = pre(1, 50, 0);
        let mut steps = 0;
        while s.computed < s.prompt_len {
            let p = plan(&[s.clone(), dec(9)], &lim(16, 4, 4));
            assert_eq!(p.decode, vec![9], "decoder advances every step");
            let c = &p.chunks[0];
            assert!(c.len <= 16);
            s.computed += c.len;
            steps += 1;
            assert_eq!(c.completes(50), s.computed == 50);
        }
        assert_eq!(steps, 4);
    }

    #[test]
    fn short_prompt_is_not_stuck_behind_a_long_one() {
        // A 3,000-token prompt admitted first, a 20-token one after it.
        let p = plan(&[pre(1, 3000, 0), pre(2, 20, 0)], &lim(64, 4, 4));
        assert_eq!(p.chunks, vec![ch(1, 0, 44), ch(2, 0, 20)]);
        // With a small budget the short prompt still gets half of it.
        let p = plan(&[pre(1, 3000, 0), pre(2, 50, 0)], &lim(32, 4, 4));
        assert_eq!(p.chunks, vec![ch(1, 0, 16), ch(2, 0, 16)]);
    }

    #[test]
    fn a_stream_of_short_prompts_never_starves_a_long_one() {
        let mut long = pre(1, 1000, 0);
        let mut key = 10;
        for _ in 0..10 {
            // Many fresh short prompts every step.
            let mut seqs = vec![long.clone()];
            for _ in 0..8 {
                key += 1;
                seqs.push(pre(key, 30, 0));
            }
            let p = plan(&seqs, &lim(128, 4, 16));
            let got = p.chunks.iter().find(|c| c.key == 1).map_or(0, |c| c.len);
            assert!(got >= 64, "long prompt got {got} of 128");
            long.computed += got;
        }
    }

    #[test]
    fn passes_follow_runs_of_slots_and_chunk_lengths() {
        // Eight decoders in slots 0..8: one pass.
        let dec: Vec<(usize, usize)> = (0..8).map(|s| (s, 1)).collect();
        assert_eq!(passes(&dec, 512), 1);
        // Scattered decoders: one pass per run.
        assert_eq!(passes(&[(0, 1), (2, 1), (3, 1), (7, 1)], 512), 3);
        // Decoders beside a prompt chunk: the decode rows, then the rest of
        // the chunk.
        assert_eq!(passes(&[(0, 1), (1, 1), (2, 40)], 512), 2);
        // Two chunks of different lengths in a run: one more pass each.
        assert_eq!(passes(&[(0, 1), (1, 30), (2, 40)], 512), 3);
        // A chunk longer than a ubatch.
        assert_eq!(passes(&[(0, 1200)], 512), 3);
        assert_eq!(passes(&[], 512), 0);
    }

    #[test]
    fn zero_budget_plans_only_decodes() {
        let p = plan(&[pre(1, 10, 0), dec(2)], &lim(0, 4, 4));
        assert_eq!(p.decode, vec![2]);
        assert!(p.chunks.is_empty());
        assert!(plan(&[], &lim(8, 1, 1)).is_empty());
    }

    #[test]
    fn fit_keeps_decoders_and_trims_the_youngest_chunks_to_the_batch() {
        let v = |key, prompt_len, computed, decoding| SeqView {
            key,
            prompt_len,
            computed,
            decoding,
            can_pad: true,
            span: None,
        };
        let seqs = vec![
            v(1, 10, 10, true),
            v(2, 10, 10, true),
            v(3, 500, 400, false),
            v(4, 200, 150, false),
        ];
        let mut plan = Plan {
            decode: vec![1, 2],
            // 4's tail padded back by 15 cells, as pad_tails does.
            chunks: vec![
                Chunk {
                    key: 3,
                    start: 400,
                    len: 100,
                },
                Chunk {
                    key: 4,
                    start: 135,
                    len: 65,
                },
            ],
        };
        fit(&mut plan, &seqs, 200);
        assert_eq!(plan.n_tokens(), 167, "fits: unchanged");
        fit(&mut plan, &seqs, 160);
        assert_eq!(plan.n_tokens(), 152, "fits once unpadded");
        assert_eq!(
            plan.chunks[1],
            Chunk {
                key: 4,
                start: 150,
                len: 50
            }
        );
        fit(&mut plan, &seqs, 60);
        assert_eq!(plan.decode, vec![1, 2]);
        assert_eq!(plan.n_tokens(), 60);
        assert_eq!(
            plan.chunks,
            vec![Chunk {
                key: 3,
                start: 400,
                len: 58
            }]
        );
        fit(&mut plan, &seqs, 2);
        assert!(plan.chunks.is_empty() && plan.decode.len() == 2);
    }

    #[test]
    fn ttft_need_spreads_each_prompt_over_its_steps_left() {
        // 128 tokens, 500 ms target, 50 ms steps, just arrived: 10 steps.
        assert_eq!(ttft_need(&[(128, 0.0)], 500.0, 50.0), 13);
        // Half-way: 5 steps left; at or past the target: everything.
        assert_eq!(ttft_need(&[(100, 250.0)], 500.0, 50.0), 20);
        assert_eq!(ttft_need(&[(100, 480.0), (30, 900.0)], 500.0, 50.0), 130);
        assert_eq!(ttft_need(&[], 500.0, 50.0), 0);
        assert_eq!(ttft_need(&[(10, 0.0)], 500.0, 0.0), 0);
    }
}
