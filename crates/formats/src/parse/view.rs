//! What a scan of a call region reports (`View`: the calls so far and the
//! region's status) and the small steps every region's scanner shares
//! (`regions` for the JSON-shaped regions, `xml` for the others).

use super::json::ws;
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallView {
    pub name: Option<String>,
    pub args: String,
    /// The model's own id for the call (Mistral v3, Command R, Kimi).
    pub id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    Open,
    /// Region over after this many bytes.
    Done(usize),
    /// Not a call: the calls seen stay; text from this byte is text again.
    Fail(usize),
}

#[derive(Debug, Clone)]
pub struct View {
    pub calls: Vec<CallView>,
    pub status: Status,
}

pub struct Ctx<'a> {
    /// The stream has ended: nothing more will come.
    pub end: bool,
    /// The request's tools (XML parameter values typed by their schema).
    pub tools: Option<&'a Value>,
    /// The region's opening marker.
    pub marker: &'a str,
}

pub(super) enum M {
    Yes(usize),
    Partial,
    No,
}

pub(super) fn expect(s: &str, lit: &str) -> M {
    if s.starts_with(lit) {
        M::Yes(lit.len())
    } else if lit.starts_with(s) {
        M::Partial
    } else {
        M::No
    }
}

pub(super) fn open(calls: Vec<CallView>) -> View {
    View {
        calls,
        status: Status::Open,
    }
}

/// Stop at the end of the text: open while more may come, else done with
/// what was seen (or not a call when nothing was).
pub(super) fn ran_out(calls: Vec<CallView>, at: usize, cx: &Ctx, keep: usize) -> View {
    if !cx.end {
        return open(calls);
    }
    let named = calls.iter().any(|c| c.name.is_some());
    View {
        status: if named {
            Status::Done(at)
        } else {
            Status::Fail(keep)
        },
        calls,
    }
}

pub(super) fn fail(calls: Vec<CallView>, at: usize) -> View {
    View {
        calls,
        status: Status::Fail(at),
    }
}

/// After a complete call: the region's closing marker (optional), else done
/// right after the call.
pub(super) fn close_with(calls: Vec<CallView>, t: &str, j: usize, closer: &str, cx: &Ctx) -> View {
    let k = j + ws(&t[j..]);
    match expect(&t[k..], closer) {
        M::Yes(n) => View {
            calls,
            status: Status::Done(k + n),
        },
        M::Partial if !cx.end => open(calls),
        // The stream ended inside the closing marker: it is the marker's.
        M::Partial if k < t.len() => View {
            calls,
            status: Status::Done(t.len()),
        },
        _ => View {
            calls,
            status: Status::Done(j),
        },
    }
}

pub(super) fn done_or_fail(calls: Vec<CallView>, at: usize) -> View {
    View {
        calls,
        status: Status::Done(at),
    }
}
