//! Reads a server's Prometheus `/metrics` and checks that it returns to its
//! idle state after a run: nothing running, nothing waiting, KV usage back to
//! its level before the run. Knows Steward's names, vLLM's and llama-server's.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flavor {
    Steward,
    Vllm,
    LlamaServer,
    Unknown,
}

/// The three numbers the steady-state check needs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Load {
    pub running: f64,
    pub waiting: f64,
    pub kv_used: f64,
}

pub fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut parts = line.rsplitn(2, ' ');
        let (Some(v), Some(name)) = (parts.next(), parts.next()) else {
            continue;
        };
        if let Ok(v) = v.parse::<f64>() {
            // Sum over label sets of the same metric name.
            let base = name.split('{').next().unwrap_or(name).to_string();
            *m.entry(base).or_insert(0.0) += v;
        }
    }
    m
}

pub fn flavor(m: &BTreeMap<String, f64>) -> Flavor {
    if m.contains_key("steward_requests_running") {
        Flavor::Steward
    } else if m.keys().any(|k| k.starts_with("vllm:")) {
        Flavor::Vllm
    } else if m.keys().any(|k| k.starts_with("llamacpp:")) {
        Flavor::LlamaServer
    } else {
        Flavor::Unknown
    }
}

pub fn load(m: &BTreeMap<String, f64>) -> Load {
    let g = |k: &str| m.get(k).copied().unwrap_or(0.0);
    match flavor(m) {
        Flavor::Steward => Load {
            running: g("steward_requests_running") + g("steward_requests_prefilling"),
            waiting: g("steward_requests_waiting"),
            kv_used: g("steward_kv_cells_used"),
        },
        Flavor::Vllm => Load {
            running: g("vllm:num_requests_running"),
            waiting: g("vllm:num_requests_waiting"),
            kv_used: g("vllm:kv_cache_usage_perc").max(g("vllm:gpu_cache_usage_perc")),
        },
        Flavor::LlamaServer => Load {
            running: g("llamacpp:requests_processing"),
            waiting: g("llamacpp:requests_deferred"),
            kv_used: g("llamacpp:kv_cache_tokens"),
        },
        Flavor::Unknown => Load::default(),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SteadyState {
    pub flavor: Flavor,
    pub before: Option<Load>,
    pub after: Option<Load>,
    /// Seconds after the run until idle was reached (None: never).
    pub settled_after_s: Option<f64>,
    pub returned: bool,
    pub note: String,
}

pub async fn scrape(
    client: &reqwest::Client,
    base: &str,
    key: Option<&str>,
) -> Option<BTreeMap<String, f64>> {
    let mut r = client.get(format!("{base}/metrics"));
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    let resp = r.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    Some(parse(&resp.text().await.ok()?))
}

/// Poll until the server is idle again (within `settle`).
pub async fn wait_idle(
    client: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    before: Option<Load>,
    settle: Duration,
) -> SteadyState {
    let t = Instant::now();
    let mut flavor_seen = Flavor::Unknown;
    let mut last = None;
    loop {
        if let Some(m) = scrape(client, base, key).await {
            flavor_seen = flavor(&m);
            let l = load(&m);
            let kv_idle = before.as_ref().map_or(0.0, |b| b.kv_used);
            if flavor_seen != Flavor::Unknown
                && l.running == 0.0
                && l.waiting == 0.0
                && l.kv_used <= kv_idle
            {
                return SteadyState {
                    flavor: flavor_seen,
                    before,
                    after: Some(l),
                    settled_after_s: Some(t.elapsed().as_secs_f64()),
                    returned: true,
                    note: "idle again".into(),
                };
            }
            last = Some(l);
        }
        if t.elapsed() >= settle || flavor_seen == Flavor::Unknown && last.is_none() {
            let note = if flavor_seen == Flavor::Unknown {
                "no recognised /metrics: steady state not checked".to_string()
            } else {
                format!("not idle within {:.0} s", settle.as_secs_f64())
            };
            return SteadyState {
                flavor: flavor_seen,
                before,
                after: last,
                settled_after_s: None,
                returned: false,
                note,
            };
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_maps_each_flavor() {
        let s = parse(
            "# HELP x\nsteward_requests_running 2\nsteward_requests_prefilling 1\nsteward_kv_cells_used 300\nsteward_http_responses_total{status=\"200\"} 4\nsteward_http_responses_total{status=\"429\"} 1\n",
        );
        assert_eq!(flavor(&s), Flavor::Steward);
        assert_eq!(s["steward_http_responses_total"], 5.0);
        assert_eq!(
            load(&s),
            Load {
                running: 3.0,
                waiting: 0.0,
                kv_used: 300.0
            }
        );
        let v = parse("vllm:num_requests_running{model_name=\"m\"} 1\nvllm:num_requests_waiting{model_name=\"m\"} 2\n");
        assert_eq!(flavor(&v), Flavor::Vllm);
        assert_eq!(load(&v).waiting, 2.0);
        let l = parse("llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n");
        assert_eq!(flavor(&l), Flavor::LlamaServer);
        assert_eq!(flavor(&parse("")), Flavor::Unknown);
    }
}
