//! A transaction's vocabulary, shared by its steps ([`super::prepare`], [`super::commit`]) and
//! the backends' halves of them (`loose`, `packed`, `reftable`): its options, the states its
//! observer is told, the indexes of its batch, and a failed step with why, in git's words.
//! It imports no backend, so that the backends need not import the steps that call them.

use gix_object::bstr::BString;

use crate::refs::{LockError, PackedReadError, PackedWriteError, RefError, RefResult, Refs};

/// Whether one failed ref fails the whole transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Atomicity {
    /// Any failure fails all refs, and nothing is written (`git push --atomic`).
    AllOrNothing,
    /// Each ref may fail on its own, with its own error; the others are written.
    PerRef,
}

/// What a transaction needs besides its updates.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    /// Whether one failed ref fails them all.
    pub atomicity: Atomicity,
    /// The refs as read at the start of the push; updates are checked against them first.
    pub current: &'a Refs,
    /// The reflog identity.
    pub committer: &'a gix_actor::Signature,
    /// The object database, to peel tags for `packed-refs` and reftable records.
    pub objects: &'a gix_odb::Handle,
}

impl Options<'_> {
    pub(in crate::refs) fn atomic(&self) -> bool {
        self.atomicity == Atomicity::AllOrNothing
    }
}

/// The states of a ref transaction, as git's `reference-transaction` hook sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionState {
    /// Before any lock is taken.
    Preparing,
    /// Every lock is held; nothing is written yet.
    Prepared,
    /// Written.
    Committed,
    /// Given up.
    Aborted,
}

impl TransactionState {
    /// The hook's argument.
    pub fn name(self) -> &'static str {
        match self {
            TransactionState::Preparing => "preparing",
            TransactionState::Prepared => "prepared",
            TransactionState::Committed => "committed",
            TransactionState::Aborted => "aborted",
        }
    }
}

/// Why a transaction could not be prepared, in git's words. Nothing was written, and no lock is
/// left behind.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// Two updates of the batch name the same ref (git's `ref_update_reject_duplicates`).
    #[error("multiple updates for ref '{name}' not allowed")]
    Duplicate {
        /// The ref.
        name: BString,
    },
    /// A ref of an atomic transaction failed its check.
    #[error(transparent)]
    Ref(#[from] RefError),
    /// The observer (git's `reference-transaction` hook) refused in this state.
    #[error("in '{}' phase, update aborted by the reference-transaction hook", .0.name())]
    HookAborted(TransactionState),
    /// `packed-refs.lock` could not be taken.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// `packed-refs` could not be read.
    #[error(transparent)]
    Packed(#[from] PackedReadError),
    /// `tables.list.lock` is held by someone else.
    #[error("cannot lock references")]
    ReftableLocked,
    /// The reftable stack could not be read or locked.
    #[error(transparent)]
    Reftable(#[from] crate::reftable::Error),
    /// More updates than one transaction takes (its batch counts them in 32 bits).
    #[error("a ref transaction of {0} updates is more than one can take ({max}); split it", max = u32::MAX)]
    TooLarge(usize),
}

/// Why a prepared transaction could not be written, in git's words. Refs written before the
/// failure may stay written (git's files backend is not atomic across files either), except
/// where a variant says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// A ref of an atomic transaction lost to a concurrent writer after the `packed-refs`
    /// rewrite; the previous `packed-refs` was put back.
    #[error(transparent)]
    Ref(#[from] RefError),
    /// A ref's lock could not be renamed over it.
    #[error("couldn't set '{name}': {reason}")]
    SetRef {
        /// The ref.
        name: BString,
        /// `strerror` of the failure.
        reason: String,
    },
    /// A deleted ref's loose file could not be removed.
    #[error("unable to remove '{name}': {reason}")]
    RemoveRef {
        /// The ref.
        name: BString,
        /// `strerror` of the failure.
        reason: String,
    },
    /// A directory refs were renamed into (or removed from) could not be synced: the refs are
    /// written, but may not survive a power loss (only with directories synced, a cluster's
    /// `--cluster-durability synced`).
    #[error("{reason}")]
    SyncDir {
        /// `strerror` of the failure (`fsync error on '<dir>': …`).
        reason: String,
    },
    /// `packed-refs` could not be read under its lock.
    #[error(transparent)]
    Packed(#[from] PackedReadError),
    /// `packed-refs` could not be rewritten.
    #[error(transparent)]
    WritePacked(#[from] PackedWriteError),
    /// The reftable table could not be written or added to the stack.
    #[error("reftable: transaction failure: {}", .0.git_str())]
    Reftable(#[source] crate::reftable::Error),
}

/// A failed step, and whether the observer is then told `aborted` (see [`super`]'s documentation for when it is).
pub(in crate::refs) struct Failed<E> {
    pub(in crate::refs) error: E,
    pub(in crate::refs) aborted: bool,
}

impl<E> Failed<E> {
    /// Failed without an `aborted` announcement.
    pub(in crate::refs) fn quietly(error: impl Into<E>) -> Self {
        Failed {
            error: error.into(),
            aborted: false,
        }
    }

    /// Failed, announcing `aborted`.
    pub(in crate::refs) fn aborted(error: impl Into<E>) -> Self {
        Failed {
            error: error.into(),
            aborted: true,
        }
    }
}

/// The indexes of the updates that have not failed, in order.
pub(in crate::refs) fn live(results: &[RefResult]) -> Vec<Index> {
    let mut live = Vec::with_capacity(results.len());
    // `as`: a transaction has at most `u32::MAX` updates ([`PrepareError::TooLarge`]).
    live.extend(
        (0..results.len())
            .filter(|&i| results[i].is_ok())
            .map(|i| i as Index),
    );
    live
}

/// An index into a transaction's updates. 32 bits, as a transaction takes at most `u32::MAX`
/// updates ([`PrepareError::TooLarge`]): a push of a million refs holds several vectors of
/// them at once (issue 24: memory per command).
pub(in crate::refs) type Index = u32;
