//! Replies: a request's engine events turned into OpenAI's shapes, whole
//! (`ReplyCtx::full_response`, after `collect`) or streamed as SSE chunks
//! (`sse_response`), with usage, timings and finish reasons.

use std::convert::Infallible;
use std::time::Instant;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use steward_engine::{EngineHandle, Event, FinishReason, Finished, RequestStream, TokenLogprob};
use steward_protocol as p;

use super::logprobs;
use super::output::{self, OutputCtx, Piece};
use super::shape::{self as dialect, Dialect, DialectStream};
use crate::http::error::ApiError;
use crate::http::quota::Charge;
use crate::prepare::spec::{Api, GenSpec};

/// One choice's whole answer: text, logprobs, and how it ended.
type Collected = (String, Vec<TokenLogprob>, Finished);

/// One choice's events gathered; its tokens counted into `charge` as they
/// come (a key's usage and token quota).
pub(crate) async fn collect(
    mut st: RequestStream,
    first: Option<Event>,
    charge: Option<&Charge>,
) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut lps = Vec::new();
    let mut pending = first;
    let mut seen = 0u32;
    loop {
        let ev = match pending.take() {
            Some(ev) => Some(ev),
            None => st.next().await,
        };
        match ev {
            Some(Event::Text {
                text: t,
                logprobs,
                tokens,
            }) => {
                text.push_str(&t);
                lps.extend(logprobs);
                seen += tokens;
                if let Some(c) = charge {
                    c.generated(tokens);
                }
            }
            Some(Event::Done(f)) => {
                if let Some(c) = charge {
                    c.finished(seen, f.completion_tokens);
                }
                return Ok((text, lps, f));
            }
            Some(Event::Error(e)) => return Err(ApiError::from(e)),
            Some(Event::Admitted) => {}
            None => {
                return Err(ApiError::internal(
                    "the engine ended this request without a result",
                ))
            }
        }
    }
}

pub(crate) fn ctx_timeout(spec: &GenSpec) -> Option<std::time::Duration> {
    // Validated finite and positive; `try_` in case a limit is raised past
    // what a `Duration` holds.
    spec.timeout_s
        .and_then(|t| std::time::Duration::try_from_secs_f64(t).ok())
}

pub(crate) struct ReplyCtx {
    pub(crate) id: String,
    pub(crate) model: String,
    pub(crate) created: u64,
    pub(crate) api: Api,
    pub(crate) spec: GenSpec,
    pub(crate) arrival: Instant,
    pub(crate) engine: EngineHandle,
    /// The model's HTTP metrics.
    pub(crate) metrics: std::sync::Arc<crate::http::counters::HttpMetrics>,
    /// Completions `echo`: the prompt text to return before the completion.
    pub(crate) echo_text: Option<String>,
    pub(crate) first_prompt_token: Option<steward_engine::TokenId>,
    /// Chat: how the output is read (format, tools, reasoning).
    pub(crate) output: Option<OutputCtx>,
    /// Another API's shape the chat answer is given in (Anthropic
    /// Messages, OpenAI Responses); `None`: chat completions.
    pub(crate) dialect: Option<std::sync::Arc<dyn Dialect>>,
    /// Prompt positions that are images and audio (`None`: none of that
    /// kind in the request).
    pub(crate) media_tokens: (Option<u32>, Option<u32>),
    /// The key's token reservation and usage, settled when the reply
    /// (and so a stream) ends (`None`: no keys).
    pub(crate) charge: Option<Charge>,
    /// The request's record (access log, trace): texts sent, how it ended.
    pub(crate) record: std::sync::Arc<crate::ops::trace::Record>,
}

/// Usage of a whole request: the prompt once, every choice's completion,
/// and the prompt's image and audio positions.
fn usage(fins: &[&Finished], (image_tokens, audio_tokens): (Option<u32>, Option<u32>)) -> p::Usage {
    let prompt = fins.first().map_or(0, |f| f.prompt_tokens);
    let completion: u32 = fins.iter().map(|f| f.completion_tokens).sum();
    p::Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        prompt_tokens_details: Some(p::PromptTokensDetails {
            cached_tokens: fins.first().map_or(0, |f| f.cached_tokens),
            image_tokens,
            audio_tokens,
        }),
    }
}

