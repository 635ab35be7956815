//! Speculative decoding (pure): where drafts come from, how many tokens a
//! request drafts, and how many a step can afford.
//!
//! A decoding sequence feeds back its pending token plus `k` drafted tokens
//! in one step, each row with logits. The request's own sampler then draws
//! row by row: the draw from row `i` is the next token whatever the drafts
//! were; while it equals draft `i`, row `i + 1`'s logits were computed on the
//! right prefix and the next draw is taken from them too. Drafts here are
//! deterministic (the n-gram continuation, or the draft model's argmax), a
//! point mass `q`, so speculative sampling's rule (accept draft `d` with
//! probability `min(1, p(d)/q(d)) = p(d)`, else draw from `p` without `d`,
//! renormalised) is exactly "draw from `p`; keep going while the draw is the
//! draft": the output is distributed as without speculation, and greedy
//! output is the same tokens. The sampler's state (its RNG, penalties, the
//! grammar) advances once per emitted token, as without speculation.
//!
//! How many: each request keeps an acceptance estimate (`SpecState`); a step
//! adds draft rows, most likely first, while the expected tokens each buys
//! are worth the time it costs by the step-time fit (`StepFit`, learned from
//! every step the owner runs). On a busy batch a row costs more than a
//! draft's chance of acceptance returns, and speculation stands aside.

use crate::runtime::TokenId;

/// Where a request's drafts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpecMode {
    #[default]
    Off,
    /// Prompt lookup: the tokens that followed the latest earlier
    /// occurrence of the sequence's last n tokens (prompt and output).
    Ngram,
    /// A small model with the same vocabulary, greedy.
    Draft,
}

impl SpecMode {
    pub fn parse(s: &str) -> Option<SpecMode> {
        match s {
            "off" | "none" => Some(SpecMode::Off),
            "ngram" | "prompt-lookup" => Some(SpecMode::Ngram),
            "draft" | "draft-model" => Some(SpecMode::Draft),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SpecMode::Off => "off",
            SpecMode::Ngram => "ngram",
            SpecMode::Draft => "draft",
        }
    }
}

/// Longest lookup n-gram, and the shortest that counts as a match.
pub const NGRAM_MAX: usize = 4;
pub const NGRAM_MIN: usize = 2;
/// How far back the lookup searches (tokens): bounds its cost per step.
pub const NGRAM_WINDOW: usize = 16_384;

/// Up to `k` tokens that followed the latest earlier occurrence of the
/// history's last n tokens, longest n first (from `NGRAM_MAX` down to
/// `NGRAM_MIN`); empty when nothing matches.
pub fn ngram_draft(hist: &[TokenId], k: usize, out: &mut Vec<TokenId>) {
    out.clear();
    let len = hist.len();
    if k == 0 || len < NGRAM_MIN + 1 {
        return;
    }
    let floor = len.saturating_sub(NGRAM_WINDOW);
    for n in (NGRAM_MIN..=NGRAM_MAX.min(len - 1)).rev() {
        let pat = &hist[len - n..];
        // Latest start j < len - n with hist[j..j+n] == pat.
        let mut j = len - n;
        while j > floor {
            j -= 1;
            if hist[j + n - 1] == pat[n - 1] && hist[j..j + n] == *pat {
                let from = j + n;
                let to = (from + k).min(len);
                out.extend_from_slice(&hist[from..to]);
                return;
            }
        }
    }
}

/// One request's speculation: its mode, its cap, and what its drafts have
/// earned so far.
#[derive(Debug, Clone)]
pub struct SpecState {
    pub mode: SpecMode,
    /// Most tokens drafted in one step (the request's or the server's).
    pub max: usize,
    /// Its class in the server's priors (`Priors::class`).
    pub class: usize,
    /// Estimated chance that a draft token is accepted given the one before
    /// it was (moving average over this request's drafts).
    acc: f64,
    pub drafted: u64,
    pub accepted: u64,
}

impl SpecState {
    const ALPHA: f64 = 0.3;

    /// `prior`: the acceptance to start from before the request's first
    /// verification (its class's, `Priors::prior`).
    pub fn new(mode: SpecMode, max: usize, class: usize, prior: f64) -> Self {
        SpecState {
            mode,
            max,
            class,
            acc: prior.clamp(0.02, 0.98),
            drafted: 0,
            accepted: 0,
        }
    }

    pub fn acceptance(&self) -> f64 {
        self.acc
    }

