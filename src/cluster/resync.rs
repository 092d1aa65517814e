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
//!   /_berth/cluster/pack` (ingested with fsck, connectivity checked), then, under its apply
//!   lock, sets its refs to exactly the snapshot in one transaction (creates, updates, deletions
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
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use super::objects::connected;
use super::wire::{SECRET_HEADER, body_stream, text};
use super::{Cluster, applied_seq, http, repo_dir, repo_key, set_applied_seq};
use crate::escape::Escaped;
use crate::refs::{self, Change, Expected, RefUpdate};

/// How long asking a replica for its snapshot may take.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest snapshot request (`{"repo": …}`).
const MAX_ASK: u64 = 64 << 10;

/// A replica's refs at the last entry it applied.
#[derive(Debug)]
struct Snapshot {
    seq: u64,
    head: Option<String>,
    refs: Vec<(String, gix_hash::ObjectId)>,
}

impl Snapshot {
    fn decode(b: &[u8]) -> Result<Snapshot, String> {
        let v: Value = serde_json::from_slice(b).map_err(|e| format!("snapshot: {e}"))?;
        let seq = v["seq"].as_u64().ok_or("snapshot: no seq")?;
        let head = match &v["head"] {
            Value::Null => None,
            Value::String(h) if super::log::valid_ref_name(h) => Some(h.clone()),
            _ => return Err("snapshot: bad head".into()),
        };
        let list = v["refs"].as_array().ok_or("snapshot: no refs")?;
        let mut refs = Vec::with_capacity(list.len());
        for r in list {
            let name = r[0].as_str().filter(|n| super::log::valid_ref_name(n));
            let id = r[1]
                .as_str()
                .and_then(|s| gix_hash::ObjectId::from_hex(s.as_bytes()).ok());
            match (name, id) {
                (Some(n), Some(id)) => refs.push((n.to_owned(), id)),
                _ => return Err("snapshot: bad ref".into()),
            }
        }
        refs.sort();
        if refs.windows(2).any(|p| p[0].0 == p[1].0) {
            return Err("snapshot: a ref twice".into());
        }
        Ok(Snapshot { seq, head, refs })
    }
}

/// `POST /_berth/cluster/snapshot`: this replica's applied sequence number and its refs.
pub(super) async fn snapshot(cluster: &Arc<Cluster>, req: Request) -> Response {
    let mut ask = Vec::new();
    let mut body = body_stream(req.into_body(), Duration::from_secs(30), MAX_ASK);
    if let Err(e) = body.read_to_end(&mut ask).await {
        return text(StatusCode::BAD_REQUEST, format!("snapshot: {e}"));
    }
    let name = match serde_json::from_slice::<Value>(&ask) {
        Ok(v) => match v["repo"].as_str() {
            Some(n) if super::valid_repo_name(n) => n.to_owned(),
            _ => return text(StatusCode::BAD_REQUEST, "snapshot: bad repository name"),
        },
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("snapshot: {e}")),
    };
    let c = cluster.clone();
    match tokio::task::spawn_blocking(move || take_snapshot(&c, &name)).await {
        Ok(Ok(answer)) => (StatusCode::OK, answer).into_response(),
        Ok(Err((status, e))) => text(status, e),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "snapshot failed"),
    }
}

fn take_snapshot(cluster: &Cluster, name: &str) -> Result<Vec<u8>, (StatusCode, String)> {
    let dir = repo_dir(&cluster.root, name);
    if !crate::repo::is_git_dir(&dir) {
        return Err((StatusCode::NOT_FOUND, "no such repository here".into()));
    }
    let internal = |e: String| (StatusCode::INTERNAL_SERVER_ERROR, e);
    let (repo, _) = super::catchup::open(&dir, &cluster.env).map_err(internal)?;
    let store = refs::of_repository(&repo);
    // Entries are applied and recorded under the apply lock: the refs hold every entry up to
    // the sequence number read with them.
    let (seq, refs, head) = {
        let _g = cluster.apply_lock.lock();
        let seq = applied_seq(&dir);
        let refs = store.snapshot().map_err(|e| internal(e.to_string()))?;
        (seq, refs, head_target(&dir))
    };
    let answer = json!({
        "seq": seq,
        "head": head,
        "refs": refs
            .iter()
            .filter_map(|(n, id)| Some(json!([std::str::from_utf8(n).ok()?, id.to_string()])))
            .collect::<Vec<_>>(),
    })
    .to_string()
    .into_bytes();
    if answer.len() as u64 > cluster.max_pack {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            "snapshot larger than --max-request-bytes".into(),
        ));
    }
    Ok(answer)
}

