//! One admitted request inside the execution owner: its slot, token
//! progress, sampler, detokenizer, undelivered text and lifecycle times.
//!
//! Invariants: `computed` counts prompt tokens in the slot's KV cells;
//! `n_past()` is every token in them; `pending` is the sampled token not yet
//! decoded. `outcome` is set at most once; the owner then retires the
//! sequence, which consumes it.

use std::collections::VecDeque;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::admission::kv::Permit;
use crate::deliver::stream::{
    Event, FinishReason, Finished, GenerationError, Timings, TokenLogprob,
};
use crate::owner::inbox::Submission;
use crate::owner::plan::scheduler::{Chunk, SeqView};
use crate::owner::spec::speculate::{Priors, SpecMode, SpecState};
use crate::runtime::backend::Backend;
use crate::runtime::{StepError, TokenId, Vocab};
use crate::sample::detok::StreamDetokenizer;
use crate::sample::sampler::{logprob_of, Sampler};

/// Batch rows a prompt chunk asked logits for.
pub(super) struct ChunkRows {
    /// Row of the chunk's first token, when every token has logits.
    pub all_from: Option<usize>,
    /// Row to sample the first generated token from (the prompt's last).
    pub sample: Option<usize>,
}

/// Per-sequence limits the owner applies.
#[derive(Debug, Clone, Copy)]
pub(super) struct SeqLimits {
    pub ctx_limit: u32,
    pub max_lag_tokens: u32,
}

pub(super) enum Outcome {
    Finished(FinishReason),
    Failed(GenerationError),
}

pub(super) struct Sequence {
    pub key: u64,
    /// The LoRA adapter set it runs under (canonical; empty: the base).
    pub adapters: crate::owner::plan::adapter_sets::AdapterSet,
    pub id: String,
    pub slot: usize,
    pub prompt: Vec<TokenId>,
    /// The prompt's media spans (their rows are embeddings).
    pub media: Vec<crate::request::MediaSpan>,
    computed: usize,
    /// Prompt tokens taken from the prefix cache (not computed here).
    pub reused: usize,
    pending: Option<TokenId>,
    /// Preempted without room to save its state: generated tokens whose
    /// cells are recomputed so far (None: every decoded token's cells are
    /// in the slot). Decoding resumes when the prompt and all of them are.
    replay: Option<usize>,
    generated: u32,
    output: Vec<TokenId>,
    max_tokens: u32,
    ignore_eos: bool,
    logprobs: Option<usize>,
    prompt_lp: Option<Vec<TokenLogprob>>,
    unsent_lp: Vec<TokenLogprob>,
    ctx_limit: u32,
    sampler: Sampler,
    /// Grammar state, and the masked copy of the logits it samples from.
    constraint: Option<crate::prepare::constraint::Constraint>,
    masked: Vec<f32>,
    detok: StreamDetokenizer,
    /// Control tokens emitted as their text (the chat format's markers,
    /// for the server's parser).
    markers: Option<std::sync::Arc<Vec<bool>>>,
    pub outbox: mpsc::Sender<Event>,
    pub note: std::sync::Arc<crate::deliver::stream::CancelNote>,
    pub deadline: Option<Instant>,
    /// Since when decoding has been paused for a lagging reader.
    pub paused_since: Option<Instant>,
    max_lag: u32,
    unsent: String,
    unsent_tokens: u32,
    pub outcome: Option<Outcome>,
    /// Sampled on the device (the runtime argmaxes inside the step): set at
    /// admission when the request is plain greedy and the engine allows it.
    pub device: bool,
    /// KV reservation; released when the sequence is dropped or preempted
    /// (None while parked: `owner/preempt.rs`).
    permit: Option<Permit>,
    /// Whom it runs for and how it ranks; its arrival order.
    pub tenancy: crate::request::Tenancy,
    pub order: u64,
    /// The owner's step count at arrival, and at its first token.
    pub arrival_step: u64,
    pub first_step: Option<u64>,
    pub preemptions: u32,
    /// Admitted outranking everything running: its first step runs alone
    /// (`owner/interrupt.rs`).
    pub urgent: bool,
    /// Its pin (`owner/pins.rs`), and the prompt tokens it newly pinned.
    pub pin: Option<crate::request::Pin>,
    pub pinned: u32,
    arrival: Instant,
    tokenized: Instant,
    admitted: Instant,
    prefill_done: Option<Instant>,
    first_token: Option<Instant>,
    /// Speculative decoding (`owner/spec/speculate.rs`): its state, the drafts
    /// pushed behind the pending token in this step, the prompt and output
    /// so far (the n-gram lookup's history), tokens emitted by the last
    /// step.
    pub spec: Option<SpecState>,
    pub drafts: Vec<TokenId>,
    hist: Vec<TokenId>,
    pub step_emitted: u32,
    /// Its timeline, when someone asked for it (`deliver/timeline.rs`).
    pub trace: Option<crate::deliver::timeline::Trace>,
}

