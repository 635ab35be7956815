//! `steward rpc-worker` and `--rpc`: one model across machines through
//! llama.cpp's RPC backend (see `steward_engine::model::rpc`).

use std::net::IpAddr;

use clap::Args;
use steward_engine::model::rpc;

#[derive(Args)]
pub struct RpcWorkerArgs {
    /// Address to bind. Loopback by default: the RPC protocol has NO
    /// authentication and no encryption, so anyone who can reach the port
    /// can use this machine's memory and compute. Bind another address only
    /// on a network you trust (a private link between the machines).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    #[arg(long, default_value_t = 50052)]
    pub port: u16,
    /// CPU threads for graphs run on this worker's CPU (default: all cores).
    #[arg(long, env = "STEWARD_THREADS")]
    pub threads: Option<i32>,
    /// Keep received weights in this directory, so a restarted client sends
    /// only their hashes (llama.cpp's RPC tensor cache).
    #[arg(long)]
    pub cache_dir: Option<String>,
}

pub fn rpc_worker(a: RpcWorkerArgs) -> anyhow::Result<()> {
    if !a.host.is_loopback() {
        tracing::warn!(
            host = %a.host,
            "the RPC worker listens beyond loopback: the protocol has no authentication, \
             anyone who can reach this port can allocate memory and run graphs here"
        );
    }
    let endpoint = match a.host {
        IpAddr::V6(h) => format!("[{h}]:{}", a.port),
        IpAddr::V4(h) => format!("{h}:{}", a.port),
    };
    let threads = super::model::threads(a.threads).max(1) as usize;
    tracing::info!(%endpoint, threads, "RPC worker: serving this machine's devices to one client at a time");
    rpc::run_worker(&endpoint, threads, a.cache_dir.as_deref())?;
    Ok(())
}

/// Register `--rpc` workers (once per process) before any model loads.
pub fn setup(endpoints: &[String]) -> anyhow::Result<()> {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if endpoints.is_empty() || DONE.get().is_some() {
        return Ok(());
    }
    let names = rpc::add_servers(endpoints)?;
    tracing::info!(workers = ?endpoints, devices = ?names, "RPC workers registered: layers are split across them");
    let _ = DONE.set(());
    Ok(())
}
