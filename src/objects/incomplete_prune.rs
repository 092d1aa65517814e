//! Pruning the list of objects not known to be complete ([`crate::objects::incomplete`]): which
//! of its entries may leave it.
//!
//! The list only grows as pushes bring incomplete objects, and a push that would grow it past
//! its bound is refused; a client that pushes such objects on purpose could fill it, and every
//! later push that needs an entry would be refused until an operator stepped in. Most entries
//! stop mattering with time: `git gc` prunes an unreachable object (every listed one is, as no
//! ref may name an incomplete history), and a later push may bring what one lacked. So when a
//! push would pass the bound, the list is pruned first ([`prune`], at most once a
//! [`incomplete::PRUNE_EVERY`]): an entry leaves it when its object is gone, or when a walk
//! from it (through the other listed objects, stopping at any other object the repository has,
//! as the connectivity check does) reaches nothing missing. Everything else stays; an entry
//! kept too long costs a walk, never a wrong verdict.
//!
//! No push lists anything while a prune runs ([`incomplete::Pruning`] holds the list's gate),
//! so an object absent from the repository is not one a push listed and is still moving in.
//! The files of pushes under way ([`incomplete::Pending`]) are not held: they are read with
//! the list before the walks and again after them, and the prune gives up when an object a
//! walk stopped at was listed meanwhile (as the connectivity check reads the list again).

use std::path::Path;

use gix_hash::ObjectId;

use crate::objects::connectivity::{Check, Status};
use crate::objects::incomplete;
use crate::objects::lookup::{Budget, Objects};

/// What a prune did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pruned {
    /// None ran, and why ([`incomplete::NotStarted`]).
    NotNow(incomplete::NotStarted),
    /// An object a walk relied on was listed by a push meanwhile: nothing was dropped.
    Raced,
    /// The list was written again with what was kept.
    Done(Outcome),
}

/// The entries a prune kept and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Entries whose objects are still not known to be complete.
    pub kept: usize,
    /// Entries whose objects are gone or complete now (a line listed twice counts once).
    pub dropped: usize,
}

