//! `steward serve`'s flags (`ServeArgs`, the client limits in
//! `LimitArgs`), as clap reads them. What each becomes is `config.rs`.

use std::path::PathBuf;

use clap::Args;

use super::model::ModelArgs;

#[derive(Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[arg(long, default_value = "127.0.0.1", env = "STEWARD_HOST")]
    pub(crate) host: String,
    #[arg(long, default_value_t = 8080, env = "STEWARD_PORT")]
    pub(crate) port: u16,
    /// Require `Authorization: Bearer <key>` on /v1 routes and /metrics.
    #[arg(long, env = "STEWARD_API_KEY", hide_env_values = true)]
    pub(crate) api_key: Option<String>,
    #[command(flatten)]
    pub(crate) access: steward_server::access::AccessArgs,
    #[command(flatten)]
    pub(crate) kv_events: steward_server::kvevents::KvEventArgs,
    #[command(flatten)]
    pub(crate) batch: steward_server::BatchArgs,
    #[command(flatten)]
    pub(crate) trace: steward_server::trace::TraceArgs,
    /// Name clients use in the `model` field (default: the file's stem).
    #[arg(long)]
    pub(crate) served_model_name: Option<String>,
    /// Concurrent sequences (continuous batch width).
    #[arg(long, default_value_t = 32)]
    pub(crate) max_seqs: usize,
    /// KV cells per sequence: the context limit of one request.
    #[arg(long, default_value_t = 4096)]
    pub(crate) ctx_per_seq: u32,
    /// Prompt tokens computed per step (chunked prefill). Default: 256 on
    /// the CPU, 8192 when the model is offloaded to a GPU.
    #[arg(long)]
    pub(crate) prompt_budget: Option<usize>,
    /// Sequences whose prompts may advance in one step. Default on the CPU:
    /// 2 = the oldest prompt plus the express lane for short ones; more
    /// chunks per step cost extra passes over the weights (docs/BENCHMARKS.md
    /// [9/9]). On a GPU: --max-seqs (measured: 64 streams of an 8B model
    /// ramp up 1.8x faster, docs/BENCHMARKS.md [8/8]).
    #[arg(long)]
    pub(crate) max_prefill_seqs: Option<usize>,
    /// Sequences that may decode in one step (default: --max-seqs).
    #[arg(long)]
    pub(crate) max_decode_seqs: Option<usize>,
    /// Adaptive prompt budget: target step time in ms (the decoders'
    /// inter-token latency); --prompt-budget is then the maximum. 0: off
    /// (fixed budget). Default: 250 on the CPU, chosen by measurement
    /// (docs/BENCHMARKS.md [3/8]); 50 on a GPU, for long prompts only (see
    /// --target-min-prompt).
    #[arg(long)]
    pub(crate) target_step_ms: Option<f64>,
    /// The step-time target applies only while a prompt of at least this
    /// many tokens is being prefilled; other steps take the whole
    /// --prompt-budget. 0: always. Default: 0 on the CPU; 2048 on a GPU,
    /// where a burst of short prompts prefills fastest in one large step
    /// and a long prompt is what freezes the decoders (docs/BENCHMARKS.md
    /// [8/8]).
    #[arg(long)]
    pub(crate) target_min_prompt: Option<usize>,
    /// Cut a step's prompt chunks to multiples of this many tokens (a
    /// prompt's last piece padded back to it by recomputing), so that
    /// llama.cpp's equal split of per-slot KV streams makes full ubatches
    /// (0: off). Default: 32 on a GPU with per-slot streams, else 0.
    #[arg(long)]
    pub(crate) chunk_align: Option<usize>,
    /// Smallest prompt budget the adaptive rule may choose.
    #[arg(long, default_value_t = 16)]
    pub(crate) min_prompt_budget: usize,
    /// TTFT target in ms: a short prompt (at most --expedite-max-tokens
    /// tokens) waiting longer than this is finished in the next step even if
    /// that step runs past --target-step-ms. Long prompts always advance by
    /// chunks under the step target. 0: off.
    #[arg(long, default_value_t = 500.0)]
    pub(crate) ttft_target_ms: f64,
    /// Longest prompt (tokens) the TTFT target may expedite.
    #[arg(long, default_value_t = 512)]
    pub(crate) expedite_max_tokens: usize,
    /// Most overdue prompts finished in one step.
    #[arg(long, default_value_t = 2)]
    pub(crate) expedite_max_seqs: usize,
    /// Compute a burst of short prompts (more of them waiting for their
    /// first token than sequences decoding) whole in one step instead of
    /// chunking them under the latency targets. On by default on the CPU,
    /// chosen by measurement under guidellm (docs/BENCHMARKS.md [4/7]); a
    /// GPU takes short prompts whole anyway (--target-min-prompt).
    #[arg(long)]
    pub(crate) no_burst_prefill: bool,
    /// The most prompt tokens one burst computes (the rest wait for the
    /// next step). Default 2048, llama.cpp's own batch: at 32 streams of
    /// 128-token prompts, bursts of all 4096 tokens lost throughput to
    /// llama-server (0.84x in one run, docs/BENCHMARKS.md [4/7]).
    #[arg(long, default_value_t = 2048)]
    pub(crate) burst_max_tokens: usize,
    /// Inter-token latency target in ms: with decoders running, a step's
    /// prompt tokens are sized to keep the step within it (the TTFT
    /// target's claim wins where it needs more). 0: off (--target-step-ms
    /// alone). Default: 50 on the CPU, chosen by measurement under guidellm
    /// (docs/BENCHMARKS.md [4/7]); 0 on a GPU (unmeasured there).
    #[arg(long)]
    pub(crate) itl_target_ms: Option<f64>,
    /// Which waiting request is admitted first: `fcfs` (arrival order) or
    /// `priority` (the request's `priority`, lower first, under its API
    /// key's `priority=` floor; then arrival).
    #[arg(long, default_value = "fcfs", value_parser = parse_policy)]
    pub(crate) scheduling_policy: steward_engine::SchedulingPolicy,
    /// API keys with waiting work share the tokens in proportion to their
    /// key file `weight=` (default 1).
    #[arg(long)]
    pub(crate) fair_share: bool,
    /// Never move a running request aside (its state to host memory) for a
    /// better-ranked waiting one; it then waits for a slot.
    #[arg(long)]
    pub(crate) no_preempt: bool,
    /// Longest a request may wait for a slot before a 503 (seconds; 0: no limit).
    #[arg(long, default_value_t = 60.0)]
    pub(crate) queue_timeout_s: f64,
    /// Interval of SSE keep-alive comments while a stream has nothing to send (seconds).
    #[arg(long, default_value_t = 5.0)]
    pub(crate) sse_keepalive_s: f64,
    /// Longest a request may take end to end, seconds (requests may ask for
    /// less with the `timeout` field; 0: no limit).
    #[arg(long, default_value_t = 600.0)]
    pub(crate) request_timeout_s: f64,
    /// Operational memory budget: bytes (6G, 512M) or a fraction of RAM
    /// (0.5). The KV pool (and so --max-seqs) is sized to fit; startup
    /// fails if the weights alone exceed it.
    #[arg(long)]
    pub(crate) memory_budget: Option<String>,
    /// On SIGTERM: seconds in-flight requests get to finish before exit.
    #[arg(long, default_value_t = 30.0)]
    pub(crate) drain_timeout_s: f64,
    /// Kernel send buffer per connection, bytes (0: the OS default, which
    /// hides a slow reader behind megabytes of buffering).
    #[arg(long, default_value_t = 65536)]
    pub(crate) tcp_send_buffer: u32,
    /// Slow readers: undelivered tokens allowed before the policy applies.
    #[arg(long, default_value_t = 256)]
    pub(crate) max_lag_tokens: u32,
    /// Slow-reader policy: `pause` (stop decoding that request until its
    /// client catches up; others go on) or `terminate` (end it with an error).
    #[arg(long, default_value = "pause")]
    pub(crate) slow_reader: String,
    /// A paused slow reader that has not caught up after this many seconds is ended.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) slow_reader_timeout_s: f64,
    /// llama.cpp micro-batch size.
    #[arg(long, default_value_t = 512)]
    pub(crate) ubatch: u32,
    /// Submitted requests allowed to wait for a slot; more get 429.
    #[arg(long, default_value_t = 256)]
    pub(crate) max_waiting: usize,
    /// Largest max_tokens accepted (and the default cap when absent).
    #[arg(long, default_value_t = 4096)]
    pub(crate) max_tokens_limit: u32,
    /// Tokenizer pool threads.
    #[arg(long, default_value_t = 1)]
    pub(crate) tokenizer_threads: usize,
    /// Tokenizer jobs allowed to wait; more get 503 [default: 64, or twice
    /// --max-seqs when that is larger: a burst of one request per slot
    /// must not be refused before it could run].
    #[arg(long)]
    pub(crate) tokenizer_queue: Option<usize>,
    /// Events buffered per request before text deltas are coalesced.
    #[arg(long, default_value_t = 64)]
    pub(crate) outbox_capacity: usize,
    /// Flash attention (`--flash-attn false` to turn it off).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) flash_attn: bool,
    /// Q8_0 KV cache (half the bytes of F16; turns flash attention on).
    #[arg(long)]
    pub(crate) kv_q8: bool,
    /// One KV pool shared by all slots instead of a stream per slot.
    #[arg(long)]
    pub(crate) kv_unified: bool,
    /// Sliding-window models: keep every cell of the sliding-window layers
    /// (as full attention does) instead of `window + ubatch` cells per
    /// slot. More memory; any cached prefix is then reusable without a
    /// checkpoint.
    #[arg(long)]
    pub(crate) swa_full: bool,
    /// Host memory for checkpoints of state that cannot be rewound
    /// (sliding-window cells, recurrent state), taken when a prompt has
    /// been computed, in MiB; least recently used go first (0: none).
    #[arg(long, default_value_t = 256)]
    pub(crate) checkpoint_mb: u64,
    /// Prompts shorter than this take no checkpoint.
    #[arg(long, default_value_t = 64)]
    pub(crate) checkpoint_min_tokens: usize,
    /// Also a checkpoint at the end of a prompt chunk this many tokens past
    /// the slot's last one, so a prompt sharing only the start of another
    /// (a system prompt) restarts there (0: only near a prompt's end).
    #[arg(long, default_value_t = 512)]
    pub(crate) checkpoint_interval: usize,
    /// Prefix cache: keep finished requests' KV state in idle slots and
    /// reuse it for prompts that start with the same tokens
    /// (`--prefix-cache false` to turn it off).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) prefix_cache: bool,
    /// Shortest prefix shared with a running request worth copying its KV
    /// stream (a cached idle slot is reused without a copy). A copy stalls
    /// one step by ~15 ms at 4,096 cells per slot; recomputing costs ~1.6 ms
    /// per token (docs/BENCHMARKS.md [6/8]).
    #[arg(long, default_value_t = 64)]
    pub(crate) prefix_copy_min: usize,
    /// Sample plain-greedy requests on the device (llama.cpp backend
    /// sampling: argmax inside the step, only the token comes back); other
    /// requests sample on the host. Each response's `timings.sampling_path`
    /// says which.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub(crate) device_sampling: bool,
    /// Speculative decoding for requests that do not say (a request's
    /// `speculative.mode` overrides): `off`, `ngram` (drafts looked up in the
    /// prompt and the output so far: editing, summarising, code) or `draft`
    /// (needs --draft-model). Output is unchanged: greedy gives the same
    /// tokens, sampling the same distribution. Drafts adapt to each
    /// request's acceptance and stand aside when the batch is busy.
    #[arg(long, default_value = "off", value_parser = parse_spec_mode)]
    pub(crate) speculative: steward_engine::SpecMode,
    /// Most tokens drafted per request per step (at most 32).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=32))]
    pub(crate) draft_max: u32,
    /// A small GGUF model with the same vocabulary that drafts for
    /// `speculative: draft` (checked token by token at start).
    #[arg(long)]
    pub(crate) draft_model: Option<PathBuf>,
    /// A multimodal projector GGUF (llama.cpp's `mmproj`) for the first
    /// model: images (and audio, for an audio projector) in, as `image_url`
    /// and `input_audio` parts. Checked against the model at start. Other
    /// models take theirs from `mmproj` in --models-config.
    #[arg(long)]
    pub(crate) mmproj: Option<PathBuf>,
    /// Threads the media encoder runs the projector on [default: --threads;
    /// it takes turns with the steps on the same cores].
    #[arg(long)]
    pub(crate) encoder_threads: Option<i32>,
    /// Media items allowed to wait for the encoder; more get 503.
    #[arg(long, default_value_t = 32)]
    pub(crate) encoder_queue: usize,
    /// Longest a media item may wait for the encoder before a 503, seconds.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) encoder_timeout_s: f64,
    /// Encoded media kept by hash, MiB (a repeated picture skips the
    /// encoder); counted in the memory ledger (`media_cache`).
    #[arg(long, default_value_t = 256)]
    pub(crate) encoder_cache_mb: u64,
    /// Encoding stalls every stream, as a server that encodes inside its
    /// step loop does (llama-server): a comparison knob for benchmarks
    /// (scripts/bench-media.py), never a setting to serve with.
    #[arg(long)]
    pub(crate) encoder_on_owner: bool,
    /// Threads that sample and emit a step's rows, one more per 8 rows
    /// [default: half the cores up to 8 when layers are offloaded (the
    /// device idles while the host reads every row's logits), else 1].
    #[arg(long)]
    pub(crate) sample_threads: Option<usize>,
    /// Prefix cache host tier, MiB: an evicted entry of at least
    /// --prefix-host-min tokens is saved to host memory (llama.cpp's
    /// per-sequence state) and restored into a free slot when a prompt
    /// starts with it, instead of being recomputed. 0: off. Counted in the
    /// memory ledger (`host_prefixes`) and within --memory-budget. Default:
    /// 512 on the CPU (a restore is 16x faster than recomputing); 0 on a
    /// GPU, where saving state from device memory on every eviction cost
    /// more than recomputing (docs/BENCHMARKS.md [8/8]).
    #[arg(long)]
    pub(crate) prefix_host_mb: Option<u64>,
    /// Shortest prefix (tokens) the host tier saves or restores.
    #[arg(long, default_value_t = 128)]
    pub(crate) prefix_host_min: usize,
    /// Disk tier of the prompt cache, under `--state-dir` (`kv/`): entries
    /// that leave the host tier, and finished conversations' tails, kept
    /// as files that survive a restart and are restored when that costs
    /// less than recomputing. Gigabytes per model; 0: off.
    #[arg(long, default_value_t = 4.0)]
    pub(crate) disk_cache_gb: f64,
    /// Pinned prefixes, MiB of host memory per model: the prompt state a
    /// request asks to keep (Anthropic `cache_control`, `prompt_cache_key`,
    /// `cache_pin`) stays there until its TTL after its last use, and a
    /// later prompt starting with it restores it. Host memory on a GPU
    /// too. 0: no pins (such requests still succeed, pinning nothing).
    #[arg(long, default_value_t = 256)]
    pub(crate) pin_budget_mb: u64,
    /// The longest a pin is kept, seconds, whatever a request asks
    /// [default: as asked, up to 1 h through Anthropic's API and 24 h
    /// through OpenAI's].
    #[arg(long)]
    pub(crate) pin_max_ttl_s: Option<f64>,
    /// Chat template replacing the GGUF's: a Jinja file, or a built-in
    /// (`chatml`, `gemma`, `plain`). Without it the GGUF's template is used
    /// (startup fails, naming it, if it does not compile); a GGUF without
    /// one gets the built-in its vocabulary fits (see `/v1/models`).
    #[arg(long, value_name = "FILE|chatml|gemma|plain")]
    pub(crate) chat_template: Option<String>,
    /// A model from a Hugging Face compatible hub, `[NAME=]owner/repo[:quant]`
    /// (repeatable): downloaded with a progress bar, resumed when
    /// interrupted, checked against the hub's size and sha256, kept in the
    /// hub cache (HF_HUB_CACHE / HF_HOME), served from it offline
    /// (HF_HUB_OFFLINE=1 or no network). HF_ENDPOINT, HF_TOKEN as usual.
    #[arg(long)]
    pub(crate) hf: Vec<String>,
    /// Models config file (TOML, `[[model]]` entries: name, path or hf,
    /// pinned, max_seqs, ctx_per_seq, chat_template, lora, …; see
    /// docs/MODELS.md).
    #[arg(long)]
    pub(crate) models_config: Option<PathBuf>,
    /// A LoRA adapter GGUF for the first model, `NAME=PATH[:SCALE]`
    /// (repeatable); served as `MODEL:NAME`, or per request with `lora`.
    #[arg(long)]
    pub(crate) lora: Vec<String>,
    /// Keep this model loaded from start to exit (repeatable). A server of
    /// one model always keeps it.
    #[arg(long)]
    pub(crate) pin: Vec<String>,
    /// Unload a model (not pinned) no request has used for this long,
    /// seconds (0: never; models still unload, least recently used first,
    /// when the memory budget needs room for another).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) idle_unload_s: f64,
    /// With requests of several LoRA adapter sets running, steps one set
    /// keeps before the next set's turn (llama.cpp applies adapters to a
    /// whole step, and rebuilds its graph reservation when they change:
    /// ~4 ms a switch here). Default 4: mixed traffic's throughput near
    /// the bound of alternating half batches, at a longer p99 gap
    /// (docs/BENCHMARKS.md [4/8]).
    #[arg(long, default_value_t = 4)]
    pub(crate) adapter_slice: usize,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
}

