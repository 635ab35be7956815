//! ⑤ deliver — what leaves the owner: each request's bounded outbox and the
//! stream the server reads (`stream`: events, finish reasons, timings,
//! cancellation on drop), and the published statistics snapshot (`stats`:
//! a `watch` value the owner writes once per iteration and the server's
//! metrics, dashboard and `/debug` read), and each request's timeline
//! handed at its end to whoever asked (`timeline`: the server's access log
//! and traces).
//!
//! May use: `runtime` (token ids), `fatal`, `owner::plan::cost` (the step cost
//! it publishes). Must not use the owner's phases.

pub mod stats;
pub mod stream;
pub mod timeline;
