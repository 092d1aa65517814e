//! The ref store: [`RefStore`], the one interface a push uses to read the repository's refs and
//! commit its updates as one transaction, with two backends: [`reftable`] (a reftable stack, one
//! new table per transaction) and [`FilesStore`], git's files backend (loose refs + `packed-refs`, git's `.lock`
//! protocol): small batches through [`loose`] (git's transaction, one `<ref>.lock` and loose file
//! per ref; `packed-refs.lock` only for deletions), batches of [`PACKED_BATCH_THRESHOLD`] refs or
//! more through [`packed`], one `packed-refs` rewrite without a lock file per ref. Refs are read
//! through `gix-ref`.
//!
//! A non-atomic push is one batch in which each ref may fail on its own: the batch is checked
//! against the refs read at the start (giving git's per-ref messages), then again under the
//! locks; a ref that changed in between, or whose lock is held, drops out of the batch with its
//! own error. An atomic push fails as a whole.

use std::path::Path;

use gix_hash::ObjectId;
use gix_object::bstr::{BStr, BString, ByteSlice};
use gix_ref::Target;

use crate::hooks::TransactionState;
use crate::repo::config::LogRefUpdates;

mod loose;
mod packed;
mod reftable;

pub use reftable::ReftableStore;

/// Where a repository keeps its refs (`extensions.refStorage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefFormat {
    /// Loose files and `packed-refs`.
    Files,
    /// A reftable stack in `$GIT_DIR/reftable`.
    Reftable,
}

/// A repository's ref storage, as a push uses it: one snapshot of the refs, the symbolic refs
/// among the pushed names, and one transaction for the push's updates.
pub trait RefStore {
    /// Every ref under `refs/`; symbolic refs resolve to their target's value, broken ones are
    /// left out.
    fn snapshot(&self) -> Result<Refs, String>;

    /// For each of `names`: `None` if it is not a symbolic ref, else the name of the ref it
    /// finally points to (`Some(None)` when the chain is broken or too long).
    fn symref_targets(&self, names: &[&[u8]]) -> Vec<Option<Option<BString>>>;

    /// Commit `updates` as one transaction. With `atomic`, any failure fails all and nothing
    /// is written; otherwise the result has one entry per update, and only failed refs are
    /// left unchanged. `current` is the snapshot taken at the start of the push. `hook` is
    /// told the transaction's states (git's `reference-transaction` hook).
    fn commit(
        &self,
        updates: &[RefUpdate],
        current: &Refs,
        atomic: bool,
        committer: &gix_actor::Signature,
        objects: &gix_odb::Handle,
        hook: &mut TransactionHook<'_>,
    ) -> Result<Vec<Result<(), RefError>>, TransactionError>;
}

/// The ref store of the repository at `git_dir`.
pub fn open(
    git_dir: &Path,
    format: RefFormat,
    log: LogRefUpdates,
    reftable: crate::reftable::WriteOptions,
) -> Box<dyn RefStore> {
    match format {
        RefFormat::Files => Box::new(FilesStore::open(git_dir, log)),
        RefFormat::Reftable => Box::new(ReftableStore::open(git_dir, log, reftable)),
    }
}

/// A snapshot of the refs under `refs/`, sorted by name, symbolic refs resolved to the object
/// id they point to.
#[derive(Debug, Default, Clone)]
pub struct Refs {
    entries: Vec<(BString, ObjectId)>,
    /// Which state of the store the refs were read from, when the store can tell (the
    /// reftable stack's table names): a transaction on an unchanged store need not check again.
    version: Option<Vec<String>>,
}

impl Refs {
    /// Build from `(name, id)` pairs in any order.
    pub fn from_unsorted(mut entries: Vec<(BString, ObjectId)>) -> Self {
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Refs {
            entries,
            version: None,
        }
    }

    /// The number of refs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no refs.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The refs in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &ObjectId)> {
        self.entries.iter().map(|(n, o)| (n.as_slice(), o))
    }

    /// The value of `name`, if it exists.
    pub fn get(&self, name: &[u8]) -> Option<ObjectId> {
        self.entries
            .binary_search_by(|(n, _)| n.as_slice().cmp(name))
            .ok()
            .map(|i| self.entries[i].1)
    }

    /// The name of an existing ref that is `name` + `/…`, if any.
    pub fn first_below(&self, name: &[u8]) -> Option<&BStr> {
        let i = self
            .entries
            .partition_point(|(n, _)| packed::cmp_below(n, name).is_lt());
        self.entries
            .get(i)
            .filter(|(n, _)| packed::is_below(n, name))
            .map(|(n, _)| n.as_bstr())
    }
}