/// `first_text_sent_ms`: since arrival, when the first text went to the
/// transport (streaming) or when the whole body did (otherwise). With
/// several choices: the first choice's lifecycle, every choice's tokens.
fn timings(fins: &[&Finished], first_text_sent_ms: f64) -> p::Timings {
    let Some(f) = fins.first() else {
        return p::Timings::default();
    };
    let t = &f.timings;
    let decode_ms = (t.retired_ms - t.first_token_ms).max(0.0);
    let completion_tokens: u32 = fins.iter().map(|f| f.completion_tokens).sum();
    p::Timings {
        tokenized_ms: t.tokenized_ms,
        admitted_ms: t.admitted_ms,
        prefill_done_ms: t.prefill_done_ms,
        first_token_ms: t.first_token_ms,
        first_text_sent_ms,
        retired_ms: fins
            .iter()
            .map(|f| f.timings.retired_ms)
            .fold(0.0, f64::max),
        queue_ms: (t.admitted_ms - t.tokenized_ms).max(0.0),
        prompt_tokens: f.prompt_tokens,
        completion_tokens,
        decode_tokens_per_s: if decode_ms > 0.0 {
            f64::from(f.completion_tokens.saturating_sub(1)) * 1e3 / decode_ms
        } else {
            0.0
        },
        constraint_ms: fins.iter().map(|f| f.constraint_ms).sum(),
        sampling_path: if f.device_sampled { "device" } else { "host" }.into(),
        draft_tokens: fins.iter().map(|f| f.draft_tokens).sum(),
        draft_accepted: fins.iter().map(|f| f.draft_accepted).sum(),
    }
}

/// OpenAI's finish reason: `tool_calls` when the turn ended in calls.
fn finish_str(r: FinishReason, calls: u32) -> Option<String> {
    if calls > 0 && r == FinishReason::Stop {
        Some("tool_calls".into())
    } else {
        Some(r.as_str().to_string())
    }
}

impl ReplyCtx {
    fn logprobs_value(
        &self,
        lps: &[TokenLogprob],
        f: Option<&Finished>,
    ) -> Option<serde_json::Value> {
        self.spec.logprobs?;
        Some(match self.api {
            Api::Chat => logprobs::chat(&self.engine, lps),
            Api::Completion => {
                let mut all = Vec::new();
                let mut first = None;
                let mut offset0 = 0;
                if let Some(pl) = f.and_then(|f| f.prompt_logprobs.as_ref()) {
                    first = self.first_prompt_token;
                    all.extend(pl.iter().cloned());
                } else if let Some(e) = &self.echo_text {
                    offset0 = e.len();
                }
                all.extend(lps.iter().cloned());
                logprobs::completion(&self.engine, first, &all, offset0)
            }
        })
    }

