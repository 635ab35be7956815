//! The terminal: `steward top URL` (`top`: the dashboard's live engine
//! view, drawn by `view` from the `/dashboard/events` feed that `feed`
//! reads and keeps) and `steward chat [URL]` (`chat`: a streaming chat,
//! its pure input rules in `input`, the reply's stream in `stream`, the
//! default model started beside it by `local` when no URL is given).
//! `sse` reads Server-Sent Events for both.
//!
//! Both are HTTP clients of a server (reqwest): they use nothing of the
//! server's internals, so they work against any Steward, and `chat`
//! against any OpenAI-compatible server.

use std::time::Duration;

use clap::Args;

mod chat;
mod feed;
mod input;
mod local;
mod sse;
mod stream;
mod top;
mod view;

pub(crate) use chat::chat;
pub(crate) use top::top;

#[derive(Args)]
pub(crate) struct TopArgs {
    /// The server, e.g. http://127.0.0.1:8080.
    url: String,
    /// The server's API key (`Authorization: Bearer`).
    #[arg(long, env = "STEWARD_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Print one plain-text frame (the first snapshot) to stdout and exit.
    #[arg(long)]
    once: bool,
    /// The feed's tick, milliseconds (100..=5000).
    #[arg(long, default_value_t = 500)]
    interval_ms: u64,
}

#[derive(Args)]
pub(crate) struct ChatArgs {
    /// The server, e.g. http://127.0.0.1:8080. Without one, the default
    /// model is served here, on a free loopback port, for this chat.
    url: Option<String>,
    /// The `model` field (default: the first of the server's /v1/models).
    #[arg(long)]
    model: Option<String>,
    /// The server's API key (`Authorization: Bearer`).
    #[arg(long, env = "STEWARD_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The system prompt (`/set system` changes it).
    #[arg(long)]
    system: Option<String>,
    /// Arguments for `steward serve` when no URL is given, after `--`
    /// (e.g. `-- --model m.gguf --mmproj p.gguf`; not --host, --port).
    #[arg(last = true)]
    serve_args: Vec<String>,
}

/// A server: its base URL (no trailing `/`, no `/v1`) and its key.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    pub(crate) base: String,
    key: Option<String>,
    client: reqwest::Client,
}

impl Endpoint {
    pub(crate) fn new(url: &str, key: Option<String>) -> anyhow::Result<Endpoint> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(Endpoint {
            base: base_url(url),
            key: key.filter(|k| !k.is_empty()),
            client,
        })
    }

    pub(crate) fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.auth(self.client.get(format!("{}{path}", self.base)))
    }

    pub(crate) fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.auth(self.client.post(format!("{}{path}", self.base)))
    }

    fn auth(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }
}

/// `host:port`, `http://host:port/`, `http://host:port/v1` → the base.
pub(crate) fn base_url(url: &str) -> String {
    let u = url.trim().trim_end_matches('/');
    let u = u.strip_suffix("/v1").unwrap_or(u);
    if u.starts_with("http://") || u.starts_with("https://") {
        u.to_string()
    } else {
        format!("http://{u}")
    }
}

/// An error reply's message: OpenAI's `{"error": {"message"}}`, else the
/// text's start.
pub(crate) fn error_message(status: reqwest::StatusCode, text: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    match v["error"]["message"].as_str() {
        Some(m) => format!("{status}: {m}"),
        None if text.trim().is_empty() => status.to_string(),
        None => format!("{status}: {}", text.chars().take(300).collect::<String>()),
    }
}

/// One worker thread: the terminal commands wait on one thing at a time,
/// but the HTTP connections' tasks must run between their calls too (a
/// reply dropped by Ctrl-C closes its connection only when its task runs,
/// while `chat` is back in the line editor).
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(base_url("127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(base_url("http://h:1/"), "http://h:1");
        assert_eq!(base_url("https://h/v1/"), "https://h");
        assert_eq!(base_url(" http://h:2/v1 "), "http://h:2");
    }

    #[test]
    fn error_messages() {
        let s = reqwest::StatusCode::UNAUTHORIZED;
        assert_eq!(
            error_message(s, r#"{"error":{"message":"bad key"}}"#),
            "401 Unauthorized: bad key"
        );
        assert_eq!(error_message(s, ""), "401 Unauthorized");
        assert_eq!(error_message(s, "nope"), "401 Unauthorized: nope");
    }
}
