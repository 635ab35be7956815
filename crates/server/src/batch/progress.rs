//! A running job's progress: its output log (`output.jsonl`, answered
//! lines) and error log (`errors.jsonl`), each appended one whole line at
//! a time when a line's answer is whole. The logs are the only record of
//! what is done: opened again (after a kill), each is cut back to its last
//! complete line and the `custom_id`s it holds are skipped, so every line
//! is answered exactly once. A log that does not read back (a line that is
//! not JSON, an unknown or repeated `custom_id`) fails the job.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::disk;

pub(crate) const OUTPUT: &str = "output.jsonl";
pub(crate) const ERRORS: &str = "errors.jsonl";

/// Fsync the logs at least this often while lines complete (a kill loses
/// nothing written; this bounds what a power cut can take back).
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// A job's logs, open for appending, and what they hold.
#[derive(Debug)]
pub(crate) struct Progress {
    out: File,
    err: File,
    /// The `custom_id`s answered (either log).
    pub done: HashSet<String>,
    pub completed: u64,
    pub failed: u64,
    dirty: bool,
    synced: Instant,
}

impl Progress {
    /// Open `dir`'s logs for a job whose lines are `ids`.
    pub(crate) fn open(dir: &Path, ids: &HashSet<&str>) -> Result<Progress, String> {
        let io = |e: io::Error| e.to_string();
        let (out, out_bytes) = disk::open_log(&dir.join(OUTPUT)).map_err(io)?;
        let (err, err_bytes) = disk::open_log(&dir.join(ERRORS)).map_err(io)?;
        let mut done = HashSet::new();
        let mut counts = [0u64; 2];
        for (k, (name, bytes)) in [(OUTPUT, &out_bytes), (ERRORS, &err_bytes)]
            .into_iter()
            .enumerate()
        {
            for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
                if line.is_empty() {
                    continue;
                }
                let id = serde_json::from_slice::<Value>(line)
                    .ok()
                    .and_then(|v| v["custom_id"].as_str().map(str::to_string))
                    .ok_or_else(|| format!("{name} line {} is not a batch answer", i + 1))?;
                if !ids.contains(id.as_str()) {
                    return Err(format!(
                        "{name} line {} answers {id:?}, which the input does not hold",
                        i + 1
                    ));
                }
                if !done.insert(id.clone()) {
                    return Err(format!(
                        "{name} line {} answers {id:?} a second time",
                        i + 1
                    ));
                }
                counts[k] += 1;
            }
        }
        Ok(Progress {
            out,
            err,
            done,
            completed: counts[0],
            failed: counts[1],
            dirty: false,
            synced: Instant::now(),
        })
    }

    /// Append one answered line (`ok`: to the output log, else to the
    /// error log) as a single write; returns its bytes.
    pub(crate) fn append(&mut self, custom_id: &str, ok: bool, record: &Value) -> io::Result<u64> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        let f = if ok { &mut self.out } else { &mut self.err };
        f.write_all(&line)?;
        self.done.insert(custom_id.to_string());
        if ok {
            self.completed += 1;
        } else {
            self.failed += 1;
        }
        self.dirty = true;
        if self.synced.elapsed() >= SYNC_EVERY {
            self.sync()?;
        }
        Ok(line.len() as u64)
    }

    /// Make what was appended durable.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        if self.dirty {
            self.out.sync_data()?;
            self.err.sync_data()?;
            self.dirty = false;
        }
        self.synced = Instant::now();
        Ok(())
    }
}

/// The whole lines each log of `dir` holds (output, errors): a job's
/// counts before the runner opens it.
pub(crate) fn tally(dir: &Path) -> (u64, u64) {
    let count = |name| {
        std::fs::read(dir.join(name))
            .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
            .unwrap_or(0)
    };
    (count(OUTPUT), count(ERRORS))
}

/// The bytes `dir`'s logs hold.
pub(crate) fn bytes(dir: &Path) -> u64 {
    [OUTPUT, ERRORS]
        .iter()
        .filter_map(|n| std::fs::metadata(dir.join(n)).ok())
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reopened_logs_hold_each_answer_once_and_drop_a_torn_line() {
        let d = tempfile::tempdir().unwrap();
        let ids: HashSet<&str> = ["a", "b", "c"].into_iter().collect();
        let mut p = Progress::open(d.path(), &ids).unwrap();
        p.append("a", true, &json!({"custom_id": "a"})).unwrap();
        p.append("b", false, &json!({"custom_id": "b"})).unwrap();
        drop(p);
        // A kill mid-write of `c`'s answer.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(d.path().join(OUTPUT))
            .unwrap();
        f.write_all(br#"{"custom_id": "c", "resp"#).unwrap();
        let p = Progress::open(d.path(), &ids).unwrap();
        assert_eq!((p.completed, p.failed), (1, 1));
        assert!(p.done.contains("a") && p.done.contains("b") && !p.done.contains("c"));
        assert_eq!(tally(d.path()), (1, 1));
    }

    #[test]
    fn a_repeated_or_unknown_answer_fails_the_job() {
        let d = tempfile::tempdir().unwrap();
        let ids: HashSet<&str> = ["a"].into_iter().collect();
        std::fs::write(
            d.path().join(OUTPUT),
            "{\"custom_id\":\"a\"}\n{\"custom_id\":\"a\"}\n",
        )
        .unwrap();
        assert!(Progress::open(d.path(), &ids)
            .unwrap_err()
            .contains("second time"));
        std::fs::write(d.path().join(OUTPUT), "{\"custom_id\":\"z\"}\n").unwrap();
        assert!(Progress::open(d.path(), &ids)
            .unwrap_err()
            .contains("does not hold"));
        std::fs::write(d.path().join(OUTPUT), "garbage\n").unwrap();
        assert!(Progress::open(d.path(), &ids).is_err());
    }
}
