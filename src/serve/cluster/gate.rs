//! The accepting replica's commit point: [`Gate`] is the push's
//! [`crate::receive::CommitGate`]. For each ref transaction the session holds prepared it
//!
//! 1. reads the repository's log head from etcd (sequence number S, mod revision R) and checks
//!    this replica applied exactly S (else it is behind and refuses);
//! 2. packs the objects of the new tips that the current refs do not reach (`git pack-objects
//!    --revs`, not thin) and sends pack + updates to every other live replica's
//!    `/_berth/cluster/prepare`, in parallel;
//! 3. with fewer than the acknowledgement quorum prepared (itself included): aborts everywhere;
//! 4. the commit point: one etcd txn — if the log key's mod revision is still R, put the entry
//!    S+1 as the log key and as `entries/<S+1>`. An answer lost to an etcd failure is retried
//!    with the same compare, and a failed compare whose log names this transaction is a
//!    success: the entry is written at most once and the gate learns whether it was. Lost
//!    compare (another push committed first): abort everywhere, the refs get
//!    `failed to update ref`;
//! 5. [`GateCommit::finish`] after the local commit: `decide?verdict=commit` to every prepared
//!    replica; the push is acknowledged when the quorum (`--ack`) applied it.
//!
//! Not yet: a lost compare whose winner touched none of this push's refs is not retried.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;

use super::objects::pack_objects;
use super::replica::{SECRET_HEADER, new_of};
use super::{Cluster, applied_seq, etcd, http, log, needed, repo_key, set_applied_seq};
use crate::receive::{CommitGate, GateCommit};
use crate::refs::{RefUpdate, Refs};

/// How long a replica may take to ingest and prepare.
const PREPARE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the commit point retries etcd before giving up (the push then fails, ambiguously).
const COMMIT_RETRY: Duration = Duration::from_secs(15);

/// The commit gate of one push to one repository.
#[derive(Debug)]
pub(in crate::serve) struct Gate {
    pub(in crate::serve) cluster: Arc<Cluster>,
    /// The repository's cluster name.
    pub(in crate::serve) name: String,
    pub(in crate::serve) dir: PathBuf,
    /// Its replicas as recorded in etcd.
    pub(in crate::serve) replicas: Vec<String>,
    pub(in crate::serve) handle: tokio::runtime::Handle,
    /// The reflog identity, for the replicas' transactions.
    pub(in crate::serve) committer_name: String,
    pub(in crate::serve) committer_email: String,
}

/// A prepared peer.
struct Peer {
    name: String,
    url: String,
}

impl CommitGate for Gate {
    fn decide(&self, updates: &[RefUpdate], current: &Refs) -> Result<Box<dyn GateCommit>, String> {
        self.handle.block_on(self.decide_async(updates, current))
    }
}

impl Gate {
    async fn decide_async(
        &self,
        updates: &[RefUpdate],
        current: &Refs,
    ) -> Result<Box<dyn GateCommit>, String> {
        let c = &self.cluster;
        let (seq, rev) = c.log_head(&self.name).await.map_err(|e| e.to_string())?;
        let applied = applied_seq(&self.dir);
        if applied != seq {
            if applied < seq {
                c.clone().spawn_catch_up(self.name.clone());
            }
            return Err(format!(
                "this replica ({}) is at log entry {applied} of {seq}; it is catching up, retry",
                c.node
            ));
        }
        let updates_json = log::updates_json(updates).ok_or("a ref name is not UTF-8")?;
        let pack = {
            let dir = self.dir.clone();
            let tips: Vec<_> = updates.iter().filter_map(new_of).collect();
            let have: Vec<_> = current.iter().map(|(_, id)| *id).collect();
            tokio::task::spawn_blocking(move || pack_objects(&dir, &tips, &have))
                .await
                .map_err(|e| e.to_string())??
        };
        let txid = super::random_hex(16);
        let header = json!({
            "repo": self.name,
            "txid": txid,
            "base_seq": seq,
            "committer_name": self.committer_name,
            "committer_email": self.committer_email,
            "updates": updates_json,
            "has_pack": !pack.is_empty(),
        })
        .to_string();
        let mut body = Vec::with_capacity(4 + header.len() + pack.len());
        body.extend_from_slice(&(header.len() as u32).to_be_bytes());
        body.extend_from_slice(header.as_bytes());
        body.extend_from_slice(&pack);
        let body = Bytes::from(body);
        drop(pack);

        let peers = c.urls_of(&self.replicas).await.map_err(|e| e.to_string())?;
        let sends = peers.into_iter().map(|(name, url)| {
            let body = body.clone();
            let secret = c.secret.clone();
            async move {
                let target = http::join(&url, "/_berth/cluster/prepare");
                let r = http::post(
                    &target,
                    &[(SECRET_HEADER, &secret)],
                    body,
                    64 * 1024,
                    PREPARE_TIMEOUT,
                )
                .await;
                (Peer { name, url }, r)
            }
        });
        let mut prepared = Vec::new();
        let mut refused = Vec::new();
        for (peer, r) in futures_util::future::join_all(sends).await {
            match r {
                Ok((200, _)) => prepared.push(peer),
                Ok((status, why)) => refused.push(format!(
                    "{}: {status} {}",
                    peer.name,
                    String::from_utf8_lossy(&why).trim()
                )),
                Err(e) => refused.push(format!("{}: {e}", peer.name)),
            }
        }
        let k = self.replicas.len().max(1);
        let need = needed(c.ack, k);
        if 1 + prepared.len() < need {
            self.decide_all(&prepared, &txid, 0, false).await;
            return Err(format!(
                "only {} of {k} replicas prepared the push ({})",
                1 + prepared.len(),
                refused.join("; ")
            ));
        }

        let entry = log::Entry {
            seq: seq + 1,
            txid: txid.clone(),
            origin: c.node.clone(),
            updates: updates.to_vec(),
        };
        let value = entry.encode().ok_or("a ref name is not UTF-8")?;
        let committed = self.commit_point(rev, entry.seq, &txid, value).await;
        match committed {
            Ok(true) => {
                tracing::info!(target: "berth::cluster", repo = %super::super::Escaped::token(&self.name), seq = entry.seq, txid = %txid, prepared = 1 + prepared.len(), "committed to the log");
                Ok(Box::new(Decided {
                    gate_dir: self.dir.clone(),
                    handle: self.handle.clone(),
                    cluster: self.cluster.clone(),
                    prepared,
                    txid,
                    seq: entry.seq,
                    need,
                    k,
                }))
            }
            Ok(false) => {
                self.decide_all(&prepared, &txid, 0, false).await;
                Err("another push to this repository committed first; retry".into())
            }
            Err(e) => {
                // Unknown whether the entry is in the log: the replicas keep their prepared
                // transactions until their decision timeout and then ask the log themselves.
                Err(format!("etcd did not confirm the commit: {e}"))
            }
        }
    }

