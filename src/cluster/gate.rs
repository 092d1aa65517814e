//! The accepting replica's commit point: [`Gate`] is the push's
//! [`crate::receive::CommitGate`]. For each ref transaction the session holds prepared it goes
//! through four steps, each a function with its own refusal ([`Gate::check_base`] →
//! [`BaseRefused`], [`Gate::prepare`] → [`PrepareRefused`], [`Gate::commit_point`] →
//! [`CommitRefused`], [`Decided::finish`] → [`Unapplied`]); the replicas that prepared are a
//! [`Prepared`], which commits, aborts, or aborts when dropped:
//!
//! 1. reads the repository's log head from etcd (sequence number S, mod revision R) and checks
//!    this replica applied exactly S (else it is behind and refuses);
//! 2. sends the updates and the id of the push's pack stream (`tee.rs`: the client's pack, teed
//!    to the other replicas as it was read, already ingested and checked there) to every other
//!    live replica's `/_berth/cluster/prepare`, in parallel; each prepared replica's answer
//!    stays open until that replica answered its decide request (step 5, or an abort), so that
//!    if this node dies the replicas learn it at once and ask the log (`replica.rs`);
//! 3. with fewer than the acknowledgement quorum prepared (itself included): aborts everywhere;
//! 4. the commit point: one etcd txn — if the log key's mod revision is still R and the
//!    replicas key's is still the one of the list the push was prepared on, put the entry
//!    S+1 as the log key and as `entries/<S+1>`. A changed list (a node joined, one was
//!    removed: `upkeep.rs`) is compared again if this node and the replicas that prepared are
//!    still a quorum in it, else the push is refused (nothing landed). An answer lost to an etcd failure is retried
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
use tracing::Instrument;

use super::applied::Recorded;
use super::decide::{
    self, AfterLost, AfterMoved, Failure, Next, Outcome, Position, Quorum, RETRY, Verdict, Winners,
};
use super::log::new_of;
use super::metrics::PrepareOutcome;
use super::objects::Format;
use super::placement::Placed;
use super::turns::{self, Age, Ask};
use super::wire::{self, Answered, Attempts};
use super::{Cluster, applied_seq, http, log, needed};
use crate::escape::Escaped;
use crate::receive::{CommitGate, GateCommit, GateRefusal, Missing, PackTee};
use crate::refs::{RefUpdate, Refs};

/// How long a replica may take to ingest and prepare.
const PREPARE_TIMEOUT: Duration = Duration::from_secs(60);
/// Once a quorum prepared, how long the other replicas still have.
const PREPARE_GRACE: Duration = Duration::from_secs(2);
/// How long a committed entry waits for the entries before it to be applied here.
pub(super) const APPLY_WAIT: Duration = Duration::from_secs(5);

/// The commit gate of one push to one repository.
#[derive(Debug)]
pub(crate) struct Gate {
    pub(crate) cluster: Arc<Cluster>,
    /// The repository's cluster name.
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
    pub(crate) handle: tokio::runtime::Handle,
    /// The reflog identity, for the replicas' transactions.
    pub(crate) committer_name: String,
    pub(crate) committer_email: String,
    /// The push's pack stream to the other replicas (the same as its `pack_tee`).
    pub(crate) stream: Option<Arc<super::PushStream>>,
    /// The log entry this replica had applied when the push began.
    pub(crate) applied_at_start: u64,
    /// The push's age, for its turns to lock refs (`turns.rs`).
    age: Age,
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
            replicas,
            handle.clone(),
        ));
        let gate = Arc::new(Gate {
            cluster,
            name,
            applied_at_start: applied_seq(std::path::Path::new(dir)),
            dir: PathBuf::from(dir),
            handle,
            committer_name: committer_name.to_owned(),
            committer_email: committer_email.to_owned(),
            stream: Some(stream.clone()),
            age: Age::now(),
        });
        (stream, gate)
    }
}

/// A prepared peer.
struct Peer {
    name: String,
    url: String,
    /// The rest of its prepare's answer, held open until it answered its decide request: the
    /// connection's close (this node died, or gave up on it) tells it to ask the log
    /// (`replica.rs`). `None`: a replica that does not hold its answer open.
    hold: Option<hyper::body::Incoming>,
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

    fn lost_ref_retries(&self) -> u32 {
        RETRY.lost_ref_batches
    }

    fn turn(&self, updates: &[RefUpdate], format: crate::repo::RefFormat) -> Option<Box<dyn Send>> {
        let names = updates.iter().map(|u| u.name.as_slice());
        // Per ref, atomic or not: the session's locks of the refs an older push holds fail
        // (all of an atomic push's then), as they did before turns.
        let store = turns::Store::of(format);
        let taken =
            (self.cluster.turns).take(&self.name, self.age, names, store, Ask::PerRef, turns::WAIT);
        taken.ok().map(|t| Box::new(t) as Box<dyn Send>)
    }

    fn objects_missing(&self) -> Missing {
        self.handle.block_on(self.objects_missing_async())
    }
}

