//! Connections: berth's own accept loop on hyper's HTTP/1.1 server (axum's `serve` hides the
//! knobs a server on a network needs), with
//! - a cap on open connections that keeps the server answering: at the cap, the connection
//!   that has waited longest for a request (or is still in its TLS handshake) is closed to make
//!   room (a flood of idle sockets cannot lock everyone out), and only when none is idle does a
//!   newcomer get a 503;
//! - the same per client address (`--max-connections-per-address`, `per_address.rs`): at its
//!   cap, the address's own longest-idle connection makes room, else the newcomer gets a 503;
//! - a header-read timeout (from the first byte of a request to its last header line) and a
//!   keep-alive idle timeout (from the end of one response, or the accept, to the next request);
//! - a write timeout: a client that stops reading the response is dropped;
//! - a minimum send rate (`--min-send-rate`, judged by `rate.rs`): a client reading slower is
//!   dropped, and the slot its response held (a `git upload-pack`) is freed;
//! - optional TLS (rustls), whose handshake runs under the header-read timeout.
//!
//! Body-level limits (minimum rate, size) are in [`super::session::body_reader`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::per_address::{AddrGroup, Over, Scope};
use super::*;

/// Timeouts and caps on connections (see [`Limits`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct ConnLimits {
    pub(super) header_read: Duration,
    pub(super) keepalive: Duration,
    pub(super) write: Duration,
    pub(super) send_rate: rate::MinRate,
}

/// What the accept loop and a connection's I/O share.
pub(super) struct ConnState {
    /// Requests whose response is not done yet.
    in_flight: AtomicUsize,
    /// Whether a request was served (then the wait for the next is keep-alive, not header read).
    served: std::sync::atomic::AtomicBool,
    /// Since when the connection waits for a request (meaningful while `in_flight` is 0).
    idle_since: Mutex<Instant>,
    /// Told to close by the accept loop (eviction at the connection cap).
    evict: tokio::sync::Notify,
    /// The client's address, for the per-address cap.
    key: AddrGroup,
    /// Chosen for eviction already (not chosen again while it closes).
    evicted: std::sync::atomic::AtomicBool,
    /// The connection's reader, parked while a request was in flight: woken when the request
    /// ends so that the wait for the next one is timed.
    read_waker: Mutex<Option<std::task::Waker>>,
}

