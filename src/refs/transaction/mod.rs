//! One ref transaction in typed steps:
//!
//! ```text
//! store.transaction(options) ─prepare(updates, observer)→ Prepared ─commit()→ one result per update
//!                                                             └─ dropped: aborted, nothing written
//! ```
//!
//! # Guarantees
//!
//! - **Nothing is written before [`Prepared::commit`].** [`Transaction::prepare`] checks every
//!   update against the refs read at the start of the push ([`Options::current`], for git's
//!   per-ref messages), takes the store's locks (files backend: one `<ref>.lock` per ref, and
//!   `packed-refs.lock` when refs are deleted; from [`super::PACKED_BATCH_THRESHOLD`] refs on,
//!   `packed-refs.lock` and a `<ref>.lock` only for refs that are loose files; reftable:
//!   `tables.list.lock`) and checks every expected old value again under them.
//! - **A [`Prepared`] holds the locks** and the checked batch. Its holder may take its time to
//!   decide (a cluster's compare-and-swap), then commit it or drop it: dropping it without
//!   committing releases every lock, writes nothing, and announces `aborted`.
//! - **One result per update.** With [`Atomicity::PerRef`] a ref that fails (in the first check,
//!   under the locks, or while being written) drops out of the batch with its own [`RefError`]
//!   and the others go on; [`Prepared::failed`] tells which dropped out while preparing, and
//!   [`Prepared::commit`] returns one result per update. With [`Atomicity::AllOrNothing`] the
//!   first failure fails the step, and nothing is written.
//! - **The observer sees git's states, in git's order, from here only** (backends announce
//!   nothing): `preparing` before any lock is taken, `prepared` when every lock is held and
//!   every check passed, then `committed` once written, or `aborted`. Each state comes with the
//!   updates still in the batch. Refusing in `preparing` or `prepared` aborts the transaction
//!   ([`prepare::Error::HookAborted`]); in `prepared` the locks are released before `aborted`.
//!
//! When `aborted` is announced, as git's backends do: after a refusal of the observer; when a
//! [`Prepared`] is dropped; by the reftable backend when `tables.list.lock` cannot be taken or an
//! atomic batch fails its check under the lock; by the files backend's large-batch path when a
//! concurrent writer wins a ref of an atomic batch after the rewrite (the previous
//! `packed-refs` is put back first). Not announced: when every ref fails its first check
//! (nothing was announced yet), when every ref drops out under the locks, when the files
//! backend fails to take a lock or to check under it (git's files backend closes such a
//! transaction without the hook), and when writing fails after `prepared`.

use super::{FilesStore, RefError, RefResult, RefUpdate, ReftableStore};

pub(super) mod batch;
pub mod commit;
pub mod prepare;

pub use batch::{Atomicity, Options, TransactionState};
pub(super) use batch::{Failed, Index, live};

/// Told the states of a transaction with the updates still in its batch (git's
/// `reference-transaction` hook); returning `false` in [`TransactionState::Preparing`] or
/// [`TransactionState::Prepared`] aborts the transaction. The return value of the other states
/// is ignored.
pub trait TransactionObserver {
    /// The transaction reached `state` with `updates`.
    fn state(&mut self, state: TransactionState, updates: &[RefUpdate]) -> bool;
}

impl<F: FnMut(TransactionState, &[RefUpdate]) -> bool> TransactionObserver for F {
    fn state(&mut self, state: TransactionState, updates: &[RefUpdate]) -> bool {
        self(state, updates)
    }
}

/// A ref transaction not yet prepared; [`Transaction::prepare`] is its next step.
#[must_use = "a Transaction does nothing until prepared"]
pub struct Transaction<'a> {
    pub(super) store: Store<'a>,
    pub(super) options: Options<'a>,
}

/// The store a transaction writes to.
#[derive(Clone, Copy)]
pub(super) enum Store<'a> {
    Files(&'a FilesStore),
    Reftable(&'a ReftableStore),
}

/// A prepared transaction: the locks are held and the old values checked under them. Commit it
/// with [`Prepared::commit`]; dropped, it releases the locks, writes nothing, and announces
/// `aborted`.
#[must_use = "a Prepared that is dropped aborts the transaction"]
pub struct Prepared<'a> {
    pub(super) updates: &'a [RefUpdate],
    /// One entry per update; the failed ones have dropped out of the batch.
    pub(super) results: Vec<RefResult>,
    /// The updates announced `prepared`, in order (indexes into `updates`).
    pub(super) live: Vec<Index>,
    /// The backend's locks and checked batch; `None` when there is nothing to write.
    pub(super) locked: Option<Locked<'a>>,
    pub(super) observer: &'a mut dyn TransactionObserver,
}

/// The locks and checked batch of one backend.
pub(super) enum Locked<'a> {
    Loose(super::loose::Locked<'a>),
    Packed(super::packed::Locked<'a>),
    Reftable(super::reftable::Locked<'a>),
}

impl<'a> Prepared<'a> {
    /// The updates that will be written by [`Prepared::commit`], in the order given.
    pub fn updates(&self) -> impl Iterator<Item = &'a RefUpdate> + '_ {
        let updates = self.updates;
        self.live.iter().map(move |&i| &updates[i as usize])
    }

    /// The updates that dropped out while preparing: `(index into the updates, why)`.
    pub fn failed(&self) -> impl Iterator<Item = (usize, &RefError)> {
        self.results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().err().map(|e| (i, &**e)))
    }

    /// Give up: release the locks and announce `aborted` (the same as dropping it).
    pub fn abort(self) {}
}

impl Drop for Prepared<'_> {
    fn drop(&mut self) {
        if let Some(locked) = self.locked.take() {
            drop(locked);
            announce(
                self.observer,
                TransactionState::Aborted,
                self.updates,
                &self.live,
            );
        }
    }
}

/// Tell `observer` that the updates at `live` reached `state` (all of `updates` without
/// copying when none failed).
pub(super) fn announce(
    observer: &mut dyn TransactionObserver,
    state: TransactionState,
    updates: &[RefUpdate],
    live: &[Index],
) -> bool {
    if live.len() == updates.len() {
        observer.state(state, updates)
    } else {
        let batch: Vec<RefUpdate> = live.iter().map(|&i| updates[i as usize].clone()).collect();
        observer.state(state, &batch)
    }
}

#[cfg(test)]
mod tests;
