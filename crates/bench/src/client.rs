//! Sends one planned conversation, turn by turn, as streaming requests and
//! records every timing of each. Speaks plain OpenAI HTTP only.
//!
//! Times are milliseconds since the run started. Token progress (from
//! `usage`) and network chunks (SSE data events carrying text) are counted
//! apart: a chunk may carry several tokens or none.
//!
//! A `[mix]` workload's kinds ride along: `n` choices (each choice's text
//! and finish kept apart), grammars (finished output checked against its
//! grammar), unstreamed requests, and bad inputs (sent as planned, their
//! refusal's shape checked; a conversation goes on after one).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::mix;
use crate::workload::{CancelAt, ConversationPlan, Endpoint, Kind, SamplingSpec, TurnPlan};

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
    /// Sent as `x-request-id` (the server's log lines carry it).
    #[serde(default)]
    pub request_id: String,
    /// The planned kind (`[mix]`) and cancel point.
    #[serde(default)]
    pub kind: Kind,
    #[serde(default)]
    pub cancel_at: Option<CancelAt>,
    /// A bad input's right answer.
    #[serde(default)]
    pub expect_status: Option<u16>,
    /// A refusal's `error.code`.
    #[serde(default)]
    pub error_code: Option<String>,
    /// What is wrong with an error body (a refusal's or an error event's);
    /// None: it had the OpenAI shape (or there was none).
    #[serde(default)]
    pub error_shape: Option<String>,
    /// The stream's `data: [DONE]` arrived.
    #[serde(default)]
    pub saw_done: bool,
    /// The `error.code` of an error event inside a stream.
    #[serde(default)]
    pub stream_error: Option<String>,
    /// SSE data events that were neither JSON nor `[DONE]`.
    #[serde(default)]
    pub bad_events: u32,
    /// Choices that sent a finish reason.
    #[serde(default)]
    pub choices_finished: u32,
    /// Grammar choices that stopped with text their grammar does not allow.
    #[serde(default)]
    pub grammar_invalid: u32,
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
    /// Prefix of the request IDs sent (unique per run).
    pub id_prefix: String,
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
        let id = format!("{}-{}-{i}", t.id_prefix, plan.index);
        let (mut rec, reply) = one_request(client, t, &messages, turn, &id, t0).await;
        rec.conversation = plan.index;
        rec.turn = i;
        rec.label = plan.label.clone();
        if turn.kind.bad.is_some() {
            // A probe: not part of the conversation.
            messages.pop();
            out.push(rec);
            continue;
        }
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
    b["stream"] = json!(!turn.kind.unstreamed);
    if !turn.kind.unstreamed {
        b["stream_options"] = json!({"include_usage": true});
    }
    if t.ignore_eos {
        b["ignore_eos"] = json!(true);
    }
    if let Some(seed) = turn.seed {
        b["seed"] = json!(seed);
    }
    if let Some(n) = turn.kind.n {
        b["n"] = json!(n);
    }
    if let Some(g) = turn.kind.grammar {
        b["response_format"] = mix::response_format(g);
    }
    for (k, v) in t.extra.iter().flat_map(|e| e.as_object()).flatten() {
        b[k] = v.clone();
    }
    b
}

/// An error with its causes (reqwest's own text names only the URL).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn ms(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e3
}

/// Read a refusal's body: its code, or what is wrong with its shape.
async fn refusal(rec: &mut Record, resp: reqwest::Response) {
    let text = resp.text().await.unwrap_or_default();
    match mix::error_code(&text) {
        Ok(code) => rec.error_code = code,
        Err(why) => rec.error_shape = Some(why),
    }
    rec.error = Some(text.chars().take(300).collect());
}

async fn one_request(
    client: &reqwest::Client,
    t: &Target,
    messages: &[Value],
    turn: &TurnPlan,
    id: &str,
    t0: Instant,
) -> (Record, String) {
    let mut rec = Record {
        send_ms: ms(t0),
        slow_reader: turn.slow_bytes_per_s.is_some(),
        request_id: id.to_string(),
        kind: turn.kind.clone(),
        cancel_at: turn.cancel.map(|c| c.0),
        ..Default::default()
    };
    let req = build(client, t, messages, turn, id, &mut rec);
    let sent = Instant::now();
    let Some(resp) = send(req, turn, &mut rec).await else {
        rec.end_ms = ms(t0);
        return (rec, String::new());
    };
    rec.status = resp.status().as_u16();
    if rec.status != 200 {
        refusal(&mut rec, resp).await;
        rec.end_ms = ms(t0);
        return (rec, String::new());
    }
    if turn.kind.unstreamed {
        let reply = whole(&mut rec, resp, turn, t0).await;
        return (rec, reply);
    }
    let (texts, finishes) = read_stream(&mut rec, resp, turn, sent, t0).await;
    rec.end_ms = ms(t0);
    check_choices(&mut rec, turn, &texts, &finishes);
    (rec, texts.into_iter().next().unwrap_or_default())
}

/// The request: its route, id, key and body (a valid one, or the bad
/// request the turn asks for, whose expected status goes in the record).
fn build(
    client: &reqwest::Client,
    t: &Target,
    messages: &[Value],
    turn: &TurnPlan,
    id: &str,
    rec: &mut Record,
) -> reqwest::RequestBuilder {
    let path = match t.endpoint {
        Endpoint::Chat => "/v1/chat/completions",
        Endpoint::Completions => "/v1/completions",
    };
    let mut req = client
        .post(format!("{}{path}", t.base))
        .header("x-request-id", id);
    if let Some(k) = &t.api_key {
        req = req.bearer_auth(k);
    }
    let valid = body(t, messages, turn);
    match turn.kind.bad {
        Some(kind) => {
            let b = mix::bad_request(kind, &valid);
            rec.expect_status = Some(b.expect_status);
            req.header("content-type", b.content_type).body(b.body)
        }
        None => req.json(&valid),
    }
}

