//! The many-ref path of the files backend: one batch of ref updates written as one `packed-refs`
//! rewrite, without a lock file per ref.
//!
//! # Why this is written by hand
//!
//! Measured (benches/README.md): with `gix-ref`, a 10,000-ref push spent almost all of its
//! ~580 ms in the kernel creating and removing one `<ref>.lock` file per ref (40,070 `openat`,
//! 20,000 `unlink`, 10,000 `mkdir`/`rmdir`), although the refs ended up in a single
//! `packed-refs` rewrite. git's own files backend does the same (one loose lock per ref). Here a
//! batch costs a constant number of file operations plus one `readdir` per directory the batch
//! touches; a lock file is taken only for a ref that exists as a loose file.
//!
//! # Protocol
//!
//! 1. Take `packed-refs.lock` (`O_CREAT|O_EXCL`, retried with git's backoff for
//!    `core.packedRefsTimeout`, default 1 s). From here on no one else rewrites `packed-refs`: git takes
//!    this lock for every `packed-refs` write (deletions, `pack-refs`, `gc`).
//! 2. Re-read `packed-refs` under the lock, unless `stat` says it is still the file the push's
//!    snapshot read: then that one is kept (git keeps its packed snapshot so).
//! 3. Scan (`readdir`) every directory that holds, or is a prefix of, a ref of the batch: this
//!    gives, per name, whether a loose file `<ref>`, a `<ref>.lock`, or a directory `<ref>/`
//!    exists, and whether a prefix of the name is a loose ref (directory/file conflict).
//! 4. For each ref that exists as a loose file, take its `<ref>.lock` as git does (retried for
//!    `core.filesRefLockTimeout`, default 100 ms) and read the loose value under it: git's rule is
//!    that a loose file takes precedence over `packed-refs`, so that file must be removed
//!    under its lock once the new value is in `packed-refs`. A ref whose `<ref>.lock` is held
//!    by someone else while no loose file exists is waited for (as long), then scanned again.
//! 5. Compare-and-swap: the current value (loose, else packed) must be the update's old value;
//!    a new ref must not collide with an existing ref or another ref of the batch as file and
//!    directory. Failures give git's per-ref errors.
//! 6. Write `packed-refs.new` (git's format: the `# pack-refs with: peeled fully-peeled sorted `
//!    header, entries sorted by name, a `^<peeled>` line after each ref that peels to another
//!    object, peeled through the object database) and rename it over `packed-refs` while still
//!    holding `packed-refs.lock` (git does exactly this).
//! 7. Check again (step 3's scan), then remove the replaced loose files, append reflogs, and
//!    release the locks.
//!
//! Steps 1 to 5 are [`lock`], the files backend's half of the transaction's prepare step (the
//! `prepared` state is announced after it, with the locks held); 6 and 7 are [`Locked::commit`].
//!
//! # What a concurrent git writer can do
//!
//! git changes a loose ref `X` only while holding `X.lock`, in this order: create `X.lock`,
//! read `X` (the loose file, else `packed-refs`), check its expected old value, rename
//! `X.lock` over `X`. It rewrites `packed-refs` only under `packed-refs.lock`, which we hold
//! from step 1 to the end, so `packed-refs` itself cannot change under us (git waits for us,
//! up to its 1 s timeout). What remains is a git writer `W` on a ref `X` of our batch for which
//! we hold no loose lock (X had no loose file at step 3):
//!
//! - `W` created `X.lock` before our scan: we see the lock and wait for it (step 4); if `W`
//!   wrote `X` we then see the loose file and lock/check it like any loose ref.
//! - `W` created `X.lock` after our scan and read `X` after our rename: it sees our value,
//!   and its own compare-and-swap is against it. Nothing is lost.
//! - `W` created `X.lock` after our scan but read `X` before our rename: `W` decided on the old
//!   value, as we did, and may still write a loose `X` that shadows ours. This is the only
//!   window, and it is closed by the second scan (step 7), which runs after our rename: at
//!   that point `W` either still holds `X.lock` or has already written `X` (a `W` that has
//!   released the lock without writing failed on its own). For every such ref we wait (up to
//!   1 s) for the lock to go; if a loose `X` (or a conflicting loose ref for a new name) then
//!   exists, `W` won: we put the ref's previous entry back into `packed-refs` (we still hold
//!   `packed-refs.lock`, so this second rewrite is safe), and report the ref as failed with
//!   the error it would have had if `W` had gone first (`reference already exists`,
//!   `incorrect old value provided`, `refname conflict`); for an atomic push the whole
//!   previous `packed-refs` is put back and the push fails. If `W` went away without writing,
//!   ours stands. Either way exactly one of the two writers wins, and the repository holds the
//!   winner's value. The loser's value was visible in `packed-refs` for the microseconds
//!   between the rename and the second scan, but always shadowed by nothing that claims to
//!   have succeeded afterwards. (A `W` that took `X.lock` after our scan, read our new value
//!   and is still holding the lock at the second scan is treated the same way: its result
//!   decides, so a ref we wrote and `W` then legitimately overwrote is reported failed; the
//!   repository state is the same as if we had lost.)
//! - `W` creating `X/Y` while we create `X`, or `X` while we create `X/Y`: git checks for
//!   directory/file conflicts against `packed-refs` under `X/Y.lock`; the same window exists
//!   and the second scan covers it (a new directory `X/` with a loose ref or lock below it, or
//!   a new loose file at a prefix of our name).
//!
//! Readers need no lock: they read the loose file, else `packed-refs`, and both are replaced by
//! rename.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::fs;
use std::io::{self, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gix_hash::ObjectId;
use gix_object::Kind;
use gix_object::bstr::{BString, ByteSlice};

use super::transaction::batch::{CommitError, Failed, Index, PrepareError, live};
use super::{Change, Expected, RefError, RefResult, RefUpdate};
use crate::lockfile::Timeout;
use crate::repo::config::LogRefUpdates;

/// How long the second scan waits for concurrent writers' locks to go.
const CONTESTED_TIMEOUT: Duration = Duration::from_millis(1000);

const HEADER: &[u8] = b"# pack-refs with: peeled fully-peeled sorted \n";

/// The batch path cannot take this batch: a symbolic ref is involved, or `packed-refs.lock` is
/// held by someone else; the caller commits it with one lock per ref ([`super::loose`]).
pub(super) struct Fallback;

/// A lock file (git's `<path>.lock`), removed when dropped unless committed.
pub(super) struct Lock {
    path: PathBuf,
}

impl Lock {
    /// Create `<git_dir>/<rel>.lock` (`O_CREAT|O_EXCL`), retrying while someone else holds it
    /// as `timeout` allows (git's `hold_lock_file_for_update_timeout`, [`crate::lockfile`]).
    pub(super) fn acquire(git_dir: &Path, rel: &[u8], timeout: Timeout) -> Result<Lock, LockError> {
        let path = git_dir.join(lock_name(rel));
        match crate::lockfile::create(&path, timeout) {
            Ok(_) => Ok(Lock { path }),
            Err(e) => Err(LockError::new(git_dir, rel, &e)),
        }
    }

    /// The lock file's path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Rename the lock file over `target` (git's `commit_lock_file_to`); on failure the lock
    /// is removed.
    pub(super) fn commit_to(self, target: &Path) -> io::Result<()> {
        fs::rename(&self.path, target)?;
        std::mem::forget(self);
        Ok(())
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// A lock file that could not be created, in git's words (`unable_to_lock_message`). The path
/// is named as git receive-pack names it: its git directory is `.`, made absolute.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LockError {
    /// Someone else holds the lock, or a crashed writer left it.
    #[error(
        "Unable to create '{path}': File exists.\n\nAnother git process seems to be running in \
         this repository, or the lock file may be stale"
    )]
    Held {
        /// The lock file.
        path: String,
    },
    /// The lock file could not be created for another reason.
    #[error("Unable to create '{path}': {reason}")]
    Io {
        /// The lock file.
        path: String,
        /// `strerror` of the failure.
        reason: String,
    },
}