impl ConnState {
    fn new(key: AddrGroup) -> Self {
        ConnState {
            key,
            evicted: Default::default(),
            in_flight: AtomicUsize::new(0),
            served: Default::default(),
            idle_since: Mutex::new(Instant::now()),
            evict: tokio::sync::Notify::new(),
            read_waker: Mutex::new(None),
        }
    }
    fn idle(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::Acquire) == 0)
            .then(|| *self.idle_since.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Counts a request in flight until its response body is done or dropped.
struct RequestGuard {
    state: Arc<ConnState>,
    done: std::sync::atomic::AtomicBool,
}

impl RequestGuard {
    fn new(state: Arc<ConnState>) -> Self {
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        RequestGuard {
            state,
            done: Default::default(),
        }
    }
    fn done(&self) {
        if !self.done.swap(true, Ordering::AcqRel) {
            let s = &self.state;
            *s.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
            s.served.store(true, Ordering::Release);
            s.in_flight.fetch_sub(1, Ordering::AcqRel);
            if let Some(w) = s
                .read_waker
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                w.wake();
            }
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.done();
    }
}

/// A request's handle on its connection (a request extension): a connection upgraded to a
/// tunnel is kept busy with [`Hold::busy`], so the keep-alive timeout does not cut it; the
/// write timeout still applies.
#[derive(Clone)]
pub(super) struct Hold(Arc<ConnState>);

/// The connection counts as serving a request while this lives.
pub(super) struct Busy(#[allow(dead_code)] RequestGuard);

impl Hold {
    pub(super) fn busy(&self) -> Busy {
        Busy(RequestGuard::new(self.0.clone()))
    }
}

/// A response body that ends the request's time in flight when it ends.
struct GuardedBody {
    inner: Body,
    guard: RequestGuard,
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = axum::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = r {
            self.guard.done();
        }
        r
    }
    fn is_end_stream(&self) -> bool {
        // hyper may ask this instead of polling a body it knows the length of.
        let end = self.inner.is_end_stream();
        if end {
            self.guard.done();
        }
        end
    }
    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's byte stream with the header-read, keep-alive and write timeouts.
struct Guarded<T> {
    io: T,
    state: Arc<ConnState>,
    limits: ConnLimits,
    /// When the first byte of the awaited request arrived, in the current idle period.
    head_started: Option<(Instant, Instant)>,
    read_timer: Option<Pin<Box<Sleep>>>,
    write_timer: Option<Pin<Box<Sleep>>>,
    /// `--min-send-rate`: the current window, since when the pending write waits, and the
    /// timer that judges the window when the client reads nothing at all.
    send: rate::Window,
    send_pending: Option<Instant>,
    send_timer: Option<Pin<Box<Sleep>>>,
    metrics: Arc<Metrics>,
}

impl<T> Guarded<T> {
    fn read_deadline(&mut self) -> Option<Instant> {
        let idle = self.state.idle()?;
        if let Some((period, first)) = self.head_started
            && period == idle
        {
            return Some(first + self.limits.header_read);
        }
        let wait = if self.state.served.load(Ordering::Acquire) {
            self.limits.keepalive
        } else {
            self.limits.header_read
        };
        Some(idle + wait)
    }

    fn arm(timer: &mut Option<Pin<Box<Sleep>>>, deadline: Instant, cx: &mut Context<'_>) -> bool {
        let deadline = tokio::time::Instant::from_std(deadline);
        let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if t.deadline() != deadline {
            t.as_mut().reset(deadline);
        }
        t.as_mut().poll(cx).is_ready()
    }

    /// A write could not proceed: whether the client has stopped reading for too long.
    fn write_timed_out(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = match &self.write_timer {
            Some(t) => t.deadline().into_std(),
            None => Instant::now() + self.limits.write,
        };
        let out = Self::arm(&mut self.write_timer, deadline, cx);
        if out {
            self.metrics.timeout("write");
        }
        out
    }

    /// A write (or flush) is pending on the client: whether the send-rate window it waits in
    /// is over with too few bytes sent.
    fn send_too_slow(&mut self, cx: &mut Context<'_>) -> bool {
        let rate = self.limits.send_rate;
        loop {
            let since = *self.send_pending.get_or_insert_with(Instant::now);
            let rate::Verdict::Open(left) = self.send.record(rate, 0, Duration::ZERO) else {
                return true;
            };
            if left == Duration::MAX {
                return false;
            }
            if !Self::arm(&mut self.send_timer, since + left, cx) {
                return false;
            }
            // The window's waiting is used up: judge it (a new window waits from now).
            let now = Instant::now();
            self.send_pending = Some(now);
            if self.send.record(rate, 0, now - since) == rate::Verdict::TooSlow {
                return true;
            }
        }
    }

    /// A write (or flush) went through after waiting since `send_pending`: count it, and
    /// whether the window it ends was too slow.
    fn sent(&mut self, n: usize) -> bool {
        let waited = self
            .send_pending
            .take()
            .map_or(Duration::ZERO, |t| t.elapsed());
        self.write_timer = None;
        self.send.record(self.limits.send_rate, n as u64, waited) == rate::Verdict::TooSlow
    }

    /// The outcome of a write or flush of the underlying stream, under the write timeout and
    /// the minimum send rate.
    fn after_write<R>(
        &mut self,
        r: Poll<io::Result<R>>,
        n: impl FnOnce(&R) -> usize,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        match r {
            Poll::Pending if self.send_too_slow(cx) => {
                self.metrics.timeout("send_rate");
                Poll::Ready(Err(send_too_slow()))
            }
            Poll::Pending if self.write_timed_out(cx) => Poll::Ready(Err(write_timeout())),
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(v)) => {
                if self.sent(n(&v)) {
                    self.metrics.timeout("send_rate");
                    return Poll::Ready(Err(send_too_slow()));
                }
                Poll::Ready(Ok(v))
            }
            r => {
                self.write_timer = None;
                r
            }
        }
    }
}

fn send_too_slow() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "client reads slower than --min-send-rate",
    )
}

