//! The disk tier's files and the one thread that writes them.
//!
//! An entry is one file, `<hash>.kv`, in the model's directory:
//!
//! ```text
//! magic "STWKV\0\0\0" | version u32 | model u64 | adapters u64 | media u64
//! | lo u64 | n_tokens u64 | data_len u64 | data_crc u32 | head_crc u32
//! | tokens (n_tokens × i32) | data (data_len bytes: llama.cpp's per-sequence state)
//! ```
//!
//! Little-endian. `head_crc` (CRC-32) covers every header field before it
//! and the tokens; `data_crc` covers the data. The start-up scan reads the
//! header and the tokens only (bounded: an index, not a full read) and
//! checks `head_crc` and the file's length; a restore reads the data and
//! checks `data_crc` before the runtime sees a byte. A file that fails
//! either is deleted with one log line.
//!
//! Every write goes to `<hash>.kv.tmp`, is fsynced, renamed, and the
//! directory fsynced: a kill leaves the old file, the new one, or a `.tmp`
//! that the next scan deletes. The thread (`DiskIo`) takes jobs from a
//! bounded queue (a full queue drops the job: the caller counts it) and
//! answers on a bounded channel the owner polls; the owner never waits on
//! it except at shutdown.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use crate::owner::kv::key::PrefixKey;
use crate::runtime::TokenId;

const MAGIC: &[u8; 8] = b"STWKV\0\0\0";
const VERSION: u32 = 1;
/// Bytes before the tokens.
const HEAD: usize = 8 + 4 + 8 * 6 + 4 + 4;
/// Most files one scan reads (a directory past it keeps the rest unread).
const SCAN_MAX: usize = 65_536;

/// What the index keeps of an entry: everything but the data.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub key: PrefixKey,
    pub lo: usize,
    pub tokens: Vec<TokenId>,
    pub data_len: u64,
    data_crc: u32,
}

impl Header {
    #[cfg(test)]
    pub fn new(key: PrefixKey, lo: usize, tokens: Vec<TokenId>, data: &[u8]) -> Self {
        Header {
            key,
            lo,
            tokens,
            data_len: data.len() as u64,
            data_crc: crc32fast::hash(data),
        }
    }

    /// A header whose data checksum is left to the disk thread (`seal`):
    /// the owner never reads an entry's bytes to write them.
    pub fn unsealed(key: PrefixKey, lo: usize, tokens: Vec<TokenId>, data_len: u64) -> Self {
        Header {
            key,
            lo,
            tokens,
            data_len,
            data_crc: 0,
        }
    }

    /// Set the data checksum (on the disk thread, before the write).
    fn seal(&mut self, data: &[u8]) {
        self.data_crc = crc32fast::hash(data);
    }

    /// The file's bytes before the data.
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEAD + self.tokens.len() * 4);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        for v in [
            self.key.model,
            self.key.adapters,
            self.key.media,
            self.lo as u64,
            self.tokens.len() as u64,
            self.data_len,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.data_crc.to_le_bytes());
        let crc_at = b.len();
        b.extend_from_slice(&[0; 4]);
        for t in &self.tokens {
            b.extend_from_slice(&t.to_le_bytes());
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&b[..crc_at]);
        h.update(&b[crc_at + 4..]);
        b[crc_at..crc_at + 4].copy_from_slice(&h.finalize().to_le_bytes());
        b
    }

    /// The header and tokens at the start of `r`, checked.
    fn decode(r: &mut impl Read, file_len: u64) -> Result<Header, String> {
        let mut head = [0u8; HEAD];
        r.read_exact(&mut head)
            .map_err(|e| format!("short header: {e}"))?;
        if &head[..8] != MAGIC {
            return Err("not an entry (magic)".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap_or_default());
        let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap_or_default());
        if u32_at(8) != VERSION {
            return Err(format!(
                "format version {} (this server reads {VERSION})",
                u32_at(8)
            ));
        }
        let f = |k: usize| u64_at(12 + 8 * k);
        let (n_tokens, data_len) = (f(4), f(5));
        let want = HEAD as u64 + n_tokens.saturating_mul(4) + data_len;
        if n_tokens > (1 << 24) || want != file_len {
            return Err(format!("length {file_len}, the header says {want}"));
        }
        let mut tok = vec![0u8; n_tokens as usize * 4];
        r.read_exact(&mut tok)
            .map_err(|e| format!("short tokens: {e}"))?;
        let mut h = crc32fast::Hasher::new();
        h.update(&head[..HEAD - 4]);
        h.update(&tok);
        if h.finalize() != u32_at(HEAD - 4) {
            return Err("header checksum mismatch".into());
        }
        Ok(Header {
            key: PrefixKey {
                model: f(0),
                adapters: f(1),
                media: f(2),
            },
            lo: f(3) as usize,
            tokens: tok
                .chunks_exact(4)
                .map(|c| TokenId::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            data_len,
            data_crc: u32_at(HEAD - 8),
        })
    }

    /// The file's name: a hash of the key and the tokens.
    pub fn file_name(&self) -> String {
        let mut h = crc32fast::Hasher::new();
        let mut h2 = crc32fast::Hasher::new_with_initial(0x5354_574b);
        for v in [self.key.model, self.key.adapters, self.key.media] {
            h.update(&v.to_le_bytes());
            h2.update(&v.to_le_bytes());
        }
        for t in &self.tokens {
            h.update(&t.to_le_bytes());
            h2.update(&t.to_le_bytes());
        }
        format!(
            "{:08x}{:08x}-{}.kv",
            h.finalize(),
            h2.finalize(),
            self.tokens.len()
        )
    }
}

