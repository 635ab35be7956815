//! Speculative decoding through the real runtime (the default model,
//! SmolLM2-135M-Instruct Q4_1): n-gram drafts and a draft model (a
//! random-weight tiny Llama with the default model's tokenizer, written by
//! `scripts/gen-random-gguf.py chat`; scripts/test.sh makes it) never change
//! greedy output, sampled output keeps its distribution (a chi-square
//! homogeneity test, and identity per seed), and a draft model whose
//! vocabulary or memory does not fit is refused at start.
//!
//! Draft sizes come from a fixed step-time line the tests set
//! (`spec_cost_line`), not from measured step times: the same drafts on
//! any machine under any load. Outputs are compared through
//! `steward_engine::compare` (verification steps have other shapes).

use crate::common;

use std::path::PathBuf;

use steward_engine::compare::{self, TIE_NATS};
use steward_engine::{
    Engine, EngineConfig, EngineHandle, Finished, GenerateRequest, SamplingParams, SpecMode,
    SpecRequest, TokenId,
};

fn draft_gguf() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/arch-ggufs/draft-smollm2.gguf");
    common::fixture(p, "scripts/test-fixtures.sh")
}

fn config(draft: Option<PathBuf>) -> EngineConfig {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.admit.max_seqs = 16;
    c.admit.ctx_per_seq = 512;
    c.step.prompt_budget = 256;
    c.step.max_prefill_seqs = 16;
    c.model.draft_model = draft;
    // Rows nearly free beside a step's fixed cost: every draft with a fair
    // chance of acceptance pays, whatever the machine measures.
    c.step.spec_cost_line = Some((10.0, 0.1));
    c
}

async fn engine(draft: Option<PathBuf>) -> EngineHandle {
    common::start(config(draft)).await
}

fn request(
    prompt: Vec<TokenId>,
    max_tokens: u32,
    sampling: SamplingParams,
    mode: SpecMode,
) -> GenerateRequest {
    GenerateRequest {
        sampling,
        ignore_eos: true,
        speculative: Some(SpecRequest {
            mode: Some(mode),
            max_draft: Some(6),
        }),
        ..GenerateRequest::new("spec", prompt, max_tokens)
    }
}

async fn chat(h: &EngineHandle, text: &str) -> Vec<TokenId> {
    h.preparer()
        .chat(steward_engine::chat::ChatPrompt::new(vec![
            serde_json::json!({"role": "user", "content": text}),
        ]))
        .await
        .unwrap()
        .tokens
}

/// Every request at once (one continuous batch), greedy with logprobs:
/// each one's tokens and top-2 rows.
async fn all_scored(h: &EngineHandle, reqs: Vec<GenerateRequest>) -> Vec<compare::Scored<TokenId>> {
    let streams: Vec<_> = reqs
        .into_iter()
        .map(|mut r| {
            r.logprobs = Some(2);
            h.submit(r).unwrap()
        })
        .collect();
    let mut out = Vec::new();
    for s in streams {
        out.push(compare::collect_scored(s).await.unwrap().1);
    }
    out
}

/// Every request at once (one continuous batch); each one's `Finished`.
async fn all(h: &EngineHandle, reqs: Vec<GenerateRequest>) -> Vec<Finished> {
    let streams: Vec<_> = reqs.into_iter().map(|r| h.submit(r).unwrap()).collect();
    let mut out = Vec::new();
    for s in streams {
        out.push(s.collect().await.unwrap().1);
    }
    out
}

const GROUNDED: [&str; 4] = [
    "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog near the river bank.",
    "Copy this list: apples, pears, plums, apples, pears, plums, apples, pears, plums.",
    "Rewrite in capitals: the meeting starts at nine and the meeting ends at ten.",
    "Repeat the code: for i in range(10): print(i); for i in range(10): print(i)",
];

