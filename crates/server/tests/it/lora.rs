//! LoRA adapters on the real default model: random adapters written by
//! `scripts/gen-random-lora.py` (the `gguf` package) change greedy output;
//! scale 0 is the base model; state computed under one adapter set is
//! never reused under another; traffic of several adapter sets mixed keeps
//! every stream's output equal to its solo run; adapters are listed as
//! models of their own and load while the server runs.
//!
//! Runs of one request in other cache states (a prefix-cache hit against
//! the run that computed it) or batch shapes are compared through
//! `steward_engine::compare`: every compared request asks for its top two
//! logprobs, and two runs may part only at a near-tie of the reference.

use crate::common;

use std::path::PathBuf;

use serde_json::{json, Value};
use steward_engine::compare::{self, TIE_NATS};
use steward_engine::{AdapterSpec, EngineConfig};
use steward_registry::{ModelSpec, Options, Registry, Source};

/// A random adapter for `base` (written once, kept in target/lora; None:
/// skipped without the project venv, its `gguf` package).
fn adapter(base: &std::path::Path, seed: u32) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("target/lora");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("smol-q4_1-seed{seed}.gguf"));
    if !out.exists() {
        let venv = root.join("target/pyenv/bin/python");
        if !common::require_fixtures() {
            common::fixture(&venv, "scripts/prefetch.sh")?;
        }
        let python = if venv.exists() {
            venv
        } else {
            "python3".into()
        };
        // Written under a name of this process's own, then renamed.
        let tmp = out.with_extension(format!("tmp{}", std::process::id()));
        let st = std::process::Command::new(python)
            .arg(root.join("scripts/gen-random-lora.py"))
            .arg(base)
            .arg(&tmp)
            .args(["--seed", &seed.to_string()])
            .status()
            .expect("run scripts/gen-random-lora.py");
        assert!(st.success(), "gen-random-lora.py failed");
        std::fs::rename(&tmp, &out).unwrap();
    }
    Some(out)
}

async fn complete(s: &common::Server, body: Value) -> Value {
    let (st, _, v) = s.post("/v1/completions", &body.to_string()).await;
    assert_eq!(st, 200, "{v}");
    v
}

