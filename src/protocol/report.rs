//! report-status and report-status-v2: the per-ref verdicts sent to the client on band 1.

use std::io::{self, Write};

use gix_hash::ObjectId;
use gix_object::bstr::{BStr, BString};

use crate::protocol::pktline;
use crate::protocol::sideband::Sideband;

/// Which report the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No report.
    None,
    /// `report-status`
    V1,
    /// `report-status-v2` (identical to v1 unless a proc-receive hook rewrote refs).
    V2,
}

/// What the proc-receive hook reported for a command it handled: each becomes another `ok`
/// entry with `option` lines in report-status-v2.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rewrite {
    /// `option refname`: the ref really updated.
    pub refname: Option<BString>,
    /// `option old-oid`.
    pub old: Option<ObjectId>,
    /// `option new-oid`.
    pub new: Option<ObjectId>,
    /// `option forced-update`.
    pub forced: bool,
}

/// Why a command was refused: each variant is one of git's `ng <ref> <reason>` texts
/// ([`Reason::as_str`]), named after the check that refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The pack could not be received (`unpacker error`).
    UnpackerError,
    /// A signed push whose certificate's options differ from the pushed ones.
    InconsistentPushOptions,
    /// The connectivity check found objects missing.
    MissingObjects,
    /// The update makes the repository shallow and `receive.shallowUpdate` is off.
    ShallowUpdateNotAllowed,
    /// The ref is hidden (`receive.hideRefs`); `delete` says which of git's two texts.
    HiddenRef {
        /// A deletion (`deny deleting a hidden ref`), else `deny updating a hidden ref`.
        delete: bool,
    },
    /// The pre-receive hook (or an in-process one) refused the push.
    PreReceiveDeclined,
    /// The quarantined objects could not be moved into the repository.
    MigrateFailed,
    /// The pushed name is a symbolic ref whose chain is broken.
    BrokenSymref,
    /// A symbolic ref and its target pushed with different values.
    InconsistentAliasedUpdate,
    /// The proc-receive hook could not be run or its conversation failed.
    ProcReceiveFailed,
    /// The proc-receive hook said nothing about a ref it was given.
    ProcReceiveNoReport,
    /// The proc-receive hook's own `ng` reason (`failed` when it gave none).
    ProcReceive(String),
    /// The ref name is not one receive-pack accepts (`funny refname`).
    FunnyRefname,
    /// The branch is checked out (`receive.denyCurrentBranch`).
    CurrentBranch,
    /// The new value's object is not in the repository after the unpack (`bad pack`).
    BadPack,
    /// `receive.denyDeletes` refused a branch deletion.
    DeletionProhibited,
    /// `receive.denyDeleteCurrent` refused deleting the current branch.
    DeleteCurrent,
    /// The objects of a fast-forward check are not commits (`bad ref`).
    BadRef,
    /// `receive.denyNonFastForwards` refused a rewind.
    NonFastForward,
    /// The update hook (or an in-process one) refused the ref.
    HookDeclined,
    /// The embedder's access check ([`crate::receive::RefAccess`]) refused the ref; its text
    /// (one line, naming the rule that denied it).
    AccessDenied(String),
    /// `receive.denyCurrentBranch=updateInstead` could not update the worktree; git's text.
    Worktree(&'static str),
    /// The new shallow roots could not be recorded.
    ShallowError,
    /// The ref transaction refused this ref; git's `ref_transaction_error_msg` text.
    Transaction(&'static str),
    /// A replicated push's commit point refused the ref, or acknowledged it with too few
    /// copies: the cluster's text (`cluster: …`, saying whether it landed). git has no cluster,
    /// so no text of its own here.
    Gate(String),
    /// Another ref of an atomic push was refused.
    AtomicPushFailure,
    /// The ref transaction of an atomic push failed.
    AtomicTransactionFailed,
    /// The ref transaction failed as a whole.
    FailedToUpdateRefs,
}

impl Reason {
    /// The reason as git reports it after `ng <ref> `.
    pub fn as_str(&self) -> &str {
        match self {
            Reason::UnpackerError => "unpacker error",
            Reason::InconsistentPushOptions => "inconsistent push options",
            Reason::MissingObjects => "missing necessary objects",
            Reason::ShallowUpdateNotAllowed => "shallow update not allowed",
            Reason::HiddenRef { delete: true } => "deny deleting a hidden ref",
            Reason::HiddenRef { delete: false } => "deny updating a hidden ref",
            Reason::PreReceiveDeclined => "pre-receive hook declined",
            Reason::MigrateFailed => "unable to migrate objects to permanent storage",
            Reason::BrokenSymref => "broken symref",
            Reason::InconsistentAliasedUpdate => "inconsistent aliased update",
            Reason::ProcReceiveFailed => "fail to run proc-receive hook",
            Reason::ProcReceiveNoReport => "proc-receive failed to report status",
            Reason::ProcReceive(text) => text,
            Reason::FunnyRefname => "funny refname",
            Reason::CurrentBranch => "branch is currently checked out",
            Reason::BadPack => "bad pack",
            Reason::DeletionProhibited => "deletion prohibited",
            Reason::DeleteCurrent => "deletion of the current branch prohibited",
            Reason::BadRef => "bad ref",
            Reason::NonFastForward => "non-fast-forward",
            Reason::HookDeclined => "hook declined",
            Reason::AccessDenied(text) | Reason::Gate(text) => text,
            Reason::Worktree(text) | Reason::Transaction(text) => text,
            Reason::ShallowError => "shallow error",
            Reason::AtomicPushFailure => "atomic push failure",
            Reason::AtomicTransactionFailed => "atomic transaction failed",
            Reason::FailedToUpdateRefs => "failed to update refs",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened to one command of a push: the line report-status gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// The ref was created, updated or deleted (`ok`).
    Updated,
    /// A deletion of a ref that did not exist: reported `ok`, and no post hook sees it.
    AlreadyAbsent,
    /// A symbolic ref pushed together with the ref it points to, updated through that one
    /// (`ok`).
    Aliased,
    /// Handled by the proc-receive hook (`ok`), with what it reported it did (report-status-v2's
    /// `option` lines).
    ProcReceive(Vec<Rewrite>),
    /// Refused (`ng <ref> <reason>`).
    Rejected(Reason),
}

impl Status {
    /// Whether the client is told `ok`.
    pub fn is_ok(&self) -> bool {
        !matches!(self, Status::Rejected(_))
    }

    /// The `ng` reason, `None` for `ok`.
    pub fn reason(&self) -> Option<&Reason> {
        match self {
            Status::Rejected(r) => Some(r),
            _ => None,
        }
    }
}

/// One command's line in the report.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// The ref name as the client sent it.
    pub name: &'a BStr,
    /// What happened to it.
    pub status: &'a Status,
}

/// Build the report: `unpack ok|<error>`, then `ok <ref>` or `ng <ref> <reason>` per command in
/// the client's order (with report-status-v2, proc-receive's rewrites as `option` lines), then
/// a flush.
pub fn build<'a>(
    kind: Kind,
    unpack: Option<&str>,
    entries: impl Iterator<Item = Entry<'a>>,
) -> io::Result<Vec<u8>> {
    // `ok <name>` in a pkt-line is about 40 bytes for a usual name: grown once or not at all.
    let mut buf = Vec::with_capacity(32 + entries.size_hint().0 * 40);
    let mut line = Vec::new();
    let mut put = |buf: &mut Vec<u8>, parts: &[&[u8]]| {
        line.clear();
        for p in parts {
            line.extend_from_slice(p);
        }
        line.push(b'\n');
        pktline::write_data(buf, &line)
    };
    put(&mut buf, &[b"unpack ", unpack.unwrap_or("ok").as_bytes()])?;
    for e in entries {
        let rewrites = match e.status {
            Status::Rejected(reason) => {
                put(
                    &mut buf,
                    &[b"ng ", e.name, b" ", reason.as_str().as_bytes()],
                )?;
                continue;
            }
            Status::ProcReceive(rewrites) => rewrites.as_slice(),
            _ => &[],
        };
        put(&mut buf, &[b"ok ", e.name])?;
        if kind != Kind::V2 {
            continue;
        }
        for (i, r) in rewrites.iter().enumerate() {
            if i > 0 {
                put(&mut buf, &[b"ok ", e.name])?;
            }
            if let Some(name) = &r.refname {
                put(&mut buf, &[b"option refname ", name])?;
            }
            if let Some(old) = &r.old {
                put(&mut buf, &[b"option old-oid ", old.to_string().as_bytes()])?;
            }
            if let Some(new) = &r.new {
                put(&mut buf, &[b"option new-oid ", new.to_string().as_bytes()])?;
            }
            if r.forced {
                put(&mut buf, &[b"option forced-update"])?;
            }
        }
    }
    pktline::write_flush(&mut buf)?;
    Ok(buf)
}

/// Send a built report over the muxer's band 1.
pub fn send<W: Write, E: Write>(sideband: &mut Sideband<W, E>, report: &[u8]) -> io::Result<()> {
    sideband.data(report)?;
    sideband.flush()
}
