//! The accepting replica's commit point: [`Gate`] is the push's
//! [`crate::receive::CommitGate`]. For each ref transaction the session holds prepared it
//!
//! 1. reads the repository's log head from etcd (sequence number S, mod revision R) and checks
//!    this replica applied exactly S (else it is behind and refuses);
//! 2. sends the updates and the id of the push's pack stream (`tee.rs`: the client's pack, teed
//!    to the other replicas as it was read, already ingested and checked there) to every other
//!    live replica's `/_berth/cluster/prepare`, in parallel;
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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::decide::{self, AfterLost, Position, Quorum, Verdict, Winners};
use super::log::new_of;
use super::objects::Format;
use super::wire::{self, Answered, Attempts, SECRET_HEADER};
use super::{Cluster, applied_seq, etcd, http, log, needed, repo_key};
use crate::escape::Escaped;
use crate::receive::{CommitGate, GateCommit, GateRefusal, PackTee};
use crate::refs::{RefUpdate, Refs};

/// How long a replica may take to ingest and prepare.
const PREPARE_TIMEOUT: Duration = Duration::from_secs(60);
/// Once a quorum prepared, how long the other replicas still have.
const PREPARE_GRACE: Duration = Duration::from_secs(2);
/// How long the commit point retries etcd before giving up (the push then fails, ambiguously).
const COMMIT_RETRY: Duration = Duration::from_secs(15);
/// How long a committed entry waits for the entries before it to be applied here.
pub(super) const APPLY_WAIT: Duration = Duration::from_secs(5);

/// The commit gate of one push to one repository.
#[derive(Debug)]
pub(crate) struct Gate {
    pub(crate) cluster: Arc<Cluster>,
    /// The repository's cluster name.
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
    /// Its replicas as recorded in etcd.
    pub(crate) replicas: Vec<String>,
    pub(crate) handle: tokio::runtime::Handle,
    /// The reflog identity, for the replicas' transactions.
    pub(crate) committer_name: String,
    pub(crate) committer_email: String,
    /// The push's pack stream to the other replicas (the same as its `pack_tee`).
    pub(crate) stream: Option<Arc<super::PushStream>>,
}

impl Gate {
    /// The pack stream and the commit gate of a push to `name` (at `dir`, with `replicas` as
    /// recorded) accepted on this node, over HTTP or ssh; called on the runtime the gate
    /// blocks on.
    pub(crate) fn for_push(
        cluster: Arc<Cluster>,
        name: String,
        dir: &str,
        replicas: Vec<String>,
        committer_name: &str,
        committer_email: &str,
    ) -> (Arc<dyn PackTee>, Arc<dyn CommitGate>) {
        let handle = tokio::runtime::Handle::current();
        // The pack is streamed to the other replicas as the session reads it.
        let stream = Arc::new(super::PushStream::new(
            cluster.clone(),
            name.clone(),
            replicas.clone(),
            handle.clone(),
        ));
        let gate = Arc::new(Gate {
            cluster,
            name,
            dir: PathBuf::from(dir),
            replicas,
            handle,
            committer_name: committer_name.to_owned(),
            committer_email: committer_email.to_owned(),
            stream: Some(stream.clone()),
        });
        (stream, gate)
    }
}

/// A prepared peer.
struct Peer {
    name: String,
    url: String,
}

impl CommitGate for Gate {
    fn decide(
        &self,
        updates: &[RefUpdate],
        current: &Refs,
    ) -> Result<Box<dyn GateCommit>, GateRefusal> {
        // The objects travelled with the pack stream: the refs the push was decided on are
        // the replicas' to check (old values, under their locks).
        let _ = current;
        self.handle.block_on(self.decide_async(updates))
    }
}

