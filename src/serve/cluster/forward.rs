//! Forwarding a client's git request (discovery, push, fetch) to a node that holds a replica
//! of the repository, when this node holds none or is behind the repository's log. The
//! request goes as it came (method, path, query, git's headers, the body streamed, already
//! inflated when it came gzipped), marked with [`FORWARDED`] so that the replica serves it
//! itself; the replica's answer streams back as it comes.
//!
//! (ssh commands are forwarded through `tunnel.rs` instead.)
//!
//! The replica authenticates the request again (HTTP Basic passes through). A trusted user
//! header (`--trusted-user-header`) is only passed on as this node established it: the
//! client's own copy is dropped, since the replica trusts this node's address.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::response::Response;

use super::http;

/// Marks a request forwarded by another node (its value: that node's name).
pub(in crate::serve) const FORWARDED: &str = "x-berth-forwarded";

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

/// Send `req` to `base` (a node's advertise URL) and stream its answer back.
pub(in crate::serve) async fn forward(
    req: Request,
    base: &str,
    node: &str,
    trusted_user: Option<(&header::HeaderName, &str)>,
    timeout: Duration,
) -> Result<Response, http::Error> {
    let (parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let mut b = axum::http::Request::builder()
        .method(parts.method.clone())
        .uri(http::join(base, &pq));
    for (k, v) in &parts.headers {
        if HOP.contains(&k.as_str()) || trusted_user.is_some_and(|(h, _)| h == k) {
            continue;
        }
        b = b.header(k, v);
    }
    b = b.header(FORWARDED, node);
    if let Some((h, user)) = trusted_user
        && let Ok(v) = HeaderValue::from_str(user)
    {
        b = b.header(h, v);
    }
    let out = b
        .body(Body::new(body))
        .map_err(|_| http::Error::Url(base.to_owned()))?;
    let resp = http::send(out, timeout).await?;
    let (mut parts, body) = resp.into_parts();
    for h in ["connection", "keep-alive", "transfer-encoding"] {
        parts.headers.remove(h);
    }
    Ok(Response::from_parts(parts, Body::new(body)))
}
