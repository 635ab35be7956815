//! A lost runtime: the one process-wide state no request can recover from.
//!
//! Set once, by the runtime adapter's abort hook (a dead RPC worker makes
//! ggml abort). Every [`crate::deliver::stream::RequestStream`] waiting on the owner
//! then ends with [`crate::deliver::stream::GenerationError::Runtime`], health checks
//! answer 503, and the process exits shortly after (see `runtime::rpc`).

use std::sync::OnceLock;

use tokio::sync::Notify;

static LOST: OnceLock<String> = OnceLock::new();
static WAKE: Notify = Notify::const_new();

/// Record the loss; true for the first caller only.
pub(crate) fn mark_lost(reason: &str) -> bool {
    let first = LOST.set(reason.to_string()).is_ok();
    WAKE.notify_waiters();
    first
}

/// Why the runtime was lost, once it was.
pub fn runtime_lost() -> Option<&'static str> {
    LOST.get().map(String::as_str)
}

/// Resolves when the runtime is lost (at once if it already was).
pub async fn lost() -> &'static str {
    loop {
        let wake = WAKE.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        if let Some(r) = runtime_lost() {
            return r;
        }
        wake.await;
    }
}

/// The text of a caught panic's payload (empty when it is neither `&str`
/// nor `String`).
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
