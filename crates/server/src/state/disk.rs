//! The state directory's disk rules (a leaf): every file written whole or
//! not at all (a temp name in the same directory, fsync, rename, fsync the
//! directory), temp files a crash left removed, process-unique names, and
//! the lock that keeps a second server out.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The prefix of a temp name (removed at start-up wherever found).
pub(crate) const TMP: &str = ".tmp-";

/// `bytes` at `path`, whole or not at all, durable once this returns.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent(path);
    let tmp = temp_path(path);
    let written = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written.and_then(|_| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// A temp name beside `path` (same directory: the rename is atomic).
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    parent(path).join(format!("{TMP}{}-{name}", unique()))
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Make a directory's entries (a rename, a new file) durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Create `dir` (and its parents) and make its entry durable.
pub(crate) fn create_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    sync_dir(parent(dir))
}

/// Remove the temp files a crash left in `dir`.
pub(crate) fn remove_temps(dir: &Path) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_name().to_string_lossy().starts_with(TMP) {
            let _ = fs::remove_file(e.path());
        }
    }
    Ok(())
}

/// A process-unique value for ids and temp names.
pub(crate) fn unique() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}-{now:x}-{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Held while the server runs: the state directory is this server's (an
/// advisory lock on `LOCK`, which the kernel drops with the process, so a
/// kill leaves nothing to clean).
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

/// Why the state directory could not be locked.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another server (or another open of it in this process) holds it;
    /// the process id its `LOCK` file names.
    Held(Option<u32>),
    Io(io::Error),
}

/// Lock `dir` (its `LOCK` file) for this server, without waiting.
pub(crate) fn lock(dir: &Path) -> Result<DirLock, LockError> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("LOCK"))
        .map_err(LockError::Io)?;
    match f.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut s = String::new();
            let pid = f
                .read_to_string(&mut s)
                .ok()
                .and_then(|_| s.trim().parse().ok());
            return Err(LockError::Held(pid));
        }
        Err(fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
    }
    // Who holds it, for an operator reading the file.
    let _ = f.set_len(0);
    let _ = (&f).write_all(format!("{}\n", std::process::id()).as_bytes());
    Ok(DirLock { _file: f })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_leave_no_temp_and_replace_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_second_lock_of_one_directory_is_refused_naming_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let held = lock(d.path()).unwrap();
        match lock(d.path()) {
            Err(LockError::Held(pid)) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("{other:?}"),
        }
        drop(held);
        assert!(lock(d.path()).is_ok());
    }
}
