//! Forwarding a client's git request (discovery, push, fetch) to a node that holds a replica
//! of the repository, when this node holds none or is behind the repository's log. The
//! request goes as it came (method, path, query, git's headers, the body, already inflated
//! when it came gzipped), marked with [`FORWARDED`] so that the replica serves it itself; the
//! replica's answer streams back as it comes.
//!
//! The repository's live replicas are tried in turn, in the order recorded at placement
//! (rendezvous order), until one answers: one that cannot be connected to (killed, still
//! listed until its lease expires) is passed over, and so is one that refuses a read because
//! it is behind the log (503 with [`BEHIND`]). A read's body (a fetch's negotiation: small)
//! is kept, up to [`REPLAY_MAX`] bytes, so that it can go to the next replica after any
//! failure before the answer's head (a refused connection, a timeout, a reset, "behind");
//! when none served and one said it is behind, the round is tried again, 200 ms apart, for up
//! to [`BEHIND_WAIT`] (an entry's decision on its way to every replica). A push's body, and a larger one, streams once: it goes to the next
//! replica only when connecting failed, before a byte of it was read, so a push is never sent
//! twice. Nothing served: the caller answers 503 with `Retry-After`.
//!
//! (ssh commands are forwarded through `tunnel.rs` instead.)
//!
//! The replica authenticates the request again (HTTP Basic passes through). It learns the
//! client's address from [`CLIENT`], which it believes only beside the cluster secret. A trusted user
//! header (`--trusted-user-header`) is only passed on as this node established it: the
//! client's own copy is dropped, since the replica trusts this node's address.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http_body_util::BodyExt;

use super::http;
use super::wire::SECRET_HEADER;
use crate::escape::Escaped;

/// Marks a request forwarded by another node (its value: that node's name).
pub(crate) const FORWARDED: &str = "x-berth-forwarded";

/// The address of the client a forwarded request came from, as the forwarding node saw it;
/// believed only beside the cluster secret (`Cluster::vouched_client`).
pub(crate) const CLIENT: &str = "x-berth-client";

/// Marks a replica's refusal to serve a forwarded read because it is behind the log (on a
/// 503; its value: `<applied>/<log head>`).
pub(crate) const BEHIND: &str = "x-berth-behind";

/// The largest request body kept to be sent again to another replica.
pub(crate) const REPLAY_MAX: usize = 1 << 20;

/// How long the rounds over the replicas go on while every one says it is behind (HTTP here,
/// ssh in `ssh/tunnel.rs`).
pub(crate) const BEHIND_WAIT: Duration = Duration::from_secs(2);

/// The pause between two such rounds.
pub(crate) const BEHIND_PAUSE: Duration = Duration::from_millis(200);

/// The longest wait for a replica's TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Headers that are the connection's, not the request's.
const HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "host",
    "content-length",
    "content-encoding",
];

/// How a request is forwarded.
pub(crate) struct Forwarding<'a> {
    /// This node's name (the [`FORWARDED`] header's value).
    pub(crate) node: &'a str,
    /// How this node reaches the replicas.
    pub(crate) peers: &'a super::http::Peers,
    /// The trusted user header and the user this node established, if any.
    pub(crate) trusted_user: Option<(&'a header::HeaderName, &'a str)>,
    /// Bounds the wait for a replica's answer head.
    pub(crate) timeout: Duration,
    /// Bounds the wait for each piece of the client's body while it is kept.
    pub(crate) idle: Duration,
    /// Whether the request may go to another replica after a failure (not a push's POST).
    pub(crate) replayable: bool,
    /// The client's address and the cluster secret that vouches for it to the replica, so
    /// that its per-address limits, log and hooks see the client, not this node.
    pub(crate) client: Vouch,
}

/// A client's address, vouched for by this node (made by `Cluster::vouch`; the replica
/// believes it beside the cluster secret, which every request between nodes carries).
#[derive(Clone, Copy)]
pub(crate) struct Vouch {
    pub(super) client: std::net::SocketAddr,
}