/// How long a push whose objects are missing here waits for this replica to catch up.
const CATCH_UP_FOR_PUSH: Duration = Duration::from_secs(10);

impl Gate {
    /// Objects the push builds on are missing here: if this replica is behind the log, catch
    /// up (for at most [`CATCH_UP_FOR_PUSH`]); then whether they may be here now, or the
    /// push is refused in the cluster's words (nothing of it landed anywhere).
    async fn objects_missing_async(&self) -> Missing {
        let c = &self.cluster;
        let head = |now: u64| async move {
            match c.log.head(&self.name).await {
                Ok(h) => Some(h.seq),
                Err(e) => {
                    tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.name), error = %Escaped::text(&e.to_string()), "log head, for a push lacking objects");
                    // Unknown: what it applied since the push began tells whether it was behind.
                    (self.applied_at_start < now).then_some(now)
                }
            }
        };
        let then = self.applied_at_start;
        let mut now = applied_seq(&self.dir);
        let Some(mut seq) = head(now).await else {
            return Missing::Stands;
        };
        if decide::lacking(then, now, seq) == decide::Lacking::Behind {
            tracing::info!(target: "berth::cluster", repo = %Escaped::token(&self.name), applied = now, head = seq, "a push lacks objects here, behind the log: catching up");
            c.catch_up_within(&self.name, CATCH_UP_FOR_PUSH).await;
            now = applied_seq(&self.dir);
            seq = head(now).await.unwrap_or(seq);
        }
        let node = c.node.clone();
        match decide::lacking(then, now, seq) {
            decide::Lacking::NotBehind => Missing::Stands,
            decide::Lacking::CaughtUp => Missing::MayBeHere(GateRefusal::new(Told::new(
                Outcome::NotApplied,
                Lacks::CaughtUp {
                    node,
                    applied: then,
                    now,
                },
            ))),
            decide::Lacking::Behind => Missing::Refused(GateRefusal::new(Told::new(
                Outcome::NotApplied,
                Lacks::Behind {
                    node,
                    applied: now,
                    head: seq,
                },
            ))),
        }
    }
}

/// Why objects a push builds on were missing on the replica it reached; the `Display` is the
/// client's text (after `cluster: not applied: `).
#[derive(Debug, thiserror::Error)]
pub(super) enum Lacks {
    /// Behind the log still: its catch-up failed or took too long.
    #[error(
        "this replica ({node}) is behind the repository's log (at entry {applied} of {head}) and lacks objects the push builds on; nothing landed, retry"
    )]
    Behind {
        node: String,
        applied: u64,
        head: u64,
    },
    /// Behind when the push's pack came, caught up since (the pack is not read again).
    #[error(
        "this replica ({node}) was behind the repository's log (at entry {applied}) and lacked objects the push builds on; it has caught up (entry {now}), nothing landed, retry"
    )]
    CaughtUp {
        node: String,
        applied: u64,
        now: u64,
    },
}

/// The log head a push goes on from: its last entry's sequence number and the log key's mod
/// revision, the compare of the commit point.
type Base = log::Head;

/// How many replicas make the quorum of a push, of how many.
#[derive(Debug, Clone, Copy)]
struct Need {
    need: usize,
    k: usize,
}

impl Gate {
    /// The steps of one batch: the base, the replicas' prepare, the commit point; the
    /// acknowledgement comes with [`Decided::finish`].
    async fn decide_async(
        &self,
        updates: &[RefUpdate],
    ) -> Result<Box<dyn GateCommit>, GateRefusal> {
        let id = wire::Id::random();
        let txid = id.to_string();
        // The updates are packed (once, for the prepare and the entry) while the log head is
        // read; a base refused is still the first refusal.
        let pack = async { wire::Packed::of(updates) };
        let (base, packed) = async { tokio::join!(self.check_base(&txid, updates), pack) }
            .instrument(tracing::info_span!("cluster_base"))
            .await;
        let base = base?;
        let need = self.need();
        // The list the push is prepared on; the commit point compares its revision.
        let placed = self.placed().await?;
        let packed = packed.map_err(PrepareRefused::from)?;
        let shallow = self.shallow_roots();
        let entry = log::Append {
            seq: base.seq + 1,
            txid: &txid,
            origin: &self.cluster.node,
            updates,
            packed: &packed,
            shallow: &shallow,
        };
        let prepared = self.prepare(base, id, &entry, need, &placed.list).await?;
        let seq = match self
            .commit_point(base, entry, placed, &prepared.names(), need)
            .instrument(tracing::info_span!("cluster_commit_point"))
            .await
        {
            Ok(seq) => seq,
            Err(e) => {
                match e.in_the_log() {
                    InTheLog::No => {
                        prepared.abort().await;
                    }
                    // Their prepare connections close: the replicas ask the log.
                    InTheLog::Unknown => prepared.leave_to_the_log(),
                }
                return Err(e.into());
            }
        };
        // In the log: from here on the prepared replicas are to commit, whatever happens.
        let peers = prepared.committed(seq);
        // Apply in log order here too: the entries before this one first (they are other
        // refs, and on their way from their own pushes).
        wait_applied(&self.dir, seq - 1, APPLY_WAIT).await;
        tracing::info!(target: "berth::cluster", repo = %Escaped::token(&self.name), seq, txid = %txid, prepared = 1 + peers.peers.len(), "committed to the log");
        Ok(Box::new(Decided {
            gate_dir: self.dir.clone(),
            name: self.name.clone(),
            handle: self.handle.clone(),
            cluster: self.cluster.clone(),
            peers,
            need,
        }))
    }

