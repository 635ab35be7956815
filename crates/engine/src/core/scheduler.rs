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

/// Learns what a step costs, to derive the prompt budget from a target
/// step time (the decoders' inter-token latency). Pure arithmetic.
///
/// A step of n decode rows and k prompt tokens at mean context position
/// ctx is fitted as `base + row · n + pass · [k > 0] + token · k +
/// ctx_slope · k · ctx`, by least squares with exponential forgetting over
/// every step:
/// - the per-token cost grows with position (attention over every earlier
///   cell): on the CPU 1.7 ms at the start of a prompt and 7.5 ms at 3,000
///   tokens (Q4_0, flash attention); a plain average lagged behind a
///   growing prompt and let steps overshoot their target by 85%;
/// - on a GPU the first prompt token costs most: beside 64 decoders with
///   per-slot KV streams, 32 prompt tokens took the step from 8.4 to 18.9 ms
///   and 512 to 30.8 (H200, 8B F16): a second pass, then ~0.025 ms a token.
///   A per-token price spread that pass over small chunks (0.33 ms a token),
///   so a 50 ms target allowed ~125 tokens where ~1,200 fit;
/// - on the CPU a decode row costs about what a prompt token does, so a
///   step's decoders cannot be one constant learned from decode-only steps
///   (those are the few-decoder steps at the end of a burst).
///
/// Terms the data cannot tell apart (every chunk the same size, every
/// step mixed) or that come out negative are left out of the fit: of the
/// nested models that remain, the one with the least residual.
#[derive(Debug, Clone, Default)]
pub struct StepCostModel {
    /// Forgetting normal equations over the features (1, n, [k > 0], k,
    /// k·ctx), scaled by `SCALE`: w·xxᵀ, w·xy, w·y².
    xx: [[f64; F]; F],
    xy: [f64; F],
    yy: f64,
    /// Forgetting sums of k and k·ctx (the mean context seen).
    k_sum: f64,
    kctx_sum: f64,
}

const F: usize = 5;

/// The fitted terms, ms (see [`StepCostModel`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepCost {
    pub base: f64,
    pub row: f64,
    pub pass: f64,
    pub token: f64,
    /// Per token per position of context.
    pub ctx_slope: f64,
}

impl StepCost {
    /// Marginal cost of one prompt token at context position `ctx`, ms.
    pub fn token_at(&self, ctx: f64) -> f64 {
        (self.token + self.ctx_slope * ctx).max(0.001)
    }

    /// A step of `n` decode rows alone, ms.
    pub fn decode_ms(&self, n: usize) -> f64 {
        self.base + self.row * n as f64
    }

    /// Prompt tokens that fit in `room` ms beyond the decode step, as one
    /// chunk starting at position `ctx` (its tokens cost more as it grows).
    fn tokens_in(&self, room: f64, ctx: f64) -> f64 {
        let room = room - self.pass;
        if room <= 0.0 {
            return 0.0;
        }
        // ctx_slope/2 · k² + (token + ctx_slope · ctx) · k = room.
        let b = self.token_at(ctx);
        2.0 * room / (b + (b * b + 2.0 * self.ctx_slope * room).sqrt())
    }
}

impl StepCostModel {
    const DECAY: f64 = 0.95;
    /// Feature scales: keep the normal equations near unit size.
    const SCALE: [f64; F] = [1.0, 1e-1, 1.0, 1e-2, 1e-5];
    /// The prompt-token term, in every candidate model.
    const TOKEN: usize = 3;

    /// One completed step: `ctx` is the mean position of its prompt tokens.
    pub fn observe(&mut self, n_decode: usize, n_prompt: usize, ms: f64, ctx: f64) {
        if n_decode + n_prompt == 0 {
            return;
        }
        let (n, k) = (n_decode as f64, n_prompt as f64);
        let raw = [1.0, n, f64::from(n_prompt > 0), k, k * ctx];
        let x: [f64; F] = std::array::from_fn(|i| raw[i] * Self::SCALE[i]);
        let d = Self::DECAY;
        for (i, xi) in x.iter().enumerate() {
            for (j, xj) in x.iter().enumerate() {
                self.xx[i][j] = self.xx[i][j] * d + xi * xj;
            }
            self.xy[i] = self.xy[i] * d + xi * ms;
        }
        self.yy = self.yy * d + ms * ms;
        self.k_sum = self.k_sum * d + k;
        self.kctx_sum = self.kctx_sum * d + k * ctx;
    }