impl LockError {
    /// `<git_dir>/<rel>.lock` exists.
    pub(super) fn held(git_dir: &Path, rel: &[u8]) -> LockError {
        LockError::Held {
            path: git_path(git_dir, rel),
        }
    }

    fn new(git_dir: &Path, rel: &[u8], e: &io::Error) -> LockError {
        if e.kind() == io::ErrorKind::AlreadyExists {
            return LockError::held(git_dir, rel);
        }
        LockError::Io {
            path: git_path(git_dir, rel),
            reason: strerror(e),
        }
    }
}

/// `packed-refs` could not be read, in git's words.
#[derive(Debug, thiserror::Error)]
pub enum PackedReadError {
    /// The file exists but cannot be read.
    #[error("unable to read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// A line is not a `packed-refs` line.
    #[error("unexpected line in {}: {line}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The line, without its newline.
        line: BString,
    },
}

/// `packed-refs` could not be replaced, in git's words: `what` failed on `path`.
#[derive(Debug, thiserror::Error)]
#[error("unable to {what} {}: {source}", path.display())]
pub struct PackedWriteError {
    /// What failed: `create`, `write`, `rename`, `remove`.
    what: &'static str,
    /// The file.
    path: PathBuf,
    /// The failure.
    source: io::Error,
}

/// An I/O error as git's `strerror` words it (without Rust's " (os error N)").
pub(super) fn strerror(e: &io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

/// git's error for a ref whose lock could not be taken.
pub(super) fn cannot_lock(u: &RefUpdate, e: LockError) -> RefError {
    RefError::Locked {
        name: u.name.clone(),
        lock: e,
    }
}

/// How git receive-pack names the lock of `rel`: `<absolute git dir>/./<rel>.lock`.
fn git_path(git_dir: &Path, rel: &[u8]) -> String {
    format!("{}/./{}.lock", git_dir.display(), rel.as_bstr())
}

/// One entry of a `packed-refs` file.
#[derive(Clone)]
pub(super) struct Entry {
    name: Range<usize>,
    pub(super) oid: ObjectId,
    peeled: Option<ObjectId>,
    /// The entry's bytes (its line and its `^` line), copied as they are when unchanged.
    raw: Range<usize>,
}

/// Where the entries of a `packed-refs` file are found.
#[derive(Clone)]
enum Layout {
    /// The file says it is `sorted` (git writes it so): its lines are searched where they are,
    /// as git's packed-ref snapshot searches them, and nothing is kept for each entry. A push
    /// into a repository of 300,000 packed refs parsed and copied each of them twice before
    /// (benches/README.md, "A push into a repository of many packed refs"). The first entry's
    /// line starts at `start`.
    Lines { start: usize },
    /// Not said to be sorted, or with comment lines among the entries: every entry parsed
    /// once and sorted by name.
    Parsed(Vec<Entry>),
}

/// A `packed-refs` file, read and checked line by line.
#[derive(Clone)]
pub(super) struct Packed {
    pub(super) existed: bool,
    pub(super) buf: Vec<u8>,
    layout: Layout,
    fully_peeled: bool,
    /// The file as `stat` saw it when it was read (`None`: there was none).
    stat: Option<Stat>,
}

/// What tells one `packed-refs` from another without reading it, as git's
/// `stat_validity_check` tells them: git and berth only ever replace the file by a rename, so
/// the same inode with the same size and times holds the same entries.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stat {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stat {
    fn of(m: &fs::Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt;
        Stat {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// The line at `pos`, without its newline, and where the next line starts.
fn line_at(buf: &[u8], pos: usize) -> (&[u8], usize) {
    match buf[pos..].find_byte(b'\n') {
        Some(i) => (&buf[pos..pos + i], pos + i + 1),
        None => (&buf[pos..], buf.len()),
    }
}

/// The entry whose line starts at `pos` (with the `^` line after it, if any), and where the
/// next entry starts; else the range of the line that is not a `packed-refs` line.
fn record(buf: &[u8], pos: usize) -> Result<(Entry, usize), Range<usize>> {
    let (line, mut end) = line_at(buf, pos);
    let bad = pos..pos + line.len();
    let hex_len = line.find_byte(b' ').ok_or(bad.clone())?;
    if line.len() < hex_len + 2 {
        return Err(bad);
    }
    let oid = ObjectId::from_hex(&line[..hex_len]).map_err(|_| bad)?;
    let mut entry = Entry {
        name: pos + hex_len + 1..pos + line.len(),
        oid,
        peeled: None,
        raw: pos..end,
    };
    if buf.get(end) == Some(&b'^') {
        let (peeled, next) = line_at(buf, end);
        let oid = ObjectId::from_hex(&peeled[1..]).map_err(|_| end..end + peeled.len())?;
        entry.peeled = Some(oid);
        entry.raw.end = next;
        end = next;
    }
    Ok((entry, end))
}

/// The name on an entry's line.
fn name_on(line: &[u8]) -> &[u8] {
    line.find_byte(b' ').map_or(&[], |i| &line[i + 1..])
}

impl Packed {
    pub(super) fn read(path: &Path) -> Result<Packed, PackedReadError> {
        let read = |mut f: fs::File| -> io::Result<(Stat, Vec<u8>)> {
            use io::Read;
            let stat = Stat::of(&f.metadata()?);
            let mut buf = Vec::with_capacity(usize::try_from(stat.size).unwrap_or(0));
            f.read_to_end(&mut buf)?;
            Ok((stat, buf))
        };
        let (stat, buf) = match fs::File::open(path).and_then(read) {
            Ok((stat, b)) => (Some(stat), b),
            Err(e) if e.kind() == io::ErrorKind::NotFound => (None, Vec::new()),
            Err(source) => {
                return Err(PackedReadError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let existed = stat.is_some();
        // The traits, on the first line as git writes and reads them.
        let (mut start, mut sorted, mut fully_peeled) = (0, false, false);
        if buf.starts_with(b"# pack-refs with: ") {
            let (line, next) = line_at(&buf, 0);
            for t in line[b"# pack-refs with: ".len()..].split_str(" ") {
                match t {
                    b"sorted" => sorted = true,
                    b"fully-peeled" => fully_peeled = true,
                    _ => {}
                }
            }
            start = next;
        }
        // Every line checked; the entries kept only where they are not searched in place.
        let parse = |keep: bool| -> Result<(Vec<Entry>, bool), PackedReadError> {
            let (mut entries, mut comments, mut pos) = (Vec::new(), false, start);
            while pos < buf.len() {
                if buf[pos] == b'#' {
                    // Other comment lines are ignored, as git does.
                    comments = true;
                    pos = line_at(&buf, pos).1;
                    continue;
                }
                let (entry, next) = record(&buf, pos).map_err(|bad| PackedReadError::Syntax {
                    path: path.to_owned(),
                    line: buf[bad].into(),
                })?;
                if keep {
                    entries.push(entry);
                }
                pos = next;
            }
            Ok((entries, comments))
        };
        let layout = match parse(!sorted)? {
            (_, false) if sorted => Layout::Lines { start },
            (_, true) if sorted => Layout::Parsed(parse(true)?.0),
            (mut entries, _) => {
                entries.sort_by(|a, b| buf[a.name.clone()].cmp(&buf[b.name.clone()]));
                Layout::Parsed(entries)
            }
        };
        Ok(Packed {
            existed,
            buf,
            layout,
            fully_peeled,
            stat,
        })
    }

    /// `packed-refs` at `path` as it is now: `snapshot` (the push's snapshot's) while `stat`
    /// says it is still that file, else read again.
    pub(super) fn current<'s>(
        path: &Path,
        snapshot: Option<&'s Packed>,
    ) -> Result<std::borrow::Cow<'s, Packed>, PackedReadError> {
        match snapshot.filter(|p| p.unchanged(path)) {
            Some(p) => Ok(std::borrow::Cow::Borrowed(p)),
            None => Packed::read(path).map(std::borrow::Cow::Owned),
        }
    }

    /// Whether the file at `path` is still the one read (or still missing): then it holds the
    /// same entries and need not be read again.
    fn unchanged(&self, path: &Path) -> bool {
        match fs::metadata(path) {
            Ok(m) => self.stat == Some(Stat::of(&m)),
            Err(e) => e.kind() == io::ErrorKind::NotFound && self.stat.is_none(),
        }
    }

    fn name(&self, e: &Entry) -> &[u8] {
        &self.buf[e.name.clone()]
    }

    /// Every entry, in name order.
    pub(super) fn entries(&self) -> Entries<'_> {
        Entries {
            packed: self,
            at: match self.layout {
                Layout::Lines { start } => start,
                Layout::Parsed(_) => 0,
            },
        }
    }

    /// Every entry's name and value, in name order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], ObjectId)> {
        self.entries().map(|e| (&self.buf[e.name], e.oid))
    }

    /// Where the first entry for which `before` is false is: a byte offset of the file
    /// (searched as git's `find_reference_location`), or an index of the parsed entries.
    fn partition(&self, before: impl Fn(&[u8]) -> bool) -> usize {
        let buf = &self.buf;
        match &self.layout {
            Layout::Parsed(entries) => entries.partition_point(|e| before(&buf[e.name.clone()])),
            Layout::Lines { start } => {
                // `lo` is always where an entry starts, so the entry around `mid` starts at or
                // after it.
                let (mut lo, mut hi) = (*start, buf.len());
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    let mut at = buf[lo..mid].rfind_byte(b'\n').map_or(lo, |i| lo + i + 1);
                    if buf[at] == b'^' && at > lo {
                        at = buf[lo..at - 1].rfind_byte(b'\n').map_or(lo, |i| lo + i + 1);
                    }
                    let (line, mut next) = line_at(buf, at);
                    if before(name_on(line)) {
                        if buf.get(next) == Some(&b'^') {
                            next = line_at(buf, next).1;
                        }
                        lo = next;
                    } else {
                        hi = at;
                    }
                }
                lo
            }
        }
    }

    /// The entries from where [`Self::partition`] found, in name order.
    fn entries_from(&self, at: usize) -> Entries<'_> {
        Entries { packed: self, at }
    }

    pub(super) fn get(&self, name: &[u8]) -> Option<Entry> {
        let at = self.partition(|n| n < name);
        self.entries_from(at)
            .next()
            .filter(|e| &self.buf[e.name.clone()] == name)
    }

    /// The first entry named `name/…` that `skip` does not rule out, if any.
    pub(super) fn first_below(&self, name: &[u8], skip: impl Fn(&[u8]) -> bool) -> Option<&[u8]> {
        let at = self.partition(|n| cmp_below(n, name).is_lt());
        self.entries_from(at)
            .map(|e| &self.buf[e.name])
            .take_while(|n| is_below(n, name))
            .find(|n| !skip(n))
    }
}

