//! The connectivity phase: every object reachable from a new ref value must be in the
//! repository or the quarantine (git's `check_connected` over `rev-list --objects <tips> --not
//! --all`), and a push that makes the repository shallow needs `receive.shallowUpdate`.

use foldhash::HashSet;
use std::io::Write;

use gix_hash::ObjectId;
use tracing::info_span;

use super::Fatal;
use super::command::Cmd;
use crate::objects::connectivity::{self, Check};
use crate::objects::ingest;
use crate::objects::lookup::Budget;
use crate::objects::settle::{self, List, Listed, PackLinks, Stops};
use crate::protocol::report::Reason;
use crate::protocol::sideband::Sideband;
use crate::repo::Repository;

/// What the connectivity check found (reported by [`report_missing`]).
#[derive(Debug, Default)]
pub(super) struct Failed {
    /// What each refused command lacks.
    pub(super) commands: Vec<connectivity::Missing>,
    /// When no command is refused, what git's combined `rev-list` of all the tips still finds
    /// (an object the tips' walks meet as two kinds).
    pub(super) combined: Option<connectivity::Missing>,
    /// How git's `rev-list` would have walked, for its words.
    pub(super) walk: connectivity::RevWalk,
    /// The push's objects that are not complete, for the quarantine to list before it moves
    /// them in ([`crate::objects::incomplete`]).
    pub(super) incomplete: crate::objects::incomplete::Found,
}

/// Refuse the commands whose new value is not connected ([`Reason::MissingObjects`]); what
/// each lacks, for [`report_missing`]. Run again (after a commit gate's catch-up), it checks
/// the commands refused for missing objects again. `objects` finds the push's objects and the
/// repository's (a store opened over the quarantine, if any, for this check); `had` the
/// repository's own (not the quarantine's).
pub(super) fn check_connectivity(
    cmds: &mut [Cmd],
    repo: &Repository,
    objects: &gix_odb::Handle,
    received: Option<&ingest::Received>,
    shallow: &[ObjectId],
    had: &impl gix_object::Exists,
    refresh: Budget,
) -> Result<Failed, Fatal> {
    let _span = info_span!("connectivity").entered();
    let pass = Pass {
        repo,
        objects,
        received,
        shallow,
        had,
        refresh,
    };
    pass.until_settled(
        cmds,
        &mut Listed::new(&repo.objects_dir, repo.object_format),
    )
}

/// What one pass of the connectivity check over the commands reads.
struct Pass<'a, H> {
    repo: &'a Repository,
    /// The quarantine's objects and the repository's.
    objects: &'a gix_odb::Handle,
    received: Option<&'a ingest::Received>,
    shallow: &'a [ObjectId],
    had: &'a H,
    refresh: Budget,
}

impl<'a, H: gix_object::Exists> Pass<'a, H> {
    /// Check the commands until the list of objects not known to be complete stops changing
    /// under the check ([`settle`]).
    fn until_settled(&self, cmds: &mut [Cmd], list: &mut dyn List) -> Result<Failed, Fatal> {
        let stops = Stops {
            tips: cmds
                .iter()
                .filter(|c| c.pending() && !c.command.is_delete())
                .map(|c| c.command.new),
            shallow: self.shallow,
            links: PackLinks::of(self.received.map(|r| r.links.as_ref())),
        };
        let suspects = settle::first_suspects(list, stops)?;
        settle::until_settled(list, suspects, |suspects| self.once(cmds, suspects))
    }

