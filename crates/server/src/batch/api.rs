//! The Batch API's handlers, in OpenAI's shapes: `/v1/files` (upload,
//! list, one, its content, delete) and `/v1/batches` (create, list, one,
//! cancel). With API keys, each key sees only its own files and batches
//! (another's answer 404). A server without a state directory answers 404
//! `batch_disabled` on every route.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Map, Value};

use super::disk;
use super::files::io_error;
use super::input::{self, ENDPOINTS};
use super::store::{BatchObject, Batches, Status};
use crate::api::state::{now_secs, Shared};
use crate::http::access::Admitted;
use crate::http::error::ApiError;

type Caller = Option<Extension<Admitted>>;

/// The caller's key name (None: a server without keys).
fn owner(c: Caller) -> Option<String> {
    c.map(|Extension(a)| a.name.to_string())
}

fn service(s: &Shared) -> Result<Arc<Batches>, ApiError> {
    super::service(s).ok_or_else(|| ApiError {
        status: StatusCode::NOT_FOUND,
        code: "batch_disabled",
        ..ApiError::invalid(
            "the Batch API is off on this server (started with `--state-dir none`, or its state directory is another server's)",
            None,
        )
    })
}

fn not_found(what: &str, id: &str, code: &'static str, param: &str) -> ApiError {
    let shown: String = id.chars().take(128).collect();
    ApiError {
        status: StatusCode::NOT_FOUND,
        code,
        ..ApiError::invalid(format!("No {what} found with id '{shown}'."), Some(param))
    }
}

fn conflict(message: String, code: &'static str) -> ApiError {
    ApiError {
        status: StatusCode::CONFLICT,
        code,
        ..ApiError::invalid(message, None)
    }
}

/// An answer, counted in the HTTP metrics.
fn answer(s: &Shared, r: Result<Response, ApiError>) -> Response {
    match r {
        Ok(r) => {
            s.metrics.record_status(r.status().as_u16());
            r
        }
        Err(e) => {
            s.metrics.record_status(e.status.as_u16());
            s.metrics.record_failure(e.code);
            e.into_response()
        }
    }
}

/// `limit` (1..=`max`, default `default`) and `after` of a list query.
fn page(
    q: &HashMap<String, String>,
    default: usize,
    max: usize,
) -> Result<(usize, Option<String>), ApiError> {
    let limit = match q.get("limit") {
        None => default,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => n,
            _ => {
                return Err(ApiError::invalid_value(
                    format!("`limit` must be from 1 to {max}"),
                    "limit",
                ))
            }
        },
    };
    Ok((limit, q.get("after").cloned()))
}

/// OpenAI's list object over `items` (newest first), from after `after`.
fn list_page(items: Vec<(String, Value)>, limit: usize, after: Option<String>) -> Value {
    let start = after
        .and_then(|a| items.iter().position(|(id, _)| *id == a).map(|i| i + 1))
        .unwrap_or(0);
    let rest = &items[start.min(items.len())..];
    let data: Vec<&(String, Value)> = rest.iter().take(limit).collect();
    json!({
        "object": "list",
        "data": data.iter().map(|(_, v)| v).collect::<Vec<_>>(),
        "first_id": data.first().map(|(id, _)| id),
        "last_id": data.last().map(|(id, _)| id),
        "has_more": rest.len() > limit,
    })
}

// ---- files -------------------------------------------------------------------

/// `POST /v1/files` (multipart: `purpose` = `batch`, `file` a JSONL file).
pub(crate) async fn upload(
    State(s): State<Shared>,
    caller: Caller,
    mp: Result<Multipart, MultipartRejection>,
) -> Response {
    let r = async {
        let b = service(&s)?;
        let mp = mp.map_err(|_| ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: "unsupported_media_type",
            ..ApiError::invalid(
                "POST /v1/files takes `multipart/form-data` (fields `purpose` and `file`)",
                None,
            )
        })?;
        let limits = (b.opts.max_file_bytes, b.opts.max_lines);
        let rec = b
            .files
            .upload(mp, limits, &b.usage, owner(caller), s.body_timeout)
            .await?;
        tracing::info!(file = %rec.id, bytes = rec.bytes, "file uploaded");
        Ok::<_, ApiError>(Json(rec.object()).into_response())
    }
    .await;
    answer(&s, r)
}

/// `GET /v1/files` (`purpose`, `limit` up to 10000, `after`, `order`).
pub(crate) async fn list_files(
    State(s): State<Shared>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = (|| -> Result<Response, ApiError> {
        let b = service(&s)?;
        let (limit, after) = page(&q, 10_000, 10_000)?;
        let mut v = b
            .files
            .list(&owner(caller), q.get("purpose").map(String::as_str));
        match q.get("order").map(String::as_str) {
            None | Some("desc") => {}
            Some("asc") => v.reverse(),
            Some(_) => {
                return Err(ApiError::invalid_value(
                    "`order` must be asc or desc",
                    "order",
                ))
            }
        }
        let items = v.into_iter().map(|r| (r.id.clone(), r.object())).collect();
        Ok(Json(list_page(items, limit, after)).into_response())
    })();
    answer(&s, r)
}

