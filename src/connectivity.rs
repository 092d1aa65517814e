//! The connectivity check: every object reachable from a new ref value must exist.
//!
//! git runs `rev-list --objects <new tips> --not --all`. berth walks from each new tip through
//! the objects that arrived in this push (those in the received pack's index) and stops at any
//! object the repository already had: objects enter a repository only through a checked push
//! or git itself, so an object that was there before is taken as complete, exactly as git's
//! `fsck` requires of every object in a healthy repository. The walk costs what the push brought,
//! not what the repository holds, and a tip that is already the value of a ref costs one lookup.
//!
//! All tips of a push are first walked together ([`Check::prewalk`]), the received objects
//! decoded in pack order through a cache of decoded deltas: a delta's base comes before it in a
//! pack, so each delta costs one delta application instead of its whole chain (the walk of one
//! tip at a time meets old objects first, whose chains run through all newer versions). Blobs in
//! the pack are not decoded: indexing the pack already resolved and hashed them, and they link
//! to nothing. Only when the joint walk finds something missing are the tips walked one by one,
//! for git's per-ref verdicts.

use std::collections::{HashMap, HashSet, VecDeque};

use gix_hash::ObjectId;
use gix_object::{Exists, Find, Kind};

/// The outcome for one tip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Everything reachable exists.
    Connected,
    /// An object is missing.
    Missing(Missing),
}

/// A missing object and how the walk reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The missing object.
    pub id: ObjectId,
    /// What pointed at it.
    pub role: Role,
}

/// How a missing object was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// It is the new value of a ref, or a tag's target.
    Tip,
    /// A commit's or tree's tree.
    Tree,
    /// A tree's blob.
    Blob,
    /// A parent of this commit.
    Parent(ObjectId),
}

impl Missing {
    /// What git's `rev-list --objects` prints for this object.
    pub fn message(&self) -> String {
        let id = self.id;
        match self.role {
            Role::Tip => format!("fatal: bad object {id}\n"),
            Role::Tree => format!("fatal: bad tree object {id}\n"),
            Role::Blob => format!("fatal: missing blob object '{id}'\n"),
            Role::Parent(of) => format!(
                "error: Could not read {id}\nfatal: Failed to traverse parents of commit {of}\n"
            ),
        }
    }
}

/// Checks tips against a push's objects.
pub struct Check<'a> {
    objects: gix_odb::Handle,
    pack: Option<&'a gix_pack::index::File>,
    known: HashSet<ObjectId>,
    buf: Vec<u8>,
    /// The repository's shallow commits (`$GIT_DIR/shallow`): their parents are absent.
    shallow: HashSet<ObjectId>,
    /// The client's shallow commits (its `shallow` lines).
    client_shallow: HashSet<ObjectId>,
    /// Client shallow commits the last walk needed as new shallow roots of the repository.
    new_roots: Vec<ObjectId>,
}

impl<'a> Check<'a> {
    /// `objects` sees the quarantine and the repository; `pack` is the index of the received
    /// pack; `tips` are the values of the existing refs.
    pub fn new(
        objects: &'a gix_odb::Handle,
        pack: Option<&'a gix_pack::index::File>,
        tips: impl IntoIterator<Item = ObjectId>,
    ) -> Self {
        let mut objects = objects.clone();
        objects.set_pack_cache(|| Box::new(DeltaCache::default()));
        Check {
            objects,
            pack,
            known: tips.into_iter().collect(),
            buf: Vec::new(),
            shallow: HashSet::new(),
            client_shallow: HashSet::new(),
            new_roots: Vec::new(),
        }
    }

    /// Take shallow histories into account: the repository's own shallow commits end the walk,
    /// and a client shallow commit whose parents the repository lacks ends it too, recorded in
    /// [`Check::new_roots`] (the ref then needs a new shallow root).
    pub fn with_shallow(
        mut self,
        repository: HashSet<ObjectId>,
        client: HashSet<ObjectId>,
    ) -> Self {
        self.shallow = repository;
        self.client_shallow = client;
        self
    }

    /// The client shallow commits the last [`Check::tip`] needed as new shallow roots.
    pub fn new_roots(&self) -> &[ObjectId] {
        &self.new_roots
    }

    fn exists(&self, id: &ObjectId) -> bool {
        self.in_pack(id) || self.objects.exists(id)
    }

    fn in_pack(&self, id: &ObjectId) -> bool {
        self.pack.is_some_and(|p| p.lookup(id).is_some())
    }