/// What one client may ask for and hold (docs/LIMITS.md).
#[derive(Args)]
pub(crate) struct LimitArgs {
    /// Largest request body, bytes (413 past it) [default: 2 MiB; with a
    /// projector (--mmproj), 2 MiB plus the base64 of
    /// --media-max-request-bytes].
    #[arg(long)]
    pub(crate) max_body_bytes: Option<usize>,
    #[command(flatten)]
    pub(crate) media: MediaArgs,
    /// Most `messages` in a chat request.
    #[arg(long, default_value_t = 1024)]
    pub(crate) max_messages: usize,
    /// Most `tools` in a chat request.
    #[arg(long, default_value_t = 128)]
    pub(crate) max_tools: usize,
    /// Most `stop` sequences.
    #[arg(long, default_value_t = 4)]
    pub(crate) max_stop: usize,
    /// Longest `stop` sequence, bytes.
    #[arg(long, default_value_t = 256)]
    pub(crate) max_stop_bytes: usize,
    /// Largest grammar or JSON schema (`grammar`, `response_format`, a
    /// forced tool call's schemas), bytes.
    #[arg(long, default_value_t = 64 << 10)]
    pub(crate) max_grammar_bytes: usize,
    /// Deepest nesting of a JSON schema.
    #[arg(long, default_value_t = 64)]
    pub(crate) max_schema_depth: usize,
    /// Most choices (`n`) per request.
    #[arg(long, default_value_t = 16)]
    pub(crate) max_n: u32,
    /// Most logprob values in one non-streamed response (choices x tokens x
    /// (1 + top_logprobs)).
    #[arg(long, default_value_t = 1 << 20)]
    pub(crate) max_logprob_entries: u64,
    /// Threads compiling grammars (each with a 256 MiB stack reservation).
    #[arg(long, default_value_t = 1)]
    pub(crate) grammar_threads: usize,
    /// Grammar compiles allowed to wait; more get 503.
    #[arg(long, default_value_t = 16)]
    pub(crate) grammar_queue: usize,
    /// Longest a grammar compile may take before the request gets a 400.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) grammar_timeout_s: f64,
    /// Most open connections; more are answered 503 and closed.
    #[arg(long, default_value_t = 1024)]
    pub(crate) max_connections: usize,
    /// A request's line and headers must arrive within this, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) header_timeout_s: f64,
    /// A request's body must arrive within this, seconds (408 past it).
    #[arg(long, default_value_t = 30.0)]
    pub(crate) body_timeout_s: f64,
    /// A connection with no request in flight and no traffic for this long
    /// is closed, seconds.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) idle_timeout_s: f64,
    /// Allow browser pages from this origin (CORS; repeatable; `*` for
    /// any). Default: none.
    #[arg(long)]
    pub(crate) cors_origin: Vec<String>,
    /// Responses API store (`store: true`): most responses kept.
    #[arg(long, default_value_t = 1024)]
    pub(crate) responses_store_entries: usize,
    /// Responses API store: most MiB the stored responses hold (reserved
    /// out of --memory-budget; oldest evicted first).
    #[arg(long, default_value_t = 64)]
    pub(crate) responses_store_mb: u64,
    /// Responses API store: seconds a stored response lives.
    #[arg(long, default_value_t = 3600.0)]
    pub(crate) responses_ttl_s: f64,
}

