//! Which GGUF file(s) of a repository to fetch.
//!
//! Candidates are the `.gguf` files whose name does not contain `mmproj`
//! (projectors for vision models are not models to load on their own). With a
//! quant, the files whose path contains it case-insensitively; a match set off
//! by separators (`-Q4_0.` rather than `IQ4_0`, `F16` rather than `BF16`) wins
//! over a bare substring match. Without a quant, Q4_K_M when present, else the
//! first candidate in name order (llama.cpp's `-hf` default). The files of a
//! split model (`name-00001-of-00003.gguf`) form one choice: all parts are
//! returned, the first part first. A repository's projector (`mmproj*.gguf`
//! in the weights' folder, F16 preferred) is fetched beside them
//! (`choose_mmproj`).

/// Why no choice could be made.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SelectError {
    /// Nothing matches; the candidates there.
    NoMatch { available: Vec<String> },
    /// Several models match; one file of each.
    Ambiguous { candidates: Vec<String> },
    /// A split model lacks parts.
    IncompleteSplit { first: String, missing: Vec<String> },
}

impl SelectError {
    /// The error for `r`; `location` says where the files were listed.
    pub(crate) fn into_hub(self, r: &crate::HubRef, location: String) -> crate::HubError {
        let repo = r.repo.clone();
        match self {
            SelectError::NoMatch { available } => crate::HubError::NoMatch {
                repo,
                quant: r.quant.clone(),
                location,
                available,
            },
            SelectError::Ambiguous { candidates } => crate::HubError::Ambiguous {
                repo,
                quant: r.quant.clone().unwrap_or_default(),
                candidates,
            },
            SelectError::IncompleteSplit { first, missing } => crate::HubError::IncompleteSplit {
                repo,
                first,
                location,
                missing,
            },
        }
    }
}

/// `prefix-00002-of-00003.gguf` → (`prefix`, 2, 3, width of the index digits).
fn split_part(name: &str) -> Option<(&str, u32, u32, usize)> {
    let stem = name.get(..name.len().checked_sub(5)?)?;
    let (head, total) = stem.rsplit_once("-of-")?;
    let (prefix, index) = head.rsplit_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(total) || !digits(index) || prefix.is_empty() {
        return None;
    }
    let (i, n) = (index.parse().ok()?, total.parse().ok()?);
    (i >= 1 && i <= n).then_some((prefix, i, n, index.len()))
}

/// The model a file belongs to: the split prefix and part count, or the file.
fn group_key(name: &str) -> (String, u32) {
    match split_part(name) {
        Some((prefix, _, total, _)) => (prefix.to_string(), total),
        None => (name.to_string(), 0),
    }
}

fn is_candidate(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".gguf") && !lower.contains("mmproj")
}

