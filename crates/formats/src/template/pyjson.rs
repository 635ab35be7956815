//! Python's `json.dumps` and `repr`/`str` for template values, so a
//! template prints what it printed under transformers (Jinja2 on Python):
//! `tojson` keeps key order, does not escape HTML, writes `", "` and
//! `": "` separators (`","` with an indent), floats as Python spells them;
//! `{{ x }}` of `None`, `True` or a dict reads `None`, `True`,
//! `{'a': 1}`.

use minijinja::value::{Value, ValueKind};
use std::fmt::Write;

/// `json.dumps` options (transformers' `tojson` filter passes these).
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    pub ensure_ascii: bool,
    /// `None`: one line; `Some(s)`: newline + `s` per level.
    pub indent: Option<String>,
    pub item_sep: Option<String>,
    pub key_sep: Option<String>,
    pub sort_keys: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotJson(pub String);

pub fn dumps(v: &Value, o: &DumpOptions) -> Result<String, NotJson> {
    let mut out = String::new();
    let item_sep = o
        .item_sep
        .clone()
        .unwrap_or_else(|| if o.indent.is_some() { "," } else { ", " }.into());
    let key_sep = o.key_sep.clone().unwrap_or_else(|| ": ".into());
    let ctx = Ctx {
        o,
        item_sep: &item_sep,
        key_sep: &key_sep,
    };
    ctx.value(v, 0, &mut out)?;
    Ok(out)
}

struct Ctx<'a> {
    o: &'a DumpOptions,
    item_sep: &'a str,
    key_sep: &'a str,
}

impl Ctx<'_> {
    fn newline(&self, depth: usize, out: &mut String) {
        if let Some(ind) = &self.o.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    }

    fn value(&self, v: &Value, depth: usize, out: &mut String) -> Result<(), NotJson> {
        if depth > 512 {
            return Err(NotJson("tojson: value nested too deeply".into()));
        }
        if super::env::is_py_none(v) {
            out.push_str("null");
            return Ok(());
        }
        match v.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => number(v, out, true),
            ValueKind::String => string(v.as_str().unwrap_or_default(), self.o.ensure_ascii, out),
            // A generator (`map`, `select` without `| list`) is not JSON in Python.
            ValueKind::Iterable => {
                return Err(NotJson(
                    "Object of type generator is not JSON serializable".into(),
                ))
            }
            ValueKind::Seq => {
                let items: Vec<Value> = v.try_iter().map_err(|e| NotJson(e.to_string()))?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    self.value(it, depth + 1, out)?;
                }
                self.newline(depth, out);
                out.push(']');
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> =
                    v.try_iter().map_err(|e| NotJson(e.to_string()))?.collect();
                if self.o.sort_keys {
                    keys.sort();
                }
                if keys.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    let item = v.get_item(k).unwrap_or_default();
                    match k.kind() {
                        ValueKind::String => {
                            string(k.as_str().unwrap_or_default(), self.o.ensure_ascii, out)
                        }
                        ValueKind::Number => {
                            let mut s = String::new();
                            number(k, &mut s, true);
                            string(&s, false, out)
                        }
                        ValueKind::Bool => {
                            out.push_str(if k.is_true() { "\"true\"" } else { "\"false\"" })
                        }
                        ValueKind::None => out.push_str("\"null\""),
                        _ => {
                            return Err(NotJson(format!(
                                "keys must be str, int, float, bool or None, not {}",
                                k.kind()
                            )))
                        }
                    }
                    out.push_str(self.key_sep);
                    self.value(&item, depth + 1, out)?;
                }
                self.newline(depth, out);
                out.push('}');
            }
            ValueKind::Undefined => {
                return Err(NotJson(
                    "Object of type Undefined is not JSON serializable".into(),
                ))
            }
            k => {
                return Err(NotJson(format!(
                    "Object of type {k} is not JSON serializable"
                )))
            }
        }
        Ok(())
    }
}

