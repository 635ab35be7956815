//! The execution owner of an embedding or reranking model: the same inbox,
//! waiting bound, stats and shutdown as a generating owner, with a simpler
//! step. Each step packs whole inputs, oldest request first, into one batch
//! of at most `n_batch` tokens and `n_seqs` sequences (one sequence per
//! input), computes it, and hands each input its pooled vector.
//!
//! Invariants: a request leaves the queue exactly once (finished, failed,
//! cancelled or timed out), and the waiting count drops then. A request
//! whose client went (its reply receiver dropped) is dropped before its
//! next input is computed: at most the step in flight is spent on it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::deliver::stats::{CancelState, EngineStats};
use crate::deliver::stream::{Event, GenerationError};
use crate::owner::inbox::{Command, EmbedOutput, EmbedSubmission};
use crate::runtime::{StepError, TokenId};

/// What an embedding owner computes with (llama.cpp's `EmbedRuntime`, or
/// a fake in tests).
pub(crate) trait EmbedBackend {
    /// (tokens, sequences) one batch holds.
    fn capacity(&self) -> (usize, usize);
    /// One output per sequence, in order.
    fn run(&mut self, seqs: &[&[TokenId]]) -> Result<Vec<Vec<f32>>, StepError>;
}

impl EmbedBackend for crate::runtime::EmbedRuntime<'_> {
    fn capacity(&self) -> (usize, usize) {
        crate::runtime::EmbedRuntime::capacity(self)
    }
    fn run(&mut self, seqs: &[&[TokenId]]) -> Result<Vec<Vec<f32>>, StepError> {
        crate::runtime::EmbedRuntime::run(self, seqs)
    }
}

struct Job {
    sub: EmbedSubmission,
    done: Vec<Vec<f32>>,
    enqueued: Instant,
    started: Option<Instant>,
}

pub(crate) struct EmbedOwner<B> {
    pub rt: B,
    pub inbox: mpsc::Receiver<Command>,
    pub stats: watch::Sender<EngineStats>,
    pub queued: Arc<AtomicUsize>,
    pub queue_timeout: Option<Duration>,
    jobs: VecDeque<Job>,
    closed: bool,
}

impl<B: EmbedBackend> EmbedOwner<B> {
    pub(crate) fn new(
        rt: B,
        inbox: mpsc::Receiver<Command>,
        stats: watch::Sender<EngineStats>,
        queued: Arc<AtomicUsize>,
        queue_timeout: Option<Duration>,
    ) -> Self {
        EmbedOwner {
            rt,
            inbox,
            stats,
            queued,
            queue_timeout,
            jobs: VecDeque::new(),
            closed: false,
        }
    }

    /// Run until every handle is gone (or `Stop`), then end what is left.
    pub(crate) fn run(mut self) {
        while self.tick() {}
        self.end_all(GenerationError::Shutdown);
        self.stats.send_modify(|s| {
            s.stopped = true;
            s.ready = false;
        });
    }

    /// One iteration: intake, drop the abandoned, one batch. False: stop.
    pub(crate) fn tick(&mut self) -> bool {
        self.intake();
        if self.closed && self.jobs.is_empty() {
            return false;
        }
        self.reap();
        self.step();
        self.publish();
        true
    }

