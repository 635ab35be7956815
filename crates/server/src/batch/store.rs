//! The jobs: OpenAI's Batch object and who owns it, one directory each
//! (`batches/<id>/batch.json`, rewritten atomically on every change of
//! state), read back at start-up (a record that cannot be read makes a
//! failed job, logged, never a panic); and `Batches`, the service the
//! handlers and the runner share (the file store, the byte bound, the
//! jobs, the runner's wake-up).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::Notify;

use super::disk;
use super::files::{visible, Files, Usage};
use super::input::LineError;
use super::progress;
use super::Options;
use crate::api::state::now_secs;

/// A batch's status, as OpenAI names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    Validating,
    Failed,
    InProgress,
    Finalizing,
    Completed,
    Expired,
    Cancelling,
    Cancelled,
}

impl Status {
    pub(crate) fn terminal(self) -> bool {
        matches!(
            self,
            Status::Failed | Status::Completed | Status::Expired | Status::Cancelled
        )
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Counts {
    pub total: u64,
    pub completed: u64,
    pub failed: u64,
}

/// `errors`: why a batch failed (validation, or its state on disk).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Errors {
    pub object: String,
    pub data: Vec<LineError>,
}

impl Errors {
    pub(crate) fn list(data: Vec<LineError>) -> Option<Self> {
        Some(Errors {
            object: "list".into(),
            data,
        })
    }
}

/// OpenAI's Batch object, field for field.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BatchObject {
    pub id: String,
    pub object: String,
    pub endpoint: String,
    pub errors: Option<Errors>,
    pub input_file_id: String,
    pub completion_window: String,
    pub status: Status,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub created_at: u64,
    pub in_progress_at: Option<u64>,
    pub expires_at: Option<u64>,
    pub finalizing_at: Option<u64>,
    pub completed_at: Option<u64>,
    pub failed_at: Option<u64>,
    pub expired_at: Option<u64>,
    pub cancelling_at: Option<u64>,
    pub cancelled_at: Option<u64>,
    pub request_counts: Counts,
    pub metadata: Option<Map<String, Value>>,
}

impl BatchObject {
    /// A new batch, `validating`.
    pub(crate) fn new(id: String, endpoint: String, input_file_id: String, window: String) -> Self {
        BatchObject {
            id,
            object: "batch".into(),
            endpoint,
            errors: None,
            input_file_id,
            completion_window: window,
            status: Status::Validating,
            output_file_id: None,
            error_file_id: None,
            created_at: now_secs(),
            in_progress_at: None,
            expires_at: None,
            finalizing_at: None,
            completed_at: None,
            failed_at: None,
            expired_at: None,
            cancelling_at: None,
            cancelled_at: None,
            request_counts: Counts::default(),
            metadata: None,
        }
    }

    /// Failed now, for `errors`.
    pub(crate) fn fail(&mut self, errors: Vec<LineError>) {
        self.status = Status::Failed;
        self.failed_at = Some(now_secs());
        self.errors = Errors::list(errors);
    }
}

/// What `batch.json` holds.
#[derive(Serialize, Deserialize)]
struct Record {
    version: u32,
    /// Creation order (lists and the runner's queue).
    seq: u64,
    /// The name of the API key that created it.
    owner: Option<String>,
    batch: BatchObject,
}

/// A job in memory.
#[derive(Debug)]
pub(crate) struct Job {
    pub obj: BatchObject,
    pub owner: Option<String>,
    pub seq: u64,
    /// Told when the job is cancelled (the runner stops its lines).
    pub cancel: Arc<Notify>,
}