impl Sequence {
    /// `reused`: prompt tokens already in the slot's cells (prefix cache).
    pub fn new(
        key: u64,
        slot: usize,
        sub: Submission,
        limits: SeqLimits,
        permit: Permit,
        reused: usize,
        order: u64,
    ) -> Self {
        let r = sub.req;
        let trace = r
            .timeline
            .map(|s| crate::deliver::timeline::Trace::new(s, &r.id));
        let ctx_limit = limits.ctx_limit;
        let reused = reused.min(r.prompt.len().saturating_sub(1));
        Sequence {
            key,
            adapters: crate::owner::plan::adapter_sets::canonical(&r.adapters),
            id: r.id,
            slot,
            sampler: Sampler::new(r.sampling, &r.prompt),
            constraint: r.constraint,
            masked: Vec::new(),
            detok: StreamDetokenizer::new(r.stop),
            markers: r.markers,
            prompt: r.prompt,
            media: r.media,
            computed: reused,
            reused,
            pending: None,
            replay: None,
            generated: 0,
            output: Vec::new(),
            max_tokens: r.max_tokens,
            ignore_eos: r.ignore_eos,
            logprobs: r.logprobs,
            prompt_lp: r.prompt_logprobs.then(Vec::new),
            unsent_lp: Vec::new(),
            ctx_limit,
            outbox: sub.outbox,
            note: sub.note,
            deadline: r.deadline,
            paused_since: None,
            max_lag: limits.max_lag_tokens.max(1),
            unsent: String::new(),
            unsent_tokens: 0,
            outcome: None,
            device: false,
            permit: Some(permit),
            tenancy: r.tenancy,
            order,
            arrival_step: 0,
            first_step: None,
            preemptions: 0,
            urgent: false,
            pin: r.pin,
            pinned: 0,
            arrival: r.arrival,
            tokenized: r.tokenized,
            admitted: Instant::now(),
            prefill_done: None,
            first_token: None,
            spec: None,
            drafts: Vec::new(),
            hist: Vec::new(),
            step_emitted: 0,
            trace,
        }
    }

    /// Its timeline ends (`outcome` None: cancelled) and goes to its sink.
    pub fn trace_end(&mut self, outcome: Option<&Outcome>) {
        use crate::deliver::timeline::TimelineEnd;
        let Some(mut t) = self.trace.take() else {
            return;
        };
        let l = &mut t.line;
        l.admitted = Some(self.admitted);
        l.prefill_done = self.prefill_done;
        l.first_token = self.first_token;
        l.cancel_noticed = self.note.noticed();
        l.retired = Some(Instant::now());
        l.end = match outcome {
            None | Some(Outcome::Failed(GenerationError::Cancelled)) => TimelineEnd::Cancelled,
            Some(Outcome::Finished(r)) => TimelineEnd::Finished(r.as_str()),
            Some(Outcome::Failed(e)) => TimelineEnd::Failed(e.to_string()),
        };
        l.prompt_tokens = self.prompt.len() as u32;
        l.cached_tokens = self.reused as u32;
        l.completion_tokens = self.generated;
        l.preemptions = self.preemptions;
        t.sink.put(std::mem::take(&mut t.line));
    }

