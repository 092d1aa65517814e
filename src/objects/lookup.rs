//! Object lookups for one push that re-read the object directories at most once after a miss.
//!
//! gix-odb's handles, in their default mode, list the pack directories (and read the alternates)
//! again after every lookup that misses, to learn of packs written since. A request naming many
//! objects that do not exist would make each miss a rescan. git re-reads its packs once after a
//! miss (`reprepare_packed_git`) and then answers from what it saw; [`Objects`] does the same: a
//! lookup that misses while the push's [`Budget`] is [`Refresh::Available`] may refresh the view
//! of the packs, and spends the budget; every later lookup, through any [`Objects`] sharing the
//! budget, answers from the view the store has (loading the indices of packs it already knows,
//! never listing a directory again).
//!
//! A view opened after the quarantine was migrated lists the directories when it first loads,
//! so the migrated packs are seen whatever the budget says.
//!
//! Once the budget is spent, a lookup that is not in a pack would still `stat` a loose path in
//! each object directory (the quarantine's and the repository's). A view therefore lists, the
//! first time a lookup misses with the budget spent, its pack indices, and each loose fan-out
//! directory (`objects/xx/`) the first time a lookup needs it ([`Listing`], git's loose-object
//! cache `odb_loose_cache`): a miss is then answered from memory, and what a request naming N
//! missing objects costs in system calls no longer grows with N (at most 256 directories
//! listed per object directory). A hit is still read through gix-odb. As with git's cache, a
//! loose object written by another process after its directory was listed is not seen by this
//! view: a lookup answers "missing" (the push is refused, or the object written again), never
//! "present" for what is not there.

use std::cell::{Cell, OnceCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use gix_hash::{ObjectId, oid};
use gix_odb::store::RefreshMode;

/// Whether a lookup that misses may still re-read the object directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Refresh {
    /// No lookup has missed yet: the next miss refreshes the view of the packs once.
    #[default]
    Available,
    /// A lookup has missed (and refreshed): misses are answered from the view as it is.
    Spent,
}

/// The refresh allowance of one push, shared by every [`Objects`] of the push (clones share it).
#[derive(Debug, Clone, Default)]
pub struct Budget(Rc<Cell<Refresh>>);

impl Budget {
    /// Whether a refresh is still available.
    pub fn state(&self) -> Refresh {
        self.0.get()
    }
}

/// How many pack indices the object stores of one push may hold (gix-odb's slots), counted
/// when the push opens its first store. The later ones (the quarantine's, the repository's after
/// the migration) are opened with as many and a margin ([`Slots::MARGIN`]), without the listing
/// of the pack directories and the resolving of the alternates that gix-odb's default makes on
/// every opening to count them (and makes again at the store's first lookup): about 20 system
/// calls a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots(u16);

impl Slots {
    /// Room for the indices that may appear after the count: the push's own pack, moved in
    /// from the quarantine, and other pushes' meanwhile (a store with too few slots fails its
    /// lookups; the first store, gix-odb's default, has a tenth more than it counted, and at
    /// least 32, for the whole push). Each slot costs its store about 650 instructions to make
    /// and drop (callgrind): a margin of 64 on twice the count cost a one-commit push more
    /// than the listings it saved.
    const MARGIN: u16 = 16;

    /// gix-odb's bound on a store's slots (`PackId::max_indices`).
    const MAX: u16 = (1 << 15) - 1;

    /// The slots of `handle`'s store, with the margin.
    pub fn of(handle: &gix_odb::Handle) -> Self {
        let m = handle.store_ref().metrics();
        let total = m.unused_slots + m.known_reachable_indices + m.unreachable_indices;
        let total = u16::try_from(total).unwrap_or(Self::MAX);
        Slots(total.saturating_add(Self::MARGIN).min(Self::MAX))
    }

    /// The object database at `objects_dir` (with its alternates), with these many slots.
    pub fn open(self, objects_dir: &Path, hash: gix_hash::Kind) -> std::io::Result<gix_odb::Handle> {
        gix_odb::at_opts(
            objects_dir,
            hash,
            None,
            gix_odb::store::init::Options {
                slots: gix_odb::store::init::Slots::Given(self.0),
                ..Default::default()
            },
        )
    }
}

/// An object database whose misses refresh the view of the packs at most once per [`Budget`].
#[derive(Clone)]
pub struct Objects {
    /// Refreshes after a miss (gix-odb's default); asked while the budget is available.
    refreshing: gix_odb::Handle,
    /// Never refreshes; asked once the budget is spent. Both share one store, so this one sees
    /// what the other's refresh found.
    settled: gix_odb::Handle,
    budget: Budget,
    /// What this view's directories held, listed at its first miss with the budget spent
    /// (`None` inside: the listing failed, and lookups go through `settled` as they are).
    listing: Rc<OnceCell<Option<Listing>>>,
}

