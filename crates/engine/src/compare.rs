//! The one rule for comparing outputs that were computed in different
//! batch shapes, prompt chunkings or cache states (tests and checks use it;
//! the engine never does).
//!
//! Such runs are not bit-identical: a step of other rows runs other kernels
//! (a matrix-vector product for one row, a tiled product for many), so float
//! sums come out in another order and a logit moves by ~1e-4. That changes
//! nothing except where the model was already undecided:
//! - **greedy**: two runs may part only at a position where the reference
//!   run's top two candidates were within `tie` nats of each other, and the
//!   other run then took the reference's runner-up. What follows a parting
//!   is not compared (the contexts differ from there on).
//! - **seeded sampling**: a request draws its own random numbers, so two
//!   runs part only where a draw fell within a logit's wobble of the border
//!   between two tokens: a chance of ~1e-3 per request of ~20 tokens (the
//!   total-variation distance between the runs' rows, ~5e-5 a position, by
//!   the position count). One parting cannot be told from a bug, so the
//!   rule is counted over many seeded requests: at most `max_parted` of
//!   them may part. [`seeded_false_failure`] gives the chance that correct
//!   code fails it; the callers keep it below 1e-6 under a per-request
//!   parting chance of 1e-2, ten times the estimate. A broken draw (a
//!   shared or reordered random stream) parts nearly every request.
//!
//! Where the computation is provably identical (the same request alone,
//! the same shapes, no cache), compare exactly instead.

use crate::deliver::stream::{Event, Finished, GenerationError, RequestStream, TokenLogprob};
use crate::runtime::TokenId;

/// The default near-tie width, nats: far above the wobble (parted runs
/// here were seen at gaps of 3.5e-4), far below a real preference.
pub const TIE_NATS: f32 = 0.05;

/// One run's tokens and, per token, the top of its logprob row (ask for
/// at least 2). Tokens are ids (engine tests) or texts (HTTP tests).
#[derive(Debug, Clone, PartialEq)]
pub struct Scored<T> {
    pub tokens: Vec<T>,
    pub top: Vec<Vec<(T, f32)>>,
}

impl<T> Default for Scored<T> {
    fn default() -> Self {
        Scored {
            tokens: Vec::new(),
            top: Vec::new(),
        }
    }
}

impl Scored<TokenId> {
    /// From the engine's logprob entries, one per token.
    pub fn from_logprobs(lps: &[TokenLogprob]) -> Self {
        Scored {
            tokens: lps.iter().map(|l| l.token).collect(),
            top: lps.iter().map(|l| l.top.clone()).collect(),
        }
    }
}

/// Where two runs agree. `Ok(None)`: identical; `Ok(Some(i))`: they part
/// at token `i`, where the rule allows it.
pub type Agreement = Result<Option<usize>, String>;

fn first_parting<T: PartialEq>(got: &[T], want: &[T]) -> Option<usize> {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => Some(i),
        None if got.len() != want.len() => Some(got.len().min(want.len())),
        None => None,
    }
}

/// The top-two gap of a logprob row (infinite with fewer than two).
fn gap<T>(row: &[(T, f32)]) -> f32 {
    let mut v: Vec<f32> = row.iter().map(|t| t.1).collect();
    v.sort_by(|a, b| b.total_cmp(a));
    match v.as_slice() {
        [a, b, ..] => a - b,
        _ => f32::INFINITY,
    }
}

/// Greedy `got` against the reference run `want` (see the module doc).
pub fn greedy_agree<T: PartialEq + std::fmt::Debug>(
    got: &[T],
    want: &Scored<T>,
    tie: f32,
) -> Agreement {
    let Some(i) = first_parting(got, &want.tokens) else {
        return Ok(None);
    };
    let (Some(g), Some(row)) = (got.get(i), want.top.get(i)) else {
        return Err(format!(
            "the outputs part in length at token {i} ({} vs {} tokens) with no choice to explain it",
            got.len(),
            want.tokens.len()
        ));
    };
    let gap = gap(row);
    let mut ranked: Vec<&(T, f32)> = row.iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let runner_up = ranked.get(1).is_some_and(|r| &r.0 == g);
    if gap < tie && runner_up {
        Ok(Some(i))
    } else {
        Err(format!(
            "parted at token {i} where the reference's top-2 gap is {gap} (tie width {tie}) and the other run took {g:?} (reference row {row:?})\n got {got:?}\nwant {:?}",
            want.tokens
        ))
    }
}

