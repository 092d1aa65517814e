//! The decision for each ref (git's `update()`): the built-in checks (ref name, checked-out
//! branch, `receive.deny*`, fast-forward, object kinds) and the update hook, giving the ref
//! update to queue or the reason it is refused.

use std::collections::HashSet;
use std::io::{self, Write};

use gix_hash::ObjectId;
use gix_object::bstr::{BString, ByteSlice};
use gix_object::{Find, Kind};
use gix_odb::Header;

use super::command::Cmd;
use super::run_hooks::Hooks;
use crate::objects::lookup::Objects;
use crate::protocol::report::Reason;
use crate::protocol::sideband::Sideband;
use crate::refs::{Change, Expected, RefError, RefUpdate, Refs};
use crate::repo::config::DenyAction;
use crate::repo::{Repository, policy};

/// What the per-ref decision needs to know.
pub(super) struct Decide<'a> {
    pub(super) repo: &'a Repository,
    /// `GIT_NAMESPACE`'s prefix, or empty.
    pub(super) namespace: &'a str,
    pub(super) hooks: &'a Hooks<'a>,
    /// Re-reads the object directories at most once after a miss, for the whole push.
    pub(super) objects: &'a Objects,
    pub(super) worktrees: Vec<crate::repo::Worktree>,
    /// The refs as the update stage starts.
    pub(super) refs: Refs,
    /// Object kinds looked up so far: many refs of one push often point at one object.
    pub(super) kinds: std::cell::RefCell<foldhash::HashMap<ObjectId, Option<Kind>>>,
    /// The cluster's commit point, between each batch's prepare and commit.
    pub(super) gate: Option<&'a dyn super::CommitGate>,
}

impl Decide<'_> {
    /// The ref a command really updates: its symref target, or its name in the namespace.
    pub(super) fn full_name(&self, cmd: &Cmd) -> BString {
        match cmd.target() {
            Some(target) => target.clone(),
            None => [self.namespace.as_bytes(), cmd.command.name.as_slice()]
                .concat()
                .into(),
        }
    }

    /// Whether a command's own name is the ref it updates (no namespace, no symref target).
    fn names_its_ref(&self, cmd: &Cmd) -> bool {
        self.namespace.is_empty() && cmd.target().is_none()
    }

    /// The name a queued update carries: when it is the command's own ([`Self::names_its_ref`]),
    /// the command's name itself, lent to the update until [`Decide::give_back`] returns it
    /// (a push of a million refs holds each name once, not twice); else [`Self::full_name`].
    fn update_name(&self, cmd: &mut Cmd) -> BString {
        if self.names_its_ref(cmd) {
            std::mem::take(&mut cmd.command.name)
        } else {
            self.full_name(cmd)
        }
    }

    /// Give a command back the name [`decide`] lent to its update, once the transaction is
    /// over (before anything reports on the command).
    pub(super) fn give_back(&self, cmd: &mut Cmd, update: RefUpdate) {
        if self.names_its_ref(cmd) {
            cmd.command.name = update.name;
        }
    }

    /// The kind of the object `id`, `None` if it does not exist; looked up once per push.
    fn kind(&self, id: &ObjectId) -> Option<Kind> {
        *self
            .kinds
            .borrow_mut()
            .entry(*id)
            .or_insert_with(|| self.objects.try_header(id).ok().flatten().map(|h| h.kind()))
    }
}

