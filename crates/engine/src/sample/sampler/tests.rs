use std::collections::{HashMap, HashSet};

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
    assert_eq!(s.sample(&l, &[]), Some(3));
    // Banned best (ignore_eos): the next best, lowest index on ties.
    assert_eq!(s.sample(&l, &[3]), Some(7));
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
    assert_ne!(s.sample(&l, &[]), Some(best));
    let mut s = Sampler::new(p(vec![(5, 100.0)], 0.0), &[]);
    assert_eq!(s.sample(&l, &[]), Some(5));
    let mut s = Sampler::new(p(vec![(5, 100.0)], 1.0), &[]);
    assert!((0..20).all(|_| s.sample(&l, &[]) == Some(5)));
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
            .map(|_| s.sample(&logits(), &[]).unwrap())
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
            assert_eq!(s.sample(&l, &[]), Some(best));
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
    assert_eq!(s.sample(&l, &[]), Some(0));
    s.accept(0);
    assert_eq!(s.sample(&l, &[]), Some(1));
    let mut r = Sampler::new(
        SamplingParams {
            temperature: 0.0,
            repetition_penalty: 2.0,
            ..Default::default()
        },
        &[0],
    );
    assert_eq!(r.sample(&l, &[]), Some(1));
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
    assert_eq!(g.sample(&l, &[2]), Some(0));
    let mut s = Sampler::new(SamplingParams::default(), &[]);
    for _ in 0..200 {
        assert_ne!(s.sample(&l, &[2]), Some(2));
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
    let ones = (0..4000).filter(|_| s.sample(&l, &[]) == Some(1)).count();
    assert!((2800..3200).contains(&ones), "{ones}");
}

/// The tokens `sample` would draw from, sorted by id.
fn kept(s: &mut Sampler, logits: &[f32], banned: &[TokenId]) -> Option<Vec<TokenId>> {
    let mut out: Vec<TokenId> = match s.plan(logits, banned)? {
        Plan::One(t) => vec![t as TokenId],
        Plan::Full(cut) => {
            let v = if s.s.penalized { &s.s.pen[..] } else { logits };
            let keep = |&i: &usize| v[i].is_finite() && cut.is_none_or(|c| c.keeps(i as u32, v[i]));
            (0..v.len()).filter(keep).map(|i| i as TokenId).collect()
        }
        Plan::List => s.s.cand.iter().map(|c| c.id as TokenId).collect(),
    };
    out.sort_unstable();
    Some(out)
}

// A slow, obviously correct sampler to compare with: penalties per token as
// the original `penalized`, a full sort, an exact (f64) softmax.

