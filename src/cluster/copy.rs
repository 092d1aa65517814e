//! This replica's copy of a repository as the cluster's code reads and writes it: opening it
//! (its refs and objects), what of a set of tips it misses, and writing ref updates the way a
//! replica applies what the log holds (a catch-up, a resync) — with [`Local`], why any of it
//! failed. Shared by the catch-up, the resync, the replica's prepare and the incoming stream.

use gix_object::Exists;

use crate::refs::{self, Atomicity, RefUpdate, TransactionState};

/// Why this replica's copy could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub(super) enum Local {
    /// Its path is not UTF-8.
    #[error("repository path is not UTF-8")]
    PathNotUtf8,
    /// It is not a repository berth serves.
    #[error(transparent)]
    Repo(#[from] crate::repo::Error),
    /// Its object database could not be opened.
    #[error(transparent)]
    Objects(#[from] std::io::Error),
    /// Its refs could not be read.
    #[error(transparent)]
    Refs(#[from] refs::SnapshotError),
    /// The ref transaction could not be prepared.
    #[error(transparent)]
    Prepare(#[from] refs::transaction::prepare::Error),
    /// The ref transaction could not be committed.
    #[error(transparent)]
    Commit(#[from] refs::transaction::commit::Error),
    /// A ref of the transaction failed.
    #[error(transparent)]
    Ref(#[from] Box<refs::RefError>),
}

/// The copy at `dir`, opened with `env`, and its object database.
pub(super) fn open(
    dir: &std::path::Path,
    env: &crate::receive::Environment,
) -> Result<(crate::repo::Repository, gix_odb::Handle), Local> {
    let dir_str = dir.to_str().ok_or(Local::PathNotUtf8)?;
    let repo = crate::repo::Repository::open(dir_str, &env.for_config())?;
    let objects = gix_odb::at(&repo.objects_dir, repo.object_format)?;
    Ok((repo, objects))
}

/// Of `tips`, those not in the repository; and the repository's ref tips.
pub(super) fn missing(
    dir: &std::path::Path,
    env: &crate::receive::Environment,
    tips: &[gix_hash::ObjectId],
) -> Result<(Vec<gix_hash::ObjectId>, Vec<gix_hash::ObjectId>), Local> {
    let (repo, objects) = open(dir, env)?;
    let wants = tips
        .iter()
        .filter(|t| !objects.exists(t))
        .copied()
        .collect();
    let refs = refs::of_repository(&repo).snapshot()?;
    let mut haves: Vec<_> = refs.iter().map(|(_, id)| *id).collect();
    haves.sort();
    haves.dedup();
    Ok((wants, haves))
}

/// Write `updates` to `store` as one all-or-nothing ref transaction checked against `current`,
/// as a replica applies what the log holds (a catch-up, a resync): by `committer_name`, with no
/// hooks (a replica runs none); the first ref's error.
pub(super) fn commit_all(
    store: &dyn refs::RefStore,
    updates: &[RefUpdate],
    current: &refs::Refs,
    objects: &gix_odb::Handle,
    env: &crate::receive::Environment,
    committer_name: String,
) -> Result<(), Local> {
    let env = crate::receive::Environment {
        committer_name: Some(committer_name),
        ..env.clone()
    };
    let committer = env.committer(None, None);
    let options = refs::Options {
        atomicity: Atomicity::AllOrNothing,
        current,
        committer: &committer,
        objects,
    };
    let mut observer = |_: TransactionState, _: &[RefUpdate]| true;
    let prepared = store.transaction(options).prepare(updates, &mut observer)?;
    let results = prepared.commit()?;
    match results.into_iter().find_map(Result::err) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