/// The entries of a [`Packed`] from one place on, in name order.
pub(super) struct Entries<'p> {
    packed: &'p Packed,
    /// A byte offset of the file, or an index of the parsed entries.
    at: usize,
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        match &self.packed.layout {
            Layout::Parsed(entries) => {
                let e = entries.get(self.at)?.clone();
                self.at += 1;
                Some(e)
            }
            // Checked when read: every line from `start` on is an entry.
            Layout::Lines { .. } if self.at < self.packed.buf.len() => {
                let (e, next) = record(&self.packed.buf, self.at).ok()?;
                self.at = next;
                Some(e)
            }
            Layout::Lines { .. } => None,
        }
    }
}

/// Peels object ids through the object database, remembering what it found.
pub(crate) struct Peeler<'a> {
    objects: &'a gix_odb::Handle,
    last: Option<(ObjectId, Option<ObjectId>)>,
    cache: HashMap<ObjectId, Option<ObjectId>>,
    buf: Vec<u8>,
}

impl<'a> Peeler<'a> {
    /// A peeler reading from `objects`.
    pub(crate) fn new(objects: &'a gix_odb::Handle) -> Self {
        Peeler {
            objects,
            last: None,
            cache: HashMap::new(),
            buf: Vec::new(),
        }
    }

    /// The non-tag object `oid` peels to, if `oid` is an annotated tag.
    pub(crate) fn peel(&mut self, oid: ObjectId) -> Option<ObjectId> {
        if let Some((id, p)) = self.last
            && id == oid
        {
            return p;
        }
        let p = self.peel_uncached(oid);
        self.last = Some((oid, p));
        p
    }

    fn peel_uncached(&mut self, oid: ObjectId) -> Option<ObjectId> {
        if let Some(p) = self.cache.get(&oid) {
            return *p;
        }
        use gix_object::Find;
        let mut peeled = None;
        let mut id = oid;
        for _ in 0..64 {
            let Ok(Some(data)) = self.objects.try_find(&id, &mut self.buf) else {
                break;
            };
            if data.kind != Kind::Tag {
                if id != oid {
                    peeled = Some(id);
                }
                break;
            }
            match gix_object::TagRefIter::from_bytes(data.data, id.kind()).target_id() {
                Ok(t) => id = t,
                Err(_) => break,
            }
        }
        self.cache.insert(oid, peeled);
        peeled
    }
}

/// What a directory scan saw under one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    File,
    Dir,
}

type Listing = HashMap<Vec<u8>, Seen>;

/// The entries of the directories a batch touches: `dir → (basename → kind)`; `None` for a
/// directory that does not exist (or is not a directory).
#[derive(Default)]
struct Scan {
    dirs: HashMap<Vec<u8>, Option<Listing>>,
}

impl Scan {
    /// Scan `base/<dir>` for every `dir` in `dirs`.
    fn new<'d>(base: &Path, dirs: impl Iterator<Item = &'d [u8]>) -> Scan {
        let mut scan = Scan::default();
        for dir in dirs {
            let listing = read_dir(&base.join(path_of(dir)));
            scan.dirs.insert(dir.to_vec(), listing);
        }
        scan
    }

    /// Whether no directory scanned holds anything.
    fn is_empty(&self) -> bool {
        self.dirs
            .values()
            .all(|l| l.as_ref().is_none_or(|l| l.is_empty()))
    }

    /// The non-empty listing of `dir`.
    fn listing(&self, dir: &[u8]) -> Option<&Listing> {
        self.dirs.get(dir)?.as_ref().filter(|l| !l.is_empty())
    }

    fn seen(&self, name: &[u8]) -> Option<Seen> {
        let (dir, base) = split(name);
        self.listing(dir)?.get(base).copied()
    }

    /// A view for looking up many names in sorted order.
    fn view(&self) -> View<'_> {
        View {
            scan: self,
            dir: Vec::new(),
            listing: None,
            locks: false,
        }
    }
}

fn has_lock(listing: &Listing, base: &[u8]) -> bool {
    let mut lock = Vec::with_capacity(base.len() + 5);
    lock.extend_from_slice(base);
    lock.extend_from_slice(b".lock");
    listing.contains_key(&lock)
}

/// Looks names up in a [`Scan`], one directory lookup per run of names in the same directory
/// (a batch of 10,000 new refs in one directory that does not exist costs no hashing per ref).
struct View<'s> {
    scan: &'s Scan,
    dir: Vec<u8>,
    listing: Option<&'s Listing>,
    /// Whether the current directory holds any `*.lock` file (most hold none).
    locks: bool,
}

impl View<'_> {
    /// What is at `name`, and whether `name.lock` exists.
    fn at(&mut self, name: &[u8]) -> (Option<Seen>, bool) {
        let (dir, base) = split(name);
        if dir != self.dir.as_slice() {
            self.dir.clear();
            self.dir.extend_from_slice(dir);
            self.listing = self.scan.listing(dir).filter(|l| !l.is_empty());
            self.locks = self
                .listing
                .is_some_and(|l| l.keys().any(|k| k.ends_with(b".lock")));
        }
        match self.listing {
            None => (None, false),
            Some(l) => (l.get(base).copied(), self.locks && has_lock(l, base)),
        }
    }
}

