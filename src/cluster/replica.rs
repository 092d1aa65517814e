//! A replica's side of a push: `prepare` (take the streamed pack's quarantine, check
//! connectivity with berth's walk, move the pack in, prepare the same ref transaction and hold
//! its locks),
//! `decide` (commit and record the applied sequence, or abort) and `pack` (objects for a replica
//! catching up). The requests and their bounds are listed in `endpoint.rs`.
//!
//! A prepare goes through [`State`]: preparing (its base checked, its pack moved in, its ref
//! transaction prepared), prepared (its locks held, waiting for the verdict), decided, done
//! ([`Settled`]: committed or aborted).
//!
//! A prepared transaction learns at once when the accepting node is gone: the prepare's answer
//! is `200` and the line `prepared`, and its body stays open until the transaction is decided
//! here; the accepting node holds that connection until this replica answered its decide
//! request. A kill -9 of the accepting node closes it (the kernel closes a dead process's
//! sockets), and the transaction asks the repository's log in etcd, which is authoritative:
//! its entry there (the node died after the commit point) → commit; none → abort. A stopped
//! or partitioned accepting node closes nothing, but its lease expires: the prepare names the
//! accepting node (`origin`), each node keeps one etcd watch on `nodes/`
//! ([`Cluster::watch_leases`]), and when that node's key is deleted every transaction
//! prepared for its pushes asks the log the same way; while the watch is down, a prepared
//! transaction reads the live nodes every [`LIVE_POLL`] instead. Without any word (no origin
//! named, or the origin's lease alive but its word cut: a partition between the two nodes
//! only) it asks the log after [`DECISION_TIMEOUT`]; a log that cannot be read is asked again
//! until then, and then the transaction aborts. `decide::resolve` is that decision.
//!
//! The race: the connection closes while the accepting node is alive (the network between the
//! two failed) and about to write the entry. This replica reads no entry and aborts; the entry
//! is written after. No acknowledged push is lost: the accepting node acknowledges a push only
//! once its quorum answered the decide request with the commit carried out, and this replica,
//! having aborted, answers that request `404` (a decide that comes while it reads the log is
//! answered only if the log's verdict is the same); and no replica diverges: a replica commits
//! only an entry of the log, in log order, so one that aborted is behind by that entry and the
//! catch-up applies it (as one that missed the push would).

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::io::AsyncReadExt;

use super::applied::Recorded;
use super::copy::CopyError;
use super::copy::Local;
use super::decide::{self, Heard, Logged, Position, Resolve, Verdict, Winners};
use super::incoming::Claimed;
use super::log::new_of;
use super::objects::{Keeps, admit, connected, record_shallow};
use super::turns::{self, Age, Ask, GaveWay};
use super::wire::{self, body_stream, text};
use super::{Cluster, applied_seq, repo_dir};
use crate::escape::Escaped;
use crate::refs::{self, Atomicity, RefUpdate, TransactionState};

/// The largest prepare header (the ref updates).
const MAX_HEADER: usize = 64 << 20;
/// How long a prepared transaction that hears nothing (neither its decision nor its accepting
/// node's connection closing or lease going) waits before asking etcd; and how long it asks
/// again while etcd cannot say.
const DECISION_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a prepared transaction whose log read failed listens before reading again.
const ASK_AGAIN: Duration = Duration::from_millis(500);
/// How often a prepared transaction whose accepting node is known reads the live nodes, in
/// case the watch of `nodes/` missed that node's lease going (the watch down).
const LIVE_POLL: Duration = Duration::from_secs(5);
/// The first line of the prepare's `200` answer, whose body then stays open until decided.
pub(super) const PREPARED: &[u8] = b"prepared\n";

