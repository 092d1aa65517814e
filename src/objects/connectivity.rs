//! The connectivity check: every object reachable from a new ref value must exist.
//!
//! git runs `rev-list --objects <new tips> --not --all`. berth walks from each new tip through
//! the objects that arrived in this push (those in the received pack's index) and stops at any
//! object the repository already had: objects enter a repository only through a checked push
//! or git itself, so an object that was there before is taken as complete, exactly as git's
//! `fsck` requires of every object in a healthy repository. The walk costs what the push brought,
//! not what the repository holds, and a tip that is already the value of a ref costs one lookup.
//!
//! A push's tips are first checked together ([`Check::self_contained`]): when every commit, tree and
//! tag of the received pack links only to objects in the pack or in the repository
//! ([`crate::objects::pack_links`], each object decoded once through gix-pack's delta tree, the
//! way indexing decoded it), every tip in the pack is connected, however many there are. Only
//! when that cannot be said (something is missing, the pack was unpacked as loose objects, or
//! shallow commits are involved) are the tips walked one by one, for git's per-ref verdicts.

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
    /// [`Check::self_contained`] said yes: everything in the received pack is connected.
    self_contained: bool,
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
            self_contained: false,
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

    /// Check all `tips` together: `true` when each is in the received pack or the repository
    /// and the pack links only to objects in itself or the repository (git's "self-contained
    /// and connected", which its `index-pack --check-self-contained-and-connected` tells a
    /// fetch, made here to take objects the repository has as well), after which
    /// [`Check::tip`] answers a tip in the pack without walking. `false` when that cannot be
    /// said (something is missing, the pack's objects were unpacked, shallow commits are
    /// involved): [`Check::tip`] then walks each tip on its own.
    pub fn self_contained(&mut self, tips: &[ObjectId]) -> bool {
        let Some(pack) = self.pack else {
            return false;
        };
        if !self.shallow.is_empty() || !self.client_shallow.is_empty() {
            return false;
        }
        let external = match crate::objects::pack_links::external_links(pack, None) {
            Ok(external) => external,
            Err(why) => {
                tracing::debug!(?why, "the received pack's links: walking each tip");
                return false;
            }
        };
        let exists = |id: &ObjectId| self.known.contains(id) || self.objects.exists(id);
        if !external.iter().all(exists) || !tips.iter().all(|t| self.in_pack(t) || exists(t)) {
            return false;
        }
        self.self_contained = true;
        true
    }

    /// Check one tip. Objects found complete are remembered for the following tips.
    pub fn tip(&mut self, tip: ObjectId) -> Status {
        self.new_roots.clear();
        if self.known.contains(&tip) || (self.self_contained && self.in_pack(&tip)) {
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

/// The decoded deltas of the received pack for the walk of one tip at a time, the least recently
/// used dropped first when full: gix-pack asks it for each delta of a chain before decoding it,
/// and stores each object it decoded from a delta.
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
type Cached = (Kind, usize, Box<[u8]>, u64);

impl DeltaCache {
    /// The decoded bytes it holds at most (git's `core.deltaBaseCacheLimit` default).
    const CAPACITY: usize = 96 << 20;
    /// Larger objects are not kept.
    const LARGEST: usize = 4 << 20;

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
        self.entries.insert(key, (kind, compressed_size, data.into(), used));
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
