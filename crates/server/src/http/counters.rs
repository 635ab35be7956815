//! The HTTP side's counters and histograms (`HttpMetrics`: statuses,
//! failures by code, finish reasons, TTFT, first text, inter-token gaps,
//! end to end), recorded on the request path and written as Prometheus
//! text by `render_http` / `render_vllm_latency`. Every metric name of the
//! HTTP side is declared in this file; the engine's are in `ops/metrics.rs`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use steward_engine::Finished;

const BUCKETS_S: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A recent observation's trace (OpenMetrics exemplar): the trace id, the
/// value, when (Unix seconds).
#[derive(Clone, Copy)]
struct Exemplar {
    trace: [u8; 16],
    value: f64,
    at: f64,
}

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS_S.len()],
    sum: f64,
    n: u64,
    /// The latest traced observation per bucket (`+Inf` last).
    ex: [Option<Exemplar>; BUCKETS_S.len() + 1],
}

impl Histogram {
    /// Observe `v`; with a trace id, it becomes its bucket's exemplar.
    fn observe(&mut self, v: f64, trace: Option<[u8; 16]>) {
        for (i, b) in BUCKETS_S.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.n += 1;
        if let Some(trace) = trace {
            let i = BUCKETS_S
                .iter()
                .position(|b| v <= *b)
                .unwrap_or(BUCKETS_S.len());
            let at = steward_engine::stats::unix_ms() / 1e3;
            self.ex[i] = Some(Exemplar {
                trace,
                value: v,
                at,
            });
        }
    }
    /// Prometheus text; with `om` (OpenMetrics), each bucket's exemplar.
    fn render(&self, out: &mut String, name: &str, help: &str, om: bool) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let ex = |i: usize| match (om, self.ex[i]) {
            (true, Some(e)) => format!(
                " # {{trace_id=\"{}\"}} {} {:.3}",
                e.trace
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
                e.value,
                e.at
            ),
            _ => String::new(),
        };
        for (i, b) in BUCKETS_S.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{b}\"}} {}{}",
                self.counts[i],
                ex(i)
            );
        }
        let inf = ex(BUCKETS_S.len());
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}{inf}", self.n);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.n);
    }
}

#[derive(Default)]
struct Inner {
    status: BTreeMap<u16, u64>,
    failures: BTreeMap<&'static str, u64>,
    finish: BTreeMap<&'static str, u64>,
    ttft: Histogram,
    first_text: Histogram,
    e2e: Histogram,
    itl: Histogram,
    prefill: Histogram,
}

/// HTTP-side counters (a mutex held for nanoseconds, off the engine thread).
#[derive(Default)]
pub struct HttpMetrics(Mutex<Inner>);

impl HttpMetrics {
    fn with(&self, f: impl FnOnce(&mut Inner)) {
        if let Ok(mut g) = self.0.lock() {
            f(&mut g)
        }
    }
    pub fn record_status(&self, code: u16) {
        self.with(|m| *m.status.entry(code).or_default() += 1);
    }
    pub fn record_failure(&self, code: &'static str) {
        self.with(|m| *m.failures.entry(code).or_default() += 1);
    }
    /// `trace`: the request's trace id when its trace is kept (an
    /// exemplar), here and below.
    pub fn observe_first_text(&self, secs: f64, trace: Option<[u8; 16]>) {
        self.with(|m| m.first_text.observe(secs, trace));
    }
    pub fn observe_finished(&self, f: &Finished, trace: Option<[u8; 16]>) {
        self.with(|m| {
            *m.finish.entry(f.reason.as_str()).or_default() += 1;
            m.ttft.observe(f.timings.first_token_ms / 1e3, trace);
            m.e2e.observe(f.timings.retired_ms / 1e3, trace);
            m.prefill.observe(
                (f.timings.prefill_done_ms - f.timings.admitted_ms).max(0.0) / 1e3,
                trace,
            );
        });
    }
    /// Gap between two text chunks handed to the transport.
    pub fn observe_itl(&self, secs: f64, trace: Option<[u8; 16]>) {
        self.with(|m| m.itl.observe(secs, trace));
    }

    /// TTFT and inter-token histograms for the dashboard: cumulative
    /// counts per upper bound in seconds.
    pub fn latency_json(&self) -> serde_json::Value {
        let h = |h: &Histogram| serde_json::json!({"counts": h.counts, "sum": h.sum, "n": h.n});
        let mut v = serde_json::Value::Null;
        self.with(|m| {
            v = serde_json::json!({
                "buckets_s": BUCKETS_S,
                "ttft": h(&m.ttft),
                "itl": h(&m.itl),
                "e2e": h(&m.e2e),
            })
        });
        v
    }
}

/// The HTTP side's counters and histograms.
/// `om`: OpenMetrics, with exemplars.
pub fn render_http(o: &mut String, h: &HttpMetrics, om: bool) {
    if let Ok(m) = h.0.lock() {
        let _ = writeln!(o, "# HELP steward_http_responses_total HTTP responses by status\n# TYPE steward_http_responses_total counter");
        for (k, v) in &m.status {
            let _ = writeln!(o, "steward_http_responses_total{{status=\"{k}\"}} {v}");
        }
        let _ = writeln!(o, "# HELP steward_request_failures_total Failed requests by error code\n# TYPE steward_request_failures_total counter");
        for (k, v) in &m.failures {
            let _ = writeln!(o, "steward_request_failures_total{{code=\"{k}\"}} {v}");
        }
        let _ = writeln!(o, "# HELP steward_request_finish_total Finished requests by finish reason\n# TYPE steward_request_finish_total counter");
        for (k, v) in &m.finish {
            let _ = writeln!(o, "steward_request_finish_total{{reason=\"{k}\"}} {v}");
        }
        m.ttft.render(
            o,
            "steward_time_to_first_token_seconds",
            "Arrival to first sampled token",
            om,
        );
        m.first_text.render(
            o,
            "steward_time_to_first_text_seconds",
            "Arrival to first text handed to the transport",
            om,
        );
        m.e2e.render(
            o,
            "steward_request_duration_seconds",
            "Arrival to retirement",
            om,
        );
        m.itl.render(
            o,
            "steward_inter_token_latency_seconds",
            "Gap between text chunks sent to a streaming client",
            om,
        );
        m.prefill.render(
            o,
            "steward_prefill_duration_seconds",
            "Admission to prefill done",
            om,
        );
    }
}

/// The HTTP side's latency histograms under vLLM's names (loaded models
/// only): TTFT and end-to-end of finished requests, the gap between text
/// chunks of streams.
pub fn render_vllm_latency(o: &mut String, h: &HttpMetrics, om: bool) {
    if let Ok(m) = h.0.lock() {
        m.ttft.render(
            o,
            "vllm:time_to_first_token_seconds",
            "Arrival to first sampled token (vLLM name)",
            om,
        );
        m.itl.render(
            o,
            "vllm:inter_token_latency_seconds",
            "Gap between text chunks sent to a streaming client (vLLM name)",
            om,
        );
        m.e2e.render(
            o,
            "vllm:e2e_request_latency_seconds",
            "Arrival to retirement (vLLM name)",
            om,
        );
    }
}
