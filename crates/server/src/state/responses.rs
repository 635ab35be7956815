//! The Responses store, durable: the bounded in-memory `Store` of
//! `steward_dialects` (the cache, its bounds and eviction order) with a
//! write-through copy in `steward.db`'s `responses` table. Every put is
//! committed before the reply that carries the response goes out (and the
//! entries it evicted are deleted in the same transaction); a delete is
//! deleted there too. At start-up the rows are read back newest first
//! within the same bounds (entries, bytes, age), the rest deleted. Without
//! a state directory it is the in-memory store alone.
//!
//! The copy is written under one lock with the in-memory put, so the two
//! agree on what was evicted. A write that fails keeps the response in
//! memory (logged): it is served, and not kept across a restart.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::params;
use serde_json::Value;
use steward_dialects::responses::{Store, StoreFull, Stored};

use super::db::{self, Db};
use super::StateDir;

/// Rows at most this large (the JSON text of a response and its
/// conversation) are written on the request's own thread; a larger one
/// hands the thread's other tasks to another worker while it is written.
const INLINE_BYTES: usize = 64 << 10;

/// The Responses store of one server.
pub struct Responses {
    store: Store,
    dir: OnceLock<Arc<StateDir>>,
}

impl std::fmt::Debug for Responses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responses")
            .field("store", &self.store)
            .field("durable", &self.dir.get().is_some())
            .finish()
    }
}

/// Reads through to the in-memory store (`get`, the counts, the bounds).
impl Deref for Responses {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

/// What a start-up read back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Entries now in the store.
    pub entries: usize,
    /// Rows deleted: expired, past the bounds, or unreadable.
    pub dropped: usize,
}

impl Responses {
    /// In memory only, until `attach`.
    pub fn new(store: Store) -> Self {
        Responses {
            store,
            dir: OnceLock::new(),
        }
    }

    /// Keep the store in `dir` from now on, after reading back what it
    /// holds. Once per store.
    pub fn attach(&self, dir: Arc<StateDir>) -> Result<Loaded, String> {
        if self.dir.get().is_some() {
            return Err("the Responses store already has a state directory".into());
        }
        let loaded = load(&self.store, dir.db(), unix_ms(), Instant::now())
            .map_err(|e| format!("steward.db: the stored responses cannot be read: {e}"))?;
        let _ = self.dir.set(dir);
        Ok(loaded)
    }

    /// Store `stored` as `id`: in memory and, with a state directory, in
    /// `steward.db` before this returns.
    pub fn put(&self, id: &str, stored: Stored) -> Result<(), StoreFull> {
        let Some(dir) = self.dir.get() else {
            return self.store.put(id, stored);
        };
        let row = (
            serde_json::to_string(&stored.response),
            serde_json::to_string(&stored.conversation),
        );
        let (Ok(response), Ok(conversation)) = row else {
            return self.store.put(id, stored);
        };
        let large = response.len() + conversation.len() > INLINE_BYTES;
        let ttl_ms = millis(self.store.ttl());
        blocking(large, || {
            let mut c = dir.db().conn();
            let evicted = self.store.put_evicting(id, stored, Instant::now())?;
            let now = unix_ms();
            let written = db::write_on(&mut c, |tx| {
                tx.execute(
                    "INSERT OR REPLACE INTO responses (id, stored_at_ms, bytes, response, conversation) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![id, now, (response.len() + conversation.len()) as i64, response, conversation],
                )?;
                let mut del = tx.prepare_cached("DELETE FROM responses WHERE id = ?1")?;
                for e in &evicted {
                    del.execute([e])?;
                }
                tx.execute(
                    "DELETE FROM responses WHERE stored_at_ms <= ?1",
                    [now.saturating_sub(ttl_ms)],
                )?;
                Ok(())
            });
            if let Err(e) = written {
                tracing::error!(id, error = %e, "a stored response could not be written to steward.db: kept in memory only (gone after a restart)");
            }
            Ok(())
        })
    }

    /// Delete `id` (in memory and in `steward.db`); whether it was there.
    pub fn delete(&self, id: &str) -> bool {
        let Some(dir) = self.dir.get() else {
            return self.store.delete(id);
        };
        blocking(false, || {
            let c = dir.db().conn();
            let was = self.store.delete(id);
            if let Err(e) = c.execute("DELETE FROM responses WHERE id = ?1", [id]) {
                tracing::error!(id, error = %e, "a deleted response could not be deleted from steward.db");
            }
            was
        })
    }
}