    /// One pass over the commands with `suspects` as the list: what it found, and the check
    /// that found it (for what it relied on).
    fn once(
        &self,
        cmds: &mut [Cmd],
        suspects: HashSet<ObjectId>,
    ) -> Result<(Failed, Check<'a>), Fatal> {
        let Pass {
            repo,
            objects,
            received,
            shallow,
            had,
            ..
        } = *self;
        // git's "theirs" (`prepare_shallow_info`): the client's shallow commits the repository
        // lacked before the push, or had without knowing them complete (an earlier push of the
        // same shallow history that was refused or cut short: git finds them unreachable from its
        // refs). One it had complete needs no new root here: berth's walk stops at it, and a push
        // that sends it again is not made shallow by that.
        let client_shallow: HashSet<ObjectId> = if shallow.is_empty() {
            HashSet::default()
        } else {
            shallow
                .iter()
                .filter(|id| !had.exists(id) || suspects.contains(*id))
                .copied()
                .collect()
        };
        let mut check = Check::new(
            objects,
            received.and_then(|r| r.index.as_ref()),
            std::iter::empty(),
        )
        .with_pack_links(received.and_then(|r| r.links.as_ref()))
        .with_shallow(repo.shallow().into_iter().collect(), client_shallow)
        .with_refresh_budget(self.refresh.clone())
        .with_suspects(suspects);
        // All tips at once first, as git's combined rev-list; each on its own only if that fails.
        for c in cmds.iter_mut() {
            if c.error() == Some(&Reason::MissingObjects) {
                c.set_error(None);
            }
        }
        let tips: Vec<ObjectId> = cmds
            .iter()
            .filter(|c| c.pending() && !c.command.is_delete())
            .map(|c| c.command.new)
            .collect();
        check.self_contained(&tips);
        let mut failed = Failed::default();
        for c in cmds
            .iter_mut()
            .filter(|c| c.pending() && !c.command.is_delete())
        {
            match check.tip(c.command.new) {
                connectivity::Status::Missing(m) => {
                    failed.commands.push(m);
                    c.refuse(Reason::MissingObjects);
                }
                connectivity::Status::Connected if !check.new_roots().is_empty() => {
                    if repo.config.policy.shallow_update {
                        c.set_new_shallow(check.new_roots().to_vec());
                    } else {
                        c.refuse(Reason::ShallowUpdateNotAllowed);
                    }
                }
                connectivity::Status::Connected => {}
            }
        }
        if failed.commands.is_empty() {
            failed.combined = check.crossed().cloned();
        }
        // What the pack holds that is not complete (nothing when its links vouched for it): taken
        // in with the rest, as git takes it, but listed, so that no later push takes it as
        // complete. Not when every command was refused: then nothing moves in.
        if cmds.iter().any(Cmd::pending) {
            failed.incomplete = check.incomplete();
        }
        // A missing parent is told apart by how rev-list walks (found only then: an error's path).
        let missing_parent = |m: &connectivity::Missing| {
            m.defect == connectivity::Defect::Missing
                && matches!(m.role, connectivity::Role::Parent(_))
        };
        if failed
            .commands
            .iter()
            .chain(&failed.combined)
            .any(missing_parent)
        {
            failed.walk = rev_walk(repo, objects);
        }
        if check.objects_read() > 0 {
            tracing::debug!(
                objects_read = check.objects_read(),
                "tips walked one by one"
            );
        }
        Ok((failed, check))
    }
}

/// How git's `rev-list --objects --stdin --not --all --alternate-refs` walks a push's tips:
/// limited when what it marks uninteresting peels to a commit (`handle_commit`), else not.
/// That is every ref, the hidden ones too (the combined run's `--exclude-hidden=receive` leaves
/// them out of `--all`, but the quarantine's alternate is the repository, whose refs
/// `--alternate-refs` adds), and a detached `HEAD`.
fn rev_walk(repo: &Repository, objects: &gix_odb::Handle) -> connectivity::RevWalk {
    use gix_odb::Header;
    // The ref store's peeling (up to 64 tags; git's `handle_commit` has no bound).
    let mut peeler = crate::refs::Peeler::new(objects);
    let mut peels_to_commit = |id: ObjectId| {
        let target = peeler.peel(id).unwrap_or(id);
        let kind = objects.try_header(&target).ok().flatten().map(|h| h.kind());
        kind == Some(gix_object::Kind::Commit)
    };
    let refs = crate::refs::of_repository(repo).snapshot();
    let limited = repo.detached_head().is_some_and(&mut peels_to_commit)
        || refs.is_ok_and(|refs| refs.iter().any(|(_, id)| peels_to_commit(id)));
    if limited {
        connectivity::RevWalk::Limited
    } else {
        connectivity::RevWalk::Unlimited
    }
}