/// One ref update of a push, ready to commit.
#[derive(Debug, Clone)]
pub struct RefUpdate {
    /// The full ref name.
    pub name: BString,
    /// The expected current value; zero means the ref must not exist.
    pub old: ObjectId,
    /// The new value; zero deletes the ref.
    pub new: ObjectId,
    /// Do not compare the old value (git's deletion of a corrupt ref).
    pub skip_old_check: bool,
}

/// Why one ref update failed. [`RefError::reason`] is the `ng` reason git reports,
/// `Display` the `error: …` line it prints first.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RefError {
    /// The ref's value is not the expected old value.
    #[error("cannot lock ref '{name}': is at {actual} but expected {expected}")]
    IncorrectOldValue {
        /// The ref.
        name: BString,
        /// Its value.
        actual: ObjectId,
        /// The value the client expected.
        expected: ObjectId,
    },
    /// A create of a ref that exists.
    #[error("cannot lock ref '{name}': reference already exists")]
    AlreadyExists {
        /// The ref.
        name: BString,
    },
    /// An update or delete (with an old value) of a ref that does not exist.
    #[error("cannot lock ref '{name}': unable to resolve reference '{name}'")]
    DoesNotExist {
        /// The ref.
        name: BString,
    },
    /// A directory/file conflict with an existing ref.
    #[error("cannot lock ref '{name}': '{existing}' exists; cannot create '{name}'")]
    NameConflict {
        /// The ref.
        name: BString,
        /// The ref in the way.
        existing: BString,
    },
    /// A directory/file conflict as the reftable backend words it (git's
    /// `refs_verify_refnames_available`, without the `cannot lock ref` prefix).
    #[error("'{existing}' exists; cannot create '{name}'")]
    NameUnavailable {
        /// The ref.
        name: BString,
        /// The ref in the way.
        existing: BString,
    },
    /// Two refs of the same push conflict with each other, as the reftable backend words it.
    #[error("cannot process '{name}' and '{other}' at the same time")]
    UnavailableInPush {
        /// The ref.
        name: BString,
        /// The other ref.
        other: BString,
    },
    /// Two refs of the same push conflict with each other.
    #[error("cannot lock ref '{name}': cannot process '{other}' and '{name}' at the same time")]
    ConflictInPush {
        /// The ref.
        name: BString,
        /// The other ref.
        other: BString,
    },
    /// A non-commit object written to a branch.
    #[error("trying to write non-commit object {new} to branch '{name}'")]
    NonCommitToBranch {
        /// The ref.
        name: BString,
        /// The object.
        new: ObjectId,
    },
    /// The store failed in another way.
    #[error("{message}")]
    Other {
        /// A one-line description.
        message: String,
    },
}

impl RefError {
    /// The reason for `ng <ref> <reason>`, git's `ref_transaction_error_msg`.
    pub fn reason(&self) -> &'static str {
        match self {
            RefError::IncorrectOldValue { .. } => "incorrect old value provided",
            RefError::AlreadyExists { .. } => "reference already exists",
            RefError::DoesNotExist { .. } => "reference does not exist",
            RefError::NameConflict { .. }
            | RefError::NameUnavailable { .. }
            | RefError::UnavailableInPush { .. }
            | RefError::ConflictInPush { .. } => "refname conflict",
            RefError::NonCommitToBranch { .. } => "invalid new value provided",
            RefError::Other { .. } => "failed to update ref",
        }
    }
}

