//! `steward`: the thin binary. `serve` runs the server, `fetch-model` caches
//! the default model, `bench-runtime` measures the runtime adapter's own
//! single-sequence decode speed (the ceiling: no HTTP, no scheduler).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use steward_engine::EngineConfig;

mod rpc_cli;
mod serve_models;
mod tools_cli;
use tools_cli::{bench_runtime, convert, BenchRuntimeArgs, ConvertArgs};

#[derive(Parser)]
#[command(
    name = "steward",
    version = env!("STEWARD_VERSION"),
    about = "An OpenAI-compatible LLM inference server on llama.cpp"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve a GGUF model over an OpenAI-compatible HTTP API.
    Serve(Box<ServeArgs>),
    /// Fetch (if missing) and verify a known model; print its path.
    FetchModel(FetchModelArgs),
    /// Decode one sequence directly on the runtime adapter (no HTTP, no
    /// scheduler) and print tokens/s: the ceiling for single-stream speed.
    BenchRuntime(BenchRuntimeArgs),
    /// Rewrite a GGUF's weights in another format (llama.cpp's quantizer).
    Convert(ConvertArgs),
    /// Expose this machine's devices to a `serve --rpc` elsewhere
    /// (llama.cpp's RPC backend; no authentication: loopback by default).
    RpcWorker(rpc_cli::RpcWorkerArgs),
}

#[derive(Args)]
struct FetchModelArgs {
    /// Which known model: smollm2-135m (the default; also `default`) or
    /// gemma3-270m (Gemma 3 270M Q4_K_M, a base model with no template).
    #[arg(default_value = steward_engine::fetch::DEFAULT_MODEL_NAME)]
    name: String,
}

