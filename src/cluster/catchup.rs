//! Catch-up: a replica that missed log entries (down, or not prepared when a push committed
//! with a quorum elsewhere) applies them in order, fetching each entry's new objects from
//! another replica (`POST /_berth/cluster/pack`: the objects of the wanted tips not reachable
//! from the asker's refs, a pack made by `git pack-objects`, not thin).
//!
//! Triggered at start-up, by a prepare or push refused because this replica is behind (a push
//! that lacks objects here waits for one: [`Cluster::catch_up_within`]), by
//! [`Cluster::watch_logs`] (an etcd watch on every repository's log key), and, as a safety net
//! for a watch stuck on a stopped etcd member, by [`Cluster::follow`], which polls the log heads
//! of this node's repositories every [`FOLLOW_EVERY`]. One catch-up per repository runs at a
//! time. An entry whose refs already hold its new values (the replica
//! committed it but died before recording the sequence number) is recorded without writing;
//! of an entry partly held (a resync's snapshot taken as it was committed there), only the
//! updates not yet held are written.
//!
//! A replica without a copy while the log has entries, or whose next entry is compacted away,
//! resyncs from another replica first (`resync.rs`), then applies the entries after the
//! snapshot; should the next one be gone by then, it resyncs again ([`MAX_RESYNCS`] times).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gix_object::Exists;

use super::applied::Published;
use super::copy::{Local, commit_all, missing, open};
use super::log::new_of;
use super::metrics::{CatchUpOutcome, ResyncOutcome, lags_of};
use super::objects::{admit, pack_objects, receive};
use super::wire::{self, Answered, Attempts};
use super::{Cluster, applied_seq, etcd, http, log, repo_dir, repo_key};
use crate::escape::Escaped;
use crate::refs::{self, Change, RefUpdate};

/// How often the log heads of this node's repositories are compared with what it applied
/// (besides the watch), and its applied entries published for compaction.
const FOLLOW_EVERY: Duration = Duration::from_secs(5);
/// How long fetching one entry's objects from a peer may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a push waiting for a catch-up looks whether the one running ended.
const RUNNING_PAUSE: Duration = Duration::from_millis(200);
/// How many resyncs one catch-up tries (each after the entry after the last one was found gone).
const MAX_RESYNCS: usize = 3;

