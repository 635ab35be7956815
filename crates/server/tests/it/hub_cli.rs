//! `steward serve --hf` end to end: the real default model (SmolLM2-135M
//! Q4_1) fetched from a local Hugging Face compatible hub
//! (`steward_hub::testhub`) into a hub cache of the test's own, served, then
//! served again from that cache with the hub gone and `HF_HUB_OFFLINE=1`;
//! and a hub that corrupts the bytes, which stops the start with one line.
//! Each server listens on a port the OS chose (`--port 0`, found through
//! /proc); waits are hang guards (`common::HANG_GUARD`).

use crate::common::{self, HANG_GUARD};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use steward_hub::testhub::{commit_for, HubFile, TestHub};

const REPO: &str = "acme/smol-GGUF";
const FILE: &str = "smol-Q4_1.gguf";
/// The `--hf` reference, and so the model's name.
const MODEL: &str = "acme/smol-GGUF:Q4_1";
const READY_WITHIN: Duration = HANG_GUARD;

/// A hub serving the default model file (streamed from where it lies) as
/// `acme/smol-GGUF` / `smol-Q4_1.gguf`, next to a README; and its sha256.
fn hub_with_smol() -> (TestHub, HubFile) {
    let real = steward_engine::fetch::ensure_default_model().unwrap();
    let gguf = HubFile::path(&real).unwrap();
    let hub = TestHub::start();
    hub.add_files(
        REPO,
        &commit_for(1),
        vec![
            ("README.md", HubFile::bytes(b"# smol\n".to_vec())),
            (FILE, gguf.clone()),
        ],
    );
    (hub, gguf)
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

/// `steward serve --hf MODEL` against `endpoint` with the hub cache in
/// `root/hub` (and `HF_HOME` in `root/home`, so no token file is read);
/// stderr goes to `log`. Killed when dropped.
struct Serve {
    child: Child,
    log: PathBuf,
}

impl Serve {
    fn spawn(endpoint: &str, root: &Path, offline: bool, log: &str) -> Serve {
        let log = root.join(log);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_steward"));
        cmd.args(["serve", "--hf", MODEL, "--port", "0"])
            .args(["--max-seqs", "2", "--ctx-per-seq", "512"])
            .env_remove("RUST_LOG")
            .env("HF_ENDPOINT", endpoint)
            .env("HF_HUB_CACHE", root.join("hub"))
            .env("HF_HOME", root.join("home"))
            .env_remove("HF_TOKEN")
            .env_remove("HF_TOKEN_PATH")
            .env_remove("HF_HUB_OFFLINE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if offline {
            cmd.env("HF_HUB_OFFLINE", "1");
        }
        Serve {
            child: cmd.spawn().unwrap(),
            log,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its base URL once it listens (it listens before it fetches).
    fn base(&mut self) -> String {
        format!(
            "http://127.0.0.1:{}",
            common::wait_for_port(&mut self.child)
        )
    }

    /// Waits (bounded) for `/ready` to answer 200.
    async fn ready(&mut self, client: &reqwest::Client, base: &str) -> Duration {
        let t = Instant::now();
        while t.elapsed() < READY_WITHIN {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "steward exited ({status}) before /ready:\n{}",
                    self.stderr()
                );
            }
            let ready = client
                .get(format!("{base}/ready"))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0);
            if ready == 200 {
                return t.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("not ready within {READY_WITHIN:?}:\n{}", self.stderr());
    }

    /// Waits (bounded) for the process to exit on its own.
    fn exit_code(&mut self, within: Duration) -> i32 {
        let t = Instant::now();
        while t.elapsed() < within {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("steward did not exit within {within:?}:\n{}", self.stderr());
    }

    /// SIGTERM (nothing in flight: it exits at once, status 0).
    fn terminate(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let code = self.exit_code(HANG_GUARD);
        assert_eq!(code, 0, "exit status after SIGTERM:\n{}", self.stderr());
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `/v1/models`' card for MODEL.
async fn card(client: &reqwest::Client, base: &str) -> serde_json::Value {
    let r = client
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let list: serde_json::Value = r.json().await.unwrap();
    let data = list["data"].as_array().expect("data");
    data.iter()
        .find(|m| m["id"] == MODEL)
        .unwrap_or_else(|| panic!("{MODEL} not in /v1/models: {list}"))
        .clone()
}

/// A greedy 8-token completion from MODEL; its text.
async fn complete(client: &reqwest::Client, base: &str) -> String {
    let r = client
        .post(format!("{base}/v1/completions"))
        .json(
            &serde_json::json!({"model": MODEL, "prompt": "The capital of France is",
            "max_tokens": 8, "temperature": 0}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["model"], MODEL, "{v}");
    v["choices"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {v}"))
        .to_string()
}

#[test]
fn serve_hf_fetches_from_the_hub_then_serves_offline_from_the_cache() {
    let started = Instant::now();
    let (hub, gguf) = hub_with_smol();
    let root = tempfile::tempdir().unwrap();
    let endpoint = hub.url().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::new();

    // 1. Online: fetched into the cache, verified, loaded, served.
    let mut serve = Serve::spawn(&endpoint, root.path(), false, "online.log");
    let base = serve.base();
    let (online_ready, text) = rt.block_on(async {
        let ready = serve.ready(&client, &base).await;
        let card = card(&client, &base).await;
        assert_eq!(card["status"]["value"], "loaded", "{card}");
        assert_eq!(
            card["identity"]["weights_sha256"],
            gguf.sha256(),
            "the served weights are the hub's file: {card}"
        );
        (ready, complete(&client, &base).await)
    });
    let log = hub.take_log();
    let body: u64 = log
        .iter()
        .filter(|s| s.file == FILE && s.is_body())
        .map(|s| s.len())
        .sum();
    assert!(
        body >= gguf.len(),
        "the whole file came from the hub ({body} of {} bytes)",
        gguf.len()
    );
    serve.terminate();

    // The hub's cache layout.
    let repo_dir = root.path().join("hub").join("models--acme--smol-GGUF");
    let commit = std::fs::read_to_string(repo_dir.join("refs").join("main")).unwrap();
    assert_eq!(commit.trim(), commit_for(1));
    let snapshot = repo_dir.join("snapshots").join(commit_for(1)).join(FILE);
    let blob = repo_dir.join("blobs").join(gguf.sha256());
    assert_eq!(std::fs::metadata(&blob).unwrap().len(), gguf.len());
    assert_eq!(
        snapshot.canonicalize().unwrap(),
        blob.canonicalize().unwrap(),
        "the snapshot links to the blob"
    );
    assert!(
        !files_under(&repo_dir.join("blobs"))
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".part")),
        "no partial download left"
    );

    // 2. Offline, the hub gone: served from the cache, the same answer.
    hub.stop();
    let mut serve = Serve::spawn(&endpoint, root.path(), true, "offline.log");
    let base = serve.base();
    let (offline_ready, again) = rt.block_on(async {
        let ready = serve.ready(&client, &base).await;
        let card = card(&client, &base).await;
        assert_eq!(card["status"]["value"], "loaded", "{card}");
        assert_eq!(card["identity"]["weights_sha256"], gguf.sha256(), "{card}");
        (ready, complete(&client, &base).await)
    });
    // Exactly: each is the first request of a fresh server with the same
    // settings and weights, computed alone in the same shapes, no cache.
    assert_eq!(again, text, "greedy output from the cached file");
    serve.terminate();
    eprintln!(
        "online ready in {online_ready:?}, offline ready in {offline_ready:?}, \
         {:?} in all; completion {text:?}",
        started.elapsed()
    );
}

#[test]
fn serve_hf_refuses_corrupted_bytes_with_one_line_and_keeps_no_blob() {
    let (hub, gguf) = hub_with_smol();
    hub.faults().corrupt = true;
    let root = tempfile::tempdir().unwrap();
    let mut serve = Serve::spawn(hub.url(), root.path(), false, "corrupt.log");
    let code = serve.exit_code(READY_WITHIN);
    let err = serve.stderr();
    assert_ne!(code, 0, "{err}");
    // One `steward: error:` line, naming the expected hash.
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("steward: error:") && lines[0].contains("sha256"),
        "{err}"
    );
    assert!(
        lines[0].contains(gguf.sha256()),
        "names the expected hash: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let repo_dir = root.path().join("hub").join("models--acme--smol-GGUF");
    assert_eq!(files_under(&repo_dir.join("blobs")), Vec::<PathBuf>::new());
    assert_eq!(
        files_under(&repo_dir.join("snapshots")),
        Vec::<PathBuf>::new()
    );
}

/// `--hf` on a repository with a projector: the `mmproj` GGUF (F16 over
/// the others) comes beside the weights, and the model takes images.
#[test]
fn serve_hf_fetches_the_projector_beside_the_weights() {
    let root_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let make = "target/pyenv/bin/python scripts/gen-random-mmproj.py --kind gemma3 --out target/mmproj/gemma3.gguf";
    let Some(projector) = common::fixture(root_dir.join("target/mmproj/gemma3.gguf"), make) else {
        return;
    };
    let real = steward_engine::fetch::ensure_default_model().unwrap();
    let hub = TestHub::start();
    hub.add_files(
        REPO,
        &commit_for(1),
        vec![
            (FILE, HubFile::path(&real).unwrap()),
            ("mmproj-smol-f16.gguf", HubFile::path(&projector).unwrap()),
            (
                "mmproj-smol-bf16.gguf",
                HubFile::bytes(b"not this one".to_vec()),
            ),
        ],
    );
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::new();
    let mut serve = Serve::spawn(hub.url(), root.path(), false, "mmproj.log");
    let base = serve.base();
    rt.block_on(async {
        serve.ready(&client, &base).await;
        let card = card(&client, &base).await;
        assert_eq!(
            card["modalities"],
            serde_json::json!(["text", "image"]),
            "{card}"
        );
    });
    let fetched: Vec<String> = hub.take_log().iter().map(|s| s.file.clone()).collect();
    assert!(
        fetched.iter().any(|f| f == "mmproj-smol-f16.gguf"),
        "{fetched:?}"
    );
    assert!(
        !fetched.iter().any(|f| f == "mmproj-smol-bf16.gguf"),
        "{fetched:?}"
    );
    serve.terminate();
}