    /// Walk all `tips` together, the received objects in pack order. When everything they reach
    /// is there, every object walked is remembered, so that [`Check::tip`] answers each tip with
    /// one lookup, and `true` is returned. When something is missing (or shallow commits are
    /// involved, which need the walk of each tip), nothing is remembered and [`Check::tip`]
    /// walks each tip on its own.
    pub fn prewalk(&mut self, tips: &[ObjectId]) -> bool {
        let Some(pack) = self.pack else {
            return false;
        };
        if !self.shallow.is_empty() || !self.client_shallow.is_empty() {
            return false;
        }
        let mut data = PackData::open(pack);
        let mut seen: HashSet<ObjectId> = HashSet::new();
        let mut frontier: Vec<(ObjectId, Kind)> = tips.iter().map(|t| (*t, Kind::Commit)).collect();
        let mut wave: Vec<(u64, ObjectId)> = Vec::new();
        while !frontier.is_empty() {
            wave.clear();
            for (id, kind) in frontier.drain(..) {
                if self.known.contains(&id) || !seen.insert(id) {
                    continue;
                }
                match pack.lookup(id) {
                    // A blob links to nothing, and indexing the pack resolved it already.
                    Some(_) if kind == Kind::Blob => {}
                    Some(i) => wave.push((pack.pack_offset_at_index(i), id)),
                    None if self.objects.exists(&id) => {}
                    None => return false,
                }
            }
            // Bases before their deltas.
            wave.sort_unstable();
            for (offset, id) in &wave {
                let decoded = data
                    .as_mut()
                    .and_then(|d| d.decode(pack, *offset, &mut self.buf));
                let (kind, len) = match decoded {
                    Some(k) => k,
                    None => match self.objects.try_find(id, &mut self.buf) {
                        Ok(Some(d)) => (d.kind, d.data.len()),
                        _ => return false,
                    },
                };
                let Some(links) = self
                    .buf
                    .get(..len)
                    .and_then(|b| crate::fsck::links(kind, b))
                else {
                    return false;
                };
                frontier.extend(
                    links
                        .into_iter()
                        .filter(|(l, _)| !self.known.contains(l) && !seen.contains(l)),
                );
            }
        }
        self.known.extend(seen);
        true
    }

    /// Check one tip. Objects found complete are remembered for the following tips.
    pub fn tip(&mut self, tip: ObjectId) -> Status {
        self.new_roots.clear();
        if self.known.contains(&tip) {
            return Status::Connected;
        }
        let mut seen: HashSet<ObjectId> = HashSet::new();
        let mut stack = vec![(tip, Role::Tip)];
        let missing = |id, role| Status::Missing(Missing { id, role });
        while let Some((id, role)) = stack.pop() {
            if self.known.contains(&id) || !seen.insert(id) {
                continue;
            }
            if !self.in_pack(&id) {
                if !self.objects.exists(&id) {
                    return missing(id, role);
                }
                continue;
            }
            if role == Role::Blob {
                continue; // resolved and hashed when the pack was indexed; it links to nothing
            }
            let data = match self.objects.try_find(&id, &mut self.buf) {
                Ok(Some(data)) => data,
                _ => return missing(id, role),
            };
            // git's own lenient reading of raw objects (bad modes, broken idents and the
            // like are fsck's business, not the walk's).
            let obj_kind = data.kind;
            let Some(links) = crate::fsck::links(data.kind, data.data) else {
                return missing(id, role);
            };
            let is_commit = obj_kind == Kind::Commit;
            let cut = is_commit
                && (self.shallow.contains(&id)
                    || (self.client_shallow.contains(&id)
                        && links
                            .iter()
                            .any(|(l, k)| *k == Kind::Commit && !self.exists(l))
                        && {
                            self.new_roots.push(id);
                            true
                        }));
            for (link, kind) in links {
                if cut && kind == Kind::Commit {
                    continue; // a shallow commit's parents are not there, on purpose
                }
                let link_role = match (obj_kind, kind) {
                    (Kind::Commit, Kind::Commit) => Role::Parent(id),
                    (Kind::Tag, _) => Role::Tip,
                    (_, Kind::Tree) => Role::Tree,
                    _ => Role::Blob,
                };
                stack.push((link, link_role));
            }
        }
        if self.new_roots.is_empty() {
            self.known.extend(seen);
        }
        Status::Connected
    }
}

/// The received pack's data, its objects decoded with the result of every delta cached: a chain
/// is decoded from its oldest uncached delta up, so that each delta in it is applied once per
/// walk (as git's delta base cache does), not once per object whose chain runs through it.
struct PackData {
    file: gix_pack::data::File,
    inflate: gix_zlib::Inflate,
    cache: DeltaCache,
    scratch: Vec<u8>,
}