/// Why a prune could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The list or its gate could not be read or written.
    #[error(transparent)]
    List(#[from] incomplete::Error),
    /// The repository's objects could not be opened.
    #[error("{path}: {source}")]
    Objects {
        /// The object directory.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Prune the list of `objects_dir` (whose objects are `hash`'s), written again as
/// `durability` says for objects; [`Pruned::NotNow`] when it is held or was pruned less than
/// `every` ago ([`incomplete::PRUNE_EVERY`]).
pub fn prune(
    objects_dir: &Path,
    hash: gix_hash::Kind,
    durability: crate::fsync::Durability,
    every: std::time::Duration,
) -> Result<Pruned, Error> {
    let _span = tracing::info_span!("prune_incomplete").entered();
    let pruning = match incomplete::Pruning::start(objects_dir, hash, every)? {
        Ok(pruning) => pruning,
        Err(why) => return Ok(Pruned::NotNow(why)),
    };
    let odb = gix_odb::at(objects_dir, hash).map_err(|source| Error::Objects {
        path: objects_dir.to_owned(),
        source,
    })?;
    // One refresh of the view of the packs for all the lookups, as for a push.
    let budget = Budget::default();
    let objects = Objects::new(&odb, budget.clone());
    // The list cannot grow while the gate is held: only the pushes' own files are read again.
    let mut seen = incomplete::Seen::default();
    let listed = incomplete::read_noting(objects_dir, hash, &mut seen)?;
    let mut check = Check::new(&odb, None, std::iter::empty())
        .with_suspects(listed)
        .with_refresh_budget(budget);
    let kept: Vec<ObjectId> = pruning
        .ids()
        .iter()
        .filter(|id| {
            use gix_object::Exists;
            objects.exists(id) && matches!(check.tip(**id), Status::Missing(_))
        })
        .copied()
        .collect();
    let stale = &mut |id: &ObjectId| check.made_stale_by(id);
    if incomplete::lists_any_since(objects_dir, hash, &mut seen, stale)? {
        return Ok(Pruned::Raced);
    }
    let outcome = Outcome {
        kept: kept.len(),
        dropped: pruning.ids().len() - kept.len(),
    };
    pruning.keep(&kept, durability)?;
    Ok(Pruned::Done(outcome))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_git::{Written, commit_of, git};
    use crate::objects::incomplete::NotStarted;
    use std::time::Duration;

    fn commit(repo: &Path, tree: &str, parent: &str) -> String {
        commit_of(repo, tree, &[parent], "c", Written::Loose)
    }

    /// A new bare repository and its object directory.
    fn bare() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "--bare"]);
        let objects = dir.path().join("objects");
        (dir, objects)
    }

    fn id(hex: &str) -> ObjectId {
        ObjectId::from_hex(hex.as_bytes()).unwrap()
    }

    /// `prune()`'s outcome once the gate is free: a test running beside this one that spawns
    /// git may hold a copy of a gate just closed here, from its fork until its exec
    /// ([`NotStarted::Busy`]); tried again, at most 1,000 times.
    fn once_free(prune: impl Fn() -> Result<Pruned, Error>) -> Pruned {
        for _ in 0..1000 {
            match prune().unwrap() {
                Pruned::NotNow(NotStarted::Busy) => std::thread::sleep(Duration::from_millis(10)),
                outcome => return outcome,
            }
        }
        panic!("the gate stayed held")
    }

    /// An entry leaves the list when its object is gone or complete now (its missing parent
    /// arrived, or it never lacked anything); one whose history still has a hole stays, and so
    /// does one that builds on it (a listed object is walked through, not taken as complete).
    #[test]
    fn gone_and_completed_entries_leave_the_list_and_incomplete_ones_stay() {
        let (dir, objects) = bare();
        let repo = dir.path();
        let tree = git(repo, &["mktree"]);
        let root = commit(repo, &tree, &"1".repeat(40));
        let broken = commit(repo, &tree, &"2".repeat(40));
        let on_broken = commit(repo, &tree, &broken);
        // `healed`'s parent is not there when it is listed, and arrives before the prune.
        let parent = commit_of(repo, &tree, &[], "p", Written::NameOnly);
        let healed = commit(repo, &tree, &parent);
        let complete = commit_of(repo, &tree, &[], "c", Written::Loose);
        let gone = "4".repeat(40);
        drop(
            incomplete::append(
                &objects,
                &[
                    id(&root),
                    id(&broken),
                    id(&on_broken),
                    id(&healed),
                    id(&complete),
                    id(&gone),
                    id(&broken),
                ],
                incomplete::Room::Settle,
                Default::default(),
            )
            .unwrap(),
        );
        assert_eq!(commit_of(repo, &tree, &[], "p", Written::Loose), parent);
        let sha1 = gix_hash::Kind::Sha1;
        let prune_now = || once_free(|| prune(&objects, sha1, Default::default(), Duration::ZERO));
        let done = |kept, dropped| Pruned::Done(Outcome { kept, dropped });
        assert_eq!(prune_now(), done(3, 3));
        let left = incomplete::read(&objects, sha1).unwrap();
        let want: foldhash::HashSet<_> = [&root, &broken, &on_broken].map(|h| id(h)).into_iter().collect();
        assert_eq!(left, want);

        // Nothing left to drop: the list is written again as it is; once all are gone, the
        // list is removed.
        assert_eq!(prune_now(), done(3, 0));
        for c in [&root, &broken, &on_broken] {
            std::fs::remove_file(objects.join(&c[..2]).join(&c[2..])).unwrap();
        }
        assert_eq!(prune_now(), done(0, 3));
        assert!(!objects.join(incomplete::FILE).exists());
    }

    /// A prune waits its turn: not while a push holds the list (listed, not yet moved in), and
    /// not again within `every` of the last one.
    #[test]
    fn a_prune_does_not_run_while_a_push_holds_the_list_nor_again_too_soon() {
        let (_dir, objects) = bare();
        let sha1 = gix_hash::Kind::Sha1;
        let gone = id(&"4".repeat(40));
        let listed = incomplete::append(&objects, &[gone], incomplete::Room::Settle, Default::default()).unwrap();
        let hour = Duration::from_secs(3600);
        // The gate is new: no prune yet, whatever `every` says.
        assert_eq!(
            prune(&objects, sha1, Default::default(), hour).unwrap(),
            Pruned::NotNow(NotStarted::Busy),
            "the push's object is not in yet"
        );
        drop(listed);
        let done = Pruned::Done(Outcome {
            kept: 0,
            dropped: 1,
        });
        let prune_every = |every| once_free(|| prune(&objects, sha1, Default::default(), every));
        assert_eq!(prune_every(hour), done);
        drop(incomplete::append(&objects, &[gone], incomplete::Room::Settle, Default::default()).unwrap());
        assert_eq!(prune_every(hour), Pruned::NotNow(NotStarted::TooSoon));
        assert_eq!(incomplete::read(&objects, sha1).unwrap().len(), 1);
        assert_eq!(prune_every(Duration::ZERO), done);
    }
}
