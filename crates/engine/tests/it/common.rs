//! Helpers the engine's integration tests share (each module of this one
//! test binary uses part of it).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use steward_engine::{Engine, EngineConfig, EngineHandle, EngineStats};

/// How long a test waits for something the engine must do before it calls
/// it a hang: far past any wait on a loaded machine, never a speed claim.
pub const HANG_GUARD: Duration = Duration::from_secs(300);

/// Polls the engine's stats until `done` holds (they are published at the
/// end of the owner's iteration, after the events of its step); the stats
/// that satisfied it.
pub async fn wait_for(
    h: &EngineHandle,
    what: &str,
    done: impl Fn(&EngineStats) -> bool,
) -> EngineStats {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let st = h.stats();
        if done(&st) {
            return st;
        }
        assert!(Instant::now() < deadline, "{what}: never happened: {st:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The one engine fixture: start an engine with this configuration and
/// wait until it serves.
pub async fn start(c: EngineConfig) -> EngineHandle {
    let h = Engine::start(c).expect("engine starts");
    assert!(h.wait_ready().await);
    h
}

/// A file or directory a script makes (`scripts/test-fixtures.sh`, the
/// venv of `scripts/prefetch.sh`): its path when it is there; when it is
/// not, `None` after one line naming the command that makes it (the test
/// then returns: skipped), or a failure with `STEWARD_REQUIRE_FIXTURES=1`
/// (scripts/test.sh sets it: CI never skips).
pub fn fixture(path: impl Into<std::path::PathBuf>, make: &str) -> Option<std::path::PathBuf> {
    let path = path.into();
    if path.exists() {
        return Some(path);
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let shown = path
        .strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string();
    let why = format!("{shown} missing; run {make} (scripts/test.sh does)");
    assert!(!require_fixtures(), "{why}");
    // Straight to stderr, past the harness's capture: every run shows it.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
    None
}

/// `STEWARD_REQUIRE_FIXTURES=1`: a missing fixture fails its test.
pub fn require_fixtures() -> bool {
    std::env::var_os("STEWARD_REQUIRE_FIXTURES").is_some_and(|v| v == "1")
}
