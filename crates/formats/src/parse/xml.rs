//! Call regions whose arguments are not JSON text: Qwen3-Coder's XML
//! parameters, GLM's `<arg_key>`/`<arg_value>` pairs, Gemma 4's
//! `call:NAME{k:v}`. Their arguments are built as JSON once the call is
//! whole (so a streamed call's arguments arrive in one piece).

use super::json::ws;
use super::view::{close_with, done_or_fail, expect, fail, open, ran_out, CallView, Ctx, View, M};
use serde_json::Value;

/// A parameter value as JSON: the schema's type decides; without one, JSON
/// when it parses, else a string.
fn typed(value: &str, tool: Option<&str>, key: &str, cx: &Ctx) -> Value {
    let ty = cx.tools.and_then(|ts| {
        ts.as_array()?.iter().find_map(|t| {
            let f = &t["function"];
            (f["name"].as_str() == tool).then(|| f["parameters"]["properties"][key]["type"].clone())
        })
    });
    match ty.as_ref().and_then(Value::as_str) {
        Some("string") => Value::String(value.to_string()),
        _ => serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string())),
    }
}

fn strip_nl(v: &str) -> &str {
    let v = v.strip_prefix('\n').unwrap_or(v);
    v.strip_suffix('\n').unwrap_or(v)
}

fn args_json(pairs: Vec<(String, Value)>) -> String {
    let m: serde_json::Map<String, Value> = pairs.into_iter().collect();
    Value::Object(m).to_string()
}

pub(super) fn qwen_xml(t: &str, m: usize, cx: &Ctx) -> View {
    let mut i = if cx.marker == "<tool_call>" { m } else { 0 };
    i += ws(&t[i..]);
    match expect(&t[i..], "<function=") {
        M::Yes(n) => i += n,
        M::Partial => return ran_out(vec![], t.len(), cx, m),
        M::No => return fail(vec![], m),
    }
    let Some(gt) = t[i..].find('>') else {
        return ran_out(vec![], t.len(), cx, m);
    };
    let name = t[i..i + gt].trim().to_string();
    if name.is_empty() || name.contains('<') {
        // `<function=>`, or a name running into another tag
        // (`<function=<tool_call>`): no call (as a stream, which never saw
        // a name).
        return fail(vec![], m);
    }
    i += gt + 1;
    let mut pairs = Vec::new();
    let call = |args: String| CallView {
        name: Some(name.clone()),
        args,
        id: None,
    };
    loop {
        i += ws(&t[i..]);
        if i >= t.len() {
            return ran_out(vec![call(String::new())], i, cx, m);
        }
        if let M::Yes(n) = expect(&t[i..], "</function>") {
            let c = call(args_json(pairs));
            let j = i + n;
            return if cx.marker == "<tool_call>" {
                close_with(vec![c], t, j, "</tool_call>", cx)
            } else {
                done_or_fail(vec![c], j)
            };
        }
        match expect(&t[i..], "<parameter=") {
            M::Yes(n) => i += n,
            M::Partial if !cx.end => return open(vec![call(String::new())]),
            _ => match expect(&t[i..], "</function>") {
                M::Partial if !cx.end => return open(vec![call(String::new())]),
                // The name is out (streamed): the call stays.
                _ => return fail(vec![call(String::new())], i),
            },
        }
        let Some(gt) = t[i..].find('>') else {
            return ran_out(vec![call(String::new())], t.len(), cx, m);
        };
        let key = t[i..i + gt].trim().to_string();
        i += gt + 1;
        let Some(e) = t[i..].find("</parameter>") else {
            return ran_out(vec![call(String::new())], t.len(), cx, m);
        };
        let v = typed(strip_nl(&t[i..i + e]), Some(&name), &key, cx);
        pairs.push((key, v));
        i += e + "</parameter>".len();
    }
}