impl Objects {
    /// Lookups through `handle` (whatever its refresh mode), spending `budget` on their misses.
    pub fn new(handle: &gix_odb::Handle, budget: Budget) -> Self {
        let mut refreshing = handle.clone();
        refreshing.refresh = RefreshMode::AfterAllIndicesLoaded;
        let mut settled = handle.clone();
        settled.refresh_never();
        Objects {
            refreshing,
            settled,
            budget,
            listing: Rc::default(),
        }
    }

    /// The object database at `objects_dir` (with its alternates), spending `budget`.
    pub fn at(
        objects_dir: &Path,
        hash: gix_hash::Kind,
        budget: Budget,
    ) -> std::io::Result<Self> {
        Ok(Self::new(&gix_odb::at(objects_dir, hash)?, budget))
    }

    /// The same lookups, spending `budget` instead.
    pub fn with_budget(self, budget: Budget) -> Self {
        Objects { budget, ..self }
    }

    /// Use `cache` (made anew for each handle) for the pack entries these lookups decode.
    pub fn set_pack_cache(&mut self, cache: impl Fn() -> Box<gix_odb::cache::PackCache> + Send + Sync + Clone + 'static) {
        self.refreshing.set_pack_cache(cache.clone());
        self.settled.set_pack_cache(cache);
    }

    /// gix-odb's handle that never refreshes, for code that needs gix-odb's own type (the ref
    /// transaction peeling tags): a miss there is answered from the view as it is.
    pub fn settled(&self) -> &gix_odb::Handle {
        &self.settled
    }

    /// The handle to ask: the refreshing one until a lookup has missed; once one has, the
    /// settled one, or none when this view's [`Listing`] shows `id` is not there.
    fn handle(&self, id: &oid) -> Option<&gix_odb::Handle> {
        match self.budget.state() {
            Refresh::Available => Some(&self.refreshing),
            Refresh::Spent => {
                let listing = self
                    .listing
                    .get_or_init(|| {
                        Listing::of(self.settled.store_ref())
                            .map_err(|e| {
                                tracing::debug!(target: "berth::objects", error = %e, "object directories not listed; lookups go to the object database")
                            })
                            .ok()
                    });
                match listing {
                    Some(l) if !l.may_hold(id) => None,
                    _ => Some(&self.settled),
                }
            }
        }
    }

    /// Note the outcome of a lookup: a miss spends the budget.
    fn found(&self, found: bool) {
        if !found {
            self.budget.0.set(Refresh::Spent);
        }
    }
}

/// A pack index of a [`Listing`]: one pack's, or a multi-pack index.
enum PackIndex {
    Pack(gix_pack::index::File),
    Multi(gix_pack::multi_index::File),
}

impl PackIndex {
    fn contains(&self, id: &oid) -> bool {
        match self {
            PackIndex::Pack(f) => f.lookup(id).is_some(),
            PackIndex::Multi(f) => f.lookup(id).is_some(),
        }
    }
}

/// The objects a view's directories (its own and its alternates') held when it was listed: the
/// pack indices, read once, and the loose objects of each fan-out directory, read the first
/// time a lookup needs that directory. It only says where an object cannot be: a lookup it
/// may hold is still answered by gix-odb.
struct Listing {
    /// The object directories, the view's own first.
    dirs: Vec<PathBuf>,
    packs: Vec<PackIndex>,
    /// Per first byte of an id: the loose objects named in `xx/` of every directory, sorted.
    loose: Box<[OnceCell<Vec<ObjectId>>]>,
    hash: gix_hash::Kind,
}