    /// Speculate from now on (admission decides: the memory must be cut
    /// back after a rejected draft), starting from the server's acceptance
    /// for the request's class.
    pub fn speculate(&mut self, mode: SpecMode, max: usize, priors: &Priors) {
        // Drafts never cross media rows (they are no tokens).
        if mode == SpecMode::Off || max == 0 || !self.media.is_empty() {
            return;
        }
        let class = Priors::class(mode, !self.sampler.greedy());
        self.spec = Some(SpecState::new(mode, max, class, priors.prior(class)));
        if mode == SpecMode::Ngram {
            self.hist = self.prompt.clone();
        }
    }

    /// Most tokens this sequence may draft in the next step: its cap, and
    /// room for every drafted token to be emitted (`max_tokens`, context).
    pub fn draft_room(&self) -> usize {
        let Some(s) = &self.spec else { return 0 };
        if !self.is_decoding() || self.lagging() {
            return 0;
        }
        let left = (self.max_tokens - self.generated).min(
            self.ctx_limit
                .saturating_sub(self.prompt.len() as u32 + self.generated),
        );
        s.max.min(left.saturating_sub(1) as usize)
    }

    /// Every token generated so far (the last is the pending one while
    /// decoding).
    pub fn output(&self) -> &[TokenId] {
        &self.output
    }

    /// The prompt and output so far (n-gram speculation only).
    pub fn history(&self) -> &[TokenId] {
        &self.hist
    }

    pub fn view(&self) -> SeqView {
        SeqView {
            key: self.key,
            prompt_len: self.prompt.len() + self.replay.map_or(0, |_| self.decoded()),
            computed: self.computed + self.replay.unwrap_or(0),
            decoding: self.is_decoding() && !self.lagging(),
            // A padded chunk could start inside a media span.
            can_pad: self.prompt_lp.is_none() && self.media.is_empty() && self.replay.is_none(),
            span: self
                .media
                .iter()
                .find(|m| m.start + m.len > self.computed)
                .map(|m| (m.start, m.len)),
        }
    }

    /// No prompt scoring (it would want every prompt row in its chunks).
    pub fn prompt_logprobs_off(&self) -> bool {
        self.prompt_lp.is_none()
    }

    /// Undelivered tokens reached the lag bound: decoding pauses.
    pub fn lagging(&self) -> bool {
        self.unsent_tokens >= self.max_lag
    }

    pub fn lag_tokens(&self) -> u32 {
        self.unsent_tokens
    }

    pub fn cancel_state(&self) -> crate::deliver::stats::CancelState {
        if self.pending.is_some() {
            crate::deliver::stats::CancelState::Decoding
        } else {
            crate::deliver::stats::CancelState::Prefilling
        }
    }

    pub fn live(&self) -> crate::deliver::stats::LiveRequest {
        crate::deliver::stats::LiveRequest {
            id: self.id.clone(),
            state: if self.paused_since.is_some() {
                "paused"
            } else if self.pending.is_some() {
                "decoding"
            } else {
                "prefilling"
            },
            prompt_tokens: self.prompt.len(),
            prompt_computed: self.computed,
            generated: self.generated,
            age_ms: self.arrival.elapsed().as_secs_f64() * 1e3,
        }
    }

    pub fn arrival(&self) -> Instant {
        self.arrival
    }

    #[cfg(test)]
    pub fn generated(&self) -> u32 {
        self.generated
    }

    pub fn is_decoding(&self) -> bool {
        self.pending.is_some() && self.replay.is_none()
    }

