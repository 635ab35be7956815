//! What every handler shares (`AppState`, `Shared`): the registry of
//! models, the API keys, the HTTP metrics, the limits and timeouts, the
//! Responses store (kept in the state directory when the server has one),
//! the open dashboard feeds; and a request's identity
//! (`request_id`, `now_secs`). Built from `ServerOptions` (`steward serve`'s
//! flags, or a test's).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use steward_engine::EngineHandle;

use crate::http::error::ApiError;
use crate::http::{access, conn, counters};
use crate::prepare::limits;

pub struct AppState {
    /// Set once the models are known; until then the server answers
    /// `/health`, and everything else says it is loading.
    pub(crate) registry: std::sync::OnceLock<Arc<steward_registry::Registry>>,
    /// The API keys in force (none: no auth) and their rate limits.
    pub keys: Arc<access::Keys>,
    /// HTTP metrics of requests no model was found for (`model=""`).
    pub metrics: Arc<counters::HttpMetrics>,
    /// Each model's HTTP metrics.
    model_metrics: std::sync::Mutex<std::collections::BTreeMap<String, Arc<counters::HttpMetrics>>>,
    /// Interval of SSE comment pings while a stream has nothing to send.
    pub sse_keepalive: std::time::Duration,
    /// Longest any request may take, end to end (None: no limit).
    pub request_timeout: Option<std::time::Duration>,
    /// What a request may ask for.
    pub limits: limits::Limits,
    /// Longest a request body may take to arrive.
    pub body_timeout: std::time::Duration,
    /// Origins allowed to call from a browser (CORS); empty: none.
    pub cors_origins: Vec<String>,
    /// Open connections (`conn::serve` keeps them).
    pub conns: Arc<conn::ConnStats>,
    /// Stored responses (`store: true`), for `previous_response_id` and
    /// `GET /v1/responses/{id}`: bounded in count, bytes and age; written
    /// through to the state directory once `set_state_dir` gives one.
    pub(crate) responses: Arc<crate::state::Responses>,
    /// The state directory (`--state-dir`), once set.
    state_dir: std::sync::OnceLock<Arc<crate::state::StateDir>>,
    /// Serve the web chat (`/`) and the dashboard (`/dashboard`).
    pub web: bool,
    pub(crate) next_seq: AtomicU64,
    /// Open dashboard feeds (`/dashboard/events`, at most
    /// `dashboard::MAX_FEEDS`).
    pub(crate) feeds: AtomicUsize,
    /// Media decoding's process-wide bound and the URL client.
    pub(crate) media: crate::prepare::media::MediaCtx,
    /// The Batch API (`batch::Batches`, typed there: `api/` sits below
    /// `batch/`), once `start_batch` has opened its state directory.
    pub(crate) batch: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
    /// Requests' records: the access log and traces (`ops/trace`), started
    /// by `set_tracing` or, with the defaults, by the first request.
    recorder: std::sync::OnceLock<Arc<crate::ops::trace::Recorder>>,
}

/// How the HTTP layer treats requests (`steward serve` flags).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub api_key: Option<String>,
    /// Keys from `--api-key-file` and rate limits, already read (None:
    /// `api_key` alone, unlimited).
    pub keys: Option<Arc<access::Keys>>,
    pub sse_keepalive: std::time::Duration,
    pub request_timeout: Option<std::time::Duration>,
    pub limits: limits::Limits,
    /// `--body-timeout-s`.
    pub body_timeout: std::time::Duration,
    /// `--cors-origin` (repeatable; `*` allows any origin).
    pub cors_origins: Vec<String>,
    /// The Responses API's store: most responses, bytes, lifetime
    /// (`--responses-store-entries`, `--responses-store-mb`,
    /// `--responses-ttl-s`).
    pub responses_store: (usize, u64, std::time::Duration),
    /// The built-in pages (`--no-web` turns them off).
    pub web: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            api_key: None,
            keys: None,
            sse_keepalive: std::time::Duration::from_secs(5),
            request_timeout: None,
            limits: limits::Limits::default(),
            body_timeout: std::time::Duration::from_secs(30),
            cors_origins: Vec::new(),
            responses_store: (1024, 64 << 20, std::time::Duration::from_secs(3600)),
            web: true,
        }
    }
}

impl AppState {
    pub fn new(engine: EngineHandle, api_key: Option<String>) -> Arc<Self> {
        Self::with_keepalive(engine, api_key, std::time::Duration::from_secs(5))
    }

    pub fn with_keepalive(
        engine: EngineHandle,
        api_key: Option<String>,
        sse_keepalive: std::time::Duration,
    ) -> Arc<Self> {
        let s = Self::loading(api_key, sse_keepalive, None);
        s.set_engine(engine);
        s
    }

