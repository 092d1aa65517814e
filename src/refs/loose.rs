//! The few-ref path of the files backend: git's loose-ref transaction
//! (`files_transaction_prepare` / `files_transaction_finish` in `refs/files-backend.c`), one
//! `<ref>.lock` per ref.
//!
//! # Protocol
//!
//! 1. For each ref, in name order: create `<ref>.lock` (`O_CREAT|O_EXCL`, retried with git's
//!    backoff for `core.filesRefLockTimeout`, default 100 ms) and the directories it needs; under the lock read the
//!    current value (the loose file, else `packed-refs`), compare it with the expected old value,
//!    check a new ref for directory/file conflicts, and write the new value into the lock.
//! 2. Only when the batch deletes refs, take `packed-refs.lock` (retried for
//!    `core.packedRefsTimeout`, default 1 s): a deleted ref may have a `packed-refs` entry to remove, and no
//!    one may pack it meanwhile. Updates and creations never take it, so a held or stale
//!    `packed-refs.lock` fails only deletions, as in git: in a non-atomic push each deletion
//!    fails with git's lock message (git 2.47 runs one transaction per ref), in an atomic push
//!    the whole push fails.
//! 3. The `prepared` hook (announced by the [transaction](super::transaction), which holds
//!    the locks until it is committed or dropped).
//! 4. Append the reflogs; rename each update's lock over its ref; rewrite `packed-refs` without
//!    the deleted refs (only if one of them is in it, as git's `is_packed_transaction_needed`;
//!    the file as step 1 had it while `stat` says it is the same one, else read again);
//!    remove the deleted refs' loose files under their locks, then their empty directories;
//!    release the locks.
//!
//! A failure in step 1 fails that ref alone in a non-atomic push and the whole push in an atomic
//! one; every lock taken so far is removed.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use gix_hash::ObjectId;
use gix_object::bstr::ByteSlice;

use super::packed::{
    self, Item, Lock, Loose, Packed, Peeler, Sorted, cannot_lock, loose_below, path_of, prefixes,
    read_loose, read_loose_from, remove_empty_parents, strerror,
};
use super::transaction::batch::{CommitError, Failed, Index, PrepareError, live};
use super::{RefError, RefResult, RefUpdate};

/// The batch with every lock held (steps 1 and 2), ready for [`Locked::commit`]; dropped, the
/// locks are released.
pub(super) struct Locked<'a> {
    batch: super::Batch<'a>,
    updates: &'a [RefUpdate],
    items: Vec<Item>,
    packed_lock: Option<Lock>,
    /// `packed-refs` as step 1 read it: a deletion's rewrite takes it again while `stat` says it
    /// is the same file (checked under `packed-refs.lock`).
    packed: Cow<'a, Packed>,
}

/// Steps 1 and 2 for the live updates (`results[i].is_ok()`): a ref that fails drops out with
/// its error, unless the batch is atomic. `current` is `packed-refs` as the push's snapshot read
/// it.
pub(super) fn lock<'a>(
    batch: super::Batch<'a>,
    updates: &'a [RefUpdate],
    results: &mut [RefResult],
    current: Option<&'a Packed>,
) -> Result<Locked<'a>, Failed<PrepareError>> {
    let super::Batch {
        git_dir, atomic, ..
    } = batch;
    let mut order = live(results);
    order.sort_by(|&a, &b| updates[a as usize].name.cmp(&updates[b as usize].name));
    let sorted = Sorted { updates, order };
    let packed = Packed::current(&git_dir.join("packed-refs"), current).map_err(Failed::quietly)?;

    let mut items: Vec<Item> = Vec::with_capacity(sorted.order.len());
    for (k, &i) in sorted.order.iter().enumerate() {
        let i = i as usize;
        match lock_one(batch, &packed, &sorted, k, &updates[i]) {
            Ok((lock, before)) => items.push(Item::locked(i, lock, before)),
            Err(e) if atomic => return Err(Failed::quietly(e)),
            Err(e) => results[i] = Err(Box::new(e)),
        }
    }

    let deletes = |it: &Item| updates[it.index()].is_delete();
    let mut packed_lock = None;
    if items.iter().any(deletes) {
        match Lock::acquire(git_dir, b"packed-refs", batch.locks.packed_refs) {
            Ok(l) => packed_lock = Some(l),
            Err(e) if atomic => return Err(Failed::quietly(e)),
            Err(e) => {
                let (deletions, rest): (Vec<Item>, Vec<Item>) =
                    items.into_iter().partition(deletes);
                for it in deletions {
                    results[it.index()] = Err(Box::new(RefError::PackedRefsLocked(e.clone())));
                }
                items = rest;
            }
        }
    }
    Ok(Locked {
        batch,
        updates,
        items,
        packed_lock,
        packed,
    })
}

