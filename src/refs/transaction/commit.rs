//! The second step of a transaction: write what [`Prepared`] checked, release the locks,
//! announce `committed`. See the [module documentation](super) for the guarantees.

use gix_object::bstr::BString;

use super::{Failed, Locked, Prepared, TransactionState, announce};
use crate::refs::{PackedReadError, PackedWriteError, RefError, RefResult};

/// Why a prepared transaction could not be written, in git's words. Refs written before the
/// failure may stay written (git's files backend is not atomic across files either), except
/// where a variant says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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

impl Prepared<'_> {
    /// Write the batch and release the locks, then tell the observer `committed` with the refs
    /// written. Returns one result per update given to [`super::Transaction::prepare`]: those
    /// that dropped out while preparing, or while being written (with
    /// [`super::Atomicity::PerRef`]), carry their error.
    pub fn commit(mut self) -> Result<Vec<RefResult>, Error> {
        let _span = tracing::info_span!("ref_transaction", step = "commit", refs = self.live.len())
            .entered();
        let Some(locked) = self.locked.take() else {
            return Ok(std::mem::take(&mut self.results));
        };
        let done = match locked {
            Locked::Loose(l) => l.commit(&mut self.results),
            Locked::Packed(l) => l.commit(&mut self.results),
            Locked::Reftable(l) => l.commit(),
        };
        match done {
            Ok(committed) => {
                let state = TransactionState::Committed;
                announce(self.observer, state, self.updates, &committed);
                Ok(std::mem::take(&mut self.results))
            }
            Err(Failed { error, aborted }) => {
                if aborted {
                    let state = TransactionState::Aborted;
                    announce(self.observer, state, self.updates, &self.live);
                }
                Err(error)
            }
        }
    }
}