#[derive(Args)]
pub(crate) struct ModelArgs {
    /// GGUF file to serve, `[NAME=]PATH`; repeatable: several models in one
    /// server (the first is the default; a request's `model` picks one).
    /// Default: SmolLM2-135M-Instruct Q4_1, fetched into the cache dir when
    /// missing.
    #[arg(long, env = "STEWARD_MODEL")]
    model: Vec<String>,
    /// Threads for decode and prompt steps (default: all cores).
    #[arg(long, env = "STEWARD_THREADS")]
    threads: Option<i32>,
    /// Layers to offload to a GPU. Default: all of them when the runtime
    /// finds a GPU, none otherwise. Asking for offload (N > 0) when no GPU
    /// is found is a startup error, never a silent CPU run.
    #[arg(long)]
    gpu_layers: Option<u32>,
    /// RPC workers (`steward rpc-worker`) to split the model across,
    /// `host:port,…`: their devices count as GPUs (layers placed by the
    /// memory each reports). The RPC protocol has no authentication: keep
    /// workers on loopback or a private network. A worker lost mid-run ends
    /// every request with an error and the process exits (status 70).
    #[arg(long, value_delimiter = ',')]
    rpc: Vec<String>,
    /// Weight format for the default model (ignored with --model): `q8_0`
    /// (converted once from the shipped Q4_1 and cached beside it: same
    /// quality, faster kernels on x86 — see docs/BENCHMARKS.md), `q4_0`
    /// (fastest, measurably lower quality) or `original` (the Q4_1 file).
    #[arg(long, default_value = "q8_0")]
    default_format: String,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, default_value = "127.0.0.1", env = "STEWARD_HOST")]
    host: String,
    #[arg(long, default_value_t = 8080, env = "STEWARD_PORT")]
    port: u16,
    /// Require `Authorization: Bearer <key>` on /v1 routes and /metrics.
    #[arg(long, env = "STEWARD_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    #[command(flatten)]
    access: steward_server::access::AccessArgs,
    #[command(flatten)]
    kv_events: steward_server::kvevents::KvEventArgs,
    /// Name clients use in the `model` field (default: the file's stem).
    #[arg(long)]
    served_model_name: Option<String>,
    /// Concurrent sequences (continuous batch width).
    #[arg(long, default_value_t = 32)]
    max_seqs: usize,
    /// KV cells per sequence: the context limit of one request.
    #[arg(long, default_value_t = 4096)]
    ctx_per_seq: u32,
    /// Prompt tokens computed per step (chunked prefill). Default: 256 on
    /// the CPU, 8192 when the model is offloaded to a GPU.
    #[arg(long)]
    prompt_budget: Option<usize>,
    /// Sequences whose prompts may advance in one step. Default on the CPU:
    /// 2 = the oldest prompt plus the express lane for short ones; more
    /// chunks per step cost extra passes over the weights (docs/BENCHMARKS.md
    /// [9/9]). On a GPU: --max-seqs (measured: 64 streams of an 8B model
    /// ramp up 1.8x faster, docs/BENCHMARKS.md [8/8]).
    #[arg(long)]
    max_prefill_seqs: Option<usize>,
    /// Sequences that may decode in one step (default: --max-seqs).
    #[arg(long)]
    max_decode_seqs: Option<usize>,
    /// Adaptive prompt budget: target step time in ms (the decoders'
    /// inter-token latency); --prompt-budget is then the maximum. 0: off
    /// (fixed budget). Default: 250 on the CPU, chosen by measurement
    /// (docs/BENCHMARKS.md [3/8]); 50 on a GPU, for long prompts only (see
    /// --target-min-prompt).
    #[arg(long)]
    target_step_ms: Option<f64>,
    /// The step-time target applies only while a prompt of at least this
    /// many tokens is being prefilled; other steps take the whole
    /// --prompt-budget. 0: always. Default: 0 on the CPU; 2048 on a GPU,
    /// where a burst of short prompts prefills fastest in one large step
    /// and a long prompt is what freezes the decoders (docs/BENCHMARKS.md
    /// [8/8]).
    #[arg(long)]
    target_min_prompt: Option<usize>,
    /// Cut a step's prompt chunks to multiples of this many tokens (a
    /// prompt's last piece padded back to it by recomputing), so that
    /// llama.cpp's equal split of per-slot KV streams makes full ubatches
    /// (0: off). Default: 32 on a GPU with per-slot streams, else 0.
    #[arg(long)]
    chunk_align: Option<usize>,
    /// Smallest prompt budget the adaptive rule may choose.
    #[arg(long, default_value_t = 16)]
    min_prompt_budget: usize,
    /// TTFT target in ms: a short prompt (at most --expedite-max-tokens
    /// tokens) waiting longer than this is finished in the next step even if
    /// that step runs past --target-step-ms. Long prompts always advance by
    /// chunks under the step target. 0: off.
    #[arg(long, default_value_t = 500.0)]
    ttft_target_ms: f64,
    /// Longest prompt (tokens) the TTFT target may expedite.
    #[arg(long, default_value_t = 512)]
    expedite_max_tokens: usize,
    /// Most overdue prompts finished in one step.
    #[arg(long, default_value_t = 2)]
    expedite_max_seqs: usize,
    /// Longest a request may wait for a slot before a 503 (seconds; 0: no limit).
    #[arg(long, default_value_t = 60.0)]
    queue_timeout_s: f64,
    /// Interval of SSE keep-alive comments while a stream has nothing to send (seconds).
    #[arg(long, default_value_t = 5.0)]
    sse_keepalive_s: f64,
    /// Longest a request may take end to end, seconds (requests may ask for
    /// less with the `timeout` field; 0: no limit).
    #[arg(long, default_value_t = 600.0)]
    request_timeout_s: f64,
    /// Operational memory budget: bytes (6G, 512M) or a fraction of RAM
    /// (0.5). The KV pool (and so --max-seqs) is sized to fit; startup
    /// fails if the weights alone exceed it.
    #[arg(long)]
    memory_budget: Option<String>,
    /// On SIGTERM: seconds in-flight requests get to finish before exit.
    #[arg(long, default_value_t = 30.0)]
    drain_timeout_s: f64,
    /// Kernel send buffer per connection, bytes (0: the OS default, which
    /// hides a slow reader behind megabytes of buffering).
    #[arg(long, default_value_t = 65536)]
    tcp_send_buffer: u32,
    /// Slow readers: undelivered tokens allowed before the policy applies.
    #[arg(long, default_value_t = 256)]
    max_lag_tokens: u32,
    /// Slow-reader policy: `pause` (stop decoding that request until its
    /// client catches up; others go on) or `terminate` (end it with an error).
    #[arg(long, default_value = "pause")]
    slow_reader: String,
    /// A paused slow reader that has not caught up after this many seconds is ended.
    #[arg(long, default_value_t = 60.0)]
    slow_reader_timeout_s: f64,
    /// llama.cpp micro-batch size.
    #[arg(long, default_value_t = 512)]
    ubatch: u32,
    /// Submitted requests allowed to wait for a slot; more get 429.
    #[arg(long, default_value_t = 256)]
    max_waiting: usize,
    /// Largest max_tokens accepted (and the default cap when absent).
    #[arg(long, default_value_t = 4096)]
    max_tokens_limit: u32,
    /// Tokenizer pool threads.
    #[arg(long, default_value_t = 1)]
    tokenizer_threads: usize,
    /// Tokenizer jobs allowed to wait; more get 503 [default: 64, or twice
    /// --max-seqs when that is larger: a burst of one request per slot
    /// must not be refused before it could run].
    #[arg(long)]
    tokenizer_queue: Option<usize>,
    /// Events buffered per request before text deltas are coalesced.
    #[arg(long, default_value_t = 64)]
    outbox_capacity: usize,
    /// Flash attention (`--flash-attn false` to turn it off).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    flash_attn: bool,
    /// Q8_0 KV cache (half the bytes of F16; turns flash attention on).
    #[arg(long)]
    kv_q8: bool,
    /// One KV pool shared by all slots instead of a stream per slot.
    #[arg(long)]
    kv_unified: bool,
    /// Sliding-window models: keep every cell of the sliding-window layers
    /// (as full attention does) instead of `window + ubatch` cells per
    /// slot. More memory; any cached prefix is then reusable without a
    /// checkpoint.
    #[arg(long)]
    swa_full: bool,
    /// Host memory for checkpoints of state that cannot be rewound
    /// (sliding-window cells, recurrent state), taken when a prompt has
    /// been computed, in MiB; least recently used go first (0: none).
    #[arg(long, default_value_t = 256)]
    checkpoint_mb: u64,
    /// Prompts shorter than this take no checkpoint.
    #[arg(long, default_value_t = 64)]
    checkpoint_min_tokens: usize,
    /// Also a checkpoint at the end of a prompt chunk this many tokens past
    /// the slot's last one, so a prompt sharing only the start of another
    /// (a system prompt) restarts there (0: only near a prompt's end).
    #[arg(long, default_value_t = 512)]
    checkpoint_interval: usize,
    /// Prefix cache: keep finished requests' KV state in idle slots and
    /// reuse it for prompts that start with the same tokens
    /// (`--prefix-cache false` to turn it off).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    prefix_cache: bool,
    /// Shortest prefix shared with a running request worth copying its KV
    /// stream (a cached idle slot is reused without a copy). A copy stalls
    /// one step by ~15 ms at 4,096 cells per slot; recomputing costs ~1.6 ms
    /// per token (docs/BENCHMARKS.md [6/8]).
    #[arg(long, default_value_t = 64)]
    prefix_copy_min: usize,
    /// Sample plain-greedy requests on the device (llama.cpp backend
    /// sampling: argmax inside the step, only the token comes back); other
    /// requests sample on the host. Each response's `timings.sampling_path`
    /// says which.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    device_sampling: bool,
    /// Speculative decoding for requests that do not say (a request's
    /// `speculative.mode` overrides): `off`, `ngram` (drafts looked up in the
    /// prompt and the output so far: editing, summarising, code) or `draft`
    /// (needs --draft-model). Output is unchanged: greedy gives the same
    /// tokens, sampling the same distribution. Drafts adapt to each
    /// request's acceptance and stand aside when the batch is busy.
    #[arg(long, default_value = "off", value_parser = parse_spec_mode)]
    speculative: steward_engine::SpecMode,
    /// Most tokens drafted per request per step (at most 32).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=32))]
    draft_max: u32,
    /// A small GGUF model with the same vocabulary that drafts for
    /// `speculative: draft` (checked token by token at start).
    #[arg(long)]
    draft_model: Option<PathBuf>,
    /// Threads that sample and emit a step's rows, one more per 8 rows
    /// [default: half the cores up to 8 when layers are offloaded (the
    /// device idles while the host reads every row's logits), else 1].
    #[arg(long)]
    sample_threads: Option<usize>,
    /// Prefix cache host tier, MiB: an evicted entry of at least
    /// --prefix-host-min tokens is saved to host memory (llama.cpp's
    /// per-sequence state) and restored into a free slot when a prompt
    /// starts with it, instead of being recomputed. 0: off. Counted in the
    /// memory ledger (`host_prefixes`) and within --memory-budget. Default:
    /// 512 on the CPU (a restore is 16x faster than recomputing); 0 on a
    /// GPU, where saving state from device memory on every eviction cost
    /// more than recomputing (docs/BENCHMARKS.md [8/8]).
    #[arg(long)]
    prefix_host_mb: Option<u64>,
    /// Shortest prefix (tokens) the host tier saves or restores.
    #[arg(long, default_value_t = 128)]
    prefix_host_min: usize,
    /// Chat template replacing the GGUF's: a Jinja file, or a built-in
    /// (`chatml`, `gemma`, `plain`). Without it the GGUF's template is used
    /// (startup fails, naming it, if it does not compile); a GGUF without
    /// one gets the built-in its vocabulary fits (see `/v1/models`).
    #[arg(long, value_name = "FILE|chatml|gemma|plain")]
    chat_template: Option<String>,
    /// A model from a Hugging Face compatible hub, `[NAME=]owner/repo[:quant]`
    /// (repeatable): downloaded with a progress bar, resumed when
    /// interrupted, checked against the hub's size and sha256, kept in the
    /// hub cache (HF_HUB_CACHE / HF_HOME), served from it offline
    /// (HF_HUB_OFFLINE=1 or no network). HF_ENDPOINT, HF_TOKEN as usual.
    #[arg(long)]
    hf: Vec<String>,
    /// Models config file (TOML, `[[model]]` entries: name, path or hf,
    /// pinned, max_seqs, ctx_per_seq, chat_template, lora, …; see
    /// docs/MODELS.md).
    #[arg(long)]
    models_config: Option<PathBuf>,
    /// A LoRA adapter GGUF for the first model, `NAME=PATH[:SCALE]`
    /// (repeatable); served as `MODEL:NAME`, or per request with `lora`.
    #[arg(long)]
    lora: Vec<String>,
    /// Keep this model loaded from start to exit (repeatable). A server of
    /// one model always keeps it.
    #[arg(long)]
    pin: Vec<String>,
    /// Unload a model (not pinned) no request has used for this long,
    /// seconds (0: never; models still unload, least recently used first,
    /// when the memory budget needs room for another).
    #[arg(long, default_value_t = 0.0)]
    idle_unload_s: f64,
    /// With requests of several LoRA adapter sets running, steps one set
    /// keeps before the next set's turn (llama.cpp applies adapters to a
    /// whole step, and rebuilds its graph reservation when they change:
    /// ~4 ms a switch here). Default 4: mixed traffic's throughput near
    /// the bound of alternating half batches, at a longer p99 gap
    /// (docs/BENCHMARKS.md [4/8]).
    #[arg(long, default_value_t = 4)]
    adapter_slice: usize,
    #[command(flatten)]
    limits: LimitArgs,
}

