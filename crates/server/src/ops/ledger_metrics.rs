//! The memory ledger as Prometheus gauges (`/metrics`).

use std::fmt::Write;

/// Every ledger term as a gauge, `steward_memory_bytes{term=...}`.
pub fn render_ledger(o: &mut String, l: &steward_engine::memory::MemoryLedger) {
    let _ = writeln!(o, "# HELP steward_memory_bytes Memory ledger terms (they add up to term=\"rss\" plus term=\"device_bytes\", the share in GPU memory)\n# TYPE steward_memory_bytes gauge");
    let terms = [
        ("weights", Some(l.weights)),
        ("live_state", Some(l.live_state)),
        ("reserved_growth", Some(l.reserved_growth)),
        ("kv_free", Some(l.kv_free)),
        ("kv_pool", Some(l.kv_pool)),
        ("cached_prefixes", Some(l.cached_prefixes)),
        ("host_prefixes", Some(l.host_prefixes)),
        ("preempted", Some(l.preempted)),
        ("window_state", Some(l.window_state)),
        ("checkpoints", Some(l.checkpoints)),
        ("pinned_prefixes", Some(l.pinned_prefixes)),
        ("disk_queued", Some(l.disk_queued)),
        ("projector", Some(l.projector)),
        ("media_cache", Some(l.media_cache)),
        ("compute_buffers", Some(l.compute_buffers)),
        ("other", Some(l.other)),
        ("rss", Some(l.rss)),
        ("device_bytes", Some(l.device_bytes)),
        ("budget", l.budget),
        ("os_available", l.mem_available),
        ("os_total", l.mem_total),
    ];
    for (t, v) in terms {
        if let Some(v) = v {
            let _ = writeln!(o, "steward_memory_bytes{{term=\"{t}\"}} {v}");
        }
    }
    if !l.devices.is_empty() {
        let _ = writeln!(o, "# HELP steward_gpu_memory_bytes Each GPU's memory as the runtime reports it\n# TYPE steward_gpu_memory_bytes gauge");
        for d in &l.devices {
            let n = d.name.replace(['"', '\\', '\n'], "_");
            for (kind, v) in [("total", d.total), ("free", d.free)] {
                let _ = writeln!(
                    o,
                    "steward_gpu_memory_bytes{{device=\"{n}\",kind=\"{kind}\"}} {v}"
                );
            }
        }
    }
    if let Some(p) = l.psi_some_avg10 {
        let _ = writeln!(o, "# HELP steward_memory_pressure_some_avg10 /proc/pressure/memory some avg10 (percent)\n# TYPE steward_memory_pressure_some_avg10 gauge\nsteward_memory_pressure_some_avg10 {p}");
    }
}