pub(super) fn glm(t: &str, m: usize, cx: &Ctx) -> View {
    let mut i = m;
    let end = t[i..].find(['\n', '<']).map(|e| i + e);
    let Some(e) = end else {
        return ran_out(vec![], t.len(), cx, m);
    };
    let name = t[i..e].trim().to_string();
    if name.is_empty() || name.starts_with('{') {
        return fail(vec![], m);
    }
    i = e;
    let mut pairs = Vec::new();
    let call = |args: String| CallView {
        name: Some(name.clone()),
        args,
        id: None,
    };
    loop {
        i += ws(&t[i..]);
        if i >= t.len() {
            return ran_out(vec![call(String::new())], i, cx, m);
        }
        if let M::Yes(n) = expect(&t[i..], "</tool_call>") {
            return done_or_fail(vec![call(args_json(pairs))], i + n);
        }
        match expect(&t[i..], "<arg_key>") {
            M::Yes(n) => i += n,
            M::Partial if !cx.end => return open(vec![call(String::new())]),
            _ => match expect(&t[i..], "</tool_call>") {
                M::Partial if !cx.end => return open(vec![call(String::new())]),
                _ => return fail(vec![call(String::new())], i),
            },
        }
        let Some(k) = t[i..].find("</arg_key>") else {
            return ran_out(vec![call(String::new())], t.len(), cx, m);
        };
        let key = t[i..i + k].trim().to_string();
        i += k + "</arg_key>".len();
        i += ws(&t[i..]);
        match expect(&t[i..], "<arg_value>") {
            M::Yes(n) => i += n,
            M::Partial => return ran_out(vec![call(String::new())], t.len(), cx, m),
            M::No => return fail(vec![call(String::new())], i),
        }
        let Some(v) = t[i..].find("</arg_value>") else {
            return ran_out(vec![call(String::new())], t.len(), cx, m);
        };
        pairs.push((key.clone(), typed(&t[i..i + v], Some(&name), &key, cx)));
        i += v + "</arg_value>".len();
    }
}

/// Gemma 4's `call:NAME{k:v,…}` with strings as `<|"|>…<|"|>`.
pub(super) fn gemma4(t: &str, m: usize, cx: &Ctx) -> View {
    let mut i = m;
    match expect(&t[i..], "call:") {
        M::Yes(n) => i += n,
        M::Partial => return ran_out(vec![], t.len(), cx, m),
        M::No => return fail(vec![], m),
    }
    let Some(b) = t[i..].find('{') else {
        return ran_out(vec![], t.len(), cx, m);
    };
    let name = t[i..i + b].trim().to_string();
    i += b;
    let Some(e) = t[i..].find("}<tool_call|>") else {
        return ran_out(vec![], t.len(), cx, m);
    };
    let body = &t[i..=i + e];
    let args = gemma_value(body)
        .map(|v| v.to_string())
        .unwrap_or_else(|| "{}".into());
    done_or_fail(
        vec![CallView {
            name: Some(name),
            args,
            id: None,
        }],
        i + e + "}<tool_call|>".len(),
    )
}

fn gemma_value(s: &str) -> Option<Value> {
    let mut p = GemmaP { s, i: 0 };
    let v = p.value(0)?;
    Some(v)
}

struct GemmaP<'a> {
    s: &'a str,
    i: usize,
}

impl GemmaP<'_> {
    const Q: &'static str = "<|\"|>";
    fn rest(&self) -> &str {
        &self.s[self.i..]
    }
    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > 64 {
            return None;
        }
        self.i += ws(self.rest());
        let r = self.rest();
        if let Some(x) = r.strip_prefix(Self::Q) {
            let e = x.find(Self::Q)?;
            let v = x[..e].to_string();
            self.i += Self::Q.len() * 2 + e;
            return Some(Value::String(v));
        }
        if r.starts_with('{') {
            self.i += 1;
            let mut m = serde_json::Map::new();
            loop {
                self.i += ws(self.rest());
                if self.rest().starts_with('}') {
                    self.i += 1;
                    return Some(Value::Object(m));
                }
                if self.rest().starts_with(',') {
                    self.i += 1;
                    continue;
                }
                let key = if self.rest().starts_with(Self::Q) {
                    self.value(depth + 1)?.as_str()?.to_string()
                } else {
                    let e = self.rest().find(':')?;
                    let k = self.rest()[..e].trim().to_string();
                    self.i += e;
                    k
                };
                self.i += ws(self.rest());
                self.i += usize::from(self.rest().starts_with(':'));
                let v = self.value(depth + 1)?;
                m.insert(key, v);
            }
        }
        if r.starts_with('[') {
            self.i += 1;
            let mut a = Vec::new();
            loop {
                self.i += ws(self.rest());
                if self.rest().starts_with(']') {
                    self.i += 1;
                    return Some(Value::Array(a));
                }
                if self.rest().starts_with(',') {
                    self.i += 1;
                    continue;
                }
                a.push(self.value(depth + 1)?);
            }
        }
        let e = r.find([',', '}', ']']).unwrap_or(r.len());
        let raw = r[..e].trim().to_string();
        self.i += e;
        Some(serde_json::from_str(&raw).unwrap_or(Value::String(raw)))
    }
}
