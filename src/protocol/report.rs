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

/// Write the report to `out`: `unpack ok|<error>`, then `ok <ref>` or `ng <ref> <reason>` per
/// command in the client's order (with report-status-v2, proc-receive's rewrites as `option`
/// lines), then a flush. Written line by line: git gathers the whole report first (28 bytes a
/// ref for `refs/heads/b/0000000`, 28 MB for a million), which only its packets need, and
/// [`Sideband::band1`] cuts the same packets from the stream.
pub fn write<'a>(
    out: &mut impl Write,
    kind: Kind,
    unpack: Option<&str>,
    entries: impl Iterator<Item = Entry<'a>>,
) -> io::Result<()> {
    let mut line = Vec::new();
    let mut put = |out: &mut _, parts: &[&[u8]]| {
        line.clear();
        for p in parts {
            line.extend_from_slice(p);
        }
        line.push(b'\n');
        pktline::write_data(out, &line)
    };
    put(out, &[b"unpack ", unpack.unwrap_or("ok").as_bytes()])?;
    for e in entries {
        let rewrites = match e.status {
            Status::Rejected(reason) => {
                put(out, &[b"ng ", e.name, b" ", reason.as_str().as_bytes()])?;
                continue;
            }
            Status::ProcReceive(rewrites) => rewrites.as_slice(),
            _ => &[],
        };
        put(out, &[b"ok ", e.name])?;
        if kind != Kind::V2 {
            continue;
        }
        for (i, r) in rewrites.iter().enumerate() {
            if i > 0 {
                put(out, &[b"ok ", e.name])?;
            }
            if let Some(name) = &r.refname {
                put(out, &[b"option refname ", name])?;
            }
            if let Some(old) = &r.old {
                put(out, &[b"option old-oid ", old.to_string().as_bytes()])?;
            }
            if let Some(new) = &r.new {
                put(out, &[b"option new-oid ", new.to_string().as_bytes()])?;
            }
            if r.forced {
                put(out, &[b"option forced-update"])?;
            }
        }
    }
    pktline::write_flush(out)
}

/// Send the report over the muxer's band 1 ([`write`]), and flush.
pub fn send<'a, W: Write, E: Write>(
    sideband: &mut Sideband<W, E>,
    kind: Kind,
    unpack: Option<&str>,
    entries: impl Iterator<Item = Entry<'a>>,
) -> io::Result<()> {
    let mut band = sideband.band1();
    write(&mut band, kind, unpack, entries)?;
    band.finish()?;
    sideband.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::sideband::{BAND_64K_DATA_MAX, Mode};

    fn report(kind: Kind, entries: &[(&str, Status)]) -> Vec<u8> {
        let mut out = Vec::new();
        let entries = entries.iter().map(|(name, status)| Entry {
            name: (*name).into(),
            status,
        });
        write(&mut out, kind, None, entries).unwrap();
        out
    }

    #[test]
    fn lines_as_git_writes_them() {
        let rewrite = Rewrite {
            refname: Some("refs/heads/topic".into()),
            old: None,
            new: None,
            forced: true,
        };
        let entries = [
            ("refs/heads/main", Status::Updated),
            ("refs/heads/bad", Status::Rejected(Reason::NonFastForward)),
            ("refs/for/main", Status::ProcReceive(vec![rewrite.clone(), rewrite])),
        ];
        let v1 = "000eunpack ok\n0017ok refs/heads/main\n0027ng refs/heads/bad non-fast-forward\n\
                  0015ok refs/for/main\n0000";
        assert_eq!(String::from_utf8(report(Kind::V1, &entries)).unwrap(), v1);
        let v2 = "000eunpack ok\n0017ok refs/heads/main\n0027ng refs/heads/bad non-fast-forward\n\
                  0015ok refs/for/main\n0024option refname refs/heads/topic\n\
                  0019option forced-update\n0015ok refs/for/main\n\
                  0024option refname refs/heads/topic\n0019option forced-update\n0000";
        assert_eq!(String::from_utf8(report(Kind::V2, &entries)).unwrap(), v2);
    }

    /// Sent line by line, a report longer than one packet is cut into the packets git cuts its
    /// whole report into.
    #[test]
    fn a_long_report_is_sent_in_gits_packets() {
        let names: Vec<String> = (0..10_000).map(|i| format!("refs/heads/b/{i:07}")).collect();
        let entries: Vec<(&str, Status)> =
            names.iter().map(|n| (n.as_str(), Status::Updated)).collect();
        let whole = report(Kind::V2, &entries);
        assert!(whole.len() > 4 * BAND_64K_DATA_MAX);
        let expected = crate::protocol::sideband::gits_band1_packets(&whole);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut sb = Sideband::new(&mut out, &mut err, Mode::Band64k);
        let entries = entries.iter().map(|(name, status)| Entry {
            name: (*name).into(),
            status,
        });
        send(&mut sb, Kind::V2, None, entries).unwrap();
        assert!(out == expected);
        assert!(err.is_empty());
    }
}
