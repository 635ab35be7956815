//! Typed reads of JSON request fields, each failure a 400 that names the
//! field's path (`messages[1].content[0].text`). `null` reads as absent.

use serde_json::{Map, Value};

use crate::error::DialectError;

pub(crate) type R<T> = Result<T, DialectError>;

/// `base.key` (or `key` at the top level).
pub(crate) fn at(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

/// `base[i]`.
pub(crate) fn idx(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

/// What a JSON value is, for messages.
pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `` `path` must be {want}, got {what it is} ``.
pub(crate) fn wrong_type(path: &str, want: &str, got: &Value) -> DialectError {
    DialectError::invalid(
        path,
        format!("`{path}` must be {want}, got {}", kind_of(got)),
    )
}

pub(crate) fn missing(path: &str) -> DialectError {
    DialectError::invalid(path, format!("`{path}` is required"))
}

/// A content block, part, item or tool kind this server cannot serve.
pub(crate) fn unsupported(path: &str, what: &str, why: &str) -> DialectError {
    DialectError::invalid(path, format!("`{path}`: {what} is not supported{why}"))
}

/// A JSON object and where it is in the request.
#[derive(Clone)]
pub(crate) struct Obj<'a> {
    pub map: &'a Map<String, Value>,
    pub path: String,
}

impl<'a> Obj<'a> {
    /// `v` as an object (a 400 naming `path` otherwise).
    pub fn of(v: &'a Value, path: impl Into<String>) -> R<Obj<'a>> {
        let path = path.into();
        match v {
            Value::Object(map) => Ok(Obj { map, path }),
            _ if path.is_empty() => Err(DialectError::invalid(
                "body",
                format!("the request body must be a JSON object, got {}", kind_of(v)),
            )),
            _ => Err(wrong_type(&path, "an object", v)),
        }
    }

    /// The path of field `key`.
    pub fn p(&self, key: &str) -> String {
        at(&self.path, key)
    }

    /// The field, `None` when absent or `null`.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn req(&self, key: &str) -> R<&'a Value> {
        self.get(key).ok_or_else(|| missing(&self.p(key)))
    }

    pub fn str(&self, key: &str) -> R<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong_type(&self.p(key), "a string", v)),
        }
    }

    pub fn req_str(&self, key: &str) -> R<&'a str> {
        self.str(key)?.ok_or_else(|| missing(&self.p(key)))
    }

    pub fn bool(&self, key: &str) -> R<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(wrong_type(&self.p(key), "a boolean", v)),
        }
    }

    /// A number, passed on as it was written.
    pub fn num(&self, key: &str) -> R<Option<&'a Value>> {
        match self.get(key) {
            None => Ok(None),
            Some(v @ Value::Number(_)) => Ok(Some(v)),
            Some(v) => Err(wrong_type(&self.p(key), "a number", v)),
        }
    }

    /// A non-negative integer.
    pub fn uint(&self, key: &str) -> R<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) => Ok(Some(n)),
                None => Err(wrong_type(&self.p(key), "a non-negative integer", v)),
            },
        }
    }

    /// A positive integer.
    pub fn positive(&self, key: &str) -> R<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64().filter(|n| *n > 0) {
                Some(n) => Ok(Some(n)),
                None if v.is_number() => Err(DialectError::invalid(
                    self.p(key),
                    format!("`{}` must be a positive integer, got {v}", self.p(key)),
                )),
                None => Err(wrong_type(&self.p(key), "a positive integer", v)),
            },
        }
    }

    pub fn arr(&self, key: &str) -> R<Option<&'a Vec<Value>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(v) => Err(wrong_type(&self.p(key), "an array", v)),
        }
    }

    /// A nested object.
    pub fn obj(&self, key: &str) -> R<Option<Obj<'a>>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => Obj::of(v, self.p(key)).map(Some),
        }
    }
}

/// What the server does with a top-level request field its API defines
/// (docs/LIMITS.md, "Request fields", lists each API's table). A field the
/// table does not name is refused: a field that would change the answer is
/// never silently ignored.
pub(crate) enum Rule {
    /// Read and acted on (by the translation or on the chat path).
    Honoured,
    /// Accepted and not acted on: it changes nothing in the answer.
    Ignored,
    /// Refused whenever it is given (not `null`); the text says why.
    Refused(&'static str),
    /// Refused unless the value asks for what the server does anyway.
    RefusedUnless(fn(&Value) -> bool, &'static str),
}

/// One API's fields: a name and its rule.
pub(crate) type Known = [(&'static str, Rule)];

/// Every top-level field of `b` against its API's table: an unknown field
/// or a refused one is a 400 that names it (`null` reads as absent).
pub(crate) fn check_known(b: &Obj, known: &Known) -> R<()> {
    for (key, v) in b.map {
        if v.is_null() {
            continue;
        }
        let why = match known.iter().find(|(k, _)| k == key).map(|(_, r)| r) {
            None => {
                return Err(DialectError::invalid(
                    b.p(key),
                    format!(
                        "`{}`: unknown field (this server refuses a field it does not know rather than ignore it)",
                        b.p(key)
                    ),
                ))
            }
            Some(Rule::Honoured | Rule::Ignored) => continue,
            Some(Rule::RefusedUnless(fine, _)) if fine(v) => continue,
            Some(Rule::Refused(why) | Rule::RefusedUnless(_, why)) => why,
        };
        return Err(unsupported(&b.p(key), &format!("`{}`", b.p(key)), why));
    }
    Ok(())
}

/// Whether `v` is an empty array (a list of nothing to use).
pub(crate) fn empty_list(v: &Value) -> bool {
    v.as_array().is_some_and(Vec::is_empty)
}

/// docs/LIMITS.md's rows `| `field` | api[, api] | what … |` for `api`:
/// the field and the first word of what is done (`honoured`, `ignored`,
/// `refused`), sorted.
#[cfg(test)]
pub(crate) fn doc_rows(api: &str) -> Vec<(String, &'static str)> {
    let doc = include_str!("../../../docs/LIMITS.md");
    let mut rows: Vec<(String, &'static str)> = doc
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            if cells.len() < 4 || !cells[2].split(", ").any(|a| a == api) {
                return None;
            }
            let field = cells[1].strip_prefix('`')?.strip_suffix('`')?;
            let what = ["honoured", "ignored", "refused"]
                .into_iter()
                .find(|w| cells[3].starts_with(w))?;
            Some((field.to_string(), what))
        })
        .collect();
    rows.sort();
    rows
}

/// A table as [`doc_rows`] reads the doc, to compare.
#[cfg(test)]
pub(crate) fn table_rows(known: &Known) -> Vec<(String, &'static str)> {
    let mut rows: Vec<(String, &'static str)> = known
        .iter()
        .map(|(k, r)| {
            let what = match r {
                Rule::Honoured => "honoured",
                Rule::Ignored => "ignored",
                Rule::Refused(_) | Rule::RefusedUnless(..) => "refused",
            };
            (k.to_string(), what)
        })
        .collect();
    rows.sort();
    rows
}
