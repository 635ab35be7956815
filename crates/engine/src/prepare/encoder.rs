//! ① prepare — the media encoder: one thread that owns the projector,
//! behind a bounded queue with a deadline, and a bounded cache of encoded
//! media by hash. Encoding never runs on the execution owner's thread, so
//! decoding streams keep stepping while a picture encodes; what it costs
//! the owner (the cores it shares) shows in the step times the owner
//! measures and sizes its budget by.
//!
//! Invariants: a full queue is an immediate `Busy`; a job whose caller has
//! gone is skipped, and one whose caller leaves mid-encode is stopped
//! within a few graph nodes; the cache never holds more than its byte
//! bound (an item larger than the bound is not cached).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::runtime::mtmd::{EncodeError, Media, Piece, Projector, ProjectorInfo};
use crate::runtime::LoadedModel;

/// One media item of a request: where it came from (for errors), its
/// identity and its pixels or samples.
#[derive(Debug, Clone)]
pub struct MediaInput {
    /// The request part it came from (`messages[0].content[1]`).
    pub label: String,
    /// SHA-256 of the encoded bytes the client sent.
    pub hash: [u8; 32],
    pub media: Media,
}

/// Counters the server publishes (`/metrics`, the ledger).
#[derive(Debug, Default)]
pub struct EncoderCounters {
    pub encodes: AtomicU64,
    pub encode_us: AtomicU64,
    pub cache_hits: AtomicU64,
    /// Jobs skipped or stopped because their caller left.
    pub cancelled: AtomicU64,
    pub failed: AtomicU64,
    /// Bytes the cache holds now.
    pub cache_bytes: AtomicU64,
}

/// Why a media item could not be encoded.
#[derive(Debug, Clone, PartialEq)]
pub enum EncodeFailure {
    Busy(usize),
    Timeout(Duration),
    Failed(String),
    Stopped,
}

type Encoded = Arc<Vec<Piece>>;
type Reply = oneshot::Sender<Result<Encoded, EncodeFailure>>;

struct Job {
    input: MediaInput,
    deadline: Instant,
    reply: Reply,
}

/// Encoded media by hash, least recently used out past `max_bytes`.
struct Cache {
    max_bytes: usize,
    bytes: usize,
    tick: u64,
    map: HashMap<[u8; 32], (Encoded, usize, u64)>,
}

impl Cache {
    fn get(&mut self, h: &[u8; 32]) -> Option<Encoded> {
        self.tick += 1;
        let e = self.map.get_mut(h)?;
        e.2 = self.tick;
        Some(e.0.clone())
    }

    fn put(&mut self, h: [u8; 32], v: Encoded) {
        let size = bytes_of(&v);
        if size > self.max_bytes || self.map.contains_key(&h) {
            return;
        }
        while self.bytes + size > self.max_bytes {
            let Some(old) = self.map.iter().min_by_key(|e| e.1 .2).map(|e| *e.0) else {
                break;
            };
            if let Some((_, b, _)) = self.map.remove(&old) {
                self.bytes -= b;
            }
        }
        self.tick += 1;
        self.bytes += size;
        self.map.insert(h, (v, size, self.tick));
    }
}

/// Bytes an encoded item holds (its embedding rows and tokens).
pub fn bytes_of(pieces: &[Piece]) -> usize {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => t.len() * 4,
            Piece::Embd { embd, .. } => embd.len() * 4,
        })
        .sum()
}

pub struct Encoder {
    jobs: SyncSender<Job>,
    cap: usize,
    deadline: Duration,
    cache: Arc<Mutex<Cache>>,
    pub counters: Arc<EncoderCounters>,
    pub info: ProjectorInfo,
    /// What loading the projector added to the process (RSS, measured).
    pub projector_bytes: u64,
    /// SHA-256 of the projector file (part of the model's identity).
    pub sha256: String,
}

impl Encoder {
    /// Start the encoder thread. It holds `model` (the projector reads
    /// it) and drops the projector first.
    pub fn start(
        projector: Projector,
        model: Arc<LoadedModel>,
        queue: usize,
        cache_bytes: usize,
        deadline: Duration,
        (projector_bytes, sha256): (u64, String),
        cores: Option<Arc<crate::cores::Cores>>,
    ) -> Result<Self, String> {
        let cap = queue.max(1);
        let (tx, rx) = sync_channel::<Job>(cap);
        let info = projector.info.clone();
        let cache = Arc::new(Mutex::new(Cache {
            max_bytes: cache_bytes,
            bytes: 0,
            tick: 0,
            map: HashMap::new(),
        }));
        let counters = Arc::new(EncoderCounters::default());
        let (c, k) = (cache.clone(), counters.clone());
        std::thread::Builder::new()
            .name("steward-encoder".into())
            .spawn(move || {
                let mut projector = projector;
                while let Ok(job) = rx.recv() {
                    run(&mut projector, job, &c, &k, cores.clone());
                }
                drop(projector);
                drop(model);
            })
            .map_err(|e| e.to_string())?;
        Ok(Encoder {
            jobs: tx,
            cap,
            deadline,
            cache,
            counters,
            info,
            projector_bytes,
            sha256,
        })
    }

    /// The item's pieces: from the cache, or encoded on the encoder thread.
    pub async fn encode(&self, input: MediaInput) -> Result<Encoded, EncodeFailure> {
        if let Some(hit) = self.cache.lock().ok().and_then(|mut c| c.get(&input.hash)) {
            self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        let (tx, rx) = oneshot::channel();
        let job = Job {
            input,
            deadline: Instant::now() + self.deadline,
            reply: tx,
        };
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(EncodeFailure::Busy(self.cap)),
            Err(TrySendError::Disconnected(_)) => return Err(EncodeFailure::Stopped),
        }
        match rx.await {
            Ok(Err(EncodeFailure::Timeout(_))) => Err(EncodeFailure::Timeout(self.deadline)),
            Ok(r) => r,
            Err(_) => Err(EncodeFailure::Stopped),
        }
    }

