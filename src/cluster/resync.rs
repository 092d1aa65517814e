//! Full resync: a replica that lost its copy of a repository (disk replaced, directory
//! deleted), or whose next log entry was compacted away, copies a current replica instead of
//! replaying the log.
//!
//! - `POST /_berth/cluster/snapshot` (`{"repo": …}`, the cluster secret): the serving replica
//!   answers, read under its apply lock so that the two agree, the last entry it applied `S`
//!   and its refs (`{"seq": S, "head": <HEAD's target or null>, "refs": [[name, id], …]}`; at
//!   most `--max-request-bytes`). The refs hold every entry up to `S`; they may already hold
//!   entries after `S` that are committed there but not yet recorded, wholly or in part (the
//!   catch-up then writes only the updates not yet held). Those touch disjoint refs: a replica
//!   prepares an entry touching a ref of an unrecorded one only once that one is recorded.
//! - The resyncing replica takes a snapshot only if it loses nothing the log committed: `S` is
//!   at least what it applied itself, and entry `S + 1` is still in etcd (or `S` is the log's
//!   head). Compaction deletes only entries every replica published as applied, and a
//!   replica publishes only what it applied, so a replica at `S` keeps `S + 1…` in etcd; a
//!   snapshot that fails the check (that replica lost its copy too, or compaction raced) is
//!   passed over for the next replica.
//! - It fetches the objects of the snapshot's refs it lacks through `POST
//!   /_berth/cluster/pack` (ingested, with fsck as the repository asks, connectivity
//!   checked), then, under its apply lock, sets its refs to exactly the snapshot in one transaction (creates, updates, deletions
//!   of refs the snapshot lacks), HEAD to the snapshot's target, and records `S` as applied.
//!   The catch-up goes on from `S + 1` (`catchup.rs`), and resyncs again should it find that
//!   entry gone meanwhile.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::io::AsyncReadExt;

use super::copy::Local;
use super::objects::connected;
use super::wire::{self, Answered, Attempts, Snapshot, body_stream, text};
use super::{Cluster, applied_seq, etcd, http, repo_dir, repo_key};
use crate::escape::Escaped;
use crate::refs::{self, Change, Expected, RefUpdate};

/// How long asking a replica for its snapshot may take.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest snapshot request (`{"repo": …}`).
const MAX_ASK: u64 = 64 << 10;

