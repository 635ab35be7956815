//! Connections: the accept loop and what every connection is held to,
//! whatever its client does (the HTTP hygiene of [1/8]).
//!
//! Owns: the open-connection count and each connection's task. Limits:
//! - `max_connections`: past it a connection gets one canned 503 (JSON,
//!   `connection: close`) and is closed; `/health` keeps answering for the
//!   connections already open, and file descriptors cannot run out.
//! - `header_timeout`: the request line and headers must arrive within it,
//!   counted from the accept for a connection's first request and from the
//!   first byte for later ones: a silent or half-sent request is dropped.
//! - `idle_timeout`: a connection with no request in flight and no bytes
//!   either way for this long is closed (keep-alive or never used).
//! - the body-read timeout and size cap are the `read_body` middleware's
//!   (`app/body.rs`), so that their refusals are JSON in the API's shape.
//!
//! Shutdown: when `shutdown` resolves the listener closes, every connection
//! is told to finish its current response and close (idle ones close at
//! once), and whatever is still open after `close_grace` is dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// What connections are held to (`steward serve` flags).
#[derive(Clone)]
pub struct ConnLimits {
    /// `--max-connections`.
    pub max_connections: usize,
    /// `--header-timeout-s`.
    pub header_timeout: Duration,
    /// `--idle-timeout-s`.
    pub idle_timeout: Duration,
    /// After shutdown begins: how long open responses may take to finish.
    pub close_grace: Duration,
    /// Serve HTTPS with this certificate (`--tls-cert`): the handshake is
    /// held to `header_timeout` too.
    pub tls: Option<Arc<crate::http::access::Tls>>,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            close_grace: Duration::from_secs(1),
            tls: None,
        }
    }
}

/// Open connections, readable while serving (`steward_http_connections`).
#[derive(Debug, Default)]
pub struct ConnStats {
    pub open: AtomicUsize,
    pub refused: AtomicU64,
    pub idle_closed: AtomicU64,
}

/// Serve `app` on `listener` until `shutdown` resolves, then close every
/// connection within `limits.close_grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    stats: Arc<ConnStats>,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and the like: wait instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        tune(&stream);
        if stats.open.load(Ordering::Acquire) >= limits.max_connections {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            conns.spawn(refuse(stream));
            continue;
        }
        stats.open.fetch_add(1, Ordering::AcqRel);
        let guard = OpenGuard(stats.clone());
        conns.spawn(connection(
            stream,
            app.clone(),
            limits.clone(),
            stop_rx.clone(),
            guard,
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let closing = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.close_grace, closing)
        .await
        .is_err()
    {
        tracing::info!(
            left = conns.len(),
            "connections still open after the grace period; closing them"
        );
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
}

/// Every accepted connection gets TCP_NODELAY: a streamed token is sent at
/// once instead of possibly waiting, under Nagle's algorithm, for the
/// client's (delayed) acknowledgement of the previous one.
pub fn tune(stream: &TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
}

struct OpenGuard(Arc<ConnStats>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Past the connection cap: one 503 in the API's error shape, then close.
async fn refuse(mut stream: TcpStream) {
    let body = r#"{"error":{"message":"too many open connections; retry shortly","type":"server_error","param":null,"code":"too_many_connections"}}"#;
    let resp = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        stream.write_all(resp.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

async fn connection(
    stream: TcpStream,
    app: Router,
    limits: ConnLimits,
    stop: tokio::sync::watch::Receiver<bool>,
    open: OpenGuard,
) {
    let Some(tls) = limits.tls.clone() else {
        return http1(stream, app, limits, stop, open).await;
    };
    match tokio::time::timeout(limits.header_timeout, tls.acceptor().accept(stream)).await {
        Ok(Ok(s)) => http1(s, app, limits, stop, open).await,
        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake too slow; connection closed"),
    }
}

async fn http1<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    app: Router,
    limits: ConnLimits,
    mut stop: tokio::sync::watch::Receiver<bool>,
    _open: OpenGuard,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked::new(stream, activity.clone()));
    let busy = activity.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let app = app.clone();
        let guard = InFlight::new(busy.clone());
        async move {
            let resp = tower::ServiceExt::oneshot(app, req.map(axum::body::Body::new)).await;
            // The request counts as in flight until its body is sent.
            resp.map(|r| {
                r.map(|b| {
                    axum::body::Body::new(Guarded {
                        inner: b,
                        _g: guard,
                    })
                })
            })
        }
    });
    // Hyper's own header timer also runs while a kept-alive connection waits
    // for its next request (it closed idle connections at the header
    // timeout): both timeouts are the watchdog's below instead.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true);
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    let period = limits
        .idle_timeout
        .min(limits.header_timeout)
        .min(Duration::from_secs(1))
        .max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(period);
    let mut stopping = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = tick.tick() => {
                if activity.head_for() >= limits.header_timeout {
                    tracing::debug!("request headers too slow; connection closed");
                    return;
                }
                if activity.idle_for() >= limits.idle_timeout {
                    tracing::debug!("idle connection closed");
                    return;
                }
            }
        }
    }
}

