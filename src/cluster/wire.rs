//! What every internal request shares, on both sides: the header that carries the cluster secret,
//! a plain-text answer, a request body read within bounds (each chunk within the idle
//! timeout, a total at most), and the messages themselves as checked serde types
//! (`wire/message.rs`).

use std::io;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;

mod message;
pub(super) use message::*;

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
