//! Steward's HTTP layer: the router (`app()`, testable without a socket),
//! routes, auth, metrics text; replies and SSE framing in `deliver::reply`.
//! Every failure goes through `http::error::ApiError`, the one mapping to
//! HTTP.
//!
//! A request's path here: validate wire → prepare (template + tokenize on the
//! engine's bounded pool) → context check → submit (bounded inbox) → relay
//! events as JSON or SSE. Dropping the response body (client gone) drops the
//! `RequestStream`, which the engine treats as a cancellation.
//!
//! The folders, each using only those below it (each `mod.rs` says what it
//! owns):
//!
//! ```text
//! app/      the router, its layers, /health, /ready, the pages   (top)
//! batch/    the Batch API: files and jobs on disk, the runner (lines
//!           through the router in-process)
//! ops/      /metrics, /debug/*, dashboard feed, /get_load, KV events, OpenAPI
//! api/      the handlers per API, and the state they share
//! deliver/  ④ ⑤ output read back, logprobs, replies whole or SSE
//! prepare/  ① wire body → checked request (validation, limits, tools, grammar)
//! http/     errors, connections, keys and TLS, HTTP counters     (leaves)
//! state/    the state directory: lock, version, steward.db, the
//!           Responses store's durable copy                        (a leaf)
//! ```
//!
//! The binary's commands (`serve`, `fetch-model`, …) are `cli/`, under
//! `main.rs`.

mod api;
mod app;
mod batch;
mod deliver;
mod http;
mod ops;
mod prepare;
mod state;

pub use api::state::{AppState, ServerOptions};
pub use app::{app, metrics_app, serve_forever, start_batch};
pub use batch::{BatchArgs, Options as BatchOptions};
pub use http::conn::bind;
pub use state::{Loaded, Opened, StateDir, StateError};

// The module paths this crate has always offered (the binary, tests, fuzz
// targets, the bench).
pub use deliver::{logprobs, output};
pub use http::{access, conn, error};
pub use ops::{dashboard, kvevents, metrics, trace};
pub use prepare::{chat_input, limits, tools, validate};
