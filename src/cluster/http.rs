//! A minimal HTTP/1 client over hyper's connection API: a timeout on the connect and on the
//! response head, bodies of any `http_body::Body`. Used for the nodes' internal endpoint and
//! forwarding a client's request to a replica; etcd's gRPC client takes its streams from here
//! ([`open_via`]: TCP, and TLS over it) and speaks HTTP/2 over them itself.
//!
//! A request whose answer is read whole ([`Peers::post`]: a decide, a drop, a catch-up's
//! asks) goes over a kept-alive connection from a [`Pool`] when one is idle, and leaves its
//! connection there for the next; a connection idle longer than [`IDLE_FOR`] is not reused
//! (the peer's keep-alive timeout may close it meanwhile). A request sent on a pooled
//! connection that hyper reports was never written goes over a new one; one that may have
//! been written is not sent again. A request whose answer streams or is held open (the
//! prepare, whose connection closing tells the replica the push is gone; a pack stream; a
//! forwarded request) has a connection of its own, as before.
//!
//! Each request goes over a [`Transport`]: plain HTTP, or TLS with one configuration (the
//! cluster CA and this node's certificate between nodes, `--cluster-ca`; etcd's CA and client
//! certificate, `--etcd-ca`). A transport speaks only its own scheme: with TLS configured an
//! `http://` URL is refused, never sent in the clear, and without it an `https://` one is.
//! Requests to other nodes go through [`Peers`], which the node's `Cluster` owns: each names
//! the node it is meant for, whose certificate must name it (`berth-node:<name>`, checked
//! after the handshake), and carries this node's name ([`NODE_HEADER`]), which the peer's
//! node listener checks against this node's certificate, and the cluster secret
//! ([`SECRET_HEADER`]), set on the connection here rather than by each caller. etcd's client
//! holds its own [`Transport`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, Response, Uri};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

/// Why a request to another process failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL is not `http://host:port/...` or `https://host:port/...`.
    #[error("bad URL '{0}'")]
    Url(String),
    /// An `http://` URL where TLS is configured: refused, not sent in the clear.
    #[error("refusing plain HTTP to {0}: TLS is configured for it (an https:// URL is needed)")]
    NotTls(String),
    /// An `https://` URL where no TLS is configured.
    #[error("{0} is https://, but no CA is configured for it (--cluster-ca or --etcd-ca)")]
    NoTls(String),
    /// The TLS handshake failed (a certificate not chained to the CA, none presented, a name
    /// the certificate does not cover).
    #[error("TLS handshake with {0} failed: {1}")]
    Handshake(String, std::io::Error),
    /// The peer's certificate, of the cluster CA, names another node than the one meant.
    #[error("{url} presents the certificate of node {presented}, not of {meant}")]
    WrongNode {
        /// Where it was reached.
        url: String,
        /// The node meant.
        meant: String,
        /// What its certificate names (`berth-node:` URIs), `none` when nothing.
        presented: String,
    },
    /// Connecting failed.
    #[error("cannot connect to {0}: {1}")]
    Connect(String, std::io::Error),
    /// No answer in time.
    #[error("{0}: timed out")]
    Timeout(String),
    /// The HTTP exchange failed (with its causes: a TLS alert from the peer, a reset).
    #[error("{}: {}", .0, causes(.1))]
    Http(String, hyper::Error),
    /// The answer is larger than the caller accepts.
    #[error("{0}: response larger than {1} bytes")]
    TooLarge(String, usize),
}