    /// A verification: `drafted` tokens were checked, the first `accepted`
    /// matched. Acceptance per position is estimated from the run length:
    /// a run of a among d drafts is a successes and (a < d) one failure.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.drafted += drafted as u64;
        self.accepted += accepted as u64;
        let trials = trials(drafted, accepted);
        let rate = accepted as f64 / trials as f64;
        // Weighted by the evidence: a long run moves the estimate more.
        let w = 1.0 - (1.0 - Self::ALPHA).powi(trials.min(8) as i32);
        self.acc += w * (rate - self.acc);
        self.acc = self.acc.clamp(0.02, 0.98);
    }
}

/// Trials in a verification where the first `accepted` of `drafted` drafts
/// matched: a run of a among d drafts is a successes and (a < d) one failure.
fn trials(drafted: usize, accepted: usize) -> usize {
    accepted + usize::from(accepted < drafted)
}

/// Acceptance a new request starts from, learned over the server's
/// verifications per class (mode × greedy or sampled): at temperature 1 on
/// a small model an n-gram draft is accepted ~0.1 of the time, greedy on
/// text the answer copies ~0.8, and a fixed prior is wrong for one of them
/// on every request's first steps. Per-position rate from run lengths (as
/// `SpecState::observe`), decayed sums, Laplace-smoothed: 0.5 before any
/// evidence.
#[derive(Debug, Clone, Default)]
pub struct Priors {
    /// (successes, trials) per class.
    s: [(f64, f64); 4],
}

impl Priors {
    /// Evidence kept: about this many recent trials per class.
    const SPAN: f64 = 512.0;

    pub fn class(mode: SpecMode, sampled: bool) -> usize {
        usize::from(mode == SpecMode::Draft) * 2 + usize::from(sampled)
    }

    pub fn prior(&self, class: usize) -> f64 {
        let (a, n) = self.s[class % 4];
        (a + 1.0) / (n + 2.0)
    }

    pub fn observe(&mut self, class: usize, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        let trials = trials(drafted, accepted);
        let (a, n) = &mut self.s[class % 4];
        let keep = (1.0 - trials as f64 / Self::SPAN).max(0.0);
        *a = *a * keep + accepted as f64;
        *n = *n * keep + trials as f64;
    }
}

/// Step time as a line in the step's rows (of every kind), fitted by
/// forgetting least squares over recent decode-only steps: on a CPU each row
/// costs about the same; on a GPU a step is nearly flat up to large
/// batches, and the slope the fit finds is small. (The runtime's cost is not
/// a line at small batches: on this 2-core CPU 2 rows cost 2× one and 4
/// rows about what 3 do. Pricing each size by its own measured mean made
/// one stream draft less and gain less: the acceptance model, one rate per
/// request, is the cruder part. docs/BENCHMARKS.md [8/8].)
#[derive(Debug, Clone, Default)]
pub struct StepFit {
    /// w, x, y, xx, xy.
    s: [f64; 5],
    /// Steps seen; the first (the runtime's warm-up: graph and buffer
    /// allocation, several times a later step's cost) is left out.
    seen: u64,
}

impl StepFit {
    const DECAY: f64 = 0.95;

    pub fn observe(&mut self, tokens: usize, ms: f64) {
        self.seen += 1;
        if tokens == 0 || !ms.is_finite() || self.seen == 1 {
            return;
        }
        let x = tokens as f64;
        for (s, v) in self.s.iter_mut().zip([1.0, x, ms, x * x, x * ms]) {
            *s = *s * Self::DECAY + v;
        }
    }

    /// (fixed ms, ms per token), once there is a slope to read: steps of
    /// different sizes. The slope is never negative, the fixed part never
    /// below zero.
    pub fn line(&self) -> Option<(f64, f64)> {
        let [w, x, y, xx, xy] = self.s;
        if w < 1.0 {
            return None;
        }
        let (mx, my) = (x / w, y / w);
        let var = xx / w - mx * mx;
        if var < 0.25 {
            return None;
        }
        let b = ((xy / w - mx * my) / var).max(0.0);
        let a = (my - b * mx).max(0.0);
        Some((a, b))
    }
}

