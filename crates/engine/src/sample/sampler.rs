//! Per-request token sampler. Pure: logits in, token out.
//!
//! Owns: the request's RNG (xoshiro256**, seeded from the request's `seed`),
//! its penalty counters and its scratch rows. One sampler per sequence,
//! never shared, so a seeded request draws the same numbers whatever else is
//! in the batch.
//!
//! Order (as llama.cpp and vLLM): penalties, logit bias and bans → greedy
//! (temperature 0 or top-k 1) or temperature → top-k → top-p → min-p → one
//! uniform draw. Top-p's mass is the top-k set's when top-k is on, else the
//! whole row's. The order of tokens is value descending, then id ascending;
//! every truncation is a cut in it, so the kept set is a prefix of it.
//!
//! Cost: O(V) per row, and no sort of the vocabulary in any configuration.
//! Penalties and bans touch only their tokens (on a copy of the row, made
//! only when there are any). The maximum and the weights
//! w = exp((v - max) / T) (a polynomial exp that vectorizes, with sums per
//! 256 tokens) are one pass each; the draw walks the sums, then one chunk.
//! Top-k: the k-th largest maximum of blocks of 64 tokens bounds the k-th
//! value from below, so the tokens gathered from the blocks that reach it
//! hold the top k; a selection over those. Top-p: the top tokens the same
//! way when a 512-token sample says few hold the mass; otherwise passes that
//! count and weigh the tokens above 8 thresholds at once narrow a band of
//! values around the cut, then a quickselect on weight inside it. Min-p is
//! a threshold on value. At V = 49,152 on x86-64-v4: about 17 µs a row at
//! temperature 1, 6 µs with top-k 40, 35-60 µs with top-p (greedy: 7-12).
//!
//! A row with no finite logit after bans and penalties samples to None; a
//! +inf logit (a broken row) is taken greedily.

use std::collections::{HashMap, HashSet};

use crate::runtime::TokenId;

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

mod kernels;
use kernels::*;
pub use kernels::{argmax, logprob_of};

/// Rows reused from token to token.
#[derive(Debug, Default)]
struct Scratch {
    /// The row after penalties and bans, when there were some.
    pen: Vec<f32>,
    penalized: bool,
    /// `Plan::Full`'s weights.
    wt: Weights,
    /// `Plan::List`'s candidates with weights; a band; a sample.
    cand: Vec<Cand>,
    maxima: Maxima,
}

#[derive(Debug)]
pub struct Sampler {
    p: SamplingParams,
    rng: Rng,
    generated: HashMap<TokenId, u32>,
    seen: HashSet<TokenId>,
    s: Scratch,
}

impl Sampler {
    pub fn new(p: SamplingParams, prompt: &[TokenId]) -> Self {
        let mut seen = HashSet::new();
        if p.repetition_penalty != 1.0 {
            // Media placeholders (negative) are no vocabulary ids.
            seen.extend(prompt.iter().copied().filter(|&t| t >= 0));
        }
        let rng = Rng::new(p.seed);
        let (generated, s) = (HashMap::new(), Scratch::default());
        Sampler {
            p,
            rng,
            generated,
            seen,
            s,
        }
    }

    /// Argmax draws (penalties and biases may still shape the logits).
    pub fn greedy(&self) -> bool {
        self.p.temperature <= 1e-6 || self.p.top_k == 1
    }

    /// Greedy with nothing that reads other logits than the maximum.
    pub fn plain_greedy(&self) -> bool {
        self.greedy() && !self.has_penalties()
    }

    fn has_penalties(&self) -> bool {
        self.p.repetition_penalty != 1.0
            || self.p.frequency_penalty != 0.0
            || self.p.presence_penalty != 0.0
            || !self.p.logit_bias.is_empty()
    }

    /// Record a token the sequence produced (for penalties).
    pub fn accept(&mut self, t: TokenId) {
        *self.generated.entry(t).or_insert(0) += 1;
        if self.p.repetition_penalty != 1.0 {
            self.seen.insert(t);
        }
    }

