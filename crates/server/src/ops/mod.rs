//! What operators and routers read: `/metrics` text (`metrics`, pins in
//! `pin_metrics`, every model's merged by `labels`), the `/metrics` and
//! `/debug/*` handlers (`routes`), the dashboard's feed (`dashboard`),
//! `/get_load` (`gateway`), KV-cache events over ZeroMQ (`kvevents`),
//! `/openapi.json` (`openapi`), and each request's access log line and
//! OpenTelemetry trace (`trace`, which uses neither `api/` nor `http/`).
//!
//! May use `api/` (the shared state, the models' states), `http/`; reads
//! the engines' published snapshots, never sends an owner a command but
//! `/debug/cells`'.

pub mod dashboard;
pub(crate) mod gateway;
pub mod kvevents;
pub(crate) mod labels;
mod ledger_metrics;
pub mod metrics;
pub(crate) mod openapi;
mod pin_metrics;
pub(crate) mod routes;
pub mod trace;
