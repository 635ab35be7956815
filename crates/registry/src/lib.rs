//! The model registry: which models this server knows, which are loaded,
//! and the one memory budget they share. It sits above engines: each loaded
//! model is one `EngineHandle` (its own execution owner thread); the
//! registry decides when one starts and stops.
//!
//! States: `unloaded` → `loading` → `loaded`, or `failed` (its reason kept,
//! shown in `/v1/models`; an admin load retries it). A request for an
//! unloaded model starts its load and waits for it. Before a model's
//! context exists its weights are mapped and its need measured
//! (`Engine::load`); room is made by unloading idle, unpinned models, least
//! recently used first. When the budget still has no room the load is
//! refused (`NoRoom`: 503 with `Retry-After` while busy models could
//! still go idle, a plain refusal when pinned models hold the budget).
//! Idle models unload after `idle_unload`; pinned ones never.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use steward_engine::{AdapterInfo, Engine, EngineConfig, EngineHandle};
use tokio::sync::watch;

mod admin;
mod card;
mod loader;
mod victim;
pub use card::{ModelCard, ModelState};
use loader::background;
use victim::{Candidate, Outcome, Role};

/// Where a model's GGUF comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Path(PathBuf),
    /// A hub reference (`owner/repo[:quant]`), resolved by the resolver.
    Hub(String),
}

/// One model the registry knows.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    /// The name clients send in `model`.
    pub name: String,
    pub source: Source,
    /// The engine's settings (`model_path` is set from the source).
    pub config: EngineConfig,
    /// Loaded at start and never unloaded.
    pub pinned: bool,
}

/// Turns a `Source` into a local file (fetching it if it must). Runs on a
/// blocking thread.
pub type Resolver = Arc<dyn Fn(&Source) -> Result<PathBuf, String> + Send + Sync>;

#[derive(Debug, Clone)]
pub struct Options {
    /// Bytes every loaded model's footprint shares (None: no limit).
    pub budget: Option<u64>,
    /// Unload a model no request has used for this long (None: never).
    pub idle_unload: Option<Duration>,
    /// Seconds a refused request is told to wait.
    pub retry_after_s: u64,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum RegistryError {
    #[error("the model `{0}` does not exist")]
    NotFound(String),
    #[error("the model `{model}` failed to load: {reason}")]
    Failed { model: String, reason: String },
    #[error("the model `{model}` does not fit in the memory budget: {reason}")]
    NoRoom {
        model: String,
        reason: String,
        /// Busy models may go idle and make room: worth retrying.
        retry: bool,
    },
    #[error("the model `{0}` was unloaded while the request waited for it")]
    Unloaded(String),
    #[error("{0}")]
    Admin(String),
}

enum State {
    Unloaded,
    /// `need`: bytes held for it in the budget while it loads.
    Loading {
        need: u64,
        done: watch::Receiver<Option<Result<(), RegistryError>>>,
    },
    Loaded(EngineHandle),
    Failed(String),
}

struct Entry {
    spec: ModelSpec,
    state: State,
    last_used: Instant,
    load_ms: Option<f64>,
    footprint: Option<u64>,
    loads: u64,
    unloads: u64,
}

/// A model resolved for one request: its engine, and the adapter a name
/// like `base:adapter` asked for.
#[derive(Clone)]
pub struct Resolved {
    pub name: String,
    pub engine: EngineHandle,
    pub adapter: Option<AdapterInfo>,
}

pub struct Registry {
    entries: Mutex<Vec<Entry>>,
    opts: Options,
    resolver: Resolver,
    /// The model a request without `model` gets.
    default: String,
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

impl Registry {
    /// A registry over these models (the first is the default). Nothing
    /// loads until `preload` or a request.
    pub fn new(specs: Vec<ModelSpec>, opts: Options, resolver: Resolver) -> Arc<Self> {
        let default = specs.first().map(|s| s.name.clone()).unwrap_or_default();
        let now = Instant::now();
        let entries = specs
            .into_iter()
            .map(|spec| Entry {
                spec,
                state: State::Unloaded,
                last_used: now,
                load_ms: None,
                footprint: None,
                loads: 0,
                unloads: 0,
            })
            .collect();
        Arc::new(Registry {
            entries: Mutex::new(entries),
            opts,
            resolver,
            default,
        })
    }

