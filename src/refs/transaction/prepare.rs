//! The first step of a transaction: check the updates, announce `preparing`, take the store's
//! locks, check again under them, announce `prepared`. See the [module documentation](super)
//! for the guarantees.

use gix_object::bstr::BString;

use super::{
    Failed, Locked, Prepared, Store, Transaction, TransactionObserver, TransactionState, announce,
    live,
};
use crate::refs::{RefError, RefResult, RefUpdate, Refs};

pub use super::batch::PrepareError as Error;

impl<'a> Transaction<'a> {
    /// Check `updates`, lock their refs and check them again under the locks, telling
    /// `observer` the states `preparing` and `prepared`. With [`super::Atomicity::PerRef`] the
    /// refs that fail drop out of the batch ([`Prepared::failed`]); an error means nothing will
    /// be written.
    pub fn prepare(
        self,
        updates: &'a [RefUpdate],
        observer: &'a mut dyn TransactionObserver,
    ) -> Result<Prepared<'a>, Error> {
        let _span = tracing::info_span!("ref_transaction", step = "prepare", refs = updates.len())
            .entered();
        if u32::try_from(updates.len()).is_err() {
            return Err(Error::TooLarge(updates.len()));
        }
        reject_duplicates(updates)?;
        let options = self.options;
        let (current, atomic) = (options.current, options.atomic());
        let results = match self.store {
            Store::Files(store) => {
                check_all(updates, current, atomic, |u, refs| store.precheck(u, refs))
            }
            Store::Reftable(_) => check_all(updates, current, atomic, crate::refs::reftable::check),
        }?;
        let mut prepared = Prepared {
            updates,
            live: live(&results),
            results,
            locked: None,
            observer,
        };
        if prepared.live.is_empty() {
            return Ok(prepared);
        }
        let preparing = TransactionState::Preparing;
        if !announce(prepared.observer, preparing, updates, &prepared.live) {
            let aborted = TransactionState::Aborted;
            announce(prepared.observer, aborted, updates, &prepared.live);
            return Err(Error::HookAborted(preparing));
        }
        let locked = match self.store {
            Store::Files(store) => store.lock(updates, &mut prepared.results, &options),
            Store::Reftable(store) => store
                .lock(updates, &mut prepared.results, &options)
                .map(Locked::Reftable),
        };
        let locked = match locked {
            Ok(locked) => locked,
            Err(Failed { error, aborted }) => {
                if aborted {
                    let state = TransactionState::Aborted;
                    announce(prepared.observer, state, updates, &prepared.live);
                }
                return Err(error);
            }
        };
        prepared.live = live(&prepared.results);
        if prepared.live.is_empty() {
            // Every ref dropped out under the locks: nothing to write, nothing more to say.
            return Ok(prepared);
        }
        prepared.locked = Some(locked);
        let state = TransactionState::Prepared;
        if !announce(prepared.observer, state, updates, &prepared.live) {
            // Dropped: the locks go, then `aborted` is announced.
            drop(prepared);
            return Err(Error::HookAborted(state));
        }
        Ok(prepared)
    }
}

/// As git's `ref_update_reject_duplicates`: the first duplicate in name order. Pushes come
/// sorted, so this is one pass.
fn reject_duplicates(updates: &[RefUpdate]) -> Result<(), Error> {
    if updates.is_sorted_by(|a, b| a.name < b.name) {
        return Ok(());
    }
    let mut names: Vec<&BString> = updates.iter().map(|u| &u.name).collect();
    names.sort_unstable();
    match names.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(Error::Duplicate { name: w[0].clone() }),
        None => Ok(()),
    }
}

/// Check every update with `check` against `current`: one result per update, or the first
/// refusal of an atomic batch.
fn check_all(
    updates: &[RefUpdate],
    current: &Refs,
    atomic: bool,
    check: impl Fn(&RefUpdate, &Refs) -> Result<(), RefError>,
) -> Result<Vec<RefResult>, RefError> {
    let results: Vec<RefResult> = updates
        .iter()
        .map(|u| check(u, current).map_err(Box::new))
        .collect();
    if atomic && let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        return Err((**e).clone());
    }
    Ok(results)
}
