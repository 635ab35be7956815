//! `steward chat [URL]`: a streaming chat in the terminal (Ollama's
//! `run`, llama.cpp's `llama-cli`). Lines are read with rustyline (line
//! editing, the session's input history), joined into messages and
//! commands (`input`), and each message streamed (`stream`) with the
//! conversation so far. A reply stopped by Ctrl-C or failed is not kept:
//! the turn (the message and the partial reply) is dropped, so the next
//! request holds only whole turns.

use rustyline::error::ReadlineError;
use serde_json::{json, Value};

use super::input::{self, Command, Fed, Joiner, Settings};
use super::local::LocalServer;
use super::stream::{self, Outcome, Printer};
use super::{runtime, ChatArgs, Endpoint};

const PROMPT: &str = ">>> ";
const MORE: &str = "... ";
/// An attached image's size limit (the server's own is its body limit).
const MAX_IMAGE_BYTES: u64 = 32 << 20;

struct Session {
    ep: Endpoint,
    rt: tokio::runtime::Runtime,
    settings: Settings,
    /// Whole turns: user and assistant messages.
    history: Vec<Value>,
    /// `data:` URLs for the next message.
    images: Vec<String>,
    out: Printer,
}

pub(crate) fn chat(a: ChatArgs) -> anyhow::Result<()> {
    if a.url.is_some() && !a.serve_args.is_empty() {
        anyhow::bail!("arguments after `--` are for the server chat starts without a URL");
    }
    let rt = runtime()?;
    let key = a.api_key.filter(|k| !k.is_empty());
    // Dropped after the session: the server it started ends with it.
    let mut _local = None;
    let url = match &a.url {
        Some(u) => u.clone(),
        None => {
            let s = rt.block_on(LocalServer::start(&a.serve_args, key.as_deref()))?;
            let u = s.base.clone();
            _local = Some(s);
            u
        }
    };
    let ep = Endpoint::new(&url, key)?;
    let mut settings = Settings {
        system: a.system.filter(|s| !s.is_empty()),
        ..Settings::default()
    };
    settings.model = match a.model {
        Some(m) => Some(m),
        None => rt.block_on(first_model(&ep)),
    };
    let mut s = Session {
        ep,
        rt,
        settings,
        history: Vec::new(),
        images: Vec::new(),
        out: Printer::new(),
    };
    let note = s.out.dim(&format!(
        "steward chat · {} · model {} · /? for help, /bye or Ctrl-D to quit",
        s.ep.base,
        s.settings
            .model
            .as_deref()
            .unwrap_or("(the server's default)")
    ));
    println!("{note}");
    s.run()
}

/// The first model the server lists (None: it lists none, or cannot).
async fn first_model(ep: &Endpoint) -> Option<String> {
    let r = ep.get("/v1/models").send().await.ok()?;
    let v: Value = r.error_for_status().ok()?.json().await.ok()?;
    v["data"][0]["id"].as_str().map(str::to_string)
}

