//! A replica's side of pack streaming: the packs of pushes accepted elsewhere, as they arrive.
//!
//! - `POST /_berth/cluster/stream?repo=…&stream=<id>` (chunked body: the client's pack, as the
//!   accepting node reads it): ingested while it arrives into a quarantine of the repository,
//!   with berth's ingest and fsck, thin packs completed from this replica's objects, exactly as
//!   a push from a client. The quarantine is kept under the stream's id ([`Streams`]): at most
//!   [`MAX_STREAMS`] at a time, each removed [`STREAM_TTL`] after it arrived unless a prepare
//!   took it. `200 received` or `409 <why>` (the quarantine is then already gone).
//! - `POST /_berth/cluster/drop?stream=<id>`: the push is over (refused, aborted, or decided):
//!   whatever is left of the stream is removed.
//!
//! The prepare (`replica.rs`) takes the quarantine with [`Streams::claim`], waiting for a
//! stream still arriving (a later batch of the same push finds it taken: its objects are in
//! place); a body cut off or ended with an error fails the ingest, which removes its quarantine
//! at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;

use super::objects::receive;
use super::objects::{Arrived, PackIndex};
use super::wire::{body_stream, text};
use super::{Cluster, repo_dir, valid_id, valid_repo_name};
use crate::escape::Escaped;

/// Streams held (arriving or waiting for their prepare) at a time.
pub(super) const MAX_STREAMS: usize = 32;
/// How long a received stream waits for its prepare.
const STREAM_TTL: Duration = Duration::from_secs(60);
/// How long a prepare waits for its stream to be opened here (it may still be connecting).
const OPEN_WAIT: Duration = Duration::from_secs(10);
/// How long a prepare waits for its stream to be received and checked.
const ARRIVE_WAIT: Duration = Duration::from_secs(50);

/// The streams of this node, by id.
#[derive(Debug, Default)]
pub(crate) struct Streams(Mutex<HashMap<String, Arc<Slot>>>);

#[derive(Debug)]
pub(super) struct Slot {
    repo: String,
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Debug)]
enum State {
    Receiving,
    Ready(Arrived),
    /// A prepare migrated it (a later batch of the same push finds its objects in place, and
    /// walks them through the pack's index).
    Taken(Option<PackIndex>),
    Failed(String),
}

impl Streams {
    /// Register the stream `id` of `repo`, arriving.
    fn open(&self, id: &str, repo: &str) -> Result<Arc<Slot>, String> {
        let mut map = self.0.lock().map_err(|_| "streams poisoned")?;
        if map.len() >= MAX_STREAMS {
            return Err(format!("{MAX_STREAMS} pack streams held already"));
        }
        if map.contains_key(id) {
            return Err("this stream exists".into());
        }
        let slot = Arc::new(Slot {
            repo: repo.to_owned(),
            state: Mutex::new(State::Receiving),
            done: Condvar::new(),
        });
        map.insert(id.to_owned(), slot.clone());
        Ok(slot)
    }

    /// The stream `id` arrived (`Ok`: its quarantine) or failed. A stream dropped meanwhile is
    /// removed now.
    fn finish(&self, id: &str, slot: &Arc<Slot>, result: Result<Arrived, String>) {
        let mut gone = None;
        if let Ok(map) = self.0.lock() {
            let held = map.get(id).is_some_and(|s| Arc::ptr_eq(s, slot));
            if let Ok(mut state) = slot.state.lock() {
                *state = match result {
                    Ok(q) if held => State::Ready(q),
                    Ok(q) => {
                        gone = Some(q);
                        State::Failed("the push was over before its pack arrived".into())
                    }
                    Err(e) => State::Failed(e),
                };
            }
        }
        slot.done.notify_all();
        drop(gone);
    }

    /// Remove the stream `id` (only `slot`, when given); a stream still arriving is removed
    /// when it ends.
    fn remove(&self, id: &str, slot: Option<&Arc<Slot>>) -> bool {
        let removed = match self.0.lock() {
            Ok(mut map) => {
                if map
                    .get(id)
                    .is_some_and(|s| slot.is_none_or(|slot| Arc::ptr_eq(s, slot)))
                {
                    map.remove(id)
                } else {
                    None
                }
            }
            Err(_) => None,
        };
        let Some(slot) = removed else { return false };
        let old = match slot.state.lock() {
            Ok(mut state) if !matches!(*state, State::Receiving) => Some(std::mem::replace(
                &mut *state,
                State::Failed("dropped".into()),
            )),
            _ => None,
        };
        drop(old);
        true
    }

