//! The model flags every command shares (`ModelArgs`: `--model`,
//! `--threads`, `--gpu-layers`, `--rpc`, `--default-format`) and what they
//! resolve to: the model file, the thread count, the layers offloaded, a
//! `--chat-template`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

#[derive(Args)]
pub(crate) struct ModelArgs {
    /// GGUF file to serve, `[NAME=]PATH`; repeatable: several models in one
    /// server (the first is the default; a request's `model` picks one).
    /// Default: SmolLM2-135M-Instruct Q4_1, fetched into the cache dir when
    /// missing.
    #[arg(long, env = "STEWARD_MODEL")]
    pub(crate) model: Vec<String>,
    /// Threads for decode and prompt steps (default: all cores).
    #[arg(long, env = "STEWARD_THREADS")]
    pub(crate) threads: Option<i32>,
    /// Layers to offload to a GPU. Default: all of them when the runtime
    /// finds a GPU, none otherwise. Asking for offload (N > 0) when no GPU
    /// is found is a startup error, never a silent CPU run.
    #[arg(long)]
    pub(crate) gpu_layers: Option<u32>,
    /// RPC workers (`steward rpc-worker`) to split the model across,
    /// `host:port,…`: their devices count as GPUs (layers placed by the
    /// memory each reports). The RPC protocol has no authentication: keep
    /// workers on loopback or a private network. A worker lost mid-run ends
    /// every request with an error and the process exits (status 70).
    #[arg(long, value_delimiter = ',')]
    pub(crate) rpc: Vec<String>,
    /// Weight format for the default model (ignored with --model): `q8_0`
    /// (converted once from the shipped Q4_1 and cached beside it: same
    /// quality, faster kernels on x86 — see docs/BENCHMARKS.md), `q4_0`
    /// (fastest, measurably lower quality) or `original` (the Q4_1 file).
    #[arg(long, default_value = "q8_0")]
    pub(crate) default_format: String,
}

pub(crate) fn threads(t: Option<i32>) -> i32 {
    t.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as i32)
            .unwrap_or(2)
    })
}

pub(crate) fn resolve_model(m: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match m {
        Some(p) => Ok(p.clone()),
        None => Ok(steward_engine::fetch::ensure_default_model()?),
    }
}

/// The default model in its `--default-format` (fetched, converted once).
pub(crate) fn default_served_model(m: &ModelArgs) -> anyhow::Result<PathBuf> {
    resolve_served_model(&ModelArgs {
        model: Vec::new(),
        threads: m.threads,
        gpu_layers: m.gpu_layers,
        rpc: m.rpc.clone(),
        default_format: m.default_format.clone(),
    })
}

/// The path of a `--model [NAME=]PATH`.
fn serve_models_path(s: &str) -> &str {
    match s.split_once('=') {
        Some((n, p)) if !n.contains('/') => p,
        _ => s,
    }
}

/// `--chat-template FILE|chatml|gemma|plain` (also a config file's).
pub(crate) fn template_flag(name: &str) -> anyhow::Result<(String, String)> {
    Ok(match steward_engine::prepare::builtin_template(name) {
        Some(src) => (name.to_string(), src.to_string()),
        None => (
            name.to_string(),
            std::fs::read_to_string(name).with_context(|| {
                format!("--chat-template {name}: not a built-in (chatml, gemma, plain) and not a readable file")
            })?,
        ),
    })
}

pub(crate) fn resolve_served_model(m: &ModelArgs) -> anyhow::Result<PathBuf> {
    if let Some(p) = m.model.first() {
        return Ok(PathBuf::from(serve_models_path(p)));
    }
    let format = match m.default_format.to_ascii_lowercase().as_str() {
        "original" | "q4_1" => None,
        other => Some(
            steward_engine::model::WeightFormat::parse(other)
                .with_context(|| format!("unknown --default-format {other}"))?,
        ),
    };
    Ok(steward_engine::fetch::ensure_default_model_as(
        format,
        threads(m.threads),
    )?)
}

/// `--gpu-layers`: all layers when a GPU is found and none was asked for;
/// a clear error when offload was asked for and there is no GPU.
pub(crate) fn gpu_layers(asked: Option<u32>) -> anyhow::Result<u32> {
    let gpus = steward_engine::model::gpu_devices()?;
    match asked {
        None if gpus.is_empty() => Ok(0),
        None => {
            tracing::info!(gpus = ?gpus, "GPU found: offloading every layer");
            Ok(u32::MAX)
        }
        Some(n) if n > 0 && gpus.is_empty() => anyhow::bail!(
            "--gpu-layers {n} asks for GPU offload, but this runtime found no GPU device \
             (a CPU build, or the GPU backend module is missing beside the binary: see scripts/gpu-bundle.sh)"
        ),
        Some(n) => Ok(n),
    }
}