/// Draft rows for one step. `cands[i]` = (most tokens sequence i may draft
/// now, its acceptance estimate); `rows` = the step's rows without drafts,
/// `emitting` = the tokens they emit (one per decoder); `room` = rows the
/// batch has left. Returns how many tokens each candidate drafts.
///
/// Greedy by expected value: draft `j` of a sequence with acceptance `a` is
/// emitted with probability `a^j`; it is added while that beats the step's
/// time per emitted token times its own cost (`p * T > N * b`: adding it
/// raises tokens per millisecond), most likely drafts first. Without a fit
/// yet, each candidate drafts its cap (the first steps measure).
pub fn allot(
    cands: &[(usize, f64)],
    rows: usize,
    emitting: usize,
    room: usize,
    fit: Option<(f64, f64)>,
) -> Vec<usize> {
    let mut take = vec![0; cands.len()];
    let mut left = room;
    let Some((a, b)) = fit else {
        for (t, &(cap, _)) in take.iter_mut().zip(cands) {
            *t = cap.min(left);
            left -= *t;
        }
        return take;
    };
    // Every (sequence, position) by its chance of being emitted; a stable
    // sort keeps each sequence's positions in order on ties.
    let mut offers: Vec<(f64, usize)> = Vec::new();
    for j in 1..=cands.iter().map(|c| c.0).max().unwrap_or(0) {
        for (i, &(cap, acc)) in cands.iter().enumerate() {
            if j <= cap {
                offers.push((acc.powi(j as i32), i));
            }
        }
    }
    offers.sort_by(|x, y| y.0.total_cmp(&x.0));
    let mut t = a + b * rows as f64;
    let mut n = emitting.max(1) as f64;
    for (p, i) in offers {
        if left == 0 || p * t <= n * b {
            break;
        }
        take[i] += 1;
        left -= 1;
        t += b;
        n += p;
    }
    take
}