    /// A registry of one model already running (tests, embedding).
    pub fn single(engine: EngineHandle) -> Arc<Self> {
        let config = engine.config().clone();
        let r = Self::new(
            vec![ModelSpec {
                name: config.model.served_name.clone(),
                source: Source::Path(config.model.model_path.clone()),
                config,
                pinned: true,
            }],
            Options {
                budget: None,
                idle_unload: None,
                retry_after_s: 5,
            },
            Arc::new(|s| match s {
                Source::Path(p) => Ok(p.clone()),
                Source::Hub(h) => Err(format!("no hub here for {h}")),
            }),
        );
        r.lock()[0].footprint = Some(engine.footprint());
        r.lock()[0].state = State::Loaded(engine);
        r
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn default_name(&self) -> &str {
        &self.default
    }

    pub fn names(&self) -> Vec<String> {
        self.lock().iter().map(|e| e.spec.name.clone()).collect()
    }

    /// The default model's engine, when it is loaded.
    pub fn default_engine(&self) -> Option<EngineHandle> {
        self.engine(&self.default)
    }

    /// A model's engine, when it is loaded (no load started, no use noted).
    pub fn engine(&self, name: &str) -> Option<EngineHandle> {
        self.lock().iter().find_map(|e| match &e.state {
            State::Loaded(h) if e.spec.name == name => Some(h.clone()),
            _ => None,
        })
    }

    /// Every loaded model and its engine.
    pub fn loaded(&self) -> Vec<(String, EngineHandle)> {
        self.lock()
            .iter()
            .filter_map(|e| match &e.state {
                State::Loaded(h) => Some((e.spec.name.clone(), h.clone())),
                _ => None,
            })
            .collect()
    }

    /// Split `name[:adapter]` into a known model and an adapter name.
    fn split<'a>(&self, asked: &'a str) -> Result<(String, Option<&'a str>), RegistryError> {
        let g = self.lock();
        let known = |n: &str| g.iter().any(|e| e.spec.name == n);
        if asked.is_empty() {
            return Ok((self.default.clone(), None));
        }
        if known(asked) {
            return Ok((asked.to_string(), None));
        }
        // The longest known model name followed by `:adapter`.
        if let Some((base, adapter)) = asked.rsplit_once(':') {
            if known(base) && !adapter.is_empty() {
                return Ok((base.to_string(), Some(adapter)));
            }
        }
        Err(RegistryError::NotFound(asked.to_string()))
    }

    /// The engine for a request's `model` (empty: the default), loading it
    /// first when it must; waits while it loads.
    pub async fn get(self: &Arc<Self>, asked: &str) -> Result<Resolved, RegistryError> {
        let (name, adapter) = self.split(asked)?;
        let engine = self.acquire(&name).await?;
        let adapter = match adapter {
            None => None,
            Some(a) => Some(
                engine
                    .adapters()
                    .into_iter()
                    .find(|x| x.name == a)
                    .ok_or_else(|| RegistryError::NotFound(asked.to_string()))?,
            ),
        };
        Ok(Resolved {
            name,
            engine,
            adapter,
        })
    }

    /// The model a request's `model` names (None: unknown).
    pub fn model_of(&self, asked: &str) -> Option<String> {
        self.split(asked).ok().map(|(n, _)| n)
    }

    /// Whether `get` would have to wait for a load.
    pub fn would_wait(&self, asked: &str) -> bool {
        let Ok((name, _)) = self.split(asked) else {
            return false;
        };
        self.lock()
            .iter()
            .any(|e| e.spec.name == name && !matches!(e.state, State::Loaded(_)))
    }

    async fn acquire(self: &Arc<Self>, name: &str) -> Result<EngineHandle, RegistryError> {
        for _ in 0..4 {
            let waiting = {
                let mut g = self.lock();
                let e = g
                    .iter_mut()
                    .find(|e| e.spec.name == name)
                    .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
                e.last_used = Instant::now();
                match &e.state {
                    State::Loaded(h) => return Ok(h.clone()),
                    State::Failed(reason) => {
                        return Err(RegistryError::Failed {
                            model: name.to_string(),
                            reason: reason.clone(),
                        })
                    }
                    State::Loading { done, .. } => Some(done.clone()),
                    State::Unloaded => None,
                }
            };
            let mut done = match waiting {
                Some(d) => d,
                None => self.start_load(name),
            };
            let r = done
                .wait_for(Option::is_some)
                .await
                .map(|v| v.clone().unwrap_or(Ok(())))
                .unwrap_or(Ok(()));
            r?;
        }
        Err(RegistryError::Unloaded(name.to_string()))
    }

