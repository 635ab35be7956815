//! `steward.db`: one SQLite database (the bundled library) for the small
//! durable things, in WAL mode. `synchronous=NORMAL` is enough under WAL:
//! a commit is in the log (in the operating system's cache) before it
//! returns, so a killed process loses nothing committed and the database
//! is never torn; a power cut can take back the last commits, never
//! corrupt it. Writes that a client was told are kept across a power cut
//! (the Batch API's files and jobs, few and small) are committed with
//! `synchronous=FULL` (`write_durable`: the log fsynced at the commit).
//!
//! Checkpoints (the log copied into the database, each with an fsync) run
//! on a thread of their own, every `CHECKPOINT_EVERY`, never inside a
//! request's commit (measured: SQLite's automatic ones made 1 put in 100
//! take 3 ms or more, on the request's thread).
//!
//! The schema is versioned by `PRAGMA user_version`: `MIGRATIONS` is an
//! ordered list, step *i* bringing a database at version *i* to *i* + 1 in
//! one transaction with the version. A database of a newer version than
//! this build knows is refused, never touched.

use std::fmt;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, Transaction, TransactionBehavior};

/// How long a statement waits on a lock held by another connection (none
/// in a server, which holds the directory's LOCK: an operator's `sqlite3`
/// reading it).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the checkpoint thread copies the log into the database (the
/// log holds at most about this long's writes beyond it).
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// The schema, one step per version (only ever appended to).
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the Responses store (`state/responses.rs`). `seq`: insertion
    // order, the store's eviction order; `stored_at_ms`: Unix time.
    "CREATE TABLE responses (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        stored_at_ms INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        response TEXT NOT NULL,
        conversation TEXT NOT NULL
    );
    CREATE INDEX responses_by_age ON responses (stored_at_ms);",
    // 2: the Batch API's metadata (`batch/records.rs`): OpenAI's File
    // objects (`path`: the content under the state directory, NULL for
    // `files/<id>.jsonl`) and Batch objects (`object`: its JSON).
    "CREATE TABLE files (
        id TEXT PRIMARY KEY,
        bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        filename TEXT NOT NULL,
        purpose TEXT NOT NULL,
        owner TEXT,
        path TEXT
    );
    CREATE TABLE batches (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        owner TEXT,
        status TEXT NOT NULL,
        object TEXT NOT NULL
    );",
];

/// The schema version this build writes.
pub(crate) fn schema_version() -> u32 {
    MIGRATIONS.len() as u32
}

/// Why `steward.db` cannot be used.
#[derive(Debug)]
pub enum DbError {
    /// Written by a newer build (its schema version).
    Newer(u32),
    /// It did not pass `PRAGMA quick_check` (what it said first).
    Corrupt(String),
    /// The journal mode could not be made WAL (the mode it stayed in).
    NotWal(String),
    /// The checkpoint thread could not start.
    Thread(std::io::Error),
    Sqlite(rusqlite::Error),
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbError::Newer(v) => write!(
                f,
                "steward.db is at schema version {v}, newer than this build's {} (a newer Steward wrote it)",
                schema_version()
            ),
            DbError::Corrupt(what) => write!(f, "steward.db is corrupt: {what}"),
            DbError::NotWal(mode) => write!(
                f,
                "steward.db could not be put in WAL mode (it stays {mode:?}: a filesystem without shared memory?)"
            ),
            DbError::Thread(e) => write!(f, "steward.db: its checkpoint thread: {e}"),
            DbError::Sqlite(e) => write!(f, "steward.db: {e}"),
        }
    }
}

impl std::error::Error for DbError {}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        DbError::Sqlite(e)
    }
}

/// The database: one connection, its statements one at a time, and the
/// checkpoint thread (stopped and joined on drop).
pub struct Db {
    conn: Mutex<Connection>,
    _checkpoints: Checkpoints,
}

