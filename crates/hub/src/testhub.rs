//! A local hub for tests (feature `test-hub`, off by default): the parts of
//! the Hugging Face API hf-hub uses, with faults switched on per test and
//! every resolve request logged.
//!
//! It answers `GET /api/models/{owner}/{repo}[/revision/{rev}]` (the listing,
//! with `lfs` entries carrying sha256 and size) and
//! `GET /{owner}/{repo}/resolve/{rev}/{file}` with `Range`, `X-Repo-Commit`,
//! `ETag`, `X-Linked-Etag` and `X-Linked-Size`. Files are bytes in memory
//! ([`HubFile::bytes`]) or a file on disk streamed from there on every request
//! ([`HubFile::path`]). Dropping the [`TestHub`] (or [`TestHub::stop`]) closes
//! its port and every connection.
//!
//! It is also a Python package index ([`TestHub::add_package`]): the project
//! page `GET /simple/{project}/` (PEP 691 JSON, or PEP 503 HTML with
//! [`Faults::html_index`]) whose file URLs are relative (`../../files/{name}`),
//! and `GET /files/{name}` with `Range` and the same faults and log.

use crate::pypi::{normalize, PypiOptions};
use crate::HubOptions;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The chunk size of [`TestHub::options`].
pub const CHUNK: usize = 256 << 10;

/// The most bytes a response body holds in memory at once.
const PIECE: u64 = 256 << 10;

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
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

/// A zip (a wheel) holding these members, deflated as wheels are.
pub fn wheel(members: &[(&str, &[u8])]) -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in members {
        w.start_file(*name, opts).unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// A commit id (40 hex digits) made from a number.
pub fn commit_for(n: u64) -> String {
    format!("{n:040x}")
}

#[derive(Clone)]
enum Content {
    Memory(Arc<Vec<u8>>),
    Disk(Arc<PathBuf>),
}

impl Content {
    /// `len` bytes from `pos`.
    async fn read(&self, pos: u64, len: u64) -> std::io::Result<Bytes> {
        match self {
            Content::Memory(b) => Ok(Bytes::copy_from_slice(
                &b[pos as usize..(pos + len) as usize],
            )),
            Content::Disk(p) => {
                let p = p.clone();
                tokio::task::spawn_blocking(move || {
                    let mut f = std::fs::File::open(&*p)?;
                    f.seek(SeekFrom::Start(pos))?;
                    let mut buf = vec![0; len as usize];
                    f.read_exact(&mut buf)?;
                    Ok(Bytes::from(buf))
                })
                .await
                .map_err(std::io::Error::other)?
            }
        }
    }
}

/// One file of a repository.
#[derive(Clone)]
pub struct HubFile {
    content: Content,
    len: u64,
    sha256: String,
}

impl HubFile {
    pub fn bytes(bytes: Vec<u8>) -> HubFile {
        HubFile {
            len: bytes.len() as u64,
            sha256: sha256_hex(&bytes),
            content: Content::Memory(Arc::new(bytes)),
        }
    }

    /// The file at `path`, hashed now and read from disk on every request
    /// (it must not change while the hub serves it).
    pub fn path(path: &Path) -> std::io::Result<HubFile> {
        let mut f = std::fs::File::open(path)?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut len = 0u64;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            len += n as u64;
        }
        Ok(HubFile {
            content: Content::Disk(Arc::new(path.to_path_buf())),
            len,
            sha256: hex(&h.finalize()),
        })
    }

    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
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
    /// Serve package index pages as PEP 503 HTML instead of JSON.
    pub html_index: bool,
}

/// One resolve request, as answered.
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
    pub fn is_empty(&self) -> bool {
        false
    }
}

#[derive(Default)]
struct HubState {
    repos: Mutex<HashMap<String, HubRepo>>,
    /// Package index projects by normalised name: (file name, file).
    packages: Mutex<HashMap<String, Vec<(String, HubFile)>>>,
    faults: Mutex<Faults>,
    log: Mutex<Vec<Served>>,
}

