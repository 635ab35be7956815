//! Workload files (TOML) and the built-in workloads, and their expansion into
//! a deterministic plan of conversations (each one or more turns).
//!
//! Invariant: the same workload and seed give the same plan, byte for byte,
//! whatever server it is replayed against.

use serde::{Deserialize, Serialize};

pub use crate::mix::{BadKind, GrammarKind, Kind, MixSpec};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "d_seed")]
    pub seed: u64,
    /// Conversations to run (requests = conversations × turns).
    pub conversations: usize,
    #[serde(default)]
    pub endpoint: Endpoint,
    pub arrival: Arrival,
    pub prompt: PromptSpec,
    pub output: OutputSpec,
    #[serde(default)]
    pub sampling: SamplingSpec,
    #[serde(default)]
    pub slow_readers: SlowReaders,
    #[serde(default)]
    pub cancel: CancelSpec,
    #[serde(default)]
    pub slo: Slo,
    /// Requests sent right after this many ms into the run, one-off, on top
    /// of the arrival process (e.g. a long prompt arriving mid-run).
    #[serde(default)]
    pub injections: Vec<Injection>,
    /// Request kinds mixed in (choices, grammars, unstreamed, bad inputs);
    /// absent: every request is a plain streamed one.
    #[serde(default)]
    pub mix: MixSpec,
}

fn d_seed() -> u64 {
    1
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    #[default]
    Chat,
    Completions,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "lowercase", tag = "mode")]
pub enum Arrival {
    /// C clients, each sending its next conversation when the last ends;
    /// one whose request was refused for load (429, 503) first waits
    /// `backoff_ms` (as a client honouring `Retry-After` would). With
    /// `[arrival.burst]`, more clients join for a while, periodically.
    Closed {
        concurrency: usize,
        #[serde(default, skip_serializing_if = "is_zero")]
        backoff_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        burst: Option<Burst>,
    },
    /// Fixed rate, conversations per second.
    Rate { rate: f64 },
    /// Poisson arrivals at this mean rate.
    Poisson { rate: f64 },
}

/// Bursts past capacity: every `every_s` seconds (the first at half of
/// it), for `for_s` seconds, `concurrency` clients in all instead of the base.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    pub concurrency: usize,
    pub every_s: f64,
    pub for_s: f64,
}

