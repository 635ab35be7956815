//! The built-in pages: the web chat at `/` and the live engine view at
//! `/dashboard`, plain HTML, CSS and JavaScript from `crates/server/web/`,
//! built into the binary (no network at run time, no build step).
//!
//! The pages are public (they hold no data); every call they make goes
//! to the API with the key the user typed, kept in the browser.
//! `--no-web` leaves them out. With `STEWARD_WEB_DIR` set, files are read
//! from that folder at each request instead (for editing the pages).

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::http::error::ApiError;

/// Every asset: name, content type, embedded text.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../web/index.html"),
    ),
    (
        "dashboard.html",
        "text/html; charset=utf-8",
        include_str!("../../web/dashboard.html"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../../web/app.css"),
    ),
    (
        "chat.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/chat.js"),
    ),
    (
        "dashboard.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/dashboard.js"),
    ),
    (
        "md.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/md.js"),
    ),
];

/// Scripts and styles only from this server; nothing is fetched
/// elsewhere, nothing framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(name: &str) -> Response {
    let Some(&(_, ctype, text)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return ApiError::not_found(&format!("/ui/{name}")).into_response();
    };
    let body = match std::env::var_os("STEWARD_WEB_DIR") {
        Some(dir) => match std::fs::read_to_string(std::path::Path::new(&dir).join(name)) {
            Ok(t) => t,
            Err(e) => return ApiError::internal(format!("{name}: {e}")).into_response(),
        },
        None => text.to_string(),
    };
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

pub(crate) async fn chat() -> Response {
    asset("index.html")
}

pub(crate) async fn dashboard() -> Response {
    asset("dashboard.html")
}

pub(crate) async fn file(Path(name): Path<String>) -> Response {
    asset(&name)
}
