//! A model's output read back as the family wrote it: reasoning, text and
//! tool calls, incrementally (text arrives in pieces; events leave as soon
//! as they are certain). Two stages: the reasoning block (`think`), then
//! call regions in the text (`regions`, `xml`; what a scan reports and
//! the steps they share in `view`); gpt-oss's harmony channels have their
//! own reader (`harmony`). Text that might still become a marker is held
//! back, so any split of the same output gives the same events in
//! total as the whole output at once (`parse_whole`). A region that turns
//! out not to be a call degrades to text (with a reason, `Parsed::notes`),
//! never an error.

mod harmony;
pub mod json;
pub mod regions;
mod view;
mod xml;

use crate::family::Family;
use regions::{CallView, Ctx, Region, Status};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Content(String),
    Reasoning(String),
    /// A call begins: its name is whole. `id`: the model's own id, if any.
    Call {
        index: u32,
        name: String,
        id: Option<String>,
    },
    /// More of call `index`'s arguments (JSON text).
    Args {
        index: u32,
        delta: String,
    },
    /// Something did not parse and became text (for the log).
    Note(String),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub family: Family,
    /// Read tool calls (the request offered tools and did not say `none`).
    pub tools: bool,
    /// Split reasoning out of the text.
    pub reasoning: bool,
    /// The prompt ended inside the reasoning block (`starts_in_reasoning`).
    pub in_reasoning: bool,
    /// The request's tools (typing XML parameter values).
    pub tool_defs: Option<Value>,
}

/// The prompt leaves the model inside its reasoning block (QwQ, the R1
/// distills: the generation prompt ends with `<think>`).
pub fn starts_in_reasoning(family: Family, prompt: &str) -> bool {
    family
        .reasoning()
        .is_some_and(|(open, _)| prompt.trim_end().ends_with(open))
}

pub struct OutputParser {
    opts: Options,
    think: Think,
    calls: Calls,
    harmony: Option<harmony::Harmony>,
}

impl OutputParser {
    pub fn new(opts: Options) -> Self {
        let harmony = (opts.family == Family::Harmony).then(|| harmony::Harmony::new(opts.tools));
        OutputParser {
            think: Think::new(&opts),
            calls: Calls::new(&opts),
            harmony,
            opts,
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<Event> {
        let mut out = Vec::new();
        if let Some(h) = &mut self.harmony {
            h.push(text, false, &mut out);
            return merge(out);
        }
        let mut content = String::new();
        self.think.push(text, false, &mut out, &mut content);
        self.calls.push(&content, false, &self.opts, &mut out);
        merge(out)
    }

    pub fn finish(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        if let Some(h) = &mut self.harmony {
            h.push("", true, &mut out);
            return merge(out);
        }
        let mut content = String::new();
        self.think.push("", true, &mut out, &mut content);
        self.calls.push(&content, true, &self.opts, &mut out);
        merge(out)
    }
}

/// Adjacent text events of one kind as one.
fn merge(events: Vec<Event>) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::with_capacity(events.len());
    for e in events {
        match (out.last_mut(), e) {
            (_, Event::Content(s) | Event::Reasoning(s)) if s.is_empty() => {}
            (Some(Event::Content(a)), Event::Content(b)) => a.push_str(&b),
            (Some(Event::Reasoning(a)), Event::Reasoning(b)) => a.push_str(&b),
            (Some(Event::Args { index: i, delta: a }), Event::Args { index: j, delta: b })
                if *i == j =>
            {
                a.push_str(&b)
            }
            (_, e) => out.push(e),
        }
    }
    out
}

/// A whole output, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub content: String,
    pub reasoning: String,
    /// (model's id, name, arguments).
    pub calls: Vec<(Option<String>, String, String)>,
    pub notes: Vec<String>,
}

impl Parsed {
    pub fn apply(&mut self, events: Vec<Event>) {
        for e in events {
            match e {
                Event::Content(s) => self.content.push_str(&s),
                Event::Reasoning(s) => self.reasoning.push_str(&s),
                Event::Call { name, id, .. } => self.calls.push((id, name, String::new())),
                Event::Args { index, delta } => {
                    if let Some(c) = self.calls.get_mut(index as usize) {
                        c.2.push_str(&delta)
                    }
                }
                Event::Note(n) => self.notes.push(n),
            }
        }
    }
}

