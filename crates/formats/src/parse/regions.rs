//! Call regions: the text from a family's call marker to the end of its
//! call(s), scanned from the start each time it grows. A scan reports the
//! calls as far as they go (a name once it is whole; arguments as a prefix
//! of their final text) and whether the region is still open, done (bytes
//! consumed) or cannot be a call (bytes kept as calls; the rest is text).
//! Scans look only at the text they are given, so every split of a stream
//! reaches the same calls as the whole text.

use super::json::{decode_str, object, value_end, ws};
use super::view::{close_with, done_or_fail, expect, fail, open, ran_out, M};
pub use super::view::{CallView, Ctx, Status, View};
use super::xml;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// `<tool_call>{json}</tool_call>`
    Hermes,
    /// `<tool_call><function=…>` or a bare `<function=…><parameter=…>`
    QwenXml,
    /// a bare object (Llama 3) or after `<|python_tag|>`
    BareJson,
    /// `[TOOL_CALLS]` then an array, an object, or `NAME[ARGS]{…}`
    Mistral,
    DeepSeek,
    Kimi,
    /// `<|START_ACTION|>[…]<|END_ACTION|>`
    CommandR,
    /// `<|tool_call|>[…]`, `functools[…]`
    JsonList,
    /// `<function=NAME>{…}</function>`
    FunctionTag,
    /// `>>>NAME\n{…}`
    Segments,
    Glm,
    Gemma4,
}

pub fn scan(r: Region, text: &str, cx: &Ctx) -> View {
    let m = cx.marker.len();
    match r {
        Region::Hermes => hermes(text, m, cx),
        Region::QwenXml => xml::qwen_xml(text, m, cx),
        Region::BareJson => bare_json(text, m, cx),
        Region::Mistral => mistral(text, m, cx),
        Region::DeepSeek => deepseek(text, cx),
        Region::Kimi => kimi(text, m, cx),
        Region::CommandR => list_region(
            text,
            m,
            cx,
            "<|END_ACTION|>",
            &["tool_name", "name"],
            &["parameters", "arguments"],
        ),
        Region::JsonList => list_region(
            text,
            m,
            cx,
            "<|/tool_call|>",
            &["name"],
            &["arguments", "parameters"],
        ),
        Region::FunctionTag => function_tag(text, m, cx),
        Region::Segments => segments(text, m, cx),
        Region::Glm => xml::glm(text, m, cx),
        Region::Gemma4 => xml::gemma4(text, m, cx),
    }
}

/// A call object `{"name": …, "arguments": …}` starting at `s[0]`: the
/// call as far as it goes, and the object's end.
fn json_call(
    s: &str,
    names: &[&str],
    args: &[&str],
    id_key: Option<&str>,
) -> (CallView, Option<usize>, Option<usize>) {
    let o = object(s);
    let mut c = CallView::default();
    let field = |keys: &[&str]| keys.iter().find_map(|k| o.get(k));
    if let Some(f) = field(names) {
        if let Some(e) = f.end {
            c.name = decode_str(&s[f.start..e]);
            if c.name.is_none() {
                return (c, None, Some(f.start));
            }
        }
    }
    if let Some(k) = id_key {
        if let Some(f) = o.get(k).filter(|f| f.end.is_some()) {
            let raw = &s[f.start..f.end.unwrap_or(f.start)];
            c.id = decode_str(raw).or_else(|| Some(raw.to_string()));
        }
    }
    if c.name.is_some() {
        if let Some(f) = field(args) {
            let raw = &s[f.start..f.end.unwrap_or(s.len())];
            if raw.starts_with('"') {
                // Arguments sent as a JSON string: whole, decoded.
                if f.end.is_some() {
                    c.args = decode_str(raw).unwrap_or_default();
                }
            } else {
                c.args = raw.to_string();
            }
        }
    }
    if o.closed.is_some() && c.name.is_some() && c.args.is_empty() && field(args).is_none() {
        c.args = "{}".into();
    }
    // Where it stopped being a call: the calls named before that point
    // stay (a stream has sent them), the rest is text.
    let bad = if o.bad {
        Some(o.bad_at)
    } else if c.name.is_none() {
        o.closed
    } else {
        None
    };
    (c, o.closed, bad)
}

/// A call object (from `start` in the region) that stopped being one at
/// `at`: a named call stays (a stream has sent it) and the text from `at`
/// is text again; an unnamed one is text from its start (after any calls
/// before it), or the whole region is when there were none.
fn broken(mut calls: Vec<CallView>, c: CallView, start: usize, at: usize, m: usize) -> View {
    if c.name.is_some() {
        calls.push(c);
        return fail(calls, at);
    }
    if calls.is_empty() {
        fail(calls, m)
    } else {
        done_or_fail(calls, start)
    }
}

