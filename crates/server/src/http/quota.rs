//! Token quotas per API key: `tpm=N` (tokens per minute) and `tpd=N`
//! (tokens per day) in the key file.
//!
//! Each window is a token bucket holding one window's worth, refilled
//! continuously at `limit / window` (the rpm bucket's rule, and what
//! OpenAI describes): a key may spend a whole window's tokens at once, then
//! gets them back evenly over the window. A request reserves its bound
//! (prompt tokens + `max_tokens` × `n`) in every window the key has before
//! it is submitted; past either window's level it is refused (429,
//! `Exceeded`), and a bound larger than a whole window's limit is refused
//! as one that could never run. The reservation is a [`Charge`]: when it
//! drops (the request finished, failed, was cancelled or its client left)
//! it settles to the tokens used (the prompt once admitted, plus the
//! completion tokens produced), giving the rest back.
//!
//! Pure but for the clock, which every call takes as an argument.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::usage::{KeyCounters, Quota as Which};

/// One window's bucket.
#[derive(Debug, Clone)]
struct Bucket {
    which: Which,
    limit: u64,
    /// Tokens available now (negative: a settlement went past a lowered
    /// limit; the key waits until refill covers it).
    level: f64,
    at: Instant,
}

impl Bucket {
    fn window_s(&self) -> f64 {
        match self.which {
            Which::Tpd => 86_400.0,
            Which::Tpm | Which::Rpm => 60.0,
        }
    }

    /// Tokens refilled per second.
    fn rate(&self) -> f64 {
        self.limit as f64 / self.window_s()
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + dt * self.rate()).min(self.limit as f64);
        self.at = self.at.max(now);
    }

    /// Whole tokens in use (not yet refilled).
    fn used(&self) -> u64 {
        (self.limit as f64 - self.level).max(0.0).ceil() as u64
    }

    fn remaining(&self) -> u64 {
        self.level.max(0.0).floor() as u64
    }

    /// Seconds until the bucket holds `want` tokens.
    fn wait_s(&self, want: f64) -> f64 {
        (want - self.level).max(0.0) / self.rate()
    }
}

/// A request refused by a token quota.
#[derive(Debug, Clone, PartialEq)]
pub struct Exceeded {
    pub which: Which,
    pub limit: u64,
    /// Tokens in use in that window.
    pub used: u64,
    /// The request's bound.
    pub need: u64,
    /// Seconds until the request would fit; `None`: never (its bound is
    /// more than the window's whole limit).
    pub retry_after: Option<u32>,
}

impl Exceeded {
    /// The 429's message, naming the quota and the key.
    pub fn message(&self, key: &str) -> String {
        let (what, field) = match self.which {
            Which::Tpd => ("tokens per day", "tpd"),
            _ => ("tokens per minute", "tpm"),
        };
        let head = format!(
            "Rate limit reached: {what} ({field}={}) for key '{key}'",
            self.limit
        );
        match self.retry_after {
            Some(s) => format!(
                "{head}: {} used, this request needs up to {} (prompt + max_tokens × n). Retry in {s} s.",
                self.used, self.need
            ),
            None => format!(
                "{head}: this request needs up to {} tokens (prompt + max_tokens × n), more than the whole quota; it can never run. Lower `max_tokens` or shorten the prompt.",
                self.need
            ),
        }
    }
}

/// `x-ratelimit-{limit,remaining,reset}-tokens`: the minute window when
/// the key has one, else the day's.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenHeaders {
    pub limit: u64,
    pub remaining: u64,
    /// Until the window is full again, in OpenAI's format (`6m0s`).
    pub reset: String,
}

/// One key's token windows (shared by the key's entries across reloads).
#[derive(Debug)]
pub struct TokenQuota {
    buckets: Mutex<Vec<Bucket>>,
}

