//! Counting by request class (plain, `n`, grammar, unstreamed, each cancel
//! point, slow readers, each bad input) and the soak's verdict on each
//! record: what a correct server may answer a request of its class, and
//! which answers are failures. Pure.
//!
//! A request counts in every class it belongs to (an `n` = 3 grammar
//! request is in `n` and in `grammar`) and in `all`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client::Record;
use crate::workload::CancelAt;

/// Counts of one class.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClassCounts {
    pub sent: usize,
    /// Answered 2xx (a stream counts here once its head arrived).
    pub ok_2xx: usize,
    /// Answered 4xx other than 429 (expected only for bad inputs).
    pub client_4xx: usize,
    /// Answered 429 or 503: refused for load (expected past capacity).
    pub overload_429_503: usize,
    /// Answered another 5xx: always a failure.
    pub other_5xx: usize,
    /// No HTTP answer, or the body broke off (not hung up by us).
    pub transport: usize,
    pub cancelled_by_us: usize,
    /// Streams (2xx, not hung up by us) that ended with `data: [DONE]`.
    pub stream_done: usize,
    /// Streams that carried an error event.
    pub stream_error_event: usize,
    /// Refusal and error-event codes.
    pub codes: BTreeMap<String, usize>,
    /// Statuses (for the bad inputs, where each kind has its own).
    pub statuses: BTreeMap<u16, usize>,
    pub failures: usize,
}

/// The classes a record belongs to (besides `all`).
pub fn classes_of(r: &Record) -> Vec<String> {
    let k = &r.kind;
    if let Some(b) = k.bad {
        return vec!["bad".into(), format!("bad:{}", b.as_str())];
    }
    let mut c = Vec::new();
    if k.n.is_some() {
        c.push("n".to_string());
    }
    if k.grammar.is_some() {
        c.push("grammar".into());
    }
    if k.unstreamed {
        c.push("unstreamed".into());
    }
    match r.cancel_at {
        Some(CancelAt::Queued) => c.push("cancel:queued".into()),
        Some(CancelAt::Prefill) => c.push("cancel:prefill".into()),
        Some(CancelAt::Decode) => c.push("cancel:decode".into()),
        _ => {}
    }
    if r.slow_reader {
        c.push("slow_reader".into());
    }
    if c.is_empty() {
        c.push("plain".into());
    }
    c
}

/// Error-event codes a stream may end with under load without a fault: a
/// later choice of `n` that waited past the queue timeout, a reader too
/// slow for the slow-reader policy.
const LOAD_STREAM_ERRORS: [&str; 2] = ["queue_timeout", "slow_reader"];

/// Why this record is a failure of the server (None: a right answer).
pub fn failure(r: &Record) -> Option<String> {
    let bad = r.kind.bad.is_some();
    if let Some(why) = &r.error_shape {
        return Some(format!("error body not in the OpenAI shape ({why})"));
    }
    if r.status == 0 {
        // Hung up by us before any answer: our choice, not the server's.
        return (!r.cancelled_by_us).then(|| "no HTTP answer (transport error)".into());
    }
    match r.status {
        200..=299 if bad => return Some(format!("bad input accepted with {}", r.status)),
        200..=299 => {}
        429 | 503 => return None,
        400..=499 if bad => return None,
        400..=499 => return Some(format!("valid request refused with {}", r.status)),
        s => return Some(format!("answered {s}")),
    }
    if r.cancelled_by_us {
        return None;
    }
    let n = r.kind.n.unwrap_or(1);
    if let Some(code) = &r.stream_error {
        return (!LOAD_STREAM_ERRORS.contains(&code.as_str()))
            .then(|| format!("stream ended with error event `{code}`"));
    }
    if r.error.is_some() {
        return Some("the body broke off (transport error)".into());
    }
    if !r.kind.unstreamed && !r.saw_done {
        return Some("stream ended without [DONE]".into());
    }
    if r.bad_events > 0 {
        return Some(format!("{} SSE data events were not JSON", r.bad_events));
    }
    if r.choices_finished != n {
        return Some(format!("{} of {n} choices finished", r.choices_finished));
    }
    if r.grammar_invalid > 0 {
        return Some(format!(
            "{} choices stopped with text their grammar forbids",
            r.grammar_invalid
        ));
    }
    None
}

/// Per-class counts, keyed by class (`all` first in sorted order: no other
/// class sorts before it).
pub fn count(records: &[Record]) -> BTreeMap<String, ClassCounts> {
    let mut m: BTreeMap<String, ClassCounts> = BTreeMap::new();
    for r in records {
        let fail = failure(r).is_some();
        for c in std::iter::once("all".to_string()).chain(classes_of(r)) {
            let e = m.entry(c).or_default();
            e.sent += 1;
            match r.status {
                0 if !r.cancelled_by_us => e.transport += 1,
                0 => {}
                200..=299 => e.ok_2xx += 1,
                429 | 503 => e.overload_429_503 += 1,
                400..=499 => e.client_4xx += 1,
                _ => e.other_5xx += 1,
            }
            if r.status != 0 {
                *e.statuses.entry(r.status).or_default() += 1;
            }
            if (200..300).contains(&r.status) && r.error.is_some() && r.stream_error.is_none() {
                e.transport += 1;
            }
            if r.cancelled_by_us {
                e.cancelled_by_us += 1;
            }
            if r.saw_done && !r.cancelled_by_us {
                e.stream_done += 1;
            }
            if let Some(code) = &r.stream_error {
                e.stream_error_event += 1;
                *e.codes.entry(format!("event:{code}")).or_default() += 1;
            }
            if let Some(code) = &r.error_code {
                *e.codes.entry(code.clone()).or_default() += 1;
            }
            if fail {
                e.failures += 1;
            }
        }
    }
    m
}

