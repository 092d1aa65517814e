//! Pack ingestion into a quarantine.
//!
//! The pack is indexed with `gix-pack`'s machinery (parallel delta resolution, thin packs
//! completed from the repository's objects; [`crate::objects::pack_write`], which gives the
//! pack's pages back as they are resolved and takes the links of its commits, trees and tags
//! for the connectivity check on the way) into `objects/tmp_objdir-incoming-XXXXXX/pack`, a
//! directory that sees the
//! repository's objects through `info/alternates`. Nothing in it is visible to the repository
//! until [`Quarantine::migrate`] moves the pack into `objects/pack`; dropping an unmigrated
//! quarantine removes it. A crash leaves a `tmp_objdir-*` directory, which `git prune` removes,
//! as with git.
//!
//! With `receive.fsckObjects`, git's `--strict` checks run over the indexed pack before it is
//! kept ([`crate::objects::strict`]).

use std::io::{self, BufRead, Read};
use std::path::{Path, PathBuf};
use crate::objects::pending_bases::PendingBases;
use crate::objects::pack_resolve::KeptObject;

/// git's `receive.unpackLimit` default: a pack of fewer objects is exploded into loose objects
/// (git's `unpack-objects`), a larger one is kept as a pack (git's `index-pack`).
pub const UNPACK_LIMIT: u32 = 100;

/// Why the pack was not accepted; `Display` is the `unpack <status>` git reports.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The stream ended before 12 header bytes.
    #[error("eof before pack header was fully read")]
    HeaderEof,
    /// The stream does not start with `PACK`.
    #[error("protocol error (pack signature mismatch detected)")]
    SignatureMismatch,
    /// A pack version other than 2 or 3.
    #[error("protocol error (pack version unsupported)")]
    VersionUnsupported,
    /// The quarantine could not be created.
    #[error("unable to start object transaction")]
    Quarantine(#[source] io::Error),
    /// Indexing failed; `detail` is what the client sees on band 2 as `fatal: …`.
    #[error("{step} abnormal exit")]
    Failed {
        /// `unpack-objects` or `index-pack`, as git would have run.
        step: &'static str,
        /// What went wrong, if git's child died saying so (unpack-objects reports a broken
        /// entry with `error:` lines and exits).
        detail: Option<String>,
        /// Whole lines (`error: …`, `warning: …`) printed before the `fatal:` line: fsck's
        /// findings, zlib's complaint.
        messages: Vec<String>,
    },
    /// A thin pack's delta base is neither in the pack nor in the repository (git's
    /// `unresolved deltas`): the repository lacks an object the client took it to have.
    #[error("{step} abnormal exit")]
    BaseMissing {
        /// `unpack-objects` or `index-pack`, as git would have run.
        step: &'static str,
        /// git's words, for band 2 as `fatal: …`.
        detail: String,
    },
}

impl UnpackError {
    /// The line git's child process would have printed, if any.
    pub fn detail(&self) -> Option<&str> {
        match self {
            UnpackError::Failed { detail, .. } => detail.as_deref(),
            UnpackError::BaseMissing { detail, .. } => Some(detail),
            _ => None,
        }
    }

    /// Whether the pack needed an object the repository does not have (a thin pack's base).
    pub fn base_missing(&self) -> bool {
        matches!(self, UnpackError::BaseMissing { .. })
    }

    /// The lines git's child process printed before dying (without newlines).
    pub fn messages(&self) -> &[String] {
        match self {
            UnpackError::Failed { messages, .. } => messages,
            _ => &[],
        }
    }
}

/// Move `from` to `to` unless a file is at `to` already; whether it moved. One
/// `renameat2(RENAME_NOREPLACE)` (where a `stat` of `to` and a `rename` were two system calls
/// an object); a file system without it (`EINVAL`) gets the `stat` and the `rename`, and so does
/// a `to` that is a dangling symbolic link (replaced, as before).
fn rename_unless_present(from: &Path, to: &Path) -> io::Result<bool> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    use rustix::io::Errno;
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => match to.exists() {
            true => Ok(false),
            false => std::fs::rename(from, to).map(|()| true),
        },
        Err(e) => Err(e.into()),
    }
}

