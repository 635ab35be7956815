//! The Batch API against the real default model: upload, create, poll
//! until the batch ends, read the output and error files (every
//! `custom_id` answered once, in OpenAI's line shape); cancel midway
//! (the counts add up to what the files hold); input that breaks the
//! rules (a failed batch with `errors`, or a 400/404/413 in OpenAI's
//! error shape); the completion window's end; and a state directory left
//! by a kill mid-batch (a torn last line, a corrupt record) read back and
//! finished with each line answered exactly once. (The same through the
//! official SDK, and a real SIGKILL: scripts/batch_check.py.)

use crate::common::{self, assert_error, HANG_GUARD};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const KEY: &str = "batch-test-key";

/// A server with an API key and the Batch API on `dir`.
async fn server(
    dir: &Path,
    tweak: impl FnOnce(&mut steward_server::BatchOptions),
) -> common::Server {
    let s = common::server_with(Some(KEY), |_| {}).await;
    let mut o = steward_server::BatchOptions::new(dir.to_path_buf());
    tweak(&mut o);
    steward_server::start_batch(&s.state, o).expect("batch API");
    s
}

/// A request with the key: (status, JSON body or the text as a string).
async fn call(s: &common::Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let url = format!("{}{path}", s.base);
    let mut r = match method {
        "GET" => s.client.get(&url),
        "DELETE" => s.client.delete(&url),
        _ => s
            .client
            .post(&url)
            .header("content-type", "application/json"),
    };
    r = r.header("authorization", format!("Bearer {KEY}"));
    if let Some(b) = body {
        r = r.body(b.to_string());
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `POST /v1/files` as multipart (`purpose`, `file`).
async fn upload(s: &common::Server, purpose: &str, content: &str) -> (u16, Value) {
    let b = "steward-test-boundary";
    let body = format!(
        "--{b}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n\
         --{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\
         Content-Type: application/jsonl\r\n\r\n{content}\r\n--{b}--\r\n"
    );
    let r = s
        .client
        .post(format!("{}/v1/files", s.base))
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", format!("multipart/form-data; boundary={b}"))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

fn chat_line(id: &str, extra: Value) -> String {
    let mut body = json!({
        "messages": [{"role": "user", "content": format!("Say {id}.")}],
        "max_tokens": 4,
        "temperature": 0,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    json!({"custom_id": id, "method": "POST", "url": "/v1/chat/completions", "body": body})
        .to_string()
}

fn lines(n: usize) -> String {
    (0..n)
        .map(|i| chat_line(&format!("r{i}"), json!({})))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn create(s: &common::Server, file: &str) -> Value {
    let (st, b) = call(
        s,
        "POST",
        "/v1/batches",
        Some(json!({"input_file_id": file, "endpoint": "/v1/chat/completions", "completion_window": "24h", "metadata": {"run": "test"}})),
    )
    .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["object"], "batch");
    b
}

/// Polls the batch until `done` holds of it (a hang guard, never a claim
/// about speed).
async fn poll(s: &common::Server, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let (st, b) = call(s, "GET", &format!("/v1/batches/{id}"), None).await;
        assert_eq!(st, 200, "{b}");
        if done(&b) {
            return b;
        }
        assert!(Instant::now() < deadline, "batch never got there: {b}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ended(b: &Value) -> bool {
    ["completed", "failed", "expired", "cancelled"].contains(&b["status"].as_str().unwrap_or(""))
}

/// A file's lines, parsed (none for a null id).
async fn file_lines(s: &common::Server, id: &Value) -> Vec<Value> {
    let Some(id) = id.as_str() else {
        return Vec::new();
    };
    let (st, text) = call(s, "GET", &format!("/v1/files/{id}/content"), None).await;
    assert_eq!(st, 200, "{text}");
    // A one-line file reads back as JSON; more lines as text.
    let text = match text {
        Value::String(t) => t,
        v => format!("{v}\n"),
    };
    assert!(text.is_empty() || text.ends_with('\n'), "{text:?}");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// custom_id → its answer line, every id at most once across both files.
fn by_id(out: &[Value], err: &[Value]) -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    for l in out.iter().chain(err) {
        let id = l["custom_id"].as_str().unwrap().to_string();
        assert!(l["id"].as_str().unwrap().starts_with("batch_req_"), "{l}");
        assert!(
            m.insert(id.clone(), l.clone()).is_none(),
            "{id} answered twice"
        );
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_every_line_once_in_openai_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), |_| {}).await;
    // One line the chat path refuses (400): the error file.
    let content = format!(
        "{}\n{}\n",
        lines(6),
        chat_line("bad", json!({"max_tokens": -1}))
    );
    let (st, f) = upload(&s, "batch", &content).await;
    assert_eq!(st, 200, "{f}");
    assert_eq!(
        (f["object"].as_str(), f["purpose"].as_str()),
        (Some("file"), Some("batch"))
    );
    assert_eq!(f["bytes"], content.len());
    let (st, got) = call(
        &s,
        "GET",
        &format!("/v1/files/{}", f["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!((st, &got["id"]), (200, &f["id"]));

    let b = create(&s, f["id"].as_str().unwrap()).await;
    assert_eq!(b["request_counts"]["total"], 7, "{b}");
    assert_eq!(b["metadata"]["run"], "test");
    assert!(b["expires_at"].as_u64() > b["created_at"].as_u64());
    let id = b["id"].as_str().unwrap();
    let b = poll(&s, id, ended).await;
    assert_eq!(b["status"], "completed", "{b}");
    assert_eq!(
        b["request_counts"],
        json!({"total": 7, "completed": 6, "failed": 1})
    );
    for k in ["in_progress_at", "finalizing_at", "completed_at"] {
        assert!(b[k].is_u64(), "{k}: {b}");
    }
    let out = file_lines(&s, &b["output_file_id"]).await;
    let err = file_lines(&s, &b["error_file_id"]).await;
    let m = by_id(&out, &err);
    assert_eq!(m.len(), 7);
    for l in &out {
        assert_eq!(l["response"]["status_code"], 200, "{l}");
        assert!(l["error"].is_null());
        assert!(l["response"]["request_id"].is_string(), "{l}");
        assert_eq!(l["response"]["body"]["object"], "chat.completion", "{l}");
        assert!(l["response"]["body"]["usage"]["completion_tokens"].as_u64() <= Some(4));
    }
    let bad = &m["bad"];
    assert_eq!(bad["response"]["status_code"], 400, "{bad}");
    assert!(
        bad["error"]["code"].is_string() && bad["error"]["message"].is_string(),
        "{bad}"
    );
    assert_eq!(
        bad["response"]["body"]["error"]["code"],
        bad["error"]["code"]
    );

    // The output file is a file of the caller's; the input is freed now.
    let (_, list) = call(&s, "GET", "/v1/files?purpose=batch_output", None).await;
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"].as_array().unwrap().len(), 2, "{list}");
    let (st, d) = call(
        &s,
        "DELETE",
        &format!("/v1/files/{}", f["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!((st, &d["deleted"]), (200, &json!(true)), "{d}");
    let (st, v) = call(
        &s,
        "GET",
        &format!("/v1/files/{}", f["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_error(st, &v, 404, "file_not_found");
    let (_, page) = call(&s, "GET", "/v1/batches?limit=1", None).await;
    assert_eq!(page["data"][0]["id"], id, "{page}");
    // Without the key: nothing.
    let r = s
        .client
        .get(format!("{}/v1/batches/{id}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_midway_stops_the_lines_and_the_counts_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), |o| o.concurrency = 2).await;
    let (_, f) = upload(&s, "batch", &lines(200)).await;
    let b = create(&s, f["id"].as_str().unwrap()).await;
    let id = b["id"].as_str().unwrap();
    // The input of a running batch cannot be deleted.
    let (st, v) = call(
        &s,
        "DELETE",
        &format!("/v1/files/{}", f["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_error(st, &v, 409, "file_in_use");
    poll(&s, id, |b| {
        b["request_counts"]["completed"].as_u64() >= Some(1)
    })
    .await;
    let (st, c) = call(&s, "POST", &format!("/v1/batches/{id}/cancel"), None).await;
    assert_eq!(st, 200, "{c}");
    assert!(
        ["cancelling", "cancelled"].contains(&c["status"].as_str().unwrap()),
        "{c}"
    );
    let b = poll(&s, id, ended).await;
    assert_eq!(b["status"], "cancelled", "{b}");
    assert!(
        b["cancelling_at"].is_u64() && b["cancelled_at"].is_u64(),
        "{b}"
    );
    let n = &b["request_counts"];
    let (done, failed) = (
        n["completed"].as_u64().unwrap(),
        n["failed"].as_u64().unwrap(),
    );
    assert_eq!(n["total"], 200);
    assert!(done >= 1 && done + failed < 200, "{b}");
    let out = file_lines(&s, &b["output_file_id"]).await;
    let err = file_lines(&s, &b["error_file_id"]).await;
    assert_eq!((out.len() as u64, err.len() as u64), (done, failed));
    by_id(&out, &err);
    // Cancelled stays cancelled; a completed batch cannot be.
    let (st, again) = call(&s, "POST", &format!("/v1/batches/{id}/cancel"), None).await;
    assert_eq!((st, &again["status"]), (200, &json!("cancelled")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_that_breaks_the_rules_is_refused_in_openai_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), |o| {
        o.max_file_bytes = 4096;
        o.max_bytes = 8000;
    })
    .await;
    let content = [
        chat_line("a", json!({})),
        "{not json".into(),
        json!({"custom_id": "b", "method": "POST", "url": "/v1/nowhere", "body": {}}).to_string(),
        chat_line("a", json!({})),
    ]
    .join("\n");
    let (_, f) = upload(&s, "batch", &content).await;
    let b = create(&s, f["id"].as_str().unwrap()).await;
    assert_eq!(b["status"], "failed", "{b}");
    assert!(b["failed_at"].is_u64());
    let errs: Vec<(&str, u64)> = b["errors"]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["code"].as_str().unwrap(), e["line"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        errs,
        [
            ("invalid_json_line", 2),
            ("invalid_url", 3),
            ("duplicate_custom_id", 4)
        ]
    );
    assert_eq!(b["errors"]["object"], "list");

    let fid = f["id"].as_str().unwrap();
    let create_with = |k: &str, v: Value| {
        let mut body = json!({"input_file_id": fid, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
        body[k] = v;
        body
    };
    let (st, v) = call(
        &s,
        "POST",
        "/v1/batches",
        Some(create_with("completion_window", json!("1h"))),
    )
    .await;
    assert_error(st, &v, 400, "invalid_value");
    assert_eq!(v["error"]["param"], "completion_window");
    let (st, v) = call(
        &s,
        "POST",
        "/v1/batches",
        Some(create_with("endpoint", json!("/v1/nope"))),
    )
    .await;
    assert_error(st, &v, 400, "invalid_value");
    let (st, v) = call(
        &s,
        "POST",
        "/v1/batches",
        Some(create_with("input_file_id", json!("file-nope"))),
    )
    .await;
    assert_error(st, &v, 404, "file_not_found");
    let (st, v) = call(&s, "GET", "/v1/batches/batch_nope", None).await;
    assert_error(st, &v, 404, "batch_not_found");
    let (st, v) = upload(&s, "fine-tune", "{}").await;
    assert_error(st, &v, 400, "invalid_value");
    // The bounds, each named.
    let (st, v) = upload(&s, "batch", &"x".repeat(5000)).await;
    assert_error(st, &v, 413, "file_too_large");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--batch-max-file-bytes"));
    let (st, _) = upload(&s, "batch", &"y".repeat(4000)).await;
    assert_eq!(st, 200);
    let (st, v) = upload(&s, "batch", &"z".repeat(4000)).await;
    assert_error(st, &v, 413, "storage_full");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--batch-max-bytes"));
    // Not multipart.
    let (st, v) = call(&s, "POST", "/v1/files", Some(json!({}))).await;
    assert_error(st, &v, 415, "unsupported_media_type");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_its_window_expires_with_every_line_in_the_error_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), |o| o.window = Duration::ZERO).await;
    let (_, f) = upload(&s, "batch", &lines(5)).await;
    let b = create(&s, f["id"].as_str().unwrap()).await;
    let b = poll(&s, b["id"].as_str().unwrap(), ended).await;
    assert_eq!(b["status"], "expired", "{b}");
    assert!(b["expired_at"].is_u64());
    assert_eq!(
        b["request_counts"],
        json!({"total": 5, "completed": 0, "failed": 5})
    );
    assert!(b["output_file_id"].is_null());
    let err = file_lines(&s, &b["error_file_id"]).await;
    assert_eq!(by_id(&[], &err).len(), 5);
    for l in &err {
        assert_eq!(l["error"]["code"], "batch_expired", "{l}");
        assert!(l["response"].is_null());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_directory_left_by_a_kill_is_finished_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // What a server killed mid-batch leaves: the input and its record, the
    // job in progress, two lines answered and a third torn mid-write.
    std::fs::create_dir_all(root.join("files")).unwrap();
    let content = lines(6);
    std::fs::write(root.join("files/file-in.jsonl"), &content).unwrap();
    let rec = json!({"id": "file-in", "bytes": content.len(), "created_at": 1, "filename": "in.jsonl", "purpose": "batch", "owner": "api-key"});
    std::fs::write(root.join("files/file-in.json"), rec.to_string()).unwrap();
    let job = root.join("batches/batch_k");
    std::fs::create_dir_all(&job).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let obj = json!({
        "id": "batch_k", "object": "batch", "endpoint": "/v1/chat/completions", "errors": null,
        "input_file_id": "file-in", "completion_window": "24h", "status": "in_progress",
        "output_file_id": null, "error_file_id": null, "created_at": now, "in_progress_at": now,
        "expires_at": now + 86_400, "finalizing_at": null, "completed_at": null, "failed_at": null,
        "expired_at": null, "cancelling_at": null, "cancelled_at": null,
        "request_counts": {"total": 6, "completed": 0, "failed": 0}, "metadata": null,
    });
    let record =
        |obj: &Value| json!({"version": 1, "seq": 1, "owner": "api-key", "batch": obj}).to_string();
    std::fs::write(job.join("batch.json"), record(&obj)).unwrap();
    let answered = |id: &str| {
        json!({"id": "batch_req_x", "custom_id": id, "response": {"status_code": 200, "request_id": "x", "body": {"kept": id}}, "error": null}).to_string()
    };
    std::fs::write(
        job.join("output.jsonl"),
        format!(
            "{}\n{}\n{{\"id\": \"batch_req_y\", \"custom_id\": \"r2\", \"resp",
            answered("r0"),
            answered("r1")
        ),
    )
    .unwrap();
    // A second job whose record is corrupt: failed, never a panic.
    std::fs::create_dir_all(root.join("batches/batch_bad")).unwrap();
    std::fs::write(
        root.join("batches/batch_bad/batch.json"),
        "{\"version\": 1, \"se",
    )
    .unwrap();
    // A stray temp file and an upload whose record never was written.
    std::fs::write(root.join("files/.tmp-1-x"), "x").unwrap();
    std::fs::write(root.join("files/file-orphan.jsonl"), "x").unwrap();

    let s = server(root, |_| {}).await;
    let b = poll(&s, "batch_k", ended).await;
    assert_eq!(b["status"], "completed", "{b}");
    assert_eq!(
        b["request_counts"],
        json!({"total": 6, "completed": 6, "failed": 0})
    );
    let out = file_lines(&s, &b["output_file_id"]).await;
    let m = by_id(&out, &[]);
    assert_eq!(m.len(), 6);
    // The lines answered before the kill are kept as they were, not run
    // again; the torn one was.
    assert_eq!(m["r0"]["response"]["body"]["kept"], "r0");
    assert_eq!(m["r1"]["response"]["body"]["kept"], "r1");
    assert_eq!(
        m["r2"]["response"]["body"]["object"], "chat.completion",
        "{}",
        m["r2"]
    );

    let (st, bad) = call(&s, "GET", "/v1/batches/batch_bad", None).await;
    assert_eq!((st, &bad["status"]), (200, &json!("failed")), "{bad}");
    assert_eq!(
        bad["errors"]["data"][0]["code"], "state_unreadable",
        "{bad}"
    );
    assert!(!root.join("files/.tmp-1-x").exists());
    assert!(!root.join("files/file-orphan.jsonl").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_state_directory_says_so() {
    let s = common::server().await;
    for (m, p) in [
        ("GET", "/v1/batches"),
        ("GET", "/v1/files"),
        ("POST", "/v1/batches"),
    ] {
        let (st, v) = call(&s, m, p, Some(json!({}))).await;
        assert_error(st, &v, 404, "batch_disabled");
    }
}
