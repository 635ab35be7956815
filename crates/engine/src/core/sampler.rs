//! Per-request token sampler. Pure: logits in, token out.
//!
//! Owns: the request's RNG (xoshiro256**, seeded from the request's `seed`)
//! and its penalty counters. One sampler per sequence, never shared, so a
//! seeded request draws the same numbers whatever else is in the batch.
//!
//! Order (as llama.cpp and vLLM): penalties → greedy (temperature 0) or
//! temperature → top-k → top-p → min-p → one uniform draw.
//! Candidates whose probability is below 1e-9 of the most likely token are
//! dropped before sorting (their total mass is under 5e-5 for a 49k
//! vocabulary): sorting a full vocabulary per token would dominate the step.

use std::collections::HashMap;

use crate::model::TokenId;

#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    pub top_p: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 0 = off.
    pub min_p: f32,
    /// 1 = off. Applied over prompt and generated tokens.
    pub repetition_penalty: f32,
    /// OpenAI semantics, over generated tokens.
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    pub seed: u64,
    /// OpenAI `logit_bias`: added to a token's logit before sampling
    /// (greedy too), sorted by token. -100 bans a token, +100 forces it.
    pub logit_bias: Vec<(TokenId, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: 0,
            logit_bias: Vec::new(),
        }
    }
}

/// xoshiro256** seeded by splitmix64.
#[derive(Debug, Clone)]
pub struct Rng([u64; 4]);

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng([next(), next(), next(), next()])
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Index of the largest logit, the lowest index on ties (NaN never wins).
/// Two passes that vectorize: the maximum over 16 lanes, then its first
/// position (a per-element branch on the index does not vectorize; this is
/// the whole of greedy sampling, every token).
pub fn argmax(l: &[f32]) -> TokenId {
    const W: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; W];
    let chunks = l.chunks_exact(W);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..W {
            lanes[i] = if c[i] > lanes[i] { c[i] } else { lanes[i] };
        }
    }
    let mut max = f32::NEG_INFINITY;
    for &x in lanes.iter().chain(rest) {
        if x > max {
            max = x;
        }
    }
    l.iter().position(|&x| x == max).unwrap_or(0) as TokenId
}

/// Log-softmax of `logits` at `token`, and the `top_n` most likely tokens.
pub fn logprob_of(logits: &[f32], token: TokenId, top_n: usize) -> crate::stream::TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let lse = max + sum.ln() as f32;
    let lp = |t: TokenId| {
        logits
            .get(t as usize)
            .map_or(f32::NEG_INFINITY, |&l| l - lse)
    };
    let mut top = Vec::new();
    if top_n > 0 && !logits.is_empty() {
        let mut idx: Vec<TokenId> = (0..logits.len() as TokenId).collect();
        let n = top_n.min(idx.len());
        let by_logit = |a: &TokenId, b: &TokenId| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        idx.select_nth_unstable_by(n - 1, by_logit);
        idx.truncate(n);
        idx.sort_by(by_logit);
        top = idx.into_iter().map(|t| (t, lp(t))).collect();
    }
    crate::stream::TokenLogprob {
        token,
        logprob: lp(token),
        top,
    }
}

#[derive(Debug)]
pub struct Sampler {
    p: SamplingParams,
    rng: Rng,
    generated: HashMap<TokenId, u32>,
    seen: HashMap<TokenId, ()>,
    scratch: Vec<(TokenId, f32)>,
}

impl Sampler {
    pub fn new(p: SamplingParams, prompt: &[TokenId]) -> Self {
        let mut seen = HashMap::new();
        if p.repetition_penalty != 1.0 {
            for &t in prompt {
                seen.insert(t, ());
            }
        }
        Sampler {
            rng: Rng::new(p.seed),
            p,
            generated: HashMap::new(),
            seen,
            scratch: Vec::new(),
        }
    }

    /// Greedy with nothing that reads other logits than the maximum.
    pub fn plain_greedy(&self) -> bool {
        (self.p.temperature <= 1e-6 || self.p.top_k == 1) && !self.has_penalties()
    }

    fn has_penalties(&self) -> bool {
        self.p.repetition_penalty != 1.0
            || self.p.frequency_penalty != 0.0
            || self.p.presence_penalty != 0.0
            || !self.p.logit_bias.is_empty()
    }