/// Why [`Quarantine::migrate`] moved nothing, or not everything, in.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The list of incomplete objects could not be grown (nothing was moved).
    #[error(transparent)]
    Incomplete(#[from] crate::objects::incomplete::Error),
    /// A move, a directory or a sync failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// A quarantine directory for the objects of one push.
#[derive(Debug)]
pub struct Quarantine {
    dir: PathBuf,
    migrated: bool,
    /// `core.sharedRepository`, for the directories [`Quarantine::migrate`] creates.
    shared: crate::objects::pack_files::SharedRepository,
    /// Whether [`Quarantine::migrate`] syncs the directories it moves objects into.
    durability: crate::fsync::Durability,
    /// The loose objects the pack was unpacked into, each after the ones it links to
    /// ([`crate::objects::move_order`]): the order [`Quarantine::migrate`] moves them in.
    loose: Vec<gix_hash::ObjectId>,
    /// The objects of the push not known to be complete, listed in the repository before any
    /// object moves in ([`crate::objects::incomplete`]).
    incomplete: crate::objects::incomplete::Found,
    /// The repository's git directory (its `shallow` file), for settling the files dead pushes
    /// left ([`crate::objects::incomplete::reap`]) when the list has no room for this push.
    git_dir: Option<PathBuf>,
}

/// What [`Quarantine::migrate`] leaves for after the ref update.
#[derive(Debug)]
pub struct Migrated {
    /// The `.keep` files that protect the migrated pack, to delete after the ref update.
    pub keeps: Vec<PathBuf>,
    /// The push's commits that need new shallow roots, listed until the ref update recorded
    /// them or not, and (with directories synced) the loose objects that moved in
    /// ([`crate::objects::incomplete::Pending::settle`]).
    pub pending: Option<crate::objects::incomplete::Pending>,
}

impl Quarantine {
    /// Create `objects/tmp_objdir-incoming-XXXXXX` with a `pack/` directory and an
    /// `info/alternates` naming the repository's objects.
    pub fn create(objects_dir: &Path) -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("tmp_objdir-incoming-")
            .tempdir_in(objects_dir)?
            .keep();
        let q = Quarantine {
            dir,
            migrated: false,
            shared: Default::default(),
            durability: Default::default(),
            loose: Vec::new(),
            incomplete: Default::default(),
            git_dir: None,
        };
        std::fs::create_dir(q.pack_dir())?;
        std::fs::create_dir(q.dir.join("info"))?;
        let mut alt = Vec::new();
        for dir in std::iter::once(objects_dir.to_owned()).chain(alternates_of(objects_dir)) {
            alt.extend_from_slice(dir.as_os_str().as_encoded_bytes());
            alt.push(b'\n');
        }
        std::fs::write(q.dir.join("info/alternates"), alt)?;
        Ok(q)
    }

    /// Give the directories [`Quarantine::migrate`] creates in the repository the permissions
    /// `core.sharedRepository` asks for (git's `adjust_shared_perm`).
    pub fn with_shared_repository(mut self, shared: crate::objects::pack_files::SharedRepository) -> Self {
        self.shared = shared;
        self
    }

    /// The repository's git directory, whose `shallow` file says which files of dead pushes
    /// are settled ([`Quarantine::migrate`] reaps them when the list has no room for this push).
    pub fn with_git_dir(mut self, git_dir: &Path) -> Self {
        self.git_dir = Some(git_dir.to_owned());
        self
    }

    /// Sync the directories [`Quarantine::migrate`] moves objects into after the moves, as
    /// `durability` says ([`crate::fsync::Durability::sync_dir`]; git syncs none).
    pub fn with_durability(mut self, durability: crate::fsync::Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Create `dir` (and its parents) unless it exists, with `core.sharedRepository`'s
    /// permissions; whether it was created.
    fn create_shared_dir(&self, dir: &Path) -> io::Result<bool> {
        use std::os::unix::fs::PermissionsExt;
        // One `mkdir` whether or not it is there (a `stat` first was a second call for each
        // new fan-out directory). Something else than a directory in the way fails the move
        // into it.
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::create_dir_all(dir)?,
            Err(e) => return Err(e),
        }
        if self.shared != crate::objects::pack_files::SharedRepository::Umask {
            let mode = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
            let mode = self.shared.adjust_dir(mode);
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
        }
        Ok(true)
    }

    /// Have [`Quarantine::migrate`] list what of the push the connectivity check did not find
    /// complete ([`crate::objects::connectivity::Check::incomplete`]) in the repository's
    /// [`crate::objects::incomplete`] list (and the push's own file, for commits that need a
    /// shallow root) before it moves anything in.
    pub fn set_incomplete(&mut self, found: crate::objects::incomplete::Found) {
        self.incomplete = found;
    }

    /// The quarantine's object directory (`GIT_QUARANTINE_PATH`).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn pack_dir(&self) -> PathBuf {
        self.dir.join("pack")
    }

    /// Every file under the quarantine's fan-out directories (`xx/…`): its loose objects, the
    /// unpacked pack's and any a hook wrote, and whatever else a hook left there.
    fn loose_files(&self) -> io::Result<Vec<LooseFile>> {
        let mut files = Vec::with_capacity(self.loose.len());
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Ok(dir) = entry.file_name().into_string() else {
                continue;
            };
            // Two lowercase hex digits, as git names them (`from_str_radix` alone would take
            // `AB` or `+1` for one, which then moves into a directory other than the one synced).
            let Some(fanout) = Some(&dir)
                .filter(|n| n.len() == 2 && n.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
                .and_then(|n| u8::from_str_radix(n, 16).ok())
            else {
                continue;
            };
            for object in std::fs::read_dir(entry.path())? {
                let name = object?.file_name();
                let id = name.to_str().and_then(|rest| {
                    gix_hash::ObjectId::from_hex(format!("{dir}{rest}").as_bytes()).ok()
                });
                files.push(LooseFile {
                    dir: dir.clone(),
                    fanout,
                    name,
                    id,
                });
            }
        }
        Ok(files)
    }

    /// List the push's objects that reach a missing one ([`crate::objects::incomplete::append`]);
    /// when that would pass the list's bound, prune the list first
    /// ([`crate::objects::incomplete_prune`]) and try once more.
    fn list_incomplete(
        &self,
        objects_dir: &Path,
    ) -> Result<crate::objects::incomplete::Listed, MigrateError> {
        use crate::objects::{incomplete, incomplete_prune};
        let missing = &self.incomplete.missing;
        let room = incomplete::Room::Admit {
            rooted: &self.incomplete.rooted,
        };
        match incomplete::append(objects_dir, missing, room, self.durability) {
            Err(incomplete::Error::TooLarge { .. }) => {}
            listed => return Ok(listed?),
        }
        let hash = missing
            .first()
            .or(self.incomplete.rooted.first())
            .map_or(gix_hash::Kind::Sha1, |id| id.kind());
        match incomplete_prune::prune(objects_dir, hash, self.durability, incomplete::PRUNE_EVERY) {
            Ok(incomplete_prune::Pruned::Done(outcome)) => {
                tracing::info!(
                    kept = outcome.kept,
                    dropped = outcome.dropped,
                    "the list of incomplete objects was full: pruned"
                );
            }
            Ok(other) => tracing::info!("the list of incomplete objects is full, not pruned: {other:?}"),
            Err(e) => tracing::warn!("the list of incomplete objects could not be pruned: {e}"),
        }
        // The files dead pushes left count against the room too, and only a push that settles
        // its own reaps them otherwise: one whose roots were recorded since goes, the others'
        // ids join the list (where a later prune can drop them).
        if let Some(git_dir) = &self.git_dir {
            let shallow = incomplete::recorded_shallow(git_dir, hash);
            match incomplete::reap(objects_dir, hash, &shallow, git_dir, self.durability) {
                Ok(0) => {}
                Ok(reaped) => tracing::info!(reaped, "the list of incomplete objects was full: settled the files of dead pushes"),
                Err(e) => tracing::warn!("the files of dead pushes could not be settled: {e}"),
            }
        }
        Ok(incomplete::append(objects_dir, missing, room, self.durability)?)
    }

    /// Move the received pack into `objects_dir/pack`, `.keep` first and `.idx` last, so that a
    /// pack is never visible without its data and is protected from a concurrent repack until
    /// the refs point into it. Returns the `.keep` files to delete after the ref update, and
    /// the push's own list of commits that need shallow roots, to settle then.
    /// The objects of [`Quarantine::set_incomplete`] are listed first. Loose objects move
    /// next: the unpacked pack's each after the objects it links to
    /// ([`crate::objects::move_order`]), so that a move cut short leaves no object without
    /// what it links to; then any a hook wrote into the quarantine, in directory order, as
    /// git's `tmp_objdir_migrate` moves them. One that exists already is left as it is. With
    /// directories synced ([`Quarantine::with_durability`]), every directory moved into is
    /// synced once the moves are done (and `objects_dir` when a fan-out directory was created
    /// in it), before this returns: before any ref names them. The syncs do not order the moves
    /// among themselves on a power loss (the process killed half way, they are ordered): with
    /// directories synced, the loose objects that move are listed in the push's own file first
    /// ([`crate::objects::incomplete::Pending`]), read as part of the list until the push
    /// settles it, and listed for good if the push never does.
    pub fn migrate(&mut self, objects_dir: &Path) -> Result<Migrated, MigrateError> {
        use crate::fsync::Components;
        use crate::objects::incomplete;
        let durability = self.durability;
        let mut created_fanout = false;
        // Held until the objects are in: no prune runs in between.
        let _listed = self.list_incomplete(objects_dir)?;
        let name = self.dir.file_name().unwrap_or(self.dir.as_os_str());
        // Synced renames are durable once their directories are, in no particular order until
        // then: on a power loss, a commit could outlive its tree. The objects that move (the
        // pack's and any a hook wrote) are listed in the push's own file until they are in
        // ([`incomplete::Pending`]).
        let loose = self.loose_files()?;
        let moving: Vec<_> = match durability.syncs_dirs(Components::LOOSE_OBJECT) {
            true => loose.iter().filter_map(|f| f.id).collect(),
            false => Vec::new(),
        };
        let pending =
            incomplete::Pending::write(objects_dir, name, &self.incomplete, &moving, durability)?;
        // Fan-out directories moved into (to sync), by their number.
        let mut moved_into = [false; 256];
        let mut ready = [false; 256];
        let mut hexbuf = gix_hash::Kind::hex_buf();
        let ordered: foldhash::HashSet<_> = self.loose.iter().copied().collect();
        // `dir/name` of the quarantine to the same place in the repository (`dir` as found:
        // `xx`), the fan-out directory `fanout`.
        let mut move_in = |dir: &str, fanout: u8, name: &std::ffi::OsStr| -> io::Result<()> {
            let dest = objects_dir.join(dir);
            let fanout = usize::from(fanout);
            if !ready[fanout] {
                created_fanout |= self.create_shared_dir(&dest)?;
                ready[fanout] = true;
            }
            // An object the repository has already stays as it is (the quarantine's copy goes
            // with the quarantine).
            if rename_unless_present(&self.dir.join(dir).join(name), &dest.join(name))? {
                moved_into[fanout] = true;
            }
            Ok(())
        };
        for id in &self.loose {
            let hex = id.hex_to_buf(&mut hexbuf);
            let (dir, name) = hex.split_at(2);
            move_in(dir, id.as_slice()[0], std::ffi::OsStr::new(name))?;
        }
        // What else is loose in the quarantine (a hook's objects), as listed before any moved.
        for file in loose
            .iter()
            .filter(|f| f.id.is_none_or(|id| !ordered.contains(&id)))
        {
            move_in(&file.dir, file.fanout, &file.name)?;
        }
        self.loose.clear();
        for (fanout, _) in moved_into.iter().enumerate().filter(|(_, m)| **m) {
            let dest = objects_dir.join(format!("{fanout:02x}"));
            durability.sync_dir(Components::LOOSE_OBJECT, &dest)?;
        }
        let dest = objects_dir.join("pack");
        created_fanout |= self.create_shared_dir(&dest)?;
        if created_fanout {
            durability.sync_dir(Components::OBJECTS, objects_dir)?;
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.pack_dir())?
            .map(|e| e.map(|e| e.path()))
            .collect::<io::Result<_>>()?;
        let rank = |p: &PathBuf| match p.extension().and_then(|e| e.to_str()) {
            Some("keep") => 0,
            Some("pack") => 1,
            Some("rev") => 2,
            Some("idx") => 3,
            _ => 4,
        };
        files.sort_by_key(rank);
        let mut keeps = Vec::new();
        let mut moved = false;
        for file in files {
            let Some(name) = file.file_name() else {
                continue;
            };
            let target = dest.join(name);
            if rank(&file) == 0 {
                keeps.push(target.clone());
            }
            if !rename_unless_present(&file, &target)? {
                // The same pack arrived before: git keeps the existing file.
                std::fs::remove_file(&file)?;
                continue;
            }
            moved = true;
        }
        if moved {
            durability.sync_dir(Components::PACK, &dest)?;
        }
        self.migrated = true;
        let mut fanouts: Vec<&str> = loose.iter().map(|f| f.dir.as_str()).collect();
        fanouts.dedup();
        self.remove_moved_out(&fanouts);
        Ok(Migrated { keeps, pending })
    }

    /// Remove the quarantine once its objects have moved in: the directories it is known to
    /// hold (the fan-out directories `fanouts`, `info` with its `alternates`, `pack`), each
    /// empty now, then itself, a handful of system calls where `remove_dir_all` opened and
    /// listed each directory again (36 of a small push's 358, `strace -f`). Where anything else is
    /// left (an object the repository already had stays where it was written, a file a hook
    /// wrote), it is removed whole.
    fn remove_moved_out(&self, fanouts: &[&str]) {
        let emptied = || -> io::Result<()> {
            for dir in fanouts {
                std::fs::remove_dir(self.dir.join(dir))?;
            }
            std::fs::remove_file(self.dir.join("info/alternates"))?;
            std::fs::remove_dir(self.dir.join("info"))?;
            std::fs::remove_dir(self.pack_dir())?;
            std::fs::remove_dir(&self.dir)
        };
        if emptied().is_err() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A pack of fewer objects is completed from the repository without asking whether it holds
/// any ([`completes_thin_packs`]).
const ASK_FOR_BASES_FROM: u32 = 1_000;

/// A file under one of a quarantine's fan-out directories ([`Quarantine::loose_files`]).
struct LooseFile {
    /// Its directory's name as found (two lowercase hex digits: what is not is no fan-out
    /// directory git reads, and is not moved).
    dir: String,
    /// That directory's number.
    fanout: u8,
    /// Its name in that directory.
    name: std::ffi::OsString,
    /// The object it is, if its name is an object's (`xx` and the rest of the id in hex).
    id: Option<gix_hash::ObjectId>,
}

/// Whether a pack of `objects` objects is read ready to be completed from the repository's
/// objects (a thin pack's bases): not with `--reject-thin-pack-for-testing`. Completing one
/// hashes every byte written once more (+0.27 s on git.git's history), and a repository
/// without objects has no base to complete one with, so a big pack into one
/// (`repository_may_hold_objects`, a listing of its object directories) is read as it comes;
/// for a small one the hashing costs less than the listing (3 % of a cluster node's samples
/// under small pushes; perf, 2026-12-05).
fn completes_thin_packs(
    objects: u32,
    reject_thin_pack: bool,
    repository_may_hold_objects: impl FnOnce() -> bool,
) -> bool {
    !reject_thin_pack && (objects < ASK_FOR_BASES_FROM || repository_may_hold_objects())
}

/// Whether the object directory `objects_dir` or one of its alternates may hold an object: a
/// loose objects' directory or a pack is there, or that cannot be told.
fn may_hold_objects(objects_dir: &Path) -> bool {
    let holds = |dir: &Path| -> io::Result<bool> {
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let name = name.as_encoded_bytes();
            if name.len() == 2 && name.iter().all(u8::is_ascii_hexdigit) {
                return Ok(true);
            }
        }
        match std::fs::read_dir(dir.join("pack")) {
            Ok(packs) => {
                for entry in packs {
                    if entry?.file_name().as_encoded_bytes().ends_with(b".pack") {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    };
    std::iter::once(objects_dir.to_owned())
        .chain(alternates_of(objects_dir))
        .any(|dir| holds(&dir).unwrap_or(true))
}

/// Every object directory `objects_dir` borrows from, transitively, as absolute paths; a
/// relative entry is relative to the directory whose `info/alternates` names it, as in git.
/// (gix-odb resolves nested relative entries against the first directory of the chain, so the
/// quarantine lists the whole chain itself.)
pub fn alternates_of(objects_dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut todo = vec![(objects_dir.to_owned(), 0)];
    while let Some((dir, depth)) = todo.pop() {
        // git gives up after 5 levels of nesting.
        if depth > 5 {
            continue;
        }
        let Ok(list) = std::fs::read_to_string(dir.join("info/alternates")) else {
            continue;
        };
        for line in list
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let Ok(alt) = dir.join(line).canonicalize() else {
                continue;
            };
            if alt != objects_dir && !out.contains(&alt) {
                out.push(alt.clone());
                todo.push((alt, depth + 1));
            }
        }
    }
    out
}

impl Drop for Quarantine {
    fn drop(&mut self) {
        if !self.migrated {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// What ingestion produced.
pub struct Received {
    /// The index of the received pack, for "was this object in the push?"; `None` for a pack
    /// without objects.
    pub index: Option<gix_pack::index::File>,
    /// The number of objects in the pack as sent.
    pub objects: u32,
    /// The number of deltas resolved (git's `Resolving deltas` count); `None` when the
    /// objects were unpacked (`unpack-objects` counts none).
    pub deltas: Option<u32>,
    /// The objects of the repository appended to the pack to complete a thin pack (git's
    /// `completed with N local objects`).
    pub local_objects: u32,
    /// Lines for the client's band 2 (fsck warnings), without newlines.
    pub messages: Vec<String>,
    /// What the pack's commits, trees and tags link to outside it, as indexing found it;
    /// `None` when it did not look (the connectivity check then decodes them itself).
    pub links: Option<crate::objects::pack_links::Outside>,
}

/// The default of [`Options::max_object_size`] (`berth.maxObjectSize`): 1 GiB.
pub const MAX_OBJECT_SIZE: u64 = 1 << 30;

/// Options for [`receive_pack`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `receive.maxInputSize`; 0 for no limit.
    pub max_input_size: u64,
    /// Threads for delta resolution; `None` for all cores.
    pub thread_limit: Option<usize>,
    /// `receive.unpackLimit`: packs of fewer objects become loose objects.
    pub unpack_limit: u32,
    /// Do not complete thin packs from the repository (`--reject-thin-pack-for-testing`).
    pub reject_thin_pack: bool,
    /// `receive.fsckObjects` with its `receive.fsck.*` settings: check every received object
    /// as git's `index-pack --strict` does. `None`: no checks.
    pub fsck: Option<Vec<crate::objects::fsck::Setting>>,
    /// The largest object (or delta base/result) inflated while indexing; 0 for
    /// [`MAX_OBJECT_SIZE`]. A larger one fails the push instead of allocating.
    pub max_object_size: u64,
    /// Shallow commits (the repository's and the client's): their parents may be absent, as
    /// git's `--shallow-file` tells its unpacker.
    pub shallow: std::collections::HashSet<gix_hash::ObjectId>,
    /// The repository's object format: the hash of the pack's ids and its trailer.
    pub object_format: gix_hash::Kind,
    /// The `.rev` and the permissions of a kept pack (`pack.writeReverseIndex`,
    /// `core.sharedRepository`); the latter also for loose objects.
    pub files: crate::objects::pack_files::Options,
}

impl Options {
    fn alloc_limit(&self) -> usize {
        let limit = if self.max_object_size == 0 {
            MAX_OBJECT_SIZE
        } else {
            self.max_object_size
        };
        usize::try_from(limit).unwrap_or(usize::MAX)
    }
}

/// Read a pack from `input` into `quarantine`, completing thin packs from `repo_objects`.
pub fn receive_pack(
    input: &mut dyn BufRead,
    quarantine: &mut Quarantine,
    repo_objects: &gix_odb::Handle,
    options: Options,
) -> Result<Received, UnpackError> {
    let mut header = [0u8; 12];
    read_full(input, &mut header).map_err(|_| UnpackError::HeaderEof)?;
    if &header[..4] != b"PACK" {
        return Err(UnpackError::SignatureMismatch);
    }
    let version = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if version != 2 && version != 3 {
        return Err(UnpackError::VersionUnsupported);
    }
    let objects = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let explode = objects < options.unpack_limit;
    // A pack to be unpacked has its deltas resolved by the thread reading it, as git's
    // single-threaded unpack-objects resolves them: a thread a core (up to one an object) for
    // a handful of deltas cost more than the deltas (thread starts, stacks mapped and unmapped,
    // futex wake-ups, on each push on each cluster node; benches/README.md, 2026-12-06).
    let thread_limit = if explode {
        Some(1)
    } else {
        options.thread_limit
    };
    let step = if explode {
        "unpack-objects"
    } else {
        "index-pack"
    };
    let failed = |detail: String| UnpackError::Failed {
        step,
        detail: Some(detail),
        messages: Vec::new(),
    };
    // git's child parses `--strict=<list>` before it reads anything.
    let fsck = match &options.fsck {
        None => None,
        Some(settings) => Some(
            crate::objects::fsck::Options::from_settings(
                settings,
                Path::new("."),
                options.object_format,
            )
                .map_err(|e| failed(e.to_string()))?,
        ),
    };

    let mut limited = Limited {
        eof: false,
        inner: input,
        left: if options.max_input_size == 0 {
            u64::MAX
        } else {
            options.max_input_size.saturating_sub(12)
        },
    };
    if objects == 0 {
        // Nothing to index: check the trailer, as unpack-objects does, and keep nothing.
        let mut trailer = vec![0u8; options.object_format.len_in_bytes()];
        read_full(&mut limited, &mut trailer).map_err(|e| failed(input_error(e)))?;
        let mut hasher = gix_hash::hasher(options.object_format);
        hasher.update(&header);
        let digest = hasher.try_finalize().map_err(|e| failed(e.to_string()))?;
        if digest.as_bytes() != trailer {
            return Err(failed("final sha1 did not match".into()));
        }
        return Ok(Received {
            index: None,
            objects,
            deltas: None,
            local_objects: 0,
            messages: Vec::new(),
            links: None,
        });
    }

    let mut stream = io::Cursor::new(header).chain(limited);
    let bases = Bases {
        objects: repo_objects,
        // Only a pack to be unpacked needs them: a kept pack keeps its bases.
        found: explode.then(Default::default),
    };
    let outcome = crate::objects::pack_write::write_to_directory(
        &mut stream,
        &quarantine.pack_dir(),
        completes_thin_packs(objects, options.reject_thin_pack, || {
            quarantine.dir.parent().is_none_or(may_hold_objects)
        })
            .then_some(&bases),
        options.object_format,
        gix_pack::bundle::write::Options {
            thread_limit,
            alloc_limit_bytes: Some(options.alloc_limit()),
            ..Default::default()
        },
        if explode { UNPACK_HAND_BACK_BYTES } else { 0 },
    )
    .map_err(|e| {
        let (_, limited) = stream.get_ref();
        if limited.left == 0 {
            failed(if explode {
                "pack exceeds maximum allowed size".into()
            } else {
                format!(
                    "pack exceeds maximum allowed size ({})",
                    humanise_bytes(options.max_input_size)
                )
            })
        } else if !limited.eof && base_not_found(&e.source) {
            UnpackError::BaseMissing {
                step,
                detail: unresolved_deltas(explode).into(),
            }
        } else {
            let broken = pack_error(&e, explode, options.alloc_limit(), limited.eof);
            UnpackError::Failed {
                step,
                detail: broken.fatal,
                messages: broken.messages,
            }
        }
    })?;
    let index_path = outcome
        .index_path
        .ok_or_else(|| failed("pack index was not written".into()))?;
    let index = gix_pack::index::File::at(&index_path, options.object_format)
        .map_err(|e| failed(e.to_string()))?;
    let kept = outcome.kept;
    // The bases a thin pack lacked were appended from the repository (once each).
    let local_objects = index.num_objects().saturating_sub(objects);
    let deltas = (!explode).then_some(outcome.deltas);
    let mut messages = Vec::new();
    if let Some(fsck) = fsck {
        use crate::objects::strict::{Program, Strict};
        let checked = Strict {
            objects: quarantine.path(),
            options: fsck,
            alloc_limit: options.alloc_limit(),
            program: if explode {
                Program::UnpackObjects
            } else {
                Program::IndexPack
            },
            shallow: &options.shallow,
            hash: options.object_format,
        };
        let _span = tracing::info_span!("fsck").entered();
        match checked.check(&index, thread_limit) {
            Ok(m) => messages = m,
            Err(refused) => {
                return Err(UnpackError::Failed {
                    step,
                    detail: refused.fatal,
                    messages: refused.lines,
                });
            }
        }
    }
    if explode {
        let pack_path = outcome
            .data_path
            .as_deref()
            .ok_or_else(|| failed("pack was not written".into()))?;
        let mut bases = bases.found.map(|f| f.into_inner()).unwrap_or_default();
        // Looked up once an object: sorted, as `receive.unpackLimit` may be set high.
        bases.sort_unstable();
        let unpacked = unpack_objects(
            quarantine,
            pack_path,
            &index,
            &bases,
            kept,
            options.alloc_limit(),
            options.files,
        )
        .map_err(|e| failed(e.to_string()))?;
        tracing::debug!(
            objects,
            deltas_applied = unpacked.deltas_applied,
            from_reading = unpacked.from_reading,
            "unpacked"
        );
    } else if let Some(pack_path) = &outcome.data_path {
        crate::objects::pack_files::finish(&index_path, pack_path, &index, options.files)
            .map_err(|e| failed(e.to_string()))?;
    }
    Ok(Received {
        index: Some(index),
        objects,
        deltas,
        local_objects,
        messages,
        links: outcome.links,
    })
}

/// Bytes of a pack to be unpacked that the reading thread keeps whole as it names them, for
/// [`unpack_objects`] to write its loose objects from rather than decode and hash each again
/// (a 93-object push of 30 commits: 61.0 M → 44.8 M instructions); past them, the rest is
/// decoded from the pack. 8 MiB: an ordinary push under `receive.unpackLimit` is far smaller,
/// and a push's memory grows by no more than this.
const UNPACK_HAND_BACK_BYTES: usize = 8 << 20;

/// The repository's objects as a thin pack's completion asks them for the bases it lacks,
/// each base found recorded: the pack gets a copy of it, which [`unpack_objects`] does not
/// write out again.
struct Bases<'a> {
    objects: &'a gix_odb::Handle,
    /// The bases found, when they are to be recorded.
    found: Option<std::cell::RefCell<Vec<gix_hash::ObjectId>>>,
}

impl gix_object::Find for Bases<'_> {
    fn try_find<'a>(
        &self,
        id: &gix_hash::oid,
        buffer: &'a mut Vec<u8>,
    ) -> gix_error::Result<Option<gix_object::Data<'a>>> {
        let found = self.objects.try_find(id, buffer)?;
        if let (Some(_), Some(bases)) = (&found, &self.found) {
            bases.borrow_mut().push(id.to_owned());
        }
        Ok(found)
    }
}

/// What [`unpack_objects`] did beyond writing each object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unpacked {
    /// Deltas applied, each application counted: one per delta entry when every base a delta
    /// needed was kept for it ([`PendingBases`]), more where a chain had to be walked again.
    deltas_applied: u64,
    /// Objects written from what the reading thread kept, neither decoded nor hashed again.
    from_reading: u64,
}