impl Burst {
    /// Seconds from `t` until a burst is on (0: one is on now).
    pub fn wait_s(&self, t: f64) -> f64 {
        let first = self.every_s / 2.0;
        if t < first {
            return first - t;
        }
        let into = (t - first) % self.every_s;
        if into < self.for_s {
            0.0
        } else {
            self.every_s - into
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LengthBand {
    pub weight: f64,
    pub min_tokens: usize,
    pub max_tokens: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PromptSpec {
    /// Weighted bands of (approximate) prompt lengths, in tokens.
    pub mix: Vec<LengthBand>,
    /// A shared system prompt of this many tokens (0: none).
    #[serde(default)]
    pub shared_prefix_tokens: usize,
    /// How many distinct shared prefixes conversations draw from.
    #[serde(default = "d_one")]
    pub shared_prefixes: usize,
    /// Turns per conversation, replayed in order with the real replies.
    #[serde(default = "d_one")]
    pub turns: usize,
    /// What each turn asks (`continue`: free text; `edit`, `summarize`,
    /// `code`: input-grounded tasks, `grounded.rs`).
    #[serde(default)]
    pub task: crate::grounded::Task,
}

fn d_one() -> usize {
    1
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    pub min_tokens: u32,
    pub max_tokens: u32,
    /// Ask the server to ignore end-of-sequence (`ignore_eos`, understood by
    /// Steward, llama-server and vLLM) so every request yields max_tokens.
    #[serde(default)]
    pub ignore_eos: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SamplingSpec {
    #[serde(default)]
    pub temperature: f64,
    #[serde(default = "d_top_p")]
    pub top_p: f64,
    /// Send a per-request seed derived from the workload seed.
    #[serde(default)]
    pub seeded: bool,
}

fn d_top_p() -> f64 {
    1.0
}

impl Default for SamplingSpec {
    fn default() -> Self {
        SamplingSpec {
            temperature: 0.0,
            top_p: 1.0,
            seeded: false,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SlowReaders {
    /// Fraction of requests that read slowly.
    #[serde(default)]
    pub fraction: f64,
    /// Their read rate.
    #[serde(default = "d_rate")]
    pub bytes_per_s: f64,
}

fn d_rate() -> f64 {
    200.0
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum CancelAt {
    /// Hang up `after_ms` after sending, before any text arrived.
    #[default]
    Prefill,
    /// Hang up after `after_chunks` text chunks.
    Decode,
    /// Each cancelled request picks prefill or decode at random (seeded).
    Mixed,
    /// Hang up `after_ms` after sending unless text has arrived, even while
    /// the response head is still pending (queued for a slot, prefilling).
    Queued,
    /// Each cancelled request picks queued, prefill or decode (seeded).
    Any,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CancelSpec {
    #[serde(default)]
    pub fraction: f64,
    #[serde(default)]
    pub at: CancelAt,
    #[serde(default = "d_after_ms")]
    pub after_ms: u64,
    #[serde(default = "d_after_chunks")]
    pub after_chunks: usize,
    /// When set, each cancel's `after_ms` is drawn from
    /// [after_ms, after_ms_max] (seeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ms_max: Option<u64>,
}

fn d_after_ms() -> u64 {
    100
}
fn d_after_chunks() -> usize {
    4
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// p99 time to first text, ms.
    pub ttft_ms: f64,
    /// p99 gap between text chunks, ms.
    pub itl_ms: f64,
}

impl Default for Slo {
    fn default() -> Self {
        Slo {
            ttft_ms: 2000.0,
            itl_ms: 300.0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Injection {
    pub at_ms: u64,
    pub prompt_tokens: usize,
    pub max_tokens: u32,
    #[serde(default)]
    pub label: String,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("cannot read workload file {0}: {1}")]
    Read(String, String),
    #[error("workload file is not valid TOML for a workload: {0}")]
    Parse(String),
    #[error("invalid workload: {0}")]
    Invalid(String),
    #[error("unknown built-in workload `{0}` (try: {1})")]
    Unknown(String, String),
}

impl Workload {
    pub fn parse(text: &str) -> Result<Self, WorkloadError> {
        let w: Workload = toml::from_str(text).map_err(|e| WorkloadError::Parse(e.to_string()))?;
        w.validate()?;
        Ok(w)
    }

    /// A built-in name or a path to a TOML file.
    pub fn load(name_or_path: &str) -> Result<Self, WorkloadError> {
        if let Some(text) = builtin(name_or_path) {
            return Self::parse(text);
        }
        if std::path::Path::new(name_or_path).exists() {
            let text = std::fs::read_to_string(name_or_path)
                .map_err(|e| WorkloadError::Read(name_or_path.into(), e.to_string()))?;
            return Self::parse(&text);
        }
        Err(WorkloadError::Unknown(
            name_or_path.into(),
            BUILTINS.iter().map(|b| b.0).collect::<Vec<_>>().join(", "),
        ))
    }

    pub fn validate(&self) -> Result<(), WorkloadError> {
        let bad = |m: String| Err(WorkloadError::Invalid(m));
        if self.conversations == 0 && self.injections.is_empty() {
            return bad("conversations must be at least 1".into());
        }
        match self.arrival {
            Arrival::Closed { concurrency: 0, .. } => {
                return bad("arrival.concurrency must be at least 1".into())
            }
            Arrival::Closed {
                concurrency,
                burst: Some(b),
                ..
            } if b.concurrency < concurrency
                || !(b.for_s > 0.0 && b.for_s < b.every_s && b.every_s.is_finite()) =>
            {
                return bad(
                    "arrival.burst: concurrency >= arrival.concurrency and 0 < for_s < every_s required"
                        .into(),
                )
            }
            Arrival::Rate { rate } | Arrival::Poisson { rate }
                if !(rate > 0.0 && rate.is_finite()) =>
            {
                return bad(format!("arrival.rate must be > 0; got {rate}"))
            }
            _ => {}
        }
        if self.prompt.mix.is_empty() {
            return bad("prompt.mix needs at least one band".into());
        }
        for (i, b) in self.prompt.mix.iter().enumerate() {
            if b.weight <= 0.0 || b.min_tokens == 0 || b.min_tokens > b.max_tokens {
                return bad(format!(
                    "prompt.mix[{i}]: weight > 0 and 1 <= min_tokens <= max_tokens required"
                ));
            }
        }
        if self.prompt.turns == 0 || self.prompt.shared_prefixes == 0 {
            return bad("prompt.turns and prompt.shared_prefixes must be at least 1".into());
        }
        if self.output.min_tokens == 0 || self.output.min_tokens > self.output.max_tokens {
            return bad("output: 1 <= min_tokens <= max_tokens required".into());
        }
        for (name, f) in [
            ("slow_readers.fraction", self.slow_readers.fraction),
            ("cancel.fraction", self.cancel.fraction),
        ] {
            if !(0.0..=1.0).contains(&f) {
                return bad(format!("{name} must be within [0, 1]; got {f}"));
            }
        }
        if self.slow_readers.fraction > 0.0 && self.slow_readers.bytes_per_s <= 0.0 {
            return bad("slow_readers.bytes_per_s must be > 0".into());
        }
        if !(0.0..=2.0).contains(&self.sampling.temperature) {
            return bad("sampling.temperature must be within [0, 2]".into());
        }
        if self
            .cancel
            .after_ms_max
            .is_some_and(|m| m < self.cancel.after_ms)
        {
            return bad("cancel.after_ms_max must be at least cancel.after_ms".into());
        }
        self.mix.validate().map_err(WorkloadError::Invalid)
    }

    pub fn with_concurrency(&self, c: usize) -> Self {
        let mut w = self.clone();
        w.arrival = match self.arrival {
            Arrival::Closed {
                backoff_ms, burst, ..
            } => Arrival::Closed {
                concurrency: c,
                backoff_ms,
                burst: burst.map(|b| Burst {
                    concurrency: b.concurrency.max(c),
                    ..b
                }),
            },
            _ => Arrival::Closed {
                concurrency: c,
                backoff_ms: 0,
                burst: None,
            },
        };
        w
    }
}

/// One planned turn.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TurnPlan {
    pub user_text: String,
    pub max_tokens: u32,
    pub slow_bytes_per_s: Option<f64>,
    pub cancel: Option<(CancelAt, u64, usize)>,
    pub seed: Option<u64>,
    /// What the `[mix]` table made of this request (default: plain).
    #[serde(skip_serializing_if = "Kind::is_plain")]
    pub kind: Kind,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ConversationPlan {
    pub index: usize,
    pub label: String,
    pub system: Option<String>,
    pub turns: Vec<TurnPlan>,
    /// For injections: fixed send time.
    pub at_ms: Option<u64>,
}

/// Small deterministic RNG (splitmix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0xD1B5_4A32_D192_ED03)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as usize
    }
}

const WORDS: &[&str] = &[
    "the", "river", "stone", "light", "house", "garden", "window", "story", "music", "winter",
    "summer", "market", "table", "paper", "letter", "mountain", "forest", "city", "train",
    "bridge", "morning", "evening", "friend", "teacher", "doctor", "engine", "cloud", "rain",
    "sun", "moon", "water", "bread", "coffee", "street", "school", "garden", "ocean", "island",
    "road", "field", "horse", "bird", "tree", "flower", "voice", "dream", "night", "day", "and",
    "of", "a", "to", "in", "with", "on", "for", "from", "under", "over", "near", "old", "new",
    "quiet", "bright", "small", "large", "warm", "cold", "green", "blue", "red", "slow",
];

/// About `n` tokens of plain English-like text (one common word ≈ one token).
pub fn text_of(rng: &mut Rng, n: usize) -> String {
    let mut s = String::with_capacity(n * 7);
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[(rng.next_u64() % WORDS.len() as u64) as usize]);
    }
    s
}

impl Workload {
    pub fn plan(&self) -> Vec<ConversationPlan> {
        let mut rng = Rng::new(self.seed);
        let prefixes: Vec<String> = (0..self.prompt.shared_prefixes)
            .map(|_| text_of(&mut rng, self.prompt.shared_prefix_tokens))
            .collect();
        let total_w: f64 = self.prompt.mix.iter().map(|b| b.weight).sum();
        // The mix draws from a stream of its own: a workload without `[mix]`
        // plans exactly what it planned before the table existed.
        let mut mix_rng = Rng::new(self.seed ^ 0x6D69_7800);
        let mut out = Vec::new();
        for index in 0..self.conversations {
            let system = (self.prompt.shared_prefix_tokens > 0)
                .then(|| prefixes[index % prefixes.len()].clone());
            let mut turns = Vec::new();
            for _ in 0..self.prompt.turns {
                let mut pick = rng.f64() * total_w;
                let mut band = &self.prompt.mix[0];
                for b in &self.prompt.mix {
                    if pick < b.weight {
                        band = b;
                        break;
                    }
                    pick -= b.weight;
                }
                let n = rng.range(band.min_tokens, band.max_tokens);
                let max_tokens = rng.range(
                    self.output.min_tokens as usize,
                    self.output.max_tokens as usize,
                ) as u32;
                let slow = (rng.f64() < self.slow_readers.fraction)
                    .then_some(self.slow_readers.bytes_per_s);
                let at = match self.cancel.at {
                    CancelAt::Mixed if rng.f64() < 0.5 => CancelAt::Prefill,
                    CancelAt::Mixed => CancelAt::Decode,
                    other => other,
                };
                let cancel = (rng.f64() < self.cancel.fraction).then_some((
                    at,
                    self.cancel.after_ms,
                    self.cancel.after_chunks,
                ));
                let seed = self.sampling.seeded.then(|| rng.next_u64() >> 1);
                let mut turn = TurnPlan {
                    user_text: crate::grounded::user_text(self.prompt.task, &mut rng, n),
                    max_tokens,
                    slow_bytes_per_s: slow,
                    cancel,
                    seed,
                    kind: Kind::default(),
                };
                self.mix_turn(&mut mix_rng, &mut turn);
                turns.push(turn);
            }
            out.push(ConversationPlan {
                index,
                label: String::new(),
                system,
                turns,
                at_ms: None,
            });
        }
        for (k, inj) in self.injections.iter().enumerate() {
            out.push(ConversationPlan {
                index: self.conversations + k,
                label: if inj.label.is_empty() {
                    format!("injection-{k}")
                } else {
                    inj.label.clone()
                },
                system: None,
                turns: vec![TurnPlan {
                    user_text: format!("Summarize: {}", text_of(&mut rng, inj.prompt_tokens)),
                    max_tokens: inj.max_tokens,
                    slow_bytes_per_s: None,
                    cancel: None,
                    seed: None,
                    kind: Kind::default(),
                }],
                at_ms: Some(inj.at_ms),
            });
        }
        out
    }

    /// Apply the `[mix]` table (and the cancel options it refines) to one
    /// planned turn. Always the same draws per turn, whatever they decide.
    fn mix_turn(&self, r: &mut Rng, t: &mut TurnPlan) {
        let m = &self.mix;
        let (bad, bad_pick) = (r.f64() < m.bad_fraction, r.next_u64());
        let (n, grammar, schema) = (
            r.f64() < m.n_fraction,
            r.f64() < m.grammar_fraction,
            r.f64(),
        );
        let unstreamed = r.f64() < m.unstreamed_fraction;
        let (at_pick, ms_pick) = (r.next_u64() % 3, r.next_u64());
        if let Some((at, ms, _)) = &mut t.cancel {
            if *at == CancelAt::Any {
                *at = [CancelAt::Queued, CancelAt::Prefill, CancelAt::Decode][at_pick as usize];
            }
            if let Some(max) = self.cancel.after_ms_max {
                *ms += ms_pick % (max - *ms + 1);
            }
        }
        if bad {
            let kinds = if m.bad_kinds.is_empty() {
                BadKind::ALL.to_vec()
            } else {
                m.bad_kinds.clone()
            };
            t.kind.bad = Some(kinds[(bad_pick % kinds.len() as u64) as usize]);
            (t.cancel, t.slow_bytes_per_s) = (None, None);
            return;
        }
        if n {
            t.kind.n = Some(m.n);
        }
        if grammar {
            t.kind.grammar = Some(if schema < 0.5 {
                GrammarKind::JsonObject
            } else {
                GrammarKind::JsonSchema
            });
        }
        if unstreamed {
            t.kind.unstreamed = true;
            (t.cancel, t.slow_bytes_per_s) = (None, None);
        }
    }
}

pub const BUILTINS: &[(&str, &str)] = &[
    ("chat-mixed", include_str!("../workloads/chat-mixed.toml")),
    (
        "long-prefill-interference",
        include_str!("../workloads/long-prefill-interference.toml"),
    ),
    (
        "shared-prefix",
        include_str!("../workloads/shared-prefix.toml"),
    ),
    (
        "cancel-storm",
        include_str!("../workloads/cancel-storm.toml"),
    ),
    (
        "slow-readers",
        include_str!("../workloads/slow-readers.toml"),
    ),
    ("uniform-128", include_str!("../workloads/uniform-128.toml")),
    ("cancel-16", include_str!("../workloads/cancel-16.toml")),
    (
        "long-prefill-16k",
        include_str!("../workloads/long-prefill-16k.toml"),
    ),
    (
        "shared-system-1500",
        include_str!("../workloads/shared-system-1500.toml"),
    ),
    ("soak", include_str!("../workloads/soak.toml")),
    (
        "edit-grounded",
        include_str!("../workloads/edit-grounded.toml"),
    ),
    (
        "code-grounded",
        include_str!("../workloads/code-grounded.toml"),
    ),
    (
        "summarize-grounded",
        include_str!("../workloads/summarize-grounded.toml"),
    ),
];

pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|b| b.0 == name).map(|b| b.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_plans_deterministically() {
        for (name, _) in BUILTINS {
            let w = Workload::load(name).unwrap();
            assert_eq!(&w.name, name);
            assert_eq!(w.plan(), w.plan());
            assert!(!w.plan().is_empty());
        }
    }

    #[test]
    fn validation_errors_say_what_is_wrong() {
        let base = builtin("chat-mixed").unwrap();
        let cases = [
            (
                base.replace("concurrency = 4", "concurrency = 0"),
                "concurrency",
            ),
            (base.replace("min_tokens = 16", "min_tokens = 0"), "output"),
            (format!("{base}\nbogus = 1\n"), "bogus"),
            ("name = 3".to_string(), "TOML"),
        ];
        for (text, want) in cases {
            let e = Workload::parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{e} should mention {want}");
        }
        assert!(matches!(
            Workload::load("no-such-workload"),
            Err(WorkloadError::Unknown(..))
        ));
    }

    #[test]
    fn plan_respects_fractions_and_lengths() {
        let mut w = Workload::load("chat-mixed").unwrap();
        w.conversations = 200;
        w.cancel.fraction = 0.5;
        let p = w.plan();
        let cancels = p.iter().filter(|c| c.turns[0].cancel.is_some()).count();
        assert!((60..140).contains(&cancels), "{cancels}");
        for c in &p {
            for t in &c.turns {
                assert!(t.max_tokens >= w.output.min_tokens && t.max_tokens <= w.output.max_tokens);
            }
        }
    }

    #[test]
    fn bursts_come_and_go() {
        let b = Burst {
            concurrency: 30,
            every_s: 30.0,
            for_s: 4.0,
        };
        assert_eq!(b.wait_s(0.0), 15.0);
        assert_eq!(b.wait_s(14.0), 1.0);
        assert_eq!(b.wait_s(16.0), 0.0);
        assert_eq!(b.wait_s(20.0), 25.0);
        assert_eq!(b.wait_s(46.0), 0.0);
        assert_eq!(b.wait_s(49.5), 25.5);
        let soak = Workload::load("soak").unwrap();
        let w = soak.with_concurrency(40);
        assert!(matches!(
            w.arrival,
            Arrival::Closed {
                concurrency: 40,
                burst: Some(Burst {
                    concurrency: 40,
                    ..
                }),
                ..
            }
        ));
        let bad = builtin("soak").unwrap().replace("for_s = 4", "for_s = 40");
        assert!(Workload::parse(&bad)
            .unwrap_err()
            .to_string()
            .contains("burst"));
    }

    #[test]
    fn mix_draws_its_own_stream_and_keeps_its_fractions() {
        let base = Workload::load("chat-mixed").unwrap();
        let mut w = base.clone();
        w.conversations = 24;
        w.mix = MixSpec {
            n_fraction: 0.3,
            grammar_fraction: 0.3,
            bad_fraction: 0.2,
            ..Default::default()
        };
        // The main stream is untouched: same prompts and lengths as without the mix.
        for (a, b) in w.plan().iter().zip(base.plan()) {
            assert_eq!(a.turns[0].user_text, b.turns[0].user_text);
            assert_eq!(a.turns[0].max_tokens, b.turns[0].max_tokens);
            assert!(b.turns[0].kind.is_plain());
        }
        let soak = Workload::load("soak").unwrap();
        assert_eq!(soak.conversations, 10_000);
        let p = soak.plan();
        let frac = |f: &dyn Fn(&TurnPlan) -> bool| {
            p.iter().filter(|c| f(&c.turns[0])).count() as f64 / p.len() as f64
        };
        let near = |x: f64, want: f64| (x - want).abs() < 0.02;
        let bad = frac(&|t| t.kind.bad.is_some());
        assert!(near(bad, 0.10), "{bad}");
        // Bad inputs are nothing else; the other kinds are drawn among the rest.
        assert!(near(frac(&|t| t.kind.n == Some(3)), 0.05 * 0.9));
        assert!(near(frac(&|t| t.kind.grammar.is_some()), 0.10 * 0.9));
        assert!(near(frac(&|t| t.cancel.is_some()), 0.10 * 0.9 * 0.95));
        for k in BadKind::ALL {
            assert!(frac(&|t| t.kind.bad == Some(k)) > 0.005, "{k:?}");
        }
        for at in [CancelAt::Queued, CancelAt::Prefill, CancelAt::Decode] {
            assert!(
                frac(&|t| t.cancel.is_some_and(|c| c.0 == at)) > 0.02,
                "{at:?}"
            );
        }
        for c in &p {
            let t = &c.turns[0];
            if let Some((_, ms, _)) = t.cancel {
                assert!((50..=600).contains(&ms));
            }
            if t.kind.bad.is_some() || t.kind.unstreamed {
                assert!(t.cancel.is_none() && t.slow_bytes_per_s.is_none());
            }
        }
        assert_eq!(p, soak.plan());
        let bad_mix = builtin("soak").unwrap().replace("n = 3", "n = 1");
        assert!(Workload::parse(&bad_mix)
            .unwrap_err()
            .to_string()
            .contains("mix.n"));
    }
}