impl Gate {
    async fn decide_async(
        &self,
        updates: &[RefUpdate],
    ) -> Result<Box<dyn GateCommit>, GateRefusal> {
        let c = &self.cluster;
        // What this replica applied, read before the log's head: entries are applied only
        // once committed, so it is never ahead of that head (read after, a concurrent push's
        // entry could be applied in between).
        let applied = applied_seq(&self.dir);
        let (seq, rev) = c.log_head(&self.name).await.map_err(unavailable)?;
        let id = wire::Id::random();
        let txid = id.to_string();
        let position = decide::position(applied, seq);
        if position != Position::Current {
            if position == Position::Behind {
                c.clone().spawn_catch_up(self.name.clone());
            }
            // Behind by entries of other refs only (their decisions on their way here): the
            // old values checked under this push's locks still hold, so it goes on at the head.
            let missed = match position {
                Position::Behind => c
                    .winners(&self.name, applied, seq, &txid, updates)
                    .await
                    .map_err(Some),
                _ => Err(None),
            };
            if !matches!(missed, Ok(Winners::Disjoint)) {
                let behind = Refusal::Behind {
                    node: c.node.clone(),
                    applied,
                    head: seq,
                };
                // Only some refs are among the entries it misses: the others may go on.
                return Err(match missed {
                    Ok(Winners::Overlap(lost)) => GateRefusal::lost(behind, lost),
                    _ => GateRefusal::new(behind),
                });
            }
        }
        if seq == 0 {
            self.record_format().await?;
        }
        let wire_updates = wire::updates(updates).map_err(Refusal::NotReplicable)?;
        // A batch of deletions needs no objects: it leaves the stream to the batch that does.
        let stream = self
            .stream
            .as_ref()
            .filter(|_| updates.iter().any(|u| new_of(u).is_some()))
            .and_then(|s| s.streamed().cloned());
        let header = wire::encode(&wire::Prepare {
            base_seq: seq,
            committer_email: self.committer_email.clone(),
            committer_name: self.committer_name.clone(),
            repo: wire::RepoName::try_from(self.name.as_str())
                .map_err(|e| Refusal::NotReplicable(e.into()))?,
            stream,
            txid: id,
            updates: wire_updates,
        });
        let mut body = Vec::with_capacity(4 + header.len());
        body.extend_from_slice(&(header.len() as u32).to_be_bytes());
        body.extend_from_slice(&header);
        let body = Bytes::from(body);

        let peers = c.urls_of(&self.replicas).await.map_err(unavailable)?;
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
        // The quorum is the configured K's, however many replicas the repository has: a
        // repository placed short (nodes were down) is never acknowledged on fewer copies.
        let k = c.replicas.max(1);
        let need = needed(c.ack, k);
        // Every answer, or once the quorum prepared, what comes within PREPARE_GRACE more: a
        // stopped or partitioned replica does not hold the push up (it resolves its prepared
        // transaction from the log after its decision timeout, then catches up).
        let mut pending: futures_util::stream::FuturesUnordered<_> = sends.collect();
        let mut prepared = Vec::new();
        let mut refused = Attempts::default();
        // The replicas still preparing when the grace ran out.
        let mut slow = 0;
        let mut grace: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        loop {
            let next = match grace.as_mut() {
                Some(g) => tokio::select! {
                    n = futures_util::StreamExt::next(&mut pending) => n,
                    _ = g => {
                        slow = pending.len();
                        None
                    }
                },
                None => futures_util::StreamExt::next(&mut pending).await,
            };
            let Some((peer, r)) = next else { break };
            match r {
                Ok((200, _)) => prepared.push(peer),
                Ok((status, why)) => refused.push(&peer.name, Answered::new(status, &why)),
                Err(e) => refused.push(&peer.name, e),
            }
            if grace.is_none() && decide::quorum(prepared.len(), need) == Quorum::Met {
                grace = Some(Box::pin(tokio::time::sleep(PREPARE_GRACE)));
            }
        }
        drop(pending);
        if let Quorum::Short { prepared: n } = decide::quorum(prepared.len(), need) {
            self.decide_all(&prepared, &txid, Verdict::Abort).await;
            // The replicas' reasons name nodes and paths: for the log, not the client.
            tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.name), txid = %txid, refused = %Escaped::text(&refused.to_string()), slow, "no quorum prepared");
            return Err(GateRefusal::new(Refusal::NoQuorum { prepared: n, k }));
        }

        let mut entry = log::Entry {
            seq: seq + 1,
            txid: txid.clone(),
            origin: c.node.clone(),
            updates: updates.to_vec(),
        };
        let (mut base_seq, mut base_rev) = (seq, rev);
        let mut rounds = 0;
        let committed_seq = loop {
            entry.seq = base_seq + 1;
            let lost = match self.commit_point(base_rev, &entry).await {
                Err(CommitPoint::NotReplicable(e)) => {
                    self.decide_all(&prepared, &txid, Verdict::Abort).await;
                    return Err(GateRefusal::new(Refusal::NotReplicable(e)));
                }
                Ok(Cas::Committed) => break entry.seq,
                Ok(Cas::Lost { seq, rev }) => (seq, rev),
                Ok(Cas::TooLarge(bytes)) => {
                    self.decide_all(&prepared, &txid, Verdict::Abort).await;
                    tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.name), txid = %txid, bytes, refs = updates.len(), "log entry larger than etcd takes");
                    return Err(GateRefusal::new(Refusal::TooLarge {
                        refs: updates.len(),
                        bytes,
                    }));
                }
                Err(CommitPoint::Etcd(e)) => {
                    // Unknown whether the entry is in the log: the replicas keep their
                    // prepared transactions until their decision timeout, then ask the log.
                    tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.name), txid = %txid, error = %Escaped::text(&e.to_string()), "commit point unconfirmed");
                    return Err(GateRefusal::new(Refusal::Unconfirmed));
                }
            };
            // Other pushes committed since the base. If none of them touched these refs, the
            // old values checked under the locks still hold: try again after them.
            rounds += 1;
            let winners = match c
                .winners(&self.name, base_seq, lost.0, &txid, updates)
                .await
            {
                Ok(w) => w,
                Err(e) => {
                    self.decide_all(&prepared, &txid, Verdict::Abort).await;
                    tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.name), error = %Escaped::text(&e.to_string()), "cannot read the log");
                    return Err(GateRefusal::new(Refusal::LogUnreadable));
                }
            };
            match decide::after_lost_compare(winners, rounds) {
                AfterLost::Committed(seq) => break seq,
                AfterLost::Retry => {
                    tracing::info!(target: "berth::cluster", repo = %Escaped::token(&self.name), txid = %txid, after = lost.0, "lost the compare to pushes of other refs; retrying");
                    (base_seq, base_rev) = lost;
                }
                AfterLost::Lost(lost) => {
                    self.decide_all(&prepared, &txid, Verdict::Abort).await;
                    return Err(GateRefusal::lost(Refusal::LostToAnotherPush, lost));
                }
                AfterLost::GiveUp => {
                    self.decide_all(&prepared, &txid, Verdict::Abort).await;
                    return Err(GateRefusal::new(Refusal::OutRaced {
                        rounds: decide::MAX_ROUNDS,
                    }));
                }
            }
        };
        // Apply in log order here too: the entries before this one first (they are other
        // refs, and on their way from their own pushes).
        wait_applied(&self.dir, committed_seq - 1, APPLY_WAIT).await;
        tracing::info!(target: "berth::cluster", repo = %Escaped::token(&self.name), seq = committed_seq, txid = %txid, prepared = 1 + prepared.len(), "committed to the log");
        Ok(Box::new(Decided {
            gate_dir: self.dir.clone(),
            name: self.name.clone(),
            handle: self.handle.clone(),
            cluster: self.cluster.clone(),
            prepared,
            txid,
            seq: committed_seq,
            need,
            k,
        }))
    }

    /// Before the repository's first entry: record its format, so that the replicas that
    /// create their copies (now, or when they catch up) create them alike.
    async fn record_format(&self) -> Result<(), Refusal> {
        let c = &self.cluster;
        let here = {
            let dir = self.dir.to_str().ok_or(Refusal::PathNotUtf8)?;
            let repo =
                crate::repo::Repository::open(dir, &c.env.for_config()).map_err(Refusal::Open)?;
            Format::of(&repo)
        };
        match c.record_format(&self.name, &here).await {
            Ok(recorded) if recorded == here => Ok(()),
            Ok(recorded) => Err(Refusal::FormatMismatch { recorded, here }),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// The etcd compare-and-swap of the log key against `rev`: the entry's head as the log
    /// key, the entry itself (its updates written once) as `entries/<seq>`.
    async fn commit_point(&self, rev: i64, entry: &log::Entry) -> Result<Cas, CommitPoint> {
        let txid = entry.txid.as_str();
        let value = entry.encode()?;
        let head_value = entry.encode_head()?;
        let log_key = super::log_key(&self.name);
        let entry_key = repo_key(&self.name, &format!("entries/{:020}", entry.seq));
        let start = Instant::now();
        loop {
            let r = self
                .cluster
                .etcd
                .txn(
                    &[etcd::Compare::ModRevision(log_key.clone(), rev)],
                    &[
                        etcd::Op::Put(log_key.clone(), head_value.clone(), None),
                        etcd::Op::Put(entry_key.clone(), value.clone(), None),
                    ],
                    &[etcd::Op::Get(log_key.clone())],
                )
                .await;
            match r {
                Ok(t) if t.succeeded => return Ok(Cas::Committed),
                Ok(t) => {
                    let head = t.gets.first().and_then(|g| g.first());
                    let entry = head.and_then(|kv| log::Entry::decode(&kv.value).ok());
                    // A retry after a lost answer finds its own entry: committed once.
                    if entry.as_ref().is_some_and(|e| e.txid == txid) {
                        return Ok(Cas::Committed);
                    }
                    return Ok(Cas::Lost {
                        seq: entry.map_or(0, |e| e.seq),
                        rev: head.map_or(0, |kv| kv.mod_revision),
                    });
                }
                // etcd refuses it whatever the retries (its request limit): nothing written.
                Err(etcd::Error::Status { body, .. }) if body.contains("request is too large") => {
                    return Ok(Cas::TooLarge(value.len()));
                }
                Err(e) if start.elapsed() > COMMIT_RETRY => return Err(CommitPoint::Etcd(e)),
                Err(e) => {
                    tracing::warn!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "commit point: etcd failed, retrying");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
    }

    async fn decide_all(&self, peers: &[Peer], txid: &str, verdict: Verdict) -> usize {
        decide_all(&self.cluster, &self.name, peers, txid, verdict).await
    }
}

impl Cluster {
    /// What the entries after `base` up to `head` of repository `name` are to the push `txid`
    /// of `updates` ([`decide::winners`] on [`Cluster::entries`]).
    pub(super) async fn winners(
        &self,
        name: &str,
        base: u64,
        head: u64,
        txid: &str,
        updates: &[RefUpdate],
    ) -> Result<Winners, log::Error> {
        let entries = self.entries(name, base, head).await?;
        Ok(decide::winners(&entries, txid, updates))
    }
}

/// Why the gate refused a push; the `Display` is the client's text (after `cluster: `). What
/// names nodes' addresses or paths goes to the log, not here.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    /// The accepting replica misses log entries that touch this push's refs (or is ahead of the
    /// head it read).
    #[error("this replica ({node}) is at log entry {applied} of {head}; it is catching up, retry")]
    Behind {
        node: String,
        applied: u64,
        head: u64,
    },
    /// Fewer replicas than the quorum prepared.
    #[error("only {prepared} of {k} replicas could prepare the push; retry")]
    NoQuorum { prepared: usize, k: usize },
    /// Another push changed one of these refs first.
    #[error("another push to this ref committed first")]
    LostToAnotherPush,
    /// Pushes of other refs won the compare every round.
    #[error("{rounds} other pushes to this repository committed first; retry")]
    OutRaced { rounds: u32 },
    /// The log entry is larger than etcd takes in one request.
    #[error(
        "{refs} ref updates ({bytes} bytes) are more than one cluster log entry holds \
         (etcd's --max-request-bytes); push them in parts"
    )]
    TooLarge { refs: usize, bytes: usize },
    /// etcd did not answer the commit point: the entry may or may not be in the log.
    #[error("etcd did not confirm the commit; the push may still land, fetch to see")]
    Unconfirmed,
    /// etcd could not be read or written.
    #[error("the cluster's etcd is unavailable; retry")]
    EtcdUnavailable,
    /// The entries after the push's base could not be read.
    #[error("cannot read the repository's log; retry")]
    LogUnreadable,
    /// The repository's recorded format is not this copy's.
    #[error("the cluster holds this repository as {recorded}, this replica's copy is {here}")]
    FormatMismatch { recorded: Format, here: Format },
    /// A ref name cannot travel (not UTF-8), or a name a peer would refuse.
    #[error(transparent)]
    NotReplicable(wire::NotReplicable),
    /// This replica's copy is at a path that is not UTF-8.
    #[error("repository path is not UTF-8")]
    PathNotUtf8,
    /// This replica's copy cannot be opened.
    #[error(transparent)]
    Open(crate::repo::Error),
    /// Committed to the log, but fewer replicas than the quorum applied it (the refs are
    /// refused to the client, though committed).
    #[error("committed to the log as entry {seq}, but only {applied} of {k} replicas applied it")]
    Unapplied { seq: u64, applied: usize, k: usize },
}