/// Turn the received pack into loose objects in the quarantine and remove it, as git's
/// `unpack-objects` does for small pushes (so that many small pushes do not pile up packs).
/// The `bases` (sorted) a thin pack was completed with are the repository's already and are not
/// written: git's `unpack-objects` reads them from the repository and writes only what came.
/// Each object is made durable as `core.fsync`'s `loose-object` (not by default) and
/// `core.fsyncObjectFiles` say; with `core.fsyncMethod=batch`, written back one by one and
/// flushed once at the end, before the quarantine is migrated (as git's `unpack-objects` does
/// inside its object transaction). The objects the reading thread `kept` (in pack order, each
/// with the id it computed from its bytes) are written from those bytes; the rest are decoded
/// in pack order, each delta on a base kept for it ([`PendingBases`]): a chain costs one
/// application a delta, as in git.
fn unpack_objects(
    quarantine: &mut Quarantine,
    pack_path: &Path,
    index: &gix_pack::index::File,
    bases: &[gix_hash::ObjectId],
    kept: Vec<KeptObject>,
    alloc_limit: usize,
    files: crate::objects::pack_files::Options,
) -> io::Result<Unpacked> {
    use crate::objects::loose_write::{LooseWriter, Written};
    use gix_pack::data::entry::Header;
    use std::os::unix::fs::PermissionsExt;
    let shared = files.shared;
    let mut batch = crate::fsync::Batch::default();
    // The pack and its index as they are: an object store over the quarantine (gix-odb's)
    // would list its directories and resolve its alternates first (7 % of a cluster node's
    // samples under small pushes; perf, 2026-12-05). Indexing completed any thin pack, so
    // every delta's base is in the pack.
    let pack = gix_pack::data::File::at(pack_path, index.object_hash())
        .map_err(io::Error::other)?
        .with_alloc_limit_bytes(Some(alloc_limit));
    let entry_of = |id: &gix_hash::oid| {
        index
            .lookup(id)
            .map(|i| pack.entry(index.pack_offset_at_index(i)))
    };
    let in_pack = |id: &gix_hash::oid, _: &mut Vec<u8>| {
        entry_of(id)
            .map(|e| e.map(gix_pack::data::decode::entry::ResolvedBase::InPack))
            .transpose()
    };
    let mut inflate = gix_zlib::Inflate::default();
    let is_base = |id: &gix_hash::oid| bases.binary_search_by(|b| b.as_ref().cmp(id)).is_ok();
    // The index's entries in pack order; `rank` numbers each index position by it.
    let mut order: Vec<u32> = (0..index.num_objects()).collect();
    order.sort_unstable_by_key(|i| index.pack_offset_at_index(*i));
    let mut rank = vec![0u32; order.len()];
    for (r, i) in order.iter().enumerate() {
        rank[*i as usize] = r as u32;
    }
    // Each entry's object as the reading thread named it, in pack order, where its offset and
    // id are the index's; the others are decoded.
    let mut named: Vec<Option<KeptObject>> = Vec::with_capacity(order.len());
    {
        let mut kept = kept.into_iter().peekable();
        for &i in &order {
            let offset = index.pack_offset_at_index(i);
            while kept.next_if(|k| k.offset < offset).is_some() {}
            named.push(kept.next_if(|k| k.offset == offset && k.id == index.oid_at_index(i)));
        }
    }
    // One pass over the entries' headers: the largest object, for the compressor's window
    // ([`LooseWriter::new`]; a delta's size from the first bytes of its data, each header
    // taken as the longest kind's, "commit"), and which delta entries later deltas name as
    // their bases. Not gix-pack's `decode_header`, which follows each delta's chain to its
    // base for the kind: the square of a chain's length.
    let mut pending = PendingBases::default();
    let mut largest = 0;
    for (&i, named) in order.iter().zip(&named) {
        if let Some(object) = named {
            // Taken whole: its own base is not needed, and its size is known.
            let size = object.data.len() as u64;
            let len = gix_object::encode::loose_header(object.kind, size).len();
            largest = largest.max(size.saturating_add(len as u64));
            continue;
        }
        let at = pack
            .entry(index.pack_offset_at_index(i))
            .map_err(io::Error::other)?;
        // (Indexing refused a base out of the pack's bounds; checked here all the same.)
        let base = match at.header {
            Header::OfsDelta { base_distance } => at
                .checked_base_pack_offset(base_distance)
                .map(|offset| pack.entry(offset))
                .transpose()
                .map_err(io::Error::other)?,
            Header::RefDelta { base_id } => entry_of(&base_id)
                .transpose()
                .map_err(io::Error::other)?,
            _ => None,
        };
        if let Some(base) = base.filter(|b| b.header.is_delta()) {
            pending.want(base.data_offset);
        }
        if is_base(index.oid_at_index(i)) {
            continue;
        }
        // A delta whose size cannot be read counts as nothing: the writer makes a larger
        // window if it has to, and the decoding below says what is wrong.
        let size = match at.header.is_delta() {
            true => delta_result_size(&pack, &at, &mut inflate).unwrap_or(0),
            false => at.decompressed_size,
        };
        let len = gix_object::encode::loose_header(gix_object::Kind::Commit, size).len();
        largest = largest.max(size.saturating_add(len as u64));
    }
    let mut loose = LooseWriter::new(
        quarantine.path(),
        index.object_hash(),
        files.loose_compression,
        largest,
    );
    let mut buf = Vec::new();
    let mut unpacked = Unpacked {
        deltas_applied: 0,
        from_reading: 0,
    };
    // What each object links to in the pack, numbered in pack order, for the order of the
    // move in.
    let mut links = crate::objects::move_order::Links::with_capacity(order.len());
    let mut linked = Vec::new();
    for (&i, named) in order.iter().zip(named) {
        let id = index.oid_at_index(i).to_owned();
        if is_base(&id) {
            // Numbered as the others, moved nowhere.
            links.object(std::iter::empty());
            continue;
        }
        let offset = index.pack_offset_at_index(i);
        let at = pack.entry(offset).map_err(io::Error::other)?;
        let (kind, written) = match named {
            Some(object) => {
                // Named from these bytes; a later delta may want them as its base.
                gix_pack::cache::DecodeEntry::put(&mut pending, 0, at.data_offset, &object.data, object.kind, 0);
                unpacked.from_reading += 1;
                buf = object.data;
                (object.kind, loose.write_named(&id, object.kind, &buf)?)
            }
            None => {
                let decoded = pack
                    .decode_entry(at, &mut buf, &mut inflate, &in_pack, &mut pending)
                    .map_err(io::Error::other)?;
                unpacked.deltas_applied += u64::from(decoded.num_deltas);
                (decoded.kind, loose.write(&id, decoded.kind, &buf)?)
            }
        };
        if kind != gix_object::Kind::Blob {
            // One that does not parse links to nothing here; the connectivity check refuses it.
            let _ = crate::objects::fsck::for_each_link(kind, &buf, id.kind(), |to, _| {
                if let Some(t) = index.lookup(to) {
                    linked.push(rank[t as usize]);
                }
            });
        }
        links.object(linked.drain(..));
        let Written::New { path, file } = written else {
            continue;
        };
        files.durability.sync_loose_object(&file, &path, &mut batch)?;
        if shared != crate::objects::pack_files::SharedRepository::Umask {
            // git's `adjust_shared_perm` on the read-only loose object.
            let mode = file.metadata()?.permissions().mode() & 0o7777;
            file.set_permissions(std::fs::Permissions::from_mode(shared.adjust(mode)))?;
        }
    }
    batch.flush(quarantine.path())?;
    quarantine.loose = links
        .children_first()
        .into_iter()
        .map(|r| index.oid_at_index(order[r as usize]).to_owned())
        .filter(|id| !is_base(id))
        .collect();
    for file in std::fs::read_dir(quarantine.pack_dir())? {
        std::fs::remove_file(file?.path())?;
    }
    Ok(unpacked)
}