pub fn parse_whole(opts: Options, text: &str) -> Parsed {
    let mut p = OutputParser::new(opts);
    let mut out = Parsed::default();
    out.apply(p.push(text));
    out.apply(p.finish());
    out
}

/// Longest suffix of `s` that is a proper prefix of one of `markers`.
fn partial_suffix(s: &str, markers: &[&str]) -> usize {
    let mut best = 0;
    for m in markers {
        for n in (1..m.len().min(s.len() + 1)).rev() {
            if n <= best {
                break;
            }
            if s.is_char_boundary(s.len() - n) && m.starts_with(&s[s.len() - n..]) {
                best = n;
                break;
            }
        }
    }
    best
}

/// Stage 1: the reasoning block at the start of the output.
struct Think {
    markers: Option<(&'static str, &'static str)>,
    state: ThinkState,
    buf: String,
    /// One open marker at most is skipped (the model's own after a
    /// prompt-opened block); a second is reasoning text, however the
    /// stream is cut.
    may_skip_open: bool,
}

#[derive(Debug, PartialEq)]
enum ThinkState {
    Before,
    Inside { started: bool },
    After { started: bool },
    Off,
}

impl Think {
    fn new(o: &Options) -> Think {
        let markers = o.family.reasoning().filter(|_| o.reasoning);
        let state = match (markers, o.in_reasoning) {
            (None, _) => ThinkState::Off,
            (Some(_), true) => ThinkState::Inside { started: false },
            (Some(_), false) => ThinkState::Before,
        };
        Think {
            markers,
            state,
            buf: String::new(),
            may_skip_open: true,
        }
    }

    fn push(&mut self, text: &str, end: bool, out: &mut Vec<Event>, content: &mut String) {
        self.buf.push_str(text);
        let Some((open, close)) = self.markers else {
            content.push_str(&std::mem::take(&mut self.buf));
            return;
        };
        loop {
            match self.state {
                ThinkState::Off => {
                    content.push_str(&std::mem::take(&mut self.buf));
                    return;
                }
                ThinkState::Before => {
                    let t = self.buf.trim_start();
                    if let Some(rest) = t.strip_prefix(open) {
                        self.buf = rest.to_string();
                        self.may_skip_open = false;
                        self.state = ThinkState::Inside { started: false };
                        continue;
                    }
                    if !end && open.starts_with(t) {
                        return;
                    }
                    self.state = ThinkState::Off;
                }
                ThinkState::Inside { started } => {
                    if !started {
                        // A prompt that opened the block may be followed
                        // by the model's own open marker: skip it.
                        let t = self.buf.trim_start();
                        if t.is_empty() && !end {
                            return;
                        }
                        let skip = self.may_skip_open;
                        if skip && !end && open.starts_with(t) && t.len() < open.len() {
                            return;
                        }
                        let t = match t.strip_prefix(open) {
                            Some(rest) if skip => {
                                self.may_skip_open = false;
                                rest
                            }
                            _ => t,
                        }
                        .trim_start();
                        if t.is_empty() && !end {
                            self.buf.clear();
                            return;
                        }
                        self.buf = t.to_string();
                        self.state = ThinkState::Inside { started: true };
                        continue;
                    }
                    if let Some(at) = self.buf.find(close) {
                        out.push(Event::Reasoning(self.buf[..at].trim_end().to_string()));
                        self.buf = self.buf[at + close.len()..].to_string();
                        self.state = ThinkState::After { started: false };
                        continue;
                    }
                    if end {
                        out.push(Event::Reasoning(self.buf.trim_end().to_string()));
                        self.buf.clear();
                        return;
                    }
                    let hold = partial_suffix(&self.buf, &[close]);
                    let upto = self.buf.len() - hold;
                    let safe = self.buf[..upto].trim_end().len();
                    out.push(Event::Reasoning(self.buf[..safe].to_string()));
                    self.buf.drain(..safe);
                    return;
                }
                ThinkState::After { started } => {
                    if !started {
                        let t = self.buf.trim_start();
                        if t.is_empty() {
                            self.buf.clear();
                            return;
                        }
                        self.buf = t.to_string();
                        self.state = ThinkState::After { started: true };
                    }
                    content.push_str(&std::mem::take(&mut self.buf));
                    return;
                }
            }
        }
    }
}