/// `e` and its sources, `: `-separated (hyper's own text alone says "connection error").
fn causes(e: &hyper::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// How a request goes: in the clear, or over TLS with this configuration.
#[derive(Debug, Clone, Default)]
pub enum Transport {
    /// Plain HTTP (`http://` URLs only).
    #[default]
    Plain,
    /// TLS (`https://` URLs only).
    Tls(Arc<tokio_rustls::rustls::ClientConfig>),
}

/// The header naming the node a request between nodes comes from; on a node listener it has
/// to be the node its client certificate names.
pub const NODE_HEADER: &str = "x-berth-node";

/// How this node reaches the others: plain HTTP, or mutual TLS with its [`NodeTls`] (the
/// configuration current when each connection starts). Every request carries this node's
/// name and the cluster secret, and over TLS reaches only a peer whose certificate names the node meant.
#[derive(Debug, Clone)]
pub struct Peers {
    from: Credentials,
    tls: Option<Arc<NodeTls>>,
    /// Kept-alive connections to the other nodes, shared by every clone.
    pool: Arc<Pool>,
}

/// What every request from this node to another carries: its name ([`NODE_HEADER`]) and the
/// cluster secret ([`SECRET_HEADER`]), set here once rather than by each caller.
#[derive(Debug, Clone)]
struct Credentials {
    me: axum::http::HeaderValue,
    secret: axum::http::HeaderValue,
}

use super::tls::NodeTls;
use super::wire::SECRET_HEADER;

impl Peers {
    /// Requests from node `me` with the cluster `secret`, over `tls` when given. `None` when
    /// `me` or `secret` cannot be a header value (a node name checked at join and the hex
    /// secret always can).
    pub fn new(me: &str, secret: &str, tls: Option<Arc<NodeTls>>) -> Option<Peers> {
        Some(Peers {
            from: Credentials {
                me: me.parse().ok()?,
                secret: secret.parse().ok()?,
            },
            tls,
            pool: Arc::new(Pool::default()),
        })
    }

    fn transport(&self) -> Transport {
        match &self.tls {
            None => Transport::Plain,
            Some(t) => Transport::Tls(t.client()),
        }
    }

    /// Connect to node `node` at `url`; no time bound of its own.
    pub async fn connect(&self, node: &str, url: &str) -> Result<Connection, Error> {
        let mut conn = connect_checked(&self.transport(), url, Some(node)).await?;
        conn.from = Some(self.from.clone());
        Ok(conn)
    }

    /// Send `req` to node `node` (its URI absolute) and return the response head with its
    /// body streaming; `timeout` bounds the connect and the wait for the response head.
    pub async fn send(
        &self,
        node: &str,
        req: Request<Body>,
        timeout: Duration,
    ) -> Result<Response<Incoming>, Error> {
        let shown = req.uri().to_string();
        let work = async {
            let conn = self.connect(node, &shown).await?;
            conn.send(req).await
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout(shown)),
        }
    }

    /// POST `body` to node `node`'s `url` and read the whole answer (status, at most `max`
    /// bytes).
    pub async fn post(
        &self,
        node: &str,
        url: &str,
        body: Bytes,
        max: usize,
        timeout: Duration,
    ) -> Result<(u16, Bytes), Error> {
        let req = post_request(url, &[], body)?;
        let transport = self.transport();
        let target = Target::of(&transport, url, Some(node))?;
        exchange(&self.pool, &target, Some(&self.from), req, max, timeout).await
    }

    /// POST `body` to node `node`'s `url`: a `200` answer's first line (at most `max` bytes,
    /// within `timeout`) with the rest of its body, held open (dropped, the connection closes
    /// and the server learns it); any other answer read whole, without a rest.
    pub async fn post_held(
        &self,
        node: &str,
        url: &str,
        body: Bytes,
        max: usize,
        timeout: Duration,
    ) -> Result<(u16, Bytes, Option<Incoming>), Error> {
        let req = post_request(url, &[], body)?;
        let deadline = tokio::time::Instant::now() + timeout;
        let resp = self.send(node, req, timeout).await?;
        let status = resp.status().as_u16();
        let mut rest = resp.into_body();
        if status != 200 {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let body = read_body(rest, max, left, url).await?;
            return Ok((status, body, None));
        }
        let mut line = Vec::new();
        while !line.contains(&b'\n') {
            let frame = match tokio::time::timeout_at(deadline, rest.frame()).await {
                Err(_) => return Err(Error::Timeout(url.to_owned())),
                Ok(None) => return Ok((status, Bytes::from(line), None)),
                Ok(Some(f)) => f.map_err(|e| Error::Http(url.to_owned(), e))?,
            };
            if let Ok(data) = frame.into_data() {
                line.extend_from_slice(&data);
            }
            if line.len() > max {
                return Err(Error::TooLarge(url.to_owned(), max));
            }
        }
        Ok((status, Bytes::from(line), Some(rest)))
    }
}

/// `base` (`http://host:port`, maybe with a trailing `/`) joined with `path_and_query`.
pub fn join(base: &str, path_and_query: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path_and_query.trim_start_matches('/')
    )
}

/// A connection to a node, not yet used: the request that goes over it, with its body,
/// has not been touched (so a caller whose connect fails still holds its body).
pub struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Body>,
    authority: String,
    /// This node's name and the secret, on a connection to another node.
    from: Option<Credentials>,
}

