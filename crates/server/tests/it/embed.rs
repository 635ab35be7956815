//! Embeddings and rerank through the real runtime: all-MiniLM-L6-v2
//! (converted by scripts/minilm-to-gguf.py into target/embed-ggufs, as
//! scripts/test.sh does first) and a random-weight BERT reranker (shape
//! only). Equality with the independent numpy reference is
//! scripts/agent_api_check.py's; here: batching does not change a vector,
//! the request path's refusals, cancellation of an abandoned request, the
//! ledger of a model without KV memory, and a reranker's scores.

use crate::common;

use std::time::Duration;

use serde_json::{json, Value};
use steward_engine::{Engine, EngineConfig};

fn gguf(name: &str) -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/embed-ggufs")
        .join(name);
    common::fixture(p, "scripts/test-fixtures.sh")
}

async fn serve(path: std::path::PathBuf, name: &str) -> common::Server {
    let mut c = EngineConfig::new(path);
    c.model.served_name = name.into();
    c.admit.max_seqs = 8;
    c.model.n_threads = 2;
    c.model.n_threads_batch = 2;
    let engine = Engine::start(c).expect("engine");
    assert!(engine.wait_ready().await);
    let state = steward_server::AppState::with_options(Default::default());
    state.set_engine(engine);
    common::serve_state(state, None).await
}

fn vectors(v: &Value) -> Vec<Vec<f64>> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

fn cos(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    dot / (a.iter().map(|x| x * x).sum::<f64>().sqrt()
        * b.iter().map(|x| x * x).sum::<f64>().sqrt())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minilm_embeddings_batching_refusals_cancellation_and_ledger() {
    let Some(path) = gguf("minilm.gguf") else {
        return;
    };
    let s = serve(path, "minilm").await;
    let texts = [
        "A man is eating food.",
        "The girl is carrying a baby.",
        "Unrelated: volcanoes erupt.",
    ];
    let (st, _, all) = s
        .post(
            "/v1/embeddings",
            &json!({"model": "minilm", "input": texts}).to_string(),
        )
        .await;
    assert_eq!(st, 200, "{all}");
    let all = vectors(&all);
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].len(), 384);
    for (i, t) in texts.iter().enumerate() {
        let (_, _, one) = s
            .post("/v1/embeddings", &json!({"input": t}).to_string())
            .await;
        let one = &vectors(&one)[0];
        let c = cos(one, &all[i]);
        assert!(
            c > 0.99999,
            "input {i}: alone vs in a batch of 3, cosine {c}"
        );
        let norm: f64 = one.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "normalised: {norm}");
    }
    assert!(
        cos(&all[0], &all[1]) < 0.5,
        "unrelated sentences are not near"
    );

    // Refusals in OpenAI's shape.
    for (body, status, code) in [
        (json!({"input": []}), 400, "invalid_value"),
        (json!({"input": ["ok", ""]}), 400, "invalid_value"),
        (json!({"input": [[1, 2, 999999]]}), 400, "invalid_value"),
        (json!({"input": vec!["x"; 2049]}), 400, "invalid_value"),
        (
            json!({"input": "word ".repeat(600)}),
            400,
            "context_length_exceeded",
        ),
        (json!({"input": "x", "dimensions": 0}), 400, "invalid_value"),
        (
            json!({"model": "minilm", "messages": [{"role": "user", "content": "hi"}]}),
            400,
            "model_not_generative",
        ),
    ] {
        let path = if body.get("messages").is_some() {
            "/v1/chat/completions"
        } else {
            "/v1/embeddings"
        };
        let (st, _, v) = s.post(path, &body.to_string()).await;
        common::assert_error(st, &v, status, code);
    }

    // The ledger: weights and compute, no KV pool.
    let l = s.get_json("/debug/ledger").await;
    assert_eq!(l["kv_pool"], json!(0), "{l}");
    assert!(l["weights"].as_u64().unwrap() > 10 << 20, "{l}");

    // An abandoned request: the client goes while 2,048 inputs queue (once
    // the owner has begun computing them: minutes of work); the owner
    // drops it instead of computing the rest.
    let before = s.metric("steward_requests_cancelled_total").await;
    let steps_before = s.metric("steward_steps_total").await;
    let big: Vec<String> = (0..2048)
        .map(|i| format!("sentence number {i} about nothing {}", "much ".repeat(40)))
        .collect();
    let body = json!({"input": big}).to_string();
    let client = s.client.clone();
    let url = format!("{}/v1/embeddings", s.base);
    let req = tokio::spawn(async move {
        client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
    });
    s.metric_until("steward_steps_total", "the big request computes", |v| {
        v > steps_before
    })
    .await;
    req.abort();
    let after = s
        .metric_settled("steward_requests_cancelled_total", before + 1.0)
        .await;
    assert_eq!(after, before + 1.0, "the abandoned request was cancelled");
    // (The cancel is counted in the owner's iteration that drops the
    // request, after its last step: no later step can be waited for, only
    // looked for a while.)
    let steps = s.metric("steward_steps_total").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        s.metric("steward_steps_total").await,
        steps,
        "no step after the cancel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reranker_scores_pairs_and_embeds_nothing() {
    let Some(path) = gguf("reranker-random.gguf") else {
        return;
    };
    let s = serve(path, "rr").await;
    let docs = [
        "first document",
        "second one",
        "a third, longer document about things",
    ];
    let (st, _, v) = s
        .post(
            "/v1/rerank",
            &json!({"query": "which?", "documents": docs, "top_n": 2}).to_string(),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 2);
    let scores: Vec<f64> = r
        .iter()
        .map(|x| x["relevance_score"].as_f64().unwrap())
        .collect();
    assert!(scores[0] >= scores[1], "sorted: {scores:?}");
    // The same pair scores the same alone.
    let i = r[0]["index"].as_u64().unwrap() as usize;
    let (_, _, one) = s
        .post(
            "/rerank",
            &json!({"query": "which?", "documents": [docs[i]]}).to_string(),
        )
        .await;
    let alone = one["results"][0]["relevance_score"].as_f64().unwrap();
    assert!((alone - scores[0]).abs() < 1e-4, "{alone} vs {}", scores[0]);
    let (st, _, v) = s
        .post("/v1/embeddings", &json!({"input": "x"}).to_string())
        .await;
    common::assert_error(st, &v, 400, "model_not_embedding");
    let (st, _, v) = s
        .post(
            "/v1/rerank",
            &json!({"query": "", "documents": ["a"]}).to_string(),
        )
        .await;
    common::assert_error(st, &v, 400, "invalid_request");
}
