//! Build-time facts for the binary:
//! - GPU bundles and release tarballs (`--features gpu-dl`): the binary finds
//!   its shared libraries (libllama, libggml*, the backend modules) in its own
//!   folder.
//! - `STEWARD_VERSION` for `steward --version`: the crate version, the git
//!   commit (short hash, `-dirty` when tracked files differed from HEAD when
//!   this script last ran; env `STEWARD_GIT_COMMIT` when there is no git, else
//!   `unknown`) and the llama.cpp build (the llama-cpp-sys-2 version from
//!   Cargo.lock and the ggml version of its vendored source; the vendored
//!   source records no llama.cpp build number or commit).
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_GPU_DL").is_some() {
        println!("cargo:rustc-link-arg-bins=-Wl,--disable-new-dtags,-rpath,$ORIGIN");
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = git_commit(&manifest)
        .or_else(|| {
            std::env::var("STEWARD_GIT_COMMIT")
                .ok()
                .filter(|s| !s.trim().is_empty())
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rerun-if-env-changed=STEWARD_GIT_COMMIT");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!(
        "cargo:rustc-env=STEWARD_VERSION={version} (commit {commit}; llama.cpp: {})",
        llama_build(&manifest)
    );
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Short HEAD hash plus `-dirty`; None outside a git checkout or without git.
/// Reruns when HEAD or its ref moves (not on every edit: a dirty flag is as of
/// the last time this script ran).
fn git_commit(dir: &Path) -> Option<String> {
    let hash = git(dir, &["rev-parse", "--short", "HEAD"]).filter(|h| !h.is_empty())?;
    if let Some(git_dir) = git(dir, &["rev-parse", "--absolute-git-dir"]) {
        let git_dir = PathBuf::from(git_dir);
        println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
        if let Some(r) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
            let ref_file = git_dir.join(&r);
            if ref_file.exists() {
                println!("cargo:rerun-if-changed={}", ref_file.display());
            } else if git_dir.join("packed-refs").exists() {
                println!(
                    "cargo:rerun-if-changed={}",
                    git_dir.join("packed-refs").display()
                );
            }
        }
    }
    let dirty =
        git(dir, &["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}

/// "llama-cpp-sys-2 X, ggml Y" from the workspace Cargo.lock and the crate's
/// vendored llama.cpp in the cargo registry (each part left out when unknown).
fn llama_build(manifest: &Path) -> String {
    let lock = manifest.join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let Some(ver) = std::fs::read_to_string(&lock).ok().and_then(|s| {
        let lines: Vec<&str> = s.lines().map(str::trim).collect();
        lines.windows(2).find_map(|w| {
            (w[0] == "name = \"llama-cpp-sys-2\"")
                .then(|| w[1].strip_prefix("version = \"")?.strip_suffix('"'))
                .flatten()
                .map(str::to_string)
        })
    }) else {
        return "unknown".to_string();
    };
    let mut s = format!("llama-cpp-sys-2 {ver}");
    if let Some(ggml) = ggml_version(&ver) {
        s.push_str(&format!(", ggml {ggml}"));
    }
    s
}

fn ggml_version(crate_ver: &str) -> Option<String> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    for reg in std::fs::read_dir(home.join("registry/src")).ok()?.flatten() {
        let cm = reg.path().join(format!(
            "llama-cpp-sys-2-{crate_ver}/llama.cpp/ggml/CMakeLists.txt"
        ));
        let Ok(text) = std::fs::read_to_string(&cm) else {
            continue;
        };
        let part = |name: &str| {
            text.lines().find_map(|l| {
                l.trim()
                    .strip_prefix(&format!("set(GGML_VERSION_{name} "))?
                    .strip_suffix(')')
                    .map(str::to_string)
            })
        };
        return Some(format!(
            "{}.{}.{}",
            part("MAJOR")?,
            part("MINOR")?,
            part("PATCH")?
        ));
    }
    None
}
