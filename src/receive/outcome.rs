//! What one push did: [`Outcome`], returned by [`crate::receive::run`], and [`Fatal`], what ends
//! a session without a report.
//!
//! The outcome is what the client was told (report-status is rendered from the same statuses)
//! and what a server logs and counts; embedders and in-process hooks see the same types.

use std::io;

use crate::hooks;
use crate::protocol::report::Status;
use crate::protocol::request::{self, Command};

/// How the pack of a push went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Unpack {
    /// No pack was expected (only deletions, or no commands at all).
    #[default]
    NotNeeded,
    /// Received, indexed and checked (`unpack ok`).
    Ok,
    /// Refused (`unpack <reason>`); every command is refused with it.
    Failed(String),
}

/// A push's result in one word, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushResult {
    /// Every command was accepted (or there were none).
    Ok,
    /// Some commands were accepted and some refused.
    Partial,
    /// Every command was refused.
    Rejected,
    /// The pack could not be received: nothing was updated.
    Error,
}

impl PushResult {
    /// `ok`, `partial`, `rejected` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            PushResult::Ok => "ok",
            PushResult::Partial => "partial",
            PushResult::Rejected => "rejected",
            PushResult::Error => "error",
        }
    }
}

/// What one receive-pack session did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Whether the session read a request at all (not for an advertisement alone, or a client
    /// that sent only a flush).
    pub requested: bool,
    /// The pack.
    pub unpack: Unpack,
    /// Each command in the client's order, as it sent it.
    pub commands: Vec<Command>,
    /// What the client was told about each command, in the same order (report-status is
    /// rendered from these). Two vectors rather than one of pairs: the commands move here from
    /// the session without a copy, which a push of a million refs notices.
    pub statuses: Vec<Status>,
}

impl Outcome {
    /// The push's result in one word.
    pub fn result(&self) -> PushResult {
        if matches!(self.unpack, Unpack::Failed(_)) {
            return PushResult::Error;
        }
        let ok = self.updated();
        match (ok, self.refused()) {
            (_, 0) => PushResult::Ok,
            (0, _) => PushResult::Rejected,
            _ => PushResult::Partial,
        }
    }

    /// Each command with what happened to it, in the client's order.
    pub fn iter(&self) -> impl Iterator<Item = (&Command, &Status)> {
        self.commands.iter().zip(&self.statuses)
    }

    /// How many commands the client was told `ok` for.
    pub fn updated(&self) -> usize {
        self.statuses.iter().filter(|s| s.is_ok()).count()
    }

    /// How many commands were refused (`ng`).
    pub fn refused(&self) -> usize {
        self.statuses.len() - self.updated()
    }
}

impl Fatal {
    /// What receive-pack prints on its stderr before it exits with 128: git's `error: …` line
    /// for a configuration error that has one, then `fatal: <message>`.
    pub fn die_lines(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Fatal::Repository(crate::repo::Error::Config(c)) = self
            && let Some(line) = c.preamble()
        {
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        out.extend(crate::protocol::sideband::die_line(self));
        out
    }
}

/// What ends a session without a report: git's receive-pack `die()`s in these cases, so the
/// client sees `fatal: <message>` on stderr and exit code 128.
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    /// The repository cannot be served.
    #[error(transparent)]
    Repository(#[from] crate::repo::Error),
    /// The request is malformed or over a limit.
    #[error(transparent)]
    Request(#[from] request::Error),
    /// The refs could not be read.
    #[error("unable to read refs: {0}")]
    Refs(crate::refs::SnapshotError),
    /// The object database could not be opened.
    #[error("unable to open object database: {0}")]
    Objects(io::Error),
    /// The repository's list of objects not known to be complete could not be read.
    #[error("unable to read the list of incomplete objects: {0}")]
    Incomplete(#[from] crate::objects::incomplete::Error),
    /// Concurrent pushes kept listing objects the connectivity check had taken as complete
    /// ([`crate::objects::settle`]'s passes ran out).
    #[error("{0}: push again")]
    IncompleteChanging(#[from] crate::objects::settle::Unsettled),
    /// Writing to the client failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The hook configuration is unusable.
    #[error(transparent)]
    Hooks(#[from] hooks::Error),
    /// The reference-transaction hook refused in the `preparing` or `prepared` phase.
    #[error("in '{0}' phase, update aborted by the reference-transaction hook")]
    TransactionHook(&'static str),
}
