//! The API key check in front of every route but `/health`, `/ready`,
//! `/openapi.json` and the pages (`Authorization: Bearer` or `x-api-key`),
//! with the key's rate limit and its `x-ratelimit-*` headers.

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::state::Shared;
use crate::http::access;
use crate::http::error::ApiError;

pub(crate) async fn auth(State(s): State<Shared>, req: Request, next: Next) -> Response {
    if !s.keys.enabled() {
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
            r.headers_mut()
                .insert("x-ratelimit-limit-requests", HeaderValue::from(rpm));
            r.headers_mut()
                .insert("x-ratelimit-remaining-requests", HeaderValue::from(0));
            return r;
        }
    };
    let mut r = next.run(req).await;
    if let Some((limit, left)) = admitted.and_then(|a| a.rate) {
        r.headers_mut()
            .insert("x-ratelimit-limit-requests", HeaderValue::from(limit));
        r.headers_mut()
            .insert("x-ratelimit-remaining-requests", HeaderValue::from(left));
    }
    r
}
