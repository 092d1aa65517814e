//! The reftable backend of the ref store: a push's refs read from the repository's reftable stack
//! and its updates written as one new table, as git's `refs/reftable-backend.c` does.
//!
//! A transaction takes `tables.list.lock`, reloads the stack under it, checks every update's old
//! value against what the stack then holds (so a concurrent writer, berth or git, cannot be
//! overwritten unseen), and appends one table with the ref records and the reflog records
//! git's rules call for: a log entry per updated ref when `core.logAllRefUpdates` (or an
//! existing reflog) says so, one for `HEAD` when the ref it points to is updated, and
//! tombstones for every reflog entry of a deleted ref.

use foldhash::HashSet;
use std::borrow::Cow;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

use gix_hash::ObjectId;
use gix_object::bstr::BString;

use super::packed::{cmp_below, is_below};
use super::transaction::batch::{CommitError, Failed, Index, Options, PrepareError, live};
use super::{RefError, RefResult, RefUpdate, Refs, SnapshotError, precheck};
use crate::reftable::table::record_floor;
use crate::reftable::{
    Error, LogRecord, LogUpdate, LogValue, RefRecord, RefValue, Stack, WriteOptions,
};
use crate::repo::config::LogRefUpdates;

/// How many symbolic refs are followed before a chain counts as broken (git's limit is 5).
const MAX_SYMREF_DEPTH: usize = 5;

/// git's reftable backend for one repository.
pub struct ReftableStore {
    dir: PathBuf,
    opts: WriteOptions,
    log: LogRefUpdates,
    /// The merged refs as last read, with the stack they were read from: the symbolic-ref
    /// lookups of the same push use them, and a transaction whose stack has not changed since
    /// needs neither to merge nor to check again.
    read: RefCell<Option<Merged>>,
}

/// Every ref of the stack whose tables are `tables`, by name, deletions applied.
struct Merged {
    tables: Vec<String>,
    refs: Vec<(BString, RefValue)>,
}

impl Merged {
    fn of(stack: &Stack) -> Result<Merged, Error> {
        Ok(Merged {
            tables: table_names(stack),
            refs: stack.refs()?,
        })
    }

    fn get(&self, name: &[u8]) -> Option<&RefValue> {
        self.refs
            .binary_search_by(|(n, _)| n.as_slice().cmp(name))
            .ok()
            .map(|i| &self.refs[i].1)
    }

    /// The object `name` finally points to, following symbolic refs.
    fn resolve(&self, name: &[u8]) -> Option<ObjectId> {
        let mut name = name;
        for _ in 0..=MAX_SYMREF_DEPTH {
            match self.get(name)? {
                RefValue::Val1(oid) | RefValue::Val2(oid, _) => return Some(*oid),
                RefValue::Symref(target) => name = target.as_slice(),
                RefValue::Deletion => return None,
            }
        }
        None
    }

    /// The refs under `refs/`, symbolic ones resolved, dangling ones left out, marked with
    /// the stack they were read from.
    fn snapshot(&self) -> Refs {
        let entries = self
            .refs
            .iter()
            .filter(|(name, _)| name.starts_with(b"refs/"))
            .filter_map(|(name, value)| {
                let oid = match value {
                    RefValue::Val1(oid) | RefValue::Val2(oid, _) => *oid,
                    _ => self.resolve(name)?,
                };
                Some((name.clone(), oid))
            })
            .collect();
        Refs {
            entries,
            packed: None,
            version: Some(self.tables.clone()),
        }
    }
}

fn table_names(stack: &Stack) -> Vec<String> {
    stack.tables().iter().map(|t| t.name().to_owned()).collect()
}

impl ReftableStore {
    /// The store of the repository at `git_dir`, writing tables with `opts` (git's
    /// `reftable.*` configuration).
    pub fn open(git_dir: &Path, log: LogRefUpdates, opts: WriteOptions) -> Self {
        ReftableStore {
            dir: git_dir.join("reftable"),
            opts,
            log,
            read: RefCell::new(None),
        }
    }

    fn stack(&self) -> Result<Stack, Error> {
        Stack::open_with(&self.dir, self.opts)
    }
}

impl ReftableStore {
    /// [`super::RefStore::snapshot`] (whose implementation, in the parent module, calls this).
    pub(super) fn snapshot(&self) -> Result<Refs, SnapshotError> {
        let merged = Merged::of(&self.stack()?)?;
        let refs = merged.snapshot();
        *self.read.borrow_mut() = Some(merged);
        Ok(refs)
    }

