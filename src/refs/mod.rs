//! The ref store: [`RefStore`], the one interface a push uses to read the repository's refs and
//! write its updates as one [`transaction`] of typed [`Change`]s, in two steps
//! (`store.transaction(options).prepare(updates, observer)?` gives a [`Prepared`] that holds the
//! locks; `.commit()` writes, dropping it aborts), with two backends: [`reftable`] (a reftable stack, one
//! new table per transaction) and [`FilesStore`], git's files backend (loose refs + `packed-refs`, git's `.lock`
//! protocol): small batches through [`loose`] (git's transaction, one `<ref>.lock` and loose file
//! per ref; `packed-refs.lock` only for deletions), batches of [`PACKED_BATCH_THRESHOLD`] refs or
//! more through [`packed`], one `packed-refs` rewrite without a lock file per ref. Refs are read
//! through `gix-ref`.
//!
//! A non-atomic push is one batch in which each ref may fail on its own: the batch is checked
//! against the refs read at the start (giving git's per-ref messages), then again under the
//! locks; a ref that changed in between, or whose lock is held, drops out of the batch with its
//! own error. An atomic push fails as a whole. The transaction's states are told to a
//! [`TransactionObserver`] (git's `reference-transaction` hook, implemented by the hooks).

use std::path::Path;

use gix_hash::ObjectId;
use gix_object::bstr::{BStr, BString, ByteSlice};
use gix_ref::Target;

use crate::repo::config::{LockTimeouts, LogRefUpdates};

mod loose;
mod packed;
mod reftable;
pub mod transaction;

pub(crate) use packed::Peeler;
pub use packed::{LockError, PackedReadError, PackedWriteError};
pub use reftable::ReftableStore;
pub use transaction::{
    Atomicity, Options, Prepared, Transaction, TransactionObserver, TransactionState,
};

pub use crate::repo::RefFormat;

/// The ref store of `repo`, as its format and configuration say.
pub fn of_repository(repo: &crate::repo::Repository) -> Box<dyn RefStore> {
    open(
        &repo.git_dir,
        repo.ref_format,
        repo.object_format,
        repo.config.storage.log_ref_updates,
        crate::reftable::WriteOptions {
            fsync: repo.config.durability,
            ..repo.config.storage.reftable
        },
        repo.config.storage.lock_timeouts,
    )
}

/// A repository's ref storage, as a push uses it: one snapshot of the refs, the symbolic refs
/// among the pushed names, and one transaction for the push's updates.
pub trait RefStore {
    /// Every ref under `refs/`; symbolic refs resolve to their target's value, broken ones are
    /// left out.
    fn snapshot(&self) -> Result<Refs, SnapshotError>;

    /// For each of `names`: `None` if it is not a symbolic ref, else the name of the ref it
    /// finally points to (`Some(None)` when the chain is broken or too long).
    fn symref_targets(&self, names: &[&[u8]]) -> Vec<Option<Option<BString>>>;

    /// Begin a transaction: [`Transaction::prepare`] locks and checks its updates, and
    /// [`Prepared::commit`] writes them (see [`transaction`]).
    fn transaction<'a>(&'a self, options: Options<'a>) -> Transaction<'a>;
}

