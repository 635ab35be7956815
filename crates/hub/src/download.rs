//! The online path: the repository listing, the cache check, hf-hub's
//! download with retries and a stall watchdog, and verification.
//!
//! Every network phase runs on a current-thread runtime of its own, with an
//! hf-hub `Api` (and so a reqwest client) built inside it. Dropping the runtime
//! after an attempt cancels the chunk tasks hf-hub spawned: they would
//! otherwise keep running after hf-hub returned the first chunk's error,
//! downloading (and writing into the `.sync.part`) next to the retry.

use crate::cache::{self, Expected, RepoCache};
use crate::{HubError, HubOptions, HubRef};
use hf_hub::api::tokio::{Api, ApiBuilder, ApiError, ApiRepo, Progress};
use hf_hub::{Cache, Repo, RepoType};
use indicatif::ProgressBar;
use reqwest::header::CONTENT_RANGE;
use reqwest::StatusCode;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the repository listing may take before the hub counts as unreachable.
const INFO_TIMEOUT: Duration = Duration::from_secs(20);

/// The listing of `GET /api/models/{repo}/revision/{rev}?blobs=true`.
#[derive(Debug, Deserialize)]
struct RepoInfo {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Debug, Deserialize)]
struct Sibling {
    rfilename: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    lfs: Option<Lfs>,
}

#[derive(Debug, Deserialize)]
struct Lfs {
    sha256: String,
    #[serde(default)]
    size: Option<u64>,
}

impl Sibling {
    fn expected(&self) -> Expected {
        let lfs = self.lfs.as_ref();
        Expected {
            sha256: lfs
                .map(|l| l.sha256.to_ascii_lowercase())
                .filter(|s| cache::is_sha256(s)),
            size: lfs.and_then(|l| l.size).or(self.size),
        }
    }
}

/// An error source and its causes, `: `-separated (reqwest's own message
/// hides the cause, e.g. "connection refused").
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

fn runtime() -> Result<tokio::runtime::Runtime, HubError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(HubError::io("starting a tokio runtime"))
}

fn api(o: &HubOptions) -> Result<Api, HubError> {
    ApiBuilder::from_cache(Cache::new(o.cache_dir.clone()))
        .with_endpoint(o.endpoint.trim_end_matches('/').to_string())
        .with_token(o.token.clone())
        .with_progress(o.progress)
        .with_chunk_size(Some(o.chunk_size.max(1)))
        .with_max_files(o.connections.max(1))
        .with_user_agent("steward", env!("CARGO_PKG_VERSION"))
        .build()
        .map_err(|e| HubError::Network(chain(&e)))
}

fn repo(r: &HubRef) -> Repo {
    Repo::with_revision(r.repo.clone(), RepoType::Model, r.revision.clone())
}

enum InfoError {
    /// Worth serving from the cache instead.
    Unreachable(String),
    Fatal(HubError),
}

async fn repo_info(r: &HubRef, o: &HubOptions) -> Result<RepoInfo, InfoError> {
    let api_repo = api(o).map_err(InfoError::Fatal)?.repo(repo(r));
    let response = api_repo
        .info_request()
        .query(&[("blobs", "true")])
        .timeout(INFO_TIMEOUT)
        .send()
        .await;
    let response = match response {
        Ok(response) => response,
        Err(e) if e.is_connect() || e.is_timeout() => {
            return Err(InfoError::Unreachable(chain(&e)))
        }
        Err(e) => return Err(InfoError::Fatal(HubError::Network(chain(&e)))),
    };
    let status = response.status();
    let url = response.url().to_string();
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return Err(InfoError::Unreachable(format!("HTTP {status} from {url}")));
    }
    let body = response.bytes().await.map_err(|e| {
        if e.is_timeout() {
            InfoError::Unreachable(chain(&e))
        } else {
            InfoError::Fatal(HubError::Network(chain(&e)))
        }
    })?;
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::NOT_FOUND => {
            return Err(InfoError::Fatal(HubError::RepoNotFound {
                repo: r.repo.clone(),
                revision: r.revision.clone(),
                endpoint: o.endpoint.clone(),
                status: status.as_u16(),
            }))
        }
        StatusCode::FORBIDDEN => {
            return Err(InfoError::Fatal(HubError::AccessDenied {
                repo: r.repo.clone(),
                endpoint: o.endpoint.clone(),
                message: String::from_utf8_lossy(&body).chars().take(300).collect(),
            }))
        }
        s if !s.is_success() => {
            return Err(InfoError::Fatal(HubError::Network(format!(
                "HTTP {s} from {url}"
            ))))
        }
        _ => {}
    }
    serde_json::from_slice(&body).map_err(|e| {
        InfoError::Fatal(HubError::Network(format!(
            "unexpected listing from {url}: {e}"
        )))
    })
}

