//! OpenAI's Batch API: `/v1/files` (JSONL uploads) and `/v1/batches`
//! (jobs over them), kept in the server's state directory (`state/`) and
//! run in the background through the same router a client's request goes
//! through.
//!
//! - `line.rs` (a leaf, the one thing `api/` and `app/` may use): the
//!   marker a batch line's in-process request carries, in its extensions
//!   (the auth layer) and as a task-local (the generation path marks the
//!   sequence `background`).
//! - `disk.rs` (a leaf): the append-only logs cut back to their last whole
//!   line, ids; atomic writes from `state/disk.rs`.
//! - `records.rs`: the file and batch records in `steward.db`, and the JSON
//!   records of a directory from before it, imported once.
//! - `files.rs`: the file store (`files/`: content; its record a row).
//! - `input.rs`: an input file's lines checked against OpenAI's rules.
//! - `store.rs`: the jobs (a row each), their states and counts; the
//!   service (`Batches`) every handler and the runner share.
//! - `progress.rs`: a running job's output and error logs (which
//!   `custom_id`s are answered: the logs themselves, read back at start).
//! - `runner.rs`: the one runner task: a job at a time, its lines with
//!   bounded concurrency, cancel, the completion window, finalizing.
//! - `api.rs`: the handlers.
//!
//! In the state directory (its layout: `state/mod.rs`):
//!
//! ```text
//! steward.db: files                a file's record (written last: the commit)
//! steward.db: batches              the job (its row updated in a transaction on each change of state)
//! files/file-<id>.jsonl            an uploaded file's bytes
//! batches/batch_<id>/output.jsonl  answered lines, appended one whole line at a time
//! batches/batch_<id>/errors.jsonl  failed lines, likewise
//! ```
//!
//! Exactly once: a line is appended to one log only when its answer is
//! whole, and the logs are the record of what is done: at start-up each is
//! cut back to its last complete line and its `custom_id`s are skipped. A
//! line that was running at a kill left nothing and runs again. (The logs
//! are the output files' content, so the record of a line and its answer
//! are one write: no second store to agree with.) A job's end commits its
//! output files' records and its final state in one transaction.
//!
//! May use `api/`, `http/`, `state/` (and `line.rs` only is used from
//! below).

pub(crate) mod api;
mod disk;
mod files;
mod input;
pub mod line;
mod progress;
mod records;
mod runner;
mod store;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::api::state::Shared;
use crate::state::{Opened, StateDir};

pub(crate) use store::Batches;

/// `steward serve` flags for the Batch API (flattened into `serve`'s).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BatchArgs {
    /// The state directory: stored responses, the Batch API's files and
    /// jobs, the prompt cache's disk tier (default: `state` in the cache
    /// directory models are kept in, `$STEWARD_CACHE_DIR` or
    /// `~/.cache/steward`). `none`: nothing kept across restarts, no Batch
    /// API (its routes answer 404 `batch_disabled`). One server per
    /// directory (a lock file).
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
    /// The state directory (the server's, when it has one already).
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

/// Read the Batch API's files and jobs back from the server's state
/// directory (opened here, at `o.dir`, when the server has none yet; a
/// named directory that cannot be opened is an error now, before any model
/// loads); the runner, which sends every line through `router` (the app's
/// own), starts once the default model serves, and only then does this
/// say anything (a start that fails prints its one error line alone).
/// The default directory unusable (another server's, read-only): a
/// warning then, and no Batch API.
pub(crate) fn start(state: &Shared, o: Options, router: axum::Router) -> anyhow::Result<()> {
    let explicit = o.explicit;
    let dir = o.dir.clone();
    let sd = match state.state_dir() {
        Some(sd) if sd.root() == dir => Ok(sd),
        Some(sd) => anyhow::bail!(
            "the Batch API's directory {} is not this server's state directory {}",
            dir.display(),
            sd.root().display()
        ),
        None => match StateDir::open(&dir, explicit)? {
            Opened::Dir(d) => {
                let d = Arc::new(d);
                state.set_state_dir(d.clone())?;
                Ok(d)
            }
            Opened::Unusable(why) => Err(why),
        },
    };
    let opened = match sd.map(|sd| store::Batches::open(o, sd)) {
        Ok(Ok(b)) => Ok(Arc::new(b)),
        Ok(Err(e)) if explicit => anyhow::bail!("--state-dir {}: {e}", dir.display()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(why) => Err(why),
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