/// git's `update()`: the built-in checks for one command, returning the ref update to queue or
/// the reason it is refused, with git's messages on the way. A queued update may hold the
/// command's name: [`Decide::give_back`] returns it.
pub(super) fn decide<W: Write, E: Write>(
    cmd: &mut Cmd,
    ctx: &Decide<'_>,
    sb: &mut Sideband<W, E>,
) -> io::Result<Result<Option<RefUpdate>, Reason>> {
    let config = &ctx.repo.config;
    let c = &cmd.command;
    let name = c.name.as_bstr();
    if !policy::is_valid_refname(name, c.is_delete()) {
        sb.error(format_args!(
            "refusing to update funny ref '{name}' remotely"
        ))?;
        return Ok(Err(Reason::FunnyRefname));
    }
    let worktree = ctx.worktrees.iter().find(|w| {
        w.head
            .as_deref()
            .is_some_and(|h| h.as_bytes() == name.as_bytes())
    });
    let mut update_worktree = None;
    if let Some(wt) = worktree.filter(|w| !w.is_bare()) {
        match config.policy.deny_current_branch {
            DenyAction::Ignore => {}
            DenyAction::Warn => sb.warning("updating the current branch")?,
            DenyAction::Refuse | DenyAction::Unconfigured => {
                sb.error(format_args!(
                    "refusing to update checked out branch: {name}"
                ))?;
                if config.policy.deny_current_branch == DenyAction::Unconfigured {
                    sb.error(policy::REFUSE_CURRENT_BRANCH_MSG)?;
                }
                return Ok(Err(Reason::CurrentBranch));
            }
            // Let the other checks intervene first.
            DenyAction::UpdateInstead => update_worktree = Some(wt),
        }
    }
    if !c.is_delete() && ctx.kind(&c.new).is_none() {
        // git prints this with error(), on its own stderr.
        writeln!(
            sb.stderr(),
            "error: unpack should have generated {}, but I can't find it!",
            c.new
        )?;
        return Ok(Err(Reason::BadPack));
    }
    if !c.old.is_null() && c.is_delete() {
        if config.policy.deny_deletes && name.starts_with(b"refs/heads/") {
            sb.error(format_args!("denying ref deletion for {name}"))?;
            return Ok(Err(Reason::DeletionProhibited));
        }
        // The checked-out branch, or, in a namespace, the branch the repository's HEAD names.
        let main_head = ctx.worktrees.first().and_then(|w| w.head.as_deref());
        if worktree.is_some()
            || (!ctx.namespace.is_empty()
                && main_head.is_some_and(|h| h.as_bytes() == ctx.full_name(cmd).as_slice()))
        {
            match config.policy.deny_delete_current {
                DenyAction::Ignore => {}
                DenyAction::Warn => sb.warning("deleting the current branch")?,
                DenyAction::Refuse | DenyAction::Unconfigured | DenyAction::UpdateInstead => {
                    if config.policy.deny_delete_current == DenyAction::Unconfigured {
                        sb.error(policy::REFUSE_DELETE_CURRENT_MSG)?;
                    }
                    sb.error(format_args!(
                        "refusing to delete the current branch: {name}"
                    ))?;
                    return Ok(Err(Reason::DeleteCurrent));
                }
            }
        }
    }
    if config.policy.deny_non_fast_forwards
        && !c.is_delete()
        && !c.is_create()
        && name.starts_with(b"refs/heads/")
    {
        if ctx.kind(&c.old) != Some(Kind::Commit) || ctx.kind(&c.new) != Some(Kind::Commit) {
            writeln!(sb.stderr(), "error: bad sha1 objects for {name}")?;
            return Ok(Err(Reason::BadRef));
        }
        if !is_ancestor(ctx.objects, c.old, c.new) {
            sb.error(format_args!(
                "denying non-fast-forward {name} (you should pull first)"
            ))?;
            return Ok(Err(Reason::NonFastForward));
        }
    }
    if !ctx.hooks.update(c, sb)? {
        sb.error(format_args!("hook declined to update {name}"))?;
        return Ok(Err(Reason::HookDeclined));
    }
    if let Some(wt) = update_worktree
        && let Err(reason) = ctx.hooks.update_worktree(c.new, wt, &ctx.refs, sb.stderr())
    {
        return Ok(Err(Reason::Worktree(reason)));
    }
    if c.is_delete() {
        let mut old = Expected::MustBe(c.old);
        if c.old.is_null() || ctx.kind(&c.old).is_none() {
            old = Expected::Any;
            // git asks whether the name the client sent exists, outside any namespace.
            if ctx.refs.get(name).is_some() {
                sb.warning("allowing deletion of corrupt ref")?;
            } else {
                // Still a delete in the transaction, as in git: its name is locked (and may
                // conflict with another ref's), and the reference-transaction hook is told.
                sb.warning("deleting a non-existent ref")?;
                cmd.did_not_exist = true;
            }
        }
        return Ok(Ok(Some(RefUpdate {
            name: ctx.update_name(cmd),
            change: Change::Delete { old },
        })));
    }
    // git's `is_branch` of the name it queues, which in a namespace is
    // `refs/namespaces/<ns>/refs/heads/…`: no branch there.
    if ctx.namespace.is_empty()
        && name.starts_with(b"refs/heads/")
        && ctx.kind(&c.new) != Some(Kind::Commit)
    {
        let e = RefError::NonCommitToBranch {
            name: c.name.clone(),
            new: c.new,
        };
        sb.error(&e)?;
        return Ok(Err(Reason::Transaction(e.reason())));
    }
    if !cmd.new_shallow().is_empty() && ctx.repo.add_shallow(cmd.new_shallow()).is_err() {
        return Ok(Err(Reason::ShallowError));
    }
    let change = if c.old.is_null() {
        Change::Create { new: c.new }
    } else {
        Change::Update {
            old: Expected::MustBe(c.old),
            new: c.new,
        }
    };
    Ok(Ok(Some(RefUpdate {
        name: ctx.update_name(cmd),
        change,
    })))
}

