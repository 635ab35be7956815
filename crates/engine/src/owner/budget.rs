//! The step's prompt budget: the step-time target (and, while decoders
//! run, the inter-token latency target) through the cost model
//! (`owner/plan/cost.rs`), the efficient-chunk rounding, and the TTFT target's
//! expedited prompts (`scheduler::overdue`). Owner-thread only.

use std::time::Instant;

use crate::owner::plan::scheduler;
use crate::owner::start::max_step_prompt;
use crate::owner::Owner;
use crate::runtime::backend::Backend;

impl<B: Backend> Owner<B> {
    /// This step's prompt budget and expedited prompts: the step-time
    /// target sizes the budget by the learned cost of prompt tokens at their
    /// context position; overdue short prompts (TTFT target) are added on
    /// top, twice their tokens so the oldest prompt keeps half, capped so no
    /// step outlasts the TTFT target itself.
    pub(super) fn set_budget(&mut self) {
        let max = max_step_prompt(&self.config);
        if let Some((keys, tokens)) = self.burst() {
            self.limits.expedite = keys;
            self.limits.prompt_budget = tokens;
            self.stats.send_modify(|s| s.burst_steps += 1);
            return;
        }
        let decoders = self
            .seqs
            .iter()
            .filter(|s| s.is_decoding())
            .count()
            .min(self.config.step.max_decode_seqs);
        // Where the next prompt tokens start: the furthest prefilling
        // sequence (the dearest tokens).
        let ctx = self
            .seqs
            .iter()
            .filter(|s| !s.is_decoding() && s.prompt_left() > 0)
            .map(|s| s.computed_prompt().len())
            .max()
            .unwrap_or(0) as f64;
        let configured = self.config.step.prompt_budget;
        // The step-time target, where it applies to this step: always, or
        // only while a long prompt is prefilling (`target_min_prompt`).
        let min_prompt = self.config.step.target_min_prompt;
        let target_step = self.config.step.target_step_ms.filter(|_| {
            min_prompt == 0
                || self.seqs.iter().any(|s| {
                    !s.is_decoding() && s.prompt_left() > 0 && s.prompt.len() >= min_prompt
                })
        });
        // With decoders running, the inter-token latency target binds
        // first (`--itl-target-ms`); without, the step target alone.
        // (Also while a batch line computes: an interactive request
        // arriving waits for that step.)
        let background = self.seqs.iter().any(|s| s.tenancy.background);
        let itl = self
            .config
            .step
            .itl_target_ms
            .filter(|_| decoders > 0 || background);
        let target_step = match (target_step, itl) {
            (Some(t), Some(i)) => Some(t.min(i)),
            (t, i) => t.or(i),
        };
        // A newcomer's step of its own (`owner/interrupt.rs`) carries no
        // decoder, though it holds them up: their target, not their rows.
        let urgent = self.seqs.iter().any(|s| s.urgent && !s.is_decoding());
        let decoders = if urgent { 0 } else { decoders };
        // (A batch line's prompt alone is held to the target as a step
        // with one decoder would be: the cost model prices it.)
        let rhythm = decoders.max(usize::from(background && itl.is_some()));
        let mut base = match target_step {
            Some(target) => self.cost.budget(
                target,
                rhythm,
                self.config.step.min_prompt_budget,
                configured,
                ctx,
            ),
            None => configured,
        };
        // A budget of half an efficient chunk or more buys fewer tokens for
        // more time than the efficient chunk (at ~3,000 tokens of context a
        // 43-token chunk took 395 ms, a 65-token one 265–285: 2.2× per
        // token, docs/BENCHMARKS.md [3/8]): round it up, unless the
        // configured maximum is lower.
        let eff = scheduler::EFFICIENT_CHUNK;
        if base < eff && base * 2 >= eff && configured >= eff {
            base = eff;
        }
        // The TTFT target binds where the short prompts need more than the
        // ITL target leaves them to finish in time (`scheduler::ttft_need`).
        if let (Some(ttft), Some(step)) = (self.config.step.ttft_target_ms, target_step) {
            let now = Instant::now();
            let short: Vec<(usize, f64)> = self
                .seqs
                .iter()
                .filter(|s| !s.is_decoding() && s.prompt_left() > 0)
                .filter(|s| s.prompt.len() <= self.config.step.expedite_max_tokens)
                .map(|s| {
                    let waited = now.saturating_duration_since(s.arrival());
                    (s.prompt_left(), waited.as_secs_f64() * 1e3)
                })
                .collect();
            let need = scheduler::ttft_need(&short, ttft, step);
            base = base.max(need.min(configured));
        }
        self.limits.expedite.clear();
        self.limits.prompt_budget = base;
        let Some(ttft) = self.config.step.ttft_target_ms else {
            return;
        };
        let now = Instant::now();
        let prompts: Vec<(u64, usize, bool)> = self
            .seqs
            .iter()
            .filter(|s| !s.is_decoding())
            .map(|s| {
                let waited = now.saturating_duration_since(s.arrival()).as_secs_f64() * 1e3;
                // Short prompts only: the tail of a long prompt is not short
                // (its tokens cost most, at long context).
                let short = s.prompt.len() <= self.config.step.expedite_max_tokens;
                (s.key, s.prompt_left(), short && waited >= ttft)
            })
            .collect();
        let (keys, tokens) = scheduler::overdue(
            &prompts,
            self.config.step.expedite_max_tokens,
            self.config.step.expedite_max_seqs,
        );
        self.limits.expedite = keys;
        let cap = match target_step {
            Some(_) => self.cost.budget(ttft, decoders, base, max, ctx),
            None => max,
        };
        self.limits.prompt_budget = (base + 2 * tokens).min(cap.max(base));
    }

