//! The execution owner: one named thread that alone touches the llama
//! context, the batch, the slot table, KV state, samplers and detokenizers.
//!
//! The only way in is the bounded inbox (which is also the waiting queue: a
//! request is pulled from it only when a slot is free); the only ways out are
//! the bounded per-request outboxes and the `watch` stats snapshot.
//!
//! Step loop: intake → reap cancelled → plan (pure) → submit and wait →
//! sample/detokenize/emit → retire → publish stats.
//!
//! Invariants: a slot's KV cells are released only after the step that
//! touched them returned (decode is synchronous); every request gets exactly
//! one terminal event (`finish` consumes the sequence); `retire` is the only
//! place a slot is freed.

pub mod sampler;
pub mod scheduler;
mod sequence;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use crate::model::{LoadError, LoadedModel, Runtime, RuntimeParams};
use crate::stream::{Event, GenerationError};
use crate::{Command, EngineConfig, GenerateRequest};
use scheduler::{SeqView, StepLimits};
use sequence::{Outcome, Sequence};

pub(crate) struct Submission {
    pub req: GenerateRequest,
    pub outbox: mpsc::Sender<Event>,
}

/// Read-only snapshot published after every step.
#[derive(Debug, Clone, Default)]
pub struct EngineStats {
    pub ready: bool,
    pub stopped: bool,
    pub load_ms: f64,
    pub warmup_ms: f64,
    pub slots_total: usize,
    pub running: usize,
    pub prefilling: usize,
    pub kv_cells_used: u64,
    pub kv_cells_total: u64,
    pub kv_bytes_per_cell: u64,
    pub steps: u64,
    pub prompt_tokens_total: u64,
    pub generated_tokens_total: u64,
    pub requests_finished: u64,
    pub requests_cancelled: u64,
    pub requests_failed: u64,
    pub last_step_ms: f64,
    pub last_step_tokens: usize,
}

impl EngineStats {
    pub(crate) fn starting(c: &EngineConfig, load_ms: f64) -> Self {
        EngineStats {
            load_ms,
            slots_total: c.max_seqs,
            kv_cells_total: u64::from(c.ctx_per_seq) * c.max_seqs as u64,
            ..Default::default()
        }
    }
}

pub(crate) struct OwnerArgs {
    pub model: Arc<LoadedModel>,
    pub config: EngineConfig,
    pub inbox: mpsc::Receiver<Command>,
    pub stats: watch::Sender<EngineStats>,
}

pub(crate) fn spawn(args: OwnerArgs) -> Result<(), LoadError> {
    let (ok_tx, ok_rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("steward-engine".into())
        .spawn(move || owner_main(args, ok_tx))
        .map_err(|e| LoadError::Context(e.to_string()))?;
    ok_rx
        .recv()
        .map_err(|_| LoadError::Context("engine thread died".into()))?
}

fn runtime_params(c: &EngineConfig) -> RuntimeParams {
    let n_batch = (c.prompt_budget + c.max_seqs).max(8) as u32;
    RuntimeParams {
        n_seqs: c.max_seqs,
        ctx_per_seq: c.ctx_per_seq,
        n_batch,
        n_ubatch: c.n_ubatch.min(n_batch),
        n_threads: c.n_threads,
        n_threads_batch: c.n_threads_batch,
        flash_attn: c.flash_attn,
    }
}

fn owner_main(args: OwnerArgs, ok: std::sync::mpsc::SyncSender<Result<(), LoadError>>) {
    let OwnerArgs {
        model,
        config,
        inbox,
        stats,
    } = args;
    let mut rt = match model.new_runtime(&runtime_params(&config)) {
        Ok(rt) => {
            let _ = ok.send(Ok(()));
            rt
        }
        Err(e) => {
            let _ = ok.send(Err(e));
            return;
        }
    };
    let t = Instant::now();
    if let Err(e) = warm_up(&mut rt, &model) {
        tracing::error!(error = %e, "warm-up step failed; engine stops");
        stats.send_modify(|s| s.stopped = true);
        return;
    }
    let warmup_ms = t.elapsed().as_secs_f64() * 1e3;
    tracing::info!(warmup_ms, "warm-up step done; ready");
    stats.send_modify(|s| {
        s.ready = true;
        s.warmup_ms = warmup_ms;
        s.kv_bytes_per_cell = model.kv_bytes_per_token();
    });
    let mut owner = Owner {
        rt,
        model: model.clone(),
        limits: StepLimits {
            prompt_budget: config.prompt_budget,
            max_prefill_seqs: config.max_prefill_seqs.max(1),
            max_decode_seqs: config.max_seqs,
        },
        ctx_limit: config.ctx_per_seq.min(model.facts.n_ctx_train.max(1)),
        free_slots: (0..config.max_seqs).rev().collect(),
        seqs: Vec::new(),
        draining: Vec::new(),
        inbox,
        stats,
        next_key: 0,
        inbox_closed: false,
    };
    owner.run();
}

/// First-run specialisation: one prompt chunk and one decode step through
/// the real path, then the slot is cleared.
fn warm_up(rt: &mut Runtime<'_>, model: &LoadedModel) -> Result<(), crate::model::StepError> {
    let prompt = model.tokenize("Hello, world", true, false);
    rt.clear();
    let n = prompt.len();
    let mut last = 0;
    for (i, &t) in prompt.iter().enumerate() {
        last = rt.push(t, i as u32, 0, i + 1 == n)?;
    }
    rt.decode()?;
    let next = argmax(rt.logits(last));
    rt.clear();
    let idx = rt.push(next, n as u32, 0, true)?;
    rt.decode()?;
    let _ = rt.logits(idx);
    rt.clear_slot(0);
    Ok(())
}

fn argmax(l: &[f32]) -> i32 {
    let mut best = 0;
    for (i, v) in l.iter().enumerate() {
        if *v > l[best] {
            best = i;
        }
    }
    best as i32
}

/// A terminal event (and text before it) the client has not taken yet. The
/// sequence's slot is already free; only the events wait.
struct Draining {
    outbox: mpsc::Sender<Event>,
    events: VecDeque<Event>,
}

struct Owner<'m> {
    rt: Runtime<'m>,
    model: Arc<LoadedModel>,
    limits: StepLimits,
    ctx_limit: u32,
    free_slots: Vec<usize>,
    /// Admitted sequences, oldest first.
    seqs: Vec<Sequence>,
    draining: Vec<Draining>,
    inbox: mpsc::Receiver<Command>,
    stats: watch::Sender<EngineStats>,
    next_key: u64,
    inbox_closed: bool,
}

