//! Prometheus text for `/metrics`: engine gauges and counters from the
//! engine's `watch` snapshot. Every metric name is declared in this file,
//! but the HTTP side's own (`crate::http::counters`).

pub use super::ledger_metrics::render_ledger;
use std::fmt::Write;

use steward_engine::stats::BUCKETS_MS;
use steward_engine::{CancelState, EngineStats, Histogram as EngineHistogram};

/// An engine histogram (milliseconds) as a Prometheus histogram in seconds.
fn engine_hist(o: &mut String, name: &str, labels: &str, hist: &EngineHistogram) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (i, b) in BUCKETS_MS.iter().enumerate() {
        let _ = writeln!(
            o,
            "{name}_bucket{{{labels}{sep}le=\"{}\"}} {}",
            b / 1e3,
            hist.counts[i]
        );
    }
    let _ = writeln!(o, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", hist.n);
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(
        o,
        "{name}_sum{braces} {}\n{name}_count{braces} {}",
        hist.sum_ms / 1e3,
        hist.n
    );
}

fn engine_histograms(o: &mut String, e: &EngineStats) {
    let head = |o: &mut String, name: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} histogram");
    };
    head(
        o,
        "steward_cancel_latency_seconds",
        "From the transport noticing a cancel to final retirement of all state, by state",
    );
    for st in CancelState::ALL {
        let labels = format!("state=\"{}\"", st.as_str());
        engine_hist(
            o,
            "steward_cancel_latency_seconds",
            &labels,
            &e.cancel_latency[st.index()],
        );
    }
    head(
        o,
        "steward_step_duration_seconds",
        "Duration of one engine step",
    );
    engine_hist(o, "steward_step_duration_seconds", "", &e.step_ms);
    head(
        o,
        "steward_queue_wait_seconds",
        "Time from submission to admission",
    );
    engine_hist(o, "steward_queue_wait_seconds", "", &e.queue_wait_ms);
    let _ = writeln!(o, "# HELP steward_cancelled_total Cancellations by the state they happened in\n# TYPE steward_cancelled_total counter");
    for st in CancelState::ALL {
        let _ = writeln!(
            o,
            "steward_cancelled_total{{state=\"{}\"}} {}",
            st.as_str(),
            e.cancelled_by_state[st.index()]
        );
    }
    // (`stat`, not `quantile`: a gauge with a `quantile` label reads as a
    // malformed summary to promtool.)
    let _ = writeln!(o, "# HELP steward_cancel_latency_recent_seconds p50/p99/max of the last 4096 cancellation latencies\n# TYPE steward_cancel_latency_recent_seconds gauge");
    for st in CancelState::ALL {
        for (q, v) in ["p50", "p99", "max"]
            .iter()
            .zip(e.cancel_latency_quantiles[st.index()])
        {
            let _ = writeln!(
                o,
                "steward_cancel_latency_recent_seconds{{state=\"{}\",stat=\"{q}\"}} {}",
                st.as_str(),
                v / 1e3
            );
        }
    }
}

/// `vllm:kv_cache_usage_perc`: the share of the KV pool that admitted
/// requests hold or have reserved for their growth (`(used + reserved) /
/// total`, at most 1). Cells kept only by the prefix cache are not counted:
/// admission reclaims them, so a router should not steer away from them.
pub fn kv_usage(e: &EngineStats) -> f64 {
    if e.kv_cells_total == 0 {
        return 0.0;
    }
    ((e.kv_cells_used + e.kv_cells_reserved) as f64 / e.kv_cells_total as f64).min(1.0)
}

/// The block size `vllm:cache_config_info` reports. Steward's cache is
/// per token (a prefix is reused to the token); gateways size their prefix
/// index from `num_gpu_blocks` and round block sizes up to 64, so the pool
/// is described as blocks of 64 cells.
pub const GATEWAY_BLOCK_SIZE: u64 = 64;

