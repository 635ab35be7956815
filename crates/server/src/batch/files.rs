//! The file store (`files/` of the state directory): uploads streamed to a
//! temp file within their bounds (`--batch-max-file-bytes`,
//! `--batch-max-lines`, and the store's `--batch-max-bytes`), renamed into
//! place and committed by their record (a row of `steward.db`'s `files`,
//! written last: content without a record is a crash's leftover, removed
//! at start-up). A batch's output and error files stay in its job
//! directory; their records name the path.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Multipart;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::disk;
use super::records::{self, to_io};
use crate::api::state::now_secs;
use crate::http::error::ApiError;
use crate::state::StateDir;

/// A file's record: OpenAI's File object's fields, its owner, and where
/// its bytes are.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FileRecord {
    pub id: String,
    pub bytes: u64,
    pub created_at: u64,
    pub filename: String,
    /// `batch` (uploads) or `batch_output` (a batch's output and errors).
    pub purpose: String,
    /// The name of the API key that made it (None: a server without keys).
    #[serde(default)]
    pub owner: Option<String>,
    /// The content's path under the state directory (None:
    /// `files/<id>.jsonl`).
    #[serde(default)]
    pub path: Option<String>,
}

impl FileRecord {
    /// OpenAI's File object.
    pub(crate) fn object(&self) -> Value {
        json!({
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "expires_at": null,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": null,
        })
    }
}

/// Whether a record of `owner` is the caller's: every record on a server
/// without keys, else the records of the caller's key and those no key
/// made (made without keys, or read back without an owner).
pub(crate) fn visible(owner: &Option<String>, caller: &Option<String>) -> bool {
    caller.is_none() || owner.is_none() || owner == caller
}

/// The bytes the state directory's files hold, against `--batch-max-bytes`.
#[derive(Debug)]
pub(crate) struct Usage {
    used: AtomicU64,
    pub max: u64,
}

impl Usage {
    pub(crate) fn new(used: u64, max: u64) -> Self {
        Usage {
            used: AtomicU64::new(used),
            max,
        }
    }

    /// Take `n` more bytes if they fit under the bound.
    pub(crate) fn reserve(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|&t| t <= self.max)
            })
            .is_ok()
    }

    /// Count `n` bytes that are written whatever the bound (a running
    /// batch's answers: a started batch is finished).
    pub(crate) fn add(&self, n: u64) {
        self.used.fetch_add(n, Ordering::AcqRel);
    }

    pub(crate) fn release(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(n))
            });
    }

    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

/// The store's files.
#[derive(Debug)]
pub(crate) struct Files {
    /// The state directory.
    root: PathBuf,
    /// `root/files`.
    dir: PathBuf,
    state: Arc<StateDir>,
    index: Mutex<BTreeMap<String, FileRecord>>,
}

impl Files {
    /// Read the records back: those whose content is missing are left
    /// out, content without a record and temp files removed (each
    /// logged). Returns the store and the bytes its uploads hold.
    pub(crate) fn open(state: &Arc<StateDir>) -> io::Result<(Files, u64)> {
        let root = state.root().to_path_buf();
        let dir = root.join("files");
        disk::create_dir(&dir)?;
        disk::remove_temps(&dir)?;
        let files = Files {
            root,
            dir,
            state: state.clone(),
            index: Mutex::new(BTreeMap::new()),
        };
        let mut bytes = 0;
        let mut index = BTreeMap::new();
        let rows = records::load_files(state.db()).map_err(to_io)?;
        let known: std::collections::HashSet<String> = rows.iter().map(|r| r.id.clone()).collect();
        for r in rows {
            match fs::metadata(files.content_path(&r)) {
                Ok(m) => {
                    // Output files are counted with their jobs.
                    if r.path.is_none() {
                        bytes += m.len();
                    }
                    index.insert(r.id.clone(), r);
                }
                Err(_) => {
                    tracing::error!(file = %r.id, "a file record without its content: left out");
                }
            }
        }
        for e in fs::read_dir(&files.dir)? {
            let p = e?.path();
            if p.extension().and_then(|x| x.to_str()) != Some("jsonl") {
                continue;
            }
            let id = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            if !known.contains(id) {
                tracing::warn!(file = %p.display(), "an upload without its record (a crash before it was committed): removed");
                let _ = fs::remove_file(&p);
            }
        }
        *files.index.lock().unwrap_or_else(|e| e.into_inner()) = index;
        Ok((files, bytes))
    }