/// A greedy completion with its top two logprobs (every compared run).
fn body(model: &str, prompt: &str, n: u32) -> Value {
    json!({"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 2})
}

fn text(v: &Value) -> String {
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

/// `got`'s tokens against the reference run `want` (`compare`'s greedy
/// rule).
fn same_up_to_a_tie(got: &Value, want: &Value, what: &str) {
    let got = common::scored(got).tokens;
    compare::assert_greedy_agree(&got, &common::scored(want), TIE_NATS, what);
}

fn cached(v: &Value) -> u64 {
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lora_adapters_on_the_default_model() {
    let base = steward_engine::fetch::ensure_default_model().unwrap();
    let Some(a) = adapter(&base, 0) else { return };
    let Some(b) = adapter(&base, 1) else { return };
    let mut c = EngineConfig::new(base.clone());
    c.admit.max_seqs = 4;
    c.admit.ctx_per_seq = 512;
    c.step.prompt_budget = 64;
    c.admit.prefix_host_bytes = 0;
    c.model.adapters = vec![
        AdapterSpec {
            name: "a".into(),
            path: a.clone(),
            scale: 1.0,
        },
        AdapterSpec {
            name: "b".into(),
            path: b,
            scale: 1.0,
        },
    ];
    let reg = Registry::new(
        vec![ModelSpec {
            name: "smol".into(),
            source: Source::Path(base),
            config: c,
            pinned: true,
        }],
        Options {
            budget: None,
            idle_unload: None,
            retry_after_s: 10,
        },
        common::file_resolver(),
    );
    assert!(reg.preload().await.is_empty());
    // (Admin routes need an API key.)
    let state = steward_server::AppState::with_options(steward_server::ServerOptions {
        api_key: Some("k".into()),
        ..Default::default()
    });
    state.set_registry(reg.clone());
    let s = common::serve_state(state, Some("k")).await;

    let p = "The capital of France is";
    let base_run = complete(&s, body("smol", p, 12)).await;
    let base_out = text(&base_run);
    let a_out = complete(&s, body("smol:a", p, 12)).await;
    assert_eq!(a_out["model"], "smol:a");
    let a_out = text(&a_out);
    let b_run = complete(&s, body("smol:b", p, 12)).await;
    let b_out = text(&b_run);
    assert_ne!(a_out, base_out, "adapter a changes greedy output");
    assert_ne!(b_out, base_out);
    assert_ne!(a_out, b_out);
    // Scale 0 is the base model; the `lora` field by name or id. (Each is
    // the same adapter set as a run before it, whose cached prompt it
    // reuses: the reference's tokens up to a near-tie.)
    let mut zero = body("smol:a", p, 12);
    zero["lora"] = json!([{"name": "a", "scale": 0.0}]);
    same_up_to_a_tie(&complete(&s, zero).await, &base_run, "scale 0 vs the base");
    let mut by_id = body("smol", p, 12);
    by_id["lora"] = json!([{"id": 1, "scale": 1.0}]);
    same_up_to_a_tie(&complete(&s, by_id).await, &b_run, "by id vs by name");
    let mut bad = body("smol", p, 4);
    bad["lora"] = json!([{"id": 7}]);
    let (st, _, e) = s.post("/v1/completions", &bad.to_string()).await;
    common::assert_error(st, &e, 400, "invalid_value");
    let (st, _, e) = s
        .post("/v1/completions", &body("smol:zzz", p, 4).to_string())
        .await;
    common::assert_error(st, &e, 404, "model_not_found");

    // No prefix reuse across adapter sets: a long prompt under the base,
    // then under `a` (nothing cached, its own output), then under `a`
    // again (cached).
    let long = "Once upon a time, in a small village by the sea, there lived an old fisherman who told stories to the children every evening. ".repeat(4);
    let first = complete(&s, body("smol", &long, 8)).await;
    let again = complete(&s, body("smol", &long, 8)).await;
    assert!(
        cached(&again) > 32,
        "the base reuses its own state: {again}"
    );
    same_up_to_a_tie(&again, &first, "the base, cached vs computed");
    let under_a = complete(&s, body("smol:a", &long, 8)).await;
    assert_eq!(cached(&under_a), 0, "state reused across adapter sets");
    let under_a2 = complete(&s, body("smol:a", &long, 8)).await;
    assert!(cached(&under_a2) > 32, "{under_a2}");
    same_up_to_a_tie(&under_a2, &under_a, "under a, cached vs computed");
    assert_ne!(text(&under_a), text(&first));

    // Mixed traffic: four sets at once, each output equal to its solo run.
    let sets = [
        body("smol", p, 16),
        body("smol:a", p, 16),
        body("smol:b", p, 16),
        {
            let mut v = body("smol:a", p, 16);
            v["lora"] = json!([{"name": "b", "scale": 0.5}]);
            v
        },
    ];
    let mut solo = Vec::new();
    for v in &sets {
        solo.push(complete(&s, v.clone()).await);
    }
    let mixed = futures::future::join_all(sets.iter().map(|v| complete(&s, v.clone()))).await;
    for (i, (m, want)) in mixed.iter().zip(&solo).enumerate() {
        same_up_to_a_tie(m, want, &format!("set {i}: mixed traffic vs its solo run"));
    }

    // Listed as models of their own; gateways' metric.
    let list = s.get_json("/v1/models").await;
    let card = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "smol:a")
        .cloned()
        .expect("smol:a listed");
    assert_eq!(card["parent"], "smol");
    assert_eq!(card["adapter"]["id"], 0);
    let m = s.get_text("/metrics").await;
    assert!(
        m.contains("vllm:lora_requests_info{model_name=\"smol\",max_lora=\"2\""),
        "{m}"
    );

    // Loaded while running: the same file at half scale is `a` at 0.5.
    let r = s
        .client
        .post(format!("{}/admin/models/smol/adapters", s.base))
        .json(&json!({"name": "half", "path": a, "scale": 0.5}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let half = complete(&s, body("smol:half", p, 12)).await;
    let mut a_half = body("smol", p, 12);
    a_half["lora"] = json!([{"name": "a", "scale": 0.5}]);
    same_up_to_a_tie(&complete(&s, a_half).await, &half, "a at 0.5 vs half");
    let r = s
        .client
        .post(format!("{}/admin/models/smol/adapters", s.base))
        .json(&json!({"name": "missing", "path": "/no/such/adapter.gguf"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    reg.stop_all().await;
}
