//! The objects a repository holds that are not known to be complete: `objects/info/berth-incomplete`,
//! one id in hex a line.
//!
//! berth's connectivity check ([`crate::objects::connectivity`]) stops at an object the
//! repository has and takes it as complete, where git's `rev-list --objects <tips> --not
//! --all` starts from the refs. As in git, a push whose refs are connected is accepted whole,
//! even if its pack also holds objects no new ref reaches that link to missing ones (a commit
//! whose parent nobody sent); those enter the repository with the rest. Without this list a
//! later push of a ref at such a commit, with no objects, would then be taken as complete, and
//! the ref would name a history with holes (git refuses it: `missing necessary objects`).
//!
//! So the objects of a push that are not complete are listed here before any of them moves
//! in ([`crate::objects::ingest::Quarantine::migrate`]), and the check walks through a listed
//! object instead of stopping at it. Nothing is listed for a push whose pack links only to
//! objects the repository has (the check's fast path, every push a git client makes). The
//! list only grows: an entry whose object was completed later (or pruned by `git gc`) costs
//! a walk through it, never a wrong verdict. Objects git itself put in the repository (a
//! push through `git receive-pack`) are not listed.
//!
//! A commit under a client's shallow commit (a push from a shallow clone) is complete once
//! that commit is recorded as a shallow root of the repository (`$GIT_DIR/shallow`,
//! `receive.shallowUpdate`), which is decided per command up to the ref update, after the
//! objects moved in. Such commits are listed in a file of their own push ([`Pending`], under
//! [`PENDING`]) before they move in, read as part of the list; once the push is over
//! ([`Pending::settle`]) the file is removed when every root they need was recorded, or its ids
//! are added to the list for good when one was not (a refused command). A push holds its file
//! locked until then; one that ends before that (killed) leaves its file unlocked, still read
//! (listed too long costs a walk, never a wrong verdict), and the next push that settles its
//! own settles it too ([`reap`]).
//!
//! Where the renames into the object directories are made durable (directories synced: a
//! cluster node's default), a power loss makes them durable in no particular order, so a
//! commit could outlive its tree. The loose objects a push moves in are then listed in its
//! file too (`moving` lines), before the first moves, until its moves are synced; a file a
//! power loss left has them listed for good by [`reap`].
//!
//! Untrusted input: the list, and the commits of each push's file, are bounded
//! ([`MAX_BYTES`]); a push that would grow either past that, or leave the list too little room
//! for every push's file to settle into it ([`Room::Admit`]), is refused at its migration,
//! unless a prune ([`Pruning`], decided by [`crate::objects::incomplete_prune`]) makes room
//! first: an entry whose object is gone (`git gc` pruned it) or is complete now leaves the
//! list. A prune holds the list's gate ([`GATE`], `flock`) alone, and a push holds it shared
//! from listing its objects until they are in ([`Listed`]), so that a prune never takes an
//! object listed but not yet moved in for a pruned one. The `moving` lines are as many as the
//! push's loose objects (fewer than `receive.unpackLimit`); a dead push's that would pass the
//! bound stay in its file, still read.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use foldhash::HashSet;
use gix_hash::ObjectId;

/// The list's place under the object directory.
pub const FILE: &str = "info/berth-incomplete";

/// The directory of the pushes' own files ([`Pending`]) under the object directory.
pub const PENDING: &str = "info/berth-incomplete.d";

/// The list is not grown past this many bytes (about 390,000 SHA-1 ids), nor a push's own file.
pub const MAX_BYTES: u64 = 16 << 20;

/// The list's gate under the object directory: `flock`ed shared by a push from listing its
/// objects until they are in ([`Listed`]), exclusively by a prune ([`Pruning`]). Its
/// modification time is when a prune last started (the Unix epoch: never).
pub const GATE: &str = "info/berth-incomplete.gate";

/// A prune starts at most this often in a repository: one reads the whole list and walks
/// each listed object, which a client that keeps pushing incomplete objects into a full list
/// must not be able to make the server do on every push.
pub const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// What of a push is not complete, as the connectivity check found it
/// ([`crate::objects::connectivity::Check::incomplete`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Found {
    /// Objects that reach a missing object: listed for good ([`append`]).
    pub missing: Vec<ObjectId>,
    /// Commits complete once all of [`Found::roots`] are shallow commits of the repository
    /// ([`Pending`]).
    pub rooted: Vec<ObjectId>,
    /// The new shallow roots [`Found::rooted`] need, each once.
    pub roots: Vec<ObjectId>,
}

/// Why the list could not be read or grown.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// It could not be read, written or synced.
    #[error("{path}: {source}")]
    Io {
        /// The list.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// Growing it would pass [`MAX_BYTES`], a prune or not.
    #[error(
        "{path} would pass {max} bytes: run `git gc --prune=now` to drop unreachable objects; the next push that needs room prunes the list"
    )]
    TooLarge {
        /// The list.
        path: PathBuf,
        /// [`MAX_BYTES`].
        max: u64,
    },
    /// A push's own file ([`Pending`]) would pass [`MAX_BYTES`].
    #[error(
        "{count} commits of the push need a new shallow root, more than {max} bytes of {path} can list: push the history in parts"
    )]
    TooManyRooted {
        /// The push's file, not written.
        path: PathBuf,
        /// The commits.
        count: usize,
        /// [`MAX_BYTES`].
        max: u64,
    },
}

/// The objects of `objects_dir` listed as not known to be complete, in the list and in the
/// pushes' own files ([`Pending`]); none without either. A line that is not an id of `hash`
/// is skipped.
pub fn read(objects_dir: &Path, hash: gix_hash::Kind) -> Result<HashSet<ObjectId>, Error> {
    read_noting(objects_dir, hash, &mut Seen::default())
}

