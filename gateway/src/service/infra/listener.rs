//! The HTTP listeners: an accept loop that bounds connections, and the connection settings
//! that bound how long any one client can hold one.
//!
//! # Safety behaviour
//!
//! One client, or many without a credential, cannot take the service down:
//!
//! - **Connection caps.** At most `max_connections` open connections per listener and
//!   `max_connections_per_peer` from one address; a connection over a cap is closed at once
//!   (counted in `halo_connections_refused_total`). The caps keep the process well under its
//!   file-descriptor limit.
//! - **Header timeout.** A connection must deliver a request's headers within
//!   `header_timeout_ms` of opening, and of its previous response (hyper's header-read timer,
//!   which also closes an idle keep-alive connection); a slow-loris client is closed.
//! - **Body and request timeouts.** A request body must arrive within `body_timeout_ms`
//!   (tower-http `RequestBodyTimeoutLayer`) and the whole request be answered within
//!   `request_timeout_ms` (`TimeoutLayer`, 408); event streams answer at once and then stream.
//! - **Write timeout.** A client that stops reading (a stalled event stream) is closed once a
//!   write has waited `write_timeout_ms`; hyper buffers at most a small amount per
//!   connection, and an event stream is a cursor into the shared backlog, so nothing grows
//!   meanwhile. The client resumes with `Last-Event-ID`.
//! - **TLS.** With `[listen.tls]` every connection is a TLS 1.2 or 1.3 session ([`super::tls`]);
//!   its handshake must finish within `header_timeout_ms`, and one that fails (plaintext to
//!   the TLS port, an old protocol, a client that does not trust the certificate) is closed and
//!   counted in `halo_tls_handshake_failures_total`.
//! - **The operator's own listener.** `listen.operator` serves the same routes, only to the
//!   operator credential, with caps of its own: a saturated agent listener never blocks a
//!   hold.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt as _;

use crate::service::infra::client_cert::{self, ClientCert};
use crate::service::infra::metrics::{CodeLabel, Metrics};
use crate::service::infra::tls::Tls;

/// How one listener bounds its clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most.
    pub(crate) max_connections: usize,
    /// Open connections from one address at most.
    pub(crate) max_per_peer: usize,
    /// A request's headers must arrive within this long of the connection opening or of the
    /// previous response.
    pub(crate) header_timeout: Duration,
    /// A write to a client that does not read fails after this long.
    pub(crate) write_timeout: Duration,
}

/// Open connections, in all and per peer.
#[derive(Default)]
struct Open {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// A connection's place under the caps; dropping it frees the place.
struct Admitted {
    open: Arc<Mutex<Open>>,
    peer: IpAddr,
    metrics: Arc<Metrics>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut g = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        g.total = g.total.saturating_sub(1);
        if let Some(n) = g.per_peer.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                g.per_peer.remove(&self.peer);
            }
        }
        self.metrics.connections_open.dec();
    }
}

