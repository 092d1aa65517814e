//! The accepting replica's side of pack streaming: [`PushStream`] is a push's
//! [`crate::receive::PackTee`]. When the session starts reading the client's pack, it opens one
//! `POST /_berth/cluster/stream?repo=…&stream=<id>` (chunked) to every other live replica and
//! tees the bytes to each as they are read, in [`CHUNK`]-sized pieces through a bounded channel
//! ([`QUEUE`] chunks) per replica: the client's read waits for a slow replica, but at most
//! [`STALL`] per chunk, then that replica is dropped from the push (its body is cut; it refuses
//! the prepare and catches up later). A pack this node refused ends each body with an error.
//! The gate names the stream's id in its prepare ([`PushStream::streamed`]); when the push is
//! over (the session dropped its options), every replica streamed to is told to drop what is
//! left of it (`POST /_berth/cluster/drop?stream=<id>`: the quarantine of a push refused or
//! aborted before its prepare; only the record, when a prepare migrated it).

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::{Cluster, http};
use crate::escape::Escaped;
use crate::receive::{PackSink, PackTee};

/// The bytes sent to the replicas at a time.
const CHUNK: usize = 64 * 1024;
/// Chunks queued per replica before the client's read waits for it.
const QUEUE: usize = 16;
/// How long the client's read waits for one replica to take a chunk before it is dropped.
const STALL: Duration = Duration::from_secs(10);
/// How long a stream request may take in all (connect to the replica's answer).
const STREAM_TIMEOUT: Duration = Duration::from_secs(600);

/// One push's pack stream to the other replicas.
#[derive(Debug)]
pub(crate) struct PushStream {
    cluster: Arc<Cluster>,
    /// The repository's cluster name.
    name: String,
    replicas: Vec<String>,
    handle: tokio::runtime::Handle,
    /// The stream's id, as the replicas key it.
    id: super::wire::Id,
    /// The peers a stream was opened to (name, URL); empty until the pack starts.
    opened: Mutex<Option<Vec<(String, String)>>>,
    /// The client's shallow lines, as the pack started (for the gate's prepare).
    shallow: Mutex<Vec<gix_hash::ObjectId>>,
}

impl PushStream {
    pub(crate) fn new(
        cluster: Arc<Cluster>,
        name: String,
        replicas: Vec<String>,
        handle: tokio::runtime::Handle,
    ) -> Self {
        PushStream {
            cluster,
            name,
            replicas,
            handle,
            id: super::wire::Id::random(),
            opened: Mutex::new(None),
            shallow: Mutex::new(Vec::new()),
        }
    }

    /// The client's shallow lines the pack was streamed with (empty: a full clone's push).
    pub(super) fn shallow(&self) -> Vec<gix_hash::ObjectId> {
        self.shallow.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The stream's id, if this push's pack was streamed (else the push had no pack).
    pub(super) fn streamed(&self) -> Option<&super::wire::Id> {
        let opened = self.opened.lock().ok()?;
        opened.is_some().then_some(&self.id)
    }
}

impl PackTee for PushStream {
    fn start(&self, shallow: &[gix_hash::ObjectId]) -> Box<dyn PackSink> {
        if let Ok(mut s) = self.shallow.lock() {
            *s = shallow.to_vec();
        }
        // The replicas' ingest takes the same shallow commits as this node's; a list too long
        // for a query goes without (the replicas' fsck then refuses a pack that needs it).
        let shallow_query = super::wire::OidList::query(shallow)
            .map(|list| format!("&shallow={list}"))
            .unwrap_or_default();
        let peers = match self
            .handle
            .block_on(self.cluster.membership.urls_of(&self.replicas))
        {
            Ok(p) => p,
            Err(e) => {
                // The gate reads etcd again and refuses the push if it still cannot.
                tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.name), error = %Escaped::text(&e.to_string()), "no peers to stream the pack to");
                Vec::new()
            }
        };
        let mut sink = Sink {
            handle: self.handle.clone(),
            repo: self.name.clone(),
            peers: Vec::new(),
            buf: Vec::with_capacity(CHUNK),
        };
        for (name, url) in &peers {
            let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(QUEUE);
            let target = http::join(
                url,
                &format!(
                    "/_berth/cluster/stream?repo={}&stream={}{shallow_query}",
                    self.name, self.id
                ),
            );
            let cluster = self.cluster.clone();
            let (peer, repo) = (name.clone(), self.name.clone());
            self.handle.spawn(async move {
                let body = futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|item| (item, rx))
                });
                let req = axum::http::Request::builder()
                    .method("POST")
                    .uri(&target)
                    .body(Body::from_stream(body));
                let Ok(req) = req else { return };
                let result = match cluster.peers.send(&peer, req, STREAM_TIMEOUT).await {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let why = http::read_body(
                            resp.into_body(),
                            64 * 1024,
                            Duration::from_secs(10),
                            &target,
                        )
                        .await
                        .unwrap_or_default();
                        (status != 200).then(|| super::wire::Answered::new(status, &why).to_string())
                    }
                    Err(e) => Some(e.to_string()),
                };
                if let Some(why) = result {
                    tracing::info!(target: "berth::cluster", repo = %Escaped::token(&repo), peer = %Escaped::token(&peer), result = %Escaped::text(&why), "pack stream not received");
                }
            });
            sink.peers.push((name.clone(), tx));
        }
        if let Ok(mut opened) = self.opened.lock() {
            *opened = Some(peers);
        }
        Box::new(sink)
    }
}

