//! This replica's copy of a repository: its creation in the format recorded in etcd
//! (`repos/<name>/format`, [`Copies`], which owns the lock held while a copy is created, and
//! [`CopyError`]), and as the cluster's code reads and writes it: opening it (its refs and
//! objects), what of a set of tips it misses, and writing ref updates the way a replica
//! applies what the log holds (a catch-up, a resync) — with [`Local`], why any of it failed.
//! Shared by the catch-up, the resync, the replica's prepare and the incoming stream.

use std::path::Path;
use std::sync::Arc;

use gix_object::Exists;

use super::objects::Format;
use super::{Error, etcd, repo_key};

use crate::refs::{self, Atomicity, RefUpdate, TransactionState};

/// Why this replica has no copy of a repository it is to hold.
#[derive(Debug, thiserror::Error)]
pub(super) enum CopyError {
    /// etcd could not be read.
    #[error(transparent)]
    Cluster(#[from] Error),
    /// No push recorded the repository's format yet: a copy in this node's defaults could
    /// differ from the others'.
    #[error("the repository's format is not recorded yet")]
    FormatUnrecorded,
    /// The copy could not be created.
    #[error(transparent)]
    Create(#[from] super::objects::Error),
    /// The blocking task creating it was lost.
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
}

/// The repositories' recorded formats, and the creation of this node's copies.
#[derive(Debug)]
pub(super) struct Copies {
    etcd: Arc<etcd::Client>,
    /// Held while this node creates its copy of a repository.
    creating: tokio::sync::Mutex<()>,
}

impl Copies {
    pub(super) fn new(etcd: Arc<etcd::Client>) -> Copies {
        Copies {
            etcd,
            creating: tokio::sync::Mutex::new(()),
        }
    }

    /// The format recorded for repository `name` (`None`: not recorded yet).
    async fn format_of(&self, name: &str) -> Result<Option<Format>, Error> {
        match self.etcd.get(&repo_key(name, "format")).await? {
            None => Ok(None),
            Some(kv) => Ok(Some(Format::decode(&kv.value)?)),
        }
    }

    /// Record `format` as repository `name`'s unless one is recorded; the recorded one.
    pub(super) async fn record_format(&self, name: &str, format: &Format) -> Result<Format, Error> {
        let key = repo_key(name, "format");
        let t = self
            .etcd
            .txn(
                &[etcd::Compare::Absent(key.clone())],
                &[etcd::Op::Put(key.clone(), format.encode(), None)],
                &[etcd::Op::Get(key)],
            )
            .await?;
        if t.succeeded {
            return Ok(*format);
        }
        match t.gets.first().and_then(|g| g.first()) {
            Some(kv) => Ok(Format::decode(&kv.value)?),
            None => Err(Error::NotRecorded {
                name: name.to_owned(),
                what: "format",
            }),
        }
    }

    /// Create this replica's copy of `name` at `dir` if it has none, in the recorded format
    /// (none recorded: no copy, rather than one in this node's defaults that no later push
    /// or catch-up could mend).
    pub(super) async fn ensure(&self, name: &str, dir: &Path) -> Result<(), CopyError> {
        if crate::repo::is_git_dir(dir) {
            return Ok(());
        }
        // A stream, a prepare and a catch-up may all find the copy missing at once.
        let _one = self.creating.lock().await;
        if crate::repo::is_git_dir(dir) {
            return Ok(());
        }
        let format = self
            .format_of(name)
            .await?
            .ok_or(CopyError::FormatUnrecorded)?;
        let d = dir.to_owned();
        Ok(
            tokio::task::spawn_blocking(move || super::objects::ensure_repository(&d, &format))
                .await??,
        )
    }
}

impl super::Cluster {
    /// Once a push to `name` is over (on the accepting node, and on each replica its pack was
    /// streamed to): if the repository's log has no entry, remove this node's copy when
    /// nothing landed in it and no other push is on its way into it
    /// ([`super::decide::unused_copy`]), so that a refused first push (a hook, no quorum)
    /// leaves no empty repository behind. Its placement and format stay recorded in etcd: a
    /// later push is placed on the same nodes, whose copies it creates again. Under the lock
    /// copies are created with, so a stream or prepare creating the copy now waits.
    pub(super) async fn forget_unused_copy(&self, name: &str) {
        let dir = super::repo_dir(&self.root, name);
        // A copy that applied an entry is the repository's: no etcd read after every push.
        if !crate::repo::is_git_dir(&dir) || super::applied_seq(&dir) > 0 {
            return;
        }
        let log_seq = match self.log.head(name).await {
            Ok(head) => head.seq,
            // Unknown: left alone.
            Err(_) => return,
        };
        if log_seq > 0 {
            return;
        }
        let _one = self.copies.creating.lock().await;
        let held = self.streams.held(name);
        let (env, root) = (self.env.clone(), self.root.clone());
        let removed = tokio::task::spawn_blocking(move || {
            let refs = open(&dir, &env)
                .ok()
                .and_then(|(repo, _)| refs::of_repository(&repo).snapshot().ok())
                .map(|r| r.iter().count());
            let quarantines = std::fs::read_dir(dir.join("objects"))
                .map(|d| {
                    d.flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with("tmp_objdir-"))
                        .count()
                })
                .unwrap_or(0);
            match super::decide::unused_copy(log_seq, refs, held, quarantines) {
                super::decide::UnusedCopy::Remove => remove_copy(&root, &dir).map(|()| true),
                _ => Ok(false),
            }
        })
        .await;
        match removed {
            Ok(Ok(true)) => {
                tracing::info!(target: "berth::cluster", repo = %crate::escape::Escaped::token(name), "removed the empty copy a refused first push left")
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(target: "berth::cluster", repo = %crate::escape::Escaped::token(name), error = %crate::escape::Escaped::text(&e.to_string()), "cannot remove the empty copy a refused first push left")
            }
            Err(_) => {}
        }
    }
}

/// Remove the copy at `dir` and the directories above it that it leaves empty, up to `root`.
pub(super) fn remove_copy(root: &Path, dir: &Path) -> std::io::Result<()> {
    std::fs::remove_dir_all(dir)?;
    let mut up = dir.parent();
    while let Some(d) = up {
        if d == root || !d.starts_with(root) || std::fs::remove_dir(d).is_err() {
            break;
        }
        up = d.parent();
    }
    Ok(())
}

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
    /// Its list of objects not known to be complete could not be read.
    #[error(transparent)]
    Incomplete(#[from] crate::objects::incomplete::Error),
}

/// The copy at `dir`, opened with `env`, and its object database.
pub(super) fn open(
    dir: &std::path::Path,
    env: &crate::receive::Environment,
) -> Result<(crate::repo::Repository, gix_odb::Handle), Local> {
    let repo = open_repo(dir, env)?;
    let objects = objects_of(&repo)?;
    Ok((repo, objects))
}

/// The copy at `dir`, opened with `env`, without its object database.
pub(super) fn open_repo(
    dir: &std::path::Path,
    env: &crate::receive::Environment,
) -> Result<crate::repo::Repository, Local> {
    let dir_str = dir.to_str().ok_or(Local::PathNotUtf8)?;
    Ok(crate::repo::Repository::open(dir_str, &env.for_config())?)
}

/// `repo`'s object database (opening it lists every pack's index).
pub(super) fn objects_of(repo: &crate::repo::Repository) -> Result<gix_odb::Handle, Local> {
    Ok(gix_odb::at(&repo.objects_dir, repo.object_format)?)
}

/// Of `tips`, those not in the repository or not known to be complete there (listed,
/// [`crate::objects::incomplete`]: a push that never settled its own file, e.g. cut by a power
/// loss mid-move, may have left a commit without its tree; the copy's check walks through
/// such a tip, so the peer is asked for it and what it reaches); and the repository's ref tips.
pub(super) fn missing(
    dir: &std::path::Path,
    env: &crate::receive::Environment,
    tips: &[gix_hash::ObjectId],
) -> Result<(Vec<gix_hash::ObjectId>, Vec<gix_hash::ObjectId>), Local> {
    let (repo, objects) = open(dir, env)?;
    let listed = crate::objects::incomplete::read(&repo.objects_dir, repo.object_format)?;
    let wants = tips
        .iter()
        .filter(|t| !objects.exists(t) || listed.contains(*t))
        .copied()
        .collect();
    let refs = refs::of_repository(&repo).snapshot()?;
    let mut haves: Vec<_> = refs.iter().map(|(_, id)| id).collect();
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
