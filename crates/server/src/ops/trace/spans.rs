//! A finished request's record as OpenTelemetry spans: the root (arrival
//! to the end: reply sent, every choice retired) and, per choice, the
//! stages in order, each starting where the one before ended: `tokenize`
//! (validation, template, tokens, media encoding), `queue`, `admission`
//! (slot, reservation, a restored prefix), `prefill` (a child per prefill
//! step), `decode` (events: first token, first text sent), `cancellation`
//! (the client's leaving noticed → retired), `retire` (retired → end).

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use steward_engine::{Timeline, TimelineEnd};

use super::record::Done;

/// Instants to wall-clock times: one pair taken at start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub instant: Instant,
    pub system: SystemTime,
}

impl Clock {
    pub fn now() -> Self {
        Clock {
            instant: Instant::now(),
            system: SystemTime::now(),
        }
    }

    pub fn at(&self, t: Instant) -> SystemTime {
        match t.checked_duration_since(self.instant) {
            Some(d) => self.system + d,
            None => self.system - self.instant.duration_since(t),
        }
    }
}

/// Builds one request's spans.
struct Builder<'a> {
    clock: &'a Clock,
    scope: &'a InstrumentationScope,
    trace: TraceId,
    ids: &'a mut dyn FnMut() -> [u8; 8],
    out: Vec<SpanData>,
}