    /// The push's shallow roots: the client's `shallow` lines that this repository holds as
    /// shallow commits (`$GIT_DIR/shallow`, where its connectivity phase recorded the new
    /// ones, `receive.shallowUpdate`). The replicas check connectivity with them and record
    /// those they need; empty for a push from a full clone.
    fn shallow_roots(&self) -> Vec<gix_hash::ObjectId> {
        let client = match &self.stream {
            Some(s) => s.shallow(),
            None => return Vec::new(),
        };
        if client.is_empty() {
            return Vec::new();
        }
        let here: std::collections::HashSet<gix_hash::ObjectId> =
            crate::objects::incomplete::recorded_shallow(&self.dir, client[0].kind())
                .into_iter()
                .collect();
        client.into_iter().filter(|id| here.contains(id)).collect()
    }

    /// The quorum: the configured K's, however many replicas the repository has, so that a
    /// repository placed short (nodes were down) is never acknowledged on fewer copies.
    fn need(&self) -> Need {
        let k = self.cluster.replicas();
        Need {
            need: needed(self.cluster.ack, k),
            k,
        }
    }

    /// The repository's replica list as this node knows it, which must list this node.
    async fn placed(&self) -> Result<Placed, BaseRefused> {
        let c = &self.cluster;
        let placed = c
            .placement
            .placed_of(&self.name)
            .await
            .map_err(unavailable)?;
        match placed {
            Some(p) if p.list.contains(&c.node) => Ok(p),
            _ => Err(BaseRefused::NotAReplica {
                node: c.node.clone(),
            }),
        }
    }

    /// Step 1, the base: the log's head, and this replica applied it (or misses entries of
    /// other refs only); before the repository's first entry, its format recorded.
    async fn check_base(&self, txid: &str, updates: &[RefUpdate]) -> Result<Base, BaseRefused> {
        let c = &self.cluster;
        // What this replica applied, read before the log's head: entries are applied only
        // once committed, so it is never ahead of that head (read after, a concurrent push's
        // entry could be applied in between).
        let applied = applied_seq(&self.dir);
        let head = c.log.head(&self.name).await.map_err(unavailable)?;
        let seq = head.seq;
        let position = decide::position(applied, seq);
        if position != Position::Current {
            if position == Position::Behind {
                c.clone().spawn_catch_up(self.name.clone());
            }
            // Behind by entries of other refs only (their decisions on their way here): the
            // old values checked under this push's locks still hold, so it goes on at the head.
            let missed = match position {
                Position::Behind => c
                    .winners(&self.name, applied, seq, txid, updates)
                    .await
                    .ok(),
                _ => None,
            };
            if !matches!(missed, Some(Winners::Disjoint)) {
                return Err(BaseRefused::Behind {
                    node: c.node.clone(),
                    applied,
                    head: seq,
                    // Only some refs are among the entries it misses: the others may go on.
                    lost: match missed {
                        Some(Winners::Overlap(lost)) => Some(lost),
                        _ => None,
                    },
                });
            }
        }
        if seq == 0 {
            self.record_format().await?;
        }
        Ok(head)
    }

    /// Before the repository's first entry: record its format, so that the replicas that
    /// create their copies (now, or when they catch up) create them alike.
    async fn record_format(&self) -> Result<(), BaseRefused> {
        let c = &self.cluster;
        let here = {
            let dir = self.dir.to_str().ok_or(BaseRefused::PathNotUtf8)?;
            let repo = crate::repo::Repository::open(dir, &c.env.for_config())
                .map_err(BaseRefused::Open)?;
            Format::of(&repo)
        };
        match c.copies.record_format(&self.name, &here).await {
            Ok(recorded) if recorded == here => Ok(()),
            Ok(recorded) => Err(BaseRefused::FormatMismatch { recorded, here }),
            Err(e) => Err(unavailable(e).into()),
        }
    }

