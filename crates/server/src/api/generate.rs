//! The generation path of `/v1/chat/completions` and `/v1/completions`
//! (and of the dialects translated into them): route to a model, validate,
//! render and tokenize, compile any grammar, submit one sequence per
//! choice, then answer whole (`collect`) or streamed (`sse_response`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use steward_engine::prepare::ChatTokens;
use steward_engine::request::MediaSpan;
use steward_engine::{
    EngineHandle, Event, GenerateRequest, PrepareError, Preparer, RequestStream, Tenancy, TokenId,
};

use super::models;
use super::state::{now_secs, request_id, Shared};
use crate::deliver::output::OutputCtx;
use crate::deliver::reply::{collect, ctx_timeout, sse_response, ReplyCtx};
use crate::deliver::shape::Dialect;
use crate::http::access::{self, Admitted};
use crate::http::counters::HttpMetrics;
use crate::http::error::ApiError;
use crate::http::quota::{self, Charge};
pub(crate) use crate::prepare::spec::Api;
use crate::prepare::spec::{GenSpec, PromptInput};
use crate::prepare::{forcing, media, pin, validate};

pub(crate) async fn chat_completions(
    State(s): State<Shared>,
    caller: Option<Extension<Admitted>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = caller.map(|c| c.0);
    generate(s, headers, body, Api::Chat, None, caller).await
}

pub(crate) async fn completions(
    State(s): State<Shared>,
    caller: Option<Extension<Admitted>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = caller.map(|c| c.0);
    generate(s, headers, body, Api::Completion, None, caller).await
}

/// How a request came: its endpoint, the API whose shape it is answered
/// in (`None`: the endpoint's own), and the key it came with (`None`: the
/// server has no keys).
pub(crate) struct Entry {
    api: Api,
    dialect: Option<Arc<dyn Dialect>>,
    caller: Option<Admitted>,
    /// Its record (access log, trace), shared with the reply and the engine.
    record: Arc<crate::ops::trace::Record>,
}

