//! [7/8] The gateway contract on the real default model: `/metrics` read
//! as strictly as Go's Prometheus text parser (which the Gateway API
//! Inference Extension's endpoint picker uses) reads it, the `vllm:*`
//! series a picker and a router need, with `model_name`, and a burst past
//! `--max-seqs` seen in them (waiting > 0 while running = the maximum) and
//! in `GET /get_load`.

use crate::common::{self, HANG_GUARD};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::json;

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

#[derive(Debug, Default)]
struct Family {
    kind: String,
    samples: Vec<Sample>,
}

fn valid_metric_name(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_' || ch == ':')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
}

fn valid_label_name(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => v.parse::<f64>().map_err(|_| format!("bad value {v:?}")),
    }
}

/// `{a="x",b="y"}` (the braces already stripped) with the text format's
/// escapes (`\\`, `\"`, `\n`; any other is an error).
fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let eq = s[i..].find('=').ok_or("label without =")? + i;
        let name = &s[i..eq];
        if !valid_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        if b.get(eq + 1) != Some(&b'"') {
            return Err(format!("label {name} not quoted"));
        }
        let mut j = eq + 2;
        let mut v = String::new();
        loop {
            match b.get(j) {
                None => return Err("unterminated label value".into()),
                Some(b'"') => break,
                Some(b'\\') => {
                    match b.get(j + 1) {
                        Some(b'\\') => v.push('\\'),
                        Some(b'"') => v.push('"'),
                        Some(b'n') => v.push('\n'),
                        e => return Err(format!("bad escape {e:?}")),
                    }
                    j += 2;
                }
                Some(_) => {
                    let ch = s[j..].chars().next().unwrap();
                    v.push(ch);
                    j += ch.len_utf8();
                }
            }
        }
        if out.insert(name.to_string(), v).is_some() {
            return Err(format!("label {name} twice"));
        }
        i = j + 1;
        match b.get(i) {
            None => {}
            Some(b',') => i += 1,
            Some(c) => return Err(format!("unexpected {:?} after a label", *c as char)),
        }
    }
    Ok(out)
}

/// The family a sample belongs to: a histogram's `_bucket`, `_sum` and
/// `_count` belong to the declared base name.
fn family_of<'a>(name: &'a str, declared: &HashMap<String, Family>) -> &'a str {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if declared.get(base).is_some_and(|f| f.kind == "histogram") {
                return base;
            }
        }
    }
    name
}

/// Parse the text format as strictly as the picker's parser: one HELP and
/// one TYPE per family, TYPE before its samples, a family's samples
/// together, valid names, quoted and escaped label values, no sample
/// twice; histograms with ascending `le`, cumulative counts, `+Inf` equal
/// to `_count`, and `_sum`.
fn parse_strict(text: &str) -> Result<HashMap<String, Family>, String> {
    let mut fams: HashMap<String, Family> = HashMap::new();
    let (mut helped, mut typed, mut closed) = (HashSet::new(), HashSet::new(), HashSet::new());
    let mut current: Option<String> = None;
    let mut seen = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let err = |m: String| format!("line {}: {m}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kw, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if kw != "HELP" && kw != "TYPE" {
                continue;
            }
            if !valid_metric_name(name) {
                return Err(err("bad metric name".into()));
            }
            if closed.contains(name) || fams.get(name).is_some_and(|f| !f.samples.is_empty()) {
                return Err(err(format!("{kw} after {name}'s samples")));
            }
            let set = if kw == "HELP" {
                &mut helped
            } else {
                &mut typed
            };
            if !set.insert(name.to_string()) {
                return Err(err(format!("second {kw}")));
            }
            if kw == "TYPE" {
                let kind = parts.next().unwrap_or("");
                if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                    return Err(err(format!("bad type {kind:?}")));
                }
                fams.entry(name.to_string()).or_default().kind = kind.to_string();
            }
            if let Some(c) = current.replace(name.to_string()) {
                if c != name {
                    closed.insert(c);
                }
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (name, labels, rest) = match line.find('{') {
            Some(b) if b < line.find(' ').unwrap_or(usize::MAX) => {
                let close = line.rfind('}').ok_or_else(|| err("no }".into()))?;
                (
                    &line[..b],
                    parse_labels(&line[b + 1..close]).map_err(err)?,
                    line[close + 1..].trim_start(),
                )
            }
            _ => {
                let sp = line.find(' ').ok_or_else(|| err("no value".into()))?;
                (&line[..sp], BTreeMap::new(), line[sp + 1..].trim_start())
            }
        };
        if !valid_metric_name(name) {
            return Err(err("bad metric name".into()));
        }
        let mut vt = rest.split(' ');
        let value = parse_value(vt.next().unwrap_or("")).map_err(err)?;
        if let Some(ts) = vt.next() {
            ts.parse::<i64>().map_err(|_| err("bad timestamp".into()))?;
        }
        let fam = family_of(name, &fams).to_string();
        if closed.contains(&fam) {
            return Err(err(format!("{fam}'s samples are not together")));
        }
        if let Some(c) = current.replace(fam.clone()) {
            if c != fam {
                closed.insert(c);
            }
        }
        if !seen.insert(format!("{name}{labels:?}")) {
            return Err(err("the same sample twice".into()));
        }
        let f = fams.entry(fam.clone()).or_default();
        if f.kind.is_empty() {
            f.kind = "untyped".into();
        }
        f.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    for (name, f) in &fams {
        if f.kind == "histogram" {
            check_histogram(name, f)?;
        }
    }
    Ok(fams)
}

