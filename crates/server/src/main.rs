//! `steward`: the thin binary. `serve` runs the server, `fetch-model` caches
//! the default model, `bench-runtime` measures the runtime adapter's own
//! single-sequence decode speed (the ceiling: no HTTP, no scheduler). The
//! commands themselves are `cli/`.

use clap::Parser;

mod cli;

fn main() {
    let cli = cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,llama-cpp-2=off"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        cli::LogFormat::Text => fmt.init(),
        cli::LogFormat::Json => fmt.json().flatten_event(true).init(),
    }
    if let Err(e) = cli::run(cli) {
        eprintln!("steward: error: {e:#}");
        std::process::exit(1);
    }
}
