//! `steward chat`'s input rules, pure: lines joined into one message (a
//! line ending in `\` continues; a `"""` block, as in Ollama, runs to the
//! next `"""`), the `/` commands parsed, the settings they change, and
//! the image paths a message names (attached as `data:` URLs).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

const FENCE: &str = "\"\"\"";

/// What a line made of the message being typed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fed {
    Message(String),
    More,
}

/// The message being typed across lines.
#[derive(Default)]
pub(crate) struct Joiner {
    buf: String,
    open: bool,
    fenced: bool,
}

impl Joiner {
    /// Lines are waiting for the rest of their message.
    pub(crate) fn pending(&self) -> bool {
        self.open
    }

    pub(crate) fn reset(&mut self) {
        *self = Joiner::default();
    }

    pub(crate) fn feed(&mut self, line: &str) -> Fed {
        if self.fenced {
            if let Some(i) = line.find(FENCE) {
                self.buf.push_str(&line[..i]);
                return self.finish();
            }
            self.buf.push_str(line);
            self.buf.push('\n');
            return Fed::More;
        }
        if !self.open {
            if let Some(rest) = line.trim_start().strip_prefix(FENCE) {
                if let Some(i) = rest.find(FENCE) {
                    return Fed::Message(rest[..i].to_string());
                }
                self.open = true;
                self.fenced = true;
                if !rest.is_empty() {
                    self.buf.push_str(rest);
                    self.buf.push('\n');
                }
                return Fed::More;
            }
        }
        if let Some(head) = line.strip_suffix('\\') {
            self.open = true;
            self.buf.push_str(head);
            self.buf.push('\n');
            return Fed::More;
        }
        self.buf.push_str(line);
        self.finish()
    }

    fn finish(&mut self) -> Fed {
        let m = std::mem::take(&mut self.buf);
        self.reset();
        Fed::Message(m.trim_end_matches('\n').to_string())
    }
}

/// A `/` command.
#[derive(Debug, PartialEq)]
pub(crate) enum Command {
    Set(Setting),
    Unset(String),
    Show,
    Clear,
    Image(String),
    Help,
    Bye,
}

#[derive(Debug, PartialEq)]
pub(crate) enum Setting {
    /// Empty: no system prompt.
    System(String),
    Model(String),
    Param(&'static str, Value),
}

#[derive(Clone, Copy)]
enum Kind {
    Float,
    Int,
    Bool,
    Text,
}

/// The request fields `/set` takes, and their types (the server checks
/// their ranges).
const PARAMS: &[(&str, Kind)] = &[
    ("temperature", Kind::Float),
    ("top_p", Kind::Float),
    ("top_k", Kind::Int),
    ("min_p", Kind::Float),
    ("max_tokens", Kind::Int),
    ("seed", Kind::Int),
    ("presence_penalty", Kind::Float),
    ("frequency_penalty", Kind::Float),
    ("repetition_penalty", Kind::Float),
    ("ignore_eos", Kind::Bool),
    ("stop", Kind::Text),
];

pub(crate) const HELP: &str = "\
/set system TEXT       the system prompt (/set system alone: none)
/set model NAME        the request's model
/set KEY VALUE         a sampling field: temperature, top_p, top_k, min_p,
                       max_tokens, seed, presence_penalty, frequency_penalty,
                       repetition_penalty, ignore_eos (true/false), stop
/unset KEY             back to the server's default
/show                  the settings and the conversation's length
/clear                 forget the conversation (the settings stay)
/image PATH            attach a PNG, JPEG, WebP or GIF to the next message
                       (a path ending in .png/.jpg/.jpeg/.webp/.gif in a
                       message is attached too)
/bye                   quit (or Ctrl-D)
A line ending in \\ continues on the next; \"\"\" opens a block that the next
\"\"\" closes. Ctrl-C stops a reply (the turn is not kept).";

/// `None`: not a command (a message). `Some(Err)`: a command misused.
pub(crate) fn command(line: &str) -> Option<Result<Command, String>> {
    let t = line.trim();
    if !t.starts_with('/') {
        return None;
    }
    let (head, rest) = match t.split_once(char::is_whitespace) {
        Some((h, r)) => (h, r.trim()),
        None => (t, ""),
    };
    Some(match head {
        "/set" => set(rest).map(Command::Set),
        "/unset" if !rest.is_empty() => Ok(Command::Unset(rest.to_string())),
        "/show" => Ok(Command::Show),
        "/clear" => Ok(Command::Clear),
        "/image" if !rest.is_empty() => Ok(Command::Image(rest.to_string())),
        "/help" | "/?" => Ok(Command::Help),
        "/bye" | "/exit" | "/quit" => Ok(Command::Bye),
        "/unset" | "/image" => Err(format!("{head} needs an argument; /? for help")),
        _ => Err(format!("unknown command {head}; /? lists them")),
    })
}

fn set(rest: &str) -> Result<Setting, String> {
    let (key, value) = match rest.split_once(char::is_whitespace) {
        Some((k, v)) => (k, v.trim()),
        None => (rest, ""),
    };
    match key {
        "system" => return Ok(Setting::System(value.to_string())),
        "model" if !value.is_empty() => return Ok(Setting::Model(value.to_string())),
        "" => return Err("/set KEY VALUE; /? for the keys".into()),
        _ => {}
    }
    let Some(&(name, kind)) = PARAMS.iter().find(|(n, _)| *n == key) else {
        return Err(format!("no setting {key:?}; /? for the keys"));
    };
    let bad = || format!("/set {name}: {value:?} is not {}", kind_name(kind));
    let v = match kind {
        Kind::Float => value.parse::<f64>().map(Value::from).map_err(|_| bad())?,
        Kind::Int => value.parse::<i64>().map(Value::from).map_err(|_| bad())?,
        Kind::Bool => match value {
            "true" | "on" | "yes" => Value::Bool(true),
            "false" | "off" | "no" => Value::Bool(false),
            _ => return Err(bad()),
        },
        Kind::Text if !value.is_empty() => Value::from(value),
        Kind::Text => return Err(bad()),
    };
    Ok(Setting::Param(name, v))
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Float => "a number",
        Kind::Int => "an integer",
        Kind::Bool => "true or false",
        Kind::Text => "some text",
    }
}

