//! steward-hub against a local hub the tests start themselves (no network).
//!
//! The server speaks the parts of the Hugging Face API hf-hub uses: the repo
//! listing (`/api/models/{owner}/{repo}/revision/{rev}`, with `lfs` entries)
//! and `/{owner}/{repo}/resolve/{rev}/{file}` with `Range`, `X-Repo-Commit`,
//! `ETag`, `X-Linked-Etag` and `X-Linked-Size`. Faults (dropped connections,
//! stalls, corrupted bytes, no Range support, no `lfs` in the listing) are
//! switched on per test, and every resolve request is logged.

use std::path::{Path, PathBuf};
use std::time::Duration;
use steward_hub::testhub::{commit_for, random_bytes, sha256_hex, Fault, Served, TestHub, CHUNK};
use steward_hub::{fetch, fetch_blocking, HubError, HubOptions, HubRef};

// ---- helpers for the tests ----

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.symlink_metadata().unwrap().is_dir() {
                out.extend(files_under(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn sync_part(repo_dir: &Path) -> Option<PathBuf> {
    files_under(&repo_dir.join("blobs"))
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".sync.part"))
}

/// The committed-bytes trailer hf-hub keeps at the end of a `.sync.part`.
fn committed(part: &Path, total: usize) -> u64 {
    let bytes = std::fs::read(part).unwrap();
    assert_eq!(
        bytes.len(),
        total + 8,
        "a .sync.part is the file plus an 8-byte trailer"
    );
    u64::from_le_bytes(bytes[total..].try_into().unwrap())
}

fn body_requests(log: &[Served]) -> Vec<&Served> {
    log.iter().filter(|s| s.is_body()).collect()
}

const REPO: &str = "acme/tiny-GGUF";
const FILE: &str = "tiny-Q4_K_M.gguf";

/// A hub with one model of `len` bytes (an odd size: the last chunk is short).
fn hub_with_model(len: usize) -> (TestHub, Vec<u8>) {
    let hub = TestHub::start();
    let model = random_bytes(len, 7);
    hub.add(
        REPO,
        &commit_for(1),
        &[("README.md", b"# tiny\n".to_vec()), (FILE, model.clone())],
    );
    (hub, model)
}

fn model_ref() -> HubRef {
    HubRef::parse(REPO).unwrap()
}

// ---- 1. fresh ----

#[tokio::test]
async fn fresh_download_is_cached_in_hub_layout_and_verified() {
    let (hub, model) = hub_with_model(3 * (1 << 20) + 123);
    let cache = temp();
    let mut o = hub.options(cache.path());
    o.progress = true;
    o.connections = 4;
    let path = fetch(&model_ref(), &o).await.unwrap();

    let repo_dir = cache.path().join("models--acme--tiny-GGUF");
    assert_eq!(
        path,
        repo_dir.join("snapshots").join(commit_for(1)).join(FILE)
    );
    assert_eq!(std::fs::read(&path).unwrap(), model, "bytes equal");
    let sha = sha256_hex(&model);
    let blob = std::fs::canonicalize(&path).unwrap();
    assert_eq!(
        blob,
        std::fs::canonicalize(repo_dir.join("blobs").join(&sha)).unwrap()
    );
    let marker =
        std::fs::read_to_string(repo_dir.join("blobs").join(format!("{sha}.sha256-ok"))).unwrap();
    assert!(
        marker.starts_with(&format!("{sha} {} ", model.len())),
        "hashed: {marker}"
    );
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(),
        commit_for(1)
    );
    assert!(sync_part(&repo_dir).is_none());
    let served = hub.take_log();
    let body = body_requests(&served);
    assert_eq!(
        body.len(),
        model.len().div_ceil(CHUNK),
        "one request per chunk"
    );
    assert!(
        served.iter().all(|s| s.file == FILE),
        "only the model is fetched"
    );

    // A second start finds it verified: no download, no re-hash needed.
    let again = fetch(&model_ref(), &o).await.unwrap();
    assert_eq!(again, path);
    assert!(body_requests(&hub.take_log()).is_empty());
}

