//! A replica's side of a push: `prepare` (take the streamed pack's quarantine, migrate it, check
//! connectivity with berth's walk, prepare the same ref transaction and hold its locks),
//! `decide` (commit and record the applied sequence, or abort) and `pack` (objects for a replica
//! catching up). The requests and their bounds are listed in `endpoint.rs`.
//!
//! A prepared transaction whose decision does not come within [`DECISION_TIMEOUT`] looks at the
//! repository's log in etcd: committed there (the accepting node died after the commit point)
//! → commit; otherwise abort.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::io::AsyncReadExt;

use super::decide::Verdict;
use super::incoming::Claimed;
use super::log::new_of;
use super::objects::{Keeps, PackIndex, connected, migrate};
use super::wire::{body_stream, text};
use super::{Cluster, applied_seq, log, repo_dir};
use crate::escape::Escaped;
use crate::refs::{self, Atomicity, RefUpdate, TransactionState};

/// The largest prepare header (the ref updates).
const MAX_HEADER: usize = 64 << 20;
/// How long a prepared transaction waits for its decision before asking etcd.
const DECISION_TIMEOUT: Duration = Duration::from_secs(20);

/// A decision for a prepared transaction, and where to say how it went.
struct Decision {
    verdict: Verdict,
    reply: tokio::sync::oneshot::Sender<Result<(), String>>,
}

/// The prepared transactions waiting for a decision, by transaction id.
#[derive(Debug, Default)]
pub(crate) struct Pending(Mutex<HashMap<String, std::sync::mpsc::SyncSender<Decision>>>);

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Decision({:?})", self.verdict)
    }
}

impl Pending {
    fn insert(&self, txid: &str, tx: std::sync::mpsc::SyncSender<Decision>) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(txid.to_owned(), tx);
        }
    }
    fn take(&self, txid: &str) -> Option<std::sync::mpsc::SyncSender<Decision>> {
        self.0.lock().ok()?.remove(txid)
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
}