    /// Load the projector named by `config.model.mmproj` against `model`
    /// and start the encoder (`sha256`: the projector file's).
    pub fn load(
        model: &Arc<LoadedModel>,
        config: &crate::config::EngineConfig,
        sha256: String,
        cores: Option<Arc<crate::cores::Cores>>,
    ) -> Result<Option<Self>, crate::runtime::LoadError> {
        use crate::runtime::LoadError;
        let Some(path) = &config.model.mmproj else {
            return Ok(None);
        };
        if model.facts.pooling.is_some() {
            return Err(LoadError::Context(
                "--mmproj: an embedding model takes no projector".into(),
            ));
        }
        let before = crate::admission::memory::rss_bytes().unwrap_or(0);
        let c = &config.prepare;
        let p = Projector::load(
            path,
            model,
            c.encoder_threads,
            config.model.n_gpu_layers > 0,
        )?;
        let bytes = crate::admission::memory::rss_bytes()
            .unwrap_or(0)
            .saturating_sub(before);
        tracing::info!(
            projector = %path.display(),
            vision = p.info.vision,
            audio = p.info.audio,
            bytes,
            "projector loaded"
        );
        let e = Self::start(
            p,
            model.clone(),
            c.encoder_queue,
            c.encoder_cache_bytes,
            c.encoder_timeout,
            (bytes, sha256),
            cores,
        )
        .map_err(LoadError::Context)?;
        Ok(Some(e))
    }

    /// Bytes the encoded-media cache holds now.
    pub fn cache_bytes(&self) -> u64 {
        self.counters.cache_bytes.load(Ordering::Relaxed)
    }
}

/// One job on the encoder thread.
fn run(
    p: &mut Projector,
    job: Job,
    cache: &Mutex<Cache>,
    k: &EncoderCounters,
    cores: Option<Arc<crate::cores::Cores>>,
) {
    if job.reply.is_closed() {
        k.cancelled.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let waited = Instant::now();
    if waited > job.deadline {
        let _ = job.reply.send(Err(EncodeFailure::Timeout(Duration::ZERO)));
        return;
    }
    // Another request may have encoded the same item while this waited.
    if let Some(hit) = cache.lock().ok().and_then(|mut c| c.get(&job.input.hash)) {
        k.cache_hits.fetch_add(1, Ordering::Relaxed);
        let _ = job.reply.send(Ok(hit));
        return;
    }
    let reply = Arc::new(job.reply);
    let watch = reply.clone();
    let t = Instant::now();
    if let Some(c) = &cores {
        c.encode_begin();
    }
    // Mid-encode, the cores go to a waiting step when the slice is over.
    let pause: Box<dyn FnMut(Duration) -> bool + Send> = match cores.clone() {
        Some(c) => Box::new(move |ran| c.encode_yield(ran)),
        None => Box::new(|_| false),
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        p.encode(&job.input.media, Box::new(move || watch.is_closed()), pause)
    }));
    if let Some(c) = &cores {
        c.encode_end();
    }
    let us = t.elapsed().as_micros() as u64;
    let Ok(reply) = Arc::try_unwrap(reply) else {
        return;
    };
    let out = match r {
        Ok(Ok(pieces)) => {
            k.encodes.fetch_add(1, Ordering::Relaxed);
            k.encode_us.fetch_add(us, Ordering::Relaxed);
            tracing::debug!(label = %job.input.label, ms = us as f64 / 1e3, "media encoded");
            let v = Arc::new(pieces);
            if let Ok(mut c) = cache.lock() {
                c.put(job.input.hash, v.clone());
                k.cache_bytes.store(c.bytes as u64, Ordering::Relaxed);
            }
            Ok(v)
        }
        Ok(Err(EncodeError::Cancelled)) => {
            k.cancelled.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Ok(Err(EncodeError::Failed(why))) => {
            k.failed.fetch_add(1, Ordering::Relaxed);
            Err(EncodeFailure::Failed(why))
        }
        Err(p) => {
            k.failed.fetch_add(1, Ordering::Relaxed);
            Err(EncodeFailure::Failed(crate::fatal::panic_text(p.as_ref())))
        }
    };
    let _ = reply.send(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(rows: usize) -> Encoded {
        Arc::new(vec![Piece::Embd {
            n_tokens: rows,
            n_pos: rows,
            non_causal: false,
            embd: vec![0.0; rows],
        }])
    }

    #[test]
    fn the_cache_keeps_within_its_bound_least_recently_used_out() {
        let mut c = Cache {
            max_bytes: 100,
            bytes: 0,
            tick: 0,
            map: HashMap::new(),
        };
        c.put([1; 32], item(10)); // 40 bytes
        c.put([2; 32], item(10));
        assert!(c.get(&[1; 32]).is_some()); // 1 is now the most recent
        c.put([3; 32], item(10)); // 120 > 100: 2 goes
        assert_eq!(c.bytes, 80);
        assert!(c.get(&[2; 32]).is_none());
        assert!(c.get(&[1; 32]).is_some() && c.get(&[3; 32]).is_some());
        c.put([4; 32], item(30)); // larger than the bound: not cached
        assert!(c.get(&[4; 32]).is_none());
        assert_eq!(c.bytes, 80);
    }
}