/// The ref HEAD names (`git symbolic-ref`: either ref format), if it is symbolic.
fn head_target(dir: &Path) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(dir)
        .args(["symbolic-ref", "-q", "HEAD"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let t = String::from_utf8(out.stdout).ok()?.trim_end().to_owned();
    (out.status.success() && super::log::valid_ref_name(&t)).then_some(t)
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
    ) -> Result<u64, String> {
        let dir = repo_dir(&self.root, name);
        let ask = Bytes::from(json!({ "repo": name }).to_string());
        let mut why = Vec::new();
        for (i, (peer, url)) in peers.iter().enumerate() {
            let target = http::join(url, "/_berth/cluster/snapshot");
            let got = http::post(
                &target,
                &[(SECRET_HEADER, &self.secret)],
                ask.clone(),
                usize::try_from(self.max_pack).unwrap_or(usize::MAX),
                SNAPSHOT_TIMEOUT,
            )
            .await;
            let snap = match got {
                Ok((200, body)) => match Snapshot::decode(&body) {
                    Ok(s) => s,
                    Err(e) => {
                        why.push(format!("{peer}: {e}"));
                        continue;
                    }
                },
                Ok((status, body)) => {
                    why.push(format!(
                        "{peer}: {status} {}",
                        String::from_utf8_lossy(&body).trim()
                    ));
                    continue;
                }
                Err(e) => {
                    why.push(format!("{peer}: {e}"));
                    continue;
                }
            };
            // Nothing the log committed may be lost: the snapshot is at least what this replica
            // applied, and every entry after it is still in the log.
            if snap.seq < applied {
                why.push(format!(
                    "{peer}: at entry {}, behind this replica's {applied}",
                    snap.seq
                ));
                continue;
            }
            if snap.seq < head && !self.entry_present(name, snap.seq + 1).await? {
                why.push(format!(
                    "{peer}: at entry {}, and entry {} is compacted",
                    snap.seq,
                    snap.seq + 1
                ));
                continue;
            }
            // The objects: from this peer first, then the others.
            let order: Vec<(String, String)> = std::iter::once(peers[i].clone())
                .chain(peers.iter().filter(|p| p.0 != *peer).cloned())
                .collect();
            let (wants, haves) = {
                let (dir, env) = (dir.clone(), self.env.clone());
                let tips: Vec<_> = snap.refs.iter().map(|r| r.1).collect();
                tokio::task::spawn_blocking(move || missing(&dir, &env, &tips))
                    .await
                    .map_err(|e| e.to_string())??
            };
            if !wants.is_empty()
                && let Err(e) = self.fetch(name, &order, &wants, &haves).await
            {
                why.push(format!("{peer}: {e}"));
                continue;
            }
            let refs_count = snap.refs.len();
            let seq = snap.seq;
            let (dir2, env, cluster) = (dir.clone(), self.env.clone(), self.clone());
            let installed =
                tokio::task::spawn_blocking(move || install(&cluster, &dir2, &env, &snap))
                    .await
                    .map_err(|e| e.to_string())?;
            match installed {
                Ok(Some(changed)) => {
                    tracing::warn!(target: "berth::cluster", repo = %Escaped::token(name), from = %Escaped::text(peer), seq, refs = refs_count, changed, objects = wants.len(), "resynced from a replica");
                    return Ok(seq);
                }
                // Applied this far meanwhile (a decision arrived): nothing to copy.
                Ok(None) => return Ok(applied_seq(&dir)),
                Err(e) => why.push(format!("{peer}: {e}")),
            }
        }
        // Logged escaped by the catch-up.
        Err(format!("no replica could be copied ({})", why.join("; ")))
    }

    /// Whether log entry `seq` of `name` is in etcd.
    async fn entry_present(&self, name: &str, seq: u64) -> Result<bool, String> {
        let key = repo_key(name, &format!("entries/{seq:020}"));
        self.etcd
            .get(&key)
            .await
            .map(|kv| kv.is_some())
            .map_err(|e| e.to_string())
    }
}

/// Of `tips`, the distinct ones not in the repository; and its ref tips.
fn missing(
    dir: &Path,
    env: &crate::receive::Environment,
    tips: &[gix_hash::ObjectId],
) -> Result<(Vec<gix_hash::ObjectId>, Vec<gix_hash::ObjectId>), String> {
    let (wants, haves) = super::catchup::missing(dir, env, tips)?;
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
) -> Result<Option<usize>, String> {
    let tips: Vec<_> = snap.refs.iter().map(|r| r.1).collect();
    let (repo, objects) = super::catchup::open(dir, env)?;
    let _g = cluster.apply_lock.lock();
    if applied_seq(dir) >= snap.seq && snap.seq > 0 {
        return Ok(None);
    }
    // Every object of the snapshot here (fetched now and checked then, or there before).
    connected(&repo, &objects, None, &tips)?;
    let store = refs::of_repository(&repo);
    let current = store.snapshot().map_err(|e| e.to_string())?;
    let mut updates = Vec::new();
    for (name, id) in &snap.refs {
        let change = match current.get(name.as_bytes()) {
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
        let keep = std::str::from_utf8(name)
            .is_ok_and(|n| snap.refs.binary_search_by(|r| r.0.as_str().cmp(n)).is_ok());
        if !keep {
            updates.push(RefUpdate {
                name: name.into(),
                change: Change::Delete {
                    old: Expected::MustBe(*old),
                },
            });
        }
    }
    if !updates.is_empty() {
        let committer = "berth-cluster (resync)".to_owned();
        super::catchup::commit_all(&*store, &updates, &current, &objects, env, committer)
            .map_err(|e| format!("resync: {e}"))?;
    }
    if let Some(target) = &snap.head
        && head_target(dir).as_deref() != Some(target.as_str())
    {
        let ok = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(dir)
            .args(["symbolic-ref", "HEAD", target])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err("resync: cannot set HEAD".into());
        }
    }
    set_applied_seq(dir, snap.seq).map_err(|e| e.to_string())?;
    Ok(Some(updates.len()))
}

#[cfg(test)]
mod tests {
    use super::Snapshot;

    #[test]
    fn a_snapshot_is_checked() {
        let id = "1".repeat(40);
        let ok =
            format!(r#"{{"seq":4,"head":"refs/heads/main","refs":[["refs/heads/main","{id}"]]}}"#);
        let s = Snapshot::decode(ok.as_bytes()).expect("valid");
        assert_eq!((s.seq, s.refs.len()), (4, 1));
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
            assert!(Snapshot::decode(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