/// Why a whole transaction failed.
#[derive(Debug, thiserror::Error)]
pub enum TransactionError {
    /// A ref of an atomic transaction failed.
    #[error(transparent)]
    Ref(#[from] RefError),
    /// The store failed as a whole.
    #[error("{0}")]
    Store(String),
    /// The reference-transaction hook refused in this state.
    #[error("in '{0}' phase, update aborted by the reference-transaction hook")]
    HookAborted(&'static str),
}

/// Called around a transaction with its state and its updates (git's `reference-transaction`
/// hook); returning `false` in `Preparing` or `Prepared` aborts the transaction.
pub type TransactionHook<'h> = dyn FnMut(TransactionState, &[RefUpdate]) -> bool + 'h;

/// git's files backend: `gix-ref` for reading, [`loose`] for small batches, [`packed`] for
/// large ones.
pub struct FilesStore {
    store: gix_ref::file::Store,
    git_dir: std::path::PathBuf,
    log: LogRefUpdates,
}

/// From this many refs in one batch on, they are written to `packed-refs` in one rewrite
/// (see [`packed`]) instead of one loose file each.
pub const PACKED_BATCH_THRESHOLD: usize = 100;

impl FilesStore {
    /// Open the store of the repository at `git_dir`.
    pub fn open(git_dir: &Path, log: LogRefUpdates) -> Self {
        let store = gix_ref::file::Store::at_opts(
            git_dir.to_owned(),
            gix_hash::Kind::Sha1,
            Default::default(),
        );
        FilesStore {
            store,
            git_dir: git_dir.to_owned(),
            log,
        }
    }

    fn resolve(&self, name: &BStr) -> Option<ObjectId> {
        let mut name: BString = name.to_owned();
        for _ in 0..5 {
            let r = self.store.try_find(name.as_bstr()).ok()??;
            match r.target {
                Target::Object(oid) => return Some(oid),
                Target::Symbolic(next) => name = next.as_bstr().to_owned(),
            }
        }
        None
    }
}

/// What the files backend's two batch writers ([`loose`], [`packed`]) need besides the updates.
#[derive(Clone, Copy)]
struct Batch<'a> {
    git_dir: &'a Path,
    log: LogRefUpdates,
    atomic: bool,
    /// The reflog identity.
    committer: &'a gix_actor::SignatureRef<'a>,
    objects: &'a gix_odb::Handle,
}

/// The indexes of the updates that have not failed, in order.
fn live(results: &[Result<(), RefError>]) -> Vec<usize> {
    let mut live = Vec::with_capacity(results.len());
    live.extend((0..results.len()).filter(|&i| results[i].is_ok()));
    live
}

/// Check every update with `check` against `current`: one result per update, or the first
/// refusal of an atomic batch.
fn check_all(
    updates: &[RefUpdate],
    current: &Refs,
    atomic: bool,
    check: fn(&RefUpdate, &Refs) -> Result<(), RefError>,
) -> Result<Vec<Result<(), RefError>>, TransactionError> {
    let results: Vec<Result<(), RefError>> = updates.iter().map(|u| check(u, current)).collect();
    if atomic && let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        return Err(e.clone().into());
    }
    Ok(results)
}

/// The compare-and-swap of one update, with git's messages: the ref `exists` (as a file or an
/// entry) with the value `current` (`None` when unreadable), and the update expects `u.old`.
fn check_old(u: &RefUpdate, exists: bool, current: Option<ObjectId>) -> Result<(), RefError> {
    if u.skip_old_check {
        return Ok(());
    }
    match (exists, current, u.old.is_null()) {
        (true, _, true) => Err(RefError::AlreadyExists {
            name: u.name.clone(),
        }),
        (false, _, false) | (true, None, false) => Err(RefError::DoesNotExist {
            name: u.name.clone(),
        }),
        (true, Some(actual), false) if actual != u.old => Err(RefError::IncorrectOldValue {
            name: u.name.clone(),
            actual,
            expected: u.old,
        }),
        _ => Ok(()),
    }
}

/// Check one update against the snapshot, with git's messages.
fn precheck(u: &RefUpdate, current: &Refs) -> Result<(), RefError> {
    let actual = current.get(&u.name);
    if u.skip_old_check {
        return Ok(());
    }
    check_old(u, actual.is_some(), actual)?;
    if u.new.is_null() || actual.is_some() {
        return Ok(());
    }
    // A new ref must not collide with an existing one as a file and a directory.
    let slashes = u
        .name
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .map(|(i, _)| i);
    for i in slashes.skip(1) {
        let prefix = &u.name[..i];
        if current.get(prefix).is_some() {
            return Err(RefError::NameConflict {
                name: u.name.clone(),
                existing: prefix.into(),
            });
        }
    }
    if let Some(below) = current.first_below(&u.name) {
        return Err(RefError::NameConflict {
            name: u.name.clone(),
            existing: below.to_owned(),
        });
    }
    Ok(())
}

impl RefStore for FilesStore {
    fn snapshot(&self) -> Result<Refs, String> {
        let platform = self.store.iter().map_err(|e| e.to_string())?;
        let mut entries = Vec::new();
        for r in platform.all().map_err(|e| e.to_string())? {
            let Ok(r) = r else { continue };
            if !r.name.as_bstr().starts_with(b"refs/") {
                continue;
            }
            match r.target {
                Target::Object(oid) => entries.push((r.name.as_bstr().to_owned(), oid)),
                Target::Symbolic(_) => {
                    if let Some(oid) = self.resolve(r.name.as_bstr()) {
                        entries.push((r.name.as_bstr().to_owned(), oid));
                    }
                }
            }
        }
        Ok(Refs::from_unsorted(entries))
    }