    /// The fitted terms (None before any step with prompt tokens).
    pub fn cost(&self) -> Option<StepCost> {
        if self.xx[Self::TOKEN][Self::TOKEN] <= 0.0 {
            return None;
        }
        let mut best: Option<([f64; F], f64)> = None;
        // Every subset of the optional terms, the token term always in.
        for mask in 0u32..(1 << F) {
            if mask & (1 << Self::TOKEN) == 0 {
                continue;
            }
            let s: Vec<usize> = (0..F).filter(|i| mask & (1 << i) != 0).collect();
            let Some(beta) = self.solve(&s) else { continue };
            if beta.iter().any(|&b| b < 0.0) || beta[Self::TOKEN] <= 0.0 {
                continue;
            }
            // Residual: y'y - beta'X'y (least squares).
            let sse = self.yy - (0..F).map(|i| beta[i] * self.xy[i]).sum::<f64>();
            if best.is_none_or(|(_, b)| sse < b - 1e-9 * self.yy) {
                best = Some((beta, sse));
            }
        }
        // Nothing positive fits: free prompt tokens, the floor.
        let beta = best.map_or([0.0; F], |b| b.0);
        let t = |i: usize| beta[i] * Self::SCALE[i];
        Some(StepCost {
            base: t(0),
            row: t(1),
            pass: t(2),
            token: t(3).max(0.001),
            ctx_slope: t(4),
        })
    }

    /// Least squares over the features in `s` (the others zero); None when
    /// they are nearly collinear in the data.
    fn solve(&self, s: &[usize]) -> Option<[f64; F]> {
        let n = s.len();
        let mut m = [[0.0f64; F + 1]; F];
        for (r, &i) in s.iter().enumerate() {
            for (c, &j) in s.iter().enumerate() {
                m[r][c] = self.xx[i][j];
            }
            m[r][n] = self.xy[i];
        }
        let diag: f64 = (0..n).map(|r| m[r][r]).product();
        if diag <= 0.0 {
            return None;
        }
        // Gaussian elimination with partial pivoting; the determinant
        // relative to the diagonal's product measures collinearity.
        let mut det = 1.0f64;
        for col in 0..n {
            let p = (col..n).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
            m.swap(col, p);
            let piv = m[col][col];
            if piv.abs() < 1e-300 {
                return None;
            }
            det *= piv;
            let pivot_row = m[col];
            for row in m.iter_mut().take(n).skip(col + 1) {
                let f = row[col] / piv;
                for (v, p) in row.iter_mut().zip(pivot_row).skip(col) {
                    *v -= f * p;
                }
            }
        }
        if det.abs() / diag < 1e-3 {
            return None;
        }
        let mut x = [0.0f64; F];
        for r in (0..n).rev() {
            let tail: f64 = (r + 1..n).map(|c| m[r][c] * x[c]).sum();
            x[r] = (m[r][n] - tail) / m[r][r];
        }
        let mut beta = [0.0; F];
        for (r, &i) in s.iter().enumerate() {
            beta[i] = x[r];
        }
        Some(beta)
    }

    /// Learned marginal cost of one prompt token at context position `ctx`, ms.
    pub fn prompt_token_ms_at(&self, ctx: f64) -> Option<f64> {
        self.cost().map(|c| c.token_at(ctx))
    }

    /// Learned marginal cost of one prompt token at the mean context seen, ms.
    pub fn prompt_token_ms(&self) -> Option<f64> {
        let c = self.cost()?;
        let mean = self.kctx_sum / self.k_sum;
        Some(c.token_at(if mean.is_finite() { mean } else { 0.0 }))
    }

