//! OpenAI's Batch API: `/v1/files` (JSONL uploads) and `/v1/batches`
//! (jobs over them), kept on disk under `--state-dir` and run in the
//! background through the same router a client's request goes through.
//!
//! - `line.rs` (a leaf, the one thing `api/` and `app/` may use): the
//!   marker a batch line's in-process request carries, in its extensions
//!   (the auth layer) and as a task-local (the generation path marks the
//!   sequence `background`).
//! - `disk.rs` (a leaf): atomic writes (temp name, fsync, rename, fsync the
//!   directory), the append-only logs cut back to their last whole line,
//!   ids, the state directory's lock.
//! - `files.rs`: the file store (`files/`: content and its record).
//! - `input.rs`: an input file's lines checked against OpenAI's rules.
//! - `store.rs`: the jobs (`batches/<id>/batch.json`), their states and
//!   counts; the service (`Batches`) every handler and the runner share.
//! - `progress.rs`: a running job's output and error logs (which
//!   `custom_id`s are answered: the logs themselves, read back at start).
//! - `runner.rs`: the one runner task: a job at a time, its lines with
//!   bounded concurrency, cancel, the completion window, finalizing.
//! - `api.rs`: the handlers.
//!
//! On disk (`--state-dir`, one server per directory: `LOCK`):
//!
//! ```text
//! files/file-<id>.jsonl           an uploaded file's bytes
//! files/file-<id>.json            its record (written last: the commit)
//! batches/batch_<id>/batch.json   the job (rewritten atomically on each change of state)
//! batches/batch_<id>/output.jsonl answered lines, appended one whole line at a time
//! batches/batch_<id>/errors.jsonl failed lines, likewise
//! ```
//!
//! Exactly once: a line is appended to one log only when its answer is
//! whole, and the logs are the record of what is done: at start-up each is
//! cut back to its last complete line and its `custom_id`s are skipped. A
//! line that was running at a kill left nothing and runs again.
//!
//! May use `api/`, `http/` (and `line.rs` only is used from below).

pub(crate) mod api;
mod disk;
mod files;
mod input;
pub mod line;
mod progress;
mod runner;
mod store;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::api::state::Shared;

pub(crate) use store::Batches;

/// `steward serve` flags for the Batch API (flattened into `serve`'s).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BatchArgs {
    /// Where the Batch API keeps files and jobs (default: `state` in the
    /// cache directory models are kept in, `$STEWARD_CACHE_DIR` or
    /// `~/.cache/steward`). `none`: no Batch API (its routes answer 404
    /// `batch_disabled`). One server per directory (a lock file).
    #[arg(long)]
    pub state_dir: Option<String>,
    /// Most bytes the state directory's files may hold (uploads and
    /// outputs); an upload past it is refused (413).
    #[arg(long, default_value_t = 1 << 30)]
    pub batch_max_bytes: u64,
    /// Largest upload to /v1/files, bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub batch_max_file_bytes: u64,
    /// Most lines a batch's input file may hold.
    #[arg(long, default_value_t = 50_000)]
    pub batch_max_lines: usize,
    /// Lines of a batch run at once (each is a background request: the
    /// engine admits it only on capacity interactive requests leave).
    #[arg(long, default_value_t = 4)]
    pub batch_concurrency: usize,
}

/// The Batch API's settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// The state directory.
    pub dir: PathBuf,
    /// Named by the operator: a directory that cannot be opened or is
    /// another server's is an error (the default one: a warning and no
    /// Batch API).
    pub explicit: bool,
    pub max_bytes: u64,
    pub max_file_bytes: u64,
    pub max_lines: usize,
    pub concurrency: usize,
    /// How long `completion_window: "24h"` lasts (tests shorten it).
    pub window: Duration,
}

impl Options {
    /// Settings for `dir` with the flags' defaults.
    pub fn new(dir: PathBuf) -> Self {
        Options {
            dir,
            explicit: true,
            max_bytes: 1 << 30,
            max_file_bytes: 64 << 20,
            max_lines: 50_000,
            concurrency: 4,
            window: Duration::from_secs(24 * 3600),
        }
    }

    /// The flags over the defaults (a 0 keeps the default).
    fn with_args(mut self, a: &BatchArgs) -> Self {
        if a.batch_max_bytes > 0 {
            self.max_bytes = a.batch_max_bytes;
        }
        if a.batch_max_file_bytes > 0 {
            self.max_file_bytes = a.batch_max_file_bytes;
        }
        if a.batch_max_lines > 0 {
            self.max_lines = a.batch_max_lines;
        }
        if a.batch_concurrency > 0 {
            self.concurrency = a.batch_concurrency;
        }
        self
    }
}

impl BatchArgs {
    /// The settings, or None for `--state-dir none`.
    pub fn options(&self) -> Option<Options> {
        let (dir, explicit) = match self.state_dir.as_deref() {
            Some("none") => return None,
            Some(d) => (PathBuf::from(d), true),
            None => (steward_hub::known::cache_dir().join("state"), false),
        };
        let mut o = Options::new(dir).with_args(self);
        o.explicit = explicit;
        Some(o)
    }
}

/// Open the state directory and read its files and jobs back (a named
/// directory that cannot be opened is an error now, before any model
/// loads); the runner, which sends every line through `router` (the app's
/// own), starts once the default model serves, and only then does this
/// say anything (a start that fails prints its one error line alone).
/// The default directory unusable (another server's, read-only): a
/// warning then, and no Batch API.
pub(crate) fn start(state: &Shared, o: Options, router: axum::Router) -> anyhow::Result<()> {
    let explicit = o.explicit;
    let dir = o.dir.clone();
    let opened = match store::Batches::open(o) {
        Ok(b) => Ok(Arc::new(b)),
        Err(e) if !explicit => Err(e),
        Err(e) => anyhow::bail!("--state-dir {}: {e}", dir.display()),
    };
    if let Ok(b) = &opened {
        let as_any: Arc<dyn std::any::Any + Send + Sync> = b.clone();
        if state.batch.set(as_any).is_err() {
            anyhow::bail!("the Batch API is already started on this server");
        }
    }
    let state = state.clone();
    tokio::spawn(async move {
        while state.engine().is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        match opened {
            Ok(b) => {
                tracing::info!(dir = %dir.display(), bytes = b.usage.used(), max_bytes = b.usage.max, "Batch API: state directory open");
                runner::run(b, router).await
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "the default state directory cannot be this server's: no Batch API here (--state-dir to name another)")
            }
        }
    });
    Ok(())
}

/// This server's Batch API, when it has one.
pub(crate) fn service(state: &Shared) -> Option<Arc<Batches>> {
    state.batch.get()?.clone().downcast::<Batches>().ok()
}