/// Why the refs could not be read, in the store's words.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// `packed-refs` could not be opened.
    #[error(transparent)]
    Packed(#[from] gix_error::Error),
    /// The loose refs could not be listed.
    #[error(transparent)]
    Loose(#[from] std::io::Error),
    /// The reftable stack could not be read.
    #[error(transparent)]
    Reftable(#[from] crate::reftable::Error),
    /// `packed-refs` could not be read.
    #[error(transparent)]
    PackedRefs(#[from] PackedReadError),
}

/// The ref store of the repository at `git_dir`; both backends make what they write durable as
/// `reftable.fsync` (`core.fsync`) says; the files backend waits for held locks as `locks` says,
/// the reftable backend as `reftable.lock_timeout` says.
pub fn open(
    git_dir: &Path,
    format: RefFormat,
    object_format: gix_hash::Kind,
    log: LogRefUpdates,
    reftable: crate::reftable::WriteOptions,
    locks: LockTimeouts,
) -> Box<dyn RefStore> {
    match format {
        RefFormat::Files => Box::new(
            FilesStore::open(git_dir, object_format, log)
                .with_fsync(reftable.fsync)
                .with_lock_timeouts(locks),
        ),
        RefFormat::Reftable => Box::new(ReftableStore::open(
            git_dir,
            log,
            crate::reftable::WriteOptions {
                hash: object_format,
                ..reftable
            },
        )),
    }
}

/// A snapshot of the refs under `refs/`, sorted by name, symbolic refs resolved to the object
/// id they point to.
#[derive(Debug, Default, Clone)]
pub struct Refs {
    /// The refs read one by one, sorted by name: the loose files (symbolic ones resolved), or
    /// every ref of a reftable stack.
    entries: Vec<(BString, ObjectId)>,
    /// `packed-refs`, searched where it is rather than copied into `entries`.
    packed: Option<std::sync::Arc<PackedRefs>>,
    /// Which state of the store the refs were read from, when the store can tell (the
    /// reftable stack's table names): a transaction on an unchanged store need not check again.
    version: Option<Vec<String>>,
}

/// A `packed-refs` file as a snapshot sees it: its entries under `refs/` with valid names,
/// except those a loose file of the same name (of any kind, a broken one too) shadows.
struct PackedRefs {
    file: packed::Packed,
    /// The loose refs' names that `file` has too, sorted.
    shadowed: Vec<Vec<u8>>,
}

impl std::fmt::Debug for PackedRefs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedRefs")
            .field("bytes", &self.file.buf.len())
            .field("shadowed", &self.shadowed.len())
            .finish()
    }
}

impl PackedRefs {
    fn visible(&self, name: &[u8]) -> bool {
        name.starts_with(b"refs/")
            && gix_validate::reference::name(name.as_bstr()).is_ok()
            && self
                .shadowed
                .binary_search_by(|s| s.as_slice().cmp(name))
                .is_err()
    }

    /// The visible entries in name order; a name given twice, as a corrupt file can, keeps its
    /// first value.
    fn iter(&self) -> impl Iterator<Item = (&[u8], ObjectId)> {
        let mut last: Option<&[u8]> = None;
        self.file.iter().filter(move |(name, _)| {
            let again = last == Some(*name);
            last = Some(name);
            !again && self.visible(name)
        })
    }
}

impl Refs {
    /// Build from `(name, id)` pairs in any order.
    pub fn from_unsorted(mut entries: Vec<(BString, ObjectId)>) -> Self {
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Refs {
            entries,
            packed: None,
            version: None,
        }
    }

    /// Whether there are no refs.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The refs in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], ObjectId)> {
        let mut read = self
            .entries
            .iter()
            .map(|(n, o)| (n.as_slice(), *o))
            .peekable();
        let mut packed = self.packed.iter().flat_map(|p| p.iter()).peekable();
        std::iter::from_fn(move || match (read.peek(), packed.peek()) {
            (Some(r), Some(p)) if p.0 < r.0 => packed.next(),
            (Some(_), _) => read.next(),
            (None, _) => packed.next(),
        })
    }

    /// The value of `name`, if it exists.
    pub fn get(&self, name: &[u8]) -> Option<ObjectId> {
        match self
            .entries
            .binary_search_by(|(n, _)| n.as_slice().cmp(name))
        {
            Ok(i) => Some(self.entries[i].1),
            Err(_) => self
                .packed
                .as_ref()
                .filter(|p| p.visible(name))
                .and_then(|p| p.file.get(name))
                .map(|e| e.oid),
        }
    }

    /// The name of an existing ref that is `name` + `/…`, if any.
    pub fn first_below(&self, name: &[u8]) -> Option<&BStr> {
        let i = self
            .entries
            .partition_point(|(n, _)| packed::cmp_below(n, name).is_lt());
        let read = self
            .entries
            .get(i)
            .filter(|(n, _)| packed::is_below(n, name))
            .map(|(n, _)| n.as_slice());
        let packed = self
            .packed
            .as_ref()
            .and_then(|p| p.file.first_below(name, |n| !p.visible(n)));
        match (read, packed) {
            (Some(r), Some(p)) => Some(r.min(p)),
            (r, p) => r.or(p),
        }
        .map(ByteSlice::as_bstr)
    }
}

