//! The OTLP exporter's task: span batches from a bounded queue, one export
//! at a time (gRPC or HTTP/protobuf, `opentelemetry-otlp`), each bounded
//! by a timeout. A failed or timed-out export drops its batch (counted;
//! one warning a minute): a dead collector costs the queue's bound, never
//! a request's time.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use opentelemetry_sdk::Resource;
use tokio::sync::mpsc;

use super::{OtlpProtocol, TraceCounters, BATCHES};

/// Longest one export may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Start the exporter's task; its queue's sending end.
pub(super) fn start(
    url: String,
    protocol: OtlpProtocol,
    service: &str,
    counters: Arc<TraceCounters>,
) -> mpsc::Sender<Vec<SpanData>> {
    let (tx, rx) = mpsc::channel(BATCHES);
    let resource = Resource::builder()
        .with_service_name(service.to_string())
        .build();
    tokio::spawn(run(url, protocol, resource, rx, counters));
    tx
}

fn build(url: &str, protocol: OtlpProtocol) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let b = opentelemetry_otlp::SpanExporter::builder();
    match protocol {
        OtlpProtocol::Grpc => b
            .with_tonic()
            .with_endpoint(url)
            .with_timeout(TIMEOUT)
            .build(),
        OtlpProtocol::HttpProtobuf => b
            .with_http()
            .with_endpoint(http_url(url))
            .with_protocol(Protocol::HttpBinary)
            .with_timeout(TIMEOUT)
            .build(),
    }
    .map_err(|e| e.to_string())
}

/// An HTTP endpoint given without a path gets OTLP's `/v1/traces`.
fn http_url(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    if rest.trim_end_matches('/').contains('/') {
        url.to_string()
    } else {
        format!("{}/v1/traces", url.trim_end_matches('/'))
    }
}

async fn run(
    url: String,
    protocol: OtlpProtocol,
    resource: Resource,
    mut rx: mpsc::Receiver<Vec<SpanData>>,
    counters: Arc<TraceCounters>,
) {
    let mut exporter = match build(&url, protocol) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(endpoint = %url, error = %e, "OTLP exporter: cannot start; spans are dropped");
            while let Some(b) = rx.recv().await {
                counters
                    .spans_dropped
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
            }
            return;
        }
    };
    exporter.set_resource(&resource);
    tracing::info!(endpoint = %url, protocol = ?protocol, "OTLP exporter: traces go to the collector");
    let mut warned: Option<Instant> = None;
    while let Some(batch) = rx.recv().await {
        let n = batch.len() as u64;
        let r =
            tokio::time::timeout(TIMEOUT + Duration::from_secs(1), exporter.export(batch)).await;
        let err = match r {
            Ok(Ok(())) => {
                counters.spans_exported.fetch_add(n, Ordering::Relaxed);
                continue;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_string(),
        };
        counters.spans_dropped.fetch_add(n, Ordering::Relaxed);
        if warned.is_none_or(|w| w.elapsed() > Duration::from_secs(60)) {
            warned = Some(Instant::now());
            tracing::warn!(endpoint = %url, error = %err, spans = n, "OTLP export failed; spans dropped (steward_trace_spans_dropped_total)");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_http_endpoint_without_a_path_gets_v1_traces() {
        assert_eq!(super::http_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(super::http_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            super::http_url("http://c:4318/x/v1/traces"),
            "http://c:4318/x/v1/traces"
        );
    }
}
