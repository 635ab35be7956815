//! The owner's side of speculative decoding (the rules are pure, in
//! `speculate.rs`): before a step, each decoder's drafts (how many the step
//! can afford, `speculate::allot`); after it, the verification's end: the
//! acceptance learned, rejected drafts' cells cut from the slot and returned
//! to the reservation, the counters.

use crate::owner::plan::scheduler::Plan;
use crate::owner::spec::speculate::{self, SpecMode};
use crate::owner::Owner;
use crate::runtime::backend::Backend;
use crate::runtime::MemoryKind;

impl<B: Backend> Owner<B> {
    /// The mode and cap a new sequence speculates with: the request's, or
    /// the engine's default. Only where a slot's memory can be cut back to
    /// any length (full attention), and a draft model only where one is
    /// loaded.
    pub(super) fn spec_for(&self, req: Option<crate::request::SpecRequest>) -> (SpecMode, usize) {
        let r = req.unwrap_or_default();
        let mode = r.mode.unwrap_or(self.config.step.speculative);
        let max = r
            .max_draft
            .unwrap_or(self.config.step.draft_max)
            .min(crate::request::MAX_DRAFT);
        let ok = match mode {
            SpecMode::Off => false,
            SpecMode::Ngram => true,
            SpecMode::Draft => self.spec.drafter.is_some(),
        };
        if ok && self.kv.memory.kind == MemoryKind::Attention {
            (mode, max)
        } else {
            (SpecMode::Off, 0)
        }
    }

    /// This step's drafts, behind each planned decoder's pending token.
    pub(super) fn plan_drafts(&mut self, plan: &Plan) {
        let mut idx = Vec::new();
        let mut cands = Vec::new();
        let mut unseen = Vec::new();
        // A step that carries a prompt chunk is already sized to the step
        // target (the chunk's budget): drafts there would run past it and
        // stall every decoder.
        let carries_prompt = !plan.chunks.is_empty();
        for (i, s) in self.seqs.iter_mut().enumerate() {
            s.drafts.clear();
            s.step_emitted = 0;
            if carries_prompt {
                continue;
            }
            // Suspects of a failed step run plainly until it is understood.
            if !self.suspects.is_empty() || !plan.decode.contains(&s.key) {
                continue;
            }
            let cap = s.draft_room();
            let Some(st) = s.spec.as_ref().filter(|_| cap > 0) else {
                continue;
            };
            let (mode, acc, fresh) = (st.mode, st.acceptance(), st.drafted == 0);
            let avail = match mode {
                SpecMode::Ngram => {
                    let mut d = std::mem::take(&mut s.drafts);
                    speculate::ngram_draft(s.history(), cap, &mut d);
                    let n = d.len();
                    s.drafts = d;
                    n
                }
                SpecMode::Draft => cap,
                SpecMode::Off => 0,
            };
            if avail > 0 {
                idx.push(i);
                cands.push((avail, acc));
                unseen.push(fresh);
            }
        }
        if idx.is_empty() {
            return;
        }
        // Drafts are weighed against the decoders' own step (a prompt chunk
        // riding in it is work of its own, not time the drafts may spend).
        let room = self.n_batch.saturating_sub(plan.n_tokens());
        let dec = plan.decode.len();
        let fit = self
            .config
            .step
            .spec_cost_line
            .or_else(|| self.spec.fit.line());
        let mut take = speculate::allot(&cands, dec, dec, room, fit);
        speculate::explore(&mut take, &cands, &unseen, room, (dec, dec, fit));
        let mut by_model = Vec::new();
        for (&i, &k) in idx.iter().zip(&take) {
            let s = &mut self.seqs[i];
            match s.spec.as_ref().map(|st| st.mode) {
                Some(SpecMode::Draft) if k > 0 => by_model.push((i, k)),
                _ => s.drafts.truncate(k),
            }
        }
        if !by_model.is_empty() {
            self.model_drafts(&by_model);
        }
    }

    /// Drafts from the draft model (`--draft-model`) for `(seq, k)`.
    fn model_drafts(&mut self, want: &[(usize, usize)]) {
        let Some(d) = self.spec.drafter.as_mut() else {
            return;
        };
        let jobs: Vec<crate::owner::spec::drafter::Job<'_>> = want
            .iter()
            .map(|&(i, k)| {
                let s = &self.seqs[i];
                crate::owner::spec::drafter::Job {
                    slot: s.slot,
                    key: s.key,
                    prompt: &s.prompt,
                    output: s.output(),
                    k,
                }
            })
            .collect();
        let out = d.draft(&jobs);
        for (&(i, k), mut drafts) in want.iter().zip(out) {
            drafts.truncate(k);
            self.seqs[i].drafts = drafts;
        }
    }

    /// After the step's rows are drawn: learn each speculating sequence's
    /// acceptance, cut its rejected drafts' cells (runtime, cell map, draft
    /// model), count.
    pub(super) fn end_drafts(&mut self) {
        let mut cuts = Vec::new();
        let (mut drafted, mut accepted) = (0u64, 0u64);
        for s in &mut self.seqs {
            let k = s.drafts.len() as u64;
            let before = s.spec_counts().1;
            if let Some(keep) = s.end_verify() {
                let got = s.spec_counts().1 - before;
                drafted += k;
                accepted += got;
                cuts.push((s.slot, keep));
                if let Some(st) = s.spec.as_ref() {
                    self.spec.priors.observe(st.class, k as usize, got as usize);
                }
            }
        }
        let n = cuts.len() as u64;
        for (slot, keep) in cuts {
            self.kv_truncate(slot, keep);
            if let Some(d) = self.spec.drafter.as_mut() {
                d.truncate(slot, keep);
            }
        }
        let model = self
            .spec
            .drafter
            .as_ref()
            .map(|d| (d.cells() as u64, d.steps, d.ms));
        if drafted > 0 {
            self.stats.send_modify(|s| {
                if let Some((cells, steps, ms)) = model {
                    s.draft_kv_cells = cells;
                    s.draft_steps_total = steps;
                    s.draft_ms_total = ms;
                }
                s.spec_draft_tokens_total += drafted;
                s.spec_accepted_tokens_total += accepted;
                s.spec_drafts_total += n;
            });
        }
    }
}