/// [`read`], noting in `seen` how far the list was read ([`lists_any_since`]).
pub fn read_noting(
    objects_dir: &Path,
    hash: gix_hash::Kind,
    seen: &mut Seen,
) -> Result<HashSet<ObjectId>, Error> {
    let mut ids = HashSet::default();
    scan(objects_dir, hash, Span::Whole, seen, &mut |lines, ids_in| {
        ids.reserve(ids_in);
        ids.extend(lines);
        false
    })?;
    Ok(ids)
}

/// Whether `objects_dir` lists an object (as [`read`] reads the list) for which `wanted` says
/// `true`: the list read through once, nothing collected (every push asks this of the list,
/// whatever its size: a list of 390,000 ids collected into a set twice a push cost 270 ms).
pub fn lists_any(
    objects_dir: &Path,
    hash: gix_hash::Kind,
    wanted: &mut dyn FnMut(&ObjectId) -> bool,
) -> Result<bool, Error> {
    lists_any_since(objects_dir, hash, &mut Seen::default(), wanted)
}

/// [`lists_any`] of what was listed since `seen` was noted (by [`read_noting`] or by this,
/// when it read to the end): the list's lines appended since, and every push's own file. The
/// list only grows by appends, so what it held then is not read again; a list replaced since
/// (a prune renames a new one in place) or shorter is read whole. `seen` is noted again when
/// everything was read (`false`).
pub fn lists_any_since(
    objects_dir: &Path,
    hash: gix_hash::Kind,
    seen: &mut Seen,
    wanted: &mut dyn FnMut(&ObjectId) -> bool,
) -> Result<bool, Error> {
    scan(objects_dir, hash, Span::Since, seen, &mut |mut lines, _| {
        Iterator::any(&mut lines, |id| wanted(&id))
    })
}

/// How far a look through the list got ([`lists_any_since`]): the list file it read (device
/// and inode) and where its last whole line ended; nothing yet by default.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    list: Option<Place>,
}

/// The list file as [`Seen`] notes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    dev: u64,
    ino: u64,
    /// The end of the last whole line read.
    upto: u64,
}

/// What of the list a [`scan`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Span {
    /// All of it.
    Whole,
    /// What was appended since [`Seen`] (all of it if the file is another or shorter).
    Since,
}

/// Give `each` the ids of the list (as `span` says), then of each push's own file, with about
/// how many there are; `true` when `each` said so for one of them (the rest is not read).
/// `seen` is noted when everything was read.
fn scan(
    objects_dir: &Path,
    hash: gix_hash::Kind,
    span: Span,
    seen: &mut Seen,
    each: &mut dyn FnMut(&mut dyn Iterator<Item = ObjectId>, usize) -> bool,
) -> Result<bool, Error> {
    let since = match span {
        Span::Whole => None,
        Span::Since => seen.list,
    };
    let (found, place) = ids_in(&objects_dir.join(FILE), hash, since, each)?;
    if found {
        return Ok(true);
    }
    let dir = objects_dir.join(PENDING);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            seen.list = place;
            return Ok(false);
        }
        Err(source) => return Err(Error::Io { path: dir, source }),
    };
    for entry in entries {
        let entry = entry.map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        if entry
            .file_name()
            .as_encoded_bytes()
            .starts_with(WRITING.as_bytes())
        {
            continue;
        }
        if ids_in(&entry.path(), hash, None, each)?.0 {
            return Ok(true);
        }
    }
    seen.list = place;
    Ok(false)
}

/// Give `each` the ids listed in `path` (the list, or a push's own file) from where `since`
/// ended, if it is still that file and not shorter, else from its start; `true` when `each`
/// said so; where its last whole line ended (nothing when it is gone).
fn ids_in(
    path: &Path,
    hash: gix_hash::Kind,
    since: Option<Place>,
    each: &mut dyn FnMut(&mut dyn Iterator<Item = ObjectId>, usize) -> bool,
) -> Result<(bool, Option<Place>), Error> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::MetadataExt;
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((false, None)),
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(io)?;
    let start = match since {
        Some(p) if (p.dev, p.ino) == (meta.dev(), meta.ino()) && p.upto <= meta.len() => p.upto,
        _ => 0,
    };
    let mut data = Vec::with_capacity((meta.len() - start) as usize);
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    file.read_to_end(&mut data).map_err(io)?;
    // A last line without its newline (an append under way) is read now and again next time.
    let whole = data.iter().rposition(|b| *b == b'\n').map_or(0, |at| at + 1);
    let place = Place {
        dev: meta.dev(),
        ino: meta.ino(),
        upto: start + whole as u64,
    };
    Ok((ids_of(&data, hash, each), Some(place)))
}

/// Give `each` the ids of the lines of `data`.
fn ids_of(
    data: &[u8],
    hash: gix_hash::Kind,
    each: &mut dyn FnMut(&mut dyn Iterator<Item = ObjectId>, usize) -> bool,
) -> bool {
    use gix_object::bstr::ByteSlice;
    // Split with memchr (bstr's): splitting byte by byte was a fifth of looking through a
    // list of 390,000 ids.
    let mut lines = data
        .lines()
        .map(|l| l.strip_prefix(MOVING).unwrap_or(l))
        .filter(|l| l.len() == hash.len_in_hex())
        .filter_map(|l| ObjectId::from_hex(l).ok());
    each(&mut lines, data.len() / (hash.len_in_hex() + 1))
}

/// `ids` one in hex a line.
fn lines(ids: &[ObjectId]) -> Vec<u8> {
    let mut lines = Vec::with_capacity(line_bytes(ids) as usize);
    let mut hex = gix_hash::Kind::hex_buf();
    for id in ids {
        lines.extend_from_slice(id.hex_to_buf(&mut hex).as_bytes());
        lines.push(b'\n');
    }
    lines
}