impl Listing {
    /// The pack indices of `store`'s directories (each `pack/*.idx` and `multi-pack-index`).
    fn of(store: &gix_odb::Store) -> Result<Self, ListingError> {
        let hash = store.object_hash();
        let mut dirs = vec![store.path().to_owned()];
        dirs.extend(
            store
                .alternate_db_paths()
                .map_err(ListingError::Alternates)?,
        );
        let mut packs = Vec::new();
        for dir in &dirs {
            let pack_dir = dir.join("pack");
            let entries = match std::fs::read_dir(&pack_dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(ListingError::Read(pack_dir, e)),
            };
            for entry in entries {
                let path = entry.map_err(|e| ListingError::Read(pack_dir.clone(), e))?.path();
                let index = match path.file_name().and_then(|n| n.to_str()) {
                    Some("multi-pack-index") => gix_pack::multi_index::File::at(&path, None)
                        .map(PackIndex::Multi)
                        .map_err(|e| ListingError::Index(path.clone(), e))?,
                    Some(n) if n.ends_with(".idx") && path.with_extension("pack").exists() => {
                        gix_pack::index::File::at(&path, hash)
                            .map(PackIndex::Pack)
                            .map_err(|e| ListingError::Index(path.clone(), e))?
                    }
                    _ => continue,
                };
                packs.push(index);
            }
        }
        Ok(Listing {
            dirs,
            packs,
            loose: (0..256).map(|_| OnceCell::new()).collect(),
            hash,
        })
    }

    /// Whether `id` may be in one of the directories: in a pack index, or named in its loose
    /// fan-out directory (listed now if it was not yet). A directory that cannot be read
    /// counts as holding everything.
    fn may_hold(&self, id: &oid) -> bool {
        if self.packs.iter().any(|p| p.contains(id)) {
            return true;
        }
        let first = id.as_bytes()[0];
        let loose = self.loose[usize::from(first)].get_or_init(|| {
            self.list_loose(first)
                .unwrap_or_else(|| vec![id.to_owned()])
        });
        loose.binary_search_by(|o| o.as_ref().cmp(id)).is_ok()
    }

    /// The loose objects named in `xx/` (`xx` = `first` in hex) of every directory, sorted;
    /// `None` if one could not be read.
    fn list_loose(&self, first: u8) -> Option<Vec<ObjectId>> {
        let fanout = format!("{first:02x}");
        let rest = self.hash.len_in_hex() - 2;
        let mut ids = Vec::new();
        for dir in &self.dirs {
            let entries = match std::fs::read_dir(dir.join(&fanout)) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => return None,
            };
            for entry in entries {
                let name = entry.ok()?.file_name();
                let Some(name) = name.to_str().filter(|n| n.len() == rest) else {
                    continue;
                };
                if let Ok(id) = ObjectId::from_hex(format!("{fanout}{name}").as_bytes()) {
                    ids.push(id);
                }
            }
        }
        ids.sort_unstable();
        Some(ids)
    }
}

/// Why a [`Listing`] could not be made (the view then asks gix-odb for every lookup).
#[derive(Debug, thiserror::Error)]
enum ListingError {
    #[error("cannot resolve the alternates")]
    Alternates(#[source] gix_error::Error),
    #[error("cannot read {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    #[error("cannot read the pack index {}", .0.display())]
    Index(PathBuf, #[source] gix_error::Error),
}

/// Whether `id` is the empty tree, which git has whether or not it was ever written (its
/// in-memory object source, `find_cached_object`): every lookup here finds it too.
pub fn is_empty_tree(id: &oid) -> bool {
    id == ObjectId::empty_tree(id.kind())
}

impl gix_object::Exists for Objects {
    fn exists(&self, id: &oid) -> bool {
        if is_empty_tree(id) {
            return true;
        }
        let found = self.handle(id).is_some_and(|h| h.exists(id));
        self.found(found);
        found
    }
}

impl gix_object::Find for Objects {
    fn try_find<'a>(
        &self,
        id: &oid,
        buffer: &'a mut Vec<u8>,
    ) -> gix_error::Result<Option<gix_object::Data<'a>>> {
        let found = match self.handle(id) {
            Some(h) => h.try_find(id, buffer)?,
            None if is_empty_tree(id) => {
                buffer.clear();
                return Ok(Some(gix_object::Data::new(
                    buffer,
                    gix_object::Kind::Tree,
                    id.kind(),
                )));
            }
            None => None,
        };
        self.found(found.is_some());
        Ok(found)
    }
}