/// One ref update of a push, ready to commit: the ref and what happens to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    /// The full ref name.
    pub name: BString,
    /// What happens to the ref.
    pub change: Change,
}

/// What a [`RefUpdate`] does to its ref, with the value the ref must have before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Create the ref with the value `new`; it must not exist.
    Create {
        /// The value of the new ref.
        new: ObjectId,
    },
    /// Set the ref to `new`.
    Update {
        /// What the ref must hold before.
        old: Expected,
        /// The new value.
        new: ObjectId,
    },
    /// Delete the ref.
    Delete {
        /// What the ref must hold before.
        old: Expected,
    },
}

/// The value an [`Change::Update`] or [`Change::Delete`] expects its ref to have, compared under
/// the ref's lock (git's compare-and-swap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// The ref must exist and hold this value.
    MustBe(ObjectId),
    /// No check: whatever the ref holds, or whether it exists at all. git's receive-pack
    /// deletes this way when the client's old value is zero or names an object it does not
    /// have (the deletion of a corrupt ref); the `reference-transaction` hook shows the zero id.
    Any,
}

impl RefUpdate {
    /// The old value as git shows it (the `reference-transaction` hook's first column): the
    /// expected value, zero (of the repository's object format `kind`) for a create and for
    /// [`Expected::Any`].
    pub fn old_id(&self, kind: gix_hash::Kind) -> ObjectId {
        match self.expected() {
            Some(Expected::MustBe(id)) => id,
            _ => ObjectId::null(kind),
        }
    }

    /// The new value as git shows it: zero (of the repository's object format `kind`) for a
    /// delete.
    pub fn new_id(&self, kind: gix_hash::Kind) -> ObjectId {
        match self.change {
            Change::Create { new } | Change::Update { new, .. } => new,
            Change::Delete { .. } => ObjectId::null(kind),
        }
    }

    /// What the ref must hold before: `None` for a create (it must not exist).
    pub fn expected(&self) -> Option<Expected> {
        match self.change {
            Change::Create { .. } => None,
            Change::Update { old, .. } | Change::Delete { old } => Some(old),
        }
    }

    /// Whether the ref is deleted.
    pub fn is_delete(&self) -> bool {
        matches!(self.change, Change::Delete { .. })
    }
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
    /// The commit point of a replicated push (a cluster's [`crate::receive::CommitGate`])
    /// refused the update, or took it without enough copies: its text, in the cluster's terms
    /// (`cluster: …`), is also the `ng` reason.
    #[error("{message}")]
    Gate {
        /// One line, saying whether the update landed and what to do.
        message: String,
    },
    /// The ref's lock could not be taken: another transaction holds it (or a crashed writer
    /// left it), or it cannot be created. git's words name the lock file's path.
    #[error("cannot lock ref '{name}': {lock}")]
    Locked {
        /// The ref.
        name: BString,
        /// Why, with the lock's path.
        lock: LockError,
    },
    /// `packed-refs.lock` could not be taken, which a deletion needs (git's words, with the
    /// path).
    #[error("{0}")]
    PackedRefsLocked(LockError),
    /// The store failed in another way.
    #[error("{message}")]
    Other {
        /// A one-line description.
        message: String,
    },
}