/// Bytes moved and requests in flight on one connection.
struct Activity {
    start: Instant,
    /// Milliseconds since `start` of the last byte read or written.
    last_ms: AtomicU64,
    /// 1 + milliseconds since `start` of the first byte of a request whose
    /// headers are not complete yet (0: none).
    head_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            // A new connection's first request is on the header clock from
            // the accept: one that never sends a byte is closed then too.
            head_ms: AtomicU64::new(1),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Bytes arrived: with no request in flight they begin the next one's
    /// headers (the header timeout starts).
    fn read(&self) {
        self.touch();
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let _ = self.head_ms.compare_exchange(
                0,
                self.now_ms() + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// How long a request's headers have been arriving.
    fn head_for(&self) -> Duration {
        match self.head_ms.load(Ordering::Acquire) {
            0 => Duration::ZERO,
            t => Duration::from_millis(self.now_ms().saturating_sub(t - 1)),
        }
    }

    /// Zero while a request is in flight (a long non-streamed request moves
    /// no bytes and is not idle).
    fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(a: Arc<Activity>) -> Self {
        a.in_flight.fetch_add(1, Ordering::AcqRel);
        // The headers are complete: their timeout no longer runs.
        a.head_ms.store(0, Ordering::Release);
        InFlight(a)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that holds its request's `InFlight` until it is done.
struct Guarded {
    inner: axum::body::Body,
    _g: InFlight,
}

impl http_body::Body for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The socket, noting every byte moved. It also gives hyper's own answers
/// to requests it cannot parse (400, 414, 431, written with no request in
/// flight and with neither a body nor a content type, which every response
/// of ours has) the API's JSON error body instead of an empty one.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    /// A replacement response still to be written.
    pending: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Tracked<S> {
    fn new(inner: S, activity: Arc<Activity>) -> Self {
        Tracked {
            inner,
            activity,
            pending: Vec::new(),
        }
    }

    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while !self.pending.is_empty() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.pending) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                }
                Poll::Ready(Ok(n)) => {
                    self.pending.drain(..n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// `data` is hyper's automatic error response: its length, after the
    /// JSON version has been queued in its place.
    fn replace_canned(&mut self, data: &[u8]) -> Option<usize> {
        if self.activity.in_flight.load(Ordering::Acquire) > 0 || !data.starts_with(b"HTTP/1.1 ") {
            return None;
        }
        let end = data.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        // Hyper's own: no body and no content type (every response of ours
        // has both; its body may be finished, and the request no longer in
        // flight, before its bytes are written).
        let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
        if !head.contains("\r\ncontent-length: 0\r\n") || head.contains("\r\ncontent-type:") {
            return None;
        }
        let (status, code, message) = match data.get(9..12)? {
            b"400" => (
                "400 Bad Request",
                "bad_http_request",
                "the request is not valid HTTP/1.1",
            ),
            b"414" => (
                "414 URI Too Long",
                "uri_too_long",
                "the request URI is too long",
            ),
            b"431" => (
                "431 Request Header Fields Too Large",
                "headers_too_large",
                "the request headers are too large",
            ),
            _ => return None,
        };
        let body = format!(
            r#"{{"error":{{"message":"{message}","type":"invalid_request_error","param":null,"code":"{code}"}}}}"#
        );
        self.pending = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes();
        Some(end)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        r
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.drain(cx))?;
        if let Some(n) = self.replace_canned(data) {
            let _ = self.drain(cx)?;
            return Poll::Ready(Ok(n));
        }
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    // Vectored writes, as the socket's own: hyper then queues at most 16
    // body chunks before it stops polling the body (flattening them instead
    // buffers ~400 KB, which hid a slow reader from the engine's outbox).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.drain(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            if let Some(n) = self.replace_canned(first) {
                let _ = self.drain(cx)?;
                return Poll::Ready(Ok(n));
            }
        }
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Bind the listening socket. `send_buffer` caps each connection's kernel
/// send buffer (accepted sockets inherit it): without a cap the kernel
/// absorbs megabytes of a slow reader's stream before the engine's outbox
/// sees any back-pressure, and the slow-reader policy acts late. Serve it
/// with `conn::serve` (connection limits, timeouts, TCP_NODELAY).
pub fn bind(
    addr: std::net::SocketAddr,
    send_buffer: Option<u32>,
) -> std::io::Result<tokio::net::TcpListener> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    if let Some(n) = send_buffer {
        sock.set_send_buffer_size(n)?;
    }
    sock.bind(addr)?;
    sock.listen(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streamed tokens are small writes: accepted connections must have
    /// Nagle's algorithm off.
    #[tokio::test]
    async fn accepted_connections_have_tcp_nodelay() {
        let l = bind("127.0.0.1:0".parse().unwrap(), None).unwrap();
        let addr = l.local_addr().unwrap();
        let client = tokio::spawn(TcpStream::connect(addr));
        let (server_side, _) = l.accept().await.unwrap();
        tune(&server_side);
        assert!(server_side.nodelay().unwrap());
        drop(client.await.unwrap().unwrap());
    }
}