impl gix_odb::Header for Objects {
    fn try_header(&self, id: &oid) -> gix_error::Result<Option<gix_odb::find::Header>> {
        let found = match self.handle(id) {
            Some(h) => h.try_header(id)?,
            None if is_empty_tree(id) => {
                return Ok(Some(gix_odb::find::Header::Loose {
                    kind: gix_object::Kind::Tree,
                    size: 0,
                }));
            }
            None => None,
        };
        self.found(found.is_some());
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    //! Against a real repository made by git: misses list the pack directory once, hits and a
    //! view opened after a pack arrived still find everything.

    use std::path::Path;
    use std::process::Command;

    use gix_hash::ObjectId;
    use gix_object::{Exists, Find};
    use gix_odb::Header;

    use super::*;

    use crate::test_git::git;

    /// A bare repository with one packed commit, and that commit.
    fn packed_repo(dir: &Path) -> ObjectId {
        git(dir, &["init", "-q", "--bare", "r.git"]);
        let repo = dir.join("r.git");
        let tree = git(&repo, &["mktree"]);
        let commit = git(&repo, &["commit-tree", "-m", "1", &tree]);
        git(&repo, &["update-ref", "refs/heads/main", &commit]);
        git(&repo, &["repack", "-adq"]);
        ObjectId::from_hex(commit.as_bytes()).unwrap()
    }

    fn missing(i: u32) -> ObjectId {
        let mut bytes = [0x11u8; 20];
        bytes[..4].copy_from_slice(&i.to_be_bytes());
        ObjectId::from_bytes_or_panic(&bytes)
    }

    /// A pack of one new blob in `repo`; the blob.
    fn add_pack(repo: &Path, i: u32) -> ObjectId {
        use crate::test_git::git_with_input;
        let id = git_with_input(repo, &["hash-object", "-w", "--stdin"], &format!("blob {i}\n"));
        git_with_input(repo, &["pack-objects", "-q", "objects/pack/pack"], &format!("{id}\n"));
        git(repo, &["prune-packed"]);
        ObjectId::from_hex(id.as_bytes()).unwrap()
    }

    #[test]
    fn a_later_store_has_room_for_the_packs_counted_and_more_arriving() {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "--bare", "r.git"]);
        let repo = dir.path().join("r.git");
        let objects = repo.join("objects");
        let mut blobs: Vec<ObjectId> = (0..30).map(|i| add_pack(&repo, i)).collect();
        let first = gix_odb::at(&objects, gix_hash::Kind::Sha1).unwrap();
        let slots = Slots::of(&first);
        // gix-odb's default: a tenth more than the 30 packs it counted, at least 32.
        assert_eq!(slots, Slots(33 + Slots::MARGIN));
        // As many packs arrive as the margin has room for, beyond the three the count's tenth
        // left (a store with the count's slots alone could not hold them).
        blobs.extend((30..30 + 3 + u32::from(Slots::MARGIN)).map(|i| add_pack(&repo, i)));
        let later = slots.open(&objects, gix_hash::Kind::Sha1).unwrap();
        for b in &blobs {
            assert!(later.exists(b), "{b}");
        }
        // Opened with its slots given, the store did not list the packs to count them.
        assert_eq!(later.store_ref().metrics().num_refreshes, 1);
    }

    #[test]
    fn many_misses_refresh_once_and_hits_are_still_found() {
        let dir = tempfile::tempdir().unwrap();
        let commit = packed_repo(dir.path());
        let handle = gix_odb::at(dir.path().join("r.git/objects"), gix_hash::Kind::Sha1).unwrap();
        let budget = Budget::default();
        let objects = Objects::new(&handle, budget.clone());
        let mut buf = Vec::new();
        assert!(objects.exists(&commit));
        assert_eq!(budget.state(), Refresh::Available);
        let loaded = handle.store_ref().metrics().num_refreshes;
        for i in 0..1000 {
            assert!(!objects.exists(&missing(i)));
            assert!(objects.try_find(&missing(i), &mut buf).unwrap().is_none());
            assert!(objects.try_header(&missing(i)).unwrap().is_none());
        }
        assert_eq!(budget.state(), Refresh::Spent);
        // The first miss listed the directory once more; none of the others did.
        assert_eq!(handle.store_ref().metrics().num_refreshes, loaded + 1);
        assert!(objects.exists(&commit));
        let data = objects.try_find(&commit, &mut buf).unwrap().unwrap();
        assert_eq!(data.kind, gix_object::Kind::Commit);
    }

    /// Write a blob with `content` into a pack of its own.
    fn new_pack_with_blob(repo: &Path, content: &str) -> ObjectId {
        let file = repo.join("blob");
        std::fs::write(&file, content).unwrap();
        let blob = git(repo, &["hash-object", "-w", file.to_str().unwrap()]);
        let mut pack = Command::new("git")
            .args(["pack-objects", "-q", "objects/pack/pack"])
            .current_dir(repo)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        writeln!(pack.stdin.take().unwrap(), "{blob}").unwrap();
        assert!(pack.wait().unwrap().success());
        git(repo, &["prune-packed"]);
        ObjectId::from_hex(blob.as_bytes()).unwrap()
    }

    #[test]
    fn a_pack_written_after_the_view_was_loaded_is_found_until_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let commit = packed_repo(dir.path());
        let repo = dir.path().join("r.git");
        let budget = Budget::default();
        let objects = Objects::at(&repo.join("objects"), gix_hash::Kind::Sha1, budget.clone())
            .unwrap();
        assert!(objects.exists(&commit));
        // As the migrated quarantine's pack: the lookup refreshes and finds it.
        let first = new_pack_with_blob(&repo, "first");
        assert!(objects.exists(&first));
        assert_eq!(budget.state(), Refresh::Available);
        assert!(!objects.exists(&missing(0)));
        assert_eq!(budget.state(), Refresh::Spent);
        // Once spent, a pack written later is not looked for by this push ...
        let second = new_pack_with_blob(&repo, "second");
        assert!(!objects.exists(&second));
        assert!(objects.exists(&first));
        // ... but a view opened after it was written lists it.
        let later =
            Objects::at(&repo.join("objects"), gix_hash::Kind::Sha1, budget.clone()).unwrap();
        assert!(later.exists(&second));
    }

    /// A loose object written with `git hash-object -w` into the repository at `repo`.
    fn loose_blob(repo: &Path, content: &str) -> ObjectId {
        let file = repo.join("loose");
        std::fs::write(&file, content).unwrap();
        let blob = git(repo, &["hash-object", "-w", file.to_str().unwrap()]);
        ObjectId::from_hex(blob.as_bytes()).unwrap()
    }

    /// The same object under another name in its fan-out directory: `xx/` of the id, a file
    /// named as another id of that directory would be (what a listing of `xx/` sees).
    fn sibling(id: &ObjectId) -> ObjectId {
        let mut bytes = id.as_bytes().to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        ObjectId::from_bytes_or_panic(&bytes)
    }

    fn loose_path(objects: &Path, id: &ObjectId) -> std::path::PathBuf {
        let hex = id.to_hex().to_string();
        objects.join(&hex[..2]).join(&hex[2..])
    }

    #[test]
    fn once_spent_misses_are_answered_from_the_listing_and_hits_still_found() {
        let dir = tempfile::tempdir().unwrap();
        let commit = packed_repo(dir.path());
        let repo = dir.path().join("r.git");
        let loose = loose_blob(&repo, "loose before");
        // A view through an alternate, as a push's quarantine sees the repository.
        let quarantine = dir.path().join("incoming");
        std::fs::create_dir_all(quarantine.join("info")).unwrap();
        std::fs::write(
            quarantine.join("info/alternates"),
            format!("{}\n", repo.join("objects").display()),
        )
        .unwrap();
        let budget = Budget::default();
        let objects = Objects::at(&quarantine, gix_hash::Kind::Sha1, budget.clone()).unwrap();
        assert!(!objects.exists(&missing(1)));
        assert_eq!(budget.state(), Refresh::Spent);
        // Listed now: the packed and the loose objects (the latter in the alternate).
        assert!(objects.exists(&commit));
        assert!(objects.exists(&loose));
        let mut buf = Vec::new();
        assert_eq!(
            objects.try_find(&loose, &mut buf).unwrap().unwrap().kind,
            gix_object::Kind::Blob
        );
        assert!(objects.try_header(&commit).unwrap().is_some());
        // A file appearing in a fan-out directory already listed is not looked for on disk:
        // the miss is answered from memory (without the listing, gix-odb would stat the path
        // and find it).
        let late = sibling(&loose);
        std::fs::copy(
            loose_path(&repo.join("objects"), &loose),
            loose_path(&repo.join("objects"), &late),
        )
        .unwrap();
        assert!(!objects.exists(&late));
        assert!(objects.try_find(&late, &mut buf).unwrap().is_none());
        // A view opened later lists anew and sees it (gix-odb does not check the content's id
        // on a header read).
        let later = Objects::at(&quarantine, gix_hash::Kind::Sha1, budget).unwrap();
        assert!(!later.exists(&missing(2)));
        assert!(later.try_header(&late).unwrap().is_some());
    }

    #[test]
    fn while_available_a_miss_still_goes_to_disk() {
        let dir = tempfile::tempdir().unwrap();
        packed_repo(dir.path());
        let repo = dir.path().join("r.git");
        let budget = Budget::default();
        let objects = Objects::at(&repo.join("objects"), gix_hash::Kind::Sha1, budget.clone())
            .unwrap();
        // No listing before the first miss: an object written just before the lookup is found.
        let loose = loose_blob(&repo, "written before the first lookup");
        assert!(objects.exists(&loose));
        assert_eq!(budget.state(), Refresh::Available);
    }
}
