//! Every real template × conversation the transformers oracle rendered
//! (`scripts/template-oracle.sh`, run by `scripts/test.sh` before the
//! tests) renders byte-identically through Steward, and every case where
//! transformers raised is an error here too. The cases file is
//! `target/template-cases.json` (or `STEWARD_TEMPLATE_CASES`); without it
//! this test is skipped and says how to make it (fails with
//! `STEWARD_REQUIRE_FIXTURES=1`, as scripts/test.sh sets it).

use serde_json::Value;
use steward_formats::{ChatTemplates, RenderArgs};

fn cases() -> Option<Vec<Value>> {
    let path = std::env::var("STEWARD_TEMPLATE_CASES").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/template-cases.json"
        )
        .to_string()
    });
    if !std::path::Path::new(&path).exists() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../");
        let shown = path.strip_prefix(root).unwrap_or(&path);
        let why = format!("{shown} missing; run scripts/test-fixtures.sh (scripts/test.sh does)");
        let require = std::env::var_os("STEWARD_REQUIRE_FIXTURES").is_some_and(|v| v == "1");
        assert!(!require, "{why}");
        // Straight to stderr, past the harness's capture: every run shows it.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "skipped: {why}");
        return None;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{path}: {e}: run scripts/template-oracle.sh first (scripts/test.sh does)")
    });
    Some(serde_json::from_str(&text).expect("cases JSON"))
}

/// Known differences, each with its reason. Functionary v3.1 builds its
/// tool list as `"text"|safe + name + ... + t | tojson`: in Python a
/// `Markup` plus a plain string HTML-escapes the plain one, so transformers
/// prints the tools' JSON as `{&#34;name&#34;: ...}`; minijinja's safe
/// strings do not escape what is added to them. (What the model saw in
/// training is surely the unescaped text; Steward keeps it.)
const KNOWN: &[(&str, &str)] = &[
    ("meetkai-functionary-medium-v3.1.jinja", "tools"),
    ("meetkai-functionary-medium-v3.1.jinja", "tool_call_result"),
    (
        "meetkai-functionary-medium-v3.1.jinja",
        "tool_call_content_text",
    ),
    (
        "meetkai-functionary-medium-v3.1.jinja",
        "tool_call_string_args",
    ),
    (
        "meetkai-functionary-medium-v3.1.jinja",
        "parallel_tool_calls",
    ),
];

fn today() -> String {
    steward_formats::template::strftime::now("%Y-%m-%d")
}

#[test]
fn renders_as_transformers() {
    let Some(cases) = cases() else { return };
    let dir = cases_dir();
    let mut compiled: std::collections::HashMap<String, Result<ChatTemplates, String>> =
        Default::default();
    let (mut same, mut raised_both, mut known_seen, mut fails) = (0, 0, 0, Vec::new());
    let today = today();
    for c in &cases {
        let name = c["template"].as_str().unwrap();
        if c["uses_strftime_now"].as_bool() == Some(true)
            && c["rendered_on"].as_str() != Some(today.as_str())
        {
            panic!("the cases were rendered on another day; run scripts/template-oracle.sh again");
        }
        let t = compiled.entry(name.to_string()).or_insert_with(|| {
            let src = std::fs::read_to_string(dir.join(name)).map_err(|e| e.to_string())?;
            ChatTemplates::new(Some(&src), &[]).map_err(|e| e.to_string())
        });
        let t = match t {
            Ok(t) => t,
            Err(e) => {
                fails.push(format!("{name}: {e}"));
                continue;
            }
        };
        let messages = c["messages"].as_array().unwrap().clone();
        let kwargs = c["kwargs"].as_object().unwrap().clone();
        let got = t.render(&RenderArgs {
            messages: &messages,
            tools: c.get("tools").filter(|t| !t.is_null()),
            documents: c.get("documents").filter(|t| !t.is_null()),
            add_generation_prompt: c["add_generation_prompt"].as_bool().unwrap(),
            continue_final_message: c["continue_final_message"].as_bool().unwrap(),
            kwargs: &kwargs,
            variant: None,
        });
        let case = c["case"].as_str().unwrap();
        let known = KNOWN.contains(&(name, case));
        match (c["expected"].as_str(), got) {
            (Some(want), Ok(got)) if want == got && known => fails.push(format!(
                "{name} / {case}: listed as a known difference but now identical: update KNOWN"
            )),
            (Some(want), Ok(got)) if want == got => same += 1,
            (Some(_), Ok(_)) if known => known_seen += 1,
            (Some(want), Ok(got)) => fails.push(format!(
                "{name} / {case}: differs at byte {}:\n  want {:?}\n  got  {:?}",
                first_diff(want, &got),
                excerpt(want, first_diff(want, &got)),
                excerpt(&got, first_diff(want, &got))
            )),
            (Some(_), Err(e)) => fails.push(format!(
                "{name} / {case}: transformers renders, Steward: {e}"
            )),
            (None, Err(_)) => raised_both += 1,
            (None, Ok(_)) => fails.push(format!(
                "{name} / {case}: transformers raises ({}), Steward renders",
                c["error"].as_str().unwrap_or_default()
            )),
        }
    }
    let rendered = cases.iter().filter(|c| c["expected"].is_string()).count();
    eprintln!(
        "{} cases: {same} of {rendered} that transformers renders identical ({:.1}%), {raised_both} raised in both, {known_seen} known differences, {} unexpected",
        cases.len(),
        100.0 * same as f64 / rendered.max(1) as f64,
        fails.len()
    );
    assert!(cases.len() >= 900, "too few cases: {}", cases.len());
    assert!(
        fails.is_empty(),
        "{} of {} cases differ:\n{}",
        fails.len(),
        cases.len(),
        fails.join("\n")
    );
}

fn cases_dir() -> std::path::PathBuf {
    // scripts/oracle-templates.sh: the fetched templates and the default
    // model's, side by side.
    let linked =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/oracle-templates");
    if linked.is_dir() {
        return linked;
    }
    let cache = std::env::var("STEWARD_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/steward")
        });
    cache.join("templates/llama-cpp-python-0.3.36")
}

fn first_diff(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

fn excerpt(s: &str, at: usize) -> String {
    let lo = at.saturating_sub(40);
    let hi = (at + 60).min(s.len());
    let lo = (0..=lo).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    let hi = (hi..=s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    s[lo..hi].to_string()
}
