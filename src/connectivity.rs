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
    /// This object is missing.
    Missing(ObjectId),
}

/// Checks tips against a push's objects.
pub struct Check<'a> {
    objects: &'a gix_odb::Handle,
    pack: Option<&'a gix_pack::index::File>,
    known: HashSet<ObjectId>,
    buf: Vec<u8>,
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
        }
    }

    fn in_pack(&self, id: &ObjectId) -> bool {
        self.pack.is_some_and(|p| p.lookup(id).is_some())
    }

    /// Check one tip. Objects found complete are remembered for the following tips.
    pub fn tip(&mut self, tip: ObjectId) -> Status {
        if self.known.contains(&tip) {
            return Status::Connected;
        }
        let mut seen: HashSet<ObjectId> = HashSet::new();
        let mut stack = vec![tip];
        while let Some(id) = stack.pop() {
            if self.known.contains(&id) || !seen.insert(id) {
                continue;
            }
            if !self.in_pack(&id) {
                if !self.objects.exists(&id) {
                    return Status::Missing(id);
                }
                continue;
            }
            let data = match self.objects.try_find(&id, &mut self.buf) {
                Ok(Some(data)) => data,
                _ => return Status::Missing(id),
            };
            match data.kind {
                Kind::Blob => {}
                Kind::Commit => {
                    let commit = gix_object::CommitRefIter::from_bytes(data.data, gix_hash::Kind::Sha1);
                    for token in commit {
                        match token {
                            Ok(gix_object::commit::ref_iter::Token::Tree { id }) => stack.push(id),
                            Ok(gix_object::commit::ref_iter::Token::Parent { id }) => stack.push(id),
                            Ok(_) => break,
                            Err(_) => return Status::Missing(id),
                        }
                    }
                }
                Kind::Tree => {
                    for entry in gix_object::TreeRefIter::from_bytes(data.data, gix_hash::Kind::Sha1) {
                        match entry {
                            Ok(e) if e.mode.is_commit() => {} // a submodule's commit lives elsewhere
                            Ok(e) => stack.push(e.oid.to_owned()),
                            Err(_) => return Status::Missing(id),
                        }
                    }
                }
                Kind::Tag => match gix_object::TagRefIter::from_bytes(data.data, gix_hash::Kind::Sha1).target_id() {
                    Ok(target) => stack.push(target),
                    Err(_) => return Status::Missing(id),
                },
            }
        }
        self.known.extend(seen);
        Status::Connected
    }
}