impl Builder<'_> {
    /// A span under `parent`; returns its id.
    fn span(
        &mut self,
        parent: SpanId,
        name: &'static str,
        (start, end): (Instant, Instant),
        attributes: Vec<KeyValue>,
        events: Vec<(&'static str, Instant)>,
    ) -> SpanId {
        let id = SpanId::from_bytes((self.ids)());
        let mut span_events = SpanEvents::default();
        span_events.events = events
            .into_iter()
            .map(|(n, t)| opentelemetry::trace::Event::new(n, self.clock.at(t), Vec::new(), 0))
            .collect();
        self.out.push(SpanData {
            span_context: SpanContext::new(
                self.trace,
                id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(name),
            start_time: self.clock.at(start),
            end_time: self.clock.at(end.max(start)),
            attributes,
            dropped_attributes_count: 0,
            events: span_events,
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: self.scope.clone(),
        });
        id
    }
}

/// Every span of a finished request; `ids` gives fresh span ids.
pub(crate) fn spans(
    d: &Done,
    clock: &Clock,
    scope: &InstrumentationScope,
    ids: &mut dyn FnMut() -> [u8; 8],
) -> Vec<SpanData> {
    let root = SpanId::from_bytes(d.ctx.span_id);
    let mut b = Builder {
        clock,
        scope,
        trace: TraceId::from_bytes(d.ctx.trace_id),
        ids,
        out: Vec::new(),
    };
    let s = &d.seen;
    let tokenized = s.tokenized.unwrap_or(d.ended);
    let media = if s.media {
        "tokenize and media"
    } else {
        "tokenize"
    };
    b.span(
        root,
        media,
        (d.arrival, tokenized),
        vec![KeyValue::new(
            "steward.prompt_tokens",
            i64::from(s.prompt_tokens),
        )],
        Vec::new(),
    );
    for (i, l) in d.lines.iter().enumerate() {
        choice(&mut b, root, tokenized, d, l, i);
    }
    if s.tokenized.is_some() && d.lines.is_empty() {
        // Prepared, never retired by an engine (refused at submission, or
        // its timeline was lost): the rest is one span.
        b.span(root, "queue", (tokenized, d.ended), Vec::new(), Vec::new());
    }
    let mut out = b.out;
    out.push(root_span(d, clock, scope));
    out
}

/// One choice's stages, contiguous from `tokenized` to the record's end.
fn choice(b: &mut Builder, root: SpanId, tokenized: Instant, d: &Done, l: &Timeline, i: usize) {
    let retired = l.retired.unwrap_or(d.ended);
    let choice = vec![KeyValue::new("steward.choice", i as i64)];
    // Each stage ends where the next begins; a stage never reached ends
    // where the sequence stopped (its cancellation, or its retirement).
    let stop = l.cancel_noticed.filter(|&c| c < retired).unwrap_or(retired);
    let began = l.admit_began.unwrap_or(stop).min(stop);
    b.span(
        root,
        "queue",
        (tokenized, began),
        choice.clone(),
        Vec::new(),
    );
    let admitted = l.admitted.unwrap_or(stop).clamp(began, stop);
    let cached = i64::from(l.cached_tokens);
    let attrs = vec![KeyValue::new("steward.cached_tokens", cached)];
    b.span(root, "admission", (began, admitted), attrs, Vec::new());
    let prefilled = l.prefill_done.unwrap_or(stop).clamp(admitted, stop);
    let computed = i64::from(l.prompt_tokens.saturating_sub(l.cached_tokens));
    let attrs = vec![
        KeyValue::new("steward.prompt_tokens", i64::from(l.prompt_tokens)),
        KeyValue::new("steward.computed_tokens", computed),
        KeyValue::new("steward.preemptions", i64::from(l.preemptions)),
    ];
    let prefill = b.span(root, "prefill", (admitted, prefilled), attrs, Vec::new());
    for c in &l.chunks {
        let attrs = vec![
            KeyValue::new("steward.tokens", i64::from(c.tokens)),
            KeyValue::new("steward.step", c.step as i64),
            KeyValue::new("steward.steps", i64::from(c.steps)),
        ];
        b.span(prefill, "prefill step", (c.start, c.end), attrs, Vec::new());
    }
    if l.prefill_done.is_some_and(|p| p < stop) {
        let mut events = Vec::new();
        events.extend(l.first_token.map(|t| ("first token", t)));
        events.extend(d.seen.first_text.map(|t| ("first text sent", t)));
        let attrs = vec![KeyValue::new(
            "steward.completion_tokens",
            i64::from(l.completion_tokens),
        )];
        b.span(root, "decode", (prefilled, stop), attrs, events);
    }
    if l.end == TimelineEnd::Cancelled {
        b.span(
            root,
            "cancellation",
            (stop, retired),
            choice.clone(),
            Vec::new(),
        );
    }
    let end = match &l.end {
        TimelineEnd::Finished(r) => r.to_string(),
        TimelineEnd::Cancelled => "cancelled".into(),
        TimelineEnd::Failed(e) => e.clone(),
    };
    let attrs = vec![KeyValue::new("steward.end", end)];
    b.span(root, "retire", (retired, d.ended), attrs, Vec::new());
}

/// The root: the request, from arrival to its end, under the caller's
/// span when it sent one.
fn root_span(d: &Done, clock: &Clock, scope: &InstrumentationScope) -> SpanData {
    let s = &d.seen;
    let mut a = vec![
        KeyValue::new("steward.request_id", d.id.clone()),
        KeyValue::new("gen_ai.request.model", s.model.clone()),
        KeyValue::new("http.route", s.route),
        KeyValue::new("http.response.status_code", i64::from(s.status)),
        KeyValue::new("steward.priority", i64::from(s.priority)),
        KeyValue::new("steward.stream", s.stream),
    ];
    if !s.adapters.is_empty() {
        a.push(KeyValue::new("steward.adapters", s.adapters.clone()));
    }
    if let Some(k) = &s.key {
        a.push(KeyValue::new("steward.api_key_name", k.to_string()));
    }
    let sum = |f: fn(&Timeline) -> u32| d.lines.iter().map(|l| i64::from(f(l))).sum::<i64>();
    a.push(KeyValue::new(
        "gen_ai.usage.input_tokens",
        i64::from(s.prompt_tokens),
    ));
    a.push(KeyValue::new(
        "gen_ai.usage.output_tokens",
        sum(|l| l.completion_tokens),
    ));
    a.push(KeyValue::new(
        "steward.cached_tokens",
        sum(|l| l.cached_tokens),
    ));
    if !s.finish.is_empty() {
        a.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            s.finish.join(","),
        ));
    }
    let cancelled = d.lines.iter().any(|l| l.end == TimelineEnd::Cancelled);
    let failed = d.lines.iter().find_map(|l| match &l.end {
        TimelineEnd::Failed(e) => Some(e.clone()),
        _ => None,
    });
    let status = match (s.error, failed, cancelled) {
        (Some(code), _, _) => {
            a.push(KeyValue::new("error.type", code));
            Status::error(code)
        }
        (None, Some(e), _) => Status::error(e),
        (None, None, true) => {
            a.push(KeyValue::new("steward.cancelled", true));
            Status::Unset
        }
        _ => Status::Ok,
    };
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(d.ctx.trace_id),
            SpanId::from_bytes(d.ctx.span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: d.ctx.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: d.ctx.parent.is_some(),
        span_kind: SpanKind::Server,
        name: Cow::Borrowed(s.route),
        start_time: clock.at(d.arrival),
        end_time: clock.at(d.ended),
        attributes: a,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}