/// A connection to `url`'s host and port (`http://host:port/...` plain, `https://…` over
/// TLS) over `transport`; over TLS, with `node`, the peer's certificate has to name that
/// node. No time bound of its own.
async fn connect_checked(
    transport: &Transport,
    url: &str,
    node: Option<&str>,
) -> Result<Connection, Error> {
    let (stream, authority) = open_checked(transport, url, node).await?;
    let sender = handshake(stream, url).await?;
    Ok(Connection {
        sender,
        authority,
        from: None,
    })
}

/// A byte stream to a peer: TCP, or TLS over it.
pub type Stream = TokioIo<
    tokio_util::either::Either<
        tokio::net::TcpStream,
        tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    >,
>;

/// A stream to `url`'s host and port over `transport` (TLS for `https://`), and its
/// `host:port`, for a protocol of the caller's own (etcd's gRPC speaks HTTP/2 over it); no
/// time bound of its own.
pub async fn open_via(transport: &Transport, url: &str) -> Result<(Stream, String), Error> {
    open_checked(transport, url, None).await
}

/// [`open_via`]; over TLS, with `node`, the peer's certificate has to name that node.
async fn open_checked(
    transport: &Transport,
    url: &str,
    node: Option<&str>,
) -> Result<(Stream, String), Error> {
    use tokio_util::either::Either;
    let uri: Uri = url.parse().map_err(|_| Error::Url(url.to_owned()))?;
    let (https, host, port) = host_port(&uri).ok_or_else(|| Error::Url(url.to_owned()))?;
    let authority = authority(&host, port);
    let tls = match (transport, https) {
        (Transport::Plain, false) => None,
        (Transport::Tls(config), true) => Some(config.clone()),
        (Transport::Plain, true) => return Err(Error::NoTls(url.to_owned())),
        (Transport::Tls(_), false) => return Err(Error::NotTls(url.to_owned())),
    };
    let stream = tokio::net::TcpStream::connect(&authority)
        .await
        .map_err(|e| Error::Connect(authority.clone(), e))?;
    let _ = stream.set_nodelay(true);
    let Some(config) = tls else {
        return Ok((TokioIo::new(Either::Left(stream)), authority));
    };
    let name = rustls_pki_types::ServerName::try_from(host.clone())
        .map_err(|_| Error::Url(url.to_owned()))?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|e| Error::Handshake(authority.clone(), e))?;
    if let Some(meant) = node {
        let presented = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| super::tls::node_names(c))
            .unwrap_or_default();
        if presented != [meant] {
            return Err(Error::WrongNode {
                url: url.to_owned(),
                meant: meant.to_owned(),
                presented: match presented.is_empty() {
                    true => "none".into(),
                    false => presented.join(","),
                },
            });
        }
    }
    Ok((TokioIo::new(Either::Right(stream)), authority))
}

/// HTTP/1 over `io`, its connection driven in the background.
async fn handshake<T>(
    io: TokioIo<T>,
    url: &str,
) -> Result<hyper::client::conn::http1::SendRequest<Body>, Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| Error::Http(url.to_owned(), e))?;
    tokio::spawn(async move {
        // An upgraded connection (the ssh tunnel) lives on in the response's upgrade.
        let _ = conn.with_upgrades().await;
    });
    Ok(sender)
}

impl Connection {
    /// Send `req` (its URI absolute, on this connection's host) and return the response head
    /// with its body streaming; no time bound of its own.
    pub async fn send(mut self, req: Request<Body>) -> Result<Response<Incoming>, Error> {
        let shown = req.uri().to_string();
        let req = origin_form(req, &self.authority, self.from.as_ref())?;
        self.sender
            .send_request(req)
            .await
            .map_err(|e| Error::Http(shown, e))
    }
}

/// `host:port`, an IPv6 host in brackets.
fn authority(host: &str, port: u16) -> String {
    match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    }
}

/// `req` (its URI absolute) as it goes on a connection to `authority`: its path and query
/// alone, the `Host` header, and from a node its name and the cluster secret.
fn origin_form(
    mut req: Request<Body>,
    authority: &str,
    from: Option<&Credentials>,
) -> Result<Request<Body>, Error> {
    let shown = req.uri().to_string();
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    *req.uri_mut() = pq.parse().map_err(|_| Error::Url(shown))?;
    if let Ok(v) = authority.parse() {
        req.headers_mut().insert(axum::http::header::HOST, v);
    }
    if let Some(from) = from {
        req.headers_mut().insert(NODE_HEADER, from.me.clone());
        req.headers_mut().insert(SECRET_HEADER, from.secret.clone());
    }
    Ok(req)
}

