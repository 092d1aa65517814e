//! This node's membership of the cluster: its key `/berth/nodes/<node>` (its advertise URL)
//! under an etcd lease kept alive, and the live nodes as read from those keys, reused for
//! [`LIVE_FOR`]. [`Membership`] owns that cache and its lock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Error, etcd};
use crate::escape::Escaped;

/// Seconds a node's lease lives without renewal: a node killed disappears after this.
const LEASE_TTL: i64 = 10;
/// How long a read of the live nodes is reused.
const LIVE_FOR: Duration = Duration::from_secs(1);

/// Nodes by name, with their advertise URLs.
pub(super) type Nodes = Vec<(String, String)>;

/// This node's registration and the live nodes as last read.
#[derive(Debug)]
pub(super) struct Membership {
    etcd: Arc<etcd::Client>,
    /// This node's name (as [`super::Cluster::node`]).
    node: String,
    /// The URL other nodes reach this one at.
    advertise: String,
    /// The live nodes as last read, and when: reused for [`LIVE_FOR`] (a killed node stays
    /// listed for its lease's [`LEASE_TTL`] anyway).
    live: Mutex<Option<(Instant, Nodes)>>,
    /// When etcd last renewed (or granted) this node's lease: what `/healthz` judges.
    renewed: Mutex<Instant>,
}

/// Whether this node is in the cluster's view, for `/healthz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// etcd renewed its lease within the lease's life: other nodes see it live.
    InCluster,
    /// etcd has not renewed its lease for this long (longer than its life): the others count
    /// it as gone, and pushes through it fail until etcd is back.
    EtcdUnreachable(Duration),
}

impl Membership {
    pub(super) fn new(etcd: Arc<etcd::Client>, node: String, advertise: String) -> Membership {
        Membership {
            etcd,
            node,
            advertise,
            live: Mutex::new(None),
            renewed: Mutex::new(Instant::now()),
        }
    }

    /// The URL other nodes reach this one at.
    pub(super) fn advertise(&self) -> &str {
        &self.advertise
    }

    fn renewed_now(&self) {
        if let Ok(mut at) = self.renewed.lock() {
            *at = Instant::now();
        }
    }

    /// Whether etcd renewed this node's lease within its life.
    pub(super) fn health(&self) -> Health {
        let since = self
            .renewed
            .lock()
            .map(|at| at.elapsed())
            .unwrap_or_default();
        if since <= Duration::from_secs(LEASE_TTL as u64) {
            Health::InCluster
        } else {
            Health::EtcdUnreachable(since)
        }
    }

    fn node_key(&self) -> Vec<u8> {
        format!("/berth/nodes/{}", self.node).into_bytes()
    }

    /// Put this node's key under a new lease; the lease.
    pub(super) async fn register(&self) -> Result<i64, Error> {
        let lease = self.etcd.grant(LEASE_TTL).await?;
        self.etcd
            .put(&self.node_key(), self.advertise.as_bytes(), Some(lease))
            .await?;
        Ok(lease)
    }

    /// Renew the lease every third of its life; register again if it expired (etcd was
    /// unreachable for longer than the TTL).
    pub(super) async fn keep_alive(&self, mut lease: i64) {
        loop {
            tokio::time::sleep(Duration::from_secs((LEASE_TTL / 3).max(1) as u64)).await;
            match self.etcd.keepalive(lease).await {
                Ok(true) => self.renewed_now(),
                Ok(false) => match self.register().await {
                    Ok(l) => {
                        lease = l;
                        self.renewed_now();
                    }
                    Err(e) => {
                        tracing::warn!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "cannot register again")
                    }
                },
                Err(e) => {
                    tracing::warn!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "lease keepalive failed")
                }
            }
        }
    }

    /// The live nodes: name → advertise URL, in name order (read at most every [`LIVE_FOR`]).
    pub(super) async fn live_nodes(&self) -> Result<Nodes, Error> {
        if let Ok(live) = self.live.lock()
            && let Some((at, nodes)) = live.as_ref()
            && at.elapsed() < LIVE_FOR
        {
            return Ok(nodes.clone());
        }
        self.read_live().await
    }

    /// The names of the live nodes read from etcd now (placing a new repository: the count
    /// decides whether it may be placed at all).
    pub(super) async fn live_names_now(&self) -> Result<Vec<String>, Error> {
        Ok(self.read_live().await?.into_iter().map(|n| n.0).collect())
    }

    /// The live nodes read from etcd (and kept for [`LIVE_FOR`]).
    async fn read_live(&self) -> Result<Nodes, Error> {
        let prefix = b"/berth/nodes/";
        let kvs = self.etcd.prefix(prefix).await?;
        let nodes: Nodes = kvs
            .into_iter()
            .filter_map(|kv| {
                let name = String::from_utf8(kv.key.get(prefix.len()..)?.to_vec()).ok()?;
                let url = String::from_utf8(kv.value).ok()?;
                Some((name, url))
            })
            .collect();
        if let Ok(mut live) = self.live.lock() {
            *live = Some((Instant::now(), nodes.clone()));
        }
        Ok(nodes)
    }

    /// Watch the nodes' keys until the watch ends (its error): every change drops the live
    /// nodes as last read, and `on_gone` hears the name of each node whose key was deleted
    /// (its lease expired, or it was deleted).
    pub(super) async fn watch_departures(&self, mut on_gone: impl FnMut(&str)) -> etcd::Error {
        let prefix = b"/berth/nodes/";
        self.etcd
            .watch(prefix, |event| {
                if let Ok(mut live) = self.live.lock() {
                    *live = None;
                }
                if let etcd::Event::Deleted(kv) = event
                    && let Some(name) = kv
                        .key
                        .strip_prefix(prefix.as_slice())
                        .and_then(|n| std::str::from_utf8(n).ok())
                {
                    on_gone(name);
                }
            })
            .await
    }

    /// The names of the live nodes, in name order.
    pub(super) async fn live_names(&self) -> Result<Vec<String>, Error> {
        Ok(self.live_nodes().await?.into_iter().map(|n| n.0).collect())
    }

    /// The advertise URLs of `nodes` that are live, in the order given (this node left out).
    pub(super) async fn urls_of(&self, nodes: &[String]) -> Result<Nodes, Error> {
        let live = self.live_nodes().await?;
        Ok(nodes
            .iter()
            .filter(|n| **n != self.node)
            .filter_map(|n| live.iter().find(|l| l.0 == *n).cloned())
            .collect())
    }
}
