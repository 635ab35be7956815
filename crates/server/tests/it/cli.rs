//! The `steward` binary's startup failures: one clear line, exit code != 0,
//! no panic, no hang. Waits poll under `common::HANG_GUARD`; the server
//! listens on a port the OS chose (`--port 0`, found through /proc).

use crate::common::{self, HANG_GUARD};

use std::process::Command;
use std::time::{Duration, Instant};

fn run(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(args)
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + HANG_GUARD;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (
                status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("steward {args:?} hung");
}

async fn get_text(client: &reqwest::Client, url: &str) -> String {
    client.get(url).send().await.unwrap().text().await.unwrap()
}

#[test]
fn bad_model_files_fail_with_one_line() {
    let dir = std::env::temp_dir().join(format!("steward-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let not_gguf = dir.join("x.gguf");
    std::fs::write(&not_gguf, b"hello, not a model").unwrap();
    let truncated = dir.join("t.gguf");
    let real = steward_engine::fetch::ensure_default_model().unwrap();
    let bytes = std::fs::read(real).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 50]).unwrap();
    let cases = [
        ("/definitely/not/here.gguf".to_string(), "not found"),
        (not_gguf.display().to_string(), "not a GGUF"),
        (truncated.display().to_string(), "could not load"),
    ];
    for (path, want) in cases {
        let (code, err) = run(&["serve", "--model", &path, "--port", "0"]);
        assert_ne!(code, 0, "{path}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line for {path}: {err}");
        assert!(
            lines[0].starts_with("steward: error:") && lines[0].contains(want),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn media_flags_that_do_not_fit_fail_with_one_line() {
    let cases: [(&[&str], &str); 3] = [
        (&["--media-allow-url"], "needs --media-url-hosts"),
        (&["--media-url-hosts", "a.com"], "needs --media-allow-url"),
        (&["--mmproj", "/definitely/not/here-mmproj.gguf"], "mmproj"),
    ];
    for (flags, want) in cases {
        let mut args = vec!["serve", "--port", "0"];
        args.extend_from_slice(flags);
        let (code, err) = run(&args);
        assert_ne!(code, 0, "{flags:?}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line for {flags:?}: {err}");
        assert!(
            lines[0].starts_with("steward: error:") && lines[0].contains(want),
            "{err}"
        );
    }
}

#[test]
fn a_chat_template_that_does_not_compile_stops_startup_naming_it() {
    let dir = std::env::temp_dir().join(format!("steward-cli-tmpl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("broken.jinja");
    std::fs::write(&bad, "{% for m in messages %}{{ m.content }").unwrap();
    let bad = bad.display().to_string();
    let (code, err) = run(&[
        "serve",
        "--port",
        "0",
        "--default-format",
        "original",
        "--chat-template",
        &bad,
    ]);
    assert_ne!(code, 0, "{err}");
    // (The model loads first: its log line comes before the refusal.)
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("steward: error:"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(&format!("--chat-template {bad}"))
            && lines[0].contains("does not compile"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let (code, err) = run(&["serve", "--port", "0", "--chat-template", "nonesuch"]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("not a built-in"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_budget_smaller_than_the_weights_is_refused_with_one_line() {
    // The shipped file as it is: on a fresh cache the default Q8_0 format
    // would first be converted, and its progress line is not the refusal.
    let (code, err) = run(&[
        "serve",
        "--port",
        "0",
        "--default-format",
        "original",
        "--memory-budget",
        "10M",
    ]);
    assert_ne!(code, 0);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("smaller than the model's weights alone"),
        "{err}"
    );
}

#[test]
fn sigterm_drains_in_flight_streams_refuses_new_ones_and_exits_zero() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_steward"))
        .args([
            "serve",
            "--port",
            "0",
            "--max-seqs",
            "2",
            "--ctx-per-seq",
            "512",
        ])
        // A grace period the stream below always finishes within: on CI's
        // 2 cores, shared with the other tests' servers, 400 tokens once
        // took longer than 30 s and the drain ended it (no "length").
        .args(["--default-format", "original", "--drain-timeout-s", "900"])
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // It listens before the model loads.
    let port = common::wait_for_port(&mut child);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let code = rt.block_on(async {
        let ready = |c: reqwest::Client, b: String| async move {
            c.get(format!("{b}/ready"))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        };
        // While the model loads and warms up, /health answers and /ready is 503.
        let mut saw_loading = false;
        let deadline = Instant::now() + HANG_GUARD;
        while Instant::now() < deadline {
            let health = client
                .get(format!("{base}/health"))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0);
            let r = ready(client.clone(), base.clone()).await;
            if health == 200 && r == 503 {
                saw_loading = true;
            }
            if r == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(saw_loading, "/health must answer while /ready is still 503");
        assert_eq!(ready(client.clone(), base.clone()).await, 200);
        // An in-flight stream...
        let (c, b) = (client.clone(), base.clone());
        let stream = tokio::spawn(async move {
            c.post(format!("{b}/v1/completions"))
                .json(
                    // Long enough to be still in flight while the
                    // drain is checked below (four quick requests), on a
                    // fast machine too: 500 steps, the context's room.
                    &serde_json::json!({"prompt": "Once upon a time", "max_tokens": 500,
                    "ignore_eos": true, "stream": true, "temperature": 0}),
                )
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        });
        // Running (not a fixed sleep: on a loaded machine the request may
        // take a while to arrive)...
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let live = get_text(&client, &format!("{base}/debug/requests")).await;
            if live.contains("\"decoding\"") {
                break;
            }
            assert!(Instant::now() < deadline, "never decoding: {live}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // ...then SIGTERM: /ready turns 503 once the signal is handled.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + HANG_GUARD;
        while ready(client.clone(), base.clone()).await != 503 {
            assert!(Instant::now() < deadline, "/ready never 503 while draining");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let r = client
            .post(format!("{base}/v1/completions"))
            .json(&serde_json::json!({"prompt": "hi", "max_tokens": 2}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503, "new requests are refused while draining");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "shutting_down");
        let m = get_text(&client, &format!("{base}/metrics")).await;
        // (Every line carries the model's label.)
        assert!(
            m.lines()
                .any(|l| l.starts_with("steward_phase{model=")
                    && l.ends_with("phase=\"draining\"} 1")),
            "{m}"
        );
        let drain_s: f64 = m
            .lines()
            .find(|l| l.starts_with("steward_drain_seconds{model="))
            .and_then(|l| l.rsplit(' ').next())
            .expect("steward_drain_seconds")
            .parse()
            .unwrap();
        assert!(drain_s > 0.0, "drain time exported while draining");
        let text = stream.await.unwrap();
        assert!(
            text.trim_end().ends_with("data: [DONE]"),
            "in-flight stream completed"
        );
        assert!(text.contains("\"finish_reason\":\"length\""), "{text}");
        let deadline = Instant::now() + HANG_GUARD;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = child.kill();
        None
    });
    assert_eq!(code, Some(0), "exit code after drain");
}