/// Why a replica did not prepare a push (the `409` answer's text).
#[derive(Debug, thiserror::Error)]
enum NotPrepared {
    /// This replica has no copy and cannot make one.
    #[error(transparent)]
    Copy(#[from] CopyError),
    /// This replica misses entries that touch the push's refs, or is ahead of its base.
    #[error("replica {node} is at log entry {applied}, the push at {base}")]
    Behind {
        node: String,
        applied: u64,
        base: u64,
    },
    /// The copy could not be opened or its refs read, or the transaction not prepared.
    #[error(transparent)]
    Local(#[from] Local),
    /// The push's pack stream did not bring its pack.
    #[error(transparent)]
    Stream(#[from] super::incoming::Error),
    /// The pack could not be moved in, or the new tips are not connected.
    #[error(transparent)]
    Objects(#[from] super::objects::Error),
    /// An older push holds a ref of it here (`turns.rs`).
    #[error(transparent)]
    GaveWay(#[from] GaveWay),
}

/// Why a decided push failed here (the decide request's `500` text).
#[derive(Debug, thiserror::Error)]
enum NotCommitted {
    /// The ref transaction failed.
    #[error(transparent)]
    Commit(#[from] refs::transaction::commit::Error),
    /// A ref of it failed.
    #[error(transparent)]
    Ref(#[from] Box<refs::RefError>),
    /// The applied sequence number could not be recorded.
    #[error("cannot record seq: {0}")]
    Record(#[source] io::Error),
}

/// A decision for a prepared transaction, and where to say how it went.
struct Decision {
    verdict: Verdict,
    reply: Reply,
}

/// What a prepared transaction hears while it waits.
#[derive(Debug)]
enum Word {
    /// The accepting node's decide request.
    Decision(Decision),
    /// The prepare's connection to the accepting node closed.
    OriginGone,
    /// The accepting node's lease is gone from etcd (the watch of `nodes/` saw it).
    LeaseGone,
}

/// Where a prepared transaction hears its [`Word`]s.
type Words = std::sync::mpsc::SyncSender<Word>;

/// A prepared transaction waiting for a decision: its accepting node, if the prepare named
/// it, and where it hears its words.
#[derive(Debug)]
struct Waiting {
    origin: Option<String>,
    words: Words,
}

/// The prepared transactions waiting for a decision, by transaction id.
#[derive(Debug, Default)]
pub(crate) struct Pending(Mutex<HashMap<String, Waiting>>);

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Decision({:?})", self.verdict)
    }
}

impl Pending {
    fn insert(&self, txid: &str, origin: Option<String>, words: Words) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(txid.to_owned(), Waiting { origin, words });
        }
    }
    fn take(&self, txid: &str) -> Option<Words> {
        self.0.lock().ok()?.remove(txid).map(|w| w.words)
    }

    /// `node`'s lease is gone: every transaction prepared for a push it accepted hears it.
    pub(super) fn lease_gone(&self, node: &str) -> usize {
        let Ok(m) = self.0.lock() else { return 0 };
        m.values()
            .filter(|w| w.origin.as_deref() == Some(node))
            .filter(|w| w.words.try_send(Word::LeaseGone).is_ok())
            .count()
    }
}

impl Cluster {
    /// Watch the nodes' lease keys: when one is deleted (its lease expired), the transactions
    /// prepared here for pushes that node accepted resolve from the log at once. One watch per
    /// node; watched again when it ends (each prepared transaction also polls the live nodes
    /// every [`LIVE_POLL`], for the time the watch is down).
    pub(super) async fn watch_leases(self: Arc<Self>) {
        loop {
            let e = self
                .membership
                .watch_departures(|node| {
                    let woken = self.pending.lease_gone(node);
                    tracing::info!(target: "berth::cluster", node = %Escaped::token(node), prepared = woken, "a node's lease is gone");
                })
                .await;
            tracing::debug!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "lease watch ended; watching again");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// What a prepare request asks.
struct PrepareHeader {
    repo: String,
    txid: String,
    base_seq: u64,
    committer_name: String,
    committer_email: String,
    updates: Vec<RefUpdate>,
    /// The id of the stream that brought the push's pack here; `None`: the push has no pack.
    stream: Option<String>,
    /// The push's shallow roots ([`wire::Prepare::shallow`]).
    shallow: Vec<gix_hash::ObjectId>,
    /// The accepting node, when the prepare names it ([`wire::Prepare::origin`]).
    origin: Option<String>,
    /// The push's age, for its turn to lock the refs here ([`wire::Prepare::age`]).
    age: Age,
}

fn parse_header(b: &[u8]) -> Result<PrepareHeader, wire::Decode> {
    let h: wire::Prepare = wire::decode("header", b)?;
    Ok(PrepareHeader {
        repo: h.repo.into(),
        txid: h.txid.into(),
        base_seq: h.base_seq,
        committer_name: h.committer_name,
        committer_email: h.committer_email,
        updates: h.updates.into(),
        stream: h.stream.map(String::from),
        shallow: h.shallow.into_iter().map(|id| id.0).collect(),
        origin: h.origin.map(String::from),
        age: h.age.unwrap_or(Age::UNKNOWN),
    })
}

pub(super) async fn prepare(cluster: &Arc<Cluster>, req: Request) -> Response {
    let mut body = body_stream(req.into_body(), cluster.idle_timeout, MAX_HEADER as u64 + 4);
    let header = async {
        let len = body.read_u32().await? as usize;
        if len > MAX_HEADER {
            return Err(io::Error::other("header too large"));
        }
        let mut h = vec![0u8; len];
        body.read_exact(&mut h).await?;
        // Read to its end, so that the connection is left with the answer only: its close
        // is then the accepting node's (`Held`).
        let mut rest = Vec::new();
        body.read_to_end(&mut rest).await?;
        if !rest.is_empty() {
            return Err(io::Error::other("bytes after the header"));
        }
        Ok(h)
    };
    let header = match header.await {
        Ok(h) => h,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("prepare: {e}")),
    };
    let parsed = tracing::info_span!("replica_header", bytes = header.len())
        .in_scope(|| parse_header(&header));
    let h = match parsed {
        Ok(h) => h,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    match cluster.placement.holds(&h.repo, &cluster.node).await {
        Ok(true) => {}
        Ok(false) => return text(StatusCode::CONFLICT, "not a replica of this repository"),
        Err(e) => return text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<Held, NotPrepared>>();
    let job = Job {
        dir: repo_dir(&cluster.root, &h.repo),
        env: cluster.env.clone(),
        cluster: cluster.clone(),
        handle: tokio::runtime::Handle::current(),
        h,
    };
    tokio::task::spawn_blocking(move || job.run(ready_tx));
    match ready_rx.await {
        Ok(Ok(held)) => held.answer(),
        Ok(Err(e)) => text(StatusCode::CONFLICT, e.to_string()),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "prepare failed"),
    }
}

/// The answer to the prepare request: prepared (its locks held), or why not.
type Ready = tokio::sync::oneshot::Sender<Result<Held, NotPrepared>>;

/// A prepared transaction's side of the prepare's open answer.
struct Held {
    /// Where it hears that the answer's connection closed.
    words: Words,
    /// Resolves (dropped) once the transaction is decided here: the answer ends.
    decided: tokio::sync::oneshot::Receiver<()>,
}

/// Tells the prepared transaction, when the answer's body is dropped (its connection closed,
/// or the answer ended), that the accepting node's connection is gone.
struct OnClose(Words);

impl Drop for OnClose {
    fn drop(&mut self) {
        // Decided already: nobody listens, and that is fine.
        let _ = self.0.try_send(Word::OriginGone);
    }
}

impl Held {
    /// `200`, [`PREPARED`], and the body held open until the transaction is decided.
    fn answer(self) -> Response {
        let Held { words, decided } = self;
        let state = (OnClose(words), decided, true);
        let body = futures_util::stream::unfold(Some(state), |state| async move {
            let (on_close, decided, first) = state?;
            if first {
                let line = Ok::<_, io::Error>(bytes::Bytes::from_static(PREPARED));
                return Some((line, Some((on_close, decided, false))));
            }
            let _ = decided.await;
            drop(on_close);
            None
        });
        (StatusCode::OK, axum::body::Body::from_stream(body)).into_response()
    }
}

/// One prepare, on a blocking thread from the pack to the decision.
struct Job {
    dir: PathBuf,
    env: crate::receive::Environment,
    cluster: Arc<Cluster>,
    handle: tokio::runtime::Handle,
    h: PrepareHeader,
}

/// A prepare's states on this replica once its transaction is prepared (before that it is
/// preparing: [`Job::check_base`], [`Job::open`], then the ref transaction's own prepare).
enum State<'a> {
    /// Its locks held and the gate told so: waiting for the verdict.
    Prepared {
        tx: refs::Prepared<'a>,
        words: std::sync::mpsc::Receiver<Word>,
    },
    /// The verdict came, from the gate or (none in time) read off the log.
    Decided {
        tx: refs::Prepared<'a>,
        verdict: Verdict,
        from: From,
    },
    /// The verdict carried out here (or failed): for whoever asked.
    Done {
        outcome: Result<Settled, NotCommitted>,
        from: From,
    },
}

/// Where a verdict came from.
enum From {
    /// The accepting node's decide request, waiting for the outcome.
    Gate(tokio::sync::oneshot::Sender<Result<(), NotCommitted>>),
    /// The log, once the accepting node's connection closed or after [`DECISION_TIMEOUT`]
    /// without word: nobody to tell.
    Log,
}

/// How a decided transaction ended here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    /// Committed as the log's entry `seq` (recorded, or left to the catch-up to record).
    Committed { seq: u64 },
    /// Aborted: its locks released, nothing changed.
    Aborted,
}

/// What a prepare opened and holds until its decision: the copy, its objects, the refs as
/// read, the reflog identity, and the pack's keep files.
struct Opened {
    repo: crate::repo::Repository,
    objects: gix_odb::Handle,
    current: refs::Refs,
    committer: gix_actor::Signature,
    keeps: Keeps,
}

impl Job {
    fn run(self, ready: Ready) {
        let preparing = tracing::info_span!("replica_prepare", refs = self.h.updates.len());
        let entered = preparing.enter();
        let opened = match self.check_base().and_then(|()| self.open()) {
            Ok(o) => o,
            Err(e) => return self.not_prepared(ready, e),
        };
        let store = refs::of_repository(&opened.repo);
        let options = refs::Options {
            atomicity: Atomicity::AllOrNothing,
            current: &opened.current,
            committer: &opened.committer,
            objects: &opened.objects,
        };
        let mut observer = |_: TransactionState, _: &[RefUpdate]| true;
        // The push's turn for its refs here, released after their locks (dropped last).
        let names = self.h.updates.iter().map(|u| u.name.as_slice());
        let _turn = match (self.cluster.turns).take(
            &self.h.repo,
            self.h.age,
            names,
            turns::Store::of(opened.repo.ref_format),
            Ask::AllOrNothing,
            turns::WAIT,
        ) {
            Ok(t) => t,
            Err(e) => return self.not_prepared(ready, e.into()),
        };
        let tx = match store
            .transaction(options)
            .prepare(&self.h.updates, &mut observer)
        {
            Ok(p) => p,
            Err(e) => return self.not_prepared(ready, Local::from(e).into()),
        };
        drop(entered);
        // Dropped once the transaction is settled and the decide answered (or the job ends):
        // the prepare's answer ends too.
        let (answer_ends, decided) = tokio::sync::oneshot::channel::<()>();
        let Some(words) = self.announce(ready, decided) else {
            // The gate stopped waiting: the transaction is dropped, aborted.
            return;
        };
        let mut state = State::Prepared { tx, words };
        let (outcome, from) = loop {
            state = match state {
                State::Prepared { tx, words } => self.wait(tx, words),
                State::Decided { tx, verdict, from } => State::Done {
                    outcome: self.settle(tx, verdict),
                    from,
                },
                State::Done { outcome, from } => break (outcome, from),
            };
        };
        drop(opened.keeps);
        match &outcome {
            Err(e) => {
                tracing::error!(target: "berth::cluster", repo = %Escaped::token(&self.h.repo), txid = %self.h.txid, error = %Escaped::text(&e.to_string()), "commit of a decided push failed here")
            }
            Ok(settled) => {
                tracing::info!(target: "berth::cluster", repo = %Escaped::token(&self.h.repo), txid = %self.h.txid, verdict = ?settled, "decided")
            }
        }
        let committed = matches!(outcome, Ok(Settled::Committed { .. }));
        if let From::Gate(reply) = from {
            let _ = reply.send(outcome.map(|_| ()));
        }
        drop(answer_ends);
        // After the answers, as git's receive-pack does after the client's report: a replica
        // is maintained as any repository a push reached.
        if committed {
            super::objects::housekeeping(&self.h.repo, &opened.repo, &self.cluster.hooks);
        }
    }

    fn not_prepared(&self, ready: Ready, e: NotPrepared) {
        tracing::info!(target: "berth::cluster", repo = %Escaped::token(&self.h.repo), txid = %self.h.txid, error = %Escaped::text(&e.to_string()), "not prepared");
        let _ = ready.send(Err(e));
        // A copy this prepare created for a first push that will not land here: not left
        // behind (kept while the push's stream is held: its drop decides then).
        let (cluster, repo) = (self.cluster.clone(), self.h.repo.clone());
        self.handle
            .spawn(async move { cluster.forget_unused_copy(&repo).await });
    }

    /// Preparing, first: a copy here, at the push's base or off it by entries of other refs
    /// only.
    fn check_base(&self) -> Result<(), NotPrepared> {
        let _span = tracing::info_span!("check_base").entered();
        let (cluster, h, handle) = (&self.cluster, &self.h, &self.handle);
        handle.block_on(cluster.copies.ensure(&h.repo, &self.dir))?;
        let applied = applied_seq(&self.dir);
        let position = decide::position(applied, h.base_seq);
        if position == Position::Current {
            return Ok(());
        }
        if position == Position::Behind {
            let _rt = handle.enter();
            cluster.clone().spawn_catch_up(h.repo.clone());
        }
        // Ahead of the push's base or behind it by entries of other refs only: the old values
        // this prepare checks under its locks are the ones the push was decided against.
        let (lo, hi) = (applied.min(h.base_seq), applied.max(h.base_seq));
        match handle.block_on(cluster.winners(&h.repo, lo, hi, &h.txid, &h.updates)) {
            Ok(Winners::Disjoint) => Ok(()),
            _ => Err(NotPrepared::Behind {
                node: cluster.node.clone(),
                applied,
                base: h.base_seq,
            }),
        }
    }

    /// Preparing, then: the copy opened, the new tips connected through the push's pack (in
    /// its stream's quarantine), the pack moved in, the refs read.
    fn open(&self) -> Result<Opened, NotPrepared> {
        let _span = tracing::info_span!("open").entered();
        let h = &self.h;
        let open = || super::copy::open_repo(&self.dir, &self.env);
        let tips: Vec<gix_hash::ObjectId> = h.updates.iter().filter_map(new_of).collect();
        // The pack arrived (or is arriving) on its own stream, already checked, into the copy
        // the stream opened; moved in once the new tips are connected.
        let (repo, admitted, index) = match &h.stream {
            Some(id) => match self.cluster.streams.claim(id, &h.repo)? {
                Claimed::Arrived(a) => {
                    let repo = match a.copy {
                        Some(repo) => *repo,
                        None => open()?,
                    };
                    let admitted = admit(&repo, a.quarantine, a.index.as_ref(), &tips, &h.shallow)?;
                    (repo, Some(admitted), None)
                }
                // An earlier batch of the push moved it in.
                Claimed::Migrated(index) => (open()?, None, index),
            },
            None => (open()?, None, None),
        };
        // For the ref transaction, opened once the pack moved in (a store opened before would
        // list the packs again at the first lookup of one of the push's objects). `admit`'s
        // check opened one over the quarantine: with this one, a replica lists its copy's packs
        // twice per push (benches/README.md, 826a0a1).
        let objects = super::copy::objects_of(&repo)?;
        let keeps = match admitted {
            // Its roots recorded as it moved the pack in.
            Some(keeps) => keeps,
            None => {
                // The first batch listed what of the pack is not complete: what this pass
                // finds of it again is dropped.
                let roots = connected(&repo, &objects, index.as_ref(), &tips, &h.shallow)?.roots;
                record_shallow(&repo, &roots)?;
                Keeps(Vec::new())
            }
        };
        let current = refs::of_repository(&repo).snapshot().map_err(Local::from)?;
        let env = crate::receive::Environment {
            committer_name: Some(h.committer_name.clone()),
            committer_email: Some(h.committer_email.clone()),
            ..self.env.clone()
        };
        let committer = env.committer(None, None);
        Ok(Opened {
            repo,
            objects,
            current,
            committer,
            keeps,
        })
    }

    /// Prepared: wait for the verdict where the decide request finds it, and tell the gate
    /// (its answer held open until `decided`); `None` when the gate stopped waiting.
    fn announce(
        &self,
        ready: Ready,
        decided: tokio::sync::oneshot::Receiver<()>,
    ) -> Option<std::sync::mpsc::Receiver<Word>> {
        // A decision, the connection's close and the lease's, at most.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Word>(3);
        self.cluster
            .pending
            .insert(&self.h.txid, self.h.origin.clone(), tx.clone());
        let held = Held { words: tx, decided };
        if ready.send(Ok(held)).is_err() {
            self.cluster.pending.take(&self.h.txid);
            return None;
        }
        Some(rx)
    }

    /// Prepared → decided: the gate's verdict; or, once the accepting node's connection closed
    /// or its lease is gone, or after [`DECISION_TIMEOUT`] without word, the log's
    /// ([`decide::resolve`]).
    fn wait<'a>(
        &self,
        tx: refs::Prepared<'a>,
        words: std::sync::mpsc::Receiver<Word>,
    ) -> State<'a> {
        let h = &self.h;
        let deadline = Instant::now() + DECISION_TIMEOUT;
        let (mut heard, mut reply) = self.first_word(&words, deadline);
        let mut logged = None;
        let verdict = loop {
            match decide::resolve(heard, logged) {
                Resolve::Carry(v) => break v,
                Resolve::AskLog => {
                    let found = self
                        .handle
                        .block_on(self.cluster.log.entry_of(&h.repo, h.base_seq, &h.txid));
                    let l = match &found {
                        Ok(Some(seq)) => Logged::At(*seq),
                        Ok(None) => Logged::Absent,
                        Err(_) => Logged::Unknown,
                    };
                    let why = match heard {
                        Heard::OriginGone => "the accepting node's connection closed",
                        Heard::LeaseGone => "the accepting node's lease is gone",
                        _ => "no decision in time",
                    };
                    let error = found
                        .err()
                        .map(|e| Escaped::text(&e.to_string()).to_string());
                    tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&h.repo), txid = %h.txid, logged = ?l, error = ?error, "{why}; asked the log");
                    logged = Some(l);
                }
                Resolve::AskAgain => {
                    let until = (Instant::now() + ASK_AGAIN).min(deadline);
                    (heard, reply) = listen(&words, until, deadline);
                    logged = None;
                }
            }
        };
        self.cluster.pending.take(&h.txid);
        // A decide request that came while the log was read is answered with the outcome, if
        // it says the same (if not, it is not answered: that replica counts for nothing).
        while reply.is_none()
            && let Ok(w) = words.try_recv()
        {
            if let Word::Decision(d) = w
                && d.verdict == verdict
            {
                reply = Some(d.reply);
            }
        }
        let from = reply.map_or(From::Log, From::Gate);
        State::Decided { tx, verdict, from }
    }