/// One update's result in a transaction: the error is boxed so that the result of an update
/// that went through, the usual case, costs 8 bytes instead of a [`RefError`]'s 96 (one per
/// ref of a push: a 100,000-ref push holds two such vectors).
pub type RefResult = Result<(), Box<RefError>>;

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
            RefError::Locked { .. } | RefError::PackedRefsLocked(_) | RefError::Other { .. } => {
                "failed to update ref"
            }
            // The text goes out as `Reason::Gate` instead; this is git's for the same place.
            RefError::Gate { .. } => "failed to update ref",
        }
    }

    /// The same error about the ref `to` instead (a conflict found for one name that holds
    /// for its neighbours too).
    pub(crate) fn renamed(mut self, to: &BString) -> RefError {
        match &mut self {
            RefError::IncorrectOldValue { name, .. }
            | RefError::AlreadyExists { name }
            | RefError::DoesNotExist { name }
            | RefError::NameConflict { name, .. }
            | RefError::NameUnavailable { name, .. }
            | RefError::UnavailableInPush { name, .. }
            | RefError::ConflictInPush { name, .. }
            | RefError::NonCommitToBranch { name, .. }
            | RefError::Locked { name, .. } => name.clone_from(to),
            RefError::Gate { .. } | RefError::PackedRefsLocked(_) | RefError::Other { .. } => {}
        }
        self
    }
}

