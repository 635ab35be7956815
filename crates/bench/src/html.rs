//! A self-contained HTML report with inline SVG plots (no scripts, no
//! external assets): latency CDFs per run, and tokens/s and p99 TTFT against
//! concurrency for sweeps.

use std::fmt::Write;

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A line chart of several series.
pub fn chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let (w, h, l, r, t, b) = (640.0, 360.0, 70.0, 160.0, 30.0, 50.0);
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    let xmax = all.iter().map(|p| p.0).fold(0.0, f64::max).max(1e-9);
    let ymax = all.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.05;
    let xmin = all
        .iter()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .min(0.0);
    let px = |x: f64| l + (x - xmin) / (xmax - xmin).max(1e-9) * (w - l - r);
    let py = |y: f64| h - b - y / ymax * (h - t - b);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        o,
        r#"<text x="{l}" y="18" font-size="13" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let _ = write!(
        o,
        r#"<line x1="{l}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{l}" y1="{t}" x2="{l}" y2="{}" stroke="black"/>"#,
        h - b,
        w - r,
        h - b,
        h - b
    );
    for i in 0..=4 {
        let fx = xmin + (xmax - xmin) * i as f64 / 4.0;
        let fy = ymax * i as f64 / 4.0;
        let _ = write!(
            o,
            r##"<text x="{:.1}" y="{}" text-anchor="middle">{}</text><text x="{}" y="{:.1}" text-anchor="end">{}</text><line x1="{l}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#eee"/>"##,
            px(fx),
            h - b + 15.0,
            fmt(fx),
            l - 5.0,
            py(fy) + 4.0,
            fmt(fy),
            py(fy),
            w - r,
            py(fy)
        );
    }
    let _ = write!(
        o,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"#,
        (l + w - r) / 2.0,
        h - 12.0,
        esc(x_label),
        (t + h - b) / 2.0,
        (t + h - b) / 2.0,
        esc(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = write!(
            o,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
        if s.points.len() <= 12 {
            for (x, y) in &s.points {
                let _ = write!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                    px(*x),
                    py(*y)
                );
            }
        }
        let ly = t + 15.0 * i as f64 + 10.0;
        let _ = write!(
            o,
            r#"<rect x="{}" y="{:.1}" width="10" height="10" fill="{c}"/><text x="{}" y="{:.1}">{}</text>"#,
            w - r + 10.0,
            ly - 9.0,
            w - r + 25.0,
            ly,
            esc(&s.name)
        );
    }
    o.push_str("</svg>");
    o
}

fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// CDF points of a sample.
pub fn cdf(mut v: Vec<f64>) -> Vec<(f64, f64)> {
    v.retain(|x| x.is_finite());
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(i, x)| (*x, (i + 1) as f64 / n))
        .collect()
}

pub fn page(title: &str, sections: &[(String, String)], json: &str) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{0}</title><style>body{{font-family:sans-serif;max-width:1100px;margin:20px auto}}pre{{background:#f6f6f6;padding:8px;overflow:auto;max-height:400px}}</style></head><body><h1>{0}</h1>",
        esc(title)
    );
    for (h, body) in sections {
        let _ = write!(o, "<h2>{}</h2>{}", esc(h), body);
    }
    let _ = write!(
        o,
        "<h2>Raw summary (JSON)</h2><pre>{}</pre></body></html>",
        esc(json)
    );
    o
}
