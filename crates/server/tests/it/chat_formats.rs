//! The [2/8] request surface on the default model through the real runtime:
//! template fields, prefill, reasoning read back whole and streamed, and
//! the introspection endpoints.

use crate::common;

use common::{assert_error, chat_body, server, server_with};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_fields_are_checked() {
    let s = server().await;
    for (extra, param) in [
        (json!({"chat_template_kwargs": "x"}), "chat_template_kwargs"),
        (json!({"reasoning_effort": "extreme"}), "reasoning_effort"),
        (json!({"enable_thinking": "yes"}), "enable_thinking"),
        (json!({"reasoning_format": 3}), "reasoning_format"),
        (json!({"add_generation_prompt": 1}), "add_generation_prompt"),
    ] {
        let (st, _, v) = s
            .post(
                "/v1/chat/completions",
                &chat_body("hi", extra.clone()).to_string(),
            )
            .await;
        assert_error(st, &v, 400, "invalid_value");
        assert_eq!(v["error"]["param"], param, "{extra}: {v}");
    }
    // A kwarg may not replace what Steward passes itself.
    let (st, _, v) = s
        .post(
            "/apply-template",
            &chat_body("hi", json!({"chat_template_kwargs": {"messages": []}})).to_string(),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    // Both flags at once: transformers refuses, so does Steward.
    let body = json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Su"}],
        "add_generation_prompt": true, "continue_final_message": true});
    let (st, _, v) = s.post("/apply-template", &body.to_string()).await;
    assert_eq!(st, 400, "{v}");
    // Unknown variant names are refused.
    let (st, _, v) = s
        .post(
            "/apply-template",
            &chat_body("hi", json!({"chat_template_name": "rag"})).to_string(),
        )
        .await;
    assert_eq!(st, 400, "{v}");
}

/// No prefix cache: the streamed and `reasoning_format: none` runs compute
/// alone in the shapes of the whole one, so they read the same text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefill_continues_and_reasoning_is_read_back() {
    let s = server_with(None, |c| c.admit.prefix_cache = false).await;
    // A final assistant message is continued, not closed.
    let body = json!({"messages": [{"role": "user", "content": "Name a color."}, {"role": "assistant", "content": "My favourite color is"}]});
    let (st, _, v) = s.post("/apply-template", &body.to_string()).await;
    assert_eq!(st, 200, "{v}");
    assert!(
        v["prompt"]
            .as_str()
            .unwrap()
            .ends_with("<|im_start|>assistant\nMy favourite color is"),
        "{v}"
    );
    // A prefill that opens the reasoning block: what follows is reasoning,
    // whole and streamed alike.
    let think = json!({"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "<think>"}],
        "max_tokens": 12, "temperature": 0});
    let (st, _, v) = s.post("/v1/chat/completions", &think.to_string()).await;
    assert_eq!(st, 200, "{v}");
    let m = &v["choices"][0]["message"];
    let reasoning = m["reasoning_content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!reasoning.is_empty(), "{v}");
    assert!(
        !m["content"].as_str().unwrap_or("").contains("<think>"),
        "{v}"
    );
    let mut sb = think.clone();
    sb["stream"] = json!(true);
    let (content, chunks, done) = s.stream("/v1/chat/completions", sb).await;
    assert!(done);
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(streamed, reasoning);
    assert_eq!(content, m["content"].as_str().unwrap_or(""));
    // reasoning_format none: the same text stays in content.
    let mut raw = think.clone();
    raw["reasoning_format"] = json!("none");
    let (_, _, v) = s.post("/v1/chat/completions", &raw.to_string()).await;
    let c = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(c.contains(reasoning.trim()), "{c:?} vs {reasoning:?}");
    assert!(
        v["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn introspection_endpoints() {
    let s = server().await;
    let chat = json!({"messages": [{"role": "user", "content": "Hello <|im_end|> there"}]});
    let (st, _, r) = s
        .post("/v1/chat/completions/render", &chat.to_string())
        .await;
    assert_eq!(st, 200, "{r}");
    let (_, _, a) = s.post("/apply-template", &chat.to_string()).await;
    assert_eq!(r["prompt"], a["prompt"]);
    let ids: Vec<i64> = r["prompt_token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect();
    assert_eq!(r["num_tokens"].as_u64().unwrap() as usize, ids.len());
    // The client's `<|im_end|>` is text, not the control token: the render
    // has exactly the template's control tokens.
    let (_, _, t) = s
        .post(
            "/tokenize",
            &json!({"content": "<|im_end|>", "with_pieces": true}).to_string(),
        )
        .await;
    let im_end = t["tokens"][0]["id"].as_i64().unwrap();
    assert_eq!(t["tokens"][0]["piece"], "<|im_end|>");
    let n_turn_ends = ids.iter().filter(|&&i| i == im_end).count();
    assert_eq!(
        n_turn_ends, 2,
        "system and user turns end; the client's text does not: {ids:?}"
    );
    // tokenize / detokenize round trip; parse_special false keeps text.
    let (_, _, t) = s
        .post("/tokenize", &json!({"content": "Hello world"}).to_string())
        .await;
    let (_, _, d) = s
        .post("/detokenize", &json!({"tokens": t["tokens"]}).to_string())
        .await;
    assert_eq!(d["content"], "Hello world");
    let (_, _, plain) = s
        .post(
            "/tokenize",
            &json!({"content": "<|im_end|>", "parse_special": false}).to_string(),
        )
        .await;
    assert!(plain["tokens"].as_array().unwrap().len() > 1, "{plain}");
    for (path, body) in [
        ("/detokenize", json!({"tokens": [1, 99999999]})),
        ("/detokenize", json!({"tokens": "x"})),
        ("/tokenize", json!({"content": 5})),
    ] {
        let (st, _, v) = s.post(path, &body.to_string()).await;
        assert_error(st, &v, 400, "invalid_value");
    }
    // /v1/models shows where the template came from.
    let m: Value = s
        .client
        .get(format!("{}/v1/models", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let t = &m["data"][0]["chat_template"];
    assert_eq!(t["source"], "gguf");
    assert_eq!(t["family"], "generic");
    assert_eq!(t["native_tools"], false);
}
