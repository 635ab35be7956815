//! `bench-runtime` and `convert`: the runtime adapter measured alone, and
//! llama.cpp's quantizer.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use steward_engine::model::{LoadedModel, RuntimeParams};

use super::model::{gpu_layers, resolve_model, resolve_served_model, threads, ModelArgs};

#[derive(Args)]
pub struct ConvertArgs {
    /// Input GGUF (default: the default model).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Target format: Q4_0, Q4_1, Q5_1, Q8_0, Q4_K_M, Q4_K_S, IQ4_NL, BF16, F16.
    #[arg(long)]
    pub to: String,
    /// Output path (default: beside the input, with the format in its name).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args)]
pub struct BenchRuntimeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Tokens to decode.
    #[arg(long, default_value_t = 128)]
    tokens: usize,
    /// Repetitions (the best and the median are printed).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Sequence slots in the context (as `serve --max-seqs`).
    #[arg(long, default_value_t = 1)]
    slots: usize,
    /// KV cells per slot.
    #[arg(long, default_value_t = 1024)]
    ctx_per_seq: u32,
    /// llama.cpp micro-batch size.
    #[arg(long, default_value_t = 512)]
    batch: u32,
    /// Sequences decoded in lockstep.
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Prompt length per sequence.
    #[arg(long, default_value_t = 16)]
    prompt_tokens: usize,
    /// Use flash attention.
    #[arg(long)]
    flash_attn: bool,
    /// Prefill in chunks of this many tokens (0: one batch).
    #[arg(long, default_value_t = 0)]
    chunk: usize,
    /// Q8_0 KV cache.
    #[arg(long)]
    kv_q8: bool,
    /// Unified KV pool.
    #[arg(long)]
    kv_unified: bool,
    /// Instead: what sharing a prompt of --prompt-tokens between two slots
    /// costs (the step with the copy vs without, and recomputing).
    #[arg(long)]
    copy_cost: bool,
}

pub fn bench_runtime(a: BenchRuntimeArgs) -> anyhow::Result<()> {
    let path = resolve_served_model(&a.model)?;
    super::rpc::setup(&a.model.rpc)?;
    let model = LoadedModel::load(&path, false, gpu_layers(a.model.gpu_layers)?)?;
    let n_threads = threads(a.model.threads);
    let parallel = a.parallel.max(1);
    let params = RuntimeParams {
        n_seqs: a.slots.max(parallel),
        ctx_per_seq: a.ctx_per_seq.max((a.prompt_tokens + a.tokens + 8) as u32),
        n_batch: a.batch.max(parallel as u32).max(a.prompt_tokens as u32),
        n_ubatch: a.batch,
        n_threads,
        n_threads_batch: n_threads,
        flash_attn: a.flash_attn,
        kv_q8: a.kv_q8,
        kv_unified: a.kv_unified,
        swa_full: false,
    };
    if a.copy_cost {
        let params = RuntimeParams {
            n_seqs: a.slots.max(2),
            ..params
        };
        let r = steward_engine::ceiling::copy_cost(&model, &params, a.prompt_tokens, a.reps)?;
        println!("{}", serde_json::to_value(&r)?);
        return Ok(());
    }
    let chunk = if a.chunk == 0 { usize::MAX } else { a.chunk };
    let r = steward_engine::ceiling::run_chunked(
        &model,
        &params,
        parallel,
        a.prompt_tokens,
        a.tokens,
        a.reps,
        chunk,
    )?;
    let mut v = serde_json::to_value(&r)?;
    v["chunk"] = a.chunk.into();
    v["threads"] = n_threads.into();
    v["ubatch"] = a.batch.into();
    v["flash_attn"] = a.flash_attn.into();
    println!("{v}");
    Ok(())
}

pub fn convert(a: ConvertArgs) -> anyhow::Result<()> {
    let input = resolve_model(&a.model)?;
    let format = steward_engine::model::WeightFormat::parse(&a.to)
        .with_context(|| format!("unknown format {}; use Q4_0, Q4_1, Q8_0, BF16 or F16", a.to))?;
    let out = a.out.unwrap_or_else(|| {
        let stem = input
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let base = stem
            .rsplit_once('.')
            .map_or(stem.as_str(), |(b, _)| b)
            .to_string();
        input.with_file_name(format!("{base}.{}.gguf", format.name()))
    });
    let t = std::time::Instant::now();
    steward_engine::model::convert(&input, &out, format, threads(None))?;
    eprintln!("converted in {:.1} s", t.elapsed().as_secs_f64());
    println!("{}", out.display());
    Ok(())
}
