//! A local hub for the tests: the parts of the Hugging Face API hf-hub uses,
//! with faults switched on per test and every resolve request logged.

use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use steward_hub::HubOptions;

pub const CHUNK: usize = 256 << 10;

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Deterministic pseudo-random bytes (xorshift64).
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

struct HubFile {
    bytes: Arc<Vec<u8>>,
    sha256: String,
}

struct HubRepo {
    commit: String,
    files: Vec<(String, HubFile)>,
}

/// A fault that hits the first `times` body requests starting at or after `from`.
#[derive(Clone, Copy, Default)]
pub struct Fault {
    pub times: usize,
    pub from: u64,
}

#[derive(Default)]
pub struct Faults {
    /// Send half of the range, then drop the connection.
    pub drop: Fault,
    /// Send half of the range, then nothing, forever.
    pub stall: Fault,
    /// Flip a byte in the middle of every file.
    pub corrupt: bool,
    /// Ignore `Range` (answer 200 with the whole file).
    pub no_range: bool,
    /// Leave `lfs` out of the listing.
    pub no_lfs: bool,
}

#[derive(Clone, Debug)]
pub struct Served {
    pub file: String,
    pub start: u64,
    pub end: u64,
    pub faulted: bool,
}

impl Served {
    /// hf-hub's metadata probe asks for `bytes=0-0`; everything else is body.
    pub fn is_body(&self) -> bool {
        !(self.start == 0 && self.end == 0)
    }
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }
}

#[derive(Default)]
struct HubState {
    repos: Mutex<HashMap<String, HubRepo>>,
    faults: Mutex<Faults>,
    log: Mutex<Vec<Served>>,
}

pub struct TestHub {
    url: String,
    state: Arc<HubState>,
}

pub fn commit_for(n: u64) -> String {
    format!("{n:040x}")
}

