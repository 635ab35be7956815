//! String literals read as Jinja2 reads them.
//!
//! Jinja2 reads a string literal's escapes with Python's `unicode-escape`
//! codec after turning every line ending into `\n`; minijinja has its own
//! (JSON-like) rules. They agree on `\n`, `\t`, `\r`, `\b`, `\f`, `\\`,
//! `\'`, `\"`, `\xXX`, `\uXXXX`, octal up to `\377` and unknown escapes
//! (kept as written), and differ on: a backslash before a line ending (a
//! line continuation in Python: both go), `\a`, `\v`, `\UXXXXXXXX`, `\/`
//! (kept as written in Python), octal above `\377`, a backslash before a
//! non-ASCII character (Python's quirk: `\é` reads as the text `\xe9`) and
//! raw line endings (`\r\n` and `\r` read as `\n`). Before compiling,
//! every literal inside a tag on which they differ is rewritten so that
//! minijinja reads Jinja2's value; every other byte of the source is kept.
//!
//! Not followed: `\N{name}` (Python looks the name up; it is kept as
//! written, as minijinja does), surrogate pairs (`\ud83d\udca9` is one
//! character here, two lone surrogates in Python), and literals Jinja2
//! refuses (a short `\x`/`\u`/`\U`, a lone surrogate): those are left to
//! minijinja as they are.

use std::borrow::Cow;

/// `src` with the string literals inside `{{ }}` and `{% %}` tags whose
/// value Jinja2 reads differently rewritten to Jinja2's value (text,
/// comments and `{% raw %}` blocks untouched). Tags are found as
/// minijinja's lexer finds them (the same delimiters, brackets balanced
/// before a closing delimiter counts, strings skipped whole).
pub(crate) fn python_literals(src: &str) -> Cow<'_, str> {
    if !src.contains(['\\', '\r']) {
        return Cow::Borrowed(src);
    }
    let b = src.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while let Some((at, marker)) = next_marker(b, i) {
        let skip = 2 + usize::from(matches!(b.get(at + 2), Some(b'-' | b'+')));
        i = at + skip;
        match marker {
            b'#' => i = find(b, i, b"#}").map_or(b.len(), |e| e + 2),
            b'%' if basic_tag(&b[i..], b"raw", false).is_some() => i = raw_end(b, i),
            _ => {
                let end: &[u8] = if marker == b'%' { b"%}" } else { b"}}" };
                i = tag(src, i, end, &mut |lit, value, q| {
                    out.push_str(&src[copied..lit.start]);
                    push_literal(&mut out, value, q);
                    copied = lit.end;
                });
            }
        }
    }
    if copied == 0 {
        return Cow::Borrowed(src);
    }
    out.push_str(&src[copied..]);
    Cow::Owned(out)
}