    /// Preempted with no room for its state: every cell is computed again
    /// (the prompt by chunks, then the tokens it generated), and decoding
    /// resumes from the pending token. Returns the cells to recompute.
    pub fn recompute(&mut self) -> usize {
        let cells = self.kv_len();
        self.computed = 0;
        if self.pending.is_some() {
            self.replay = Some(0);
        }
        cells
    }

    /// The token at cell position `i` (the prompt, then the output).
    pub fn token_at(&self, i: usize) -> TokenId {
        match i.checked_sub(self.prompt.len()) {
            None => self.prompt[i],
            Some(j) => self.output[j],
        }
    }

    /// Tokens stored in the slot's KV cells.
    pub fn n_past(&self) -> u32 {
        self.computed as u32 + self.generated.saturating_sub(1)
    }

    /// The sampled token the next decode step feeds back.
    pub fn pending(&self) -> Option<TokenId> {
        self.pending
    }

    /// Prompt tokens (and replayed cells) still to compute.
    pub fn prompt_left(&self) -> usize {
        self.prompt.len() - self.computed
            + self.replay.map_or(0, |r| self.decoded().saturating_sub(r))
    }

    /// The prompt tokens in the slot's KV cells.
    pub fn computed_prompt(&self) -> &[TokenId] {
        &self.prompt[..self.computed]
    }

    /// Generated tokens whose cells are computed (the last sampled one is
    /// not fed back yet).
    fn decoded(&self) -> usize {
        (self.generated.saturating_sub(1) as usize).min(self.output.len())
    }

    /// Cells in the slot, positions 0.. (what the prefix cache keeps when
    /// the sequence ends).
    pub fn kv_len(&self) -> usize {
        self.computed + self.replay.unwrap_or_else(|| self.decoded())
    }

    /// Every token in the slot's KV cells.
    pub fn kv_tokens(&self) -> Vec<TokenId> {
        (0..self.kv_len()).map(|i| self.token_at(i)).collect()
    }

    fn consume(&mut self, n: u64) {
        if let Some(p) = self.permit.as_mut() {
            p.consume(n);
        }
    }

    fn unconsume(&mut self, n: u64) {
        if let Some(p) = self.permit.as_mut() {
            p.unconsume(n);
        }
    }

    /// Preempted: the reservation is released; returns what it still held.
    pub fn release_permit(&mut self) -> u64 {
        self.permit.take().map_or(0, |p| p.reserved())
    }

    /// Resumed in `slot` under a new reservation.
    pub fn resume(&mut self, slot: usize, permit: Permit) {
        self.slot = slot;
        self.permit = Some(permit);
    }

    /// Its first token came in this step (`steps`: the owner's count).
    pub fn mark_first(&mut self, steps: u64) {
        if self.first_step.is_none() && self.first_token.is_some() {
            self.first_step = Some(steps);
        }
    }

    /// The speculation mode it runs (a draft model's slot cannot move).
    pub fn spec_mode(&self) -> Option<SpecMode> {
        self.spec.as_ref().map(|s| s.mode)
    }

    pub fn push_decode(&mut self, rt: &mut impl Backend) -> Result<usize, StepError> {
        let Some(tok) = self.pending else {
            return Err(StepError::Batch(
                "decode planned without a pending token".into(),
            ));
        };
        let pos = self.n_past();
        let row = rt.push(tok, pos, self.slot, true)?;
        for (i, &d) in self.drafts.iter().enumerate() {
            rt.push(d, pos + 1 + i as u32, self.slot, true)?;
        }
        self.consume(1 + self.drafts.len() as u64);
        Ok(row)
    }