fn normal(r: &mut Rng) -> f32 {
    let (a, b) = (r.uniform().max(1e-12), r.uniform());
    ((-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()) as f32
}

/// The row after penalties, bias and bans, token by token.
fn ref_values(
    l: &[f32],
    p: &SamplingParams,
    prompt: &[TokenId],
    generated: &[TokenId],
    banned: &[TokenId],
) -> Vec<f32> {
    let seen: HashSet<TokenId> = prompt.iter().chain(generated).copied().collect();
    let mut count = HashMap::new();
    for &t in generated {
        *count.entry(t).or_insert(0u32) += 1;
    }
    let rp = p.repetition_penalty;
    (0..l.len() as TokenId)
        .map(|t| {
            let mut x = l[t as usize];
            if banned.contains(&t) {
                return f32::NEG_INFINITY;
            }
            if rp != 1.0 && seen.contains(&t) {
                x = if x > 0.0 { x / rp } else { x * rp };
            }
            if let Some(&c) = count.get(&t) {
                x -= p.frequency_penalty * c as f32 + p.presence_penalty;
            }
            x + p.logit_bias.iter().find(|b| b.0 == t).map_or(0.0, |b| b.1)
        })
        .collect()
}

/// The kept tokens (by id) with their probabilities, and whether a
/// truncation decision lies within rounding of its threshold.
fn reference(v: &[f32], p: &SamplingParams) -> Option<(Vec<(TokenId, f64)>, bool)> {
    let mut ord: Vec<usize> = (0..v.len()).filter(|&i| v[i].is_finite()).collect();
    ord.sort_by(|&a, &b| v[b].partial_cmp(&v[a]).unwrap().then(a.cmp(&b)));
    let first = *ord.first()?;
    if p.temperature <= 1e-6 || p.top_k == 1 {
        return Some((vec![(first as TokenId, 1.0)], false));
    }
    let (max, t) = (f64::from(v[first]), f64::from(p.temperature));
    let z: Vec<f64> = ord.iter().map(|&i| (f64::from(v[i]) - max) / t).collect();
    let mut keep = if p.top_k > 0 {
        p.top_k.min(ord.len())
    } else {
        ord.len()
    };
    let mut close = false;
    if p.top_p < 1.0 {
        let norm: f64 = z[..keep].iter().map(|x| x.exp()).sum();
        let (target, eps, mut cum) = (f64::from(p.top_p) * norm, 1e-5 * norm, 0.0);
        for (i, x) in z[..keep].iter().enumerate() {
            let before = cum;
            cum += x.exp();
            if cum >= target {
                close = cum - target < eps || (i > 0 && target - before < eps);
                keep = i + 1;
                break;
            }
        }
    }
    if p.min_p > 0.0 {
        let lt = f64::from(p.min_p.min(1.0)).ln();
        close |= z[..keep]
            .iter()
            .any(|&x| (x - lt).abs() < 1e-5 * (1.0 + lt.abs()));
        keep = z[..keep].iter().take_while(|&&x| x >= lt).count();
    }
    let total: f64 = z[..keep].iter().map(|x| x.exp()).sum();
    let mut out: Vec<(TokenId, f64)> = (ord[..keep].iter().zip(&z))
        .map(|(&i, x)| (i as TokenId, x.exp() / total))
        .collect();
    out.sort_by_key(|x| x.0);
    Some((out, close))
}

/// Rows of every shape the sampler has paths for.
fn rows() -> Vec<Vec<f32>> {
    let mut r = Rng::new(11);
    let mut rows = Vec::new();
    let big = 49_152;
    // Gaussian spread and a few favourites; flatter; many ties; -inf
    // (masked) tokens and a NaN.
    let mut l: Vec<f32> = (0..big).map(|_| 3.0 * normal(&mut r)).collect();
    for k in 0..8 {
        l[(r.next_u64() % big as u64) as usize] = 12.0 + k as f32 + r.uniform() as f32;
    }
    rows.push(l);
    rows.push((0..big).map(|_| normal(&mut r)).collect());
    rows.push((0..big).map(|_| (r.next_u64() % 16) as f32 * 0.5).collect());
    let mut l: Vec<f32> = (0..big)
        .map(|i| {
            if i % 3 == 0 {
                2.0 * normal(&mut r)
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    l[4242] = f32::NAN;
    rows.push(l);
    rows.push(vec![0.25; 3000]);
    // Short rows, ragged lengths (tails past the last block of 16 or 64).
    rows.push((0..5003).map(|_| 2.0 * normal(&mut r)).collect());
    rows.push((0..300).map(|_| (r.next_u64() % 4) as f32).collect());
    let mut l: Vec<f32> = (0..1013).map(|_| normal(&mut r) - 5.0).collect();
    l[1012] = 9.0;
    rows.push(l);
    let mut l: Vec<f32> = (0..50).map(|_| 3.0 * normal(&mut r)).collect();
    (l[3], l[17], l[40]) = (f32::NAN, f32::NEG_INFINITY, f32::NEG_INFINITY);
    rows.push(l);
    rows.push(vec![0.5, -1.0, 3.0, 3.0, f32::NEG_INFINITY, 2.0, -0.0]);
    rows.push(vec![1.0, 1.0]);
    rows.push(vec![-3.0]);
    rows
}

/// temperature 0.3/1/2 × top_k 0/1/5/40 × top_p 1/0.95/0.5/1e-6 ×
/// min_p 0/0.05/0.5; every third with penalties, every third with a bias.
fn params() -> Vec<SamplingParams> {
    let mut out = Vec::new();
    for temperature in [0.3, 1.0, 2.0] {
        for top_k in [0, 1, 5, 40] {
            for top_p in [1.0, 0.95, 0.5, 1e-6] {
                for min_p in [0.0, 0.05, 0.5] {
                    let mut p = SamplingParams {
                        temperature,
                        top_k,
                        top_p,
                        min_p,
                        seed: out.len() as u64,
                        ..Default::default()
                    };
                    match out.len() % 3 {
                        1 => {
                            (
                                p.repetition_penalty,
                                p.frequency_penalty,
                                p.presence_penalty,
                            ) = (1.3, 0.5, 0.2)
                        }
                        2 => p.logit_bias = vec![(2, 4.0), (5, -100.0), (20, 1.5)],
                        _ => {}
                    }
                    out.push(p);
                }
            }
        }
    }
    out
}

#[test]
fn kept_sets_match_a_reference_sampler() {
    let (prompt, generated, banned) = ([0, 2, 3, 9, 3000], [2, 2, 6, 11, 40_000], [1, 6]);
    let (mut n, mut close) = (0, 0);
    for (ri, row) in rows().iter().enumerate() {
        for (pi, p) in params().iter().enumerate() {
            // Long rows: a fifth of the combinations (debug builds are slow).
            if row.len() > 10_000 && (ri + pi) % 5 != 0 {
                continue;
            }
            let banned = if pi % 2 == 0 { &banned[..] } else { &[] };
            let mut s = Sampler::new(p.clone(), &prompt);
            generated.iter().for_each(|&t| s.accept(t));
            let want = reference(&ref_values(row, p, &prompt, &generated, banned), p);
            let got = kept(&mut s, row, banned);
            n += 1;
            let Some((want, near)) = want else {
                assert_eq!(got, None, "row {ri}, {p:?}");
                continue;
            };
            let want: Vec<TokenId> = want.iter().map(|x| x.0).collect();
            if got.as_ref() != Some(&want) {
                assert!(near, "row {ri}, {p:?}: {got:?} vs {want:?}");
                close += 1;
            }
        }
    }
    assert!(close * 50 <= n, "{close} of {n} differ (within rounding)");
}

#[test]
fn draws_follow_the_reference_probabilities() {
    let small = vec![
        2.0,
        1.0,
        1.0,
        0.0,
        -1.0,
        3.0,
        0.5,
        f32::NEG_INFINITY,
        2.5,
        -2.0,
        1.5,
        0.2,
    ];
    // Favourites spread over chunks of a longer row.
    let mut long = vec![-30.0f32; 1000];
    for (k, i) in [3, 150, 300, 511, 600, 777, 900, 999]
        .into_iter()
        .enumerate()
    {
        long[i] = k as f32 * 0.4;
    }
    // Ties across chunks: a top-p cut inside them keeps the lower ids.
    let mut tied = vec![-30.0f32; 1000];
    for i in [5, 260, 261, 600, 601, 602, 900, 999] {
        tied[i] = 1.0;
    }
    let ps = [
        (1.0, 0, 1.0, 0.0),
        (0.7, 0, 0.9, 0.0),
        (2.0, 5, 1.0, 0.0),
        (1.0, 0, 1.0, 0.05),
        (1.5, 40, 0.95, 0.02),
        (1.0, 0, 0.8, 0.0),
    ];
    for row in [&small, &long, &tied] {
        for (temperature, top_k, top_p, min_p) in ps {
            let p = SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                seed: 5,
                ..Default::default()
            };
            let (want, _) = reference(row, &p).unwrap();
            let mut s = Sampler::new(p.clone(), &[]);
            let draws = 8000;
            let mut hits = HashMap::new();
            for _ in 0..draws {
                *hits.entry(s.sample(row, &[]).unwrap()).or_insert(0) += 1;
            }
            assert!(
                hits.keys().all(|t| want.iter().any(|w| w.0 == *t)),
                "{p:?}: {hits:?}"
            );
            for (t, q) in want {
                let f = f64::from(hits.get(&t).copied().unwrap_or(0)) / f64::from(draws);
                assert!((f - q).abs() < 0.02, "{p:?}: token {t}: {f} vs {q}");
            }
        }
    }
}

#[test]
fn fast_exp_is_accurate_and_exactly_zero_below_its_range() {
    for k in 0..=200_000 {
        let x = -100.0 + k as f32 * 5e-4;
        let (e, exact) = (fast_exp(x), f64::from(x).exp());
        if x > -87.0 {
            assert!(
                (f64::from(e) - exact).abs() <= 2e-7 * exact,
                "{x}: {e} vs {exact}"
            );
        } else {
            assert_eq!(e, 0.0, "{x}");
        }
    }
    assert_eq!(fast_exp(0.0), 1.0);
    assert_eq!(fast_exp(f32::NAN), 0.0);
    assert_eq!(fast_exp(f32::NEG_INFINITY), 0.0);
}

#[test]
fn no_finite_logit_gives_none_and_nan_is_never_chosen() {
    let ps = [
        (0.0, 0, 1.0),
        (1.0, 0, 1.0),
        (1.0, 5, 1.0),
        (0.7, 0, 0.5),
        (1.0, 0, 0.999),
    ];
    for (temperature, top_k, top_p) in ps {
        let p = SamplingParams {
            temperature,
            top_k,
            top_p,
            ..Default::default()
        };
        let mut s = Sampler::new(p, &[]);
        assert_eq!(s.sample(&[f32::NAN; 40], &[]), None);
        assert_eq!(s.sample(&[f32::NEG_INFINITY; 300], &[]), None);
        assert_eq!(s.sample(&[], &[]), None);
        assert_eq!(s.sample(&[1.0, 2.0], &[0, 1]), None);
        let mut l = vec![0.0; 300];
        (l[7], l[8]) = (f32::NAN, 1.0);
        assert!((0..200).all(|_| s.sample(&l, &[]).is_some_and(|t| t != 7)));
        assert_eq!(
            s.sample(&[1.0, f32::NAN, 3.0], &[]).map(|t| t != 1),
            Some(true)
        );
    }
}

#[test]
fn logprobs_match_an_exact_log_softmax_and_a_full_sort() {
    let mut r = Rng::new(3);
    let mut rows: Vec<Vec<f32>> = vec![
        (0..49_152).map(|_| 3.0 * normal(&mut r)).collect(),
        (0..100).map(|_| (r.next_u64() % 5) as f32).collect(),
        vec![
            f32::NEG_INFINITY,
            1.0,
            f32::NAN,
            0.5,
            f32::NEG_INFINITY,
            1.0,
            f32::NEG_INFINITY,
        ],
    ];
    rows[0][777] = f32::NAN;
    for row in &rows {
        let max = row
            .iter()
            .copied()
            .filter(|x| !x.is_nan())
            .fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = row
            .iter()
            .filter(|x| !x.is_nan())
            .map(|&x| f64::from(x - max).exp())
            .sum();
        let lse = f64::from(max) + sum.ln();
        // Alternatives are the tokens that could be chosen: finite ones.
        let mut sorted: Vec<usize> = (0..row.len())
            .filter(|&i| row[i] > f32::NEG_INFINITY)
            .collect();
        sorted.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap().then(a.cmp(&b)));
        for n in [0, 1, 5, 20, 200] {
            let got = logprob_of(row, 1, n);
            assert!((f64::from(got.logprob) - (f64::from(row[1]) - lse)).abs() < 1e-4);
            let ids: Vec<TokenId> = got.top.iter().map(|t| t.0).collect();
            let want: Vec<TokenId> = sorted.iter().take(n).map(|&i| i as TokenId).collect();
            assert_eq!(ids, want, "n = {n}");
            for &(t, lp) in &got.top {
                let exact = f64::from(row[t as usize]) - lse;
                assert!(
                    lp == f32::NEG_INFINITY && exact == f64::NEG_INFINITY
                        || (f64::from(lp) - exact).abs() < 1e-4
                );
            }
        }
    }
}
