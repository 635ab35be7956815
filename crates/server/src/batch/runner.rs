//! The runner: one task per server, one job at a time (jobs to finish
//! first, then the oldest in progress), up to `--batch-concurrency` of its
//! lines at once. Each line is a request through the app's own router
//! (`tower::ServiceExt::oneshot`), marked as a batch line (`line.rs`): the
//! same validation, limits and generation path as a client's, at
//! background rank. A 429 or 503 (a full queue, a model loading) is tried
//! again after its `Retry-After`. A cancel stops the job's lines (those
//! running are dropped, which cancels them in the engine; their partial
//! answers are never written); the completion window's end writes every
//! unanswered line to the error file as `batch_expired`.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, Request};
use axum::Router;
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::disk;
use super::files::FileRecord;
use super::input::{self, InputLine, LineError};
use super::line::{self, Line};
use super::progress::{self, Progress};
use super::store::{BatchObject, Batches, Status};
use crate::api::state::now_secs;

/// Most bytes of one line's answer read back (past it: a failed line).
const MAX_ANSWER_BYTES: usize = 64 << 20;
/// Tries of a line answered 429 or 503.
const MAX_TRIES: u32 = 30;
/// Longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How a job ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Completed,
    Cancelled,
    Expired,
}

/// Run jobs as they come, forever.
pub(crate) async fn run(b: Arc<Batches>, router: Router) {
    loop {
        let Some(id) = b.next_runnable() else {
            b.wake.notified().await;
            continue;
        };
        if let Err(e) = run_job(&b, &router, &id).await {
            tracing::error!(batch = %id, error = %e, "a batch failed");
            fail(&b, &id, "batch_failed", e);
        }
        // Never spin on a job left unfinished (a cancel that came last is
        // finished on the next turn).
        if let Some(o) = b.get(&id, &None) {
            if matches!(o.status, Status::InProgress | Status::Finalizing) {
                tracing::error!(batch = %id, "the runner left a batch unfinished: failed");
                fail(
                    &b,
                    &id,
                    "internal_error",
                    "the runner left the batch unfinished".into(),
                );
            }
        }
    }
}

fn fail(b: &Batches, id: &str, code: &str, message: String) {
    let r = b.change(id, |o| {
        o.fail(vec![LineError::new(code, message, None, None)])
    });
    if let Err(e) = r {
        tracing::error!(batch = %id, error = %e, "the state directory could not be written");
    }
}

/// One job, to its end.
async fn run_job(b: &Arc<Batches>, router: &Router, id: &str) -> Result<(), String> {
    let Some(obj) = b.get(id, &None) else {
        return Ok(());
    };
    let (owner, cancel) = b.handles(id).ok_or("the batch is gone")?;
    let lines = read_input(b, &obj).await?;
    let ids: HashSet<&str> = lines.iter().map(|l| l.custom_id.as_str()).collect();
    let mut prog = Progress::open(&b.job_dir(id), &ids).map_err(|e| {
        format!("the batch's progress in the state directory does not read back: {e}")
    })?;
    set_counts(b, id, &prog);
    let outcome = match obj.status {
        Status::Cancelling => Outcome::Cancelled,
        Status::Finalizing => Outcome::Completed,
        Status::InProgress => {
            let marker = Line {
                key: owner.clone().map(Arc::from),
            };
            let deadline = deadline(&obj);
            run_lines(
                b, router, &obj, &lines, &mut prog, marker, &cancel, deadline,
            )
            .await?
        }
        _ => return Ok(()),
    };
    if outcome == Outcome::Expired {
        expire_rest(b, &obj, &lines, &mut prog).map_err(|e| e.to_string())?;
    }
    finish(b, id, owner, outcome, &mut prog).map_err(|e| e.to_string())
}

/// The job's input lines (checked when the batch was created).
async fn read_input(b: &Arc<Batches>, obj: &BatchObject) -> Result<Vec<InputLine>, String> {
    let file = b
        .files
        .get(&obj.input_file_id, &None)
        .ok_or_else(|| format!("the input file {} is gone", obj.input_file_id))?;
    let path = b.files.content_path(&file);
    let (endpoint, max) = (obj.endpoint.clone(), usize::MAX);
    tokio::task::spawn_blocking(move || {
        let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
        input::parse(&bytes, &endpoint, max).map_err(|e| {
            format!(
                "the input file no longer reads as it did: {}",
                e.first().map_or("", |e| e.message.as_str())
            )
        })
    })
    .await
    .map_err(|e| e.to_string())?
}

