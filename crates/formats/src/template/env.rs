//! The template environment, set up as transformers sets up Jinja2 for
//! `apply_chat_template`: `trim_blocks`, `lstrip_blocks`, loop controls,
//! `raise_exception`, `strftime_now`, its own `tojson` (Python's
//! `json.dumps`: key order kept, no HTML escaping, `indent`,
//! `ensure_ascii`, `separators`, `sort_keys`), Python's string, dict and
//! list methods, Python's type tests (`is iterable`, `is sequence`,
//! `is mapping`, `is number`), and values printed as Python prints them
//! (`None`, `True`, `{'a': 1}`). As in transformers' sandbox, lists and
//! dicts cannot be changed in place (`ns.ids.append(x)` is an error).
//!
//! Every render has a fuel budget: a template that loops without end is an
//! error, not a stuck thread.

use super::pyjson::{dumps, py_str, DumpOptions};
use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

/// Instructions one render may execute (a 1,024-message chat with tools
/// through the largest real templates is well under a tenth of this).
pub const FUEL: u64 = 50_000_000;

pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_fuel(Some(FUEL));
    env.set_unknown_method_callback(methods);
    env.set_formatter(|out, _state, v| {
        out.write_str(&py_str(v)).map_err(Error::from)?;
        Ok(())
    });
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", |fmt: String| super::strftime::now(&fmt));
    env.add_filter("tojson", tojson);
    env.add_filter("string", |v: Value| py_str(&v));
    // Jinja2's Undefined has length 0.
    let length = |v: Value| -> Result<usize, Error> {
        if v.is_undefined() {
            return Ok(0);
        }
        if v.downcast_object_ref::<Generator>().is_some() {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "object of type 'generator' has no len()",
            ));
        }
        v.len().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("object of type {} has no len()", py_type(&v)),
            )
        })
    };
    env.add_filter("length", length);
    env.add_filter("count", length);
    env.add_test("none", |v: Value| v.is_none() || is_py_none(&v));
    // String filters see a non-string as Python's `str()` of it.
    env.add_filter("upper", |v: Value| py_str(&v).to_uppercase());
    env.add_filter("lower", |v: Value| py_str(&v).to_lowercase());
    env.add_filter("trim", |v: Value, chars: Option<String>| match chars {
        Some(c) => py_str(&v).trim_matches(|x| c.contains(x)).to_string(),
        None => py_str(&v).trim().to_string(),
    });
    env.add_filter("indent", indent);
    // Jinja2's `map`, `select`, `reject`, `selectattr` and `rejectattr`
    // give generators: iterable once converted (`| list`), never JSON,
    // always true, without a length.
    use minijinja::filters as f;
    use std::borrow::Cow;
    env.add_filter("map", |st: &State, v: Value, a: Rest<Value>| {
        falsy(&v).unwrap_or_else(|| f::map(st, v, a).map(generator))
    });
    env.add_filter(
        "select",
        |st: &State, v: Value, t: Option<Cow<'_, str>>, a: Rest<Value>| {
            falsy(&v).unwrap_or_else(|| f::select(st, v, t, a).map(generator))
        },
    );
    env.add_filter(
        "reject",
        |st: &State, v: Value, t: Option<Cow<'_, str>>, a: Rest<Value>| {
            falsy(&v).unwrap_or_else(|| f::reject(st, v, t, a).map(generator))
        },
    );
    env.add_filter(
        "selectattr",
        |st: &State, v: Value, at: Cow<'_, str>, t: Option<Cow<'_, str>>, a: Rest<Value>| {
            falsy(&v).unwrap_or_else(|| f::selectattr(st, v, at, t, a).map(generator))
        },
    );
    env.add_filter(
        "rejectattr",
        |st: &State, v: Value, at: Cow<'_, str>, t: Option<Cow<'_, str>>, a: Rest<Value>| {
            falsy(&v).unwrap_or_else(|| f::rejectattr(st, v, at, t, a).map(generator))
        },
    );
    env.add_test("iterable", |v: Value| {
        matches!(
            v.kind(),
            ValueKind::String
                | ValueKind::Seq
                | ValueKind::Map
                | ValueKind::Iterable
                | ValueKind::Bytes
                | ValueKind::Undefined
        )
    });
    env.add_test("sequence", |v: Value| {
        matches!(
            v.kind(),
            ValueKind::String | ValueKind::Seq | ValueKind::Map | ValueKind::Bytes
        )
    });
    env.add_test("mapping", |v: Value| v.kind() == ValueKind::Map);
    // Python's bool is a number.
    env.add_test("number", |v: Value| {
        matches!(v.kind(), ValueKind::Number | ValueKind::Bool)
    });
    env
}

/// Python's `None` where a template may iterate it (`tools`,
/// `documents` when absent): `is none`, false, printed `None`, `null` in
/// JSON, like minijinja's none; but iterating it or taking its length is an
/// error, as in Python (minijinja iterates none as empty).
#[derive(Debug)]
pub struct PyNone;

impl minijinja::value::Object for PyNone {
    fn repr(self: &std::sync::Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Plain
    }
    fn is_true(self: &std::sync::Arc<Self>) -> bool {
        false
    }
    fn render(self: &std::sync::Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("None")
    }
}

/// A Jinja2 filter's generator (see `environment`).
#[derive(Debug)]
struct Generator(Vec<Value>);

impl minijinja::value::Object for Generator {
    fn repr(self: &std::sync::Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Iterable
    }
    fn enumerate(self: &std::sync::Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Values(self.0.clone())
    }
    fn is_true(self: &std::sync::Arc<Self>) -> bool {
        true
    }
    fn render(self: &std::sync::Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<generator object>")
    }
}

