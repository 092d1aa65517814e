//! One command on its way through the phases: the client's [`Command`] and what the phases
//! have found out about it so far, until the session's [`Outcome`](super::Outcome) says what happened to it.

use gix_hash::ObjectId;
use gix_object::bstr::BString;

use crate::hooks::proc_receive::Proc;
use crate::protocol::report::{Reason, Rewrite, Status};
use crate::protocol::request::Command;

/// One command on its way through the pipeline (git's `struct command`).
pub(crate) struct Cmd {
    pub(crate) command: Command,
    /// Why it was refused, once a phase refuses it.
    pub(crate) error: Option<Reason>,
    /// A deletion of a ref that did not exist.
    pub(crate) did_not_exist: bool,
    /// Handled through another command (a symref pushed together with its target).
    pub(crate) skip_update: bool,
    /// The ref the update really goes to, when the pushed name is a symbolic ref.
    pub(crate) target: Option<BString>,
    /// Whether the proc-receive hook handles this command.
    pub(crate) proc: Proc,
    /// What the proc-receive hook reported it did.
    pub(crate) rewrites: Vec<Rewrite>,
    /// The client's shallow commits this update makes shallow roots of the repository
    /// (`receive.shallowUpdate`).
    pub(crate) new_shallow: Vec<ObjectId>,
}

impl Cmd {
    pub(crate) fn new(command: Command) -> Self {
        Cmd {
            command,
            error: None,
            did_not_exist: false,
            skip_update: false,
            target: None,
            proc: Proc::No,
            rewrites: Vec::new(),
            new_shallow: Vec::new(),
        }
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
        match &self.error {
            Some(reason) => Status::Rejected(reason.clone()),
            None if self.proc == Proc::Returned => Status::ProcReceive(self.rewrites.clone()),
            None if self.skip_update => Status::Aliased,
            None if self.did_not_exist => Status::AlreadyAbsent,
            None => Status::Updated,
        }
    }
}

/// Refuse every command not refused yet.
pub(crate) fn refuse_pending(cmds: &mut [Cmd], reason: Reason) {
    for c in cmds.iter_mut().filter(|c| c.pending()) {
        c.error = Some(reason.clone());
    }
}
