//! gRPC over hyper's HTTP/2 client, as much of it as the etcd client needs: one HTTP/2
//! connection per endpoint ([`Channel`]), made when first needed and again once it broke, that
//! every call shares; a call is a `POST` of its request messages, each framed as gRPC frames
//! them (a flag byte, a four-byte length, the protobuf bytes), answered by messages framed
//! alike and a status (`grpc-status`, `grpc-message`) in the trailers, or in the head alone.
//!
//! Written here rather than taken from tonic: berth needs unary calls and one answer stream,
//! over the hyper, TLS and connect code it already has (`http.rs`); tonic would bring a
//! second stack of its own around the same hyper.

use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;

use super::Error;
use crate::cluster::http;

/// gRPC's status codes that mean "ask another member": `UNAVAILABLE` (no leader, a member
/// cut off or stopping).
const UNAVAILABLE: u32 = 14;

/// The largest message read.
const MAX_MESSAGE: usize = 64 << 20;

/// One endpoint's HTTP/2 connection, shared by every call to it.
#[derive(Debug)]
pub(super) struct Channel {
    /// `http://host:port` or `https://host:port`.
    pub(super) url: String,
    sender: Mutex<Option<SendRequest<Body>>>,
}

impl Channel {
    pub(super) fn new(url: String) -> Channel {
        Channel {
            url,
            sender: Mutex::new(None),
        }
    }