    fn penalized(&self, t: TokenId, logit: f32) -> f32 {
        let mut l = logit;
        if self.p.repetition_penalty != 1.0 && self.seen.contains_key(&t) {
            l = if l > 0.0 {
                l / self.p.repetition_penalty
            } else {
                l * self.p.repetition_penalty
            };
        }
        if let Some(&c) = self.generated.get(&t) {
            l -= self.p.frequency_penalty * c as f32 + self.p.presence_penalty;
        }
        if let Ok(i) = self.p.logit_bias.binary_search_by_key(&t, |b| b.0) {
            l += self.p.logit_bias[i].1;
        }
        l
    }

    /// Record a token the sequence produced (for penalties).
    pub fn accept(&mut self, t: TokenId) {
        *self.generated.entry(t).or_insert(0) += 1;
        if self.p.repetition_penalty != 1.0 {
            self.seen.insert(t, ());
        }
    }

    /// Pick the next token; `banned` tokens are never chosen.
    pub fn sample(&mut self, logits: &[f32], banned: &[TokenId]) -> TokenId {
        let pen = self.has_penalties();
        let value = |s: &Self, i: usize| {
            if !banned.is_empty() && banned.contains(&(i as TokenId)) {
                return f32::NEG_INFINITY;
            }
            let l = logits[i];
            if pen {
                s.penalized(i as TokenId, l)
            } else {
                l
            }
        };
        // Greedy: argmax, lowest index on ties.
        if self.p.temperature <= 1e-6 || self.p.top_k == 1 {
            if !pen {
                let best = argmax(logits);
                if !banned.contains(&best) {
                    return best;
                }
            }
            let mut best = 0usize;
            let mut best_v = f32::NEG_INFINITY;
            for i in 0..logits.len() {
                let v = value(self, i);
                if v > best_v {
                    best_v = v;
                    best = i;
                }
            }
            return best as TokenId;
        }
        let inv_t = 1.0 / self.p.temperature;
        let mut max = f32::NEG_INFINITY;
        for i in 0..logits.len() {
            max = max.max(value(self, i));
        }
        // Keep candidates within ln(1e9) of the max after temperature.
        let floor = max - 20.7 / inv_t;
        let mut cand = std::mem::take(&mut self.scratch);
        cand.clear();
        for i in 0..logits.len() {
            let v = value(self, i);
            if v >= floor {
                cand.push((i as TokenId, (v - max) * inv_t));
            }
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if self.p.top_k > 0 && cand.len() > self.p.top_k {
            cand.truncate(self.p.top_k);
        }
        // Softmax over candidates (already sorted descending).
        let mut sum = 0f64;
        for c in cand.iter_mut() {
            c.1 = c.1.exp();
            sum += c.1 as f64;
        }
        let mut keep = cand.len();
        if self.p.top_p < 1.0 {
            let mut acc = 0f64;
            for (i, c) in cand.iter().enumerate() {
                acc += c.1 as f64 / sum;
                if acc >= self.p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        if self.p.min_p > 0.0 {
            let thresh = cand[0].1 * self.p.min_p;
            keep = keep.min(cand.iter().take_while(|c| c.1 >= thresh).count().max(1));
        }
        cand.truncate(keep.max(1));
        let total: f64 = cand.iter().map(|c| c.1 as f64).sum();
        let mut r = self.rng.uniform() * total;
        let mut chosen = cand[cand.len() - 1].0;
        for c in cand.iter() {
            r -= c.1 as f64;
            if r < 0.0 {
                chosen = c.0;
                break;
            }
        }
        self.scratch = cand;
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        (0..100).map(|i| ((i * 37) % 100) as f32 / 10.0).collect()
    }

    #[test]
    fn greedy_is_argmax_with_lowest_index_on_ties() {
        let mut s = Sampler::new(
            SamplingParams {
                temperature: 0.0,
                ..Default::default()
            },
            &[],
        );
        let mut l = vec![0.0; 10];
        l[3] = 5.0;
        l[7] = 5.0;
        assert_eq!(s.sample(&l, &[]), 3);
        // Banned best (ignore_eos): the next best, lowest index on ties.
        assert_eq!(s.sample(&l, &[3]), 7);
    }

    #[test]
    fn logit_bias_bans_and_forces_tokens_greedy_and_sampled() {
        let l = logits();
        let best = argmax(&l);
        let p = |bias: Vec<(TokenId, f32)>, temperature| SamplingParams {
            temperature,
            logit_bias: bias,
            ..Default::default()
        };
        let mut s = Sampler::new(p(vec![(best, -100.0)], 0.0), &[]);
        assert_ne!(s.sample(&l, &[]), best);
        let mut s = Sampler::new(p(vec![(5, 100.0)], 0.0), &[]);
        assert_eq!(s.sample(&l, &[]), 5);
        let mut s = Sampler::new(p(vec![(5, 100.0)], 1.0), &[]);
        assert!((0..20).all(|_| s.sample(&l, &[]) == 5));
    }

    #[test]
    fn argmax_matches_a_plain_scan_at_every_length() {
        let plain = |l: &[f32]| {
            let mut b = 0;
            for (i, v) in l.iter().enumerate() {
                if *v > l[b] {
                    b = i;
                }
            }
            b as TokenId
        };
        for n in [1, 15, 16, 17, 33, 100, 49_152] {
            let l: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1009) as f32 * 0.5).collect();
            assert_eq!(argmax(&l), plain(&l), "n = {n}");
        }
        assert_eq!(argmax(&[1.0, f32::NAN, 3.0, 3.0]), 2);
    }

    #[test]
    fn same_seed_same_draws_other_seed_differs() {
        let p = |seed| SamplingParams {
            temperature: 1.5,
            seed,
            ..Default::default()
        };
        let draw = |seed| {
            let mut s = Sampler::new(p(seed), &[]);
            (0..50)
                .map(|_| s.sample(&logits(), &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn top_k_one_and_tiny_top_p_are_greedy() {
        let l = logits();
        let best = l
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0 as TokenId;
        for p in [
            SamplingParams {
                top_k: 1,
                seed: 1,
                ..Default::default()
            },
            SamplingParams {
                top_p: 1e-6,
                seed: 1,
                ..Default::default()
            },
            SamplingParams {
                min_p: 0.999,
                seed: 1,
                ..Default::default()
            },
        ] {
            let mut s = Sampler::new(p, &[]);
            for _ in 0..20 {
                assert_eq!(s.sample(&l, &[]), best);
            }
        }
    }

    #[test]
    fn penalties_move_greedy_choice() {
        let mut l = vec![0.0f32; 4];
        l[0] = 2.0;
        l[1] = 1.5;
        let mut s = Sampler::new(
            SamplingParams {
                temperature: 0.0,
                frequency_penalty: 1.0,
                ..Default::default()
            },
            &[],
        );
        assert_eq!(s.sample(&l, &[]), 0);
        s.accept(0);
        assert_eq!(s.sample(&l, &[]), 1);
        let mut r = Sampler::new(
            SamplingParams {
                temperature: 0.0,
                repetition_penalty: 2.0,
                ..Default::default()
            },
            &[0],
        );
        assert_eq!(r.sample(&l, &[]), 1);
    }

    #[test]
    fn logprobs_are_a_normalised_log_softmax() {
        let l = vec![1.0f32, 2.0, 3.0, 0.5];
        let r = logprob_of(&l, 1, 2);
        let z: f32 = l.iter().map(|x| x.exp()).sum();
        assert!((r.logprob - (2.0f32.exp() / z).ln()).abs() < 1e-5);
        assert_eq!(r.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 1]);
        let total: f32 = (0..4).map(|t| logprob_of(&l, t, 0).logprob.exp()).sum();
        assert!((total - 1.0).abs() < 1e-5);
    }

    #[test]
    fn banned_tokens_are_never_chosen() {
        let mut l = vec![0.0f32; 4];
        l[2] = 9.0;
        let mut g = Sampler::new(
            SamplingParams {
                temperature: 0.0,
                ..Default::default()
            },
            &[],
        );
        assert_eq!(g.sample(&l, &[2]), 0);
        let mut s = Sampler::new(SamplingParams::default(), &[]);
        for _ in 0..200 {
            assert_ne!(s.sample(&l, &[2]), 2);
        }
    }

    #[test]
    fn sampled_tokens_follow_distribution_roughly() {
        let l = vec![0.0f32, (3.0f32).ln()]; // p = 0.25, 0.75
        let mut s = Sampler::new(
            SamplingParams {
                seed: 42,
                ..Default::default()
            },
            &[],
        );
        let ones = (0..4000).filter(|_| s.sample(&l, &[]) == 1).count();
        assert!((2800..3200).contains(&ones), "{ones}");
    }
}