fn read_dir(path: &Path) -> Option<Listing> {
    let entries = fs::read_dir(path).ok()?;
    let mut out = HashMap::new();
    for e in entries.flatten() {
        let kind = match e.file_type() {
            Ok(t) if t.is_dir() => Seen::Dir,
            _ => Seen::File,
        };
        out.insert(e.file_name().into_encoded_bytes(), kind);
    }
    Some(out)
}

fn split(name: &[u8]) -> (&[u8], &[u8]) {
    match last_slash(name) {
        Some(i) => (&name[..i], &name[i + 1..]),
        None => (&[], name),
    }
}

/// The position of the last `/` in a ref name. A plain loop: names are tens of bytes, and
/// memchr's vectorised `rfind_byte` spent ~100 instructions a call setting up for them (4 % of
/// a 10,000-ref push's instructions; callgrind, benches/README.md).
fn last_slash(name: &[u8]) -> Option<usize> {
    name.iter().rposition(|&b| b == b'/')
}

pub(super) fn path_of(name: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(name))
}

/// Every directory that holds a name of `names` or is a prefix of one, e.g. `refs`,
/// `refs/heads` and `refs/heads/a` for `refs/heads/a/b`.
fn dirs_of<'n>(names: impl Iterator<Item = &'n [u8]>) -> HashSet<&'n [u8]> {
    let mut dirs: HashSet<&[u8]> = HashSet::new();
    let mut last: &[u8] = &[];
    for name in names {
        let (dir, _) = split(name);
        if dir == last {
            continue;
        }
        last = dir;
        let mut end = name.len();
        while let Some(i) = last_slash(&name[..end]) {
            if !dirs.insert(&name[..i]) {
                break;
            }
            end = i;
        }
    }
    dirs
}

/// How `a` compares with `name` followed by `/`.
pub(super) fn cmp_below(a: &[u8], name: &[u8]) -> std::cmp::Ordering {
    let n = a.len().min(name.len());
    match a[..n].cmp(&name[..n]) {
        std::cmp::Ordering::Equal if a.len() <= name.len() => std::cmp::Ordering::Less,
        std::cmp::Ordering::Equal => a[name.len()].cmp(&b'/'),
        o => o,
    }
}

/// Whether `a` is `name/…`.
pub(super) fn is_below(a: &[u8], name: &[u8]) -> bool {
    a.len() > name.len() && a.starts_with(name) && a[name.len()] == b'/'
}

/// The first loose ref file below the directory `name/`, and whether a lock file is there.
pub(super) fn loose_below(git_dir: &Path, name: &[u8]) -> (Option<BString>, bool) {
    let mut first: Option<BString> = None;
    let mut locked = false;
    let mut stack = vec![name.to_vec()];
    while let Some(dir) = stack.pop() {
        let Some(entries) = read_dir(&git_dir.join(path_of(&dir))) else {
            continue;
        };
        for (base, kind) in entries {
            let mut full = dir.clone();
            full.push(b'/');
            full.extend_from_slice(&base);
            match kind {
                Seen::Dir => stack.push(full),
                Seen::File if base.ends_with(b".lock") => locked = true,
                Seen::File => {
                    if first
                        .as_ref()
                        .is_none_or(|f| full.as_slice() < f.as_slice())
                    {
                        first = Some(full.into());
                    }
                }
            }
        }
    }
    (first, locked)
}

/// The value of a loose ref file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Loose {
    Object(ObjectId),
    Symbolic,
    Broken,
}

/// The loose ref at `path`, `None` if there is no such file. Read with one `open` and small
/// `read`s (no `stat`: a ref file is tens of bytes; what is past the first 256 bytes never
/// changes the answer).
pub(super) fn read_loose(path: &Path) -> Option<Loose> {
    read_loose_from(fs::File::open(path).ok()?)
}

/// [`read_loose`] of an open file.
pub(super) fn read_loose_from(mut file: fs::File) -> Option<Loose> {
    use std::io::Read;
    let mut buf = [0u8; 256];
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let data = &buf[..len];
    if data.starts_with(b"ref:") {
        return Some(Loose::Symbolic);
    }
    let hex_len = data
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(data.len());
    Some(match data.get(..hex_len).map(ObjectId::from_hex) {
        Some(Ok(oid)) => Loose::Object(oid),
        _ => Loose::Broken,
    })
}

/// One live update of the batch, with what the locked checks found. A batch of a million refs
/// holds a million of these, so an item is 16 bytes (a unit test bounds it): its update's
/// index, and the ref's lock and value before the batch only where the batch holds a
/// `<ref>.lock` (boxed: on the packed path, only refs that exist as loose files, which most
/// refs of a large batch do not). Elsewhere the value before is the one in `packed-refs` as
/// read under its lock, and is looked up there again when needed.
pub(super) struct Item {
    /// Index into `updates` (a transaction takes at most `u32::MAX`,
    /// [`PrepareError::TooLarge`]); [`Item::index`] for indexing.
    pub(super) index: Index,
    held: Option<Box<HeldRef>>,
}

/// A ref whose `<ref>.lock` the batch holds.
struct HeldRef {
    lock: Lock,
    /// The ref's value before the batch: its loose file's (`None`: none, or unreadable), or the
    /// packed one when the file went away between the scan and the check.
    before: Option<ObjectId>,
}

impl Item {
    /// The update at `index` with nothing locked: its value before is the one in `packed-refs`.
    fn unlocked(index: usize) -> Self {
        Item {
            index: index as Index, // the transaction's size is checked
            held: None,
        }
    }

    /// The update at `index`, its ref's `lock` held and its value `before` the batch.
    pub(super) fn locked(index: usize, lock: Lock, before: Option<ObjectId>) -> Self {
        Item {
            index: index as Index, // the transaction's size is checked
            held: Some(Box::new(HeldRef { lock, before })),
        }
    }

    /// Index into `updates`.
    pub(super) fn index(&self) -> usize {
        self.index as usize
    }

    /// Whether the batch holds the ref's `<ref>.lock`.
    fn is_locked(&self) -> bool {
        self.held.is_some()
    }

    /// Release the ref's lock, if held, or take it to commit.
    pub(super) fn take_lock(&mut self) -> Option<Lock> {
        self.held.take().map(|h| h.lock)
    }

    /// The ref's value before this batch, `packed` being `packed-refs` as read under its lock
    /// (`None` where every item holds its lock: the loose path).
    pub(super) fn before(&self, packed: Option<&Packed>, name: &[u8]) -> Option<ObjectId> {
        match &self.held {
            Some(h) => h.before,
            None => packed.and_then(|p| p.get(name)).map(|e| e.oid),
        }
    }
}

/// The live updates of a batch in name order, for conflicts within the batch.
pub(super) struct Sorted<'u> {
    pub(super) updates: &'u [RefUpdate],
    pub(super) order: Vec<Index>,
}

impl Sorted<'_> {
    fn name(&self, k: usize) -> &[u8] {
        self.updates[self.order[k] as usize].name.as_slice()
    }

    pub(super) fn get(&self, name: &[u8]) -> Option<&RefUpdate> {
        self.order
            .binary_search_by(|&i| self.updates[i as usize].name.as_slice().cmp(name))
            .ok()
            .map(|k| &self.updates[self.order[k] as usize])
    }

    pub(super) fn deleted(&self, name: &[u8]) -> bool {
        self.get(name).is_some_and(|u| u.is_delete())
    }

    /// A ref of the batch that is created or updated below `name/`; `k` is `name`'s position.
    pub(super) fn written_below(&self, k: usize, name: &[u8]) -> Option<&[u8]> {
        // The names that start with `name` follow it; when the next one does not, none does.
        if k + 1 >= self.order.len() || !self.name(k + 1).starts_with(name) {
            return None;
        }
        let start = self
            .order
            .partition_point(|&i| cmp_below(&self.updates[i as usize].name, name).is_lt());
        (start..self.order.len())
            .take_while(|&k| is_below(self.name(k), name))
            .find(|&k| !self.updates[self.order[k] as usize].is_delete())
            .map(|k| self.name(k))
    }
}