    /// Step 2, the prepare: the entry's updates (packed once, as the entry carries them) and the
    /// pack stream's id to every other live replica, in parallel; the ones that prepared, if they
    /// and this one are a quorum (else they are told to abort).
    async fn prepare(
        &self,
        base: Base,
        id: wire::Id,
        entry: &log::Append<'_>,
        need: Need,
        replicas: &[String],
    ) -> Result<Prepared, PrepareRefused> {
        let c = &self.cluster;
        let txid = id.to_string();
        // A batch of deletions needs no objects: it leaves the stream to the batch that does.
        let stream = self
            .stream
            .as_ref()
            .filter(|_| entry.updates.iter().any(|u| new_of(u).is_some()))
            .and_then(|s| s.streamed().cloned());
        let header = wire::encode(&wire::Prepare {
            base_seq: base.seq,
            committer_email: self.committer_email.clone(),
            committer_name: self.committer_name.clone(),
            repo: wire::RepoName::try_from(self.name.as_str())
                .map_err(|e| PrepareRefused::NotReplicable(e.into()))?,
            stream,
            txid: id,
            updates: entry.packed,
            shallow: entry.shallow.iter().copied().map(wire::Oid).collect(),
            origin: wire::NodeName::try_from(c.node.as_str()).ok(),
            age: Some(self.age),
        });
        let mut body = Vec::with_capacity(4 + header.len());
        body.extend_from_slice(&(header.len() as u32).to_be_bytes());
        body.extend_from_slice(&header);
        let body = Bytes::from(body);

        let peers = c.membership.urls_of(replicas).await.map_err(unavailable)?;
        let sends = peers.into_iter().map(|(name, url)| {
            let body = body.clone();
            async move {
                let target = http::join(&url, "/_berth/cluster/prepare");
                let r = c
                    .peers
                    .post_held(&name, &target, body, 64 * 1024, PREPARE_TIMEOUT)
                    .await;
                match r {
                    Ok((status, answer, hold)) => (Peer { name, url, hold }, Ok((status, answer))),
                    Err(e) => (
                        Peer {
                            name,
                            url,
                            hold: None,
                        },
                        Err(e),
                    ),
                }
            }
        });
        // Every answer, or once the quorum prepared, what comes within PREPARE_GRACE more: a
        // stopped or partitioned replica does not hold the push up (it resolves its prepared
        // transaction from the log once its prepare connection closes, then catches up).
        let mut pending: futures_util::stream::FuturesUnordered<_> = sends.collect();
        let mut prepared = Prepared::new(self, txid);
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
            let outcome = match r {
                Ok((200, _)) => {
                    prepared.peers.push(peer);
                    PrepareOutcome::Prepared
                }
                Ok((status, why)) => {
                    refused.push(&peer.name, Answered::new(status, &why));
                    PrepareOutcome::Refused
                }
                Err(e) => {
                    refused.push(&peer.name, e);
                    PrepareOutcome::Unreachable
                }
            };
            c.metrics.prepare(outcome, 1);
            if grace.is_none() && decide::quorum(prepared.len(), need.need) == Quorum::Met {
                grace = Some(Box::pin(tokio::time::sleep(PREPARE_GRACE)));
            }
        }
        drop(pending);
        c.metrics.prepare(PrepareOutcome::Late, slow as u64);
        if let Quorum::Short { prepared: n } = decide::quorum(prepared.len(), need.need) {
            c.metrics.quorum_failure();
            let txid = prepared.txid.clone();
            prepared.abort().await;
            // The replicas' reasons name nodes and paths: for the log, not the client.
            tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.name), txid = %txid, refused = %Escaped::text(&refused.to_string()), slow, "no quorum prepared");
            return Err(PrepareRefused::NoQuorum {
                prepared: n,
                k: need.k,
            });
        }
        Ok(prepared)
    }

    /// Step 3, the commit point: the entry after `base` compared-and-swapped into the log,
    /// again after entries of other refs that won the compare ([`decide::after_lost_compare`]),
    /// and again on a changed replica list if the replicas that `prepared` are still a
    /// quorum in it ([`decide::after_moved`]); the entry's sequence number.
    async fn commit_point(
        &self,
        base: Base,
        mut entry: log::Append<'_>,
        placed: Placed,
        prepared: &[String],
        need: Need,
    ) -> Result<u64, CommitRefused> {
        let c = &self.cluster;
        let mut base = base;
        let mut placed = placed;
        let mut rounds = 0;
        loop {
            entry.seq = base.seq + 1;
            let lost = match self.compare_and_swap(base.rev, placed.rev, &entry).await? {
                log::Put::Committed => {
                    c.metrics.commit();
                    return Ok(entry.seq);
                }
                log::Put::Lost(lost) => lost,
                log::Put::Moved(now) => {
                    c.placement.learn(&self.name, now.clone());
                    rounds += 1;
                    let after = decide::after_moved(&now.list, &c.node, prepared, need.need);
                    tracing::info!(target: "berth::cluster", repo = %Escaped::token(&self.name), txid = %entry.txid, replicas = %now.list.join(","), after = ?after, "the replica list changed under the push");
                    match after {
                        AfterMoved::Retry if rounds < RETRY.lost_compare_rounds => {
                            placed = now;
                            continue;
                        }
                        AfterMoved::Retry => {
                            return Err(CommitRefused::OutRaced {
                                rounds: RETRY.lost_compare_rounds,
                            });
                        }
                        AfterMoved::NotHere => {
                            return Err(CommitRefused::Moved {
                                node: c.node.clone(),
                            });
                        }
                        AfterMoved::Short { prepared } => {
                            return Err(CommitRefused::MovedShort {
                                prepared,
                                k: need.k,
                            });
                        }
                    }
                }
            };
            c.metrics.lost_compare();
            // Other pushes committed since the base. If none of them touched these refs, the
            // old values checked under the locks still hold: try again after them.
            rounds += 1;
            let winners = c
                .winners(&self.name, base.seq, lost.seq, entry.txid, entry.updates)
                .await
                .map_err(|e| {
                    tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.name), error = %Escaped::text(&e.to_string()), "cannot read the log");
                    CommitRefused::LogUnreadable
                })?;
            match decide::after_lost_compare(winners, rounds) {
                AfterLost::Committed(seq) => {
                    // The entry of this push is among the winners (an answer was lost).
                    c.metrics.commit();
                    return Ok(seq);
                }
                AfterLost::Retry => {
                    tracing::info!(target: "berth::cluster", repo = %Escaped::token(&self.name), txid = %entry.txid, after = lost.seq, "lost the compare to pushes of other refs; retrying");
                    base = lost;
                }
                AfterLost::Lost(lost) => return Err(CommitRefused::LostToAnotherPush { lost }),
                AfterLost::GiveUp => {
                    return Err(CommitRefused::OutRaced {
                        rounds: RETRY.lost_compare_rounds,
                    });
                }
            }
        }
    }

    /// One compare-and-put of the entry against the log key's mod revision `rev`
    /// ([`log::Log::compare_and_put`]); etcd failures retried as [`RETRY`]'s `etcd` says.
    async fn compare_and_swap(
        &self,
        rev: i64,
        placed: i64,
        entry: &log::Append<'_>,
    ) -> Result<log::Put, CommitRefused> {
        let txid = entry.txid;
        let value = entry.encode()?;
        let head_value = entry.encode_head()?;
        let start = Instant::now();
        loop {
            let e = match self
                .cluster
                .log
                .compare_and_put(
                    &self.name,
                    rev,
                    placed,
                    entry.seq,
                    txid,
                    &head_value,
                    &value,
                )
                .await
            {
                Ok(put) => return Ok(put),
                Err(e) => e,
            };
            // etcd refuses it whatever the retries (its request limit): nothing written.
            let failure = match e.is_too_large() {
                true => Failure::Refused,
                false => Failure::Unavailable,
            };
            match (failure, RETRY.etcd.after(failure, start.elapsed())) {
                (_, Next::Again(pause)) => {
                    tracing::warn!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "commit point: etcd failed, retrying");
                    tokio::time::sleep(pause).await;
                }
                (Failure::Refused, Next::GiveUp) => {
                    let (bytes, refs) = (value.len(), entry.updates.len());
                    tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.name), txid = %txid, bytes, refs, "log entry larger than etcd takes");
                    return Err(CommitRefused::TooLarge { refs, bytes });
                }
                (Failure::Unavailable, Next::GiveUp) => {
                    // Unknown whether the entry is in the log.
                    tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&self.name), txid = %txid, error = %Escaped::text(&e.to_string()), "commit point unconfirmed");
                    return Err(CommitRefused::Unconfirmed);
                }
            }
        }
    }
}

