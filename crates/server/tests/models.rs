//! Several models in one server, on real models through the real runtime:
//! SmolLM2-135M (the default model) and Gemma 3 270M served side by side,
//! each request answered by its own model; a third model that does not
//! fit next to two pinned ones refused with a clear 503; a model that
//! fails to load shown `failed` while the others serve; an idle model
//! unloaded, its memory returned (ledger and RSS), and loaded again on
//! the next request, whose stream pings while it loads.
//!
//! One test function: the RSS checks need no other test's models loaded
//! in the same process meanwhile.
//!
//! A model's runs of one prompt in other cache states are compared through
//! `steward_engine::compare` (the reference asks for its top two
//! logprobs); waits poll under `common::HANG_GUARD`.

#[path = "it/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::HANG_GUARD;
use serde_json::{json, Value};
use steward_engine::compare::{self, TIE_NATS};
use steward_engine::{Engine, EngineConfig};
use steward_registry::{ModelSpec, Options, Registry, Source};

fn config(path: std::path::PathBuf) -> EngineConfig {
    let mut c = EngineConfig::new(path);
    c.admit.max_seqs = 2;
    c.admit.ctx_per_seq = 512;
    c.step.prompt_budget = 64;
    c.admit.prefix_host_bytes = 0;
    c.admit.checkpoint_bytes = 0;
    c.model.n_threads = 2;
    c.model.n_threads_batch = 2;
    c
}

fn spec(name: &str, path: std::path::PathBuf, pinned: bool) -> ModelSpec {
    ModelSpec {
        name: name.into(),
        source: Source::Path(path.clone()),
        config: config(path),
        pinned,
    }
}

async fn serve(reg: Arc<Registry>) -> common::Server {
    let state = steward_server::AppState::with_options(Default::default());
    state.set_registry(reg);
    common::serve_state(state, None).await
}

async fn complete(s: &common::Server, model: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let body = json!({"model": model, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0});
    s.post("/v1/completions", &body.to_string()).await
}

/// `complete` with the top two logprobs of every token (a run compared to
/// another), answered 200.
async fn complete_scored(s: &common::Server, model: Option<&str>) -> Value {
    let mut body = json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0, "logprobs": 2});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    let (st, _, v) = s.post("/v1/completions", &body.to_string()).await;
    assert_eq!(st, 200, "{v}");
    v
}

/// `got`'s tokens against the reference run `want` (`compare`).
fn agrees(got: &Value, want: &Value, what: &str) {
    let got = common::scored(got).tokens;
    compare::assert_greedy_agree(&got, &common::scored(want), TIE_NATS, what);
}

async fn models(s: &common::Server) -> Vec<Value> {
    let v = s.get_json("/v1/models").await;
    v["data"].as_array().unwrap().clone()
}

