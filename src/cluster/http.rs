//! A minimal HTTP/1 client over hyper's connection API: one TCP connection per request, a
//! timeout on the connect and on the response head, bodies of any `http_body::Body`. Used for
//! etcd's JSON gateway, the nodes' internal endpoint and forwarding a client's request to a
//! replica. Plain HTTP only (loopback or a private network; TLS between nodes is not done).

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response, Uri};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

/// Why a request to another process failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL is not `http://host:port/...`.
    #[error("bad URL '{0}'")]
    Url(String),
    /// Connecting failed.
    #[error("cannot connect to {0}: {1}")]
    Connect(String, std::io::Error),
    /// No answer in time.
    #[error("{0}: timed out")]
    Timeout(String),
    /// The HTTP exchange failed.
    #[error("{0}: {1}")]
    Http(String, hyper::Error),
    /// The answer is larger than the caller accepts.
    #[error("{0}: response larger than {1} bytes")]
    TooLarge(String, usize),
}

/// `base` (`http://host:port`, maybe with a trailing `/`) joined with `path_and_query`.
pub fn join(base: &str, path_and_query: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path_and_query.trim_start_matches('/')
    )
}

/// Send `req` (its URI absolute: `http://host:port/path`) and return the response head with its
/// body streaming; `timeout` bounds the connect and the wait for the response head.
pub async fn send(req: Request<Body>, timeout: Duration) -> Result<Response<Incoming>, Error> {
    let shown = req.uri().to_string();
    let work = async {
        let conn = connect(&shown).await?;
        conn.send(req).await
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout(shown)),
    }
}

/// A connection to a node, not yet used: the request that goes over it, with its body,
/// has not been touched (so a caller whose connect fails still holds its body).
pub struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Body>,
    authority: String,
}

/// Connect to `url`'s host and port (`http://host:port/...`); no time bound of its own.
pub async fn connect(url: &str) -> Result<Connection, Error> {
    let uri: Uri = url.parse().map_err(|_| Error::Url(url.to_owned()))?;
    let (host, port) = host_port(&uri).ok_or_else(|| Error::Url(url.to_owned()))?;
    let authority = format!("{host}:{port}");
    let stream = tokio::net::TcpStream::connect(&authority)
        .await
        .map_err(|e| Error::Connect(authority.clone(), e))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Error::Http(url.to_owned(), e))?;
    tokio::spawn(async move {
        // An upgraded connection (the ssh tunnel) lives on in the response's upgrade.
        let _ = conn.with_upgrades().await;
    });
    Ok(Connection { sender, authority })
}

impl Connection {
    /// Send `req` (its URI absolute, on this connection's host) and return the response head
    /// with its body streaming; no time bound of its own.
    pub async fn send(mut self, mut req: Request<Body>) -> Result<Response<Incoming>, Error> {
        let shown = req.uri().to_string();
        let pq = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/".into());
        *req.uri_mut() = pq.parse().map_err(|_| Error::Url(shown.clone()))?;
        if let Ok(v) = self.authority.parse() {
            req.headers_mut().insert(axum::http::header::HOST, v);
        }
        self.sender
            .send_request(req)
            .await
            .map_err(|e| Error::Http(shown, e))
    }
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

/// POST `body` to `url` and read the whole answer (status, at most `max` bytes).
pub async fn post(
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
    max: usize,
    timeout: Duration,
) -> Result<(u16, Bytes), Error> {
    let req = post_request(url, headers, body)?;
    let resp = send(req, timeout).await?;
    let status = resp.status().as_u16();
    let body = read_body(resp.into_body(), max, timeout, url).await?;
    Ok((status, body))
}

/// POST `body` to `url`: a `200` answer's first line (at most `max` bytes, within `timeout`)
/// with the rest of its body, held open (dropped, the connection closes and the server learns
/// it); any other answer read whole, without a rest.
pub async fn post_held(
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
    max: usize,
    timeout: Duration,
) -> Result<(u16, Bytes, Option<Incoming>), Error> {
    let req = post_request(url, headers, body)?;
    let deadline = tokio::time::Instant::now() + timeout;
    let resp = send(req, timeout).await?;
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

fn host_port(uri: &Uri) -> Option<(String, u16)> {
    if uri.scheme_str() != Some("http") {
        return None;
    }
    let host = uri.host()?.to_owned();
    Some((host, uri.port_u16().unwrap_or(80)))
}
