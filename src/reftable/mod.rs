//! # reftable — git's reftable ref storage, read and written bit for bit as git does
//!
//! A reftable repository keeps its refs and reflogs in `$GIT_DIR/reftable/`: a stack of
//! immutable `.ref` tables listed oldest first in `tables.list`. Each table is a sequence of
//! blocks (ref blocks with prefix-compressed records and restart points, an optional ref index,
//! obj blocks mapping object ids to ref blocks, zlib-deflated log blocks and their index) closed
//! by a footer with a CRC-32. A transaction appends one table under `tables.list.lock`; the
//! stack is kept short by geometric auto-compaction. The format is git's
//! `Documentation/technical/reftable.adoc`; the layout rules (block size, padding, when an index
//! or obj section is written, restart intervals, file naming) follow git's `reftable/` code so
//! that a table berth writes is byte-identical to the one git writes for the same records.
//!
//! * [`record`]: varints, prefix-compressed keys, record encodings.
//! * [`block`]: block writer and reader.
//! * [`table`]: [`TableWriter`] (one table, written a block at a time into memory or a file) and
//!   [`Table`] (a parsed table, its file mapped).
//! * [`stack`]: [`Stack`], the `tables.list` stack: merged reads, [`Stack::add`], compaction.
//!
//! Only SHA-1 tables (format version 1) are supported; a version 2 (SHA-256) table is reported
//! as unsupported. Parsing never panics on corrupt input: every read is bounds-checked and a
//! corrupt table gives [`Error::Corrupt`] naming the table and what is wrong.

use std::path::PathBuf;

use gix_hash::ObjectId;
use gix_object::bstr::{BStr, BString};

pub mod block;
pub mod record;
pub mod stack;
pub mod table;

pub use stack::Stack;
pub use table::{Table, TableWriter, WriteOptions};

/// Errors of the reftable module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation failed.
    #[error("reftable: {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A table's bytes do not follow the format.
    #[error("reftable: corrupt table {table}: {reason}")]
    Corrupt {
        /// The table's file name.
        table: String,
        /// What is wrong.
        reason: String,
    },
    /// `tables.list` names a table that cannot be parsed, or is itself malformed.
    #[error("reftable: corrupt stack {dir}: {reason}")]
    CorruptStack {
        /// The reftable directory.
        dir: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The table uses a format this implementation does not handle.
    #[error("reftable: unsupported table {table}: {reason}")]
    Unsupported {
        /// The table's file name.
        table: String,
        /// What is unsupported.
        reason: String,
    },
    /// A lock (`tables.list.lock` or a table's `.lock`) is held by someone else.
    #[error("reftable: unable to lock {0}: held by another process")]
    Locked(PathBuf),
    /// The stack changed under us (another writer committed or compacted).
    #[error("reftable: the stack in {0} changed concurrently")]
    Outdated(PathBuf),
    /// The caller passed records the writer refuses (unsorted, duplicate, out of range).
    #[error("reftable: invalid record: {0}")]
    InvalidRecord(String),
    /// A record does not fit in one block (git's `REFTABLE_ENTRY_TOO_BIG_ERROR`).
    #[error("reftable: entry too large: {0}")]
    EntryTooLarge(String),
}

impl Error {
    /// git's `reftable_error_str` for the class of this error, the words git puts in its
    /// `reftable: transaction failure: …` message.
    pub fn git_str(&self) -> &'static str {
        match self {
            Error::Io { .. } => "I/O error",
            Error::Corrupt { .. } | Error::CorruptStack { .. } | Error::Unsupported { .. } => {
                "corrupt reftable file"
            }
            Error::Locked(_) => "data is locked",
            Error::Outdated(_) => "data concurrently modified",
            Error::InvalidRecord(_) => "misuse of the reftable API",
            Error::EntryTooLarge(_) => "entry too large",
        }
    }
}

/// Result of the reftable module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The value of a ref record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefValue {
    /// A tombstone: the ref is deleted, hiding it in older tables.
    Deletion,
    /// The ref points at an object.
    Val1(ObjectId),
    /// The ref points at an annotated tag (first) whose peeled target is the second id.
    Val2(ObjectId, ObjectId),
    /// A symbolic ref naming its target.
    Symref(BString),
}

impl RefValue {
    /// The value type stored in the record key (`0..=3`).
    pub fn value_type(&self) -> u8 {
        match self {
            RefValue::Deletion => record::REF_DELETION,
            RefValue::Val1(_) => record::REF_VAL1,
            RefValue::Val2(..) => record::REF_VAL2,
            RefValue::Symref(_) => record::REF_SYMREF,
        }
    }
}

/// One ref record; its name borrowed (`'n`: a transaction's records name their updates' refs
/// without copying them) or owned (`'static`: what is read from a table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefRecord<'n> {
    /// The full ref name, e.g. `refs/heads/main` or `HEAD`.
    pub name: std::borrow::Cow<'n, BStr>,
    /// The update index of the transaction that last wrote it.
    pub update_index: u64,
    /// Its value.
    pub value: RefValue,
}

/// One reflog entry's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogUpdate {
    /// The previous value (null for a creation).
    pub old: ObjectId,
    /// The new value (null for a deletion).
    pub new: ObjectId,
    /// Committer name.
    pub name: BString,
    /// Committer email, without angle brackets.
    pub email: BString,
    /// Seconds since the epoch.
    pub time: u64,
    /// Time zone offset as git writes it: `+0130` is `130`, `-0700` is `-700`.
    pub tz_offset: i16,
    /// The message; git stores it with exactly one trailing newline.
    pub message: BString,
}

/// The value of a log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogValue {
    /// A tombstone for the entry with the same ref name and update index in older tables.
    Deletion,
    /// A reflog entry.
    Update(LogUpdate),
}

/// One log record, keyed by ref name and (descending) update index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// The ref name.
    pub refname: BString,
    /// The update index of the transaction that wrote the entry.
    pub update_index: u64,
    /// The entry, or a tombstone.
    pub value: LogValue,
}

impl LogRecord {
    /// The record's key in log blocks: `refname '\0' be64(!update_index)`.
    pub fn key(&self) -> Vec<u8> {
        record::log_key(&self.refname, self.update_index)
    }
}