/// One labelled histogram: its `(le, count)` buckets, `_count`, whether
/// `_sum` came.
type Series = (Vec<(f64, f64)>, Option<f64>, bool);

fn check_histogram(name: &str, f: &Family) -> Result<(), String> {
    let mut series: BTreeMap<String, Series> = BTreeMap::new();
    for s in &f.samples {
        let mut key = s.labels.clone();
        let le = key.remove("le");
        let e = series.entry(format!("{key:?}")).or_default();
        if s.name == format!("{name}_bucket") {
            let le = le.ok_or(format!("{name}: a bucket without le"))?;
            e.0.push((parse_value(&le)?, s.value));
        } else if s.name == format!("{name}_count") {
            e.1 = Some(s.value);
        } else if s.name == format!("{name}_sum") {
            e.2 = true;
        } else {
            return Err(format!("{name}: sample {} in a histogram", s.name));
        }
    }
    for (k, (buckets, count, sum)) in series {
        let last = buckets.last().ok_or(format!("{name}{k}: no buckets"))?;
        if last.0 != f64::INFINITY {
            return Err(format!("{name}{k}: no +Inf bucket"));
        }
        if buckets
            .windows(2)
            .any(|w| w[1].0 <= w[0].0 || w[1].1 < w[0].1)
        {
            return Err(format!("{name}{k}: buckets not ascending and cumulative"));
        }
        if count != Some(last.1) || !sum {
            return Err(format!(
                "{name}{k}: _count {count:?} vs +Inf {}, sum {sum}",
                last.1
            ));
        }
    }
    Ok(())
}

fn gauge(f: &HashMap<String, Family>, name: &str) -> f64 {
    let fam = f.get(name).unwrap_or_else(|| panic!("{name} missing"));
    assert_eq!(fam.samples.len(), 1, "{name}: one model, one sample");
    assert_eq!(
        fam.samples[0].labels.get("model_name").map(String::as_str),
        Some("smol"),
        "{name}"
    );
    fam.samples[0].value
}