    pub(crate) fn full_response(&self, results: Vec<Collected>) -> serde_json::Value {
        let sent = self.arrival.elapsed().as_secs_f64() * 1e3;
        let fins: Vec<&Finished> = results.iter().map(|r| &r.2).collect();
        let t = self.spec.timings.then(|| timings(&fins, sent));
        let usage = usage(&fins, self.media_tokens);
        if let (Api::Chat, Some(d), Some((text, _, f))) = (self.api, &self.dialect, results.first())
        {
            let pieces: Vec<steward_dialects::Piece> = match &self.output {
                Some(o) => {
                    let mut r = output::Reader::new(o, &self.id, 0);
                    let mut v = r.push(text);
                    v.extend(r.finish());
                    v.into_iter().map(dialect::piece_of).collect()
                }
                None => vec![steward_dialects::Piece::Text(text.clone())],
            };
            let calls = pieces
                .iter()
                .filter(|p| matches!(p, steward_dialects::Piece::CallStart { .. }))
                .count() as u32;
            return d.whole(
                self.created,
                &self.model,
                pieces,
                dialect::finish_of(&[f], calls),
                dialect::usage_of(&[f], self.spec.pin),
            );
        }
        let v = match self.api {
            Api::Chat => {
                let choices = results
                    .iter()
                    .enumerate()
                    .map(|(i, (text, lps, f))| {
                        let (content, reasoning_content, calls) = match &self.output {
                            Some(o) => output::whole(o, &self.id, i as u32, text),
                            None => (Some(text.clone()), None, Vec::new()),
                        };
                        let n_calls = calls.len() as u32;
                        p::ChatChoice {
                            index: i as u32,
                            message: p::ResponseMessage {
                                role: "assistant".into(),
                                content,
                                reasoning_content,
                                tool_calls: (!calls.is_empty()).then_some(calls),
                            },
                            finish_reason: finish_str(f.reason, n_calls),
                            logprobs: self.logprobs_value(lps, Some(f)),
                        }
                    })
                    .collect();
                let r = p::ChatCompletionResponse {
                    id: self.id.clone(),
                    object: "chat.completion".into(),
                    created: self.created,
                    model: self.model.clone(),
                    choices,
                    usage,
                    system_fingerprint: None,
                    timings: t,
                };
                serde_json::to_value(r)
            }
            Api::Completion => {
                let choices = results
                    .iter()
                    .enumerate()
                    .map(|(i, (text, lps, f))| {
                        let mut text = text.clone();
                        if let Some(e) = &self.echo_text {
                            text.insert_str(0, e);
                        }
                        p::CompletionChoice {
                            index: i as u32,
                            text,
                            finish_reason: finish_str(f.reason, 0),
                            logprobs: self.logprobs_value(lps, Some(f)),
                        }
                    })
                    .collect();
                serde_json::to_value(p::CompletionResponse {
                    id: self.id.clone(),
                    object: "text_completion".into(),
                    created: self.created,
                    model: self.model.clone(),
                    choices,
                    usage: Some(Some(usage)),
                    system_fingerprint: None,
                    timings: t,
                })
            }
        };
        v.unwrap_or_default()
    }

    /// One streamed chunk for choice `index`: a text delta, tool-call
    /// deltas, a role announcement, or the choice's finish.
    fn chunk(&self, index: u32, body: ChunkBody, lps: &[TokenLogprob]) -> String {
        let logprobs = if lps.is_empty() {
            None
        } else {
            self.logprobs_value(lps, None)
        };
        let usage_field = self.spec.include_usage.then_some(None);
        let v = match self.api {
            Api::Chat => serde_json::to_value(p::ChatCompletionChunk {
                id: self.id.clone(),
                object: "chat.completion.chunk".into(),
                created: self.created,
                model: self.model.clone(),
                choices: vec![p::ChatChunkChoice {
                    index,
                    delta: p::Delta {
                        role: body.role.then(|| "assistant".to_string()),
                        content: body.text,
                        reasoning_content: body.reasoning,
                        tool_calls: body.calls,
                    },
                    finish_reason: body.finish,
                    logprobs,
                }],
                system_fingerprint: None,
                usage: usage_field,
                timings: None,
            }),
            Api::Completion => serde_json::to_value(p::CompletionResponse {
                id: self.id.clone(),
                object: "text_completion".into(),
                created: self.created,
                model: self.model.clone(),
                choices: vec![p::CompletionChoice {
                    index,
                    text: body.text.unwrap_or_default(),
                    finish_reason: body.finish,
                    logprobs,
                }],
                usage: usage_field,
                system_fingerprint: None,
                timings: None,
            }),
        };
        v.map(|v| v.to_string()).unwrap_or_default()
    }

    fn usage_chunk(&self, fins: &[&Finished], first_text_sent_ms: Option<f64>) -> String {
        let object = if self.api == Api::Chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let mut v = json!({
            "id": self.id, "object": object, "created": self.created,
            "model": self.model, "choices": [], "usage": usage(fins, self.media_tokens),
        });
        if self.spec.timings {
            // Nothing was streamed before the end: the first text is this chunk.
            let sent =
                first_text_sent_ms.unwrap_or_else(|| self.arrival.elapsed().as_secs_f64() * 1e3);
            v["timings"] = serde_json::to_value(timings(fins, sent)).unwrap_or_default();
        }
        v.to_string()
    }
}

