//! Input-grounded prompts: tasks whose answer is mostly the given input
//! (edit a text, summarise it, refactor code with repeated identifiers).
//! These are where speculation from the prompt (n-gram drafting) finds
//! real acceptance; a workload picks one with `[prompt] task = "..."`.
//! Deterministic: the same RNG state gives the same text.

use serde::{Deserialize, Serialize};

use crate::workload::Rng;

/// What a turn asks for (`[prompt] task`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// "Continue this text: <words>" (the default; no grounding).
    #[default]
    Continue,
    /// Replace one word throughout a given text, change nothing else.
    Edit,
    /// Summarise a given text, quoting its key sentences.
    Summarize,
    /// Rename an identifier in given code that repeats its identifiers.
    Code,
}

const NOUNS: &[&str] = &[
    "river", "garden", "window", "market", "teacher", "engine", "bridge", "island", "letter",
    "forest", "doctor", "station", "library", "harbor", "kitchen", "village",
];
const ADJS: &[&str] = &[
    "old", "quiet", "bright", "small", "large", "warm", "cold", "green", "busy", "narrow",
];
const VERBS: &[&str] = &[
    "opens", "closes", "waits", "changes", "grows", "moves", "stands", "returns",
];
const PLACES: &[&str] = &[
    "near the road",
    "after the rain",
    "in the morning",
    "by the old wall",
    "before noon",
    "under the hill",
    "at the end of the street",
];

fn pick<'a>(r: &mut Rng, v: &[&'a str]) -> &'a str {
    v[(r.next_u64() % v.len() as u64) as usize]
}

/// About `n` tokens of plain sentences that reuse a small vocabulary (so a
/// text has the repeats a real document has).
pub fn prose(r: &mut Rng, n: usize) -> String {
    let mut s = String::new();
    // A sentence is about 9 tokens.
    for i in 0..n.div_ceil(9).max(1) {
        if i > 0 {
            s.push(if i % 4 == 0 { '\n' } else { ' ' });
        }
        let (a, b, v, p, c) = (
            pick(r, ADJS),
            pick(r, NOUNS),
            pick(r, VERBS),
            pick(r, PLACES),
            pick(r, NOUNS),
        );
        s.push_str(&format!("The {a} {b} {v} {p}, and the {c} {v} too."));
    }
    s
}

/// About `n` tokens of Python that repeats its identifiers.
pub fn code(r: &mut Rng, n: usize) -> String {
    let names = [
        "total", "count", "items", "result", "value", "index", "buffer", "limit",
    ];
    let mut s = String::new();
    // A function is about 60 tokens.
    for f in 0..n.div_ceil(60).max(1) {
        let (a, b) = (pick(r, &names), pick(r, &names));
        let noun = pick(r, NOUNS);
        s.push_str(&format!(
            "def update_{noun}_{f}({a}_list, {b}_limit):\n    {a}_total = 0\n    \
             for {a}_index in range(len({a}_list)):\n        \
             if {a}_list[{a}_index] > {b}_limit:\n            \
             {a}_total = {a}_total + {a}_list[{a}_index]\n        \
             else:\n            {a}_total = {a}_total - {b}_limit\n    \
             return {a}_total\n\n"
        ));
    }
    s
}

/// The user message of one turn of `task` over about `n` tokens of input.
pub fn user_text(task: Task, r: &mut Rng, n: usize) -> String {
    match task {
        Task::Continue => format!("Continue this text: {}", crate::workload::text_of(r, n)),
        Task::Edit => {
            let (from, to) = (pick(r, NOUNS), pick(r, ADJS));
            format!(
                "Rewrite the text below, replacing the word \"{from}\" with \"{to} {from}\" \
                 everywhere, and change nothing else. Reply with the whole rewritten text.\n\n{}",
                prose(r, n)
            )
        }
        Task::Summarize => format!(
            "Summarise the text below, quoting its most important sentences word for word.\n\n{}",
            prose(r, n)
        ),
        Task::Code => {
            let (from, to) = (pick(r, NOUNS), pick(r, NOUNS));
            format!(
                "In the Python code below, rename every function named update_{from}_N to \
                 refresh_{to}_N and add a one-line comment above each function. Reply with the \
                 whole code.\n\n```python\n{}```",
                code(r, n)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grounded_texts_are_deterministic_sized_and_repetitive() {
        for task in [Task::Edit, Task::Summarize, Task::Code] {
            let a = user_text(task, &mut Rng::new(3), 200);
            assert_eq!(a, user_text(task, &mut Rng::new(3), 200));
            assert_ne!(a, user_text(task, &mut Rng::new(4), 200));
            let words = a.split_whitespace().count();
            assert!((120..500).contains(&words), "{task:?}: {words} words");
            // Input-grounded: a 3-word window recurs (what n-gram drafts use).
            let w: Vec<&str> = a.split_whitespace().collect();
            let tri: Vec<_> = w.windows(3).collect();
            let distinct: std::collections::HashSet<_> = tri.iter().collect();
            assert!(distinct.len() < tri.len(), "{task:?}: no repeats");
        }
        let c = user_text(Task::Continue, &mut Rng::new(3), 10);
        assert!(c.starts_with("Continue this text: "));
    }
}