/// `f` on this thread; a `large` one, on a multi-threaded runtime's
/// worker, with the worker's other tasks handed to another thread first.
fn blocking<T>(large: bool, f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if large && h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// One row read back.
struct Row {
    seq: i64,
    id: String,
    at_ms: i64,
    stored: Stored,
}

/// The rows of `db` into `store`: newest first while they fit its bounds
/// and are younger than its TTL (at `now_ms`, Unix time), put in their
/// order with their age; every other row deleted.
fn load(store: &Store, db: &Db, now_ms: i64, now: Instant) -> rusqlite::Result<Loaded> {
    let cutoff = now_ms.saturating_sub(millis(store.ttl()));
    let mut keep: Vec<Row> = Vec::new();
    let mut bad: Vec<i64> = Vec::new();
    db.read(|c| {
        let mut s = c.prepare(
            "SELECT seq, id, stored_at_ms, response, conversation FROM responses WHERE stored_at_ms > ?1 ORDER BY seq DESC",
        )?;
        let mut rows = s.query([cutoff])?;
        let mut bytes = 0usize;
        while let Some(r) = rows.next()? {
            if keep.len() >= store.capacity_entries() {
                break;
            }
            let (seq, id): (i64, String) = (r.get(0)?, r.get(1)?);
            let stored = parse(&r.get::<_, String>(3)?, &r.get::<_, String>(4)?);
            let Some(stored) = stored else {
                tracing::error!(id, "a stored response in steward.db does not read back: deleted");
                bad.push(seq);
                continue;
            };
            let b = stored.json_bytes();
            if bytes + b > store.capacity_bytes() {
                break;
            }
            bytes += b;
            keep.push(Row {
                seq,
                id,
                at_ms: r.get(2)?,
                stored,
            });
        }
        Ok(())
    })?;
    // Every row older than the oldest kept goes (all of them when none is
    // kept), and those that did not read back.
    let floor = keep.last().map_or(i64::MAX, |r| r.seq);
    let mut dropped = db.write(|tx| {
        let mut n = tx.execute("DELETE FROM responses WHERE seq < ?1", [floor])?;
        let mut del = tx.prepare_cached("DELETE FROM responses WHERE seq = ?1")?;
        for seq in &bad {
            n += del.execute([seq])?;
        }
        Ok(n)
    })?;
    let mut gone = Vec::new();
    for r in keep.into_iter().rev() {
        let age = Duration::from_millis(now_ms.saturating_sub(r.at_ms).max(0) as u64);
        // An entry older than this machine's uptime cannot be dated on the
        // monotonic clock: it is dated now (its row still ages by wall time).
        let at = now.checked_sub(age).unwrap_or(now);
        match store.put_evicting(&r.id, r.stored, at) {
            Ok(evicted) => gone.extend(evicted),
            Err(_) => gone.push(r.id),
        }
    }
    if !gone.is_empty() {
        dropped += db.write(|tx| {
            let mut del = tx.prepare_cached("DELETE FROM responses WHERE id = ?1")?;
            gone.iter().try_fold(0, |n, id| Ok(n + del.execute([id])?))
        })?;
    }
    Ok(Loaded {
        entries: store.len(),
        dropped,
    })
}

/// A row's JSON back into an entry (None: it does not read).
fn parse(response: &str, conversation: &str) -> Option<Stored> {
    let response: Value = serde_json::from_str(response).ok()?;
    let conversation: Vec<Value> = serde_json::from_str(conversation).ok()?;
    response.is_object().then_some(Stored {
        response,
        conversation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(n: usize) -> Stored {
        Stored {
            response: json!({"pad": "x".repeat(n.saturating_sub(10))}),
            conversation: vec![json!({"role": "user", "content": "hi"})],
        }
    }

    fn open(d: &std::path::Path) -> Arc<StateDir> {
        Arc::new(StateDir::try_open(d).unwrap())
    }

    fn store(entries: usize, bytes: usize) -> Responses {
        Responses::new(Store::new(entries, bytes, Duration::from_secs(3600)))
    }

    fn ids(db: &Db) -> Vec<String> {
        db.read(|c| {
            let mut s = c.prepare("SELECT id FROM responses ORDER BY seq")?;
            let v = s.query_map([], |r| r.get(0))?.collect();
            v
        })
        .unwrap()
    }

    #[test]
    fn puts_and_deletes_survive_a_reopen_in_order() {
        let d = tempfile::tempdir().unwrap();
        {
            let r = store(10, 1 << 20);
            assert_eq!(r.attach(open(d.path())).unwrap(), Loaded::default());
            for id in ["a", "b", "c"] {
                r.put(id, entry(100)).unwrap();
            }
            assert!(r.delete("b"));
            assert!(!r.delete("b"));
        }
        let r = store(10, 1 << 20);
        let loaded = r.attach(open(d.path())).unwrap();
        assert_eq!(
            loaded,
            Loaded {
                entries: 2,
                dropped: 0
            }
        );
        assert_eq!(r.get("a"), Some(entry(100)));
        assert!(r.get("b").is_none());
        // The order is kept: a bound of 2 evicts `a` (the oldest) first.
        let r2 = store(2, 1 << 20);
        drop(r);
        let r2d = open(d.path());
        r2.attach(r2d.clone()).unwrap();
        r2.put("d", entry(100)).unwrap();
        assert!(r2.get("a").is_none() && r2.get("c").is_some());
        assert_eq!(ids(r2d.db()), ["c", "d"]);
    }

    #[test]
    fn reading_back_keeps_the_newest_within_the_bounds_and_deletes_the_rest() {
        let d = tempfile::tempdir().unwrap();
        {
            let r = store(100, 1 << 20);
            r.attach(open(d.path())).unwrap();
            for i in 0..6 {
                r.put(&format!("r{i}"), entry(1000)).unwrap();
            }
        }
        // A smaller store now: three entries' bytes.
        let one = entry(1000).json_bytes();
        let r = store(100, 3 * one);
        let sd = open(d.path());
        let loaded = r.attach(sd.clone()).unwrap();
        assert_eq!(
            loaded,
            Loaded {
                entries: 3,
                dropped: 3
            }
        );
        assert!(r.get("r2").is_none() && r.get("r3").is_some() && r.get("r5").is_some());
        assert_eq!(ids(sd.db()), ["r3", "r4", "r5"]);
    }

    #[test]
    fn expired_and_unreadable_rows_are_dropped_at_start() {
        let d = tempfile::tempdir().unwrap();
        let sd = open(d.path());
        let now = unix_ms();
        sd.db()
            .write(|tx| {
                let mut ins = tx.prepare(
                    "INSERT INTO responses (id, stored_at_ms, bytes, response, conversation) VALUES (?1, ?2, 0, ?3, ?4)",
                )?;
                ins.execute(params!["old", now - 7_200_000, "{}", "[]"])?;
                ins.execute(params!["torn", now - 1000, "{\"a\":", "[]"])?;
                ins.execute(params!["fine", now - 1000, "{\"id\":\"fine\"}", "[1]"])?;
                ins.execute(params!["notlist", now - 500, "{}", "{}"])?;
                Ok(())
            })
            .unwrap();
        let r = store(10, 1 << 20);
        let loaded = r.attach(sd.clone()).unwrap();
        assert_eq!(
            loaded,
            Loaded {
                entries: 1,
                dropped: 3
            }
        );
        assert_eq!(r.get("fine").unwrap().conversation, [json!(1)]);
        assert_eq!(ids(sd.db()), ["fine"]);
        assert!(r.attach(sd).is_err(), "once per store");
    }

    #[test]
    fn an_entry_evicted_from_memory_is_deleted_from_the_database() {
        let d = tempfile::tempdir().unwrap();
        let sd = open(d.path());
        let r = store(2, 1 << 20);
        r.attach(sd.clone()).unwrap();
        for id in ["a", "b", "c", "d"] {
            r.put(id, entry(50)).unwrap();
        }
        assert_eq!(ids(sd.db()), ["c", "d"]);
        assert_eq!(r.evicted_total(), 2);
        // One larger than the store: refused, and nothing written.
        assert!(r.put("huge", entry(2 << 20)).is_err());
        assert_eq!(ids(sd.db()), ["c", "d"]);
    }

    /// The time a put adds with `steward.db` against the in-memory store
    /// alone, for a response of about 2 KB (a short chat turn):
    /// `cargo test --release -p steward-server --lib put_latency -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn put_latency() {
        let d = tempfile::tempdir().unwrap();
        let n = 5000;
        let e = entry(2000);
        let time = |r: &Responses| {
            let mut each: Vec<f64> = (0..n)
                .map(|i| {
                    let t = Instant::now();
                    r.put(&format!("resp_{i:08}"), e.clone()).unwrap();
                    t.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            let mean = each.iter().sum::<f64>() / n as f64;
            each.sort_by(f64::total_cmp);
            (mean, each[n * 99 / 100], each[n - 1])
        };
        let mem = time(&store(1024, 64 << 20));
        let r = store(1024, 64 << 20);
        r.attach(open(d.path())).unwrap();
        let disk = time(&r);
        println!(
            "put of a {} B response, {n} puts into a store of 1024: in memory mean {:.1} us; with steward.db mean {:.1} us (p99 {:.0} us, max {:.0} us): +{:.1} us a put",
            e.json_bytes(),
            mem.0,
            disk.0,
            disk.1,
            disk.2,
            disk.0 - mem.0
        );
    }
}