/// Why the commit point wrote nothing, or may have.
#[derive(Debug, thiserror::Error)]
enum CommitPoint {
    /// The entry cannot be encoded: nothing written.
    #[error(transparent)]
    NotReplicable(#[from] wire::NotReplicable),
    /// etcd did not confirm it, retries included.
    #[error(transparent)]
    Etcd(etcd::Error),
}

impl From<Refusal> for GateRefusal {
    fn from(r: Refusal) -> Self {
        GateRefusal::new(r)
    }
}

/// The refusal for an etcd failure (its details, addresses included, go to the log).
fn unavailable(e: super::Error) -> Refusal {
    tracing::warn!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "etcd");
    Refusal::EtcdUnavailable
}

/// The answer of the commit point.
enum Cas {
    /// The entry is in the log.
    Committed,
    /// Another entry is the log's head: its sequence number and the key's mod revision.
    Lost { seq: u64, rev: i64 },
    /// The entry (this many bytes) is larger than etcd takes in one request: not written.
    TooLarge(usize),
}

/// Wait until the replica at `dir` applied `seq` (at most `limit`); whether it did.
pub(super) async fn wait_applied(dir: &std::path::Path, seq: u64, limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        if applied_seq(dir) >= seq {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Tell `peers` the verdict; how many confirmed.
async fn decide_all(
    cluster: &Cluster,
    repo: &str,
    peers: &[Peer],
    txid: &str,
    verdict: Verdict,
) -> usize {
    decide_until(cluster, repo, peers, txid, verdict, peers.len()).await
}

/// Tell `peers` the verdict; once `enough` confirmed, return (how many did) and let the other
/// answers come in the background: a slow replica does not hold the client's `ok` up.
async fn decide_until(
    cluster: &Cluster,
    repo: &str,
    peers: &[Peer],
    txid: &str,
    verdict: Verdict,
    enough: usize,
) -> usize {
    let query = verdict.query();
    let verdict = verdict.word();
    let sends = peers.iter().map(|p| {
        let url = http::join(
            &p.url,
            &format!("/_berth/cluster/decide?repo={repo}&txid={txid}&{query}"),
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
                let result = match &r {
                    Ok((status, b)) => Answered::new(*status, b).to_string(),
                    Err(e) => e.to_string(),
                };
                tracing::warn!(target: "berth::cluster", peer = %Escaped::token(&name), verdict, result = %Escaped::text(&result), "decision not confirmed");
            }
            matches!(r, Ok((200, _)))
        }
    });
    let mut pending: futures_util::stream::FuturesUnordered<_> = sends.collect();
    let mut confirmed = 0;
    while confirmed < enough {
        match futures_util::StreamExt::next(&mut pending).await {
            Some(true) => confirmed += 1,
            Some(false) => {}
            None => break,
        }
    }
    if !pending.is_empty() {
        tokio::spawn(async move {
            while futures_util::StreamExt::next(&mut pending).await.is_some() {}
        });
    }
    confirmed
}

/// A push committed to the log, to be applied on the prepared replicas.
struct Decided {
    gate_dir: PathBuf,
    name: String,
    handle: tokio::runtime::Handle,
    cluster: Arc<Cluster>,
    prepared: Vec<Peer>,
    txid: String,
    seq: u64,
    need: usize,
    k: usize,
}

impl GateCommit for Decided {
    fn finish(
        self: Box<Self>,
        committed_here: bool,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let mut applied = 0;
        if committed_here {
            // In log order only: if an entry before this one is not applied here yet, the
            // catch-up applies it and records this one (its refs already hold their values).
            match self.cluster.record_applied(&self.gate_dir, self.seq) {
                Ok(true) => {}
                Ok(false) => {
                    let _rt = self.handle.enter();
                    self.cluster.clone().spawn_catch_up(self.name.clone());
                }
                Err(e) => {
                    tracing::error!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "cannot record the applied log entry")
                }
            }
            applied += 1;
        }
        // The client hears back once the quorum applied it; the rest confirm in the background.
        applied += self.handle.block_on(decide_until(
            &self.cluster,
            &self.name,
            &self.prepared,
            &self.txid,
            Verdict::Commit { seq: self.seq },
            self.need.saturating_sub(applied),
        ));
        if applied >= self.need {
            Ok(())
        } else {
            Err(Box::new(Refusal::Unapplied {
                seq: self.seq,
                applied,
                k: self.k,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_reads_the_refusals_as_before() {
        let unapplied = Refusal::Unapplied {
            seq: 7,
            applied: 1,
            k: 3,
        };
        assert_eq!(
            unapplied.to_string(),
            "committed to the log as entry 7, but only 1 of 3 replicas applied it"
        );
        let recorded = Format {
            object_format: wire::ObjectFormat::Sha1,
            ref_format: wire::RefFormat::Files,
        };
        let here = Format {
            object_format: wire::ObjectFormat::Sha256,
            ref_format: wire::RefFormat::Reftable,
        };
        assert_eq!(
            Refusal::FormatMismatch { recorded, here }.to_string(),
            "the cluster holds this repository as sha1/files, this replica's copy is sha256/reftable"
        );
        assert_eq!(
            Refusal::NotReplicable(wire::NotReplicable::NotUtf8).to_string(),
            "a ref name is not UTF-8"
        );
        assert_eq!(
            Refusal::PathNotUtf8.to_string(),
            "repository path is not UTF-8"
        );
    }
}