async fn state_of(s: &common::Server, id: &str) -> String {
    models(s)
        .await
        .iter()
        .find(|m| m["id"] == id)
        .map(|m| m["status"]["value"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

fn rss() -> u64 {
    steward_engine::memory::rss_bytes().unwrap()
}

fn text(v: &Value) -> String {
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_models_in_one_server() {
    let smol = steward_engine::fetch::ensure_default_model().unwrap();
    let gemma = steward_engine::fetch::ensure_known_model("gemma3-270m").unwrap();
    // A third model: the default model in another weight format.
    let third = steward_engine::fetch::ensure_default_model_as(
        Some(steward_engine::model::WeightFormat::parse("q8_0").unwrap()),
        2,
    )
    .unwrap();
    let need = |p: &std::path::PathBuf| Engine::load(config(p.clone())).unwrap().full_need();
    let (n_smol, n_gemma, n_third) = (need(&smol), need(&gemma), need(&third));
    // Room for the two pinned models and half the third.
    let budget = n_smol + n_gemma + n_third / 2;

    // --- Two pinned models, a third that does not fit, a broken one.
    let reg = Registry::new(
        vec![
            spec("smol", smol.clone(), true),
            spec("gemma", gemma.clone(), true),
            spec("third", third.clone(), false),
            spec("broken", "/definitely/not/here.gguf".into(), false),
        ],
        Options {
            budget: Some(budget),
            idle_unload: None,
            retry_after_s: 10,
        },
        common::file_resolver(),
    );
    assert!(reg.preload().await.is_empty());
    let s = serve(reg.clone()).await;
    let a = complete_scored(&s, Some("smol")).await;
    let b = complete_scored(&s, Some("gemma")).await;
    assert_eq!(a["model"], "smol");
    assert_eq!(b["model"], "gemma");
    // Their own tokenizers: the same text is a different number of tokens.
    assert_ne!(text(&a), text(&b));
    assert_ne!(
        a["usage"]["prompt_tokens"], b["usage"]["prompt_tokens"],
        "{a} {b}"
    );
    // No `model`: the default (its prompt from smol's cache).
    let d = complete_scored(&s, None).await;
    assert_eq!(d["model"], "smol");
    agrees(&d, &a, "the default vs smol");
    // The third does not fit next to the two pinned ones.
    let (st, h, e) = complete(&s, "third").await;
    common::assert_error(st, &e, 503, "model_does_not_fit");
    assert!(h.contains_key("retry-after"));
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("pinned") && msg.contains("smol") && msg.contains("gemma"),
        "{msg}"
    );
    assert_eq!(state_of(&s, "third").await, "unloaded");
    // The broken one is `failed`, with its reason; the others still serve.
    let (st, _, e) = complete(&s, "broken").await;
    common::assert_error(st, &e, 503, "model_failed");
    let list = models(&s).await;
    let broken = list.iter().find(|m| m["id"] == "broken").unwrap();
    assert_eq!(broken["status"]["value"], "failed");
    assert!(broken["status"]["error"]
        .as_str()
        .unwrap()
        .contains("not found"));
    let again = complete_scored(&s, Some("gemma")).await;
    agrees(&again, &b, "gemma again");
    // An unknown model is a 404 in OpenAI's shape; one model's card.
    let (st, _, e) = complete(&s, "nope").await;
    common::assert_error(st, &e, 404, "model_not_found");
    let one = s
        .client
        .get(format!("{}/v1/models/gemma", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(one.status(), 200);
    assert_eq!(
        one.json::<Value>().await.unwrap()["status"]["value"],
        "loaded"
    );
    let one = s
        .client
        .get(format!("{}/v1/models/nope", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(one.status(), 404);
    // Admin routes are off on a server without an API key.
    let (st, _, e) = s.post("/admin/models/third/load", "{}").await;
    common::assert_error(st, &e, 403, "admin_disabled");
    // Metrics carry the model.
    let m = s.get_text("/metrics").await;
    for want in [
        "steward_requests_running{model=\"smol\"}",
        "steward_requests_running{model=\"gemma\"}",
        "steward_model_state{model=\"broken\",state=\"failed\"} 1",
        "steward_model_state{model=\"third\",state=\"unloaded\"} 1",
    ] {
        assert!(m.contains(want), "{want} missing");
    }
    reg.stop_all().await;
    drop(s);

    // --- An idle model is unloaded and its memory returned.
    let reg = Registry::new(
        vec![
            spec("smol", smol.clone(), true),
            spec("gemma", gemma.clone(), false),
        ],
        Options {
            budget: None,
            idle_unload: Some(Duration::from_secs(2)),
            retry_after_s: 10,
        },
        common::file_resolver(),
    );
    assert!(reg.preload().await.is_empty());
    tokio::spawn(reg.clone().run_idle_unloader());
    let s = serve(reg.clone()).await;
    assert_eq!(state_of(&s, "gemma").await, "unloaded");
    let before = rss();
    // The first request loads it; streamed, it gets keep-alive pings while
    // it waits. It goes on (400 tokens, no end-of-generation) while the
    // memory is read, so the model is busy, not idle, until its client
    // leaves.
    let mut r = s
        .client
        .post(format!("{}/v1/completions", s.base))
        .json(
            &json!({"model": "gemma", "prompt": "The capital of France is", "max_tokens": 400,
            "ignore_eos": true, "temperature": 0, "stream": true, "logprobs": 2}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let want = common::scored(&b);
    let mut bytes = Vec::new();
    let (raw, streamed) = loop {
        bytes.extend_from_slice(&r.chunk().await.unwrap().expect("the stream ended early"));
        let raw = String::from_utf8_lossy(&bytes).into_owned();
        let events = &raw[..raw.rfind("\n\n").map_or(0, |i| i + 2)];
        let chunks: Vec<Value> = events
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect();
        let got = common::scored_stream(&chunks);
        if got.tokens.len() >= want.tokens.len() {
            break (raw, got);
        }
    };
    assert!(raw.starts_with(": loading model"), "{raw}");
    compare::assert_greedy_agree(
        &streamed.tokens[..want.tokens.len()],
        &want,
        TIE_NATS,
        "gemma loaded alone vs beside smol",
    );
    let loaded_rss = rss();
    let ledger = s.get_json("/debug/ledger").await;
    let gemma_weights = ledger["models"]["gemma"]["weights"].as_u64().unwrap();
    assert!(gemma_weights > 100 << 20, "{ledger}");
    assert!(
        loaded_rss > before + gemma_weights / 2,
        "loading gemma raised RSS by {} MiB",
        (loaded_rss.saturating_sub(before)) >> 20
    );
    drop(r);
    // Idle for 2 s once its client left: unloaded, and its memory returned.
    let t = Instant::now();
    while state_of(&s, "gemma").await != "unloaded" {
        assert!(t.elapsed() < HANG_GUARD, "never unloaded");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let t = Instant::now();
    loop {
        let after = rss();
        if after + gemma_weights / 2 < loaded_rss {
            break;
        }
        assert!(
            t.elapsed() < HANG_GUARD,
            "RSS {} MiB loaded, {} MiB after the unload (weights {} MiB)",
            loaded_rss >> 20,
            after >> 20,
            gemma_weights >> 20
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ledger = s.get_json("/debug/ledger").await;
    assert!(ledger["models"].get("gemma").is_none(), "{ledger}");
    assert!(ledger["models"].get("smol").is_some());
    // The next request loads it again.
    let v = complete_scored(&s, Some("gemma")).await;
    agrees(&v, &b, "gemma loaded again");
    let card = models(&s)
        .await
        .into_iter()
        .find(|m| m["id"] == "gemma")
        .unwrap();
    assert_eq!(card["status"]["loads"], 2);
    assert_eq!(card["status"]["unloads"], 1);
    reg.stop_all().await;
}