    /// A state with no engine yet: serve it while the model loads.
    pub fn loading(
        api_key: Option<String>,
        sse_keepalive: std::time::Duration,
        request_timeout: Option<std::time::Duration>,
    ) -> Arc<Self> {
        Self::with_options(ServerOptions {
            api_key,
            sse_keepalive,
            request_timeout,
            ..Default::default()
        })
    }

    pub fn with_options(o: ServerOptions) -> Arc<Self> {
        Arc::new(AppState {
            registry: std::sync::OnceLock::new(),
            keys: o.keys.unwrap_or_else(|| {
                access::Keys::new(o.api_key.clone(), None, 0).expect("no key file to read")
            }),
            metrics: Arc::default(),
            model_metrics: Default::default(),
            sse_keepalive: o.sse_keepalive,
            request_timeout: o.request_timeout,
            limits: o.limits,
            body_timeout: o.body_timeout,
            cors_origins: o.cors_origins,
            conns: Arc::default(),
            responses: Arc::new(crate::state::Responses::new(
                steward_dialects::responses::Store::new(
                    o.responses_store.0,
                    o.responses_store.1 as usize,
                    o.responses_store.2,
                ),
            )),
            state_dir: std::sync::OnceLock::new(),
            web: o.web,
            next_seq: AtomicU64::new(1),
            feeds: AtomicUsize::new(0),
            media: Default::default(),
            batch: std::sync::OnceLock::new(),
            recorder: std::sync::OnceLock::new(),
        })
    }
}

pub(crate) type Shared = Arc<AppState>;

impl AppState {
    /// Serve one engine already running (once).
    pub fn set_engine(&self, engine: EngineHandle) {
        self.set_registry(steward_registry::Registry::single(engine));
    }

    /// Serve the registry's models (once).
    pub fn set_registry(&self, r: Arc<steward_registry::Registry>) {
        let _ = self.registry.set(r);
    }

    /// The registry, once set.
    pub fn models(&self) -> Option<Arc<steward_registry::Registry>> {
        self.registry.get().cloned()
    }

    /// The default model's engine, when it is loaded.
    pub fn engine(&self) -> Option<EngineHandle> {
        self.registry.get()?.default_engine()
    }

    pub(crate) fn registry(&self) -> Result<&Arc<steward_registry::Registry>, ApiError> {
        self.registry
            .get()
            .ok_or_else(|| ApiError::from(steward_engine::SubmitError::NotReady))
    }

    /// The default model's engine, or 503 while it is not loaded.
    pub(crate) fn eng(&self) -> Result<EngineHandle, ApiError> {
        self.engine()
            .ok_or_else(|| ApiError::from(steward_engine::SubmitError::NotReady))
    }

    /// A model's HTTP metrics (created on first use; one per known model).
    pub(crate) fn model_metrics(&self, model: &str) -> Arc<counters::HttpMetrics> {
        let mut g = self.model_metrics.lock().unwrap_or_else(|e| e.into_inner());
        g.entry(model.to_string()).or_default().clone()
    }

    /// Keep this server's durable state in `dir` (once, before it
    /// serves): the stored responses it holds are read back (what was
    /// read: for a log line once the server is up) and every one stored
    /// from now on is written there; the Batch API (`start_batch`) uses it.
    pub fn set_state_dir(
        &self,
        dir: Arc<crate::state::StateDir>,
    ) -> anyhow::Result<crate::state::Loaded> {
        if self.state_dir.set(dir.clone()).is_err() {
            anyhow::bail!("this server already has a state directory");
        }
        self.responses.attach(dir).map_err(anyhow::Error::msg)
    }

    /// The state directory, once set.
    pub fn state_dir(&self) -> Option<Arc<crate::state::StateDir>> {
        self.state_dir.get().cloned()
    }

    /// Start the access log and traces with these settings (once, on the
    /// Tokio runtime, before the server serves).
    pub fn set_tracing(&self, cfg: crate::ops::trace::TraceConfig) {
        let _ = self.recorder.set(crate::ops::trace::Recorder::start(cfg));
    }

    /// The records' entrance (started with the defaults if `set_tracing`
    /// was not called; on the Tokio runtime).
    pub fn recorder(&self) -> &Arc<crate::ops::trace::Recorder> {
        self.recorder
            .get_or_init(|| crate::ops::trace::Recorder::start(Default::default()))
    }

    /// The dashboard feeds open on this server.
    pub fn open_feeds(&self) -> usize {
        self.feeds.load(Ordering::Acquire)
    }
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(crate) fn request_id(headers: &HeaderMap, prefix: &str, seq: u64) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        // A token of safe characters only: it goes into every log line.
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 128
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+".contains(&b))
        })
        .map(str::to_string)
        .unwrap_or_else(|| format!("{prefix}-{:x}{:06x}", now_secs(), seq))
}
