//! `GET /dashboard/events`: the live engine view's feed (Server-Sent
//! Events). Every `interval_ms` (default 500, 100..5000) one `snapshot`
//! event per tick with, for each loaded model: its requests and their
//! state, the memory ledger term by term, KV cells and the prefix cache,
//! the steps and cancellations since the last event, and the TTFT and
//! inter-token histograms.
//!
//! It reads only what the owners already publish (the `watch` snapshot,
//! `EngineStats`) and the HTTP metrics: a dashboard never sends the owner
//! a command and never waits on it. Open feeds are bounded
//! (`MAX_FEEDS`, past it 429), and a feed whose client reads slower than
//! it ticks skips ticks (axum's SSE writes only when the socket takes it;
//! a tick's events are built only when the previous was sent).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::api::state::Shared;
use crate::http::error::ApiError;

/// Dashboards open at once (per server: the count is `AppState::feeds`).
pub const MAX_FEEDS: usize = 16;

#[derive(serde::Deserialize)]
pub(crate) struct FeedQuery {
    interval_ms: Option<u64>,
}

struct Feed {
    s: Shared,
    interval: tokio::time::Interval,
    /// Per model: the last step and cancellation already sent.
    seen: HashMap<String, (u64, u64)>,
    _open: OpenFeed,
}

/// One of the server's open feeds, counted down when the feed ends.
struct OpenFeed(Shared);

impl Drop for OpenFeed {
    fn drop(&mut self) {
        self.0.feeds.fetch_sub(1, Ordering::AcqRel);
    }
}

pub(crate) async fn events(State(s): State<Shared>, Query(q): Query<FeedQuery>) -> Response {
    let ms = q.interval_ms.unwrap_or(500);
    if !(100..=5000).contains(&ms) {
        return ApiError::invalid_value("interval_ms must be within 100..=5000", "interval_ms")
            .into_response();
    }
    if s.feeds.fetch_add(1, Ordering::AcqRel) >= MAX_FEEDS {
        s.feeds.fetch_sub(1, Ordering::AcqRel);
        return ApiError::rate_limited(
            format!("{MAX_FEEDS} dashboard feeds are open; close one"),
            "too_many_feeds",
            5,
        )
        .into_response();
    }
    let mut interval = tokio::time::interval(Duration::from_millis(ms));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let feed = Feed {
        _open: OpenFeed(s.clone()),
        s,
        interval,
        seen: HashMap::new(),
    };
    let stream = futures::stream::unfold(feed, |mut f| async move {
        f.interval.tick().await;
        let v = snapshot(&f.s, &mut f.seen);
        let ev = Event::default().event("snapshot").data(v.to_string());
        Some((Ok::<_, std::convert::Infallible>(ev), f))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// One tick: every loaded model, what changed since `seen`.
pub(crate) fn snapshot(s: &Shared, seen: &mut HashMap<String, (u64, u64)>) -> Value {
    let mut models = Vec::new();
    if let Ok(reg) = s.registry() {
        for (name, e) in reg.loaded() {
            let st = e.stats();
            let ledger = e.ledger_of(&st);
            let (last_step, last_cancel) = seen.get(&name).copied().unwrap_or((0, 0));
            let steps: Vec<_> = st.recent_steps.iter().filter(|r| r.n > last_step).collect();
            let cancels: Vec<_> = st
                .recent_cancels
                .iter()
                .filter(|r| r.n > last_cancel)
                .collect();
            seen.insert(name.clone(), (st.steps, st.requests_cancelled));
            let mut ledger_v = serde_json::to_value(&ledger).unwrap_or_default();
            ledger_v["sum_of_terms"] = json!(ledger.sum());
            models.push(json!({
                "model": name,
                "ready": st.ready,
                "draining": st.draining,
                "memory_kind": st.memory_kind,
                "slots_total": st.slots_total,
                "running": st.running,
                "prefilling": st.prefilling,
                "waiting": st.waiting,
                "paused": st.paused,
                "prompt_budget": st.prompt_budget,
                "requests": st.live,
                "kv": {
                    "cells_used": st.kv_cells_used,
                    "cells_reserved": st.kv_cells_reserved,
                    "cells_cached": st.kv_cells_cached,
                    "cells_total": st.kv_cells_total,
                    "bytes_per_cell": st.kv_bytes_per_cell,
                },
                "prefix": {
                    "lookups": st.prefix_lookups,
                    "hits": st.prefix_hits,
                    "reused_tokens": st.prefix_reused_tokens,
                    "evictions": st.prefix_evictions,
                    "entries": st.prefix_entries,
                    "host_entries": st.prefix_host_entries,
                    "host_bytes": st.prefix_host_bytes,
                },
                "ledger": ledger_v,
                "counters": {
                    "steps": st.steps,
                    "prompt_tokens": st.prompt_tokens_total,
                    "generated_tokens": st.generated_tokens_total,
                    "finished": st.requests_finished,
                    "cancelled": st.requests_cancelled,
                    "failed": st.requests_failed,
                },
                "steps": steps,
                "cancellations": cancels,
                "latency": s.model_metrics(&name).latency_json(),
            }));
        }
    }
    json!({
        "t_ms": steward_engine::stats::unix_ms(),
        "connections_open": s.conns.open.load(Ordering::Relaxed),
        "response_store": {
            "bytes": s.responses.bytes(),
            "capacity_bytes": s.responses.capacity_bytes(),
            "entries": s.responses.len(),
        },
        "models": models,
    })
}