impl PackData {
    /// `None` when the pack is gone (a small push's objects were unpacked as loose objects).
    fn open(index: &gix_pack::index::File) -> Option<Self> {
        let path = index.path().with_extension("pack");
        Some(PackData {
            file: gix_pack::data::File::at(path, gix_hash::Kind::Sha1).ok()?,
            inflate: Default::default(),
            cache: DeltaCache::default(),
            scratch: Vec::new(),
        })
    }

    /// Decode the object at `offset` into `out`: its kind and size, or `None` if it cannot be
    /// decoded here (the caller then asks the object database).
    fn decode(
        &mut self,
        index: &gix_pack::index::File,
        offset: u64,
        out: &mut Vec<u8>,
    ) -> Option<(Kind, usize)> {
        use gix_pack::data::entry::Header;
        let PackData {
            file,
            inflate,
            cache,
            scratch,
        } = self;
        // The deltas above the first cached one (or the chain's base), the requested one first.
        let mut chain = vec![file.entry(offset).ok()?];
        while let Some(last) = chain.last()
            && let Header::OfsDelta { base_distance } = last.header
            && !cache.contains(file.id, last.data_offset)
        {
            let base = last.checked_base_pack_offset(base_distance)?;
            if base >= last.pack_offset() {
                return None;
            }
            chain.push(file.entry(base).ok()?);
        }
        let resolve = |id: &gix_hash::oid, _: &mut Vec<u8>| {
            Ok(index
                .lookup(id)
                .and_then(|i| file.entry(index.pack_offset_at_index(i)).ok())
                .map(gix_pack::data::decode::entry::ResolvedBase::InPack))
        };
        // Oldest first, each put into the cache for the next; the first entry last, into `out`.
        let requested = chain.remove(0);
        for entry in chain.into_iter().rev() {
            if entry.header.is_delta() && !cache.contains(file.id, entry.data_offset) {
                file.decode_entry(entry, scratch, inflate, &resolve, cache)
                    .ok()?;
            }
        }
        let outcome = file
            .decode_entry(requested, out, inflate, &resolve, cache)
            .ok()?;
        // (`out` holds exactly the object; `Outcome::object_size` is not its size after a
        // cache hit.)
        Some((outcome.kind, out.len()))
    }
}

/// The decoded deltas of the received pack, the least recently used dropped first when full:
/// gix-pack asks it for each delta of a chain before decoding it, and stores each object it
/// decoded from a delta.
#[derive(Default)]
struct DeltaCache {
    /// Kind, compressed size, data and the last use of each entry.
    entries: HashMap<(u32, u64), Cached>,
    /// Uses, oldest first; a use older than its entry's last one is stale.
    order: VecDeque<((u32, u64), u64)>,
    bytes: usize,
    clock: u64,
}

/// A [`DeltaCache`] entry: kind, compressed size, data, last use.
type Cached = (Kind, usize, Vec<u8>, u64);

impl DeltaCache {
    /// The decoded bytes it holds at most (git's `core.deltaBaseCacheLimit` default).
    const CAPACITY: usize = 96 << 20;
    /// Larger objects are not kept.
    const LARGEST: usize = 4 << 20;

    fn contains(&self, pack_id: u32, offset: u64) -> bool {
        self.entries.contains_key(&(pack_id, offset))
    }

    fn touch(&mut self, key: (u32, u64)) -> u64 {
        self.clock += 1;
        self.order.push_back((key, self.clock));
        if self.order.len() > 4 * self.entries.len() + 1024 {
            let entries = &self.entries;
            self.order
                .retain(|(k, used)| entries.get(k).is_some_and(|e| e.3 == *used));
        }
        self.clock
    }
}

impl gix_pack::cache::DecodeEntry for DeltaCache {
    fn put(&mut self, pack_id: u32, offset: u64, data: &[u8], kind: Kind, compressed_size: usize) {
        let key = (pack_id, offset);
        if data.len() > Self::LARGEST || self.entries.contains_key(&key) {
            return;
        }
        while self.bytes + data.len() > Self::CAPACITY {
            let Some((old, used)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&old).is_some_and(|e| e.3 == used)
                && let Some((_, _, d, _)) = self.entries.remove(&old)
            {
                self.bytes -= d.len();
            }
        }
        self.bytes += data.len();
        let used = self.touch(key);
        self.entries
            .insert(key, (kind, compressed_size, data.to_vec(), used));
    }

    fn get(&mut self, pack_id: u32, offset: u64, out: &mut Vec<u8>) -> Option<(Kind, usize)> {
        let key = (pack_id, offset);
        if !self.entries.contains_key(&key) {
            return None;
        }
        let used = self.touch(key);
        let (kind, compressed_size, data, last) = self.entries.get_mut(&key)?;
        *last = used;
        out.clear();
        out.extend_from_slice(data);
        Some((*kind, *compressed_size))
    }
}