/// The next `{{`, `{%` or `{#` at or after `from`: its offset and its
/// second byte.
fn next_marker(b: &[u8], from: usize) -> Option<(usize, u8)> {
    let mut i = from;
    while i + 1 < b.len() {
        if b[i] == b'{' && matches!(b[i + 1], b'{' | b'%' | b'#') {
            return Some((i, b[i + 1]));
        }
        i += 1;
    }
    None
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    b.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// minijinja's `skip_basic_tag`: `[-+]? ws* name ws* [-+]? %}` at the
/// start of `b`; its length.
fn basic_tag(b: &[u8], name: &[u8], ws_control: bool) -> Option<usize> {
    let mut p = 0;
    if ws_control && matches!(b.first(), Some(b'-' | b'+')) {
        p += 1;
    }
    let ws = |p: &mut usize| {
        while b.get(*p).is_some_and(u8::is_ascii_whitespace) {
            *p += 1;
        }
    };
    ws(&mut p);
    if !b[p..].starts_with(name) {
        return None;
    }
    p += name.len();
    ws(&mut p);
    if matches!(b.get(p), Some(b'-' | b'+')) {
        p += 1;
    }
    b[p..].starts_with(b"%}").then_some(p + 2)
}

/// The end of a `{% raw %}` block whose body starts at `from`.
fn raw_end(b: &[u8], from: usize) -> usize {
    let mut p = from;
    while let Some(at) = find(b, p, b"{%") {
        p = at + 2;
        if let Some(len) = basic_tag(&b[p..], b"endraw", true) {
            return p + len;
        }
    }
    b.len()
}

/// Walk one tag's inside from `from` to its closing delimiter `end`
/// (returned: the offset after it); each literal Jinja2 reads differently
/// goes to `rewrite` (its byte range, Jinja2's value, its quote).
fn tag(
    src: &str,
    from: usize,
    end: &[u8],
    rewrite: &mut dyn FnMut(std::ops::Range<usize>, &str, u8),
) -> usize {
    let b = src.as_bytes();
    let mut depth = 0isize;
    let mut i = from;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if depth == 0 {
            if matches!(b[i], b'-' | b'+') && b[i + 1..].starts_with(end) {
                return i + 1 + end.len();
            }
            if b[i..].starts_with(end) {
                return i + end.len();
            }
        }
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            q @ (b'\'' | b'"') => {
                let Some(len) = literal_len(&b[i..], q) else {
                    return b.len(); // unterminated: minijinja says so
                };
                if let Some(value) = jinja2_value(&src[i + 1..i + len - 1]) {
                    rewrite(i..i + len, &value, q);
                }
                i += len;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The length of the literal starting at `b[0]` (quote `q`), quotes
/// included: a backslash escapes the next byte.
fn literal_len(b: &[u8], q: u8) -> Option<usize> {
    let mut j = 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            c if c == q => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// A literal's body as Jinja2 reads it, when that differs from how
/// minijinja reads it; `None` when they agree or Jinja2 refuses it.
fn jinja2_value(body: &str) -> Option<String> {
    let mut out = String::with_capacity(body.len());
    let mut differs = false;
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' {
            differs = true;
            chars.next_if_eq(&'\n');
            out.push('\n');
            continue;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let d = chars.next()?;
        match d {
            '\n' => differs = true,
            '\r' => {
                differs = true;
                chars.next_if_eq(&'\n');
            }
            '\\' | '\'' | '"' => out.push(d),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'a' | 'v' => {
                differs = true;
                out.push(if d == 'a' { '\x07' } else { '\x0b' });
            }
            '0'..='7' => {
                let mut v = d.to_digit(8)?;
                for _ in 0..2 {
                    match chars.peek().and_then(|c| c.to_digit(8)) {
                        Some(x) => {
                            v = v * 8 + x;
                            chars.next();
                        }
                        None => break,
                    }
                }
                differs |= v > 0o377;
                out.push(char::from_u32(v)?);
            }
            'x' => out.push(char::from_u32(hex(&mut chars, 2)?)?),
            'u' => {
                let v = hex(&mut chars, 4)?;
                let c = match v {
                    0xD800..=0xDBFF => {
                        // Only a pair makes a character here (minijinja's reading).
                        if chars.next() != Some('\\') || chars.next() != Some('u') {
                            return None;
                        }
                        let lo = hex(&mut chars, 4)?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return None;
                        }
                        0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00)
                    }
                    _ => v,
                };
                out.push(char::from_u32(c)?);
            }
            'U' => {
                differs = true;
                out.push(char::from_u32(hex(&mut chars, 8)?)?);
            }
            '/' => {
                differs = true;
                out.push_str("\\/");
            }
            d if !d.is_ascii() => {
                // `encode("ascii", "backslashreplace")` then `unicode-escape`:
                // the backslash escapes the first byte of the replacement.
                differs = true;
                let v = u32::from(d);
                out.push_str(&match v {
                    0..=0xFF => format!("\\x{v:02x}"),
                    0x100..=0xFFFF => format!("\\u{v:04x}"),
                    _ => format!("\\U{v:08x}"),
                });
            }
            // Unknown escapes (`\q`, `\N{…}`) stay as written, in both.
            d => {
                out.push('\\');
                out.push(d);
            }
        }
    }
    differs.then_some(out)
}

/// Exactly `n` hex digits.
fn hex(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, n: usize) -> Option<u32> {
    let mut v = 0;
    for _ in 0..n {
        v = v * 16 + chars.next()?.to_digit(16)?;
    }
    Some(v)
}

/// `value` as a literal that minijinja and Jinja2 both read as `value`.
fn push_literal(out: &mut String, value: &str, q: u8) {
    let q = char::from(q);
    out.push(q);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\r' => out.push_str("\\r"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(q);
}
