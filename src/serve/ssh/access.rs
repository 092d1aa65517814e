//! Every access decision the ssh transport makes goes through this file: [`authorize`] for a
//! repository as a whole (read, write, create) and [`RefGuard`] for each ref a push updates.
//!
//! Today they allow what the HTTP side allows when no access rules are configured: anyone with
//! a key in the keydir may read every repository and push to every repository, and a push to a
//! missing `<name>.git` creates it when auto-init is on (the creation itself is decided by
//! [`Server::repository`], as for HTTP). Access rules (`--access FILE`) plug in here: see
//! `authorize` and `RefGuard::update`.

use super::super::Server;
use crate::hooks::{Command, InProcess, Verdict};

/// What a user wants to do with a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// Fetch or clone (`git-upload-pack`).
    Read,
    /// Push (`git-receive-pack`) to an existing repository.
    Write,
    /// Push to a repository that does not exist yet (gitolite's `C`).
    Create,
}

/// Why access was refused; the text is shown to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Denied(pub(super) String);

/// May `user` do `op` on `repo` (the name as the client gave it, without the leading `/`)?
///
/// Access rules plug in here: evaluate the rules for (`user`, `repo`, `R` / `W` / `C`) and
/// return `Denied` with the rules' message. Creation also still needs auto-init (or a rule
/// that allows `C`, once rules exist), which [`Server::repository`] checks.
pub(super) fn authorize(_server: &Server, _user: &str, _repo: &str, op: Op) -> Result<(), Denied> {
    match op {
        // As HTTP without rules: fetching needs nothing, pushing needs an authenticated user,
        // which every ssh connection has (the keydir decided who it is).
        Op::Read | Op::Write | Op::Create => Ok(()),
    }
}

/// The per-ref check of a push, as an in-process `update` hook: a refusal reaches the client as
/// `ng <ref> hook declined` with the message on its stderr, and the quarantine goes away as
/// for any declined ref.
pub(super) struct RefGuard {
    pub(super) user: String,
    pub(super) repo: String,
}

/// What a push does to one ref, for the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RefOp {
    Create,
    Update,
    Delete,
}

impl RefGuard {
    /// May the user do `op` to `refname`? Access rules plug in here: gitolite's per-ref
    /// permissions (`RW` for create/update, `RW+` for delete and rewind, `-` for deny) evaluated
    /// for (`self.user`, `self.repo`, permission, `refname`). A rewind (non-fast-forward)
    /// needs the objects: decide it in `update` with the repository if rules distinguish it.
    pub(super) fn check(&self, refname: &str, op: RefOp) -> Result<(), Denied> {
        let _ = (&self.user, &self.repo, refname, op);
        Ok(())
    }
}

impl InProcess for RefGuard {
    fn update(&self, command: &Command) -> Verdict {
        let op = if command.is_delete() {
            RefOp::Delete
        } else if command.is_create() {
            RefOp::Create
        } else {
            RefOp::Update
        };
        match self.check(&String::from_utf8_lossy(&command.name), op) {
            Ok(()) => Verdict::Accept,
            Err(Denied(msg)) => Verdict::Refuse(msg),
        }
    }
}