    /// Prompt budget for the next step of `decoders` decode rows so that it
    /// takes about `target_ms` (`max` until there is a measurement or when
    /// nobody decodes; never below `min`), for prompt tokens starting at
    /// context position `ctx`.
    pub fn budget(
        &self,
        target_ms: f64,
        decoders: usize,
        min: usize,
        max: usize,
        ctx: f64,
    ) -> usize {
        // Nobody is decoding: no rhythm to protect, prefill at full speed.
        let (Some(c), true) = (self.cost(), decoders > 0) else {
            return max;
        };
        let b = c.tokens_in(target_ms - c.decode_ms(decoders), ctx).floor();
        if b.is_finite() {
            (b.max(0.0) as usize).clamp(min, max)
        } else {
            max
        }
    }
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
        }
    }
    fn pre(key: u64, prompt_len: usize, computed: usize) -> SeqView {
        SeqView {
            key,
            prompt_len,
            computed,
            decoding: false,
            can_pad: true,
        }
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
    fn cost_model_derives_budget_from_target() {
        let mut m = StepCostModel::default();
        assert_eq!(m.budget(100.0, 4, 8, 512, 0.0), 512, "no data: max");
        for _ in 0..50 {
            m.observe(4, 0, 20.0, 0.0); // decode-only step: 20 ms
            m.observe(4, 100, 70.0, 50.0); // +100 prompt tokens: +50 ms
        }
        // (100 - 20) / 0.5 = 160 prompt tokens.
        let b = m.budget(100.0, 4, 8, 512, 0.0);
        assert!((155..=165).contains(&b), "{b}");
        assert_eq!(m.budget(10.0, 4, 8, 512, 0.0), 8, "never below min");
        assert_eq!(m.budget(10_000.0, 4, 8, 512, 0.0), 512, "never above max");
        assert_eq!(
            m.budget(100.0, 0, 8, 512, 0.0),
            512,
            "no decoders: full speed"
        );
    }

    #[test]
    fn cost_model_prices_prompt_tokens_by_their_context() {
        // Per-token cost 1 ms + 2 ms per 1,000 positions, seen as a long
        // prompt advances: the budget shrinks ahead of the growing cost.
        // (Decode-only steps now and then: the prompt's arrivals.)
        let mut m = StepCostModel::default();
        let mut ctx = 0.0;
        while ctx < 2000.0 {
            if (ctx as usize).is_multiple_of(200) {
                m.observe(4, 0, 20.0, 0.0);
            }
            let per = 1.0 + 2.0 * (ctx + 25.0) / 1000.0;
            m.observe(4, 50, 20.0 + 50.0 * per, ctx + 25.0);
            ctx += 50.0;
        }
        let at = |c: f64| m.prompt_token_ms_at(c).unwrap();
        assert!((at(3000.0) - 7.0).abs() < 0.2, "{}", at(3000.0));
        // At 3,000: (250 - 20) / ~7.2 ms ≈ 31 tokens, not the ~60 an average
        // of the costs seen so far would allow.
        let b = m.budget(250.0, 4, 8, 512, 3000.0);
        assert!((28..=34).contains(&b), "{b}");
    }

    #[test]
    fn cost_model_learns_a_gpu_pass_and_prices_tokens_past_it() {
        // H200 shape (8B F16, 64 decoders, per-slot KV): the decode step is
        // 8.4 ms, any prompt tokens add a second pass (~10.5 ms) and then
        // ~0.025 ms a token. The chunks come in assorted sizes.
        let mut m = StepCostModel::default();
        for i in 0..40 {
            m.observe(64, 0, 8.4, 0.0);
            let k = [32usize, 150, 64, 512, 256, 128][i % 6];
            let noise = [0.3, -0.2, 0.1, -0.3, 0.2, 0.0][i % 6];
            m.observe(64, k, 8.4 + 10.5 + 0.025 * k as f64 + noise, k as f64 / 2.0);
        }
        let c = m.cost().unwrap();
        assert!((c.pass - 10.5).abs() < 0.8, "{c:?}");
        assert!((c.token - 0.025).abs() < 0.006, "{c:?}");
        // (50 - 8.4 - 10.5) / 0.025 ≈ 1,244 tokens; a per-token average of
        // these steps (~0.1 ms) would allow ~400, of a 32-token chunk ~125.
        let b = m.budget(50.0, 64, 8, 8192, 0.0);
        assert!((1100..=1400).contains(&b), "{b} {c:?}");
        // A target the pass alone overruns: the minimum, not a negative.
        assert_eq!(m.budget(15.0, 64, 8, 8192, 0.0), 8);
    }

    #[test]
    fn cost_model_keeps_no_pass_where_there_is_none() {
        // CPU shape: prompt tokens cost in proportion (1.7 ms each plus
        // noise), in chunks of assorted sizes: no fixed term is invented.
        let mut m = StepCostModel::default();
        for i in 0..40 {
            m.observe(4, 0, 20.0, 0.0);
            let k = [16usize, 64, 40, 128, 90][i % 5];
            let noise = [2.0, -3.0, 1.0, -1.5, 0.5][i % 5];
            m.observe(4, k, 20.0 + 1.7 * k as f64 + noise, 100.0);
        }
        let c = m.cost().unwrap();
        assert!(c.pass < 2.0, "{c:?}");
        assert!((c.token - 1.7).abs() < 0.1, "{c:?}");
        let b = m.budget(250.0, 4, 8, 512, 0.0);
        assert!((125..=140).contains(&b), "{b} {c:?}");
    }

    #[test]
    fn cost_model_prices_each_decode_row() {
        // CPU shape under load (measured: ~14 decoders + ~65 prompt tokens
        // in ~290 ms): a decode row costs ~5 ms, a prompt token ~3, and the
        // only decode-only steps are the few-decoder ones at the end of a
        // burst. A constant decode step learned from those would leave the
        // decoders' cost to the prompt terms.
        let mut m = StepCostModel::default();
        for i in 0..60 {
            let n = [14usize, 12, 16, 13, 15][i % 5];
            let k = [60usize, 70, 64, 40, 75][i % 5];
            let noise = [2.0, -3.0, 1.0, -1.5, 0.5][i % 5];
            m.observe(n, k, 5.0 + 5.0 * n as f64 + 3.0 * k as f64 + noise, 300.0);
            if i % 10 == 0 {
                m.observe(2, 0, 15.0, 0.0);
                m.observe(3, 0, 20.0, 0.0);
            }
        }
        let c = m.cost().unwrap();
        assert!((c.row - 5.0).abs() < 0.6, "{c:?}");
        assert!((c.token - 3.0).abs() < 0.3, "{c:?}");
        // (250 - 5 - 70) / 3 ≈ 58 prompt tokens beside 14 decoders.
        let b = m.budget(250.0, 14, 8, 512, 300.0);
        assert!((52..=64).contains(&b), "{b} {c:?}");
        // Fewer decoders leave more room.
        assert!(m.budget(250.0, 4, 8, 512, 300.0) > b + 10);
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
}