    /// Push a prompt chunk; says which rows will carry logits.
    pub fn push_chunk(&mut self, rt: &mut impl Backend, c: &Chunk) -> Result<ChunkRows, StepError> {
        if c.start < self.kv_len() {
            // A padded tail (`scheduler::pad_tails`): recompute these cells.
            rt.truncate_slot(self.slot, c.start as u32);
        }
        let view = self.view();
        let last = c.completes(view.prompt_len);
        let all = self.prompt_lp.is_some();
        let mut rows = ChunkRows {
            all_from: None,
            sample: None,
        };
        if let Some(m) = self.media.iter().find(|m| m.start == c.start) {
            // The planner gives a span a chunk of its own, whole; prepare
            // keeps text after the last one (the sampled row is text).
            if c.len != m.len || last || all {
                return Err(StepError::Batch(format!(
                    "a media span of {} rows was planned as a chunk of {}",
                    m.len, c.len
                )));
            }
            let pos = c.start as u32;
            rt.push_span(m.embd.clone(), m.len, pos, self.slot, m.non_causal)?;
            return Ok(rows);
        }
        for i in c.start..c.start + c.len {
            let is_last = last && i + 1 == c.start + c.len;
            let idx = rt.push(self.token_at(i), i as u32, self.slot, all || is_last)?;
            if all && i == c.start {
                rows.all_from = Some(idx);
            }
            // (A replay ends with its pending token already sampled.)
            if is_last && self.max_tokens > 0 && self.pending.is_none() {
                rows.sample = Some(idx);
            }
        }
        Ok(rows)
    }

    /// Score the prompt tokens a chunk's logits predict (prompt scoring).
    pub fn score_chunk(&mut self, rt: &impl Backend, c: &Chunk, first_row: usize) {
        let top = self.logprobs.unwrap_or(0);
        let Some(out) = self.prompt_lp.as_mut() else {
            return;
        };
        for i in 0..c.len {
            let target = c.start + i + 1;
            if let Some(&tok) = self.prompt.get(target) {
                out.push(logprob_of(rt.logits(first_row + i), tok, top));
            }
        }
    }

    /// The step that carried this sequence failed: its decode token was not
    /// computed, and a padded chunk's recomputed cells (dropped before the
    /// push) must be computed again. Reservations go back accordingly.
    pub fn undo_step(&mut self, chunk_start: Option<usize>, decoded: bool) {
        if decoded {
            self.unconsume(1 + self.drafts.len() as u64);
        }
        self.drafts.clear();
        if let Some(start) = chunk_start.filter(|&s| s < self.kv_len()) {
            self.unconsume((self.kv_len() - start) as u64);
            self.computed = start.min(self.prompt.len());
            // A chunk of a sequence with a sampled token was a replay.
            if self.pending.is_some() {
                self.replay = Some(start - self.computed);
            }
        }
    }

    pub fn chunk_done(&mut self, c: &Chunk) {
        // Only cells new to the slot move from reserved to used (a padded
        // tail recomputes some it already had).
        let end = c.start + c.len;
        let new = end.saturating_sub(self.kv_len());
        self.consume(new as u64);
        if let Some(r) = self.replay.as_mut() {
            self.computed = end.min(self.prompt.len());
            *r = end - self.computed;
            if *r == self.decoded() {
                self.replay = None;
            }
            return;
        }
        self.computed = end;
        if self.computed == self.prompt.len() {
            self.prefill_done = Some(Instant::now());
            if self.max_tokens == 0 {
                // Prompt scoring only: nothing to generate.
                self.outcome = Some(Outcome::Finished(FinishReason::Length));
            }
        }
    }

    /// After a step that produced logits for this sequence: pick the next
    /// token, detokenize, check the ends, queue text.
    pub fn sample_and_emit(&mut self, logits: &[f32], vocab: &Vocab) {
        let mut banned = self.banned(vocab);
        let logits = match self.constraint.as_mut() {
            Some(c) => {
                if let Err(e) = c.mask(logits, &mut self.masked) {
                    self.fail_constraint(e);
                    return;
                }
                // The grammar decides where the output may end.
                banned = &[];
                &self.masked[..]
            }
            None => logits,
        };
        // NaN or -inf everywhere (a broken row, or every token masked): no
        // token can be chosen. This request fails; the others in the step
        // are unaffected.
        let Some(tok) = self.sampler.sample(logits, banned) else {
            self.fail_runtime("the model produced no finite logits for this request");
            return;
        };
        if let Some(top) = self.logprobs {
            self.unsent_lp.push(logprob_of(logits, tok, top));
        }
        self.emit(tok, vocab);
    }