/// A number as Python writes it (`json` spells inf/nan `Infinity`/`NaN`,
/// `repr` spells them `inf`/`nan`).
fn number(v: &Value, out: &mut String, json: bool) {
    if v.is_integer() {
        let _ = write!(out, "{v}");
        return;
    }
    match f64::try_from(v.clone()) {
        Ok(f) => out.push_str(&py_float(f, json)),
        Err(_) => {
            let _ = write!(out, "{v}");
        }
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, positional for
/// exponents in [-4, 16), else `d.ddde±XX`; always a `.0` when integral.
pub fn py_float(f: f64, json: bool) -> String {
    if f.is_nan() {
        return if json { "NaN" } else { "nan" }.into();
    }
    if f.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        return if f < 0.0 { format!("-{s}") } else { s.into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "1.2345e-5".
    let e = format!("{f:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if neg { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let s = if exp >= 0 {
            let int_len = exp + 1;
            if n <= int_len {
                format!("{digits}{}.0", "0".repeat((int_len - n) as usize))
            } else {
                format!(
                    "{}.{}",
                    &digits[..int_len as usize],
                    &digits[int_len as usize..]
                )
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{s}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        let es = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{es}{:02}", exp.abs())
    }
}

fn string(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", u);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `str(v)`, as Jinja2 prints a value: strings as they are,
/// containers as their `repr`.
pub fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        ValueKind::Undefined => String::new(),
        _ => {
            let mut out = String::new();
            repr(v, &mut out, 0);
            out
        }
    }
}

fn repr(v: &Value, out: &mut String, depth: usize) {
    if depth > 512 {
        out.push_str("...");
        return;
    }
    match v.kind() {
        ValueKind::None => out.push_str("None"),
        ValueKind::Undefined => out.push_str(""),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => number(v, out, false),
        ValueKind::String => repr_str(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, it) in v.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr(&it, out, depth + 1);
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, k) in v.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr(&k, out, depth + 1);
                out.push_str(": ");
                repr(&v.get_item(&k).unwrap_or_default(), out, depth + 1);
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

/// Python's `repr(str)`: single quotes unless the text has a single quote
/// and no double quote.
fn repr_str(s: &str, out: &mut String) {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(q);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(j: &str) -> Value {
        Value::from_serialize(serde_json::from_str::<serde_json::Value>(j).unwrap())
    }

    #[test]
    fn dumps_as_python() {
        let d = DumpOptions::default();
        let x = v(r#"{"b": [1, 2.5, "<é>"], "a": null, "c": {}}"#);
        assert_eq!(
            dumps(&x, &d).unwrap(),
            r#"{"b": [1, 2.5, "<é>"], "a": null, "c": {}}"#
        );
        let a = DumpOptions {
            ensure_ascii: true,
            indent: Some("  ".into()),
            ..Default::default()
        };
        assert_eq!(
            dumps(&v(r#"{"k": ["é", "😀"], "e": []}"#), &a).unwrap(),
            "{\n  \"k\": [\n    \"\\u00e9\",\n    \"\\ud83d\\ude00\"\n  ],\n  \"e\": []\n}"
        );
        let s = DumpOptions {
            sort_keys: true,
            ..Default::default()
        };
        assert_eq!(
            dumps(&v(r#"{"b":1,"a":2}"#), &s).unwrap(),
            r#"{"a": 2, "b": 1}"#
        );
    }

    #[test]
    fn floats_as_python() {
        for (f, s) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1234.5, "1234.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (-2.5e20, "-2.5e+20"),
            (123456789012345.0, "123456789012345.0"),
        ] {
            assert_eq!(py_float(f, true), s, "{f}");
        }
    }

    #[test]
    fn str_of_values() {
        assert_eq!(py_str(&Value::from(())), "None");
        assert_eq!(py_str(&Value::from(true)), "True");
        assert_eq!(
            py_str(&v(r#"{"a": [1, "x'y", null, false]}"#)),
            r#"{'a': [1, "x'y", None, False]}"#
        );
    }
}
