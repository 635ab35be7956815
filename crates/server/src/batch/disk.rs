//! The state directory's disk rules (a leaf): every record written whole
//! or not at all (a temp name in the same directory, fsync, rename, fsync
//! the directory), append-only logs cut back to their last whole line when
//! read, new ids, and the lock that keeps a second server out.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

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
    path.parent().unwrap_or(Path::new("."))
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

/// An append-only log of JSON lines opened for appending, cut back to its
/// last whole line (a line torn by a crash is dropped: its work runs
/// again), with the whole lines' bytes. A missing log is created empty.
pub(crate) fn open_log(path: &Path) -> io::Result<(File, Vec<u8>)> {
    let mut f = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if whole < bytes.len() {
        tracing::warn!(log = %path.display(), dropped = bytes.len() - whole, "a torn last line dropped");
        f.set_len(whole as u64)?;
        f.sync_all()?;
        bytes.truncate(whole);
    }
    Ok((f, bytes))
}

/// A process-unique value for ids and temp names.
fn unique() -> String {
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

/// A new id: `prefix` and 24 hex digits.
pub(crate) fn new_id(prefix: &str) -> String {
    derived_id(prefix, &unique())
}

/// The id `prefix` and 24 hex digits of `seed`'s hash: the same for the
/// same seed (a job's output file, each line's `batch_req_` id).
pub(crate) fn derived_id(prefix: &str, seed: &str) -> String {
    let h = Sha256::digest(seed.as_bytes());
    let hex: String = h.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

/// Held while the server runs: the state directory is this server's.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

/// Why the state directory could not be locked.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another server (or another open of it in this process) holds it.
    Held,
    Io(io::Error),
}

/// Lock `dir` (its `LOCK` file) for this server, without waiting.
pub(crate) fn lock(dir: &Path) -> Result<DirLock, LockError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("LOCK"))
        .map_err(LockError::Io)?;
    match f.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(LockError::Held),
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
    fn a_torn_last_line_is_cut_and_whole_lines_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log.jsonl");
        fs::write(&p, b"{\"a\":1}\n{\"b\":2}\n{\"c\"").unwrap();
        let (mut f, whole) = open_log(&p).unwrap();
        assert_eq!(whole, b"{\"a\":1}\n{\"b\":2}\n");
        f.write_all(b"{\"d\":4}\n").unwrap();
        drop(f);
        assert_eq!(fs::read(&p).unwrap(), b"{\"a\":1}\n{\"b\":2}\n{\"d\":4}\n");
    }

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
    fn a_second_lock_of_one_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let held = lock(d.path()).unwrap();
        assert!(matches!(lock(d.path()), Err(LockError::Held)));
        drop(held);
        assert!(lock(d.path()).is_ok());
    }
}
