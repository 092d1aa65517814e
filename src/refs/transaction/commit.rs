//! The second step of a transaction: write what [`Prepared`] checked, release the locks,
//! announce `committed`. See the [module documentation](super) for the guarantees.

use super::{Failed, Locked, Prepared, TransactionState, announce};
use crate::refs::RefResult;

pub use super::batch::CommitError as Error;

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
