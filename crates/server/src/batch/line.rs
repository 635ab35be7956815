//! The batch line marker (a leaf: `app/` and `api/` use it; it uses
//! nothing of this crate). The runner sends each line of a batch through
//! the app's own router in-process, as a client's request would go, with a
//! [`Line`] in the request's extensions, which no client can set (a header
//! could be spoofed): the auth layer lets it through without a key (its
//! batch's key was checked when the batch was created). The router's
//! future also runs inside [`scope`], so that the generation path, far
//! below its handler's signature, marks the sequence `background`
//! ([`mark`]) without every function on the way passing the marker on.

use std::future::Future;
use std::sync::Arc;

use steward_engine::Tenancy;

/// A request the batch runner makes for one line of a batch.
#[derive(Debug, Clone)]
pub struct Line {
    /// The name of the API key that created the batch (None: no keys).
    pub key: Option<Arc<str>>,
}

tokio::task_local! {
    static LINE: Line;
}

/// Run `f` (a request's whole path through the router) as `line`.
pub(crate) async fn scope<F: Future>(line: Line, f: F) -> F::Output {
    LINE.scope(line, f).await
}

/// The line this task is running, if it is one.
pub(crate) fn current() -> Option<Line> {
    LINE.try_with(Clone::clone).ok()
}

/// A generation request's tenancy: a batch line's is `background` (the
/// engine admits it only on capacity interactive requests leave, and
/// preempts it for them) and, when no key named it, its batch's key's.
pub(crate) fn mark(mut t: Tenancy) -> Tenancy {
    if let Some(line) = current() {
        t.background = true;
        if let (true, Some(k)) = (t.tenant.is_empty(), line.key) {
            t.tenant = k;
        }
    }
    t
}
