//! The state directory (`--state-dir`; default `state` in the cache
//! directory models are kept in, `$STEWARD_CACHE_DIR` or
//! `~/.cache/steward`; `none`: no durable state): what a server keeps
//! across restarts, owned by one server at a time. A leaf: it uses no other
//! folder of the crate; `api/` (the Responses store), `batch/` (files and
//! jobs) and the binary's `serve` use it.
//!
//! ```text
//! LOCK          held (an advisory lock) while a server runs; holds its pid
//! VERSION       the layout's format version ("1"), written atomically
//! steward.db    SQLite (WAL; with steward.db-wal, steward.db-shm): stored
//!               responses, the Batch API's file and batch records
//! files/        the Batch API's uploads (file-<id>.jsonl), each written to
//!               a temp name, fsynced and renamed; committed by its record
//! batches/<id>/ a batch's output.jsonl and errors.jsonl, appended one whole
//!               line at a time (the record of which lines are answered)
//! kv/           the prompt cache's disk tier (the engine's: `kv_dir`)
//! ```
//!
//! - `mod.rs`: `StateDir` (open: lock, version, database) and `Opened`.
//! - `disk.rs` (a leaf): atomic writes, temp names, the lock.
//! - `db.rs`: `steward.db`, its pragmas and versioned migrations.
//! - `responses.rs`: the Responses store with its write-through copy.
//!
//! A second server on the same directory refuses to start (one line) when
//! the directory was named; the default directory unusable (another
//! server's, unwritable, a database that does not open) is a warning once
//! the server is up, and the server runs without durable state. A
//! directory or database of a newer format than this build's is refused
//! either way: it is never rewritten by an older build.

pub(crate) mod db;
pub(crate) mod disk;
pub(crate) mod responses;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

pub use db::DbError;
pub use responses::{Loaded, Responses};

/// The layout's format version, in `VERSION`.
pub const FORMAT_VERSION: u32 = 1;

/// A state directory held by this server (its lock released on drop).
#[derive(Debug)]
pub struct StateDir {
    root: PathBuf,
    db: db::Db,
    _lock: disk::DirLock,
}

/// Why a state directory cannot be this server's.
#[derive(Debug)]
pub enum StateError {
    /// Another server holds it (the pid its `LOCK` names).
    Locked(Option<u32>),
    /// Its `VERSION` names a newer format.
    Newer(u32),
    /// Its `VERSION` does not read as a version.
    BadVersion(String),
    Db(DbError),
    Io(io::Error),
}

impl StateError {
    /// Refused whether or not the directory was named: a newer build's.
    fn newer(&self) -> bool {
        matches!(
            self,
            StateError::Newer(_) | StateError::Db(DbError::Newer(_))
        )
    }
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Locked(Some(pid)) => write!(
                f,
                "another server (pid {pid}) holds this state directory (its LOCK file): stop it, or name another --state-dir"
            ),
            StateError::Locked(None) => write!(
                f,
                "another server holds this state directory (its LOCK file): stop it, or name another --state-dir"
            ),
            StateError::Newer(v) => write!(
                f,
                "its VERSION is {v}, newer than this build's {FORMAT_VERSION} (a newer Steward wrote it): run that one, or name another --state-dir"
            ),
            StateError::BadVersion(s) => write!(
                f,
                "its VERSION file holds {s:?}, not a format version"
            ),
            StateError::Db(e) => write!(f, "{e}"),
            StateError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StateError {}

impl From<io::Error> for StateError {
    fn from(e: io::Error) -> Self {
        StateError::Io(e)
    }
}

/// What `StateDir::open` found.
#[derive(Debug)]
pub enum Opened {
    /// The directory is this server's.
    Dir(StateDir),
    /// The default directory cannot be this server's (why): the server
    /// runs without durable state and says so once it is up (a start that
    /// fails prints its one error line alone).
    Unusable(String),
}

impl StateDir {
    /// Open the state directory at `path` for this server. `explicit`: the
    /// operator named it, and any failure is an error (its message one
    /// line, naming the directory); else a failure is `Opened::Unusable`,
    /// except a newer format's, which is an error either way.
    pub fn open(path: &Path, explicit: bool) -> anyhow::Result<Opened> {
        match Self::try_open(path) {
            Ok(d) => Ok(Opened::Dir(d)),
            Err(e) if explicit || e.newer() => {
                anyhow::bail!("--state-dir {}: {e}", path.display())
            }
            Err(e) => Ok(Opened::Unusable(e.to_string())),
        }
    }