fn hermes(t: &str, m: usize, cx: &Ctx) -> View {
    let i = m + ws(&t[m..]);
    if i >= t.len() {
        return ran_out(vec![], i, cx, m);
    }
    if t[i..].starts_with("<function=") {
        return xml::qwen_xml(t, m, cx);
    }
    // A stream cut inside `<function=`: wait for the rest (whole, the text
    // would have gone to `qwen_xml`).
    if !cx.end && "<function=".starts_with(&t[i..]) {
        return open(vec![]);
    }
    if !t[i..].starts_with('{') {
        return fail(vec![], m);
    }
    let (c, closed, bad) = json_call(&t[i..], &["name"], &["arguments", "parameters"], None);
    if let Some(b) = bad {
        return broken(vec![], c, i, i + b, m);
    }
    let Some(n) = closed else {
        return ran_out(vec![c], t.len(), cx, m);
    };
    let j = i + n;
    close_with(vec![c], t, j, "</tool_call>", cx)
}

fn bare_json(t: &str, m: usize, cx: &Ctx) -> View {
    let mut calls = Vec::new();
    let mut i = m;
    loop {
        i += ws(&t[i..]);
        if i >= t.len() {
            return ran_out(calls, i, cx, m);
        }
        if !t[i..].starts_with('{') {
            return if calls.is_empty() {
                fail(calls, m)
            } else {
                done_or_fail(calls, i)
            };
        }
        let (c, closed, bad) = json_call(&t[i..], &["name"], &["parameters", "arguments"], None);
        if let Some(b) = bad {
            return broken(calls, c, i, i + b, m);
        }
        calls.push(c);
        let Some(n) = closed else {
            return ran_out(calls, t.len(), cx, m);
        };
        i += n;
        let k = i + ws(&t[i..]);
        match t.as_bytes().get(k) {
            Some(b';') => i = k + 1,
            None if !cx.end => return open(calls),
            _ => {
                return View {
                    calls,
                    status: Status::Done(i),
                }
            }
        }
    }
}

fn mistral(t: &str, m: usize, cx: &Ctx) -> View {
    let i = m + ws(&t[m..]);
    let Some(&c0) = t.as_bytes().get(i) else {
        return ran_out(vec![], i, cx, m);
    };
    match c0 {
        b'[' => array_calls(
            t,
            i,
            m,
            cx,
            &["name"],
            &["arguments", "parameters"],
            None,
            None,
        ),
        b'{' => {
            let (c, closed, bad) =
                json_call(&t[i..], &["name"], &["arguments", "parameters"], None);
            if let Some(b) = bad {
                return broken(vec![], c, i, i + b, m);
            }
            match closed {
                Some(n) => done_or_fail(vec![c], i + n),
                None => ran_out(vec![c], t.len(), cx, m),
            }
        }
        _ => {
            // NAME[ARGS]{…} or NAME[CALL_ID]id[ARGS]{…}
            let rest = &t[i..];
            let name_len = rest
                .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
                .unwrap_or(rest.len());
            if name_len == 0 {
                return fail(vec![], m);
            }
            let mut j = i + name_len;
            if j >= t.len() {
                return ran_out(vec![], j, cx, m);
            }
            let name = t[i..j].to_string();
            let mut id = None;
            if let M::Yes(n) = expect(&t[j..], "[CALL_ID]") {
                let k = j + n;
                match t[k..].find("[ARGS]") {
                    Some(e) => {
                        id = Some(t[k..k + e].to_string());
                        j = k + e;
                    }
                    None => return ran_out(vec![], t.len(), cx, m),
                }
            }
            match expect(&t[j..], "[ARGS]") {
                M::Yes(n) => j += n,
                M::Partial => return ran_out(vec![], t.len(), cx, m),
                M::No => match expect(&t[j..], "[CALL_ID]") {
                    M::Partial => return ran_out(vec![], t.len(), cx, m),
                    _ => return fail(vec![], m),
                },
            }
            let mut c = CallView {
                name: Some(name),
                id,
                ..Default::default()
            };
            j += ws(&t[j..]);
            // A call is reported once its arguments begin: until then it
            // may still turn out not to be one.
            if j >= t.len() {
                return ran_out(vec![], j, cx, m);
            }
            if !matches!(t.as_bytes()[j], b'{' | b'[') {
                return fail(vec![], m);
            }
            match value_end(&t[j..]) {
                Some(n) => {
                    c.args = t[j..j + n].to_string();
                    done_or_fail(vec![c], j + n)
                }
                None => {
                    c.args = t[j..].to_string();
                    ran_out(vec![c], t.len(), cx, m)
                }
            }
        }
    }
}