impl Cluster {
    /// What the entries after `base` up to `head` of repository `name` are to the push `txid`
    /// of `updates` ([`decide::winners`] on [`log::Log::entries`]).
    pub(super) async fn winners(
        &self,
        name: &str,
        base: u64,
        head: u64,
        txid: &str,
        updates: &[RefUpdate],
    ) -> Result<Winners, log::Error> {
        let entries = self.log.entries(name, base, head).await?;
        Ok(decide::winners(&entries, txid, updates))
    }
}

/// The replicas that prepared a push's transaction (the accepting one aside), holding their
/// locks until told: [`Prepared::committed`] once the entry is in the log, [`Prepared::abort`]
/// when it is not, [`Prepared::leave_to_the_log`] when nobody knows. Dropped otherwise, it
/// tells them to abort (in the background): no path out of the gate leaves them waiting for
/// their decision timeout by mistake.
struct Prepared {
    cluster: Arc<Cluster>,
    repo: String,
    txid: String,
    handle: tokio::runtime::Handle,
    peers: Vec<Peer>,
}

impl Prepared {
    fn new(gate: &Gate, txid: String) -> Prepared {
        Prepared {
            cluster: gate.cluster.clone(),
            repo: gate.name.clone(),
            txid,
            handle: gate.handle.clone(),
            peers: Vec::new(),
        }
    }

    /// How many peers prepared.
    fn len(&self) -> usize {
        self.peers.len()
    }

    /// The names of the peers that prepared.
    fn names(&self) -> Vec<String> {
        self.peers.iter().map(|p| p.name.clone()).collect()
    }

    /// Tell them to abort; how many confirmed.
    async fn abort(mut self) -> usize {
        let peers = std::mem::take(&mut self.peers);
        decide_all(&self.cluster, &self.repo, peers, &self.txid, Verdict::Abort).await
    }

