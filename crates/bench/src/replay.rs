//! Replays a workload's plan against a target: injections at fixed times,
//! then the conversations by the arrival process (closed loop, fixed rate
//! or Poisson). Returns every record, in send order.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{self, Record, Target};
use crate::workload::{self, Arrival, Workload};

/// Whether a conversation's last request was refused for load.
fn refused_for_load(records: &[Record]) -> bool {
    records
        .last()
        .is_some_and(|r| r.status == 429 || r.status == 503)
}

/// A progress line on stderr, redrawn twice a second until aborted.
fn progress_bar(
    done: Arc<AtomicUsize>,
    total_requests: usize,
    t0: Instant,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let d = done.load(Ordering::Relaxed);
            let filled = d * 30 / total_requests.max(1);
            eprint!(
                "\r[{}{}] {d}/{total_requests} conversations {:.0}s",
                "#".repeat(filled),
                ".".repeat(30 - filled.min(30)),
                t0.elapsed().as_secs_f64()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// Replay the workload's plan; returns every record.
pub async fn replay(client: &reqwest::Client, target: Arc<Target>, w: &Workload) -> Vec<Record> {
    let plan = Arc::new(w.plan());
    let t0 = Instant::now();
    let total_requests: usize = plan.iter().map(|c| c.turns.len()).sum();
    let done = Arc::new(AtomicUsize::new(0));
    let progress = std::io::stderr()
        .is_terminal()
        .then(|| progress_bar(done.clone(), total_requests, t0));
    let mut tasks = Vec::new();
    // Injections at fixed times.
    for conv in plan.iter().filter(|c| c.at_ms.is_some()) {
        let (client, target, conv, done) =
            (client.clone(), target.clone(), conv.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until((t0 + Duration::from_millis(conv.at_ms.unwrap_or(0))).into())
                .await;
            let r = client::run_conversation(&client, &target, &conv, t0).await;
            done.fetch_add(1, Ordering::Relaxed);
            r
        }));
    }
    let regular: Vec<usize> = (0..plan.len())
        .filter(|&i| plan[i].at_ms.is_none())
        .collect();
    match w.arrival {
        Arrival::Closed {
            concurrency,
            backoff_ms,
            burst,
        } => {
            let next = Arc::new(AtomicUsize::new(0));
            let regular = Arc::new(regular);
            let clients = burst.map_or(concurrency, |b| b.concurrency.max(concurrency));
            for client_k in 0..clients {
                // Clients past the base take part only while a burst is on.
                let burst = burst.filter(|_| client_k >= concurrency);
                let (client, target, plan, next, regular, done) = (
                    client.clone(),
                    target.clone(),
                    plan.clone(),
                    next.clone(),
                    regular.clone(),
                    done.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    let mut out = Vec::new();
                    loop {
                        if let Some(b) = burst {
                            let wait = b.wait_s(t0.elapsed().as_secs_f64());
                            if wait > 0.0 {
                                if next.load(Ordering::Relaxed) >= regular.len() {
                                    break;
                                }
                                let nap = wait.min(1.0);
                                tokio::time::sleep(Duration::from_secs_f64(nap)).await;
                                continue;
                            }
                        }
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = regular.get(k) else { break };
                        let r = client::run_conversation(&client, &target, &plan[i], t0).await;
                        let back_off = backoff_ms > 0 && refused_for_load(&r);
                        out.extend(r);
                        done.fetch_add(1, Ordering::Relaxed);
                        if back_off {
                            tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                        }
                    }
                    out
                }));
            }
        }
        Arrival::Rate { rate } | Arrival::Poisson { rate } => {
            let poisson = matches!(w.arrival, Arrival::Poisson { .. });
            let mut rng = workload::Rng::new(w.seed ^ 0xA5A5);
            let mut at = 0.0f64;
            for i in regular {
                let gap = if poisson {
                    -(1.0 - rng.f64()).ln() / rate
                } else {
                    1.0 / rate
                };
                let send_at = t0 + Duration::from_secs_f64(at);
                at += gap;
                let (client, target, conv, done) = (
                    client.clone(),
                    target.clone(),
                    plan[i].clone(),
                    done.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    tokio::time::sleep_until(send_at.into()).await;
                    let r = client::run_conversation(&client, &target, &conv, t0).await;
                    done.fetch_add(1, Ordering::Relaxed);
                    r
                }));
            }
        }
    }
    let mut records = Vec::new();
    for t in tasks {
        if let Ok(r) = t.await {
            records.extend(r);
        }
    }
    if let Some(p) = progress {
        p.abort();
        eprintln!();
    }
    records.sort_by(|a, b| a.send_ms.total_cmp(&b.send_ms));
    records
}