    pub(crate) fn get(&self, id: &str, caller: &Option<String>) -> Option<FileRecord> {
        let g = self.index.lock().unwrap_or_else(|e| e.into_inner());
        g.get(id).filter(|r| visible(&r.owner, caller)).cloned()
    }

    /// The caller's files, newest first (optionally of one purpose).
    pub(crate) fn list(&self, caller: &Option<String>, purpose: Option<&str>) -> Vec<FileRecord> {
        let g = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<FileRecord> = g
            .values()
            .filter(|r| visible(&r.owner, caller) && purpose.is_none_or(|p| r.purpose == p))
            .cloned()
            .collect();
        v.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        v
    }

    /// Where `r`'s bytes are.
    pub(crate) fn content_path(&self, r: &FileRecord) -> PathBuf {
        match &r.path {
            Some(p) => self.root.join(p),
            None => self.dir.join(format!("{}.jsonl", r.id)),
        }
    }

    /// Commit `r` (its content already in place): its record written.
    pub(crate) fn insert(&self, r: FileRecord) -> io::Result<()> {
        self.state
            .db()
            .write_durable(|tx| records::put_file(tx, &r))
            .map_err(to_io)?;
        self.remember(r);
        Ok(())
    }

    /// `r`, committed already, in the index.
    pub(crate) fn remember(&self, r: FileRecord) {
        self.index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(r.id.clone(), r);
    }

    /// Delete a file: its record first (the commit), then its bytes.
    /// Returns the bytes an upload held (an output's are its job's).
    pub(crate) fn remove(&self, r: &FileRecord) -> io::Result<u64> {
        self.state
            .db()
            .write_durable(|tx| records::delete_file(tx, &r.id))
            .map_err(to_io)?;
        self.index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&r.id);
        let _ = fs::remove_file(self.content_path(r));
        Ok(if r.path.is_none() { r.bytes } else { 0 })
    }

    /// Receive an upload (`purpose`, `file`) within the bounds, then commit
    /// it. Each part must keep arriving: `idle` at most between chunks.
    pub(crate) async fn upload(
        &self,
        mut mp: Multipart,
        limits: (u64, usize),
        usage: &Usage,
        owner: Option<String>,
        idle: Duration,
    ) -> Result<FileRecord, ApiError> {
        let mut purpose = None;
        let mut got: Option<(Temp<'_>, String)> = None;
        let mut others = 0usize;
        loop {
            let field = tokio::time::timeout(idle, mp.next_field())
                .await
                .map_err(|_| ApiError::body_timeout(idle))?
                .map_err(multipart_error)?;
            let Some(mut field) = field else { break };
            let name = field.name().unwrap_or_default().to_string();
            match name.as_str() {
                "file" if got.is_none() => {
                    let name = field.file_name().unwrap_or("file.jsonl");
                    let name: String = name.chars().take(256).collect();
                    let mut t = Temp::new(
                        self.dir.join(format!("{}{}", disk::TMP, disk::new_id(""))),
                        usage,
                    )?;
                    t.receive(&mut field, limits, idle).await?;
                    got = Some((t, name));
                }
                "purpose" if purpose.is_none() => {
                    purpose = Some(small_text(&mut field, idle).await?);
                }
                _ => {
                    // Fields OpenAI also takes (`expires_after[...]`) or
                    // none: read and left aside, within a bound.
                    others += 1;
                    if others > 16 {
                        return Err(ApiError::invalid("too many form fields", None));
                    }
                    small_text(&mut field, idle).await?;
                }
            }
        }
        match purpose.as_deref() {
            Some("batch") => {}
            None => return Err(missing("purpose")),
            Some(p) => {
                return Err(ApiError::invalid_value(
                    format!("`purpose` must be `batch` here (the Batch API's input), not {p:?}"),
                    "purpose",
                ))
            }
        }
        let Some((t, filename)) = got else {
            return Err(missing("file"));
        };
        let r = FileRecord {
            id: disk::new_id("file-"),
            bytes: t.written,
            created_at: now_secs(),
            filename,
            purpose: "batch".into(),
            owner,
            path: None,
        };
        t.commit(self, r.clone()).await?;
        Ok(r)
    }
}

