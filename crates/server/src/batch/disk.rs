//! The Batch API's disk rules (a leaf beside `state/disk.rs`, whose
//! atomic writes, temp names and lock it re-exports): append-only logs cut
//! back to their last whole line when read, and new ids.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::state::disk::unique;
pub(crate) use crate::state::disk::{create_dir, remove_temps, sync_dir, TMP};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;

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
}