/// Resolves `r` online, falling back to the cache when offline or unreachable.
pub(crate) fn fetch_sync(r: &HubRef, o: &HubOptions) -> Result<PathBuf, HubError> {
    if o.offline {
        return cache::from_cache(r, o, "offline mode is on (HF_HUB_OFFLINE)");
    }
    let info = match runtime()?.block_on(repo_info(r, o)) {
        Ok(info) => info,
        Err(InfoError::Fatal(e)) => return Err(e),
        Err(InfoError::Unreachable(why)) => {
            tracing::warn!(endpoint = %o.endpoint, error = %why, "hub unreachable, using the cache");
            let reason = format!("the hub at {} is unreachable: {why}", o.endpoint);
            return cache::from_cache(r, o, &reason);
        }
    };
    let names: Vec<String> = info.siblings.iter().map(|s| s.rfilename.clone()).collect();
    let location = format!("on {}", o.endpoint);
    let chosen =
        crate::select::choose(&names, r.quant.as_deref()).map_err(|e| e.into_hub(r, location))?;
    let rc = RepoCache::new(&o.cache_dir, &r.repo);
    let mut paths = Vec::with_capacity(chosen.len() + 1);
    let mut chosen = chosen;
    // A vision or audio repository's projector, beside the weights (the
    // registry looks for it there).
    if let Some(mm) = crate::select::choose_mmproj(&names, &chosen[0]) {
        chosen.push(mm);
    }
    for name in &chosen {
        let sibling = info
            .siblings
            .iter()
            .find(|s| &s.rfilename == name)
            .expect("chosen among the siblings");
        paths.push(fetch_file(r, o, &rc, &info.sha, sibling)?);
    }
    rc.write_ref(&r.revision, &info.sha)?;
    Ok(paths.swap_remove(0))
}

/// One file: from the cache when a verified copy is there, else downloaded.
fn fetch_file(
    r: &HubRef,
    o: &HubOptions,
    rc: &RepoCache,
    commit: &str,
    sibling: &Sibling,
) -> Result<PathBuf, HubError> {
    let file = sibling.rfilename.as_str();
    let expected = sibling.expected();
    let pointer = rc.pointer(commit, file);
    rc.remove_dangling(&pointer);
    if pointer.exists() {
        match cache::verify(rc, &pointer, file, &expected) {
            Ok(()) => return Ok(pointer),
            Err(e @ HubError::Io { .. }) => return Err(e),
            Err(e) => tracing::warn!(error = %e, "cached copy refused, downloading again"),
        }
    } else if let Some(sha) = &expected.sha256 {
        // Another commit's snapshot may hold the same blob.
        if rc.blob(sha).is_file() {
            rc.link(sha, &pointer)?;
            match cache::verify(rc, &pointer, file, &expected) {
                Ok(()) => return Ok(pointer),
                Err(e @ HubError::Io { .. }) => return Err(e),
                Err(e) => tracing::warn!(error = %e, "cached blob refused, downloading again"),
            }
        }
    }
    let mut attempt = 0;
    let downloaded = loop {
        match download_attempt(r, o, file) {
            Ok(path) => break path,
            Err(Attempt::Retry(message)) if attempt < o.retries => {
                let wait = Duration::from_millis(500 << attempt.min(4));
                tracing::warn!(file, error = %message, ?wait, "download failed, resuming");
                std::thread::sleep(wait);
                attempt += 1;
            }
            Err(Attempt::Retry(message)) | Err(Attempt::Fatal(message)) => {
                let tries = attempt + 1;
                return Err(HubError::Download {
                    file: file.to_string(),
                    message: format!(
                        "{message} ({tries} attempt{})",
                        if tries == 1 { "" } else { "s" }
                    ),
                });
            }
        }
    };
    if downloaded != pointer {
        // hf-hub links by the commit of the resolve response; keep ours too.
        tracing::debug!(?downloaded, ?pointer, "the hub moved during the download");
        if !pointer.exists() {
            let blob = std::fs::canonicalize(&downloaded)
                .map_err(HubError::io(format!("resolving {}", downloaded.display())))?;
            let name = blob
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            rc.link(&name, &pointer)?;
        }
    }
    if let Err(e) = cache::verify(rc, &pointer, file, &expected) {
        rc.remove_dangling(&downloaded);
        return Err(e);
    }
    Ok(pointer)
}

