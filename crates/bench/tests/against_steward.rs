//! A short real run: an in-process Steward (real model) on 127.0.0.1:0,
//! driven by the `steward-bench` binary; the JSON report must have every
//! field, the arithmetic must agree with the records, and the steady-state
//! check must see the server idle again.

use std::process::Command;

use serde_json::Value;
use steward_engine::{Engine, EngineConfig};

const WORKLOAD: &str = r#"
name = "tiny"
seed = 3
conversations = 5
[arrival]
mode = "closed"
concurrency = 2
[prompt]
turns = 2
shared_prefix_tokens = 30
[[prompt.mix]]
weight = 1.0
min_tokens = 10
max_tokens = 30
[output]
min_tokens = 4
max_tokens = 8
[cancel]
fraction = 0.2
at = "decode"
after_chunks = 2
[slo]
ttft_ms = 60000
itl_ms = 60000
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_run_report_has_every_field() {
    let path = steward_engine::fetch::ensure_default_model().unwrap();
    let mut c = EngineConfig::new(path);
    c.admit.max_seqs = 4;
    c.admit.ctx_per_seq = 512;
    let engine = Engine::start(c).unwrap();
    assert!(engine.wait_ready().await);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = steward_server::AppState::new(engine, None);
    tokio::spawn(steward_server::serve_forever(
        listener,
        state,
        Default::default(),
    ));

    let dir = std::env::temp_dir().join(format!("steward-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wl = dir.join("tiny.toml");
    std::fs::write(&wl, WORKLOAD).unwrap();
    let out = dir.join("r.json");
    let html = dir.join("r.html");
    let url = format!("http://{addr}");
    let args: Vec<String> = [
        "run",
        "--url",
        &url,
        "--workload",
        wl.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
        // The steady-state check polls until the server is idle: this is
        // its hang guard, not a claim about how fast it settles.
        "--settle-s",
        "300",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let status = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_steward-bench"))
            .args(args)
            .status()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(status.success(), "bench exited with {status}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let s = &v["summary"];
    for f in [
        "requests",
        "completed",
        "cancelled_by_us",
        "errors",
        "errors_by_status",
        "duration_s",
        "ttft_ms",
        "first_byte_ms",
        "inter_chunk_gap_ms",
        "tpot_ms",
        "e2e_ms",
        "output_tokens",
        "prompt_tokens",
        "output_tokens_per_s",
        "requests_per_s",
        "text_chunks",
        "goodput",
    ] {
        assert!(s.get(f).is_some(), "summary.{f} missing: {s}");
    }
    for d in ["ttft_ms", "inter_chunk_gap_ms", "e2e_ms"] {
        for p in ["n", "mean", "p50", "p90", "p99", "max"] {
            assert!(s[d][p].is_number(), "{d}.{p}");
        }
    }
    let records = v["records"].as_array().unwrap();
    assert_eq!(s["requests"].as_u64().unwrap() as usize, records.len());
    assert!(records.len() >= 5, "5 conversations, up to 2 turns each");
    let completed = records
        .iter()
        .filter(|r| r["status"] == 200 && r["error"].is_null() && r["cancelled_by_us"] == false)
        .count();
    assert_eq!(s["completed"].as_u64().unwrap() as usize, completed);
    assert!(completed >= 3);
    for r in records {
        for f in [
            "send_ms",
            "first_byte_ms",
            "first_text_ms",
            "chunk_ms",
            "end_ms",
            "completion_tokens",
            "status",
            "cancelled_by_us",
        ] {
            assert!(r.get(f).is_some(), "record.{f} missing");
        }
    }
    assert_eq!(v["steady_state"]["flavor"], "steward");
    assert_eq!(v["steady_state"]["returned"], true);
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));
    let _ = std::fs::remove_dir_all(dir);
}