pub struct TestHub {
    url: String,
    addr: SocketAddr,
    state: Arc<HubState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestHub {
    /// A hub on 127.0.0.1, on a port of its own, with no repositories.
    pub fn start() -> TestHub {
        let state = Arc::new(HubState::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = router(state.clone());
        let thread = std::thread::Builder::new()
            .name("test-hub".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                    tx.send(listener.local_addr().unwrap()).unwrap();
                    tokio::select! {
                        r = axum::serve(listener, app) => r.unwrap(),
                        _ = stopped => {}
                    }
                });
                // Drops the connections still open (a stalled body, say).
                rt.shutdown_background();
            })
            .unwrap();
        let addr = rx.recv().unwrap();
        TestHub {
            url: format!("http://{addr}"),
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The endpoint (`http://127.0.0.1:PORT`), for `HF_ENDPOINT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Adds (or replaces) `repo` at `commit` with files in memory.
    pub fn add(&self, repo: &str, commit: &str, files: &[(&str, Vec<u8>)]) {
        let files = files
            .iter()
            .map(|(name, bytes)| (*name, HubFile::bytes(bytes.clone())))
            .collect();
        self.add_files(repo, commit, files);
    }

    /// Adds (or replaces) `repo` at `commit` with these files.
    pub fn add_files(&self, repo: &str, commit: &str, files: Vec<(&str, HubFile)>) {
        let repo_data = HubRepo {
            commit: commit.to_string(),
            files: files.into_iter().map(|(n, f)| (n.to_string(), f)).collect(),
        };
        self.state
            .repos
            .lock()
            .unwrap()
            .insert(repo.to_string(), repo_data);
    }

    /// Adds (or replaces) the files of a package index project.
    pub fn add_package(&self, project: &str, files: Vec<(&str, HubFile)>) {
        let files = files.into_iter().map(|(n, f)| (n.to_string(), f)).collect();
        self.state
            .packages
            .lock()
            .unwrap()
            .insert(normalize(project), files);
    }

    /// The package index's URL (`http://127.0.0.1:PORT/simple`).
    pub fn pypi_index(&self) -> String {
        format!("{}/simple", self.url)
    }

    /// Options for this package index: no retries, no progress bar.
    pub fn pypi_options(&self) -> PypiOptions {
        PypiOptions {
            retries: 0,
            progress: false,
            stall_timeout: Duration::from_secs(20),
            ..PypiOptions::with_index(&self.pypi_index())
        }
    }

    pub fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.state.faults.lock().unwrap()
    }

    /// The log so far, emptied.
    pub fn take_log(&self) -> Vec<Served> {
        std::mem::take(&mut *self.state.log.lock().unwrap())
    }

    /// Options for this hub and `cache`: one connection, [`CHUNK`]-sized
    /// chunks, no retries, no progress bar.
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

    /// Closes the port and every connection; returns when they are closed.
    pub fn stop(self) {}
}