/// git's messages for what [`check_connectivity`] found missing: its combined rev-list run
/// reports the first problem through the muxer, then each culprit's own run reports on
/// receive-pack's stderr.
pub(super) fn report_missing<W: Write, E: Write>(
    failed: &Failed,
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    if let Some(first) = failed.combined.as_ref().or(failed.commands.first()) {
        sb.progress(first.message(failed.walk).as_bytes())?;
        // Buffered: a hostile request may name a missing object in each of many commands.
        let mut stderr = std::io::BufWriter::with_capacity(64 * 1024, sb.stderr());
        for m in &failed.commands {
            stderr.write_all(m.message(failed.walk).as_bytes())?;
        }
        stderr.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The passes over the commands when a concurrent push lists objects as not known to be
    //! complete while this push's check runs: the list as `listed` reads it, each call.

    use super::*;
    use crate::objects::settle::MAX_PASSES;
    use crate::protocol::request::Command;
    use crate::test_git::git;

    /// A bare repository holding `n` commits whose parent nobody has (as a push that was
    /// accepted beside them left them), and a create command for each.
    fn broken(n: usize) -> (tempfile::TempDir, Repository, Vec<ObjectId>) {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "--bare", "srv.git"]);
        let bare = dir.path().join("srv.git");
        let ids = (0..n)
            .map(|i| crate::test_git::commit_without_parent(&bare, &i.to_string()))
            .collect();
        let repo = Repository::open(bare.to_str().unwrap(), &Default::default()).unwrap();
        (dir, repo, ids)
    }

    fn creates(ids: &[ObjectId]) -> Vec<Cmd> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                Cmd::new(Command {
                    old: ObjectId::null(id.kind()),
                    new: *id,
                    name: format!("refs/heads/b{i}").into(),
                })
            })
            .collect()
    }

    /// Check `cmds` with `lists[k]` as the list at the k-th read (the last one from then on):
    /// the result, and how many times the list was read.
    fn check(
        repo: &Repository,
        cmds: &mut [Cmd],
        lists: &[Vec<ObjectId>],
    ) -> (Result<Failed, Fatal>, usize) {
        let objects = gix_odb::at(&repo.objects_dir, repo.object_format).unwrap();
        let pass = Pass {
            repo,
            objects: &objects,
            received: None,
            shallow: &[],
            had: &objects,
            refresh: Budget::default(),
        };
        let mut list = settle::InTurn { lists, reads: 0 };
        let result = pass.until_settled(cmds, &mut list);
        (result, list.reads)
    }

    /// The repository's broken commit was not listed when the check began and is by the time
    /// it ended (a concurrent push listed it, then moved it in): the command at it is checked
    /// again and refused, not taken as complete on the strength of the object being there.
    #[test]
    fn an_object_listed_while_the_check_ran_is_checked_again() {
        let (_dir, repo, ids) = broken(1);
        let mut cmds = creates(&ids);
        let (result, reads) = check(&repo, &mut cmds, &[vec![], ids.clone()]);
        let failed = result.unwrap();
        assert_eq!(
            reads, 4,
            "looked through, looked through again, read, checked again, looked through again"
        );
        assert_eq!(cmds[0].error(), Some(&Reason::MissingObjects));
        assert_eq!(failed.commands.len(), 1);

        // Listed from the start (looked through, read, looked through again), or not at all
        // (looked through before and after): one pass.
        let mut cmds = creates(&ids);
        let (result, reads) = check(&repo, &mut cmds, std::slice::from_ref(&ids));
        assert_eq!((result.unwrap().commands.len(), reads), (1, 3));
        let mut cmds = creates(&ids);
        let (result, reads) = check(&repo, &mut cmds, &[vec![]]);
        assert_eq!((result.unwrap().commands.len(), reads), (0, 2));
        assert!(cmds[0].pending());

        // What is listed meanwhile that the check did not rely on changes nothing.
        let other = ObjectId::from_hex("cd".repeat(20).as_bytes()).unwrap();
        let mut cmds = creates(&ids);
        let (result, reads) = check(&repo, &mut cmds, &[vec![], vec![other]]);
        assert_eq!((result.unwrap().commands.len(), reads), (0, 2));
        assert!(cmds[0].pending());
    }

    /// Pushes that keep listing what this one builds on end it after [`MAX_PASSES`] passes.
    #[test]
    fn a_list_that_keeps_changing_under_the_check_ends_the_push() {
        // Each time the list is looked at, one more of the commands' commits is on it.
        let (_dir, repo, ids) = broken(2 * MAX_PASSES + 1);
        let mut cmds = creates(&ids);
        let lists: Vec<Vec<ObjectId>> = (0..=2 * MAX_PASSES + 1)
            .map(|k| ids[..k].to_vec())
            .collect();
        let (result, reads) = check(&repo, &mut cmds, &lists);
        assert!(
            matches!(
                result,
                Err(Fatal::IncompleteChanging(settle::Unsettled {
                    passes: MAX_PASSES
                }))
            ),
            "{:?}",
            result.map(|f| f.commands.len())
        );
        assert_eq!(
            reads,
            2 * MAX_PASSES,
            "looked through after each pass, read before the next"
        );
    }
}
