//! The connectivity check: every object reachable from a new ref value must exist.
//!
//! git runs `rev-list --objects <new tips> --not --all`. berth walks from each new tip through
//! the objects that arrived in this push (those in the received pack's index) and stops at any
//! object the repository already had: objects enter a repository only through a checked push
//! or git itself, so an object that was there before is taken as complete, exactly as git's
//! `fsck` requires of every object in a healthy repository. The walk costs what the push brought,
//! not what the repository holds, and a tip that is already the value of a ref costs one lookup.

use std::collections::HashSet;

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
    objects: &'a gix_odb::Handle,
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
