//! The binary's commands: `serve` (`args`: its flags; `config`: the flags
//! into the engine's and the HTTP layer's settings, the one place each is
//! copied; `serve`: the process, listeners, drain; `models`: `--model`,
//! `--hf`, `--models-config`, `--lora`, `--pin` into registry specs),
//! `fetch-model`, `bench-runtime` and `convert` (`runtime`), `rpc-worker`
//! and `--rpc` (`rpc`); the model flags every command shares (`model`);
//! `top` and `chat`, the terminal clients (`term`).
//!
//! Uses the library (`steward_server`) and the engine crates only; nothing
//! in the library uses it.

use clap::{Args, Parser, Subcommand};

mod args;
mod config;
mod model;
mod models;
mod rpc;
mod runtime;
mod serve;
mod term;

use args::ServeArgs;
use runtime::{BenchRuntimeArgs, ConvertArgs};

#[derive(Parser)]
#[command(
    name = "steward",
    version = env!("STEWARD_VERSION"),
    about = "An OpenAI-compatible LLM inference server on llama.cpp"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Log lines as text or as one JSON object each (the access log's
    /// fields become JSON fields).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "STEWARD_LOG_FORMAT"
    )]
    pub(crate) log_format: LogFormat,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
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
    RpcWorker(rpc::RpcWorkerArgs),
    /// The live engine view in a terminal (the dashboard's feed): models,
    /// requests and their progress, the memory ledger, recent steps.
    Top(term::TopArgs),
    /// Chat in the terminal, streaming, with a server (or, without a URL,
    /// with the default model served here for the chat).
    Chat(term::ChatArgs),
}

#[derive(Args)]
struct FetchModelArgs {
    /// Which known model: smollm2-135m (the default; also `default`) or
    /// gemma3-270m (Gemma 3 270M Q4_K_M, a base model with no template).
    #[arg(default_value = steward_engine::fetch::DEFAULT_MODEL_NAME)]
    name: String,
}

/// Run one command.
pub(crate) fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Serve(a) => serve::serve(*a),
        Cmd::FetchModel(a) => steward_engine::fetch::ensure_known_model(&a.name)
            .map(|p| println!("{}", p.display()))
            .map_err(Into::into),
        Cmd::BenchRuntime(a) => runtime::bench_runtime(a),
        Cmd::Convert(a) => runtime::convert(a),
        Cmd::RpcWorker(a) => rpc::rpc_worker(a),
        Cmd::Top(a) => term::top(a),
        Cmd::Chat(a) => term::chat(a),
    }
}