/// Where `needle` (lower case) occurs in `hay` (lower case) with a separator, or
/// nothing, on both sides.
fn bounded_match(hay: &str, needle: &str) -> bool {
    let bytes = hay.as_bytes();
    hay.match_indices(needle).any(|(at, _)| {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(at + needle.len()).copied();
        !before.is_some_and(|b| b.is_ascii_alphanumeric())
            && !after.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

/// Chooses among `files` (repository paths). Returns the files to fetch; the
/// first is the one to load.
pub(crate) fn choose(files: &[String], quant: Option<&str>) -> Result<Vec<String>, SelectError> {
    let mut candidates: Vec<&String> = files.iter().filter(|f| is_candidate(f)).collect();
    candidates.sort();
    candidates.dedup();
    let no_match = || SelectError::NoMatch {
        available: candidates.iter().map(|s| s.to_string()).collect(),
    };
    let pool: Vec<&String> = match quant {
        Some(q) => {
            let q = q.to_ascii_lowercase();
            let hits: Vec<&String> = candidates
                .iter()
                .copied()
                .filter(|f| f.to_ascii_lowercase().contains(&q))
                .collect();
            let bounded: Vec<&String> = hits
                .iter()
                .copied()
                .filter(|f| bounded_match(&f.to_ascii_lowercase(), &q))
                .collect();
            let pool = if bounded.is_empty() { hits } else { bounded };
            let mut groups: Vec<(String, u32)> = Vec::new();
            let mut firsts: Vec<String> = Vec::new();
            for f in &pool {
                let key = group_key(f);
                if !groups.contains(&key) {
                    groups.push(key);
                    firsts.push(f.to_string());
                }
            }
            if groups.len() > 1 {
                return Err(SelectError::Ambiguous { candidates: firsts });
            }
            pool
        }
        None => {
            let q4 = candidates
                .iter()
                .copied()
                .filter(|f| bounded_match(&f.to_ascii_lowercase(), "q4_k_m"))
                .collect::<Vec<_>>();
            if q4.is_empty() {
                candidates.clone()
            } else {
                q4
            }
        }
    };
    let Some(first) = pool.first() else {
        return Err(no_match());
    };
    let Some((prefix, _, total, width)) = split_part(first) else {
        return Ok(vec![first.to_string()]);
    };
    let mut parts = Vec::with_capacity(total as usize);
    let mut missing = Vec::new();
    for i in 1..=total {
        let found = candidates.iter().find(|f| {
            split_part(f).is_some_and(|(p, idx, n, _)| p == prefix && idx == i && n == total)
        });
        match found {
            Some(f) => parts.push(f.to_string()),
            None => missing.push(format!("{prefix}-{i:0width$}-of-{total:0width$}.gguf")),
        }
    }
    if missing.is_empty() {
        Ok(parts)
    } else {
        let first = format!("{prefix}-{:0width$}-of-{total:0width$}.gguf", 1);
        Err(SelectError::IncompleteSplit { first, missing })
    }
}

/// The projector fetched beside the weights (vision and audio repositories
/// ship one): an `mmproj` GGUF in the weights' folder, F16 first, else the
/// first in name order.
pub(crate) fn choose_mmproj(files: &[String], weights: &str) -> Option<String> {
    let folder = |f: &str| f.rsplit_once('/').map_or("", |(d, _)| d).to_string();
    let here = folder(weights);
    let mut m: Vec<&String> = files
        .iter()
        .filter(|f| {
            let l = f.to_ascii_lowercase();
            l.ends_with(".gguf") && l.contains("mmproj") && folder(f) == here
        })
        .collect();
    m.sort();
    m.iter()
        .find(|f| bounded_match(&f.to_ascii_lowercase(), "f16"))
        .or(m.first())
        .map(|s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_projector_beside_the_weights() {
        let files = names(&[
            "m-Q4_K_M.gguf",
            "mmproj-m-bf16.gguf",
            "mmproj-m-f16.gguf",
            "mmproj-m-q8_0.gguf",
            "sub/mmproj-x.gguf",
        ]);
        assert_eq!(
            choose_mmproj(&files, "m-Q4_K_M.gguf").as_deref(),
            Some("mmproj-m-f16.gguf")
        );
        assert_eq!(
            choose_mmproj(&files, "sub/w.gguf").as_deref(),
            Some("sub/mmproj-x.gguf")
        );
        assert_eq!(choose_mmproj(&names(&["a.gguf"]), "a.gguf"), None);
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn split_names() {
        assert_eq!(
            split_part("a/m-Q4-00002-of-00003.gguf"),
            Some(("a/m-Q4", 2, 3, 5))
        );
        assert_eq!(split_part("m-00004-of-00003.gguf"), None);
        assert_eq!(split_part("m-Q4_K_M.gguf"), None);
        assert_eq!(split_part("-00001-of-00002.gguf"), None);
    }

    #[test]
    fn bounded() {
        assert!(bounded_match("m-q4_0.gguf", "q4_0"));
        assert!(!bounded_match("m-iq4_0.gguf", "q4_0"));
        assert!(!bounded_match("m-q4_k_m.gguf", "q4_k"));
        assert!(bounded_match("m-bf16.gguf", "bf16"));
        assert!(!bounded_match("m-bf16.gguf", "f16"));
    }

    #[test]
    fn picks() {
        let files = names(&[
            "README.md",
            "m-IQ4_XS.gguf",
            "m-Q4_K_M.gguf",
            "m-Q4_K_S.gguf",
            "mmproj-m-f16.gguf",
            "m-BF16.gguf",
            "m-F16.gguf",
        ]);
        assert_eq!(choose(&files, None).unwrap(), names(&["m-Q4_K_M.gguf"]));
        assert_eq!(choose(&files, Some("f16")).unwrap(), names(&["m-F16.gguf"]));
        assert_eq!(
            choose(&files, Some("iq4")).unwrap(),
            names(&["m-IQ4_XS.gguf"])
        );
        assert!(matches!(
            choose(&files, Some("q4_k")),
            Err(SelectError::Ambiguous { candidates }) if candidates.len() == 2
        ));
        let Err(SelectError::NoMatch { available }) = choose(&files, Some("Q8_0")) else {
            panic!("expected no match");
        };
        assert!(!available.iter().any(|f| f.contains("mmproj")));
        assert_eq!(available.len(), 5);
        assert_eq!(
            choose(&names(&["mmproj.gguf", "b.gguf", "a.gguf"]), None).unwrap(),
            names(&["a.gguf"])
        );
    }
}