impl Locked<'_> {
    /// Step 4; the indexes of the updates written. A ref that cannot be written fails alone
    /// (`results`), unless the batch is atomic.
    pub(super) fn commit(
        self,
        results: &mut [RefResult],
    ) -> Result<Vec<Index>, Failed<CommitError>> {
        let Locked {
            batch,
            updates,
            items,
            packed_lock,
            packed,
        } = self;
        let super::Batch {
            git_dir,
            object_format,
            log,
            atomic,
            committer,
            objects,
            fsync,
            locks: _,
        } = batch;
        let mut live: Vec<Index> = items.iter().map(|it| it.index).collect();
        live.sort_unstable();
        let mut time_buf = gix_date::parse::TimeBuf::default();
        let committer = committer.to_ref(&mut time_buf);
        // Every item holds its lock and value: no `packed-refs` to look in.
        packed::write_reflogs(
            git_dir,
            object_format,
            log,
            updates,
            &items,
            None,
            &committer,
        );
        let deletes = |it: &Item| updates[it.index()].is_delete();
        let (deletions, writes): (Vec<Item>, Vec<Item>) = items.into_iter().partition(deletes);
        let mut failed = Vec::new();
        // The directories refs were renamed into, synced once their renames are done; collected
        // only when they are synced (not per ref for nothing).
        let dirs_synced = fsync.syncs_dirs(crate::fsync::Components::REFERENCE);
        let mut renamed_into = BTreeSet::new();
        for mut it in writes {
            let u = &updates[it.index()];
            let target = git_dir.join(path_of(&u.name));
            let Some(lock) = it.take_lock() else { continue };
            if target.is_dir() {
                remove_empty_dirs(&target);
            }
            match lock.commit_to(&target) {
                Ok(()) => {
                    if let Some(parent) = target.parent().filter(|_| dirs_synced)
                        && !renamed_into.contains(parent)
                    {
                        renamed_into.insert(parent.to_owned());
                    }
                }
                Err(e) => {
                    let (name, reason) = (u.name.clone(), strerror(&e));
                    if atomic {
                        return Err(Failed::quietly(CommitError::SetRef { name, reason }));
                    }
                    results[it.index()] = Err(Box::new(RefError::Other {
                        message: format!("couldn't set '{name}': {reason}"),
                    }));
                    failed.push(it.index);
                }
            }
        }
        sync_dirs(fsync, &renamed_into).map_err(Failed::quietly)?;

        if !deletions.is_empty() {
            let logs = git_dir.join("logs");
            for it in &deletions {
                remove_empty_parents(&logs, &updates[it.index()].name);
            }
            // Under packed-refs.lock: what is in packed-refs now.
            let packed_path = git_dir.join("packed-refs");
            let current = Packed::current(&packed_path, Some(&packed)).map_err(Failed::quietly)?;
            if deletions
                .iter()
                .any(|it| current.get(&updates[it.index()].name).is_some())
            {
                let mut peeler = Peeler::new(objects);
                packed::replace(
                    &git_dir.join("packed-refs.new"),
                    &packed_path,
                    |w| packed::render(&current, updates, &deletions, &mut peeler, w),
                    fsync,
                )
                .map_err(Failed::quietly)?;
            }
            let mut removed_from = BTreeSet::new();
            for mut it in deletions {
                let name = updates[it.index()].name.as_slice();
                if let Err(e) = fs::remove_file(git_dir.join(path_of(name)))
                    && e.kind() != io::ErrorKind::NotFound
                {
                    let (name, reason) = (name.as_bstr().to_owned(), strerror(&e));
                    if atomic {
                        return Err(Failed::quietly(CommitError::RemoveRef { name, reason }));
                    }
                    results[it.index()] = Err(Box::new(RefError::Other {
                        message: format!("unable to remove '{name}': {reason}"),
                    }));
                    failed.push(it.index);
                }
                drop(it.take_lock());
                remove_empty_parents(git_dir, name);
                if dirs_synced {
                    removed_from.insert(git_dir.join(path_of(name)));
                }
            }
            // The directories loose refs were removed from, where they are left.
            let dirs: BTreeSet<PathBuf> = removed_from
                .iter()
                .filter_map(|p| p.ancestors().skip(1).find(|d| d.is_dir()))
                .map(Path::to_owned)
                .collect();
            sync_dirs(fsync, &dirs).map_err(Failed::quietly)?;
        }
        drop(packed_lock);
        live.retain(|i| !failed.contains(i));
        Ok(live)
    }
}

