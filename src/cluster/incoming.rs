//! A replica's side of pack streaming: the packs of pushes accepted elsewhere, as they arrive.
//!
//! - `POST /_berth/cluster/stream?repo=…&stream=<id>` (chunked body: the client's pack, as the
//!   accepting node reads it): ingested while it arrives into a quarantine of the repository,
//!   with berth's ingest (and fsck where the repository asks for it), thin packs completed
//!   from this replica's objects, exactly as a push from a client. The quarantine is kept
//!   under the stream's id ([`Streams`]): at most [`MAX_STREAMS`] at a time, each removed
//!   [`STREAM_TTL`] after it arrived unless a prepare took it. `200 received` or `409 <why>` (the quarantine is then already gone).
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

use super::copy::Local;
use super::objects::receive;
use super::objects::{Arrived, PackIndex};
use super::wire::{self, body_stream, text};
use super::{Cluster, repo_dir};
use crate::escape::Escaped;

/// Streams held (arriving or waiting for their prepare) at a time.
pub(super) const MAX_STREAMS: usize = 32;
/// How long a received stream waits for its prepare.
const STREAM_TTL: Duration = Duration::from_secs(60);
/// How long a prepare waits for its stream to be opened here (it may still be connecting).
const OPEN_WAIT: Duration = Duration::from_secs(10);
/// How long a prepare waits for its stream to be received and checked.
const ARRIVE_WAIT: Duration = Duration::from_secs(50);

/// Why a stream could not be held, or a prepare could not take its pack.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// A thread panicked holding the streams.
    #[error("streams poisoned")]
    StreamsPoisoned,
    /// A thread panicked holding the stream.
    #[error("stream poisoned")]
    StreamPoisoned,
    /// [`MAX_STREAMS`] are held.
    #[error("{MAX_STREAMS} pack streams held already")]
    TooMany,
    /// A stream of that id is held.
    #[error("this stream exists")]
    Exists,
    /// No stream of that id was opened in time.
    #[error("the push's pack never arrived here")]
    NeverArrived,
    /// The stream is another repository's.
    #[error("the stream is of another repository")]
    OtherRepository,
    /// The stream did not end in time.
    #[error("the push's pack is still arriving")]
    StillArriving,
    /// The stream failed.
    #[error("the push's pack: {0}")]
    Failed(Failure),
}

/// Why a stream ended without a pack for its prepare.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum Failure {
    /// Dropped while it arrived.
    #[error("the push was over before its pack arrived")]
    Over,
    /// Dropped.
    #[error("dropped")]
    Dropped,
    /// Its pack was refused.
    #[error(transparent)]
    Refused(Arc<Refused>),
}

/// Why a streamed pack was refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    /// The copy could not be opened.
    #[error(transparent)]
    Local(#[from] Local),
    /// The pack failed berth's ingest or fsck.
    #[error(transparent)]
    Objects(#[from] super::objects::Error),
}

/// What [`Streams::remove`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removed {
    /// No such stream (or another slot under its id).
    Nothing,
    /// A stream still arriving: it goes when it ends, and its end says it was dropped (a copy
    /// it may leave unused is looked at then, once nothing writes into it).
    Arriving,
    /// A stream that had ended (arrived, failed or been taken): gone now.
    Ended,
}

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
    Failed(Failure),
}

