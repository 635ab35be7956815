//! `steward-bench`: replays workloads against any OpenAI-compatible server
//! over HTTP (loopback only unless `--allow-remote`), reports latency,
//! throughput and goodput, checks the server returns to its steady state,
//! searches capacity under an SLO, and compares two servers in one run.

mod classes;
mod client;
mod grounded;
mod html;
mod mix;
mod replay;
mod report;
mod scrape;
mod workload;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};

use client::{Record, Target};
use report::Summary;
use workload::Workload;

#[derive(Parser)]
#[command(
    name = "steward-bench",
    version,
    about = "Workload replay and capacity search for OpenAI-compatible servers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the built-in workloads.
    List,
    /// Print a built-in workload's TOML (a starting point for your own).
    Show { name: String },
    /// Run one workload once.
    Run(RunArgs),
    /// Raise closed-loop concurrency until the SLO breaks; report the last passing level.
    Capacity(SweepArgs),
    /// Run the same workload against two or more servers, interleaved level by level.
    Compare(CompareArgs),
    /// Compare two JSON result files side by side.
    CompareFiles { a: String, b: String },
}

#[derive(Args, Clone)]
struct Common {
    /// Workload: a built-in name or a TOML file.
    #[arg(long, default_value = "chat-mixed")]
    workload: String,
    /// Model name to send (default: the first of GET /v1/models).
    #[arg(long)]
    model: Option<String>,
    #[arg(long, env = "STEWARD_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Override the workload's conversation count.
    #[arg(long)]
    conversations: Option<usize>,
    /// SLO override: p99 TTFT in ms.
    #[arg(long)]
    slo_ttft_ms: Option<f64>,
    /// SLO override: p99 inter-chunk gap in ms.
    #[arg(long)]
    slo_itl_ms: Option<f64>,
    /// Seconds to wait for the server to be idle after a run.
    #[arg(long, default_value_t = 15.0)]
    settle_s: f64,
    /// Write the JSON report here.
    #[arg(long)]
    out: Option<String>,
    /// Write the HTML report here.
    #[arg(long)]
    html: Option<String>,
    /// Permit a non-loopback URL.
    #[arg(long)]
    allow_remote: bool,
    /// Send `ignore_eos` (every request yields max_tokens).
    #[arg(long)]
    ignore_eos: bool,
    /// In sweeps: conversations = this × the concurrency level.
    #[arg(long)]
    per_client: Option<usize>,
    /// A JSON object merged into every request body (as the OpenAI
    /// client's `extra_body`), e.g. a `response_format`.
    #[arg(long, value_parser = parse_extra)]
    extra_body: Option<serde_json::Value>,
    /// Fail the command (exit 4) when any answer is one a correct server
    /// would not give: a 5xx other than 503, an error body not in the
    /// OpenAI shape, a bad input accepted, a valid one refused with a 4xx
    /// other than 429, a stream without `[DONE]`, missing choices, grammar
    /// output its grammar forbids, a transport error. Prints the per-class
    /// table.
    #[arg(long)]
    strict: bool,
}

fn parse_extra(s: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str::<serde_json::Value>(s) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err("--extra-body must be a JSON object".into()),
        Err(e) => Err(format!("--extra-body is not JSON: {e}")),
    }
}

#[derive(Args)]
struct RunArgs {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Override closed-loop concurrency.
    #[arg(long)]
    concurrency: Option<usize>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct SweepArgs {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Concurrency levels to try, in order.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    levels: Vec<usize>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct CompareArgs {
    /// Server URLs (give --url two or more times), run interleaved level by level.
    #[arg(long, num_args = 1)]
    url: Vec<String>,
    /// Names for the servers, in --url order.
    #[arg(long, num_args = 1)]
    name: Vec<String>,
    /// Model names per server, in --url order, when they differ.
    #[arg(long = "server-model", num_args = 1)]
    server_model: Vec<String>,
    /// Per server, in --url order: a JSON object merged into its request
    /// bodies (over --extra-body). The same URL twice with two bodies
    /// compares two request kinds on one server, interleaved.
    #[arg(long = "server-extra", num_args = 1, value_parser = parse_extra)]
    server_extra: Vec<serde_json::Value>,
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    levels: Vec<usize>,
    #[command(flatten)]
    common: Common,
}

/// One connection per request, never a pooled one: some servers
/// (llama-server) close a connection after a streamed response, and reusing
/// it fails the next request before it is sent. Every server is measured
/// the same way; a loopback connect costs well under a millisecond.
fn http_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?)
}