/// The size of the object the delta `entry` of `pack` builds, from the first bytes of its data
/// (the base's size, then the result's; git's `get_delta_hdr_size`); `None` if they cannot be
/// read.
fn delta_result_size(
    pack: &gix_pack::data::File,
    entry: &gix_pack::data::Entry,
    inflate: &mut gix_zlib::Inflate,
) -> Option<u64> {
    // Two sizes of at most ten bytes each.
    let mut head = [0u8; 20];
    let want = usize::try_from(entry.decompressed_size)
        .unwrap_or(usize::MAX)
        .min(head.len());
    let data = pack.entry_slice(entry.data_offset..pack.pack_end() as u64)?;
    inflate.reset();
    let (_, _, written) = inflate.once(data, &mut head[..want]).ok()?;
    let (_, rest) = crate::objects::pack_resolve::delta_size(&head[..written]).ok()?;
    let (result, _) = crate::objects::pack_resolve::delta_size(rest).ok()?;
    Some(result)
}

/// Whether gix-pack failed because a ref-delta's base is neither in the pack nor in the
/// repository (recognised from its error chain).
fn base_not_found(e: &gix_error::Error) -> bool {
    let (text, debug) = (format!("{e:#}"), format!("{e:?}"));
    let has = |s: &str| text.contains(s) || debug.contains(s);
    has("ref-delta base object") && has("could not be found")
}

