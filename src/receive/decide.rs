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
use crate::protocol::report::Reason;
use crate::protocol::sideband::Sideband;
use crate::refs::{RefError, RefUpdate, Refs};
use crate::repo::config::DenyAction;
use crate::repo::{Repository, policy};

/// What the per-ref decision needs to know.
pub(super) struct Decide<'a> {
    pub(super) repo: &'a Repository,
    /// `GIT_NAMESPACE`'s prefix, or empty.
    pub(super) namespace: &'a str,
    pub(super) hooks: &'a Hooks<'a>,
    pub(super) objects: &'a gix_odb::Handle,
    pub(super) worktrees: Vec<crate::repo::Worktree>,
    /// The refs as the update stage starts.
    pub(super) refs: Refs,
    /// Object kinds looked up so far: many refs of one push often point at one object.
    pub(super) kinds: std::cell::RefCell<std::collections::HashMap<ObjectId, Option<Kind>>>,
}

impl Decide<'_> {
    /// The ref a command really updates: its symref target, or its name in the namespace.
    pub(super) fn full_name(&self, cmd: &Cmd) -> BString {
        match &cmd.target {
            Some(target) => target.clone(),
            None => [self.namespace.as_bytes(), cmd.command.name.as_slice()]
                .concat()
                .into(),
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
/// the reason it is refused, with git's messages on the way.
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
        let mut skip_old_check = false;
        if c.old.is_null() || ctx.kind(&c.old).is_none() {
            skip_old_check = true;
            if ctx.refs.get(&ctx.full_name(cmd)).is_some() {
                sb.warning("allowing deletion of corrupt ref")?;
            } else {
                sb.warning("deleting a non-existent ref")?;
                cmd.did_not_exist = true;
                return Ok(Ok(None));
            }
        }
        return Ok(Ok(Some(RefUpdate {
            name: ctx.full_name(cmd),
            old: c.old,
            new: c.new,
            skip_old_check,
        })));
    }
    if name.starts_with(b"refs/heads/") && ctx.kind(&c.new) != Some(Kind::Commit) {
        let e = RefError::NonCommitToBranch {
            name: c.name.clone(),
            new: c.new,
        };
        sb.error(&e)?;
        return Ok(Err(Reason::Transaction(e.reason())));
    }
    if !cmd.new_shallow.is_empty() && ctx.repo.add_shallow(&cmd.new_shallow).is_err() {
        return Ok(Err(Reason::ShallowError));
    }
    Ok(Ok(Some(RefUpdate {
        name: ctx.full_name(cmd),
        old: c.old,
        new: c.new,
        skip_old_check: false,
    })))
}

/// Whether `ancestor` is reachable from `tip` through parents.
fn is_ancestor(objects: &gix_odb::Handle, ancestor: ObjectId, tip: ObjectId) -> bool {
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
            stack.extend(
                gix_object::CommitRefIter::from_bytes(data.data, gix_hash::Kind::Sha1).parent_ids(),
            );
        }
    }
    false
}