/// What `/set` changed: sent with every request.
#[derive(Debug, Default)]
pub(crate) struct Settings {
    pub(crate) model: Option<String>,
    pub(crate) system: Option<String>,
    pub(crate) params: BTreeMap<&'static str, Value>,
}

impl Settings {
    pub(crate) fn apply(&mut self, s: Setting) {
        match s {
            Setting::System(t) => self.system = Some(t).filter(|t| !t.is_empty()),
            Setting::Model(m) => self.model = Some(m),
            Setting::Param(k, v) => {
                self.params.insert(k, v);
            }
        }
    }

    pub(crate) fn unset(&mut self, key: &str) -> Result<(), String> {
        match key {
            "system" => self.system = None,
            "model" => self.model = None,
            _ if self.params.remove(key).is_some() => {}
            _ => return Err(format!("{key} is not set")),
        }
        Ok(())
    }

    /// `/show`'s lines.
    pub(crate) fn show(&self) -> String {
        let mut s = format!(
            "model: {}\nsystem: {}",
            self.model.as_deref().unwrap_or("(the server's default)"),
            self.system.as_deref().unwrap_or("(none)")
        );
        for (k, v) in &self.params {
            s.push_str(&format!("\n{k}: {v}"));
        }
        if self.params.is_empty() {
            s.push_str("\nsampling: the server's defaults");
        }
        s
    }
}

/// The image paths a message names (words ending in an image extension
/// that `is_file` finds; quotes around them and a leading `~/` allowed),
/// and the message without them.
pub(crate) fn image_paths(text: &str, is_file: impl Fn(&str) -> bool) -> (String, Vec<String>) {
    let mut rest = text.to_string();
    let mut found = Vec::new();
    for word in text.split_whitespace() {
        let p = word.trim_matches(|c| c == '"' || c == '\'');
        let lower = p.to_ascii_lowercase();
        let image = [".png", ".jpg", ".jpeg", ".webp", ".gif"]
            .iter()
            .any(|e| lower.ends_with(e));
        let path = expand_home(p);
        if image && is_file(&path) {
            let spaced = format!(" {word}");
            rest = if rest.contains(&spaced) {
                rest.replacen(&spaced, "", 1)
            } else {
                rest.replacen(word, "", 1)
            };
            found.push(path);
        }
    }
    (rest.trim().to_string(), found)
}

pub(crate) fn expand_home(p: &str) -> String {
    match (p.strip_prefix("~/"), std::env::var("HOME")) {
        (Some(r), Ok(h)) => format!("{}/{r}", h.trim_end_matches('/')),
        _ => p.to_string(),
    }
}