/// How many bytes [`lines`] of `ids` take.
fn line_bytes(ids: &[ObjectId]) -> u64 {
    ids.first()
        .map_or(0, |id| ids.len() as u64 * (id.kind().len_in_hex() as u64 + 1))
}

/// The bytes of every push's own file ([`PENDING`]), as they are now.
fn pending_bytes(objects_dir: &Path) -> Result<u64, Error> {
    let dir = objects_dir.join(PENDING);
    let io = |source| Error::Io {
        path: dir.clone(),
        source,
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(e)),
    };
    let mut bytes = 0u64;
    for entry in entries {
        // One removed meanwhile (its push settled it) counts for nothing.
        match entry.and_then(|e| e.metadata()) {
            Ok(m) => bytes = bytes.saturating_add(m.len()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
    }
    Ok(bytes)
}

/// Objects a push listed ([`append`]): the list's gate ([`GATE`]) held shared until this is
/// dropped, once they are in, so that no prune runs in between.
#[derive(Debug)]
#[must_use = "hold it until the listed objects are in"]
pub struct Listed {
    _gate: Option<std::fs::File>,
}

/// Open `objects_dir`'s gate ([`GATE`]), creating it (and `info/`) when there is none, its
/// time set to the epoch: no prune started yet.
fn open_gate(objects_dir: &Path) -> io::Result<std::fs::File> {
    let path = objects_dir.join(GATE);
    match std::fs::File::open(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        opened => return opened,
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(file) => {
            // Another user's gate (a shared repository) keeps its time: best effort.
            let _ = file.set_modified(std::time::UNIX_EPOCH);
            Ok(file)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => std::fs::File::open(&path),
        Err(e) => Err(e),
    }
}

/// The shallow commits recorded in `git_dir`'s `shallow` file (git's `$GIT_DIR/shallow`), in
/// file order; none without it. A line that is not an id of `hash` is skipped.
pub fn recorded_shallow(git_dir: &Path, hash: gix_hash::Kind) -> Vec<ObjectId> {
    std::fs::read_to_string(git_dir.join("shallow"))
        .map(|s| {
            s.lines()
                .filter_map(|l| ObjectId::from_hex(l.trim().as_bytes()).ok())
                .filter(|id| id.kind() == hash)
                .collect()
        })
        .unwrap_or_default()
}

/// What [`append`] makes sure there is room for under [`MAX_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room<'a> {
    /// A push's objects, before they move in: its ids, and as many more as `rooted` (the
    /// commits its own file will list, [`Pending`]), beside the list and every push's own file
    /// as they are now. Each file may settle into the list, so what is admitted fits in it
    /// then; a file that could not settle is counted against the pushes that come after it,
    /// not left to grow with each push beside a full list.
    Admit {
        /// The commits of the push that need new shallow roots ([`Found::rooted`]).
        rooted: &'a [ObjectId],
    },
    /// A push's own file settling into the list: only the list, its ids were counted when its
    /// push was admitted.
    Settle,
}

/// Add `ids` to the list of `objects_dir` (one `write` in append mode, so that concurrent
/// pushes do not mix their lines), synced as `durability` says for objects, before the caller
/// moves them in, if there is `room` ([`Error::TooLarge`] if not); the gate stays held shared
/// until the returned [`Listed`] is dropped (waiting for a prune under way to end first).
pub fn append(
    objects_dir: &Path,
    ids: &[ObjectId],
    room: Room<'_>,
    durability: crate::fsync::Durability,
) -> Result<Listed, Error> {
    if ids.is_empty() && matches!(room, Room::Settle | Room::Admit { rooted: [] }) {
        return Ok(Listed { _gate: None });
    }
    let path = objects_dir.join(FILE);
    let io = |source| Error::Io {
        path: path.clone(),
        source,
    };
    let gate = match ids.is_empty() {
        true => None,
        false => Some(
            open_gate(objects_dir)
                .and_then(|gate| gate.lock_shared().map(|()| gate))
                .map_err(|source| Error::Io {
                    path: objects_dir.join(GATE),
                    source,
                })?,
        ),
    };
    let lines = lines(ids);
    let (held, created) = match std::fs::metadata(&path) {
        Ok(m) => (m.len(), false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (0, true),
        Err(e) => return Err(io(e)),
    };
    let wanted = match room {
        Room::Settle => lines.len() as u64,
        Room::Admit { rooted } => (lines.len() as u64)
            .saturating_add(line_bytes(rooted))
            .saturating_add(pending_bytes(objects_dir)?),
    };
    if held.saturating_add(wanted) > MAX_BYTES {
        return Err(Error::TooLarge {
            path,
            max: MAX_BYTES,
        });
    }
    if ids.is_empty() {
        return Ok(Listed { _gate: None });
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .map_err(io)?;
    file.write_all(&lines).map_err(io)?;
    durability
        .sync(crate::fsync::Components::OBJECTS, &file)
        .map_err(io)?;
    // A new list's name is made durable too: objects renamed in after it must not outlive it
    // on a power loss.
    if created && let Some(dir) = path.parent() {
        durability
            .sync_dir(crate::fsync::Components::OBJECTS, dir)
            .map_err(io)?;
    }
    Ok(Listed { _gate: gate })
}

/// Why [`Pruning::start`] did not start a prune.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStarted {
    /// The gate is held: by a push between listing its objects and moving them in, by another
    /// prune, or for a moment by a process forked meanwhile (a hook's, in `berth serve`: it
    /// holds a copy of a closing push's descriptor until it runs its program).
    Busy,
    /// The last prune started less than `every` ago.
    TooSoon,
    /// Its start cannot be recorded: the gate's time cannot be set (another user's, in a shared
    /// repository), and a prune whose start is not recorded could run on every push.
    Unrecorded,
}

/// The list held for a prune: its gate ([`GATE`]) held exclusively, so that no push lists
/// anything until this is dropped; the list's ids as read then, each once. What to keep is
/// decided elsewhere ([`crate::objects::incomplete_prune`]), then written by [`Pruning::keep`].
#[derive(Debug)]
pub struct Pruning {
    objects_dir: PathBuf,
    ids: Vec<ObjectId>,
    _gate: std::fs::File,
}

impl Pruning {
    /// Hold `objects_dir`'s list for a prune and read it; [`NotStarted`] says why not. Its
    /// start is recorded first, so that a prune that fails counts too.
    pub fn start(
        objects_dir: &Path,
        hash: gix_hash::Kind,
        every: std::time::Duration,
    ) -> Result<Result<Pruning, NotStarted>, Error> {
        let gate_path = objects_dir.join(GATE);
        let io = |source| Error::Io {
            path: gate_path.clone(),
            source,
        };
        let gate = open_gate(objects_dir).map_err(io)?;
        match gate.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(Err(NotStarted::Busy)),
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        let now = std::time::SystemTime::now();
        let last = gate.metadata().and_then(|m| m.modified()).map_err(io)?;
        if now.duration_since(last).is_ok_and(|since| since < every) {
            return Ok(Err(NotStarted::TooSoon));
        }
        // The time is set through a handle that may write (the one locked may be read-only);
        // a gate whose time this user cannot set (another's, in a shared repository) is never
        // pruned through, rather than pruned on every push.
        let recorded = std::fs::OpenOptions::new()
            .write(true)
            .open(&gate_path)
            .and_then(|f| f.set_modified(now));
        if let Err(e) = recorded {
            tracing::warn!(gate = ?gate_path, "the list of incomplete objects is not pruned: its gate's time cannot be set: {e}");
            return Ok(Err(NotStarted::Unrecorded));
        }
        let mut ids = HashSet::default();
        ids_in(&objects_dir.join(FILE), hash, None, &mut |lines, n| {
            ids.reserve(n);
            ids.extend(lines);
            false
        })?;
        Ok(Ok(Pruning {
            objects_dir: objects_dir.to_owned(),
            ids: ids.into_iter().collect(),
            _gate: gate,
        }))
    }

    /// The list's ids, each once.
    pub fn ids(&self) -> &[ObjectId] {
        &self.ids
    }

    /// Replace the list with `kept` (written beside it, synced as `durability` says for
    /// objects, renamed over it, its directory synced), or remove it when `kept` is empty.
    pub fn keep(self, kept: &[ObjectId], durability: crate::fsync::Durability) -> Result<(), Error> {
        use crate::fsync::Components;
        let path = self.objects_dir.join(FILE);
        let io = |path: &Path, source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let dir = path.parent().unwrap_or(&self.objects_dir);
        if kept.is_empty() {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io(&path, e)),
                _ => {}
            }
        } else {
            let mut pruned = path.clone().into_os_string();
            pruned.push(".pruned");
            let pruned = PathBuf::from(pruned);
            let mut file = std::fs::File::create(&pruned).map_err(|e| io(&pruned, e))?;
            file.write_all(&lines(kept))
                .and_then(|()| durability.sync(Components::OBJECTS, &file))
                .and_then(|()| std::fs::rename(&pruned, &path))
                .map_err(|e| io(&pruned, e))?;
        }
        durability
            .sync_dir(Components::OBJECTS, dir)
            .map_err(|e| io(dir, e))
    }
}