    /// A burst (the CPU's default; `--no-burst-prefill` turns it off):
    /// more short prompts wait for their first token than sequences decode.
    /// The step then computes them whole, oldest first, up to
    /// `burst_max_tokens` (the runtime's batch has room for them), rather
    /// than chunking them under the few decoders' latency target: prompts
    /// that arrive together get their first tokens together (and, alike in
    /// length, decode together after), where chunks would stagger them so
    /// that every later step carries someone's prompt beside everyone's
    /// decode (docs/BENCHMARKS.md [4/7] once more, guidellm at 16 streams:
    /// inter-token latency p50 160 ms chunked, 93 ms in bursts). Under fcfs
    /// only; not while a batch line or an urgent newcomer's step is on the
    /// engine, nor with a long prompt or media among the prompts (chunks
    /// bound their steps), nor for fewer than two prompts.
    fn burst(&self) -> Option<(Vec<u64>, usize)> {
        // Priorities and fair share decide who gets the step's tokens;
        // a burst takes prompts oldest first: fcfs only.
        if !self.config.step.burst_prefill || self.policy.ranked() {
            return None;
        }
        // One pass, nothing allocated unless it is a burst (every step
        // asks).
        let (mut decoders, mut prompts) = (0, 0);
        for s in &self.seqs {
            if s.tenancy.background || s.urgent {
                return None;
            }
            if s.is_decoding() {
                decoders += 1;
            } else if s.prompt_left() > 0 {
                if s.prompt.len() > self.config.step.expedite_max_tokens || !s.media.is_empty() {
                    return None;
                }
                prompts += 1;
            }
        }
        if prompts < 2 || prompts <= decoders {
            return None;
        }
        let max = self.config.step.burst_max_tokens;
        let (mut keys, mut tokens) = (Vec::new(), 0);
        let waiting = self
            .seqs
            .iter()
            .filter(|s| !s.is_decoding() && s.prompt_left() > 0);
        for s in waiting {
            if tokens + s.prompt_left() > max {
                break;
            }
            tokens += s.prompt_left();
            keys.push(s.key);
        }
        (keys.len() >= 2).then_some((keys, tokens))
    }
}
