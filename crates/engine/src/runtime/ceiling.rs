//! The runtime's own ceiling: N sequences decoded in lockstep straight on the
//! runtime adapter (greedy argmax, no scheduler, no sampler chain, no HTTP).
//! What Steward's step loop and transport are measured against.

use std::time::Instant;

use crate::runtime::backend::Backend as _;
use crate::runtime::{LoadedModel, RuntimeParams, StepError};
use crate::sample::sampler::argmax;

#[derive(Debug, Clone, serde::Serialize)]
pub struct CeilingResult {
    pub parallel: usize,
    pub prompt_tokens: usize,
    pub decode_steps: usize,
    /// Aggregate decode tokens/s per repetition, sorted ascending.
    pub decode_tok_s: Vec<f64>,
    /// Prompt tokens/s of the (single-batch) prefill per repetition.
    pub prefill_tok_s: Vec<f64>,
    pub ms_per_step_median: f64,
}

/// A runtime and a fixed prompt of about `tokens` tokens.
fn setup<'m>(
    model: &'m LoadedModel,
    params: &RuntimeParams,
    tokens: usize,
) -> Result<(crate::runtime::Runtime<'m>, Vec<crate::runtime::TokenId>), StepError> {
    let rt = model
        .new_runtime(params)
        .map_err(|e| StepError::Decode(e.to_string()))?;
    let base = "The lighthouse keeper climbed the stairs at dusk and watched the sea. ";
    let mut prompt = model.tokenize(&base.repeat(tokens / 12 + 1), true, false);
    prompt.truncate(tokens);
    Ok((rt, prompt))
}

/// Prefill `parallel` copies of a ~`prompt_tokens` prompt (one sequence per
/// step, in chunks of `chunk` tokens), then decode `steps` tokens for all of
/// them in lockstep.
pub fn run_chunked(
    model: &LoadedModel,
    params: &RuntimeParams,
    parallel: usize,
    prompt_tokens: usize,
    steps: usize,
    reps: usize,
    chunk: usize,
) -> Result<CeilingResult, StepError> {
    let (mut rt, prompt) = setup(model, params, prompt_tokens.max(1))?;
    let mut decode = Vec::new();
    let mut prefill = Vec::new();
    for _ in 0..reps.max(1) {
        let mut next = vec![0i32; parallel];
        let t = Instant::now();
        for (s, n) in next.iter_mut().enumerate() {
            rt.clear_slot(s);
            let mut row = 0;
            for (c, part) in prompt.chunks(chunk.max(1)).enumerate() {
                rt.clear();
                let base = c * chunk.max(1);
                for (i, &tok) in part.iter().enumerate() {
                    let pos = base + i;
                    row = rt.push(tok, pos as u32, s, pos + 1 == prompt.len())?;
                }
                rt.decode()?;
            }
            *n = argmax(rt.logits(row));
        }
        prefill.push((prompt.len() * parallel) as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for k in 0..steps {
            rt.clear();
            for (s, &tok) in next.iter().enumerate() {
                rt.push(tok, (prompt.len() + k) as u32, s, true)?;
            }
            rt.decode()?;
            for (s, n) in next.iter_mut().enumerate() {
                *n = argmax(rt.logits(s));
            }
        }
        decode.push((steps * parallel) as f64 / t.elapsed().as_secs_f64());
    }
    for s in 0..parallel {
        rt.clear_slot(s);
    }
    decode.sort_by(|a, b| a.total_cmp(b));
    prefill.sort_by(|a, b| a.total_cmp(b));
    let med = decode[decode.len() / 2];
    Ok(CeilingResult {
        parallel,
        prompt_tokens: prompt.len(),
        decode_steps: steps,
        ms_per_step_median: 1e3 * parallel as f64 / med,
        decode_tok_s: decode,
        prefill_tok_s: prefill,
    })
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct CopyCost {
    pub prompt_tokens: usize,
    pub ctx_per_seq: u32,
    /// Median time of a one-token step in a fresh slot.
    pub step_ms: f64,
    /// Median time of the same step right after copying a slot holding
    /// the prompt into it (the copy runs inside that step).
    pub step_with_copy_ms: f64,
    /// Median time to recompute the prompt instead (one batch).
    pub recompute_ms: f64,
}

/// What sharing a prefix between two slots costs on this runtime: with
/// per-slot KV streams llama.cpp copies the whole stream.
pub fn copy_cost(
    model: &LoadedModel,
    params: &RuntimeParams,
    prompt_tokens: usize,
    reps: usize,
) -> Result<CopyCost, StepError> {
    let (mut rt, prompt) = setup(model, params, prompt_tokens.max(2))?;
    let n = prompt.len();
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (mut plain, mut copied, mut recompute) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        // Slot 0 holds the prompt (computed in one batch: timed).
        rt.clear_slot(0);
        rt.clear();
        for (i, &t) in prompt.iter().enumerate() {
            rt.push(t, i as u32, 0, i + 1 == n)?;
        }
        let t = Instant::now();
        rt.decode()?;
        recompute.push(t.elapsed().as_secs_f64() * 1e3);
        // A one-token step in an empty slot.
        rt.clear_slot(1);
        rt.clear();
        rt.push(prompt[0], 0, 1, true)?;
        let t = Instant::now();
        rt.decode()?;
        plain.push(t.elapsed().as_secs_f64() * 1e3);
        // The same step after sharing slot 0's prefix into slot 1.
        rt.clear_slot(1);
        rt.copy_slot(0, 1);
        rt.truncate_slot(1, (n - 1) as u32);
        rt.clear();
        rt.push(prompt[n - 1], (n - 1) as u32, 1, true)?;
        let t = Instant::now();
        rt.decode()?;
        copied.push(t.elapsed().as_secs_f64() * 1e3);
    }
    rt.clear_slot(0);
    rt.clear_slot(1);
    Ok(CopyCost {
        prompt_tokens: n,
        ctx_per_seq: params.ctx_per_seq,
        step_ms: median(plain),
        step_with_copy_ms: median(copied),
        recompute_ms: median(recompute),
    })
}
