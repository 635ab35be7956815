//! Who may call the API: API keys (`--api-key`, `--api-key-file`, the file
//! reloaded on SIGHUP), per-key rate limits and token quotas, and TLS
//! certificates (also reloaded on SIGHUP). The `auth` middleware
//! (`app/auth.rs`) asks `Keys::check`.
//!
//! A key file holds one key per line:
//! `KEY [name=NAME] [rpm=N] [tpm=N] [tpd=N] [priority=N] [weight=W]`; blank
//! lines and lines starting with `#` are skipped. `name` labels the key in
//! logs, metrics and the scheduler's fair share (never the secret); `rpm`
//! overrides `--rate-limit-rpm` for that key (0: unlimited); `tpm` and
//! `tpd` cap the tokens (prompt + completion) the key may spend per minute
//! and per day (0 or absent: unlimited; `quota.rs`); `priority` is the
//! key's ceiling: its requests run at `max(asked, N)` (lower runs first,
//! default 0), a request that asks none at N; `weight` is its fair-share
//! weight (> 0, default 1). `--api-key`'s key is named `api-key` and has
//! the defaults. Keys are looked up by their SHA-256, so the lookup's time
//! does not depend on how much of a wrong key matches.
//!
//! A reload that fails (unreadable file, bad line) keeps the keys in force
//! and is logged and counted; a key kept across a reload keeps its rate
//! bucket and its token windows (the tokens in use stay in use under new
//! limits), so a SIGHUP does not reset anyone's limit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::quota::TokenQuota;
use super::usage::{KeyCounters, KeyUsage, Quota};

/// Most keys a file may hold, and its largest size.
pub const MAX_KEYS: usize = 100_000;
pub const MAX_KEY_FILE_BYTES: u64 = 16 << 20;

/// `steward serve` flags for access (flattened into `serve`'s).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AccessArgs {
    /// A file of API keys, one per line: `KEY [name=NAME] [rpm=N] [tpm=N]
    /// [tpd=N] [priority=N] [weight=W]` (`#` comments; docs/LIMITS.md).
    /// Reloaded on SIGHUP. With --api-key as well, both are accepted.
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// Requests per minute each key may make (a token bucket holding one
    /// minute's worth); a key's own `rpm=` overrides it. 0: unlimited.
    #[arg(long, default_value_t = 0)]
    pub rate_limit_rpm: u32,
    /// Also serve /metrics, /health and /ready, without a key, on this
    /// port of the same host (for scrapers and load balancers). Plain
    /// HTTP even with --tls-cert: keep it on a private network.
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Serve HTTPS: the certificate chain (PEM). Reloaded on SIGHUP.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Leave out the web chat (`/`) and the dashboard (`/dashboard`).
    #[arg(long)]
    pub no_web: bool,
}

type Hash = [u8; 32];

fn hash(secret: &str) -> Hash {
    Sha256::digest(secret.as_bytes()).into()
}

/// One minute's worth of requests, refilled continuously.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

#[derive(Debug)]
struct Key {
    name: Arc<str>,
    rpm: u32,
    priority: i32,
    weight: f64,
    bucket: Arc<Mutex<Bucket>>,
    quota: Arc<TokenQuota>,
    counters: Arc<KeyCounters>,
}

impl Key {
    /// What a request admitted under this key carries (no rate taken yet).
    fn admitted(&self) -> Admitted {
        Admitted {
            name: self.name.clone(),
            rate: None,
            rate_reset_s: 0.0,
            priority: self.priority,
            weight: self.weight,
            quota: self.quota.limited().then(|| self.quota.clone()),
            counters: self.counters.clone(),
        }
    }
}

/// One line of a key file, read.
#[derive(Debug, Clone, PartialEq)]
struct KeySpec {
    secret: String,
    name: String,
    rpm: u32,
    tpm: u64,
    tpd: u64,
    priority: i32,
    weight: f64,
}

impl KeySpec {
    fn new(secret: String, name: String, rpm: u32) -> Self {
        KeySpec {
            secret,
            name,
            rpm,
            tpm: 0,
            tpd: 0,
            priority: 0,
            weight: 1.0,
        }
    }
}

/// The keys in force and how each is limited.
pub struct Keys {
    file: Option<PathBuf>,
    fixed: Option<String>,
    default_rpm: u32,
    table: RwLock<HashMap<Hash, Key>>,
    /// Per-key-name counters (`/metrics`).
    pub usage: KeyUsage,
    pub reloads: AtomicU64,
    pub reload_failures: AtomicU64,
    pub refused: AtomicU64,
    pub limited: AtomicU64,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets.
        f.debug_struct("Keys")
            .field("file", &self.file)
            .field("keys", &self.len())
            .field("default_rpm", &self.default_rpm)
            .finish()
    }
}

