//! Every family's chat format through Steward's real load → template →
//! tokenize → generate → parse path, on tiny random-weight GGUFs that carry
//! each family's real template and marker tokens (scripts/gen-template-ggufs.sh,
//! made by scripts/test.sh from the templates in PyPI's llama-cpp-python
//! 0.3.36 source package; their text is noise):
//!
//! - each template × conversation of the transformers oracle
//!   (target/template-cases.json) renders through the server's request
//!   validation and the engine's template path exactly as transformers'
//!   `apply_chat_template` (or is refused where transformers raises);
//! - for each family with a call syntax, `tool_choice: "required"` forces a
//!   call in the family's own syntax through the grammar, the reply carries
//!   it as `tool_calls` (whole and streamed alike), and the next turn built
//!   from that reply renders as transformers renders the same messages.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use steward_engine::{Engine, EngineConfig, EngineHandle};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ggufs() -> Option<Vec<PathBuf>> {
    let dir = std::env::var("STEWARD_TEMPLATE_GGUFS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join("target/template-ggufs"));
    let dir = crate::common::fixture(dir, "scripts/test-fixtures.sh")?;
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: run scripts/test.sh (it makes the tiny GGUFs)",
                dir.display()
            )
        })
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    v.sort();
    assert!(
        v.len() >= 30,
        "only {} template GGUFs in {}",
        v.len(),
        dir.display()
    );
    Some(v)
}

async fn stop(h: EngineHandle) {
    let _ = tokio::task::spawn_blocking(move || h.stop()).await;
}

fn templates_dir() -> PathBuf {
    // scripts/oracle-templates.sh: the fetched templates and the default
    // model's, side by side.
    let linked = root().join("target/oracle-templates");
    if linked.is_dir() {
        return linked;
    }
    let cache = std::env::var("STEWARD_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/steward"));
    cache.join("templates/llama-cpp-python-0.3.36")
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

fn start(model: &Path) -> EngineHandle {
    let mut c = EngineConfig::new(model.to_path_buf());
    c.model.served_name = "t".into();
    c.admit.max_seqs = 1;
    c.admit.ctx_per_seq = 2048;
    c.step.prompt_budget = 512;
    c.model.progress = false;
    c.admit.prefix_cache = false;
    Engine::start(c).unwrap_or_else(|e| panic!("{}: {e}", model.display()))
}

/// Cases the HTTP path answers differently from transformers on purpose.
fn skip(case: &str, native_tools: bool, template: &str, has_tools: bool) -> bool {
    // OpenAI `arguments` are JSON text: Steward gives templates the object
    // (transformers passes whatever it gets).
    case == "tool_call_string_args"
        // `developer` becomes `system` where the template does not name it.
        || (case == "developer_role"
            && !template.contains("'developer'")
            && !template.contains("\"developer\""))
        // Tools for a template that does not print them get Steward's
        // instructions (transformers drops them).
        || (has_tools && !native_tools)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_template_renders_as_transformers() {
    let Some(models) = ggufs() else { return };
    let cases = crate::common::fixture(
        root().join("target/template-cases.json"),
        "scripts/test-fixtures.sh",
    );
    let Some(cases) = cases else { return };
    let cases: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(cases)
            .expect("target/template-cases.json: run scripts/template-oracle.sh"),
    )
    .unwrap();
    let mut by_template: HashMap<String, Vec<&Value>> = HashMap::new();
    for c in &cases {
        by_template
            .entry(
                c["template"]
                    .as_str()
                    .unwrap()
                    .trim_end_matches(".jinja")
                    .to_string(),
            )
            .or_default()
            .push(c);
    }
    let limits = steward_server::validate::Limits::default();
    let (mut same, mut refused, mut skipped, mut fails) = (0, 0, 0, Vec::new());
    for model in models {
        let name = stem(&model);
        let Some(cs) = by_template.get(&name) else {
            continue;
        };
        let template =
            std::fs::read_to_string(templates_dir().join(format!("{name}.jinja"))).unwrap();
        let h = start(&model);
        let native = h.preparer().template_info().native_tools;
        let args_as_text = h.preparer().template_info().args_as_text;
        for c in cs {
            let case = c["case"].as_str().unwrap();
            let has_tools = c["tools"].is_array();
            if skip(case, native, &template, has_tools) {
                skipped += 1;
                continue;
            }
            let mut body = json!({
                "messages": c["messages"],
                "add_generation_prompt": c["add_generation_prompt"],
                "continue_final_message": c["continue_final_message"],
                "chat_template_kwargs": c["kwargs"],
            });
            if has_tools {
                body["tools"] = c["tools"].clone();
            }
            let got = match steward_server::validate::chat(body.to_string().as_bytes(), 0, &limits)
            {
                Ok((_, steward_server::validate::PromptInput::Chat(p, _))) => {
                    h.preparer().render(p).await.map_err(|e| e.to_string())
                }
                Ok(_) => unreachable!(),
                Err(e) => Err(e.message.clone()),
            };
            let null_call_turn = c["messages"].as_array().unwrap().iter().any(|m| {
                m["role"] == "assistant" && m["content"].is_null() && m["tool_calls"].is_array()
            });
            match (c["expected"].as_str(), got) {
                (Some(want), Ok(got)) if want == got => same += 1,
                (None, Err(_)) => refused += 1,
                // A turn of calls has content "" (transformers drops the
                // null and the template fails on the missing key).
                (None, Ok(_)) if null_call_turn => skipped += 1,
                // Arguments as text for a template that takes text (where
                // transformers passed the object and the template failed).
                (None, Ok(_)) if args_as_text && has_tools => skipped += 1,
                (Some(want), Ok(got)) => fails.push(format!(
                    "{name} / {case}: differs\n  want {want:?}\n  got  {got:?}"
                )),
                (Some(_), Err(e)) => fails.push(format!(
                    "{name} / {case}: transformers renders, Steward: {e}"
                )),
                (None, Ok(_)) => fails.push(format!(
                    "{name} / {case}: transformers raises, Steward renders"
                )),
            }
        }
        stop(h).await;
    }
    eprintln!("{same} identical, {refused} refused as transformers raises, {skipped} skipped (by design), {} differ", fails.len());
    // Functionary v3.1's tools: transformers HTML-escapes them (a Markup
    // quirk; see crates/formats/tests/transformers.rs).
    let unexpected: Vec<&String> = fails
        .iter()
        .filter(|f| !f.starts_with("meetkai-functionary-medium-v3.1 / "))
        .collect();
    assert!(same > 500, "only {same} identical");
    assert!(
        unexpected.is_empty(),
        "{} differ:\n{}",
        unexpected.len(),
        fails.join("\n")
    );
}

