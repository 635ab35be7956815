//! gpt-oss's harmony output: messages of
//! `<|channel|>CHANNEL[ to=functions.NAME][ <|constrain|>json]<|message|>BODY`
//! ended by `<|end|>` (another `<|start|>assistant…` follows), `<|call|>`
//! or `<|return|>`. `analysis` is reasoning, `final` (and `commentary`
//! without a recipient) is text, a `to=functions.NAME` recipient is a call
//! whose body is its arguments.

use super::{partial_suffix, Event};

const BODY_ENDS: [&str; 4] = ["<|end|>", "<|call|>", "<|return|>", "<|start|>"];

enum Kind {
    Reasoning,
    Content,
    Call(u32),
}

enum State {
    /// Reading a header up to `<|message|>`.
    Header,
    Body(Kind),
}

pub struct Harmony {
    tools: bool,
    buf: String,
    state: State,
    next_index: u32,
}

impl Harmony {
    pub fn new(tools: bool) -> Self {
        Harmony {
            tools,
            buf: String::new(),
            state: State::Header,
            next_index: 0,
        }
    }

    pub fn push(&mut self, text: &str, end: bool, out: &mut Vec<Event>) {
        self.buf.push_str(text);
        loop {
            match &self.state {
                State::Header => {
                    let Some(at) = self.buf.find("<|message|>") else {
                        if end {
                            // A header never finished: whatever text it has.
                            let t = strip_markers(&self.buf);
                            if !t.trim().is_empty() {
                                out.push(Event::Content(t));
                            }
                            self.buf.clear();
                        } else if !self.buf.is_empty()
                            && !self.buf.starts_with("<|")
                            && !["<|channel|>", "<|start|>"]
                                .iter()
                                .any(|m| m.starts_with(self.buf.as_str()))
                        {
                            // Plain text without a header: text until a marker.
                            self.state = State::Body(Kind::Content);
                            continue;
                        }
                        return;
                    };
                    let header = self.buf[..at].to_string();
                    self.buf.drain(..at + "<|message|>".len());
                    let channel = header
                        .rsplit("<|channel|>")
                        .next()
                        .unwrap_or("")
                        .split(|c: char| c.is_whitespace() || c == '<')
                        .next()
                        .unwrap_or("")
                        .to_string();
                    let recipient = header
                        .split_whitespace()
                        .chain(header.split("<|"))
                        .find_map(|w| {
                            w.trim_start_matches("assistant")
                                .trim()
                                .strip_prefix("to=")
                                .map(|r| r.split(['<', ' ']).next().unwrap_or("").to_string())
                        });
                    let kind = match (recipient, channel.as_str()) {
                        (Some(r), _) if self.tools => {
                            let name = r.strip_prefix("functions.").unwrap_or(&r).to_string();
                            let index = self.next_index;
                            self.next_index += 1;
                            out.push(Event::Call {
                                index,
                                name,
                                id: None,
                            });
                            Kind::Call(index)
                        }
                        (_, "analysis") => Kind::Reasoning,
                        _ => Kind::Content,
                    };
                    self.state = State::Body(kind);
                }
                State::Body(kind) => {
                    let hit = BODY_ENDS
                        .iter()
                        .filter_map(|m| self.buf.find(m).map(|at| (at, *m)))
                        .min();
                    let (upto, done) = match hit {
                        Some((at, _)) => (at, true),
                        None if end => (self.buf.len(), true),
                        None => (
                            self.buf.len() - partial_suffix(&self.buf, &BODY_ENDS),
                            false,
                        ),
                    };
                    let piece = self.buf[..upto].to_string();
                    if !piece.is_empty() {
                        out.push(match kind {
                            Kind::Reasoning => Event::Reasoning(piece),
                            Kind::Content => Event::Content(piece),
                            Kind::Call(i) => Event::Args {
                                index: *i,
                                delta: piece,
                            },
                        });
                    }
                    self.buf.drain(..upto);
                    if !done {
                        return;
                    }
                    // Drop the end marker (a `<|start|>` opens the next header).
                    for m in ["<|end|>", "<|call|>", "<|return|>"] {
                        if self.buf.starts_with(m) {
                            self.buf.drain(..m.len());
                        }
                    }
                    self.state = State::Header;
                    if end && self.buf.is_empty() {
                        return;
                    }
                }
            }
        }
    }
}

fn strip_markers(s: &str) -> String {
    let mut t = s.to_string();
    for m in [
        "<|start|>",
        "<|channel|>",
        "<|message|>",
        "<|constrain|>",
        "<|end|>",
    ] {
        t = t.replace(m, "");
    }
    t
}