/// One engine's metrics (its model label is added by `labels::merge`).
pub fn render(e: &EngineStats, waiting: usize) -> String {
    let mut o = String::new();
    for (name, help, kind, v) in engine_table(e, waiting) {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
    }
    let _ = writeln!(
        o,
        "# HELP steward_admission_throttled 1 while admission is throttled by host memory pressure\n# TYPE steward_admission_throttled gauge\nsteward_admission_throttled {}",
        u8::from(e.memory_pressure)
    );
    let _ = writeln!(o, "# HELP steward_requests_total Requests by final state\n# TYPE steward_requests_total counter");
    for (state, v) in [
        ("finished", e.requests_finished),
        ("cancelled", e.requests_cancelled),
        ("failed", e.requests_failed),
        ("queue_timeout", e.requests_timed_out_in_queue),
        ("deadline_exceeded", e.requests_deadline_exceeded),
        ("slow_reader", e.requests_slow_reader_terminated),
    ] {
        let _ = writeln!(o, "steward_requests_total{{state=\"{state}\"}} {v}");
    }
    engine_histograms(&mut o, e);
    super::pin_metrics::render_pins(&mut o, e);
    o
}

/// (name, help, type, value): every engine-side metric with one sample,
/// declared here (a data table).
// check-layout: table (one row per metric)
fn engine_table(
    e: &EngineStats,
    waiting: usize,
) -> [(&'static str, &'static str, &'static str, f64); 85] {
    let kv_frac = kv_usage(e);
    [
        (
            "steward_draining",
            "1 while draining for shutdown",
            "gauge",
            f64::from(u8::from(e.draining)),
        ),
        (
            "steward_requests_paused",
            "Decoding sequences paused for a slow reader",
            "gauge",
            e.paused as f64,
        ),
        (
            "steward_live_outboxes",
            "Outboxes the engine still holds (admitted + finishing + queued)",
            "gauge",
            e.live_outboxes as f64,
        ),
        (
            "steward_deadline_exceeded_total",
            "Requests ended by their deadline",
            "counter",
            e.requests_deadline_exceeded as f64,
        ),
        (
            "steward_slow_reader_terminated_total",
            "Requests ended by the slow-reader policy",
            "counter",
            e.requests_slow_reader_terminated as f64,
        ),
        (
            "steward_prompt_tokens_after_cancel_total",
            "Prompt tokens computed after the client had left (should stay 0)",
            "counter",
            e.prompt_tokens_after_cancel as f64,
        ),
        (
            "steward_step_runtime_seconds_total",
            "Time inside the model runtime, summed over steps",
            "counter",
            e.step_runtime_ms_total / 1e3,
        ),
        (
            "steward_step_host_seconds_total",
            "Steward's own time per step (plan, batch, sample, detokenize, deliver), summed",
            "counter",
            e.step_host_ms_total / 1e3,
        ),
        (
            "steward_step_gap_seconds_total",
            "Time from a step's completion to the next step's submission (the device idles), summed over back-to-back steps",
            "counter",
            e.step_gap_ms_total / 1e3,
        ),
        (
            "steward_step_gaps_total",
            "Back-to-back steps counted in steward_step_gap_seconds_total",
            "counter",
            e.step_gaps as f64,
        ),
        (
            "steward_ready",
            "1 once the model is loaded and warmed up",
            "gauge",
            f64::from(u8::from(e.ready)),
        ),
        (
            "steward_warmup_seconds",
            "First-run warm-up step time",
            "gauge",
            e.warmup_ms / 1e3,
        ),
        (
            "steward_requests_running",
            "Sequences decoding",
            "gauge",
            e.running as f64,
        ),
        (
            "steward_requests_prefilling",
            "Sequences admitted, prompt not yet computed",
            "gauge",
            e.prefilling as f64,
        ),
        (
            "steward_requests_waiting",
            "Requests queued for a slot",
            "gauge",
            waiting as f64,
        ),
        (
            "steward_slots",
            "Sequence slots",
            "gauge",
            e.slots_total as f64,
        ),
        (
            "steward_kv_cells_used",
            "KV cells holding computed tokens of live sequences",
            "gauge",
            e.kv_cells_used as f64,
        ),
        (
            "steward_kv_cells_reserved",
            "KV cells reserved for live sequences' future tokens",
            "gauge",
            e.kv_cells_reserved as f64,
        ),
        (
            "steward_kv_cells_capacity",
            "KV cells in the pool",
            "gauge",
            e.kv_cells_total as f64,
        ),
        (
            "steward_kv_cells_cached",
            "KV cells held by the prefix cache (evictable)",
            "gauge",
            e.kv_cells_cached as f64,
        ),
        (
            "steward_prefix_cache_entries",
            "Idle slots whose KV state the prefix cache keeps",
            "gauge",
            e.prefix_entries as f64,
        ),
        (
            "steward_kv_bytes_physical",
            "KV bytes llama.cpp holds, each cell once (its state size minus the empty state's), sampled every second while busy",
            "gauge",
            e.kv_bytes_physical as f64,
        ),
        (
            "steward_prefix_host_spills_total",
            "Evicted prefix-cache entries saved to the host tier",
            "counter",
            e.prefix_spills as f64,
        ),
        (
            "steward_prefix_host_restores_total",
            "Prompts whose prefix was restored from the host tier",
            "counter",
            e.prefix_restores as f64,
        ),
        (
            "steward_prefix_disk_bytes",
            "Bytes the prompt cache's disk tier holds (--disk-cache-gb)",
            "gauge",
            e.disk.bytes as f64,
        ),
        (
            "steward_prefix_disk_entries",
            "Entries the prompt cache's disk tier holds",
            "gauge",
            e.disk.entries as f64,
        ),
        (
            "steward_prefix_disk_writes_total",
            "Entries written to the disk tier",
            "counter",
            e.disk.writes as f64,
        ),
        (
            "steward_prefix_disk_write_drops_total",
            "Disk writes not queued because the write queue was full (never waited for)",
            "counter",
            e.disk.write_drops as f64,
        ),
        (
            "steward_prefix_disk_reads_total",
            "Entries read back from the disk tier to restore a prompt",
            "counter",
            e.disk.reads as f64,
        ),
        (
            "steward_prefix_disk_corrupt_total",
            "Disk entries deleted because a checksum or length check failed",
            "counter",
            e.disk.corrupt as f64,
        ),
        (
            "steward_preemptions_total",
            "Running sequences moved off their slots for a better-ranked request (their state saved to host memory, or recomputed on resume when the host tier had no room)",
            "counter",
            (e.preempt_swapped + e.preempt_recomputed) as f64,
        ),
        (
            "steward_steps_interrupted_total",
            "Steps interrupted for a request that outranked every row in them (rewound and run again)",
            "counter",
            e.steps_interrupted as f64,
        ),
        (
            "steward_burst_steps_total",
            "Steps that computed a burst of short prompts whole (more waiting for their first token than sequences decoding)",
            "counter",
            e.burst_steps as f64,
        ),
        (
            "steward_steps_interrupted_seconds_total",
            "Compute the interrupted steps had spent",
            "counter",
            e.interrupted_ms_total / 1e3,
        ),
        (
            "steward_preemptions_recomputed_total",
            "Preemptions whose state did not fit the host tier and was recomputed on resume",
            "counter",
            e.preempt_recomputed as f64,
        ),
        (
            "steward_preempt_recomputed_tokens_total",
            "KV cells computed again for preempted sequences (0 while the host tier has room)",
            "counter",
            e.preempt_recomputed_tokens as f64,
        ),
        (
            "steward_preempt_resumes_total",
            "Preempted sequences resumed on a slot",
            "counter",
            e.preempt_resumed as f64,
        ),
        (
            "steward_preempted",
            "Sequences preempted and waiting to resume",
            "gauge",
            e.preempted as f64,
        ),
        (
            "steward_preempt_seconds_total",
            "Time the owner spent saving and restoring preempted sequences' state",
            "counter",
            (e.preempt_save_ms_total + e.preempt_restore_ms_total) / 1e3,
        ),
        (
            "steward_prefix_host_restored_tokens_total",
            "Prompt tokens restored from the host tier instead of computed",
            "counter",
            e.prefix_restored_tokens as f64,
        ),
        (
            "steward_prefix_host_bytes",
            "Bytes of saved KV state held by the host tier",
            "gauge",
            e.prefix_host_bytes as f64,
        ),
        (
            "steward_checkpoints_taken_total",
            "Checkpoints of state that cannot be rewound (sliding-window cells, recurrent state) taken when a prompt was computed",
            "counter",
            e.checkpoints_taken as f64,
        ),
        (
            "steward_checkpoint_restores_total",
            "Prompts whose cached prefix was reused through a checkpoint",
            "counter",
            e.checkpoint_restores as f64,
        ),
        (
            "steward_checkpoint_bytes",
            "Host bytes held by checkpoints",
            "gauge",
            e.checkpoint_bytes as f64,
        ),
        (
            "steward_checkpoints",
            "Checkpoints held",
            "gauge",
            e.checkpoints as f64,
        ),
        (
            "steward_window_cells_held",
            "Sliding-window cells held over all slots",
            "gauge",
            e.window_cells_held as f64,
        ),
        (
            "steward_prefix_host_entries",
            "Entries held by the host tier",
            "gauge",
            e.prefix_host_entries as f64,
        ),
        (
            "steward_prefix_host_seconds_total",
            "Time spent restoring host-tier entries into slots",
            "counter",
            e.prefix_host_ms_total / 1e3,
        ),
        (
            "steward_constraint_seconds_total",
            "Owner-thread time spent masking logits and advancing grammars (structured output, forced tool calls)",
            "counter",
            e.constraint_ns_total as f64 / 1e9,
        ),
        (
            "steward_constraint_tokens_total",
            "Tokens sampled under a grammar constraint",
            "counter",
            e.constraint_tokens_total as f64,
        ),
        (
            "steward_constrained_requests_total",
            "Requests that carried a grammar constraint (counted when they end)",
            "counter",
            e.constrained_requests_total as f64,
        ),
        (
            "steward_prefix_cache_lookups_total",
            "Admitted requests looked up in the prefix cache",
            "counter",
            e.prefix_lookups as f64,
        ),
        (
            "steward_prefix_cache_hits_total",
            "Admitted requests that reused cached state",
            "counter",
            e.prefix_hits as f64,
        ),
        (
            "steward_prefix_cache_reused_tokens_total",
            "Prompt tokens taken from the prefix cache instead of computed",
            "counter",
            e.prefix_reused_tokens as f64,
        ),
        (
            "steward_prefix_cache_evictions_total",
            "Prefix cache entries evicted",
            "counter",
            e.prefix_evictions as f64,
        ),
        (
            "steward_prefix_cache_saved_seconds_total",
            "Estimated prefill time avoided: reused tokens times the learned per-token cost",
            "counter",
            e.prefix_saved_ms_estimate / 1e3,
        ),
        (
            "steward_prefix_cache_eviction_seconds_total",
            "Time spent evicting prefix cache entries",
            "counter",
            e.prefix_eviction_ms_total / 1e3,
        ),
        (
            "steward_prefix_cache_copies_total",
            "Whole KV-stream copies made to share a running request's prefix",
            "counter",
            e.prefix_copies as f64,
        ),
        (
            "steward_kv_bytes_used",
            "KV bytes held by live sequences",
            "gauge",
            (e.kv_cells_used * e.kv_bytes_per_cell) as f64,
        ),
        (
            "steward_admission_permits",
            "Live admission permits (one per admitted sequence)",
            "gauge",
            e.permits as f64,
        ),
        (
            "steward_prompt_budget_tokens",
            "Prompt tokens allowed in the next step",
            "gauge",
            e.prompt_budget as f64,
        ),
        (
            "steward_steps_total",
            "Engine steps",
            "counter",
            e.steps as f64,
        ),
        (
            "steward_prompt_tokens_total",
            "Prompt tokens computed",
            "counter",
            e.prompt_tokens_total as f64,
        ),
        (
            "steward_generation_tokens_total",
            "Tokens generated",
            "counter",
            e.generated_tokens_total as f64,
        ),
        (
            "steward_requests_finished_total",
            "Requests finished",
            "counter",
            e.requests_finished as f64,
        ),
        (
            "steward_requests_cancelled_total",
            "Requests cancelled (client gone)",
            "counter",
            e.requests_cancelled as f64,
        ),
        (
            "steward_requests_failed_total",
            "Requests failed in the engine",
            "counter",
            e.requests_failed as f64,
        ),
        (
            "steward_queue_timeouts_total",
            "Requests that timed out waiting for a slot",
            "counter",
            e.requests_timed_out_in_queue as f64,
        ),
        (
            "steward_last_step_seconds",
            "Duration of the last step",
            "gauge",
            e.last_step_ms / 1e3,
        ),
        (
            "steward_last_step_tokens",
            "Tokens in the last step",
            "gauge",
            e.last_step_tokens as f64,
        ),
        // vLLM-compatible names read by inference gateways.
        (
            "vllm:num_requests_running",
            "Running requests (vLLM name)",
            "gauge",
            (e.running + e.prefilling) as f64,
        ),
        (
            "vllm:num_requests_waiting",
            "Waiting requests (vLLM name)",
            "gauge",
            waiting as f64,
        ),
        (
            "vllm:gpu_cache_usage_perc",
            "KV cells held or reserved by admitted requests over all cells, 0..1; prefix-cache cells not counted (vLLM name)",
            "gauge",
            kv_frac,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "KV cells held or reserved by admitted requests over all cells, 0..1; prefix-cache cells not counted (vLLM name)",
            "gauge",
            kv_frac,
        ),
        (
            "vllm:prompt_tokens_total",
            "Prompt tokens of admitted requests, computed or taken from the prefix cache (vLLM name)",
            "counter",
            (e.prompt_tokens_total + e.prefix_reused_tokens) as f64,
        ),
        (
            "vllm:prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache (vLLM name)",
            "counter",
            (e.prompt_tokens_total + e.prefix_reused_tokens) as f64,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "Prompt tokens found in the prefix cache (vLLM name)",
            "counter",
            e.prefix_reused_tokens as f64,
        ),
        (
            "vllm:generation_tokens_total",
            "Tokens generated (vLLM name)",
            "counter",
            e.generated_tokens_total as f64,
        ),
        (
            "steward_draft_kv_cells",
            "Draft model: KV cells held, every slot",
            "gauge",
            e.draft_kv_cells as f64,
        ),
        (
            "steward_draft_steps_total",
            "Draft model: steps run",
            "counter",
            e.draft_steps_total as f64,
        ),
        (
            "steward_draft_seconds_total",
            "Draft model: time in its steps",
            "counter",
            e.draft_ms_total / 1e3,
        ),
        (
            "vllm:spec_decode_num_draft_tokens_total",
            "Speculative decoding: tokens drafted (vLLM name)",
            "counter",
            e.spec_draft_tokens_total as f64,
        ),
        (
            "vllm:spec_decode_num_accepted_tokens_total",
            "Speculative decoding: drafted tokens accepted (vLLM name)",
            "counter",
            e.spec_accepted_tokens_total as f64,
        ),
        (
            "vllm:spec_decode_num_drafts_total",
            "Speculative decoding: drafts, one per sequence per step that carried any (vLLM name)",
            "counter",
            e.spec_drafts_total as f64,
        ),
        ("steward_info", "Always 1", "gauge", 1.0),
    ]
}

/// `vllm:lora_requests_info` as gateways read it: the adapters of running
/// and waiting requests (value: the time of the reading).
pub fn render_lora(o: &mut String, e: &EngineStats, max_lora: usize) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let _ = writeln!(
        o,
        "# HELP vllm:lora_requests_info Running and waiting requests' LoRA adapters (vLLM name)\n# TYPE vllm:lora_requests_info gauge\nvllm:lora_requests_info{{max_lora=\"{max_lora}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"}} {now}",
        e.lora_running.join(","),
        e.lora_waiting.join(",")
    );
}