/// transformers on one conversation (scripts/render-oracle.py).
fn oracle(
    template: &Path,
    messages: &Value,
    tools: &Value,
    kwargs: &Value,
) -> Result<String, String> {
    let py = root().join("target/oracle-env/bin/python");
    let mut child = Command::new(py)
        .arg(root().join("scripts/render-oracle.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the oracle venv (scripts/template-oracle.sh makes it)");
    let line = json!({"template": template, "messages": messages, "tools": tools, "kwargs": kwargs, "add_generation_prompt": true});
    writeln!(child.stdin.take().unwrap(), "{line}").unwrap();
    let mut out = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut out)
        .unwrap();
    let _ = child.wait();
    let v: Value = serde_json::from_str(&out).expect("oracle answer");
    match v["expected"].as_str() {
        Some(s) => Ok(s.to_string()),
        None => Err(v["error"].as_str().unwrap_or_default().to_string()),
    }
}

async fn serve(h: EngineHandle) -> String {
    let state = steward_server::AppState::with_options(Default::default());
    state.set_engine(h);
    let listener = steward_server::bind("127.0.0.1:0".parse().unwrap(), None).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(steward_server::serve_forever(
        listener,
        state,
        Default::default(),
    ));
    format!("http://{addr}")
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]}},
        "required": ["city"], "additionalProperties": false}}}])
}