/// [`greedy_agree`], panicking with `what` on a real difference; a parting
/// at a near-tie is printed.
pub fn assert_greedy_agree<T: PartialEq + std::fmt::Debug>(
    got: &[T],
    want: &Scored<T>,
    tie: f32,
    what: &str,
) {
    match greedy_agree(got, want, tie) {
        Ok(None) => {}
        Ok(Some(i)) => eprintln!("{what}: parted at token {i}, a near-tie"),
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Seeded sampled runs, `(got, want)` pairs of the same seed: at most
/// `max_parted` pairs may differ (see the module doc).
pub fn assert_seeded_agree<T: PartialEq + std::fmt::Debug>(
    pairs: &[(&[T], &[T])],
    max_parted: usize,
    what: &str,
) {
    let parted: Vec<(usize, usize)> = pairs
        .iter()
        .enumerate()
        .filter_map(|(k, (g, w))| first_parting(g, w).map(|i| (k, i)))
        .collect();
    for (k, i) in &parted {
        eprintln!("{what}: seeded pair {k} parted at token {i}");
    }
    assert!(
        parted.len() <= max_parted,
        "{what}: {} of {} seeded pairs parted (at most {max_parted} may, at a draw on a border): {parted:?}",
        parted.len(),
        pairs.len()
    );
}

/// The chance that at least `max_parted + 1` of `n` independent pairs part
/// when each parts with chance `q`: the false-failure rate of
/// [`assert_seeded_agree`].
pub fn seeded_false_failure(n: usize, max_parted: usize, q: f64) -> f64 {
    let mut p = 0.0;
    let mut c = 1.0; // C(n, k), built up term by term
    for k in 0..=n {
        if k > max_parted {
            p += c * q.powi(k as i32) * (1.0 - q).powi((n - k) as i32);
        }
        c = c * (n - k) as f64 / (k + 1) as f64;
    }
    p
}

/// Reads a request to its end, keeping every logprob entry (the request
/// must ask for logprobs).
pub async fn collect_scored(
    mut s: RequestStream,
) -> Result<(Finished, Scored<TokenId>), GenerationError> {
    let mut lps = Vec::new();
    while let Some(ev) = s.next().await {
        match ev {
            Event::Admitted => {}
            Event::Text { logprobs, .. } => lps.extend(logprobs),
            Event::Done(f) => {
                let mut sc = Scored::from_logprobs(&lps);
                // The end-of-generation token has no text event.
                sc.tokens = f.output_tokens.clone();
                return Ok((f, sc));
            }
            Event::Error(e) => return Err(e),
        }
    }
    Err(GenerationError::Shutdown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(tokens: &[u32], gaps: &[f32]) -> Scored<u32> {
        Scored {
            tokens: tokens.to_vec(),
            top: tokens
                .iter()
                .zip(gaps)
                .map(|(&t, &g)| vec![(t, -0.5), (t + 100, -0.5 - g)])
                .collect(),
        }
    }

    #[test]
    fn identical_runs_agree() {
        let w = scored(&[1, 2, 3], &[1.0, 1.0, 1.0]);
        assert_eq!(greedy_agree(&[1, 2, 3], &w, TIE_NATS), Ok(None));
    }

    #[test]
    fn a_parting_at_a_near_tie_to_the_runner_up_is_allowed() {
        let w = scored(&[1, 2, 3], &[1.0, 0.001, 1.0]);
        assert_eq!(greedy_agree(&[1, 102, 9], &w, TIE_NATS), Ok(Some(1)));
    }

    #[test]
    fn a_parting_where_the_model_was_sure_fails() {
        let w = scored(&[1, 2, 3], &[1.0, 0.5, 1.0]);
        assert!(greedy_agree(&[1, 102, 3], &w, TIE_NATS).is_err());
        // A near-tie, but not to the runner-up.
        let w = scored(&[1, 2, 3], &[1.0, 0.001, 1.0]);
        assert!(greedy_agree(&[1, 7, 3], &w, TIE_NATS).is_err());
        // Shorter with nothing to explain it.
        assert!(greedy_agree(&[1, 2], &scored(&[1, 2, 3], &[1.0; 3]), TIE_NATS).is_err());
    }

    #[test]
    #[should_panic(expected = "2 of 3 seeded pairs parted")]
    fn too_many_seeded_partings_fail() {
        let (a, b): (&[u32], &[u32]) = (&[1, 2], &[1, 3]);
        assert_seeded_agree(&[(a, b), (a, a), (b, a)], 1, "t");
    }

    #[test]
    fn the_false_failure_rate_is_the_binomial_tail() {
        assert!((seeded_false_failure(2, 0, 0.5) - 0.75).abs() < 1e-12);
        assert!(seeded_false_failure(8, 3, 1e-2) < 1e-6);
        assert!(seeded_false_failure(24, 3, 1e-2) > 1e-6);
        assert!(seeded_false_failure(24, 5, 1e-2) < 1e-6);
    }
}