/// The batch with `packed-refs.lock` and the loose refs' locks held and every ref checked
/// under them (steps 1 to 5), ready for [`Locked::commit`]; dropped, the locks are released.
pub(super) struct Locked<'a> {
    batch: super::Batch<'a>,
    updates: &'a [RefUpdate],
    packed_lock: Lock,
    /// `packed-refs` as it is under its lock: read again, or the push's snapshot's while
    /// `stat` says it is the same file.
    packed: std::borrow::Cow<'a, Packed>,
    /// The directories the batch touches, and what the first scan saw in them.
    dirs: HashSet<&'a [u8]>,
    scan: Scan,
    /// The live updates in name order.
    items: Vec<Item>,
}

/// Steps 1 to 5 for the live updates (`results[i].is_ok()`): a ref that fails drops out with
/// its error, unless the batch is atomic. See the module documentation for the protocol.
/// `current` is `packed-refs` as the push's snapshot read it.
pub(super) fn lock<'a>(
    batch: super::Batch<'a>,
    updates: &'a [RefUpdate],
    results: &mut [RefResult],
    current: Option<&'a Packed>,
) -> Result<Result<Locked<'a>, Fallback>, Failed<PrepareError>> {
    let super::Batch {
        git_dir, atomic, ..
    } = batch;
    let mut order = live(results);
    let name = |i: Index| &updates[i as usize].name;
    if !order.is_sorted_by(|&a, &b| name(a) <= name(b)) {
        order.sort_by(|&a, &b| name(a).cmp(name(b)));
    }
    let sorted = Sorted { updates, order };
    let names = || sorted.order.iter().map(|&i| name(i).as_slice());

    let packed_path = git_dir.join("packed-refs");
    // Held by someone else: git would not need it for updates and creations, so neither do we.
    let packed_lock = match Lock::acquire(git_dir, b"packed-refs", batch.locks.packed_refs) {
        Ok(l) => l,
        Err(LockError::Held { .. }) => return Ok(Err(Fallback)),
        Err(e) => return Err(Failed::quietly(e)),
    };
    let packed = Packed::current(&packed_path, current).map_err(Failed::quietly)?;

    let dirs = dirs_of(names());
    let mut scan = Scan::new(git_dir, dirs.iter().copied());

    // Refs held by another writer while no loose file exists: wait for them, then look again.
    let mut waiting: Vec<&[u8]> = Vec::new();
    let mut symbolic = false;
    {
        let mut view = scan.view();
        for n in names() {
            match view.at(n) {
                (Some(Seen::File), _) => {
                    symbolic |= read_loose(&git_dir.join(path_of(n))) == Some(Loose::Symbolic)
                }
                (_, true) => waiting.push(n),
                _ => {}
            }
        }
    }
    // Loose files that are symbolic refs: leave the batch to the loose path, which handles them.
    if symbolic {
        return Ok(Err(Fallback));
    }
    if !waiting.is_empty() {
        crate::lockfile::wait_while(batch.locks.files_ref, || {
            waiting.iter().any(|n| git_dir.join(lock_name(n)).exists())
        });
        scan = Scan::new(git_dir, dirs.iter().copied());
    }

    let mut items: Vec<Item> = Vec::with_capacity(sorted.order.len());
    {
        let mut checker = Checker {
            git_dir,
            packed: &packed,
            scan: &scan,
            view: scan.view(),
            batch: &sorted,
            lock_timeout: batch.locks.files_ref,
            prefix_dir: None,
        };
        for (k, &i) in sorted.order.iter().enumerate() {
            let i = i as usize;
            match checker.check(k, &updates[i]) {
                Ok((lock, before)) => items.push(match lock {
                    Some(lock) => Item::locked(i, lock, before),
                    // Not a loose file: `before` is the packed value, looked up again if needed.
                    None => Item::unlocked(i),
                }),
                Err(e) if atomic => return Err(Failed::quietly(e)),
                Err(e) => results[i] = Err(Box::new(e)),
            }
        }
    }
    Ok(Ok(Locked {
        batch,
        updates,
        packed_lock,
        packed,
        dirs,
        scan,
        items,
    }))
}

impl Locked<'_> {
    /// Steps 6 and 7; the indexes of the updates written. A ref lost to a concurrent writer
    /// fails alone (`results`), unless the batch is atomic: then the previous `packed-refs` is
    /// put back and the transaction fails (announcing `aborted`).
    pub(super) fn commit(
        self,
        results: &mut [RefResult],
    ) -> Result<Vec<Index>, Failed<CommitError>> {
        let Locked {
            batch,
            updates,
            packed_lock,
            packed,
            dirs,
            scan,
            mut items,
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
        let packed_path = git_dir.join("packed-refs");
        let mut peeler = Peeler::new(objects);
        let new_path = git_dir.join("packed-refs.new");
        // The new packed-refs of `items`, in place.
        let write = |items: &[Item], peeler: &mut Peeler<'_>| {
            let content = |w: &mut dyn Write| render(&packed, updates, items, peeler, w);
            replace(&new_path, &packed_path, content, fsync).map_err(Failed::quietly)
        };
        write(&items, &mut peeler)?;

        // The second scan: writers that slipped in between our scan and our rename.
        let rescan = Scan::new(git_dir, dirs.iter().copied());
        let mut contested: Vec<usize> = Vec::new();
        {
            let mut before = scan.view();
            let mut after = rescan.view();
            let mut prefix_dir: Option<(Vec<u8>, bool)> = None;
            for (k, it) in items.iter().enumerate() {
                let u = &updates[it.index()];
                let n = u.name.as_slice();
                let (was, _) = before.at(n);
                let (is, locked) = after.at(n);
                if it.is_locked() {
                    continue;
                }
                let (dir, _) = split(n);
                if prefix_dir.as_ref().is_none_or(|(d, _)| d.as_slice() != dir) {
                    let file = prefixes(n).any(|p| rescan.seen(p) == Some(Seen::File));
                    prefix_dir = Some((dir.to_vec(), file));
                }
                let prefix_file = !u.is_delete() && prefix_dir.as_ref().is_some_and(|(_, f)| *f);
                let new_file = is == Some(Seen::File) && was != Some(Seen::File);
                let new_below = is == Some(Seen::Dir) && !u.is_delete();
                if locked || new_file || new_below || prefix_file {
                    contested.push(k);
                }
            }
        }
        let mut lost: HashMap<usize, RefError> = HashMap::new();
        if !contested.is_empty() {
            let start = Instant::now();
            for &k in &contested {
                let it = &items[k];
                let u = &updates[it.index()];
                let lock_path = git_dir.join(lock_name(&u.name));
                while start.elapsed() < CONTESTED_TIMEOUT && lock_path.exists() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if let Some(e) =
                    lost_to(git_dir, object_format, u, it.before(Some(&packed), &u.name))
                {
                    lost.insert(k, e);
                } else if lock_path.exists() {
                    lost.insert(k, cannot_lock(u, LockError::held(git_dir, &u.name)));
                }
            }
        }
        if !lost.is_empty() {
            if atomic {
                if packed.existed {
                    replace(&new_path, &packed_path, |w| w.write_all(&packed.buf), fsync)
                        .map_err(Failed::quietly)?;
                } else {
                    fs::remove_file(&packed_path).map_err(|source| {
                        Failed::quietly(PackedWriteError {
                            what: "remove",
                            path: packed_path.clone(),
                            source,
                        })
                    })?;
                }
                drop(items);
                drop(packed_lock);
                let first = contested.iter().find_map(|k| lost.remove(k));
                return Err(Failed::aborted(first.unwrap_or(RefError::Other {
                    message: "refs changed during the update".into(),
                })));
            }
            let mut kept = Vec::with_capacity(items.len());
            for (k, it) in items.into_iter().enumerate() {
                match lost.remove(&k) {
                    Some(e) => results[it.index()] = Err(Box::new(e)),
                    None => kept.push(it),
                }
            }
            items = kept;
            write(&items, &mut peeler)?;
        }

        // The loose files the new packed-refs replaces, removed under their locks.
        for it in &items {
            if it.is_locked() {
                let name = updates[it.index()].name.as_slice();
                let path = git_dir.join(path_of(name));
                if let Err(e) = fs::remove_file(&path)
                    && e.kind() != io::ErrorKind::NotFound
                {
                    results[it.index()] = Err(Box::new(RefError::Other {
                        message: format!(
                            "cannot lock ref '{}': unable to remove loose ref: {e}",
                            updates[it.index()].name
                        ),
                    }));
                }
            }
        }
        let mut time_buf = gix_date::parse::TimeBuf::default();
        let committer = committer.to_ref(&mut time_buf);
        write_reflogs(
            git_dir,
            object_format,
            log,
            updates,
            &items,
            Some(&packed),
            &committer,
        );
        let mut committed: Vec<Index> = items.iter().map(|it| it.index).collect();
        committed.sort_unstable();
        for it in &items {
            if it.is_locked() {
                remove_empty_parents(git_dir, updates[it.index()].name.as_slice());
            }
        }
        drop(items);
        drop(packed_lock);
        Ok(committed)
    }
}