/// Why no replica served a forwarded request (for the log: it names addresses).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The client's body stopped coming while it was kept.
    #[error("the client's body stalled")]
    BodyStalled,
    /// The client's body failed while it was kept.
    #[error("the client's body: {0}")]
    Body(#[source] axum::Error),
    /// No replica was tried.
    #[error("no replica is live")]
    NoneLive,
    /// Connecting to, or the exchange with, the last replica tried failed.
    #[error(transparent)]
    Http(#[from] http::Error),
    /// The last replica tried did not take the connection in time.
    #[error("{url}: connect timed out")]
    ConnectTimeout { url: String },
    /// A replica's URL cannot be a request's.
    #[error("bad URL {url}")]
    BadUrl { url: String },
    /// The last replica tried is behind the log.
    #[error("{name} is behind the log")]
    Behind { name: String },
    /// The last replica tried sent no answer head in time.
    #[error("{url}: no answer in time")]
    NoAnswer { url: String },
}

/// The client's body: kept whole (may be sent again), or to be streamed once.
enum Held {
    Kept(Bytes),
    Once(Option<Body>),
}

/// Keep `body` if it is at most [`REPLAY_MAX`] bytes; otherwise what was read of it, then the
/// rest, to stream once.
async fn hold(
    body: Body,
    headers: &HeaderMap,
    method: &Method,
    idle: Duration,
) -> Result<Held, Error> {
    if method == Method::GET || method == Method::HEAD {
        return Ok(Held::Kept(Bytes::new()));
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > REPLAY_MAX as u64) {
        return Ok(Held::Once(Some(body)));
    }
    let mut body = body;
    let mut kept = BytesMut::new();
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(Error::BodyStalled),
            Ok(None) => return Ok(Held::Kept(kept.freeze())),
            Ok(Some(Err(e))) => return Err(Error::Body(e)),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            kept.extend_from_slice(&data);
        }
        if kept.len() > REPLAY_MAX {
            let first = kept.freeze();
            let rest = body.into_data_stream();
            let all =
                futures_util::stream::once(async move { Ok::<_, axum::Error>(first) }).chain(rest);
            return Ok(Held::Once(Some(Body::from_stream(all))));
        }
    }
}

/// Whether `resp` is a replica's "behind the log" refusal.
fn is_behind(resp: &axum::http::Response<hyper::body::Incoming>) -> bool {
    resp.status() == StatusCode::SERVICE_UNAVAILABLE && resp.headers().contains_key(BEHIND)
}