/// Per call of the open region: its name sent, bytes of arguments sent.
type Emitted = Vec<(bool, usize)>;

/// Stage 2: call regions in the text.
struct Calls {
    starts: Vec<(&'static str, Region)>,
    /// Marker texts dropped from the text (Command R's response markers).
    strip: &'static [&'static str],
    buf: String,
    region: Option<(Region, &'static str, Emitted)>,
    next_index: u32,
    /// Nothing but whitespace has been seen (Llama's bare JSON, Functionary
    /// v3.2's first segment).
    at_start: bool,
    family: Family,
}

fn starts_for(f: Family) -> Vec<(&'static str, Region)> {
    use Region as R;
    match f {
        Family::Hermes | Family::Generic => vec![("<tool_call>", R::Hermes)],
        Family::QwenXml => vec![("<tool_call>", R::QwenXml), ("<function=", R::QwenXml)],
        Family::Llama3 => vec![("<|python_tag|>", R::BareJson)],
        Family::Mistral => vec![("[TOOL_CALLS]", R::Mistral)],
        Family::DeepSeek => vec![
            ("<｜tool▁calls▁begin｜>", R::DeepSeek),
            ("<｜tool▁call▁begin｜>", R::DeepSeek),
        ],
        Family::Kimi => vec![("<|tool_calls_section_begin|>", R::Kimi)],
        Family::CommandR => vec![("<|START_ACTION|>", R::CommandR)],
        Family::ToolCallToken => vec![("<|tool_call|>", R::JsonList), ("functools[", R::JsonList)],
        Family::Functools => vec![("functools[", R::JsonList)],
        Family::FunctionaryV31 => vec![
            ("<function=", R::FunctionTag),
            ("<|python_tag|>", R::BareJson),
        ],
        Family::FunctionaryV32 => vec![(">>>", R::Segments)],
        Family::Glm => vec![("<tool_call>", R::Glm)],
        Family::Gemma4 => vec![("<|tool_call>", R::Gemma4)],
        Family::Harmony => vec![],
    }
}

impl Calls {
    fn new(o: &Options) -> Calls {
        Calls {
            starts: if o.tools {
                starts_for(o.family)
            } else {
                vec![]
            },
            strip: match o.family {
                Family::CommandR => &["<|START_RESPONSE|>", "<|END_RESPONSE|>"],
                _ => &[],
            },
            buf: String::new(),
            region: None,
            next_index: 0,
            at_start: true,
            family: o.family,
        }
    }

    fn push(&mut self, text: &str, end: bool, o: &Options, out: &mut Vec<Event>) {
        self.buf.push_str(text);
        loop {
            if self.region.is_some() {
                if !self.scan_region(end, o, out) {
                    return;
                }
                continue;
            }
            if self.starts.is_empty() && self.strip.is_empty() {
                out.push(Event::Content(std::mem::take(&mut self.buf)));
                return;
            }
            // Bare forms at the start of the output.
            if self.at_start && !self.starts.is_empty() {
                let t = self.buf.trim_start();
                let lead = self.buf.len() - t.len();
                match self.family {
                    Family::Llama3 | Family::FunctionaryV31 if t.starts_with('{') => {
                        self.buf.drain(..lead);
                        self.region = Some((Region::BareJson, "", Vec::new()));
                        self.at_start = false;
                        continue;
                    }
                    // (Wait while the text may still become `>>>`.)
                    Family::FunctionaryV32 if !end && ">>>".starts_with(t) => return,
                    Family::FunctionaryV32 if !t.starts_with(">>>") && !t.is_empty() => {
                        // The prompt ended with `>>>`: the first segment's name comes first.
                        self.buf.drain(..lead);
                        self.region = Some((Region::Segments, "", Vec::new()));
                        self.at_start = false;
                        continue;
                    }
                    _ if t.is_empty() && !end => return,
                    _ => self.at_start = false,
                }
            }
            let hit = self
                .starts
                .iter()
                .map(|(m, r)| (*m, Some(*r)))
                .chain(self.strip.iter().map(|m| (*m, None)))
                .filter_map(|(m, r)| self.buf.find(m).map(|at| (at, m, r)))
                .min_by_key(|(at, m, _)| (*at, usize::MAX - m.len()));
            match hit {
                Some((at, m, Some(r))) => {
                    let before = self.buf[..at].trim_end();
                    out.push(Event::Content(before.to_string()));
                    self.buf.drain(..at);
                    self.region = Some((r, m, Vec::new()));
                    self.at_start = false;
                }
                Some((at, m, None)) => {
                    out.push(Event::Content(self.buf[..at].to_string()));
                    self.buf.drain(..at + m.len());
                }
                None => {
                    self.text_until_marker(end, out);
                    return;
                }
            }
        }
    }

