//! Every POST body before its handler: the JSON content type, the size
//! cap and the read timeout, each refused in the API's error shape (but
//! `/v1/files`' multipart upload, which the Batch API bounds itself).

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::state::Shared;
use crate::http::error::ApiError;

/// Every POST body: JSON content type (415 otherwise), at most
/// `--max-body-bytes` (413), arrived within `--body-timeout-s` (408), all
/// answered in the API's error shape. The handler gets the whole body.
pub(crate) async fn read_body(State(s): State<Shared>, req: Request, next: Next) -> Response {
    // An upload to `/v1/files` is multipart, bounded by its handler.
    if req.method() != axum::http::Method::POST || req.uri().path() == "/v1/files" {
        return next.run(req).await;
    }
    let refuse = |e: ApiError| {
        s.metrics.record_status(e.status.as_u16());
        s.metrics.record_failure(e.code);
        e.into_response()
    };
    let json = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return refuse(ApiError::unsupported_media_type());
    }
    let cap = s.limits.max_body_bytes;
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // An oversized body is still read (and dropped) up to 8 times the cap,
    // so that a client still sending it gets the 413 instead of a broken
    // pipe; beyond that the connection is closed after the 413.
    let discard = (cap as u64).saturating_mul(8).max(8 << 20);
    let (parts, body) = req.into_parts();
    if declared.is_some_and(|n| n > discard) {
        return refuse(ApiError::body_too_large(cap));
    }
    let too_large = declared.is_some_and(|n| n > cap as u64);
    let read = collect_body(body, cap, discard, too_large);
    let bytes = match tokio::time::timeout(s.body_timeout, read).await {
        Err(_) if too_large => return refuse(ApiError::body_too_large(cap)),
        Err(_) => return refuse(ApiError::body_timeout(s.body_timeout)),
        Ok(Err(BodyError::TooLarge)) => return refuse(ApiError::body_too_large(cap)),
        Ok(Err(BodyError::Read)) => {
            return refuse(ApiError::invalid(
                "the request body could not be read",
                None,
            ))
        }
        Ok(Ok(b)) => b,
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

enum BodyError {
    TooLarge,
    Read,
}

/// The body if it is at most `cap` bytes; past that (or from the start,
/// when its declared length is), read on, dropping the bytes, up to
/// `discard` bytes and for at most `DRAIN`, and say it is too large.
async fn collect_body(
    mut body: axum::body::Body,
    cap: usize,
    discard: u64,
    declared_too_large: bool,
) -> Result<Bytes, BodyError> {
    use http_body_util::BodyExt;
    /// Longest an oversized body is drained before the 413 goes out.
    const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);
    let mut buf = Vec::new();
    let mut total = 0u64;
    let mut drain_until = declared_too_large.then(|| tokio::time::Instant::now() + DRAIN);
    loop {
        let frame = match drain_until {
            None => body.frame().await,
            Some(t) => match tokio::time::timeout_at(t, body.frame()).await {
                Ok(f) => f,
                Err(_) => return Err(BodyError::TooLarge),
            },
        };
        let Some(frame) = frame else {
            break;
        };
        let frame = frame.map_err(|_| {
            if drain_until.is_some() {
                BodyError::TooLarge
            } else {
                BodyError::Read
            }
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len() as u64;
        if total <= cap as u64 && drain_until.is_none() {
            buf.extend_from_slice(&data);
        } else if total > discard {
            return Err(BodyError::TooLarge);
        } else if drain_until.is_none() {
            drain_until = Some(tokio::time::Instant::now() + DRAIN);
        }
    }
    if total > cap as u64 || drain_until.is_some() {
        return Err(BodyError::TooLarge);
    }
    Ok(Bytes::from(buf))
}