/// `[{call}, {call}]` starting at `t[i] == '['`, then `closer` (optional).
#[allow(clippy::too_many_arguments)]
fn array_calls(
    t: &str,
    i: usize,
    m: usize,
    cx: &Ctx,
    names: &[&str],
    args: &[&str],
    id_key: Option<&str>,
    closer: Option<&str>,
) -> View {
    let mut calls = Vec::new();
    let mut j = i + 1;
    loop {
        j += ws(&t[j..]);
        let Some(&c) = t.as_bytes().get(j) else {
            return ran_out(calls, j, cx, m);
        };
        match c {
            b']' => {
                j += 1;
                return match closer {
                    Some(cl) => close_with(calls, t, j, cl, cx),
                    None => done_or_fail(calls, j),
                };
            }
            b',' if !calls.is_empty() => {
                j += 1;
                continue;
            }
            b'{' => {}
            _ => {
                return if calls.is_empty() {
                    fail(calls, m)
                } else {
                    done_or_fail(calls, j)
                }
            }
        }
        let (call, closed, bad) = json_call(&t[j..], names, args, id_key);
        if let Some(b) = bad {
            return broken(calls, call, j, j + b, m);
        }
        calls.push(call);
        match closed {
            Some(n) => j += n,
            None => return ran_out(calls, t.len(), cx, m),
        }
    }
}

fn list_region(t: &str, m: usize, cx: &Ctx, closer: &str, names: &[&str], args: &[&str]) -> View {
    // `functools[`: the marker ends in the list's bracket.
    let i = if cx.marker.ends_with('[') {
        m - 1
    } else {
        m + ws(&t[m..])
    };
    let Some(&c0) = t.as_bytes().get(i) else {
        return ran_out(vec![], i, cx, m);
    };
    // The model's own ids (Command R's "0") come after the name, too late
    // for the call's first delta: Steward gives every call its own.
    let id_key = None;
    match c0 {
        b'[' => array_calls(t, i, m, cx, names, args, id_key, Some(closer)),
        b'{' => {
            let (c, closed, bad) = json_call(&t[i..], names, args, id_key);
            if let Some(b) = bad {
                return broken(vec![], c, i, i + b, m);
            }
            match closed {
                Some(n) => close_with(vec![c], t, i + n, closer, cx),
                None => ran_out(vec![c], t.len(), cx, m),
            }
        }
        _ => fail(vec![], m),
    }
}

fn deepseek(t: &str, cx: &Ctx) -> View {
    const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
    const CALLS_END: &str = "<｜tool▁calls▁end｜>";
    const BEGIN: &str = "<｜tool▁call▁begin｜>";
    const SEP: &str = "<｜tool▁sep｜>";
    const END: &str = "<｜tool▁call▁end｜>";
    let mut calls = Vec::new();
    let section = t.starts_with(CALLS_BEGIN);
    let mut i = if section { CALLS_BEGIN.len() } else { 0 };
    let m = i.max(BEGIN.len().min(t.len()));
    loop {
        i += ws(&t[i..]);
        if i >= t.len() {
            return ran_out(calls, i, cx, m);
        }
        if let M::Yes(n) = expect(&t[i..], CALLS_END) {
            return done_or_fail(calls, i + n);
        }
        match expect(&t[i..], BEGIN) {
            M::Yes(n) => i += n,
            M::Partial | M::No if matches!(expect(&t[i..], CALLS_END), M::Partial) && !cx.end => {
                return open(calls)
            }
            M::Partial if !cx.end => return open(calls),
            _ => {
                return if calls.is_empty() {
                    fail(calls, m)
                } else {
                    done_or_fail(calls, i)
                }
            }
        }
        let Some(s) = t[i..].find(SEP) else {
            return ran_out(calls, t.len(), cx, m);
        };
        let head = t[i..i + s].trim().to_string();
        let mut j = i + s + SEP.len();
        let mut c = CallView::default();
        if head == "function" && !t[j..].trim_start().starts_with('{') {
            // R1: NAME\n```json\n{…}\n```
            let Some(nl) = t[j..].find('\n') else {
                return ran_out(calls, t.len(), cx, m);
            };
            c.name = Some(t[j..j + nl].trim().to_string());
            j += nl + 1;
            for fence in ["```json", "```"] {
                match expect(&t[j..], fence) {
                    M::Yes(n) => {
                        j += n;
                        break;
                    }
                    M::Partial if !cx.end => return open(calls),
                    _ => {}
                }
            }
        } else {
            c.name = Some(head);
        }
        j += ws(&t[j..]);
        if j >= t.len() {
            return ran_out(calls, j, cx, m);
        }
        let Some(n) = value_end(&t[j..]).filter(|_| t.as_bytes()[j] == b'{') else {
            if t.as_bytes()[j] != b'{' {
                return if calls.is_empty() {
                    fail(calls, m)
                } else {
                    done_or_fail(calls, i)
                };
            }
            c.args = t[j..].to_string();
            calls.push(c);
            return ran_out(calls, t.len(), cx, m);
        };
        c.args = t[j..j + n].to_string();
        calls.push(c);
        j += n;
        j += ws(&t[j..]);
        match expect(&t[j..], "```") {
            M::Yes(n) => {
                j += n;
                j += ws(&t[j..]);
            }
            M::Partial if !cx.end => return open(calls),
            _ => {}
        }
        match expect(&t[j..], END) {
            M::Yes(n) => i = j + n,
            M::Partial if !cx.end => return open(calls),
            _ => return done_or_fail(calls, j),
        }
        if !section {
            let k = i + ws(&t[i..]);
            match expect(&t[k..], BEGIN) {
                M::Yes(_) => {}
                M::Partial if !cx.end => return open(calls),
                _ => return done_or_fail(calls, i),
            }
        }
    }
}