/// Streamed chunks' calls put together: (id, name, arguments).
fn streamed_calls(sse: &str) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for line in sse.lines() {
        let Some(d) = line.strip_prefix("data: ") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(d) else {
            continue;
        };
        for tc in v["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().unwrap() as usize;
            if calls.len() <= i {
                calls.push((String::new(), String::new(), String::new()));
            }
            if let Some(id) = tc["id"].as_str() {
                calls[i].0 = id.into();
            }
            if let Some(n) = tc["function"]["name"].as_str() {
                calls[i].1.push_str(n);
            }
            if let Some(a) = tc["function"]["arguments"].as_str() {
                calls[i].2.push_str(a);
            }
        }
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_calls_round_trip_in_every_family() {
    let client = reqwest::Client::new();
    let mut families_seen = std::collections::BTreeSet::new();
    let mut fails = Vec::new();
    let Some(models) = ggufs() else { return };
    let oracle_env = root().join("target/oracle-env/bin/python");
    if crate::common::fixture(oracle_env, "scripts/test-fixtures.sh").is_none() {
        return;
    }
    for model in models {
        let name = stem(&model);
        let h = start(&model);
        assert!(h.wait_ready().await, "{name}: engine not ready");
        let info = h.preparer().template_info().clone();
        if info.family == "generic" || info.family == "gemma4" {
            stop(h).await;
            continue;
        }
        let base = serve(h).await;
        let user = json!({"role": "user", "content": "Weather in Paris?"});
        let body = json!({"messages": [user], "tools": tools(), "tool_choice": "required",
            "parallel_tool_calls": false, "max_tokens": 200, "temperature": 0, "seed": 1});
        let r: Value = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let calls = &r["choices"][0]["message"]["tool_calls"];
        let Some(call) = calls.get(0) else {
            fails.push(format!("{name} ({}): no call: {r}", info.family));
            continue;
        };
        let args: Value =
            match serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or("")) {
                Ok(a) => a,
                Err(e) => {
                    fails.push(format!("{name}: arguments are not JSON ({e}): {r}"));
                    continue;
                }
            };
        assert_eq!(call["function"]["name"], "get_weather", "{name}: {r}");
        assert!(
            ["Paris", "Tokyo"].contains(&args["city"].as_str().unwrap_or("")),
            "{name}: {r}"
        );
        // Streamed: the same call (the id too: ids derive from the request).
        // Exactly: one slot, no prefix cache, so the streamed run computes
        // alone in the shapes of the whole one.
        let mut sb = body.clone();
        sb["stream"] = json!(true);
        let sse = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&sb)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let s = streamed_calls(&sse);
        let whole = (
            String::new(),
            call["function"]["name"].as_str().unwrap().to_string(),
            call["function"]["arguments"].as_str().unwrap().to_string(),
        );
        if s.len() != 1
            || (s[0].1.as_str(), s[0].2.as_str()) != (whole.1.as_str(), whole.2.as_str())
        {
            fails.push(format!(
                "{name}: streamed calls {s:?} differ from whole {whole:?}"
            ));
        }
        // The next turn from the reply, rendered by Steward and transformers.
        let id = call["id"].as_str().unwrap();
        let assistant = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "get_weather", "arguments": call["function"]["arguments"]}}]});
        let tool = json!({"role": "tool", "tool_call_id": id, "name": "get_weather", "content": "18 C, sunny"});
        // A template that prints calls but not `tools` (DeepSeek) gets
        // Steward's instructions for them: compare the turn without tools.
        let next_tools = if info.native_tools {
            tools()
        } else {
            Value::Null
        };
        let next = json!({"messages": [user, assistant, tool], "tools": next_tools});
        let mine: Value = client
            .post(format!("{base}/apply-template"))
            .json(&next)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // As Steward gives it (content "" for a turn of calls; see validate).
        let hf_assistant = json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "get_weather", "arguments": args}}]});
        let template = templates_dir().join(format!("{name}.jinja"));
        let (bos, eos) = bos_eos(&base, &client).await;
        let kwargs = json!({"bos_token": bos, "eos_token": eos});
        let mut want = oracle(
            &template,
            &json!([user, hf_assistant, tool]),
            &next_tools,
            &kwargs,
        );
        if want.is_err() {
            // A template that takes arguments as text gets them so
            // (`Profile::args_as_text`).
            let mut a = hf_assistant.clone();
            a["tool_calls"][0]["function"]["arguments"] = call["function"]["arguments"].clone();
            want = oracle(&template, &json!([user, a, tool]), &next_tools, &kwargs);
        }
        match want {
            Ok(want) if mine["prompt"].as_str() == Some(want.as_str()) => {
                families_seen.insert(info.family.clone());
            }
            // Functionary v3.1's tools: transformers HTML-escapes them
            // (crates/formats/tests/transformers.rs).
            Ok(_) if name == "meetkai-functionary-medium-v3.1" => {}
            // Kimi K2's chat templates append to a list, which
            // transformers' sandbox forbids: both refuse the turn.
            Err(_) if mine.get("error").is_some() => {}
            Ok(want) => fails.push(format!(
                "{name}: next turn differs\n  want {want:?}\n  got  {:?}",
                mine["prompt"]
            )),
            Err(e) => fails.push(format!(
                "{name}: transformers raises on the next turn ({e}); Steward: {mine}"
            )),
        }
    }
    eprintln!("families round-tripped: {families_seen:?}");
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    assert!(families_seen.len() >= 8, "{families_seen:?}");
}

/// The server's bos/eos texts (what its templates get).
async fn bos_eos(base: &str, client: &reqwest::Client) -> (String, String) {
    let m: Value = client
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let t = &m["data"][0]["chat_template"];
    (
        t["bos_token"].as_str().unwrap_or("").to_string(),
        t["eos_token"].as_str().unwrap_or("").to_string(),
    )
}