/// Sync `dirs` (refs were renamed into them or removed from them) as `fsync` says for refs.
fn sync_dirs(fsync: crate::fsync::Durability, dirs: &BTreeSet<PathBuf>) -> Result<(), CommitError> {
    for d in dirs {
        fsync
            .sync_dir(crate::fsync::Components::REFERENCE, d)
            .map_err(|e| CommitError::SyncDir {
                reason: strerror(&e),
            })?;
    }
    Ok(())
}

/// Take the lock of update `k` of `batch` and check the ref under it; the lock (holding the new
/// value, unless the ref is deleted, synced as `fsync` says: git's `write_ref_to_lockfile`) and
/// the ref's current value.
fn lock_one(
    super::Batch {
        git_dir,
        fsync,
        locks,
        ..
    }: super::Batch<'_>,
    packed: &Packed,
    sorted: &Sorted<'_>,
    k: usize,
    u: &RefUpdate,
) -> Result<(Lock, Option<ObjectId>), RefError> {
    let name = u.name.as_slice();
    gix_ref::FullName::try_from(u.name.as_bstr()).map_err(|e| RefError::Other {
        message: format!("cannot lock ref '{}': {e}", u.name),
    })?;
    let path = git_dir.join(path_of(name));
    if let Some(parent) = path.parent()
        && let Err(e) = fs::create_dir_all(parent)
    {
        if let Some(p) = prefixes(name).find(|p| git_dir.join(path_of(p)).is_file()) {
            return Err(RefError::NameConflict {
                name: u.name.clone(),
                existing: p.into(),
            });
        }
        return Err(RefError::Other {
            message: format!(
                "cannot lock ref '{}': unable to create directory for '{}': {}",
                u.name,
                u.name,
                strerror(&e)
            ),
        });
    }
    let lock = Lock::acquire(git_dir, name, locks.files_ref).map_err(|e| cannot_lock(u, e))?;

    // git's rule: a loose file takes precedence over packed-refs.
    let (exists, current) = match read_loose(&path) {
        Some(Loose::Object(oid)) => (true, Some(oid)),
        Some(Loose::Broken | Loose::Symbolic) => (true, None),
        None => match packed.get(name) {
            Some(e) => (true, Some(e.oid)),
            None => (false, None),
        },
    };
    super::check_old(u, exists, current)?;
    if !exists {
        // A new ref, or the deletion of one that is not there: git locks the name all the same.
        check_new(git_dir, packed, sorted, k, u, &path)?;
    }
    let new = match u.change {
        super::Change::Create { new } | super::Change::Update { new, .. } => new,
        super::Change::Delete { .. } => return Ok((lock, current)),
    };
    let written = fs::OpenOptions::new()
        .write(true)
        .open(lock.path())
        .and_then(|mut f| {
            writeln!(f, "{new}")?;
            fsync.sync(crate::fsync::Components::REFERENCE, &f)
        });
    if let Err(e) = written {
        return Err(RefError::Other {
            message: format!(
                "couldn't write '{}': {}",
                lock.path().display(),
                strerror(&e)
            ),
        });
    }
    Ok((lock, current))
}