    fn intake(&mut self) {
        loop {
            let cmd = if self.jobs.is_empty() && !self.closed {
                match self.inbox.blocking_recv() {
                    Some(c) => c,
                    None => {
                        self.closed = true;
                        return;
                    }
                }
            } else {
                match self.inbox.try_recv() {
                    Ok(c) => c,
                    Err(mpsc::error::TryRecvError::Empty) => return,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        self.closed = true;
                        return;
                    }
                }
            };
            match cmd {
                Command::Embed(sub) => self.jobs.push_back(Job {
                    sub: *sub,
                    done: Vec::new(),
                    enqueued: Instant::now(),
                    started: None,
                }),
                Command::Submit(sub) => {
                    self.queued.fetch_sub(1, Ordering::AcqRel);
                    let _ = sub.outbox.try_send(Event::Error(GenerationError::Runtime(
                        "this is an embedding model: it serves embeddings, not generation".into(),
                    )));
                }
                Command::Cancel(id) => {
                    if let Some(i) = self.jobs.iter().position(|j| j.sub.id == id) {
                        if let Some(j) = self.jobs.remove(i) {
                            self.leave(j, Err(GenerationError::Cancelled));
                        }
                    }
                }
                Command::CancelAll => self.end_all(GenerationError::Shutdown),
                Command::Stop => self.closed = true,
                Command::Wake => {}
                Command::LoadAdapter(_, reply) => {
                    let _ = reply.send(Err("embedding models take no LoRA adapters".into()));
                }
                Command::CellMap(reply) => {
                    let _ = reply.send(Vec::new());
                }
            }
        }
    }

    /// Drop requests whose client went, and those past their deadline or
    /// the queue timeout.
    fn reap(&mut self) {
        let now = Instant::now();
        let timeout = self.queue_timeout;
        let mut kept = VecDeque::with_capacity(self.jobs.len());
        for j in std::mem::take(&mut self.jobs) {
            let verdict = if j.sub.reply.is_closed() {
                Some(Err(GenerationError::Cancelled))
            } else if j.sub.deadline.is_some_and(|d| now >= d) {
                Some(Err(GenerationError::DeadlineExceeded(
                    now.duration_since(j.enqueued).as_secs_f64(),
                )))
            } else if j.started.is_none()
                && timeout.is_some_and(|t| now.duration_since(j.enqueued) >= t)
            {
                Some(Err(GenerationError::QueueTimeout(
                    now.duration_since(j.enqueued).as_secs_f64(),
                )))
            } else {
                None
            };
            match verdict {
                Some(r) => self.leave(j, r),
                None => kept.push_back(j),
            }
        }
        self.jobs = kept;
    }

    /// Pack inputs from the oldest request on and compute them.
    fn step(&mut self) {
        let (max_tokens, max_seqs) = self.rt.capacity();
        // (job index, input index) of every sequence in the batch.
        let mut picked: Vec<(usize, usize)> = Vec::new();
        let mut tokens = 0;
        'jobs: for (ji, j) in self.jobs.iter().enumerate() {
            for ii in j.done.len()..j.sub.inputs.len() {
                let n = j.sub.inputs[ii].len();
                if picked.len() == max_seqs || tokens + n > max_tokens {
                    break 'jobs;
                }
                tokens += n;
                picked.push((ji, ii));
            }
        }
        if picked.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let result = {
            let seqs: Vec<&[TokenId]> = picked
                .iter()
                .map(|&(ji, ii)| self.jobs[ji].sub.inputs[ii].as_slice())
                .collect();
            self.rt.run(&seqs)
        };
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        self.stats.send_modify(|s| {
            s.steps += 1;
            s.step_ms.observe(ms);
            s.last_step_ms = ms;
            s.last_step_tokens = tokens;
            s.step_runtime_ms_total += ms;
            s.prompt_tokens_total += tokens as u64;
        });
        match result {
            Ok(outs) => {
                for (&(ji, _), v) in picked.iter().zip(outs) {
                    let j = &mut self.jobs[ji];
                    j.started.get_or_insert(t0);
                    j.done.push(v);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "embedding step failed");
                for ji in picked
                    .iter()
                    .map(|p| p.0)
                    .collect::<std::collections::BTreeSet<_>>()
                {
                    self.jobs[ji].done.clear();
                    self.jobs[ji].sub.inputs.clear();
                    self.jobs[ji].started = None;
                }
                let msg = e.to_string();
                let failed: Vec<Job> = self.take_where(|j| j.sub.inputs.is_empty());
                for j in failed {
                    self.leave(j, Err(GenerationError::Runtime(msg.clone())));
                }
                return;
            }
        }
        let finished = self.take_where(|j| j.done.len() == j.sub.inputs.len());
        for mut j in finished {
            let out = EmbedOutput {
                tokens: j.sub.inputs.iter().map(|i| i.len() as u32).sum(),
                vectors: std::mem::take(&mut j.done),
                queue_ms: j
                    .started
                    .unwrap_or(t0)
                    .duration_since(j.enqueued)
                    .as_secs_f64()
                    * 1e3,
                compute_ms: j.enqueued.elapsed().as_secs_f64() * 1e3,
            };
            self.leave(j, Ok(out));
        }
    }

    fn take_where(&mut self, f: impl Fn(&Job) -> bool) -> Vec<Job> {
        let (out, kept): (Vec<Job>, Vec<Job>) =
            std::mem::take(&mut self.jobs).into_iter().partition(f);
        self.jobs = kept.into();
        out
    }

    /// A request leaves the queue: its answer, the counts.
    fn leave(&mut self, j: Job, r: Result<EmbedOutput, GenerationError>) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
        let state = if j.started.is_some() {
            CancelState::Prefilling
        } else {
            CancelState::Queued
        };
        let wait_ms = j.enqueued.elapsed().as_secs_f64() * 1e3;
        self.stats.send_modify(|s| match &r {
            Ok(_) => {
                s.requests_finished += 1;
                s.queue_wait_ms.observe(wait_ms);
            }
            Err(GenerationError::Cancelled) => {
                s.requests_cancelled += 1;
                s.cancelled_by_state[state.index()] += 1;
            }
            Err(GenerationError::QueueTimeout(_)) => s.requests_timed_out_in_queue += 1,
            Err(GenerationError::DeadlineExceeded(_)) => s.requests_deadline_exceeded += 1,
            Err(_) => s.requests_failed += 1,
        });
        let _ = j.sub.reply.send(r);
    }

    fn end_all(&mut self, e: GenerationError) {
        for j in std::mem::take(&mut self.jobs) {
            self.leave(j, Err(e.clone()));
        }
    }

    fn publish(&mut self) {
        let waiting = self.jobs.iter().filter(|j| j.started.is_none()).count();
        let running = self.jobs.len() - waiting;
        self.stats.send_modify(|s| {
            s.waiting = waiting;
            s.running = running;
        });
    }
}