fn greedy() -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_output_is_identical_with_ngram_and_draft_model() {
    let Some(draft) = draft_gguf() else { return };
    let h = engine(Some(draft)).await;
    let mut prompts = Vec::new();
    for p in GROUNDED {
        prompts.push(chat(&h, p).await);
    }
    let run = |mode| {
        let reqs = prompts
            .iter()
            .map(|p| request(p.clone(), 32, greedy(), mode))
            .collect();
        all(&h, reqs)
    };
    let plain = all_scored(
        &h,
        prompts
            .iter()
            .map(|p| request(p.clone(), 32, greedy(), SpecMode::Off))
            .collect(),
    )
    .await;
    let drafted_before = h.stats().spec_draft_tokens_total;
    let ngram = run(SpecMode::Ngram).await;
    let model = run(SpecMode::Draft).await;
    assert!(drafted_before == 0, "speculation off drafted");
    for i in 0..prompts.len() {
        assert_eq!(plain[i].tokens.len(), 32);
        compare::assert_greedy_agree(
            &ngram[i].output_tokens,
            &plain[i],
            TIE_NATS,
            &format!("prompt {i}, n-gram speculation"),
        );
        compare::assert_greedy_agree(
            &model[i].output_tokens,
            &plain[i],
            TIE_NATS,
            &format!("prompt {i}, draft-model speculation"),
        );
    }
    let accepted: u64 = ngram.iter().map(|f| f.draft_accepted).sum();
    let drafted: u64 = ngram.iter().map(|f| f.draft_tokens).sum();
    assert!(
        accepted > 0 && drafted >= accepted,
        "input-grounded prompts: n-gram drafts accepted ({accepted} of {drafted})"
    );
    assert!(
        model.iter().map(|f| f.draft_tokens).sum::<u64>() > 0,
        "the draft model drafted"
    );
    let st = h.stats();
    assert!(st.draft_steps_total > 0, "draft-model steps counted");
    assert!(st.spec_accepted_tokens_total >= accepted);
}

