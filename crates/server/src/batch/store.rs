//! The jobs: OpenAI's Batch object and who owns it, one row each in
//! `steward.db` (`batches`, written in a transaction on every change of
//! state), read back at start-up (a row that cannot be read makes a
//! failed job, logged, never a panic); a job's directory
//! (`batches/<id>/`) holds its output and error logs. And `Batches`, the
//! service the handlers and the runner share (the file store, the byte
//! bound, the jobs, the runner's wake-up).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::Notify;

use super::disk;
use super::files::{visible, FileRecord, Files, Usage};
use super::input::LineError;
use super::progress;
use super::records::{self, to_io};
use super::Options;
use crate::api::state::now_secs;
use crate::state::StateDir;

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

/// A job in memory.
#[derive(Debug)]
pub(crate) struct Job {
    pub obj: BatchObject,
    pub owner: Option<String>,
    pub seq: u64,
    /// Told when the job is cancelled (the runner stops its lines).
    pub cancel: Arc<Notify>,
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
    state: Arc<StateDir>,
}

impl Batches {
    /// Read the Batch API's state back from `state` (JSON records from
    /// before `steward.db` imported first).
    pub(crate) fn open(o: Options, state: Arc<StateDir>) -> io::Result<Batches> {
        let root = state.root().to_path_buf();
        records::import_legacy(&root, state.db())?;
        let (files, mut bytes) = Files::open(&state)?;
        let dir = root.join("batches");
        disk::create_dir(&dir)?;
        disk::remove_temps(&dir)?;
        let mut jobs = Vec::new();
        let mut broken = Vec::new();
        for row in records::load_jobs(state.db()).map_err(to_io)? {
            let p = dir.join(&row.id);
            if p.is_dir() {
                disk::remove_temps(&p)?;
                bytes += progress::bytes(&p);
            }
            let (mut job, unreadable) = load_job(&p, row);
            // One a stop caught while it was checked is failed (its client
            // got no answer); both that and an unreadable row written back.
            if job.obj.status == Status::Validating {
                job.obj.fail(vec![LineError::new(
                    "validation_interrupted",
                    "the server stopped while it checked this batch: create it again",
                    None,
                    None,
                )]);
                broken.push(job.obj.id.clone());
            } else if unreadable {
                broken.push(job.obj.id.clone());
            }
            jobs.push(job);
        }
        let next = jobs.iter().map(|j| j.seq + 1).max().unwrap_or(1);
        let usage = Usage::new(bytes, o.max_bytes);
        let b = Batches {
            root,
            opts: o,
            files,
            usage,
            jobs: Mutex::new(jobs),
            next_seq: AtomicU64::new(next),
            writes: Mutex::new(()),
            wake: Notify::new(),
            state,
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

    /// Write a job's row as it is now (and `files`' records, in the same
    /// transaction).
    fn persist_with(&self, id: &str, files: &[FileRecord]) -> io::Result<()> {
        let _w = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.with_jobs(|j| {
            j.iter()
                .find(|j| j.obj.id == id)
                .map(|j| (j.seq, j.owner.clone(), j.obj.clone()))
        });
        let Some((seq, owner, obj)) = now else {
            return Ok(());
        };
        self.state
            .db()
            .write_durable(|tx| {
                for r in files {
                    records::put_file(tx, r)?;
                }
                records::put_job(tx, seq, &owner, &obj)
            })
            .map_err(to_io)?;
        for r in files {
            self.files.remember(r.clone());
        }
        Ok(())
    }

    fn persist(&self, id: &str) -> io::Result<()> {
        self.persist_with(id, &[])
    }

    /// Change a job's state and commit `files` (its output and error
    /// files' records) with it, in one transaction.
    pub(crate) fn change_with_files(
        &self,
        id: &str,
        files: Vec<FileRecord>,
        f: impl FnOnce(&mut BatchObject),
    ) -> io::Result<Option<BatchObject>> {
        let Some(obj) = self.update(id, f) else {
            return Ok(None);
        };
        self.persist_with(id, &files)?;
        Ok(Some(obj))
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

/// A job read back (its directory `dir`); one whose row cannot be read
/// is a failed job, and `true` (`open` writes it back so).
fn load_job(dir: &Path, row: records::JobRow) -> (Job, bool) {
    let (mut obj, unreadable) = match row.object {
        Ok(o) => (o, false),
        Err(e) => {
            tracing::error!(batch = %row.id, error = %e, "a batch's record cannot be read: the batch is failed");
            (records::unreadable(&row.id, &e), true)
        }
    };
    if matches!(
        obj.status,
        Status::InProgress | Status::Cancelling | Status::Finalizing
    ) {
        let (completed, failed) = progress::tally(dir);
        obj.request_counts.completed = completed;
        obj.request_counts.failed = failed;
    }
    let job = Job {
        obj,
        owner: row.owner,
        seq: row.seq,
        cancel: Arc::new(Notify::new()),
    };
    (job, unreadable)
}
