//! The API key check in front of every route but `/health`, `/ready`,
//! `/openapi.json` and the pages (`Authorization: Bearer` or `x-api-key`),
//! with the key's rate limit and its `x-ratelimit-*` headers. The key that
//! passed (`access::Admitted`: name, priority ceiling, weight, token
//! quota) goes into the request's extensions for the handlers.
//!
//! Headers: `x-ratelimit-{limit,remaining,reset}-requests` for a key with
//! an rpm limit; `x-ratelimit-{limit,remaining,reset}-tokens` on every
//! answer to a key with a token quota (the minute window when it has
//! `tpm`, else the day's), read when the handler has answered: a whole
//! answer's tokens are settled by then, a stream's bound is still
//! reserved.

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::state::Shared;
use crate::http::error::ApiError;
use crate::http::{access, quota};

pub(crate) async fn auth(State(s): State<Shared>, mut req: Request, next: Next) -> Response {
    // A batch line, sent in-process by the batch runner (`batch::line`; no
    // client can set an extension): its batch's key was checked when the
    // batch was created, and a line is no request against the key's rate.
    if !s.keys.enabled() {
        return next.run(req).await;
    }
    // It runs as its batch's key (priority floor, weight, token quotas),
    // found by name; a key removed since runs the line keyless.
    if let Some(line) = req.extensions().get::<crate::batch::line::Line>() {
        if let Some(a) = line.key.as_deref().and_then(|k| s.keys.admitted_by_name(k)) {
            req.extensions_mut().insert(a);
        }
        return next.run(req).await;
    }
    // `Authorization: Bearer KEY` (OpenAI) or `x-api-key: KEY` (Anthropic's
    // clients).
    let h = req.headers();
    let given = h
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()));
    let admitted = match s.keys.check(given) {
        Ok(a) => a,
        Err(access::Refused::Unauthorized) => {
            s.metrics.record_status(401);
            return ApiError::unauthorized().into_response();
        }
        Err(access::Refused::Limited { retry_after, rpm }) => {
            s.metrics.record_status(429);
            let mut r = ApiError::rate_limited(
                format!("Rate limit reached for this key: {rpm} requests per minute. Retry in {retry_after} s."),
                "rate_limit_exceeded",
                retry_after,
            )
            .into_response();
            let reset = quota::duration_text(f64::from(retry_after));
            rate_headers(r.headers_mut(), "requests", rpm.into(), 0, &reset);
            return r;
        }
    };
    let Some(a) = admitted else {
        return next.run(req).await;
    };
    req.extensions_mut().insert(a.clone());
    let mut r = next.run(req).await;
    if let Some((limit, left)) = a.rate {
        let reset = quota::duration_text(a.rate_reset_s);
        rate_headers(
            r.headers_mut(),
            "requests",
            limit.into(),
            left.into(),
            &reset,
        );
    }
    if let Some(h) = a.quota.and_then(|q| q.headers(std::time::Instant::now())) {
        rate_headers(r.headers_mut(), "tokens", h.limit, h.remaining, &h.reset);
    }
    r
}

/// `x-ratelimit-{limit,remaining,reset}-{what}`.
fn rate_headers(h: &mut HeaderMap, what: &str, limit: u64, remaining: u64, reset: &str) {
    for (k, v) in [
        ("limit", HeaderValue::from(limit)),
        ("remaining", HeaderValue::from(remaining)),
        (
            "reset",
            HeaderValue::from_str(reset).unwrap_or(HeaderValue::from_static("0s")),
        ),
    ] {
        if let Ok(name) = axum::http::HeaderName::try_from(format!("x-ratelimit-{k}-{what}")) {
            h.insert(name, v);
        }
    }
}