/// A request that passed: its key's name, rate state (for headers), rank
/// and token quota. The `auth` middleware puts it in the request's
/// extensions for the handlers.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub name: Arc<str>,
    /// (limit per minute, requests left now) when the key is limited.
    pub rate: Option<(u32, u32)>,
    /// Seconds until the requests bucket is full again.
    pub rate_reset_s: f64,
    /// The key's priority ceiling (`priority=`; lower runs first).
    pub priority: i32,
    /// The key's fair-share weight (`weight=`).
    pub weight: f64,
    /// The key's token windows, when it has any (`tpm=`, `tpd=`).
    pub quota: Option<Arc<TokenQuota>>,
    pub counters: Arc<KeyCounters>,
}

impl Admitted {
    /// The priority a request asking `asked` runs at under this key.
    pub fn priority_for(&self, asked: Option<i32>) -> i32 {
        effective_priority(asked, Some(self.priority))
    }
}

/// A request's priority: what it asked (0 when it asked none), but never
/// better (lower) than its key's ceiling; without keys, what it asked.
pub fn effective_priority(asked: Option<i32>, ceiling: Option<i32>) -> i32 {
    match ceiling {
        Some(c) => asked.unwrap_or(c).max(c),
        None => asked.unwrap_or(0),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// No key or a wrong one.
    Unauthorized,
    /// The key's bucket is empty: seconds until one request is allowed.
    Limited { retry_after: u32, rpm: u32 },
}

/// One line of a key file.
fn parse_line(line: &str, n: usize, default_rpm: u32) -> Result<Option<KeySpec>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let secret = parts.next().unwrap_or_default().to_string();
    if secret.len() < 8 {
        return Err(format!("line {n}: a key must have at least 8 characters"));
    }
    let mut k = KeySpec::new(secret, format!("key{n}"), default_rpm);
    fn num<T: std::str::FromStr>(n: usize, field: &str, v: &str, what: &str) -> Result<T, String> {
        v.parse()
            .map_err(|_| format!("line {n}: {field} must be {what}, not {v:?}"))
    }
    const WHOLE: &str = "a whole number";
    for p in parts {
        match p.split_once('=') {
            Some(("name", v)) if !v.is_empty() && v.len() <= 64 => k.name = v.to_string(),
            Some(("rpm", v)) => k.rpm = num(n, "rpm", v, WHOLE)?,
            Some(("tpm", v)) => k.tpm = num(n, "tpm", v, WHOLE)?,
            Some(("tpd", v)) => k.tpd = num(n, "tpd", v, WHOLE)?,
            Some(("priority", v)) => {
                k.priority = num(n, "priority", v, "a whole number (i32; lower runs first)")?
            }
            Some(("weight", v)) => {
                k.weight = num(n, "weight", v, "a number above 0")?;
                if !(k.weight.is_finite() && k.weight > 0.0) {
                    return Err(format!("line {n}: weight must be a number above 0, not {v:?}"));
                }
            }
            _ => {
                return Err(format!(
                    "line {n}: unknown field {p:?} (name=NAME, rpm=N, tpm=N, tpd=N, priority=N, weight=W)"
                ))
            }
        }
    }
    Ok(Some(k))
}

impl Keys {
    /// Keys from `--api-key` and `--api-key-file` (read now: a bad file is
    /// a startup error).
    pub fn new(
        fixed: Option<String>,
        file: Option<PathBuf>,
        default_rpm: u32,
    ) -> anyhow::Result<Arc<Self>> {
        let keys = Keys {
            file,
            fixed: fixed.filter(|k| !k.is_empty()),
            default_rpm,
            table: RwLock::new(HashMap::new()),
            usage: KeyUsage::default(),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            limited: AtomicU64::new(0),
        };
        let table = keys.read_table()?;
        *keys.table.write().unwrap_or_else(|e| e.into_inner()) = table;
        Ok(Arc::new(keys))
    }

    /// No keys at all: every request passes (a server without auth).
    pub fn open() -> Arc<Self> {
        Self::new(None, None, 0).expect("no file to read")
    }

    /// Whether requests need a key.
    pub fn enabled(&self) -> bool {
        self.fixed.is_some() || self.file.is_some()
    }