    /// The entry may or may not be in the log: tell them nothing; their prepare connections
    /// close, and each reads the log.
    fn leave_to_the_log(mut self) {
        self.peers.clear();
    }

    /// The entry is in the log as `seq`: they are to commit it.
    fn committed(mut self, seq: u64) -> Committed {
        Committed {
            cluster: self.cluster.clone(),
            repo: std::mem::take(&mut self.repo),
            txid: std::mem::take(&mut self.txid),
            peers: std::mem::take(&mut self.peers),
            seq,
        }
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if self.peers.is_empty() {
            return;
        }
        let peers = std::mem::take(&mut self.peers);
        let (cluster, repo, txid) = (self.cluster.clone(), self.repo.clone(), self.txid.clone());
        tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&repo), txid = %txid, "prepared replicas left undecided; aborting them");
        self.handle.spawn(async move {
            decide_all(&cluster, &repo, peers, &txid, Verdict::Abort).await;
        });
    }
}

/// The replicas that prepared a push committed to the log as entry `seq`, to be told so. Not
/// told (dropped: their prepare connections close), each reads the log and commits.
struct Committed {
    cluster: Arc<Cluster>,
    repo: String,
    txid: String,
    peers: Vec<Peer>,
    seq: u64,
}

impl Committed {
    /// Tell them to commit; once `enough` confirmed, how many did (the others confirm in the
    /// background).
    async fn tell(self, enough: usize) -> usize {
        let verdict = Verdict::Commit { seq: self.seq };
        decide_until(
            &self.cluster,
            &self.repo,
            self.peers,
            &self.txid,
            verdict,
            enough,
        )
        .await
    }
}

/// A refusal as the client reads it: what happened to the push ([`Outcome`]), then why.
#[derive(Debug, thiserror::Error)]
#[error("{outcome}: {why}")]
pub(super) struct Told {
    outcome: Outcome,
    why: Box<dyn std::error::Error + Send + Sync>,
}

impl Told {
    fn new(outcome: Outcome, why: impl std::error::Error + Send + Sync + 'static) -> Told {
        Told {
            outcome,
            why: Box::new(why),
        }
    }
}

/// The etcd failure behind a refusal (its details, addresses included, go to the log).
#[derive(Debug, thiserror::Error)]
#[error("the cluster's etcd is unavailable; retry")]
pub(super) struct EtcdUnavailable;

/// Why the gate refused a push at its base (step 1); the `Display` is the client's text
/// (after `cluster: `). What names nodes' addresses or paths goes to the log, not here.
#[derive(Debug, thiserror::Error)]
pub(super) enum BaseRefused {
    /// The accepting replica misses log entries that touch this push's refs (or is ahead of the
    /// head it read).
    #[error("this replica ({node}) is at log entry {applied} of {head}; it is catching up, retry")]
    Behind {
        node: String,
        applied: u64,
        head: u64,
        /// The positions of the refs among the missed entries, when only some are.
        lost: Option<Vec<usize>>,
    },
    /// etcd could not be read or written.
    #[error(transparent)]
    Etcd(#[from] EtcdUnavailable),
    /// The repository's recorded format is not this copy's.
    #[error("the cluster holds this repository as {recorded}, this replica's copy is {here}")]
    FormatMismatch { recorded: Format, here: Format },
    /// This replica's copy is at a path that is not UTF-8.
    #[error("repository path is not UTF-8")]
    PathNotUtf8,
    /// This replica's copy cannot be opened.
    #[error(transparent)]
    Open(crate::repo::Error),
    /// This node is not (or no longer) one of the repository's replicas.
    #[error("this node ({node}) no longer holds a replica of this repository; retry")]
    NotAReplica { node: String },
}

/// Why the gate refused a push at the replicas' prepare (step 2).
#[derive(Debug, thiserror::Error)]
pub(super) enum PrepareRefused {
    /// A ref name cannot travel (not UTF-8), or a name a peer would refuse.
    #[error(transparent)]
    NotReplicable(#[from] wire::NotReplicable),
    /// etcd (the live nodes) could not be read.
    #[error(transparent)]
    Etcd(#[from] EtcdUnavailable),
    /// Fewer replicas than the quorum prepared.
    #[error("only {prepared} of {k} replicas could prepare the push; retry")]
    NoQuorum { prepared: usize, k: usize },
}

/// Why the gate refused a push at the commit point (step 3).
#[derive(Debug, thiserror::Error)]
pub(super) enum CommitRefused {
    /// The entry cannot be encoded: nothing written.
    #[error(transparent)]
    NotReplicable(#[from] wire::NotReplicable),
    /// Another push changed one of these refs first (their positions in the batch).
    #[error("another push to this ref committed first")]
    LostToAnotherPush { lost: Vec<usize> },
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
    #[error("etcd did not confirm the commit; fetch to see")]
    Unconfirmed,
    /// The entries after the push's base could not be read.
    #[error("cannot read the repository's log; retry")]
    LogUnreadable,
    /// The repository's replicas changed under the push and this node is not one any more.
    #[error(
        "the repository's replicas changed and this node ({node}) no longer holds one; nothing landed, retry"
    )]
    Moved { node: String },
    /// The repository's replicas changed under the push and too few that prepared it remain.
    #[error(
        "the repository's replicas changed: only {prepared} of {k} that prepared the push still hold it; nothing landed, retry"
    )]
    MovedShort { prepared: usize, k: usize },
}