/// A push's commits that need new shallow roots ([`Found::rooted`]), listed in a file of its
/// own under [`PENDING`] before they move in, until [`Pending::settle`] knows whether their
/// roots were recorded; and, when the renames of loose objects are made durable, the loose
/// objects the push moves in, until they are (a power loss makes the renames durable in no
/// particular order: a commit could outlive its tree). The file holds the ids one a line,
/// then `shallow <root>` lines, then `moving <id>` lines, and stays locked (`flock`) by the
/// push until it is settled: a file nobody holds belongs to a push that ended without settling
/// it (killed, or the machine lost power), which [`reap`] settles in its place. Dropped
/// unsettled, the file is such a file.
#[derive(Debug)]
#[must_use = "settle it once the push's objects moved in and its refs are updated"]
pub struct Pending {
    objects_dir: PathBuf,
    path: PathBuf,
    ids: Vec<ObjectId>,
    roots: Vec<ObjectId>,
    hash: gix_hash::Kind,
    /// The file, open and locked until the push is over.
    _held: std::fs::File,
}

/// How [`Pending::settle`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Every root was recorded: the push's file is gone, its commits are complete.
    Complete,
    /// A root was not: the push's commits are in the list for good.
    Listed,
}

/// The prefix of a line of a push's file naming a loose object the push moves in
/// ([`Pending::write`]'s `moving`).
const MOVING: &[u8] = b"moving ";

/// The prefix of a push's file while it is written (not read as part of the list: nothing of
/// that push moved in yet).
const WRITING: &str = ".";

