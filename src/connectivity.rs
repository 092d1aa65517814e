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
            for (_, id) in &wave {
                let Ok(Some(data)) = self.objects.try_find(id, &mut self.buf) else {
                    return false;
                };
                let Some(links) = crate::fsck::links(data.kind, data.data) else {
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

/// The decoded deltas of the received pack, the oldest dropped first when full: gix-pack asks it for
/// each delta of a chain before decoding it, and stores each object it decoded from a delta.
#[derive(Default)]
struct DeltaCache {
    entries: HashMap<(u32, u64), (Kind, usize, Vec<u8>)>,
    order: VecDeque<(u32, u64)>,
    bytes: usize,
}

impl DeltaCache {
    /// The decoded bytes it holds at most.
    const CAPACITY: usize = 64 << 20;
    /// Larger objects are not kept.
    const LARGEST: usize = 4 << 20;
}

impl gix_pack::cache::DecodeEntry for DeltaCache {
    fn put(&mut self, pack_id: u32, offset: u64, data: &[u8], kind: Kind, compressed_size: usize) {
        let key = (pack_id, offset);
        if data.len() > Self::LARGEST || self.entries.contains_key(&key) {
            return;
        }
        while self.bytes + data.len() > Self::CAPACITY {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some((_, _, d)) = self.entries.remove(&old) {
                self.bytes -= d.len();
            }
        }
        self.bytes += data.len();
        self.order.push_back(key);
        self.entries
            .insert(key, (kind, compressed_size, data.to_vec()));
    }

    fn get(&mut self, pack_id: u32, offset: u64, out: &mut Vec<u8>) -> Option<(Kind, usize)> {
        let (kind, compressed_size, data) = self.entries.get(&(pack_id, offset))?;
        out.clear();
        out.extend_from_slice(data);
        Some((*kind, *compressed_size))
    }
}
