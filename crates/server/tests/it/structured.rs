//! End-to-end HTTP tests of OpenAI's sampling surface beyond text: JSON
//! schemas and grammars, tool calls, `n` > 1, device sampling (harness in
//! `common/`).

use crate::common;

use common::*;
use serde_json::{json, Value};
use steward_engine::compare;

/// Concatenated `delta.tool_calls` of a streamed chat: (name, arguments) per
/// call index, and the finish reason.
fn streamed_calls(chunks: &[Value]) -> (Vec<(String, String)>, String) {
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut finish = String::new();
    for c in chunks {
        let ch = &c["choices"][0];
        if let Some(f) = ch["finish_reason"].as_str() {
            finish = f.to_string();
        }
        for d in ch["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = d["index"].as_u64().unwrap() as usize;
            if let Some(name) = d["function"]["name"].as_str() {
                assert_eq!(i, calls.len(), "a new call starts at the next index");
                assert!(d["id"].as_str().is_some_and(|id| id.starts_with("call_")));
                calls.push((name.to_string(), String::new()));
            }
            if let Some(a) = d["function"]["arguments"].as_str() {
                calls[i].1.push_str(a);
            }
        }
    }
    (calls, finish)
}

/// No prefix cache: the streamed run computes alone in the shapes of the
/// whole one, so it is the same text exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_output_json_schema_grammar_and_bad_schemas() {
    let s = server_with(None, |c| c.admit.prefix_cache = false).await;
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3},
        },
        "required": ["name", "age", "pets"],
        "additionalProperties": false,
    });
    let body = chat_body(
        "Describe a person as JSON.",
        json!({"max_tokens": 96, "timings": true, "response_format":
            {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": true}}}),
    );
    let (st, _, v) = s.post("/v1/chat/completions", &body.to_string()).await;
    assert_eq!(st, 200, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let o: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(
        o["name"].as_str().is_some_and(|n| n.chars().count() <= 24),
        "{o}"
    );
    assert!(
        o["age"].as_i64().is_some_and(|a| (0..=120).contains(&a)),
        "{o}"
    );
    let pets = o["pets"].as_array().unwrap();
    assert!(
        pets.len() <= 3
            && pets
                .iter()
                .all(|p| ["cat", "dog", "fish"].contains(&p.as_str().unwrap()))
    );
    assert_eq!(o.as_object().unwrap().len(), 3, "{o}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert!(v["timings"]["constraint_ms"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["timings"]["sampling_path"], "host");
    // Streamed, the same text.
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let (streamed, _, done) = s.stream("/v1/chat/completions", sb).await;
    assert!(done);
    assert_eq!(streamed, text);

    // json_object: parseable, an object.
    let body = chat_body(
        "Give a cat's name and color as a JSON object.",
        json!({"max_tokens": 64, "response_format": {"type": "json_object"}}),
    );
    let (st, _, v) = s.post("/v1/chat/completions", &body.to_string()).await;
    assert_eq!(st, 200, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    if v["choices"][0]["finish_reason"] == "stop" {
        let o: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(o.is_object());
    } else {
        assert!(text.starts_with('{'), "{text}");
    }

    // A raw Lark grammar on the completions endpoint.
    let (st, _, v) = s
        .post(
            "/v1/completions",
            &json!({"prompt": "Is the sky blue? Answer:", "max_tokens": 8, "temperature": 0,
                    "grammar": "start: \" yes\" | \" no\""})
            .to_string(),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let t = v["choices"][0]["text"].as_str().unwrap();
    assert!(t == " yes" || t == " no", "{t:?}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    // Bad schemas and grammars: a 400 that says what is wrong, nothing held.
    for (extra, param) in [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wat"}}}}),
            "response_format",
        ),
        (json!({"grammar": "start: ("}), "grammar"),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
                {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["a"]}}}}),
            "response_format",
        ),
    ] {
        let (st, _, v) = s
            .post("/v1/chat/completions", &chat_body("x", extra).to_string())
            .await;
        assert_error(st, &v, 400, "invalid_grammar");
        assert_eq!(v["error"]["param"], param, "{v}");
    }
    assert_eq!(
        s.metric_settled("steward_kv_cells_reserved", 0.0).await,
        0.0
    );
    assert!(s.metric("steward_constraint_seconds_total").await > 0.0);
}

/// The calls on a server without a prefix cache: the streamed run computes
/// alone in the shapes of the whole one, so it makes the same call
/// exactly. `n` (which shares the prompt through the cache) on one with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_tool_calls_parse_streamed_and_not_and_n_shares_the_prompt() {
    let s = server_with(None, |c| c.admit.prefix_cache = false).await;
    let params = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": false,
    });
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": params}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
    ]);
    let body = chat_body(
        "What is the weather in Paris?",
        json!({"max_tokens": 64, "tools": tools, "parallel_tool_calls": false,
               "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    );
    let (st, _, v) = s.post("/v1/chat/completions", &body.to_string()).await;
    assert_eq!(st, 200, "{v}");
    let ch = &v["choices"][0];
    assert_eq!(ch["finish_reason"], "tool_calls", "{v}");
    assert!(ch["message"]["content"].is_null(), "{v}");
    let calls = ch["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args_text = calls[0]["function"]["arguments"].as_str().unwrap();
    let args: Value = serde_json::from_str(args_text).unwrap();
    assert!(args["city"].is_string(), "{args}");
    assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()));

    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let (_, chunks, done) = s.stream("/v1/chat/completions", sb).await;
    assert!(done);
    let (scalls, finish) = streamed_calls(&chunks);
    assert_eq!(finish, "tool_calls");
    assert_eq!(
        scalls,
        vec![("get_weather".to_string(), args_text.to_string())]
    );

    // `required` with two tools: one of them, arguments valid JSON.
    let mut rb = body.clone();
    rb["tool_choice"] = json!("required");
    let (st, _, v) = s.post("/v1/chat/completions", &rb.to_string()).await;
    assert_eq!(st, 200, "{v}");
    let c = &v["choices"][0]["message"]["tool_calls"][0]["function"];
    assert!(
        ["get_weather", "get_time"].contains(&c["name"].as_str().unwrap()),
        "{v}"
    );
    serde_json::from_str::<Value>(c["arguments"].as_str().unwrap()).unwrap();

    // The answer turn: the call and its result in the history.
    let mut tb = chat_body(
        "What is the weather in Paris?",
        json!({"max_tokens": 24, "tools": tools}),
    );
    tb["messages"] = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": calls},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "{\"temperature\": 18}"},
    ]);
    let (st, _, v) = s.post("/v1/chat/completions", &tb.to_string()).await;
    assert_eq!(st, 200, "{v}");
    assert!(
        v["choices"][0]["message"]["content"].is_string()
            || v["choices"][0]["message"]["tool_calls"].is_array()
    );

    // n = 3, seeded: three distinct choices, the same again, and the prompt
    // computed once (the others take it from the first). The runs after
    // the first take the prompt from the cache (other shapes: a seeded
    // draw may fall the other side of a border, `compare`): of the six
    // choices compared at most 3 may part; false failure
    // `seeded_false_failure(6, 3, 1e-2)` = 1.5e-7 (a broken draw parts
    // nearly all).
    let s = server().await;
    // (A prompt above `--prefix-copy-min`, 64 tokens: shorter ones are
    // recomputed per choice, which costs about what a stream copy does.)
    let mut nb = chat_body(
        "Write a short line about a fox in the snow and the moon.",
        json!({"n": 3, "seed": 11, "temperature": 1.0, "max_tokens": 12}),
    );
    nb["messages"] = json!([
        {"role": "system", "content": "You are a poet of the northern forests. You write short, vivid lines about animals, weather and the night sky, never more than one sentence, never rhyming on purpose. Your lines are plain, concrete and quiet, and they name one colour and one sound."},
        {"role": "user", "content": "Write a short line about a fox in the snow and the moon."},
    ]);
    let before = s.metric("steward_prompt_tokens_total").await;
    let (st, _, v) = s.post("/v1/chat/completions", &nb.to_string()).await;
    assert_eq!(st, 200, "{v}");
    let computed = s.metric("steward_prompt_tokens_total").await - before;
    let prompt = v["usage"]["prompt_tokens"].as_f64().unwrap();
    assert!(
        computed <= prompt + 3.0,
        "computed {computed} of a {prompt}-token prompt"
    );
    let texts: Vec<String> = v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            assert_eq!(c["index"], i);
            c["message"]["content"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(texts.len(), 3);
    assert!(
        texts[0] != texts[1] && texts[1] != texts[2] && texts[0] != texts[2],
        "{texts:?}"
    );
    let usage_completion: u64 = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(usage_completion >= 3, "{v}");
    let (_, _, again) = s.post("/v1/chat/completions", &nb.to_string()).await;
    let again: Vec<String> = again["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"]["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(again.len(), 3);
    // Streamed: every index, each finished once.
    let mut sb = nb.clone();
    sb["stream"] = json!(true);
    let (_, chunks, done) = s.stream("/v1/chat/completions", sb).await;
    assert!(done);
    let mut per = vec![String::new(); 3];
    let mut finished = [0; 3];
    for c in &chunks {
        let ch = &c["choices"][0];
        let i = ch["index"].as_u64().unwrap() as usize;
        if let Some(t) = ch["delta"]["content"].as_str() {
            per[i].push_str(t);
        }
        if ch["finish_reason"].is_string() {
            finished[i] += 1;
        }
    }
    assert_eq!(finished, [1, 1, 1]);
    let chars = |t: &String| t.chars().collect::<Vec<char>>();
    let (want, again, per): (Vec<_>, Vec<_>, Vec<_>) = (
        texts.iter().map(chars).collect(),
        again.iter().map(chars).collect(),
        per.iter().map(chars).collect(),
    );
    let pairs: Vec<(&[char], &[char])> = again
        .iter()
        .chain(&per)
        .zip(want.iter().chain(&want))
        .map(|(g, w)| (g.as_slice(), w.as_slice()))
        .collect();
    assert!(compare::seeded_false_failure(6, 3, 1e-2) <= 1e-6);
    compare::assert_seeded_agree(&pairs, 3, "n = 3 again and streamed vs the first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_greedy_sampling_matches_host_greedy() {
    let s = server_with(None, |c| c.sample.device_sampling = true).await;
    let greedy = chat_body(
        "Tell me about the moon.",
        json!({"max_tokens": 24, "timings": true}),
    );
    // Logprobs need the host's logits: the same greedy request, host path
    // (with its top two: runs in other batch shapes or cache states are
    // compared to it through `compare`, up to a near-tie).
    let mut host = greedy.clone();
    host["logprobs"] = json!(true);
    host["top_logprobs"] = json!(2);
    let mut sampled = greedy.clone();
    sampled["temperature"] = json!(0.9);
    sampled["seed"] = json!(3);
    // All three at once: device and host rows share steps.
    let (g, h, x) = (greedy.to_string(), host.to_string(), sampled.to_string());
    let (a, b, c) = tokio::join!(
        s.post("/v1/chat/completions", &g),
        s.post("/v1/chat/completions", &h),
        s.post("/v1/chat/completions", &x),
    );
    for (st, _, v) in [&a, &b, &c] {
        assert_eq!(*st, 200, "{v}");
    }
    assert_eq!(a.2["timings"]["sampling_path"], "device", "{}", a.2);
    assert_eq!(b.2["timings"]["sampling_path"], "host");
    assert_eq!(c.2["timings"]["sampling_path"], "host");
    let text = |v: &Value| {
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let want = scored(&b.2);
    assert_text_agrees(
        &text(&a.2),
        &text(&b.2),
        &want,
        "device greedy vs host greedy",
    );
    // The slot that sampled on the host serves a device request again.
    let (_, _, again) = s.post("/v1/chat/completions", &greedy.to_string()).await;
    assert_text_agrees(&text(&again), &text(&b.2), &want, "device greedy again");
    assert_eq!(again["timings"]["sampling_path"], "device");
    // Under ignore_eos the device chain bans end-of-generation tokens as the
    // host sampler does: a reply that would end at once runs to max_tokens
    // on both paths, with the same text.
    let short = chat_body(
        "Answer with one word: yes or no?",
        json!({"max_tokens": 12, "timings": true}),
    );
    let (_, _, plain) = s.post("/v1/chat/completions", &short.to_string()).await;
    assert_eq!(plain["choices"][0]["finish_reason"], "stop", "{plain}");
    let mut dev = short.clone();
    dev["ignore_eos"] = json!(true);
    let mut host = dev.clone();
    host["logprobs"] = json!(true);
    host["top_logprobs"] = json!(2);
    let (dev, host) = (dev.to_string(), host.to_string());
    let (d, h) = tokio::join!(
        s.post("/v1/chat/completions", &dev),
        s.post("/v1/chat/completions", &host),
    );
    assert_eq!(d.2["timings"]["sampling_path"], "device", "{}", d.2);
    assert_eq!(h.2["timings"]["sampling_path"], "host");
    for v in [&d.2, &h.2] {
        assert_eq!(v["usage"]["completion_tokens"], 12, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
    }
    assert_text_agrees(
        &text(&d.2),
        &text(&h.2),
        &scored(&h.2),
        "device vs host under ignore_eos",
    );
}
