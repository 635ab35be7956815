//! The Batch API's records in `steward.db`: the `files` table (OpenAI's
//! File objects, their owners and content paths) and the `batches` table
//! (each job's Batch object as JSON, its creation order and owner), both
//! from `state/db.rs`'s migration 2, written in transactions. And the
//! JSON records of a state directory from before them
//! (`files/file-<id>.json`, `batches/<id>/batch.json`), imported once: in
//! one transaction, then removed (a kill between the two imports them
//! again, which changes nothing).

use std::fs;
use std::io;
use std::path::Path;

use rusqlite::{params, OptionalExtension, Transaction};
use serde::Deserialize;

use super::files::FileRecord;
use super::input::LineError;
use super::store::BatchObject;
use crate::state::db::Db;
use crate::state::disk;

/// A job's row.
pub(crate) struct JobRow {
    pub seq: u64,
    pub id: String,
    pub owner: Option<String>,
    /// The Batch object, or why its JSON does not read back.
    pub object: Result<BatchObject, String>,
}

pub(crate) fn to_io(e: rusqlite::Error) -> io::Error {
    io::Error::other(format!("steward.db: {e}"))
}

/// Every file record.
pub(crate) fn load_files(db: &Db) -> rusqlite::Result<Vec<FileRecord>> {
    db.read(|c| {
        let mut s = c.prepare(
            "SELECT id, bytes, created_at, filename, purpose, owner, path FROM files ORDER BY id",
        )?;
        let rows = s.query_map([], |r| {
            Ok(FileRecord {
                id: r.get(0)?,
                bytes: r.get::<_, i64>(1)?.max(0) as u64,
                created_at: r.get::<_, i64>(2)?.max(0) as u64,
                filename: r.get(3)?,
                purpose: r.get(4)?,
                owner: r.get(5)?,
                path: r.get(6)?,
            })
        })?;
        rows.collect()
    })
}

/// Write `r` (a new record, or the same again).
pub(crate) fn put_file(tx: &Transaction<'_>, r: &FileRecord) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT OR REPLACE INTO files (id, bytes, created_at, filename, purpose, owner, path) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            r.id,
            i64::try_from(r.bytes).unwrap_or(i64::MAX),
            i64::try_from(r.created_at).unwrap_or(i64::MAX),
            r.filename,
            r.purpose,
            r.owner,
            r.path
        ],
    )?;
    Ok(())
}

pub(crate) fn delete_file(tx: &Transaction<'_>, id: &str) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM files WHERE id = ?1", [id])?;
    Ok(())
}

/// Every job, in creation order.
pub(crate) fn load_jobs(db: &Db) -> rusqlite::Result<Vec<JobRow>> {
    db.read(|c| {
        let mut s = c.prepare("SELECT seq, id, owner, object FROM batches ORDER BY seq")?;
        let rows = s.query_map([], |r| {
            let id: String = r.get(1)?;
            let object = serde_json::from_str::<BatchObject>(&r.get::<_, String>(3)?)
                .map_err(|e| e.to_string())
                .and_then(|o| {
                    if o.id == id {
                        Ok(o)
                    } else {
                        Err(format!("its id {:?} is not its row's", o.id))
                    }
                });
            Ok(JobRow {
                seq: r.get::<_, i64>(0)?.max(0) as u64,
                id,
                owner: r.get(2)?,
                object,
            })
        })?;
        rows.collect()
    })
}