/// What one streamed chunk carries.
#[derive(Default)]
struct ChunkBody {
    role: bool,
    text: Option<String>,
    reasoning: Option<String>,
    calls: Option<Vec<p::ToolCallDelta>>,
    finish: Option<String>,
}

/// One choice's streaming state.
#[derive(Default)]
struct ChoiceState {
    started: bool,
    /// The chat output's reader (format, reasoning, tool calls).
    reader: Option<output::Reader>,
    /// Logprobs not yet attached to a chunk (held with held-back text).
    held_lps: Vec<TokenLogprob>,
    echo: Option<String>,
    fin: Option<Finished>,
    /// Completion tokens counted so far.
    tokens: u32,
}

impl ReplyCtx {
    /// A chat choice's first chunk announces the assistant role (once).
    fn start_choice(&self, i: u32, c: &mut ChoiceState, out: &mut Sink) {
        if !c.started && self.api == Api::Chat {
            let role = ChunkBody {
                role: true,
                text: Some(String::new()),
                ..Default::default()
            };
            out.chunk(self, i, role, &[]);
        }
        c.started = true;
    }

    /// Chunks for a piece of text of choice `i` (through the tool parser when
    /// tools are in play); `end`: the choice's text is complete.
    fn text_chunks(
        &self,
        i: u32,
        c: &mut ChoiceState,
        text: String,
        lps: Vec<TokenLogprob>,
        end: bool,
        out: &mut Sink,
    ) {
        c.held_lps.extend(lps);
        let pieces = match c.reader.as_mut() {
            // Empty text: keep its logprobs for the next chunk, unless this
            // is the end and some are held.
            None if text.is_empty() && (!end || c.held_lps.is_empty()) => Vec::new(),
            None => vec![Piece::Content(text)],
            Some(r) => {
                let mut v = r.push(&text);
                if end {
                    v.extend(r.finish());
                }
                // Logprobs held with held-back text go out at the end.
                if end && v.is_empty() && !c.held_lps.is_empty() {
                    v.push(Piece::Content(String::new()));
                }
                v
            }
        };
        for piece in pieces {
            let body = match piece {
                Piece::Content(t) => ChunkBody {
                    text: Some(t),
                    ..Default::default()
                },
                Piece::Reasoning(t) => ChunkBody {
                    reasoning: Some(t),
                    ..Default::default()
                },
                Piece::CallStart { index, id, name } => ChunkBody {
                    calls: Some(vec![p::ToolCallDelta {
                        index,
                        id: Some(id),
                        kind: Some("function".into()),
                        function: p::FunctionCallDelta {
                            name: Some(name),
                            arguments: Some(String::new()),
                        },
                    }]),
                    ..Default::default()
                },
                Piece::Args { index, text } => ChunkBody {
                    calls: Some(vec![p::ToolCallDelta {
                        index,
                        id: None,
                        kind: None,
                        function: p::FunctionCallDelta {
                            name: None,
                            arguments: Some(text),
                        },
                    }]),
                    ..Default::default()
                },
            };
            let lps = std::mem::take(&mut c.held_lps);
            out.chunk(self, i, body, &lps);
        }
    }
}

/// Where streamed chunks go: SSE events in chat-completion chunks, or
/// through a dialect's stream into its own events.
pub(crate) struct Sink {
    queue: std::collections::VecDeque<SseEvent>,
    dialect: Option<Box<dyn DialectStream>>,
}

impl Sink {
    fn data(&mut self, s: String) {
        self.queue.push_back(SseEvent::default().data(s));
    }

    fn outs(&mut self, outs: Vec<steward_dialects::Out>) {
        for o in outs {
            self.queue
                .push_back(SseEvent::default().event(o.event).data(o.data.to_string()));
        }
    }