/// The chi-square statistic's critical value at p = 1e-7 (Wilson–Hilferty):
/// over the test's 6 positions a false failure below 1e-6.
fn chi2_critical(df: usize) -> f64 {
    let k = df as f64;
    let z = 5.199;
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

/// Two samples of one categorical variable: the homogeneity statistic and
/// its degrees of freedom (categories under 10 in all are pooled).
fn homogeneity(a: &[TokenId], b: &[TokenId]) -> (f64, usize) {
    use std::collections::BTreeMap;
    let mut n: BTreeMap<TokenId, (f64, f64)> = BTreeMap::new();
    for &t in a {
        n.entry(t).or_default().0 += 1.0;
    }
    for &t in b {
        n.entry(t).or_default().1 += 1.0;
    }
    let mut cats: Vec<(f64, f64)> = Vec::new();
    let mut rest = (0.0, 0.0);
    for (_, (x, y)) in n {
        if x + y >= 10.0 {
            cats.push((x, y));
        } else {
            rest = (rest.0 + x, rest.1 + y);
        }
    }
    if rest.0 + rest.1 > 0.0 {
        cats.push(rest);
    }
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let total = na + nb;
    let mut chi = 0.0;
    for &(x, y) in &cats {
        let col = x + y;
        let (ea, eb) = (col * na / total, col * nb / total);
        chi += (x - ea).powi(2) / ea + (y - eb).powi(2) / eb;
    }
    (chi, cats.len().saturating_sub(1))
}

/// Temperature 1 on a prompt whose continuation the n-gram drafter can
/// guess: drafts are accepted often and rejected often. The tokens at each
/// position, over many seeds, are distributed alike with and without
/// speculation (disjoint seeds, so the arms are independent samples), and
/// the same seed gives the same tokens (the verification draws the
/// request's own random numbers in the same order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_output_keeps_its_distribution() {
    let h = engine(None).await;
    let prompt = h
        .preparer()
        .text("one two three four, one two three four, one two three four, one two three".into())
        .await
        .unwrap();
    const N: u64 = 160;
    const LEN: usize = 6;
    let sampled = |seed| SamplingParams {
        seed,
        ..Default::default()
    };
    // One request at a time: on a busy batch of sampled requests the
    // engine rightly drafts nothing (their drafts are seldom accepted, and
    // a CPU row costs about a decode row); one stream drafts, at least the
    // explore drafts of each new request.
    let arm = |mode, seeds: std::ops::Range<u64>| {
        let (h, prompt) = (&h, &prompt);
        async move {
            let mut out = Vec::new();
            for s in seeds {
                let r = request(prompt.clone(), LEN as u32, sampled(s), mode);
                out.extend(all(h, vec![r]).await);
            }
            out
        }
    };
    // The reference arm drafts nothing: it runs as one batch (the same
    // distribution; its shapes only move a draw on a border, which the
    // seeded comparison below allows for).
    let plain = all(
        &h,
        (0..N)
            .map(|s| request(prompt.clone(), LEN as u32, sampled(s), SpecMode::Off))
            .collect(),
    )
    .await;
    let spec = arm(SpecMode::Ngram, 10_000..10_000 + N).await;
    let drafted: u64 = spec.iter().map(|f| f.draft_tokens).sum();
    let accepted: u64 = spec.iter().map(|f| f.draft_accepted).sum();
    assert!(
        accepted > 0 && accepted < drafted,
        "drafts both accepted and rejected: {accepted} of {drafted}"
    );
    for pos in 0..LEN {
        let col =
            |v: &[Finished]| -> Vec<TokenId> { v.iter().map(|f| f.output_tokens[pos]).collect() };
        let (chi, df) = homogeneity(&col(&plain), &col(&spec));
        if df == 0 {
            continue;
        }
        let crit = chi2_critical(df);
        assert!(
            chi < crit,
            "position {pos}: chi-square {chi:.1} >= {crit:.1} (df {df}): speculation shifted the distribution"
        );
    }
    // Same seeds: the same tokens, but for a draw on a border (the
    // verification steps have other shapes): at most 5 of 24 may part,
    // a false failure below 1e-6 at a 1e-2 parting chance each.
    let again = arm(SpecMode::Ngram, 0..24).await;
    assert!(compare::seeded_false_failure(24, 5, 1e-2) < 1e-6);
    let pairs: Vec<(&[TokenId], &[TokenId])> = again
        .iter()
        .zip(&plain)
        .map(|(a, p)| (a.output_tokens.as_slice(), p.output_tokens.as_slice()))
        .collect();
    compare::assert_seeded_agree(&pairs, 5, "seeded, n-gram vs off");
    assert!(again.iter().any(|f| f.draft_accepted > 0));
}

/// The homogeneity test rejects two samples that differ (it can fail).
#[test]
fn homogeneity_test_detects_a_shift() {
    let a: Vec<TokenId> = (0..160).map(|i| (i % 4) as TokenId).collect();
    let b: Vec<TokenId> = (0..160).map(|i| if i % 3 == 0 { 0 } else { 1 }).collect();
    let (chi, df) = homogeneity(&a, &b);
    assert!(chi > chi2_critical(df), "{chi} df {df}");
    let (same, df) = homogeneity(&a, &a);
    assert!(same < chi2_critical(df));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draft_model_that_does_not_fit_is_refused_at_start() {
    // Gemma 3 270M: another vocabulary.
    let gemma = steward_engine::fetch::ensure_known_model("gemma3-270m").expect("Gemma 3 270M");
    let e = Engine::start(config(Some(gemma))).err().expect("refused");
    assert!(e.to_string().contains("vocabulary"), "{e}");
    // The default model's tokenizer, but sliding-window memory.
    let swa = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/arch-ggufs/gemma3.gguf");
    let Some(swa) = common::fixture(swa, "scripts/test-fixtures.sh") else {
        return;
    };
    let e = Engine::start(config(Some(swa))).err().expect("refused");
    assert!(e.to_string().contains("full-attention"), "{e}");
}