/// The media encoder's counters (a model served with a projector).
pub fn render_media(o: &mut String, enc: &steward_engine::prepare::encoder::Encoder) {
    let c = &enc.counters;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let rows: [(&str, &str, &str, f64); 6] = [
        (
            "steward_media_encodes_total",
            "Media items the projector encoded",
            "counter",
            get(&c.encodes) as f64,
        ),
        (
            "steward_media_encode_seconds_total",
            "Time the projector spent encoding media",
            "counter",
            get(&c.encode_us) as f64 / 1e6,
        ),
        (
            "steward_media_cache_hits_total",
            "Media items taken from the encoder cache (no encode)",
            "counter",
            get(&c.cache_hits) as f64,
        ),
        (
            "steward_media_encodes_cancelled_total",
            "Media encodes skipped or stopped because their client left",
            "counter",
            get(&c.cancelled) as f64,
        ),
        (
            "steward_media_encodes_failed_total",
            "Media encodes the projector failed",
            "counter",
            get(&c.failed) as f64,
        ),
        (
            "steward_media_cache_bytes",
            "Bytes of encoded media the encoder cache holds",
            "gauge",
            get(&c.cache_bytes) as f64,
        ),
    ];
    for (name, help, kind, v) in rows {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
    }
}

/// Readiness phase (one-hot), the longest step so far, and the KV layout
/// under the name inference gateways read.
pub fn render_phase(o: &mut String, e: &EngineStats, drain: Option<std::time::Duration>) {
    let phase = if drain.is_some() || e.draining {
        "draining"
    } else if e.stopped {
        "stopped"
    } else if e.ready {
        "ready"
    } else {
        "warming"
    };
    let _ = writeln!(
        o,
        "# HELP steward_phase Readiness phase (1 for the current one)\n# TYPE steward_phase gauge"
    );
    for p in ["warming", "ready", "draining", "stopped"] {
        let _ = writeln!(o, "steward_phase{{phase=\"{p}\"}} {}", u8::from(p == phase));
    }
    let _ = writeln!(
        o,
        "# HELP steward_drain_seconds Time since the shutdown drain began (0 before)\n# TYPE steward_drain_seconds gauge\nsteward_drain_seconds {}",
        drain.map_or(0.0, |d| d.as_secs_f64())
    );
    let _ = writeln!(
        o,
        "# HELP steward_step_duration_max_seconds Longest engine step so far\n# TYPE steward_step_duration_max_seconds gauge\nsteward_step_duration_max_seconds {}",
        e.step_ms.max_ms / 1e3
    );
    if let Some(c) = e.step_cost {
        let _ = writeln!(o, "# HELP steward_step_cost_model_ms The step cost model's fitted terms: a step's fixed cost, a decode row, the pass prompt tokens add, a prompt token, and its growth per 1,000 positions of context\n# TYPE steward_step_cost_model_ms gauge");
        for (t, v) in [
            ("base", c.base),
            ("decode_row", c.row),
            ("pass", c.pass),
            ("token", c.token),
            ("token_per_1k_ctx", c.ctx_slope * 1e3),
        ] {
            let _ = writeln!(o, "steward_step_cost_model_ms{{term=\"{t}\"}} {v}");
        }
    }
    let _ = writeln!(
        o,
        "# HELP steward_memory_kind_info How the model's memory holds a sequence (attention, sliding_window, recurrent, hybrid) and its window\n# TYPE steward_memory_kind_info gauge\nsteward_memory_kind_info{{kind=\"{}\",swa_window=\"{}\"}} 1",
        e.memory_kind, e.swa_window
    );
    let _ = writeln!(
        o,
        "# HELP vllm:cache_config_info KV cache layout (vLLM name; the per-token pool as blocks of {GATEWAY_BLOCK_SIZE} cells)\n# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{block_size=\"{GATEWAY_BLOCK_SIZE}\",num_gpu_blocks=\"{}\",enable_prefix_caching=\"{}\"}} 1",
        e.kv_cells_total.div_ceil(GATEWAY_BLOCK_SIZE),
        if e.prefix_cache_enabled { "True" } else { "False" }
    );
}

/// The Responses API's store: entries, bytes against the cap, evictions.
pub fn render_store(b: &mut String, st: &steward_dialects::responses::Store) {
    use std::fmt::Write;
    let _ = write!(
        b,
        "# HELP steward_responses_stored Responses held for previous_response_id and GET\n\
         # TYPE steward_responses_stored gauge\nsteward_responses_stored {}\n\
         # HELP steward_responses_store_bytes Bytes the stored responses hold\n\
         # TYPE steward_responses_store_bytes gauge\nsteward_responses_store_bytes {}\n\
         # HELP steward_responses_store_capacity_bytes The store's byte cap\n\
         # TYPE steward_responses_store_capacity_bytes gauge\nsteward_responses_store_capacity_bytes {}\n\
         # HELP steward_responses_evicted_total Stored responses evicted (oldest first) or expired\n\
         # TYPE steward_responses_evicted_total counter\nsteward_responses_evicted_total {}\n",
        st.len(),
        st.bytes(),
        st.capacity_bytes(),
        st.evicted_total()
    );
}