/// `GET /v1/files/{id}`.
pub(crate) async fn get_file(
    State(s): State<Shared>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    let r = (|| -> Result<Response, ApiError> {
        let b = service(&s)?;
        let rec = b
            .files
            .get(&id, &owner(caller))
            .ok_or_else(|| not_found("file", &id, "file_not_found", "file_id"))?;
        Ok(Json(rec.object()).into_response())
    })();
    answer(&s, r)
}

/// `DELETE /v1/files/{id}` (not while a batch not yet ended reads it).
pub(crate) async fn delete_file(
    State(s): State<Shared>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    let r = (|| -> Result<Response, ApiError> {
        let b = service(&s)?;
        let rec = b
            .files
            .get(&id, &owner(caller))
            .ok_or_else(|| not_found("file", &id, "file_not_found", "file_id"))?;
        if b.file_in_use(&id) {
            return Err(conflict(
                format!("file {id} is the input of a batch that has not ended: cancel it first"),
                "file_in_use",
            ));
        }
        let freed = b.files.remove(&rec).map_err(io_error)?;
        b.usage.release(freed);
        Ok(Json(json!({"id": id, "object": "file", "deleted": true})).into_response())
    })();
    answer(&s, r)
}

/// `GET /v1/files/{id}/content`: the bytes, streamed.
pub(crate) async fn file_content(
    State(s): State<Shared>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    let r = (|| -> Result<Response, ApiError> {
        let b = service(&s)?;
        let rec = b
            .files
            .get(&id, &owner(caller))
            .ok_or_else(|| not_found("file", &id, "file_not_found", "file_id"))?;
        let f = std::fs::File::open(b.files.content_path(&rec)).map_err(io_error)?;
        let chunks = futures::stream::unfold(Some(f), |f| async move {
            let mut f = f?;
            let read = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; 256 << 10];
                let n = f.read(&mut buf)?;
                buf.truncate(n);
                Ok::<_, std::io::Error>((f, buf))
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
            match read {
                Ok((_, buf)) if buf.is_empty() => None,
                Ok((f, buf)) => Some((Ok(Bytes::from(buf)), Some(f))),
                Err(e) => Some((Err(e), None)),
            }
        });
        Ok((
            [
                (header::CONTENT_TYPE, "application/octet-stream".to_string()),
                (header::CONTENT_LENGTH, rec.bytes.to_string()),
            ],
            Body::from_stream(chunks),
        )
            .into_response())
    })();
    answer(&s, r)
}

// ---- batches -----------------------------------------------------------------