impl TokenQuota {
    /// `tpm`, `tpd`: 0 is unlimited.
    pub fn new(tpm: u64, tpd: u64, now: Instant) -> Self {
        let q = TokenQuota {
            buckets: Mutex::new(Vec::new()),
        };
        q.set_limits(tpm, tpd, now);
        q
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Bucket>> {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// New limits (a reload): a window kept keeps the tokens in use, a new
    /// one starts full, a window set to 0 goes.
    pub fn set_limits(&self, tpm: u64, tpd: u64, now: Instant) {
        let mut b = self.lock();
        let mut next = Vec::new();
        for (which, limit) in [(Which::Tpm, tpm), (Which::Tpd, tpd)] {
            if limit == 0 {
                continue;
            }
            let used = b.iter_mut().find(|x| x.which == which).map_or(0.0, |x| {
                x.refill(now);
                x.limit as f64 - x.level
            });
            next.push(Bucket {
                which,
                limit,
                level: limit as f64 - used,
                at: now,
            });
        }
        *b = next;
    }

    /// Whether any window is limited.
    pub fn limited(&self) -> bool {
        !self.lock().is_empty()
    }

    /// Take `need` tokens from every window, or say which one refuses.
    pub fn reserve(&self, need: u64, now: Instant) -> Result<(), Exceeded> {
        let mut b = self.lock();
        for x in b.iter_mut() {
            x.refill(now);
        }
        let refuse = |x: &Bucket, retry_after| Exceeded {
            which: x.which,
            limit: x.limit,
            used: x.used(),
            need,
            retry_after,
        };
        if let Some(x) = b.iter().find(|x| need > x.limit) {
            return Err(refuse(x, None));
        }
        let want = need as f64;
        if let Some(x) = b.iter().find(|x| want > x.level) {
            let wait = b.iter().map(|y| y.wait_s(want)).fold(0.0, f64::max);
            return Err(refuse(x, Some((wait.ceil() as u32).max(1))));
        }
        for x in b.iter_mut() {
            x.level -= want;
        }
        Ok(())
    }

    /// A reservation of `reserved` tokens of which `used` were spent.
    pub fn settle(&self, reserved: u64, used: u64, now: Instant) {
        let mut b = self.lock();
        for x in b.iter_mut() {
            x.refill(now);
            x.level = (x.level + reserved as f64 - used as f64).min(x.limit as f64);
        }
    }

    pub fn headers(&self, now: Instant) -> Option<TokenHeaders> {
        let mut b = self.lock();
        let x = b.first_mut()?;
        x.refill(now);
        Some(TokenHeaders {
            limit: x.limit,
            remaining: x.remaining(),
            reset: duration_text(x.wait_s(x.limit as f64)),
        })
    }
}

/// A duration as OpenAI's headers write it (Go's form): `20ms`, `1.5s`,
/// `6m0s`, `1h2m3s`; milliseconds at most.
pub fn duration_text(secs: f64) -> String {
    let ms = (secs.max(0.0) * 1e3).round() as u64;
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m, s_ms) = (ms / 3_600_000, ms / 60_000 % 60, ms % 60_000);
    let s = if s_ms % 1000 == 0 {
        format!("{}s", s_ms / 1000)
    } else {
        let t = format!("{}.{:03}", s_ms / 1000, s_ms % 1000);
        format!("{}s", t.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => s,
        (0, m) => format!("{m}m{s}"),
        (h, m) => format!("{h}h{m}m{s}"),
    }
}

/// A request's reservation and what it has used so far; settles on drop
/// (and counts the tokens into the key's usage counters).
#[derive(Debug)]
pub struct Charge {
    quota: Option<Arc<TokenQuota>>,
    counters: Option<Arc<KeyCounters>>,
    reserved: u64,
    prompt: AtomicU64,
    completion: AtomicU64,
}

impl Charge {
    /// Reserve `need` tokens (nothing to reserve without a quota); a
    /// refusal is counted in the key's counters.
    pub fn reserve(
        quota: Option<Arc<TokenQuota>>,
        counters: Option<Arc<KeyCounters>>,
        need: u64,
        now: Instant,
    ) -> Result<Charge, Exceeded> {
        let quota = quota.filter(|q| q.limited());
        if let Some(q) = &quota {
            if let Err(e) = q.reserve(need, now) {
                if let Some(c) = &counters {
                    c.limited(e.which);
                }
                return Err(e);
            }
        }
        Ok(Charge {
            quota,
            counters,
            reserved: need,
            prompt: AtomicU64::new(0),
            completion: AtomicU64::new(0),
        })
    }

    /// The prompt is being computed: its tokens count.
    pub fn admitted(&self, prompt_tokens: u32) {
        self.prompt
            .store(u64::from(prompt_tokens), Ordering::Relaxed);
    }

    /// A choice produced `tokens` more completion tokens.
    pub fn generated(&self, tokens: u32) {
        self.completion
            .fetch_add(u64::from(tokens), Ordering::Relaxed);
    }

    /// A choice finished with `completion` tokens, `seen` of which were
    /// already counted through `generated`.
    pub fn finished(&self, seen: u32, completion: u32) {
        self.generated(completion.saturating_sub(seen));
    }

    /// (prompt, completion) tokens used so far.
    pub fn used(&self) -> (u64, u64) {
        (
            self.prompt.load(Ordering::Relaxed),
            self.completion.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let (p, c) = self.used();
        if let Some(q) = &self.quota {
            q.settle(self.reserved, p + c, Instant::now());
        }
        if let Some(k) = &self.counters {
            k.tokens(p, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(t0: Instant, s: f64) -> Instant {
        t0 + Duration::from_secs_f64(s)
    }

    #[test]
    fn reserve_and_settle_exactly() {
        let t0 = Instant::now();
        let q = TokenQuota::new(1000, 0, t0);
        let h = |s| q.headers(at(t0, s)).unwrap();
        assert_eq!(h(0.0).remaining, 1000);
        q.reserve(300, t0).unwrap();
        assert_eq!(h(0.0).remaining, 700);
        // 120 of the 300 used: 180 come back at once.
        q.settle(300, 120, t0);
        assert_eq!(h(0.0).remaining, 880);
        assert_eq!(h(0.0).reset, "7.2s");
        // 900 used: a request of 300 waits for 200 to refill (12 s).
        q.reserve(780, t0).unwrap();
        let e = q.reserve(300, t0).unwrap_err();
        assert_eq!(
            e,
            Exceeded {
                which: Which::Tpm,
                limit: 1000,
                used: 900,
                need: 300,
                retry_after: Some(12)
            }
        );
        let m = e.message("alice");
        assert!(
            m.contains("tokens per minute (tpm=1000) for key 'alice': 900 used, this request needs up to 300"),
            "{m}"
        );
        // Refilled continuously: 12 s later it fits; a full window later
        // the bucket is full and holds no more than one window.
        assert!(q.reserve(300, at(t0, 11.0)).is_err());
        q.reserve(300, at(t0, 13.0)).unwrap();
        assert_eq!(h(13.0).remaining, 16);
        assert_eq!(h(72.0).remaining, 1000);
        assert_eq!(h(500.0).remaining, 1000);
        // A settlement never fills past the limit.
        q.settle(300, 0, at(t0, 500.0));
        assert_eq!(h(500.0).remaining, 1000);
    }

    #[test]
    fn day_window_and_both_windows() {
        let t0 = Instant::now();
        let q = TokenQuota::new(100, 1000, t0);
        // Headers follow the minute window.
        assert_eq!(q.headers(t0).unwrap().limit, 100);
        // More than the minute's whole limit: never.
        let e = q.reserve(101, t0).unwrap_err();
        assert_eq!((e.which, e.retry_after), (Which::Tpm, None));
        assert!(
            e.message("k").contains("can never run"),
            "{}",
            e.message("k")
        );
        // Ten minutes of 100: the day is spent (minutes refill, the day
        // barely does).
        for i in 0..10 {
            q.reserve(100, at(t0, 60.0 * f64::from(i))).unwrap();
        }
        let e = q.reserve(50, at(t0, 600.0)).unwrap_err();
        assert_eq!((e.which, e.used), (Which::Tpd, 994));
        // The 43 tokens missing refill in 62 minutes.
        assert!(matches!(e.retry_after, Some(3720..=3721)), "{e:?}");
        let d = TokenQuota::new(0, 1000, t0);
        d.reserve(400, t0).unwrap();
        let h = d.headers(at(t0, 10.0)).unwrap();
        assert_eq!((h.limit, h.remaining), (1000, 600));
        assert_eq!(h.reset, "9h35m50s");
        assert!(!TokenQuota::new(0, 0, t0).limited());
    }

    #[test]
    fn reload_keeps_tokens_in_use() {
        let t0 = Instant::now();
        let q = TokenQuota::new(1000, 0, t0);
        q.reserve(600, t0).unwrap();
        q.set_limits(2000, 500, t0);
        let h = q.headers(t0).unwrap();
        assert_eq!((h.limit, h.remaining), (2000, 1400));
        // The new day window starts full.
        q.reserve(500, t0).unwrap();
        assert!(q.reserve(1, t0).is_err());
        q.set_limits(0, 0, t0);
        assert!(!q.limited());
        assert!(q.headers(t0).is_none());
    }

    #[test]
    fn a_charge_settles_on_drop_and_counts() {
        let t0 = Instant::now();
        let q = Arc::new(TokenQuota::new(0, 1000, t0));
        let k = Arc::new(KeyCounters::default());
        let c = Charge::reserve(Some(q.clone()), Some(k.clone()), 300, t0).unwrap();
        assert_eq!(q.headers(t0).unwrap().remaining, 700);
        c.admitted(20);
        c.generated(3);
        c.generated(0);
        c.finished(3, 5);
        assert_eq!(c.used(), (20, 5));
        drop(c);
        // Whatever refilled since is under one token.
        assert_eq!(q.headers(t0).unwrap().remaining, 975);
        assert_eq!(k.prompt_tokens.load(Ordering::Relaxed), 20);
        assert_eq!(k.completion_tokens.load(Ordering::Relaxed), 5);
        // Failed before any compute: all of it comes back.
        drop(Charge::reserve(Some(q.clone()), Some(k.clone()), 500, t0).unwrap());
        assert_eq!(q.headers(t0).unwrap().remaining, 975);
        // Refused: counted, nothing taken.
        assert!(Charge::reserve(Some(q.clone()), Some(k.clone()), 976, t0).is_err());
        assert_eq!(k.limited_count(Which::Tpd), 1);
        // No quota: counts only.
        drop(Charge::reserve(None, Some(k.clone()), 1 << 40, t0).unwrap());
    }

    #[test]
    fn durations_as_openai_writes_them() {
        for (s, want) in [
            (0.0, "0s"),
            (0.02, "20ms"),
            (1.5, "1.5s"),
            (1.0, "1s"),
            (360.0, "6m0s"),
            (61.25, "1m1.25s"),
            (3723.0, "1h2m3s"),
            (86_400.0, "24h0m0s"),
        ] {
            assert_eq!(duration_text(s), want, "{s}");
        }
    }
}