    /// The etcd compare-and-swap; `Ok(true)` once the entry is in the log, `Ok(false)` when
    /// another entry won.
    async fn commit_point(
        &self,
        rev: i64,
        seq: u64,
        txid: &str,
        value: Vec<u8>,
    ) -> Result<bool, etcd::Error> {
        let log_key = repo_key(&self.name, "log");
        let entry_key = repo_key(&self.name, &format!("entries/{seq:020}"));
        let start = Instant::now();
        loop {
            let r = self
                .cluster
                .etcd
                .txn(
                    &[etcd::Compare::ModRevision(log_key.clone(), rev)],
                    &[
                        etcd::Op::Put(log_key.clone(), value.clone(), None),
                        etcd::Op::Put(entry_key.clone(), value.clone(), None),
                    ],
                    &[etcd::Op::Get(log_key.clone())],
                )
                .await;
            match r {
                Ok(t) if t.succeeded => return Ok(true),
                Ok(t) => {
                    // A retry after a lost answer finds its own entry: committed once.
                    let ours = t
                        .gets
                        .first()
                        .and_then(|g| g.first())
                        .and_then(|kv| log::Entry::decode(&kv.value).ok())
                        .is_some_and(|e| e.txid == txid);
                    return Ok(ours);
                }
                Err(e) if start.elapsed() > COMMIT_RETRY => return Err(e),
                Err(e) => {
                    tracing::warn!(target: "berth::cluster", error = %e, "commit point: etcd failed, retrying");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
    }

    async fn decide_all(&self, peers: &[Peer], txid: &str, seq: u64, commit: bool) -> usize {
        decide_all(&self.cluster, peers, txid, seq, commit).await
    }
}

/// Tell `peers` the verdict; how many confirmed.
async fn decide_all(
    cluster: &Cluster,
    peers: &[Peer],
    txid: &str,
    seq: u64,
    commit: bool,
) -> usize {
    let verdict = if commit { "commit" } else { "abort" };
    let sends = peers.iter().map(|p| {
        let url = http::join(
            &p.url,
            &format!("/_berth/cluster/decide?txid={txid}&seq={seq}&verdict={verdict}"),
        );
        let secret = cluster.secret.clone();
        let name = p.name.clone();
        async move {
            let r = http::post(
                &url,
                &[(SECRET_HEADER, &secret)],
                Bytes::new(),
                64 * 1024,
                PREPARE_TIMEOUT,
            )
            .await;
            if !matches!(r, Ok((200, _))) {
                tracing::warn!(target: "berth::cluster", peer = %name, verdict, result = ?r.as_ref().map(|(s, b)| (*s, String::from_utf8_lossy(b).into_owned())), "decision not confirmed");
            }
            matches!(r, Ok((200, _)))
        }
    });
    futures_util::future::join_all(sends)
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count()
}

/// A push committed to the log, to be applied on the prepared replicas.
struct Decided {
    gate_dir: PathBuf,
    handle: tokio::runtime::Handle,
    cluster: Arc<Cluster>,
    prepared: Vec<Peer>,
    txid: String,
    seq: u64,
    need: usize,
    k: usize,
}

impl GateCommit for Decided {
    fn finish(self: Box<Self>, committed_here: bool) -> Result<(), String> {
        let mut applied = 0;
        if committed_here {
            match set_applied_seq(&self.gate_dir, self.seq) {
                Ok(()) => applied += 1,
                Err(e) => {
                    tracing::error!(target: "berth::cluster", error = %e, "cannot record the applied log entry")
                }
            }
        }
        applied += self.handle.block_on(decide_all(
            &self.cluster,
            &self.prepared,
            &self.txid,
            self.seq,
            true,
        ));
        if applied >= self.need {
            Ok(())
        } else {
            Err(format!(
                "committed to the log as entry {}, but only {applied} of {} replicas applied it",
                self.seq, self.k
            ))
        }
    }
}
