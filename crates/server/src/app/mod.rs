//! The application shell, the top of the crate: the router (`app()`,
//! `metrics_app()`, `serve_forever`), the layers every request passes
//! (API key and rate limit, body, JSON rejections, CORS), `/health` and
//! `/ready`, and the built-in pages.
//!
//! May use every sibling folder (`batch/`, `api/`, `ops/`, `deliver/`,
//! `prepare/`, `http/`); none of them uses this one (the batch runner is
//! handed the router, `start_batch`).

pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod probes;
pub(crate) mod router;
pub(crate) mod web;

pub use router::{app, metrics_app, serve_forever, start_batch};
