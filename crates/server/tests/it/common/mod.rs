//! The HTTP tests' harness: a real engine on the real default model, the
//! real router on 127.0.0.1:0 (through `steward_server::bind`, as `serve`),
//! a real HTTP client. (Each test binary uses part of it.)
#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use steward_engine::{Engine, EngineConfig};

pub struct Server {
    pub base: String,
    pub client: reqwest::Client,
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
    c.served_name = "smol".into();
    c.max_seqs = 4;
    c.ctx_per_seq = 512;
    c.prompt_budget = 64;
    tweak(&mut c);
    let engine = Engine::start(c).expect("engine");
    assert!(engine.wait_ready().await);
    let state = steward_server::AppState::with_options(opts);
    state.set_engine(engine);
    let listener = steward_server::bind("127.0.0.1:0".parse().unwrap(), None).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(steward_server::serve_forever(listener, state, conn));
    Server {
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
    }
}

/// Serve a state whose engines are already set (a registry of several
/// models, an API key) on 127.0.0.1:0; `key` is sent with every request.
pub async fn serve_state(
    state: std::sync::Arc<steward_server::AppState>,
    key: Option<&str>,
) -> Server {
    let listener = steward_server::bind("127.0.0.1:0".parse().unwrap(), None).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(steward_server::serve_forever(
        listener,
        state,
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
    /// `want`, or whatever it still reads after 5 s.
    pub async fn metric_settled(&self, name: &str, want: f64) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let v = self.metric(name).await;
            if v == want || Instant::now() >= deadline {
                return v;
            }
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
