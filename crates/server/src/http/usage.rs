//! Per-key usage counters, by the key's NAME (never the secret): requests
//! that passed the key check, prompt and completion tokens settled, and
//! refusals by quota (`rpm`, `tpm`, `tpd`). Rendered in `/metrics` as
//! `steward_key_*{key="NAME"}` (`KeyUsage::render`).
//!
//! Cardinality is bounded: the first [`MAX_KEY_LABELS`] names seen (in
//! the key file's order at start, then as reloads add names) get their own
//! series; every later name shares [`OTHER`]. A name a reload removed keeps
//! its series (counters never go back) and its place.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most key names with series of their own.
pub const MAX_KEY_LABELS: usize = 64;
/// The label of every name past [`MAX_KEY_LABELS`].
pub const OTHER: &str = "_other";

/// Which quota refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    /// Requests per minute (`rpm=`, `--rate-limit-rpm`).
    Rpm,
    /// Tokens per minute (`tpm=`).
    Tpm,
    /// Tokens per day (`tpd=`).
    Tpd,
}

impl Quota {
    pub fn label(self) -> &'static str {
        match self {
            Quota::Rpm => "rpm",
            Quota::Tpm => "tpm",
            Quota::Tpd => "tpd",
        }
    }
}

/// One label's counters.
#[derive(Debug, Default)]
pub struct KeyCounters {
    pub requests: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    limited: [AtomicU64; 3],
}

impl KeyCounters {
    pub fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tokens(&self, prompt: u64, completion: u64) {
        self.prompt_tokens.fetch_add(prompt, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(completion, Ordering::Relaxed);
    }

    pub fn limited(&self, q: Quota) {
        self.limited[q as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn limited_count(&self, q: Quota) -> u64 {
        self.limited[q as usize].load(Ordering::Relaxed)
    }
}

/// Every label's counters, in the order names were first seen.
#[derive(Debug, Default)]
pub struct KeyUsage {
    named: Mutex<Vec<(Arc<str>, Arc<KeyCounters>)>>,
    other: Arc<KeyCounters>,
    /// Some name counts into `other`.
    other_used: AtomicBool,
}

impl KeyUsage {
    /// The counters a key named `name` counts into.
    pub fn slot(&self, name: &str) -> Arc<KeyCounters> {
        let mut named = self.named.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, c)) = named.iter().find(|(n, _)| &**n == name) {
            return c.clone();
        }
        if named.len() >= MAX_KEY_LABELS || name == OTHER {
            self.other_used.store(true, Ordering::Relaxed);
            return self.other.clone();
        }
        let c = Arc::new(KeyCounters::default());
        named.push((Arc::from(name), c.clone()));
        c
    }

    /// (label, counters) for every label in use; `_other` last, when any
    /// name counts into it.
    pub fn snapshot(&self) -> Vec<(Arc<str>, Arc<KeyCounters>)> {
        let named = self.named.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = named.clone();
        if self.other_used.load(Ordering::Relaxed) {
            out.push((Arc::from(OTHER), self.other.clone()));
        }
        out
    }
}

impl KeyUsage {
    /// Prometheus text: `steward_key_requests_total{key}`,
    /// `steward_key_tokens_total{key,kind="prompt|completion"}`,
    /// `steward_key_rate_limited_total{key,quota="rpm|tpm|tpd"}` (nothing
    /// while no key has been seen).
    pub fn render(&self, o: &mut String) {
        use std::fmt::Write;
        use Ordering::Relaxed;
        let keys = self.snapshot();
        if keys.is_empty() {
            return;
        }
        let label = |n: &str| {
            let v = n
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("key=\"{v}\"")
        };
        let _ = writeln!(o, "# HELP steward_key_requests_total Requests that passed the key check, by key name\n# TYPE steward_key_requests_total counter");
        for (n, c) in &keys {
            let _ = writeln!(
                o,
                "steward_key_requests_total{{{}}} {}",
                label(n),
                c.requests.load(Relaxed)
            );
        }
        let _ = writeln!(o, "# HELP steward_key_tokens_total Tokens used (the prompt once admitted, completions as produced), by key name\n# TYPE steward_key_tokens_total counter");
        for (n, c) in &keys {
            let l = label(n);
            let _ = writeln!(
                o,
                "steward_key_tokens_total{{{l},kind=\"prompt\"}} {}",
                c.prompt_tokens.load(Relaxed)
            );
            let _ = writeln!(
                o,
                "steward_key_tokens_total{{{l},kind=\"completion\"}} {}",
                c.completion_tokens.load(Relaxed)
            );
        }
        let _ = writeln!(o, "# HELP steward_key_rate_limited_total Requests refused by a key's quota, by key name\n# TYPE steward_key_rate_limited_total counter");
        for (n, c) in &keys {
            let l = label(n);
            for q in [Quota::Rpm, Quota::Tpm, Quota::Tpd] {
                let _ = writeln!(
                    o,
                    "steward_key_rate_limited_total{{{l},quota=\"{}\"}} {}",
                    q.label(),
                    c.limited_count(q)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_past_the_cap_share_other() {
        let u = KeyUsage::default();
        let a = u.slot("alice");
        assert!(Arc::ptr_eq(&a, &u.slot("alice")));
        for i in 1..MAX_KEY_LABELS {
            u.slot(&format!("k{i}"));
        }
        let late = u.slot("late");
        late.request();
        assert!(Arc::ptr_eq(&late, &u.slot("later")));
        let snap = u.snapshot();
        assert_eq!(snap.len(), MAX_KEY_LABELS + 1);
        assert_eq!(&*snap[0].0, "alice");
        assert_eq!(&*snap[MAX_KEY_LABELS].0, OTHER);
        assert_eq!(snap[MAX_KEY_LABELS].1.requests.load(Ordering::Relaxed), 1);
        // A key literally named `_other` is `_other`.
        let u = KeyUsage::default();
        u.slot(OTHER).limited(Quota::Tpd);
        let snap = u.snapshot();
        assert_eq!(snap.len(), 1);
        assert_eq!(snap[0].1.limited_count(Quota::Tpd), 1);
    }

    #[test]
    fn rendered_by_name_escaped() {
        let u = KeyUsage::default();
        let mut o = String::new();
        u.render(&mut o);
        assert!(o.is_empty());
        u.slot("a\"b").tokens(3, 4);
        u.render(&mut o);
        assert!(
            o.contains("steward_key_tokens_total{key=\"a\\\"b\",kind=\"completion\"} 4\n"),
            "{o}"
        );
        assert!(
            o.contains("steward_key_rate_limited_total{key=\"a\\\"b\",quota=\"tpm\"} 0\n"),
            "{o}"
        );
        assert!(
            o.contains("steward_key_requests_total{key=\"a\\\"b\"} 0\n"),
            "{o}"
        );
    }
}