    fn chunk(&mut self, ctx: &ReplyCtx, i: u32, body: ChunkBody, lps: &[TokenLogprob]) {
        let Some(d) = self.dialect.as_mut() else {
            let c = ctx.chunk(i, body, lps);
            return self.data(c);
        };
        let mut pieces = Vec::new();
        if let Some(t) = body.reasoning.filter(|t| !t.is_empty()) {
            pieces.push(steward_dialects::Piece::Reasoning(t));
        }
        if let Some(t) = body.text.filter(|t| !t.is_empty()) {
            pieces.push(steward_dialects::Piece::Text(t));
        }
        for c in body.calls.into_iter().flatten() {
            match (c.id, c.function.name) {
                (Some(id), Some(name)) => pieces.push(steward_dialects::Piece::CallStart {
                    index: c.index,
                    id,
                    name,
                }),
                _ => pieces.push(steward_dialects::Piece::Args {
                    index: c.index,
                    text: c.function.arguments.unwrap_or_default(),
                }),
            }
        }
        let outs: Vec<_> = pieces.into_iter().flat_map(|p| d.piece(p)).collect();
        self.outs(outs);
    }

    /// The request's end: the dialect's closing events, or the chat
    /// stream's usage chunk and `[DONE]`.
    fn finish(
        &mut self,
        ctx: &ReplyCtx,
        fins: &[&Finished],
        calls: u32,
        first_text_sent_ms: Option<f64>,
    ) {
        match self.dialect.as_mut() {
            Some(d) => {
                let outs = d.finish(
                    dialect::finish_of(fins, calls),
                    dialect::usage_of(fins, ctx.spec.pin),
                );
                self.outs(outs);
            }
            None => {
                if ctx.spec.include_usage || ctx.spec.timings {
                    let u = ctx.usage_chunk(fins, first_text_sent_ms);
                    self.data(u);
                }
                self.data("[DONE]".into());
            }
        }
    }

    fn error(&mut self, api: ApiError) {
        match self.dialect.as_mut() {
            Some(d) => {
                let outs = d.error(&dialect::error_of(&api));
                self.outs(outs);
            }
            None => {
                self.data(serde_json::to_string(&api.body()).unwrap_or_default());
                self.data("[DONE]".into());
            }
        }
    }
}

type Tagged = futures::stream::BoxStream<'static, (u32, Event)>;

/// A streamed reply's state: the choices' merged events, what each has
/// sent, and the queue of SSE events to write.
struct St {
    ctx: ReplyCtx,
    rx: futures::stream::SelectAll<Tagged>,
    queue: Sink,
    choices: Vec<ChoiceState>,
    remaining: usize,
    done: bool,
    last_text: Option<Instant>,
    first_text_sent_ms: Option<f64>,
}