/// Write `head` and `data` to `path` atomically: a temporary name,
/// fsynced, renamed over, the directory fsynced.
pub(crate) fn write_entry(path: &Path, head: &Header, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("kv.tmp");
    let r = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&head.encode())?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r
}

/// An entry's header, read and checked (not its data).
pub(crate) fn read_header(path: &Path) -> Result<Header, String> {
    let f = fs::File::open(path).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    Header::decode(&mut std::io::BufReader::new(f), len)
}

/// An entry's data, checked against its header's checksum (and the header
/// read again: the file may have been replaced since the scan).
pub(crate) fn read_data(path: &Path, want: &Header) -> Result<Vec<u8>, String> {
    let mut f = fs::File::open(path).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    let head = Header::decode(&mut f, len)?;
    if head.key != want.key || head.tokens != want.tokens || head.data_len != want.data_len {
        return Err("the file no longer holds this entry".into());
    }
    let mut data = vec![0u8; head.data_len as usize];
    f.read_exact(&mut data)
        .map_err(|e| format!("short data: {e}"))?;
    if crc32fast::hash(&data) != head.data_crc {
        return Err("data checksum mismatch".into());
    }
    Ok(data)
}

/// Work for the disk thread.
pub(crate) enum Job {
    Write {
        path: PathBuf,
        head: Header,
        data: Vec<u8>,
    },
    Delete(PathBuf),
    /// Mark an entry used (its modification time orders evictions after a
    /// restart).
    Touch(PathBuf),
}

/// What the disk thread reports.
pub(crate) enum Done {
    /// An entry found by the start-up scan: its header, file, size, and
    /// modification time (ms since the epoch).
    Found(Header, PathBuf, u64, u64),
    /// The scan has finished: files deleted as torn or corrupt.
    Scanned { bad: usize },
    /// A write finished: bytes, seconds; `ok` false on an error (logged).
    Written {
        head: Header,
        path: PathBuf,
        ok: bool,
        bytes: u64,
        secs: f64,
    },
}

/// The disk thread's two ends, as the owner holds them.
pub(crate) struct DiskIo {
    jobs: Option<mpsc::SyncSender<Job>>,
    pub done: mpsc::Receiver<Done>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DiskIo {
    /// Start the thread on `dir` (created), which scans it first.
    /// `queue`: jobs held at once (each holds one entry's bytes).
    pub fn start(dir: PathBuf, queue: usize) -> std::io::Result<Self> {
        fs::create_dir_all(&dir)?;
        let (jobs, rx) = mpsc::sync_channel::<Job>(queue.max(1));
        let (tx, done) = mpsc::sync_channel::<Done>(4096);
        let thread = std::thread::Builder::new()
            .name("steward-disk".into())
            .spawn(move || {
                lower_priority();
                scan(&dir, &tx);
                for job in rx {
                    run(job, &tx);
                }
            })?;
        Ok(DiskIo {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }

    /// Queue a job; false (dropped) when the queue is full or the thread gone.
    pub fn try_send(&self, job: Job) -> bool {
        self.jobs.as_ref().is_some_and(|j| j.try_send(job).is_ok())
    }

    /// Queue a job, waiting for room (shutdown only).
    pub fn send(&self, job: Job) -> bool {
        self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok())
    }

    /// Close the queue and wait for the thread to finish what it holds;
    /// its reports stay readable in `done`.
    pub fn finish(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            // Drain reports meanwhile: a full report channel would block it.
            while !t.is_finished() {
                match self.done.recv_timeout(std::time::Duration::from_millis(20)) {
                    Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            let _ = t.join();
        }
    }
}

impl Drop for DiskIo {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Read every entry's header; delete leftovers of interrupted writes and
/// entries that fail their checks (one line each).
fn scan(dir: &Path, tx: &mpsc::SyncSender<Done>) {
    let mut bad = 0;
    let Ok(rd) = fs::read_dir(dir) else {
        let _ = tx.send(Done::Scanned { bad });
        return;
    };
    for ent in rd.flatten().take(SCAN_MAX) {
        let path = ent.path();
        let name = ent.file_name().to_string_lossy().into_owned();
        if name.ends_with(".kv.tmp") {
            let _ = fs::remove_file(&path);
            continue;
        }
        if !name.ends_with(".kv") {
            continue;
        }
        match read_header(&path) {
            Ok(h) => {
                let meta = ent.metadata().ok();
                let size = meta.as_ref().map_or(0, |m| m.len());
                let mtime = meta
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_millis() as u64);
                if tx.send(Done::Found(h, path, size, mtime)).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "disk cache: a torn or corrupt entry, deleted");
                let _ = fs::remove_file(&path);
                bad += 1;
            }
        }
    }
    let _ = tx.send(Done::Scanned { bad });
}

/// The disk thread runs only on CPU time nothing else wants (Linux's
/// `SCHED_IDLE`): on a machine whose cores the step's threads fill, a
/// write's checksum and copy would otherwise take a core from a step
/// (measured on two cores, 4 streams beside a 58 MB write: the longest
/// gap 281 ms before, 121 ms after, 92 ms with no write). A slow write
/// only holds the queue, whose overflow is dropped.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let p = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscall on the calling thread with a valid param.
        let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) };
        if r != 0 {
            tracing::debug!("disk cache: SCHED_IDLE refused; the disk thread keeps its priority");
        }
    }
}