/// What one client may ask for and hold (docs/LIMITS.md).
#[derive(Args)]
struct LimitArgs {
    /// Largest request body, bytes (413 past it).
    #[arg(long, default_value_t = 2 << 20)]
    max_body_bytes: usize,
    /// Most `messages` in a chat request.
    #[arg(long, default_value_t = 1024)]
    max_messages: usize,
    /// Most `tools` in a chat request.
    #[arg(long, default_value_t = 128)]
    max_tools: usize,
    /// Most `stop` sequences.
    #[arg(long, default_value_t = 4)]
    max_stop: usize,
    /// Longest `stop` sequence, bytes.
    #[arg(long, default_value_t = 256)]
    max_stop_bytes: usize,
    /// Largest grammar or JSON schema (`grammar`, `response_format`, a
    /// forced tool call's schemas), bytes.
    #[arg(long, default_value_t = 64 << 10)]
    max_grammar_bytes: usize,
    /// Deepest nesting of a JSON schema.
    #[arg(long, default_value_t = 64)]
    max_schema_depth: usize,
    /// Most choices (`n`) per request.
    #[arg(long, default_value_t = 16)]
    max_n: u32,
    /// Most logprob values in one non-streamed response (choices x tokens x
    /// (1 + top_logprobs)).
    #[arg(long, default_value_t = 1 << 20)]
    max_logprob_entries: u64,
    /// Threads compiling grammars (each with a 256 MiB stack reservation).
    #[arg(long, default_value_t = 1)]
    grammar_threads: usize,
    /// Grammar compiles allowed to wait; more get 503.
    #[arg(long, default_value_t = 16)]
    grammar_queue: usize,
    /// Longest a grammar compile may take before the request gets a 400.
    #[arg(long, default_value_t = 10.0)]
    grammar_timeout_s: f64,
    /// Most open connections; more are answered 503 and closed.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// A request's line and headers must arrive within this, seconds.
    #[arg(long, default_value_t = 10.0)]
    header_timeout_s: f64,
    /// A request's body must arrive within this, seconds (408 past it).
    #[arg(long, default_value_t = 30.0)]
    body_timeout_s: f64,
    /// A connection with no request in flight and no traffic for this long
    /// is closed, seconds.
    #[arg(long, default_value_t = 60.0)]
    idle_timeout_s: f64,
    /// Allow browser pages from this origin (CORS; repeatable; `*` for
    /// any). Default: none.
    #[arg(long)]
    cors_origin: Vec<String>,
    /// Responses API store (`store: true`): most responses kept.
    #[arg(long, default_value_t = 1024)]
    responses_store_entries: usize,
    /// Responses API store: most MiB the stored responses hold (reserved
    /// out of --memory-budget; oldest evicted first).
    #[arg(long, default_value_t = 64)]
    responses_store_mb: u64,
    /// Responses API store: seconds a stored response lives.
    #[arg(long, default_value_t = 3600.0)]
    responses_ttl_s: f64,
}

