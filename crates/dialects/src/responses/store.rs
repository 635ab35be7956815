//! Stored responses (`store: true`), for `previous_response_id` and
//! `GET`/`DELETE /v1/responses/{id}`: bounded in entries, in bytes (each
//! entry's JSON size) and in age.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One stored response and its conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The Response object as answered.
    pub response: Value,
    /// Every input item (the previous response's conversation, then this
    /// request's input) followed by this response's output items.
    pub conversation: Vec<Value>,
}

impl Stored {
    /// Its size as counted against the store's byte cap: the JSON text of
    /// the response and of each conversation item.
    pub fn json_bytes(&self) -> usize {
        json_size(&self.response) + self.conversation.iter().map(json_size).sum::<usize>()
    }
}

fn json_size(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// A response not stored: larger than the whole store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFull {
    pub bytes: usize,
    pub capacity_bytes: usize,
}

impl fmt::Display for StoreFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a response of {} bytes does not fit a store of {} bytes",
            self.bytes, self.capacity_bytes
        )
    }
}

impl std::error::Error for StoreFull {}

struct Entry {
    seq: u64,
    at: Instant,
    bytes: usize,
    stored: Stored,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Insertion order: sequence number → ID.
    order: BTreeMap<u64, String>,
    next: u64,
    bytes: usize,
    evicted: u64,
}

impl Inner {
    fn remove(&mut self, id: &str) -> Option<Entry> {
        let e = self.entries.remove(id)?;
        self.order.remove(&e.seq);
        self.bytes -= e.bytes;
        Some(e)
    }
}

/// The store: thread-safe, oldest entries evicted first to make room,
/// entries older than the TTL absent (and evicted before any other).
pub struct Store {
    max_entries: usize,
    max_bytes: usize,
    ttl: Duration,
    inner: Mutex<Inner>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("max_entries", &self.max_entries)
            .field("max_bytes", &self.max_bytes)
            .field("ttl", &self.ttl)
            .field("len", &self.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

fn expired(at: Instant, now: Instant, ttl: Duration) -> bool {
    now.checked_duration_since(at).is_some_and(|age| age >= ttl)
}

impl Store {
    pub fn new(max_entries: usize, max_bytes: usize, ttl: Duration) -> Self {
        Store {
            max_entries,
            max_bytes,
            ttl,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Store `stored` as `id` (replacing an entry of that ID), now.
    pub fn put(&self, id: &str, stored: Stored) -> Result<(), StoreFull> {
        self.put_at(id, stored, Instant::now())
    }

    /// Store `stored` as `id` at time `now`: expired entries are evicted,
    /// then the oldest until it fits. An entry larger than the byte cap (or
    /// any entry, in a store of no entries) is refused.
    pub fn put_at(&self, id: &str, stored: Stored, now: Instant) -> Result<(), StoreFull> {
        self.put_evicting(id, stored, now).map(drop)
    }

    /// [`Store::put_at`], returning the IDs it evicted (expired, or the
    /// oldest to make room; not the entry it replaced): a copy kept
    /// elsewhere (the server's state directory) drops them too.
    pub fn put_evicting(
        &self,
        id: &str,
        stored: Stored,
        now: Instant,
    ) -> Result<Vec<String>, StoreFull> {
        let bytes = stored.json_bytes();
        if bytes > self.max_bytes || self.max_entries == 0 {
            return Err(StoreFull {
                bytes,
                capacity_bytes: self.max_bytes,
            });
        }
        let mut g = self.lock();
        g.remove(id);
        let old: Vec<String> = g
            .entries
            .iter()
            .filter(|(_, e)| expired(e.at, now, self.ttl))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &old {
            g.remove(id);
            g.evicted += 1;
        }
        let mut evicted = old;
        while g.entries.len() >= self.max_entries || g.bytes + bytes > self.max_bytes {
            let Some(oldest) = g.order.values().next().cloned() else {
                break;
            };
            g.remove(&oldest);
            g.evicted += 1;
            evicted.push(oldest);
        }
        let seq = g.next;
        g.next += 1;
        g.order.insert(seq, id.to_string());
        g.bytes += bytes;
        g.entries.insert(
            id.to_string(),
            Entry {
                seq,
                at: now,
                bytes,
                stored,
            },
        );
        Ok(evicted)
    }

    /// The entry stored as `id`, unless it expired.
    pub fn get(&self, id: &str) -> Option<Stored> {
        self.get_at(id, Instant::now())
    }

    /// The entry stored as `id` at time `now` (an expired one is evicted).
    pub fn get_at(&self, id: &str, now: Instant) -> Option<Stored> {
        let mut g = self.lock();
        let e = g.entries.get(id)?;
        if expired(e.at, now, self.ttl) {
            g.remove(id);
            g.evicted += 1;
            return None;
        }
        Some(e.stored.clone())
    }

    /// Delete `id`; whether it was there (an expired entry was not).
    pub fn delete(&self, id: &str) -> bool {
        self.delete_at(id, Instant::now())
    }

    pub fn delete_at(&self, id: &str, now: Instant) -> bool {
        let mut g = self.lock();
        match g.remove(id) {
            Some(e) if expired(e.at, now, self.ttl) => {
                g.evicted += 1;
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Bytes the entries hold (expired ones not yet evicted included).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Entries held (expired ones not yet evicted included).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries evicted to make room or for their age, since the start
    /// (not those deleted or replaced).
    pub fn evicted_total(&self) -> u64 {
        self.lock().evicted
    }

    pub fn capacity_bytes(&self) -> usize {
        self.max_bytes
    }

    pub fn capacity_entries(&self) -> usize {
        self.max_entries
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}
