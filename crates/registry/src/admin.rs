//! Admin and housekeeping: load or unload a model now, add an adapter,
//! unload idle models, stop everything at shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use steward_engine::{AdapterInfo, AdapterSpec, EngineHandle};

use crate::{Registry, RegistryError, State};

impl Registry {
    /// Admin: load a model now (a failed one is tried again).
    pub async fn load_now(self: &Arc<Self>, name: &str) -> Result<(), RegistryError> {
        {
            let mut g = self.lock();
            let e = g
                .iter_mut()
                .find(|e| e.spec.name == name)
                .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
            if matches!(e.state, State::Failed(_)) {
                e.state = State::Unloaded;
            }
        }
        self.acquire(name).await.map(|_| ())
    }

    /// Admin: unload a model. Its in-flight requests finish within
    /// `grace`, then the rest are cancelled; new ones load it again.
    pub async fn unload(&self, name: &str, grace: Duration) -> Result<bool, RegistryError> {
        let h = {
            let mut g = self.lock();
            let e = g
                .iter_mut()
                .find(|e| e.spec.name == name)
                .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
            match std::mem::replace(&mut e.state, State::Unloaded) {
                State::Loaded(h) => {
                    e.unloads += 1;
                    h
                }
                other => {
                    e.state = other;
                    return Ok(false);
                }
            }
        };
        stop_engine(h, grace).await;
        Ok(true)
    }

    /// Admin: load a LoRA adapter into a model (loading the model first);
    /// it is also loaded whenever the model loads again.
    pub async fn add_adapter(
        self: &Arc<Self>,
        model: &str,
        spec: AdapterSpec,
    ) -> Result<AdapterInfo, RegistryError> {
        let engine = self.acquire(model).await?;
        let info = engine
            .load_adapter(spec.clone())
            .await
            .map_err(RegistryError::Admin)?;
        let mut g = self.lock();
        if let Some(e) = g.iter_mut().find(|e| e.spec.name == model) {
            e.spec.config.model.adapters.push(spec);
        }
        Ok(info)
    }

    /// Unload every unpinned model idle for `idle_unload`; the models
    /// unloaded. Call periodically (`run_idle_unloader`).
    pub async fn unload_idle(&self) -> Vec<String> {
        let Some(idle) = self.opts.idle_unload else {
            return Vec::new();
        };
        let victims: Vec<(String, EngineHandle)> = {
            let mut g = self.lock();
            let mut v = Vec::new();
            for e in g.iter_mut() {
                let State::Loaded(h) = &e.state else { continue };
                // Idle counts from the last request's end, not its start.
                if h.in_flight() > 0 {
                    e.last_used = Instant::now();
                }
                if e.spec.pinned || e.last_used.elapsed() < idle {
                    continue;
                }
                if let State::Loaded(h) = std::mem::replace(&mut e.state, State::Unloaded) {
                    e.unloads += 1;
                    v.push((e.spec.name.clone(), h));
                }
            }
            v
        };
        let mut names = Vec::new();
        for (n, h) in victims {
            tracing::info!(model = %n, idle_s = idle.as_secs_f64(), "unloading idle model");
            stop_engine(h, Duration::ZERO).await;
            names.push(n);
        }
        names
    }

    /// Check for idle models every so often, forever.
    pub async fn run_idle_unloader(self: Arc<Self>) {
        let Some(idle) = self.opts.idle_unload else {
            return;
        };
        let every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            tokio::time::sleep(every).await;
            self.unload_idle().await;
        }
    }

    /// Stop every loaded engine (shutdown).
    pub async fn stop_all(&self) {
        let hs: Vec<EngineHandle> = {
            let mut g = self.lock();
            g.iter_mut()
                .filter_map(|e| match std::mem::replace(&mut e.state, State::Unloaded) {
                    State::Loaded(h) => Some(h),
                    other => {
                        e.state = other;
                        None
                    }
                })
                .collect()
        };
        for h in hs {
            let _ = tokio::task::spawn_blocking(move || h.stop()).await;
        }
    }
}

/// Drain an engine for up to `grace`, cancel the rest, stop it. Its memory
/// returns once the last request holding the handle has ended.
async fn stop_engine(h: EngineHandle, grace: Duration) {
    h.begin_drain();
    let t = Instant::now();
    while h.in_flight() > 0 && t.elapsed() < grace {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if h.in_flight() > 0 {
        h.cancel_all();
    }
    let _ = tokio::task::spawn_blocking(move || h.stop()).await;
}
