//! The state directory across a restart, in-process: a server on the real
//! default model stores a Response (whole) and a streamed one in its state
//! directory; while it runs, a second server on the same directory
//! (in-process, and the `steward` binary) refuses to start with one line;
//! the first server is dropped (its runtime with it, so every task and its
//! hold on the directory go) and a new one on the same directory and
//! engine serves `GET /v1/responses/{id}`, its input items and
//! `previous_response_id`, and keeps a delete across the next restart.
//! (A real SIGKILL under load, 20 times: scripts/state_kill_check.py.)

use crate::common::{self, HANG_GUARD};

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use steward_engine::{Engine, EngineConfig, EngineHandle};
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A server on `engine` keeping its state in `dir`, on a runtime of its
/// own: dropping the runtime drops the server. Its base URL.
fn serve(engine: &EngineHandle, dir: &Path) -> (Runtime, String) {
    let rt = runtime();
    let base = rt.block_on(async {
        let state = steward_server::AppState::with_options(Default::default());
        state.set_engine(engine.clone());
        let sd = match steward_server::StateDir::open(dir, true).expect("state dir") {
            steward_server::Opened::Dir(d) => Arc::new(d),
            steward_server::Opened::Unusable(why) => panic!("{why}"),
        };
        state.set_state_dir(sd).unwrap();
        let listener = steward_server::bind("127.0.0.1:0".parse().unwrap(), None).unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(steward_server::serve_forever(
            listener,
            state,
            Default::default(),
        ));
        format!("http://{addr}")
    });
    (rt, base)
}

async fn call(base: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let c = reqwest::Client::new();
    let url = format!("{base}{path}");
    let r = match (method, body) {
        ("GET", _) => c.get(&url),
        ("DELETE", _) => c.delete(&url),
        (_, b) => c.post(&url).json(&b.unwrap_or(Value::Null)),
    };
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn ask(input: &str, extra: Value) -> Value {
    let mut b = json!({"model": "smol", "input": input, "max_output_tokens": 2, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// The binary on `dir` while another server holds it: exit != 0 and one
/// line saying so, before any model loads.
fn binary_refuses(dir: &Path) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(["serve", "--port", "0", "--state-dir"])
        .arg(dir)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + HANG_GUARD;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a second server on a held state directory did not stop");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(
        lines[0].starts_with("steward: error: --state-dir") && lines[0].contains("another server"),
        "{err}"
    );
}

#[test]
fn stored_responses_survive_a_restart_and_a_held_directory_is_refused() {
    let dir = std::env::temp_dir().join(format!("steward-state-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let client = runtime();
    let engine = client.block_on(async {
        let path = steward_engine::fetch::ensure_default_model().expect("default model");
        let mut c = EngineConfig::new(path);
        c.model.served_name = "smol".into();
        c.admit.max_seqs = 2;
        c.admit.ctx_per_seq = 512;
        let e = Engine::start(c).expect("engine");
        assert!(e.wait_ready().await);
        e
    });

    let (rt1, base) = serve(&engine, &dir);
    let (first, streamed) = client.block_on(async {
        let (st, v) = call(
            &base,
            "POST",
            "/v1/responses",
            Some(ask("Say one.", json!({}))),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        let first = v;
        let r = reqwest::Client::new()
            .post(format!("{base}/v1/responses"))
            .json(&ask("Say two.", json!({"stream": true})))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        // Cut at 2 tokens: `response.incomplete` ends it.
        assert!(
            text.contains("event: response.incomplete")
                || text.contains("event: response.completed"),
            "{text}"
        );
        let id = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find_map(|v| v["response"]["id"].as_str().map(str::to_string))
            .unwrap();
        // Not kept: `store: false`.
        let (st, v) = call(
            &base,
            "POST",
            "/v1/responses",
            Some(ask("Say three.", json!({"store": false}))),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        (first, (id, v["id"].as_str().unwrap().to_string()))
    });

    // Held: a second server on the directory refuses, in-process and as
    // the binary.
    let e = steward_server::StateDir::open(&dir, true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("another server") && !e.contains('\n'), "{e}");
    binary_refuses(&dir);

    drop(rt1);
    let (rt2, base) = serve(&engine, &dir);
    let id = first["id"].as_str().unwrap().to_string();
    client.block_on(async {
        let (st, v) = call(&base, "GET", &format!("/v1/responses/{id}"), None).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v, first, "the stored response, as answered");
        let (st, v) = call(&base, "GET", &format!("/v1/responses/{}", streamed.0), None).await;
        assert_eq!(
            (st, v["id"].as_str()),
            (200, Some(streamed.0.as_str())),
            "{v}"
        );
        assert!(v["output"].as_array().is_some_and(|o| !o.is_empty()), "{v}");
        let (st, v) = call(&base, "GET", &format!("/v1/responses/{}", streamed.1), None).await;
        common::assert_error(st, &v, 404, "response_not_found");
        let (st, v) = call(
            &base,
            "GET",
            &format!("/v1/responses/{id}/input_items"),
            None,
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["data"][0]["content"][0]["text"], "Say one.", "{v}");
        let (st, v) = call(
            &base,
            "POST",
            "/v1/responses",
            Some(ask("And again.", json!({"previous_response_id": id}))),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["previous_response_id"], json!(id));
        let (st, _) = call(
            &base,
            "DELETE",
            &format!("/v1/responses/{}", streamed.0),
            None,
        )
        .await;
        assert_eq!(st, 200);
    });
    drop(rt2);
    // The delete was kept too.
    let (rt3, base) = serve(&engine, &dir);
    client.block_on(async {
        let (st, v) = call(&base, "GET", &format!("/v1/responses/{}", streamed.0), None).await;
        common::assert_error(st, &v, 404, "response_not_found");
        let (st, _) = call(&base, "GET", &format!("/v1/responses/{id}"), None).await;
        assert_eq!(st, 200);
    });
    drop(rt3);
    assert_eq!(std::fs::read_to_string(dir.join("VERSION")).unwrap(), "1\n");
    let _ = std::fs::remove_dir_all(&dir);
}