enum Attempt {
    Retry(String),
    Fatal(String),
}

fn classify(e: ApiError) -> Attempt {
    match e {
        ApiError::RequestError(e) if e.status().is_some_and(|s| s.is_client_error()) => {
            Attempt::Fatal(chain(&e))
        }
        ApiError::RequestError(e) => Attempt::Retry(chain(&e)),
        ApiError::TooManyRetries(e) => Attempt::Retry(chain(&*e)),
        ApiError::MissingHeader(h) if h == CONTENT_RANGE => Attempt::Fatal(
            "the hub's answer to a ranged request has no Content-Range: \
             the server must support HTTP Range requests"
                .to_string(),
        ),
        ApiError::LockAcquisition(path) => Attempt::Fatal(format!(
            "another process is downloading this file (lock {} held)",
            path.display()
        )),
        other => Attempt::Fatal(chain(&other)),
    }
}

/// hf-hub's progress hook: counts bytes for the watchdog, draws the bar.
#[derive(Clone)]
struct Watch {
    bar: Option<ProgressBar>,
    bytes: Arc<AtomicU64>,
}

impl Progress for Watch {
    async fn init(&mut self, size: usize, filename: &str) {
        if let Some(bar) = &mut self.bar {
            Progress::init(bar, size, filename).await;
        }
    }

    async fn update(&mut self, size: usize) {
        self.bytes.fetch_add(size as u64, Ordering::Relaxed);
        if let Some(bar) = &mut self.bar {
            Progress::update(bar, size).await;
        }
    }

    async fn finish(&mut self) {
        if let Some(bar) = &mut self.bar {
            Progress::finish(bar).await;
        }
    }
}

impl Watch {
    /// Returns once no byte arrived for `limit`.
    async fn stalled(&self, limit: Duration) {
        let tick = (limit / 4).max(Duration::from_millis(10));
        let mut seen = self.bytes.load(Ordering::Relaxed);
        let mut since = Instant::now();
        loop {
            tokio::time::sleep(tick).await;
            let now = self.bytes.load(Ordering::Relaxed);
            if now != seen {
                seen = now;
                since = Instant::now();
            } else if since.elapsed() >= limit {
                return;
            }
        }
    }
}

/// One hf-hub download of `file` (resuming from its `.sync.part` when one is
/// there). Returns hf-hub's snapshot path.
fn download_attempt(r: &HubRef, o: &HubOptions, file: &str) -> Result<PathBuf, Attempt> {
    let rt = runtime().map_err(|e| Attempt::Fatal(e.to_string()))?;
    let watch = Watch {
        bar: o.progress.then(|| ProgressBar::new(0)),
        bytes: Arc::new(AtomicU64::new(0)),
    };
    let result = rt.block_on(async {
        let api_repo: ApiRepo = api(o)
            .map_err(|e| Attempt::Fatal(e.to_string()))?
            .repo(repo(r));
        tokio::select! {
            done = api_repo.download_with_progress(file, watch.clone()) => done.map_err(classify),
            () = watch.stalled(o.stall_timeout) => Err(Attempt::Retry(format!(
                "no data for {:?}", o.stall_timeout
            ))),
        }
    });
    if let (Err(_), Some(bar)) = (&result, &watch.bar) {
        bar.abandon();
    }
    // Cancels the chunk tasks still running.
    drop(rt);
    result
}