// ---- 2. resume ----

#[test]
fn interrupted_download_resumes_from_committed_bytes() {
    let (hub, model) = hub_with_model(3 * (1 << 20) + 123);
    let cache = temp();
    let o = hub.options(cache.path());
    let cut_at = 4 * CHUNK as u64;
    hub.faults().drop = Fault {
        times: 1,
        from: cut_at,
    };

    let err = fetch_blocking(&model_ref(), &o).unwrap_err();
    assert!(matches!(err, HubError::Download { .. }), "{err}");
    let repo_dir = cache.path().join("models--acme--tiny-GGUF");
    let part = sync_part(&repo_dir).expect("the interrupted download leaves its .sync.part");
    let done = committed(&part, model.len());
    assert_eq!(
        done, cut_at,
        "the chunks before the dropped one are committed"
    );
    assert!(files_under(&repo_dir.join("snapshots")).is_empty());
    hub.take_log();

    let path = fetch_blocking(&model_ref(), &o).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), model);
    let served = hub.take_log();
    let body = body_requests(&served);
    assert!(
        body.iter().all(|s| s.start >= done),
        "re-requested committed bytes: {body:?}"
    );
    assert_eq!(body.first().unwrap().start, done);
    let bytes: u64 = body.iter().map(|s| s.len()).sum();
    assert_eq!(
        bytes,
        model.len() as u64 - done,
        "the second run fetched only the rest"
    );
    assert!(sync_part(&repo_dir).is_none());
}

#[test]
fn retries_resume_within_one_fetch() {
    let (hub, model) = hub_with_model(2 * (1 << 20) + 5);
    let cache = temp();
    let mut o = hub.options(cache.path());
    o.retries = 3;
    hub.faults().drop = Fault {
        times: 2,
        from: 3 * CHUNK as u64,
    };

    let path = fetch_blocking(&model_ref(), &o).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), model);
    let served = hub.take_log();
    let body = body_requests(&served);
    assert_eq!(body.iter().filter(|s| s.faulted).count(), 2);
    // Every chunk before the first drop was served exactly once.
    for start in (0..3 * CHUNK as u64).step_by(CHUNK) {
        let n = body
            .iter()
            .filter(|s| s.start == start && !s.faulted)
            .count();
        assert_eq!(n, 1, "chunk at {start} served {n} times: {body:?}");
    }
}

#[test]
fn stalled_download_is_abandoned_and_resumed() {
    let (hub, model) = hub_with_model((1 << 20) + 77);
    let cache = temp();
    let mut o = hub.options(cache.path());
    o.retries = 1;
    // Long enough that a healthy chunk from the local hub never looks
    // stalled on a loaded machine (the one retry is the stall's); the
    // stalled request costs the test this long.
    o.stall_timeout = Duration::from_secs(5);
    let stall_at = 2 * CHUNK as u64;
    hub.faults().stall = Fault {
        times: 1,
        from: stall_at,
    };

    // On a thread, so that a missing watchdog fails the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(fetch_blocking(&model_ref(), &o)));
    let path = rx
        .recv_timeout(Duration::from_secs(300))
        .expect("the stalled download was not abandoned")
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), model);
    let served = hub.take_log();
    let body = body_requests(&served);
    let stalled = body
        .iter()
        .position(|s| s.faulted)
        .expect("one request stalled");
    assert_eq!(body[stalled].start, stall_at);
    assert_eq!(
        body[stalled + 1].start,
        stall_at,
        "the retry resumed at the stalled chunk"
    );
    assert_eq!(body.iter().filter(|s| s.start == 0).count(), 1);
}

// ---- 3. corruption ----