fn parse_header(b: &[u8]) -> Result<PrepareHeader, String> {
    let v: Value = serde_json::from_slice(b).map_err(|e| format!("header: {e}"))?;
    let s = |k: &str| {
        v[k].as_str()
            .map(str::to_owned)
            .ok_or(format!("header: no {k}"))
    };
    let repo = s("repo")?;
    if !super::valid_repo_name(&repo) {
        return Err("header: bad repository name".into());
    }
    let txid = s("txid")?;
    if !super::valid_id(&txid) {
        return Err("header: bad txid".into());
    }
    Ok(PrepareHeader {
        repo,
        txid,
        base_seq: v["base_seq"].as_u64().ok_or("header: no base_seq")?,
        committer_name: s("committer_name")?,
        committer_email: s("committer_email")?,
        updates: log::parse_updates(&v["updates"])?,
        stream: match &v["stream"] {
            Value::Null => None,
            Value::String(id) if super::valid_id(id) => Some(id.clone()),
            _ => return Err("header: bad stream".into()),
        },
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
        Ok(h)
    };
    let header = match header.await {
        Ok(h) => h,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("prepare: {e}")),
    };
    let h = match parse_header(&header) {
        Ok(h) => h,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    match cluster.replicas_of(&h.repo).await {
        Ok(Some(nodes)) if nodes.contains(&cluster.node) => {}
        Ok(_) => return text(StatusCode::CONFLICT, "not a replica of this repository"),
        Err(e) => return text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<(), String>>();
    let job = Job {
        dir: repo_dir(&cluster.root, &h.repo),
        env: cluster.env.clone(),
        cluster: cluster.clone(),
        handle: tokio::runtime::Handle::current(),
        h,
    };
    tokio::task::spawn_blocking(move || job.run(ready_tx));
    match ready_rx.await {
        Ok(Ok(())) => text(StatusCode::OK, "prepared"),
        Ok(Err(e)) => text(StatusCode::CONFLICT, e),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "prepare failed"),
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

impl Job {
    fn run(self, ready: tokio::sync::oneshot::Sender<Result<(), String>>) {
        let Job {
            dir,
            env,
            cluster,
            handle,
            h,
        } = self;
        let fail = |ready: tokio::sync::oneshot::Sender<Result<(), String>>, e: String| {
            tracing::info!(target: "berth::cluster", repo = %Escaped::token(&h.repo), txid = %h.txid, error = %Escaped::text(&e), "not prepared");
            let _ = ready.send(Err(e));
        };
        if let Err(e) = handle.block_on(cluster.ensure_copy(&h.repo, &dir)) {
            return fail(ready, e);
        }
        let applied = applied_seq(&dir);
        if applied < h.base_seq {
            let _rt = handle.enter();
            cluster.clone().spawn_catch_up(h.repo.clone());
        }
        // Ahead of the push's base or behind it by entries of other refs only: the old values
        // this prepare checks under its locks are the ones the push was decided against.
        let disjoint = || {
            let (lo, hi) = (applied.min(h.base_seq), applied.max(h.base_seq));
            matches!(
                handle.block_on(cluster.winners(&h.repo, lo, hi, &h.txid, &h.updates)),
                Ok(super::decide::Winners::Disjoint)
            )
        };
        if applied != h.base_seq && !disjoint() {
            return fail(
                ready,
                format!(
                    "replica {} is at log entry {applied}, the push at {}",
                    cluster.node, h.base_seq
                ),
            );
        }
        let Some(dir_str) = dir.to_str() else {
            return fail(ready, "repository path is not UTF-8".into());
        };
        let repo = match crate::repo::Repository::open(dir_str, &env.for_config()) {
            Ok(r) => r,
            Err(e) => return fail(ready, e.to_string()),
        };
        let objects = match gix_odb::at(&repo.objects_dir, repo.object_format) {
            Ok(o) => o,
            Err(e) => return fail(ready, e.to_string()),
        };
        // The pack arrived (or is arriving) on its own stream, already checked.
        let (keeps, index) = match &h.stream {
            Some(id) => match cluster.streams.claim(id, &h.repo) {
                Ok(Claimed::Arrived(a)) => match migrate(&repo, a.quarantine) {
                    Ok(k) => (k, a.index),
                    Err(e) => return fail(ready, e),
                },
                // An earlier batch of the push migrated it.
                Ok(Claimed::Migrated(index)) => (Keeps(Vec::new()), index),
                Err(e) => return fail(ready, e),
            },
            None => (Keeps(Vec::new()), None),
        };
        let tips: Vec<gix_hash::ObjectId> = h.updates.iter().filter_map(new_of).collect();
        if let Err(e) = connected(&repo, &objects, index.as_ref().map(PackIndex::file), &tips) {
            return fail(ready, e);
        }
        let store = refs::of_repository(&repo);
        let current = match store.snapshot() {
            Ok(c) => c,
            Err(e) => return fail(ready, e.to_string()),
        };
        let env = crate::receive::Environment {
            committer_name: Some(h.committer_name.clone()),
            committer_email: Some(h.committer_email.clone()),
            ..env
        };
        let committer = env.committer(None, None);
        let options = refs::Options {
            atomicity: Atomicity::AllOrNothing,
            current: &current,
            committer: &committer,
            objects: &objects,
        };
        let mut observer = |_: TransactionState, _: &[RefUpdate]| true;
        let prepared = match store
            .transaction(options)
            .prepare(&h.updates, &mut observer)
        {
            Ok(p) => p,
            Err(e) => return fail(ready, e.to_string()),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel::<Decision>(1);
        cluster.pending.insert(&h.txid, tx);
        if ready.send(Ok(())).is_err() {
            cluster.pending.take(&h.txid);
            return;
        }
        let decision = rx.recv_timeout(DECISION_TIMEOUT);
        cluster.pending.take(&h.txid);
        let (verdict, reply) = match decision {
            Ok(d) => (d.verdict, Some(d.reply)),
            Err(_) => {
                // No word from the accepting node: the log says whether it committed.
                let head = handle.block_on(committed_entry(&cluster, &h.repo, &h.txid));
                tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&h.repo), txid = %h.txid, committed = ?head, "no decision in time; asked the log");
                (Verdict::from_log(head), None)
            }
        };
        let result = if let Verdict::Commit { seq } = verdict {
            // In log order: the entries before this one (other refs) first, when they come.
            handle.block_on(super::gate::wait_applied(
                &dir,
                seq.saturating_sub(1),
                super::gate::APPLY_WAIT,
            ));
            match prepared.commit() {
                Ok(results) if results.iter().all(Result::is_ok) => {
                    let created: Vec<&[u8]> = h
                        .updates
                        .iter()
                        .filter(|u| {
                            matches!(u.change, refs::Change::Create { .. })
                                && u.name.starts_with(b"refs/heads/")
                        })
                        .map(|u| u.name.as_slice())
                        .collect();
                    crate::repo::head_to_first_created(dir_str, &created);
                    match cluster.record_applied(&dir, seq) {
                        Ok(true) => Ok(()),
                        Ok(false) => {
                            // An entry before it is missing here: the catch-up applies it and
                            // records this one.
                            let _rt = handle.enter();
                            cluster.clone().spawn_catch_up(h.repo.clone());
                            Ok(())
                        }
                        Err(e) => Err(format!("cannot record seq: {e}")),
                    }
                }
                Ok(results) => Err(results
                    .into_iter()
                    .find_map(Result::err)
                    .map(|e| e.to_string())
                    .unwrap_or_default()),
                Err(e) => Err(e.to_string()),
            }
        } else {
            drop(prepared);
            Ok(())
        };
        drop(keeps);
        if let Err(e) = &result {
            tracing::error!(target: "berth::cluster", repo = %Escaped::token(&h.repo), txid = %h.txid, error = %Escaped::text(e), "commit of a decided push failed here");
        } else {
            tracing::info!(target: "berth::cluster", repo = %Escaped::token(&h.repo), txid = %h.txid, verdict = ?verdict, "decided");
        }
        if let Some(reply) = reply {
            let _ = reply.send(result);
        }
    }
}

/// The sequence number of the log entry of `txid`, if the repository's last entry is it.
async fn committed_entry(cluster: &Cluster, repo: &str, txid: &str) -> Option<u64> {
    let kv = cluster.etcd.get(&super::log_key(repo)).await.ok()??;
    let entry = log::Entry::decode(&kv.value).ok()?;
    (entry.txid == txid).then_some(entry.seq)
}

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
        Ok(Err((status, e))) => text(status, e),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "pack failed"),
    }
}