impl St {
    /// One choice's event (`None`: the engine ended the streams) into the
    /// queue's SSE events.
    fn on_event(&mut self, i: u32, ev: Option<Event>) {
        match ev {
            Some(Event::Admitted) => {}
            Some(Event::Text {
                text,
                logprobs,
                tokens,
            }) => {
                let c = &mut self.choices[i as usize];
                c.tokens += tokens;
                if let Some(ch) = &self.ctx.charge {
                    ch.generated(tokens);
                }
                self.ctx.start_choice(i, c, &mut self.queue);
                if self.first_text_sent_ms.is_none() {
                    let s = self.ctx.arrival.elapsed().as_secs_f64();
                    let ex = self.ctx.record.exemplar();
                    self.ctx.metrics.observe_first_text(s, ex);
                    self.first_text_sent_ms = Some(s * 1e3);
                }
                self.ctx.record.text_sent();
                let now = Instant::now();
                if let Some(prev) = self.last_text.replace(now) {
                    self.ctx.metrics.observe_itl(
                        now.duration_since(prev).as_secs_f64(),
                        self.ctx.record.exemplar(),
                    );
                }
                let text = match c.echo.take() {
                    Some(e) => e + &text,
                    None => text,
                };
                self.ctx
                    .text_chunks(i, c, text, logprobs, false, &mut self.queue);
            }
            Some(Event::Done(f)) => {
                let c = &mut self.choices[i as usize];
                if let Some(ch) = &self.ctx.charge {
                    ch.finished(c.tokens, f.completion_tokens);
                }
                self.ctx.start_choice(i, c, &mut self.queue);
                let tail = c.echo.take().unwrap_or_default();
                self.ctx
                    .text_chunks(i, c, tail, Vec::new(), true, &mut self.queue);
                let calls = c.reader.as_ref().map_or(0, output::Reader::calls);
                let lps = std::mem::take(&mut c.held_lps);
                let fin = ChunkBody {
                    finish: finish_str(f.reason, calls),
                    ..Default::default()
                };
                if self.queue.dialect.is_none() {
                    self.queue.chunk(&self.ctx, i, fin, &lps);
                }
                self.ctx
                    .metrics
                    .observe_finished(&f, self.ctx.record.exemplar());
                let reason = finish_str(f.reason, calls).unwrap_or_default();
                self.ctx.record.note(|r| r.finish.push(reason));
                c.fin = Some(f);
                self.remaining -= 1;
                if self.remaining == 0 {
                    let fins: Vec<&Finished> =
                        self.choices.iter().filter_map(|c| c.fin.as_ref()).collect();
                    self.queue
                        .finish(&self.ctx, &fins, calls, self.first_text_sent_ms);
                    self.done = true;
                }
            }
            Some(Event::Error(e)) => {
                let api = ApiError::from(e);
                self.ctx.metrics.record_failure(api.code);
                self.ctx.record.note(|r| r.error = Some(api.code));
                self.queue.error(api);
                self.done = true;
            }
            None => {
                let api = ApiError::internal("the engine ended this request without a result");
                self.queue.error(api);
                self.done = true;
            }
        }
    }
}

/// Relay engine events as SSE, every choice's interleaved as they come.
/// Keep-alive comments flow while the prompt is still being prefilled. The
/// stream owns the `RequestStream`s: when the client goes, axum drops them,
/// and the engine cancels every choice.
pub(crate) fn sse_response(
    keepalive: std::time::Duration,
    ctx: ReplyCtx,
    streams: Vec<RequestStream>,
    firsts: Vec<Option<Event>>,
    prompt_tokens: u32,
) -> Response {
    let n = streams.len();
    let tagged: Vec<Tagged> = streams
        .into_iter()
        .zip(firsts)
        .enumerate()
        .map(|(i, (rs, first))| {
            let head = futures::stream::iter(first.map(|e| (i as u32, e)));
            let rest = futures::stream::unfold(rs, move |mut rs| async move {
                rs.next().await.map(|e| ((i as u32, e), rs))
            });
            futures::StreamExt::boxed(futures::StreamExt::chain(head, rest))
        })
        .collect();
    let choices = (0..n)
        .map(|i| ChoiceState {
            reader: ctx
                .output
                .as_ref()
                .map(|o| output::Reader::new(o, &ctx.id, i as u32)),
            echo: ctx.echo_text.clone(),
            ..Default::default()
        })
        .collect();
    let mut sink = Sink {
        queue: Default::default(),
        dialect: ctx
            .dialect
            .as_ref()
            .map(|d| d.stream(&ctx.id, ctx.created, &ctx.model, prompt_tokens)),
    };
    if let Some(d) = sink.dialect.as_mut() {
        let outs = d.start();
        sink.outs(outs);
    }
    let st = St {
        ctx,
        rx: futures::stream::select_all(tagged),
        queue: sink,
        choices,
        remaining: n,
        done: false,
        last_text: None,
        first_text_sent_ms: None,
    };
    let stream = futures::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.queue.queue.pop_front() {
                return Some((Ok::<_, Infallible>(ev), st));
            }
            if st.done {
                return None;
            }
            let ev = futures::StreamExt::next(&mut st.rx).await;
            let (i, ev) = match ev {
                Some((i, ev)) => (i, Some(ev)),
                None => (0, None),
            };
            st.on_event(i, ev);
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(keepalive).text("keep-alive"))
        .into_response()
}