/// Whether `ancestor` is reachable from `tip` through parents.
pub(super) fn is_ancestor(objects: &impl Find, ancestor: ObjectId, tip: ObjectId) -> bool {
    let mut seen = HashSet::new();
    let mut stack = vec![tip];
    let mut buf = Vec::new();
    while let Some(id) = stack.pop() {
        if id == ancestor {
            return true;
        }
        if !seen.insert(id) {
            continue;
        }
        if let Ok(Some(data)) = objects.try_find(&id, &mut buf) {
            stack.extend(gix_object::CommitRefIter::from_bytes(data.data, id.kind()).parent_ids());
        }
    }
    false
}

#[cfg(test)]
mod tests {
    //! The decision for one ref against a real repository made by git: each of git's built-in
    //! refusals with its reason and message, and the ref update queued when nothing refuses.

    use std::process::Command as Process;

    use super::*;
    use crate::hooks::HookSet;
    use crate::protocol::request::Command;
    use crate::protocol::sideband::Mode;
    use crate::receive::Options;

    use crate::test_git::git;

    /// A bare repository whose `main` has two commits; `config` is applied to it.
    struct Fixture {
        _dir: tempfile::TempDir,
        repo: Repository,
        first: ObjectId,
        second: ObjectId,
        blob: ObjectId,
    }