fn check_url(url: &str, allow_remote: bool) -> anyhow::Result<String> {
    let u = url
        .trim_end_matches('/')
        .trim_end_matches("/v1")
        .to_string();
    let host = u
        .split("://")
        .nth(1)
        .unwrap_or("")
        .split('/')
        .next()
        .unwrap_or("");
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let local = host == "localhost" || host.starts_with("127.") || host == "[::1]";
    if !local && !allow_remote {
        bail!("{url} is not a loopback address; pass --allow-remote to benchmark it");
    }
    Ok(u)
}

async fn model_name(
    client: &reqwest::Client,
    base: &str,
    key: Option<&str>,
) -> anyhow::Result<String> {
    let mut r = client.get(format!("{base}/v1/models"));
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    let v: Value = r
        .send()
        .await
        .with_context(|| format!("GET {base}/v1/models"))?
        .json()
        .await?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .context("the server lists no model; pass --model")
}

fn load_workload(c: &Common) -> anyhow::Result<Workload> {
    let mut w = Workload::load(&c.workload)?;
    if let Some(n) = c.conversations {
        w.conversations = n;
    }
    if let Some(t) = c.slo_ttft_ms {
        w.slo.ttft_ms = t;
    }
    if let Some(t) = c.slo_itl_ms {
        w.slo.itl_ms = t;
    }
    if c.ignore_eos {
        w.output.ignore_eos = true;
    }
    w.validate()?;
    Ok(w)
}

struct RunOut {
    summary: Summary,
    steady: scrape::SteadyState,
    records: Vec<Record>,
}

async fn run_once(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    c: &Common,
    w: &Workload,
) -> RunOut {
    let key = c.api_key.as_deref();
    let before = scrape::scrape(client, base, key)
        .await
        .map(|m| scrape::load(&m));
    let target = Arc::new(Target {
        base: base.to_string(),
        model: model.to_string(),
        api_key: c.api_key.clone(),
        endpoint: w.endpoint,
        sampling: w.sampling.clone(),
        ignore_eos: w.output.ignore_eos,
        extra: c.extra_body.clone(),
        id_prefix: format!(
            "sb{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64 & 0xff_ffff_ffff)
        ),
    });
    let records = replay::replay(client, target, w).await;
    let summary = report::summarize(&records, &w.slo);
    let steady = scrape::wait_idle(
        client,
        base,
        key,
        before,
        Duration::from_secs_f64(c.settle_s),
    )
    .await;
    RunOut {
        summary,
        steady,
        records,
    }
}

fn print_summary(label: &str, s: &Summary, st: &scrape::SteadyState) {
    eprintln!(
        "{label}: {}/{} ok, {} cancelled, {} errors {:?} | out {:.1} tok/s | TTFT p50 {:.0} p99 {:.0} ms | gap p99 {:.0} max {:.0} ms | goodput {:.0}% | steady: {}",
        s.completed,
        s.requests,
        s.cancelled_by_us,
        s.errors,
        s.errors_by_status,
        s.output_tokens_per_s,
        s.ttft_ms.p50,
        s.ttft_ms.p99,
        s.inter_chunk_gap_ms.p99,
        s.inter_chunk_gap_ms.max,
        s.goodput.fraction * 100.0,
        st.note
    );
}

fn write_outputs(
    c: &Common,
    json_v: &Value,
    title: &str,
    sections: Vec<(String, String)>,
) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(json_v)?;
    if let Some(p) = &c.out {
        std::fs::write(p, &text).with_context(|| format!("write {p}"))?;
    } else {
        println!("{text}");
    }
    if let Some(p) = &c.html {
        let summary_only =
            json!({"summary": json_v.get("summary"), "points": json_v.get("points")});
        let page = html::page(
            title,
            &sections,
            &serde_json::to_string_pretty(&summary_only)?,
        );
        std::fs::write(p, page).with_context(|| format!("write {p}"))?;
    }
    Ok(())
}

