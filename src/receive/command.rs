//! One command on its way through the phases: the client's [`Command`] and what the phases
//! have found out about it so far, until the session's [`Outcome`](super::Outcome) says what happened to it.

use gix_hash::ObjectId;
use gix_object::bstr::BString;

use crate::hooks::proc_receive::Proc;
use crate::protocol::report::{Reason, Rewrite, Status};
use crate::protocol::request::Command;

/// One command on its way through the pipeline (git's `struct command`). A push of a million
/// refs holds a million of these: what only some commands need is in [`Rare`], boxed, so the
/// common command carries one pointer for it (the per-command memory of issue 24).
pub(crate) struct Cmd {
    pub(crate) command: Command,
    /// Why it was refused, once a phase refuses it (boxed: most commands of a large push are
    /// never refused, and a reason is four times the size of the pointer).
    error: Option<Box<Reason>>,
    /// A deletion of a ref that did not exist.
    pub(crate) did_not_exist: bool,
    /// Handled through another command (a symref pushed together with its target).
    pub(crate) skip_update: bool,
    /// Whether the proc-receive hook handles this command.
    pub(crate) proc: Proc,
    rare: Option<Box<Rare>>,
}

/// What few commands of a push have.
#[derive(Default)]
struct Rare {
    /// The ref the update really goes to, when the pushed name is a symbolic ref.
    target: Option<BString>,
    /// What the proc-receive hook reported it did.
    rewrites: Vec<Rewrite>,
    /// The client's shallow commits this update makes shallow roots of the repository
    /// (`receive.shallowUpdate`).
    new_shallow: Vec<ObjectId>,
}

impl From<Command> for Cmd {
    fn from(command: Command) -> Self {
        Cmd::new(command)
    }
}

impl Cmd {
    pub(crate) fn new(command: Command) -> Self {
        Cmd {
            command,
            error: None,
            did_not_exist: false,
            skip_update: false,
            proc: Proc::No,
            rare: None,
        }
    }

    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// The ref the update really goes to, when the pushed name is a symbolic ref.
    pub(crate) fn target(&self) -> Option<&BString> {
        self.rare.as_ref()?.target.as_ref()
    }

    /// Set the ref the update really goes to.
    pub(crate) fn set_target(&mut self, target: BString) {
        self.rare_mut().target = Some(target);
    }

    /// What the proc-receive hook reported it did.
    pub(crate) fn rewrites(&self) -> &[Rewrite] {
        self.rare.as_ref().map_or(&[], |r| &r.rewrites)
    }

    /// Take what the proc-receive hook reported (for the conversation, which gives it back
    /// through [`Cmd::set_rewrites`]).
    pub(crate) fn take_rewrites(&mut self) -> Vec<Rewrite> {
        self.rare
            .as_mut()
            .map(|r| std::mem::take(&mut r.rewrites))
            .unwrap_or_default()
    }

    /// Set what the proc-receive hook reported.
    pub(crate) fn set_rewrites(&mut self, rewrites: Vec<Rewrite>) {
        if !rewrites.is_empty() || self.rare.is_some() {
            self.rare_mut().rewrites = rewrites;
        }
    }

    /// The client's shallow commits this update makes shallow roots of the repository.
    pub(crate) fn new_shallow(&self) -> &[ObjectId] {
        self.rare.as_ref().map_or(&[], |r| &r.new_shallow)
    }

    /// Set the new shallow roots.
    pub(crate) fn set_new_shallow(&mut self, roots: Vec<ObjectId>) {
        self.rare_mut().new_shallow = roots;
    }

    /// Why it was refused, if it was.
    pub(crate) fn error(&self) -> Option<&Reason> {
        self.error.as_deref()
    }

    /// Refused, for `reason` (replacing an earlier reason, if any).
    pub(crate) fn refuse(&mut self, reason: Reason) {
        self.error = Some(Box::new(reason));
    }

    /// Set or clear the reason it is refused.
    pub(crate) fn set_error(&mut self, reason: Option<Reason>) {
        self.error = reason.map(Box::new);
    }

    /// Take the reason it is refused, leaving it pending.
    pub(crate) fn take_error(&mut self) -> Option<Reason> {
        self.error.take().map(|r| *r)
    }

    /// No error so far (reported `ok` if it stays so).
    pub(crate) fn pending(&self) -> bool {
        self.error.is_none()
    }

    /// Still to be decided and written (git's `should_process_cmd`).
    pub(crate) fn should_process(&self) -> bool {
        self.error.is_none() && !self.skip_update
    }

    /// Still to be decided and written by berth itself (not by the proc-receive hook).
    pub(crate) fn for_berth(&self) -> bool {
        self.should_process() && self.proc == Proc::No
    }

    /// Updated, so the post hooks see it.
    pub(crate) fn updated(&self) -> bool {
        self.pending() && !self.did_not_exist
    }

    /// What the client is told about it.
    pub(crate) fn status(&self) -> Status {
        match self.error() {
            Some(reason) => Status::Rejected(reason.clone()),
            None if self.proc == Proc::Returned => Status::ProcReceive(self.rewrites().to_vec()),
            None if self.skip_update => Status::Aliased,
            None if self.did_not_exist => Status::AlreadyAbsent,
            None => Status::Updated,
        }
    }
}

/// Refuse every command not refused yet.
pub(crate) fn refuse_pending(cmds: &mut [Cmd], reason: Reason) {
    for c in cmds.iter_mut().filter(|c| c.pending()) {
        c.refuse(reason.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A push of a million refs holds a million of these (issue 24: memory per command).
    #[test]
    fn a_command_in_flight_is_small() {
        eprintln!(
            "Cmd {} Command {} Reason {} Option<Reason> {} RefUpdate {} Status {}",
            std::mem::size_of::<Cmd>(),
            std::mem::size_of::<Command>(),
            std::mem::size_of::<Reason>(),
            std::mem::size_of::<Option<Reason>>(),
            std::mem::size_of::<crate::refs::RefUpdate>(),
            std::mem::size_of::<Status>(),
        );
        assert!(std::mem::size_of::<Cmd>() <= 120);
    }
}