    fn fixture(config: &[(&str, &str)]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let bare = dir.path().join("srv.git");
        git(
            dir.path(),
            &["init", "-q", "--bare", "-b", "main", "srv.git"],
        );
        for (k, v) in config {
            git(&bare, &["config", k, v]);
        }
        let tree = git(&bare, &["mktree"]);
        let first = git(&bare, &["commit-tree", "-m", "1", &tree]);
        let second = git(&bare, &["commit-tree", "-m", "2", "-p", &first, &tree]);
        git(&bare, &["update-ref", "refs/heads/main", &second]);
        let blob = {
            let out = Process::new("git")
                .args(["hash-object", "-w", "--stdin"])
                .current_dir(&bare)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        let repo = Repository::open(bare.to_str().unwrap(), &Default::default()).unwrap();
        let id = |s: &str| ObjectId::from_hex(s.as_bytes()).unwrap();
        Fixture {
            repo,
            first: id(&first),
            second: id(&second),
            blob: id(&blob),
            _dir: dir,
        }
    }

    /// The decision for `old new name`, and what it wrote to the client (band 2 without
    /// sideband goes to the second sink) and to receive-pack's stderr.
    fn decide_one(
        f: &Fixture,
        old: ObjectId,
        new: ObjectId,
        name: &str,
    ) -> (Result<Option<RefUpdate>, Reason>, bool, String) {
        let set = HookSet::default();
        let options = Options::default();
        let hooks = Hooks::new(&set, None, &f.repo, &[], &options, None);
        let objects = Objects::at(
            &f.repo.objects_dir,
            gix_hash::Kind::Sha1,
            Default::default(),
        )
        .unwrap();
        let ctx = Decide {
            repo: &f.repo,
            namespace: "",
            hooks: &hooks,
            objects: &objects,
            worktrees: f.repo.worktrees(),
            refs: crate::refs::of_repository(&f.repo).snapshot().unwrap(),
            kinds: Default::default(),
            gate: None,
        };
        let mut cmd = Cmd::new(Command {
            old,
            new,
            name: name.into(),
        });
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let decision = {
            let mut sb = Sideband::new(&mut out, &mut err, Mode::None);
            decide(&mut cmd, &ctx, &mut sb).unwrap()
        };
        (decision, cmd.did_not_exist, String::from_utf8(err).unwrap())
    }

    fn zero() -> ObjectId {
        ObjectId::null(gix_hash::Kind::Sha1)
    }

    #[test]
    fn a_fast_forward_is_queued_as_it_was_asked() {
        let f = fixture(&[]);
        let (d, _, msg) = decide_one(&f, zero(), f.first, "refs/heads/topic");
        let u = d.unwrap().unwrap();
        assert_eq!(u.name, "refs/heads/topic");
        assert!(matches!(u.change, Change::Create { new } if new == f.first));
        assert_eq!(msg, "");
    }

    #[test]
    fn funny_refnames_are_refused() {
        let f = fixture(&[]);
        for name in ["refs/heads/a..b", "HEAD", "refs/heads/x.lock", "main"] {
            let (d, _, msg) = decide_one(&f, zero(), f.first, name);
            assert_eq!(d.unwrap_err(), Reason::FunnyRefname, "{name}");
            assert_eq!(
                msg,
                format!("error: refusing to update funny ref '{name}' remotely\n")
            );
        }
    }

    #[test]
    fn a_missing_object_is_a_bad_pack_reported_on_stderr() {
        let f = fixture(&[]);
        let missing = ObjectId::from_hex(b"1111111111111111111111111111111111111111").unwrap();
        let (d, _, msg) = decide_one(&f, zero(), missing, "refs/heads/x");
        assert_eq!(d.unwrap_err(), Reason::BadPack);
        // Not through the muxer: git prints it with error() on its own stderr. Here both
        // sinks are the same stderr, so the line is there exactly once.
        assert_eq!(
            msg,
            format!("error: unpack should have generated {missing}, but I can't find it!\n")
        );
    }

    #[test]
    fn deny_deletes_and_non_fast_forwards() {
        let f = fixture(&[
            ("receive.denyDeletes", "true"),
            ("receive.denyNonFastForwards", "true"),
        ]);
        let (d, _, msg) = decide_one(&f, f.second, zero(), "refs/heads/main");
        assert_eq!(d.unwrap_err(), Reason::DeletionProhibited);
        assert_eq!(msg, "error: denying ref deletion for refs/heads/main\n");
        let (d, _, msg) = decide_one(&f, f.second, f.first, "refs/heads/main");
        assert_eq!(d.unwrap_err(), Reason::NonFastForward);
        assert_eq!(
            msg,
            "error: denying non-fast-forward refs/heads/main (you should pull first)\n"
        );
        // Outside refs/heads/ neither applies.
        let (d, _, _) = decide_one(&f, f.second, f.first, "refs/tags/v1");
        assert!(d.unwrap().is_some());
    }

    #[test]
    fn a_branch_must_point_at_a_commit() {
        let f = fixture(&[]);
        let (d, _, msg) = decide_one(&f, zero(), f.blob, "refs/heads/blob");
        assert_eq!(
            d.unwrap_err(),
            Reason::Transaction("invalid new value provided")
        );
        assert_eq!(
            msg,
            format!(
                "error: trying to write non-commit object {} to branch 'refs/heads/blob'\n",
                f.blob
            )
        );
        // A tag may point at a blob.
        let (d, _, _) = decide_one(&f, zero(), f.blob, "refs/tags/blob");
        assert!(d.unwrap().is_some());
    }

    #[test]
    fn deleting_a_ref_that_does_not_exist_is_queued_as_a_delete_of_any_value() {
        // As git: the name is locked (and may conflict with another ref's as a directory),
        // and the reference-transaction hook is told.
        let f = fixture(&[]);
        let (d, did_not_exist, msg) = decide_one(&f, zero(), zero(), "refs/heads/nothing");
        let update = d.unwrap().unwrap();
        assert_eq!(update.name, "refs/heads/nothing");
        assert!(matches!(
            update.change,
            Change::Delete { old: Expected::Any }
        ));
        assert!(did_not_exist);
        assert_eq!(msg, "warning: deleting a non-existent ref\n");
    }

    #[test]
    fn the_checked_out_branch_of_a_non_bare_repository() {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "-b", "main", "wt"]);
        let wt = dir.path().join("wt");
        git(&wt, &["commit", "-q", "--allow-empty", "-m", "1"]);
        let head = git(&wt, &["rev-parse", "HEAD"]);
        let repo = Repository::open(wt.to_str().unwrap(), &Default::default()).unwrap();
        let id = ObjectId::from_hex(head.as_bytes()).unwrap();
        let f = Fixture {
            repo,
            first: id,
            second: id,
            blob: id,
            _dir: dir,
        };
        let (d, _, msg) = decide_one(&f, id, zero(), "refs/heads/main");
        assert_eq!(d.unwrap_err(), Reason::CurrentBranch);
        assert!(
            msg.starts_with("error: refusing to update checked out branch: refs/heads/main\n"),
            "{msg}"
        );
    }
}
