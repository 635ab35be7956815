//! Server-Sent Events, read incrementally: bytes in as they arrive, whole
//! events out (the `event` name and the `data` lines joined by `\n`);
//! comments (keep-alive pings) skipped, `\r\n` and `\n` line ends.

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// `message` unless an `event:` line named it.
    pub(crate) event: String,
    pub(crate) data: String,
}

/// The parser's state between chunks: the unfinished line and event.
#[derive(Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
}

impl SseParser {
    /// Feed a chunk; the events it completes.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in chunk {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                let text = String::from_utf8_lossy(&line);
                let text = text.strip_suffix('\r').unwrap_or(&text);
                if let Some(ev) = self.line_done(text) {
                    out.push(ev);
                }
            } else {
                self.line.push(b);
            }
        }
        out
    }

    fn line_done(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = self.event.take();
            if self.data.is_empty() {
                return None;
            }
            let data = std::mem::take(&mut self.data).join("\n");
            return Some(SseEvent {
                event: event.unwrap_or_else(|| "message".into()),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => self.data.push(value.to_string()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::default();
        chunks.iter().flat_map(|c| p.push(c)).collect()
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_across_chunks() {
        let got = all(&[
            b"event: snap",
            b"shot\ndata: {\"a\"",
            b":1}\n\n: ping\n\ndata: x\r\n\r\n",
        ]);
        assert_eq!(got, vec![ev("snapshot", "{\"a\":1}"), ev("message", "x")]);
    }

    #[test]
    fn multi_line_data_and_no_space() {
        let got = all(&[b"data:one\ndata: two\nid: 7\n\n"]);
        assert_eq!(got, vec![ev("message", "one\ntwo")]);
    }

    #[test]
    fn nothing_until_the_blank_line() {
        let mut p = SseParser::default();
        assert!(p.push(b"data: [DONE]\n").is_empty());
        assert_eq!(p.push(b"\n"), vec![ev("message", "[DONE]")]);
        // An event name alone is no event, and does not leak to the next.
        assert!(p.push(b"event: x\n\n").is_empty());
        assert_eq!(p.push(b"data: y\n\n"), vec![ev("message", "y")]);
    }

    #[test]
    fn utf8_split_across_chunks() {
        let s = "data: é\n\n".as_bytes();
        let got = all(&[&s[..7], &s[7..]]);
        assert_eq!(got, vec![ev("message", "é")]);
    }
}