    /// A request the device can sample: plain greedy, with nothing that
    /// needs the logits on the host (penalties, biases, banned tokens,
    /// logprobs, a grammar, prompt scoring).
    pub fn device_eligible(&self) -> bool {
        self.sampler.plain_greedy()
            && self.logprobs.is_none()
            && self.prompt_lp.is_none()
            && self.constraint.is_none()
    }

    /// Tokens the sampler must never pick (end of generation under
    /// `ignore_eos`).
    pub fn banned<'a>(&self, vocab: &'a Vocab) -> &'a [TokenId] {
        if self.ignore_eos {
            &vocab.eog_ids
        } else {
            &[]
        }
    }

    pub fn fail_runtime(&mut self, msg: &str) {
        self.pending = None;
        self.outcome = Some(Outcome::Failed(GenerationError::Runtime(msg.into())));
    }

    /// Take the chosen token: advance the grammar, detokenize, check the
    /// ends, queue text.
    pub fn emit(&mut self, tok: TokenId, vocab: &Vocab) {
        self.sampler.accept(tok);
        if let Some(c) = self.constraint.as_mut() {
            if let Err(e) = c.accept(tok) {
                self.fail_constraint(e);
                return;
            }
        }
        self.generated += 1;
        self.step_emitted += 1;
        self.output.push(tok);
        if self
            .spec
            .as_ref()
            .is_some_and(|s| s.mode == SpecMode::Ngram)
        {
            self.hist.push(tok);
        }
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
        if vocab.is_eog(tok) {
            self.pending = None;
            self.outcome = Some(Outcome::Finished(FinishReason::Stop));
            return;
        }
        let marker = self
            .markers
            .as_ref()
            .is_some_and(|m| m.get(tok as usize) == Some(&true));
        let out = self.detok.push(if marker {
            vocab.special_text(tok)
        } else {
            vocab.bytes(tok)
        });
        self.unsent.push_str(&out.text);
        self.unsent_tokens += 1;
        let complete = self.constraint.as_ref().is_some_and(|c| c.is_complete());
        if out.stopped || complete {
            self.pending = None;
            self.outcome = Some(Outcome::Finished(FinishReason::Stop));
            return;
        }
        let room = self.prompt.len() as u32 + self.generated < self.ctx_limit;
        if self.generated >= self.max_tokens || !room {
            self.pending = None;
            self.outcome = Some(Outcome::Finished(FinishReason::Length));
            return;
        }
        self.pending = Some(tok);
        self.flush_text();
    }

    /// Whether draft `i` of this step was drawn (so row `i + 1`'s logits
    /// follow the tokens emitted) and the sequence goes on.
    pub fn draft_holds(&self, i: usize) -> bool {
        self.outcome.is_none()
            && self.pending.is_some()
            && self.pending == self.drafts.get(i).copied()
    }

    /// After a speculative step's rows are drawn: the acceptance estimate
    /// learns the run, and the cells of rejected drafts go back to the
    /// reservation. Returns the cells the slot must keep (`kv_len`), where
    /// drafts were pushed.
    pub fn end_verify(&mut self) -> Option<usize> {
        if self.drafts.is_empty() {
            return None;
        }
        let k = self.drafts.len();
        // Emitted tokens = accepted drafts + the one drawn after them.
        let accepted = (self.step_emitted as usize).saturating_sub(1).min(k);
        if let Some(s) = self.spec.as_mut() {
            s.observe(k, accepted);
        }
        // Cells pushed: the pending token and k drafts; kept: the pending
        // token and the accepted drafts.
        let pushed = 1 + k as u64;
        let kept = (self.step_emitted as u64).min(pushed);
        self.unconsume(pushed - kept);
        self.drafts.clear();
        Some(self.kv_len())
    }

    /// Tokens drafted and accepted over the request.
    pub fn spec_counts(&self) -> (u64, u64) {
        self.spec
            .as_ref()
            .map_or((0, 0), |s| (s.drafted, s.accepted))
    }

    fn fail_constraint(&mut self, e: String) {
        self.pending = None;
        self.outcome = Some(Outcome::Failed(GenerationError::Constraint(e)));
    }

    /// Owner-thread time this request's grammar has cost, and its tokens.
    pub fn constraint_cost(&self) -> Option<(u64, u64)> {
        self.constraint.as_ref().map(|c| (c.host_ns, c.steps))
    }

    /// Send coalesced text if the outbox has room; otherwise keep it (the
    /// lag bound then pauses this sequence's decoding).
    pub fn flush_text(&mut self) {
        self.try_flush();
        if self.lagging() {
            self.paused_since.get_or_insert_with(Instant::now);
        } else {
            self.paused_since = None;
        }
    }

    fn try_flush(&mut self) {
        if self.unsent.is_empty() && self.unsent_lp.is_empty() {
            // Tokens with no text of their own (control tokens, text the
            // detokenizer holds back as a possible stop-string prefix) have
            // nothing to deliver: they are not a reader's lag.
            self.unsent_tokens = 0;
            return;
        }
        let ev = Event::Text {
            text: std::mem::take(&mut self.unsent),
            tokens: std::mem::take(&mut self.unsent_tokens),
            logprobs: std::mem::take(&mut self.unsent_lp),
        };
        if let Err(mpsc::error::TrySendError::Full(Event::Text {
            text,
            tokens,
            logprobs,
        })) = self.outbox.try_send(ev)
        {
            self.unsent = text;
            self.unsent_tokens = tokens;
            self.unsent_lp = logprobs;
        }
    }

    /// The events that end this request: remaining text, then exactly one
    /// `Done` or `Error`.
    pub fn terminal_events(&mut self, outcome: Outcome) -> VecDeque<Event> {
        let mut events = VecDeque::new();
        let reason = match outcome {
            Outcome::Failed(e) => {
                events.push_back(Event::Error(e));
                return events;
            }
            Outcome::Finished(r) => r,
        };
        let tail = self.detok.finish();
        self.unsent.push_str(&tail.text);
        if !self.unsent.is_empty() || !self.unsent_lp.is_empty() {
            events.push_back(Event::Text {
                text: std::mem::take(&mut self.unsent),
                tokens: std::mem::take(&mut self.unsent_tokens),
                logprobs: std::mem::take(&mut self.unsent_lp),
            });
        }
        let ms = |t: Option<Instant>| {
            t.map(|t| t.duration_since(self.arrival).as_secs_f64() * 1e3)
                .unwrap_or(0.0)
        };
        events.push_back(Event::Done(Finished {
            reason,
            stop_sequence: self.detok.matched().map(str::to_string),
            prompt_tokens: self.prompt.len() as u32,
            cached_tokens: self.reused as u32,
            pinned_tokens: self.pinned,
            completion_tokens: self.generated,
            output_tokens: std::mem::take(&mut self.output),
            prompt_logprobs: self.prompt_lp.take(),
            device_sampled: self.device,
            wait_steps: self
                .first_step
                .map_or(0, |f| f.saturating_sub(self.arrival_step)),
            preemptions: self.preemptions,
            draft_tokens: self.spec_counts().0,
            draft_accepted: self.spec_counts().1,
            constraint_ms: self
                .constraint
                .as_ref()
                .map_or(0.0, |c| c.host_ns as f64 / 1e6),
            timings: Timings {
                tokenized_ms: ms(Some(self.tokenized)),
                admitted_ms: ms(Some(self.admitted)),
                prefill_done_ms: ms(self.prefill_done),
                first_token_ms: ms(self.first_token),
                retired_ms: ms(Some(Instant::now())),
            },
        }));
        events
    }
}