/// A warning at most every few seconds, with how many were held back.
pub struct RateLimited {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl RateLimited {
    /// At most one per `every`.
    pub const fn new(every: Duration) -> RateLimited {
        RateLimited {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// `Some(held_back)` when a warning may go out now.
    pub fn allow(&self) -> Option<u64> {
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match g.0 {
            Some(t) if now.duration_since(t) < self.every => {
                g.1 = g.1.saturating_add(1);
                None
            }
            _ => {
                let held = g.1;
                *g = (Some(now), 0);
                Some(held)
            }
        }
    }
}

static REFUSED_WARNING: RateLimited = RateLimited::new(Duration::from_secs(5));

fn admit(
    open: &Arc<Mutex<Open>>,
    peer: IpAddr,
    limits: &Limits,
    metrics: &Arc<Metrics>,
) -> Result<Admitted, &'static str> {
    let mut g = open.lock().unwrap_or_else(PoisonError::into_inner);
    if g.total >= limits.max_connections {
        return Err("max_connections");
    }
    let n = g.per_peer.get(&peer).copied().unwrap_or(0);
    if n >= limits.max_per_peer {
        return Err("max_connections_per_peer");
    }
    g.total += 1;
    g.per_peer.insert(peer, n + 1);
    metrics.connections_open.inc();
    Ok(Admitted {
        open: Arc::clone(open),
        peer,
        metrics: Arc::clone(metrics),
    })
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown` turns true, then
/// lets open requests finish (at most five seconds).
pub async fn serve(
    name: &'static str,
    listener: TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<Arc<Tls>>,
    mut shutdown: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) {
    let open = Arc::new(Mutex::new(Open::default()));
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => match admit(&open, peer.ip(), &limits, &metrics) {
                    Ok(place) => {
                        let (app, limits, shutdown) = (app.clone(), limits.clone(), shutdown.clone());
                        match &tls {
                            None => {
                                let _ = stream.set_nodelay(true);
                                conns.spawn(connection(stream, peer, None, app, limits, shutdown, place))
                            }
                            Some(tls) => conns.spawn(tls_connection(
                                tls.acceptor(), stream, peer, app, limits, shutdown, place, Arc::clone(&metrics),
                            )),
                        };
                    }
                    Err(cap) => {
                        metrics.connections_refused.get_or_create(&CodeLabel { code: cap.into() }).inc();
                        if let Some(held) = REFUSED_WARNING.allow() {
                            tracing::warn!(listener = name, %peer, cap, held_back = held, "connection refused at the listener's cap (listen.{cap})");
                        }
                        drop(stream);
                    }
                },
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was taken: wait
                    // a little rather than spin.
                    if let Some(held) = REFUSED_WARNING.allow() {
                        tracing::warn!(listener = name, error = %e, held_back = held, "accept failed");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => {
                if *shutdown.borrow() { break; }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !conns.is_empty() {
        if tokio::time::timeout_at(deadline, conns.join_next())
            .await
            .is_err()
        {
            conns.abort_all();
            break;
        }
    }
}

static HANDSHAKE_WARNING: RateLimited = RateLimited::new(Duration::from_secs(5));

/// A TLS connection: the handshake within the header timeout, then HTTP over the session.
#[expect(
    clippy::too_many_arguments,
    reason = "one connection's parts, passed once from the accept loop"
)]
async fn tls_connection(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    shutdown: watch::Receiver<bool>,
    place: Admitted,
    metrics: Arc<Metrics>,
) {
    let _ = stream.set_nodelay(true);
    let why = match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await {
        Ok(Ok(session)) => {
            // rustls verified the chain, its dates and its serial against the revocation list
            // before the handshake finished; what it names is read once per connection.
            let client = session
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|der| client_cert::read(der).ok())
                .map(|c| PeerCertificate(Arc::new(c)));
            return connection(session, peer, client, app, limits, shutdown, place).await;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "the handshake did not finish within listen.header_timeout_ms".to_string(),
    };
    metrics.tls_handshake_failures.inc();
    if let Some(held) = HANDSHAKE_WARNING.allow() {
        tracing::info!(%peer, error = %why, held_back = held, "TLS handshake failed; connection closed");
    }
}

/// The verified client certificate of a TLS connection, on each of its requests.
#[derive(Clone, Debug)]
pub struct PeerCertificate(pub Arc<ClientCert>);

async fn connection<S>(
    stream: S,
    peer: SocketAddr,
    client: Option<PeerCertificate>,
    app: Router,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    _place: Admitted,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(WriteTimeout::new(stream, limits.write_timeout));
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        if let Some(c) = &client {
            req.extensions_mut().insert(c.clone());
        }
        app.clone().oneshot(req.map(axum::body::Body::new))
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(64 * 1024);
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "connection closed");
            }
        }
        () = async { while !*shutdown.borrow_and_update() { if shutdown.changed().await.is_err() { break; } } } => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
        }
    }
}

/// A socket whose writes fail once one has waited `timeout` for the client to read.
pub struct WriteTimeout<T> {
    inner: T,
    timeout: Duration,
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteTimeout<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, timeout: Duration) -> WriteTimeout<T> {
        WriteTimeout {
            inner,
            timeout,
            waiting: None,
        }
    }

    /// On a pending write: `Ready(Err)` once the wait passed the timeout.
    fn pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        let t = self.timeout;
        let s = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(t)));
        match s.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client did not read for the write timeout",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                self.waiting = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.pending(cx).map(Err),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(r) => {
                self.waiting = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.pending(cx).map(Err),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

use std::future::Future as _;

/// A request id: `BOOT-N`, echoed in `x-request-id` and in every error body.
#[derive(Clone)]
pub struct RequestIds {
    boot: u64,
    next: Arc<AtomicU64>,
}

impl RequestIds {
    /// Ids for the start with this boot epoch.
    pub fn new(boot: u64) -> RequestIds {
        RequestIds {
            boot,
            next: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl tower_http::request_id::MakeRequestId for RequestIds {
    fn make_request_id<B>(
        &mut self,
        _request: &hyper::Request<B>,
    ) -> Option<tower_http::request_id::RequestId> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        axum::http::HeaderValue::from_str(&format!("{}-{n}", self.boot))
            .ok()
            .map(tower_http::request_id::RequestId::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_in_all_and_per_peer_and_free_on_drop() {
        let m = Arc::new(Metrics::new());
        let open = Arc::new(Mutex::new(Open::default()));
        let limits = Limits {
            max_connections: 3,
            max_per_peer: 2,
            header_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(1),
        };
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = admit(&open, a, &limits, &m).unwrap();
        let _a2 = admit(&open, a, &limits, &m).unwrap();
        assert_eq!(
            admit(&open, a, &limits, &m).err(),
            Some("max_connections_per_peer")
        );
        let _b1 = admit(&open, b, &limits, &m).unwrap();
        assert_eq!(admit(&open, b, &limits, &m).err(), Some("max_connections"));
        drop(a1);
        assert!(admit(&open, b, &limits, &m).is_ok());
    }

    #[test]
    fn warnings_are_rate_limited() {
        let r = RateLimited::new(Duration::from_secs(60));
        assert_eq!(r.allow(), Some(0));
        assert_eq!(r.allow(), None);
        assert_eq!(r.allow(), None);
    }

    #[tokio::test]
    async fn a_write_to_a_client_that_never_reads_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        let mut w = WriteTimeout::new(server, Duration::from_millis(200));
        let chunk = vec![0u8; 64 * 1024];
        let t0 = Instant::now();
        let err = loop {
            if let Err(e) = tokio::io::AsyncWriteExt::write_all(&mut w, &chunk).await {
                break e;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "never timed out");
        };
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        drop(client);
    }
}
