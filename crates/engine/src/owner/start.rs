//! Starting the execution owner: its thread, the runtime's sizing, the
//! warm-up step, what the model's memory holds per layer kind (measured),
//! then the owner's loop (`faults::run`).

use std::time::Instant;

use crate::config::EngineConfig;
use crate::owner::kv::memstate;
use crate::owner::{faults, Owner, OwnerArgs};
use crate::runtime::backend::Backend;
use crate::runtime::{LoadError, LoadedModel, MemoryKind, RuntimeParams};
use crate::sample::sampler;

pub(crate) fn spawn(args: OwnerArgs) -> Result<std::thread::JoinHandle<()>, LoadError> {
    let (ok_tx, ok_rx) = std::sync::mpsc::sync_channel(1);
    let owner = std::thread::Builder::new()
        .name("steward-engine".into())
        .spawn(move || owner_main(args, ok_tx))
        .map_err(|e| LoadError::Context(e.to_string()))?;
    ok_rx
        .recv()
        .map_err(|_| LoadError::Context("engine thread died".into()))??;
    Ok(owner)
}

/// Most prompt tokens one step may carry: the budget plus what the TTFT
/// target may expedite.
pub(super) fn max_step_prompt(c: &EngineConfig) -> usize {
    let expedite = if c.step.ttft_target_ms.is_some() {
        2 * c.step.expedite_max_tokens * c.step.expedite_max_seqs
    } else {
        0
    };
    c.step.prompt_budget + expedite
}

pub(crate) fn runtime_params(c: &EngineConfig) -> RuntimeParams {
    let burst = if c.step.burst_prefill {
        c.step.burst_max_tokens
    } else {
        0
    };
    let mut n_batch = (max_step_prompt(c).max(burst) + c.admit.max_seqs).max(8) as u32;
    if c.model.mmproj.is_some() {
        // A media span is decoded whole, in one ubatch: room for a full one.
        n_batch = n_batch.max(c.model.n_ubatch);
    }
    RuntimeParams {
        n_seqs: c.admit.max_seqs,
        ctx_per_seq: c.admit.ctx_per_seq,
        n_batch,
        n_ubatch: c.model.n_ubatch.min(n_batch),
        n_threads: c.model.n_threads,
        n_threads_batch: c.model.n_threads_batch,
        flash_attn: c.model.flash_attn,
        kv_q8: c.model.kv_q8,
        kv_unified: c.model.kv_unified,
        swa_full: c.model.swa_full,
    }
}