pub(super) async fn decide(cluster: &Arc<Cluster>, req: Request) -> Response {
    let query = req.uri().query().unwrap_or_default().to_owned();
    let mut repo = None;
    let mut txid = None;
    let mut seq = None;
    let mut word = None;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("repo", v)) => repo = Some(v.to_owned()),
            Some(("txid", v)) => txid = Some(v.to_owned()),
            Some(("seq", v)) => seq = v.parse::<u64>().ok(),
            Some(("verdict", v)) => word = Some(v.to_owned()),
            _ => {}
        }
    }
    let verdict = word.and_then(|w| Verdict::parse(&w, seq));
    let (Some(txid), Some(verdict)) = (txid, verdict) else {
        return text(StatusCode::BAD_REQUEST, "decide: txid, seq, verdict");
    };
    let Some(tx) = cluster.pending.take(&txid) else {
        // Resolved here already (its decision came late: the accepting node was stopped, and
        // this replica asked the log and committed): entry `seq` is this push's.
        let applied = |seq| {
            repo.as_deref()
                .filter(|r| super::valid_repo_name(r))
                .is_some_and(|r| applied_seq(&repo_dir(&cluster.root, r)) >= seq)
        };
        if let Verdict::Commit { seq } = verdict
            && applied(seq)
        {
            return text(StatusCode::OK, "committed already");
        }
        return text(StatusCode::NOT_FOUND, "no such prepared transaction");
    };
    let (reply, done) = tokio::sync::oneshot::channel();
    if tx.send(Decision { verdict, reply }).is_err() {
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
        Ok(Ok(Err(e))) => text(StatusCode::INTERNAL_SERVER_ERROR, e),
        _ => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no answer from the transaction",
        ),
    }
}