    /// Scan the open region from the start of the buffer: its calls' new
    /// events, and the region ended (done, or not a call) or not (false:
    /// wait for more text).
    fn scan_region(&mut self, end: bool, o: &Options, out: &mut Vec<Event>) -> bool {
        let Some((region, marker, emitted)) = &mut self.region else {
            return true;
        };
        let cx = Ctx {
            end,
            tools: o.tool_defs.as_ref(),
            marker,
        };
        let view = regions::scan(*region, &self.buf, &cx);
        emit(&view.calls, emitted, self.next_index, out);
        let base_len = emitted.len() as u32;
        let named = view.calls.iter().filter(|c| c.name.is_some()).count() as u32;
        match view.status {
            Status::Open => return false,
            Status::Done(n) => {
                self.next_index += named.max(base_len);
                self.buf.drain(..n.min(self.buf.len()));
                self.region = None;
            }
            Status::Fail(r) => {
                let r = r.min(self.buf.len());
                if named == 0 {
                    out.push(Event::Note(format!(
                        "text after {:?} is not a {} call; kept as text",
                        marker,
                        self.family.name()
                    )));
                    out.push(Event::Content(self.buf[..r].to_string()));
                }
                self.next_index += named;
                self.buf.drain(..r);
                self.region = None;
                self.at_start = false;
            }
        }
        true
    }

    /// No marker in the buffer: out as text, except what may still become
    /// one (and the whitespace before it); at the end, all of it but an
    /// unfinished call marker.
    fn text_until_marker(&mut self, end: bool, out: &mut Vec<Event>) {
        let all: Vec<&str> = self
            .starts
            .iter()
            .map(|(m, _)| *m)
            .chain(self.strip.iter().copied())
            .collect();
        let hold = partial_suffix(&self.buf, &all);
        if end {
            // The output was cut inside a call marker (`<tool_`
            // at `max_tokens`): markup, not text. (Two bytes at
            // least: a closing `<` stays text.)
            let upto = if hold >= 2 && !self.starts.is_empty() {
                out.push(Event::Note(format!(
                    "an unfinished call marker {:?} at the end was dropped",
                    &self.buf[self.buf.len() - hold..]
                )));
                self.buf[..self.buf.len() - hold].trim_end().len()
            } else {
                self.buf.len()
            };
            out.push(Event::Content(self.buf[..upto].to_string()));
            self.buf.clear();
            return;
        }
        let upto = self.buf.len() - hold;
        // Whitespace before a call is dropped with it: hold it.
        let upto = if self.starts.is_empty() {
            upto
        } else {
            self.buf[..upto].trim_end().len()
        };
        out.push(Event::Content(self.buf[..upto].to_string()));
        self.buf.drain(..upto);
    }
}

/// The events that take what was emitted of a region's calls to `calls`.
fn emit(calls: &[CallView], emitted: &mut Emitted, base: u32, out: &mut Vec<Event>) {
    for (i, c) in calls.iter().enumerate() {
        let k = i as u32;
        let Some(name) = &c.name else {
            break;
        };
        if emitted.len() <= i {
            emitted.push((false, 0));
        }
        let (named, sent) = &mut emitted[i];
        if !*named {
            out.push(Event::Call {
                index: base + k,
                name: name.clone(),
                id: c.id.clone(),
            });
            *named = true;
        }
        if c.args.len() > *sent && c.args.is_char_boundary(*sent) {
            out.push(Event::Args {
                index: base + k,
                delta: c.args[*sent..].to_string(),
            });
            *sent = c.args.len();
        }
    }
}

#[cfg(test)]
mod tests;
