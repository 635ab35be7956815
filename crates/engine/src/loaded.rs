//! Loading a model: `Engine::load` maps and measures it (a `Loaded`),
//! `Loaded::start` sizes it to a budget and starts serving it.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use crate::admission::memory;
use crate::config::EngineConfig;
use crate::deliver::stats::EngineStats;
use crate::handle::{Engine, EngineHandle, Shared};
use crate::identity::{self, ModelIdentity};
use crate::owner;
use crate::prepare::Preparer;
use crate::runtime::{self as model, LoadError, TokenId};

/// A draft model must generate (no pooling), speak the model's vocabulary
/// token for token, and be full attention (its cells are cut back after
/// every verification).
fn check_draft(
    m: &model::LoadedModel,
    d: &model::LoadedModel,
    path: &std::path::Path,
) -> Result<(), LoadError> {
    let bad = |why: String| {
        Err(LoadError::Context(format!(
            "draft model {}: {why}",
            path.display()
        )))
    };
    if d.facts.pooling.is_some() {
        return bad("it is an embedding model".into());
    }
    let (a, b) = (&m.vocab.token_bytes, &d.vocab.token_bytes);
    if a.len() != b.len() {
        return bad(format!(
            "its vocabulary has {} tokens, the model's {}",
            b.len(),
            a.len()
        ));
    }
    if let Some(i) = (0..a.len())
        .find(|&i| a[i] != b[i] || m.vocab.is_eog(i as TokenId) != d.vocab.is_eog(i as TokenId))
    {
        return bad(format!("token {i} differs from the model's"));
    }
    if model::MemoryKind::of(&d.facts, false) != model::MemoryKind::Attention {
        return bad("speculation needs a full-attention draft model".into());
    }
    Ok(())
}

/// Bytes a slot's cell costs on average when full, for `--memory-budget`
/// sizing: every layer's K and V from the model's metadata for full
/// attention; for a sliding-window or recurrent model, measured on a small
/// probe context (window layers hold at most window + ubatch cells, a
/// recurrent state is fixed per slot).
fn bytes_per_cell(model: &model::LoadedModel, c: &EngineConfig) -> u64 {
    let plain = model.kv_bytes_per_token(c.model.kv_q8);
    let kind = model::MemoryKind::of(&model.facts, c.model.swa_full);
    if kind == model::MemoryKind::Attention {
        return plain;
    }
    let params = model::RuntimeParams {
        n_seqs: 1,
        ctx_per_seq: 256,
        n_batch: 64,
        n_ubatch: 64,
        n_threads: c.model.n_threads,
        n_threads_batch: c.model.n_threads_batch,
        flash_attn: c.model.flash_attn,
        kv_q8: c.model.kv_q8,
        kv_unified: false,
        swa_full: c.model.swa_full,
    };
    let Ok(mut rt) = model.new_runtime(&params) else {
        return plain;
    };
    let sizes =
        owner::kv::memstate::measure(&mut rt, kind, &model.tokenize("Hello, world", true, false));
    let per_seq = sizes.per_seq(kind, c.admit.ctx_per_seq, owner::runtime_params(c).n_ubatch);
    if per_seq == 0 {
        return plain;
    }
    tracing::info!(
        memory = kind.name(),
        per_seq,
        "memory budget: bytes a full slot holds, measured"
    );
    per_seq.div_ceil(u64::from(c.admit.ctx_per_seq.max(1)))
}

/// A model mapped and measured, not yet serving: what it will hold is
/// known before its context exists, so a registry can make room first
/// (`Engine::load`, then `Loaded::start`).
pub struct Loaded {
    model: Arc<model::LoadedModel>,
    /// The draft model and what a cell of its KV holds.
    draft: Option<(Arc<model::LoadedModel>, u64)>,
    config: EngineConfig,
    load_ms: f64,
    bytes_per_cell: u64,
    identity: ModelIdentity,
}

