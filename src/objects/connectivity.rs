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

use std::collections::VecDeque;

use foldhash::{HashMap, HashSet, HashSetExt};

use gix_hash::ObjectId;
use gix_object::{Exists, Find, Kind};

use crate::objects::lookup::{Budget, Objects};

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
    /// A miss lists the object directories again at most once (see [`crate::objects::lookup`]).
    objects: Objects,
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
        let mut objects = Objects::new(objects, Budget::default());
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

    /// Spend the push's `budget` for refreshing the view of the packs after a miss, instead of
    /// one of this check's own.
    pub fn with_refresh_budget(mut self, budget: Budget) -> Self {
        self.objects = self.objects.with_budget(budget);
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
                let links = match data.as_mut().and_then(|d| d.decode(pack, *offset)) {
                    Some((kind, bytes)) => crate::objects::fsck::links(kind, &bytes, id.kind()),
                    None => match self.objects.try_find(id, &mut self.buf) {
                        Ok(Some(d)) => crate::objects::fsck::links(d.kind, d.data, id.kind()),
                        _ => return false,
                    },
                };
                let Some(links) = links else {
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
            let Some(links) = crate::objects::fsck::links(data.kind, data.data, id.kind()) else {
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

/// The received pack's data, decoded for the walk as git's delta base cache does it: every object
/// decoded (base or delta result) is kept in an LRU cache by pack offset, so that a delta costs
/// inflating its instructions and applying them to a cached base, and a base shared by many
/// deltas is inflated once. (gix-pack's decoder caches only the deltas it was asked for, never
/// the rest of a chain nor a base.)
struct PackData {
    file: gix_pack::data::File,
    inflate: gix_zlib::Inflate,
    cache: DeltaCache,
}

impl PackData {
    /// `None` when the pack is gone (a small push's objects were unpacked as loose objects).
    fn open(index: &gix_pack::index::File) -> Option<Self> {
        let path = index.path().with_extension("pack");
        Some(PackData {
            file: gix_pack::data::File::at(path, index.object_hash()).ok()?,
            inflate: Default::default(),
            cache: DeltaCache::default(),
        })
    }

    /// The inflated data of `entry` (an object, or a delta's instructions).
    fn inflate(&mut self, entry: &gix_pack::data::Entry) -> Option<Vec<u8>> {
        let size = usize::try_from(entry.decompressed_size).ok()?;
        if size as u64 > crate::objects::ingest::MAX_OBJECT_SIZE {
            return None;
        }
        let mut out = vec![0; size];
        self.file
            .decompress_entry(entry, &mut self.inflate, &mut out)
            .ok()?;
        Some(out)
    }

    /// The object at pack offset `offset`, or `None` if it cannot be decoded here (the caller
    /// then asks the object database).
    fn decode(
        &mut self,
        index: &gix_pack::index::File,
        offset: u64,
    ) -> Option<(Kind, std::sync::Arc<[u8]>)> {
        use gix_pack::data::entry::Header;
        // The deltas down to the first cached object or the chain's base, the requested first.
        let mut chain = Vec::new();
        let mut at = offset;
        let (kind, mut data) = loop {
            if let Some(hit) = self.cache.get_shared((0, at)) {
                break hit;
            }
            let entry = self.file.entry(at).ok()?;
            let base = match entry.header {
                Header::OfsDelta { base_distance } => {
                    let base = entry.checked_base_pack_offset(base_distance)?;
                    if base >= at {
                        return None;
                    }
                    base
                }
                Header::RefDelta { base_id } => index.pack_offset_at_index(index.lookup(base_id)?),
                _ => {
                    let kind = entry.header.as_kind()?;
                    let data: std::sync::Arc<[u8]> = self.inflate(&entry)?.into();
                    self.cache.put_shared((0, at), kind, data.clone());
                    break (kind, data);
                }
            };
            // A ref-delta may name an object of its own chain; git packs are at most ~4,000 deep.
            if chain.len() > 10_000 {
                return None;
            }
            chain.push((at, entry));
            at = base;
        };
        while let Some((at, entry)) = chain.pop() {
            let delta = self.inflate(&entry)?;
            data = apply_delta(&data, &delta)?.into();
            self.cache.put_shared((0, at), kind, data.clone());
        }
        Some((kind, data))
    }
}

/// git's delta format: the base's and the result's sizes, then copy (from the base) and insert
/// instructions. `None` for a malformed delta or one that does not fit `base`.
fn apply_delta(base: &[u8], delta: &[u8]) -> Option<Vec<u8>> {
    fn size(d: &[u8]) -> Option<(u64, &[u8])> {
        let mut value = 0u64;
        for (i, &b) in d.iter().enumerate() {
            let shift = 7 * i;
            if shift > 63 {
                return None;
            }
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some((value, &d[i + 1..]));
            }
        }
        None
    }
    let (base_size, rest) = size(delta)?;
    let (result_size, mut ops) = size(rest)?;
    if base_size != base.len() as u64 || result_size > crate::objects::ingest::MAX_OBJECT_SIZE {
        return None;
    }
    let result_size = usize::try_from(result_size).ok()?;
    let mut out = Vec::with_capacity(result_size);
    while let Some((&cmd, rest)) = ops.split_first() {
        ops = rest;
        if cmd & 0x80 != 0 {
            let mut field = |bits: &[u8]| -> Option<usize> {
                let mut v = 0usize;
                for (i, &bit) in bits.iter().enumerate() {
                    if cmd & bit != 0 {
                        let (&b, rest) = ops.split_first()?;
                        ops = rest;
                        v |= usize::from(b) << (8 * i);
                    }
                }
                Some(v)
            };
            let start = field(&[0x01, 0x02, 0x04, 0x08])?;
            let len = match field(&[0x10, 0x20, 0x40])? {
                0 => 0x10000,
                n => n,
            };
            out.extend_from_slice(base.get(start..start.checked_add(len)?)?);
        } else if cmd != 0 {
            let n = usize::from(cmd);
            out.extend_from_slice(ops.get(..n)?);
            ops = &ops[n..];
        } else {
            return None;
        }
        if out.len() > result_size {
            return None;
        }
    }
    (out.len() == result_size).then_some(out)
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
type Cached = (Kind, usize, std::sync::Arc<[u8]>, u64);

impl DeltaCache {
    /// The decoded bytes it holds at most (git's `core.deltaBaseCacheLimit` default).
    const CAPACITY: usize = 96 << 20;
    /// Larger objects are not kept.
    const LARGEST: usize = 4 << 20;

    /// An object decoded by [`PackData`], shared rather than copied.
    fn get_shared(&mut self, key: (u32, u64)) -> Option<(Kind, std::sync::Arc<[u8]>)> {
        if !self.entries.contains_key(&key) {
            return None;
        }
        let used = self.touch(key);
        let (kind, _, data, last) = self.entries.get_mut(&key)?;
        *last = used;
        Some((*kind, data.clone()))
    }

    fn put_shared(&mut self, key: (u32, u64), kind: Kind, data: std::sync::Arc<[u8]>) {
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
        self.entries.insert(key, (kind, 0, data, used));
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
        self.put_shared((pack_id, offset), kind, data.into());
        if let Some(e) = self.entries.get_mut(&(pack_id, offset)) {
            e.1 = compressed_size;
        }
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

#[cfg(test)]
mod tests {
    use super::apply_delta;

    #[test]
    fn deltas_apply_as_git_and_malformed_ones_are_refused() {
        let base = b"hello world";
        // Copy 5 bytes from offset 6, then insert "!".
        assert_eq!(
            apply_delta(base, &[11, 6, 0x91, 6, 5, 1, b'!']).as_deref(),
            Some(&b"world!"[..])
        );
        // A copy of size 0 means 0x10000 bytes: past this base's end.
        assert_eq!(apply_delta(base, &[11, 5, 0x80]), None);
        // The wrong base size, a reserved 0 instruction, a copy out of range, a short insert,
        // a result of the wrong size, a truncated size.
        assert_eq!(apply_delta(base, &[10, 5, 0x91, 6, 5]), None);
        assert_eq!(apply_delta(base, &[11, 5, 0]), None);
        assert_eq!(apply_delta(base, &[11, 5, 0x91, 8, 5]), None);
        assert_eq!(apply_delta(base, &[11, 3, 3, b'a']), None);
        assert_eq!(apply_delta(base, &[11, 4, 0x91, 6, 5]), None);
        assert_eq!(apply_delta(base, &[0x8b]), None);
    }
}
