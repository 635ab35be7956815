//! The HTTP tests' harness: a real engine on the real default model, the
//! real router on 127.0.0.1:0 (through `steward_server::bind`, as `serve`),
//! a real HTTP client. (Each test binary uses part of it.)
//!
//! The rules the tests keep (docs/TESTING.md): waits poll an observable
//! condition under [`HANG_GUARD`] (a guard against a hang, never a claim
//! about speed); greedy outputs computed in other batch shapes or cache
//! states are compared through `steward_engine::compare` ([`scored`],
//! [`assert_text_agrees`]); exactly only where the computation is provably
//! the same.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use steward_engine::compare::{self, Scored, TIE_NATS};
use steward_engine::{Engine, EngineConfig};

/// How long a test waits for anything the engine or a server must do
/// before it calls it a hang: far past any wait on a loaded machine.
pub const HANG_GUARD: Duration = Duration::from_secs(300);

/// Held by a test while it has dashboard feeds open: their count is one
/// per server (`AppState::open_feeds`), and the tests of this binary run
/// side by side. A holder waits for its feeds to close
/// ([`feeds_closed`]) before it lets go.
pub static DASHBOARD_FEEDS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Polls until the server's dashboard feeds are down to `n` (a dropped
/// feed closes when the server next writes to it).
pub async fn feeds_closed(s: &Server, n: usize) {
    let deadline = Instant::now() + HANG_GUARD;
    while s.state.open_feeds() > n {
        assert!(
            Instant::now() < deadline,
            "dashboard feeds still open: {}",
            s.state.open_feeds()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub struct Server {
    pub base: String,
    pub client: reqwest::Client,
    /// The server's open connections (`steward_http_connections`).
    pub conns: std::sync::Arc<steward_server::conn::ConnStats>,
    /// The server's state (its open dashboard feeds).
    pub state: std::sync::Arc<steward_server::AppState>,
}

pub async fn server_with(api_key: Option<&str>, tweak: impl FnOnce(&mut EngineConfig)) -> Server {
    let opts = steward_server::ServerOptions {
        api_key: api_key.map(str::to_string),
        ..Default::default()
    };
    server_opts(tweak, opts, Default::default()).await
}

/// A server with its HTTP options and connection limits given.
pub async fn server_opts(
    tweak: impl FnOnce(&mut EngineConfig),
    opts: steward_server::ServerOptions,
    conn: steward_server::conn::ConnLimits,
) -> Server {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.model.served_name = "smol".into();
    c.admit.max_seqs = 4;
    c.admit.ctx_per_seq = 512;
    c.step.prompt_budget = 64;
    // Holders park their readers for as long as a test needs the slot: no
    // slow-reader end at 60 s on a loaded machine (a test of that bound
    // sets its own).
    c.deliver.slow_reader_timeout = None;
    tweak(&mut c);
    let engine = Engine::start(c).expect("engine");
    assert!(engine.wait_ready().await);
    let state = steward_server::AppState::with_options(opts);
    state.set_engine(engine);
    let conns = state.conns.clone();
    let listener = steward_server::bind("127.0.0.1:0".parse().unwrap(), None).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(steward_server::serve_forever(listener, state.clone(), conn));
    Server {
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        conns,
        state,
    }
}

/// Serve a state whose engines are already set (a registry of several
/// models, an API key) on 127.0.0.1:0; `key` is sent with every request.
pub async fn serve_state(
    state: std::sync::Arc<steward_server::AppState>,
    key: Option<&str>,
) -> Server {
    let conns = state.conns.clone();
    let listener = steward_server::bind("127.0.0.1:0".parse().unwrap(), None).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(steward_server::serve_forever(
        listener,
        state.clone(),
        Default::default(),
    ));
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(k) = key {
        headers.insert("authorization", format!("Bearer {k}").parse().unwrap());
    }
    Server {
        base: format!("http://{addr}"),
        client: reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap(),
        conns,
        state,
    }
}

/// A registry resolver for files only.
pub fn file_resolver() -> steward_registry::Resolver {
    std::sync::Arc::new(|s: &steward_registry::Source| match s {
        steward_registry::Source::Path(p) => Ok(p.clone()),
        steward_registry::Source::Hub(h) => Err(format!("no hub in this test ({h})")),
    })
}

pub async fn server() -> Server {
    server_with(None, |_| {}).await
}

impl Server {
    pub async fn post(&self, path: &str, body: &str) -> (u16, reqwest::header::HeaderMap, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, headers, v)
    }

    /// Stream and return (concatenated text, every parsed data payload).
    pub async fn stream(&self, path: &str, body: Value) -> (String, Vec<Value>, bool) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        let raw = r.text().await.unwrap();
        let mut text = String::new();
        let mut chunks = Vec::new();
        let mut done = false;
        for ev in raw.split("\n\n").filter(|e| !e.trim().is_empty()) {
            // A keep-alive comment (`: keep-alive`, sent whenever the next
            // token takes longer than the interval: on a loaded machine,
            // any time) is no event.
            if ev.lines().all(|l| l.starts_with(':')) {
                continue;
            }
            let data = ev
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or_else(|| panic!("event without data: {ev:?}"));
            if data == "[DONE]" {
                done = true;
                continue;
            }
            assert!(!done, "data after [DONE]");
            let v: Value = serde_json::from_str(data).unwrap();
            if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
                text.push_str(c);
            }
            if let Some(c) = v["choices"][0]["text"].as_str() {
                text.push_str(c);
            }
            chunks.push(v);
        }
        (text, chunks, done)
    }

    /// A gauge once the engine's stats snapshot has caught up with the
    /// last reply (it is published after the step that ended the request):
    /// `want`, or whatever it still reads after [`HANG_GUARD`].
    pub async fn metric_settled(&self, name: &str, want: f64) -> f64 {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let v = self.metric(name).await;
            if v == want || Instant::now() >= deadline {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Polls `/metrics` until `done` holds for the metric `name`; its
    /// value then. Past [`HANG_GUARD`], fails with `what`.
    pub async fn metric_until(&self, name: &str, what: &str, done: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let v = self.metric(name).await;
            if done(v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{what}: {name} still {v}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// GET `path` and return the body (any status).
    pub async fn get_text(&self, path: &str) -> String {
        self.client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// GET `path` and parse the body as JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        serde_json::from_str(&self.get_text(path).await).unwrap()
    }

    pub async fn metric(&self, name: &str) -> f64 {
        let t = self
            .client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        t.lines()
            .map(unlabel)
            .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_string))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("metric {name} missing"))
    }
}

/// A metrics line without the test model's label (`model="smol"`, or
/// `model_name="smol"` on `vllm:*` series), as
/// it read with one model (whatever its name).
pub fn unlabel(line: &str) -> String {
    let (at, key) = match (line.find("model=\""), line.find("model_name=\"")) {
        (Some(at), _) => (at, 7),
        (None, Some(at)) => (at, 12),
        _ => return line.to_string(),
    };
    let Some(len) = line[at + key..].find('"') else {
        return line.to_string();
    };
    let end = at + key + len + 1;
    if line[..at].ends_with('{') && line[end..].starts_with('}') {
        format!("{}{}", &line[..at - 1], &line[end + 1..])
    } else if line[end..].starts_with(',') {
        format!("{}{}", &line[..at], &line[end + 1..])
    } else {
        line.to_string()
    }
}

pub fn chat_body(content: &str, extra: Value) -> Value {
    let mut b = json!({
        "model": "smol",
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 16,
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

pub fn assert_error(status: u16, v: &Value, want_status: u16, want_code: &str) {
    assert_eq!(status, want_status, "{v}");
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some(), "{v}");
    assert_eq!(e["code"], want_code, "{v}");
}

/// A run's tokens and top logprob rows from an OpenAI response:
/// completions (`choices[0].logprobs.tokens` and `top_logprobs`, asked
/// with `"logprobs": 2`) or chat (`choices[0].logprobs.content[]`, asked
/// with `"logprobs": true, "top_logprobs": 2`).
pub fn scored(v: &Value) -> Scored<String> {
    let lp = &v["choices"][0]["logprobs"];
    if let Some(content) = lp["content"].as_array() {
        return scored_chat(content);
    }
    let tokens = lp["tokens"]
        .as_array()
        .unwrap_or_else(|| panic!("no logprobs.tokens: {v}"));
    Scored {
        tokens: tokens
            .iter()
            .map(|t| t.as_str().unwrap_or("").to_string())
            .collect(),
        top: lp["top_logprobs"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|row| {
                        row.as_object()
                            .map(|o| {
                                o.iter()
                                    .filter_map(|(t, l)| Some((t.clone(), l.as_f64()? as f32)))
                                    .collect()
                            })
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Chat logprob entries (`logprobs.content[]`, whole or gathered from a
/// stream's chunks) as a scored run.
pub fn scored_chat(content: &[Value]) -> Scored<String> {
    let text = |t: &Value| t["token"].as_str().unwrap_or("").to_string();
    Scored {
        tokens: content.iter().map(text).collect(),
        top: content
            .iter()
            .map(|c| {
                c["top_logprobs"]
                    .as_array()
                    .map(|alts| {
                        alts.iter()
                            .filter_map(|a| Some((text(a), a["logprob"].as_f64()? as f32)))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect(),
    }
}

/// A streamed run's logprobs, gathered from its chunks (chat or
/// completions).
pub fn scored_stream(chunks: &[Value]) -> Scored<String> {
    let mut all = Scored::default();
    for c in chunks {
        let lp = &c["choices"][0]["logprobs"];
        if lp.is_null() {
            continue;
        }
        let part = if lp["content"].is_array() {
            scored_chat(lp["content"].as_array().unwrap())
        } else {
            scored(c)
        };
        all.tokens.extend(part.tokens);
        all.top.extend(part.top);
    }
    all
}

/// The greedy rule (`compare::assert_greedy_agree`) for a run whose
/// tokens were not listed (it asked for no logprobs): its text `got`
/// against the reference's text and scored tokens. Equal texts agree;
/// otherwise `got` is split along the reference's tokens up to where it
/// leaves them, and there it must go on with the reference's runner-up at
/// a near-tie.
pub fn assert_text_agrees(got: &str, want_text: &str, want: &Scored<String>, what: &str) {
    if got == want_text {
        return;
    }
    let mut toks: Vec<String> = Vec::new();
    let mut rest = got;
    for (i, w) in want.tokens.iter().enumerate() {
        if let Some(r) = rest.strip_prefix(w.as_str()) {
            toks.push(w.clone());
            rest = r;
            continue;
        }
        let mut row: Vec<&(String, f32)> = want
            .top
            .get(i)
            .map(|r| r.iter().collect())
            .unwrap_or_default();
        row.sort_by(|a, b| b.1.total_cmp(&a.1));
        let next = match row.get(1) {
            Some((alt, _)) if !alt.is_empty() && rest.starts_with(alt.as_str()) => alt.clone(),
            _ => rest.to_string(),
        };
        toks.push(next);
        rest = "";
        break;
    }
    if !rest.is_empty() {
        toks.push(rest.to_string());
    }
    compare::assert_greedy_agree(&toks, want, TIE_NATS, what);
}

/// The TCP port a child process listens on (it was started with `--port
/// 0`, so the OS chose it), from /proc: None until it listens.
pub fn listening_port(pid: u32) -> Option<u16> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    for table in ["tcp", "tcp6"] {
        let Ok(t) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in t.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, st (0A: LISTEN), inode.
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                let port = f[1].rsplit(':').next()?;
                return u16::from_str_radix(port, 16).ok();
            }
        }
    }
    None
}

/// Waits (under [`HANG_GUARD`]) for a child started with `--port 0` to
/// listen; its port. Fails at once if it exits first.
pub fn wait_for_port(child: &mut std::process::Child) -> u16 {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        if let Some(port) = listening_port(child.id()) {
            return port;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the server exited ({status}) before it listened");
        }
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A file or directory a script makes (`scripts/test-fixtures.sh`, the
/// venv of `scripts/prefetch.sh`): its path when it is there; when it is
/// not, `None` after one line naming the command that makes it (the test
/// then returns: skipped), or a failure with `STEWARD_REQUIRE_FIXTURES=1`
/// (scripts/test.sh sets it: CI never skips).
pub fn fixture(path: impl Into<std::path::PathBuf>, make: &str) -> Option<std::path::PathBuf> {
    let path = path.into();
    if path.exists() {
        return Some(path);
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let shown = path
        .strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string();
    let why = format!("{shown} missing; run {make} (scripts/test.sh does)");
    assert!(!require_fixtures(), "{why}");
    // Straight to stderr, past the harness's capture: every run shows it.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
    None
}

/// `STEWARD_REQUIRE_FIXTURES=1`: a missing fixture fails its test.
pub fn require_fixtures() -> bool {
    std::env::var_os("STEWARD_REQUIRE_FIXTURES").is_some_and(|v| v == "1")
}