/// Why the state directory could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    Locked,
    Io(io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Locked => write!(
                f,
                "another server holds this state directory (its LOCK file)"
            ),
            OpenError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

/// The Batch API of one server.
#[derive(Debug)]
pub(crate) struct Batches {
    pub(crate) root: PathBuf,
    pub(crate) opts: Options,
    pub(crate) files: Files,
    pub(crate) usage: Usage,
    jobs: Mutex<Vec<Job>>,
    next_seq: AtomicU64,
    /// One record write at a time (the last state written is the last
    /// state made).
    writes: Mutex<()>,
    /// The runner's wake-up: a new job, a cancel.
    pub(crate) wake: Notify,
    _lock: disk::DirLock,
}

impl Batches {
    /// Lock and read back the state directory.
    pub(crate) fn open(o: Options) -> Result<Batches, OpenError> {
        disk::create_dir(&o.dir)?;
        let lock = match disk::lock(&o.dir) {
            Ok(l) => l,
            Err(disk::LockError::Held) => return Err(OpenError::Locked),
            Err(disk::LockError::Io(e)) => return Err(e.into()),
        };
        let (files, mut bytes) = Files::open(&o.dir)?;
        let dir = o.dir.join("batches");
        disk::create_dir(&dir)?;
        disk::remove_temps(&dir)?;
        let mut jobs = Vec::new();
        for e in fs::read_dir(&dir)? {
            let p = e?.path();
            let Some(id) = p.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
                continue;
            };
            if !p.is_dir() || !id.starts_with("batch_") {
                continue;
            }
            disk::remove_temps(&p)?;
            bytes += progress::bytes(&p);
            jobs.push(load_job(&p, &id));
        }
        jobs.sort_by_key(|j| j.seq);
        let mut next = jobs.iter().map(|j| j.seq + 1).max().unwrap_or(1);
        // Jobs whose record could not be read (`seq` 0) are failed, last
        // in the order; one a stop caught while it was checked is failed
        // (its client got no answer); both written back so.
        let mut broken = Vec::new();
        for j in jobs.iter_mut() {
            if j.seq == 0 {
                j.seq = next;
                next += 1;
            } else if j.obj.status == Status::Validating {
                j.obj.fail(vec![LineError::new(
                    "validation_interrupted",
                    "the server stopped while it checked this batch: create it again",
                    None,
                    None,
                )]);
            } else {
                continue;
            }
            broken.push(j.obj.id.clone());
        }
        jobs.sort_by_key(|j| j.seq);
        let usage = Usage::new(bytes, o.max_bytes);
        let b = Batches {
            root: o.dir.clone(),
            opts: o,
            files,
            usage,
            jobs: Mutex::new(jobs),
            next_seq: AtomicU64::new(next),
            writes: Mutex::new(()),
            wake: Notify::new(),
            _lock: lock,
        };
        for id in broken {
            b.persist(&id)?;
        }
        Ok(b)
    }

    fn with_jobs<T>(&self, f: impl FnOnce(&mut Vec<Job>) -> T) -> T {
        f(&mut self.jobs.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn job_dir(&self, id: &str) -> PathBuf {
        self.root.join("batches").join(id)
    }

    /// A new job, on disk before this returns.
    pub(crate) fn create(&self, obj: BatchObject, owner: Option<String>) -> io::Result<()> {
        let id = obj.id.clone();
        disk::create_dir(&self.job_dir(&id))?;
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.with_jobs(|j| {
            j.push(Job {
                obj,
                owner,
                seq,
                cancel: Arc::new(Notify::new()),
            })
        });
        self.persist(&id)?;
        self.wake.notify_one();
        Ok(())
    }

    /// The caller's batch `id`.
    pub(crate) fn get(&self, id: &str, caller: &Option<String>) -> Option<BatchObject> {
        self.with_jobs(|j| {
            j.iter()
                .find(|j| j.obj.id == id && visible(&j.owner, caller))
                .map(|j| j.obj.clone())
        })
    }

    /// The caller's batches, newest first.
    pub(crate) fn list(&self, caller: &Option<String>) -> Vec<BatchObject> {
        self.with_jobs(|j| {
            j.iter()
                .rev()
                .filter(|j| visible(&j.owner, caller))
                .map(|j| j.obj.clone())
                .collect()
        })
    }

    /// A job's owner and its cancel signal.
    pub(crate) fn handles(&self, id: &str) -> Option<(Option<String>, Arc<Notify>)> {
        self.with_jobs(|j| {
            j.iter()
                .find(|j| j.obj.id == id)
                .map(|j| (j.owner.clone(), j.cancel.clone()))
        })
    }

    /// Change a job in memory (its counts; nothing to keep on disk).
    pub(crate) fn update(&self, id: &str, f: impl FnOnce(&mut BatchObject)) -> Option<BatchObject> {
        self.with_jobs(|j| {
            j.iter_mut().find(|j| j.obj.id == id).map(|j| {
                f(&mut j.obj);
                j.obj.clone()
            })
        })
    }

    /// Change a job's state, on disk before this returns.
    pub(crate) fn change(
        &self,
        id: &str,
        f: impl FnOnce(&mut BatchObject),
    ) -> io::Result<Option<BatchObject>> {
        let Some(obj) = self.update(id, f) else {
            return Ok(None);
        };
        self.persist(id)?;
        Ok(Some(obj))
    }

    /// Write a job's record as it is now.
    fn persist(&self, id: &str) -> io::Result<()> {
        let _w = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        let bytes = self.with_jobs(|j| {
            j.iter().find(|j| j.obj.id == id).map(|j| {
                serde_json::to_vec_pretty(&Record {
                    version: 1,
                    seq: j.seq,
                    owner: j.owner.clone(),
                    batch: j.obj.clone(),
                })
            })
        });
        match bytes {
            Some(b) => disk::write_atomic(
                &self.job_dir(id).join("batch.json"),
                &b.map_err(io::Error::other)?,
            ),
            None => Ok(()),
        }
    }

    /// The job the runner takes next: one to finish (cancelling,
    /// finalizing) first, else the oldest in progress.
    pub(crate) fn next_runnable(&self) -> Option<String> {
        self.with_jobs(|j| {
            j.iter()
                .find(|j| matches!(j.obj.status, Status::Cancelling | Status::Finalizing))
                .or_else(|| j.iter().find(|j| j.obj.status == Status::InProgress))
                .map(|j| j.obj.id.clone())
        })
    }

    /// Whether a batch not yet ended reads file `id`.
    pub(crate) fn file_in_use(&self, id: &str) -> bool {
        self.with_jobs(|j| {
            j.iter()
                .any(|j| !j.obj.status.terminal() && j.obj.input_file_id == id)
        })
    }
}

/// A job read back; one whose record cannot be read is a failed job
/// (`seq` 0: `open` numbers it and writes it back), the record kept beside
/// it (`batch.json.unreadable`).
fn load_job(dir: &Path, id: &str) -> Job {
    let path = dir.join("batch.json");
    let read = fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<Record>(&b).map_err(|e| e.to_string()))
        .and_then(|r| {
            if r.batch.id == id && r.seq > 0 {
                Ok(r)
            } else {
                Err(format!(
                    "its id {:?} (seq {}) is not its directory's",
                    r.batch.id, r.seq
                ))
            }
        });
    let r = match read {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(batch = %id, error = %e, "a batch's record cannot be read: the batch is failed");
            let _ = fs::rename(&path, dir.join("batch.json.unreadable"));
            let mut obj = BatchObject::new(id.into(), String::new(), String::new(), "24h".into());
            obj.fail(vec![LineError::new(
                "state_unreadable",
                format!("the batch's record in the state directory could not be read: {e}"),
                None,
                None,
            )]);
            return Job {
                obj,
                owner: None,
                seq: 0,
                cancel: Arc::new(Notify::new()),
            };
        }
    };
    let mut obj = r.batch;
    if matches!(
        obj.status,
        Status::InProgress | Status::Cancelling | Status::Finalizing
    ) {
        let (completed, failed) = progress::tally(dir);
        obj.request_counts.completed = completed;
        obj.request_counts.failed = failed;
    }
    Job {
        obj,
        owner: r.owner,
        seq: r.seq,
        cancel: Arc::new(Notify::new()),
    }
}