/// `POST /v1/batches`: checked at once (the file's lines too); a file
/// whose lines break the rules makes a `failed` batch with its `errors`,
/// as OpenAI's does.
pub(crate) async fn create(State(s): State<Shared>, caller: Caller, body: Bytes) -> Response {
    let r = async {
        let b = service(&s)?;
        let caller = owner(caller);
        let req = CreateBody::read(&body)?;
        let file = b
            .files
            .get(&req.input_file_id, &caller)
            .ok_or_else(|| not_found("file", &req.input_file_id, "file_not_found", "input_file_id"))?;
        if file.purpose != "batch" {
            return Err(ApiError::invalid_value(
                format!("file {} has purpose `{}`, not `batch`", file.id, file.purpose),
                "input_file_id",
            ));
        }
        let mut obj = BatchObject::new(disk::new_id("batch_"), req.endpoint, file.id.clone(), req.window);
        obj.metadata = req.metadata;
        obj.expires_at = Some(obj.created_at + b.opts.window.as_secs());
        let (id, endpoint) = (obj.id.clone(), obj.endpoint.clone());
        b.create(obj, caller).map_err(io_error)?;
        let (path, max) = (b.files.content_path(&file), b.opts.max_lines);
        let checked = tokio::task::spawn_blocking(move || {
            std::fs::read(&path)
                .map_err(|e| vec![input::LineError::new("file_unreadable", e.to_string(), None, None)])
                .and_then(|bytes| input::parse(&bytes, &endpoint, max))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
        let obj = b
            .change(&id, |o| {
                if o.status != Status::Validating {
                    return; // cancelled meanwhile
                }
                match &checked {
                    Ok(lines) => {
                        o.status = Status::InProgress;
                        o.in_progress_at = Some(now_secs());
                        o.request_counts.total = lines.len() as u64;
                    }
                    Err(errors) => o.fail(errors.clone()),
                }
            })
            .map_err(io_error)?
            .ok_or_else(|| ApiError::internal("the batch is gone"))?;
        b.wake.notify_one();
        tracing::info!(batch = %id, status = ?obj.status, lines = obj.request_counts.total, "batch created");
        Ok::<_, ApiError>(Json(obj).into_response())
    }
    .await;
    answer(&s, r)
}

/// `POST /v1/batches`' body.
struct CreateBody {
    input_file_id: String,
    endpoint: String,
    window: String,
    metadata: Option<Map<String, Value>>,
}

impl CreateBody {
    fn read(body: &[u8]) -> Result<Self, ApiError> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::invalid(format!("the body is not JSON: {e}"), None))?;
        let Some(o) = v.as_object() else {
            return Err(ApiError::invalid("the body must be a JSON object", None));
        };
        let string = |k: &str| match o.get(k) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(ApiError::invalid_value(
                format!("`{k}` must be a string"),
                k,
            )),
            None => Err(ApiError {
                code: "missing_required_parameter",
                ..ApiError::invalid(format!("`{k}` is required"), Some(k))
            }),
        };
        let (input_file_id, endpoint, window) = (
            string("input_file_id")?,
            string("endpoint")?,
            string("completion_window")?,
        );
        if !ENDPOINTS.contains(&endpoint.as_str()) {
            return Err(ApiError::invalid_value(
                format!("`endpoint` must be one of {}", ENDPOINTS.join(", ")),
                "endpoint",
            ));
        }
        if window != "24h" {
            return Err(ApiError::invalid_value(
                "`completion_window` must be `24h` (the one window OpenAI offers)",
                "completion_window",
            ));
        }
        let metadata = match o.get("metadata") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => {
                let ok = m.len() <= 16
                    && m.iter().all(|(k, v)| {
                        k.chars().count() <= 64
                            && v.as_str().is_some_and(|s| s.chars().count() <= 512)
                    });
                if !ok {
                    return Err(ApiError::invalid_value(
                        "`metadata` holds at most 16 pairs, keys of at most 64 characters, string values of at most 512",
                        "metadata",
                    ));
                }
                Some(m.clone())
            }
            Some(_) => {
                return Err(ApiError::invalid_value(
                    "`metadata` must be an object",
                    "metadata",
                ))
            }
        };
        Ok(CreateBody {
            input_file_id,
            endpoint,
            window,
            metadata,
        })
    }
}

/// `GET /v1/batches` (`limit` up to 100, default 20; `after`).
pub(crate) async fn list(
    State(s): State<Shared>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = (|| -> Result<Response, ApiError> {
        let b = service(&s)?;
        let (limit, after) = page(&q, 20, 100)?;
        let items = b
            .list(&owner(caller))
            .into_iter()
            .map(|o| (o.id.clone(), json!(o)))
            .collect();
        Ok(Json(list_page(items, limit, after)).into_response())
    })();
    answer(&s, r)
}

/// `GET /v1/batches/{id}`.
pub(crate) async fn get(
    State(s): State<Shared>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    let r = (|| -> Result<Response, ApiError> {
        let b = service(&s)?;
        let o = b
            .get(&id, &owner(caller))
            .ok_or_else(|| not_found("batch", &id, "batch_not_found", "batch_id"))?;
        Ok(Json(o).into_response())
    })();
    answer(&s, r)
}

/// `POST /v1/batches/{id}/cancel`: lines not started never run, running
/// ones are cancelled; `cancelling` until the runner has stopped them,
/// then `cancelled` with the counts of the lines answered.
pub(crate) async fn cancel(
    State(s): State<Shared>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    let r = (|| -> Result<Response, ApiError> {
        let b = service(&s)?;
        let o = b
            .get(&id, &owner(caller))
            .ok_or_else(|| not_found("batch", &id, "batch_not_found", "batch_id"))?;
        match o.status {
            Status::Validating | Status::InProgress => {}
            Status::Cancelling | Status::Cancelled => return Ok(Json(o).into_response()),
            st => {
                return Err(conflict(
                    format!(
                        "Cannot cancel a batch with status {:?}.",
                        json!(st).as_str().unwrap_or_default()
                    ),
                    "batch_not_cancellable",
                ))
            }
        }
        let o = b
            .change(&id, |o| {
                if matches!(o.status, Status::Validating | Status::InProgress) {
                    o.status = Status::Cancelling;
                    o.cancelling_at = Some(now_secs());
                }
            })
            .map_err(io_error)?
            .ok_or_else(|| not_found("batch", &id, "batch_not_found", "batch_id"))?;
        if let Some((_, signal)) = b.handles(&id) {
            signal.notify_one();
        }
        b.wake.notify_one();
        tracing::info!(batch = %id, "batch cancelling");
        Ok(Json(o).into_response())
    })();
    answer(&s, r)
}