impl Loaded {
    /// Bytes beside the weights and the KV pool: compute graphs, runtime
    /// and HTTP buffers, and the host tiers' budgets.
    fn overhead(&self) -> u64 {
        (256u64 << 20)
            + self.config.admit.prefix_host_bytes
            + self.config.admit.checkpoint_bytes
            + self.media_bytes()
    }

    /// The projector's file and the encoded-media cache's bound.
    fn media_bytes(&self) -> u64 {
        let Some(p) = &self.config.model.mmproj else {
            return 0;
        };
        let file = std::fs::metadata(p).map_or(0, |m| m.len());
        file + self.config.prepare.encoder_cache_bytes as u64
    }

    /// What serving with `max_seqs` slots holds: weights, overhead and the
    /// KV pool.
    pub fn need(&self, max_seqs: usize) -> u64 {
        self.weights()
            + self.overhead()
            + self.cell_bytes() * u64::from(self.config.admit.ctx_per_seq) * max_seqs as u64
    }

    /// Weights held: the model's, and the draft model's.
    fn weights(&self) -> u64 {
        self.model.facts.weights_bytes + self.draft.as_ref().map_or(0, |d| d.0.facts.weights_bytes)
    }

    /// Bytes per slot cell: the model's KV, and the draft model's (its
    /// slots mirror the model's).
    fn cell_bytes(&self) -> u64 {
        self.bytes_per_cell + self.draft.as_ref().map_or(0, |d| d.1)
    }

    /// What serving as configured holds.
    pub fn full_need(&self) -> u64 {
        self.need(self.config.admit.max_seqs)
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Fewer slots than configured where the memory budget or the GPUs'
    /// free memory do not hold them all (an error when not one fits).
    fn fit(&mut self, budget: Option<u64>) -> Result<(), LoadError> {
        let at = memory::Placement::of(self.config.model.n_gpu_layers, self.model.facts.n_layer);
        let host = |b: u64| b - at.on_device(b);
        let mut fits = Vec::new();
        if let Some(budget) = budget {
            // The host budget holds the host share only: offloaded weights
            // and KV are in device memory.
            let fit = memory::fit_sequences(
                budget,
                host(self.weights()),
                self.overhead(),
                host(self.cell_bytes()),
                self.config.admit.ctx_per_seq,
                self.config.admit.max_seqs,
            )
            .map_err(LoadError::Budget)?;
            fits.push((fit, "memory budget"));
        }
        if at.layers_on_device > 0 {
            // The weights are on the GPUs already; the KV pool is allocated
            // when the owner creates its context: fit it into what is free.
            let per_seq =
                at.on_device(self.cell_bytes() * u64::from(self.config.admit.ctx_per_seq));
            let gpus = model::gpu_memory().unwrap_or_default();
            if let Some(fit) = memory::fit_on_gpus(&gpus, per_seq, self.config.admit.max_seqs) {
                fits.push((fit.map_err(LoadError::Budget)?, "GPU memory"));
            }
        }
        for (fit, what) in fits {
            let c = &mut self.config;
            if fit < c.admit.max_seqs {
                tracing::warn!(
                    model = %c.model.served_name,
                    requested = c.admit.max_seqs,
                    fit,
                    "{what}: fewer sequences than --max-seqs"
                );
                c.admit.max_seqs = fit;
                c.step.max_decode_seqs = c.step.max_decode_seqs.min(fit);
            }
        }
        Ok(())
    }

    /// Compute the identity, start the tokenizer pool and the execution
    /// owner, within `budget` bytes (fewer slots than configured when they
    /// do not all fit; an error when not even one does).
    pub fn start(mut self, budget: Option<u64>) -> Result<EngineHandle, LoadError> {
        self.fit(budget)?;
        let footprint = self.full_need();
        let Loaded {
            model,
            draft,
            config,
            load_ms,
            mut identity,
            ..
        } = self;
        identity.adapters = config
            .model
            .adapters
            .iter()
            .map(|a| a.name.clone())
            .collect();
        tracing::info!(
            load_ms,
            model = %config.model.served_name,
            identity = %identity.summary(),
            "model loaded"
        );
        let mut preparer = Preparer::new(model.clone(), &config).map_err(LoadError::Template)?;
        let sha = identity.projector_sha256.clone().unwrap_or_default();
        let cores = config
            .model
            .mmproj
            .as_ref()
            .map(|_| Arc::new(crate::cores::Cores::new(config.prepare.encoder_on_owner)));
        if let Some(e) =
            crate::prepare::encoder::Encoder::load(&model, &config, sha, cores.clone())?
        {
            let max_span = owner::runtime_params(&config).n_ubatch as usize;
            preparer.set_encoder(Arc::new(e), max_span);
        }
        let (inbox_tx, inbox_rx) = mpsc::channel(config.admit.max_waiting.max(1));
        let (stats_tx, stats_rx) = watch::channel(EngineStats::starting(&config, load_ms));
        let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let adapters = Arc::new(std::sync::RwLock::new(Vec::new()));
        let interrupt = Arc::new(crate::owner::interrupt::Interrupt::default());
        let owner = if model.facts.pooling.is_some() {
            owner::embed::spawn(
                model.clone(),
                config.clone(),
                inbox_rx,
                stats_tx,
                queued.clone(),
            )?
        } else {
            owner::spawn(owner::OwnerArgs {
                model: model.clone(),
                draft: draft.map(|d| d.0),
                parts: owner::OwnerParts {
                    config: config.clone(),
                    inbox: inbox_rx,
                    stats: stats_tx,
                    queued: queued.clone(),
                    prefix_key: identity.prefix_key(),
                    adapters: adapters.clone(),
                    cores,
                    wake: Some(inbox_tx.downgrade()),
                    interrupt: interrupt.clone(),
                },
            })?
        };
        Ok(EngineHandle {
            shared: Arc::new(Shared {
                config,
                identity,
                preparer,
                inbox: inbox_tx,
                stats: stats_rx,
                queued,
                drain_started: std::sync::OnceLock::new(),
                model,
                owner: std::sync::Mutex::new(Some(owner)),
                footprint,
                adapters,
                interrupt,
                instance: {
                    static NEXT: std::sync::atomic::AtomicU64 =
                        std::sync::atomic::AtomicU64::new(1);
                    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                },
            }),
        })
    }
}

impl Engine {
    /// Load the model and start serving it (`load` then `start` within the
    /// config's own memory budget). Returns as soon as the owner thread
    /// runs; it reports ready after its warm-up step.
    pub fn start(config: EngineConfig) -> Result<EngineHandle, LoadError> {
        let budget = config.admit.memory_budget;
        Self::load(config)?.start(budget)
    }