    /// The first word a prepared transaction hears: its verdict, its connection's close, its
    /// accepting node's lease gone (from the watch, or read every [`LIVE_POLL`] while the
    /// accepting node is known), or nothing until `deadline`.
    fn first_word(
        &self,
        words: &std::sync::mpsc::Receiver<Word>,
        deadline: Instant,
    ) -> (Heard, Option<Reply>) {
        let Some(origin) = self.h.origin.as_deref() else {
            return listen(words, deadline, deadline);
        };
        loop {
            let until = (Instant::now() + LIVE_POLL).min(deadline);
            match words.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(w) => return heard_of(w),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return (Heard::OriginGone, None);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if Instant::now() >= deadline => {
                    return (Heard::Nothing, None);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let live = self.handle.block_on(self.cluster.membership.live_names());
                    if let Ok(live) = live
                        && decide::origin_lost(origin, &live)
                    {
                        return (Heard::LeaseGone, None);
                    }
                }
            }
        }
    }

    /// Decided → settled: the verdict carried out.
    fn settle(&self, tx: refs::Prepared<'_>, verdict: Verdict) -> Result<Settled, NotCommitted> {
        match verdict {
            Verdict::Commit { seq } => self.commit(tx, seq).map(|()| Settled::Committed { seq }),
            Verdict::Abort => {
                drop(tx);
                Ok(Settled::Aborted)
            }
        }
    }

    /// Commit the prepared transaction as the log's entry `seq`, in log order, and record it.
    fn commit(&self, tx: refs::Prepared<'_>, seq: u64) -> Result<(), NotCommitted> {
        let (cluster, h, handle, dir) = (&self.cluster, &self.h, &self.handle, &self.dir);
        // In log order: the entries before this one (other refs) first, when they come.
        handle.block_on(super::gate::wait_applied(
            dir,
            seq.saturating_sub(1),
            super::gate::APPLY_WAIT,
        ));
        if let Some(e) = tx.commit()?.into_iter().find_map(Result::err) {
            return Err(e.into());
        }
        let created: Vec<&[u8]> = h
            .updates
            .iter()
            .filter(|u| {
                matches!(u.change, refs::Change::Create { .. })
                    && u.name.starts_with(b"refs/heads/")
            })
            .map(|u| u.name.as_slice())
            .collect();
        if let Some(d) = dir.to_str() {
            crate::repo::head_to_first_created(d, &created);
        }
        match cluster.applied.record(dir, seq) {
            Ok(Recorded::InOrder) => Ok(()),
            Ok(Recorded::Gap) => {
                // An entry before it is missing here: the catch-up applies it and records
                // this one.
                let _rt = handle.enter();
                cluster.clone().spawn_catch_up(h.repo.clone());
                Ok(())
            }
            Err(e) => Err(NotCommitted::Record(e)),
        }
    }
}