/// An image file's bytes as a `data:` URL, its type read from its first
/// bytes.
pub(crate) fn data_url(b: &[u8]) -> Result<String, String> {
    let mime = if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if b.starts_with(&[0xff, 0xd8, 0xff]) {
        "image/jpeg"
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        "image/gif"
    } else if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        "image/webp"
    } else {
        return Err("not a PNG, JPEG, WebP or GIF".into());
    };
    let enc = base64::engine::general_purpose::STANDARD.encode(b);
    Ok(format!("data:{mime};base64,{enc}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(lines: &[&str]) -> Vec<Fed> {
        let mut j = Joiner::default();
        lines.iter().map(|l| j.feed(l)).collect()
    }

    #[test]
    fn lines_join() {
        use Fed::*;
        assert_eq!(feed_all(&["hi"]), vec![Message("hi".into())]);
        assert_eq!(
            feed_all(&["one \\", "two\\", "three"]),
            vec![More, More, Message("one \ntwo\nthree".into())]
        );
        assert_eq!(
            feed_all(&["\"\"\"first", "", "  second \\", "end\"\"\" ignored"]),
            vec![
                More,
                More,
                More,
                Message("first\n\n  second \\\nend".into())
            ]
        );
        assert_eq!(
            feed_all(&["\"\"\"", "a", "\"\"\""]),
            vec![More, More, Message("a".into())]
        );
        assert_eq!(
            feed_all(&["\"\"\"inline\"\"\""]),
            vec![Message("inline".into())]
        );
        // A fence inside a continued message is text.
        assert_eq!(
            feed_all(&["a\\", "\"\"\"b"]),
            vec![More, Message("a\n\"\"\"b".into())]
        );
        let mut j = Joiner::default();
        assert_eq!(j.feed("x\\"), More);
        assert!(j.pending());
        j.reset();
        assert!(!j.pending());
        assert_eq!(j.feed("y"), Message("y".into()));
    }

    #[test]
    fn commands() {
        use Command::*;
        assert_eq!(command("hello"), None);
        assert_eq!(
            command("/set system  Be brief.  "),
            Some(Ok(Set(Setting::System("Be brief.".into()))))
        );
        assert_eq!(
            command("/set system"),
            Some(Ok(Set(Setting::System("".into()))))
        );
        assert_eq!(
            command("/set temperature 0.2"),
            Some(Ok(Set(Setting::Param("temperature", Value::from(0.2)))))
        );
        assert_eq!(
            command("/set max_tokens 2000"),
            Some(Ok(Set(Setting::Param("max_tokens", Value::from(2000)))))
        );
        assert_eq!(
            command("/set ignore_eos on"),
            Some(Ok(Set(Setting::Param("ignore_eos", Value::Bool(true)))))
        );
        assert_eq!(
            command("/set model smol:lora"),
            Some(Ok(Set(Setting::Model("smol:lora".into()))))
        );
        assert!(matches!(command("/set max_tokens many"), Some(Err(e)) if e.contains("integer")));
        assert!(matches!(command("/set top_p"), Some(Err(_))));
        assert!(matches!(command("/set colour red"), Some(Err(e)) if e.contains("colour")));
        assert!(matches!(command("/set"), Some(Err(_))));
        assert_eq!(command("/image a b.png"), Some(Ok(Image("a b.png".into()))));
        assert!(matches!(command("/image"), Some(Err(_))));
        assert_eq!(command("/unset top_p"), Some(Ok(Unset("top_p".into()))));
        assert_eq!(command(" /show "), Some(Ok(Show)));
        assert_eq!(command("/clear"), Some(Ok(Clear)));
        assert_eq!(command("/?"), Some(Ok(Help)));
        assert_eq!(command("/bye"), Some(Ok(Bye)));
        assert!(matches!(command("/nope"), Some(Err(e)) if e.contains("/nope")));
    }

    #[test]
    fn settings() {
        let mut s = Settings::default();
        s.apply(Setting::System("Be brief.".into()));
        s.apply(Setting::Param("temperature", Value::from(0.5)));
        let shown = s.show();
        assert!(shown.contains("system: Be brief."), "{shown}");
        assert!(shown.contains("temperature: 0.5"), "{shown}");
        s.apply(Setting::System(String::new()));
        assert_eq!(s.system, None);
        assert!(s.unset("temperature").is_ok());
        assert!(s.unset("temperature").is_err());
        assert!(s.show().contains("the server's defaults"));
    }

    #[test]
    fn images_in_a_message() {
        let is_file = |p: &str| p == "/tmp/cat.png" || p == "b.JPG";
        let (t, found) = image_paths(
            "what is in /tmp/cat.png and 'b.JPG' now, not c.png",
            is_file,
        );
        assert_eq!(found, vec!["/tmp/cat.png", "b.JPG"]);
        assert_eq!(t, "what is in and now, not c.png");
        let (t, found) = image_paths("no images here.png", |_| false);
        assert!(found.is_empty());
        assert_eq!(t, "no images here.png");
    }

    #[test]
    fn data_urls() {
        let png = b"\x89PNG\r\n\x1a\nrest";
        assert!(data_url(png)
            .unwrap()
            .starts_with("data:image/png;base64,iVBORw0KGg"));
        assert!(data_url(&[0xff, 0xd8, 0xff, 0xe0])
            .unwrap()
            .starts_with("data:image/jpeg;base64,"));
        assert!(data_url(b"RIFF\0\0\0\0WEBPVP8 ")
            .unwrap()
            .starts_with("data:image/webp;"));
        assert!(data_url(b"hello").is_err());
    }
}