impl Pending {
    /// List `found`'s [`Found::rooted`], and the loose objects `moving` in, in `objects_dir`'s
    /// file `name` (unique to the push: its quarantine's name), synced as `durability` says for
    /// objects, with its directory, before the caller moves them in: written under a name the
    /// list's readers skip, locked, then linked under its own. `None` when nothing needs a root
    /// and nothing moves. `moving` is not bounded by [`MAX_BYTES`]: its count is the
    /// repository's `receive.unpackLimit`'s, and the push removes it when its objects are in.
    pub fn write(
        objects_dir: &Path,
        name: &std::ffi::OsStr,
        found: &Found,
        moving: &[ObjectId],
        durability: crate::fsync::Durability,
    ) -> Result<Option<Pending>, Error> {
        use crate::fsync::Components;
        let Some(hash) = found.rooted.first().or(moving.first()).map(ObjectId::kind) else {
            return Ok(None);
        };
        let dir = objects_dir.join(PENDING);
        let path = dir.join(name);
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let mut content = if found.rooted.is_empty() {
            Vec::new()
        } else {
            lines(&found.rooted)
        };
        if content.len() as u64 > MAX_BYTES {
            return Err(Error::TooManyRooted {
                path,
                count: found.rooted.len(),
                max: MAX_BYTES,
            });
        }
        let mut hex = gix_hash::Kind::hex_buf();
        for root in &found.roots {
            content.extend_from_slice(b"shallow ");
            content.extend_from_slice(root.hex_to_buf(&mut hex).as_bytes());
            content.push(b'\n');
        }
        for id in moving {
            content.extend_from_slice(MOVING);
            content.extend_from_slice(id.hex_to_buf(&mut hex).as_bytes());
            content.push(b'\n');
        }
        let created = !dir.is_dir();
        if created {
            std::fs::create_dir_all(&dir).map_err(io)?;
        }
        let mut writing = std::ffi::OsString::from(WRITING);
        writing.push(name);
        let writing = dir.join(writing);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&writing)
            .map_err(io)?;
        // Locked before anything else: a reaper that took it in between removed it, and the
        // link below fails (nothing of the push moved in yet).
        let written = file
            .lock()
            .and_then(|()| file.write_all(&content))
            .and_then(|()| durability.sync(Components::OBJECTS, &file))
            // Linked, not renamed: a file of that name is never replaced (the name is unique;
            // renamed where the file system has no hard links, as git's `core.createObject`
            // falls back).
            .and_then(|()| match std::fs::hard_link(&writing, &path) {
                Ok(()) => std::fs::remove_file(&writing),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(e),
                Err(_) => std::fs::rename(&writing, &path),
            })
            .and_then(|()| durability.sync_dir(Components::OBJECTS, &dir))
            .and_then(|()| match created {
                true => durability.sync_dir(Components::OBJECTS, objects_dir.join("info").as_path()),
                false => Ok(()),
            });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&writing);
            return Err(io(e));
        }
        Ok(Some(Pending {
            objects_dir: objects_dir.to_owned(),
            path,
            ids: found.rooted.clone(),
            roots: found.roots.clone(),
            hash,
            _held: file,
        }))
    }

    /// The push is over, its objects moved in and their renames made durable, its roots
    /// recorded or not in `shallow` (the repository's shallow commits now, read from
    /// `shallow_dir`/shallow): the file is removed when every root is there (the directory
    /// holding `shallow` synced first as `durability` says, so that the roots outlive the file
    /// on a power loss), or its ids are added to the list for good first ([`append`]); the
    /// loose objects it listed as moving are in. Then the files of pushes killed before they
    /// settled theirs ([`reap`]). On an error the file stays (and is reaped once the push is
    /// over).
    pub fn settle(
        self,
        shallow: &[ObjectId],
        shallow_dir: &Path,
        durability: crate::fsync::Durability,
    ) -> Result<Settled, Error> {
        let settled = settle(
            &self.objects_dir,
            &self.path,
            Listing {
                ids: &self.ids,
                roots: &self.roots,
                moving: &[],
            },
            shallow,
            shallow_dir,
            durability,
        )?;
        // Its own file is gone now, whatever reap finds.
        reap(&self.objects_dir, self.hash, shallow, shallow_dir, durability)?;
        Ok(settled)
    }
}

/// What a push's file lists ([`Pending::write`]).
struct Listing<'a> {
    /// Commits complete once all of `roots` are shallow commits of the repository.
    ids: &'a [ObjectId],
    roots: &'a [ObjectId],
    /// Loose objects that were moving in: listed for good when the push did not settle.
    moving: &'a [ObjectId],
}

/// Remove the file `path` with `listing` when all of its roots are in `shallow`, else add its
/// ids to the list first; its `moving` ids are added to the list either way (in the same
/// write).
fn settle(
    objects_dir: &Path,
    path: &Path,
    listing: Listing<'_>,
    shallow: &[ObjectId],
    shallow_dir: &Path,
    durability: crate::fsync::Durability,
) -> Result<Settled, Error> {
    let io = |path: &Path, source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let settled = if listing.roots.iter().all(|r| shallow.contains(r)) {
        if !listing.roots.is_empty() {
            durability
                .sync_dir(crate::fsync::Components::OBJECTS, shallow_dir)
                .map_err(|e| io(shallow_dir, e))?;
        }
        drop(append(objects_dir, listing.moving, Room::Settle, durability)?);
        Settled::Complete
    } else {
        drop(append(
            objects_dir,
            &[listing.ids, listing.moving].concat(),
            Room::Settle,
            durability,
        )?);
        Settled::Listed
    };
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io(path, e)),
        _ => Ok(settled),
    }
}