/// Jinja2's filters yield nothing for a false value (`None` included).
fn falsy(v: &Value) -> Option<Result<Value, Error>> {
    (!v.is_true()).then(|| Ok(generator(Vec::new())))
}

fn generator(items: Vec<Value>) -> Value {
    Value::from_object(Generator(items))
}

pub fn py_none() -> Value {
    Value::from_object(PyNone)
}

pub fn is_py_none(v: &Value) -> bool {
    v.downcast_object_ref::<PyNone>().is_some()
}

fn py_type(v: &Value) -> &'static str {
    if is_py_none(v) {
        return "NoneType";
    }
    match v.kind() {
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number if v.is_integer() => "int",
        ValueKind::Number => "float",
        _ => "object",
    }
}

/// Jinja2's `indent(width=4, first=False, blank=False)`, its trailing
/// newline kept.
fn indent(v: Value, args: Rest<Value>, kw: Kwargs) -> Result<String, Error> {
    let arg = |i: usize, name: &str| -> Result<Option<Value>, Error> {
        let k: Option<Value> = kw.get(name)?;
        Ok(k.or_else(|| args.get(i).cloned()))
    };
    let width = arg(0, "width")?;
    let first = arg(1, "first")?.map(|b| b.is_true());
    let blank = arg(2, "blank")?.map(|b| b.is_true());
    kw.assert_all_used()?;
    let ind = match &width {
        Some(w) if w.kind() == ValueKind::String => w.as_str().unwrap_or_default().to_string(),
        Some(w) => " ".repeat(i64::try_from(w.clone()).unwrap_or(4).clamp(0, 256) as usize),
        None => "    ".to_string(),
    };
    let s = py_str(&v) + "\n";
    let lines: Vec<&str> = s.lines().collect();
    let mut rv = if blank.unwrap_or(false) {
        lines.join(&format!("\n{ind}"))
    } else {
        let mut it = lines.iter();
        let mut rv = it.next().copied().unwrap_or_default().to_string();
        let rest: Vec<String> = it
            .map(|l| {
                if l.is_empty() {
                    String::new()
                } else {
                    format!("{ind}{l}")
                }
            })
            .collect();
        if !rest.is_empty() {
            rv.push('\n');
            rv.push_str(&rest.join("\n"));
        }
        rv
    };
    if first.unwrap_or(false) {
        rv.insert_str(0, &ind);
    }
    Ok(rv)
}

fn raise_exception(msg: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`.
fn tojson(v: Value, args: Rest<Value>, kw: Kwargs) -> Result<String, Error> {
    let pos = |i: usize, name: &str| -> Result<Option<Value>, Error> {
        let k: Option<Value> = kw.get(name)?;
        Ok(k.or_else(|| args.get(i).cloned()))
    };
    let mut o = DumpOptions::default();
    if let Some(e) = pos(0, "ensure_ascii")? {
        o.ensure_ascii = e.is_true();
    }
    if let Some(i) = pos(1, "indent")? {
        o.indent = match i.kind() {
            ValueKind::None | ValueKind::Undefined => None,
            ValueKind::String => Some(i.as_str().unwrap_or_default().to_string()),
            _ => {
                let n = i64::try_from(i).unwrap_or(0).clamp(0, 64);
                Some(" ".repeat(n as usize))
            }
        };
    }
    if let Some(s) = pos(2, "separators")? {
        if s.kind() != ValueKind::None {
            let parts: Vec<Value> = s.try_iter()?.collect();
            if parts.len() == 2 {
                o.item_sep = parts[0].as_str().map(str::to_string);
                o.key_sep = parts[1].as_str().map(str::to_string);
            }
        }
    }
    if let Some(s) = pos(3, "sort_keys")? {
        o.sort_keys = s.is_true();
    }
    kw.assert_all_used()?;
    dumps(&v, &o).map_err(|e| Error::new(ErrorKind::InvalidOperation, e.0))
}

/// Python methods minijinja lacks, then minijinja-contrib's `pycompat`.
fn methods(state: &State, v: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    if let Some(s) = v.as_str() {
        let arg = |i: usize| args.get(i).and_then(|a| a.as_str());
        match method {
            "rsplit" => {
                let max = args
                    .get(1)
                    .and_then(|m| i64::try_from(m.clone()).ok())
                    .unwrap_or(-1);
                let mut parts: Vec<String> = match arg(0) {
                    Some(sep) if !sep.is_empty() => {
                        if max < 0 {
                            s.rsplit(sep).map(str::to_string).collect()
                        } else {
                            s.rsplitn(max as usize + 1, sep)
                                .map(str::to_string)
                                .collect()
                        }
                    }
                    _ => s.split_whitespace().rev().map(str::to_string).collect(),
                };
                parts.reverse();
                return Ok(Value::from(parts));
            }
            "removeprefix" => {
                let p = arg(0).unwrap_or_default();
                return Ok(Value::from(s.strip_prefix(p).unwrap_or(s)));
            }
            "removesuffix" => {
                let p = arg(0).unwrap_or_default();
                return Ok(Value::from(s.strip_suffix(p).unwrap_or(s)));
            }
            "index" | "rindex" => {
                let p = arg(0).unwrap_or_default();
                let at = if method == "index" {
                    s.find(p)
                } else {
                    s.rfind(p)
                };
                return at
                    .map(|b| Value::from(s[..b].chars().count()))
                    .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "substring not found"));
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, v, method, args)
}