impl Drop for TestHub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn router(state: Arc<HubState>) -> Router {
    Router::new()
        .route("/api/models/{owner}/{repo}", get(info_main))
        .route("/api/models/{owner}/{repo}/revision/{rev}", get(info))
        .route("/{owner}/{repo}/resolve/{rev}/{*file}", get(resolve))
        .route("/simple/{project}/", get(project_page))
        .route("/files/{file}", get(package_file))
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
            let size = f.len;
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

/// `len` bytes of `content` from `start`, [`PIECE`] at a time, with the byte
/// at `flip` (an offset in the file) inverted.
fn pieces(
    content: Content,
    start: u64,
    len: u64,
    flip: Option<u64>,
) -> impl futures::Stream<Item = std::io::Result<Bytes>> {
    let end = start + len;
    futures::stream::unfold(start, move |pos| {
        let content = content.clone();
        async move {
            if pos >= end {
                return None;
            }
            let n = PIECE.min(end - pos);
            let piece = content.read(pos, n).await.map(|b| match flip {
                Some(at) if (pos..pos + n).contains(&at) => {
                    let mut v = b.to_vec();
                    v[(at - pos) as usize] ^= 0xff;
                    Bytes::from(v)
                }
                _ => b,
            });
            // A read error ends the body (and the connection).
            let next = if piece.is_ok() { pos + n } else { end };
            Some((piece, next))
        }
    })
}

async fn resolve(
    State(s): State<Arc<HubState>>,
    UrlPath((owner, repo, rev, file)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let id = format!("{owner}/{repo}");
    let (commit, data) = {
        let repos = s.repos.lock().unwrap();
        let found = repos
            .get(&id)
            .filter(|r| rev == "main" || rev == r.commit)
            .and_then(|r| {
                let f = r.files.iter().find(|(n, _)| *n == file)?;
                Some((r.commit.clone(), f.1.clone()))
            });
        match found {
            Some(found) => found,
            None => return (StatusCode::NOT_FOUND, "Entry not found").into_response(),
        }
    };
    let mut response = serve(&s, file, data, &headers);
    if let Ok(commit) = commit.parse::<axum::http::HeaderValue>() {
        response.headers_mut().insert("x-repo-commit", commit);
    }
    response
}

/// A package index's project page: JSON (PEP 691) or HTML (PEP 503).
async fn project_page(
    State(s): State<Arc<HubState>>,
    UrlPath(project): UrlPath<String>,
) -> Response {
    let html = s.faults.lock().unwrap().html_index;
    let packages = s.packages.lock().unwrap();
    let Some(files) = packages.get(&project) else {
        return (StatusCode::NOT_FOUND, "Not Found").into_response();
    };
    if html {
        let links: String = files
            .iter()
            .map(|(name, f)| {
                format!(
                    "<a href=\"../../files/{name}#sha256={}\">{name}</a><br/>\n",
                    f.sha256
                )
            })
            .collect();
        let body = format!("<!DOCTYPE html><html><body>\n{links}</body></html>\n");
        return ([(header::CONTENT_TYPE, "text/html")], body).into_response();
    }
    let files: Vec<serde_json::Value> = files
        .iter()
        .map(|(name, f)| {
            serde_json::json!({ "filename": name, "url": format!("../../files/{name}"),
                "hashes": { "sha256": f.sha256 }, "size": f.len, "yanked": false })
        })
        .collect();
    let body =
        serde_json::json!({ "meta": { "api-version": "1.1" }, "name": project, "files": files });
    (
        [(header::CONTENT_TYPE, "application/vnd.pypi.simple.v1+json")],
        body.to_string(),
    )
        .into_response()
}

/// A package index's file, served as a resolve is.
async fn package_file(
    State(s): State<Arc<HubState>>,
    UrlPath(file): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let data = s
        .packages
        .lock()
        .unwrap()
        .values()
        .flatten()
        .find(|(n, _)| *n == file)
        .map(|(_, f)| f.clone());
    match data {
        Some(data) => serve(&s, file, data, &headers),
        None => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}

/// `file`'s bytes (the `Range` asked for), with the faults switched on, logged.
fn serve(s: &HubState, file: String, data: HubFile, headers: &HeaderMap) -> Response {
    let total = data.len;
    let mut faults = s.faults.lock().unwrap();
    let range = if faults.no_range {
        None
    } else {
        parse_range(headers, total)
    };
    let (start, end) = range.unwrap_or((0, total.saturating_sub(1)));
    if start > end {
        return StatusCode::RANGE_NOT_SATISFIABLE.into_response();
    }
    let body_request = !(start == 0 && end == 0);
    let dropped = body_request && take(&mut faults.drop, start);
    let stalled = body_request && !dropped && take(&mut faults.stall, start);
    let flip = faults.corrupt.then_some(total / 2);
    drop(faults);
    s.log.lock().unwrap().push(Served {
        file,
        start,
        end,
        faulted: dropped || stalled,
    });
    let len = if total == 0 { 0 } else { end - start + 1 };
    let sent = if dropped || stalled { len / 2 } else { len };
    let head = pieces(data.content.clone(), start, sent, flip);
    let body = if dropped {
        let cut = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "test: dropped");
        Body::from_stream(head.chain(futures::stream::iter([Err(cut)])))
    } else if stalled {
        Body::from_stream(head.chain(futures::stream::pending()))
    } else {
        Body::from_stream(head)
    };
    let mut response = Response::builder()
        .header(header::ETAG, format!("\"{}\"", data.sha256))
        .header("x-linked-etag", format!("\"{}\"", data.sha256))
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