    /// [`super::RefStore::symref_targets`] (the same).
    pub(super) fn symref_targets(&self, names: &[&[u8]]) -> Vec<Option<Option<BString>>> {
        if self.read.borrow().is_none() && self.snapshot().is_err() {
            return vec![None; names.len()];
        }
        let read = self.read.borrow();
        let Some(merged) = read.as_ref() else {
            return vec![None; names.len()];
        };
        names
            .iter()
            .map(|name| {
                let Some(RefValue::Symref(target)) = merged.get(name) else {
                    return None;
                };
                let mut target = target;
                for _ in 0..MAX_SYMREF_DEPTH {
                    match merged.get(target) {
                        Some(RefValue::Symref(next)) => target = next,
                        _ => return Some(Some(target.clone())),
                    }
                }
                Some(None)
            })
            .collect()
    }
}

/// A transaction's batch with `tables.list.lock` held and every ref checked under it, ready
/// for [`Locked::commit`]; dropped, the lock is released.
pub(super) struct Locked<'a> {
    store: &'a ReftableStore,
    updates: &'a [RefUpdate],
    locked: crate::reftable::stack::Locked<Stack>,
    /// The refs under the lock.
    now: Cow<'a, Refs>,
    /// The indexes of the updates to write, in order.
    live: Vec<Index>,
    committer: &'a gix_actor::Signature,
    objects: &'a gix_odb::Handle,
}

impl ReftableStore {
    /// The reftable half of [`super::Transaction::prepare`]: take `tables.list.lock` and check the
    /// live updates (`results[i].is_ok()`) again under it.
    pub(super) fn lock<'a>(
        &'a self,
        updates: &'a [RefUpdate],
        results: &mut [RefResult],
        options: &Options<'a>,
    ) -> Result<Locked<'a>, Failed<PrepareError>> {
        let atomic = options.atomic();
        let stack = self.stack().map_err(Failed::quietly)?;
        let locked = match stack.into_locked() {
            Ok(l) => l,
            Err(Error::Locked(_)) => return Err(Failed::aborted(PrepareError::ReftableLocked)),
            Err(e) => return Err(Failed::aborted(e)),
        };
        // Checked again under the lock, unless the stack is still the one `current` was read
        // from: a ref that moved since the push began fails on its own.
        let current = options.current;
        let unchanged = current.version.as_ref() == Some(&table_names(locked.stack()));
        let now = if unchanged {
            Cow::Borrowed(current)
        } else {
            let fresh = Merged::of(locked.stack()).map_err(Failed::quietly)?;
            Cow::Owned(fresh.snapshot())
        };
        if !unchanged {
            for (i, u) in updates.iter().enumerate() {
                if results[i].is_ok()
                    && let Err(e) = check(u, &now)
                {
                    if atomic {
                        return Err(Failed::aborted(e));
                    }
                    results[i] = Err(Box::new(e));
                }
            }
        }
        conflicts_in_batch(updates, results, &now, atomic).map_err(Failed::aborted)?;
        Ok(Locked {
            store: self,
            updates,
            locked,
            now,
            live: live(results),
            committer: options.committer,
            objects: options.objects,
        })
    }
}

impl Locked<'_> {
    /// Write the batch as one table; the indexes of the updates written.
    pub(super) fn commit(self) -> Result<Vec<Index>, Failed<CommitError>> {
        let Locked {
            store,
            updates,
            locked,
            now,
            live,
            committer,
            objects,
        } = self;
        // As git's transaction finish: a failure to write the table fails the transaction.
        // (git runs no `aborted` hook then: the transaction was prepared.)
        let written = store
            .plan(locked.stack(), &now, updates, &live, committer)
            .and_then(|plan| {
                let hash = store.opts.hash;
                let mut peeler = super::packed::Peeler::new(objects);
                let refs = plan
                    .written
                    .into_iter()
                    .map(move |i| Ok(record(&updates[i as usize], &mut peeler, hash)));
                locked.commit_sorted(Box::new(refs), plan.floor, plan.logs)
            });
        written.map_err(|e| Failed::quietly(CommitError::Reftable(e)))?;
        Ok(live)
    }
}

/// What one transaction writes, as git's `write_transaction_table` decides it: the updates
/// that write a ref record, in name order (their records are made one at a time as the table
/// is written), a floor on the size of those records, and the reflog records.
struct Plan {
    written: Vec<Index>,
    floor: u64,
    logs: Vec<LogRecord>,
}

/// The ref record of update `u`, its name borrowed; an annotated tag is stored with the
/// object it peels to (as git master).
fn record<'u>(
    u: &'u RefUpdate,
    peeler: &mut super::packed::Peeler<'_>,
    hash: gix_hash::Kind,
) -> RefRecord<'u> {
    let value = if u.is_delete() {
        RefValue::Deletion
    } else {
        let new = u.new_id(hash);
        match peeler.peel(new) {
            Some(peeled) => RefValue::Val2(new, peeled),
            None => RefValue::Val1(new),
        }
    };
    RefRecord {
        name: Cow::Borrowed(u.name.as_ref()),
        update_index: 0,
        value,
    }
}