/// A new ref must not collide with an existing ref, or another ref the batch writes, as a file
/// and a directory. (A conflict with a ref the batch deletes was refused before, against the
/// refs read at the start of the push.)
fn check_new(
    git_dir: &Path,
    packed: &Packed,
    batch: &Sorted<'_>,
    k: usize,
    u: &RefUpdate,
    path: &Path,
) -> Result<(), RefError> {
    let name = u.name.as_slice();
    for p in prefixes(name) {
        if packed.get(p).is_some() || git_dir.join(path_of(p)).is_file() {
            return Err(super::files_name_conflict(
                git_dir,
                u.name.clone(),
                p.into(),
            ));
        }
        if batch.get(p).is_some_and(|o| !o.is_delete()) {
            return Err(RefError::ConflictInPush {
                name: u.name.clone(),
                other: p.into(),
            });
        }
    }
    if let Some(below) = packed.first_below(name, |_| false) {
        return Err(super::files_name_conflict(
            git_dir,
            u.name.clone(),
            below.into(),
        ));
    }
    if let Some(below) = batch.written_below(k, name) {
        return Err(RefError::ConflictInPush {
            name: u.name.clone(),
            other: below.into(),
        });
    }
    // A directory where the ref goes: empty ones are removed, as git does.
    if path.is_dir() && !remove_empty_dirs(path) {
        if let (Some(existing), _) = loose_below(git_dir, name) {
            return Err(RefError::NameConflict {
                name: u.name.clone(),
                existing,
            });
        }
        return Err(RefError::Other {
            message: format!(
                "cannot lock ref '{}': there is a non-empty directory './{}' blocking reference '{}'",
                u.name, u.name, u.name
            ),
        });
    }
    Ok(())
}

/// Remove `dir` and the directories below it if they hold nothing else; whether `dir` went.
fn remove_empty_dirs(dir: &Path) -> bool {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_dirs(&e.path());
            }
        }
    }
    fs::remove_dir(dir).is_ok()
}

/// Every loose ref file under `<git_dir>/refs`, as git's files backend lists them: names
/// starting with `.` or ending in `.lock` are not refs, and a name git would not accept is left
/// out (git marks it broken and skips it too). Appended to `out` with what each file holds, in
/// no particular order. Each directory is opened once and its files are opened relative to it
/// (`openat`): the kernel walks one path component per ref instead of the whole path, which was
/// most of a snapshot's cost with many pushes at once (issue 16).
pub(super) fn scan(git_dir: &Path, out: &mut Vec<(Vec<u8>, Loose)>) {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if let Ok(fd) = rustix::fs::open(git_dir.join("refs"), flags, Mode::empty()) {
        scan_dir(fd, b"refs", out);
    }
}

fn scan_dir(fd: rustix::fd::OwnedFd, dir: &[u8], out: &mut Vec<(Vec<u8>, Loose)>) {
    use rustix::fs::{FileType, Mode, OFlags};
    let Ok(mut entries) = rustix::fs::Dir::new(fd) else {
        return;
    };
    while let Some(Ok(e)) = entries.read() {
        let Ok(dir_fd) = entries.fd() else {
            return;
        };
        let base = e.file_name().to_bytes();
        if base.starts_with(b".") || base.ends_with(b".lock") {
            continue;
        }
        let mut name = Vec::with_capacity(dir.len() + 1 + base.len());
        name.extend_from_slice(dir);
        name.push(b'/');
        name.extend_from_slice(base);
        let is_dir = match e.file_type() {
            FileType::Directory => true,
            FileType::Unknown => {
                rustix::fs::statat(dir_fd, e.file_name(), rustix::fs::AtFlags::empty())
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
            }
            _ => false,
        };
        if is_dir {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            if let Ok(sub) = rustix::fs::openat(dir_fd, e.file_name(), flags, Mode::empty()) {
                scan_dir(sub, &name, out);
            }
            continue;
        }
        if gix_validate::reference::name(name.as_bstr()).is_err() {
            continue;
        }
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        if let Ok(file) = rustix::fs::openat(dir_fd, e.file_name(), flags, Mode::empty())
            && let Some(value) = read_loose_from(std::fs::File::from(file))
        {
            out.push((name, value));
        }
    }
}
