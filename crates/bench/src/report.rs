//! Report arithmetic over per-request records: percentiles, throughput,
//! goodput under an SLO, errors by status. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::classes::{self, ClassCounts};
use crate::client::Record;
use crate::workload::Slo;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Dist {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Nearest-rank percentiles (p in 0..=100).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn dist(mut v: Vec<f64>) -> Dist {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return Dist::default();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Dist {
        n: v.len(),
        mean: v.iter().sum::<f64>() / v.len() as f64,
        p50: percentile(&v, 50.0),
        p90: percentile(&v, 90.0),
        p99: percentile(&v, 99.0),
        max: v[v.len() - 1],
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Goodput {
    pub slo_ttft_ms: f64,
    pub slo_itl_ms: f64,
    /// Completed requests whose own TTFT and worst chunk gap met the SLO.
    pub met: usize,
    pub fraction: f64,
    pub requests_per_s: f64,
    /// p99 TTFT and p99 gap both within the SLO.
    pub slo_met: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub requests: usize,
    pub completed: usize,
    pub cancelled_by_us: usize,
    pub errors: usize,
    pub errors_by_status: BTreeMap<String, usize>,
    pub duration_s: f64,
    pub ttft_ms: Dist,
    pub first_byte_ms: Dist,
    pub inter_chunk_gap_ms: Dist,
    pub tpot_ms: Dist,
    pub e2e_ms: Dist,
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    pub output_tokens_per_s: f64,
    pub requests_per_s: f64,
    pub text_chunks: usize,
    pub goodput: Goodput,
    /// Per label (e.g. injected requests): TTFT of each.
    pub labelled_ttft_ms: BTreeMap<String, f64>,
    /// Worst gap of unlabelled streams while labelled requests were in flight.
    pub worst_gap_during_labelled_ms: Option<f64>,
    /// Counts per request class (`classes.rs`).
    #[serde(default)]
    pub classes: BTreeMap<String, ClassCounts>,
    /// Records a correct server would not have produced (`classes::failure`).
    #[serde(default)]
    pub failures: usize,
    #[serde(default)]
    pub failure_examples: Vec<String>,
}

pub fn summarize(records: &[Record], slo: &Slo) -> Summary {
    let done: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    let start = records
        .iter()
        .map(|r| r.send_ms)
        .fold(f64::INFINITY, f64::min);
    let end = records.iter().map(|r| r.end_ms).fold(0.0, f64::max);
    let duration_s = if records.is_empty() {
        0.0
    } else {
        ((end - start) / 1e3).max(1e-9)
    };
    let mut errors_by_status = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| !r.cancelled_by_us && (r.status != 200 || r.error.is_some()))
    {
        let key = if r.status == 0 {
            "transport".to_string()
        } else {
            r.status.to_string()
        };
        *errors_by_status.entry(key).or_insert(0) += 1;
    }
    let output_tokens: u64 = records
        .iter()
        .filter_map(|r| r.completion_tokens)
        .map(u64::from)
        .sum();
    let met = done
        .iter()
        .filter(|r| {
            r.ttft_ms().is_some_and(|t| t <= slo.ttft_ms) && r.gaps_ms().all(|g| g <= slo.itl_ms)
        })
        .count();
    let ttft = dist(done.iter().filter_map(|r| r.ttft_ms()).collect());
    let gaps = dist(done.iter().flat_map(|r| r.gaps_ms()).collect());
    let mut labelled_ttft_ms = BTreeMap::new();
    let mut windows = Vec::new();
    for r in records.iter().filter(|r| !r.label.is_empty()) {
        if let Some(t) = r.ttft_ms() {
            labelled_ttft_ms.insert(r.label.clone(), t);
        }
        windows.push((r.send_ms, r.first_text_ms.unwrap_or(r.end_ms)));
    }
    let worst_gap_during_labelled_ms = (!windows.is_empty()).then(|| {
        let mut worst: f64 = 0.0;
        for r in records.iter().filter(|r| r.label.is_empty()) {
            for w in r.chunk_ms.windows(2) {
                let overlaps = windows.iter().any(|(a, b)| w[1] >= *a && w[0] <= *b);
                if overlaps {
                    worst = worst.max(w[1] - w[0]);
                }
            }
        }
        worst
    });
    Summary {
        requests: records.len(),
        completed: done.len(),
        cancelled_by_us: records.iter().filter(|r| r.cancelled_by_us).count(),
        errors: errors_by_status.values().sum(),
        errors_by_status,
        duration_s,
        first_byte_ms: dist(
            done.iter()
                .filter_map(|r| r.first_byte_ms.map(|t| t - r.send_ms))
                .collect(),
        ),
        tpot_ms: dist(done.iter().filter_map(|r| r.tpot_ms()).collect()),
        e2e_ms: dist(done.iter().map(|r| r.end_ms - r.send_ms).collect()),
        output_tokens,
        prompt_tokens: records
            .iter()
            .filter_map(|r| r.prompt_tokens)
            .map(u64::from)
            .sum(),
        output_tokens_per_s: output_tokens as f64 / duration_s.max(1e-9),
        requests_per_s: done.len() as f64 / duration_s.max(1e-9),
        text_chunks: records.iter().map(|r| r.chunk_ms.len()).sum(),
        goodput: Goodput {
            slo_ttft_ms: slo.ttft_ms,
            slo_itl_ms: slo.itl_ms,
            met,
            fraction: if records.is_empty() {
                0.0
            } else {
                met as f64 / records.len() as f64
            },
            requests_per_s: met as f64 / duration_s.max(1e-9),
            slo_met: !done.is_empty() && ttft.p99 <= slo.ttft_ms && gaps.p99 <= slo.itl_ms,
        },
        ttft_ms: ttft,
        inter_chunk_gap_ms: gaps,
        labelled_ttft_ms,
        worst_gap_during_labelled_ms,
        failures: records
            .iter()
            .filter(|r| classes::failure(r).is_some())
            .count(),
        failure_examples: classes::failure_examples(records, 20),
        classes: classes::count(records),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(send: f64, chunks: &[f64], tokens: u32) -> Record {
        Record {
            send_ms: send,
            first_byte_ms: chunks.first().map(|c| c - 1.0),
            first_text_ms: chunks.first().copied(),
            chunk_ms: chunks.to_vec(),
            end_ms: chunks.last().copied().unwrap_or(send) + 1.0,
            completion_tokens: Some(tokens),
            prompt_tokens: Some(10),
            status: 200,
            ..Default::default()
        }
    }

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
        let d = dist(vec![3.0, 1.0, 2.0]);
        assert_eq!((d.n, d.p50, d.max, d.mean), (3, 2.0, 3.0, 2.0));
    }

    #[test]
    fn summary_arithmetic_on_synthetic_records() {
        let mut records = vec![
            rec(0.0, &[100.0, 150.0, 200.0], 3), // ttft 100, gaps 50,50
            rec(0.0, &[500.0, 900.0], 2),        // ttft 500, gap 400 (> slo)
            rec(1000.0, &[1300.0, 1310.0], 4),   // ttft 300
        ];
        let mut err = rec(0.0, &[], 0);
        err.status = 429;
        err.completion_tokens = None;
        records.push(err);
        let mut c = rec(0.0, &[50.0], 1);
        c.cancelled_by_us = true;
        records.push(c);
        let s = summarize(
            &records,
            &Slo {
                ttft_ms: 400.0,
                itl_ms: 100.0,
            },
        );
        assert_eq!(s.requests, 5);
        assert_eq!(s.completed, 3);
        assert_eq!(s.cancelled_by_us, 1);
        assert_eq!(s.errors, 1);
        assert_eq!(s.errors_by_status.get("429"), Some(&1));
        assert_eq!(s.output_tokens, 3 + 2 + 4 + 1);
        assert_eq!(s.ttft_ms.p50, 300.0);
        assert_eq!(s.ttft_ms.max, 500.0);
        assert_eq!(s.inter_chunk_gap_ms.max, 400.0);
        assert_eq!(s.goodput.met, 2); // the 500 ms one fails both
        assert!(!s.goodput.slo_met);
        // duration: first send 0 to last end 1311 ms.
        assert!((s.duration_s - 1.311).abs() < 1e-9);
        assert!((s.output_tokens_per_s - 10.0 / 1.311).abs() < 1e-6);
        assert_eq!(s.tpot_ms.n, 3);
    }

    #[test]
    fn labelled_requests_and_interference_window() {
        let mut long = rec(1000.0, &[3000.0], 1);
        long.label = "long".into();
        let decoder = rec(0.0, &[100.0, 200.0, 1500.0, 1600.0, 3500.0], 5);
        let s = summarize(&[long, decoder], &Slo::default());
        assert_eq!(s.labelled_ttft_ms.get("long"), Some(&2000.0));
        // Gaps overlapping [1000, 3000]: 200→1500 (1300), 1500→1600, 1600→3500 (1900).
        assert_eq!(s.worst_gap_during_labelled_ms, Some(1900.0));
    }
}
