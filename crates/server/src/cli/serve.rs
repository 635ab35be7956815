//! `steward serve`: the process. Flags into settings (`config`), the
//! state directory opened (before any model: the prompt cache's disk tier
//! is in it), models into a registry, the listeners (and
//! `--metrics-port`'s), SIGHUP reloads, the default and pinned models
//! loaded before `/ready`; on SIGTERM or ctrl-c every engine drains within
//! `--drain-timeout-s`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::args::ServeArgs;
use super::config::{engine_config, http_config, secs, HttpConfig};
use super::model::default_served_model;
use super::models;

pub(crate) fn serve(a: ServeArgs) -> anyhow::Result<()> {
    check_mmproj(&a)?;
    let mut c = engine_config(&a)?;
    let durable = Durable::open(&a)?;
    c.admit.disk_dir = durable.dir.as_ref().map(|d| d.kv_dir());
    let HttpConfig {
        mut options,
        keys,
        tls,
        conn_limits,
        grace,
    } = http_config(&a)?;
    let mut specs = models::specs(
        &models::ModelFlags {
            models: &a.model.model,
            hf: &a.hf,
            config: a.models_config.as_deref(),
            lora: &a.lora,
            pin: &a.pin,
            mmproj: a.mmproj.as_deref(),
        },
        &c,
        a.served_model_name.as_deref(),
        || default_served_model(&a.model),
    )?;
    // Images travel in the body as base64: a projector raises the body
    // limit's default to hold the media limit.
    if a.limits.max_body_bytes.is_none() && specs.iter().any(|s| s.config.model.mmproj.is_some()) {
        options.limits.max_body_bytes = super::config::media_body_bytes(&a.limits.media);
    }
    let mut kv_events = steward_server::kvevents::KvEvents::new(&a.kv_events);
    for s in specs.iter_mut() {
        s.config.deliver.kv_events = kv_events.as_ref().map(|k| k.sink(&s.name));
    }
    let registry = registry(&a, specs, &c)?;
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
        state.set_tracing(a.trace.config().map_err(anyhow::Error::msg)?);
        let loaded = durable.start(&state, &a)?;
        let app = steward_server::app(state.clone());
        tokio::spawn(steward_server::access::reload_on_sighup(keys, tls));
        if let Some(port) = metrics_port {
            serve_metrics_port(SocketAddr::new(addr.ip(), port), &state, &conn_limits)?;
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
        durable.report(loaded);
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

/// The models, above their engines (none loaded yet).
fn registry(
    a: &ServeArgs,
    specs: Vec<steward_registry::ModelSpec>,
    c: &steward_engine::EngineConfig,
) -> anyhow::Result<Arc<steward_registry::Registry>> {
    let mut hub = steward_hub::HubOptions::from_env();
    hub.progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    Ok(steward_registry::Registry::new(
        specs,
        steward_registry::Options {
            budget: c.admit.memory_budget,
            idle_unload: secs(a.idle_unload_s, "idle-unload-s")?,
            retry_after_s: 10,
        },
        models::resolver(hub),
    ))
}

/// The state directory (`--state-dir`; `none`: none), opened before any
/// model loads: a named one that cannot be this server's stops the start
/// (one line); the default one unusable gives none, and why (a warning
/// once the server is up).
struct Durable {
    dir: Option<Arc<steward_server::StateDir>>,
    unusable: Option<(PathBuf, String)>,
}

impl Durable {
    fn open(a: &ServeArgs) -> anyhow::Result<Durable> {
        let Some(o) = a.batch.options() else {
            return Ok(Durable {
                dir: None,
                unusable: None,
            });
        };
        Ok(match steward_server::StateDir::open(&o.dir, o.explicit)? {
            steward_server::Opened::Dir(d) => Durable {
                dir: Some(Arc::new(d)),
                unusable: None,
            },
            steward_server::Opened::Unusable(why) => Durable {
                dir: None,
                unusable: Some((o.dir, why)),
            },
        })
    }

    /// The directory given to the server (its stored responses read back)
    /// and the Batch API started on it.
    fn start(
        &self,
        state: &Arc<steward_server::AppState>,
        a: &ServeArgs,
    ) -> anyhow::Result<Option<steward_server::Loaded>> {
        let Some(d) = &self.dir else {
            return Ok(None);
        };
        let loaded = state.set_state_dir(d.clone())?;
        if let Some(o) = a.batch.options() {
            steward_server::start_batch(state, o)?;
        }
        Ok(Some(loaded))
    }

    /// Said once the server is up (a start that fails prints its one
    /// error line alone).
    fn report(&self, loaded: Option<steward_server::Loaded>) {
        if let (Some(d), Some(l)) = (&self.dir, loaded) {
            tracing::info!(dir = %d.root().display(), responses = l.entries, responses_dropped = l.dropped, "state directory open");
        }
        if let Some((dir, why)) = &self.unusable {
            tracing::warn!(dir = %dir.display(), error = %why, "the default state directory cannot be this server's: nothing is kept across restarts (no stored responses after a restart, no Batch API, no disk tier for the prompt cache); --state-dir to name another");
        }
    }
}

/// Before any model is fetched or converted (minutes): a missing
/// projector is known now.
fn check_mmproj(a: &ServeArgs) -> anyhow::Result<()> {
    if let Some(p) = a.mmproj.as_deref().filter(|p| !p.is_file()) {
        anyhow::bail!("--mmproj {}: no such file", p.display());
    }
    Ok(())
}

/// `--metrics-port`: `metrics_app` on its own listener, without a key
/// and without TLS.
fn serve_metrics_port(
    maddr: SocketAddr,
    state: &std::sync::Arc<steward_server::AppState>,
    conn_limits: &steward_server::conn::ConnLimits,
) -> anyhow::Result<()> {
    let ml = steward_server::bind(maddr, None)
        .with_context(|| format!("cannot listen on {maddr} (--metrics-port)"))?;
    let mapp = steward_server::metrics_app(state.clone());
    let mlimits = steward_server::conn::ConnLimits {
        tls: None,
        ..conn_limits.clone()
    };
    let mconns = Default::default();
    tokio::spawn(steward_server::conn::serve(
        ml,
        mapp,
        mlimits,
        mconns,
        std::future::pending(),
    ));
    tracing::info!(%maddr, "metrics and health without a key");
    Ok(())
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