fn lock_name(name: &[u8]) -> PathBuf {
    let mut l = name.to_vec();
    l.extend_from_slice(b".lock");
    path_of(&l)
}

/// The proper prefixes of `name` below `refs/`, as git checks them: `refs/heads`, `refs/heads/a`
/// for `refs/heads/a/b`.
pub(super) fn prefixes(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    name.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .skip(1)
        .map(move |(i, _)| &name[..i])
}

/// Checks the updates of a batch, in name order, under the locks.
struct Checker<'a> {
    git_dir: &'a Path,
    packed: &'a Packed,
    scan: &'a Scan,
    view: View<'a>,
    batch: &'a Sorted<'a>,
    /// `core.filesRefLockTimeout`, for the loose refs' locks.
    lock_timeout: Timeout,
    /// The directory of the previous name, and the prefix conflict found for it (the proper
    /// prefixes of all names in one directory are the same).
    prefix_dir: Option<(Vec<u8>, Option<RefError>)>,
}

impl Checker<'_> {
    /// Check one update; on success, the loose lock taken (if the ref is loose) and its
    /// current value.
    fn check(
        &mut self,
        k: usize,
        u: &RefUpdate,
    ) -> Result<(Option<Lock>, Option<ObjectId>), RefError> {
        let git_dir = self.git_dir;
        let name = u.name.as_slice();
        let mut lock = None;
        let mut current: Option<ObjectId> = self.packed.get(name).map(|e| e.oid);
        let mut exists = current.is_some();
        let (seen, locked) = self.view.at(name);
        if seen == Some(Seen::File) {
            let l =
                Lock::acquire(git_dir, name, self.lock_timeout).map_err(|e| cannot_lock(u, e))?;
            match read_loose(&git_dir.join(path_of(name))) {
                Some(Loose::Object(oid)) => {
                    current = Some(oid);
                    exists = true;
                }
                Some(Loose::Broken) => {
                    current = None;
                    exists = true;
                }
                Some(Loose::Symbolic) => {
                    return Err(RefError::DoesNotExist {
                        name: u.name.clone(),
                    });
                }
                // Removed since the scan: the packed value, if any, is the value.
                None => {}
            }
            lock = Some(l);
        } else if locked {
            return Err(cannot_lock(u, LockError::held(git_dir, name)));
        }
        super::check_old(u, exists, current)?;
        if !exists {
            // A new ref, or the deletion of one that is not there: git locks the name all the
            // same.
            self.check_new(k, u, seen)?;
        }
        Ok((lock, current))
    }

    /// A new ref must not collide with an existing one, or one of the batch, as a file and a
    /// directory.
    fn check_new(&mut self, k: usize, u: &RefUpdate, seen: Option<Seen>) -> Result<(), RefError> {
        let name = u.name.as_slice();
        let (dir, _) = split(name);
        if self
            .prefix_dir
            .as_ref()
            .is_none_or(|(d, _)| d.as_slice() != dir)
        {
            let conflict = self.prefix_conflict(name);
            self.prefix_dir = Some((dir.to_vec(), conflict));
        }
        if let Some((_, Some(e))) = &self.prefix_dir {
            return Err(e.clone().renamed(&u.name));
        }
        let batch = self.batch;
        if let Some(below) = self.packed.first_below(name, |n| batch.deleted(n)) {
            return Err(super::files_name_conflict(
                self.git_dir,
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
        if seen == Some(Seen::Dir) {
            let (first, locked) = loose_below(self.git_dir, name);
            if let Some(existing) = first.filter(|f| !batch.deleted(f)) {
                return Err(RefError::NameConflict {
                    name: u.name.clone(),
                    existing,
                });
            }
            if locked {
                return Err(RefError::Other {
                    message: format!(
                        "cannot lock ref '{}': a ref below it is being updated",
                        u.name
                    ),
                });
            }
        }
        Ok(())
    }

    /// The first proper prefix of `name` that is a ref (packed or loose, and not deleted by
    /// the batch) or written by the batch.
    fn prefix_conflict(&self, name: &[u8]) -> Option<RefError> {
        for p in prefixes(name) {
            if !self.batch.deleted(p) {
                if self.scan.seen(p) == Some(Seen::File) {
                    return Some(RefError::NameConflict {
                        name: name.into(),
                        existing: p.into(),
                    });
                }
                if self.packed.get(p).is_some() {
                    return Some(RefError::NameUnavailable {
                        name: name.into(),
                        existing: p.into(),
                    });
                }
            }
            if self.batch.get(p).is_some_and(|o| !o.is_delete()) {
                return Some(RefError::ConflictInPush {
                    name: name.into(),
                    other: p.into(),
                });
            }
        }
        None
    }
}

/// After our rename: whether a concurrent writer's result stands in place of ours for `u`, and
/// the error `u` then gets (the one it would have had if that writer had gone first).
fn lost_to(
    git_dir: &Path,
    object_format: gix_hash::Kind,
    u: &RefUpdate,
    before: Option<ObjectId>,
) -> Option<RefError> {
    let name = u.name.as_slice();
    let path = git_dir.join(path_of(name));
    match fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() || m.file_type().is_symlink() => {
            let actual = match read_loose(&path) {
                Some(Loose::Object(oid)) => Some(oid),
                _ => None,
            };
            let expected = match u.expected() {
                None => {
                    return Some(RefError::AlreadyExists {
                        name: u.name.clone(),
                    });
                }
                Some(Expected::MustBe(old)) => old,
                // Unchecked: the value it had when we looked.
                Some(Expected::Any) => before.unwrap_or(u.old_id(object_format)),
            };
            return Some(match actual {
                Some(actual) => RefError::IncorrectOldValue {
                    name: u.name.clone(),
                    actual,
                    expected,
                },
                None => RefError::DoesNotExist {
                    name: u.name.clone(),
                },
            });
        }
        Ok(m) if m.is_dir() && !u.is_delete() => {
            if let (Some(existing), _) = loose_below(git_dir, name) {
                return Some(RefError::NameConflict {
                    name: u.name.clone(),
                    existing,
                });
            }
        }
        _ => {}
    }
    if !u.is_delete() {
        for p in prefixes(name) {
            if git_dir.join(path_of(p)).is_file() {
                return Some(RefError::NameConflict {
                    name: u.name.clone(),
                    existing: p.into(),
                });
            }
        }
    }
    None
}

/// The new `packed-refs`: the old entries merged with the batch, in git's format, written to
/// `out` as it is produced (a batch of a million refs is not held as text a second time).
pub(super) fn render(
    packed: &Packed,
    updates: &[RefUpdate],
    items: &[Item],
    peeler: &mut Peeler<'_>,
    out: &mut dyn Write,
) -> io::Result<()> {
    out.write_all(HEADER)?;
    let mut line = Vec::with_capacity(2 * gix_hash::Kind::longest().len_in_hex() + 256);
    let mut old = packed.entries().peekable();
    for it in items {
        let u = &updates[it.index()];
        let name = u.name.as_slice();
        while let Some(e) = old.peek() {
            let en = packed.name(e);
            if en >= name {
                break;
            }
            copy_entry(packed, e, peeler, &mut line, out)?;
            old.next();
        }
        if old.peek().is_some_and(|e| packed.name(e) == name) {
            old.next();
        }
        if let Change::Create { new } | Change::Update { new, .. } = u.change {
            let peeled = peeler.peel(new);
            entry_line(&mut line, &new, name, peeled);
            out.write_all(&line)?;
        }
    }
    for e in old {
        copy_entry(packed, &e, peeler, &mut line, out)?;
    }
    Ok(())
}

/// `line` set to one entry of `packed-refs`: `<oid> <name>`, and `^<peeled>` when peeled.
fn entry_line(line: &mut Vec<u8>, oid: &ObjectId, name: &[u8], peeled: Option<ObjectId>) {
    let mut hex = [0u8; gix_hash::Kind::longest().len_in_hex()];
    line.clear();
    line.extend_from_slice(oid.hex_to_buf(&mut hex).as_bytes());
    line.push(b' ');
    line.extend_from_slice(name);
    line.push(b'\n');
    if let Some(p) = peeled {
        line.push(b'^');
        line.extend_from_slice(p.hex_to_buf(&mut hex).as_bytes());
        line.push(b'\n');
    }
}

/// An entry of the old `packed-refs`, as it was when it is peeled already, else peeled now.
fn copy_entry(
    packed: &Packed,
    e: &Entry,
    peeler: &mut Peeler<'_>,
    line: &mut Vec<u8>,
    out: &mut dyn Write,
) -> io::Result<()> {
    if packed.fully_peeled || e.peeled.is_some() {
        let raw = &packed.buf[e.raw.clone()];
        out.write_all(raw)?;
        if raw.last() != Some(&b'\n') {
            out.write_all(b"\n")?;
        }
    } else {
        let peeled = peeler.peel(e.oid);
        entry_line(line, &e.oid, packed.name(e), peeled);
        out.write_all(line)?;
    }
    Ok(())
}

/// Write what `content` writes to `tmp` (git's `packed-refs.new`) through a buffer, sync it as
/// `fsync` says for refs, and rename it over `target` (then sync `target`'s directory, when
/// `fsync` syncs directories).
pub(super) fn replace(
    tmp: &Path,
    target: &Path,
    content: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    fsync: crate::fsync::Durability,
) -> Result<(), PackedWriteError> {
    let fail = |what: &'static str, source: io::Error| {
        let _ = fs::remove_file(tmp);
        PackedWriteError {
            what,
            path: tmp.to_owned(),
            source,
        }
    };
    // A leftover from a writer that died is ours to remove: we hold packed-refs.lock.
    let _ = fs::remove_file(tmp);
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(|e| fail("create", e))?;
    let mut w = io::BufWriter::with_capacity(64 * 1024, f);
    content(&mut w).map_err(|e| fail("write", e))?;
    let f = w.into_inner().map_err(|e| fail("write", e.into_error()))?;
    fsync
        .sync(crate::fsync::Components::REFERENCE, &f)
        .map_err(|e| fail("write", e))?;
    drop(f);
    fs::rename(tmp, target).map_err(|e| fail("rename", e))?;
    match target.parent() {
        Some(dir) => fsync
            .sync_dir(crate::fsync::Components::REFERENCE, dir)
            .map_err(|source| PackedWriteError {
                what: "sync the directory of",
                path: target.to_owned(),
                source,
            }),
        None => Ok(()),
    }
}