impl Streams {
    /// Register the stream `id` of `repo`, arriving.
    fn open(&self, id: &str, repo: &str) -> Result<Arc<Slot>, Error> {
        let mut map = self.0.lock().map_err(|_| Error::StreamsPoisoned)?;
        if map.len() >= MAX_STREAMS {
            return Err(Error::TooMany);
        }
        if map.contains_key(id) {
            return Err(Error::Exists);
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
    /// removed now; whether it was.
    fn finish(&self, id: &str, slot: &Arc<Slot>, result: Result<Arrived, Arc<Refused>>) -> bool {
        let mut gone = None;
        let mut dropped = false;
        if let Ok(map) = self.0.lock() {
            let held = map.get(id).is_some_and(|s| Arc::ptr_eq(s, slot));
            dropped = !held;
            if let Ok(mut state) = slot.state.lock() {
                *state = match result {
                    Ok(q) if held => State::Ready(q),
                    Ok(q) => {
                        gone = Some(q);
                        State::Failed(Failure::Over)
                    }
                    Err(e) => State::Failed(Failure::Refused(e)),
                };
            }
        }
        slot.done.notify_all();
        drop(gone);
        dropped
    }

    /// Remove the stream `id` (only `slot`, when given); a stream still arriving is removed
    /// when it ends, and [`Streams::finish`] says so then.
    fn remove(&self, id: &str, slot: Option<&Arc<Slot>>) -> Removed {
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
        let Some(slot) = removed else {
            return Removed::Nothing;
        };
        let old = match slot.state.lock() {
            Ok(mut state) if !matches!(*state, State::Receiving) => Some(std::mem::replace(
                &mut *state,
                State::Failed(Failure::Dropped),
            )),
            _ => None,
        };
        match old {
            Some(old) => {
                drop(old);
                Removed::Ended
            }
            None => Removed::Arriving,
        }
    }

    /// The pack of stream `id` of `repo`, once it arrived (waiting for it, bounded), for the
    /// caller to migrate, or its index when an earlier batch of the push took it already. The
    /// stream stays (taken) until the push is over.
    pub(super) fn claim(&self, id: &str, repo: &str) -> Result<Claimed, Error> {
        let opened_by = Instant::now() + OPEN_WAIT;
        let slot = loop {
            let slot = self.0.lock().ok().and_then(|m| m.get(id).cloned());
            match slot {
                Some(s) => break s,
                None if Instant::now() < opened_by => std::thread::sleep(Duration::from_millis(10)),
                None => return Err(Error::NeverArrived),
            }
        };
        if slot.repo != repo {
            return Err(Error::OtherRepository);
        }
        {
            let state = slot.state.lock().map_err(|_| Error::StreamPoisoned)?;
            let (state, _) = slot
                .done
                .wait_timeout_while(state, ARRIVE_WAIT, |s| matches!(s, State::Receiving))
                .map_err(|_| Error::StreamPoisoned)?;
            if matches!(*state, State::Receiving) {
                return Err(Error::StillArriving);
            }
        }
        let mut state = slot.state.lock().map_err(|_| Error::StreamPoisoned)?;
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
                Err(Error::Failed(e))
            }
            State::Receiving => {
                *state = State::Receiving;
                Err(Error::StillArriving)
            }
        }
    }

    /// The repository of stream `id`, while it is held.
    fn repo_of(&self, id: &str) -> Option<String> {
        self.0.lock().ok()?.get(id).map(|s| s.repo.clone())
    }