impl TestHub {
    pub fn start() -> TestHub {
        let state = Arc::new(HubState::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let app = router(state.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        let addr = rx.recv().unwrap();
        TestHub {
            url: format!("http://{addr}"),
            state,
        }
    }

    pub fn add(&self, repo: &str, commit: &str, files: &[(&str, Vec<u8>)]) {
        let files = files
            .iter()
            .map(|(name, bytes)| {
                let file = HubFile {
                    sha256: sha256_hex(bytes),
                    bytes: Arc::new(bytes.clone()),
                };
                (name.to_string(), file)
            })
            .collect();
        let repo_data = HubRepo {
            commit: commit.to_string(),
            files,
        };
        self.state
            .repos
            .lock()
            .unwrap()
            .insert(repo.to_string(), repo_data);
    }

    pub fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.state.faults.lock().unwrap()
    }

    /// The log so far, emptied.
    pub fn take_log(&self) -> Vec<Served> {
        std::mem::take(&mut *self.state.log.lock().unwrap())
    }

    pub fn options(&self, cache: &Path) -> HubOptions {
        HubOptions {
            endpoint: self.url.clone(),
            cache_dir: cache.to_path_buf(),
            token: None,
            offline: false,
            progress: false,
            chunk_size: CHUNK,
            connections: 1,
            retries: 0,
            stall_timeout: Duration::from_secs(20),
        }
    }
}

fn router(state: Arc<HubState>) -> Router {
    Router::new()
        .route("/api/models/{owner}/{repo}", get(info_main))
        .route("/api/models/{owner}/{repo}/revision/{rev}", get(info))
        .route("/{owner}/{repo}/resolve/{rev}/{*file}", get(resolve))
        .with_state(state)
}

async fn info_main(
    State(s): State<Arc<HubState>>,
    UrlPath((owner, repo)): UrlPath<(String, String)>,
) -> Response {
    info(State(s), UrlPath((owner, repo, "main".to_string()))).await
}

async fn info(
    State(s): State<Arc<HubState>>,
    UrlPath((owner, repo, rev)): UrlPath<(String, String, String)>,
) -> Response {
    let id = format!("{owner}/{repo}");
    let repos = s.repos.lock().unwrap();
    let Some(r) = repos.get(&id).filter(|r| rev == "main" || rev == r.commit) else {
        return (
            StatusCode::NOT_FOUND,
            "{\"error\":\"Repository not found\"}",
        )
            .into_response();
    };
    let no_lfs = s.faults.lock().unwrap().no_lfs;
    let siblings: Vec<serde_json::Value> = r
        .files
        .iter()
        .map(|(name, f)| {
            let size = f.bytes.len();
            if no_lfs || !name.ends_with(".gguf") {
                serde_json::json!({ "rfilename": name, "size": size })
            } else {
                serde_json::json!({ "rfilename": name, "size": size,
                    "lfs": { "sha256": f.sha256, "size": size, "pointerSize": 134 } })
            }
        })
        .collect();
    Json(serde_json::json!({ "id": id, "modelId": id, "sha": r.commit, "siblings": siblings }))
        .into_response()
}

fn parse_range(headers: &HeaderMap, total: u64) -> Option<(u64, u64)> {
    let value = headers.get(header::RANGE)?.to_str().ok()?;
    let (a, b) = value.strip_prefix("bytes=")?.split_once('-')?;
    let start: u64 = a.parse().ok()?;
    let end = if b.is_empty() {
        total - 1
    } else {
        b.parse::<u64>().ok()?.min(total - 1)
    };
    Some((start, end))
}

fn take(fault: &mut Fault, start: u64) -> bool {
    let hit = fault.times > 0 && start >= fault.from;
    if hit {
        fault.times -= 1;
    }
    hit
}

async fn resolve(
    State(s): State<Arc<HubState>>,
    UrlPath((owner, repo, rev, file)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let id = format!("{owner}/{repo}");
    let (commit, data, sha) = {
        let repos = s.repos.lock().unwrap();
        let found = repos
            .get(&id)
            .filter(|r| rev == "main" || rev == r.commit)
            .and_then(|r| {
                let f = r.files.iter().find(|(n, _)| *n == file)?;
                Some((r.commit.clone(), f.1.bytes.clone(), f.1.sha256.clone()))
            });
        match found {
            Some(found) => found,
            None => return (StatusCode::NOT_FOUND, "Entry not found").into_response(),
        }
    };
    let total = data.len() as u64;
    let mut faults = s.faults.lock().unwrap();
    let range = if faults.no_range {
        None
    } else {
        parse_range(&headers, total)
    };
    let (start, end) = range.unwrap_or((0, total - 1));
    if start > end {
        return StatusCode::RANGE_NOT_SATISFIABLE.into_response();
    }
    let body_request = !(start == 0 && end == 0);
    let dropped = body_request && take(&mut faults.drop, start);
    let stalled = body_request && !dropped && take(&mut faults.stall, start);
    let mut bytes = data[start as usize..=end as usize].to_vec();
    let middle = total / 2;
    if faults.corrupt && (start..=end).contains(&middle) {
        bytes[(middle - start) as usize] ^= 0xff;
    }
    drop(faults);
    s.log.lock().unwrap().push(Served {
        file: file.clone(),
        start,
        end,
        faulted: dropped || stalled,
    });
    let len = bytes.len();
    let body = if dropped || stalled {
        let half = Bytes::from(bytes[..len / 2].to_vec());
        let head = futures::stream::iter([Ok::<_, std::io::Error>(half)]);
        if dropped {
            let cut = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "test: dropped");
            Body::from_stream(head.chain(futures::stream::iter([Err(cut)])))
        } else {
            Body::from_stream(head.chain(futures::stream::pending()))
        }
    } else {
        Body::from(bytes)
    };
    let mut response = Response::builder()
        .header("x-repo-commit", commit)
        .header(header::ETAG, format!("\"{sha}\""))
        .header("x-linked-etag", format!("\"{sha}\""))
        .header("x-linked-size", total.to_string())
        .header(header::CONTENT_LENGTH, len.to_string())
        .header(header::ACCEPT_RANGES, "bytes");
    if range.is_some() {
        response = response.status(StatusCode::PARTIAL_CONTENT).header(
            header::CONTENT_RANGE,
            format!("bytes {start}-{end}/{total}"),
        );
    }
    response.body(body).unwrap()
}
