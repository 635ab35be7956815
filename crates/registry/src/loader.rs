//! The thread a model loads on: its own, at a low CPU priority.

/// The loader thread's niceness. Measured with 4 SmolLM2 streams running
/// while Gemma 3 270M loads (docs/BENCHMARKS.md [4/8]):
///
/// | nice | streams' p99 / max gap | load |
/// |---|---|---|
/// | 0 | 260 / 260 ms | 2.0 s |
/// | 10 | 108 / 199 ms | 6.5 s |
/// | 19 | 52 / 61 ms | waits for the streams to end |
///
/// Nice 19 starves a load for as long as other models stay busy; nice 10
/// bounds both.
const LOAD_NICE: i32 = 10;

/// Run `f` on a thread of its own at a low CPU priority (`LOAD_NICE`, that
/// thread only), and wait for it. A model's load (mapping and reading its
/// weights, hashing them once, a probe context for window models) then
/// mostly takes what the running models' steps leave idle instead of
/// stretching them.
pub(crate) async fn background<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("steward-load".into())
        .spawn(move || {
            lower_priority();
            let _ = tx.send(f());
        })
        .map_err(|e| format!("cannot start a loader thread: {e}"))?;
    rx.await
        .map_err(|_| "the loader thread panicked".to_string())
}

#[cfg(target_os = "linux")]
fn lower_priority() {
    // SAFETY: plain syscalls on this thread's own id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, LOAD_NICE);
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}