/// Listen for a prepared transaction's word until `until`: what it heard (a verdict, with
/// where to answer; the connection's close; nothing, once `deadline` passed) — before
/// `deadline`, silence means the connection closed already (it is asked again only then).
fn listen(
    words: &std::sync::mpsc::Receiver<Word>,
    until: Instant,
    deadline: Instant,
) -> (Heard, Option<Reply>) {
    match words.recv_timeout(until.saturating_duration_since(Instant::now())) {
        Ok(w) => heard_of(w),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => (Heard::OriginGone, None),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
            (Heard::OriginGone, None)
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => (Heard::Nothing, None),
    }
}

/// What a word says, with where to answer a verdict.
fn heard_of(w: Word) -> (Heard, Option<Reply>) {
    match w {
        Word::Decision(d) => (Heard::Verdict(d.verdict), Some(d.reply)),
        Word::OriginGone => (Heard::OriginGone, None),
        Word::LeaseGone => (Heard::LeaseGone, None),
    }
}

/// Where a decide request waits for the outcome.
type Reply = tokio::sync::oneshot::Sender<Result<(), NotCommitted>>;

/// `POST /_berth/cluster/pack`: objects for a replica catching up.
pub(super) async fn pack(cluster: &Arc<Cluster>, req: Request) -> Response {
    let mut ask = Vec::new();
    let mut body = body_stream(req.into_body(), Duration::from_secs(30), MAX_HEADER as u64);
    if let Err(e) = body.read_to_end(&mut ask).await {
        return text(StatusCode::BAD_REQUEST, format!("pack: {e}"));
    }
    let c = cluster.clone();
    match tokio::task::spawn_blocking(move || super::catchup::serve_pack(&c, &ask)).await {
        Ok(Ok(pack)) => (StatusCode::OK, pack).into_response(),
        Ok(Err(e)) => text(e.status(), e.to_string()),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "pack failed"),
    }
}