/// Tokens of the longest input an embedding model takes: the model's
/// positions (an input past the trained context crashes llama.cpp's
/// encoder), never the step's token cap.
pub(crate) fn longest_input(
    model: &crate::runtime::LoadedModel,
    c: &crate::config::EngineConfig,
) -> u32 {
    c.admit
        .ctx_per_seq
        .min(model.facts.n_ctx_train.max(1))
        .max(8)
}

/// An embedding context's sizing: every input is computed in one
/// micro-batch, so a step holds at least the longest input, and up to
/// the prompt budget.
pub(crate) fn embed_params(
    model: &crate::runtime::LoadedModel,
    c: &crate::config::EngineConfig,
) -> crate::runtime::EmbedParams {
    let longest = longest_input(model, c);
    let n_batch = longest
        .max((c.step.prompt_budget as u32).min(longest.saturating_mul(c.admit.max_seqs as u32)));
    crate::runtime::EmbedParams {
        n_seqs: c.admit.max_seqs.max(1),
        n_batch,
        n_threads: c.model.n_threads,
        n_threads_batch: c.model.n_threads_batch,
    }
}

/// Start an embedding owner thread: its context, a warm-up batch, the
/// memory it holds (measured), then its loop.
pub(crate) fn spawn(
    model: Arc<crate::runtime::LoadedModel>,
    config: crate::config::EngineConfig,
    inbox: mpsc::Receiver<Command>,
    stats: watch::Sender<EngineStats>,
    queued: Arc<AtomicUsize>,
) -> Result<std::thread::JoinHandle<()>, crate::runtime::LoadError> {
    use crate::runtime::LoadError;
    let (ok_tx, ok_rx) = std::sync::mpsc::sync_channel(1);
    let owner = std::thread::Builder::new()
        .name("steward-embed".into())
        .spawn(move || {
            let rss_before = crate::admission::memory::rss_bytes().unwrap_or(0);
            let params = embed_params(&model, &config);
            let mut rt = match model.new_embed_runtime(&params) {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ok_tx.send(Err(e));
                    return;
                }
            };
            let _ = ok_tx.send(Ok(()));
            let t = Instant::now();
            let probe = model.tokenize_with_specials("Hello, world");
            if let Err(e) = rt.run(&[&probe]) {
                tracing::error!(error = %e, "warm-up batch failed; engine stops");
                stats.send_modify(|s| s.stopped = true);
                return;
            }
            let warmup_ms = t.elapsed().as_secs_f64() * 1e3;
            let grown = crate::admission::memory::rss_bytes()
                .unwrap_or(0)
                .saturating_sub(rss_before);
            tracing::info!(
                warmup_ms,
                pooling = rt.pooling().name(),
                width = rt.width(),
                step_tokens = params.n_batch,
                longest_input = longest_input(&model, &config),
                "embedding model ready"
            );
            stats.send_modify(|s| {
                s.warmup_ms = warmup_ms;
                s.compute_bytes = grown;
                s.kv_pool_bytes = 0;
                s.kv_cells_total = 0;
                s.kv_bytes_per_cell = 0;
                s.slots_total = params.n_seqs;
                s.memory_kind = "embedding";
                s.prompt_budget = params.n_batch as usize;
                s.ready = true;
            });
            let timeout = config.admit.queue_timeout;
            let owner = EmbedOwner::new(rt, inbox, stats.clone(), queued, timeout);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| owner.run()));
            if let Err(p) = r {
                tracing::error!(panic = %crate::fatal::panic_text(p.as_ref()), "the embedding thread panicked");
                stats.send_modify(|s| {
                    s.failed = true;
                    s.stopped = true;
                    s.ready = false;
                });
            }
        })
        .map_err(|e| LoadError::Context(e.to_string()))?;
    ok_rx
        .recv()
        .map_err(|_| LoadError::Context("engine thread died".into()))??;
    Ok(owner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    /// Output = [sequence length, first token]; records each batch's shape.
    struct Fake {
        cap: (usize, usize),
        batches: Arc<std::sync::Mutex<Vec<usize>>>,
        fail: bool,
    }

    impl EmbedBackend for Fake {
        fn capacity(&self) -> (usize, usize) {
            self.cap
        }
        fn run(&mut self, seqs: &[&[TokenId]]) -> Result<Vec<Vec<f32>>, StepError> {
            self.batches.lock().unwrap().push(seqs.len());
            if self.fail {
                return Err(StepError::Decode("boom".into()));
            }
            Ok(seqs
                .iter()
                .map(|s| vec![s.len() as f32, s[0] as f32])
                .collect())
        }
    }

    type Rig = (
        EmbedOwner<Fake>,
        mpsc::Sender<Command>,
        Arc<std::sync::Mutex<Vec<usize>>>,
        Arc<AtomicUsize>,
    );

    fn owner(cap: (usize, usize), fail: bool) -> Rig {
        let (tx, rx) = mpsc::channel(16);
        let (stats, _) = watch::channel(EngineStats::default());
        let batches = Arc::new(std::sync::Mutex::new(Vec::new()));
        let queued = Arc::new(AtomicUsize::new(0));
        let fake = Fake {
            cap,
            batches: batches.clone(),
            fail,
        };
        (
            EmbedOwner::new(fake, rx, stats, queued.clone(), None),
            tx,
            batches,
            queued,
        )
    }

    fn submit(
        tx: &mpsc::Sender<Command>,
        queued: &AtomicUsize,
        id: &str,
        inputs: Vec<Vec<TokenId>>,
    ) -> oneshot::Receiver<Result<EmbedOutput, GenerationError>> {
        let (reply, rx) = oneshot::channel();
        queued.fetch_add(1, Ordering::AcqRel);
        tx.try_send(Command::Embed(Box::new(EmbedSubmission {
            id: id.into(),
            inputs,
            reply,
            deadline: None,
        })))
        .unwrap();
        rx
    }

    #[test]
    fn packs_inputs_across_requests_within_the_batch_and_answers_in_order() {
        let (mut o, tx, batches, queued) = owner((10, 3), false);
        let mut a = submit(&tx, &queued, "a", vec![vec![1, 2, 3], vec![4, 5]]);
        let mut b = submit(&tx, &queued, "b", vec![vec![6; 4], vec![7; 6], vec![8]]);
        while !o.jobs.is_empty() || queued.load(Ordering::Acquire) > 0 {
            assert!(o.tick());
        }
        // 3+2+4 tokens fill 3 sequences; then 6+1.
        assert_eq!(*batches.lock().unwrap(), vec![3, 2]);
        let a = a.try_recv().unwrap().unwrap();
        assert_eq!(a.vectors, vec![vec![3.0, 1.0], vec![2.0, 4.0]]);
        assert_eq!(a.tokens, 5);
        let b = b.try_recv().unwrap().unwrap();
        assert_eq!(b.vectors.len(), 3);
        assert_eq!(b.vectors[1], vec![6.0, 7.0]);
        assert_eq!(o.stats.borrow().requests_finished, 2);
    }

    #[test]
    fn a_gone_client_costs_no_further_batches() {
        let (mut o, tx, batches, queued) = owner((4, 1), false);
        let rx = submit(&tx, &queued, "a", vec![vec![1, 2]; 5]);
        assert!(o.tick());
        assert_eq!(batches.lock().unwrap().len(), 1);
        drop(rx);
        assert!(o.tick());
        assert_eq!(
            batches.lock().unwrap().len(),
            1,
            "no batch after the client left"
        );
        assert!(o.jobs.is_empty());
        assert_eq!(queued.load(Ordering::Acquire), 0);
        let s = o.stats.borrow();
        assert_eq!(s.requests_cancelled, 1);
        assert_eq!(s.cancelled_by_state[CancelState::Prefilling.index()], 1);
    }

    #[test]
    fn a_failed_step_fails_only_the_requests_in_it_and_generation_is_refused() {
        let (mut o, tx, _, queued) = owner((4, 1), true);
        let mut a = submit(&tx, &queued, "a", vec![vec![1, 2]]);
        let (otx, mut orx) = mpsc::channel(2);
        queued.fetch_add(1, Ordering::AcqRel);
        tx.try_send(Command::Submit(Box::new(
            crate::owner::tests::submission_for_test(otx),
        )))
        .unwrap();
        assert!(o.tick());
        assert!(
            matches!(a.try_recv().unwrap(), Err(GenerationError::Runtime(m)) if m.contains("boom"))
        );
        assert!(
            matches!(orx.try_recv().unwrap(), Event::Error(GenerationError::Runtime(m)) if m.contains("embedding model"))
        );
        assert_eq!(queued.load(Ordering::Acquire), 0);
        drop(tx);
        assert!(!o.tick(), "the owner stops when every handle is gone");
    }
}
