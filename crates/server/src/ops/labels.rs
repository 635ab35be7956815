//! Several models' Prometheus text as one: every sample labelled with its
//! model (`model="…"`; `""` for requests no model was found for; vLLM's
//! label name, `model_name`, on the `vllm:*` series gateways read), each
//! family's `# HELP`/`# TYPE` once and its samples together, as the text
//! format requires.

use std::fmt::Write;

struct Family {
    name: String,
    header: Vec<String>,
    samples: Vec<String>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `metric{a="b"} v` → `metric{model="m",a="b"} v`; `metric v` →
/// `metric{model="m"} v`; `vllm:x v` → `vllm:x{model_name="m"} v`.
fn labelled(line: &str, model: &str) -> String {
    let key = if line.starts_with("vllm:") {
        "model_name"
    } else {
        "model"
    };
    let m = format!("{key}=\"{}\"", escape(model));
    match (line.find('{'), line.find(' ')) {
        (Some(b), Some(sp)) if b < sp => {
            let rest = &line[b + 1..];
            let sep = if rest.starts_with('}') { "" } else { "," };
            format!("{}{{{m}{sep}{rest}", &line[..b])
        }
        (_, Some(sp)) => format!("{}{{{m}}}{}", &line[..sp], &line[sp..]),
        _ => line.to_string(),
    }
}

/// Merge `(model, text)` blocks.
pub fn merge(blocks: &[(String, String)]) -> String {
    let mut fams: Vec<Family> = Vec::new();
    for (model, text) in blocks {
        let mut cur: Option<usize> = None;
        for line in text.lines() {
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line
                .strip_prefix("# HELP ")
                .or_else(|| line.strip_prefix("# TYPE "))
            {
                let name = rest.split_whitespace().next().unwrap_or("").to_string();
                let i = match fams.iter().position(|f| f.name == name) {
                    Some(i) => i,
                    None => {
                        fams.push(Family {
                            name,
                            header: Vec::new(),
                            samples: Vec::new(),
                        });
                        fams.len() - 1
                    }
                };
                if !fams[i].header.iter().any(|h| h == line) && fams[i].header.len() < 2 {
                    fams[i].header.push(line.to_string());
                }
                cur = Some(i);
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let sample = labelled(line, model);
            match cur {
                Some(i) => fams[i].samples.push(sample),
                None => fams.push(Family {
                    name: String::new(),
                    header: Vec::new(),
                    samples: vec![sample],
                }),
            }
        }
    }
    let mut o = String::new();
    for f in fams {
        for h in f.header {
            let _ = writeln!(o, "{h}");
        }
        for s in f.samples {
            let _ = writeln!(o, "{s}");
        }
    }
    o
}

/// The Prometheus text as OpenMetrics 1.0 (what a scraper asking for
/// exemplars gets): a counter family is named without its `_total` suffix
/// in `# HELP` / `# TYPE` (its samples keep it), and the text ends with
/// `# EOF`.
pub(crate) fn openmetrics(text: &str) -> String {
    let counters: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .filter(|n| n.ends_with("_total"))
        .collect();
    let mut out = String::with_capacity(text.len() + 8);
    for line in text.lines() {
        let head = line
            .strip_prefix("# HELP ")
            .map(|r| ("# HELP ", r))
            .or_else(|| line.strip_prefix("# TYPE ").map(|r| ("# TYPE ", r)));
        match head {
            Some((tag, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = match counters.contains(name) {
                    true => name.strip_suffix("_total").unwrap_or(name),
                    false => name,
                };
                let _ = writeln!(out, "{tag}{name} {tail}");
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_stay_together_and_every_sample_has_its_model() {
        let a = "# HELP x_total X\n# TYPE x_total counter\nx_total 1\n# HELP h H\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 3\n".to_string();
        let b =
            "# HELP x_total X\n# TYPE x_total counter\nx_total 5\n# TYPE vllm:y gauge\nvllm:y 2\n"
                .to_string();
        let out = merge(&[("a".into(), a), ("b\"".into(), b)]);
        assert_eq!(
            out,
            "# HELP x_total X\n# TYPE x_total counter\nx_total{model=\"a\"} 1\nx_total{model=\"b\\\"\"} 5\n# HELP h H\n# TYPE h histogram\nh_bucket{model=\"a\",le=\"1\"} 2\nh_sum{model=\"a\"} 3\n# TYPE vllm:y gauge\nvllm:y{model_name=\"b\\\"\"} 2\n"
        );
    }
}