/// Read a whole body of at most `max` bytes within `timeout`.
pub async fn read_body(
    body: Incoming,
    max: usize,
    timeout: Duration,
    what: &str,
) -> Result<Bytes, Error> {
    let limited = http_body_util::Limited::new(body, max);
    match tokio::time::timeout(timeout, limited.collect()).await {
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) => {
            if e.is::<http_body_util::LengthLimitError>() {
                Err(Error::TooLarge(what.to_owned(), max))
            } else {
                match e.downcast::<hyper::Error>() {
                    Ok(h) => Err(Error::Http(what.to_owned(), *h)),
                    Err(_) => Err(Error::Timeout(what.to_owned())),
                }
            }
        }
        Err(_) => Err(Error::Timeout(what.to_owned())),
    }
}

/// The POST of `body` to `url` with `headers`.
fn post_request(url: &str, headers: &[(&str, &str)], body: Bytes) -> Result<Request<Body>, Error> {
    let mut b = Request::builder().method("POST").uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::from(body))
        .map_err(|_| Error::Url(url.to_owned()))
}

/// How long a connection may have been idle in a [`Pool`] and still be reused: well below any
/// keep-alive timeout a peer would have (berth's `--keepalive-timeout` is 60 s by default),
/// and long enough for the calls of one push to share one connection.
pub const IDLE_FOR: Duration = Duration::from_secs(1);

/// At most this many idle connections are kept per place.
const IDLE_PER_TARGET: usize = 16;

/// Kept-alive HTTP/1 connections, idle, by where they go; and how many were opened.
#[derive(Debug, Default)]
pub struct Pool {
    idle: Mutex<HashMap<Key, Vec<Idle>>>,
    opened: AtomicU64,
}

/// Where a pooled connection goes: the host and port, the scheme, over TLS the node its
/// certificate named and the configuration its handshake used (a reloaded certificate makes
/// new connections).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    authority: String,
    tls: Option<usize>,
    node: Option<String>,
}

/// An idle connection and since when.
#[derive(Debug)]
struct Idle {
    sender: hyper::client::conn::http1::SendRequest<Body>,
    since: Instant,
}

impl Pool {
    /// How many connections this pool's requests opened.
    #[cfg(test)]
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// An idle connection to `key` ready for a request, if one was kept.
    fn take(&self, key: &Key) -> Option<hyper::client::conn::http1::SendRequest<Body>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(key)?;
        // The most recently used first; older ones are dropped (closed) on the way.
        while let Some(c) = list.pop() {
            if c.since.elapsed() < IDLE_FOR && c.sender.is_ready() && !c.sender.is_closed() {
                return Some(c.sender);
            }
        }
        None
    }

    /// Keep `sender` for the next request to `key`.
    fn keep(&self, key: Key, sender: hyper::client::conn::http1::SendRequest<Body>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry(key).or_default();
        list.retain(|c| c.since.elapsed() < IDLE_FOR && !c.sender.is_closed());
        if list.len() < IDLE_PER_TARGET {
            list.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }
}

/// A URL's place, checked against the transport: what [`connect_checked`] would connect to.
#[derive(Debug)]
struct Target<'a> {
    transport: &'a Transport,
    url: &'a str,
    node: Option<&'a str>,
    key: Key,
}

impl<'a> Target<'a> {
    fn of(transport: &'a Transport, url: &'a str, node: Option<&'a str>) -> Result<Self, Error> {
        let uri: Uri = url.parse().map_err(|_| Error::Url(url.to_owned()))?;
        let (https, host, port) = host_port(&uri).ok_or_else(|| Error::Url(url.to_owned()))?;
        let tls = match (transport, https) {
            (Transport::Plain, false) => None,
            (Transport::Tls(config), true) => Some(Arc::as_ptr(config) as usize),
            (Transport::Plain, true) => return Err(Error::NoTls(url.to_owned())),
            (Transport::Tls(_), false) => return Err(Error::NotTls(url.to_owned())),
        };
        let key = Key {
            authority: authority(&host, port),
            tls,
            node: node.map(str::to_owned),
        };
        Ok(Target {
            transport,
            url,
            node,
            key,
        })
    }
}

