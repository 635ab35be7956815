//! What a step costs, learned from the steps measured: the prompt budget
//! under a step-time target (`Owner::set_budget`, in `owner/mod.rs`) asks it
//! how many prompt tokens fit beside this step's decoders. Pure arithmetic.

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
    /// The terms fitted after the last step (`fit`, once per step).
    fitted: Option<StepCost>,
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
        self.fitted = self.fit();
    }

    /// The fitted terms (None before any step with prompt tokens).
    pub fn cost(&self) -> Option<StepCost> {
        self.fitted
    }

    fn fit(&self) -> Option<StepCost> {
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
    #[cfg(test)]
    pub fn prompt_token_ms_at(&self, ctx: f64) -> Option<f64> {
        self.cost().map(|c| c.token_at(ctx))
    }

    /// Learned marginal cost of one prompt token at the mean context seen, ms.
    pub fn prompt_token_ms(&self) -> Option<f64> {
        let c = self.cost()?;
        // The intercept feature is 1 on every step: its row of the normal
        // equations holds the forgetting sums of k and k·ctx.
        let (k, kctx) = (
            self.xx[0][3] / Self::SCALE[3],
            self.xx[0][4] / Self::SCALE[4],
        );
        let mean = kctx / k;
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
}