#[test]
fn the_strict_parser_refuses_what_the_picker_refuses() {
    let ok = "# HELP a A\n# TYPE a gauge\na{x=\"1\"} 2\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n";
    assert!(parse_strict(ok).is_ok(), "{:?}", parse_strict(ok));
    for bad in [
        "# TYPE a gauge\n# TYPE a gauge\na 1\n", // second TYPE
        "a 1\n# TYPE a gauge\n",                 // TYPE after samples
        "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n", // not together
        "# TYPE a gauge\na{x=1} 1\n",            // unquoted
        "# TYPE a gauge\na{x=\"\\t\"} 1\n",      // bad escape
        "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n", // label twice
        "# TYPE a gauge\na one\n",               // bad value
        "# TYPE a gauge\na 1\na 2\n",            // sample twice
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", // no +Inf
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n",
        "# TYPE 1a gauge\n",
    ] {
        assert!(parse_strict(bad).is_err(), "accepted: {bad:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_hold_the_gateway_contract_through_a_burst_past_max_seqs() {
    let s = common::server_with(None, |c| {
        c.admit.max_seqs = 2;
        c.step.prompt_budget = 64;
    })
    .await;
    let idle = parse_strict(&s.get_text("/metrics").await).expect("strict parse, idle");
    // The series a picker and a router read, each with model_name.
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:lora_requests_info",
        "vllm:cache_config_info",
    ] {
        gauge(&idle, name);
    }
    for (name, f) in &idle {
        for smp in &f.samples {
            if name.starts_with("vllm:") {
                assert_eq!(
                    smp.labels.get("model_name").map(String::as_str),
                    Some("smol"),
                    "{smp:?}"
                );
            }
        }
    }
    for h in [
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
    ] {
        assert_eq!(
            idle.get(h).map(|f| f.kind.as_str()),
            Some("histogram"),
            "{h}"
        );
    }
    assert_eq!(idle["vllm:prompt_tokens_total"].kind, "counter");
    let cfg = &idle["vllm:cache_config_info"].samples[0];
    assert_eq!(cfg.labels["block_size"], "64");
    // 2 slots × 512 cells, as blocks of 64.
    assert_eq!(cfg.labels["num_gpu_blocks"], "16");
    assert_eq!(gauge(&idle, "vllm:num_requests_waiting"), 0.0);

    // Six streams against two slots: two that hold the slots (400 tokens,
    // no end-of-generation: running until their clients leave), then four
    // that wait behind them. The burst is on the metrics for as long as the
    // holders hold, whatever the machine's speed.
    let stream = |i: usize, max_tokens: u32| {
        let (client, base) = (s.client.clone(), s.base.clone());
        async move {
            let body = json!({"messages": [{"role": "user", "content": format!("Count to ten, {i}.")}],
                              "max_tokens": max_tokens, "ignore_eos": true, "stream": true});
            let r = client
                .post(format!("{base}/v1/chat/completions"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r
        }
    };
    let mut holders = Vec::new();
    for i in 0..2 {
        let mut r = stream(i, 400).await;
        // A streamed answer starts at admission; its first chunk, once it
        // decodes.
        assert!(r.chunk().await.unwrap().is_some());
        holders.push(r);
    }
    let n = 4;
    let mut tasks = Vec::new();
    for i in 0..n {
        let r = stream(2 + i, 40);
        tasks.push(tokio::spawn(async move { r.await.text().await.unwrap() }));
    }
    let end = Instant::now() + HANG_GUARD;
    let (mut saw_full, mut saw_load) = (false, false);
    while !(saw_full && saw_load) {
        assert!(
            Instant::now() < end,
            "never saw the burst: in /metrics {saw_full}, in /get_load {saw_load}"
        );
        let f = parse_strict(&s.get_text("/metrics").await).expect("strict parse, busy");
        let (run, wait) = (
            gauge(&f, "vllm:num_requests_running"),
            gauge(&f, "vllm:num_requests_waiting"),
        );
        assert!(run <= 2.0, "running {run} over max-seqs");
        let usage = gauge(&f, "vllm:kv_cache_usage_perc");
        assert!((0.0..=1.0).contains(&usage), "{usage}");
        if run == 2.0 && wait > 0.0 {
            saw_full = true;
            assert!(usage > 0.0, "two running requests hold cells");
        }
        let load = s.get_json("/get_load").await;
        let (l, r, w) = (
            load["load"].as_u64().unwrap(),
            load["num_reqs"].as_u64().unwrap(),
            load["num_waiting_reqs"].as_u64().unwrap(),
        );
        assert_eq!(l, r + w, "{load}");
        assert!(r <= 2, "{load}");
        assert_eq!(load["models"]["smol"]["max_seqs"], 2, "{load}");
        if r == 2 && w > 0 {
            saw_load = true;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // The holders leave; the four run to their end.
    drop(holders);
    for t in tasks {
        assert!(t.await.unwrap().contains("[DONE]"));
    }

    // Settled: nothing waits, the counters and histograms moved.
    s.metric_settled("vllm:num_requests_running", 0.0).await;
    let f = parse_strict(&s.get_text("/metrics").await).expect("strict parse, after");
    assert_eq!(gauge(&f, "vllm:num_requests_waiting"), 0.0);
    assert!(gauge(&f, "vllm:generation_tokens_total") >= f64::from(n as u32 * 40));
    // vLLM counts whole prompts, cache hits included.
    assert_eq!(
        gauge(&f, "vllm:prompt_tokens_total"),
        s.metric("steward_prompt_tokens_total").await
            + s.metric("steward_prefix_cache_reused_tokens_total").await
    );
    assert!(gauge(&f, "vllm:prompt_tokens_total") > 0.0);
    let count = |h: &str| {
        f[h].samples
            .iter()
            .find(|x| x.name == format!("{h}_count"))
            .map(|x| x.value)
            .unwrap()
    };
    // One per finished request (the four; the holders were cancelled).
    let finished = s.metric("steward_requests_finished_total").await;
    assert!(finished >= n as f64, "{finished}");
    assert_eq!(count("vllm:time_to_first_token_seconds"), finished);
    assert!(count("vllm:inter_token_latency_seconds") > 0.0);
    assert_eq!(s.get_json("/get_load").await["load"], 0);
}