fn missing(param: &str) -> ApiError {
    ApiError {
        code: "missing_required_parameter",
        ..ApiError::invalid(format!("the form has no `{param}` field"), Some(param))
    }
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::invalid(
        format!("the upload could not be read: {}", e.body_text()),
        None,
    )
}

/// A short text field (at most 4 KiB).
async fn small_text(
    field: &mut axum::extract::multipart::Field<'_>,
    idle: Duration,
) -> Result<String, ApiError> {
    let mut out = Vec::new();
    while let Some(c) = tokio::time::timeout(idle, field.chunk())
        .await
        .map_err(|_| ApiError::body_timeout(idle))?
        .map_err(multipart_error)?
    {
        out.extend_from_slice(&c);
        if out.len() > 4096 {
            return Err(ApiError::invalid(
                "a form field is longer than 4096 bytes",
                None,
            ));
        }
    }
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

/// An upload on its way in: removed, and its bytes given back to the
/// store's bound, unless committed.
struct Temp<'a> {
    path: PathBuf,
    file: Option<fs::File>,
    written: u64,
    usage: &'a Usage,
    committed: bool,
}

impl<'a> Temp<'a> {
    fn new(path: PathBuf, usage: &'a Usage) -> Result<Self, ApiError> {
        let file = fs::File::create(&path).map_err(io_error)?;
        Ok(Temp {
            path,
            file: Some(file),
            written: 0,
            usage,
            committed: false,
        })
    }

    /// The field's bytes, within `(max bytes, max lines)` and the store's
    /// bound.
    async fn receive(
        &mut self,
        field: &mut axum::extract::multipart::Field<'_>,
        (max_bytes, max_lines): (u64, usize),
        idle: Duration,
    ) -> Result<(), ApiError> {
        let mut newlines = 0usize;
        while let Some(c) = tokio::time::timeout(idle, field.chunk())
            .await
            .map_err(|_| ApiError::body_timeout(idle))?
            .map_err(multipart_error)?
        {
            let n = c.len() as u64;
            if self.written + n > max_bytes {
                return Err(too_large(
                    format!("the file is larger than {max_bytes} bytes (--batch-max-file-bytes)"),
                    "file_too_large",
                ));
            }
            if !self.usage.reserve(n) {
                return Err(too_large(
                    format!(
                        "the state directory's files would hold more than {} bytes (--batch-max-bytes): delete files (DELETE /v1/files/{{id}}) to make room",
                        self.usage.max
                    ),
                    "storage_full",
                ));
            }
            self.written += n;
            newlines += c.iter().filter(|&&b| b == b'\n').count();
            if newlines > max_lines {
                return Err(ApiError::invalid_value(
                    format!("the file has more than {max_lines} lines (--batch-max-lines)"),
                    "file",
                ));
            }
            if let Some(f) = self.file.as_mut() {
                f.write_all(&c).map_err(io_error)?;
            }
        }
        Ok(())
    }

    /// Durable content in place, then its record.
    async fn commit(mut self, files: &Files, r: FileRecord) -> Result<(), ApiError> {
        let file = self.file.take();
        let tmp = self.path.clone();
        let dest = files.content_path(&r);
        let dir = files.dir.clone();
        tokio::task::spawn_blocking(move || -> io::Result<()> {
            if let Some(f) = file {
                f.sync_all()?;
            }
            fs::rename(&tmp, &dest)?;
            disk::sync_dir(&dir)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(io_error)?;
        self.committed = true;
        if let Err(e) = files.insert(r.clone()) {
            let _ = fs::remove_file(files.content_path(&r));
            self.usage.release(self.written);
            return Err(io_error(e));
        }
        Ok(())
    }
}

impl Drop for Temp<'_> {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.path);
            self.usage.release(self.written);
        }
    }
}

fn too_large(message: String, code: &'static str) -> ApiError {
    ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code,
        ..ApiError::invalid(message, Some("file"))
    }
}