/// Whether a refused commit point may have written the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InTheLog {
    /// It is not in the log: the prepared replicas abort.
    No,
    /// Nobody knows: the prepared replicas read the log (their prepare connections close).
    Unknown,
}

impl CommitRefused {
    /// What the client is told happened: nothing, unless etcd's answer was lost.
    fn outcome(&self) -> Outcome {
        match self.in_the_log() {
            InTheLog::No => Outcome::NotApplied,
            InTheLog::Unknown => Outcome::MayHaveLanded,
        }
    }

    fn in_the_log(&self) -> InTheLog {
        match self {
            CommitRefused::Unconfirmed => InTheLog::Unknown,
            _ => InTheLog::No,
        }
    }
}

/// Committed to the log, but fewer replicas than the quorum applied it (step 4: the refs are
/// refused to the client, though committed: [`Outcome::Landed`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "committed to the log as entry {seq}, but only {applied} of {k} replicas applied it; the others catch up"
)]
pub(super) struct Unapplied {
    seq: u64,
    applied: usize,
    k: usize,
}

impl From<BaseRefused> for GateRefusal {
    fn from(r: BaseRefused) -> Self {
        match r {
            // The lost refs travel beside the refusal: a non-atomic push tries the others.
            BaseRefused::Behind {
                node,
                applied,
                head,
                lost: Some(lost),
            } => {
                let behind = BaseRefused::Behind {
                    node,
                    applied,
                    head,
                    lost: None,
                };
                GateRefusal::lost(Told::new(Outcome::NotApplied, behind), lost)
            }
            // Refused before anything was asked of the replicas or etcd.
            r => GateRefusal::new(Told::new(Outcome::NotApplied, r)),
        }
    }
}

impl From<PrepareRefused> for GateRefusal {
    fn from(r: PrepareRefused) -> Self {
        // Before the commit point: the prepared replicas were told to abort.
        GateRefusal::new(Told::new(Outcome::NotApplied, r))
    }
}

impl From<CommitRefused> for GateRefusal {
    fn from(r: CommitRefused) -> Self {
        let outcome = r.outcome();
        match r {
            CommitRefused::LostToAnotherPush { lost } => GateRefusal::lost(
                Told::new(
                    outcome,
                    CommitRefused::LostToAnotherPush { lost: Vec::new() },
                ),
                lost,
            ),
            r => GateRefusal::new(Told::new(outcome, r)),
        }
    }
}

/// The refusal for an etcd failure (its details, addresses included, go to the log).
fn unavailable(e: super::Error) -> EtcdUnavailable {
    tracing::warn!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "etcd");
    EtcdUnavailable
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
    peers: Vec<Peer>,
    txid: &str,
    verdict: Verdict,
) -> usize {
    let all = peers.len();
    decide_until(cluster, repo, peers, txid, verdict, all).await
}

