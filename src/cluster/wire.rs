//! What every internal request shares, on both sides: the header that carries the cluster secret,
//! a plain-text answer, a request body read within bounds (each chunk within the idle
//! timeout, a total at most), a peer's refusal and the failures of a round over the peers
//! ([`Answered`], [`Attempts`]), and the messages themselves as checked serde types
//! (`wire/message.rs`).

use std::io;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;

mod message;
mod packed;
pub(super) use message::*;
pub(super) use packed::Packed;

/// The header that carries the cluster secret.
pub(super) const SECRET_HEADER: &str = "x-berth-cluster-secret";

/// A plain-text answer.
pub(super) fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, body.into()).into_response()
}

/// A request body as a blocking reader: each chunk within `idle`, `max` bytes at most.
pub(super) fn body_stream(
    body: Body,
    idle: Duration,
    max: u64,
) -> tokio_util::io::StreamReader<
    std::pin::Pin<Box<dyn futures_util::Stream<Item = io::Result<Bytes>> + Send>>,
    Bytes,
> {
    let s = futures_util::stream::unfold(
        Some((body.into_data_stream(), 0u64)),
        move |state| async move {
            let (mut s, n) = state?;
            match tokio::time::timeout(idle, s.next()).await {
                Err(_) => Some((
                    Err(io::Error::new(io::ErrorKind::TimedOut, "peer stalled")),
                    None,
                )),
                Ok(None) => None,
                Ok(Some(Err(e))) => Some((Err(io::Error::other(e)), None)),
                Ok(Some(Ok(b))) => {
                    let n = n + b.len() as u64;
                    if n > max {
                        Some((Err(io::Error::other("prepare body too large")), None))
                    } else {
                        Some((Ok(b), Some((s, n))))
                    }
                }
            }
        },
    );
    tokio_util::io::StreamReader::new(Box::pin(s))
}

/// One peer's failure to give what was asked: its name and why.
#[derive(Debug)]
pub(super) struct Attempt {
    pub(super) peer: String,
    pub(super) why: Box<dyn std::error::Error + Send + Sync>,
}

/// What each peer asked answered instead (`<peer>: <why>; …`).
#[derive(Debug, Default)]
pub(super) struct Attempts(pub(super) Vec<Attempt>);

impl Attempts {
    /// `peer` failed for `why`.
    pub(super) fn push(
        &mut self,
        peer: &str,
        why: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) {
        self.0.push(Attempt {
            peer: peer.to_owned(),
            why: why.into(),
        });
    }
}

impl std::fmt::Display for Attempts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", a.peer, a.why)?;
        }
        Ok(())
    }
}

/// A peer's answer other than `200`: its status and its (trimmed) text.
#[derive(Debug, thiserror::Error)]
#[error("{status} {body}")]
pub(super) struct Answered {
    pub(super) status: u16,
    pub(super) body: String,
}

impl Answered {
    pub(super) fn new(status: u16, body: &[u8]) -> Answered {
        Answered {
            status,
            body: String::from_utf8_lossy(body).trim().to_owned(),
        }
    }
}
