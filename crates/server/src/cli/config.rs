//! `steward serve`'s flags into settings: the engine's (`engine_config`,
//! the one place a flag becomes an `EngineConfig` field, with its default
//! by where the model runs) and the HTTP layer's (`http_config`: options,
//! keys, TLS, connection limits).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use steward_engine::EngineConfig;
use steward_server::access::{Keys, Tls};
use steward_server::conn::ConnLimits;
use steward_server::limits::{Limits, MediaLimits};
use steward_server::ServerOptions;

use super::args::{MediaArgs, ServeArgs};
use super::model::{gpu_layers, template_flag, threads};
use super::rpc;

/// The engine's configuration from the flags (checked; the model's path
/// and name are each model's, filled in by `models::specs`).
pub(crate) fn engine_config(a: &ServeArgs) -> anyhow::Result<EngineConfig> {
    let mut c = EngineConfig::new(PathBuf::new());
    if a.max_seqs == 0 || a.max_seqs > 256 {
        anyhow::bail!("--max-seqs must be between 1 and 256");
    }
    c.admit.max_seqs = a.max_seqs;
    c.admit.ctx_per_seq = a.ctx_per_seq.max(16);
    rpc::setup(&a.model.rpc)?;
    c.model.n_gpu_layers = gpu_layers(a.model.gpu_layers)?;
    // Scheduler defaults by where the model runs (each flag overrides):
    // RPC workers are placed like GPUs but are scheduled as the CPUs they
    // usually are, unless this machine has a GPU of its own.
    let gpu = c.model.n_gpu_layers > 0 && steward_engine::model::rpc::local_gpu_count()? > 0;
    schedule(&mut c, a, gpu)?;
    let l = &a.limits;
    c.prepare.grammar_threads = l.grammar_threads.max(1);
    c.prepare.grammar_queue = l.grammar_queue.max(1);
    c.prepare.grammar_timeout = secs_on(l.grammar_timeout_s, "grammar-timeout-s")?;
    c.model.n_threads = threads(a.model.threads);
    c.model.n_threads_batch = c.model.n_threads;
    c.model.n_ubatch = a.ubatch.max(1);
    c.admit.max_waiting = a.max_waiting.max(1);
    c.prepare.max_tokens_limit = a.max_tokens_limit.max(1);
    c.prepare.tokenizer_threads = a.tokenizer_threads.max(1);
    c.prepare.tokenizer_queue = a
        .tokenizer_queue
        .unwrap_or(64.max(2 * c.admit.max_seqs))
        .max(1);
    c.deliver.outbox_capacity = a.outbox_capacity.max(2);
    c.model.flash_attn = a.flash_attn;
    c.model.kv_q8 = a.kv_q8;
    memory(&mut c, a, gpu)?;
    c.sample.device_sampling = a.device_sampling;
    c.step.speculative = a.speculative;
    c.step.draft_max = a.draft_max as usize;
    c.model.draft_model = a.draft_model.clone();
    if c.step.speculative == steward_engine::SpecMode::Draft && c.model.draft_model.is_none() {
        anyhow::bail!("--speculative draft needs --draft-model");
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    c.sample.sample_threads = a
        .sample_threads
        .unwrap_or(if gpu { (cores / 2).clamp(1, 8) } else { 1 })
        .max(1);
    c.prepare.chat_template = a.chat_template.as_deref().map(template_flag).transpose()?;
    // The encoder takes turns with the owner's steps on the same cores
    // (`steward_engine::cores`): as many threads as a step.
    c.prepare.encoder_threads = a.encoder_threads.unwrap_or(c.model.n_threads).max(1);
    c.prepare.encoder_queue = a.encoder_queue.max(1);
    c.prepare.encoder_timeout = secs_on(a.encoder_timeout_s, "encoder-timeout-s")?;
    c.prepare.encoder_cache_bytes = (a.encoder_cache_mb << 20) as usize;
    c.prepare.encoder_on_owner = a.encoder_on_owner;
    c.model.progress = true;
    c.step.adapter_slice = a.adapter_slice.max(1);
    Ok(c)
}

/// The step scheduler's and the slow reader's settings.
fn schedule(c: &mut EngineConfig, a: &ServeArgs, gpu: bool) -> anyhow::Result<()> {
    c.step.prompt_budget = a
        .prompt_budget
        .unwrap_or(if gpu { 8192 } else { 256 })
        .max(1);
    c.step.max_prefill_seqs = a
        .max_prefill_seqs
        .unwrap_or(if gpu { a.max_seqs } else { 2 })
        .max(1);
    c.step.max_decode_seqs = a.max_decode_seqs.unwrap_or(a.max_seqs).clamp(1, a.max_seqs);
    let target = a.target_step_ms.unwrap_or(if gpu { 50.0 } else { 250.0 });
    c.step.target_step_ms = (target > 0.0).then_some(target);
    c.step.target_min_prompt = a.target_min_prompt.unwrap_or(if gpu { 2048 } else { 0 });
    c.step.chunk_align = a
        .chunk_align
        .unwrap_or(if gpu && !a.kv_unified { 32 } else { 0 });
    c.step.min_prompt_budget = a.min_prompt_budget.max(1);
    c.step.ttft_target_ms = (a.ttft_target_ms > 0.0).then_some(a.ttft_target_ms);
    c.step.expedite_max_tokens = a.expedite_max_tokens;
    c.step.expedite_max_seqs = a.expedite_max_seqs.max(1);
    c.step.burst_prefill = !gpu && !a.no_burst_prefill;
    c.step.burst_max_tokens = a.burst_max_tokens.max(1);
    let itl = a.itl_target_ms.unwrap_or(if gpu { 0.0 } else { 50.0 });
    c.step.itl_target_ms = (itl > 0.0).then_some(itl);
    c.admit.policy = a.scheduling_policy;
    c.admit.fair_share = a.fair_share;
    c.admit.preempt = !a.no_preempt;
    c.admit.queue_timeout = secs(a.queue_timeout_s, "queue-timeout-s")?;
    c.deliver.max_lag_tokens = a.max_lag_tokens.max(1);
    c.deliver.slow_reader = match a.slow_reader.as_str() {
        "pause" => steward_engine::SlowReaderPolicy::Pause,
        "terminate" => steward_engine::SlowReaderPolicy::Terminate,
        other => anyhow::bail!("--slow-reader must be pause or terminate, not {other}"),
    };
    c.deliver.slow_reader_timeout = secs(a.slow_reader_timeout_s, "slow-reader-timeout-s")?;
    Ok(())
}

/// The memory budget, the KV cache and what the prefix cache keeps.
fn memory(c: &mut EngineConfig, a: &ServeArgs, gpu: bool) -> anyhow::Result<()> {
    if let Some(b) = &a.memory_budget {
        let total = steward_engine::memory::mem_total().unwrap_or(0);
        let budget = steward_engine::memory::parse_budget(b, total).map_err(anyhow::Error::msg)?;
        // The Responses store's cap is server memory beside the models.
        c.admit.memory_budget = Some(budget.saturating_sub(a.limits.responses_store_mb << 20));
    }
    c.model.kv_unified = a.kv_unified;
    c.model.swa_full = a.swa_full;
    c.admit.checkpoint_bytes = a.checkpoint_mb << 20;
    c.admit.checkpoint_min_tokens = a.checkpoint_min_tokens;
    c.admit.checkpoint_interval = a.checkpoint_interval;
    c.admit.prefix_cache = a.prefix_cache;
    c.admit.prefix_copy_min = a.prefix_copy_min;
    c.admit.prefix_host_bytes = a.prefix_host_mb.unwrap_or(if gpu { 0 } else { 512 }) << 20;
    c.admit.prefix_host_min = a.prefix_host_min;
    if !(a.disk_cache_gb >= 0.0 && a.disk_cache_gb.is_finite()) {
        anyhow::bail!(
            "--disk-cache-gb must be 0 or more (got {})",
            a.disk_cache_gb
        );
    }
    c.admit.disk_bytes = (a.disk_cache_gb * (1u64 << 30) as f64) as u64;
    c.admit.pin_bytes = a.pin_budget_mb << 20;
    c.admit.pin_max_ttl = match a.pin_max_ttl_s {
        None => None,
        Some(s) => Some(secs_on(s, "pin-max-ttl-s")?),
    };
    Ok(())
}

/// The HTTP layer's settings from the flags.
pub(crate) struct HttpConfig {
    pub(crate) options: ServerOptions,
    pub(crate) keys: Arc<Keys>,
    pub(crate) tls: Option<Arc<Tls>>,
    pub(crate) conn_limits: ConnLimits,
    /// `--drain-timeout-s` (zero: none).
    pub(crate) grace: Duration,
}

pub(crate) fn http_config(a: &ServeArgs) -> anyhow::Result<HttpConfig> {
    let request_timeout = secs(a.request_timeout_s, "request-timeout-s")?;
    let l = &a.limits;
    let acc = &a.access;
    let keys = Keys::new(
        a.api_key.clone(),
        acc.api_key_file.clone(),
        acc.rate_limit_rpm,
    )?;
    let tls = match (&acc.tls_cert, &acc.tls_key) {
        (Some(c), Some(k)) => Some(Tls::new(c.clone(), k.clone())?),
        _ => None,
    };
    let options = ServerOptions {
        api_key: a.api_key.clone(),
        keys: Some(keys.clone()),
        web: !acc.no_web,
        sse_keepalive: secs_on(a.sse_keepalive_s.max(0.05), "sse-keepalive-s")?,
        request_timeout,
        limits: Limits {
            max_body_bytes: l.max_body_bytes.unwrap_or(2 << 20).max(1),
            max_messages: l.max_messages.max(1),
            max_tools: l.max_tools,
            max_stop: l.max_stop,
            max_stop_bytes: l.max_stop_bytes.max(1),
            max_grammar_bytes: l.max_grammar_bytes,
            max_schema_depth: l.max_schema_depth,
            max_n: l.max_n.max(1),
            max_logprob_entries: l.max_logprob_entries,
            max_timeout_s: 86_400.0 * 365.0,
            media: media_limits(&l.media)?,
        },
        body_timeout: secs_on(l.body_timeout_s, "body-timeout-s")?,
        cors_origins: l.cors_origin.clone(),
        responses_store: (
            l.responses_store_entries,
            l.responses_store_mb << 20,
            secs_on(l.responses_ttl_s, "responses-ttl-s")?,
        ),
    };
    let grace = secs(a.drain_timeout_s, "drain-timeout-s")?.unwrap_or_default();
    let conn_limits = ConnLimits {
        max_connections: l.max_connections.max(1),
        header_timeout: secs_on(l.header_timeout_s, "header-timeout-s")?,
        idle_timeout: secs_on(l.idle_timeout_s, "idle-timeout-s")?,
        // Shutdown ends within --drain-timeout-s: the engine's drain gets
        // the time but this, open responses this to finish.
        close_grace: grace.min(Duration::from_secs(1)),
        tls: tls.clone(),
    };
    Ok(HttpConfig {
        options,
        keys,
        tls,
        conn_limits,
        grace,
    })
}

/// The media flags, checked: URLs need their hosts.
fn media_limits(m: &MediaArgs) -> anyhow::Result<MediaLimits> {
    let url_hosts = match (m.media_allow_url, m.media_url_hosts.is_empty()) {
        (false, true) => None,
        (false, false) => anyhow::bail!("--media-url-hosts needs --media-allow-url"),
        (true, true) => anyhow::bail!(
            "--media-allow-url needs --media-url-hosts (the hosts image URLs may name; `*` for any)"
        ),
        (true, false) => Some(
            m.media_url_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
        ),
    };
    Ok(MediaLimits {
        max_parts: m.media_max_parts,
        max_part_bytes: m.media_max_part_bytes,
        max_request_bytes: m.media_max_request_bytes,
        max_pixels: m.media_max_pixels,
        max_request_pixels: m.media_max_request_pixels,
        max_audio_seconds: m.media_max_audio_seconds,
        url_hosts,
        url_timeout: secs_on(m.media_url_timeout_s, "media-url-timeout-s")?,
    })
}

/// The body limit a server with a projector gets unless
/// `--max-body-bytes` says: room for a request's media in base64.
pub(crate) fn media_body_bytes(m: &MediaArgs) -> usize {
    (2 << 20) + m.media_max_request_bytes.div_ceil(3) * 4
}

/// A flag in seconds: 0 or less is `None` (off); a value no `Duration`
/// holds is an error, not a panic.
pub(crate) fn secs(x: f64, flag: &str) -> anyhow::Result<Option<Duration>> {
    if x.is_nan() {
        anyhow::bail!("--{flag} must be a number of seconds");
    }
    if x <= 0.0 {
        return Ok(None);
    }
    Duration::try_from_secs_f64(x)
        .map(Some)
        .map_err(|_| anyhow::anyhow!("--{flag} {x} is out of range"))
}

pub(crate) fn secs_on(x: f64, flag: &str) -> anyhow::Result<Duration> {
    secs(x, flag)?.ok_or_else(|| anyhow::anyhow!("--{flag} must be above 0"))
}
