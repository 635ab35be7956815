//! The access log: one line per finished request (target
//! `steward::access`; JSON fields with `--log-format json`): id, key name,
//! model, route, status, prompt / cached / generated tokens, queue, TTFT,
//! total time, finish reason, and where a cancelled request was.

use std::time::Instant;

use steward_engine::{Timeline, TimelineEnd};

use super::record::Done;

/// Milliseconds from `a` to `b` (None when either is missing).
fn ms(a: Option<Instant>, b: Option<Instant>) -> Option<f64> {
    let (a, b) = (a?, b?);
    Some((b.saturating_duration_since(a).as_secs_f64() * 1e4).round() / 10.0)
}

/// Where a cancelled sequence was when its client left.
pub(crate) fn cancelled_at(l: &Timeline) -> Option<&'static str> {
    if l.end != TimelineEnd::Cancelled {
        return None;
    }
    let at = l.cancel_noticed.or(l.retired);
    let before = |t: Option<Instant>| t.is_none_or(|t| at.is_some_and(|a| a < t));
    Some(if before(l.admitted) {
        "queue"
    } else if before(l.prefill_done) {
        "prefill"
    } else {
        "decode"
    })
}

/// The line's values, computed apart from the logging (tested).
#[derive(Debug, PartialEq)]
pub(crate) struct Line {
    pub prompt: u32,
    pub cached: u32,
    pub generated: u32,
    pub queue_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub total_ms: f64,
    pub finish: String,
    pub cancelled_at: Option<&'static str>,
}

pub(crate) fn line(d: &Done) -> Line {
    let first = d.lines.first();
    let s = &d.seen;
    // The first text sent (a stream), else the first token computed.
    let first_token = d.lines.iter().filter_map(|l| l.first_token).min();
    let ttft = s.first_text.or(first_token);
    let finish = if !s.finish.is_empty() {
        s.finish.join(",")
    } else {
        let ends: Vec<String> = d
            .lines
            .iter()
            .map(|l| match &l.end {
                TimelineEnd::Finished(r) => r.to_string(),
                TimelineEnd::Cancelled => "cancelled".into(),
                TimelineEnd::Failed(_) => "error".into(),
            })
            .collect();
        ends.join(",")
    };
    Line {
        prompt: s.prompt_tokens.max(first.map_or(0, |l| l.prompt_tokens)),
        cached: first.map_or(0, |l| l.cached_tokens),
        generated: d.lines.iter().map(|l| l.completion_tokens).sum(),
        queue_ms: ms(s.tokenized, first.and_then(|l| l.admitted)),
        ttft_ms: ms(Some(d.arrival), ttft),
        total_ms: ms(Some(d.arrival), Some(d.ended)).unwrap_or(0.0),
        finish,
        cancelled_at: d.lines.iter().find_map(cancelled_at),
    }
}

/// Write the request's line.
pub(crate) fn log(d: &Done, trace_id: Option<&str>) {
    let l = line(d);
    let s = &d.seen;
    tracing::info!(
        target: "steward::access",
        request_id = %d.id,
        key = s.key.as_deref().unwrap_or("-"),
        model = %s.model,
        route = s.route,
        status = s.status,
        error = s.error.unwrap_or("-"),
        prompt_tokens = l.prompt,
        cached_tokens = l.cached,
        generated_tokens = l.generated,
        queue_ms = l.queue_ms.unwrap_or(-1.0),
        ttft_ms = l.ttft_ms.unwrap_or(-1.0),
        total_ms = l.total_ms,
        finish = %l.finish,
        cancelled_at = l.cancelled_at.unwrap_or("-"),
        trace_id = trace_id.unwrap_or("-"),
        "request"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::trace::context::TraceCtx;
    use crate::ops::trace::record::Seen;
    use std::time::Duration;

    fn at(t0: Instant, ms: u64) -> Option<Instant> {
        Some(t0 + Duration::from_millis(ms))
    }

    fn done(t0: Instant, l: Timeline) -> Done {
        Done {
            id: "r1".into(),
            ctx: TraceCtx {
                trace_id: [1; 16],
                span_id: [2; 8],
                parent: None,
                parent_sampled: false,
            },
            head_sampled: true,
            arrival: t0,
            ended: t0 + Duration::from_millis(500),
            seen: Seen {
                tokenized: at(t0, 10),
                prompt_tokens: 40,
                ..Seen::default()
            },
            lines: vec![l],
        }
    }

    #[test]
    fn a_finished_request_reads_its_queue_and_first_token() {
        let t0 = Instant::now();
        let l = Timeline {
            admitted: at(t0, 30),
            prefill_done: at(t0, 100),
            first_token: at(t0, 100),
            retired: at(t0, 400),
            end: TimelineEnd::Finished("length"),
            prompt_tokens: 40,
            cached_tokens: 8,
            completion_tokens: 16,
            ..Timeline::default()
        };
        let got = line(&done(t0, l));
        assert_eq!(
            got,
            Line {
                prompt: 40,
                cached: 8,
                generated: 16,
                queue_ms: Some(20.0),
                ttft_ms: Some(100.0),
                total_ms: 500.0,
                finish: "length".into(),
                cancelled_at: None,
            }
        );
    }

    #[test]
    fn a_cancelled_request_says_where_it_was() {
        let t0 = Instant::now();
        let mut l = Timeline {
            admitted: at(t0, 30),
            cancel_noticed: at(t0, 60),
            retired: at(t0, 70),
            end: TimelineEnd::Cancelled,
            ..Timeline::default()
        };
        assert_eq!(cancelled_at(&l), Some("prefill"));
        l.admitted = None;
        assert_eq!(cancelled_at(&l), Some("queue"));
        l.admitted = at(t0, 30);
        l.prefill_done = at(t0, 50);
        assert_eq!(cancelled_at(&l), Some("decode"));
        assert_eq!(line(&done(t0, l)).finish, "cancelled");
    }
}
