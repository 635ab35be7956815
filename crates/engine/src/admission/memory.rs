//! The memory ledger: where the process's memory goes, term by term, next to
//! the operational budget and the OS's view.
//!
//! weights + KV pool (live state + reserved growth + free cells) + cached
//! prefixes + compute buffers + other = resident set size. "Other" is the
//! remainder (RSS minus every known term), so the terms always add up; the
//! compute buffers are measured at startup as the RSS growth across context
//! creation and the warm-up step, minus the KV pool.

use serde::Serialize;

use crate::deliver::stats::EngineStats;

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Resident set size of this process.
pub fn rss_bytes() -> Option<u64> {
    let statm = read("/proc/self/statm")?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn meminfo(key: &str) -> Option<u64> {
    read("/proc/meminfo")?
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

pub fn mem_total() -> Option<u64> {
    meminfo("MemTotal:")
}

pub fn mem_available() -> Option<u64> {
    meminfo("MemAvailable:")
}

/// `some avg10` of /proc/pressure/memory (percent of time some task
/// stalled on memory over the last 10 s), where the kernel has PSI.
pub fn psi_some_avg10() -> Option<f64> {
    let text = read("/proc/pressure/memory")?;
    let line = text.lines().find(|l| l.starts_with("some"))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))
        .and_then(|v| v.parse().ok())
}

/// True when the host is short of memory: admission slows down before it swaps.
pub fn under_pressure() -> bool {
    let psi = psi_some_avg10().unwrap_or(0.0) > 10.0;
    let low = match (mem_available(), mem_total()) {
        (Some(a), Some(t)) if t > 0 => a * 20 < t, // under 5% available
        _ => false,
    };
    psi || low
}

/// Parse `--memory-budget`: bytes with an optional K/M/G/T suffix (powers of
/// 1024), or a fraction of total RAM in (0, 1].
pub fn parse_budget(s: &str, total_ram: u64) -> Result<u64, String> {
    let t = s.trim();
    if let Ok(f) = t.parse::<f64>() {
        if f > 0.0 && f <= 1.0 && t.contains('.') {
            return Ok((total_ram as f64 * f) as u64);
        }
    }
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        Some('T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| {
        format!("--memory-budget {s:?}: use bytes (e.g. 6G, 512M) or a fraction of RAM (e.g. 0.5)")
    })?;
    if n <= 0.0 {
        return Err(format!("--memory-budget {s:?} must be positive"));
    }
    Ok((n * mult as f64) as u64)
}

/// How many sequences of `ctx_per_seq` cells fit the budget, or why none do.
pub fn fit_sequences(
    budget: u64,
    weights: u64,
    overhead: u64,
    bytes_per_cell: u64,
    ctx_per_seq: u32,
    max_seqs: usize,
) -> Result<usize, String> {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if budget <= weights {
        return Err(format!(
            "memory budget {:.2} GiB is smaller than the model's weights alone ({:.2} GiB)",
            gib(budget),
            gib(weights)
        ));
    }
    let for_kv = budget.saturating_sub(weights + overhead);
    let per_seq = bytes_per_cell.max(1) * u64::from(ctx_per_seq);
    let n = (for_kv / per_seq) as usize;
    if n == 0 {
        return Err(format!(
            "memory budget {:.2} GiB leaves {:.2} GiB after weights and buffers: not enough for one sequence of {ctx_per_seq} cells ({:.2} GiB); lower --ctx-per-seq or raise the budget",
            gib(budget),
            gib(for_kv),
            gib(per_seq)
        ));
    }
    Ok(n.min(max_seqs))
}

pub use crate::runtime::DeviceMemory;

/// Where a model's weights, KV pool and compute buffers live: the share of
/// its layers offloaded to GPUs (llama.cpp keeps a layer's weights and, with
/// KV offload, its KV on the layer's device).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    pub layers_on_device: u32,
    pub n_layer: u32,
}

impl Placement {
    pub const HOST: Placement = Placement {
        layers_on_device: 0,
        n_layer: 1,
    };

    /// `n_gpu_layers` (only set when the runtime found a GPU) of a model's
    /// `n_layer`.
    pub fn of(n_gpu_layers: u32, n_layer: u32) -> Placement {
        Placement {
            layers_on_device: n_gpu_layers.min(n_layer),
            n_layer: n_layer.max(1),
        }
    }