pub(super) async fn decide(cluster: &Arc<Cluster>, req: Request) -> Response {
    let query = req.uri().query().unwrap_or_default();
    let q: wire::DecideQuery = match wire::decode_query("decide", query) {
        Ok(q) => q,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let Some(verdict) = Verdict::parse(q.verdict, q.seq.map(|s| s.0)) else {
        return text(StatusCode::BAD_REQUEST, "decide: txid, seq, verdict");
    };
    let (repo, txid) = (q.repo, q.txid.as_str());
    let Some(tx) = cluster.pending.take(txid) else {
        // Resolved here already (its decision came late: the accepting node was stopped, and
        // this replica asked the log and committed): entry `seq` is this push's.
        let applied = |seq| applied_seq(&repo_dir(&cluster.root, repo.as_str())) >= seq;
        if let Verdict::Commit { seq } = verdict
            && applied(seq)
        {
            return text(StatusCode::OK, "committed already");
        }
        return text(StatusCode::NOT_FOUND, "no such prepared transaction");
    };
    let (reply, done) = tokio::sync::oneshot::channel();
    if tx
        .try_send(Word::Decision(Decision { verdict, reply }))
        .is_err()
    {
        return text(StatusCode::GONE, "the prepared transaction gave up");
    }
    match tokio::time::timeout(Duration::from_secs(60), done).await {
        Ok(Ok(Ok(()))) => text(
            StatusCode::OK,
            match verdict {
                Verdict::Commit { .. } => "committed",
                Verdict::Abort => "aborted",
            },
        ),
        Ok(Ok(Err(e))) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        _ => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no answer from the transaction",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accepting_node_reads_the_refusals_as_before() {
        let behind = NotPrepared::Behind {
            node: "n2".into(),
            applied: 3,
            base: 5,
        };
        assert_eq!(
            behind.to_string(),
            "replica n2 is at log entry 3, the push at 5"
        );
        let stream = NotPrepared::from(super::super::incoming::Error::NeverArrived);
        assert_eq!(stream.to_string(), "the push's pack never arrived here");
        let objects = NotPrepared::from(super::super::objects::Error::MissingObjects);
        assert_eq!(objects.to_string(), "missing necessary objects");
        let copy = NotPrepared::from(CopyError::FormatUnrecorded);
        assert_eq!(
            copy.to_string(),
            "the repository's format is not recorded yet"
        );
        let record = NotCommitted::Record(io::Error::other("disk full"));
        assert_eq!(record.to_string(), "cannot record seq: disk full");
    }
}