/// git's words for a pack whose deltas lack their bases.
fn unresolved_deltas(explode: bool) -> &'static str {
    if explode {
        "unresolved deltas left after unpacking"
    } else {
        "pack has unresolved deltas"
    }
}

/// What git's child prints for a pack it cannot read: `error:` lines, then the `fatal:` line,
/// if it dies (unpack-objects reports a broken entry with `error()` and exits).
struct Broken {
    messages: Vec<String>,
    fatal: Option<String>,
}

impl Broken {
    fn fatal(detail: impl Into<String>) -> Self {
        Broken {
            messages: Vec::new(),
            fatal: Some(detail.into()),
        }
    }
}

/// git's words for the ingest error `e` (`explode`: as unpack-objects, else index-pack).
/// gix-pack's errors are matched by their text: gix-pack 0.77 raises these as untyped
/// `gix_error::message!`s (no variant to downcast to), so their words are all there is. A
/// broken entry's place comes with the error, typed.
fn pack_error(
    e: &crate::objects::pack_write::WriteError,
    explode: bool,
    alloc_limit: usize,
    eof: bool,
) -> Broken {
    let (at, e) = (e.entry_at, &e.source);
    let text = format!("{e:#}");
    let debug = format!("{e:?}");
    let has = |s: &str| text.contains(s) || debug.contains(s);
    if has("UnexpectedEof") || has("failed to fill whole buffer") {
        return Broken::fatal("early EOF");
    }
    if has("Failed to verify pack checksum") {
        return Broken::fatal(if explode {
            "final sha1 did not match"
        } else {
            "pack is corrupted (SHA1 mismatch)"
        });
    }
    if eof {
        // The client hung up (or the pack is truncated) and that is what broke the entry.
        return Broken::fatal("early EOF");
    }
    if has("AllocationLimit") || has("too large to fit in memory") {
        return Broken::fatal(format!(
            "object too large to inflate (more than {alloc_limit} bytes, see berth.maxObjectSize)"
        ));
    }
    if base_not_found(e) {
        return Broken::fatal(unresolved_deltas(explode));
    }
    // index-pack's `bad_object`; unpack-objects' `error()` and exit, or its own `die`.
    let bad_object = |index_pack: String, unpack_objects: Option<String>| -> Broken {
        match (explode, unpack_objects) {
            (true, Some(line)) => Broken {
                messages: vec![format!("error: {line}")],
                fatal: None,
            },
            (true, None) => Broken::fatal(index_pack),
            (false, _) => Broken::fatal(match at {
                Some(at) => format!("pack has bad object at offset {at}: {index_pack}"),
                None => format!("pack has bad object: {index_pack}"),
            }),
        }
    };
    if has("is not a valid offset for pack offset") {
        return if explode {
            Broken::fatal("offset value out of bound for delta base object")
        } else {
            bad_object("delta base offset is out of bound".into(), None)
        };
    }
    if let Some(at) = debug.find("Object type ")
        && let Some(n) = debug[at + 12..].split_whitespace().next()
        && debug[at..].contains("is unsupported")
    {
        return bad_object(
            format!("unknown object type {n}"),
            Some(format!("bad object type {n}")),
        );
    }
    // zlib's Z_DATA_ERROR, with git's `git_inflate` complaint first.
    if let Some(i) = debug.find("corrupt deflate stream: ") {
        let why = debug[i + 24..]
            .split(['"', '\n'])
            .next()
            .unwrap_or_default();
        let inflate = format!("error: inflate: data stream error ({why})");
        let mut broken = bad_object(
            "inflate returned -3".into(),
            Some("inflate returned -3".into()),
        );
        broken.messages.insert(0, inflate);
        return broken;
    }
    // The stream ended before the declared size (Z_STREAM_END, 1), or went on past it
    // (zlib stops with Z_BUF_ERROR, -5, when git's buffer of the declared size is full).
    if let Some(i) = debug.find("decompressed into ") {
        let numbers: Vec<u64> = debug[i..]
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .take(2)
            .collect();
        let status = match numbers[..] {
            [got, want] if got > want => -5,
            _ => 1,
        };
        let what = format!("inflate returned {status}");
        return bad_object(what.clone(), Some(what));
    }
    let line = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(": ");
    Broken::fatal(if line.is_empty() {
        "pack is corrupt".into()
    } else {
        line
    })
}

