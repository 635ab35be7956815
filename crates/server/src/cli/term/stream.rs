//! One reply of `steward chat`: the request streamed
//! (`/v1/chat/completions`, `stream: true`), its chunks printed as they
//! come — `reasoning_content` apart from the answer (dim, under a
//! `thinking` mark) — and Ctrl-C answered by dropping the response: the
//! connection closes and the server cancels a request whose client left.

use std::io::{IsTerminal, Write};

use serde_json::{json, Value};

use super::input::Settings;
use super::sse::SseParser;
use super::{error_message, Endpoint};

/// How a reply ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The answer's text (the reasoning is not kept) and why it ended.
    Done {
        content: String,
        finish: Option<String>,
    },
    /// Ctrl-C.
    Stopped,
    Failed(String),
}

/// One `data:` line of a chat stream, read.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Chunk {
    pub(crate) reasoning: String,
    pub(crate) content: String,
    pub(crate) finish: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) done: bool,
}

pub(crate) fn chunk(data: &str) -> Chunk {
    if data.trim() == "[DONE]" {
        return Chunk {
            done: true,
            ..Chunk::default()
        };
    }
    let v: Value = match serde_json::from_str(data) {
        Ok(v) => v,
        Err(e) => {
            return Chunk {
                error: Some(format!("a chunk that is not JSON ({e}): {data:.200}")),
                ..Chunk::default()
            }
        }
    };
    if let Some(e) = v.get("error") {
        let m = e["message"]
            .as_str()
            .map_or_else(|| e.to_string(), str::to_string);
        return Chunk {
            error: Some(m),
            ..Chunk::default()
        };
    }
    let c = &v["choices"][0];
    let d = &c["delta"];
    let text = |k: &str| d[k].as_str().unwrap_or_default().to_string();
    Chunk {
        // llama-server and vLLM's older name for it, too.
        reasoning: text("reasoning_content") + d["reasoning"].as_str().unwrap_or_default(),
        content: text("content"),
        finish: c["finish_reason"].as_str().map(str::to_string),
        ..Chunk::default()
    }
}

/// The request: the system prompt, the history, the new message, the
/// settings' fields.
pub(crate) fn body(s: &Settings, history: &[Value], user: Value) -> Value {
    let mut messages = Vec::new();
    if let Some(sys) = &s.system {
        messages.push(json!({"role": "system", "content": sys}));
    }
    messages.extend(history.iter().cloned());
    messages.push(user);
    let mut b = json!({"messages": messages, "stream": true});
    if let Some(m) = &s.model {
        b["model"] = json!(m);
    }
    for (k, v) in &s.params {
        b[*k] = v.clone();
    }
    b
}

/// Writes the reply: the reasoning dim (on a terminal) under a mark, the
/// answer plain, each begun on its own line.
pub(crate) struct Printer {
    color: bool,
    /// What was printed last: nothing, reasoning, the answer.
    mode: u8,
    at_line_start: bool,
}

impl Printer {
    pub(crate) fn new() -> Printer {
        Printer {
            color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
            mode: 0,
            at_line_start: true,
        }
    }

    fn write(&mut self, mode: u8, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut o = std::io::stdout().lock();
        if self.mode != mode {
            if !self.at_line_start {
                let _ = writeln!(o);
            }
            if mode == 1 {
                let _ = write!(o, "{}", self.dim("[thinking]\n"));
            } else if self.mode == 1 {
                let _ = writeln!(o);
            }
            self.mode = mode;
        }
        let _ = if mode == 1 {
            write!(o, "{}", self.dim(text))
        } else {
            write!(o, "{text}")
        };
        let _ = o.flush();
        self.at_line_start = text.ends_with('\n');
    }

    pub(crate) fn dim(&self, t: &str) -> String {
        if self.color {
            format!("\x1b[2m{t}\x1b[0m")
        } else {
            t.to_string()
        }
    }

    /// A note after the reply (stopped, an error, why it ended), dim.
    pub(crate) fn note(&mut self, t: &str) {
        let mut o = std::io::stdout().lock();
        if !self.at_line_start {
            let _ = writeln!(o);
        }
        let _ = writeln!(o, "{}", self.dim(t));
        self.at_line_start = true;
    }

    /// The reply's last line ended.
    pub(crate) fn end(&mut self) {
        if !self.at_line_start {
            println!();
        }
        self.at_line_start = true;
        self.mode = 0;
    }
}

/// Send, stream, print; Ctrl-C at any point stops it.
pub(crate) async fn reply(ep: &Endpoint, body: &Value, out: &mut Printer) -> Outcome {
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    let mut resp = tokio::select! {
        r = ep.post("/v1/chat/completions").json(body).send() => match r {
            Ok(r) => r,
            Err(e) => return Outcome::Failed(format!("{e:#}")),
        },
        _ = &mut stop => return Outcome::Stopped,
    };
    if !resp.status().is_success() {
        let st = resp.status();
        let text = resp.text().await.unwrap_or_default();
        return Outcome::Failed(error_message(st, &text));
    }
    let mut p = SseParser::default();
    let mut content = String::new();
    let mut finish = None;
    loop {
        let bytes = tokio::select! {
            c = resp.chunk() => match c {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => return Outcome::Failed(format!("the stream broke: {e:#}")),
            },
            // `resp` is dropped on return: the connection closes.
            _ = &mut stop => return Outcome::Stopped,
        };
        for ev in p.push(&bytes) {
            let c = chunk(&ev.data);
            if let Some(e) = c.error {
                return Outcome::Failed(e);
            }
            out.write(1, &c.reasoning);
            out.write(2, &c.content);
            content.push_str(&c.content);
            finish = c.finish.or(finish);
            if c.done {
                return Outcome::Done { content, finish };
            }
        }
    }
    Outcome::Done { content, finish }
}

#[cfg(test)]
mod tests {
    use super::super::input::Setting;
    use super::*;

    #[test]
    fn chunks() {
        let c = chunk(r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#);
        assert_eq!(c.content, "Hi");
        assert_eq!(c.finish, None);
        let c = chunk(r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#);
        assert_eq!((c.reasoning.as_str(), c.content.as_str()), ("hmm", ""));
        let c = chunk(r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#);
        assert_eq!(c.finish.as_deref(), Some("length"));
        // The usage chunk: no choices.
        assert_eq!(chunk(r#"{"choices":[],"usage":{}}"#), Chunk::default());
        assert!(chunk("[DONE]").done);
        let e = chunk(r#"{"error":{"message":"too long","type":"invalid_request_error"}}"#);
        assert_eq!(e.error.as_deref(), Some("too long"));
        assert!(chunk("{oops").error.is_some());
    }

    #[test]
    fn bodies() {
        let mut s = Settings::default();
        let hist = vec![
            json!({"role": "user", "content": "a"}),
            json!({"role": "assistant", "content": "b"}),
        ];
        let b = body(&s, &hist, json!({"role": "user", "content": "c"}));
        assert_eq!(b["messages"].as_array().unwrap().len(), 3);
        assert_eq!(b["stream"], json!(true));
        assert!(b.get("model").is_none());
        s.apply(Setting::System("sys".into()));
        s.apply(Setting::Model("smol".into()));
        s.apply(Setting::Param("max_tokens", json!(5)));
        let b = body(&s, &hist, json!({"role": "user", "content": "c"}));
        assert_eq!(
            b["messages"][0],
            json!({"role": "system", "content": "sys"})
        );
        assert_eq!(b["messages"][3]["content"], json!("c"));
        assert_eq!(
            (b["model"].clone(), b["max_tokens"].clone()),
            (json!("smol"), json!(5))
        );
    }
}