/// git's `try_remove_empty_parents`: remove the now-empty directories of `name`, keeping
/// `refs/` and `refs/<kind>/`.
pub(super) fn remove_empty_parents(git_dir: &Path, name: &[u8]) {
    let mut end = name.len();
    while let Some(i) = name[..end].rfind_byte(b'/') {
        if name[..i].iter().filter(|&&b| b == b'/').count() < 2 {
            break;
        }
        if fs::remove_dir(git_dir.join(path_of(&name[..i]))).is_err() {
            break;
        }
        end = i;
    }
}

/// Whether git creates a reflog for `name` on its own (`should_autocreate_reflog`).
fn autocreate_reflog(log: LogRefUpdates, name: &[u8]) -> bool {
    match log {
        LogRefUpdates::Always => true,
        LogRefUpdates::Normal => {
            name.starts_with(b"refs/heads/")
                || name.starts_with(b"refs/remotes/")
                || name.starts_with(b"refs/notes/")
                || name == b"HEAD"
        }
        LogRefUpdates::Never => false,
    }
}

/// Append git's reflog line (`<old> <new> <committer>\tpush`) for each update that gets one:
/// refs git would log on its own, and refs whose reflog exists. A deleted ref loses its reflog.
pub(super) fn write_reflogs(
    git_dir: &Path,
    object_format: gix_hash::Kind,
    log: LogRefUpdates,
    updates: &[RefUpdate],
    items: &[Item],
    packed: Option<&Packed>,
    committer: &gix_actor::SignatureRef<'_>,
) {
    let logs = git_dir.join("logs");
    let head = head_target(git_dir);
    let names = items.iter().map(|it| updates[it.index()].name.as_slice());
    let scan = Scan::new(&logs, dirs_of(names).into_iter());
    // Nothing logs a ref that has no reflog, and none has one: only `HEAD` may be logged (a
    // bare repository's push of many refs, where the per-ref work below would all be for naught).
    let no_ref_logs = log == LogRefUpdates::Never && scan.is_empty();
    let mut view = scan.view();
    let mut who = Vec::new();
    let _ = committer.write_to(&mut who);
    for it in items {
        let u = &updates[it.index()];
        let name = u.name.as_slice();
        let old = || {
            it.before(packed, name)
                .unwrap_or_else(|| ObjectId::null(object_format))
        };
        if head.as_deref() == Some(name) && !u.is_delete() {
            append_reflog(
                &logs,
                b"HEAD",
                None,
                log,
                old(),
                u.new_id(object_format),
                &who,
            );
        }
        if no_ref_logs {
            continue;
        }
        let exists = view.at(name).0 == Some(Seen::File);
        if u.is_delete() {
            if exists {
                let _ = fs::remove_file(logs.join(path_of(name)));
            }
            continue;
        }
        append_reflog(
            &logs,
            name,
            Some(exists),
            log,
            old(),
            u.new_id(object_format),
            &who,
        );
    }
}

/// The ref the repository's `HEAD` file names, if it is symbolic.
pub(super) fn head_target(git_dir: &Path) -> Option<Vec<u8>> {
    let content = fs::read(git_dir.join("HEAD")).ok()?;
    Some(content.strip_prefix(b"ref: ")?.trim_ascii_end().to_vec())
}