impl ReftableStore {
    /// The [`Plan`] of the updates `live` (indexes into `updates`, in push order) on top of
    /// `now`, the refs of `stack`.
    fn plan(
        &self,
        stack: &Stack,
        now: &Refs,
        updates: &[RefUpdate],
        live: &[Index],
        committer: &gix_actor::Signature,
    ) -> Result<Plan, Error> {
        let batch = || live.iter().map(|&i| &updates[i as usize]);
        // Only read the reflogs when a rule depends on which exist.
        let need_logs = batch().any(|u| u.is_delete()) || self.log != LogRefUpdates::Always;
        let existing_logs = if need_logs { stack.logs()? } else { Vec::new() };
        let has_log: HashSet<&[u8]> = existing_logs.iter().map(|l| l.refname.as_slice()).collect();
        let should_log = |name: &[u8]| match self.log {
            LogRefUpdates::Always => true,
            LogRefUpdates::Normal if autocreates_reflog(name) => true,
            _ => has_log.contains(name),
        };
        let head = match stack.read_ref(b"HEAD")? {
            Some(RefValue::Symref(target)) => Some(target),
            _ => None,
        };
        let entry = |old: ObjectId, new: ObjectId| LogUpdate {
            old,
            new,
            name: committer.name.clone(),
            email: committer.email.clone(),
            time: committer.time.seconds.max(0) as u64,
            tz_offset: tz_hhmm(committer.time.offset),
            message: "push".into(),
        };

        let hash = self.opts.hash;
        let (mut written, mut floor) = (Vec::with_capacity(live.len()), 0);
        let mut logs = Vec::new();
        for &i in live {
            let u = &updates[i as usize];
            let before = now.get(&u.name).unwrap_or(ObjectId::null(hash));
            let new = u.new_id(hash);
            if u.is_delete() {
                if before.is_null() {
                    continue; // deleting what does not exist writes nothing
                }
                floor += record_floor(&RefValue::Deletion, hash);
                logs.extend(
                    existing_logs
                        .iter()
                        .filter(|l| l.refname == u.name)
                        .map(|l| LogRecord {
                            refname: l.refname.clone(),
                            update_index: l.update_index,
                            value: LogValue::Deletion,
                        }),
                );
            } else {
                if before == new {
                    continue; // a no-op update writes neither a ref nor a reflog entry
                }
                // Peeled or not, the record is at least this large.
                floor += record_floor(&RefValue::Val1(new), hash);
                if should_log(&u.name) {
                    logs.push(LogRecord {
                        refname: u.name.clone(),
                        update_index: 0,
                        value: LogValue::Update(entry(before, new)),
                    });
                }
            }
            written.push(i);
            if head.as_ref().is_some_and(|h| *h == u.name) && should_log(b"HEAD") {
                logs.push(LogRecord {
                    refname: "HEAD".into(),
                    update_index: 0,
                    value: LogValue::Update(entry(before, new)),
                });
            }
        }
        let name = |i: &Index| updates[*i as usize].name.as_slice();
        if !written.is_sorted_by_key(name) {
            written.sort_unstable_by(|a, b| name(a).cmp(name(b)));
        }
        Ok(Plan {
            written,
            floor,
            logs,
        })
    }
}