/// Send it; None when there is no response to read (hung up while
/// queued, or the send failed: the record says which).
async fn send(
    req: reqwest::RequestBuilder,
    turn: &TurnPlan,
    rec: &mut Record,
) -> Option<reqwest::Response> {
    let send = req.send();
    let sent_result = match turn.cancel {
        Some((CancelAt::Queued, after, _)) => {
            match tokio::time::timeout(Duration::from_millis(after), send).await {
                Ok(r) => r,
                Err(_) => {
                    rec.cancelled_by_us = true;
                    return None;
                }
            }
        }
        _ => send.await,
    };
    match sent_result {
        Ok(r) => Some(r),
        Err(e) => {
            rec.error = Some(format!("send: {}", chain(&e)));
            None
        }
    }
}

/// Read an SSE stream to its end (or to the turn's hang-up): each choice's
/// text and finish reason.
async fn read_stream(
    rec: &mut Record,
    mut resp: reqwest::Response,
    turn: &TurnPlan,
    sent: Instant,
    t0: Instant,
) -> (Vec<String>, Vec<Option<String>>) {
    let hang_up_after = turn
        .cancel
        .filter(|c| matches!(c.0, CancelAt::Prefill | CancelAt::Queued))
        .map(|c| Duration::from_millis(c.1));
    let cancel_after_chunks = turn.cancel.filter(|c| c.0 == CancelAt::Decode).map(|c| c.2);
    let mut buf = String::new();
    let mut out = (Vec::new(), Vec::new());
    loop {
        let next = match hang_up_after {
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
                rec.error = Some(format!("read: {}", chain(&e)));
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
                if let Some(data) = line.strip_prefix("data:") {
                    sse_data(rec, data.trim(), &mut out, t0);
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
    out
}

/// One SSE `data:` payload into the record and the choices' texts.
fn sse_data(
    rec: &mut Record,
    data: &str,
    (texts, finishes): &mut (Vec<String>, Vec<Option<String>>),
    t0: Instant,
) {
    if data == "[DONE]" {
        rec.saw_done = true;
        return;
    }
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        rec.bad_events += 1;
        return;
    };
    if let Some(e) = v.get("error") {
        rec.error = Some(e.to_string());
        match mix::error_code(data) {
            Ok(code) => rec.stream_error = Some(code.unwrap_or_else(|| "(no code)".into())),
            Err(why) => {
                rec.stream_error = Some("(malformed)".into());
                rec.error_shape = Some(why);
            }
        }
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        rec.prompt_tokens = u["prompt_tokens"].as_u64().map(|x| x as u32);
        rec.completion_tokens = u["completion_tokens"].as_u64().map(|x| x as u32);
    }
    for choice in v["choices"].as_array().into_iter().flatten() {
        let i = choice["index"].as_u64().unwrap_or(0) as usize;
        if i >= 64 {
            rec.bad_events += 1;
            continue;
        }
        if texts.len() <= i {
            texts.resize(i + 1, String::new());
            finishes.resize(i + 1, None);
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            rec.finish_reason = Some(f.to_string());
            finishes[i] = Some(f.to_string());
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
            texts[i].push_str(text);
        }
    }
}

/// Per-choice checks: how many choices finished, and how many grammar
/// choices that stopped by themselves (not cut at max_tokens) hold text
/// their grammar does not allow.
fn check_choices(rec: &mut Record, turn: &TurnPlan, texts: &[String], fins: &[Option<String>]) {
    rec.choices_finished = fins.iter().filter(|f| f.is_some()).count() as u32;
    if let Some(g) = turn.kind.grammar {
        rec.grammar_invalid = texts
            .iter()
            .zip(fins)
            .filter(|(t, f)| f.as_deref() == Some("stop") && !mix::grammar_output_ok(g, t))
            .count() as u32;
    }
}

/// An unstreamed answer: one JSON body with every choice.
async fn whole(rec: &mut Record, resp: reqwest::Response, turn: &TurnPlan, t0: Instant) -> String {
    let body = resp.text().await;
    let now = ms(t0);
    rec.end_ms = now;
    let v = match body
        .map_err(|e| format!("read: {}", chain(&e)))
        .and_then(|b| serde_json::from_str::<Value>(&b).map_err(|e| format!("body: {e}")))
    {
        Ok(v) => v,
        Err(e) => {
            rec.error = Some(e);
            return String::new();
        }
    };
    rec.first_byte_ms = Some(now);
    rec.first_text_ms = Some(now);
    rec.chunk_ms.push(now);
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        rec.prompt_tokens = u["prompt_tokens"].as_u64().map(|x| x as u32);
        rec.completion_tokens = u["completion_tokens"].as_u64().map(|x| x as u32);
    }
    let mut texts = Vec::new();
    let mut fins = Vec::new();
    for c in v["choices"].as_array().into_iter().flatten() {
        let text = c["message"]["content"]
            .as_str()
            .or_else(|| c["text"].as_str())
            .unwrap_or("")
            .to_string();
        rec.text_bytes += text.len();
        texts.push(text);
        fins.push(c["finish_reason"].as_str().map(str::to_string));
    }
    rec.finish_reason = fins.last().cloned().flatten();
    check_choices(rec, turn, &texts, &fins);
    texts.into_iter().next().unwrap_or_default()
}