/// Append git's reflog line (`<old> <new> <who>\tpush`) to the reflog of `name` under `logs`
/// if it exists or git would create it. `exists` is what is known of the file (`None`: look).
pub(super) fn append_reflog(
    logs: &Path,
    name: &[u8],
    exists: Option<bool>,
    log: LogRefUpdates,
    old: ObjectId,
    new: ObjectId,
    who: &[u8],
) {
    let create = autocreate_reflog(log, name);
    if exists == Some(false) && !create {
        return;
    }
    let path = logs.join(path_of(name));
    let exists = exists.unwrap_or_else(|| path.is_file());
    if !exists && !create {
        return;
    }
    let mut hex = [0u8; gix_hash::Kind::longest().len_in_hex()];
    let mut line = Vec::with_capacity(100 + who.len());
    line.extend_from_slice(old.hex_to_buf(&mut hex).as_bytes());
    line.push(b' ');
    line.extend_from_slice(new.hex_to_buf(&mut hex).as_bytes());
    line.push(b' ');
    line.extend_from_slice(who);
    line.extend_from_slice(b"\tpush\n");
    if !exists && let Some(parent) = path.parent() {
        let _ = fs::create_dir_all(parent);
    }
    let file = fs::OpenOptions::new()
        .append(true)
        .create(create)
        .open(&path);
    if let Ok(mut f) = file {
        let _ = f.write_all(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `packed-refs` of `n` refs in name order, each third one peeled, with `header` first.
    fn file(header: &str, n: usize) -> (Vec<u8>, Vec<(String, ObjectId)>) {
        let mut text = header.as_bytes().to_vec();
        let mut refs = Vec::new();
        for i in 0..n {
            let name = match i % 4 {
                0 => format!("refs/heads/b{i:05}"),
                1 => format!("refs/heads/b{:05}/below", i - 1),
                2 => format!("refs/heads/b{:05}-dash", i - 2),
                _ => format!("refs/tags/t{i:05}"),
            };
            refs.push(name);
        }
        refs.sort();
        let refs: Vec<(String, ObjectId)> = refs
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                let oid = ObjectId::from_hex(format!("{:040x}", i + 1).as_bytes()).expect("hex");
                (name, oid)
            })
            .collect();
        for (i, (name, oid)) in refs.iter().enumerate() {
            text.extend_from_slice(format!("{oid} {name}\n").as_bytes());
            if i % 3 == 0 {
                text.extend_from_slice(format!("^{:040x}\n", i + 7).as_bytes());
            }
        }
        (text, refs)
    }

    fn read(text: &[u8]) -> Packed {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("packed-refs");
        fs::write(&path, text).expect("write");
        Packed::read(&path).expect("read")
    }

    /// A file git wrote `sorted` is searched where it is, and finds what the same entries
    /// parsed and sorted find: every name, the names between them, and what is below each.
    #[test]
    fn a_sorted_file_is_searched_in_place_as_the_parsed_one_is() {
        let (sorted_text, refs) = file("# pack-refs with: peeled fully-peeled sorted \n", 997);
        let (parsed_text, _) = file("# pack-refs with: peeled fully-peeled \n", 997);
        let (in_place, parsed) = (read(&sorted_text), read(&parsed_text));
        assert!(matches!(in_place.layout, Layout::Lines { .. }));
        assert!(matches!(parsed.layout, Layout::Parsed(_)));

        let listed = |p: &Packed| -> Vec<(Vec<u8>, ObjectId, Option<ObjectId>)> {
            p.entries()
                .map(|e| (p.name(&e).to_vec(), e.oid, e.peeled))
                .collect()
        };
        assert_eq!(listed(&in_place), listed(&parsed));
        assert_eq!(listed(&in_place).len(), refs.len());

        let mut names: Vec<String> = vec!["".into(), "refs".into(), "zzz".into()];
        for (name, _) in &refs {
            names.extend([name.clone(), format!("{name}0"), format!("{name}/")]);
            names.push(name[..name.len() - 1].to_owned());
        }
        for name in &names {
            let n = name.as_bytes();
            let get = |p: &Packed| p.get(n).map(|e| (e.oid, e.peeled));
            assert_eq!(get(&in_place), get(&parsed), "{name}");
            let want = refs.iter().find(|(r, _)| r == name).map(|(_, o)| *o);
            assert_eq!(get(&in_place).map(|(o, _)| o), want, "{name}");
            let below = |p: &Packed| p.first_below(n, |_| false).map(<[u8]>::to_vec);
            assert_eq!(below(&in_place), below(&parsed), "{name}");
            let skipping = |p: &Packed| {
                p.first_below(n, |b| b.ends_with(b"below"))
                    .map(<[u8]>::to_vec)
            };
            assert_eq!(skipping(&in_place), skipping(&parsed), "{name}");
        }
        // The file's own entries are written back as they were.
        let raw =
            |p: &Packed| -> Vec<u8> { p.entries().flat_map(|e| p.buf[e.raw].to_vec()).collect() };
        assert_eq!(
            raw(&in_place),
            sorted_text[sorted_text.find_byte(b'\n').unwrap() + 1..]
        );
    }

    /// A file read is known unchanged until it is replaced, even by one of the same size, or
    /// removed; a file that was missing, until one is made.
    #[test]
    fn a_file_read_is_unchanged_until_it_is_replaced() {
        let (text, _) = file("# pack-refs with: peeled fully-peeled sorted \n", 10);
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, new) = (dir.path().join("packed-refs"), dir.path().join("new"));
        let missing = Packed::read(&path).expect("read");
        assert!(missing.unchanged(&path));
        fs::write(&path, &text).expect("write");
        assert!(!missing.unchanged(&path));
        let packed = Packed::read(&path).expect("read");
        assert!(packed.unchanged(&path));
        fs::write(&new, &text).expect("write");
        fs::rename(&new, &path).expect("rename");
        assert!(!packed.unchanged(&path), "the same bytes in another file");
        let again = Packed::read(&path).expect("read");
        fs::remove_file(&path).expect("remove");
        assert!(!again.unchanged(&path));
    }

    /// A damaged file (bytes changed, lines cut, `^` and newlines where they do not belong,
    /// entries out of order under the `sorted` trait) is refused or read; either way no lookup
    /// on it panics.
    #[test]
    fn a_damaged_file_never_panics_a_lookup() {
        let (good, refs) = file("# pack-refs with: peeled fully-peeled sorted \n", 60);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("packed-refs");
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let (mut read, mut refused) = (0, 0);
        for _ in 0..3000 {
            let mut text = good.clone();
            for _ in 0..1 + next(4) {
                let at = next(text.len());
                match next(5) {
                    0 => text[at] = b"^\n #0a/"[next(6)],
                    1 => text.truncate(at),
                    2 => text.insert(at, b"^\n"[next(2)]),
                    3 => {
                        text.remove(at);
                    }
                    _ => {
                        let (a, b) = (next(text.len()), next(text.len()));
                        text.swap(a, b);
                    }
                }
                if text.is_empty() {
                    break;
                }
            }
            fs::write(&path, &text).expect("write");
            let Ok(packed) = Packed::read(&path) else {
                refused += 1;
                continue;
            };
            read += 1;
            let _ = packed.entries().count();
            for (name, _) in refs.iter().step_by(7) {
                let n = name.as_bytes();
                let _ = packed.get(n);
                let _ = packed.first_below(&n[..n.len() / 2], |_| false);
                let _ = packed.first_below(n, |_| false);
            }
        }
        assert!(
            read > 300 && refused > 300,
            "read {read}, refused {refused}"
        );
    }

    /// A broken line anywhere is refused when the file is read, searched in place or not, in
    /// git's words; a comment among the entries makes the file parsed, as it cannot be searched.
    #[test]
    fn a_broken_line_is_refused_and_a_comment_makes_the_file_parsed() {
        let (good, _) = file("# pack-refs with: peeled fully-peeled sorted \n", 40);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("packed-refs");
        let lines: Vec<&[u8]> = good.split_inclusive(|&b| b == b'\n').collect();
        for broken in [
            &b"0123 refs/heads/short-id\n"[..],
            b"^nothex\n",
            b"no-space\n",
        ] {
            let mut text = lines[..20].concat();
            text.extend_from_slice(broken);
            text.extend_from_slice(&lines[20..].concat());
            fs::write(&path, &text).expect("write");
            let err = Packed::read(&path).err().expect("refused").to_string();
            assert_eq!(
                err,
                format!(
                    "unexpected line in {}: {}",
                    path.display(),
                    broken[..broken.len() - 1].as_bstr()
                )
            );
        }
        let mut text = lines[..20].concat();
        text.extend_from_slice(b"# a comment\n");
        text.extend_from_slice(&lines[20..].concat());
        let commented = read(&text);
        assert!(matches!(commented.layout, Layout::Parsed(_)));
        assert_eq!(commented.entries().count(), 40);
    }
}