/// git's `humanise_bytes`: `64 bytes`, `1.50 KiB`, `2.00 GiB`.
fn humanise_bytes(bytes: u64) -> String {
    if bytes > 1 << 30 {
        let x = bytes + 5368709;
        format!("{}.{:02} GiB", x >> 30, (x & ((1 << 30) - 1)) / 10737419)
    } else if bytes > 1 << 20 {
        let x = bytes + 5243;
        format!("{}.{:02} MiB", x >> 20, (x & ((1 << 20) - 1)) / 10486)
    } else if bytes > 1 << 10 {
        let x = bytes + 5;
        format!("{}.{:02} KiB", x >> 10, (x & ((1 << 10) - 1)) / 11)
    } else if bytes == 1 {
        "1 byte".into()
    } else {
        format!("{bytes} bytes")
    }
}

fn input_error(e: io::Error) -> String {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        "early EOF".into()
    } else {
        e.to_string()
    }
}

fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<()> {
    r.read_exact(buf)
}

/// A reader that fails once more than `left` bytes were asked of it (`receive.maxInputSize`).
struct Limited<R> {
    /// The input ended (the client hung up or sent all it had).
    eof: bool,
    inner: R,
    left: u64,
}

impl<R: BufRead> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Limited<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        let left = self.left;
        let buf = self.inner.fill_buf()?;
        if buf.is_empty() {
            self.eof = true;
        }
        if left == 0 && !buf.is_empty() {
            return Err(io::Error::other("pack exceeds maximum allowed size"));
        }
        let n = buf.len().min(left.min(usize::MAX as u64) as usize);
        Ok(&buf[..n])
    }

    fn consume(&mut self, amt: usize) {
        self.inner.consume(amt);
        self.left -= amt as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small pack is completed without listing the repository's objects; a big one only
    /// where objects may be; none with `--reject-thin-pack-for-testing`.
    #[test]
    fn only_a_big_pack_asks_whether_the_repository_holds_objects() {
        let never = || -> bool { panic!("listed the objects for a small pack") };
        assert!(completes_thin_packs(3, false, never));
        assert!(completes_thin_packs(ASK_FOR_BASES_FROM - 1, false, never));
        assert!(completes_thin_packs(ASK_FOR_BASES_FROM, false, || true));
        assert!(!completes_thin_packs(ASK_FOR_BASES_FROM, false, || false));
        assert!(!completes_thin_packs(3, true, never));
        assert!(!completes_thin_packs(500_000, true, || true));
    }

    #[test]
    fn objects_are_looked_for_in_loose_directories_packs_and_alternates() {
        let dir = tempfile::tempdir().unwrap();
        let (objects, other) = (dir.path().join("objects"), dir.path().join("other"));
        for d in [&objects, &other] {
            std::fs::create_dir_all(d.join("pack")).unwrap();
            std::fs::create_dir_all(d.join("info")).unwrap();
        }
        // What an empty repository has, and a push's quarantine.
        std::fs::create_dir(objects.join("tmp_objdir-incoming-x")).unwrap();
        std::fs::write(objects.join("pack/pack-x.idx"), b"").unwrap();
        assert!(!may_hold_objects(&objects));

        std::fs::create_dir(objects.join("ab")).unwrap();
        assert!(may_hold_objects(&objects));
        std::fs::remove_dir(objects.join("ab")).unwrap();

        std::fs::write(objects.join("pack/pack-x.pack"), b"").unwrap();
        assert!(may_hold_objects(&objects));
        std::fs::remove_file(objects.join("pack/pack-x.pack")).unwrap();

        std::fs::write(other.join("pack/pack-y.pack"), b"").unwrap();
        std::fs::write(objects.join("info/alternates"), format!("{}\n", other.display())).unwrap();
        assert!(may_hold_objects(&objects));

        // What cannot be read may hold anything.
        assert!(may_hold_objects(&dir.path().join("missing")));
    }

    /// A migrated quarantine is removed: its emptied directories one by one, or whole where
    /// something stayed behind (the second time the same objects arrive, the repository has
    /// them, and the quarantine's copies stay where they were written).
    #[test]
    fn a_migrated_quarantine_is_removed_whether_or_not_something_stayed_behind() {
        use crate::test_git::git;
        let dir = tempfile::tempdir().unwrap();
        let commits = crate::test_git::history(dir.path());
        let revs = format!("{}\n--not\n{}\n", commits[9], commits[8]);
        let pack = crate::test_git::git_bytes(
            &dir.path().join("r"),
            &["pack-objects", "--revs", "--stdout", "-q"],
            revs.as_bytes(),
        );
        git(dir.path(), &["init", "-q", "--bare", "s.git"]);
        let objects_dir = dir.path().join("s.git/objects");
        let odb = gix_odb::at(&objects_dir, gix_hash::Kind::Sha1).unwrap();
        for round in ["first", "again"] {
            let mut q = Quarantine::create(&objects_dir).unwrap();
            let path = q.path().to_owned();
            let options = Options {
                unpack_limit: 1_000,
                ..Default::default()
            };
            receive_pack(&mut &pack[..], &mut q, &odb, options).unwrap();
            q.migrate(&objects_dir).unwrap();
            assert!(!path.exists(), "{round}: {} is left", path.display());
        }
        let left: Vec<_> = std::fs::read_dir(&objects_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("tmp_objdir"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// With directories synced, every loose object that moves in (the pack's and one a hook
    /// wrote into the quarantine) is read as not known to be complete from before the first
    /// move until the push settles its file; without, nothing is listed.
    #[test]
    fn loose_objects_moving_in_with_synced_directories_are_listed_until_settled() {
        use crate::fsync::{Durability, Floor};
        use crate::objects::incomplete;
        use crate::test_git::git;
        let dir = tempfile::tempdir().unwrap();
        let commits = crate::test_git::history(dir.path());
        let work = dir.path().join("r");
        let revs = format!("{}\n--not\n{}\n", commits[9], commits[8]);
        let pack = crate::test_git::git_bytes(
            &work,
            &["pack-objects", "--revs", "--stdout", "-q"],
            revs.as_bytes(),
        );
        let count = u32::from_be_bytes(pack[8..12].try_into().unwrap()) as usize;
        let sha1 = gix_hash::Kind::Sha1;
        for (name, durability, listed) in [
            ("synced.git", Durability::default().at_least(Floor::Synced), true),
            ("git.git", Durability::default(), false),
        ] {
            git(dir.path(), &["init", "-q", "--bare", name]);
            let objects_dir = dir.path().join(name).join("objects");
            let mut q = Quarantine::create(&objects_dir)
                .unwrap()
                .with_durability(durability);
            let odb = gix_odb::at(&objects_dir, sha1).unwrap();
            let options = Options {
                unpack_limit: 1_000,
                ..Default::default()
            };
            receive_pack(&mut &pack[..], &mut q, &odb, options).unwrap();
            // What a pre-receive hook writes into the quarantine.
            let out = std::process::Command::new("git")
                .args(["hash-object", "-w", "--stdin"])
                .env("GIT_DIR", dir.path().join(name))
                .env("GIT_OBJECT_DIRECTORY", q.path())
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    use std::io::Write;
                    c.stdin.take().unwrap().write_all(b"from a hook\n")?;
                    c.wait_with_output()
                })
                .unwrap();
            let hooked = String::from_utf8(out.stdout).unwrap();
            let hooked = gix_hash::ObjectId::from_hex(hooked.trim().as_bytes()).unwrap();
            // And a file that is no object's, left in a fan-out directory: moved as git's
            // migration moves everything.
            let stray = q.path().join(&hooked.to_string()[..2]).join("tmp_obj_left");
            std::fs::write(&stray, b"").unwrap();
            // And directories named almost as fan-out directories are (a hook's doing): no
            // object git reads, not moved, no failure syncing a directory of another name.
            for odd in ["AB", "+1"] {
                std::fs::create_dir(q.path().join(odd)).unwrap();
                std::fs::write(q.path().join(odd).join("x"), b"").unwrap();
            }
            let migrated = q.migrate(&objects_dir).unwrap();
            for odd in ["AB", "+1"] {
                assert!(!objects_dir.join(odd).exists(), "{name}: {odd}");
            }
            let store = gix_odb::loose::Store::at(&objects_dir, sha1);
            assert_eq!(store.iter().count(), count + 1, "{name}: every object moved in");
            assert!(store.contains(&hooked), "{name}");
            assert!(
                objects_dir
                    .join(&hooked.to_string()[..2])
                    .join("tmp_obj_left")
                    .exists(),
                "{name}"
            );
            let read = incomplete::read(&objects_dir, sha1).unwrap();
            assert_eq!(migrated.pending.is_some(), listed, "{name}");
            if listed {
                assert_eq!(read.len(), count + 1, "{name}: the pack's objects and the hook's");
                assert!(read.contains(&hooked));
                let settled = migrated.pending.unwrap();
                settled.settle(&[], &dir.path().join(name), durability).unwrap();
            } else {
                assert!(read.is_empty(), "{name}");
            }
            assert!(incomplete::read(&objects_dir, sha1).unwrap().is_empty(), "{name}");
            assert!(!objects_dir.join(incomplete::FILE).exists(), "{name}");
        }
    }

    /// Every loose object of `objects_dir` whose links (to commits, trees, blobs, tags) are
    /// not all there, with the first one missing.
    fn without_their_links(objects_dir: &Path) -> Vec<(String, String)> {
        let store = gix_odb::loose::Store::at(objects_dir, gix_hash::Kind::Sha1);
        let has = |id: &gix_hash::oid| store.contains(id);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for id in store.iter() {
            let id = id.unwrap();
            let object = store.try_find(&id, &mut buf).unwrap().unwrap();
            let mut missing = None;
            crate::objects::fsck::for_each_link(object.kind, object.data, id.kind(), |to, _| {
                if missing.is_none() && !has(&to) {
                    missing = Some(to.to_string());
                }
            })
            .unwrap();
            if let Some(m) = missing {
                out.push((id.to_string(), m));
            }
        }
        out
    }

    /// A move of loose objects cut short (here: a fan-out directory that cannot be made,
    /// every one in turn) leaves in the repository only objects whose links are all there.
    /// Moved directory by directory, as before the order, some cut leaves a commit or tree
    /// without what it links to.
    #[test]
    fn a_loose_move_cut_short_leaves_no_object_without_its_links() {
        use crate::test_git::git;
        let dir = tempfile::tempdir().unwrap();
        let commits = crate::test_git::history(dir.path());
        let work = dir.path().join("r");
        let pack = crate::test_git::git_bytes(
            &work,
            &["pack-objects", "--revs", "--stdout", "--delta-base-offset"],
            format!("{}\n", commits[9]).as_bytes(),
        );
        let objects = u32::from_be_bytes(pack[8..12].try_into().unwrap());
        let unpack = |repo: &Path| -> Quarantine {
            let objects_dir = repo.join("objects");
            let mut q = Quarantine::create(&objects_dir).unwrap();
            let odb = gix_odb::at(&objects_dir, gix_hash::Kind::Sha1).unwrap();
            let options = Options {
                unpack_limit: objects + 1,
                ..Default::default()
            };
            receive_pack(&mut &pack[..], &mut q, &odb, options).unwrap();
            q
        };
        // The fan-out directories the push's objects go to.
        git(dir.path(), &["init", "-q", "--bare", "probe.git"]);
        let probe = unpack(&dir.path().join("probe.git"));
        let mut fanouts: Vec<String> = std::fs::read_dir(probe.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.len() == 2)
            .collect();
        fanouts.sort();
        drop(probe);
        assert!(fanouts.len() > 20, "{fanouts:?}");
        for (i, cut) in fanouts.iter().enumerate() {
            let name = format!("cut{i}.git");
            git(dir.path(), &["init", "-q", "--bare", &name]);
            let repo = dir.path().join(&name);
            std::fs::write(repo.join("objects").join(cut), b"not a directory").unwrap();
            let mut q = unpack(&repo);
            assert!(q.migrate(&repo.join("objects")).is_err(), "cut at {cut}");
            drop(q);
            assert_eq!(
                without_their_links(&repo.join("objects")),
                Vec::<(String, String)>::new(),
                "cut at {cut}"
            );
        }
        // Uncut, everything moves in.
        git(dir.path(), &["init", "-q", "--bare", "whole.git"]);
        let repo = dir.path().join("whole.git");
        unpack(&repo).migrate(&repo.join("objects")).unwrap();
        git(&repo, &["update-ref", "refs/heads/main", &commits[9]]);
        git(&repo, &["fsck", "--strict", "--no-dangling"]);
        let count = git(&repo, &["count-objects", "-v"]);
        assert!(count.contains(&format!("count: {objects}\n")), "{count}");
    }

    /// [`rename_unless_present`] moves into an empty place, leaves a file already there as it
    /// is (an object the repository has), and replaces a link to nothing, as the `stat` and
    /// `rename` it replaced did.
    #[test]
    fn a_move_keeps_a_file_already_in_place_and_replaces_a_dangling_link() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("from"), dir.path().join("to"));
        std::fs::write(&from, b"new").unwrap();
        assert!(rename_unless_present(&from, &to).unwrap());
        assert_eq!(std::fs::read(&to).unwrap(), b"new");
        assert!(!from.exists());
        // A file there already stays as it is; the caller removes what did not move.
        std::fs::write(&from, b"again").unwrap();
        assert!(!rename_unless_present(&from, &to).unwrap());
        assert_eq!(std::fs::read(&to).unwrap(), b"new");
        assert!(from.exists());
        // A link to nothing is not an object: replaced.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
        assert!(rename_unless_present(&from, &link).unwrap());
        assert_eq!(std::fs::read(&link).unwrap(), b"again");
    }

    /// A chain of deltas is unpacked with one application a delta: each decoded base is kept
    /// for the delta on it ([`PendingBases`]). Without it, every object walked its chain
    /// again, the square of the chain's length.
    #[test]
    fn a_delta_chain_is_unpacked_with_one_application_a_delta() {
        use crate::test_git::{git, git_bytes};
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "--bare", "src.git"]);
        let src = dir.path().join("src.git");
        // Versions of one file, each with one more of its lines changed: git packs them as a
        // chain, each a delta on the version before, its nearest.
        let mut lines: Vec<String> = (0..200).map(|j| format!("line {j:4} as it was\n")).collect();
        let mut list = String::new();
        for i in 0..60 {
            lines[i * 7 % 200] = format!("line {:4} changed in {i:2}\n", i * 7 % 200);
            let content = lines.concat();
            let id = git_bytes(&src, &["hash-object", "-w", "--stdin"], content.as_bytes());
            list.push_str(&format!("{} f\n", String::from_utf8(id).unwrap().trim()));
        }
        // With deltas on bases named by offset (as `git push` sends them) and by id; the
        // objects decoded again, or written from what the reading thread kept.
        // Some kept: the first ones (their bases given to the cache), the rest decoded.
        for (n, offsets, keep) in [
            ("ofs", true, 0),
            ("ref", false, 0),
            ("ofs-kept", true, UNPACK_HAND_BACK_BYTES),
            ("ref-kept", false, UNPACK_HAND_BACK_BYTES),
            ("ofs-some", true, 100_000),
        ] {
            let mut args = vec!["pack-objects", "--stdout", "--window=100", "--depth=100"];
            if offsets {
                args.push("--delta-base-offset");
            }
            let pack = git_bytes(&src, &args, list.as_bytes());
            let dst = format!("{n}.git");
            git(dir.path(), &["init", "-q", "--bare", &dst]);
            let repo = dir.path().join(&dst);
            let mut q = Quarantine::create(&repo.join("objects")).unwrap();
            let none: Option<&Bases> = None;
            let written = crate::objects::pack_write::write_to_directory(
                &mut &pack[..],
                &q.pack_dir(),
                none,
                gix_hash::Kind::Sha1,
                gix_pack::bundle::write::Options {
                    // The reading thread resolves, as for a pack to be unpacked.
                    thread_limit: Some(1),
                    ..Default::default()
                },
                keep,
            )
            .unwrap();
            let kept = written.kept;
            let pack_path = written.data_path.unwrap();
            let index =
                gix_pack::index::File::at(written.index_path.unwrap(), gix_hash::Kind::Sha1)
                    .unwrap();
            // The chain is there: walked from each object, its deltas add up to many times
            // their number.
            let data = gix_pack::data::File::at(&pack_path, index.object_hash()).unwrap();
            let mut inflate = gix_zlib::Inflate::default();
            let in_pack = |id: &gix_hash::oid| {
                Ok(index.lookup(id).map(|i| {
                    let at = data.entry(index.pack_offset_at_index(i)).unwrap();
                    gix_pack::data::decode::header::ResolvedBase::InPack(at)
                }))
            };
            let walked: u64 = index
                .iter()
                .map(|e| {
                    let at = data.entry(e.pack_offset).unwrap();
                    // The size read from a delta's own first bytes is its object's.
                    if at.header.is_delta() {
                        let size = delta_result_size(&data, &at, &mut inflate);
                        let header = data.decode_header(at.clone(), &mut inflate, &in_pack);
                        assert_eq!(size, Some(header.unwrap().object_size), "{n}");
                    }
                    let header = data.decode_header(at, &mut inflate, &in_pack).unwrap();
                    u64::from(header.num_deltas)
                })
                .sum();
            let deltas = u64::from(crate::test_git::deltas_in(&index));
            assert!(
                deltas >= 50 && walked > 10 * deltas,
                "{n}: {deltas} deltas, {walked} walked"
            );
            let from_reading = kept.len() as u64;
            let unpacked = unpack_objects(
                &mut q,
                &pack_path,
                &index,
                &[],
                kept,
                usize::MAX,
                Default::default(),
            )
            .unwrap();
            assert_eq!(unpacked.from_reading, from_reading, "{n}");
            match keep {
                0 => {
                    assert_eq!(from_reading, 0, "{n}");
                    assert_eq!(unpacked.deltas_applied, deltas, "{n}");
                }
                // Every object written from the reading thread's bytes: none decoded.
                UNPACK_HAND_BACK_BYTES => {
                    assert_eq!(from_reading, 60, "{n}");
                    assert_eq!(unpacked.deltas_applied, 0, "{n}");
                }
                _ => {
                    assert!(from_reading > 5 && from_reading < 55, "{n}: {from_reading}");
                    // A delta after them applied once, its base among the kept ones.
                    assert!(unpacked.deltas_applied <= deltas, "{n}: {unpacked:?}");
                }
            }
            assert_eq!(q.loose.len(), 60, "{n}");
            q.migrate(&repo.join("objects")).unwrap();
            let count = git(&repo, &["count-objects", "-v"]);
            assert!(count.contains("count: 60\n"), "{n}: {count}");
            git(&repo, &["fsck", "--strict"]);
        }
    }

}