/// git's check of new names against the other names of the same transaction
/// (`refs_verify_refnames_available` with the transaction's names as extras): a new ref may not
/// be a directory of another one of the batch, nor have one below it. Names are checked in
/// the order of the push, and a rejected name stops counting (so of `x` then `x/y`, `x` fails
/// and `x/y` lands, as with git master). Returns whether a ref failed; for an atomic batch, the first failure.
fn conflicts_in_batch(
    updates: &[RefUpdate],
    results: &mut [RefResult],
    now: &Refs,
    atomic: bool,
) -> Result<bool, RefError> {
    // Nothing to decide unless some name of the batch is a directory of another, which is
    // found in name order without a set of every name.
    let mut order = live(results);
    let name = |i: Index| updates[i as usize].name.as_slice();
    if !order.is_sorted_by_key(|&i| name(i)) {
        order.sort_unstable_by(|&a, &b| name(a).cmp(name(b)));
    }
    let dir_of_another = directory_of_another(order.len(), |k| name(order[k]));
    drop(order);
    if !dir_of_another {
        return Ok(false);
    }
    let mut names: HashSet<&[u8]> = (0..updates.len())
        .filter(|&i| results[i].is_ok())
        .map(|i| updates[i].name.as_slice())
        .collect();
    let mut sorted: Vec<&[u8]> = names.iter().copied().collect();
    sorted.sort_unstable();
    let order: Vec<usize> = (0..updates.len())
        .filter(|&i| results[i].is_ok() && !updates[i].is_delete())
        .filter(|&i| now.get(&updates[i].name).is_none())
        .collect();
    let mut failed = false;
    for i in order {
        let name = updates[i].name.as_slice();
        let slashes = name.iter().enumerate().filter(|(_, b)| **b == b'/');
        let mut dirs = slashes.map(|(at, _)| &name[..at]);
        let mut prefix = name.to_vec();
        prefix.push(b'/');
        let other = dirs.find(|dir| names.contains(dir)).or_else(|| {
            let from = sorted.partition_point(|m| *m < prefix.as_slice());
            sorted[from..]
                .iter()
                .take_while(|m| m.starts_with(&prefix))
                .find(|m| names.contains(*m))
                .copied()
        });
        if let Some(other) = other {
            let e = RefError::UnavailableInPush {
                name: name.into(),
                other: other.into(),
            };
            if atomic {
                return Err(e);
            }
            names.remove(name);
            results[i] = Err(Box::new(e));
            failed = true;
        }
    }
    Ok(failed)
}

/// Whether one of `len` names, the `k`th `name(k)` in name order, is a directory of another
/// (`x` and `x/…`). The names that start with `x` follow `x`, so only a name followed by one
/// that starts with it needs a look for `x/`.
fn directory_of_another<'n>(len: usize, name: impl Fn(usize) -> &'n [u8]) -> bool {
    (1..len).any(|k| {
        let dir = name(k - 1);
        name(k).starts_with(dir) && {
            let (mut lo, mut hi) = (k, len);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if cmp_below(name(mid), dir).is_lt() {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo < len && is_below(name(lo), dir)
        }
    })
}

/// [`precheck`] with the reftable backend's wording for name conflicts.
pub(super) fn check(u: &RefUpdate, refs: &Refs) -> Result<(), RefError> {
    precheck(u, refs).map_err(|e| match e {
        RefError::NameConflict { name, existing } => RefError::NameUnavailable { name, existing },
        e => e,
    })
}

/// git's `should_autocreate_reflog` for `core.logAllRefUpdates=true`.
fn autocreates_reflog(name: &[u8]) -> bool {
    name.starts_with(b"refs/heads/")
        || name.starts_with(b"refs/remotes/")
        || name.starts_with(b"refs/notes/")
        || name == b"HEAD"
}

/// A time zone offset in seconds as the `±hhmm` number reftable stores (`-0130` is `-130`).
fn tz_hhmm(offset_seconds: i32) -> i16 {
    let minutes = offset_seconds.abs() / 60;
    let hhmm = (minutes / 60) * 100 + minutes % 60;
    (offset_seconds.signum() * hhmm).clamp(i16::MIN as i32, i16::MAX as i32) as i16
}

#[cfg(test)]
mod tests {
    use super::{directory_of_another, tz_hhmm};

    #[test]
    fn a_directory_of_another_name_is_found_in_name_order() {
        let found = |names: &[&str]| {
            assert!(names.is_sorted());
            directory_of_another(names.len(), |k| names[k].as_bytes())
        };
        assert!(!found(&[]));
        assert!(!found(&["refs/heads/a"]));
        assert!(!found(&["refs/heads/1", "refs/heads/10", "refs/heads/100"]));
        assert!(!found(&[
            "refs/heads/x",
            "refs/heads/x-1",
            "refs/heads/x.y",
            "refs/heads/y"
        ]));
        assert!(found(&["refs/heads/x", "refs/heads/x/y"]));
        // `x/…` not next to `x`: names that start with `x` but sort before `x/` lie between.
        assert!(found(&[
            "refs/heads/x",
            "refs/heads/x-1",
            "refs/heads/x.y",
            "refs/heads/x/y"
        ]));
        assert!(found(&["a", "b", "b-", "b/c", "c"]));
        assert!(!found(&["b", "b-", "b0", "c/d"]));
    }

    #[test]
    fn time_zones_as_git_stores_them() {
        assert_eq!(tz_hhmm(0), 0);
        assert_eq!(tz_hhmm(3600), 100);
        assert_eq!(tz_hhmm(-(7 * 3600)), -700);
        assert_eq!(tz_hhmm(-(3600 + 30 * 60)), -130);
        assert_eq!(tz_hhmm(5 * 3600 + 45 * 60), 545);
    }
}