    /// Lock `path` (created if missing), check or write its `VERSION`,
    /// open and migrate `steward.db`.
    pub fn try_open(path: &Path) -> Result<StateDir, StateError> {
        disk::create_dir(path)?;
        let lock = match disk::lock(path) {
            Ok(l) => l,
            Err(disk::LockError::Held(pid)) => return Err(StateError::Locked(pid)),
            Err(disk::LockError::Io(e)) => return Err(e.into()),
        };
        disk::remove_temps(path)?;
        check_version(path)?;
        let db = db::Db::open(&path.join("steward.db")).map_err(StateError::Db)?;
        Ok(StateDir {
            root: path.to_path_buf(),
            db,
            _lock: lock,
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The prompt cache's disk tier (`kv/`, the engine's to create and
    /// fill).
    pub fn kv_dir(&self) -> PathBuf {
        self.root.join("kv")
    }

    pub(crate) fn db(&self) -> &db::Db {
        &self.db
    }
}

/// `VERSION`: written when missing (a new directory, or one from before
/// it was kept: the same format), else read and checked.
fn check_version(root: &Path) -> Result<(), StateError> {
    let path = root.join("VERSION");
    match std::fs::read(&path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let shown: String = text.trim().chars().take(32).collect();
            match text.trim().parse::<u32>() {
                Ok(v) if v > FORMAT_VERSION => Err(StateError::Newer(v)),
                Ok(v) if v >= 1 => Ok(()),
                _ => Err(StateError::BadVersion(shown)),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(disk::write_atomic(
            &path,
            format!("{FORMAT_VERSION}\n").as_bytes(),
        )?),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_gets_its_version_database_and_lock() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("state");
        let s = StateDir::try_open(&root).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("VERSION")).unwrap(),
            "1\n"
        );
        assert!(root.join("steward.db").is_file() && root.join("LOCK").is_file());
        assert_eq!(s.kv_dir(), root.join("kv"));
        assert_eq!(s.root(), root);
        // Held: a second open is refused, naming this process.
        let e = StateDir::try_open(&root).unwrap_err();
        assert!(
            matches!(e, StateError::Locked(Some(p)) if p == std::process::id()),
            "{e}"
        );
        let e = StateDir::open(&root, true).unwrap_err().to_string();
        assert!(e.contains("another server") && !e.contains('\n'), "{e}");
        match StateDir::open(&root, false).unwrap() {
            Opened::Unusable(why) => assert!(why.contains("another server"), "{why}"),
            Opened::Dir(_) => panic!("opened twice"),
        }
        drop(s);
        assert!(StateDir::try_open(&root).is_ok());
    }

    #[test]
    fn a_newer_version_is_refused_even_for_the_default_directory() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("VERSION"), "2\n").unwrap();
        for explicit in [true, false] {
            let e = StateDir::open(d.path(), explicit).unwrap_err().to_string();
            assert!(
                e.contains("newer than this build's 1") && !e.contains('\n'),
                "{e}"
            );
        }
        assert!(!d.path().join("steward.db").exists(), "never touched");
    }

    #[test]
    fn a_version_that_does_not_read_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("VERSION"), "banana").unwrap();
        let e = StateDir::try_open(d.path()).unwrap_err();
        assert!(
            matches!(e, StateError::BadVersion(ref s) if s == "banana"),
            "{e}"
        );
        std::fs::write(d.path().join("VERSION"), "0").unwrap();
        assert!(StateDir::try_open(d.path()).is_err());
        std::fs::write(d.path().join("VERSION"), "1").unwrap();
        assert!(StateDir::try_open(d.path()).is_ok());
    }

    #[test]
    fn a_database_that_does_not_open_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("steward.db"), vec![7u8; 4096]).unwrap();
        let e = StateDir::open(d.path(), true).unwrap_err().to_string();
        assert!(e.contains("steward.db"), "{e}");
        assert!(matches!(
            StateDir::open(d.path(), false).unwrap(),
            Opened::Unusable(_)
        ));
    }
}