/// Why a resync copied nothing.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// etcd failed.
    #[error(transparent)]
    Etcd(#[from] etcd::Error),
    /// A blocking task was lost.
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
    /// The repository's name cannot travel.
    #[error(transparent)]
    Name(#[from] wire::Invalid),
    /// This replica's copy could not be opened or read.
    #[error(transparent)]
    Local(#[from] Local),
    /// The snapshot's objects are not all here.
    #[error(transparent)]
    Objects(#[from] super::objects::Error),
    /// The snapshot's refs could not be written.
    #[error("resync: {0}")]
    Install(#[source] Local),
    /// HEAD could not be set to the snapshot's.
    #[error("resync: cannot set HEAD")]
    Head,
    /// The snapshot's sequence number could not be recorded.
    #[error(transparent)]
    Record(std::io::Error),
    /// Every replica was passed over.
    #[error("no replica could be copied ({0})")]
    NoCopy(Attempts),
}

/// Why a replica's snapshot was passed over though it came.
#[derive(Debug, thiserror::Error)]
enum PassedOver {
    /// It would lose entries this replica applied.
    #[error("at entry {seq}, behind this replica's {applied}")]
    Behind { seq: u64, applied: u64 },
    /// The entry after it is no longer in the log.
    #[error("at entry {seq}, and entry {} is compacted", seq + 1)]
    Compacted { seq: u64 },
}

/// Why `POST /_berth/cluster/snapshot` sent no snapshot; [`ServeError::status`] is the
/// answer's.
#[derive(Debug, thiserror::Error)]
pub(super) enum ServeError {
    /// The ask is not what a resync sends.
    #[error(transparent)]
    Ask(#[from] wire::Decode),
    /// This node has no copy of the repository.
    #[error("no such repository here")]
    NoRepository,
    /// The copy could not be read.
    #[error(transparent)]
    Local(#[from] Local),
    /// A ref that no peer would take.
    #[error(transparent)]
    Invalid(#[from] wire::Invalid),
    /// The answer is larger than a peer takes.
    #[error("snapshot larger than --max-request-bytes")]
    TooLarge,
}

impl ServeError {
    /// The HTTP status of the answer.
    fn status(&self) -> StatusCode {
        match self {
            ServeError::Ask(_) => StatusCode::BAD_REQUEST,
            ServeError::NoRepository => StatusCode::NOT_FOUND,
            ServeError::Local(_) | ServeError::Invalid(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ServeError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }
}

/// `POST /_berth/cluster/snapshot`: this replica's applied sequence number and its refs.
pub(super) async fn snapshot(cluster: &Arc<Cluster>, req: Request) -> Response {
    let mut ask = Vec::new();
    let mut body = body_stream(req.into_body(), Duration::from_secs(30), MAX_ASK);
    if let Err(e) = body.read_to_end(&mut ask).await {
        return text(StatusCode::BAD_REQUEST, format!("snapshot: {e}"));
    }
    let c = cluster.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let ask: wire::SnapshotAsk = wire::decode("snapshot", &ask)?;
        take_snapshot(&c, ask.repo.as_str())
    });
    match answer.await {
        Ok(Ok(answer)) => (StatusCode::OK, answer).into_response(),
        Ok(Err(e)) => text(e.status(), e.to_string()),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "snapshot failed"),
    }
}

fn take_snapshot(cluster: &Cluster, name: &str) -> Result<Vec<u8>, ServeError> {
    let dir = repo_dir(&cluster.root, name);
    if !crate::repo::is_git_dir(&dir) {
        return Err(ServeError::NoRepository);
    }
    let (repo, _) = super::copy::open(&dir, &cluster.env)?;
    let store = refs::of_repository(&repo);
    // Entries are applied and recorded under the apply lock: the refs hold every entry up to
    // the sequence number read with them.
    let (seq, refs, head) = {
        let _g = cluster.applied.hold();
        let seq = applied_seq(&dir);
        let refs = store.snapshot().map_err(Local::from)?;
        (seq, refs, head_target(&dir))
    };
    // A name that is not UTF-8 cannot travel: left out, as the resyncing replica deletes it.
    let refs = refs
        .iter()
        .filter_map(|(n, id)| Some((std::str::from_utf8(n).ok()?, id)))
        .map(|(n, id)| Ok((wire::RefName::try_from(n)?, wire::Oid(id))))
        .collect::<Result<Vec<_>, wire::Invalid>>()?;
    let answer = wire::encode(&Snapshot {
        head,
        refs: refs.try_into()?,
        seq,
    });
    if answer.len() as u64 > cluster.max_pack {
        return Err(ServeError::TooLarge);
    }
    Ok(answer)
}

/// The ref HEAD names (`git symbolic-ref`: either ref format), if it is symbolic.
fn head_target(dir: &Path) -> Option<wire::RefName> {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(dir)
        .args(["symbolic-ref", "-q", "HEAD"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let t = String::from_utf8(out.stdout).ok()?.trim_end().to_owned();
    out.status
        .success()
        .then(|| wire::RefName::try_from(t).ok())
        .flatten()
}

impl Cluster {
    /// Copy repository `name` from one of `peers` (see the module header); the sequence number
    /// now recorded here. `applied` is what this replica had applied, `head` the log's head.
    pub(super) async fn resync(
        self: &Arc<Self>,
        name: &str,
        peers: &[(String, String)],
        applied: u64,
        head: u64,
    ) -> Result<u64, Error> {
        let dir = repo_dir(&self.root, name);
        let ask = Bytes::from(wire::encode(&wire::SnapshotAsk {
            repo: wire::RepoName::try_from(name)?,
        }));
        let mut why = Attempts::default();
        for (i, (peer, url)) in peers.iter().enumerate() {
            let target = http::join(url, "/_berth/cluster/snapshot");
            let got = self
                .peers
                .post(
                    peer,
                    &target,
                    ask.clone(),
                    usize::try_from(self.max_pack).unwrap_or(usize::MAX),
                    SNAPSHOT_TIMEOUT,
                )
                .await;
            let snap = match got {
                Ok((200, body)) => match wire::decode::<Snapshot>("snapshot", &body) {
                    Ok(s) => s,
                    Err(e) => {
                        why.push(peer, e);
                        continue;
                    }
                },
                Ok((status, body)) => {
                    why.push(peer, Answered::new(status, &body));
                    continue;
                }
                Err(e) => {
                    why.push(peer, e);
                    continue;
                }
            };
            // Nothing the log committed may be lost: the snapshot is at least what this replica
            // applied, and every entry after it is still in the log.
            if snap.seq < applied {
                let seq = snap.seq;
                why.push(peer, PassedOver::Behind { seq, applied });
                continue;
            }
            if snap.seq < head && !self.entry_present(name, snap.seq + 1).await? {
                why.push(peer, PassedOver::Compacted { seq: snap.seq });
                continue;
            }
            // The objects: from this peer first, then the others.
            let order: Vec<(String, String)> = std::iter::once(peers[i].clone())
                .chain(peers.iter().filter(|p| p.0 != *peer).cloned())
                .collect();
            let (wants, haves) = {
                let (dir, env) = (dir.clone(), self.env.clone());
                let tips: Vec<_> = snap.refs.list().iter().map(|r| r.1.0).collect();
                tokio::task::spawn_blocking(move || missing(&dir, &env, &tips)).await??
            };
            if !wants.is_empty()
                && let Err(e) = self.fetch(name, &order, &wants, &haves, &[]).await
            {
                why.push(peer, e);
                continue;
            }
            let refs_count = snap.refs.list().len();
            let seq = snap.seq;
            let (dir2, env, cluster) = (dir.clone(), self.env.clone(), self.clone());
            let installed =
                tokio::task::spawn_blocking(move || install(&cluster, &dir2, &env, &snap)).await?;
            match installed {
                Ok(Some(changed)) => {
                    tracing::warn!(target: "berth::cluster", repo = %Escaped::token(name), from = %Escaped::text(peer), seq, refs = refs_count, changed, objects = wants.len(), "resynced from a replica");
                    return Ok(seq);
                }
                // Applied this far meanwhile (a decision arrived): nothing to copy.
                Ok(None) => return Ok(applied_seq(&dir)),
                Err(e) => why.push(peer, e),
            }
        }
        // Logged escaped by the catch-up.
        Err(Error::NoCopy(why))
    }

    /// Whether log entry `seq` of `name` is in etcd.
    async fn entry_present(&self, name: &str, seq: u64) -> Result<bool, etcd::Error> {
        let key = repo_key(name, &format!("entries/{seq:020}"));
        self.etcd.get(&key).await.map(|kv| kv.is_some())
    }
}

/// Of `tips`, the distinct ones not in the repository; and its ref tips.
fn missing(
    dir: &Path,
    env: &crate::receive::Environment,
    tips: &[gix_hash::ObjectId],
) -> Result<(Vec<gix_hash::ObjectId>, Vec<gix_hash::ObjectId>), Local> {
    let (wants, haves) = super::copy::missing(dir, env, tips)?;
    let mut wants = wants;
    wants.sort();
    wants.dedup();
    Ok((wants, haves))
}

/// Set the refs at `dir` to exactly `snap` (one transaction), HEAD to its target, and record
/// its sequence number; `None` when this replica applied that far meanwhile, else how many refs
/// changed.
fn install(
    cluster: &Cluster,
    dir: &Path,
    env: &crate::receive::Environment,
    snap: &Snapshot,
) -> Result<Option<usize>, Error> {
    let tips: Vec<_> = snap.refs.list().iter().map(|r| r.1.0).collect();
    let (repo, objects) = super::copy::open(dir, env)?;
    let _g = cluster.applied.hold();
    if applied_seq(dir) >= snap.seq && snap.seq > 0 {
        return Ok(None);
    }
    // Every object of the snapshot here (fetched now and checked then, or there before).
    connected(&repo, &objects, None, &tips, &[])?;
    let store = refs::of_repository(&repo);
    let current = store.snapshot().map_err(Local::from)?;
    let mut updates = Vec::new();
    for (name, id) in snap.refs.list() {
        let id = &id.0;
        let change = match current.get(name.as_str().as_bytes()) {
            None => Change::Create { new: *id },
            Some(old) if old == *id => continue,
            Some(old) => Change::Update {
                old: Expected::MustBe(old),
                new: *id,
            },
        };
        updates.push(RefUpdate {
            name: name.as_str().into(),
            change,
        });
    }
    for (name, old) in current.iter() {
        let keep = std::str::from_utf8(name).is_ok_and(|n| snap.refs.contains(n));
        if !keep {
            updates.push(RefUpdate {
                name: name.into(),
                change: Change::Delete {
                    old: Expected::MustBe(old),
                },
            });
        }
    }
    if !updates.is_empty() {
        let committer = "berth-cluster (resync)".to_owned();
        super::copy::commit_all(&*store, &updates, &current, &objects, env, committer)
            .map_err(Error::Install)?;
    }
    if let Some(target) = &snap.head
        && head_target(dir).as_ref() != Some(target)
    {
        let ok = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(dir)
            .args(["symbolic-ref", "HEAD", target.as_str()])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(Error::Head);
        }
    }
    cluster.applied.set(dir, snap.seq).map_err(Error::Record)?;
    Ok(Some(updates.len()))
}

#[cfg(test)]
mod tests {
    use super::{Answered, Attempts, Error, PassedOver, Snapshot, wire};

    #[test]
    fn a_failed_resync_says_why_each_replica_was_passed_over() {
        let mut why = Attempts::default();
        why.push("n1", Answered::new(503, b" etcd down\n"));
        why.push("n2", PassedOver::Behind { seq: 3, applied: 4 });
        why.push("n3", PassedOver::Compacted { seq: 3 });
        assert_eq!(
            Error::NoCopy(why).to_string(),
            "no replica could be copied (n1: 503 etcd down; n2: at entry 3, behind this \
             replica's 4; n3: at entry 3, and entry 4 is compacted)"
        );
    }

    #[test]
    fn a_snapshot_is_checked() {
        let id = "1".repeat(40);
        let ok =
            format!(r#"{{"seq":4,"head":"refs/heads/main","refs":[["refs/heads/main","{id}"]]}}"#);
        let s: Snapshot = wire::decode("snapshot", ok.as_bytes()).expect("valid");
        assert_eq!((s.seq, s.refs.list().len()), (4, 1));
        for bad in [
            format!(r#"{{"seq":4,"head":null,"refs":[["HEAD","{id}"]]}}"#),
            format!(r#"{{"seq":4,"head":null,"refs":[["refs/heads/a..b","{id}"]]}}"#),
            r#"{"seq":4,"head":"../x","refs":[]}"#.to_owned(),
            r#"{"seq":4,"head":null,"refs":[["refs/heads/a","zz"]]}"#.to_owned(),
            r#"{"seq":-1,"head":null,"refs":[]}"#.to_owned(),
            format!(
                r#"{{"seq":4,"head":null,"refs":[["refs/heads/a","{id}"],["refs/heads/a","{id}"]]}}"#
            ),
        ] {
            assert!(
                wire::decode::<Snapshot>("snapshot", bad.as_bytes()).is_err(),
                "{bad}"
            );
        }
    }
}