/// Settle the files of pushes that ended without settling theirs (killed, or gone on an
/// error, or the machine lost power): a file no push holds locked. The loose objects it lists
/// as moving are added to the list (some may have moved in without what they link to); then
/// one whose roots are all in `shallow` (the repository's shallow commits, read from
/// `shallow_dir`/shallow) is removed, else its ids are added to the list first; one still
/// being written is removed (nothing of its push moved in). Run by
/// [`Pending::settle`] once a push settled its own, so that a repository fed by shallow pushes
/// does not keep them.
/// How many were settled. Also run by a push that finds no room in the list for its own
/// objects ([`crate::objects::ingest::Quarantine::migrate`]): the files of dead pushes count
/// against that room ([`Room::Admit`]).
pub fn reap(
    objects_dir: &Path,
    hash: gix_hash::Kind,
    shallow: &[ObjectId],
    shallow_dir: &Path,
    durability: crate::fsync::Durability,
) -> Result<usize, Error> {
    use std::os::unix::fs::MetadataExt;
    let dir = objects_dir.join(PENDING);
    let io = |path: &Path, source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(&dir, e)),
    };
    let mut reaped = 0;
    for entry in entries {
        let path = entry.map_err(|e| io(&dir, e))?.path();
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&path, e)),
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path, e)),
        }
        // Still the file of that name (not one its push removed as it settled it).
        let same = match (file.metadata(), std::fs::metadata(&path)) {
            (Ok(held), Ok(named)) => held.ino() == named.ino() && held.dev() == named.dev(),
            _ => false,
        };
        if !same {
            continue;
        }
        let writing = path
            .file_name()
            .is_some_and(|n| n.as_encoded_bytes().starts_with(WRITING.as_bytes()));
        if writing {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io(&path, e)),
                _ => {}
            }
        } else {
            let data = std::fs::read(&path).map_err(|e| io(&path, e))?;
            let (mut ids, mut roots, mut moving) = (Vec::new(), Vec::new(), Vec::new());
            for line in data.split(|b| *b == b'\n') {
                let (line, into) = match (line.strip_prefix(b"shallow "), line.strip_prefix(MOVING))
                {
                    (Some(root), _) => (root, &mut roots),
                    (_, Some(id)) => (id, &mut moving),
                    _ => (line, &mut ids),
                };
                if line.len() == hash.len_in_hex()
                    && let Ok(id) = ObjectId::from_hex(line)
                {
                    into.push(id);
                }
            }
            let listing = Listing {
                ids: &ids,
                roots: &roots,
                moving: &moving,
            };
            settle(objects_dir, &path, listing, shallow, shallow_dir, durability)?;
        }
        reaped += 1;
    }
    Ok(reaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A push that lists nothing of its own.
    const ADMIT: Room = Room::Admit { rooted: &[] };

    #[test]
    fn listed_ids_are_read_back_and_the_list_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let sha1 = gix_hash::Kind::Sha1;
        assert!(read(dir.path(), sha1).unwrap().is_empty());
        let a = ObjectId::from_hex(b"1111111111111111111111111111111111111111").unwrap();
        let b = ObjectId::from_hex(b"2222222222222222222222222222222222222222").unwrap();
        drop(append(dir.path(), &[a], ADMIT, Default::default()).unwrap());
        drop(append(dir.path(), &[b, a], ADMIT, Default::default()).unwrap());
        drop(append(dir.path(), &[], ADMIT, Default::default()).unwrap());
        let listed = read(dir.path(), sha1).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.contains(&a) && listed.contains(&b));
        // A line of another length or not hex is skipped.
        let path = dir.path().join(FILE);
        let mut data = std::fs::read(&path).unwrap();
        data.extend_from_slice(b"zz\n33333333333333333333333333333333333333zz\n");
        std::fs::write(&path, data).unwrap();
        assert_eq!(read(dir.path(), sha1).unwrap().len(), 2);
        // Past the bound, nothing is added.
        let f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.set_len(MAX_BYTES - 10).unwrap();
        let err = append(dir.path(), &[b], ADMIT, Default::default()).unwrap_err();
        assert!(matches!(err, Error::TooLarge { .. }), "{err}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), MAX_BYTES - 10);
    }

    /// What was on the list when it was last read whole is not looked through again: only the
    /// lines appended since, and every push's own file. A list replaced (a prune renames a new
    /// one in place) or shorter is read whole again; a last line without its newline is read,
    /// and read again once it has one.
    #[test]
    fn a_look_through_the_list_reads_only_what_was_listed_since_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path();
        let sha1 = gix_hash::Kind::Sha1;
        let id = |c: char| ObjectId::from_hex(c.to_string().repeat(40).as_bytes()).unwrap();
        let since = |seen: &mut Seen| -> Vec<ObjectId> {
            let mut given = Vec::new();
            let found = lists_any_since(objects, sha1, seen, &mut |id| {
                given.push(*id);
                false
            });
            assert!(!found.unwrap());
            given
        };
        let settle = |ids: &[ObjectId]| drop(append(objects, ids, Room::Settle, Default::default()).unwrap());
        settle(&[id('1')]);
        let mut seen = Seen::default();
        assert_eq!(read_noting(objects, sha1, &mut seen).unwrap().len(), 1);
        assert!(since(&mut seen).is_empty());
        settle(&[id('2'), id('3')]);
        assert_eq!(since(&mut seen), vec![id('2'), id('3')]);
        assert!(since(&mut seen).is_empty());
        // Looked through from nothing noted: all of it.
        assert_eq!(since(&mut Seen::default()).len(), 3);

        // A push's own file, every time.
        let pending = objects.join(PENDING);
        std::fs::create_dir_all(&pending).unwrap();
        std::fs::write(pending.join("incoming-x"), lines(&[id('4')])).unwrap();
        assert_eq!(since(&mut seen), vec![id('4')]);
        assert_eq!(since(&mut seen), vec![id('4')]);
        std::fs::remove_file(pending.join("incoming-x")).unwrap();

        // An append under way: its id read now, and again once its line is whole.
        let list = objects.join(FILE);
        let mut f = std::fs::OpenOptions::new().append(true).open(&list).unwrap();
        f.write_all(&lines(&[id('5')])[..40]).unwrap();
        assert_eq!(since(&mut seen), vec![id('5')]);
        f.write_all(b"\n").unwrap();
        assert_eq!(since(&mut seen), vec![id('5')]);
        assert!(since(&mut seen).is_empty());

        // Shorter (the same file): read whole.
        f.set_len(41).unwrap();
        assert_eq!(since(&mut seen), vec![id('1')]);
        // Replaced by a new file, as a prune does: read whole, however long.
        settle(&[id('6'), id('7')]);
        assert_eq!(since(&mut seen), vec![id('6'), id('7')]);
        let new = objects.join("info/new");
        std::fs::write(&new, lines(&[id('8'), id('9'), id('a'), id('b')])).unwrap();
        std::fs::rename(&new, &list).unwrap();
        assert_eq!(since(&mut seen), vec![id('8'), id('9'), id('a'), id('b')]);
        assert!(since(&mut seen).is_empty());
    }

    /// A push is admitted only with room in the list for its ids, the commits its own file
    /// will list, and every push's own file as it is (each may settle into the list); a file
    /// settling needs room for its own ids only. So files that could not settle into a full
    /// list do not pile up with each push beside it.
    #[test]
    fn a_push_is_admitted_with_room_for_every_push_s_own_file_to_settle() {
        let dir = tempfile::tempdir().unwrap();
        let a = ObjectId::from_hex(b"1111111111111111111111111111111111111111").unwrap();
        let b = ObjectId::from_hex(b"2222222222222222222222222222222222222222").unwrap();
        let list = dir.path().join(FILE);
        std::fs::create_dir_all(list.parent().unwrap()).unwrap();
        std::fs::File::create(&list)
            .unwrap()
            .set_len(MAX_BYTES - 100)
            .unwrap();
        // Room for two lines of 41 bytes.
        drop(append(dir.path(), &[a], Room::Admit { rooted: &[b] }, Default::default()).unwrap());
        let too_large = |r: Result<Listed, Error>| matches!(r, Err(Error::TooLarge { .. }));
        let rooted = [a, b, a];
        assert!(too_large(append(
            dir.path(),
            &[],
            Room::Admit { rooted: &rooted },
            Default::default()
        )));
        // A file of another push, not settled (say the list had no room then): counted.
        let room_for_two = || {
            let f = std::fs::OpenOptions::new().write(true).open(&list).unwrap();
            f.set_len(MAX_BYTES - 100).unwrap();
        };
        room_for_two();
        let pending = dir.path().join(PENDING);
        std::fs::create_dir_all(&pending).unwrap();
        std::fs::write(pending.join("incoming-x"), [b'1'; 41]).unwrap();
        assert!(too_large(append(dir.path(), &[a], Room::Admit { rooted: &[b] }, Default::default())));
        assert!(too_large(append(dir.path(), &[], Room::Admit { rooted: &[b, a] }, Default::default())));
        drop(append(dir.path(), &[], Room::Admit { rooted: &[b] }, Default::default()).unwrap());
        drop(append(dir.path(), &[a, b], Room::Settle, Default::default()).unwrap());
        assert_eq!(std::fs::metadata(&list).unwrap().len(), MAX_BYTES - 18);
    }

    /// A push's own file is read as part of the list until it is settled: removed when every
    /// root is recorded, its ids added to the list when one is not.
    #[test]
    fn a_push_s_own_file_is_read_until_settled_then_dropped_or_listed() {
        let dir = tempfile::tempdir().unwrap();
        let sha1 = gix_hash::Kind::Sha1;
        let id = |c: u8| ObjectId::from_hex(&[c; 40]).unwrap();
        let (commit, root, other) = (id(b'1'), id(b'2'), id(b'3'));
        let found = Found {
            missing: vec![other],
            rooted: vec![commit, root],
            roots: vec![root],
        };
        let none = Found {
            missing: vec![other],
            ..Found::default()
        };
        assert!(
            Pending::write(dir.path(), "p0".as_ref(), &none, &[], Default::default())
                .unwrap()
                .is_none()
        );
        let pending = |name: &str| {
            Pending::write(dir.path(), name.as_ref(), &found, &[], Default::default())
                .unwrap()
                .unwrap()
        };
        let listed = |d: &Path| {
            let mut v: Vec<ObjectId> = read(d, sha1).unwrap().into_iter().collect();
            v.sort();
            v
        };

        let p = pending("p1");
        assert_eq!(listed(dir.path()), vec![commit, root]);
        assert!(Pending::write(dir.path(), "p1".as_ref(), &found, &[], Default::default()).is_err());
        let settled = p.settle(&[other, root], dir.path(), Default::default());
        assert_eq!(settled.unwrap(), Settled::Complete);
        assert!(listed(dir.path()).is_empty());
        assert!(!dir.path().join(FILE).exists());

        let p = pending("p2");
        let settled = p.settle(&[other], dir.path(), Default::default());
        assert_eq!(settled.unwrap(), Settled::Listed);
        assert_eq!(listed(dir.path()), vec![commit, root]);
        let left: Vec<_> = std::fs::read_dir(dir.path().join(PENDING)).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");

        // Past the list's bound, the file stays (still read) and the error says so.
        std::fs::File::create(dir.path().join(FILE))
            .unwrap()
            .set_len(MAX_BYTES - 10)
            .unwrap();
        let p = pending("p3");
        let err = p.settle(&[], dir.path(), Default::default()).unwrap_err();
        assert!(matches!(err, Error::TooLarge { .. }), "{err}");
        assert!(dir.path().join(PENDING).join("p3").exists());

        // A push's own file is bounded as the list is: nothing written past it.
        let count = (MAX_BYTES / 41 + 1) as usize;
        let many = Found {
            rooted: (0..count as u64)
                .map(|i| {
                    let mut raw = [0u8; 20];
                    raw[..8].copy_from_slice(&i.to_be_bytes());
                    ObjectId::from_bytes_or_panic(&raw)
                })
                .collect(),
            roots: vec![root],
            ..Found::default()
        };
        let err = Pending::write(dir.path(), "p4".as_ref(), &many, &[], Default::default());
        assert!(
            matches!(err, Err(Error::TooManyRooted { count: c, .. }) if c == count),
            "{err:?}"
        );
        assert!(!dir.path().join(PENDING).join("p4").exists());
    }

    /// A file no push holds (its push was killed, or dropped it unsettled) is settled by the
    /// next push that settles its own: removed when its roots were recorded, else its ids
    /// listed for good; one still held is left, one killed while being written is removed.
    #[test]
    fn files_of_pushes_that_ended_unsettled_are_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let sha1 = gix_hash::Kind::Sha1;
        let id = |c: u8| ObjectId::from_hex(&[c; 40]).unwrap();
        let found = |commit, root| Found {
            rooted: vec![commit, root],
            roots: vec![root],
            ..Found::default()
        };
        let write = |name: &str, f: &Found| {
            Pending::write(dir.path(), name.as_ref(), f, &[], Default::default())
                .unwrap()
                .unwrap()
        };
        let names = || {
            let mut v: Vec<String> = std::fs::read_dir(dir.path().join(PENDING))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let reap = |shallow: &[ObjectId]| {
            super::reap(dir.path(), sha1, shallow, dir.path(), Default::default()).unwrap()
        };
        let held = write("held", &found(id(b'1'), id(b'2')));
        drop(write("recorded", &found(id(b'3'), id(b'4'))));
        drop(write("refused", &found(id(b'5'), id(b'6'))));
        std::fs::write(dir.path().join(PENDING).join(".writing"), b"").unwrap();
        assert_eq!(names(), vec![".writing", "held", "recorded", "refused"]);
        // Read as part of the list until then, the file being written excepted.
        assert_eq!(read(dir.path(), sha1).unwrap().len(), 6);

        // A file dropped a moment ago can still be locked for a moment: a process another test
        // forks holds a copy of its descriptor until its exec. Reaped by a later reap then, as
        // by a later push on a server: reap until only the held file is left.
        let mut reaped = 0;
        for _ in 0..1000 {
            reaped += reap(&[id(b'4')]);
            if names() == ["held"] {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(reaped, 3);
        assert_eq!(names(), vec!["held"]);
        let listed: HashSet<ObjectId> = read(dir.path(), sha1).unwrap();
        let main: HashSet<ObjectId> = {
            let data = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
            data.lines()
                .map(|l| ObjectId::from_hex(l.as_bytes()).unwrap())
                .collect()
        };
        assert_eq!(main, [id(b'5'), id(b'6')].into_iter().collect());
        assert_eq!(listed.len(), 4, "the held file's two and the refused push's two");

        // Nothing left to reap while the push holds its file; then it settles it.
        assert_eq!(reap(&[]), 0);
        assert_eq!(
            held.settle(&[id(b'2')], dir.path(), Default::default())
                .unwrap(),
            Settled::Complete
        );
        assert_eq!(names(), Vec::<String>::new());
    }

    /// The loose objects a push moves in with its renames made durable are read as part of
    /// the list until the push settles its file (its moves synced by then): not listed after.
    /// A push that never settles (killed, or the machine lost power mid-move, when a commit
    /// may outlive its tree) has them listed for good by the next push's reaping, with its
    /// rooted commits whose roots were not recorded.
    #[test]
    fn objects_moving_in_are_listed_until_their_push_settles_and_for_good_if_it_never_does() {
        let dir = tempfile::tempdir().unwrap();
        let sha1 = gix_hash::Kind::Sha1;
        let id = |c: u8| ObjectId::from_hex(&[c; 40]).unwrap();
        let write = |name: &str, f: &Found, moving: &[ObjectId]| {
            Pending::write(dir.path(), name.as_ref(), f, moving, Default::default())
                .unwrap()
                .unwrap()
        };
        let sorted = |set: HashSet<ObjectId>| {
            let mut v: Vec<ObjectId> = set.into_iter().collect();
            v.sort();
            v
        };
        let main = || -> Vec<ObjectId> {
            let data = std::fs::read_to_string(dir.path().join(FILE)).unwrap_or_default();
            let mut v: Vec<_> = data
                .lines()
                .map(|l| ObjectId::from_hex(l.as_bytes()).unwrap())
                .collect();
            v.sort();
            v
        };
        let none = Found::default();

        // Nothing rooted, nothing moving: no file.
        assert!(
            Pending::write(dir.path(), "p".as_ref(), &none, &[], Default::default())
                .unwrap()
                .is_none()
        );
        // Moving only: read while held, gone once settled, nothing listed for good.
        let own = write("own", &none, &[id(b'1'), id(b'2')]);
        assert_eq!(sorted(read(dir.path(), sha1).unwrap()), vec![id(b'1'), id(b'2')]);
        assert_eq!(
            own.settle(&[], dir.path(), Default::default()).unwrap(),
            Settled::Complete
        );
        assert!(read(dir.path(), sha1).unwrap().is_empty());
        assert_eq!(main(), Vec::<ObjectId>::new());

        // Two pushes that never settled: one moving only, one also rooted (its root not
        // recorded); read as part of the list, then reaped by a push that settles its own.
        drop(write("killed", &none, &[id(b'3'), id(b'4')]));
        let rooted = Found {
            rooted: vec![id(b'5')],
            roots: vec![id(b'6')],
            ..Found::default()
        };
        drop(write("lost", &rooted, &[id(b'7')]));
        let listed = vec![id(b'3'), id(b'4'), id(b'5'), id(b'7')];
        assert_eq!(sorted(read(dir.path(), sha1).unwrap()), listed);
        // A push that settles reaps them. A dead file dropped a moment ago can still be locked
        // by a process another test forks (its copy of the descriptor lives until the exec):
        // then the next push that settles reaps it.
        for n in 0.. {
            let next = write(&format!("next{n}"), &none, &[id(b'8')]);
            assert_eq!(
                next.settle(&[], dir.path(), Default::default()).unwrap(),
                Settled::Complete
            );
            if std::fs::read_dir(dir.path().join(PENDING)).unwrap().count() == 0 {
                break;
            }
            assert!(n < 1000, "the dead pushes' files were never reaped");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(main(), listed, "listed for good: the dead pushes' objects");
        assert_eq!(std::fs::read_dir(dir.path().join(PENDING)).unwrap().count(), 0);
    }
}