    /// The connection, made now if there is none or it closed.
    async fn sender(&self, transport: &http::Transport) -> Result<SendRequest<Body>, Error> {
        let held = self
            .sender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(s) = held.filter(|s| !s.is_closed()) {
            return Ok(s);
        }
        let (stream, _) = http::open_via(transport, &self.url)
            .await
            .map_err(Error::Http)?;
        let (sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), stream)
                .await
                .map_err(|e| Error::Http(http::Error::Http(self.url.clone(), e)))?;
        tokio::spawn(conn);
        *self.sender.lock().unwrap_or_else(|e| e.into_inner()) = Some(sender.clone());
        Ok(sender)
    }

    /// Start call `path` with `body` (its framed request messages) and return the answer's
    /// head with its body streaming, once its HTTP status and any status in the head (a
    /// trailers-only answer) say it goes on.
    pub(super) async fn start(
        &self,
        transport: &http::Transport,
        path: &str,
        body: Body,
    ) -> Result<Incoming, Error> {
        let mut sender = self.sender(transport).await?;
        let url = http::join(&self.url, path);
        let broke = |e| Error::Http(http::Error::Http(url.clone(), e));
        sender.ready().await.map_err(broke)?;
        let req = axum::http::Request::builder()
            .method("POST")
            .uri(&url)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(body)
            .map_err(|_| Error::BadEndpoint(self.url.clone()))?;
        let answer = sender.send_request(req).await.map_err(broke)?;
        if answer.status() != axum::http::StatusCode::OK {
            return Err(Error::Unavailable {
                url,
                status: u32::from(answer.status().as_u16()),
                body: String::new(),
            });
        }
        status(answer.headers(), &url)?;
        Ok(answer.into_body())
    }

    /// Unary call `path` with `request`: its one answer, within `timeout`.
    pub(super) async fn unary<A: prost::Message + Default>(
        &self,
        transport: &http::Transport,
        path: &str,
        request: &impl prost::Message,
        timeout: Duration,
    ) -> Result<A, Error> {
        let url = http::join(&self.url, path);
        let work = async {
            let body = self
                .start(transport, path, Body::from(frame(request)))
                .await?;
            let whole = http_body_util::Limited::new(body, MAX_MESSAGE + 5)
                .collect()
                .await
                .map_err(|e| match e.downcast::<hyper::Error>() {
                    Ok(e) => Error::Http(http::Error::Http(url.clone(), *e)),
                    Err(_) => Error::Http(http::Error::TooLarge(url.clone(), MAX_MESSAGE)),
                })?;
            if let Some(t) = whole.trailers() {
                status(t, &url)?;
            }
            let mut frames = Frames::of(whole.to_bytes());
            match frames.next_message::<A>()? {
                Some(a) => Ok(a),
                None => Err(Error::NoAnswer(url.clone())),
            }
        };
        let r = match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(Error::Http(http::Error::Timeout(url))),
        };
        // A connection that failed or hung is not asked again: the next call makes a new one
        // (a member partitioned away leaves its connection open but silent).
        if let Err(Error::Http(_)) = &r {
            self.forget();
        }
        r
    }

    /// Drop the connection; the next call makes a new one.
    pub(super) fn forget(&self) {
        *self.sender.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// `message` as one gRPC frame (not compressed).
pub(super) fn frame(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut out = BytesMut::with_capacity(5 + len);
    out.put_u8(0);
    out.put_u32(len as u32);
    // Into a buffer of the message's own length: cannot fail.
    let _ = message.encode(&mut out);
    out.freeze()
}

/// The call's status in `headers` (trailers, or a trailers-only head): an error unless it is
/// absent or `OK`.
fn status(headers: &axum::http::HeaderMap, url: &str) -> Result<(), Error> {
    let Some(code) = headers.get("grpc-status") else {
        return Ok(());
    };
    let code: u32 = code.to_str().ok().and_then(|c| c.parse().ok()).unwrap_or(2);
    if code == 0 {
        return Ok(());
    }
    // Percent-encoded (gRPC's own encoding of the message).
    let message = headers
        .get("grpc-message")
        .map(|m| {
            percent_encoding::percent_decode(m.as_bytes())
                .decode_utf8_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    match code {
        UNAVAILABLE => Err(Error::Unavailable {
            url: url.to_owned(),
            status: code,
            body: message,
        }),
        _ => Err(Error::Status {
            status: code,
            body: message,
        }),
    }
}

/// The messages of an answer as its bytes arrive: frames split off as they complete.
#[derive(Debug, Default)]
pub(super) struct Frames {
    buf: BytesMut,
}

impl Frames {
    /// The messages of an answer read whole (its bytes taken over, not copied, when they are
    /// in one piece no one else holds).
    fn of(whole: Bytes) -> Frames {
        Frames {
            buf: whole
                .try_into_mut()
                .unwrap_or_else(|shared| BytesMut::from(&shared[..])),
        }
    }

    /// More of the answer's bytes.
    pub(super) fn extend(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// The next complete message, `None` until one is; an error for a compressed frame (none
    /// was asked for) or one larger than [`MAX_MESSAGE`].
    pub(super) fn next_message<M: prost::Message + Default>(&mut self) -> Result<Option<M>, Error> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        if self.buf[0] != 0 {
            return Err(Error::Compressed);
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_MESSAGE {
            return Err(Error::MessageTooLarge(len));
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        self.buf.advance(5);
        let message = self.buf.split_to(len);
        M::decode(message.freeze()).map(Some).map_err(Error::Proto)
    }
}

#[cfg(test)]
mod tests {
    use super::super::proto;
    use super::*;

    /// Frames split anywhere come out whole, in order; a compressed or oversized frame is
    /// refused.
    #[test]
    fn frames_come_out_whole_however_the_bytes_arrive() {
        let a = proto::LeaseKeepAliveResponse { ttl: 7 };
        let b = proto::LeaseKeepAliveResponse { ttl: 300 };
        let mut bytes = frame(&a).to_vec();
        bytes.extend_from_slice(&frame(&b));
        for cut in 0..=bytes.len() {
            let mut f = Frames::default();
            let mut got = Vec::new();
            for part in [&bytes[..cut], &bytes[cut..]] {
                f.extend(part);
                while let Some(m) = f.next_message::<proto::LeaseKeepAliveResponse>().unwrap() {
                    got.push(m.ttl);
                }
            }
            assert_eq!(got, [7, 300], "cut at {cut}");
        }
        let mut whole = Frames::of(Bytes::from(bytes.clone()));
        let first = whole
            .next_message::<proto::LeaseKeepAliveResponse>()
            .unwrap();
        assert_eq!(first.map(|m| m.ttl), Some(7));
        let mut f = Frames::default();
        f.extend(&[1, 0, 0, 0, 0]);
        assert!(matches!(
            f.next_message::<proto::LeaseKeepAliveResponse>(),
            Err(Error::Compressed)
        ));
        let mut f = Frames::default();
        f.extend(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            f.next_message::<proto::LeaseKeepAliveResponse>(),
            Err(Error::MessageTooLarge(_))
        ));
    }

    /// A status in the trailers: `OK` or none goes on, `UNAVAILABLE` asks another member,
    /// another code is the call's error with its message decoded.
    #[test]
    fn statuses_are_read_from_the_trailers() {
        let mut h = axum::http::HeaderMap::new();
        assert!(status(&h, "u").is_ok());
        h.insert("grpc-status", "0".parse().unwrap());
        assert!(status(&h, "u").is_ok());
        h.insert("grpc-status", "14".parse().unwrap());
        assert!(matches!(
            status(&h, "u"),
            Err(Error::Unavailable { status: 14, .. })
        ));
        h.insert("grpc-status", "3".parse().unwrap());
        h.insert(
            "grpc-message",
            "etcdserver: request is too large%21".parse().unwrap(),
        );
        match status(&h, "u") {
            Err(Error::Status { status: 3, body }) => {
                assert_eq!(body, "etcdserver: request is too large!")
            }
            other => panic!("{other:?}"),
        }
    }
}
