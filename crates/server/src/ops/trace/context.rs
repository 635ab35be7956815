//! W3C trace context: a request's `traceparent` header read (its trace id
//! and parent span become ours), the response's written, and the head
//! sampling decision by ratio on the trace id.

use axum::http::HeaderMap;

/// A request's place in a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceCtx {
    pub trace_id: [u8; 16],
    /// Steward's root span for the request.
    pub span_id: [u8; 8],
    /// The caller's span (from `traceparent`), the root's parent.
    pub parent: Option<[u8; 8]>,
    /// The caller sampled its span (`traceparent` flags bit 0).
    pub parent_sampled: bool,
}

impl TraceCtx {
    /// The context of a request: the caller's trace when its `traceparent`
    /// is valid, a new one otherwise; `ids` gives fresh random ids.
    pub fn from_headers(h: &HeaderMap, ids: &mut impl FnMut() -> [u8; 24]) -> Self {
        let fresh = ids();
        let span_id = fresh[16..].try_into().unwrap_or([1; 8]);
        match h
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(parse)
        {
            Some((trace_id, parent, flags)) => TraceCtx {
                trace_id,
                span_id,
                parent: Some(parent),
                parent_sampled: flags & 1 == 1,
            },
            None => TraceCtx {
                trace_id: fresh[..16].try_into().unwrap_or([1; 16]),
                span_id,
                parent: None,
                parent_sampled: false,
            },
        }
    }

    /// `traceparent` naming Steward's root span.
    pub fn header(&self, sampled: bool) -> String {
        format!(
            "00-{}-{}-{}",
            hex(&self.trace_id),
            hex(&self.span_id),
            if sampled { "01" } else { "00" }
        )
    }

    /// Head sampling: a caller that sampled its span is followed;
    /// otherwise the trace id decides against `ratio` (the same trace id
    /// always decides the same way, as OpenTelemetry's ratio sampler).
    pub fn head_sampled(&self, ratio: f64) -> bool {
        if self.parent_sampled || ratio >= 1.0 {
            return true;
        }
        if ratio <= 0.0 {
            return false;
        }
        let low = u64::from_be_bytes(self.trace_id[8..].try_into().unwrap_or([0; 8]));
        // The top 63 bits against the ratio's share of them.
        ((low >> 1) as f64) < ratio * (1u64 << 63) as f64
    }
}

/// `version-traceid-parentid-flags`, version 00 (a later version's first
/// four fields read the same); an all-zero id is invalid.
fn parse(v: &str) -> Option<([u8; 16], [u8; 8], u8)> {
    let mut parts = v.trim().split('-');
    let (ver, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if ver.len() != 2 || ver == "ff" || (ver == "00" && parts.next().is_some()) {
        return None;
    }
    let trace: [u8; 16] = unhex(trace)?.try_into().ok()?;
    let span: [u8; 8] = unhex(span)?.try_into().ok()?;
    let flags = *unhex(flags)?.first()?;
    if trace == [0; 16] || span == [0; 8] || flags_len(v) {
        return None;
    }
    Some((trace, span, flags))
}

/// A flags field that is not two characters.
fn flags_len(v: &str) -> bool {
    v.trim().split('-').nth(3).is_none_or(|f| f.len() != 2)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> [u8; 24] {
        let mut b = [0u8; 24];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 + 1;
        }
        b
    }

    fn ctx(tp: Option<&str>) -> TraceCtx {
        let mut h = HeaderMap::new();
        if let Some(v) = tp {
            h.insert("traceparent", v.parse().unwrap());
        }
        TraceCtx::from_headers(&h, &mut ids)
    }

    #[test]
    fn a_valid_traceparent_makes_the_callers_span_the_parent() {
        let c = ctx(Some(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ));
        assert_eq!(hex(&c.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            c.parent.map(|p| hex(&p)).as_deref(),
            Some("00f067aa0ba902b7")
        );
        assert!(c.parent_sampled);
        assert_eq!(hex(&c.span_id), "1112131415161718");
        assert_eq!(
            c.header(true),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-1112131415161718-01"
        );
    }

    #[test]
    fn invalid_traceparents_start_a_new_trace() {
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "garbage",
        ] {
            let c = ctx(Some(bad));
            assert_eq!(c.parent, None, "{bad}");
            assert_eq!(hex(&c.trace_id), "0102030405060708090a0b0c0d0e0f10");
        }
        assert_eq!(ctx(None).parent, None);
    }

    #[test]
    fn the_ratio_samples_its_share_of_trace_ids() {
        // Fixed pseudo-random ids (xorshift): deterministic.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut kept = 0;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut c = ctx(None);
            c.trace_id[8..].copy_from_slice(&x.to_be_bytes());
            kept += usize::from(c.head_sampled(0.1));
        }
        assert!((900..1100).contains(&kept), "{kept}");
        let mut c = ctx(Some(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ));
        assert!(c.head_sampled(0.0), "a sampled caller is followed");
        c.parent_sampled = false;
        assert!(!c.head_sampled(0.0));
    }
}
