//! A request's life, told: every generation request gets a `Record` at
//! arrival (`record.rs`: the HTTP layer's view and the engine's timelines,
//! `steward_engine::Timeline`), which at its end goes to the records task
//! here. The task writes the access log line (`access.rs`) and, with
//! `--otlp-endpoint`, turns kept records into OpenTelemetry spans
//! (`spans.rs`) exported over OTLP off every request's path (`export.rs`).
//! Trace context comes in and goes out as W3C `traceparent` (`context.rs`).
//!
//! Bounded everywhere: records wait in a channel of `RECORDS` (full:
//! dropped and counted), spans in batches of `BATCH` with at most
//! `BATCHES` waiting for the exporter (full: dropped and counted). The
//! owner thread only fills its timeline and lets go of its handle.
//!
//! Uses neither `api/` nor `http/`: they call in.

pub(crate) mod access;
pub(crate) mod context;
mod export;
pub(crate) mod record;
pub(crate) mod spans;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use tokio::sync::mpsc;

pub(crate) use record::Record;

/// Records waiting for the task.
const RECORDS: usize = 4096;
/// Spans per export.
const BATCH: usize = 512;
/// Batches waiting for the exporter.
const BATCHES: usize = 8;

/// OTLP's two transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// gRPC (port 4317 by convention).
    Grpc,
    /// HTTP with protobuf bodies (port 4318, path `/v1/traces`).
    #[value(name = "http/protobuf", alias = "http")]
    HttpProtobuf,
}

/// `steward serve`'s tracing and access-log settings.
#[derive(Debug, Clone)]
pub struct TraceConfig {
    /// `--otlp-endpoint` (None: no traces, no cost).
    pub endpoint: Option<String>,
    pub protocol: OtlpProtocol,
    /// `--otlp-sample-ratio`: the share of traces kept by their id.
    pub ratio: f64,
    /// Always keep a request whose first text took longer, or whose
    /// longest gap between texts was longer (`--otlp-keep-ttft-ms`,
    /// `--otlp-keep-gap-ms`); failed and cancelled ones are always kept.
    pub keep_ttft: Duration,
    pub keep_gap: Duration,
    pub service_name: String,
    /// One line per finished request (`--no-access-log` turns it off).
    pub access_log: bool,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            endpoint: None,
            protocol: OtlpProtocol::Grpc,
            ratio: 1.0,
            keep_ttft: Duration::from_secs(5),
            keep_gap: Duration::from_secs(1),
            service_name: "steward".into(),
            access_log: true,
        }
    }
}

/// What `/metrics` shows of it.
#[derive(Debug, Default)]
pub struct TraceCounters {
    pub records_dropped: Arc<AtomicU64>,
    pub traces_kept: AtomicU64,
    pub spans_built: AtomicU64,
    pub spans_exported: AtomicU64,
    pub spans_dropped: AtomicU64,
}

/// `steward serve`'s flags for traces and the access log.
#[derive(clap::Args, Debug, Clone)]
pub struct TraceArgs {
    /// Export each request's trace over OTLP to this collector
    /// (`http://HOST:4317` for gRPC; `http://HOST:4318` for
    /// --otlp-protocol http/protobuf, `/v1/traces` added when the URL has
    /// no path). Off by default; off costs nothing.
    #[arg(long, value_name = "URL", env = "STEWARD_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    #[arg(long, value_enum, default_value = "grpc")]
    pub otlp_protocol: OtlpProtocol,
    /// Share of traces kept by their trace id (a caller's sampled
    /// `traceparent` is always followed).
    #[arg(long, default_value_t = 1.0)]
    pub otlp_sample_ratio: f64,
    /// Keep every trace whose first text took longer (milliseconds), and
    /// every one whose longest gap between texts did; failed and cancelled
    /// requests are always kept.
    #[arg(long, default_value_t = 5000)]
    pub otlp_keep_ttft_ms: u64,
    #[arg(long, default_value_t = 1000)]
    pub otlp_keep_gap_ms: u64,
    /// The `service.name` resource attribute.
    #[arg(long, default_value = "steward")]
    pub otlp_service_name: String,
    /// No access log line per finished request.
    #[arg(long)]
    pub no_access_log: bool,
}

impl TraceArgs {
    pub fn config(&self) -> Result<TraceConfig, String> {
        if !(0.0..=1.0).contains(&self.otlp_sample_ratio) {
            return Err(format!(
                "--otlp-sample-ratio {} is not within 0..=1",
                self.otlp_sample_ratio
            ));
        }
        if let Some(u) = &self.otlp_endpoint {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(format!("--otlp-endpoint {u}: an http:// or https:// URL"));
            }
            if u.starts_with("https://") && self.otlp_protocol == OtlpProtocol::Grpc {
                return Err(format!(
                    "--otlp-endpoint {u}: TLS to a collector is supported with --otlp-protocol http/protobuf"
                ));
            }
        }
        Ok(TraceConfig {
            endpoint: self.otlp_endpoint.clone(),
            protocol: self.otlp_protocol,
            ratio: self.otlp_sample_ratio,
            keep_ttft: Duration::from_millis(self.otlp_keep_ttft_ms),
            keep_gap: Duration::from_millis(self.otlp_keep_gap_ms),
            service_name: self.otlp_service_name.clone(),
            access_log: !self.no_access_log,
        })
    }
}

/// The records' entrance: hands out records, owns the task's channel.
#[derive(Debug)]
pub struct Recorder {
    cfg: TraceConfig,
    tx: mpsc::Sender<record::Done>,
    pub counters: Arc<TraceCounters>,
    ids: Mutex<RandomIdGenerator>,
}

