//! Partial-JSON scanning for call regions: where a value ends (or that it
//! has not ended yet), an object's fields so far. Never allocates more than
//! the text; never panics on any input.

/// End (exclusive) of the JSON value starting at `s[0]`, `None` while the
/// text ends before it does (or a scalar might still grow).
pub fn value_end(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    match b.first()? {
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut in_str = false;
            let mut esc = false;
            for (i, &c) in b.iter().enumerate() {
                if in_str {
                    if esc {
                        esc = false;
                    } else if c == b'\\' {
                        esc = true;
                    } else if c == b'"' {
                        in_str = false;
                    }
                    continue;
                }
                match c {
                    b'"' => in_str = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
            }
            None
        }
        b'"' => string_end(s),
        _ => {
            let n = b
                .iter()
                .position(|c| !(c.is_ascii_alphanumeric() || matches!(c, b'.' | b'+' | b'-')))?;
            (n > 0).then_some(n)
        }
    }
}

/// End of the JSON string starting at `s[0] == '"'`.
pub fn string_end(s: &str) -> Option<usize> {
    let mut esc = false;
    for (i, c) in s.bytes().enumerate().skip(1) {
        if esc {
            esc = false;
        } else if c == b'\\' {
            esc = true;
        } else if c == b'"' {
            return Some(i + 1);
        }
    }
    None
}

pub fn ws(s: &str) -> usize {
    s.len() - s.trim_start().len()
}

/// One field of a partially seen object: its key and the span of its
/// value (end `None`: still arriving).
#[derive(Debug, Clone)]
pub struct Field {
    pub key: String,
    pub start: usize,
    pub end: Option<usize>,
}

/// An object's fields as far as the text goes. `closed`: end of the
/// object (exclusive); `bad`: the text cannot be a JSON object.
#[derive(Debug, Default)]
pub struct Obj {
    pub fields: Vec<Field>,
    pub closed: Option<usize>,
    pub bad: bool,
    /// Where the text stopped being an object.
    pub bad_at: usize,
}

impl Obj {
    pub fn get(&self, k: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.key == k)
    }
}

/// Scan the object starting at `s[0] == '{'`.
pub fn object(s: &str) -> Obj {
    let mut o = Obj::default();
    if !s.starts_with('{') {
        o.bad = true;
        return o;
    }
    let bad = |mut o: Obj, at: usize| {
        o.bad = true;
        o.bad_at = at;
        o
    };
    let mut i = 1;
    loop {
        i += ws(&s[i..]);
        let Some(&c) = s.as_bytes().get(i) else {
            return o;
        };
        match c {
            b'}' => {
                o.closed = Some(i + 1);
                return o;
            }
            b',' if !o.fields.is_empty() => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return bad(o, i),
        }
        let Some(ke) = string_end(&s[i..]) else {
            return o;
        };
        let key: String = serde_json::from_str(&s[i..i + ke]).unwrap_or_default();
        i += ke;
        i += ws(&s[i..]);
        match s.as_bytes().get(i) {
            None => return o,
            Some(b':') => i += 1,
            Some(_) => return bad(o, i),
        }
        i += ws(&s[i..]);
        if i >= s.len() {
            return o;
        }
        let start = i;
        match value_end(&s[i..]) {
            Some(n) => {
                o.fields.push(Field {
                    key,
                    start,
                    end: Some(start + n),
                });
                i += n;
            }
            None => {
                o.fields.push(Field {
                    key,
                    start,
                    end: None,
                });
                return o;
            }
        }
    }
}

/// A complete JSON string's value.
pub fn decode_str(raw: &str) -> Option<String> {
    serde_json::from_str(raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_and_fields() {
        assert_eq!(value_end(r#"{"a": "}"} x"#), Some(10));
        assert_eq!(value_end(r#"{"a": [1, {"#), None);
        assert_eq!(value_end("123,"), Some(3));
        assert_eq!(value_end("123"), None);
        let o = object(r#"{"name": "f", "arguments": {"x": 1"#);
        assert_eq!(o.fields.len(), 2);
        assert_eq!(o.get("arguments").unwrap().end, None);
        assert!(object(r#"{"a" 1}"#).bad);
        assert_eq!(object(r#"{"a": 1}"#).closed, Some(8));
        assert!(object("{\"é").fields.is_empty());
    }
}