    pub fn name(&self) -> &'static str {
        match self.layers_on_device {
            0 => "host",
            n if n >= self.n_layer => "device",
            _ => "split",
        }
    }

    /// The part of `bytes` (spread evenly over the layers) on the GPUs.
    pub fn on_device(&self, bytes: u64) -> u64 {
        let n = self.n_layer.max(1);
        let d = self.layers_on_device.min(n);
        (u128::from(bytes) * u128::from(d) / u128::from(n)) as u64
    }
}

/// How many sequences fit the GPUs (`None` without one): their free memory
/// once the weights are there, less max(1 GiB, 5% of their total) for
/// compute buffers and the runtime, over the device share of a slot.
pub fn fit_on_gpus(
    gpus: &[DeviceMemory],
    device_bytes_per_seq: u64,
    max_seqs: usize,
) -> Option<Result<usize, String>> {
    if gpus.is_empty() {
        return None;
    }
    let free = gpus.iter().map(|d| d.free).sum();
    let total: u64 = gpus.iter().map(|d| d.total).sum();
    let reserve = (1u64 << 30).max(total / 20);
    Some(fit_sequences_on_device(
        free,
        reserve,
        device_bytes_per_seq,
        max_seqs,
    ))
}

/// How many sequences fit the GPUs' free memory once the weights are
/// loaded there: `device_free` (summed over the devices, read after the
/// weights were placed), less `reserve` for compute buffers and the runtime,
/// over the device share of a slot. `max_seqs` when nothing is offloaded.
pub fn fit_sequences_on_device(
    device_free: u64,
    reserve: u64,
    device_bytes_per_seq: u64,
    max_seqs: usize,
) -> Result<usize, String> {
    if device_bytes_per_seq == 0 {
        return Ok(max_seqs);
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let n = (device_free.saturating_sub(reserve) / device_bytes_per_seq) as usize;
    if n == 0 {
        return Err(format!(
            "GPU memory: {:.2} GiB free after the weights, {:.2} GiB kept for compute buffers: not enough for one sequence's KV ({:.2} GiB); lower --ctx-per-seq or offload fewer layers (--gpu-layers)",
            gib(device_free),
            gib(reserve),
            gib(device_bytes_per_seq)
        ));
    }
    Ok(n.min(max_seqs))
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemoryLedger {
    pub budget: Option<u64>,
    pub weights: u64,
    pub kv_pool: u64,
    pub live_state: u64,
    pub reserved_growth: u64,
    pub kv_free: u64,
    pub cached_prefixes: u64,
    /// The prefix cache's host tier: saved KV state of evicted entries.
    pub host_prefixes: u64,
    /// Preempted sequences' saved state (host memory, in the host tier's
    /// budget): `owner/preempt.rs`.
    pub preempted: u64,
    /// State beside the per-token cells, within `kv_pool`: sliding-window
    /// cells held (every slot's `lo..len`) and the recurrent state of the
    /// slots holding one (hybrid models).
    pub window_state: u64,
    /// Checkpoints of state that cannot be rewound (host memory).
    pub checkpoints: u64,
    /// Pinned prefixes' saved state (host memory, in the pin budget).
    pub pinned_prefixes: u64,
    /// The prefix cache's disk tier: entries queued for the disk thread
    /// (host memory until written) ...
    pub disk_queued: u64,
    /// ... and the bytes its files hold (disk, not memory: outside `rss`
    /// and the sum).
    pub disk_prefixes: u64,
    /// The multimodal projector (weights and compute buffers, measured at
    /// load) and the encoded media it keeps by hash.
    pub projector: u64,
    pub media_cache: u64,
    pub compute_buffers: u64,
    pub other: u64,
    pub rss: u64,
    pub mem_available: Option<u64>,
    pub mem_total: Option<u64>,
    pub psi_some_avg10: Option<f64>,
    /// "host", "device" (every layer offloaded) or "split".
    pub placement: &'static str,
    /// The terms above that live in GPU memory (the offloaded share of the
    /// weights, KV pool and compute buffers): counted against `devices`,
    /// not against `rss` (which is what host memory holds).
    pub device_bytes: u64,
    /// Each GPU as the runtime reports it now (empty without one).
    pub devices: Vec<DeviceMemory>,
}

impl MemoryLedger {
    /// The ledger of a model whose memory is all on the host.
    pub fn from_parts(s: &EngineStats, weights: u64, budget: Option<u64>, rss: u64) -> Self {
        Self::placed(s, weights, budget, rss, Placement::HOST, Vec::new())
    }

    /// The ledger with the offloaded share of weights, KV pool and compute
    /// buffers counted in device memory and the rest against host RSS.
    pub fn placed(
        s: &EngineStats,
        weights: u64,
        budget: Option<u64>,
        rss: u64,
        at: Placement,
        devices: Vec<DeviceMemory>,
    ) -> Self {
        let bpc = s.kv_bytes_per_cell;
        let kv_pool = if s.kv_pool_bytes > 0 {
            s.kv_pool_bytes
        } else {
            s.kv_cells_total * bpc
        };
        let live_state = s.kv_cells_used * bpc;
        let reserved_growth = s.kv_cells_reserved * bpc;
        let cached_prefixes = s.kv_cells_cached * bpc;
        let host_prefixes = s.prefix_host_bytes;
        // Within the pool, beside the per-token cells.
        let window_state = s.window_cells_held * s.window_bytes_per_cell
            + s.recurrent_slots_held * s.recurrent_bytes_per_slot;
        let kv_free =
            kv_pool.saturating_sub(live_state + reserved_growth + cached_prefixes + window_state);
        let checkpoints = s.checkpoint_bytes;
        let device_bytes = at.on_device(weights + kv_pool + s.compute_bytes);
        let preempted = s.preempted_bytes;
        let known = (weights + kv_pool + s.compute_bytes - device_bytes)
            + host_prefixes
            + preempted
            + checkpoints
            + s.pinned_bytes
            + s.disk.queued_bytes;
        MemoryLedger {
            budget,
            weights,
            kv_pool,
            live_state,
            reserved_growth,
            kv_free,
            cached_prefixes,
            host_prefixes,
            preempted,
            window_state,
            checkpoints,
            pinned_prefixes: s.pinned_bytes,
            disk_queued: s.disk.queued_bytes,
            disk_prefixes: s.disk.bytes,
            projector: 0,
            media_cache: 0,
            compute_buffers: s.compute_bytes,
            other: rss.saturating_sub(known),
            rss: rss.max(known),
            mem_available: mem_available(),
            mem_total: mem_total(),
            psi_some_avg10: psi_some_avg10(),
            placement: at.name(),
            device_bytes,
            devices,
        }
    }

    /// The projector's terms (host memory): out of `other`.
    pub fn with_media(mut self, projector: u64, media_cache: u64) -> Self {
        self.projector = projector;
        self.media_cache = media_cache;
        let known = projector + media_cache;
        self.rss = self.rss.max(self.rss - self.other + known);
        self.other = self.other.saturating_sub(known);
        self
    }

    /// Sum of the terms: `rss` + `device_bytes` (`rss` on the host).
    pub fn sum(&self) -> u64 {
        self.weights
            + self.live_state
            + self.reserved_growth
            + self.kv_free
            + self.cached_prefixes
            + self.host_prefixes
            + self.preempted
            + self.window_state
            + self.checkpoints
            + self.pinned_prefixes
            + self.disk_queued
            + self.projector
            + self.media_cache
            + self.compute_buffers
            + self.other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_strings() {
        let gib = 1u64 << 30;
        assert_eq!(parse_budget("6G", 24 * gib), Ok(6 * gib));
        assert_eq!(parse_budget("512m", 0), Ok(512 << 20));
        assert_eq!(parse_budget("0.5", 24 * gib), Ok(12 * gib));
        assert_eq!(parse_budget("1000", 0), Ok(1000));
        assert!(parse_budget("lots", 0).is_err());
        assert!(parse_budget("-3G", 0).is_err());
    }

    #[test]
    fn sequences_fit_the_budget_or_startup_says_why() {
        let mib = 1u64 << 20;
        // 100 MiB weights, 50 MiB overhead, 1 KiB per cell, 1024 cells per seq.
        assert_eq!(
            fit_sequences(1000 * mib, 100 * mib, 50 * mib, 1024, 1024, 32),
            Ok(32)
        );
        assert_eq!(
            fit_sequences(160 * mib, 100 * mib, 50 * mib, 1024, 1024, 32),
            Ok(10)
        );
        let e = fit_sequences(90 * mib, 100 * mib, 50 * mib, 1024, 1024, 32).unwrap_err();
        assert!(e.contains("weights alone"), "{e}");
        let e = fit_sequences(150 * mib + 10, 100 * mib, 50 * mib, 1024, 1024, 32).unwrap_err();
        assert!(e.contains("not enough for one sequence"), "{e}");
    }

    #[test]
    fn ledger_terms_add_up() {
        let s = EngineStats {
            kv_bytes_per_cell: 100,
            kv_cells_total: 1000,
            kv_cells_used: 300,
            kv_cells_reserved: 200,
            compute_bytes: 5_000,
            ..Default::default()
        };
        let l = MemoryLedger::from_parts(&s, 50_000, Some(1 << 30), 200_000);
        assert_eq!(l.sum(), l.rss);
        assert_eq!(
            (l.live_state, l.reserved_growth, l.kv_free),
            (30_000, 20_000, 50_000)
        );
        assert_eq!(l.other, 200_000 - 50_000 - 100_000 - 5_000);
        // RSS below the known terms (weights not all resident): other is 0
        // and the total is the known terms.
        let l = MemoryLedger::from_parts(&s, 50_000, None, 10);
        assert_eq!(l.sum(), l.rss);
        assert_eq!((l.placement, l.device_bytes), ("host", 0));
    }

    #[test]
    fn offloaded_terms_count_against_the_device_not_rss() {
        let s = EngineStats {
            kv_bytes_per_cell: 100,
            kv_cells_total: 1000,
            compute_bytes: 5_000,
            prefix_host_bytes: 7_000,
            ..Default::default()
        };
        let gpu = vec![DeviceMemory {
            name: "CUDA0".into(),
            total: 1 << 30,
            free: 1 << 29,
        }];
        let all = Placement {
            layers_on_device: 30,
            n_layer: 30,
        };
        // 40,000 bytes of host RSS: the host prefix tier and what the
        // runtime holds beside it; weights and KV are on the GPU.
        let l = MemoryLedger::placed(&s, 50_000, None, 40_000, all, gpu.clone());
        assert_eq!(l.placement, "device");
        assert_eq!(l.device_bytes, 50_000 + 100_000 + 5_000);
        assert_eq!(l.rss, 40_000);
        assert_eq!(l.other, 40_000 - 7_000);
        assert_eq!(l.sum(), l.rss + l.device_bytes);
        assert_eq!(l.devices, gpu);
        // Half the layers offloaded: half of each term on the device.
        let half = Placement {
            layers_on_device: 15,
            n_layer: 30,
        };
        let l = MemoryLedger::placed(&s, 50_000, None, 200_000, half, Vec::new());
        assert_eq!((l.placement, l.device_bytes), ("split", 77_500));
        assert_eq!(l.other, 200_000 - 77_500 - 7_000);
        assert_eq!(l.sum(), l.rss + l.device_bytes);
    }

    #[test]
    fn sequences_fit_the_gpu_or_startup_says_why() {
        let gib = 1u64 << 30;
        assert_eq!(fit_sequences_on_device(10 * gib, gib, gib, 64), Ok(9));
        assert_eq!(fit_sequences_on_device(100 * gib, gib, gib, 64), Ok(64));
        assert_eq!(
            fit_sequences_on_device(0, gib, 0, 8),
            Ok(8),
            "nothing offloaded"
        );
        let e = fit_sequences_on_device(gib + 10, gib, gib, 64).unwrap_err();
        assert!(e.contains("not enough for one sequence"), "{e}");
        let gpu = |total, free| DeviceMemory {
            name: "CUDA0".into(),
            total,
            free,
        };
        assert_eq!(fit_on_gpus(&[], gib, 64), None);
        // 100 GiB total keeps 5 GiB back; 2 GiB total keeps 1 GiB.
        assert_eq!(
            fit_on_gpus(&[gpu(100 * gib, 20 * gib)], gib, 64),
            Some(Ok(15))
        );
        assert_eq!(fit_on_gpus(&[gpu(2 * gib, 2 * gib)], gib, 64), Some(Ok(1)));
    }
}