#[test]
fn corrupted_download_is_refused_and_removed() {
    for no_lfs in [false, true] {
        let (hub, model) = hub_with_model((1 << 20) + 9);
        let cache = temp();
        let o = hub.options(cache.path());
        hub.faults().corrupt = true;
        // Without `lfs` in the listing the blob's name (X-Linked-Etag) is the reference.
        hub.faults().no_lfs = no_lfs;

        let err = fetch_blocking(&model_ref(), &o).unwrap_err();
        let HubError::Sha256Mismatch {
            expected,
            actual,
            file,
        } = &err
        else {
            panic!("no_lfs={no_lfs}: expected a sha256 mismatch, got {err}");
        };
        assert_eq!(expected, &sha256_hex(&model));
        assert_ne!(actual, expected);
        assert_eq!(file, FILE);
        assert!(err.to_string().contains("removed"), "{err}");
        let repo_dir = cache.path().join("models--acme--tiny-GGUF");
        assert_eq!(files_under(&repo_dir.join("blobs")), Vec::<PathBuf>::new());
        assert_eq!(
            files_under(&repo_dir.join("snapshots")),
            Vec::<PathBuf>::new()
        );

        // The hub fixed: the next fetch downloads again and succeeds.
        hub.faults().corrupt = false;
        let path = fetch_blocking(&model_ref(), &o).unwrap();
        assert_eq!(std::fs::read(path).unwrap(), model);
    }
}

#[test]
fn tampered_cache_is_hashed_again_and_refused() {
    let (hub, model) = hub_with_model(600_001);
    let cache = temp();
    let o = hub.options(cache.path());
    let path = fetch_blocking(&model_ref(), &o).unwrap();
    // Same size, one byte changed (the mtime moves, so the marker no longer
    // holds; moved by hand, not left to the clock's granularity).
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[1000] ^= 1;
    let blob = std::fs::canonicalize(&path).unwrap();
    let mtime = std::fs::metadata(&blob).unwrap().modified().unwrap();
    std::fs::write(&blob, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&blob)
        .unwrap()
        .set_modified(mtime + Duration::from_secs(10))
        .unwrap();

    let offline = HubOptions {
        offline: true,
        ..o.clone()
    };
    let err = fetch_blocking(&model_ref(), &offline).unwrap_err();
    assert!(matches!(err, HubError::Sha256Mismatch { .. }), "{err}");
    assert!(!path.exists(), "the bad blob is gone");
    hub.take_log();
    let path = fetch_blocking(&model_ref(), &o).unwrap();
    assert_eq!(std::fs::read(path).unwrap(), model);
    assert!(
        !body_requests(&hub.take_log()).is_empty(),
        "downloaded again"
    );
}

// ---- 4. offline ----

/// An endpoint nothing answers: a port bound (so no one else gets it) but
/// not listening, so every connection is refused. Keep the socket while
/// the endpoint is used.
fn dead_endpoint() -> (tokio::net::TcpSocket, String) {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = sock.local_addr().unwrap();
    (sock, format!("http://{addr}"))
}