    /// Map the model's weights, compute its identity (the weights' sha256,
    /// cached beside the file) and measure what a slot holds: the heavy
    /// part of a load, on the calling thread.
    pub fn load(config: EngineConfig) -> Result<Loaded, LoadError> {
        let t0 = Instant::now();
        let model = Arc::new(model::LoadedModel::load(
            &config.model.model_path,
            config.model.progress,
            config.model.n_gpu_layers,
        )?);
        let load_ms = t0.elapsed().as_secs_f64() * 1e3;
        let mut config = config;
        let bytes_per_cell = if model.facts.pooling.is_some() {
            // An embedding model keeps no state between requests: no KV
            // pool, no host tiers.
            config.admit.prefix_host_bytes = 0;
            config.admit.checkpoint_bytes = 0;
            0
        } else {
            bytes_per_cell(&model, &config)
        };
        let mut identity = identity::ModelIdentity::compute(&config.model.model_path, &model)?;
        if let Some(p) = &config.model.mmproj {
            identity.projector_sha256 = Some(identity::cached_file_sha256(p)?);
        }
        let draft = match &config.model.draft_model {
            None => None,
            Some(path) => {
                let d = model::LoadedModel::load(path, false, config.model.n_gpu_layers)?;
                check_draft(&model, &d, path)?;
                let cell = self::bytes_per_cell(&d, &config);
                Some((Arc::new(d), cell))
            }
        };
        Ok(Loaded {
            model,
            draft,
            config,
            load_ms,
            bytes_per_cell,
            identity,
        })
    }
}
