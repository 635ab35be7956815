//! Per-request streaming detokenizer with stop-string holdback. Pure.
//!
//! Owns: the bytes of tokens not yet forming complete UTF-8, and the text held
//! back because it might be the start of a stop string.
//!
//! Invariants: `push` only ever returns complete UTF-8 text; a token is never
//! assumed to be valid text by itself (a multi-byte character may be split
//! across tokens); text that is, or may become, a stop string is never
//! returned; once a stop string matched, nothing more is returned.
//! `finish` flushes the held text and drops an unfinished trailing byte
//! sequence (a character cut off by the end of generation).

/// What one token (or the final flush) produced.
#[derive(Debug, Default, PartialEq)]
pub struct DetokOutput {
    /// Text safe to send now.
    pub text: String,
    /// A stop string matched: `text` ends right before it; stop generating.
    pub stopped: bool,
}

#[derive(Debug, Default)]
pub struct StreamDetokenizer {
    pending_bytes: Vec<u8>,
    held: String,
    stops: Vec<String>,
    max_stop: usize,
    stopped: bool,
    /// The stop string that matched.
    matched: Option<String>,
}

impl StreamDetokenizer {
    pub fn new(stops: Vec<String>) -> Self {
        let stops: Vec<String> = stops.into_iter().filter(|s| !s.is_empty()).collect();
        let max_stop = stops.iter().map(|s| s.len()).max().unwrap_or(0);
        StreamDetokenizer {
            stops,
            max_stop,
            ..Default::default()
        }
    }

    /// The stop string that ended the text, if one did.
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    /// Add one token's bytes.
    pub fn push(&mut self, bytes: &[u8]) -> DetokOutput {
        if self.stopped {
            return DetokOutput {
                text: String::new(),
                stopped: true,
            };
        }
        self.pending_bytes.extend_from_slice(bytes);
        let valid = take_valid_utf8(&mut self.pending_bytes);
        self.held.push_str(&valid);
        self.release(false)
    }

    /// End of generation: flush everything still held.
    pub fn finish(&mut self) -> DetokOutput {
        if self.stopped {
            return DetokOutput {
                text: String::new(),
                stopped: true,
            };
        }
        // An incomplete UTF-8 sequence at the very end (generation stopped
        // mid-character, e.g. at max_tokens) is not text: drop it rather
        // than send U+FFFD.
        self.pending_bytes.clear();
        self.release(true)
    }

    fn release(&mut self, at_end: bool) -> DetokOutput {
        // Earliest full match of any stop string.
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|&(at, _)| at);
        if let Some((at, s)) = hit {
            self.matched = Some(s.clone());
            let text = self.held[..at].to_string();
            self.held.clear();
            self.stopped = true;
            return DetokOutput {
                text,
                stopped: true,
            };
        }
        if at_end || self.stops.is_empty() {
            return DetokOutput {
                text: std::mem::take(&mut self.held),
                stopped: false,
            };
        }
        // Hold back the longest suffix that is a prefix of some stop string.
        let keep = self.partial_suffix_len();
        let cut = self.held.len() - keep;
        let text = self.held[..cut].to_string();
        self.held.drain(..cut);
        DetokOutput {
            text,
            stopped: false,
        }
    }

    fn partial_suffix_len(&self) -> usize {
        let h = self.held.as_str();
        let start_min = h.len().saturating_sub(self.max_stop.saturating_sub(1));
        for start in start_min..h.len() {
            if !h.is_char_boundary(start) {
                continue;
            }
            let suffix = &h[start..];
            if self.stops.iter().any(|s| s.starts_with(suffix)) {
                return h.len() - start;
            }
        }
        0
    }
}

/// Remove and return the longest valid UTF-8 prefix of `buf`, leaving an
/// incomplete trailing sequence in place. Invalid bytes (that no later byte
/// can complete) become U+FFFD.
fn take_valid_utf8(buf: &mut Vec<u8>) -> String {
    let mut out = String::new();
    let mut start = 0;
    loop {
        match std::str::from_utf8(&buf[start..]) {
            Ok(s) => {
                out.push_str(s);
                buf.clear();
                return out;
            }
            Err(e) => {
                let good = start + e.valid_up_to();
                out.push_str(std::str::from_utf8(&buf[start..good]).unwrap_or_default());
                match e.error_len() {
                    Some(bad) => {
                        out.push('\u{FFFD}');
                        start = good + bad;
                    }
                    None => {
                        // Incomplete sequence at the end: keep it for later.
                        buf.drain(..good);
                        return out;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&[u8]]) -> (String, bool) {
        let mut d = StreamDetokenizer::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            let o = d.push(p);
            out.push_str(&o.text);
            if o.stopped {
                return (out, true);
            }
        }
        let o = d.finish();
        out.push_str(&o.text);
        (out, o.stopped)
    }

    #[test]
    fn utf8_split_across_tokens_is_never_emitted_half() {
        let emoji = "😀".as_bytes(); // 4 bytes
        let mut d = StreamDetokenizer::new(vec![]);
        assert_eq!(d.push(&emoji[..1]).text, "");
        assert_eq!(d.push(&emoji[1..3]).text, "");
        assert_eq!(d.push(&emoji[3..]).text, "😀");
        let cjk = "漢字".as_bytes();
        assert_eq!(d.push(&cjk[..4]).text, "漢");
        assert_eq!(d.push(&cjk[4..]).text, "字");
    }

    #[test]
    fn truncated_char_at_finish_is_dropped() {
        let (out, stopped) = run(&[], &[b"ab", &"😀".as_bytes()[..2]]);
        assert_eq!(out, "ab");
        assert!(!stopped);
    }

    #[test]
    fn invalid_byte_becomes_replacement_without_blocking() {
        let mut d = StreamDetokenizer::new(vec![]);
        assert_eq!(d.push(&[b'a', 0xFF, b'b']).text, "a\u{FFFD}b");
    }

    #[test]
    fn stop_string_across_tokens_is_cut_exactly() {
        type Case<'a> = (&'a [&'a str], &'a [&'a [u8]], &'a str, bool);
        let cases: &[Case] = &[
            (&["END"], &[b"hello E", b"N", b"D more"], "hello ", true),
            (&["END"], &[b"hello EN", b"X"], "hello ENX", false),
            (&["\n\n"], &[b"a\n", b"\nb"], "a", true),
            (&["xyz", "yz"], &[b"axy", b"z"], "a", true),
            (&["stop"], &[b"sto"], "sto", false),
            (&["😀"], &[&[0xF0, 0x9F], &[0x98, 0x80]], "", true),
        ];
        for (stops, pieces, want, want_stop) in cases {
            let (out, stopped) = run(stops, pieces);
            assert_eq!(&out, want, "stops {stops:?}");
            assert_eq!(stopped, *want_stop, "stops {stops:?}");
        }
    }

    #[test]
    fn holdback_releases_when_prefix_breaks() {
        let mut d = StreamDetokenizer::new(vec!["<end>".into()]);
        assert_eq!(d.push(b"x <e").text, "x ");
        assert_eq!(d.push(b"n").text, "");
        assert_eq!(d.push(b"q").text, "<enq");
    }

    #[test]
    fn nothing_after_stop() {
        let mut d = StreamDetokenizer::new(vec!["!".into()]);
        assert!(d.push(b"hi!").stopped);
        assert_eq!(d.push(b"more").text, "");
        assert_eq!(d.finish().text, "");
    }
}