impl Session {
    fn run(&mut self) -> anyhow::Result<()> {
        let mut ed = rustyline::DefaultEditor::new()?;
        let mut joiner = Joiner::default();
        loop {
            let prompt = if joiner.pending() { MORE } else { PROMPT };
            let line = match ed.readline(prompt) {
                Ok(l) => l,
                Err(ReadlineError::Interrupted) => {
                    if joiner.pending() {
                        joiner.reset();
                    } else {
                        self.out.note("Use Ctrl-D or /bye to exit.");
                    }
                    continue;
                }
                Err(ReadlineError::Eof) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            if !line.trim().is_empty() {
                let _ = ed.add_history_entry(line.as_str());
            }
            if !joiner.pending() {
                match input::command(&line) {
                    Some(Ok(Command::Bye)) => return Ok(()),
                    Some(Ok(c)) => {
                        self.command(c);
                        continue;
                    }
                    Some(Err(e)) => {
                        self.out.note(&e);
                        continue;
                    }
                    None => {}
                }
            }
            match joiner.feed(&line) {
                Fed::More => {}
                Fed::Message(m) if m.trim().is_empty() && self.images.is_empty() => {}
                Fed::Message(m) => self.send(m),
            }
        }
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Set(s) => self.settings.apply(s),
            Command::Unset(k) => {
                if let Err(e) = self.settings.unset(&k) {
                    self.out.note(&e);
                }
            }
            Command::Show => {
                let turns = self.history.len() / 2;
                let t = format!(
                    "{}\nconversation: {turns} turns; {} images for the next message",
                    self.settings.show(),
                    self.images.len()
                );
                println!("{t}");
            }
            Command::Clear => {
                self.history.clear();
                self.images.clear();
                self.out.note("(the conversation is forgotten)");
            }
            Command::Image(p) => match attach(&input::expand_home(&p)) {
                Ok(u) => {
                    self.images.push(u);
                    self.out.note(&format!(
                        "({} images for the next message)",
                        self.images.len()
                    ));
                }
                Err(e) => self.out.note(&e),
            },
            Command::Help => println!("{}", input::HELP),
            Command::Bye => {}
        }
    }

    /// One turn: the message (and its images) streamed with the history;
    /// kept only when the reply is whole.
    fn send(&mut self, text: String) {
        let (text, paths) = input::image_paths(&text, |p| std::path::Path::new(p).is_file());
        for p in paths {
            match attach(&p) {
                Ok(u) => self.images.push(u),
                Err(e) => {
                    self.out.note(&e);
                    return;
                }
            }
        }
        let user = user_message(&text, std::mem::take(&mut self.images));
        let body = stream::body(&self.settings, &self.history, user.clone());
        let outcome = self
            .rt
            .block_on(stream::reply(&self.ep, &body, &mut self.out));
        self.out.end();
        match outcome {
            Outcome::Done { content, finish } => {
                if finish.as_deref() == Some("length") {
                    self.out.note("[stopped at max_tokens]");
                }
                self.history.push(user);
                self.history
                    .push(json!({"role": "assistant", "content": content}));
            }
            Outcome::Stopped => self.out.note("[stopped; this turn is not kept]"),
            Outcome::Failed(e) => self
                .out
                .note(&format!("error: {e} (this turn is not kept)")),
        }
    }
}

/// A user message: plain text, or parts with its images.
fn user_message(text: &str, images: Vec<String>) -> Value {
    if images.is_empty() {
        return json!({"role": "user", "content": text});
    }
    let mut parts = Vec::new();
    if !text.is_empty() {
        parts.push(json!({"type": "text", "text": text}));
    }
    parts.extend(
        images
            .into_iter()
            .map(|u| json!({"type": "image_url", "image_url": {"url": u}})),
    );
    json!({"role": "user", "content": parts})
}

/// A local image as a `data:` URL.
fn attach(path: &str) -> Result<String, String> {
    let err = |e: String| format!("{path}: {e}");
    let len = std::fs::metadata(path)
        .map_err(|e| err(e.to_string()))?
        .len();
    if len > MAX_IMAGE_BYTES {
        return Err(err(format!("{len} bytes; at most {MAX_IMAGE_BYTES}")));
    }
    let b = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    input::data_url(&b).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_messages() {
        assert_eq!(
            user_message("hi", vec![]),
            json!({"role": "user", "content": "hi"})
        );
        let m = user_message("what?", vec!["data:image/png;base64,AA".into()]);
        assert_eq!(m["content"][0], json!({"type": "text", "text": "what?"}));
        assert_eq!(
            m["content"][1]["image_url"]["url"],
            json!("data:image/png;base64,AA")
        );
        let m = user_message("", vec!["data:x".into()]);
        assert_eq!(m["content"].as_array().unwrap().len(), 1);
    }
}