/// A flag in seconds: 0 or less is `None` (off); a value no `Duration`
/// holds is an error, not a panic.
fn secs(x: f64, flag: &str) -> anyhow::Result<Option<Duration>> {
    if x.is_nan() {
        anyhow::bail!("--{flag} must be a number of seconds");
    }
    if x <= 0.0 {
        return Ok(None);
    }
    Duration::try_from_secs_f64(x)
        .map(Some)
        .map_err(|_| anyhow::anyhow!("--{flag} {x} is out of range"))
}

fn secs_on(x: f64, flag: &str) -> anyhow::Result<Duration> {
    secs(x, flag)?.ok_or_else(|| anyhow::anyhow!("--{flag} must be above 0"))
}

pub(crate) fn resolve_model(m: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match m {
        Some(p) => Ok(p.clone()),
        None => Ok(steward_engine::fetch::ensure_default_model()?),
    }
}

/// The default model in its `--default-format` (fetched, converted once).
fn default_served_model(m: &ModelArgs) -> anyhow::Result<PathBuf> {
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

fn main() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,llama-cpp-2=off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Serve(a) => serve(*a),
        Cmd::FetchModel(a) => steward_engine::fetch::ensure_known_model(&a.name)
            .map(|p| println!("{}", p.display()))
            .map_err(Into::into),
        Cmd::BenchRuntime(a) => bench_runtime(a),
        Cmd::Convert(a) => convert(a),
        Cmd::RpcWorker(a) => rpc_cli::rpc_worker(a),
    };
    if let Err(e) = r {
        eprintln!("steward: error: {e:#}");
        std::process::exit(1);
    }
}