    /// How many streams of `repo` are held (arriving, waiting for their prepare, or taken by
    /// a push not over yet).
    pub(super) fn held(&self, repo: &str) -> usize {
        self.0
            .lock()
            .map_or(0, |m| m.values().filter(|s| s.repo == repo).count())
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

/// `POST /_berth/cluster/stream`.
pub(super) async fn stream(cluster: &Arc<Cluster>, req: Request) -> Response {
    let query = req.uri().query().unwrap_or_default();
    let q: wire::StreamQuery = match wire::decode_query("stream", query) {
        Ok(q) => q,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let (repo, id) = (String::from(q.repo), String::from(q.stream));
    let shallow = q.shallow.map(|s| s.0).unwrap_or_default();
    let slot = match cluster.streams.open(&id, &repo) {
        Ok(s) => s,
        Err(e) => return text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    match cluster.placement.holds(&repo, &cluster.node).await {
        Ok(true) => {}
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
    if let Err(e) = cluster.copies.ensure(&repo, &dir).await {
        cluster.streams.remove(&id, Some(&slot));
        return text(StatusCode::CONFLICT, e.to_string());
    }
    let env = cluster.env.clone();
    let c = cluster.clone();
    let handle = tokio::runtime::Handle::current();
    let job = tokio::task::spawn_blocking(move || {
        let result = receive_into(dir, &env, &mut reader, &shallow).map_err(Arc::new);
        let answer = result.as_ref().map(|_| ()).map_err(Arc::clone);
        if let Err(e) = &answer {
            tracing::info!(target: "berth::cluster", repo = %Escaped::token(&repo), stream = %id, error = %Escaped::text(&e.to_string()), "pack stream refused");
        }
        if c.streams.finish(&id, &slot, result) {
            // Dropped while it arrived (its push was over first): a first push refused leaves
            // no copy here.
            let (c1, repo) = (c.clone(), repo.clone());
            handle.spawn(async move { c1.forget_unused_copy(&repo).await });
        }
        // Not taken by a prepare in time: removed.
        let c2 = c.clone();
        handle.spawn(async move {
            tokio::time::sleep(STREAM_TTL).await;
            let c3 = c2.clone();
            let expired = tokio::task::spawn_blocking(move || {
                let expired = c3.streams.remove(&id, Some(&slot)) != Removed::Nothing;
                if expired {
                    tracing::info!(target: "berth::cluster", stream = %id, "pack stream expired without a prepare");
                }
                expired
            })
            .await;
            // Its push is long over: a first push refused leaves no copy here.
            if matches!(expired, Ok(true)) {
                c2.forget_unused_copy(&repo).await;
            }
        });
        answer
    });
    match job.await {
        Ok(Ok(())) => text(StatusCode::OK, "received"),
        Ok(Err(e)) => text(StatusCode::CONFLICT, e.to_string()),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "stream failed"),
    }
}

/// Ingest the pack `reader` gives into a new quarantine of the repository at `dir`, with the
/// client's `shallow` commits.
fn receive_into(
    dir: PathBuf,
    env: &crate::receive::Environment,
    reader: &mut dyn std::io::Read,
    shallow: &[gix_hash::ObjectId],
) -> Result<Arrived, Refused> {
    let (repo, objects) = super::copy::open(&dir, env)?;
    let arrived = receive(&repo, &objects, reader, shallow)?;
    Ok(Arrived {
        copy: Some(Box::new(repo)),
        ..arrived
    })
}

/// `POST /_berth/cluster/drop`.
pub(super) async fn drop_stream(cluster: &Arc<Cluster>, req: Request) -> Response {
    let query = req.uri().query().unwrap_or_default();
    let q: wire::DropQuery = match wire::decode_query("drop", query) {
        Ok(q) => q,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let (c, id) = (cluster.clone(), String::from(q.stream));
    let dropped = tokio::task::spawn_blocking(move || {
        let repo = c.streams.repo_of(&id);
        (c.streams.remove(&id, None), repo)
    })
    .await;
    match dropped {
        Ok((Removed::Ended, Some(repo))) => {
            // The push is over: a first push refused leaves no copy here.
            cluster.forget_unused_copy(&repo).await;
            text(StatusCode::OK, "dropped")
        }
        // Its end looks at the copy, once it no longer writes into it: looked at now, the copy
        // was removed under a quarantine being made, and left half removed (a CI run,
        // 2026-12-08).
        Ok((Removed::Arriving, _)) => text(StatusCode::OK, "dropped"),
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
            copy: None,
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
        assert_eq!(s.remove("aa", None), Removed::Ended);
        assert_eq!(s.remove("aa", None), Removed::Nothing);
        assert_eq!(s.len(), 0);
        // Dropped while arriving: removed when it arrives, nothing left on disk.
        let slot = s.open("bb", "r").unwrap();
        assert_eq!(s.remove("bb", None), Removed::Arriving);
        let q = quarantine(objects.path());
        let path = q.quarantine.path().to_owned();
        assert!(s.finish("bb", &slot, Ok(q)), "its end says it was dropped");
        assert!(!path.exists());
        // Failed: the prepare learns why.
        let slot = s.open("cc", "r").unwrap();
        let refused = Refused::Objects(crate::cluster::objects::Error::MissingObjects);
        s.finish("cc", &slot, Err(Arc::new(refused)));
        assert_eq!(
            s.claim("cc", "r").unwrap_err().to_string(),
            "the push's pack: missing necessary objects"
        );
        assert_eq!(s.remove("cc", None), Removed::Ended);
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