    fn symref_targets(&self, names: &[&[u8]]) -> Vec<Option<Option<BString>>> {
        let mut loose = LooseFiles::new(&self.git_dir);
        names
            .iter()
            .map(|n| {
                if loose.exists(n) {
                    self.symref_target(n)
                } else {
                    None
                }
            })
            .collect()
    }

    fn commit(
        &self,
        updates: &[RefUpdate],
        current: &Refs,
        atomic: bool,
        committer: &gix_actor::Signature,
        objects: &gix_odb::Handle,
        hook: &mut TransactionHook<'_>,
    ) -> Result<Vec<Result<(), RefError>>, TransactionError> {
        let _span = tracing::info_span!("ref_transaction", refs = updates.len()).entered();
        let mut results = check_all(updates, current, atomic, precheck)?;
        let mut time_buf = gix_date::parse::TimeBuf::default();
        let committer = committer.to_ref(&mut time_buf);
        let live = live(&results);
        if live.is_empty() {
            return Ok(results);
        }
        if !packed::announce(hook, TransactionState::Preparing, updates, &live) {
            packed::announce(hook, TransactionState::Aborted, updates, &live);
            return Err(TransactionError::HookAborted("preparing"));
        }
        let batch = Batch {
            git_dir: &self.git_dir,
            log: self.log,
            atomic,
            committer: &committer,
            objects,
        };
        if live.len() >= PACKED_BATCH_THRESHOLD {
            let done = packed::commit(&batch, updates, &mut results, hook)?;
            if done.is_ok() {
                return Ok(results);
            }
            // A symbolic ref is involved, or packed-refs.lock is held: one lock per ref, as git.
        }
        loose::commit(&batch, updates, &mut results, hook)?;
        Ok(results)
    }
}

impl FilesStore {
    /// If the loose file `name` is a symbolic ref: the name of the ref it finally points to
    /// (`None` inside when the chain is too long to resolve). Symbolic refs are always loose
    /// files.
    fn symref_target(&self, name: &[u8]) -> Option<Option<BString>> {
        let read = |n: &[u8]| -> Option<BString> {
            let content = std::fs::read(self.git_dir.join(n.to_path().ok()?)).ok()?;
            content
                .strip_prefix(b"ref: ")
                .map(|t| t.trim_end().as_bstr().to_owned())
        };
        if name.find(b"..").is_some() {
            return None;
        }
        let mut target = read(name)?;
        for _ in 0..5 {
            match read(&target) {
                Some(next) if next.find(b"..").is_none() => target = next,
                Some(_) => return Some(None),
                None => return Some(Some(target)),
            }
        }
        Some(None)
    }
}

/// Which ref names exist as loose files, answered from one directory listing per directory
/// asked about instead of one `open` per name (a symbolic ref is always a loose file, so a
/// push of 10,000 new names needs no file system call per name to know none is one).
pub struct LooseFiles {
    git_dir: std::path::PathBuf,
    dirs: std::collections::HashMap<Vec<u8>, Option<std::collections::HashSet<Vec<u8>>>>,
}

impl LooseFiles {
    /// For the repository at `git_dir`.
    pub fn new(git_dir: &Path) -> Self {
        LooseFiles {
            git_dir: git_dir.to_owned(),
            dirs: Default::default(),
        }
    }

    /// Whether `name` may be a loose file (it is listed in its directory).
    pub fn exists(&mut self, name: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let (dir, base) = match name.rfind_byte(b'/') {
            Some(i) => (&name[..i], &name[i + 1..]),
            None => (&[][..], name),
        };
        if let Some(listing) = self.dirs.get(dir) {
            return listing.as_ref().is_some_and(|l| l.contains(base));
        }
        let git_dir = &self.git_dir;
        let listing = self.dirs.entry(dir.to_vec()).or_insert_with(|| {
            let entries = std::fs::read_dir(git_dir.join(std::ffi::OsStr::from_bytes(dir))).ok()?;
            Some(
                entries
                    .flatten()
                    .map(|e| e.file_name().into_encoded_bytes())
                    .collect(),
            )
        });
        listing.as_ref().is_some_and(|l| l.contains(base))
    }
}

/// The ref store of another repository (an alternate), its format found from its directory,
/// read-only use.
pub fn open_other(git_dir: &Path) -> Box<dyn RefStore> {
    let format = if git_dir.join("reftable").join("tables.list").is_file() {
        RefFormat::Reftable
    } else {
        RefFormat::Files
    };
    open(git_dir, format, LogRefUpdates::Never, Default::default())
}