/// What a request's images and audio may be (docs/LIMITS.md, "Media").
#[derive(Args)]
pub(crate) struct MediaArgs {
    /// Most image and audio parts in one request.
    #[arg(long, default_value_t = 16)]
    pub(crate) media_max_parts: usize,
    /// Largest image or audio file in one part, bytes (after base64).
    #[arg(long, default_value_t = 16 << 20)]
    pub(crate) media_max_part_bytes: usize,
    /// Largest sum of a request's media files, bytes.
    #[arg(long, default_value_t = 24 << 20)]
    pub(crate) media_max_request_bytes: usize,
    /// Most pixels in one image (read from its header before decoding).
    #[arg(long, default_value_t = 4096 * 4096)]
    pub(crate) media_max_pixels: u64,
    /// Most pixels in all of a request's images together.
    #[arg(long, default_value_t = 3 * 4096 * 4096)]
    pub(crate) media_max_request_pixels: u64,
    /// Longest audio clip, seconds (read from its header).
    #[arg(long, default_value_t = 600.0)]
    pub(crate) media_max_audio_seconds: f64,
    /// Accept `http(s)` image URLs (fetched by the server) from the hosts
    /// in --media-url-hosts. Off: only data URIs.
    #[arg(long)]
    pub(crate) media_allow_url: bool,
    /// Hosts media URLs may name, `a.com,b.org` (`*`: any host, which lets
    /// clients make the server fetch from anywhere it can reach).
    #[arg(long, value_delimiter = ',')]
    pub(crate) media_url_hosts: Vec<String>,
    /// Longest a media URL's fetch may take, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) media_url_timeout_s: f64,
}

fn parse_policy(s: &str) -> Result<steward_engine::SchedulingPolicy, String> {
    match s {
        "fcfs" => Ok(steward_engine::SchedulingPolicy::Fcfs),
        "priority" => Ok(steward_engine::SchedulingPolicy::Priority),
        _ => Err(format!("`{s}`: expected fcfs or priority")),
    }
}

fn parse_spec_mode(s: &str) -> Result<steward_engine::SpecMode, String> {
    steward_engine::SpecMode::parse(s).ok_or_else(|| format!("`{s}`: expected off, ngram or draft"))
}