    /// Copies the row into `pen` and applies, per token in this order, the
    /// repetition penalty (seen tokens), frequency and presence penalties
    /// (generated tokens), `logit_bias` and bans (-inf). Only the named
    /// tokens are touched. False (no copy) when there is nothing to apply.
    fn penalize(&mut self, logits: &[f32], banned: &[TokenId]) -> bool {
        let pen = self.has_penalties();
        self.s.penalized = pen || !banned.is_empty();
        if !self.s.penalized {
            return false;
        }
        let (p, b) = (&self.p, &mut self.s.pen);
        b.clear();
        b.extend_from_slice(logits);
        let slot = |t: TokenId| usize::try_from(t).ok().filter(|&i| i < logits.len());
        let rp = p.repetition_penalty;
        if pen && rp != 1.0 {
            for i in self.seen.iter().filter_map(|&t| slot(t)) {
                b[i] = if b[i] > 0.0 { b[i] / rp } else { b[i] * rp };
            }
        }
        if pen && (p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) {
            for (i, &c) in self
                .generated
                .iter()
                .filter_map(|(&t, c)| Some((slot(t)?, c)))
            {
                b[i] -= p.frequency_penalty * c as f32 + p.presence_penalty;
            }
        }
        // Sorted by token: a repeated token counts once.
        let mut prev = None;
        for &(t, bias) in &p.logit_bias {
            if let Some(i) = slot(t).filter(|_| prev != Some(t)) {
                b[i] += bias;
            }
            prev = Some(t);
        }
        for i in banned.iter().filter_map(|&t| slot(t)) {
            b[i] = f32::NEG_INFINITY;
        }
        true
    }

    /// Penalties, bans and truncation; None when no token is finite.
    fn plan(&mut self, logits: &[f32], banned: &[TokenId]) -> Option<Plan> {
        let greedy = self.p.temperature <= 1e-6 || self.p.top_k == 1;
        if greedy && !self.has_penalties() {
            let best = argmax(logits);
            if !banned.contains(&best) {
                let finite = *logits.get(best as usize)? > f32::NEG_INFINITY;
                return finite.then_some(Plan::One(best as usize));
            }
        }
        let pen = self.penalize(logits, banned);
        let (p, s) = (&self.p, &mut self.s);
        let v = if pen { &s.pen[..] } else { logits };
        let max = lane_max(v);
        if max == f32::NEG_INFINITY {
            return None;
        }
        let first_max = || Some(Plan::One(v.iter().position(|&x| x == max)?));
        if greedy || max == f32::INFINITY {
            return first_max();
        }
        let t = p.temperature;
        let floor = match p.min_p > 0.0 {
            true => (max + t * p.min_p.ln()).min(max),
            false => f32::NEG_INFINITY,
        };
        if p.top_k > 1 && p.top_k < v.len() {
            top_set(v, p.top_k, &mut s.maxima, &mut s.cand);
            s.cand
                .iter_mut()
                .for_each(|c| c.w = fast_exp((c.v - max) / t));
            if p.top_p < 1.0 {
                let norm: f64 = s.cand.iter().map(|c| f64::from(c.w)).sum();
                let i = select_prefix(&mut s.cand, f64::from(p.top_p) * norm);
                s.cand.truncate(i + 1);
            }
            s.cand.retain(|c| c.v >= floor);
            return Some(Plan::List);
        }
        // Min-p alone zeroes weights in the weights pass; after top-p, a cut.
        let top_p = p.top_p < 1.0;
        let fold = if top_p { f32::NEG_INFINITY } else { floor };
        let mut cut = (floor > f32::NEG_INFINITY).then_some(Cut {
            v: floor,
            id: u32::MAX,
        });
        weights(v, (max, 1.0 / t, fold), &mut s.wt);
        if top_p {
            let target = f64::from(p.top_p) * s.wt.total;
            let row = (v, &s.wt.w[..], max);
            let tp = top_p_cut(row, t, (target, s.wt.total), &mut s.cand, &mut s.maxima);
            cut = tp.map(|c| cut.map_or(c, |m| m.min(c))).or(cut);
            if let Some(c) = cut {
                cut_sums(v, c, &mut s.wt);
            }
        }
        if s.wt.total.is_nan() || s.wt.total <= 0.0 {
            return first_max();
        }
        Some(Plan::Full(cut))
    }

    /// Pick the next token; `banned` tokens are never chosen. None when no
    /// token has a finite logit after bans and penalties (an empty row, all
    /// NaN or all -inf): there is nothing to sample.
    pub fn sample(&mut self, logits: &[f32], banned: &[TokenId]) -> Option<TokenId> {
        let t = match self.plan(logits, banned)? {
            Plan::One(t) => t,
            Plan::Full(cut) => {
                let v = if self.s.penalized {
                    &self.s.pen[..]
                } else {
                    logits
                };
                draw_full(v, &self.s.wt, cut, self.rng.uniform())?
            }
            Plan::List => {
                let c = &self.s.cand;
                let total: f64 = c.iter().map(|c| f64::from(c.w)).sum();
                let r = self.rng.uniform() * total;
                c[draw_in(c.iter().map(|c| c.w), r).unwrap_or(0)].id as usize
            }
        };
        Some(t as TokenId)
    }
}

#[cfg(test)]
mod tests;
