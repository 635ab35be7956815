//! The hub cache layout, verification markers and lookups from the cache.
//!
//! Layout (shared with `huggingface_hub` and hf-hub):
//! `<cache>/models--owner--repo/refs/<revision>` holds a commit hash,
//! `snapshots/<commit>/<file>` is a relative symlink to `blobs/<etag>`.
//! This crate adds `blobs/<etag>.sha256-ok`: `<sha256> <size> <mtime-ns>` of a
//! blob whose hash was checked. While the blob keeps that size and mtime the
//! marker stands for the hash; any change to the file means hashing again.

use crate::select;
use crate::{HubError, HubOptions, HubRef};
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// What the hub says a file is; `None` where it does not say.
#[derive(Debug, Default, Clone)]
pub(crate) struct Expected {
    pub(crate) sha256: Option<String>,
    pub(crate) size: Option<u64>,
}

/// One repository's folder in the cache.
pub(crate) struct RepoCache {
    root: PathBuf,
}

pub(crate) fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s: OsString = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn marker_path(blob: &Path) -> PathBuf {
    with_suffix(blob, ".sha256-ok")
}

fn stamp(meta: &std::fs::Metadata) -> Option<(u64, u128)> {
    let mtime = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some((meta.len(), mtime.as_nanos()))
}

/// The hash a valid marker records for `blob`.
fn read_marker(blob: &Path, meta: &std::fs::Metadata) -> Option<String> {
    let text = std::fs::read_to_string(marker_path(blob)).ok()?;
    let mut fields = text.split_whitespace();
    let sha = fields.next()?.to_string();
    let size: u64 = fields.next()?.parse().ok()?;
    let mtime: u128 = fields.next()?.parse().ok()?;
    (is_sha256(&sha) && stamp(meta)? == (size, mtime)).then_some(sha)
}

fn write_marker(blob: &Path, meta: &std::fs::Metadata, sha: &str) {
    if let Some((size, mtime)) = stamp(meta) {
        // A marker that cannot be written only costs a re-hash next time.
        let _ = std::fs::write(marker_path(blob), format!("{sha} {size} {mtime}\n"));
    }
}

pub(crate) fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

impl RepoCache {
    pub(crate) fn new(cache_dir: &Path, repo: &str) -> Self {
        let folder = hf_hub::Repo::model(repo.to_string()).folder_name();
        RepoCache {
            root: cache_dir.join(folder),
        }
    }

    fn snapshots(&self) -> PathBuf {
        self.root.join("snapshots")
    }

    pub(crate) fn snapshot(&self, commit: &str) -> PathBuf {
        self.snapshots().join(commit)
    }

    pub(crate) fn pointer(&self, commit: &str, file: &str) -> PathBuf {
        let mut p = self.snapshot(commit);
        p.extend(file.split('/'));
        p
    }

    pub(crate) fn blob(&self, name: &str) -> PathBuf {
        self.root.join("blobs").join(name)
    }

    fn read_ref(&self, revision: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.root.join("refs").join(revision)).ok()?;
        let commit = text.trim();
        (!commit.is_empty()).then(|| commit.to_string())
    }

    pub(crate) fn write_ref(&self, revision: &str, commit: &str) -> Result<(), HubError> {
        let path = self.root.join("refs").join(revision);
        if self.read_ref(revision).as_deref() == Some(commit) {
            return Ok(());
        }
        let context = format!("writing {}", path.display());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(HubError::io(context.clone()))?;
        }
        std::fs::write(&path, commit).map_err(HubError::io(context))
    }

    /// Points `pointer` at `blobs/<blob_name>` (a relative symlink, as the hub
    /// cache does; a hard link where symlinks are not available).
    pub(crate) fn link(&self, blob_name: &str, pointer: &Path) -> Result<(), HubError> {
        let context = format!("linking {}", pointer.display());
        let parent = pointer.parent().expect("a pointer is inside a snapshot");
        std::fs::create_dir_all(parent).map_err(HubError::io(context.clone()))?;
        #[cfg(unix)]
        {
            let depth = pointer
                .strip_prefix(&self.root)
                .map(|p| p.components().count())
                .unwrap_or(3);
            let mut target = PathBuf::new();
            for _ in 1..depth {
                target.push("..");
            }
            target.push("blobs");
            target.push(blob_name);
            std::os::unix::fs::symlink(target, pointer).map_err(HubError::io(context))
        }
        #[cfg(not(unix))]
        {
            let blob = self.blob(blob_name);
            std::fs::hard_link(&blob, pointer)
                .or_else(|_| std::fs::copy(&blob, pointer).map(|_| ()))
                .map_err(HubError::io(context))
        }
    }

    /// Removes `pointer`, the blob it points at, the blob's marker and lock file,
    /// and the folders of the snapshot left empty.
    pub(crate) fn remove(&self, pointer: &Path) {
        let blob = std::fs::canonicalize(pointer).ok();
        let _ = std::fs::remove_file(pointer);
        if let Some(blob) = blob {
            let _ = std::fs::remove_file(&blob);
            let _ = std::fs::remove_file(marker_path(&blob));
            let mut lock = blob.clone();
            lock.set_extension("lock");
            let _ = std::fs::remove_file(lock);
        }
        let snapshots = self.snapshots();
        let mut dir = pointer.parent();
        while let Some(d) = dir {
            if d == snapshots || !d.starts_with(&snapshots) || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }

    /// Removes a snapshot link whose blob is gone (hf-hub would fail to
    /// create the link over it).
    pub(crate) fn remove_dangling(&self, pointer: &Path) {
        if pointer.symlink_metadata().is_ok() && !pointer.exists() {
            let _ = std::fs::remove_file(pointer);
        }
    }
}