fn cdf_section(runs: &[(&str, &[Record])]) -> Vec<(String, String)> {
    let ttft: Vec<html::Series> = runs
        .iter()
        .map(|(n, r)| html::Series {
            name: n.to_string(),
            points: html::cdf(
                r.iter()
                    .filter(|r| r.ok())
                    .filter_map(|r| r.ttft_ms())
                    .collect(),
            ),
        })
        .collect();
    let e2e: Vec<html::Series> = runs
        .iter()
        .map(|(n, r)| html::Series {
            name: n.to_string(),
            points: html::cdf(
                r.iter()
                    .filter(|r| r.ok())
                    .map(|r| r.end_ms - r.send_ms)
                    .collect(),
            ),
        })
        .collect();
    let gaps: Vec<html::Series> = runs
        .iter()
        .map(|(n, r)| html::Series {
            name: n.to_string(),
            points: html::cdf(
                r.iter()
                    .filter(|r| r.ok())
                    .flat_map(|r| r.gaps_ms())
                    .collect(),
            ),
        })
        .collect();
    vec![
        (
            "TTFT CDF".into(),
            html::chart("Time to first text", "ms", "fraction", &ttft),
        ),
        (
            "Inter-chunk gap CDF".into(),
            html::chart("Gap between text chunks", "ms", "fraction", &gaps),
        ),
        (
            "End-to-end CDF".into(),
            html::chart("End-to-end latency", "ms", "fraction", &e2e),
        ),
    ]
}

async fn cmd_run(a: RunArgs) -> anyhow::Result<i32> {
    let base = check_url(&a.url, a.common.allow_remote)?;
    let mut w = load_workload(&a.common)?;
    if let Some(c) = a.concurrency {
        w = w.with_concurrency(c);
    }
    let client = http_client()?;
    let model = match &a.common.model {
        Some(m) => m.clone(),
        None => model_name(&client, &base, a.common.api_key.as_deref()).await?,
    };
    let r = run_once(&client, &base, &model, &a.common, &w).await;
    print_summary(&w.name, &r.summary, &r.steady);
    if a.common.strict {
        eprint!("{}", classes::table(&r.summary.classes));
        for e in &r.summary.failure_examples {
            eprintln!("FAILURE {e}");
        }
    }
    let v = json!({
        "tool": "steward-bench", "version": env!("CARGO_PKG_VERSION"),
        "url": base, "model": model, "workload": w,
        "summary": r.summary, "steady_state": r.steady, "records": r.records,
    });
    write_outputs(
        &a.common,
        &v,
        &format!("steward-bench: {}", w.name),
        cdf_section(&[(&w.name, &r.records)]),
    )?;
    let code = steady_exit(&r.steady);
    if a.common.strict && r.summary.failures > 0 {
        eprintln!(
            "strict check FAILED: {} answers a correct server would not give",
            r.summary.failures
        );
        return Ok(code.max(4));
    }
    Ok(code)
}

/// A Steward run that does not return to idle fails the command.
fn steady_exit(s: &scrape::SteadyState) -> i32 {
    if s.flavor == scrape::Flavor::Steward && !s.returned {
        eprintln!("steady-state check FAILED: {}", s.note);
        3
    } else {
        0
    }
}

/// The workload at one concurrency level of a sweep. Each level draws its
/// own prompts (the seed moves with the level): a server must not be served
/// prompts it has cached from an earlier level. Every server of a compare
/// gets the same prompts at the same level.
fn level_workload(w: &Workload, level: usize, per_client: Option<usize>) -> Workload {
    let mut wl = w.with_concurrency(level);
    if let Some(n) = per_client {
        wl.conversations = n.max(1) * level;
    }
    wl.seed = w.seed.wrapping_add(1_000_003 * level as u64);
    wl
}

fn point(level: usize, s: &Summary) -> Value {
    json!({
        "concurrency": level,
        "output_tokens_per_s": s.output_tokens_per_s,
        "ttft_p50_ms": s.ttft_ms.p50, "ttft_p99_ms": s.ttft_ms.p99,
        "gap_p99_ms": s.inter_chunk_gap_ms.p99, "gap_max_ms": s.inter_chunk_gap_ms.max,
        "tpot_p50_ms": s.tpot_ms.p50,
        "goodput_fraction": s.goodput.fraction, "slo_met": s.goodput.slo_met,
        "errors": s.errors, "completed": s.completed, "requests": s.requests,
    })
}