    /// The pack of stream `id` of `repo`, once it arrived (waiting for it, bounded), for the
    /// caller to migrate, or its index when an earlier batch of the push took it already. The
    /// stream stays (taken) until the push is over.
    pub(super) fn claim(&self, id: &str, repo: &str) -> Result<Claimed, String> {
        let opened_by = Instant::now() + OPEN_WAIT;
        let slot = loop {
            let slot = self.0.lock().ok().and_then(|m| m.get(id).cloned());
            match slot {
                Some(s) => break s,
                None if Instant::now() < opened_by => std::thread::sleep(Duration::from_millis(10)),
                None => return Err("the push's pack never arrived here".into()),
            }
        };
        if slot.repo != repo {
            return Err("the stream is of another repository".into());
        }
        {
            let state = slot.state.lock().map_err(|_| "stream poisoned")?;
            let (state, _) = slot
                .done
                .wait_timeout_while(state, ARRIVE_WAIT, |s| matches!(s, State::Receiving))
                .map_err(|_| "stream poisoned")?;
            if matches!(*state, State::Receiving) {
                return Err("the push's pack is still arriving".into());
            }
        }
        let mut state = slot.state.lock().map_err(|_| "stream poisoned")?;
        match std::mem::replace(&mut *state, State::Taken(None)) {
            State::Ready(a) => {
                *state = State::Taken(a.index.clone());
                Ok(Claimed::Arrived(a))
            }
            State::Taken(index) => {
                *state = State::Taken(index.clone());
                Ok(Claimed::Migrated(index))
            }
            State::Failed(e) => {
                *state = State::Failed(e.clone());
                Err(format!("the push's pack: {e}"))
            }
            State::Receiving => {
                *state = State::Receiving;
                Err("the push's pack is still arriving".into())
            }
        }
    }

    /// How many streams are held (arriving or waiting for their prepare).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().map_or(0, |m| m.len())
    }
}

/// What [`Streams::claim`] hands a prepare.
#[derive(Debug)]
pub(super) enum Claimed {
    /// The pack, checked, in its quarantine: to migrate.
    Arrived(Arrived),
    /// An earlier batch of the push migrated it; the pack's index.
    Migrated(Option<PackIndex>),
}