/// Send `req` to the first of `replicas` (name, advertise URL) that serves it, and stream its
/// answer back; why none did.
pub(crate) async fn forward(
    req: Request,
    replicas: &[(String, String)],
    how: &Forwarding<'_>,
) -> Result<Response, Error> {
    let (parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let mut held = if how.replayable {
        hold(body, &parts.headers, &parts.method, how.idle).await?
    } else {
        Held::Once(Some(body))
    };
    let deadline = Instant::now() + BEHIND_WAIT;
    let mut why = Error::NoneLive;
    loop {
        let mut behind = 0;
        for (name, base) in replicas {
            let url = http::join(base, &pq);
            let conn = match tokio::time::timeout(
                CONNECT_TIMEOUT.min(how.timeout),
                how.peers.connect(name, &url),
            )
            .await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    tracing::info!(target: "berth::cluster", replica = %Escaped::token(name), error = %Escaped::text(&e.to_string()), "replica passed over: cannot connect");
                    why = e.into();
                    continue;
                }
                Err(_) => {
                    why = Error::ConnectTimeout { url: url.clone() };
                    tracing::info!(target: "berth::cluster", replica = %Escaped::token(name), "replica passed over: connect timed out");
                    continue;
                }
            };
            let replay = matches!(held, Held::Kept(_));
            let body = match &mut held {
                Held::Kept(b) => Body::from(b.clone()),
                Held::Once(b) => match b.take() {
                    Some(b) => b,
                    None => return Err(why),
                },
            };
            let mut b = axum::http::Request::builder()
                .method(parts.method.clone())
                .uri(&url);
            for (k, v) in &parts.headers {
                // The client's own copies of what only this node may say are dropped.
                if HOP.contains(&k.as_str())
                    || how.trusted_user.is_some_and(|(h, _)| h == k)
                    || k == CLIENT
                    || k == SECRET_HEADER
                {
                    continue;
                }
                b = b.header(k, v);
            }
            b = b
                .header(FORWARDED, how.node)
                .header(CLIENT, how.client.client.to_string());
            if let Some((h, user)) = how.trusted_user
                && let Ok(v) = HeaderValue::from_str(user)
            {
                b = b.header(h, v);
            }
            let out = b
                .body(body)
                .map_err(|_| Error::BadUrl { url: url.clone() })?;
            match tokio::time::timeout(how.timeout, conn.send(out)).await {
                Ok(Ok(resp)) if is_behind(&resp) => {
                    why = Error::Behind { name: name.clone() };
                    tracing::info!(target: "berth::cluster", replica = %Escaped::token(name), "replica passed over: behind the log");
                    if !replay {
                        return Err(why);
                    }
                    behind += 1;
                }
                Ok(Ok(resp)) => {
                    let (mut parts, body) = resp.into_parts();
                    for h in ["connection", "keep-alive", "transfer-encoding"] {
                        parts.headers.remove(h);
                    }
                    return Ok(Response::from_parts(parts, Body::new(body)));
                }
                Ok(Err(e)) => {
                    if !replay {
                        return Err(e.into());
                    }
                    tracing::info!(target: "berth::cluster", replica = %Escaped::token(name), error = %Escaped::text(&e.to_string()), "replica passed over: no answer");
                    why = e.into();
                }
                Err(_) => {
                    why = Error::NoAnswer { url: url.clone() };
                    if !replay {
                        return Err(why);
                    }
                    tracing::info!(target: "berth::cluster", replica = %Escaped::token(name), "replica passed over: no answer in time");
                }
            }
        }
        if behind == 0 || Instant::now() + BEHIND_PAUSE > deadline {
            return Err(why);
        }
        tokio::time::sleep(BEHIND_PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(n: usize, size: usize) -> Body {
        let parts = (0..n).map(move |i| Ok::<_, std::io::Error>(Bytes::from(vec![i as u8; size])));
        Body::from_stream(futures_util::stream::iter(parts))
    }

    async fn all(held: Held) -> Vec<u8> {
        match held {
            Held::Kept(b) => b.to_vec(),
            Held::Once(b) => b.unwrap().collect().await.unwrap().to_bytes().to_vec(),
        }
    }

    #[tokio::test]
    async fn a_small_body_is_kept_and_a_large_one_streams_once_whole() {
        let idle = Duration::from_secs(5);
        let post = Method::POST;
        let none = HeaderMap::new();
        let small = hold(chunks(4, 1000), &none, &post, idle).await.unwrap();
        assert!(matches!(small, Held::Kept(_)));
        assert_eq!(all(small).await.len(), 4000);
        // Over the bound: what was read, then the rest, in order.
        let n = REPLAY_MAX / 65536 + 3;
        let large = hold(chunks(n, 65536), &none, &post, idle).await.unwrap();
        assert!(matches!(large, Held::Once(_)));
        let got = all(large).await;
        assert_eq!(got.len(), n * 65536);
        assert!((0..n).all(|i| got[i * 65536] == i as u8));
        // A declared length over the bound is not read at all.
        let mut declared = HeaderMap::new();
        declared.insert(
            header::CONTENT_LENGTH,
            HeaderValue::from(REPLAY_MAX as u64 + 1),
        );
        let pending =
            Body::from_stream(futures_util::stream::pending::<Result<Bytes, std::io::Error>>());
        assert!(matches!(
            hold(pending, &declared, &post, idle).await,
            Ok(Held::Once(_))
        ));
        // A GET's body is nothing; a body that stalls is bounded.
        let pending =
            Body::from_stream(futures_util::stream::pending::<Result<Bytes, std::io::Error>>());
        assert!(
            matches!(hold(pending, &none, &Method::GET, idle).await, Ok(Held::Kept(b)) if b.is_empty())
        );
        let pending =
            Body::from_stream(futures_util::stream::pending::<Result<Bytes, std::io::Error>>());
        assert!(
            hold(pending, &none, &post, Duration::from_millis(50))
                .await
                .is_err()
        );
    }
}