fn sweep_charts(servers: &[(&str, &[Value])]) -> Vec<(String, String)> {
    let series = |key: &str| -> Vec<html::Series> {
        servers
            .iter()
            .map(|(n, pts)| html::Series {
                name: n.to_string(),
                points: pts
                    .iter()
                    .map(|p| {
                        (
                            p["concurrency"].as_f64().unwrap_or(0.0),
                            p[key].as_f64().unwrap_or(0.0),
                        )
                    })
                    .collect(),
            })
            .collect()
    };
    vec![
        (
            "Throughput".into(),
            html::chart(
                "Output tokens/s vs concurrency",
                "concurrent clients",
                "tokens/s",
                &series("output_tokens_per_s"),
            ),
        ),
        (
            "TTFT".into(),
            html::chart(
                "p99 TTFT vs concurrency",
                "concurrent clients",
                "ms",
                &series("ttft_p99_ms"),
            ),
        ),
        (
            "Gaps".into(),
            html::chart(
                "p99 inter-chunk gap vs concurrency",
                "concurrent clients",
                "ms",
                &series("gap_p99_ms"),
            ),
        ),
    ]
}

async fn cmd_capacity(a: SweepArgs) -> anyhow::Result<i32> {
    let base = check_url(&a.url, a.common.allow_remote)?;
    let w = load_workload(&a.common)?;
    let client = http_client()?;
    let model = match &a.common.model {
        Some(m) => m.clone(),
        None => model_name(&client, &base, a.common.api_key.as_deref()).await?,
    };
    let mut points = Vec::new();
    let mut capacity = None;
    let mut code = 0;
    for &level in &a.levels {
        let wl = level_workload(&w, level, a.common.per_client);
        let r = run_once(&client, &base, &model, &a.common, &wl).await;
        print_summary(&format!("{} @ {level}", w.name), &r.summary, &r.steady);
        code = code.max(steady_exit(&r.steady));
        let pass = r.summary.goodput.slo_met && r.summary.errors == 0;
        let mut p = point(level, &r.summary);
        p["steady_state"] = json!(r.steady);
        points.push(p);
        if !pass {
            break;
        }
        capacity = Some(level);
    }
    eprintln!(
        "capacity for {} under p99 TTFT <= {} ms and p99 gap <= {} ms: {}",
        w.name,
        w.slo.ttft_ms,
        w.slo.itl_ms,
        capacity.map_or("below the first level".to_string(), |c| format!(
            "{c} concurrent clients"
        ))
    );
    let v = json!({
        "tool": "steward-bench", "url": base, "model": model, "workload": w,
        "slo": w.slo, "capacity_concurrency": capacity, "points": points,
    });
    let charts = sweep_charts(&[(&model, &points)]);
    write_outputs(&a.common, &v, &format!("Capacity: {}", w.name), charts)?;
    Ok(code)
}

async fn cmd_compare(a: CompareArgs) -> anyhow::Result<i32> {
    if a.url.len() < 2 {
        bail!("compare needs at least two --url");
    }
    let bases: Vec<String> = a
        .url
        .iter()
        .map(|u| check_url(u, a.common.allow_remote))
        .collect::<anyhow::Result<_>>()?;
    let n = bases.len();
    let names: Vec<String> = (0..n)
        .map(|i| a.name.get(i).cloned().unwrap_or_else(|| bases[i].clone()))
        .collect();
    let w = load_workload(&a.common)?;
    let client = http_client()?;
    let mut models = Vec::new();
    for (i, b) in bases.iter().enumerate() {
        models.push(match a.server_model.get(i).or(a.common.model.as_ref()) {
            Some(m) => m.clone(),
            None => model_name(&client, b, a.common.api_key.as_deref()).await?,
        });
    }
    let mut pts: Vec<Vec<Value>> = vec![Vec::new(); n];
    let mut code = 0;
    // Interleaved: every server runs each level before the next level, so
    // a drift in the host's speed lands on all of them alike.
    for &level in &a.levels {
        let wl = level_workload(&w, level, a.common.per_client);
        for i in 0..n {
            let mut common = a.common.clone();
            if let Some(e) = a.server_extra.get(i).and_then(|e| e.as_object()) {
                let mut merged = common.extra_body.take().unwrap_or_else(|| json!({}));
                for (k, v) in e {
                    merged[k] = v.clone();
                }
                common.extra_body = Some(merged);
            }
            let r = run_once(&client, &bases[i], &models[i], &common, &wl).await;
            print_summary(&format!("{} @ {level}", names[i]), &r.summary, &r.steady);
            code = code.max(steady_exit(&r.steady));
            pts[i].push(point(level, &r.summary));
        }
    }
    let table = compare_table(&names, &pts);
    println!("{table}");
    let servers: Vec<Value> = (0..n)
        .map(|i| json!({"name": names[i], "url": bases[i], "model": models[i], "points": pts[i]}))
        .collect();
    let v = json!({
        "tool": "steward-bench", "workload": w,
        "servers": servers,
        "table_markdown": table,
    });
    let series: Vec<(&str, &[Value])> = names
        .iter()
        .zip(&pts)
        .map(|(n, p)| (n.as_str(), p.as_slice()))
        .collect();
    let charts = sweep_charts(&series);
    let mut c = a.common.clone();
    if c.out.is_none() {
        c.out = Some("/dev/null".into());
    }
    write_outputs(&c, &v, &format!("Compare: {}", names.join(" vs ")), charts)?;
    Ok(code)
}