/// The checkpoint thread: stops when its sender drops.
struct Checkpoints {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpoints {
    fn start(path: &Path) -> Result<Checkpoints, DbError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let (stop, rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("steward-db-checkpoint".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(CHECKPOINT_EVERY) {
                    let r = conn
                        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(0));
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "steward.db: a checkpoint failed (tried again)");
                    }
                }
            })
            .map_err(DbError::Thread)?;
        Ok(Checkpoints {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpoints {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db").finish_non_exhaustive()
    }
}

impl Db {
    /// Open (or create) the database at `path`: its version checked,
    /// checked whole (`quick_check`), WAL, then migrated to this build's
    /// schema.
    pub(crate) fn open(path: &Path) -> Result<Db, DbError> {
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let version: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > schema_version() {
            return Err(DbError::Newer(version));
        }
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if check != "ok" {
            return Err(DbError::Corrupt(check));
        }
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(DbError::NotWal(mode));
        }
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        migrate(&mut conn, MIGRATIONS)?;
        Ok(Db {
            conn: Mutex::new(conn),
            _checkpoints: Checkpoints::start(path)?,
        })
    }

    /// The connection, held until the guard drops.
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` in one write transaction (`synchronous=NORMAL`).
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        write_on(&mut self.conn(), f)
    }

    /// Run `f` in one write transaction whose commit is fsynced.
    pub(crate) fn write_durable<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let mut c = self.conn();
        c.pragma_update(None, "synchronous", "FULL")?;
        let r = write_on(&mut c, f);
        let back = c.pragma_update(None, "synchronous", "NORMAL");
        let r = r?;
        back?;
        Ok(r)
    }

    /// Run `f` on the connection (reads).
    pub(crate) fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        f(&self.conn())
    }
}

/// Run `f` in one write transaction on `c` (taken at once: `IMMEDIATE`).
pub(crate) fn write_on<T>(
    c: &mut Connection,
    f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let r = f(&tx)?;
    tx.commit()?;
    Ok(r)
}

/// Bring `conn` from its version to `steps.len()`, each step in one
/// transaction with its version.
fn migrate(conn: &mut Connection, steps: &[&str]) -> Result<(), DbError> {
    let version: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version as usize > steps.len() {
        return Err(DbError::Newer(version));
    }
    for (i, step) in steps.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(step)?;
        tx.pragma_update(None, "user_version", (i + 1) as u32)?;
        tx.commit()?;
        tracing::debug!(version = i + 1, "steward.db migrated");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(c: &Connection) -> u32 {
        c.query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    }

    fn tables(c: &Connection) -> Vec<String> {
        let mut s = c
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .unwrap();
        s.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn an_empty_database_gets_the_whole_schema_in_wal_mode() {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(&d.path().join("steward.db")).unwrap();
        let c = db.conn();
        assert_eq!(version(&c), schema_version());
        assert_eq!(tables(&c), ["batches", "files", "responses"]);
        let mode: String = c
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(sync, 1, "NORMAL");
    }

    #[test]
    fn a_database_of_the_previous_version_is_migrated_keeping_its_rows() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("steward.db");
        {
            let mut c = Connection::open(&path).unwrap();
            let n = MIGRATIONS.len() - 1;
            migrate(&mut c, &MIGRATIONS[..n]).unwrap();
            assert_eq!(version(&c), n as u32);
            c.execute(
                "INSERT INTO responses (id, stored_at_ms, bytes, response, conversation) VALUES ('resp_a', 1, 2, '{}', '[]')",
                [],
            )
            .unwrap();
        }
        let db = Db::open(&path).unwrap();
        let c = db.conn();
        assert_eq!(version(&c), schema_version());
        let id: String = c
            .query_row("SELECT id FROM responses", [], |r| r.get(0))
            .unwrap();
        assert_eq!(id, "resp_a");
        assert!(tables(&c).contains(&"batches".to_string()));
        drop(c);
        // Opened again: nothing to do.
        drop(db);
        assert!(Db::open(&path).is_ok());
    }

    #[test]
    fn a_database_of_a_newer_version_is_refused_untouched() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("steward.db");
        {
            let c = Connection::open(&path).unwrap();
            c.pragma_update(None, "user_version", schema_version() + 1)
                .unwrap();
        }
        match Db::open(&path) {
            Err(DbError::Newer(v)) => assert_eq!(v, schema_version() + 1),
            other => panic!("{other:?}"),
        }
        let e = Db::open(&path).unwrap_err().to_string();
        assert!(e.contains("newer than this build"), "{e}");
        let c = Connection::open(&path).unwrap();
        assert!(tables(&c).is_empty());
    }

    #[test]
    fn a_file_that_is_not_a_database_is_an_error_not_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("steward.db");
        std::fs::write(&path, vec![0x5au8; 8192]).unwrap();
        let e = Db::open(&path).unwrap_err().to_string();
        assert!(e.starts_with("steward.db"), "{e}");
    }

    #[test]
    fn a_failed_transaction_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(&d.path().join("steward.db")).unwrap();
        let r: rusqlite::Result<()> = db.write_durable(|tx| {
            tx.execute(
                "INSERT INTO files (id, bytes, created_at, filename, purpose) VALUES ('f', 1, 1, 'a', 'batch')",
                [],
            )?;
            tx.execute("INSERT INTO nope VALUES (1)", [])?;
            Ok(())
        });
        assert!(r.is_err());
        let n: i64 = db
            .read(|c| c.query_row("SELECT COUNT(*) FROM files", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(n, 0);
        let sync: i64 = db
            .read(|c| c.query_row("PRAGMA synchronous", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(sync, 1, "back to NORMAL");
    }

    #[test]
    fn the_checkpoint_thread_copies_the_log_into_the_database() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("steward.db");
        let db = Db::open(&path).unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        db.write(|tx| {
            for i in 0..50 {
                tx.execute(
                    "INSERT INTO responses (id, stored_at_ms, bytes, response, conversation) VALUES (?1, 1, 1, ?2, '[]')",
                    rusqlite::params![format!("r{i}"), "x".repeat(4000)],
                )?;
            }
            Ok(())
        })
        .unwrap();
        // Polled under a hang guard, never timed.
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while std::fs::metadata(&path).unwrap().len() < before + 50 * 4000 {
            assert!(std::time::Instant::now() < deadline, "no checkpoint");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Dropped: the thread stops (joined), the database reads back.
        drop(db);
        let db = Db::open(&path).unwrap();
        let n: i64 = db
            .read(|c| c.query_row("SELECT COUNT(*) FROM responses", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(n, 50);
    }
}