/// Why a whole transaction failed: at its first step or at its second.
#[derive(Debug, thiserror::Error)]
pub enum TransactionError {
    /// It could not be prepared; nothing was written.
    #[error(transparent)]
    Prepare(#[from] transaction::prepare::Error),
    /// It could not be committed.
    #[error(transparent)]
    Commit(#[from] transaction::commit::Error),
}

impl TransactionError {
    /// The state in which the observer (git's `reference-transaction` hook) refused, if that
    /// is why the transaction failed.
    pub fn hook_aborted(&self) -> Option<TransactionState> {
        match self {
            TransactionError::Prepare(transaction::prepare::Error::HookAborted(state)) => {
                Some(*state)
            }
            _ => None,
        }
    }
}

/// git's files backend: `gix-ref` for reading, [`loose`] for small batches, [`packed`] for
/// large ones.
pub struct FilesStore {
    store: gix_ref::file::Store,
    git_dir: std::path::PathBuf,
    object_format: gix_hash::Kind,
    log: LogRefUpdates,
    fsync: crate::fsync::Durability,
    locks: LockTimeouts,
}

/// From this many refs in one batch on, they are written to `packed-refs` in one rewrite
/// (see [`packed`]) instead of one loose file each.
pub const PACKED_BATCH_THRESHOLD: usize = 100;

impl FilesStore {
    /// Open the store of the repository at `git_dir`, whose object format is `object_format`.
    pub fn open(git_dir: &Path, object_format: gix_hash::Kind, log: LogRefUpdates) -> Self {
        let store =
            gix_ref::file::Store::at_opts(git_dir.to_owned(), object_format, Default::default());
        FilesStore {
            store,
            git_dir: git_dir.to_owned(),
            object_format,
            log,
            fsync: Default::default(),
            locks: Default::default(),
        }
    }

    /// Wait for locks held by others as `locks` says (`core.filesRefLockTimeout`,
    /// `core.packedRefsTimeout`; git's defaults otherwise).
    pub fn with_lock_timeouts(mut self, locks: LockTimeouts) -> Self {
        self.locks = locks;
        self
    }

    /// Make ref lock files and `packed-refs` durable as `fsync` says (`core.fsync`'s
    /// `reference`; git's default syncs neither) before they are renamed into place.
    pub fn with_fsync(mut self, fsync: crate::fsync::Durability) -> Self {
        self.fsync = fsync;
        self
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
    /// The repository's object format.
    object_format: gix_hash::Kind,
    log: LogRefUpdates,
    atomic: bool,
    /// The reflog identity.
    committer: &'a gix_actor::Signature,
    objects: &'a gix_odb::Handle,
    /// `core.fsync`: lock files and `packed-refs.new` are synced before their rename.
    fsync: crate::fsync::Durability,
    /// How long to wait for a lock someone else holds.
    locks: LockTimeouts,
}

impl FilesStore {
    /// The files backend's half of [`Transaction::prepare`]: lock and check the live updates
    /// (`results[i].is_ok()`), a large batch as one `packed-refs` rewrite unless it cannot be
    /// ([`packed::Fallback`]), else one lock per ref.
    fn lock<'a>(
        &'a self,
        updates: &'a [RefUpdate],
        results: &mut [RefResult],
        options: &Options<'a>,
    ) -> Result<transaction::Locked<'a>, transaction::Failed<transaction::prepare::Error>> {
        let batch = Batch {
            git_dir: &self.git_dir,
            object_format: self.object_format,
            log: self.log,
            atomic: options.atomic(),
            committer: options.committer,
            objects: options.objects,
            fsync: self.fsync,
            locks: self.locks,
        };
        // `packed-refs` as the push's snapshot read it: taken again while it is the same file.
        let read = options.current.packed.as_ref().map(|p| &p.file);
        // Else (`packed::Fallback`) a symbolic ref is involved, or packed-refs.lock is held: one
        // lock per ref, as git.
        if results.iter().filter(|r| r.is_ok()).count() >= PACKED_BATCH_THRESHOLD
            && let Ok(locked) = packed::lock(batch, updates, results, read)?
        {
            return Ok(transaction::Locked::Packed(locked));
        }
        loose::lock(batch, updates, results, read).map(transaction::Locked::Loose)
    }
}

/// How git's files backend words a file/directory conflict between `name` and the ref
/// `existing`: met while taking `name`'s lock, a loose file where a directory must go or loose
/// refs below `name` (`cannot lock ref '<name>': …`, [`RefError::NameConflict`]); else met
/// afterwards in `packed-refs` (`'<existing>' exists; cannot create '<name>'`, git master's
/// `refs_verify_refnames_available`, [`RefError::NameUnavailable`]).
fn files_name_conflict(git_dir: &Path, name: BString, existing: BString) -> RefError {
    let below =
        existing.len() > name.len() && existing.starts_with(&name) && existing[name.len()] == b'/';
    let loose = if below {
        packed::loose_below(git_dir, &name).0.is_some()
    } else {
        git_dir.join(packed::path_of(&existing)).is_file()
    };
    if loose {
        RefError::NameConflict { name, existing }
    } else {
        RefError::NameUnavailable { name, existing }
    }
}

/// The compare-and-swap of one update, with git's messages: the ref `exists` (as a file or an
/// entry) with the value `current` (`None` when unreadable), and the update expects what
/// [`RefUpdate::expected`] says.
fn check_old(u: &RefUpdate, exists: bool, current: Option<ObjectId>) -> Result<(), RefError> {
    match (u.expected(), exists, current) {
        (Some(Expected::Any), _, _) | (None, false, _) => Ok(()),
        (None, true, _) => Err(RefError::AlreadyExists {
            name: u.name.clone(),
        }),
        (Some(Expected::MustBe(_)), false, _) | (Some(Expected::MustBe(_)), true, None) => {
            Err(RefError::DoesNotExist {
                name: u.name.clone(),
            })
        }
        (Some(Expected::MustBe(expected)), true, Some(actual)) if actual != expected => {
            Err(RefError::IncorrectOldValue {
                name: u.name.clone(),
                actual,
                expected,
            })
        }
        (Some(Expected::MustBe(_)), true, Some(_)) => Ok(()),
    }
}

/// Check one update against the snapshot, with git's messages.
fn precheck(u: &RefUpdate, current: &Refs) -> Result<(), RefError> {
    let actual = current.get(&u.name);
    if u.expected() != Some(Expected::Any) {
        check_old(u, actual.is_some(), actual)?;
    }
    if actual.is_some() {
        return Ok(());
    }
    // A new ref, or the deletion of one that is not there (git locks its name all the same),
    // must not collide with an existing one as a file and a directory.
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

impl FilesStore {
    /// [`precheck`] with the files backend's wording for name conflicts
    /// ([`files_name_conflict`]).
    fn precheck(&self, u: &RefUpdate, refs: &Refs) -> Result<(), RefError> {
        precheck(u, refs).map_err(|e| match e {
            RefError::NameConflict { name, existing } => {
                files_name_conflict(&self.git_dir, name, existing)
            }
            e => e,
        })
    }
}

impl RefStore for FilesStore {
    /// `packed-refs` and the loose files under `refs/` read directly, as git's files backend
    /// reads them (a loose file wins over its `packed-refs` entry; a broken one hides it): with
    /// one `open` and `read` per loose ref, which matters when every push of many at once
    /// reads every ref twice (the advertisement and the push itself, issue 16).
    fn snapshot(&self) -> Result<Refs, SnapshotError> {
        // The loose refs first, then `packed-refs`, as git's `files_ref_iterator_begin`: a
        // concurrent `pack-refs` writes `packed-refs` before it removes the loose files it
        // packed, so a ref it moves is seen in one place or the other, never in neither.
        let mut loose = Vec::new();
        loose::scan(&self.git_dir, &mut loose);
        let file = packed::Packed::read(&self.git_dir.join("packed-refs"))?;
        loose.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut entries: Vec<(BString, ObjectId)> = Vec::with_capacity(loose.len());
        let (mut symbolic, mut shadowed) = (Vec::new(), Vec::new());
        for (name, value) in loose {
            if file.get(&name).is_some() {
                shadowed.push(name.clone());
            }
            match value {
                packed::Loose::Object(oid) => entries.push((BString::from(name), oid)),
                packed::Loose::Symbolic => symbolic.push(BString::from(name)),
                packed::Loose::Broken => {}
            }
        }
        let packed = file
            .entries()
            .next()
            .is_some()
            .then(|| std::sync::Arc::new(PackedRefs { file, shadowed }));
        // A symbolic ref resolves through the loose refs and `packed-refs` alike.
        let resolved: Vec<_> = symbolic
            .into_iter()
            .filter_map(|name| self.resolve(name.as_bstr()).map(|oid| (name, oid)))
            .collect();
        let mut refs = Refs::from_unsorted(entries);
        if !resolved.is_empty() {
            refs.entries.extend(resolved);
            refs.entries.sort_by(|a, b| a.0.cmp(&b.0));
        }
        refs.packed = packed;
        Ok(refs)
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

    fn transaction<'a>(&'a self, options: Options<'a>) -> Transaction<'a> {
        Transaction {
            store: transaction::Store::Files(self),
            options,
        }
    }
}

/// Here rather than beside the backend, so that `reftable` need not import the transaction that
/// calls it; the reading is the backend's own (inherent methods of the same names).
impl RefStore for ReftableStore {
    fn snapshot(&self) -> Result<Refs, SnapshotError> {
        ReftableStore::snapshot(self)
    }

    fn symref_targets(&self, names: &[&[u8]]) -> Vec<Option<Option<BString>>> {
        ReftableStore::symref_targets(self, names)
    }

    fn transaction<'a>(&'a self, options: Options<'a>) -> Transaction<'a> {
        Transaction {
            store: transaction::Store::Reftable(self),
            options,
        }
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
    dirs: foldhash::HashMap<Vec<u8>, Option<foldhash::HashSet<Vec<u8>>>>,
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
/// read-only use, with the object format `object_format` (an alternate shares it).
pub fn open_other(git_dir: &Path, object_format: gix_hash::Kind) -> Box<dyn RefStore> {
    let format = if git_dir.join("reftable").join("tables.list").is_file() {
        RefFormat::Reftable
    } else {
        RefFormat::Files
    };
    open(
        git_dir,
        format,
        object_format,
        LogRefUpdates::Never,
        Default::default(),
        Default::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files snapshot as git lists the same refs: a loose file wins over its `packed-refs`
    /// entry, a broken loose file hides it, a symbolic ref resolves to its target's value (a
    /// dangling one is left out), and `*.lock` files, dot files and names git refuses are not
    /// refs.
    #[test]
    fn files_snapshot_lists_what_git_lists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let git_dir = dir.path().join("r.git");
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(&git_dir)
                .args(args)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .expect("git");
            assert!(out.status.success(), "git {args:?}: {out:?}");
            String::from_utf8(out.stdout).expect("utf-8")
        };
        let status = std::process::Command::new("git")
            .args(["init", "-q", "--bare", "--ref-format=files"])
            .arg(&git_dir)
            .status()
            .expect("git init");
        assert!(status.success());
        let object = |kind: &str, s: &str| {
            let mut c = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(&git_dir)
                .args(["hash-object", "-t", kind, "-w", "--stdin"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("hash-object");
            use std::io::Write;
            c.stdin
                .take()
                .expect("stdin")
                .write_all(s.as_bytes())
                .expect("write");
            let out = c.wait_with_output().expect("wait");
            String::from_utf8(out.stdout)
                .expect("utf-8")
                .trim()
                .to_owned()
        };
        let tree = object("tree", "");
        let commit = |msg: &str| {
            let body =
                format!("tree {tree}\nauthor a <a> 0 +0000\ncommitter a <a> 0 +0000\n\n{msg}\n");
            object("commit", &body)
        };
        let (a, b) = (commit("a"), commit("b"));
        for (name, value) in [
            ("refs/heads/packed", &a),
            ("refs/heads/both", &a),
            ("refs/heads/hidden", &a),
            ("refs/tags/t/deep", &a),
        ] {
            git(&["update-ref", name, value]);
        }
        git(&["pack-refs", "--all"]);
        git(&["update-ref", "refs/heads/both", &b]);
        git(&["update-ref", "refs/heads/loose/one", &b]);
        git(&["symbolic-ref", "refs/heads/sym", "refs/heads/both"]);
        git(&["symbolic-ref", "refs/heads/dangling", "refs/heads/nothing"]);
        let heads = git_dir.join("refs/heads");
        std::fs::write(heads.join("hidden"), "not an id\n").expect("write");
        std::fs::write(heads.join("x.lock"), format!("{b}\n")).expect("write");
        std::fs::write(heads.join(".dot"), format!("{b}\n")).expect("write");
        std::fs::write(heads.join("bad..name"), format!("{b}\n")).expect("write");

        let store = FilesStore::open(&git_dir, gix_hash::Kind::Sha1, LogRefUpdates::Never);
        let refs = store.snapshot().expect("snapshot");
        let ours: String = refs
            .iter()
            .map(|(n, o)| format!("{o} {}\n", n.as_bstr()))
            .collect();
        let theirs = git(&["for-each-ref", "--format=%(objectname) %(refname)"]);
        assert_eq!(ours, theirs);
        assert!(
            ours.contains("refs/heads/sym") && !ours.contains("hidden"),
            "{ours}"
        );
        // Each ref is found by name, from the loose files or `packed-refs`, as it is listed.
        for line in theirs.lines() {
            let (id, name) = line.split_once(' ').expect("listed");
            assert_eq!(
                refs.get(name.as_bytes()).map(|o| o.to_string()),
                Some(id.into())
            );
        }
        let (a, b) = (
            ObjectId::from_hex(a.as_bytes()),
            ObjectId::from_hex(b.as_bytes()),
        );
        assert_eq!(refs.get(b"refs/heads/packed"), a.ok());
        assert_eq!(refs.get(b"refs/heads/both"), b.ok(), "the loose file wins");
        assert_eq!(
            refs.get(b"refs/heads/hidden"),
            None,
            "a broken loose file hides"
        );
        let below = |n: &str| refs.first_below(n.as_bytes()).map(|b| b.to_string());
        assert_eq!(below("refs/tags/t").as_deref(), Some("refs/tags/t/deep"));
        assert_eq!(
            below("refs/heads/loose").as_deref(),
            Some("refs/heads/loose/one")
        );
        assert_eq!(below("refs/heads").as_deref(), Some("refs/heads/both"));
        assert_eq!(below("refs/heads/both"), None);
    }
}