/// Markdown table, one row per level: tokens/s of every server, the first
/// server's ratio to each other one, TTFT p50 and gap p99 of every server.
fn compare_table(names: &[String], pts: &[Vec<Value>]) -> String {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let mut head = vec!["clients".to_string()];
    head.extend(names.iter().map(|n| format!("{n} tok/s")));
    head.extend(names[1..].iter().map(|n| format!("{} / {n}", names[0])));
    head.extend(names.iter().map(|n| format!("{n} TTFT p50 ms")));
    head.extend(names.iter().map(|n| format!("{n} gap p99 ms")));
    let mut t = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    let rows = pts.iter().map(Vec::len).min().unwrap_or(0);
    for r in 0..rows {
        let first = &pts[0][r];
        let mut cells = vec![first["concurrency"].to_string()];
        cells.extend(
            pts.iter()
                .map(|p| format!("{:.1}", f(&p[r], "output_tokens_per_s"))),
        );
        cells.extend(pts[1..].iter().map(|p| {
            let ratio = f(first, "output_tokens_per_s") / f(&p[r], "output_tokens_per_s").max(1e-9);
            format!("{ratio:.2}×")
        }));
        cells.extend(
            pts.iter()
                .map(|p| format!("{:.0}", f(&p[r], "ttft_p50_ms"))),
        );
        cells.extend(pts.iter().map(|p| format!("{:.0}", f(&p[r], "gap_p99_ms"))));
        t.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    t
}

fn cmd_compare_files(a: &str, b: &str) -> anyhow::Result<i32> {
    let read = |p: &str| -> anyhow::Result<Value> {
        Ok(serde_json::from_str(
            &std::fs::read_to_string(p).with_context(|| format!("read {p}"))?,
        )?)
    };
    let (va, vb) = (read(a)?, read(b)?);
    let pts = |v: &Value| -> Vec<Value> {
        if let Some(p) = v["points"].as_array() {
            return p.clone();
        }
        let s: Summary = serde_json::from_value(v["summary"].clone()).unwrap_or_default();
        vec![point(0, &s)]
    };
    println!(
        "{}",
        compare_table(&[a.to_string(), b.to_string()], &[pts(&va), pts(&vb)])
    );
    Ok(0)
}

fn main() {
    let cli = Cli::parse();
    // One thread on a small machine: the client must stay light next to a
    // server on few cores. With 8 cores or more, two: a single thread that
    // spends a few tens of ms on one request (building a 16,000-token
    // prompt, parsing a burst) delays reading every other stream, which
    // shows up as a server stall that is not one.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = if cores >= 8 {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("steward-bench: error: {e}");
            std::process::exit(1);
        }
    };
    let r = rt.block_on(async move {
        match cli.cmd {
            Cmd::List => {
                for (name, text) in workload::BUILTINS {
                    let w = Workload::parse(text)?;
                    println!("{name:28} {}", w.description);
                }
                Ok(0)
            }
            Cmd::Show { name } => match workload::builtin(&name) {
                Some(t) => {
                    print!("{t}");
                    Ok(0)
                }
                None => bail!("unknown built-in workload {name}"),
            },
            Cmd::Run(a) => cmd_run(a).await,
            Cmd::Capacity(a) => cmd_capacity(a).await,
            Cmd::Compare(a) => cmd_compare(a).await,
            Cmd::CompareFiles { a, b } => cmd_compare_files(&a, &b),
        }
    });
    match r {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("steward-bench: error: {e:#}");
            std::process::exit(1);
        }
    }
}