/// A request that has never been verified drafts a little once
/// (`EXPLORE` tokens, within the batch's room) even where `allot` declined:
/// its acceptance is otherwise the prior forever, and a request whose drafts
/// would pay (text it copies) is never found out. Only where a draft could
/// pay at all: `EXPLORE` drafts accepted nine times in ten must raise the
/// step's tokens per millisecond by the cost. On a busy CPU batch no draft
/// pays, and exploring there only costs.
pub fn explore(
    take: &mut [usize],
    cands: &[(usize, f64)],
    fresh: &[bool],
    room: usize,
    (rows, emitting, fit): (usize, usize, Option<(f64, f64)>),
) {
    const EXPLORE: usize = 2;
    const HOPE: f64 = 0.9;
    if let Some((a, b)) = fit {
        // (n + gain) / (t + 2b) > n / t, as in `allot`.
        let (n, t) = (emitting.max(1) as f64, a + b * rows as f64);
        if (HOPE + HOPE * HOPE) * t <= EXPLORE as f64 * b * n {
            return;
        }
    }
    let mut left = room.saturating_sub(take.iter().sum());
    for ((t, &(cap, _)), &f) in take.iter_mut().zip(cands).zip(fresh) {
        if f && *t == 0 && left > 0 {
            *t = cap.min(EXPLORE).min(left);
            left -= *t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_finds_the_latest_longest_match() {
        let mut out = Vec::new();
        // ... 1 2 3 [7 8 9] ... 1 2 3 [4 5] ... 2 3 → the latest "2 3" is
        // followed by 4 5 (and n=3 "x 2 3" does not occur).
        let h = [1, 2, 3, 7, 8, 9, 1, 2, 3, 4, 5, 6, 2, 3];
        ngram_draft(&h, 3, &mut out);
        assert_eq!(out, vec![4, 5, 6]);
        // A longer match wins over a later shorter one.
        let h = [9, 1, 2, 3, 4, 5, 0, 2, 3, 8, 9, 1, 2, 3];
        ngram_draft(&h, 2, &mut out);
        assert_eq!(out, vec![4, 5]);
        // The continuation stops at the end of the history.
        let h = [5, 6, 5, 6];
        ngram_draft(&h, 8, &mut out);
        assert_eq!(out, vec![5, 6]);
        ngram_draft(&[1, 2, 3, 4], 4, &mut out);
        assert!(out.is_empty(), "no repeat: no draft");
        ngram_draft(&[1, 1], 4, &mut out);
        assert!(out.is_empty(), "too short");
        ngram_draft(&h, 0, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn priors_are_learned_per_class() {
        let mut p = Priors::default();
        let (greedy, sampled) = (
            Priors::class(SpecMode::Ngram, false),
            Priors::class(SpecMode::Ngram, true),
        );
        assert_ne!(greedy, sampled);
        assert_ne!(greedy, Priors::class(SpecMode::Draft, false));
        assert_eq!(p.prior(greedy), 0.5);
        for _ in 0..50 {
            p.observe(greedy, 8, 6); // 6 successes, 1 failure
            p.observe(sampled, 4, 0); // 1 failure
        }
        assert!(
            (p.prior(greedy) - 6.0 / 7.0).abs() < 0.02,
            "{}",
            p.prior(greedy)
        );
        assert!(p.prior(sampled) < 0.05, "{}", p.prior(sampled));
        // The draft-model classes are untouched.
        assert_eq!(p.prior(Priors::class(SpecMode::Draft, true)), 0.5);
        // Old evidence fades: a class that stops being accepted follows.
        for _ in 0..2000 {
            p.observe(greedy, 2, 0);
        }
        assert!(p.prior(greedy) < 0.05, "{}", p.prior(greedy));
        let s = SpecState::new(SpecMode::Ngram, 8, sampled, p.prior(sampled));
        assert!(s.acceptance() < 0.05 && s.class == sampled);
    }

    #[test]
    fn acceptance_follows_the_runs() {
        let mut s = SpecState::new(SpecMode::Ngram, 8, 0, 0.5);
        for _ in 0..20 {
            s.observe(8, 8);
        }
        assert!(s.acceptance() > 0.9, "{}", s.acceptance());
        for _ in 0..20 {
            s.observe(4, 0);
        }
        assert!(s.acceptance() < 0.1, "{}", s.acceptance());
        assert_eq!((s.drafted, s.accepted), (240, 160));
    }

    #[test]
    fn fit_reads_a_line() {
        let mut f = StepFit::default();
        assert!(f.line().is_none());
        for i in 0..60 {
            let n = 1 + (i % 9);
            f.observe(n, 10.0 + 0.5 * n as f64);
        }
        let (a, b) = f.line().unwrap();
        assert!((a - 10.0).abs() < 0.01 && (b - 0.5).abs() < 0.01, "{a} {b}");
        let mut g = StepFit::default();
        for _ in 0..10 {
            g.observe(4, 10.0);
        }
        assert!(g.line().is_none(), "no spread: no slope");
    }

    #[test]
    fn allot_drafts_when_rows_are_cheap_and_stands_aside_when_busy() {
        // One decoder, a 10 ms step, 0.5 ms per row: drafts with a good
        // chance are nearly free.
        let one = allot(&[(8, 0.9)], 1, 1, 100, Some((10.0, 0.5)));
        assert_eq!(one, vec![8]);
        let poor = allot(&[(8, 0.2)], 1, 1, 100, Some((10.0, 0.5)));
        assert!(poor[0] <= 2, "{poor:?}");
        // 32 decoders at 0.7 ms a row: only near-certain drafts pay.
        let busy: Vec<(usize, f64)> = (0..32).map(|_| (8, 0.6)).collect();
        let t = allot(&busy, 32, 32, 512, Some((8.0, 0.7)));
        assert!(t.iter().all(|&k| k == 0), "{t:?}");
        let sure: Vec<(usize, f64)> = (0..32).map(|_| (8, 0.98)).collect();
        let t = allot(&sure, 32, 32, 512, Some((8.0, 0.7)));
        assert!(t.iter().sum::<usize>() > 0, "{t:?}");
        // A flat step (a GPU): drafts are free up to the batch's room.
        let gpu: Vec<(usize, f64)> = (0..64).map(|_| (4, 0.5)).collect();
        let t = allot(&gpu, 64, 64, 100, Some((10.0, 0.001)));
        assert_eq!(t.iter().sum::<usize>(), 100);
        // A never-verified request tries a little once, within the room.
        let cheap = (1, 1, Some((10.0, 0.5)));
        let mut t = vec![0, 0, 3];
        explore(
            &mut t,
            &[(8, 0.5), (1, 0.5), (8, 0.5)],
            &[true, true, true],
            5,
            cheap,
        );
        assert_eq!(t, vec![2, 0, 3]);
        let mut t = vec![0, 0];
        explore(&mut t, &[(8, 0.5), (8, 0.5)], &[false, true], 100, cheap);
        assert_eq!(t, vec![0, 2]);
        // ... but not where even a draft accepted 9 times in 10 costs more
        // than it returns (32 decoders, 0.7 ms a row on a 2 ms base: a CPU
        // where every row costs about the same) ...
        let mut t = vec![0; 32];
        let fresh = vec![true; 32];
        explore(&mut t, &busy, &fresh, 512, (32, 32, Some((2.0, 0.7))));
        assert!(t.iter().all(|&k| k == 0), "{t:?}");
        // ... while on an 8 ms base one would.
        explore(&mut t, &busy, &fresh, 512, (32, 32, Some((8.0, 0.7))));
        assert!(t.iter().all(|&k| k == 2), "{t:?}");
        // Without a fit yet it explores (the first steps measure).
        let mut t = vec![0];
        explore(&mut t, &[(8, 0.5)], &[true], 100, (1, 1, None));
        assert_eq!(t, vec![2]);
        // No fit yet: the caps, within the room.
        assert_eq!(allot(&[(3, 0.1), (5, 0.1)], 2, 2, 6, None), vec![3, 3]);
    }
}