/// When the completion window ends, on the runtime's clock.
fn deadline(obj: &BatchObject) -> tokio::time::Instant {
    let left = obj
        .expires_at
        .map_or(u64::MAX / 4, |e| e.saturating_sub(now_secs()));
    let left = Duration::from_secs(left.min(100 * 365 * 86_400));
    tokio::time::Instant::now() + left
}

fn set_counts(b: &Batches, id: &str, p: &Progress) {
    b.update(id, |o| {
        o.request_counts.completed = p.completed;
        o.request_counts.failed = p.failed;
    });
}

/// The job's unanswered lines, `concurrency` at a time, until all are
/// answered, the job is cancelled or its window ends.
#[allow(clippy::too_many_arguments)]
async fn run_lines(
    b: &Arc<Batches>,
    router: &Router,
    obj: &BatchObject,
    lines: &[InputLine],
    prog: &mut Progress,
    marker: Line,
    cancel: &tokio::sync::Notify,
    deadline: tokio::time::Instant,
) -> Result<Outcome, String> {
    let mut todo = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !prog.done.contains(&l.custom_id))
        .map(|(i, _)| i)
        .collect::<Vec<_>>()
        .into_iter();
    let mut running = FuturesUnordered::new();
    let expiry = tokio::time::sleep_until(deadline);
    tokio::pin!(expiry);
    loop {
        if b.get(&obj.id, &None)
            .is_some_and(|o| o.status == Status::Cancelling)
        {
            return Ok(Outcome::Cancelled);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(Outcome::Expired);
        }
        while running.len() < b.opts.concurrency {
            let Some(i) = todo.next() else { break };
            let (r, ep, body, m) = (
                router.clone(),
                obj.endpoint.clone(),
                lines[i].body.clone(),
                marker.clone(),
            );
            running.push(async move { (i, run_line(r, ep, body, m).await) });
        }
        let Some(ans) = (tokio::select! {
            a = running.next() => a,
            _ = cancel.notified() => continue,
            _ = &mut expiry => return Ok(Outcome::Expired),
        }) else {
            return Ok(Outcome::Completed);
        };
        let (i, answer) = ans;
        let (ok, record) = answer.record(&obj.id, &lines[i].custom_id);
        let n = prog
            .append(&lines[i].custom_id, ok, &record)
            .map_err(|e| e.to_string())?;
        b.usage.add(n);
        set_counts(b, &obj.id, prog);
    }
}

/// A line's answer: its status, request id and body.
struct Answer {
    status: u16,
    request_id: Option<String>,
    body: Value,
}

impl Answer {
    /// The output or error file's line for it (OpenAI's shape) and
    /// whether it is an output line.
    fn record(&self, batch: &str, custom_id: &str) -> (bool, Value) {
        let ok = (200..300).contains(&self.status);
        let error = if ok {
            Value::Null
        } else {
            let e = &self.body["error"];
            json!({
                "code": e["code"].as_str().map_or_else(|| format!("http_{}", self.status), str::to_string),
                "message": e["message"].as_str().unwrap_or("the request failed"),
            })
        };
        let record = json!({
            "id": disk::derived_id("batch_req_", &format!("{batch}/{custom_id}")),
            "custom_id": custom_id,
            "response": {
                "status_code": self.status,
                "request_id": self.request_id,
                "body": self.body,
            },
            "error": error,
        });
        (ok, record)
    }
}