pub(crate) fn io_error(e: io::Error) -> ApiError {
    tracing::error!(error = %e, "Batch API: state directory I/O failed");
    ApiError::internal(format!("the state directory could not be written: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_records_are_its_own() {
        let (a, b) = (Some("a".to_string()), Some("b".to_string()));
        assert!(visible(&a, &a) && !visible(&a, &b));
        // No keys: everything; no owner: anyone's.
        assert!(visible(&a, &None) && visible(&None, &b));
    }

    #[test]
    fn the_bound_is_kept_and_released() {
        let u = Usage {
            used: AtomicU64::new(0),
            max: 10,
        };
        assert!(u.reserve(6));
        assert!(!u.reserve(5));
        u.release(6);
        assert!(u.reserve(10));
        u.add(3);
        assert_eq!(u.used(), 13);
    }

    fn open(root: &std::path::Path) -> (Arc<StateDir>, Files, u64) {
        let sd = Arc::new(StateDir::try_open(root).unwrap());
        let (f, bytes) = Files::open(&sd).unwrap();
        (sd, f, bytes)
    }

    #[test]
    fn content_without_a_record_is_removed_and_a_record_without_content_left_out() {
        let d = tempfile::tempdir().unwrap();
        let (sd, f, bytes) = open(d.path());
        assert_eq!(bytes, 0);
        let r = FileRecord {
            id: "file-a".into(),
            bytes: 3,
            created_at: 1,
            filename: "a.jsonl".into(),
            purpose: "batch".into(),
            owner: None,
            path: None,
        };
        fs::write(d.path().join("files/file-a.jsonl"), b"{}\n").unwrap();
        f.insert(r.clone()).unwrap();
        fs::write(d.path().join("files/file-orphan.jsonl"), b"x").unwrap();
        let mut gone = r.clone();
        gone.id = "file-gone".into();
        f.insert(gone).unwrap();
        drop((f, sd));
        let (sd, f, bytes) = open(d.path());
        assert_eq!(bytes, 3);
        assert!(f.get("file-a", &None).is_some());
        assert!(f.get("file-gone", &None).is_none());
        assert!(!d.path().join("files/file-orphan.jsonl").exists());
        assert!(f.get("file-a", &Some("k".into())).is_some());
        // Deleted: its record, then its bytes.
        assert_eq!(f.remove(&r).unwrap(), 3);
        drop((f, sd));
        let (_sd, f, bytes) = open(d.path());
        assert_eq!(bytes, 0);
        assert!(f.get("file-a", &None).is_none());
        assert!(!d.path().join("files/file-a.jsonl").exists());
    }

    #[test]
    fn json_records_from_before_the_database_are_imported_once() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("files")).unwrap();
        fs::write(d.path().join("files/file-old.jsonl"), b"{}\n{}\n").unwrap();
        let rec = serde_json::json!({"id": "file-old", "bytes": 6, "created_at": 5, "filename": "o.jsonl", "purpose": "batch", "owner": "k"});
        fs::write(d.path().join("files/file-old.json"), rec.to_string()).unwrap();
        fs::write(d.path().join("files/file-bad.json"), b"{not json").unwrap();
        fs::write(d.path().join("files/file-bad.jsonl"), b"x").unwrap();
        let sd = Arc::new(StateDir::try_open(d.path()).unwrap());
        records::import_legacy(d.path(), sd.db()).unwrap();
        let (f, bytes) = Files::open(&sd).unwrap();
        assert_eq!(bytes, 6);
        let r = f.get("file-old", &Some("k".into())).unwrap();
        assert_eq!((r.created_at, r.filename.as_str()), (5, "o.jsonl"));
        assert!(f.get("file-old", &Some("other".into())).is_none());
        assert!(!d.path().join("files/file-old.json").exists());
        assert!(!d.path().join("files/file-bad.jsonl").exists());
        assert!(d.path().join("files/file-bad.json.unreadable").exists());
        // Nothing left to import: the same again.
        records::import_legacy(d.path(), sd.db()).unwrap();
        assert_eq!(records::load_files(sd.db()).unwrap().len(), 1);
    }
}
