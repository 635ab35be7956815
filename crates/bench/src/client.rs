//! Sends one planned conversation, turn by turn, as streaming requests and
//! records every timing of each. Speaks plain OpenAI HTTP only.
//!
//! Times are milliseconds since the run started. Token progress (from
//! `usage`) and network chunks (SSE data events carrying text) are counted
//! apart: a chunk may carry several tokens or none.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::workload::{CancelAt, ConversationPlan, Endpoint, SamplingSpec, TurnPlan};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub conversation: usize,
    pub turn: usize,
    pub label: String,
    pub send_ms: f64,
    pub first_byte_ms: Option<f64>,
    pub first_text_ms: Option<f64>,
    /// Arrival time of every SSE event that carried text.
    pub chunk_ms: Vec<f64>,
    pub end_ms: f64,
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    pub status: u16,
    pub error: Option<String>,
    pub cancelled_by_us: bool,
    pub slow_reader: bool,
    pub text_bytes: usize,
    pub finish_reason: Option<String>,
}

impl Record {
    pub fn ok(&self) -> bool {
        self.status == 200 && self.error.is_none() && !self.cancelled_by_us
    }
    pub fn ttft_ms(&self) -> Option<f64> {
        self.first_text_ms.map(|t| t - self.send_ms)
    }
    pub fn gaps_ms(&self) -> impl Iterator<Item = f64> + '_ {
        self.chunk_ms.windows(2).map(|w| w[1] - w[0])
    }
    /// Mean time per output token after the first.
    pub fn tpot_ms(&self) -> Option<f64> {
        let n = self.completion_tokens?;
        let first = self.first_text_ms?;
        (n > 1).then(|| (self.end_ms - first) / f64::from(n - 1))
    }
}

pub struct Target {
    pub base: String,
    pub model: String,
    pub api_key: Option<String>,
    pub endpoint: Endpoint,
    pub sampling: SamplingSpec,
    pub ignore_eos: bool,
    /// Merged into every request body.
    pub extra: Option<Value>,
}

/// Run one conversation; the reply of each turn goes into the next.
pub async fn run_conversation(
    client: &reqwest::Client,
    t: &Target,
    plan: &ConversationPlan,
    t0: Instant,
) -> Vec<Record> {
    let mut messages: Vec<Value> = Vec::new();
    if let Some(sys) = &plan.system {
        messages.push(json!({"role": "system", "content": sys}));
    }
    let mut out = Vec::new();
    for (i, turn) in plan.turns.iter().enumerate() {
        messages.push(json!({"role": "user", "content": turn.user_text}));
        let (mut rec, reply) = one_request(client, t, &messages, turn, t0).await;
        rec.conversation = plan.index;
        rec.turn = i;
        rec.label = plan.label.clone();
        let stop = !rec.ok();
        out.push(rec);
        if stop {
            break;
        }
        messages.push(json!({"role": "assistant", "content": reply}));
    }
    out
}

fn body(t: &Target, messages: &[Value], turn: &TurnPlan) -> Value {
    let mut b = match t.endpoint {
        Endpoint::Chat => json!({"model": t.model, "messages": messages}),
        Endpoint::Completions => {
            let prompt: String = messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n");
            json!({"model": t.model, "prompt": prompt})
        }
    };
    b["max_tokens"] = json!(turn.max_tokens);
    b["temperature"] = json!(t.sampling.temperature);
    b["top_p"] = json!(t.sampling.top_p);
    b["stream"] = json!(true);
    b["stream_options"] = json!({"include_usage": true});
    if t.ignore_eos {
        b["ignore_eos"] = json!(true);
    }
    if let Some(seed) = turn.seed {
        b["seed"] = json!(seed);
    }
    for (k, v) in t.extra.iter().flat_map(|e| e.as_object()).flatten() {
        b[k] = v.clone();
    }
    b
}

fn ms(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e3
}

async fn one_request(
    client: &reqwest::Client,
    t: &Target,
    messages: &[Value],
    turn: &TurnPlan,
    t0: Instant,
) -> (Record, String) {
    let path = match t.endpoint {
        Endpoint::Chat => "/v1/chat/completions",
        Endpoint::Completions => "/v1/completions",
    };
    let mut rec = Record {
        send_ms: ms(t0),
        slow_reader: turn.slow_bytes_per_s.is_some(),
        ..Default::default()
    };
    let mut req = client
        .post(format!("{}{path}", t.base))
        .json(&body(t, messages, turn));
    if let Some(k) = &t.api_key {
        req = req.bearer_auth(k);
    }
    let deadline_prefill = turn
        .cancel
        .filter(|c| c.0 == CancelAt::Prefill)
        .map(|c| Duration::from_millis(c.1));
    let cancel_after_chunks = turn.cancel.filter(|c| c.0 == CancelAt::Decode).map(|c| c.2);
    let sent = Instant::now();
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            rec.error = Some(format!("send: {e}"));
            rec.end_ms = ms(t0);
            return (rec, String::new());
        }
    };
    rec.status = resp.status().as_u16();
    if rec.status != 200 {
        let text = resp.text().await.unwrap_or_default();
        rec.error = Some(text.chars().take(300).collect());
        rec.end_ms = ms(t0);
        return (rec, String::new());
    }
    let mut resp = resp;
    let mut buf = String::new();
    let mut reply = String::new();
    loop {
        let next = match deadline_prefill {
            Some(d) if rec.first_text_ms.is_none() => {
                let left = d.saturating_sub(sent.elapsed());
                match tokio::time::timeout(left, resp.chunk()).await {
                    Ok(r) => r,
                    Err(_) => {
                        rec.cancelled_by_us = true;
                        break;
                    }
                }
            }
            _ => resp.chunk().await,
        };
        let bytes = match next {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(e) => {
                rec.error = Some(format!("read: {e}"));
                break;
            }
        };
        if rec.first_byte_ms.is_none() {
            rec.first_byte_ms = Some(ms(t0));
        }
        buf.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(pos) = buf.find("\n\n") {
            let event: String = buf.drain(..pos + 2).collect();
            for line in event.lines() {
                let Some(data) = line.strip_prefix("data:") else {
                    continue;
                };
                let data = data.trim();
                if data == "[DONE]" {
                    continue;
                }
                let Ok(v) = serde_json::from_str::<Value>(data) else {
                    continue;
                };
                if let Some(e) = v.get("error") {
                    rec.error = Some(e.to_string());
                }
                if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                    rec.prompt_tokens = u["prompt_tokens"].as_u64().map(|x| x as u32);
                    rec.completion_tokens = u["completion_tokens"].as_u64().map(|x| x as u32);
                }
                let choice = &v["choices"][0];
                if let Some(f) = choice["finish_reason"].as_str() {
                    rec.finish_reason = Some(f.to_string());
                }
                let text = choice["delta"]["content"]
                    .as_str()
                    .or_else(|| choice["text"].as_str())
                    .unwrap_or("");
                if !text.is_empty() {
                    let now = ms(t0);
                    rec.first_text_ms.get_or_insert(now);
                    rec.chunk_ms.push(now);
                    rec.text_bytes += text.len();
                    reply.push_str(text);
                }
            }
        }
        if cancel_after_chunks.is_some_and(|n| rec.chunk_ms.len() >= n) {
            rec.cancelled_by_us = true;
            break;
        }
        if let Some(rate) = turn.slow_bytes_per_s {
            tokio::time::sleep(Duration::from_secs_f64(bytes.len() as f64 / rate)).await;
        }
    }
    drop(resp);
    rec.end_ms = ms(t0);
    (rec, reply)
}