/// Write a job as it is now (a new row, or its row updated).
pub(crate) fn put_job(
    tx: &Transaction<'_>,
    seq: u64,
    owner: &Option<String>,
    obj: &BatchObject,
) -> rusqlite::Result<()> {
    let object = serde_json::to_string(obj)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    let status = serde_json::to_value(obj.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    tx.execute(
        "INSERT INTO batches (seq, id, owner, status, object) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, status = excluded.status, object = excluded.object",
        params![i64::try_from(seq).unwrap_or(i64::MAX), obj.id, owner, status, object],
    )?;
    Ok(())
}

/// What a `batch.json` from before `steward.db` holds.
#[derive(Deserialize)]
struct LegacyJob {
    seq: u64,
    owner: Option<String>,
    batch: BatchObject,
}

/// Import the JSON records a state directory from before `steward.db`
/// holds (none: nothing to do). A record that does not read is logged
/// and renamed `*.unreadable` (a file left out: its content is then an
/// orphan; a job failed, `state_unreadable`).
pub(crate) fn import_legacy(root: &Path, db: &Db) -> io::Result<()> {
    let mut files = Vec::new();
    let mut done = Vec::new();
    let fdir = root.join("files");
    if fdir.is_dir() {
        for e in fs::read_dir(&fdir)? {
            let p = e?.path();
            if p.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            match read_file_record(&p) {
                Ok(r) => files.push(r),
                Err(e) => {
                    tracing::error!(file = %p.display(), error = %e, "a file record that cannot be read: left out");
                    let _ = fs::rename(&p, p.with_extension("json.unreadable"));
                    continue;
                }
            }
            done.push(p);
        }
    }
    let mut jobs = Vec::new();
    let bdir = root.join("batches");
    if bdir.is_dir() {
        for e in fs::read_dir(&bdir)? {
            let dir = e?.path();
            let Some(id) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
                continue;
            };
            let p = dir.join("batch.json");
            if !id.starts_with("batch_") || !p.is_file() {
                continue;
            }
            jobs.push(read_job(&p, &id));
            done.push(p);
        }
    }
    if done.is_empty() {
        return Ok(());
    }
    jobs.sort_by_key(|j| j.seq.unwrap_or(u64::MAX));
    db.write_durable(|tx| {
        for r in &files {
            let known: Option<String> = tx
                .query_row("SELECT id FROM files WHERE id = ?1", [&r.id], |r| r.get(0))
                .optional()?;
            if known.is_none() {
                put_file(tx, r)?;
            }
        }
        for j in &jobs {
            import_job(tx, j)?;
        }
        Ok(())
    })
    .map_err(to_io)?;
    tracing::info!(
        files = files.len(),
        batches = jobs.len(),
        "the Batch API's JSON records moved into steward.db"
    );
    for p in done {
        let _ = fs::remove_file(&p);
    }
    for d in [fdir, bdir] {
        if d.is_dir() {
            disk::sync_dir(&d)?;
        }
    }
    Ok(())
}

fn read_file_record(p: &Path) -> Result<FileRecord, String> {
    let bytes = fs::read(p).map_err(|e| e.to_string())?;
    let r: FileRecord = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if p.file_stem().and_then(|s| s.to_str()) != Some(r.id.as_str()) {
        return Err(format!("its id {:?} is not its name", r.id));
    }
    Ok(r)
}

/// A legacy job read: its seq (None: unreadable, failed, numbered last).
struct Legacy {
    seq: Option<u64>,
    owner: Option<String>,
    obj: BatchObject,
}

fn read_job(p: &Path, id: &str) -> Legacy {
    let read = fs::read(p)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<LegacyJob>(&b).map_err(|e| e.to_string()))
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
    match read {
        Ok(r) => Legacy {
            seq: Some(r.seq),
            owner: r.owner,
            obj: r.batch,
        },
        Err(e) => {
            tracing::error!(batch = %id, error = %e, "a batch's record cannot be read: the batch is failed");
            let _ = fs::copy(p, p.with_extension("json.unreadable"));
            Legacy {
                seq: None,
                owner: None,
                obj: unreadable(id, &e),
            }
        }
    }
}

/// A job whose record does not read back: failed, saying why.
pub(crate) fn unreadable(id: &str, why: &str) -> BatchObject {
    let mut obj = BatchObject::new(id.into(), String::new(), String::new(), "24h".into());
    obj.fail(vec![LineError::new(
        "state_unreadable",
        format!("the batch's record in the state directory could not be read: {why}"),
        None,
        None,
    )]);
    obj
}

/// One legacy job into the table: skipped if its id is there; its seq
/// kept if free, else (and for an unreadable one) the next.
fn import_job(tx: &Transaction<'_>, j: &Legacy) -> rusqlite::Result<()> {
    let known: Option<i64> = tx
        .query_row("SELECT seq FROM batches WHERE id = ?1", [&j.obj.id], |r| {
            r.get(0)
        })
        .optional()?;
    if known.is_some() {
        return Ok(());
    }
    let taken = |seq: u64| -> rusqlite::Result<bool> {
        tx.query_row(
            "SELECT COUNT(*) FROM batches WHERE seq = ?1",
            [i64::try_from(seq).unwrap_or(i64::MAX)],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
    };
    let seq = match j.seq {
        Some(s) if !taken(s)? => s,
        _ => {
            let max: i64 = tx.query_row("SELECT COALESCE(MAX(seq), 0) FROM batches", [], |r| {
                r.get(0)
            })?;
            max.max(0) as u64 + 1
        }
    };
    put_job(tx, seq, &j.owner, &j.obj)
}