/// Serve a request: a chat or completion body; with a `dialect`, a chat
/// body translated from another API, answered in that API's shape.
pub(crate) async fn generate(
    s: Shared,
    headers: HeaderMap,
    body: Bytes,
    api: Api,
    dialect: Option<Arc<dyn Dialect>>,
    caller: Option<Admitted>,
) -> Response {
    let arrival = Instant::now();
    let seq = s.next_seq.fetch_add(1, Ordering::Relaxed);
    let id = match &dialect {
        Some(d) => d.id(),
        None => request_id(
            &headers,
            if api == Api::Chat { "chatcmpl" } else { "cmpl" },
            seq,
        ),
    };
    let record = s.recorder().begin(&id, &headers, arrival);
    let route = match (&dialect, api) {
        (Some(d), _) => d.route(),
        (None, Api::Chat) => "POST /v1/chat/completions",
        (None, Api::Completion) => "POST /v1/completions",
    };
    record.note(|r| r.route = route);
    let peek = models::Peek::of(&body);
    // A stream whose model must load first answers at once and pings
    // while it loads (chat completions; another API's client waits).
    let waits = dialect.is_none()
        && peek.stream()
        && s.registry().is_ok_and(|r| r.would_wait(peek.model()));
    let name = s
        .registry
        .get()
        .and_then(|r| r.model_of(peek.model()))
        .unwrap_or_default();
    let traceparent = s.recorder().response_header(&record);
    let entry = Entry {
        api,
        dialect,
        caller,
        record,
    };
    let fut = answer(s.clone(), id.clone(), seq, body, entry, arrival, peek);
    let mut resp = if waits {
        s.model_metrics(&name).record_status(200);
        models::loading_stream(&s, fut)
    } else {
        fut.await
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    if let Some(v) = traceparent.and_then(|t| HeaderValue::from_str(&t).ok()) {
        resp.headers_mut().insert("traceparent", v);
    }
    resp
}

async fn answer(
    s: Shared,
    id: String,
    seq: u64,
    body: Bytes,
    api: Entry,
    arrival: Instant,
    peek: models::Peek,
) -> Response {
    let span = tracing::info_span!("request", request_id = %id);
    let record = api.record.clone();
    let result =
        tracing::Instrument::instrument(run(&s, &id, seq, body, api, arrival, peek), span).await;
    match result {
        Ok(r) => r,
        Err((e, m)) => {
            tracing::info!(request_id = %id, status = e.status.as_u16(), code = e.code, "request rejected");
            record.note(|r| {
                r.status = e.status.as_u16();
                r.error = Some(e.code);
            });
            let m = m.unwrap_or_else(|| s.metrics.clone());
            m.record_status(e.status.as_u16());
            m.record_failure(e.code);
            e.into_response()
        }
    }
}

async fn run(
    s: &Shared,
    id: &str,
    seq: u64,
    body: Bytes,
    api: Entry,
    arrival: Instant,
    peek: models::Peek,
) -> Result<Response, (ApiError, Option<Arc<HttpMetrics>>)> {
    let routed = models::route(s, &peek).await.map_err(|e| (e, None))?;
    let m = routed.metrics.clone();
    generate_on(s, id, seq, body, api, arrival, routed)
        .await
        .map_err(|e| (e, Some(m)))
}

/// A request on its model: ① validate and prepare (template, tokens,
/// grammar), the key's token quota, ② ③ submit one sequence per choice,
/// ④ ⑤ deliver.
async fn generate_on(
    s: &Shared,
    id: &str,
    seq: u64,
    body: Bytes,
    Entry {
        api,
        dialect,
        caller,
        record,
    }: Entry,
    arrival: Instant,
    routed: models::Routed,
) -> Result<Response, ApiError> {
    let (mut spec, input) = validate(s, &body, seq, api, &routed)?;
    // Everything the body holds has been moved out (a request's media can
    // make it tens of MiB): not held while the request runs.
    drop(body);
    record.note(|r| {
        r.model = routed.name.clone();
        r.adapters = adapter_names(&routed);
        r.stream = spec.stream;
        r.choices = spec.n;
    });
    let mut p = prepare(s, &mut spec, input, api, &routed.engine, arrival).await?;
    let media_tokens = p.media_tokens;
    // A batch line (`batch::line`) runs in the background.
    p.plan.tenancy = crate::batch::line::mark(tenancy(caller.as_ref(), spec.priority));
    // Reserved until the reply ends (the stream's end, for a stream).
    record.note(|r| {
        r.key = caller.as_ref().map(|a| a.name.clone());
        r.priority = p.plan.tenancy.priority;
        r.tokenized = Some(p.plan.tokenized);
        r.media = !p.plan.media.is_empty();
        r.prompt_tokens = p.prompt.len() as u32;
    });
    let charge = reserve(caller.as_ref(), p.prompt.len(), p.plan.max_tokens, spec.n)?;
    let timeline: Arc<dyn steward_engine::TimelineSink> = record.clone();
    let streams = submit(
        id,
        api,
        &spec,
        p.prompt.clone(),
        (p.plan, timeline),
        &routed,
        arrival,
    )?;
    let ctx = ReplyCtx {
        id: id.to_string(),
        model: routed.name.clone(),
        created: now_secs(),
        api,
        spec,
        arrival,
        engine: routed.engine.clone(),
        metrics: routed.metrics.clone(),
        echo_text: p.echo_text,
        first_prompt_token: p.prompt.first().copied(),
        output: p.output,
        dialect,
        media_tokens,
        charge,
        record,
    };
    deliver(s, ctx, streams, p.prompt.len() as u32).await
}

/// The request's adapter set by name (`name*scale`, comma-separated).
fn adapter_names(routed: &models::Routed) -> String {
    let list = routed.engine.adapters();
    let name = |id: usize| {
        list.iter()
            .find(|a| a.id == id)
            .map_or_else(|| id.to_string(), |a| a.name.clone())
    };
    let names: Vec<String> = routed
        .adapters
        .iter()
        .map(|&(id, scale)| format!("{}*{scale}", name(id)))
        .collect();
    names.join(",")
}

/// Whom a request runs for and how it ranks: its key's name and weight,
/// the `priority` it asked for under its key's ceiling.
fn tenancy(caller: Option<&Admitted>, asked: Option<i32>) -> Tenancy {
    match caller {
        Some(a) => Tenancy {
            tenant: a.name.clone(),
            weight: a.weight,
            priority: a.priority_for(asked),
            ..Tenancy::default()
        },
        None => Tenancy {
            priority: access::effective_priority(asked, None),
            ..Tenancy::default()
        },
    }
}

/// The request's bound (prompt + `max_tokens` × `n`) reserved against its
/// key's token quota: a 429 naming the quota when it does not fit. The
/// charge settles to the tokens used when it drops.
fn reserve(
    caller: Option<&Admitted>,
    prompt: usize,
    max_tokens: u32,
    n: u32,
) -> Result<Option<Charge>, ApiError> {
    let Some(a) = caller else { return Ok(None) };
    let need = prompt as u64 + u64::from(max_tokens) * u64::from(n);
    Charge::reserve(
        a.quota.clone(),
        Some(a.counters.clone()),
        need,
        Instant::now(),
    )
    .map(Some)
    .map_err(|e| quota_refused(&e, &a.name))
}

fn quota_refused(e: &quota::Exceeded, key: &str) -> ApiError {
    ApiError {
        // A bound past the whole quota never fits: no time to wait for.
        retry_after: e.retry_after,
        ..ApiError::rate_limited(e.message(key), "rate_limit_exceeded", 1)
    }
}

/// The body checked against the limits and the model: a generative model,
/// fields valid, `logit_bias` within the vocabulary, and text that could
/// fit the context (certainly longer text is refused before the template
/// and the tokenizer spend time on it).
fn validate(
    s: &Shared,
    body: &[u8],
    seq: u64,
    api: Api,
    routed: &models::Routed,
) -> Result<(GenSpec, PromptInput), ApiError> {
    let engine = &routed.engine;
    if engine.pooling().is_some() {
        return Err(ApiError {
            code: "model_not_generative",
            ..ApiError::invalid(
                format!(
                    "model `{}` is an embedding model: it serves /v1/embeddings and /v1/rerank, not generation",
                    routed.name
                ),
                Some("model"),
            )
        });
    }
    let (spec, input) = match api {
        Api::Chat => validate::chat(body, seq, &s.limits)?,
        Api::Completion => validate::completion(body, seq, engine.preparer().n_vocab(), &s.limits)?,
    };
    if let PromptInput::Chat(_, parts) = &input {
        media::check_modality(parts, engine.preparer().encoder().map(|e| &e.info))?;
    }
    let n_vocab = engine.preparer().n_vocab();
    if let Some(&(t, _)) = spec
        .sampling
        .logit_bias
        .iter()
        .find(|b| b.0 as usize >= n_vocab)
    {
        return Err(ApiError::invalid_value(
            format!("`logit_bias` names token {t}, outside the vocabulary (0..{n_vocab})"),
            "logit_bias",
        ));
    }
    if scores_prompt(&spec) && spec.stream {
        return Err(ApiError::unsupported(
            "`echo` with `logprobs` is supported without `stream` only",
            "echo",
        ));
    }
    // A token covers at most the vocabulary's longest token of text.
    let tool_bytes = spec.tools.as_ref().map_or(0, |t| t.tools.to_string().len());
    let text_bytes = match &input {
        PromptInput::Chat(c, _) => {
            tool_bytes
                + c.messages
                    .iter()
                    .map(|m| m.to_string().len())
                    .sum::<usize>()
        }
        PromptInput::Text(t) => t.len(),
        PromptInput::Tokens(_) => 0,
    };
    engine
        .preparer()
        .check_text_fits(text_bytes, engine.context_limit())?;
    Ok((spec, input))
}

/// Completions `echo` with `logprobs`: the prompt is scored too.
fn scores_prompt(spec: &GenSpec) -> bool {
    spec.echo && spec.logprobs.is_some()
}

/// What the prompt became, and what every choice's sequence is given.
struct Prepared {
    prompt: Vec<TokenId>,
    /// Completions `echo`: the prompt's text.
    echo_text: Option<String>,
    /// Chat: how the output is read.
    output: Option<OutputCtx>,
    plan: Plan,
    /// The prompt's image and audio positions.
    media_tokens: (Option<u32>, Option<u32>),
}

/// A prepared request's engine settings beside its prompt.
struct Plan {
    tokenized: Instant,
    max_tokens: u32,
    constraint: Option<steward_engine::constraint::Constraint>,
    deadline: Option<Instant>,
    /// The prompt's media spans (every choice's sequence gets them).
    media: Vec<MediaSpan>,
    /// Whom the request runs for (every choice).
    tenancy: Tenancy,
}

/// Stage ①'s engine side: render and tokenize (the bounded pool),
/// `max_tokens` against the context, logprob volume, the chat's grammar
/// compiled, the deadline, a draft model when one is asked for.
async fn prepare(
    s: &Shared,
    spec: &mut GenSpec,
    input: PromptInput,
    api: Api,
    engine: &EngineHandle,
    arrival: Instant,
) -> Result<Prepared, ApiError> {
    let Tokenized {
        prompt,
        echo_text,
        output,
        in_reasoning,
        media,
        media_tokens,
    } = tokenize(s, spec, input, engine).await?;
    let tokenized = Instant::now();
    let max_tokens = Preparer::resolve_max_tokens(
        prompt.len(),
        spec.max_tokens,
        engine.context_limit(),
        engine.config().prepare.max_tokens_limit,
    )?;
    let lp_tokens = if scores_prompt(spec) {
        prompt.len() as u64 + u64::from(max_tokens)
    } else {
        u64::from(max_tokens)
    };
    validate::check_logprob_volume(spec, lp_tokens, &s.limits)?;
    forcing::chat_grammar(spec, api, engine, in_reasoning, max_tokens)?;
    let constraint = match &spec.grammar {
        None => None,
        Some((g, param)) => Some(engine.preparer().constraint(g.clone()).await.map_err(
            |e| match e {
                PrepareError::Grammar(m) => ApiError {
                    code: "invalid_grammar",
                    ..ApiError::invalid_value(format!("`{param}` does not compile: {m}"), param)
                },
                e => ApiError::from(e),
            },
        )?),
    };
    let deadline = {
        let asked = ctx_timeout(spec);
        let limit = s.request_timeout;
        let d = match (asked, limit) {
            (Some(a), Some(l)) => Some(a.min(l)),
            (a, l) => a.or(l),
        };
        // A deadline past what `Instant` can hold is no deadline.
        d.and_then(|d| arrival.checked_add(d))
    };
    let wants_draft = spec
        .speculative
        .is_some_and(|r| r.mode == Some(steward_engine::SpecMode::Draft));
    if wants_draft && engine.config().model.draft_model.is_none() {
        return Err(ApiError::invalid_value(
            "`speculative.mode` is `draft`, but this model has no draft model (--draft-model); use `ngram` or `off`",
            "speculative.mode",
        ));
    }
    Ok(Prepared {
        prompt,
        echo_text,
        output,
        media_tokens,
        plan: Plan {
            tokenized,
            max_tokens,
            constraint,
            deadline,
            media,
            tenancy: Tenancy::default(),
        },
    })
}

/// What `tokenize` made of the prompt.
struct Tokenized {
    prompt: Vec<TokenId>,
    echo_text: Option<String>,
    output: Option<OutputCtx>,
    in_reasoning: bool,
    media: Vec<MediaSpan>,
    media_tokens: (Option<u32>, Option<u32>),
}

/// The prompt's tokens: a chat rendered through its template (its media
/// decoded and encoded), text tokenized, token IDs as given; with the echo
/// text and, for a chat, how its output is read and whether it starts
/// inside a reasoning block. A chat's pin gets its tokens here.
async fn tokenize(
    s: &Shared,
    spec: &mut GenSpec,
    input: PromptInput,
    engine: &EngineHandle,
) -> Result<Tokenized, ApiError> {
    let plain = |prompt, echo_text| Tokenized {
        prompt,
        echo_text,
        output: None,
        in_reasoning: false,
        media: Vec::new(),
        media_tokens: (None, None),
    };
    Ok(match input {
        PromptInput::Chat(c, parts) => {
            let pr = engine.preparer();
            let probe = pin::probe(spec, &c, !parts.is_empty());
            let (t, kinds) = chat_tokens(s, engine, c, parts).await?;
            pin::settle(spec, probe, &t.tokens, pr).await;
            let output = Some(OutputCtx {
                family: pr.family(),
                tools: spec.tools.as_ref().map(|p| p.tools.clone()),
                reasoning: spec.reasoning,
                in_reasoning: t.in_reasoning,
            });
            Tokenized {
                media_tokens: media::span_tokens(&t.media, &kinds),
                prompt: t.tokens,
                echo_text: None,
                output,
                in_reasoning: t.in_reasoning,
                media: t.media,
            }
        }
        PromptInput::Text(t) => {
            let echo_text = spec.echo.then(|| t.clone());
            plain(engine.preparer().text(t).await?, echo_text)
        }
        PromptInput::Tokens(t) => {
            let echo_text = spec.echo.then(|| {
                let bytes: Vec<u8> = t
                    .iter()
                    .flat_map(|&x| engine.token_bytes(x).to_vec())
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            });
            plain(t, echo_text)
        }
    })
}

/// A chat's tokens through `Preparer::chat`, its media parts decoded
/// first (after the model's modalities are checked), with each media
/// item's kind by hash. Every route that prepares a chat comes here.
pub(crate) async fn chat_tokens(
    s: &Shared,
    engine: &EngineHandle,
    mut c: steward_engine::chat::ChatPrompt,
    parts: Vec<media::MediaPart>,
) -> Result<(ChatTokens, Vec<([u8; 32], media::Kind)>), ApiError> {
    let pr = engine.preparer();
    let mut kinds = Vec::new();
    if !parts.is_empty() {
        let info = pr.encoder().map(|e| e.info.clone());
        media::check_modality(&parts, info.as_ref())?;
        let rate = info.as_ref().and_then(|i| i.audio_rate);
        let r = media::resolve(parts, rate, &s.limits.media, &s.media).await?;
        c.media = r.inputs;
        kinds = r.kinds;
    }
    Ok((pr.chat(c).await?, kinds))
}

/// One sequence per choice: the same prompt (computed once and shared
/// through the prefix cache), its own RNG stream (seed + index), its own
/// copy of the grammar state.
fn submit(
    id: &str,
    api: Api,
    spec: &GenSpec,
    prompt: Vec<TokenId>,
    (mut plan, timeline): (Plan, Arc<dyn steward_engine::TimelineSink>),
    routed: &models::Routed,
    arrival: Instant,
) -> Result<Vec<RequestStream>, ApiError> {
    let engine = &routed.engine;
    let n = spec.n;
    let mut streams = Vec::with_capacity(n as usize);
    for i in 0..n {
        let mut sampling = spec.sampling.clone();
        sampling.seed = sampling.seed.wrapping_add(u64::from(i));
        streams.push(engine.submit(GenerateRequest {
            id: if n == 1 {
                id.to_string()
            } else {
                format!("{id}-{i}")
            },
            prompt: prompt.clone(),
            max_tokens: plan.max_tokens,
            sampling,
            stop: spec.stop.clone(),
            ignore_eos: spec.ignore_eos,
            logprobs: spec.logprobs,
            prompt_logprobs: scores_prompt(spec),
            arrival,
            tokenized: plan.tokenized,
            deadline: plan.deadline,
            // Each choice advances its own grammar state; the last takes
            // the compiled one.
            constraint: if i + 1 == n {
                plan.constraint.take()
            } else {
                plan.constraint.clone()
            },
            markers: (api == Api::Chat).then(|| engine.preparer().markers(spec.tools.is_some())),
            adapters: routed.adapters.clone(),
            speculative: spec.speculative,
            media: plan.media.clone(),
            tenancy: plan.tenancy.clone(),
            pin: spec.pin,
            timeline: Some(timeline.clone()),
        })?);
    }
    Ok(streams)
}

/// The answer: streamed (SSE) or whole, once the first choice is admitted.
async fn deliver(
    s: &Shared,
    ctx: ReplyCtx,
    mut streams: Vec<RequestStream>,
    prompt_tokens: u32,
) -> Result<Response, ApiError> {
    // Wait for the first choice's admission (or a queue timeout, which is
    // then a real 503). Only the first: with fewer free slots than `n` the
    // later choices are admitted as earlier ones finish, which needs their
    // output read meanwhile (waiting for every admission first deadlocked
    // until the slow-reader timeout).
    let mut firsts = vec![None; streams.len()];
    if let Some(st) = streams.first_mut() {
        firsts[0] = match st.next().await {
            Some(Event::Error(e)) => return Err(ApiError::from(e)),
            None => None,
            Some(ev) => {
                // Admitted: the prompt is computed (and counted) from here.
                if let Some(c) = &ctx.charge {
                    c.admitted(prompt_tokens);
                }
                (!matches!(ev, Event::Admitted)).then_some(ev)
            }
        };
    }
    if ctx.spec.stream {
        ctx.metrics.record_status(200);
        ctx.record.note(|r| r.status = 200);
        Ok(sse_response(
            s.sse_keepalive,
            ctx,
            streams,
            firsts,
            prompt_tokens,
        ))
    } else {
        let results = futures::future::join_all(
            streams
                .into_iter()
                .zip(firsts)
                .map(|(st, first)| collect(st, first, ctx.charge.as_ref())),
        )
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        ctx.metrics.record_status(200);
        ctx.record.note(|r| {
            r.status = 200;
            r.finish = results
                .iter()
                .map(|c| c.2.reason.as_str().to_string())
                .collect();
        });
        for r in &results {
            ctx.metrics.observe_finished(&r.2, ctx.record.exemplar());
        }
        // Non-streaming: the first text leaves with the whole body.
        ctx.metrics
            .observe_first_text(ctx.arrival.elapsed().as_secs_f64(), ctx.record.exemplar());
        Ok(Json(ctx.full_response(results)).into_response())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenancy_is_the_keys_name_weight_and_floored_priority() {
        let a = Admitted {
            name: Arc::from("bob"),
            rate: None,
            rate_reset_s: 0.0,
            priority: 5,
            weight: 2.0,
            quota: None,
            counters: Default::default(),
        };
        let t = tenancy(Some(&a), Some(0));
        assert_eq!((&*t.tenant, t.weight, t.priority), ("bob", 2.0, 5));
        assert!(!t.background);
        assert_eq!(tenancy(Some(&a), Some(9)).priority, 9);
        assert_eq!(tenancy(Some(&a), None).priority, 5);
        let anon = tenancy(None, Some(-4));
        assert_eq!((&*anon.tenant, anon.weight, anon.priority), ("", 1.0, -4));
        assert_eq!(tenancy(None, None).priority, 0);
    }
}