fn run(job: Job, tx: &mpsc::SyncSender<Done>) {
    match job {
        Job::Write {
            path,
            mut head,
            data,
        } => {
            let t = Instant::now();
            head.seal(&data);
            let r = write_entry(&path, &head, &data);
            if let Err(e) = &r {
                tracing::warn!(file = %path.display(), error = %e, "disk cache: a write failed; the entry stays in memory only");
            }
            let bytes = (HEAD + head.tokens.len() * 4) as u64 + data.len() as u64;
            let _ = tx.send(Done::Written {
                head,
                path,
                ok: r.is_ok(),
                bytes,
                secs: t.elapsed().as_secs_f64(),
            });
        }
        Job::Delete(path) => {
            let _ = fs::remove_file(&path);
        }
        Job::Touch(path) => {
            if let Ok(f) = fs::File::options().append(true).open(&path) {
                let _ = f.set_modified(std::time::SystemTime::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("steward-diskfile-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn entry() -> (Header, Vec<u8>) {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let key = PrefixKey {
            model: 11,
            adapters: 0,
            media: 3,
        };
        (Header::new(key, 5, vec![1, 2, -3, 4], &data), data)
    }

    #[test]
    fn an_entry_round_trips_and_a_flipped_byte_is_caught() {
        let d = tmpdir("flip");
        let (h, data) = entry();
        let p = d.join(h.file_name());
        write_entry(&p, &h, &data).unwrap();
        let back = read_header(&p).unwrap();
        assert_eq!((back.key, back.lo, &back.tokens), (h.key, 5, &h.tokens));
        assert_eq!(read_data(&p, &back).unwrap(), data);
        // A byte flipped in the data: the restore refuses it.
        let mut bytes = fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n - 100] ^= 0x40;
        fs::write(&p, &bytes).unwrap();
        assert!(read_header(&p).is_ok(), "the header is intact");
        assert!(read_data(&p, &back).unwrap_err().contains("checksum"));
        // One flipped in a token: the scan refuses it.
        bytes[n - 100] ^= 0x40;
        bytes[HEAD + 5] ^= 1;
        fs::write(&p, &bytes).unwrap();
        assert!(read_header(&p).unwrap_err().contains("checksum"));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn the_scan_drops_torn_files_and_leftovers() {
        let d = tmpdir("scan");
        let (h, data) = entry();
        write_entry(&d.join(h.file_name()), &h, &data).unwrap();
        // A torn write (cut short) and a leftover temporary file.
        let torn = d.join("torn.kv");
        let whole = fs::read(d.join(h.file_name())).unwrap();
        fs::write(&torn, &whole[..whole.len() / 2]).unwrap();
        fs::write(d.join("x.kv.tmp"), b"partial").unwrap();
        let mut io = DiskIo::start(d.clone(), 2).unwrap();
        let mut found = 0;
        let bad = loop {
            match io.done.recv().unwrap() {
                Done::Found(got, ..) => {
                    assert_eq!(got.tokens, h.tokens);
                    found += 1;
                }
                Done::Scanned { bad } => break bad,
                Done::Written { .. } => unreachable!(),
            }
        };
        assert_eq!((found, bad), (1, 1));
        assert!(!torn.exists() && !d.join("x.kv.tmp").exists());
        // A write through the thread reports its bytes.
        let (mut h2, data2) = entry();
        h2.tokens.push(9);
        let p2 = d.join(h2.file_name());
        assert!(io.send(Job::Write {
            path: p2.clone(),
            head: h2,
            data: data2
        }));
        match io.done.recv().unwrap() {
            Done::Written { ok, bytes, .. } => assert!(ok && bytes > 10_000),
            _ => panic!("expected a write report"),
        }
        io.finish();
        assert!(read_header(&p2).is_ok());
        let _ = fs::remove_dir_all(&d);
    }
}