/// The query's value of `key`.
fn query_value<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// `POST /_berth/cluster/stream`.
pub(super) async fn stream(cluster: &Arc<Cluster>, req: Request) -> Response {
    let query = req.uri().query().unwrap_or_default().to_owned();
    let (Some(repo), Some(id)) = (query_value(&query, "repo"), query_value(&query, "stream"))
    else {
        return text(StatusCode::BAD_REQUEST, "stream: repo, stream");
    };
    if !valid_repo_name(repo) || !valid_id(id) {
        return text(StatusCode::BAD_REQUEST, "stream: bad repository name or id");
    }
    let (repo, id) = (repo.to_owned(), id.to_owned());
    let slot = match cluster.streams.open(&id, &repo) {
        Ok(s) => s,
        Err(e) => return text(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    match cluster.replicas_of(&repo).await {
        Ok(Some(nodes)) if nodes.contains(&cluster.node) => {}
        other => {
            cluster.streams.remove(&id, Some(&slot));
            return match other {
                Err(e) => text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
                _ => text(StatusCode::CONFLICT, "not a replica of this repository"),
            };
        }
    }
    let body = body_stream(req.into_body(), cluster.idle_timeout, cluster.max_pack);
    let mut reader = tokio_util::io::SyncIoBridge::new(body);
    let dir = repo_dir(&cluster.root, &repo);
    // This replica's first push of the repository: its copy, in the recorded format.
    if let Err(e) = cluster.ensure_copy(&repo, &dir).await {
        cluster.streams.remove(&id, Some(&slot));
        return text(StatusCode::CONFLICT, e);
    }
    let env = cluster.env.clone();
    let c = cluster.clone();
    let handle = tokio::runtime::Handle::current();
    let job = tokio::task::spawn_blocking(move || {
        let result = receive_into(dir, &env, &mut reader);
        let answer = result.as_ref().map(|_| ()).map_err(Clone::clone);
        if let Err(e) = &answer {
            tracing::info!(target: "berth::cluster", repo = %Escaped::token(&repo), stream = %id, error = %Escaped::text(e), "pack stream refused");
        }
        c.streams.finish(&id, &slot, result);
        // Not taken by a prepare in time: removed.
        let c2 = c.clone();
        handle.spawn(async move {
            tokio::time::sleep(STREAM_TTL).await;
            let _ = tokio::task::spawn_blocking(move || {
                if c2.streams.remove(&id, Some(&slot)) {
                    tracing::info!(target: "berth::cluster", stream = %id, "pack stream expired without a prepare");
                }
            })
            .await;
        });
        answer
    });
    match job.await {
        Ok(Ok(())) => text(StatusCode::OK, "received"),
        Ok(Err(e)) => text(StatusCode::CONFLICT, e),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "stream failed"),
    }
}

/// Ingest the pack `reader` gives into a new quarantine of the repository at `dir`.
fn receive_into(
    dir: PathBuf,
    env: &crate::receive::Environment,
    reader: &mut dyn std::io::Read,
) -> Result<Arrived, String> {
    let dir_str = dir.to_str().ok_or("repository path is not UTF-8")?;
    let repo =
        crate::repo::Repository::open(dir_str, &env.for_config()).map_err(|e| e.to_string())?;
    let objects = gix_odb::at(&repo.objects_dir, repo.object_format).map_err(|e| e.to_string())?;
    receive(&repo, &objects, reader)
}

/// `POST /_berth/cluster/drop`.
pub(super) async fn drop_stream(cluster: &Arc<Cluster>, req: Request) -> Response {
    let query = req.uri().query().unwrap_or_default().to_owned();
    let Some(id) = query_value(&query, "stream").filter(|id| valid_id(id)) else {
        return text(StatusCode::BAD_REQUEST, "drop: stream");
    };
    let (c, id) = (cluster.clone(), id.to_owned());
    match tokio::task::spawn_blocking(move || c.streams.remove(&id, None)).await {
        Ok(true) => text(StatusCode::OK, "dropped"),
        _ => text(StatusCode::NOT_FOUND, "no such stream"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quarantine(root: &std::path::Path) -> Arrived {
        Arrived {
            quarantine: crate::objects::ingest::Quarantine::create(root).unwrap(),
            index: None,
        }
    }

    #[test]
    fn claimed_dropped_and_bounded() {
        let objects = tempfile::tempdir().unwrap();
        let s = Streams::default();
        // Received, then claimed: the quarantine handed over, once; the stream stays until the
        // push is over.
        let slot = s.open("aa", "r").unwrap();
        s.finish("aa", &slot, Ok(quarantine(objects.path())));
        assert!(s.claim("aa", "other").is_err());
        let Claimed::Arrived(a) = s.claim("aa", "r").unwrap() else {
            panic!("not the pack")
        };
        assert!(a.quarantine.path().is_dir());
        assert!(matches!(
            s.claim("aa", "r").unwrap(),
            Claimed::Migrated(None)
        ));
        drop(a);
        assert!(s.remove("aa", None));
        assert_eq!(s.len(), 0);
        // Dropped while arriving: removed when it arrives, nothing left on disk.
        let slot = s.open("bb", "r").unwrap();
        assert!(s.remove("bb", None));
        let q = quarantine(objects.path());
        let path = q.quarantine.path().to_owned();
        s.finish("bb", &slot, Ok(q));
        assert!(!path.exists());
        // Failed: the prepare learns why.
        let slot = s.open("cc", "r").unwrap();
        s.finish("cc", &slot, Err("unpack: bad".into()));
        assert!(s.claim("cc", "r").unwrap_err().contains("unpack: bad"));
        assert!(s.remove("cc", None));
        assert_eq!(s.len(), 0);
        // Bounded in count.
        for i in 0..MAX_STREAMS {
            s.open(&format!("{i:x}"), "r").unwrap();
        }
        assert!(s.open("ff00", "r").is_err());
        assert!(s.open("0", "r").is_err());
        assert_eq!(std::fs::read_dir(objects.path()).unwrap().count(), 0);
    }
}
