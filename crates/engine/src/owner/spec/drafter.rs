//! The draft model (`--draft-model`): a second, small runtime on the owner
//! thread with the target's slots, vocabulary and context size. Before a
//! step it drafts greedily for the sequences `speculate::allot` chose: it
//! catches each slot's draft cells up with the target's tokens (whole
//! prompts the first time, chunked to its batch), then decodes one token
//! per round for every sequence still drafting. After verification its
//! cells are cut back with the target's (`truncate`).
//!
//! Its state lives in the slot: draft cells of slot `s` belong to the
//! sequence in target slot `s`; a new sequence in a slot keeps the draft
//! cells of the prefix it shares with the last one (as the target's prefix
//! cache does).

use crate::runtime::backend::Backend;
use crate::runtime::TokenId;
use crate::sample::sampler::argmax;

/// One sequence to draft for: its target slot and key, every token the
/// target holds or feeds next (prompt, then output: the last is the
/// pending token), and how many tokens to draft.
pub(crate) struct Job<'a> {
    pub slot: usize,
    pub key: u64,
    pub prompt: &'a [TokenId],
    pub output: &'a [TokenId],
    pub k: usize,
}

impl Job<'_> {
    fn len(&self) -> usize {
        self.prompt.len() + self.output.len()
    }
    fn at(&self, i: usize) -> TokenId {
        if i < self.prompt.len() {
            self.prompt[i]
        } else {
            self.output[i - self.prompt.len()]
        }
    }
}

pub(crate) struct Drafter<B: Backend> {
    rt: B,
    n_batch: usize,
    /// Per slot: the sequence its draft cells belong to, and their tokens.
    owner: Vec<Option<u64>>,
    held: Vec<Vec<TokenId>>,
    /// Draft-model steps run and their time (ms), for the stats.
    pub steps: u64,
    pub ms: f64,
}

impl<B: Backend> Drafter<B> {
    pub fn new(rt: B, slots: usize, n_batch: usize) -> Self {
        Drafter {
            rt,
            n_batch: n_batch.max(1),
            owner: vec![None; slots],
            held: vec![Vec::new(); slots],
            steps: 0,
            ms: 0.0,
        }
    }

    /// Up to `k` greedy tokens per job (fewer if the draft model fails: a
    /// draft is only a guess, and the target's step decides).
    pub fn draft(&mut self, jobs: &[Job<'_>]) -> Vec<Vec<TokenId>> {
        let t = std::time::Instant::now();
        let out = self.run(jobs).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "draft model step failed; this step drafts nothing");
            for j in jobs {
                self.forget(j.slot);
            }
            vec![Vec::new(); jobs.len()]
        });
        self.ms += t.elapsed().as_secs_f64() * 1e3;
        out
    }

    fn run(&mut self, jobs: &[Job<'_>]) -> Result<Vec<Vec<TokenId>>, crate::runtime::StepError> {
        // Where each slot's cells stop matching the job's tokens.
        for j in jobs {
            let s = j.slot;
            if self.owner[s] != Some(j.key) {
                let same = (0..self.held[s].len().min(j.len()))
                    .take_while(|&i| self.held[s][i] == j.at(i))
                    .count();
                self.cut(s, same);
                self.owner[s] = Some(j.key);
            } else if self.held[s].len() >= j.len() {
                // (Never: the target's pending token is new.) Recompute it.
                self.cut(s, j.len() - 1);
            }
        }
        // Catch up, chunked to the batch; the last token of each job with
        // logits, whose argmax (read right after its step) is the job's
        // first draft.
        let mut out = vec![Vec::new(); jobs.len()];
        loop {
            self.rt.clear();
            let mut rows = Vec::new();
            let mut used = 0;
            for (i, j) in jobs.iter().enumerate() {
                let s = j.slot;
                while self.held[s].len() < j.len() && used < self.n_batch {
                    let p = self.held[s].len();
                    let last = p + 1 == j.len();
                    let r = self.rt.push(j.at(p), p as u32, s, last)?;
                    self.held[s].push(j.at(p));
                    if last {
                        rows.push((i, r));
                    }
                    used += 1;
                }
            }
            if used == 0 {
                return self.extend(jobs, out);
            }
            self.decode()?;
            for (i, r) in rows {
                out[i].push(argmax(self.rt.logits(r)));
            }
        }
    }

    /// Rounds 2..k: feed each job's last draft, take the argmax.
    fn extend(
        &mut self,
        jobs: &[Job<'_>],
        mut out: Vec<Vec<TokenId>>,
    ) -> Result<Vec<Vec<TokenId>>, crate::runtime::StepError> {
        loop {
            self.rt.clear();
            let mut rows = Vec::new();
            for (i, j) in jobs.iter().enumerate() {
                let Some(&last) = out[i].last() else { continue };
                if out[i].len() >= j.k {
                    continue;
                }
                let s = j.slot;
                let p = self.held[s].len();
                rows.push((i, self.rt.push(last, p as u32, s, true)?));
                self.held[s].push(last);
            }
            if rows.is_empty() {
                return Ok(out);
            }
            self.decode()?;
            for (i, r) in rows {
                out[i].push(argmax(self.rt.logits(r)));
            }
        }
    }

    fn decode(&mut self) -> Result<(), crate::runtime::StepError> {
        self.steps += 1;
        self.rt.decode()
    }

    fn cut(&mut self, slot: usize, len: usize) {
        if len == 0 || !self.rt.truncate_slot(slot, len as u32) {
            self.forget(slot);
        } else {
            self.held[slot].truncate(len);
        }
    }

    fn forget(&mut self, slot: usize) {
        self.rt.clear_slot(slot);
        self.held[slot].clear();
        self.owner[slot] = None;
    }

    /// The target slot keeps its first `len` cells: so do the draft's.
    pub fn truncate(&mut self, slot: usize, len: usize) {
        if self.held[slot].len() > len {
            self.cut(slot, len);
        }
    }

    /// Cells the draft model holds, all slots.
    pub fn cells(&self) -> usize {
        self.held.iter().map(Vec::len).sum()
    }
}