    /// Start loading `name` (if it is not already loading or loaded);
    /// returns what to wait on.
    fn start_load(
        self: &Arc<Self>,
        name: &str,
    ) -> watch::Receiver<Option<Result<(), RegistryError>>> {
        let (tx, rx) = watch::channel(None);
        {
            let mut g = self.lock();
            let Some(e) = g.iter_mut().find(|e| e.spec.name == name) else {
                let _ = tx.send(Some(Err(RegistryError::NotFound(name.to_string()))));
                return rx;
            };
            match &e.state {
                State::Loading { done, .. } => return done.clone(),
                State::Loaded(_) => {
                    let _ = tx.send(Some(Ok(())));
                    return rx;
                }
                _ => {}
            }
            e.state = State::Loading {
                need: 0,
                done: rx.clone(),
            };
        }
        let me = self.clone();
        let name = name.to_string();
        tokio::spawn(async move {
            let r = me.clone().load(&name).await;
            let mut g = me.lock();
            if let Some(e) = g.iter_mut().find(|e| e.spec.name == name) {
                match &r {
                    Ok((h, ms)) => {
                        e.footprint = Some(h.footprint());
                        e.load_ms = Some(*ms);
                        e.loads += 1;
                        e.last_used = Instant::now();
                        e.state = State::Loaded(h.clone());
                        // An engine whose owner panics is `failed`; the
                        // others go on. (Its stats, not a handle: a
                        // handle would keep an unloaded model's memory.)
                        let mut stats = h.stats_watch();
                        let (me2, n2, id) = (me.clone(), name.clone(), h.instance());
                        let same = move |e: &EngineHandle| e.instance() == id;
                        tokio::spawn(async move {
                            loop {
                                if stats.borrow_and_update().failed {
                                    me2.mark_failed_if(
                                        &n2,
                                        same,
                                        "its engine thread panicked (logged above)",
                                    );
                                    return;
                                }
                                if stats.changed().await.is_err() {
                                    return;
                                }
                            }
                        });
                    }
                    // No room is not a failure of the model: it stays
                    // unloaded and a later request tries again.
                    Err(RegistryError::NoRoom { .. }) => e.state = State::Unloaded,
                    Err(err) => {
                        // (The default model's first load is reported by
                        // the caller: a failed start is one line.)
                        if !(name == me.default && e.loads == 0) {
                            tracing::error!(model = %name, error = %err, "model failed to load");
                        }
                        e.state = State::Failed(match err {
                            RegistryError::Failed { reason, .. } => reason.clone(),
                            other => other.to_string(),
                        })
                    }
                }
            }
            drop(g);
            let _ = tx.send(Some(r.map(|_| ())));
        });
        rx
    }

    /// Resolve, map, make room, start, wait for the warm-up.
    async fn load(self: Arc<Self>, name: &str) -> Result<(EngineHandle, f64), RegistryError> {
        let t0 = Instant::now();
        let failed = |reason: String| RegistryError::Failed {
            model: name.to_string(),
            reason,
        };
        let spec = self
            .lock()
            .iter()
            .find(|e| e.spec.name == name)
            .map(|e| e.spec.clone())
            .ok_or_else(|| RegistryError::NotFound(name.to_string()))?;
        tracing::debug!(model = %name, "loading model");
        let resolver = self.resolver.clone();
        let source = spec.source.clone();
        let path = tokio::task::spawn_blocking(move || resolver(&source))
            .await
            .map_err(|e| failed(e.to_string()))?
            .map_err(failed)?;
        let mut config = spec.config.clone();
        // A hub model's projector, fetched beside its weights.
        if matches!(spec.source, Source::Hub(_)) && config.model.mmproj.is_none() {
            config.model.mmproj = projector_beside(&path);
        }
        config.model.model_path = path;
        config.model.served_name = name.to_string();
        let loaded = background(move || Engine::load(config))
            .await
            .map_err(failed)?
            .map_err(|e| failed(e.to_string()))?;
        let budget = self
            .make_room(name, loaded.full_need(), loaded.need(1))
            .await?;
        let handle = tokio::task::spawn_blocking(move || loaded.start(budget))
            .await
            .map_err(|e| failed(e.to_string()))?
            .map_err(|e| failed(e.to_string()))?;
        if !handle.wait_ready().await {
            let h = handle.clone();
            let _ = tokio::task::spawn_blocking(move || h.stop()).await;
            return Err(failed(
                "its engine stopped during the warm-up step (logged above)".into(),
            ));
        }
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        tracing::info!(model = %name, load_ms = ms, footprint_gib = gib(handle.footprint()), "model ready");
        Ok((handle, ms))
    }