impl Drop for PushStream {
    fn drop(&mut self) {
        // The push is over: a first push refused leaves no copy here (nor, told below, on the
        // replicas its pack went to).
        let (cluster, name) = (self.cluster.clone(), self.name.clone());
        self.handle
            .spawn(async move { cluster.forget_unused_copy(&name).await });
        let Some(peers) = self.opened.lock().ok().and_then(|mut o| o.take()) else {
            return;
        };
        for (name, url) in peers {
            let target = http::join(&url, &format!("/_berth/cluster/drop?stream={}", self.id));
            let cluster = self.cluster.clone();
            self.handle.spawn(async move {
                let r = cluster.peers.post(
                    &name,
                    &target,
                    Bytes::new(),
                    64 * 1024,
                    Duration::from_secs(10),
                )
                .await;
                if let Err(e) = r {
                    tracing::debug!(target: "berth::cluster", peer = %Escaped::token(&name), error = %Escaped::text(&e.to_string()), "stream not dropped");
                }
            });
        }
    }
}

/// The pack's bytes on their way to the peers still in the push.
struct Sink {
    handle: tokio::runtime::Handle,
    repo: String,
    peers: Vec<(String, mpsc::Sender<io::Result<Bytes>>)>,
    buf: Vec<u8>,
}

impl Sink {
    /// Send what is buffered to every peer, each within [`STALL`]; a peer that cannot take it
    /// is dropped from the push.
    fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        if self.peers.is_empty() {
            return;
        }
        let sends = self.peers.iter().map(|(_, tx)| {
            let chunk = chunk.clone();
            async move {
                matches!(
                    tokio::time::timeout(STALL, tx.send(Ok(chunk))).await,
                    Ok(Ok(()))
                )
            }
        });
        let sent = self.handle.block_on(futures_util::future::join_all(sends));
        let mut sent = sent.into_iter();
        self.peers.retain(|(name, tx)| {
            let ok = sent.next().unwrap_or(false);
            if !ok {
                tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.repo), peer = %Escaped::token(name), "replica too slow or gone: left out of this push");
                abort(&self.handle, tx.clone());
            }
            ok
        });
    }
}

/// End `tx`'s body with an error (the replica's ingest fails: nothing kept).
fn abort(handle: &tokio::runtime::Handle, tx: mpsc::Sender<io::Result<Bytes>>) {
    handle.spawn(async move {
        let err = io::Error::other("the accepting node aborted the pack");
        let _ = tokio::time::timeout(STALL, tx.send(Err(err))).await;
    });
}

impl PackSink for Sink {
    fn data(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = rest.len().min(CHUNK - self.buf.len());
            self.buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if self.buf.len() >= CHUNK {
                self.flush();
            }
        }
    }

    fn end(mut self: Box<Self>, accepted: bool) {
        if accepted {
            self.flush();
            // The senders dropped: each body ends cleanly after its last chunk.
            self.peers.clear();
        }
        // Not accepted: dropped with its peers, whose bodies end with an error.
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        for (_, tx) in self.peers.drain(..) {
            abort(&self.handle, tx);
        }
    }
}