fn write_timeout() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "client stopped reading (write timeout)",
    )
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before
                    && let Some(idle) = this.state.idle()
                    && this.head_started.is_none_or(|(p, _)| p != idle)
                {
                    this.head_started = Some((idle, Instant::now()));
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                match this.read_deadline() {
                    Some(deadline) => {
                        if Self::arm(&mut this.read_timer, deadline, cx) {
                            let header = this
                                .head_started
                                .is_some_and(|(p, _)| Some(p) == this.state.idle())
                                || !this.state.served.load(Ordering::Acquire);
                            this.metrics
                                .timeout(if header { "header_read" } else { "keepalive" });
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "no request in time",
                            )));
                        }
                    }
                    None => {
                        this.read_timer = None;
                        *this
                            .state
                            .read_waker
                            .lock()
                            .unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.after_write(r, |n| *n, cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.after_write(r, |n| *n, cx)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.after_write(r, |_| 0, cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The open connections, for eviction at the cap.
#[derive(Default)]
struct Open {
    next: u64,
    conns: HashMap<u64, Arc<ConnState>>,
}

/// The default connection cap: a quarter of the descriptors the process may open (after
/// raising the soft limit to the hard one), between 8 and 10,000, so that pushes, packs, hooks
/// and `git upload-pack` still have descriptors when every connection is open.
pub fn default_max_connections() -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if let Some(hard) = lim.maximum
        && lim.current.is_some_and(|c| c < hard)
    {
        lim.current = Some(hard);
        let _ = setrlimit(Resource::Nofile, lim);
    }
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(1 << 20);
    ((soft / 4) as usize).clamp(8, 10_000)
}

/// A listener's TLS: the public one's (`--tls-cert`, fixed), or the node listener's (mutual
/// TLS with the cluster CA; the acceptor current at each connection, read again on SIGHUP).
pub(super) enum Tls {
    Public(tokio_rustls::TlsAcceptor),
    Node(Arc<crate::cluster::tls::NodeTls>),
}

impl Tls {
    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        match self {
            Tls::Public(a) => a.clone(),
            Tls::Node(t) => t.acceptor(),
        }
    }
}

/// On the node listener, the nodes the client's certificate names (`berth-node:` URIs),
/// in every request's extensions.
#[derive(Debug, Clone)]
pub(super) struct PeerNodes(pub(super) Vec<String>);

/// Accept connections on `listener` and serve `app` on each until `shutdown` resolves; then
/// stop accepting, ask every connection to finish its request in flight, and wait for them.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    server: Arc<Server>,
    tls: Option<Tls>,
    shutdown: impl Future<Output = ()>,
) {
    let limits = server.conn_limits;
    let max = server.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let open = Arc::new(Mutex::new(Open::default()));
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, remote) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors (EMFILE/ENFILE) or a connection reset before accept:
                    // wait a little rather than spin, and keep serving the connections we have.
                    tracing::warn!(target: "berth::serve", error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        while tasks.try_join_next().is_some() {}
        let ip = remote.ip();
        let key = AddrGroup::of(ip);
        let per_address = &server.per_address.connections;
        // The address's own cap first: its longest-idle connection makes room.
        let address = match per_address.try_acquire(ip) {
            Ok(p) => p,
            Err(Over) => match make_room(&open, Scope::Address(key), &server.metrics) {
                Room::Made => {
                    match tokio::time::timeout(EVICTION_WAIT, per_address.acquire(ip)).await {
                        Ok(Ok(p)) => p,
                        _ => {
                            busy(stream, tls.is_some(), Full::Address);
                            continue;
                        }
                    }
                }
                Room::None => {
                    server.metrics.rejected_connections.inc();
                    busy(stream, tls.is_some(), Full::Address);
                    continue;
                }
            },
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            // At the cap: close the connection that has waited longest for a request.
            Err(_) => match make_room(&open, Scope::Any, &server.metrics) {
                Room::Made => {
                    match tokio::time::timeout(EVICTION_WAIT, slots.clone().acquire_owned()).await {
                        Ok(Ok(p)) => p,
                        _ => {
                            busy(stream, tls.is_some(), Full::Server);
                            continue;
                        }
                    }
                }
                Room::None => {
                    server.metrics.rejected_connections.inc();
                    busy(stream, tls.is_some(), Full::Server);
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let state = Arc::new(ConnState::new(key));
        let id = {
            let mut o = open.lock().unwrap_or_else(|e| e.into_inner());
            o.next += 1;
            let id = o.next;
            o.conns.insert(id, state.clone());
            id
        };
        let app = app.clone();
        let open = open.clone();
        let node_listener = matches!(tls, Some(Tls::Node(_)));
        let tls = tls.as_ref().map(Tls::acceptor);
        let mut closing = closing_rx.clone();
        let metrics = server.metrics.clone();
        tasks.spawn(async move {
            let _permit = (permit, address);
            metrics.open_connections.inc();
            let handshake = async {
                match tls {
                    None => Some(Io::Plain(stream)),
                    // A handshake in progress may be evicted, as a connection waiting for its
                    // first request may.
                    Some(acceptor) => tokio::select! {
                        r = tokio::time::timeout(limits.header_read, acceptor.accept(stream)) => {
                            match r {
                                Ok(Ok(s)) => Some(Io::Tls(Box::new(s))),
                                _ => None,
                            }
                        }
                        _ = state.evict.notified() => None,
                    },
                }
            };
            if let Some(io) = handshake.await {
                let peer = match (&io, node_listener) {
                    (Io::Tls(s), true) => Some(PeerNodes(
                        s.get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .map(|c| crate::cluster::tls::node_names(c))
                            .unwrap_or_default(),
                    )),
                    _ => None,
                };
                serve_connection(
                    io,
                    peer,
                    remote,
                    app,
                    state.clone(),
                    limits,
                    &mut closing,
                    &metrics,
                )
                .await;
            }
            metrics.open_connections.dec();
            open.lock()
                .unwrap_or_else(|e| e.into_inner())
                .conns
                .remove(&id);
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    while tasks.join_next().await.is_some() {}
}

/// A plain or TLS stream.
enum Io {
    Plain(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>),
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, b),
            Io::Tls(s) => Pin::new(s).poll_write(cx, b),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, b),
            Io::Tls(s) => Pin::new(s).poll_write_vectored(cx, b),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// How long a newcomer waits for an evicted connection to close.
const EVICTION_WAIT: Duration = Duration::from_millis(500);

/// Whether [`make_room`] found a connection to close.
enum Room {
    Made,
    None,
}

/// Ask the connection in `scope` that has waited longest for a request (or is in its TLS
/// handshake) to close.
fn make_room(open: &Mutex<Open>, scope: Scope, metrics: &Metrics) -> Room {
    let open = open.lock().unwrap_or_else(|e| e.into_inner());
    let candidates = open.conns.iter().filter_map(|(id, c)| {
        (!c.evicted.load(Ordering::Acquire))
            .then(|| c.idle())
            .flatten()
            .map(|t| (*id, c.key, t))
    });
    match per_address::victim(candidates, scope).and_then(|id| open.conns.get(&id)) {
        Some(v) => {
            v.evicted.store(true, Ordering::Release);
            v.evict.notify_one();
            metrics.timeout("evicted");
            Room::Made
        }
        None => Room::None,
    }
}

/// Which cap a refused connection is over.
#[derive(Debug, Clone, Copy)]
enum Full {
    /// `--max-connections`.
    Server,
    /// `--max-connections-per-address`.
    Address,
}

/// The answer to a connection over a cap: a 503 written without waiting (the socket's send
/// buffer is empty), then closed. A TLS client just sees the close.
fn busy(stream: tokio::net::TcpStream, tls: bool, full: Full) {
    if !tls {
        let text = match full {
            Full::Server => "server busy: too many open connections\r\n",
            Full::Address => "server busy: too many open connections from your address\r\n",
        };
        let _ = stream.try_write(
            format!(
                "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            )
            .as_bytes(),
        );
    }
}

#[allow(clippy::too_many_arguments)]
async fn serve_connection(
    io: Io,
    peer: Option<PeerNodes>,
    remote: SocketAddr,
    app: axum::Router,
    state: Arc<ConnState>,
    limits: ConnLimits,
    closing: &mut tokio::sync::watch::Receiver<bool>,
    metrics: &Arc<Metrics>,
) {
    use tower::ServiceExt;
    let io = Guarded {
        io,
        state: state.clone(),
        limits,
        head_started: None,
        read_timer: None,
        write_timer: None,
        send: rate::Window::default(),
        send_pending: None,
        send_timer: None,
        metrics: metrics.clone(),
    };
    let svc_state = state.clone();
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let app = app.clone();
        let guard = RequestGuard::new(svc_state.clone());
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(remote));
        req.extensions_mut().insert(Hold(svc_state.clone()));
        if let Some(p) = &peer {
            req.extensions_mut().insert(p.clone());
        }
        async move {
            let resp = app
                .oneshot(req.map(Body::new))
                .await
                .unwrap_or_else(|e| match e {});
            Ok::<_, std::convert::Infallible>(resp.map(|inner| GuardedBody { inner, guard }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        // berth's own header-read timeout (above) also covers the keep-alive wait.
        .header_read_timeout(None)
        .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
        // The internal ssh tunnel (`/_berth/cluster/ssh`) takes the connection over.
        .with_upgrades();
    tokio::pin!(conn);
    let mut shutting_down = *closing.borrow();
    if shutting_down {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(target: "berth::serve", remote = %remote, error = %e, "connection closed");
                }
                return;
            }
            _ = state.evict.notified() => {
                if state.idle().is_some() {
                    return;
                }
            }
            r = closing.changed(), if !shutting_down => {
                if r.is_err() || *closing.borrow() {
                    shutting_down = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}
