//! The internal endpoint a node serves its peers under [`INTERNAL_PREFIX`]: who may call it and
//! which handler answers each request.
//!
//! - `POST /_berth/cluster/stream` and `/drop`: the push's pack, streamed here as the accepting
//!   node reads it from the client, and its removal (`incoming.rs`).
//! - `POST /_berth/cluster/prepare`: body = 4 bytes big-endian header length, the header (JSON:
//!   repository, transaction id, the log sequence number the push was decided against, the
//!   committer, the ref updates, the id of the stream that brought its pack, `null` for a push
//!   without one). The replica takes that stream's quarantine (ingested and checked with
//!   berth's ingest, and fsck as the repository asks, as it arrived; waiting for it if it is
//!   still arriving), migrates it, checks connectivity (a walk of the new tips), and prepares
//!   the same ref transaction (all or nothing; locks held, old values checked). `200` with the
//!   line `prepared`, the answer's body then held open until the transaction is decided here
//!   (its connection's close, before that, is the accepting node gone: `replica.rs`), or
//!   `409 <why>` (a stream that failed here, or never came, is a refusal: the push goes on
//!   without this replica, which catches up later).
//! - `POST /_berth/cluster/decide?repo=…&txid=…&seq=…&verdict=commit|abort`: commits (then
//!   records `seq` as applied) or drops the prepared transaction. `200 committed|aborted`; a
//!   commit of an entry this replica resolved and recorded already (its decision came late):
//!   `200 committed already`.
//! - `POST /_berth/cluster/pack`: objects for a replica catching up (`catchup.rs`).
//! - `POST /_berth/cluster/snapshot`: the last entry applied here and the refs at it, for a
//!   replica resyncing (`resync.rs`).
//! - `POST /_berth/cluster/ssh`: an ssh session forwarded by a node that holds no current
//!   replica, over an upgraded connection (`tunnel.rs` for the format, `ssh/tunnel.rs` runs it).
//!
//! Every request carries the cluster secret in `x-berth-cluster-secret` (403 without it). The
//! prepare header is at most `replica::MAX_HEADER` bytes, a streamed pack at most
//! `--max-request-bytes`, and a body that stalls for `--idle-timeout` is dropped. A prepared
//! transaction waits for its decision as `replica.rs` says.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;

use super::wire::{SECRET_HEADER, text};
use super::{Cluster, incoming, replica, resync};

/// Where every internal request's path starts.
pub(crate) const INTERNAL_PREFIX: &str = "/_berth/cluster/";

/// What [`internal`] made of a request under [`INTERNAL_PREFIX`].
pub(crate) enum Internal {
    /// Answered here (a refusal too: 403 without the secret, 404 for no such endpoint).
    Answered(Response),
    /// An ssh session tunnelled from another node (`ssh`): the server's ssh front end runs it.
    SshTunnel(Request),
}

/// Serve a request under [`INTERNAL_PREFIX`], once its secret proves it comes from a node.
pub(crate) async fn internal(cluster: &Arc<Cluster>, req: Request) -> Internal {
    let given = req
        .headers()
        .get(SECRET_HEADER)
        .map(|v| v.as_bytes().to_vec())
        .unwrap_or_default();
    if !cluster.secret_matches(&given) {
        return Internal::Answered(text(StatusCode::FORBIDDEN, "not a node of this cluster"));
    }
    let path = req.uri().path().to_owned();
    Internal::Answered(match path.strip_prefix(INTERNAL_PREFIX) {
        Some("prepare") => replica::prepare(cluster, req).await,
        Some("decide") => replica::decide(cluster, req).await,
        Some("pack") => replica::pack(cluster, req).await,
        Some("snapshot") => resync::snapshot(cluster, req).await,
        Some("stream") => incoming::stream(cluster, req).await,
        Some("drop") => incoming::drop_stream(cluster, req).await,
        Some("ssh") => return Internal::SshTunnel(req),
        _ => text(StatusCode::NOT_FOUND, "no such internal endpoint"),
    })
}