#[test]
fn offline_and_unreachable_serve_the_cache() {
    let (hub, _model) = hub_with_model(300_003);
    let cache = temp();
    let o = hub.options(cache.path());
    let path = fetch_blocking(&model_ref(), &o).unwrap();
    hub.take_log();

    let (_bound, endpoint) = dead_endpoint();
    let dead = HubOptions {
        endpoint,
        ..o.clone()
    };
    let offline = HubOptions {
        offline: true,
        ..dead.clone()
    };
    assert_eq!(fetch_blocking(&model_ref(), &offline).unwrap(), path);
    assert_eq!(
        fetch_blocking(&model_ref(), &dead).unwrap(),
        path,
        "unreachable hub"
    );
    let by_quant = HubRef::parse(&format!("{REPO}:q4_k_m")).unwrap();
    assert_eq!(fetch_blocking(&by_quant, &offline).unwrap(), path);
    assert!(hub.take_log().is_empty(), "offline never asked the hub");

    let other_quant = HubRef::parse(&format!("{REPO}:Q8_0")).unwrap();
    let err = fetch_blocking(&other_quant, &offline).unwrap_err();
    assert!(
        matches!(&err, HubError::NoMatch { available, .. } if available == &[FILE.to_string()]),
        "{err}"
    );
    assert!(err.to_string().contains("in the cache"), "{err}");

    let uncached = HubRef::parse("acme/never-fetched").unwrap();
    let err = fetch_blocking(&uncached, &offline).unwrap_err();
    assert!(matches!(err, HubError::NotCached { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("acme/never-fetched") && msg.contains("offline"),
        "{msg}"
    );
    let err = fetch_blocking(&uncached, &dead).unwrap_err();
    assert!(err.to_string().contains("unreachable"), "{err}");
}

#[test]
fn new_commit_reuses_the_verified_blob() {
    let (hub, model) = hub_with_model(400_009);
    let cache = temp();
    let o = hub.options(cache.path());
    fetch_blocking(&model_ref(), &o).unwrap();
    hub.take_log();
    hub.add(
        REPO,
        &commit_for(2),
        &[("README.md", b"# edited\n".to_vec()), (FILE, model.clone())],
    );

    let path = fetch_blocking(&model_ref(), &o).unwrap();
    assert!(path.starts_with(
        cache
            .path()
            .join("models--acme--tiny-GGUF/snapshots")
            .join(commit_for(2))
    ));
    assert_eq!(std::fs::read(&path).unwrap(), model);
    assert!(
        body_requests(&hub.take_log()).is_empty(),
        "no second download"
    );
    let main = cache.path().join("models--acme--tiny-GGUF/refs/main");
    assert_eq!(std::fs::read_to_string(main).unwrap(), commit_for(2));
}

// ---- 5. selection, split files, references, hub errors ----

#[test]
fn quant_selection_and_split_files() {
    let hub = TestHub::start();
    let part = |i: u64| random_bytes(70_000 + i as usize, i);
    hub.add(
        "acme/multi",
        &commit_for(3),
        &[
            ("README.md", b"x".to_vec()),
            ("aaa-mmproj-F16.gguf", part(1)),
            ("m-BF16.gguf", part(2)),
            ("m-F16.gguf", part(3)),
            ("m-IQ4_XS.gguf", part(4)),
            ("m-Q4_K_M.gguf", part(5)),
            ("m-Q4_K_S.gguf", part(6)),
            ("Q6_K/m-Q6_K-00001-of-00003.gguf", part(7)),
            ("Q6_K/m-Q6_K-00002-of-00003.gguf", part(8)),
            ("Q6_K/m-Q6_K-00003-of-00003.gguf", part(9)),
        ],
    );
    hub.add(
        "acme/no-q4",
        &commit_for(4),
        &[
            ("aaa-mmproj.gguf", part(10)),
            ("z-Q8_0.gguf", part(11)),
            ("b-F16.gguf", part(12)),
        ],
    );
    hub.add(
        "acme/broken-split",
        &commit_for(5),
        &[
            ("s-00001-of-00003.gguf", part(13)),
            ("s-00003-of-00003.gguf", part(14)),
        ],
    );
    let cache = temp();
    let o = hub.options(cache.path());
    let get = |r: &str| fetch_blocking(&HubRef::parse(r).unwrap(), &o);
    let name = |p: PathBuf| p.file_name().unwrap().to_string_lossy().to_string();

    assert_eq!(
        name(get("acme/multi").unwrap()),
        "m-Q4_K_M.gguf",
        "Q4_K_M by default"
    );
    assert_eq!(
        name(get("acme/multi:q4_k_s").unwrap()),
        "m-Q4_K_S.gguf",
        "case-insensitive"
    );
    assert_eq!(
        name(get("acme/multi:F16").unwrap()),
        "m-F16.gguf",
        "F16 is not BF16"
    );
    assert_eq!(
        name(get("acme/no-q4").unwrap()),
        "b-F16.gguf",
        "first GGUF, mmproj skipped"
    );

    let first = get("acme/multi:Q6_K").unwrap();
    assert_eq!(name(first.clone()), "m-Q6_K-00001-of-00003.gguf");
    for i in 1..=3u64 {
        let p = first.with_file_name(format!("m-Q6_K-0000{i}-of-00003.gguf"));
        assert_eq!(std::fs::read(p).unwrap(), part(6 + i), "part {i}");
    }

    let err = get("acme/multi:Q5_K_M").unwrap_err();
    let HubError::NoMatch { available, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(available.len(), 8, "{err}");
    assert!(
        !err.to_string().contains("mmproj") && err.to_string().contains("m-Q4_K_M.gguf"),
        "{err}"
    );
    let err = get("acme/multi:Q4_K").unwrap_err();
    assert!(
        matches!(&err, HubError::Ambiguous { candidates, .. } if candidates.len() == 2),
        "{err}"
    );
    let err = get("acme/broken-split").unwrap_err();
    let HubError::IncompleteSplit { missing, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(missing, &["s-00002-of-00003.gguf".to_string()]);
}

#[test]
fn references_parse_or_are_refused() {
    let r = HubRef::parse("owner/repo").unwrap();
    assert_eq!(
        (r.repo.as_str(), r.quant.as_deref(), r.revision.as_str()),
        ("owner/repo", None, "main")
    );
    let r = HubRef::parse("owner/repo:Q4_K_M").unwrap();
    assert_eq!(r.quant.as_deref(), Some("Q4_K_M"));
    let r = HubRef::parse("owner/re.po_1@v1.0:q8_0").unwrap();
    assert_eq!(
        (r.repo.as_str(), r.quant.as_deref(), r.revision.as_str()),
        ("owner/re.po_1", Some("q8_0"), "v1.0")
    );
    assert_eq!(r.to_string(), "owner/re.po_1@v1.0:q8_0");
    assert_eq!(
        HubRef::parse("o/r@refs/pr/1").unwrap().revision,
        "refs/pr/1"
    );

    for bad in [
        "",
        "repo",
        "o/r/x",
        "/repo",
        "owner/",
        "o/r:",
        "o/r@:Q4",
        "o/r:Q4@main",
        "o w/r",
        "o/r--x",
        "o/.r",
        "https://huggingface.co/o/r",
        "o/r:Q4/x",
    ] {
        let err = HubRef::parse(bad).expect_err(bad);
        assert!(matches!(err, HubError::InvalidRef { .. }), "{bad}: {err}");
        assert!(
            err.to_string().contains("invalid model reference"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn unknown_repo_is_not_found() {
    let (hub, _) = hub_with_model(1000);
    let cache = temp();
    let err = fetch_blocking(
        &HubRef::parse("acme/missing").unwrap(),
        &hub.options(cache.path()),
    )
    .unwrap_err();
    assert!(
        matches!(err, HubError::RepoNotFound { status: 404, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("acme/missing"), "{err}");
}

#[test]
fn server_without_range_support_is_refused() {
    let (hub, _) = hub_with_model(100_000);
    let cache = temp();
    hub.faults().no_range = true;
    let err = fetch_blocking(&model_ref(), &hub.options(cache.path())).unwrap_err();
    assert!(matches!(err, HubError::Download { .. }), "{err}");
    assert!(err.to_string().contains("Range"), "{err}");
    let repo_dir = cache.path().join("models--acme--tiny-GGUF");
    assert!(files_under(&repo_dir.join("snapshots")).is_empty());
}

#[test]
fn fetch_blocking_works_inside_a_runtime_too() {
    let (hub, model) = hub_with_model(50_000);
    let cache = temp();
    let o = hub.options(cache.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let path = rt
        .block_on(async { fetch_blocking(&model_ref(), &o) })
        .unwrap();
    assert_eq!(std::fs::read(path).unwrap(), model);
}
