//! `steward`: the thin binary. `serve` runs the server, `fetch-model` caches
//! the default model, `bench-runtime` measures the runtime adapter's own
//! single-sequence decode speed (the ceiling: no HTTP, no scheduler). The
//! commands themselves are `cli/`.

use clap::Parser;

mod cli;

fn main() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,llama-cpp-2=off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = cli::run(cli::Cli::parse()) {
        eprintln!("steward: error: {e:#}");
        std::process::exit(1);
    }
}