impl Owner<'_> {
    fn run(&mut self) {
        loop {
            if !self.intake() {
                break;
            }
            self.reap_cancelled();
            self.flush_draining();
            self.step();
            self.publish(None);
        }
        for mut d in self.draining.drain(..) {
            while let Some(ev) = d.events.pop_front() {
                let _ = d.outbox.try_send(ev);
            }
        }
        self.stats.send_modify(|s| s.stopped = true);
        tracing::info!("engine stopped");
    }

    /// Pull requests while slots are free. Blocks when there is nothing to
    /// do. Returns false when the engine should stop.
    fn intake(&mut self) -> bool {
        loop {
            let idle = self.seqs.is_empty();
            if self.inbox_closed {
                return !(idle && self.draining.is_empty());
            }
            if self.free_slots.is_empty() {
                return true;
            }
            let cmd = if idle && self.draining.is_empty() {
                match self.inbox.blocking_recv() {
                    Some(c) => c,
                    None => {
                        self.inbox_closed = true;
                        continue;
                    }
                }
            } else {
                match self.inbox.try_recv() {
                    Ok(c) => c,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        if idle {
                            // Only undelivered events remain: poll gently.
                            std::thread::sleep(std::time::Duration::from_millis(2));
                        }
                        return true;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        self.inbox_closed = true;
                        continue;
                    }
                }
            };
            match cmd {
                Command::Submit(sub) => self.admit(*sub),
            }
        }
    }

    fn admit(&mut self, sub: Submission) {
        if sub.outbox.is_closed() {
            // The client left while queued: nothing was allocated.
            self.stats.send_modify(|s| s.requests_cancelled += 1);
            tracing::debug!(request_id = %sub.req.id, "dropped while queued (client gone)");
            return;
        }
        let Some(slot) = self.free_slots.pop() else {
            return;
        };
        self.next_key += 1;
        let seq = Sequence::new(self.next_key, slot, sub, self.ctx_limit);
        tracing::debug!(request_id = %seq.id, slot, prompt = seq.prompt.len(), "admitted");
        self.seqs.push(seq);
    }

    fn reap_cancelled(&mut self) {
        let mut i = 0;
        while i < self.seqs.len() {
            if self.seqs[i].outbox.is_closed() {
                let seq = self.seqs.remove(i);
                tracing::debug!(request_id = %seq.id, "cancelled (client gone)");
                self.retire(seq, None);
                self.stats.send_modify(|s| s.requests_cancelled += 1);
            } else {
                i += 1;
            }
        }
    }

    fn step(&mut self) {
        let views: Vec<SeqView> = self.seqs.iter().map(Sequence::view).collect();
        let plan = scheduler::plan(&views, &self.limits);
        if plan.is_empty() {
            return;
        }
        let t = Instant::now();
        // Build the batch: decode tokens, then prompt chunks.
        self.rt.clear();
        let mut logit_rows: Vec<(usize, usize)> = Vec::new(); // (seq index, batch idx)
        let mut built = Ok(());
        for (si, seq) in self.seqs.iter_mut().enumerate() {
            if let Some(pos) = plan.decode.iter().position(|k| *k == seq.key) {
                let _ = pos;
                match seq.push_decode(&mut self.rt) {
                    Ok(idx) => logit_rows.push((si, idx)),
                    Err(e) => built = Err(e),
                }
            } else if let Some(c) = plan.chunks.iter().find(|c| c.key == seq.key) {
                match seq.push_chunk(&mut self.rt, c) {
                    Ok(Some(idx)) => logit_rows.push((si, idx)),
                    Ok(None) => {}
                    Err(e) => built = Err(e),
                }
            }
        }
        let result = built.and_then(|_| self.rt.decode());
        let in_step: Vec<u64> = plan
            .decode
            .iter()
            .copied()
            .chain(plan.chunks.iter().map(|c| c.key))
            .collect();
        if let Err(e) = result {
            tracing::error!(error = %e, tokens = plan.n_tokens(), "step failed; failing its sequences");
            self.fail_step(&in_step, e.to_string());
            return;
        }
        for c in &plan.chunks {
            if let Some(seq) = self.seqs.iter_mut().find(|s| s.key == c.key) {
                seq.chunk_done(c);
            }
        }
        let mut generated = 0u64;
        for &(si, idx) in &logit_rows {
            let seq = &mut self.seqs[si];
            seq.sample_and_emit(self.rt.logits(idx), &self.model);
            generated += 1;
        }
        self.stats.send_modify(|s| {
            s.steps += 1;
            s.generated_tokens_total += generated;
            s.prompt_tokens_total += plan.chunks.iter().map(|c| c.len as u64).sum::<u64>();
        });
        // Retire everything that reached an end.
        let mut i = 0;
        while i < self.seqs.len() {
            if let Some(out) = self.seqs[i].outcome.take() {
                let seq = self.seqs.remove(i);
                self.retire(seq, Some(out));
            } else {
                i += 1;
            }
        }
        self.publish(Some((t.elapsed().as_secs_f64() * 1e3, plan.n_tokens())));
    }

    fn fail_step(&mut self, keys: &[u64], msg: String) {
        let mut i = 0;
        while i < self.seqs.len() {
            if keys.contains(&self.seqs[i].key) {
                let seq = self.seqs.remove(i);
                self.retire(
                    seq,
                    Some(Outcome::Failed(GenerationError::Runtime(msg.clone()))),
                );
            } else {
                i += 1;
            }
        }
    }

    /// The one place a sequence ends: free its slot's KV cells (the step that
    /// used them has completed), return the slot, queue its terminal event.
    fn retire(&mut self, mut seq: Sequence, outcome: Option<Outcome>) {
        self.rt.clear_slot(seq.slot);
        self.free_slots.push(seq.slot);
        let Some(outcome) = outcome else {
            return; // cancelled: nobody to tell.
        };
        let failed = matches!(outcome, Outcome::Failed(_));
        let events = seq.terminal_events(outcome);
        self.stats.send_modify(|s| {
            if failed {
                s.requests_failed += 1
            } else {
                s.requests_finished += 1
            }
        });
        let mut d = Draining {
            outbox: seq.outbox.clone(),
            events,
        };
        if flush(&mut d) {
            self.draining.push(d);
        }
    }

    fn flush_draining(&mut self) {
        self.draining.retain_mut(flush);
        for seq in &mut self.seqs {
            seq.flush_text();
        }
    }

    fn publish(&mut self, step: Option<(f64, usize)>) {
        let running = self.seqs.iter().filter(|s| s.is_decoding()).count();
        let prefilling = self.seqs.len() - running;
        let used: u64 = self.seqs.iter().map(|s| u64::from(s.n_past())).sum();
        self.stats.send_if_modified(|s| {
            let before = (s.running, s.prefilling, s.kv_cells_used);
            s.running = running;
            s.prefilling = prefilling;
            s.kv_cells_used = used;
            if let Some((ms, n)) = step {
                s.last_step_ms = ms;
                s.last_step_tokens = n;
                return true;
            }
            before != (running, prefilling, used)
        });
    }
}

/// Try to deliver queued events; true while some remain (and the client is
/// still there).
fn flush(d: &mut Draining) -> bool {
    while let Some(ev) = d.events.pop_front() {
        match d.outbox.try_send(ev) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(ev)) => {
                d.events.push_front(ev);
                return true;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
        }
    }
    false
}