    pub fn len(&self) -> usize {
        self.table.read().map_or(0, |t| t.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read_table(&self) -> anyhow::Result<HashMap<Hash, Key>> {
        let mut entries: Vec<KeySpec> = Vec::new();
        if let Some(k) = &self.fixed {
            entries.push(KeySpec::new(k.clone(), "api-key".into(), self.default_rpm));
        }
        if let Some(path) = &self.file {
            entries.extend(read_file(path, self.default_rpm)?);
        }
        let old = self.table.read().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let mut table = HashMap::with_capacity(entries.len());
        for k in entries {
            let h = hash(&k.secret);
            // A key kept across a reload keeps its bucket and windows.
            let kept = old.get(&h);
            let bucket = kept.map(|o| o.bucket.clone()).unwrap_or_else(|| {
                Arc::new(Mutex::new(Bucket {
                    tokens: f64::from(k.rpm),
                    at: now,
                }))
            });
            let quota = match kept {
                Some(o) => {
                    o.quota.set_limits(k.tpm, k.tpd, now);
                    o.quota.clone()
                }
                None => Arc::new(TokenQuota::new(k.tpm, k.tpd, now)),
            };
            let key = Key {
                counters: self.usage.slot(&k.name),
                name: Arc::from(k.name),
                rpm: k.rpm,
                priority: k.priority,
                weight: k.weight,
                bucket,
                quota,
            };
            table.insert(h, key);
        }
        Ok(table)
    }

    /// Re-read the key file (SIGHUP). On failure the keys in force stay.
    pub fn reload(&self) -> anyhow::Result<usize> {
        match self.read_table() {
            Ok(t) => {
                let n = t.len();
                *self.table.write().unwrap_or_else(|e| e.into_inner()) = t;
                self.reloads.fetch_add(1, Ordering::Relaxed);
                Ok(n)
            }
            Err(e) => {
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// The key named `name`, admitted without a rate check (a batch line:
    /// its key was checked when the batch was created; its token quotas
    /// still apply at the line's admission).
    pub fn admitted_by_name(&self, name: &str) -> Option<Admitted> {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        let key = t.values().find(|k| &*k.name == name)?;
        Some(key.admitted())
    }

    /// Check a request's key (`None`: none sent) and take one request from
    /// its bucket.
    pub fn check(&self, given: Option<&str>) -> Result<Option<Admitted>, Refused> {
        if !self.enabled() {
            return Ok(None);
        }
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        let Some(key) = given.and_then(|g| t.get(&hash(g))) else {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Refused::Unauthorized);
        };
        let mut a = key.admitted();
        if key.rpm == 0 {
            key.counters.request();
            return Ok(Some(a));
        }
        let rpm = f64::from(key.rpm);
        let mut b = key.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rpm / 60.0).min(rpm);
        b.at = now;
        if b.tokens < 1.0 {
            self.limited.fetch_add(1, Ordering::Relaxed);
            key.counters.limited(Quota::Rpm);
            let wait = ((1.0 - b.tokens) * 60.0 / rpm).ceil() as u32;
            return Err(Refused::Limited {
                retry_after: wait.max(1),
                rpm: key.rpm,
            });
        }
        b.tokens -= 1.0;
        key.counters.request();
        a.rate = Some((key.rpm, b.tokens.floor() as u32));
        a.rate_reset_s = (rpm - b.tokens) * 60.0 / rpm;
        Ok(Some(a))
    }

    /// Prometheus text for the key table.
    pub fn metrics(&self, o: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            o,
            "# HELP steward_api_keys API keys in force\n# TYPE steward_api_keys gauge\nsteward_api_keys {}",
            self.len()
        );
        let _ = writeln!(
            o,
            "# HELP steward_auth_refused_total Requests refused for a missing or wrong key\n# TYPE steward_auth_refused_total counter\nsteward_auth_refused_total {}",
            self.refused.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP steward_rate_limited_total Requests refused by a key's rate limit\n# TYPE steward_rate_limited_total counter\nsteward_rate_limited_total {}",
            self.limited.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP steward_key_reloads_total Key file reloads (SIGHUP) by result\n# TYPE steward_key_reloads_total counter\nsteward_key_reloads_total{{result=\"ok\"}} {}\nsteward_key_reloads_total{{result=\"failed\"}} {}",
            self.reloads.load(Ordering::Relaxed),
            self.reload_failures.load(Ordering::Relaxed)
        );
    }
}

fn read_file(path: &Path, default_rpm: u32) -> anyhow::Result<Vec<KeySpec>> {
    use anyhow::Context;
    let size = std::fs::metadata(path)
        .with_context(|| format!("--api-key-file {}", path.display()))?
        .len();
    anyhow::ensure!(
        size <= MAX_KEY_FILE_BYTES,
        "--api-key-file {}: {size} bytes, more than {MAX_KEY_FILE_BYTES}",
        path.display()
    );
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--api-key-file {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let parsed = parse_line(line, i + 1, default_rpm)
            .map_err(|e| anyhow::anyhow!("--api-key-file {}: {e}", path.display()))?;
        if let Some(k) = parsed {
            out.push(k);
        }
    }
    anyhow::ensure!(
        out.len() <= MAX_KEYS,
        "--api-key-file {}: more than {MAX_KEYS} keys",
        path.display()
    );
    Ok(out)
}

/// The TLS certificate and key in force, re-read on SIGHUP.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    config: RwLock<Arc<rustls::ServerConfig>>,
}

impl Tls {
    pub fn new(cert: PathBuf, key: PathBuf) -> anyhow::Result<Arc<Self>> {
        let config = server_config(&cert, &key)?;
        Ok(Arc::new(Tls {
            cert,
            key,
            config: RwLock::new(config),
        }))
    }