fn owner_main(args: OwnerArgs, ok: std::sync::mpsc::SyncSender<Result<(), LoadError>>) {
    let OwnerArgs {
        model,
        draft,
        parts,
    } = args;
    let rss_before = crate::admission::memory::rss_bytes().unwrap_or(0);
    let mut rt = match model.new_runtime(&runtime_params(&parts.config)) {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ok.send(Err(e));
            return;
        }
    };
    // The draft model's runtime: the same slots, context and batch.
    let draft_rt = match draft
        .as_ref()
        .map(|d| d.new_runtime(&runtime_params(&parts.config)))
    {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => {
            let _ = ok.send(Err(e));
            return;
        }
    };
    // The adapters named at start: one that does not load stops the start.
    for a in &parts.config.model.adapters {
        match rt.load_adapter(&a.path) {
            Ok(id) => {
                if let Ok(mut list) = parts.adapters.write() {
                    list.push(crate::config::AdapterInfo {
                        id,
                        name: a.name.clone(),
                        path: a.path.display().to_string(),
                        scale: a.scale,
                    });
                }
            }
            Err(e) => {
                let _ = ok.send(Err(LoadError::Adapter(format!(
                    "adapter {:?}: {e}",
                    a.name
                ))));
                return;
            }
        }
    }
    let _ = ok.send(Ok(()));
    let t = Instant::now();
    if let Err(e) = warm_up(&mut rt, &model, &parts.config) {
        tracing::error!(error = %e, "warm-up step failed; engine stops");
        parts.stats.send_modify(|s| s.stopped = true);
        return;
    }
    let warmup_ms = t.elapsed().as_secs_f64() * 1e3;
    let kind = MemoryKind::of(&model.facts, parts.config.model.swa_full);
    let sizes = memstate::measure(&mut rt, kind, &model.tokenize("Hello, world", true, false));
    let c = &parts.config;
    let measured = sizes.per_seq(kind, c.admit.ctx_per_seq, runtime_params(c).n_ubatch);
    let per_seq = if measured > 0 {
        measured
    } else {
        u64::from(c.admit.ctx_per_seq) * model.kv_bytes_per_token(c.model.kv_q8)
    };
    let kv_pool = per_seq * c.admit.max_seqs as u64;
    let grown = crate::admission::memory::rss_bytes()
        .unwrap_or(0)
        .saturating_sub(rss_before);
    let compute_bytes = grown.saturating_sub(kv_pool);
    tracing::info!(
        memory = kind.name(),
        swa_window = model.facts.n_swa,
        bytes_per_cell = sizes.per_cell,
        window_bytes_per_cell = sizes.window_per_cell,
        recurrent_bytes_per_slot = sizes.per_slot,
        checkpoints =
            kind != MemoryKind::Attention && c.admit.checkpoint_bytes > 0 && c.admit.prefix_cache,
        "model memory"
    );
    tracing::info!(warmup_ms, "warm-up step done; ready");
    parts.stats.send_modify(|s| {
        s.warmup_ms = warmup_ms;
        s.compute_bytes = compute_bytes;
        s.kv_pool_bytes = kv_pool;
        s.slots_total = c.admit.max_seqs;
        s.memory_kind = kind.name();
        s.swa_window = match kind {
            MemoryKind::Window { n_swa } => n_swa,
            _ => 0,
        };
        s.window_bytes_per_cell = sizes.window_per_cell;
        s.recurrent_bytes_per_slot = sizes.per_slot;
        if kind == (MemoryKind::Recurrent { hybrid: false }) {
            // The ledger's unit is a slot's state.
            s.kv_bytes_per_cell = sizes.per_slot;
            s.kv_cells_total = c.admit.max_seqs as u64;
        } else {
            s.kv_bytes_per_cell = if sizes.per_cell > 0 {
                sizes.per_cell
            } else {
                model.kv_bytes_per_token(c.model.kv_q8)
            };
            s.kv_cells_total = u64::from(c.admit.ctx_per_seq) * c.admit.max_seqs as u64;
        }
        s.ready = true;
    });
    let ctx_limit = parts
        .config
        .admit
        .ctx_per_seq
        .min(model.facts.n_ctx_train.max(1));
    let mut owner = Owner::new(rt, model.vocab.clone(), kind, ctx_limit, parts);
    if let Some(d) = draft_rt {
        owner = owner.with_drafter(d);
    }
    owner.kv.memory.saved_window = model.facts.n_swa as usize;
    faults::run(owner);
}

/// First-run specialisation: one prompt chunk and one decode step through
/// the real path, then the slot is cleared. With layers on a GPU, also a
/// full-width prompt chunk and a decode step across many slots: the device
/// loads its kernels (and picks its matrix algorithms) per shape on first
/// use, which would otherwise land on the first requests' latency.
fn warm_up(
    rt: &mut impl Backend,
    model: &LoadedModel,
    c: &EngineConfig,
) -> Result<(), crate::runtime::StepError> {
    let prompt = model.tokenize("Hello, world", true, false);
    rt.clear();
    let n = prompt.len();
    let mut last = 0;
    for (i, &t) in prompt.iter().enumerate() {
        last = rt.push(t, i as u32, 0, i + 1 == n)?;
    }
    rt.decode()?;
    let next = sampler::argmax(rt.logits(last));
    rt.clear();
    let idx = rt.push(next, n as u32, 0, true)?;
    rt.decode()?;
    let _ = rt.logits(idx);
    rt.clear_slot(0);
    if c.model.n_gpu_layers > 0 && !prompt.is_empty() {
        let params = runtime_params(c);
        let len = (params.n_ubatch as usize).min((c.admit.ctx_per_seq as usize).saturating_sub(1));
        if len == 0 {
            return Ok(());
        }
        rt.clear();
        for i in 0..len {
            rt.push(prompt[i % n], i as u32, 0, i + 1 == len)?;
        }
        rt.decode()?;
        rt.clear();
        rt.clear_slot(0);
        let width = c.admit.max_seqs.min(params.n_batch as usize);
        for s in 0..width {
            rt.push(next, 0, s, true)?;
        }
        rt.decode()?;
        for s in 0..width {
            rt.clear_slot(s);
        }
    }
    Ok(())
}