/// One line per failing record (the first `max`): what was sent, what
/// came back, and why it fails.
pub fn failure_examples(records: &[Record], max: usize) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| failure(r).map(|why| (r, why)))
        .take(max)
        .map(|(r, why)| {
            format!(
                "{why}: request {} (conversation {} turn {}, {}) status {} body {:?}",
                r.request_id,
                r.conversation,
                r.turn,
                classes_of(r).join("+"),
                r.status,
                r.error.as_deref().unwrap_or("")
            )
        })
        .collect()
}

/// The class table as aligned text.
pub fn table(m: &BTreeMap<String, ClassCounts>) -> String {
    let mut t = format!(
        "{:<20} {:>6} {:>6} {:>6} {:>7} {:>5} {:>5} {:>6} {:>6} {:>6} {:>5}\n",
        "class",
        "sent",
        "2xx",
        "4xx",
        "429/503",
        "5xx",
        "trans",
        "cancel",
        "[DONE]",
        "errev",
        "FAIL"
    );
    for (k, c) in m {
        t.push_str(&format!(
            "{:<20} {:>6} {:>6} {:>6} {:>7} {:>5} {:>5} {:>6} {:>6} {:>6} {:>5}\n",
            k,
            c.sent,
            c.ok_2xx,
            c.client_4xx,
            c.overload_429_503,
            c.other_5xx,
            c.transport,
            c.cancelled_by_us,
            c.stream_done,
            c.stream_error_event,
            c.failures
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{BadKind, GrammarKind, Kind};

    fn done(n: u32) -> Record {
        Record {
            status: 200,
            saw_done: true,
            choices_finished: n,
            ..Default::default()
        }
    }

    #[test]
    fn verdicts() {
        assert_eq!(failure(&done(1)), None);
        let mut r = done(1);
        r.saw_done = false;
        assert!(failure(&r).unwrap().contains("[DONE]"));
        let mut r = done(2);
        r.kind.n = Some(3);
        assert!(failure(&r).unwrap().contains("2 of 3"));
        let mut r = done(1);
        r.kind.grammar = Some(GrammarKind::JsonObject);
        r.grammar_invalid = 1;
        assert!(failure(&r).unwrap().contains("grammar"));
        let bad = Kind {
            bad: Some(BadKind::Temperature),
            ..Default::default()
        };
        let refused = |status, kind: &Kind| Record {
            status,
            kind: kind.clone(),
            error: Some("{}".into()),
            ..Default::default()
        };
        assert_eq!(failure(&refused(400, &bad)), None);
        assert_eq!(failure(&refused(429, &Kind::default())), None);
        assert_eq!(failure(&refused(503, &bad)), None);
        assert!(failure(&refused(200, &bad)).unwrap().contains("accepted"));
        assert!(failure(&refused(400, &Kind::default())).is_some());
        assert!(failure(&refused(500, &bad)).unwrap().contains("500"));
        let mut r = refused(400, &bad);
        r.error_shape = Some("not JSON".into());
        assert!(failure(&r).unwrap().contains("shape"));
        let mut r = done(1);
        r.stream_error = Some("queue_timeout".into());
        assert_eq!(failure(&r), None);
        r.stream_error = Some("internal_error".into());
        assert!(failure(&r).is_some());
        let mut r = Record {
            error: Some("send: refused".into()),
            ..Default::default()
        };
        assert!(failure(&r).unwrap().contains("transport"));
        r.cancelled_by_us = true;
        assert_eq!(failure(&r), None);
        let mut r = done(0);
        r.cancelled_by_us = true;
        r.saw_done = false;
        assert_eq!(failure(&r), None);
    }

    #[test]
    fn counts_land_in_every_class() {
        let mut n3 = done(3);
        n3.kind.n = Some(3);
        n3.kind.grammar = Some(GrammarKind::JsonSchema);
        let bad = Record {
            status: 413,
            kind: Kind {
                bad: Some(BadKind::HugeBody),
                ..Default::default()
            },
            error_code: Some("request_too_large".into()),
            ..Default::default()
        };
        let busy = Record {
            status: 429,
            error_code: Some("queue_full".into()),
            ..Default::default()
        };
        let m = count(&[done(1), n3, bad, busy]);
        assert_eq!(m["all"].sent, 4);
        assert_eq!(m["all"].stream_done, 2);
        assert_eq!(m["all"].overload_429_503, 1);
        assert_eq!(m["all"].failures, 0);
        assert_eq!(m["n"].sent, 1);
        assert_eq!(m["grammar"].sent, 1);
        assert_eq!(m["bad:huge_body"].client_4xx, 1);
        assert_eq!(m["bad"].statuses[&413], 1);
        assert_eq!(m["plain"].sent, 2);
        assert_eq!(m["plain"].codes["queue_full"], 1);
        assert!(table(&m).lines().count() == m.len() + 1);
        assert!(m.keys().next().is_some_and(|k| k == "all"));
    }
}