    /// The acceptor for a new connection (the config in force now).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let c = self
            .config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        tokio_rustls::TlsAcceptor::from(c)
    }

    /// Re-read the certificate and key; on failure the old pair stays.
    pub fn reload(&self) -> anyhow::Result<()> {
        let c = server_config(&self.cert, &self.key)?;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = c;
        Ok(())
    }
}

fn server_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use anyhow::Context;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("--tls-cert {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("--tls-cert {}: not a PEM certificate chain", cert.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "--tls-cert {}: no certificate in it",
        cert.display()
    );
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("--tls-key {}: no PEM private key read", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("--tls-cert and --tls-key do not make a usable pair")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// On every SIGHUP: reload the key file and the TLS pair (each kept as it
/// was when its reload fails; logged).
pub async fn reload_on_sighup(keys: Arc<Keys>, tls: Option<Arc<Tls>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; keys and certificates will not reload");
        return;
    };
    while hup.recv().await.is_some() {
        if keys.file.is_some() {
            match keys.reload() {
                Ok(n) => tracing::info!(keys = n, "SIGHUP: key file reloaded"),
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "SIGHUP: key file not reloaded; the keys in force stay")
                }
            }
        }
        if let Some(t) = &tls {
            match t.reload() {
                Ok(()) => tracing::info!("SIGHUP: TLS certificate reloaded"),
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "SIGHUP: TLS certificate not reloaded; the one in force stays")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn file_keys_names_limits_and_reload() {
        let f = file("# keys\nalpha-key-1 name=alice\n\nbeta-key-22 rpm=2 name=bob\n");
        let k = Keys::new(Some("fixed-key-9".into()), Some(f.path().into()), 0).unwrap();
        assert_eq!(k.len(), 3);
        assert_eq!(
            &*k.check(Some("alpha-key-1")).unwrap().unwrap().name,
            "alice"
        );
        assert_eq!(
            &*k.check(Some("fixed-key-9")).unwrap().unwrap().name,
            "api-key"
        );
        assert_eq!(
            k.check(Some("alpha-key-2")).unwrap_err(),
            Refused::Unauthorized
        );
        assert_eq!(k.check(None).unwrap_err(), Refused::Unauthorized);
        // bob: 2 a minute, then refused with a wait of ~30 s.
        assert_eq!(
            k.check(Some("beta-key-22")).unwrap().unwrap().rate,
            Some((2, 1))
        );
        assert_eq!(
            k.check(Some("beta-key-22")).unwrap().unwrap().rate,
            Some((2, 0))
        );
        match k.check(Some("beta-key-22")).unwrap_err() {
            Refused::Limited { retry_after, rpm } => {
                assert_eq!(rpm, 2);
                assert!((1..=30).contains(&retry_after), "{retry_after}");
            }
            e => panic!("{e:?}"),
        }
        // Reload: alice goes, carol comes; bob's empty bucket stays empty.
        std::fs::write(f.path(), "beta-key-22 rpm=2\ncarol-key-3\n").unwrap();
        assert_eq!(k.reload().unwrap(), 3);
        assert_eq!(
            k.check(Some("alpha-key-1")).unwrap_err(),
            Refused::Unauthorized
        );
        assert!(k.check(Some("carol-key-3")).unwrap().is_some());
        assert!(matches!(
            k.check(Some("beta-key-22")),
            Err(Refused::Limited { .. })
        ));
        // A bad file keeps the keys in force.
        std::fs::write(f.path(), "short\n").unwrap();
        assert!(k.reload().is_err());
        assert!(k.check(Some("carol-key-3")).unwrap().is_some());
        assert_eq!(k.reload_failures.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn bad_lines_are_errors_naming_the_line() {
        let f = file("good-key-123\ngood-key-456 color=blue\n");
        let e = Keys::new(None, Some(f.path().into()), 0).err().unwrap();
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        let f = file("good-key-123 rpm=lots\n");
        assert!(Keys::new(None, Some(f.path().into()), 0).is_err());
        assert!(Keys::new(None, Some("/nonexistent/keys".into()), 0).is_err());
        // An empty file: auth is on and nothing passes (fail closed).
        let f = file("# nobody yet\n");
        let k = Keys::new(None, Some(f.path().into()), 0).unwrap();
        assert!(k.enabled());
        assert_eq!(
            k.check(Some("anything-at-all")).unwrap_err(),
            Refused::Unauthorized
        );
    }

    #[test]
    fn quotas_priorities_and_weights() {
        let f = file("alpha-key-1 name=alice tpm=1000 tpd=50000 priority=5 weight=2.5\nbeta-key-22 name=bob priority=-3\n");
        let k = Keys::new(None, Some(f.path().into()), 0).unwrap();
        let a = k.check(Some("alpha-key-1")).unwrap().unwrap();
        assert_eq!((a.priority, a.weight), (5, 2.5));
        // A key's ceiling: asked 0 runs at 5, asked 7 at 7, none at 5.
        assert_eq!(a.priority_for(Some(0)), 5);
        assert_eq!(a.priority_for(Some(7)), 7);
        assert_eq!(a.priority_for(None), 5);
        let now = Instant::now();
        let q = a.quota.clone().unwrap();
        assert_eq!(q.headers(now).unwrap().limit, 1000);
        q.reserve(400, now).unwrap();
        let b = k.check(Some("beta-key-22")).unwrap().unwrap();
        assert!(b.quota.is_none());
        assert_eq!((b.priority, b.weight), (-3, 1.0));
        assert_eq!(b.priority_for(Some(-10)), -3);
        assert_eq!(b.priority_for(Some(i32::MAX)), i32::MAX);
        // Without keys, a request runs at what it asks.
        assert_eq!(effective_priority(Some(-10), None), -10);
        assert_eq!(effective_priority(None, None), 0);
        // A reload keeps alice's windows (400 in use under a new limit).
        std::fs::write(f.path(), "alpha-key-1 name=alice tpm=2000\n").unwrap();
        k.reload().unwrap();
        let a = k.check(Some("alpha-key-1")).unwrap().unwrap();
        let h = a.quota.unwrap().headers(Instant::now()).unwrap();
        assert_eq!(h.limit, 2000);
        assert!((1600..1610).contains(&h.remaining), "{h:?}");
        assert_eq!(a.priority, 0);
        // Counted by name.
        assert_eq!(a.counters.requests.load(Ordering::Relaxed), 2);
        let names: Vec<String> = k
            .usage
            .snapshot()
            .iter()
            .map(|(n, _)| n.to_string())
            .collect();
        assert_eq!(names, ["alice", "bob"]);
    }

    #[test]
    fn bad_quota_fields_name_the_line() {
        for (text, want) in [
            ("good-key-123\ngood-key-456 tpm=-1\n", "line 2: tpm"),
            ("good-key-123 tpd=1.5\n", "line 1: tpd"),
            ("good-key-123 priority=high\n", "line 1: priority"),
            ("good-key-123 priority=3000000000\n", "line 1: priority"),
            ("good-key-123 weight=0\n", "line 1: weight"),
            ("good-key-123 weight=-2\n", "line 1: weight"),
            ("good-key-123 weight=inf\n", "line 1: weight"),
            ("good-key-123 weight=NaN\n", "line 1: weight"),
        ] {
            let f = file(text);
            let e = Keys::new(None, Some(f.path().into()), 0).err().unwrap();
            assert!(format!("{e:#}").contains(want), "{text:?}: {e:#}");
        }
    }

    #[test]
    fn open_server_needs_no_key() {
        let k = Keys::open();
        assert!(!k.enabled());
        assert!(k.check(None).unwrap().is_none());
    }
}