impl Recorder {
    /// Start the records task (and the exporter's, with an endpoint) on
    /// the current Tokio runtime.
    pub fn start(cfg: TraceConfig) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(RECORDS);
        let counters = Arc::new(TraceCounters::default());
        let exporter = cfg
            .endpoint
            .clone()
            .map(|url| export::start(url, cfg.protocol, &cfg.service_name, counters.clone()));
        tokio::spawn(run(rx, cfg.clone(), exporter, counters.clone()));
        Arc::new(Recorder {
            cfg,
            tx,
            counters,
            ids: Mutex::default(),
        })
    }

    /// Whether spans are exported.
    pub fn tracing(&self) -> bool {
        self.cfg.endpoint.is_some()
    }

    /// A request's record, in the caller's trace when its `traceparent`
    /// says so.
    pub(crate) fn begin(&self, id: &str, headers: &HeaderMap, arrival: Instant) -> Arc<Record> {
        let mut ids = || {
            let g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
            let mut b = [0u8; 24];
            b[..16].copy_from_slice(&g.new_trace_id().to_bytes());
            b[16..].copy_from_slice(&g.new_span_id().to_bytes());
            b
        };
        let ctx = context::TraceCtx::from_headers(headers, &mut ids);
        let sampled = self.tracing() && ctx.head_sampled(self.cfg.ratio);
        Arc::new(Record::new(
            id.to_string(),
            ctx,
            sampled,
            arrival,
            self.tracing(),
            self.tx.clone(),
            self.counters.records_dropped.clone(),
        ))
    }

    /// The response's `traceparent` (tracing on only).
    pub(crate) fn response_header(&self, r: &Record) -> Option<String> {
        self.tracing().then(|| r.ctx.header(r.head_sampled))
    }

    /// `/metrics` lines.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let c = &self.counters;
        let rows = [
            (
                "steward_trace_records_dropped_total",
                "Finished requests whose record found the records queue full (no access log line, no trace).",
                c.records_dropped.load(Ordering::Relaxed),
            ),
            (
                "steward_traces_kept_total",
                "Requests whose trace was kept (head sampling, or always kept: failed, cancelled, slow).",
                c.traces_kept.load(Ordering::Relaxed),
            ),
            (
                "steward_trace_spans_total",
                "Spans built from kept traces (each is exported or dropped).",
                c.spans_built.load(Ordering::Relaxed),
            ),
            (
                "steward_trace_spans_exported_total",
                "Spans the OTLP collector accepted.",
                c.spans_exported.load(Ordering::Relaxed),
            ),
            (
                "steward_trace_spans_dropped_total",
                "Spans lost: the export queue was full, or the collector failed or timed out.",
                c.spans_dropped.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, v) in rows {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        }
    }
}

/// Whether a finished request's trace is kept: head-sampled, or failed,
/// cancelled, or slow (tail rules, decided here at its end).
fn keep(d: &record::Done, cfg: &TraceConfig) -> bool {
    use steward_engine::TimelineEnd;
    let s = &d.seen;
    let ttft = s.first_text.map(|t| t.saturating_duration_since(d.arrival));
    d.head_sampled
        || s.error.is_some()
        || s.status >= 400
        || d.lines
            .iter()
            .any(|l| !matches!(l.end, TimelineEnd::Finished(_)))
        || ttft.is_some_and(|t| t > cfg.keep_ttft)
        || s.max_gap > cfg.keep_gap
}

/// The records task: each record's access log line, and its spans when
/// kept, batched to the exporter.
async fn run(
    mut rx: mpsc::Receiver<record::Done>,
    cfg: TraceConfig,
    exporter: Option<mpsc::Sender<Vec<opentelemetry_sdk::trace::SpanData>>>,
    counters: Arc<TraceCounters>,
) {
    let clock = spans::Clock::now();
    let scope = opentelemetry::InstrumentationScope::builder("steward")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let ids = RandomIdGenerator::default();
    let mut next_id = || ids.new_span_id().to_bytes();
    let mut batch = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let d = tokio::select! {
            d = rx.recv() => d,
            _ = tick.tick() => {
                flush(&mut batch, exporter.as_ref(), &counters);
                continue;
            }
        };
        let Some(d) = d else { break };
        let kept = exporter.is_some() && keep(&d, &cfg);
        if cfg.access_log {
            let t = kept.then(|| context::hex(&d.ctx.trace_id));
            access::log(&d, t.as_deref());
        }
        if kept {
            counters.traces_kept.fetch_add(1, Ordering::Relaxed);
            let s = spans::spans(&d, &clock, &scope, &mut next_id);
            counters
                .spans_built
                .fetch_add(s.len() as u64, Ordering::Relaxed);
            batch.extend(s);
            if batch.len() >= BATCH {
                flush(&mut batch, exporter.as_ref(), &counters);
            }
        }
    }
    flush(&mut batch, exporter.as_ref(), &counters);
}

/// Hand the batch to the exporter, or drop it (counted) when its queue
/// is full.
fn flush(
    batch: &mut Vec<opentelemetry_sdk::trace::SpanData>,
    exporter: Option<&mpsc::Sender<Vec<opentelemetry_sdk::trace::SpanData>>>,
    counters: &TraceCounters,
) {
    let (Some(tx), false) = (exporter, batch.is_empty()) else {
        return;
    };
    let b = std::mem::take(batch);
    let n = b.len() as u64;
    if tx.try_send(b).is_err() {
        counters.spans_dropped.fetch_add(n, Ordering::Relaxed);
    }
}