    /// Make room for `need` bytes (at least `min`: one slot) by unloading
    /// idle, unpinned models, least recently used first. Returns the
    /// budget the model may use (None: no budget).
    async fn make_room(
        &self,
        name: &str,
        need: u64,
        min: u64,
    ) -> Result<Option<u64>, RegistryError> {
        let Some(budget) = self.opts.budget else {
            return Ok(None);
        };
        loop {
            let (victim, left, busy, pinned) = {
                let mut g = self.lock();
                let mut busy = Vec::new();
                let mut pinned = Vec::new();
                // The other models that hold memory, and their entries.
                let mut at = Vec::new();
                let mut others = Vec::new();
                for (i, e) in g.iter().enumerate() {
                    if e.spec.name == name {
                        continue;
                    }
                    let (bytes, role) = match &e.state {
                        State::Loaded(h) => {
                            let role = if e.spec.pinned {
                                pinned.push(e.spec.name.clone());
                                Role::Pinned
                            } else if h.in_flight() > 0 {
                                busy.push(e.spec.name.clone());
                                Role::Busy
                            } else {
                                Role::Idle
                            };
                            (e.footprint.unwrap_or(0), role)
                        }
                        State::Loading { need, .. } => (*need, Role::Loading),
                        _ => continue,
                    };
                    at.push(i);
                    others.push(Candidate {
                        bytes,
                        last_used: e.last_used,
                        role,
                    });
                }
                let plan = victim::plan(&others, budget, need, min);
                let left = match (plan.victims.first(), plan.outcome) {
                    // It fits (with fewer slots, at worst): hold its share.
                    (None, Outcome::Fits { left }) => {
                        if let Some(e) = g.iter_mut().find(|e| e.spec.name == name) {
                            if let State::Loading { need: n, .. } = &mut e.state {
                                *n = need.min(left);
                            }
                        }
                        return Ok(Some(left));
                    }
                    (_, Outcome::Fits { left } | Outcome::NoRoom { left }) => left,
                };
                // One victim at a time, then a new plan: the others may
                // change while it stops.
                let victim = plan.victims.first().map(|&v| {
                    let e = &mut g[at[v]];
                    e.unloads += 1;
                    let h = match std::mem::replace(&mut e.state, State::Unloaded) {
                        State::Loaded(h) => Some(h),
                        _ => None,
                    };
                    (e.spec.name.clone(), h)
                });
                (victim, left, busy, pinned)
            };
            match victim {
                Some((vname, Some(h))) => {
                    tracing::info!(model = %vname, for_model = %name, "unloading the least recently used idle model to make room");
                    let _ = tokio::task::spawn_blocking(move || h.stop()).await;
                }
                _ => {
                    let mut reason = format!(
                        "it needs {:.2} GiB (at least {:.2} GiB with one sequence); {:.2} GiB of the {:.2} GiB budget are free",
                        gib(need),
                        gib(min),
                        gib(left),
                        gib(budget)
                    );
                    if !pinned.is_empty() {
                        reason += &format!("; pinned models hold the rest: {}", pinned.join(", "));
                    }
                    if !busy.is_empty() {
                        reason += &format!(
                            "; busy models: {} (retry when they are idle)",
                            busy.join(", ")
                        );
                    }
                    return Err(RegistryError::NoRoom {
                        model: name.to_string(),
                        reason,
                        retry: !busy.is_empty(),
                    });
                }
            }
        }
    }

    /// Load the pinned models (and the default) now; errors are kept as
    /// the models' `failed` state and returned.
    pub async fn preload(self: &Arc<Self>) -> Vec<(String, RegistryError)> {
        let names: Vec<String> = self
            .lock()
            .iter()
            .filter(|e| e.spec.pinned || e.spec.name == self.default)
            .map(|e| e.spec.name.clone())
            .collect();
        let mut errors = Vec::new();
        for n in names {
            if let Err(e) = self.acquire(&n).await {
                errors.push((n, e));
            }
        }
        errors
    }

    /// Mark a loaded model whose engine failed (its owner panicked) as
    /// failed; the others go on.
    pub fn mark_failed(&self, name: &str, reason: &str) {
        self.mark_failed_if(name, |_| true, reason)
    }

    fn mark_failed_if(&self, name: &str, which: impl Fn(&EngineHandle) -> bool, reason: &str) {
        let mut g = self.lock();
        if let Some(e) = g.iter_mut().find(|e| e.spec.name == name) {
            if matches!(&e.state, State::Loaded(h) if which(h)) {
                tracing::error!(model = %name, reason, "model failed");
                e.state = State::Failed(reason.to_string());
            }
        }
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }
}

/// An `mmproj*.gguf` in the folder of `weights` (F16 first, else the first
/// in name order): what the hub fetches beside a vision model's weights.
fn projector_beside(weights: &std::path::Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(weights.parent()?)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().to_ascii_lowercase())
                .is_some_and(|n| n.contains("mmproj") && n.ends_with(".gguf"))
        })
        .collect();
    found.sort();
    let f16 = found.iter().position(|p| {
        p.to_string_lossy().to_ascii_lowercase().contains("f16")
            && !p.to_string_lossy().to_ascii_lowercase().contains("bf16")
    });
    match f16 {
        Some(i) => Some(found.swap_remove(i)),
        None => found.into_iter().next(),
    }
}