/// One line through the router, tried again while the answer is 429 or
/// 503 (its `Retry-After`, else a doubling wait).
async fn run_line(router: Router, endpoint: String, body: Bytes, marker: Line) -> Answer {
    let mut wait = Duration::from_millis(500);
    let mut tries = 0;
    loop {
        tries += 1;
        let mut req = Request::post(endpoint.as_str())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, body.len())
            .body(Body::from(body.clone()))
            .expect("a request from valid parts");
        req.extensions_mut().insert(marker.clone());
        let resp = line::scope(marker.clone(), router.clone().oneshot(req))
            .await
            .unwrap_or_else(|e: Infallible| match e {});
        let status = resp.status().as_u16();
        let retry_after = header(resp.headers(), "retry-after").and_then(|v| v.parse::<u64>().ok());
        let request_id = header(resp.headers(), "x-request-id");
        if matches!(status, 429 | 503) && tries < MAX_TRIES {
            drop(resp);
            let pause = retry_after
                .map_or(wait, Duration::from_secs)
                .min(MAX_BACKOFF);
            tokio::time::sleep(pause).await;
            wait = (wait * 2).min(MAX_BACKOFF);
            continue;
        }
        let body = match axum::body::to_bytes(resp.into_body(), MAX_ANSWER_BYTES).await {
            Ok(b) => serde_json::from_slice(&b)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&b).into_owned())),
            Err(e) => {
                return Answer {
                    status: 500,
                    request_id,
                    body: json!({"error": {"code": "answer_unreadable", "message": format!("the answer could not be read (over {MAX_ANSWER_BYTES} bytes?): {e}")}}),
                }
            }
        };
        return Answer {
            status,
            request_id,
            body,
        };
    }
}

fn header(h: &axum::http::HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Every line not answered when the window ended: `batch_expired` in the
/// error file.
fn expire_rest(
    b: &Batches,
    obj: &BatchObject,
    lines: &[InputLine],
    prog: &mut Progress,
) -> std::io::Result<()> {
    for l in lines {
        if prog.done.contains(&l.custom_id) {
            continue;
        }
        let record = json!({
            "id": disk::derived_id("batch_req_", &format!("{}/{}", obj.id, l.custom_id)),
            "custom_id": l.custom_id,
            "response": null,
            "error": {
                "code": "batch_expired",
                "message": "This request could not be executed before the completion window expired.",
            },
        });
        let n = prog.append(&l.custom_id, false, &record)?;
        b.usage.add(n);
    }
    set_counts(b, &obj.id, prog);
    Ok(())
}

/// The job's end: its logs made durable and made files (records naming
/// the logs, ids derived from the job's, so a finish cut short by a kill
/// is done again the same), committed with its final state in one
/// transaction. A completed job passes
/// `finalizing` on the way; a cancel that came after its last line makes
/// it cancelled.
fn finish(
    b: &Batches,
    id: &str,
    owner: Option<String>,
    outcome: Outcome,
    prog: &mut Progress,
) -> std::io::Result<()> {
    prog.sync()?;
    if outcome == Outcome::Completed {
        b.change(id, |o| {
            if o.status == Status::InProgress {
                o.status = Status::Finalizing;
                o.finalizing_at = Some(now_secs());
            }
        })?;
    }
    let dir = b.job_dir(id);
    let mut made = [None, None];
    let mut records = Vec::new();
    for (k, (n, log, what)) in [
        (prog.completed, progress::OUTPUT, "output"),
        (prog.failed, progress::ERRORS, "errors"),
    ]
    .into_iter()
    .enumerate()
    {
        if n == 0 {
            continue;
        }
        let fid = disk::derived_id("file-", &format!("{id}/{what}"));
        if b.files.get(&fid, &None).is_none() {
            let bytes = std::fs::metadata(dir.join(log))?.len();
            records.push(FileRecord {
                id: fid.clone(),
                bytes,
                created_at: now_secs(),
                filename: format!("{id}_{what}.jsonl"),
                purpose: "batch_output".into(),
                owner: owner.clone(),
                path: Some(format!("batches/{id}/{log}")),
            });
        }
        made[k] = Some(fid);
    }
    let (completed, failed) = (prog.completed, prog.failed);
    let done = b.change_with_files(id, records, |o| {
        o.output_file_id = made[0].take();
        o.error_file_id = made[1].take();
        o.request_counts.completed = completed;
        o.request_counts.failed = failed;
        let now = Some(now_secs());
        match (outcome, o.status) {
            (Outcome::Cancelled, _) | (_, Status::Cancelling) => {
                o.status = Status::Cancelled;
                o.cancelled_at = now;
            }
            (Outcome::Expired, _) => {
                o.status = Status::Expired;
                o.expired_at = now;
            }
            (Outcome::Completed, _) => {
                o.status = Status::Completed;
                o.completed_at = now;
            }
        }
    })?;
    if let Some(o) = done {
        tracing::info!(batch = %id, status = ?o.status, completed, failed, total = o.request_counts.total, "batch ended");
    }
    Ok(())
}