/// Tell `peers` the verdict; once `enough` confirmed, return (how many did) and let the other
/// answers come in the background: a slow replica does not hold the client's `ok` up. Each
/// peer's prepare connection is closed once it answered.
async fn decide_until(
    cluster: &Cluster,
    repo: &str,
    peers: Vec<Peer>,
    txid: &str,
    verdict: Verdict,
    enough: usize,
) -> usize {
    let query = verdict.query();
    let verdict = verdict.word();
    let sends = peers.into_iter().map(|p| {
        let url = http::join(
            &p.url,
            &format!("/_berth/cluster/decide?repo={repo}&txid={txid}&{query}"),
        );
        let via = cluster.peers.clone();
        let Peer { name, hold, .. } = p;
        async move {
            // Closed when this future ends: after the answer.
            let _hold = hold;
            let r = via
                .post(
                &name,
                &url,
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

/// A push committed to the log, to be applied here and on the prepared replicas (step 4, the
/// acknowledgement).
struct Decided {
    gate_dir: PathBuf,
    name: String,
    handle: tokio::runtime::Handle,
    cluster: Arc<Cluster>,
    peers: Committed,
    need: Need,
}

impl GateCommit for Decided {
    fn finish(
        self: Box<Self>,
        committed_here: bool,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let seq = self.peers.seq;
        let mut applied = 0;
        if committed_here {
            // In log order only: if an entry before this one is not applied here yet, the
            // catch-up applies it and records this one (its refs already hold their values).
            match self.cluster.applied.record(&self.gate_dir, seq) {
                Ok(Recorded::InOrder) => {}
                Ok(Recorded::Gap) => {
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
        let tell = self.peers.tell(self.need.need.saturating_sub(applied));
        applied += (self.handle).block_on(tell.instrument(tracing::info_span!("cluster_decide")));
        if applied >= self.need.need {
            Ok(())
        } else {
            Err(Box::new(Told::new(
                Outcome::Landed,
                Unapplied {
                    seq,
                    applied,
                    k: self.need.k,
                },
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_reads_each_refusal_with_what_happened_to_the_push() {
        let unapplied = Unapplied {
            seq: 7,
            applied: 1,
            k: 3,
        };
        assert_eq!(
            Told::new(Outcome::Landed, unapplied).to_string(),
            "landed: committed to the log as entry 7, but only 1 of 3 replicas applied it; the \
             others catch up"
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
            BaseRefused::FormatMismatch { recorded, here }.to_string(),
            "the cluster holds this repository as sha1/files, this replica's copy is sha256/reftable"
        );
        assert_eq!(
            PrepareRefused::NotReplicable(wire::NotReplicable::NotUtf8).to_string(),
            "a ref name is not UTF-8"
        );
        assert_eq!(
            BaseRefused::PathNotUtf8.to_string(),
            "repository path is not UTF-8"
        );
        let behind = BaseRefused::Behind {
            node: "n1".into(),
            applied: 3,
            head: 5,
            lost: Some(vec![0]),
        };
        assert_eq!(
            behind.to_string(),
            "this replica (n1) is at log entry 3 of 5; it is catching up, retry"
        );
        let lacks = Told::new(
            Outcome::NotApplied,
            Lacks::Behind {
                node: "n1".into(),
                applied: 1,
                head: 2,
            },
        );
        assert_eq!(
            lacks.to_string(),
            "not applied: this replica (n1) is behind the repository's log (at entry 1 of 2) and \
             lacks objects the push builds on; nothing landed, retry"
        );
        let caught_up = Lacks::CaughtUp {
            node: "n1".into(),
            applied: 1,
            now: 2,
        };
        assert_eq!(
            caught_up.to_string(),
            "this replica (n1) was behind the repository's log (at entry 1) and lacked objects the \
             push builds on; it has caught up (entry 2), nothing landed, retry"
        );
        let refusal = GateRefusal::from(behind);
        assert_eq!(refusal.lost, Some(vec![0]));
        assert_eq!(
            refusal.reason.to_string(),
            "not applied: this replica (n1) is at log entry 3 of 5; it is catching up, retry"
        );
        for etcd in [
            BaseRefused::from(EtcdUnavailable).to_string(),
            PrepareRefused::from(EtcdUnavailable).to_string(),
        ] {
            assert_eq!(etcd, "the cluster's etcd is unavailable; retry");
        }
        assert_eq!(
            PrepareRefused::NoQuorum { prepared: 1, k: 3 }.to_string(),
            "only 1 of 3 replicas could prepare the push; retry"
        );
        assert_eq!(
            GateRefusal::from(PrepareRefused::NoQuorum { prepared: 1, k: 3 })
                .reason
                .to_string(),
            "not applied: only 1 of 3 replicas could prepare the push; retry"
        );
        let lost = GateRefusal::from(CommitRefused::LostToAnotherPush { lost: vec![1, 2] });
        assert_eq!(lost.lost, Some(vec![1, 2]));
        assert_eq!(
            lost.reason.to_string(),
            "not applied: another push to this ref committed first"
        );
        assert_eq!(
            CommitRefused::OutRaced { rounds: 64 }.to_string(),
            "64 other pushes to this repository committed first; retry"
        );
        assert_eq!(
            CommitRefused::TooLarge {
                refs: 10,
                bytes: 2048
            }
            .to_string(),
            "10 ref updates (2048 bytes) are more than one cluster log entry holds \
             (etcd's --max-request-bytes); push them in parts"
        );
        assert_eq!(
            GateRefusal::from(CommitRefused::Unconfirmed)
                .reason
                .to_string(),
            "may have landed: etcd did not confirm the commit; fetch to see"
        );
        assert_eq!(
            GateRefusal::from(BaseRefused::from(EtcdUnavailable))
                .reason
                .to_string(),
            "not applied: the cluster's etcd is unavailable; retry"
        );
        assert_eq!(
            CommitRefused::LogUnreadable.to_string(),
            "cannot read the repository's log; retry"
        );
    }

    /// Only an unconfirmed commit point leaves the prepared replicas to read the log; every
    /// other refusal tells them to abort.
    #[test]
    fn which_refusals_abort_the_prepared_replicas() {
        assert_eq!(CommitRefused::Unconfirmed.in_the_log(), InTheLog::Unknown);
        for r in [
            CommitRefused::LostToAnotherPush { lost: vec![0] },
            CommitRefused::OutRaced { rounds: 64 },
            CommitRefused::TooLarge { refs: 1, bytes: 1 },
            CommitRefused::LogUnreadable,
            CommitRefused::NotReplicable(wire::NotReplicable::NotUtf8),
        ] {
            assert_eq!(r.in_the_log(), InTheLog::No, "{r}");
        }
    }
}