/// Why a catch-up (or the poll that starts them) stopped.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// etcd failed.
    #[error(transparent)]
    Etcd(#[from] etcd::Error),
    /// The cluster's state could not be read.
    #[error(transparent)]
    Cluster(#[from] super::Error),
    /// A log entry could not be read.
    #[error(transparent)]
    Decode(#[from] wire::Decode),
    /// This replica's copy could not be created.
    #[error(transparent)]
    Copy(#[from] super::copy::CopyError),
    /// This replica's copy could not be read or written.
    #[error(transparent)]
    Local(#[from] Local),
    /// Fetched objects were refused.
    #[error(transparent)]
    Objects(#[from] super::objects::Error),
    /// A blocking task was lost.
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
    /// The repository's name cannot travel.
    #[error(transparent)]
    Name(#[from] wire::Invalid),
    /// The entry after the last resync's snapshot is gone each time.
    #[error("log entry {next} missing (compacted) after {MAX_RESYNCS} resyncs")]
    Compacted { next: u64 },
    /// The next entry is not in the range read.
    #[error("log entry {next} missing")]
    Missing { next: u64 },
    /// Something else applied entries in between.
    #[error("applied {now} while catching up to {seq}")]
    Raced { now: u64, seq: u64 },
    /// An entry's ref updates could not be written.
    #[error("entry {seq}: {source}")]
    Entry {
        seq: u64,
        #[source]
        source: Local,
    },
    /// The applied sequence number could not be recorded.
    #[error(transparent)]
    Record(std::io::Error),
    /// No peer sent the objects.
    #[error("no replica sent the objects ({0})")]
    NoObjects(Attempts),
    /// The resync failed.
    #[error(transparent)]
    Resync(#[from] Box<super::resync::Error>),
}

/// The repository whose log `key` is the head of: only a repository name as nodes send it,
/// for it becomes a path.
fn log_name(key: &[u8]) -> Option<&str> {
    key.strip_prefix(b"/berth/logs/".as_slice())
        .and_then(|n| std::str::from_utf8(n).ok())
        .filter(|n| wire::RepoName::try_from(*n).is_ok())
}

impl Cluster {
    /// Watch the logs' heads of every repository: a replica that sees an entry it did not
    /// apply (after a second, time for the entry's own decision to arrive) catches up at
    /// once. An entry this node applied already (its own push, or its decision came first)
    /// costs nothing: the head names its sequence number.
    pub(super) async fn watch_logs(self: Arc<Self>) {
        loop {
            let me = self.clone();
            let e = self
                .etcd
                .watch(b"/berth/logs/", move |event| {
                    let (key, value, revision) = match event {
                        etcd::Event::Started(revision) => return me.heads.started(revision),
                        etcd::Event::Put(kv) => (kv.key, kv.value, kv.mod_revision),
                        etcd::Event::Deleted(kv) => {
                            if let Some(name) = log_name(&kv.key) {
                                me.heads.deleted(name, kv.mod_revision);
                            }
                            return;
                        }
                    };
                    let Some(name) = log_name(&key) else {
                        return;
                    };
                    tracing::debug!(target: "berth::cluster", repo = %Escaped::token(name), "log changed");
                    let seq = log::Entry::decode(&value).ok().map(|e| e.seq);
                    me.heads.put(name, seq, revision);
                    let dir = repo_dir(&me.root, name);
                    let behind = move || seq.is_none_or(|s| applied_seq(&dir) < s);
                    if !behind() {
                        return;
                    }
                    let (me, name) = (me.clone(), name.to_owned());
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        if behind() {
                            me.catch_up_if_behind(&name).await;
                        }
                    });
                })
                .await;
            self.heads.ended();
            tracing::debug!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "log watch ended; watching again");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Catch `name` up if this node is one of its replicas and behind its log.
    async fn catch_up_if_behind(self: Arc<Self>, name: &str) {
        match self.placement.replicas_of(name).await {
            Ok(Some(r)) if r.contains(&self.node) => {}
            _ => return,
        }
        let Ok(log::Head { seq, .. }) = self.log.head(name).await else {
            return;
        };
        if seq > applied_seq(&repo_dir(&self.root, name)) {
            self.spawn_catch_up(name.to_owned());
        }
    }

    /// Poll forever (the watch's safety net, and compaction): catch up every repository of
    /// this node that is behind its log.
    pub(super) async fn follow(self: Arc<Self>) {
        loop {
            if let Err(e) = self.catch_up_all().await {
                tracing::debug!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "follow");
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
        }
    }

    /// Catch up every repository this node is a replica of; publish what it applied, and
    /// set the replicas' lags in the metrics (a round that fails leaves the last round's).
    async fn catch_up_all(self: &Arc<Self>) -> Result<(), Error> {
        let prefix = super::placement::REPOS_PREFIX;
        let keys = self.etcd.keys(prefix).await?;
        let mut lags = super::metrics::Lags::new();
        for key in keys {
            let Some(name) = super::placement::repo_of_list_key(&key) else {
                continue;
            };
            let name = name.to_owned();
            let replicas = match self.placement.replicas_of(&name).await {
                Ok(Some(r)) if r.contains(&self.node) => r,
                _ => continue,
            };
            let seq = self.log.head(&name).await?.seq;
            let dir = repo_dir(&self.root, &name);
            let applied = applied_seq(&dir);
            if seq > applied || !crate::repo::is_git_dir(&dir) {
                self.clone().spawn_catch_up(name.clone());
            }
            match self.publish_and_compact(&name, &replicas, applied).await {
                Ok(published) => {
                    for (replica, lag) in lags_of(seq, &replicas, &self.node, applied, published) {
                        lags.insert((name.clone(), replica), lag);
                    }
                }
                Err(e) => {
                    tracing::debug!(target: "berth::cluster", repo = %Escaped::token(&name), error = %Escaped::text(&e.to_string()), "compaction");
                }
            }
        }
        self.metrics.set_lags(lags);
        Ok(())
    }

    /// Publish what this replica applied (`applied/<node>`); on the repository's first
    /// replica, delete the entries every replica applied (the log key, the last entry, stays).
    /// What each replica published (one range read).
    async fn publish_and_compact(
        &self,
        name: &str,
        replicas: &[String],
        applied: u64,
    ) -> Result<impl Fn(&str) -> Option<u64> + use<>, etcd::Error> {
        let known = self.applied.published(name);
        if known.map(|k| k.applied) != Some(applied) {
            let key = repo_key(name, &format!("applied/{}", self.node));
            self.etcd
                .put(&key, applied.to_string().as_bytes(), None)
                .await?;
        }
        let mut compacted = known.map_or(0, |k| k.compacted);
        let prefix = repo_key(name, "applied/");
        let seen = self.etcd.prefix(&prefix).await?;
        let of = move |node: &str| {
            let key = [prefix.as_slice(), node.as_bytes()].concat();
            seen.iter()
                .find(|kv| kv.key == key)
                .and_then(|kv| std::str::from_utf8(&kv.value).ok()?.parse::<u64>().ok())
        };
        if replicas.first() == Some(&self.node) {
            let everywhere = replicas.iter().map(|r| of(r)).collect::<Option<Vec<u64>>>();
            if let Some(min) = everywhere.and_then(|v| v.into_iter().min())
                && min > compacted
            {
                let from = repo_key(name, "entries/");
                let to = repo_key(name, &format!("entries/{:020}", min + 1));
                self.etcd.delete_range(&from, &to).await?;
                tracing::info!(target: "berth::cluster", repo = %Escaped::token(name), upto = min, "compacted the log");
                compacted = min;
            }
        }
        self.applied
            .set_published(name, Published { applied, compacted });
        Ok(of)
    }

    /// Start catching `name` up in the background (nothing if one runs already).
    pub(super) fn spawn_catch_up(self: Arc<Self>, name: String) {
        tokio::spawn(async move {
            let result = self.catch_up(&name).await;
            self.note_catch_up(&name, &result);
        });
    }

    /// Catch `name` up for a push that waits on it, for at most `within`: one catch-up run by
    /// this call, after the one running already (if any) ended. One still running at the
    /// limit goes on in the background.
    pub(super) async fn catch_up_within(self: &Arc<Self>, name: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let (me, n) = (self.clone(), name.to_owned());
            let run = tokio::spawn(async move {
                let result = me.catch_up(&n).await;
                me.note_catch_up(&n, &result);
                // `None`: another catch-up of it runs.
                matches!(result, Ok(None))
            });
            match tokio::time::timeout_at(deadline, run).await {
                // Another catch-up of it runs: this one goes after it.
                Ok(Ok(true)) if tokio::time::Instant::now() + RUNNING_PAUSE < deadline => {
                    tokio::time::sleep(RUNNING_PAUSE).await;
                }
                _ => return,
            }
        }
    }

    /// Log and count how a catch-up of `name` ended (`None`: another one ran).
    fn note_catch_up(&self, name: &str, result: &Result<Option<CaughtUp>, Error>) {
        let outcome = match result {
            Ok(Some(CaughtUp::Applied(seq))) => {
                tracing::info!(target: "berth::cluster", repo = %Escaped::token(name), seq, "caught up");
                CatchUpOutcome::Applied
            }
            Ok(Some(CaughtUp::Current(_))) => CatchUpOutcome::Current,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(target: "berth::cluster", repo = %Escaped::token(name), error = %Escaped::text(&e.to_string()), "catch-up failed");
                CatchUpOutcome::Failed
            }
        };
        self.metrics.catch_up(outcome);
    }

    /// Apply the log entries of `name` this replica has not applied, in order; the last
    /// sequence number applied, `None` when another catch-up of it runs. A replica without a
    /// copy, or whose next entry is compacted away, resyncs from another replica first
    /// (`resync.rs`), and again should the entry after that snapshot be gone meanwhile.
    pub(super) async fn catch_up(self: &Arc<Self>, name: &str) -> Result<Option<CaughtUp>, Error> {
        let Some(_running) = self.catching.start(name) else {
            return Ok(None);
        };
        let dir = repo_dir(&self.root, name);
        let mut resyncs = 0;
        loop {
            // The head first: its entry was put with it, so the range below has every entry
            // up to it unless compaction removed them.
            let head = self.log.head(name).await?.seq;
            let copy = crate::repo::is_git_dir(&dir);
            let applied = applied_seq(&dir);
            let from = repo_key(name, &format!("entries/{:020}", applied + 1));
            let end = etcd::prefix_end(&repo_key(name, "entries/"));
            let entries = self.etcd.range(&from, &end).await?;
            let next = match entries.first() {
                Some(kv) => Some(log::Entry::decode(&kv.value)?.seq),
                None => None,
            };
            let gap = match next {
                Some(seq) => seq != applied + 1,
                None => head > applied,
            };
            let resync = gap || (!copy && head > 0);
            if entries.is_empty() && !resync {
                return Ok(Some(if resyncs > 0 {
                    CaughtUp::Applied(applied)
                } else {
                    CaughtUp::Current(applied)
                }));
            }
            // Entries to apply: this replica's copy, if it has none yet (in the recorded format).
            self.copies.ensure(name, &dir).await?;
            let replicas = self.placement.replicas_of(name).await?.unwrap_or_default();
            let peers = self.membership.urls_of(&replicas).await?;
            if resync {
                resyncs += 1;
                if resyncs > MAX_RESYNCS {
                    return Err(Error::Compacted { next: applied + 1 });
                }
                tracing::warn!(target: "berth::cluster", repo = %Escaped::token(name), applied, head, copy, next = ?next, "resyncing from another replica");
                let resynced = self.resync(name, &peers, applied, head).await;
                self.metrics.resync(match resynced {
                    Ok(_) => ResyncOutcome::Copied,
                    Err(_) => ResyncOutcome::Failed,
                });
                resynced.map_err(Box::new)?;
                continue;
            }
            return self
                .apply_entries(name, &dir, &peers, entries, applied)
                .await
                .map(|seq| Some(CaughtUp::Applied(seq)));
        }
    }

    /// Apply `entries` (consecutive, from `applied + 1`) in order; the last one applied.
    async fn apply_entries(
        self: &Arc<Self>,
        name: &str,
        dir: &std::path::Path,
        peers: &[(String, String)],
        entries: Vec<etcd::Kv>,
        mut applied: u64,
    ) -> Result<u64, Error> {
        for kv in entries {
            let entry = log::Entry::decode(&kv.value)?;
            if entry.seq != applied + 1 {
                return Err(Error::Missing { next: applied + 1 });
            }
            let (wants, haves) = {
                let dir = dir.to_owned();
                let env = self.env.clone();
                let tips: Vec<_> = entry.updates.iter().filter_map(new_of).collect();
                tokio::task::spawn_blocking(move || missing(&dir, &env, &tips)).await??
            };
            if !wants.is_empty() {
                self.fetch(name, peers, &wants, &haves, &entry.shallow)
                    .await?;
            }
            let dir2 = dir.to_owned();
            let env = self.env.clone();
            let e2 = entry.clone();
            let cluster = self.clone();
            tokio::task::spawn_blocking(move || -> Result<(), Error> {
                // The entry may have been applied meanwhile by its own push's decision.
                let _g = cluster.applied.hold();
                let now = applied_seq(&dir2);
                if now >= e2.seq {
                    return Ok(());
                }
                if now + 1 != e2.seq {
                    return Err(Error::Raced { now, seq: e2.seq });
                }
                apply(&dir2, &env, &e2)?;
                cluster.applied.set(&dir2, e2.seq).map_err(Error::Record)
            })
            .await??;
            applied = entry.seq;
        }
        // Maintained as a copy a push reached (`objects::housekeeping`); the entries are
        // applied whatever comes of it.
        let (dir, env, cluster) = (dir.to_owned(), self.env.clone(), self.clone());
        let name = name.to_owned();
        let _ = tokio::task::spawn_blocking(move || {
            if let Ok(repo) = super::copy::open_repo(&dir, &env) {
                super::objects::housekeeping(&name, &repo, &cluster.hooks);
            }
        })
        .await;
        Ok(applied)
    }

    /// Fetch the objects of `wants` from the first peer that has them, into the replica; with
    /// an entry's `shallow` roots, those this copy needs are recorded as its own
    /// (`$GIT_DIR/shallow`) before the entry's refs are written.
    pub(super) async fn fetch(
        &self,
        name: &str,
        peers: &[(String, String)],
        wants: &[gix_hash::ObjectId],
        haves: &[gix_hash::ObjectId],
        shallow: &[gix_hash::ObjectId],
    ) -> Result<(), Error> {
        let ask = Bytes::from(wire::encode(&wire::PackAsk {
            have: haves.iter().copied().map(wire::Oid).collect(),
            repo: wire::RepoName::try_from(name)?,
            want: wants.iter().copied().map(wire::Oid).collect(),
        }));
        let mut why = Attempts::default();
        for (peer, url) in peers {
            let target = http::join(url, "/_berth/cluster/pack");
            let got = self
                .peers
                .post(
                    peer,
                    &target,
                    ask.clone(),
                    usize::try_from(self.max_pack).unwrap_or(usize::MAX),
                    FETCH_TIMEOUT,
                )
                .await;
            match got {
                Ok((200, pack)) => {
                    let dir = repo_dir(&self.root, name);
                    let env = self.env.clone();
                    let (wants, shallow) = (wants.to_vec(), shallow.to_vec());
                    let r = tokio::task::spawn_blocking(move || -> Result<(), Error> {
                        let (repo, objects) = open(&dir, &env)?;
                        let arrived = receive(&repo, &objects, &mut &pack[..], &shallow)?;
                        let (q, index) = (arrived.quarantine, arrived.index);
                        let keeps = admit(&repo, q, index.as_ref(), &wants, &shallow)?;
                        // The refs that will point into the pack are written next; a
                        // concurrent repack before then would only repack it.
                        drop(keeps);
                        Ok(())
                    })
                    .await?;
                    match r {
                        Ok(()) => return Ok(()),
                        Err(e) => why.push(peer, e),
                    }
                }
                Ok((status, body)) => why.push(peer, Answered::new(status, &body)),
                Err(e) => why.push(peer, e),
            }
        }
        Err(Error::NoObjects(why))
    }
}

/// How a catch-up that ran ended: the last entry applied, by it (or a resync) or before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CaughtUp {
    /// Nothing was left to apply.
    Current(u64),
    /// It applied entries, or resynced.
    Applied(u64),
}

/// The repositories being caught up here (one catch-up each at a time).
#[derive(Debug, Default)]
pub(super) struct Catching(std::sync::Mutex<std::collections::HashSet<String>>);

/// Marks a repository's catch-up as running; removed when dropped.
pub(super) struct Running<'a> {
    catching: &'a Catching,
    name: String,
}

impl Catching {
    /// Mark `name`'s catch-up as running; `None` if one runs already.
    pub(super) fn start(&self, name: &str) -> Option<Running<'_>> {
        let mut set = self.0.lock().ok()?;
        set.insert(name.to_owned()).then(|| Running {
            catching: self,
            name: name.to_owned(),
        })
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Ok(mut set) = self.catching.0.lock() {
            set.remove(&self.name);
        }
    }
}

/// Apply one entry's ref updates (all or nothing); nothing when they are applied already.
fn apply(
    dir: &std::path::Path,
    env: &crate::receive::Environment,
    entry: &log::Entry,
) -> Result<(), Error> {
    let (repo, objects) = open(dir, env)?;
    let store = refs::of_repository(&repo);
    let current = store.snapshot().map_err(Local::from)?;
    // The updates whose refs do not hold their new values yet: all of them but those of an
    // entry committed here before a kill, or partly held by a resync's snapshot.
    let todo: Vec<RefUpdate> = entry
        .updates
        .iter()
        .filter(|u| current.get(&u.name) != new_of(u))
        .cloned()
        .collect();
    if todo.is_empty() {
        return Ok(());
    }
    let committer = format!("berth-cluster ({})", entry.origin);
    commit_all(&*store, &todo, &current, &objects, env, committer).map_err(|source| {
        Error::Entry {
            seq: entry.seq,
            source,
        }
    })?;
    let created: Vec<&[u8]> = entry
        .updates
        .iter()
        .filter(|u| matches!(u.change, Change::Create { .. }) && u.name.starts_with(b"refs/heads/"))
        .map(|u| u.name.as_slice())
        .collect();
    if let Some(d) = dir.to_str() {
        crate::repo::head_to_first_created(d, &created);
    }
    Ok(())
}

/// Why `POST /_berth/cluster/pack` sent no pack; [`PackError::status`] is the answer's.
#[derive(Debug, thiserror::Error)]
pub(super) enum PackError {
    /// The ask is not what a catch-up sends.
    #[error(transparent)]
    Ask(#[from] wire::Decode),
    /// This node has no copy of the repository.
    #[error("no such repository here")]
    NoRepository,
    /// A wanted object is not here.
    #[error("{0} not here")]
    NotHere(gix_hash::ObjectId),
    /// The copy could not be opened.
    #[error(transparent)]
    Local(#[from] Local),
    /// `git pack-objects` failed.
    #[error(transparent)]
    Objects(#[from] super::objects::Error),
}

impl PackError {
    /// The HTTP status of the answer.
    pub(super) fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            PackError::Ask(_) => StatusCode::BAD_REQUEST,
            PackError::NoRepository | PackError::NotHere(_) => StatusCode::NOT_FOUND,
            PackError::Local(_) | PackError::Objects(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The answer to `POST /_berth/cluster/pack` (the body: [`wire::PackAsk`]): a pack of the
/// wanted objects not reachable from the haves this replica has.
pub(super) fn serve_pack(cluster: &Cluster, ask: &[u8]) -> Result<Vec<u8>, PackError> {
    let ask: wire::PackAsk = wire::decode("pack", ask)?;
    let dir = repo_dir(&cluster.root, ask.repo.as_str());
    if !crate::repo::is_git_dir(&dir) {
        return Err(PackError::NoRepository);
    }
    let (_, objects) = open(&dir, &cluster.env)?;
    let want: Vec<_> = ask.want.iter().map(|w| w.0).collect();
    if let Some(w) = want.iter().find(|w| !objects.exists(w)) {
        return Err(PackError::NotHere(*w));
    }
    let have: Vec<_> = ask
        .have
        .iter()
        .map(|h| h.0)
        .filter(|h| objects.exists(h))
        .collect();
    Ok(pack_objects(&dir, &want, &have)?)
}