pub(crate) fn threads(t: Option<i32>) -> i32 {
    t.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as i32)
            .unwrap_or(2)
    })
}

fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let mut c = EngineConfig::new(PathBuf::new());
    if a.max_seqs == 0 || a.max_seqs > 256 {
        anyhow::bail!("--max-seqs must be between 1 and 256");
    }
    c.admit.max_seqs = a.max_seqs;
    c.admit.ctx_per_seq = a.ctx_per_seq.max(16);
    rpc_cli::setup(&a.model.rpc)?;
    c.model.n_gpu_layers = gpu_layers(a.model.gpu_layers)?;
    // Scheduler defaults by where the model runs (each flag overrides):
    // RPC workers are placed like GPUs but are scheduled as the CPUs they
    // usually are, unless this machine has a GPU of its own.
    let gpu = c.model.n_gpu_layers > 0 && steward_engine::model::rpc::local_gpu_count()? > 0;
    c.step.prompt_budget = a
        .prompt_budget
        .unwrap_or(if gpu { 8192 } else { 256 })
        .max(1);
    c.step.max_prefill_seqs = a
        .max_prefill_seqs
        .unwrap_or(if gpu { a.max_seqs } else { 2 })
        .max(1);
    c.step.max_decode_seqs = a.max_decode_seqs.unwrap_or(a.max_seqs).clamp(1, a.max_seqs);
    let target = a.target_step_ms.unwrap_or(if gpu { 50.0 } else { 250.0 });
    c.step.target_step_ms = (target > 0.0).then_some(target);
    c.step.target_min_prompt = a.target_min_prompt.unwrap_or(if gpu { 2048 } else { 0 });
    c.step.chunk_align = a
        .chunk_align
        .unwrap_or(if gpu && !a.kv_unified { 32 } else { 0 });
    c.step.min_prompt_budget = a.min_prompt_budget.max(1);
    c.step.ttft_target_ms = (a.ttft_target_ms > 0.0).then_some(a.ttft_target_ms);
    c.step.expedite_max_tokens = a.expedite_max_tokens;
    c.step.expedite_max_seqs = a.expedite_max_seqs.max(1);
    c.admit.queue_timeout = secs(a.queue_timeout_s, "queue-timeout-s")?;
    c.deliver.max_lag_tokens = a.max_lag_tokens.max(1);
    c.deliver.slow_reader = match a.slow_reader.as_str() {
        "pause" => steward_engine::SlowReaderPolicy::Pause,
        "terminate" => steward_engine::SlowReaderPolicy::Terminate,
        other => anyhow::bail!("--slow-reader must be pause or terminate, not {other}"),
    };
    c.deliver.slow_reader_timeout = secs(a.slow_reader_timeout_s, "slow-reader-timeout-s")?;
    let request_timeout = secs(a.request_timeout_s, "request-timeout-s")?;
    let l = &a.limits;
    c.prepare.grammar_threads = l.grammar_threads.max(1);
    c.prepare.grammar_queue = l.grammar_queue.max(1);
    c.prepare.grammar_timeout = secs_on(l.grammar_timeout_s, "grammar-timeout-s")?;
    let acc = &a.access;
    let keys = steward_server::access::Keys::new(
        a.api_key.clone(),
        acc.api_key_file.clone(),
        acc.rate_limit_rpm,
    )?;
    let tls = match (&acc.tls_cert, &acc.tls_key) {
        (Some(c), Some(k)) => Some(steward_server::access::Tls::new(c.clone(), k.clone())?),
        _ => None,
    };
    let options = steward_server::ServerOptions {
        api_key: a.api_key.clone(),
        keys: Some(keys.clone()),
        web: !acc.no_web,
        sse_keepalive: secs_on(a.sse_keepalive_s.max(0.05), "sse-keepalive-s")?,
        request_timeout,
        limits: steward_server::limits::Limits {
            max_body_bytes: l.max_body_bytes.max(1),
            max_messages: l.max_messages.max(1),
            max_tools: l.max_tools,
            max_stop: l.max_stop,
            max_stop_bytes: l.max_stop_bytes.max(1),
            max_grammar_bytes: l.max_grammar_bytes,
            max_schema_depth: l.max_schema_depth,
            max_n: l.max_n.max(1),
            max_logprob_entries: l.max_logprob_entries,
            max_timeout_s: 86_400.0 * 365.0,
        },
        body_timeout: secs_on(l.body_timeout_s, "body-timeout-s")?,
        cors_origins: l.cors_origin.clone(),
        responses_store: (
            l.responses_store_entries,
            l.responses_store_mb << 20,
            secs_on(l.responses_ttl_s, "responses-ttl-s")?,
        ),
    };
    let grace = secs(a.drain_timeout_s, "drain-timeout-s")?.unwrap_or_default();
    let conn_limits = steward_server::conn::ConnLimits {
        max_connections: l.max_connections.max(1),
        header_timeout: secs_on(l.header_timeout_s, "header-timeout-s")?,
        idle_timeout: secs_on(l.idle_timeout_s, "idle-timeout-s")?,
        // Shutdown ends within --drain-timeout-s: the engine's drain gets
        // the time but this, open responses this to finish.
        close_grace: grace.min(Duration::from_secs(1)),
        tls: tls.clone(),
    };
    c.model.n_threads = threads(a.model.threads);
    c.model.n_threads_batch = c.model.n_threads;
    c.model.n_ubatch = a.ubatch.max(1);
    c.admit.max_waiting = a.max_waiting.max(1);
    c.prepare.max_tokens_limit = a.max_tokens_limit.max(1);
    c.prepare.tokenizer_threads = a.tokenizer_threads.max(1);
    c.prepare.tokenizer_queue = a
        .tokenizer_queue
        .unwrap_or(64.max(2 * c.admit.max_seqs))
        .max(1);
    c.deliver.outbox_capacity = a.outbox_capacity.max(2);
    c.model.flash_attn = a.flash_attn;
    c.model.kv_q8 = a.kv_q8;
    if let Some(b) = &a.memory_budget {
        let total = steward_engine::memory::mem_total().unwrap_or(0);
        let budget = steward_engine::memory::parse_budget(b, total).map_err(anyhow::Error::msg)?;
        // The Responses store's cap is server memory beside the models.
        c.admit.memory_budget = Some(budget.saturating_sub(l.responses_store_mb << 20));
    }
    c.model.kv_unified = a.kv_unified;
    c.model.swa_full = a.swa_full;
    c.admit.checkpoint_bytes = a.checkpoint_mb << 20;
    c.admit.checkpoint_min_tokens = a.checkpoint_min_tokens;
    c.admit.checkpoint_interval = a.checkpoint_interval;
    c.admit.prefix_cache = a.prefix_cache;
    c.admit.prefix_copy_min = a.prefix_copy_min;
    c.sample.device_sampling = a.device_sampling;
    c.step.speculative = a.speculative;
    c.step.draft_max = a.draft_max as usize;
    c.model.draft_model = a.draft_model.clone();
    if c.step.speculative == steward_engine::SpecMode::Draft && c.model.draft_model.is_none() {
        anyhow::bail!("--speculative draft needs --draft-model");
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    c.sample.sample_threads = a
        .sample_threads
        .unwrap_or(if gpu { (cores / 2).clamp(1, 8) } else { 1 })
        .max(1);
    c.admit.prefix_host_bytes = a.prefix_host_mb.unwrap_or(if gpu { 0 } else { 512 }) << 20;
    c.admit.prefix_host_min = a.prefix_host_min;
    c.prepare.chat_template = a.chat_template.as_deref().map(template_flag).transpose()?;
    c.model.progress = true;
    c.step.adapter_slice = a.adapter_slice.max(1);
    let mut specs = serve_models::specs(
        &serve_models::ModelFlags {
            models: &a.model.model,
            hf: &a.hf,
            config: a.models_config.as_deref(),
            lora: &a.lora,
            pin: &a.pin,
        },
        &c,
        a.served_model_name.as_deref(),
        || default_served_model(&a.model),
    )?;
    let mut kv_events = steward_server::kvevents::KvEvents::new(&a.kv_events);
    for s in specs.iter_mut() {
        s.config.deliver.kv_events = kv_events.as_ref().map(|k| k.sink(&s.name));
    }
    let mut hub = steward_hub::HubOptions::from_env();
    hub.progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let registry = steward_registry::Registry::new(
        specs,
        steward_registry::Options {
            budget: c.admit.memory_budget,
            idle_unload: secs(a.idle_unload_s, "idle-unload-s")?,
            retry_after_s: 10,
        },
        serve_models::resolver(hub),
    );
    let addr: SocketAddr = format!("{}:{}", a.host, a.port)
        .parse()
        .with_context(|| format!("bad --host/--port: {}:{}", a.host, a.port))?;
    let metrics_port = a.access.metrics_port;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let sndbuf = (a.tcp_send_buffer > 0).then_some(a.tcp_send_buffer);
        let listener = steward_server::bind(addr, sndbuf)
            .with_context(|| format!("cannot listen on {addr}"))?;
        if let Some(k) = kv_events.as_mut() {
            k.start().await?;
        }
        // Serve at once: /health answers and /ready says "loading" while the
        // model loads and warms up.
        let state = steward_server::AppState::with_options(options);
        let app = steward_server::app(state.clone());
        tokio::spawn(steward_server::access::reload_on_sighup(keys, tls));
        if let Some(port) = metrics_port {
            let maddr = SocketAddr::new(addr.ip(), port);
            let ml = steward_server::bind(maddr, None)
                .with_context(|| format!("cannot listen on {maddr} (--metrics-port)"))?;
            let mapp = steward_server::metrics_app(state.clone());
            let mlimits = steward_server::conn::ConnLimits {
                tls: None,
                ..conn_limits.clone()
            };
            let mconns = Default::default();
            tokio::spawn(steward_server::conn::serve(ml, mapp, mlimits, mconns, std::future::pending()));
            tracing::info!(%maddr, "metrics and health without a key");
        }
        let drained = state.clone();
        let engine_grace = grace.saturating_sub(conn_limits.close_grace);
        let conns = state.conns.clone();
        let server = tokio::spawn(async move {
            steward_server::conn::serve(listener, app, conn_limits, conns, async move {
                shutdown_signal().await;
                if let Some(reg) = drained.models() {
                    let engines = reg.loaded();
                    futures::future::join_all(engines.iter().map(|(_, e)| drain(e, engine_grace))).await;
                }
            })
            .await;
            anyhow::Ok(())
        });
        state.set_registry(registry.clone());
        // The default model and the pinned ones load before `/ready`: the
        // default's failure stops the start (one `steward: error:` line);
        // another's leaves it `failed` in /v1/models.
        for (name, e) in registry.preload().await {
            if name == registry.default_name() {
                server.abort();
                anyhow::bail!("{}", e);
            }
            tracing::error!(model = %name, error = %e, "a pinned model failed to load; serving the others");
        }
        tokio::spawn(registry.clone().run_idle_unloader());
        let Some(warm) = registry.default_engine() else {
            server.abort();
            anyhow::bail!("the default model is not loaded");
        };
        tracing::info!(%addr, models = ?registry.names(), default = %registry.default_name(), "serving");
        let mut server = server;
        tokio::select! {
            r = &mut server => r??,
            _ = warm.wait_failed() => {
                // Not restarted in-process: the owner's state is unknown.
                // Unready and unhealthy already; exit so an orchestrator
                // restarts a clean process.
                anyhow::bail!("the default model's engine thread panicked (logged above); exiting");
            }
        }
        drop(warm);
        // Free every llama context (and its device buffers) before the
        // process exits: freed while the CUDA driver shuts down, it aborts.
        registry.stop_all().await;
        tracing::info!("shut down");
        anyhow::Ok(())
    })?;
    // The model's weights are left to the operating system: the last holder
    // of it may be a tokenizer thread, and a device free racing the
    // driver's own exit handlers aborts.
    std::process::exit(0)
}

/// SIGTERM/ctrl-c: stop admitting (new requests get 503, /ready 503), let
/// in-flight requests finish within `grace`, then cancel what is left.
async fn drain(engine: &steward_engine::EngineHandle, grace: Duration) {
    let t = std::time::Instant::now();
    engine.begin_drain();
    tracing::info!(
        in_flight = engine.in_flight(),
        grace_s = grace.as_secs_f64(),
        "draining"
    );
    while engine.in_flight() > 0 && t.elapsed() < grace {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left = engine.in_flight();
    if left > 0 {
        tracing::warn!(left, "grace period over; ending the remaining requests");
        engine.cancel_all();
        let t2 = std::time::Instant::now();
        while engine.in_flight() > 0 && t2.elapsed() < Duration::from_secs(2) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tracing::info!(drain_ms = t.elapsed().as_secs_f64() * 1e3, "drained");
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
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

fn parse_spec_mode(s: &str) -> Result<steward_engine::SpecMode, String> {
    steward_engine::SpecMode::parse(s).ok_or_else(|| format!("`{s}`: expected off, ngram or draft"))
}