/// `req` to `target`, over a pooled connection when one is idle, its answer read whole (at
/// most `max` bytes); `timeout` bounds the connect and the response head, and then the body.
/// The connection is kept for the next request once the answer is read.
async fn exchange(
    pool: &Pool,
    target: &Target<'_>,
    from: Option<&Credentials>,
    req: Request<Body>,
    max: usize,
    timeout: Duration,
) -> Result<(u16, Bytes), Error> {
    let url = target.url;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut req = origin_form(req, &target.key.authority, from)?;
    let work = async move {
        if let Some(mut sender) = pool.take(&target.key) {
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok((sender, resp)),
                Err(mut e) => match e.take_message() {
                    // Never written: a new connection takes it.
                    Some(back) => req = back,
                    None => return Err(Error::Http(url.to_owned(), e.into_error())),
                },
            }
        }
        let conn = connect_checked(target.transport, url, target.node).await?;
        pool.opened.fetch_add(1, Ordering::Relaxed);
        let mut sender = conn.sender;
        match sender.send_request(req).await {
            Ok(resp) => Ok((sender, resp)),
            Err(e) => Err(Error::Http(url.to_owned(), e)),
        }
    };
    let (mut sender, resp) = match tokio::time::timeout_at(deadline, work).await {
        Ok(r) => r?,
        Err(_) => return Err(Error::Timeout(url.to_owned())),
    };
    let status = resp.status().as_u16();
    // The body has a `timeout` of its own, as over a connection of its own.
    let body = read_body(resp.into_body(), max, timeout, url).await?;
    // Once the connection can take the next request (not when the peer said `close`).
    let ready = tokio::time::timeout(Duration::from_millis(100), sender.ready()).await;
    if let Ok(Ok(())) = ready {
        pool.keep(target.key.clone(), sender);
    }
    Ok((status, body))
}

/// Whether `uri` is https, its host (an IPv6 address without its brackets) and port.
fn host_port(uri: &Uri) -> Option<(bool, String, u16)> {
    let https = match uri.scheme_str()? {
        "http" => false,
        "https" => true,
        _ => return None,
    };
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    Some((https, host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_of_http_https_and_ipv6() {
        let hp = |u: &str| host_port(&u.parse().unwrap());
        assert_eq!(hp("http://a:1/x"), Some((false, "a".into(), 1)));
        assert_eq!(hp("https://a/x"), Some((true, "a".into(), 443)));
        assert_eq!(hp("https://[::1]:9/"), Some((true, "::1".into(), 9)));
        assert_eq!(hp("ftp://a/"), None);
    }

    /// A server on loopback answering `ok` to everything (with `Connection: close` when
    /// `close`): its URL and how many connections it accepted.
    async fn counting_server(close: bool) -> (String, Arc<AtomicU64>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let n = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                n.fetch_add(1, Ordering::Relaxed);
                let svc = hyper::service::service_fn(move |_req: Request<Incoming>| async move {
                    let mut r = Response::new(http_body_util::Full::new(Bytes::from_static(b"ok")));
                    if close {
                        r.headers_mut()
                            .insert("connection", "close".parse().unwrap());
                    }
                    Ok::<_, std::convert::Infallible>(r)
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc),
                );
            }
        });
        (format!("http://{addr}/x"), accepted)
    }

    async fn post(pool: &Pool, url: &str) -> (u16, Bytes) {
        let req = post_request(url, &[], Bytes::from_static(b"q")).unwrap();
        let target = Target::of(&Transport::Plain, url, None).unwrap();
        let timeout = Duration::from_secs(30);
        exchange(pool, &target, None, req, 64, timeout)
            .await
            .unwrap()
    }

    /// `n` requests through one pool to a server that closes each connection (`close`) or
    /// keeps it alive: every answer is `ok`; how many connections the server accepted and the
    /// pool opened.
    async fn connections_for(close: bool, n: usize) -> (u64, u64) {
        let (url, accepted) = counting_server(close).await;
        let pool = Pool::default();
        for _ in 0..n {
            assert_eq!(post(&pool, &url).await, (200, Bytes::from_static(b"ok")));
        }
        (accepted.load(Ordering::Relaxed), pool.opened())
    }

    #[tokio::test]
    async fn answers_read_whole_share_one_kept_alive_connection() {
        assert_eq!(connections_for(false, 5).await, (1, 1));
    }

    #[tokio::test]
    async fn a_connection_the_peer_closes_is_not_reused() {
        assert_eq!(connections_for(true, 3).await, (3, 3));
    }

    #[tokio::test]
    async fn a_transport_refuses_the_other_scheme() {
        let r = open_via(&Transport::Plain, "https://127.0.0.1:1/").await;
        assert!(matches!(r, Err(Error::NoTls(_))), "{:?}", r.err());
        let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(tokio_rustls::rustls::RootCertStore::empty())
        .with_no_client_auth();
        let tls = Transport::Tls(Arc::new(config));
        let r = open_via(&tls, "http://127.0.0.1:1/").await;
        assert!(matches!(r, Err(Error::NotTls(_))), "{:?}", r.err());
    }
}