fn kimi(t: &str, m: usize, cx: &Ctx) -> View {
    const END: &str = "<|tool_calls_section_end|>";
    const BEGIN: &str = "<|tool_call_begin|>";
    const ARG: &str = "<|tool_call_argument_begin|>";
    const CEND: &str = "<|tool_call_end|>";
    let mut calls = Vec::new();
    let mut i = m;
    loop {
        i += ws(&t[i..]);
        if i >= t.len() {
            return ran_out(calls, i, cx, m);
        }
        if let M::Yes(n) = expect(&t[i..], END) {
            return done_or_fail(calls, i + n);
        }
        match expect(&t[i..], BEGIN) {
            M::Yes(n) => i += n,
            M::Partial if !cx.end => return open(calls),
            _ if matches!(expect(&t[i..], END), M::Partial) && !cx.end => return open(calls),
            _ => {
                return if calls.is_empty() {
                    fail(calls, m)
                } else {
                    done_or_fail(calls, i)
                }
            }
        }
        let Some(a) = t[i..].find(ARG) else {
            return ran_out(calls, t.len(), cx, m);
        };
        let id = t[i..i + a].trim().to_string();
        let name = id.strip_prefix("functions.").unwrap_or(&id);
        let name = name.rsplit_once(':').map_or(name, |(n, _)| n).to_string();
        let mut j = i + a + ARG.len();
        j += ws(&t[j..]);
        let mut c = CallView {
            name: Some(name),
            id: Some(id),
            ..Default::default()
        };
        if j >= t.len() {
            calls.push(c);
            return ran_out(calls, j, cx, m);
        }
        match value_end(&t[j..]) {
            Some(n) => {
                c.args = t[j..j + n].to_string();
                calls.push(c);
                j += n;
            }
            None => {
                c.args = t[j..].to_string();
                calls.push(c);
                return ran_out(calls, t.len(), cx, m);
            }
        }
        j += ws(&t[j..]);
        match expect(&t[j..], CEND) {
            M::Yes(n) => i = j + n,
            M::Partial if !cx.end => return open(calls),
            _ => return done_or_fail(calls, j),
        }
    }
}

fn function_tag(t: &str, m: usize, cx: &Ctx) -> View {
    let Some(gt) = t[m..].find('>') else {
        return ran_out(vec![], t.len(), cx, m);
    };
    let name = t[m..m + gt].trim().to_string();
    let mut j = m + gt + 1;
    j += ws(&t[j..]);
    let mut c = CallView {
        name: Some(name),
        ..Default::default()
    };
    if j >= t.len() {
        return ran_out(vec![], j, cx, m);
    }
    if t.as_bytes()[j] != b'{' {
        return fail(vec![], m);
    }
    match value_end(&t[j..]) {
        Some(n) => {
            c.args = t[j..j + n].to_string();
            close_with(vec![c], t, j + n, "</function>", cx)
        }
        None => {
            c.args = t[j..].to_string();
            ran_out(vec![c], t.len(), cx, m)
        }
    }
}

fn segments(t: &str, m: usize, cx: &Ctx) -> View {
    let Some(nl) = t[m..].find('\n') else {
        return ran_out(vec![], t.len(), cx, m);
    };
    let name = t[m..m + nl].trim().to_string();
    let j = m + nl + 1;
    if name == "all" {
        return View {
            calls: vec![],
            status: Status::Done(j),
        };
    }
    let mut c = CallView {
        name: Some(name),
        ..Default::default()
    };
    let j = j + ws(&t[j..]);
    if j >= t.len() {
        return ran_out(vec![], j, cx, m);
    }
    if t.as_bytes()[j] != b'{' {
        return fail(vec![], m);
    }
    match value_end(&t[j..]) {
        Some(n) => {
            c.args = t[j..j + n].to_string();
            done_or_fail(vec![c], j + n)
        }
        None => {
            c.args = t[j..].to_string();
            ran_out(vec![c], t.len(), cx, m)
        }
    }
}