/// Checks the blob behind `pointer` against `expected` (and, lacking an
/// expected hash, against the blob's name when that is a sha256). On a
/// mismatch the blob, its link and its marker are removed.
pub(crate) fn verify(
    rc: &RepoCache,
    pointer: &Path,
    file: &str,
    expected: &Expected,
) -> Result<(), HubError> {
    let blob = std::fs::canonicalize(pointer)
        .map_err(HubError::io(format!("resolving {}", pointer.display())))?;
    let meta =
        std::fs::metadata(&blob).map_err(HubError::io(format!("reading {}", blob.display())))?;
    if let Some(size) = expected.size {
        if meta.len() != size {
            rc.remove(pointer);
            return Err(HubError::SizeMismatch {
                file: file.to_string(),
                expected: size,
                actual: meta.len(),
            });
        }
    }
    let name_sha = blob
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| is_sha256(n))
        .map(str::to_string);
    let Some(want) = expected.sha256.clone().or(name_sha) else {
        // Not an LFS file and the hub gave no hash: nothing to check against.
        return Ok(());
    };
    let actual = match read_marker(&blob, &meta) {
        Some(marked) => marked,
        None => {
            // (Said only for files that take a while: a failed start of a
            // small model stays one line.)
            if meta.len() >= 1 << 30 {
                tracing::info!(file, bytes = meta.len(), "checking sha256");
            } else {
                tracing::debug!(file, bytes = meta.len(), "checking sha256");
            }
            let actual =
                sha256_file(&blob).map_err(HubError::io(format!("hashing {}", blob.display())))?;
            if actual == want {
                write_marker(&blob, &meta, &actual);
            }
            actual
        }
    };
    if actual != want {
        rc.remove(pointer);
        return Err(HubError::Sha256Mismatch {
            file: file.to_string(),
            expected: want,
            actual,
        });
    }
    Ok(())
}

/// The files under `dir` (following links), as `/`-separated relative paths.
fn list_files(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            match std::fs::metadata(entry.path()) {
                Ok(m) if m.is_dir() => walk(&entry.path(), &rel, out),
                Ok(m) if m.is_file() => out.push(rel),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out);
    out.sort();
    out
}

/// Serves `r` from the cache alone. `reason` says why the hub is not asked.
pub(crate) fn from_cache(r: &HubRef, o: &HubOptions, reason: &str) -> Result<PathBuf, HubError> {
    let rc = RepoCache::new(&o.cache_dir, &r.repo);
    let not_cached = || HubError::NotCached {
        repo: r.repo.clone(),
        revision: r.revision.clone(),
        cache_dir: o.cache_dir.clone(),
        reason: reason.to_string(),
    };
    let commit = if is_commit(&r.revision) && rc.snapshot(&r.revision).is_dir() {
        r.revision.clone()
    } else {
        rc.read_ref(&r.revision).ok_or_else(not_cached)?
    };
    let snapshot = rc.snapshot(&commit);
    let files = list_files(&snapshot);
    if !files
        .iter()
        .any(|f| f.to_ascii_lowercase().ends_with(".gguf"))
    {
        return Err(not_cached());
    }
    let location = format!("in the cache ({}; {reason})", snapshot.display());
    let chosen = select::choose(&files, r.quant.as_deref()).map_err(|e| e.into_hub(r, location))?;
    for file in &chosen {
        verify(&rc, &rc.pointer(&commit, file), file, &Expected::default())?;
    }
    tracing::info!(repo = %r.repo, file = %chosen[0], "served from the cache");
    Ok(rc.pointer(&commit, &chosen[0]))
}
