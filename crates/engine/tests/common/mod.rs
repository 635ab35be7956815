//! Helpers the engine's integration tests share (each test binary includes
//! this module with `mod common;`; each uses a subset).
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
