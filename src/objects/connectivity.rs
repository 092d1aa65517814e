//! The connectivity check: every object reachable from a new ref value must exist.
//!
//! git runs `rev-list --objects <new tips> --not --all`. berth walks from each new tip through
//! the objects that arrived in this push (those in the received pack's index) and stops at any
//! object the repository already had: objects enter a repository only through a checked push
//! or git itself, so an object that was there before is taken as complete, exactly as git's
//! `fsck` requires of every object in a healthy repository. A checked push may bring objects
//! no new ref reaches that are not complete (git takes them too); those are listed before they
//! move in ([`crate::objects::incomplete`], found by [`Check::incomplete`]) and the walk goes
//! through a listed object instead of stopping at it ([`Check::with_suspects`]). The walk costs what the push brought,
//! not what the repository holds, and a tip that is already the value of a ref costs one lookup.
//!
//! A push's tips are first checked together ([`Check::self_contained`]): when every commit, tree and
//! tag of the received pack links only to objects in the pack or in the repository
//! ([`crate::objects::pack_links`]: the links indexing took as it decoded each object, or else
//! each object decoded once more through gix-pack's delta tree), every tip in the pack is
//! connected, however many there are. Only
//! when that cannot be said (something is missing, the pack was unpacked as loose objects, or
//! shallow commits are involved) are the tips walked one by one, for git's per-ref verdicts;
//! what each walk finds (an object complete, with the shallow roots it needs, or reaching a
//! missing object) is remembered for the following tips, so that over all the tips each object
//! is read at most once, however many refs a hostile push points into one broken history.

use std::collections::VecDeque;

use foldhash::{HashMap, HashSet, HashSetExt};

use gix_hash::ObjectId;
use gix_object::bstr::BString;
use gix_object::{Exists, Find, Kind};
use gix_odb::Header;

use crate::objects::fsck::Unlinkable;
use crate::objects::incomplete;
use crate::objects::lookup::{Budget, Objects};
use crate::objects::pack_links::Outside;

/// The outcome for one tip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Everything reachable exists.
    Connected,
    /// An object is missing.
    Missing(Missing),
}

/// An object the walk cannot pass (missing, or not of the kind its link wants) and how the
/// walk reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The object.
    pub id: ObjectId,
    /// What pointed at it.
    pub role: Role,
    /// What is wrong with it.
    pub defect: Defect,
}

/// How an object was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// It is the new value of a ref.
    Tip,
    /// A tag's object, of the kind the tag says.
    Tagged(Kind),
    /// A commit's tree.
    Tree,
    /// An entry with a tree's mode in this tree.
    Subtree(ObjectId),
    /// An entry with a blob's mode in this tree.
    Blob(ObjectId),
    /// A parent of this commit.
    Parent(ObjectId),
}

/// What is wrong with an object the walk cannot pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Defect {
    /// It is in neither the push nor the repository.
    Missing,
    /// It is of this kind, not the one its link wants, and git's walk meets it first through
    /// that link: it reads the object to parse it (`not a tree`, `not a commit`).
    Kind(Kind),
    /// git's walk met it as this kind before it came to the entry named `name` whose mode
    /// says another (its object table refuses the second meeting).
    MetBefore(Kind, BString),
    /// It is a commit that names this object as its tree and as a parent: git's parsing of
    /// the commit meets the object as both.
    TreeAndParent(ObjectId),
    /// A commit or tag that does not parse (`parse_commit_buffer`, `parse_tag_buffer`).
    Unparsable(crate::objects::fsck::Unparsable),
    /// A tree with an entry git's tree walker refuses: it dies saying why.
    BadTreeEntry(crate::objects::fsck::BadEntry),
}

/// How git's `rev-list` walks: limited (a commit is among the uninteresting tips, and the walk
/// is set up by walking the commits first) or not (no ref, nor a detached `HEAD`, peels to a
/// commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RevWalk {
    /// Some commit is there to walk against.
    #[default]
    Limited,
    /// Nothing the walk excludes is a commit.
    Unlimited,
}

impl Missing {
    /// What git's `rev-list --objects` prints for this object, walking as `walk`.
    pub fn message(&self, walk: RevWalk) -> String {
        let id = self.id;
        match (&self.defect, self.role) {
            (Defect::Missing, Role::Tip | Role::Tagged(_)) => format!("fatal: bad object {id}\n"),
            (Defect::Missing, Role::Tree | Role::Subtree(_)) => {
                format!("fatal: bad tree object {id}\n")
            }
            (Defect::Missing, Role::Blob(_)) => format!("fatal: missing blob object '{id}'\n"),
            (Defect::Missing, Role::Parent(_)) if walk == RevWalk::Limited => {
                format!("error: Could not read {id}\nfatal: revision walk setup failed\n")
            }
            (Defect::Missing, Role::Parent(of)) => format!(
                "error: Could not read {id}\nfatal: Failed to traverse parents of commit {of}\n"
            ),
            (Defect::Kind(found), Role::Tagged(said)) => {
                format!("error: object {id} is a {said}, not a {found}\nfatal: bad object {id}\n")
            }
            (Defect::Kind(_), Role::Tree | Role::Subtree(_)) => {
                format!("error: Object {id} not a tree\nfatal: bad tree object {id}\n")
            }
            (Defect::Kind(_), Role::Parent(_)) => {
                format!("error: Object {id} not a commit\nfatal: revision walk setup failed\n")
            }
            (Defect::MetBefore(met, name), Role::Subtree(tree)) => format!(
                "error: object {id} is a {met}, not a tree\nfatal: entry '{name}' in tree {tree} \
                 has tree mode, but is not a tree\n"
            ),
            (Defect::MetBefore(met, name), Role::Blob(tree)) => format!(
                "error: object {id} is a {met}, not a blob\nfatal: entry '{name}' in tree {tree} \
                 has blob mode, but is not a blob\n"
            ),
            (Defect::BadTreeEntry(bad), _) => format!("fatal: {bad}\n"),
            (Defect::Unparsable(why), role) => {
                let first = why.error_line(&id).map_or(String::new(), |l| format!("{l}\n"));
                let then = match role {
                    Role::Parent(_) => Missing {
                        defect: Defect::Missing,
                        ..self.clone()
                    }
                    .message(walk),
                    _ => format!("fatal: bad object {id}\n"),
                };
                first + &then
            }
            (Defect::TreeAndParent(x), _) => format!(
                "error: object {x} is a tree, not a commit\nerror: bad parent {x} in commit \
                 {id}\nfatal: bad object {id}\n"
            ),
            // A blob or a tip is only looked for; only an entry is met before.
            (Defect::Kind(_) | Defect::MetBefore(..), _) => format!("fatal: bad object {id}\n"),
        }
    }
}

/// Checks tips against a push's objects.
pub struct Check<'a> {
    /// A miss lists the object directories again at most once (see [`crate::objects::lookup`]).
    objects: Objects,
    pack: Option<&'a gix_pack::index::File>,
    /// What the pack links to outside it, when indexing found it.
    links: Option<&'a Outside>,
    /// Objects found complete, with what the walks learned of their kinds.
    known: HashMap<ObjectId, Known>,
    /// The number of the walk under way (one per tip): git checks each refused tip in a
    /// `rev-list` of its own, whose object table holds only what that walk met.
    walk: u32,
    /// The first object two walks met as two kinds: git's combined `rev-list` of all the tips
    /// refuses it, though each tip alone passes.
    crossed: Option<Missing>,
    buf: Vec<u8>,
    /// The repository's shallow commits (`$GIT_DIR/shallow`): their parents are absent.
    shallow: HashSet<ObjectId>,
    /// The client's shallow commits (its `shallow` lines).
    client_shallow: HashSet<ObjectId>,
    /// Client shallow commits the last walk needed as new shallow roots of the repository.
    new_roots: Vec<ObjectId>,
    /// [`Check::self_contained`] said yes: everything in the received pack is connected.
    self_contained: bool,
    /// Objects of the pack found complete that need shallow roots: which ([`Check::root_sets`]).
    /// Those that need none are in `known`.
    rooted: HashMap<ObjectId, u32>,
    /// Each distinct set of shallow roots, once; the first is the empty set.
    root_sets: Vec<Vec<ObjectId>>,
    root_set_ids: HashMap<Vec<ObjectId>, u32>,
    /// Objects found to reach a missing object: which ([`Check::missing`]).
    bad: HashMap<ObjectId, u32>,
    /// How many objects the walks read (decoded), all tips together.
    read: u64,
    /// The missing objects the walks found, as first reached.
    missing: Vec<Missing>,
    /// Objects the repository has that are not known to be complete
    /// ([`crate::objects::incomplete`]): walked through like the push's own.
    suspects: HashSet<ObjectId>,
    /// The pack's links as [`Check::self_contained`] decoded them, without
    /// [`Check::with_pack_links`].
    decoded_links: Option<Outside>,
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
            links: None,
            known: tips.into_iter().map(|t| (t, Known::Unread)).collect(),
            walk: 0,
            crossed: None,
            buf: Vec::new(),
            shallow: HashSet::new(),
            client_shallow: HashSet::new(),
            new_roots: Vec::new(),
            self_contained: false,
            rooted: HashMap::default(),
            root_sets: vec![Vec::new()],
            root_set_ids: HashMap::default(),
            bad: HashMap::default(),
            missing: Vec::new(),
            read: 0,
            suspects: HashSet::new(),
            decoded_links: None,
        }
    }

    /// Take shallow histories into account: the repository's own shallow commits end the walk,
    /// and a client shallow commit the push brought ends it too, recorded in
    /// [`Check::new_roots`] (the ref then needs a new shallow root, as in git, even when the
    /// repository has the commit's parents).
    pub fn with_shallow(
        mut self,
        repository: HashSet<ObjectId>,
        client: HashSet<ObjectId>,
    ) -> Self {
        self.shallow = repository;
        self.client_shallow = client;
        self
    }

    /// What the received pack links to outside it, as its indexing found it
    /// ([`crate::objects::ingest::Received::links`]); without it, [`Check::self_contained`]
    /// decodes the pack's commits, trees and tags to find out.
    pub fn with_pack_links(mut self, links: Option<&'a Outside>) -> Self {
        self.links = links;
        self
    }

    /// Walk through `suspects`, objects the repository has that are not known to be complete
    /// ([`crate::objects::incomplete::read`]), instead of stopping at them.
    pub fn with_suspects(mut self, suspects: HashSet<ObjectId>) -> Self {
        self.suspects = suspects;
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

    /// An object the tips' walks met as two kinds, each walk as one: git's combined
    /// `rev-list` of all the tips refuses it, though each tip alone passes.
    pub fn crossed(&self) -> Option<&Missing> {
        self.crossed.as_ref()
    }

    /// How many objects the walks of [`Check::tip`] read, all tips together: at most each
    /// object of the push once.
    pub fn objects_read(&self) -> u64 {
        self.read
    }

    fn in_pack(&self, id: &ObjectId) -> bool {
        self.pack.is_some_and(|p| p.lookup(id).is_some())
    }

    /// Whether the walk goes through `id` rather than stopping at it: it came with the push,
    /// or the repository has it without knowing it complete.
    fn walked_through(&self, id: &ObjectId) -> bool {
        self.in_pack(id) || (!self.suspects.is_empty() && self.suspects.contains(id))
    }

    /// The objects of the received pack that are not complete, once the tips were checked:
    /// each reaches a missing object ([`incomplete::Found::missing`]), or needs a new shallow root (under
    /// a client's shallow commit: [`incomplete::Found::rooted`], complete once its `roots` are
    /// recorded, which is decided per command later, up to the ref update). None when
    /// [`Check::self_contained`] vouched for the pack; else each object of the pack is checked
    /// as a tip, what the tips' walks found remembered (each object read at most once, all
    /// walks together).
    pub fn incomplete(&mut self) -> incomplete::Found {
        let mut out = incomplete::Found::default();
        let Some(pack) = self.pack else {
            return out;
        };
        if self.self_contained {
            return out;
        }
        for entry in pack.iter() {
            // A blob a walk met through a tree entry is complete (it links to nothing); its
            // header says it is one without inflating it again. Any other object met so is
            // walked: a tree entry with a blob's mode may name a commit.
            if let Some(Known::NamedAsBlob(_)) = self.known.get(&entry.oid)
                && let Ok(Some(header)) = self.objects.try_header(&entry.oid)
                && header.kind() == Kind::Blob
            {
                continue;
            }
            match self.tip(entry.oid) {
                Status::Missing(_) => out.missing.push(entry.oid),
                Status::Connected if self.new_roots.is_empty() => {}
                Status::Connected => {
                    out.rooted.push(entry.oid);
                    for root in &self.new_roots {
                        if !out.roots.contains(root) {
                            out.roots.push(*root);
                        }
                    }
                }
            }
        }
        self.new_roots.clear();
        out
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
        if self.links.is_none() && self.decoded_links.is_none() {
            self.decoded_links = Some(crate::objects::pack_links::external_links(pack, None));
        }
        let (links, found_by) = match (self.links, &self.decoded_links) {
            (Some(links), _) => (links, "indexing"),
            (None, Some(decoded)) => (decoded, "decoding"),
            (None, None) => return false,
        };
        let external = match links {
            Ok(external) => external,
            Err(why) => {
                tracing::debug!(?why, found_by, "the received pack's links: walking each tip");
                return false;
            }
        };
        // A suspect is not taken as complete: the tips are then walked.
        let exists = |id: &ObjectId| {
            self.known.contains_key(id)
                || (!self.suspects.contains(id) && self.objects.exists(id))
        };
        // What git's walk parses must be of the kind wanted; a blob need only exist.
        let complete = |(id, wants): (&ObjectId, &crate::objects::pack_links::Wants)| {
            if !self.suspects.is_empty() && self.suspects.contains(id) {
                return false;
            }
            if !wants.parsed() {
                return exists(id);
            }
            let kind = match self.known.get(id) {
                Some(Known::Is(kind, _)) => Some(*kind),
                _ => self.objects.try_header(id).ok().flatten().map(|h| h.kind()),
            };
            kind.is_some_and(|kind| wants.agree_with(kind))
        };
        if !external.iter().all(complete) || !tips.iter().all(|t| self.in_pack(t) || exists(t))
        {
            return false;
        }
        tracing::debug!(
            found_by,
            outside = external.len(),
            "the received pack's links vouch for its tips"
        );
        self.self_contained = true;
        true
    }

    /// Whether `id`, found on the list of objects not known to be complete looked through again
    /// after the checks, makes their verdicts stale: this check was not given it as a suspect
    /// ([`Check::with_suspects`]) and relied on it ([`Check::relied_on`]). Listed meanwhile by
    /// a concurrent push, before its objects moved in, it makes the verdicts stale.
    pub fn made_stale_by(&self, id: &ObjectId) -> bool {
        !self.suspects.contains(id) && self.relied_on(id)
    }

    /// Whether the checks so far took `id` as complete without walking through it, or might
    /// have: an object the repository has that ended a walk, or a link of the pack that
    /// [`Check::self_contained`] vouched for (objects a walk went through answer `true` too).
    pub fn relied_on(&self, id: &ObjectId) -> bool {
        if self.known.contains_key(id) {
            return true;
        }
        self.self_contained
            && match (self.links, &self.decoded_links) {
                (Some(Ok(links)), _) | (None, Some(Ok(links))) => links.contains_key(id),
                _ => false,
            }
    }

    /// Check one tip. What the walks find is remembered for the following tips: an object
    /// found complete (and which shallow roots it needs), or one that reaches a missing object
    /// (and which), so that over all the tips of a push each object is read at most once. A
    /// walk that forgot its failures cost a hostile push of N refs into one history with one
    /// missing object deep in it N walks of that history (git's per-command `rev-list` after a
    /// failed combined check does the same).
    pub fn tip(&mut self, tip: ObjectId) -> Status {
        self.new_roots.clear();
        self.walk += 1;
        let complete = matches!(self.known.get(&tip), Some(Known::Is(..) | Known::Unread));
        if complete || (self.self_contained && self.in_pack(&tip)) {
            return Status::Connected;
        }
        let mut stack = match self.open(tip, Role::Tip) {
            Opened::Done(found) => return self.status(found),
            Opened::Frame(f) => vec![f],
        };
        while let Some(top) = stack.last_mut() {
            let Some((link, role)) = top.next_link() else {
                let done = stack.pop().expect("a frame");
                let found = self.complete(done);
                match stack.last_mut() {
                    Some(parent) => parent.add(found, &self.root_sets),
                    None => return self.status(found),
                }
                continue;
            };
            match self.open(link, role) {
                Opened::Done(Found::Missing(m)) => {
                    // Every object on the stack reaches it.
                    let i = match m {
                        Bad::Known(i) => i,
                        Bad::Here(m) => {
                            self.missing.push(m);
                            self.missing.len() as u32 - 1
                        }
                    };
                    for f in stack.drain(..) {
                        self.bad.insert(f.id, i);
                    }
                    return Status::Missing(self.missing[i as usize].clone());
                }
                Opened::Done(found) => top.add(found, &self.root_sets),
                Opened::Frame(f) => stack.push(f),
            }
        }
        unreachable!("the walk returns when its first frame completes")
    }

    /// The tip's status from what was found below it.
    fn status(&mut self, found: Found) -> Status {
        match found {
            Found::Complete(0) => Status::Connected,
            Found::Complete(set) => {
                self.new_roots = self.root_sets[set as usize].clone();
                Status::Connected
            }
            Found::Missing(m) => Status::Missing(self.missing_of(m)),
        }
    }

    fn missing_of(&self, m: Bad) -> Missing {
        match m {
            Bad::Here(m) => m,
            Bad::Known(i) => self.missing[i as usize].clone(),
        }
    }

    /// `id`, reached as `role`: what is already known of it, or its frame to walk.
    fn open(&mut self, id: ObjectId, role: Role) -> Opened {
        let done = |f| Opened::Done(f);
        let refuse = |id, role, defect| {
            Opened::Done(Found::Missing(Bad::Here(Missing { id, role, defect })))
        };
        // The kind git's walk meets it as through this link.
        let want = match role {
            Role::Tip => None,
            Role::Tagged(kind) => Some(kind),
            Role::Tree | Role::Subtree(_) => Some(Kind::Tree),
            Role::Parent(_) => Some(Kind::Commit),
            Role::Blob(_) => Some(Kind::Blob),
        };
        // The walk in which an entry with a blob's mode named it, if that is all that is known
        // of it: it exists, but what it links to was not walked.
        let mut named_as_blob = None;
        match self.known.get(&id).copied() {
            Some(Known::NamedAsBlob(walk)) if want != Some(Kind::Blob) => named_as_blob = Some(walk),
            Some(known) => {
                return match self.meet_again(id, role, want, known) {
                    Ok(()) => done(Found::Complete(0)),
                    Err(defect) => refuse(id, role, defect),
                };
            }
            None => {}
        }
        // Once what it is is read: named by an entry with a blob's mode and not a blob, it was
        // met as two kinds.
        let named_otherwise = |check: &mut Self, kind: Kind| -> Option<Defect> {
            let walk = named_as_blob.filter(|_| kind != Kind::Blob)?;
            check.met_twice(id, role, Kind::Blob, walk)
        };
        if !self.rooted.is_empty()
            && let Some(&set) = self.rooted.get(&id)
        {
            return done(Found::Complete(set));
        }
        if !self.bad.is_empty()
            && let Some(&i) = self.bad.get(&id)
        {
            return done(Found::Missing(Bad::Known(i)));
        }
        let missing = |id, role| refuse(id, role, Defect::Missing);
        if !self.walked_through(&id) {
            // What the repository had: git's walk parses a tree, a commit or a tag's object;
            // an entry with a blob's mode need only name one that exists.
            let found = match (want, named_as_blob) {
                (None | Some(Kind::Blob), None) => self.objects.exists(&id).then_some(None),
                _ => match self.objects.try_header(&id) {
                    Ok(Some(header)) => Some(Some(header.kind())),
                    _ => None,
                },
            };
            if let Some(Some(kind)) = found
                && let Some(defect) = named_otherwise(self, kind)
            {
                return refuse(id, role, defect);
            }
            match found {
                None => return missing(id, role),
                Some(Some(kind)) if want.is_some_and(|want| want != kind) => {
                    return refuse(id, role, self.wrong_kind(id, role, kind));
                }
                Some(kind) => {
                    let known = match (role, kind) {
                        (Role::Blob(_), _) => Known::NamedAsBlob(self.walk),
                        (_, Some(kind)) => Known::Is(kind, self.walk),
                        (_, None) => Known::Unread,
                    };
                    self.known.insert(id, known);
                }
            }
            return done(Found::Complete(0));
        }
        if let Role::Blob(_) = role {
            // In the pack, it was resolved and hashed when the pack was indexed; it links to
            // nothing. A listed one may be gone (a push killed as it moved it in listed it
            // for good).
            if !self.in_pack(&id) && !self.objects.exists(&id) {
                return missing(id, role);
            }
            self.known.insert(id, Known::NamedAsBlob(self.walk));
            return done(Found::Complete(0));
        }
        self.read += 1;
        let data = match self.objects.try_find(&id, &mut self.buf) {
            Ok(Some(data)) => data,
            _ => return missing(id, role),
        };
        // git's own lenient reading of raw objects (bad modes, broken idents and the
        // like are fsck's business, not the walk's).
        let obj_kind = data.kind;
        if want.is_some_and(|want| want != obj_kind) {
            return refuse(id, role, self.wrong_kind(id, role, obj_kind));
        }
        let links = match crate::objects::fsck::links(data.kind, data.data, id.kind()) {
            Ok(links) => links,
            Err(Unlinkable::Unparsable(why)) => return refuse(id, role, Defect::Unparsable(why)),
            Err(Unlinkable::BadEntry(bad)) => return refuse(id, role, Defect::BadTreeEntry(bad)),
        };
        if let Some(defect) = named_otherwise(self, obj_kind) {
            return refuse(id, role, defect);
        }
        let is_commit = obj_kind == Kind::Commit;
        if is_commit
            && let Some(&(tree, _)) = links.first()
            && links[1..].iter().any(|(parent, _)| *parent == tree)
        {
            return refuse(id, role, Defect::TreeAndParent(tree));
        }
        // A client shallow commit the push brought (git's "theirs": `assign_shallow_commits_to_refs`
        // marks every ref that reaches one, whether or not the repository has its parents).
        let root = is_commit && !self.shallow.contains(&id) && self.client_shallow.contains(&id);
        Opened::Frame(Frame {
            id,
            kind: obj_kind,
            // a shallow commit's parents are not there, on purpose
            cut: is_commit && (self.shallow.contains(&id) || root),
            links,
            roots: if root { vec![id] } else { Vec::new() },
        })
    }

    /// `id`, found complete before (`known`), met again as `role`, which wants `want`: what
    /// a parsing link wants it must be; an entry with a blob's mode asks only that it exists,
    /// unless a walk met it as what it is. (Named by such an entry and met as another kind, it
    /// is opened and walked: see `open`.)
    fn meet_again(
        &mut self,
        id: ObjectId,
        role: Role,
        want: Option<Kind>,
        known: Known,
    ) -> Result<(), Defect> {
        let Some(want) = want else {
            return Ok(());
        };
        if want == Kind::Blob {
            return match known {
                Known::Is(kind, walk) if kind != Kind::Blob => {
                    self.met_twice(id, role, kind, walk).map_or(Ok(()), Err)
                }
                _ => Ok(()),
            };
        }
        let is = match known {
            Known::Is(kind, _) => kind,
            Known::NamedAsBlob(_) | Known::Unread => {
                match self.objects.try_header(&id).ok().flatten() {
                    Some(header) => header.kind(),
                    None => return Err(Defect::Missing),
                }
            }
        };
        if is != want {
            return Err(self.wrong_kind(id, role, is));
        }
        self.known.insert(id, Known::Is(is, self.walk));
        Ok(())
    }

    /// `id`, met as `met` in walk number `walk`, met again as `role`, which wants another
    /// kind: git's table refuses it within one walk; across walks each tip alone passes, and
    /// it is what the combined run of all the tips refuses ([`Check::crossed`]).
    fn met_twice(&mut self, id: ObjectId, role: Role, met: Kind, walk: u32) -> Option<Defect> {
        let defect = self.met_before(id, role, met);
        if walk == self.walk {
            return Some(defect);
        }
        self.crossed.get_or_insert(Missing { id, role, defect });
        None
    }

    /// What is wrong with `id`, of `kind`, reached as `role`: for an entry with a tree's mode,
    /// whether git's walk met it before as what it is (commits are all walked before any
    /// tree; an object the repository had, through the trees of the commits the push builds
    /// on; a received blob, through an entry before this one in the same tree), and the
    /// entry's name.
    fn wrong_kind(&mut self, id: ObjectId, role: Role, kind: Kind) -> Defect {
        if !matches!(role, Role::Subtree(_)) {
            return Defect::Kind(kind);
        }
        let met = kind == Kind::Commit || !self.in_pack(&id);
        match self.entry_naming(id, role) {
            Some((name, named_as_blob)) if met || named_as_blob => Defect::MetBefore(kind, name),
            _ => Defect::Kind(kind),
        }
    }

    /// `id`, met before as `met`, reached again as `role`, which wants another kind: git's
    /// table refuses it.
    fn met_before(&mut self, id: ObjectId, role: Role, met: Kind) -> Defect {
        match self.entry_naming(id, role) {
            Some((name, _)) => Defect::MetBefore(met, name),
            None => Defect::Kind(met),
        }
    }

    /// For an entry `role`, the name of the entry of its tree that names `id` with the role's
    /// mode, and whether an entry before it names `id` with a blob's mode.
    fn entry_naming(&mut self, id: ObjectId, role: Role) -> Option<(BString, bool)> {
        let (tree, mode) = match role {
            Role::Subtree(tree) => (tree, 0o040000),
            Role::Blob(tree) => (tree, 0o100000),
            _ => return None,
        };
        let data = self.objects.try_find(&tree, &mut self.buf).ok().flatten()?;
        let mut rest = data.data;
        let mut named_as_blob = false;
        while let Ok(entry) = crate::objects::fsck::tree_entry(rest, id.kind()) {
            rest = &rest[entry.len..];
            if entry.id != id.as_slice() {
                continue;
            }
            let entry_mode = match entry.mode & 0o170000 {
                0o120000 => 0o100000,
                m => m,
            };
            if entry_mode == mode {
                return Some((entry.name.into(), named_as_blob));
            }
            named_as_blob |= entry_mode == 0o100000;
        }
        None
    }

    /// A frame whose links are all complete: it is, with the shallow roots they need.
    fn complete(&mut self, mut f: Frame) -> Found {
        if f.roots.is_empty() {
            self.known.insert(f.id, Known::Is(f.kind, self.walk));
            return Found::Complete(0);
        }
        f.roots.sort_unstable();
        f.roots.dedup();
        let set = match self.root_set_ids.get(&f.roots) {
            Some(&set) => set,
            None => {
                let set = self.root_sets.len() as u32;
                self.root_sets.push(f.roots.clone());
                self.root_set_ids.insert(f.roots, set);
                set
            }
        };
        self.rooted.insert(f.id, set);
        Found::Complete(set)
    }
}

/// What the walk found of an object.
/// What the walks learned of an object found complete.
#[derive(Debug, Clone, Copy)]
enum Known {
    /// Its kind was not read (a tip the repository had).
    Unread,
    /// It is of this kind, met last in this walk.
    Is(Kind, u32),
    /// An entry with a blob's mode named it in this walk (it exists; what it is was not read).
    NamedAsBlob(u32),
}

#[derive(Debug)]
enum Found {
    /// It and everything it reaches exist; the shallow roots they need ([`Check::root_sets`],
    /// 0: none).
    Complete(u32),
    /// It reaches a missing object.
    Missing(Bad),
}

/// The missing object an object reaches.
#[derive(Debug)]
enum Bad {
    /// Found now, reached as its role says.
    Here(Missing),
    /// Found by an earlier walk ([`Check::missing`]).
    Known(u32),
}

/// [`Check::open`]'s answer.
enum Opened {
    /// Known, absent, or linking to nothing.
    Done(Found),
    /// To walk: its links.
    Frame(Frame),
}

/// An object being walked: its kind, whether its parents are cut off (a shallow commit), the
/// links still to walk (the last first), and the shallow roots the walked ones need.
struct Frame {
    id: ObjectId,
    kind: Kind,
    cut: bool,
    links: Vec<(ObjectId, Kind)>,
    roots: Vec<ObjectId>,
}

impl Frame {
    /// The next link to walk and how it is reached, in reverse: the order of the stack walk
    /// this replaced, whose first missing object git's differential tests pin.
    fn next_link(&mut self) -> Option<(ObjectId, Role)> {
        loop {
            let (link, kind) = self.links.pop()?;
            let role = match (self.kind, kind) {
                (Kind::Commit, Kind::Commit) if self.cut => continue,
                (Kind::Commit, Kind::Commit) => Role::Parent(self.id),
                (Kind::Tag, said) => Role::Tagged(said),
                (Kind::Commit, Kind::Tree) => Role::Tree,
                (_, Kind::Tree) => Role::Subtree(self.id),
                _ => Role::Blob(self.id),
            };
            return Some((link, role));
        }
    }

    /// A link found complete, needing the shallow roots of `found`.
    fn add(&mut self, found: Found, sets: &[Vec<ObjectId>]) {
        if let Found::Complete(set) = found
            && set != 0
        {
            self.roots.extend_from_slice(&sets[set as usize]);
        }
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

#[cfg(test)]
mod tests {
    //! Walks of many tips into one history, against objects git made: each object is read at
    //! most once over all the tips, whether the history is complete, misses an object at its
    //! root, or ends at a client's shallow commit.

    use std::path::Path;

    use super::*;
    use crate::test_git::{git, git_with_input};

    fn id(hex: &str) -> ObjectId {
        ObjectId::from_hex(hex.as_bytes()).unwrap()
    }

    /// A chain of `n` commits of the empty tree on top of `root` (a commit id); the commits,
    /// oldest first.
    fn chain(repo: &Path, root: &str, n: usize) -> Vec<String> {
        let empty = git(repo, &["hash-object", "-t", "tree", "-w", "/dev/null"]);
        let mut commits = vec![root.to_owned()];
        for i in 0..n {
            let parent = commits.last().unwrap().clone();
            let c = git(
                repo,
                &["commit-tree", "-p", &parent, "-m", &format!("c{i}"), &empty],
            );
            commits.push(c);
        }
        commits
    }

    /// A repository `r` in a new directory with the empty tree and a commit of it, `base`.
    fn with_base() -> (tempfile::TempDir, std::path::PathBuf, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r");
        git(dir.path(), &["init", "-q", "r"]);
        let empty = git(&repo, &["hash-object", "-t", "tree", "-w", "/dev/null"]);
        let base = git(&repo, &["commit-tree", "-m", "base", &empty]);
        (dir, repo, empty, base)
    }

    /// A commit of `tree` whose parent nobody has (`cdcd…`), as a client's shallow commit.
    fn shallow_commit(repo: &Path, tree: &str) -> String {
        let lost = "cd".repeat(20);
        git_with_input(
            repo,
            &["hash-object", "-t", "commit", "-w", "--stdin", "--literally"],
            &format!(
                "tree {tree}\nparent {lost}\nauthor A <a@x> 0 +0000\ncommitter C <c@x> 0 +0000\n\nshallow\n"
            ),
        )
    }

    /// `git pack-objects` of `ids` into `dir`; its index.
    fn pack(repo: &Path, dir: &Path, ids: &[String]) -> gix_pack::index::File {
        std::fs::create_dir_all(dir).unwrap();
        let base = dir.join("pack");
        let name = git_with_input(
            repo,
            &["pack-objects", "-q", base.to_str().unwrap()],
            &(ids.join("\n") + "\n"),
        );
        gix_pack::index::File::at(dir.join(format!("pack-{name}.idx")), gix_hash::Kind::Sha1)
            .unwrap()
    }

    #[test]
    fn many_tips_over_a_history_missing_its_root_blob_read_each_object_once() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r");
        git(dir.path(), &["init", "-q", "r"]);
        let gone = "ab".repeat(20);
        let broken = git_with_input(
            &repo,
            &["mktree", "--missing"],
            &format!("100644 blob {gone}\tgone\n"),
        );
        let root = git(&repo, &["commit-tree", "-m", "root", &broken]);
        let commits = chain(&repo, &root, 200);
        let empty = git(&repo, &["hash-object", "-t", "tree", "/dev/null"]);
        let mut ids = commits.clone();
        ids.extend([broken.clone(), empty]);
        let index = pack(&repo, &dir.path().join("p"), &ids);
        let odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
        let mut check = Check::new(&odb, Some(&index), std::iter::empty());
        assert!(!check.self_contained(&commits.iter().map(|c| id(c)).collect::<Vec<_>>()));
        // The newest first, as a push lists them, then the oldest first: every tip misses the
        // blob, named as git names it.
        let want = Status::Missing(Missing {
            id: id(&gone),
            role: Role::Blob(id(&broken)),
            defect: Defect::Missing,
        });
        for c in commits.iter().rev().chain(commits.iter()) {
            assert_eq!(check.tip(id(c)), want, "{c}");
        }
        // The 201 commits and the broken tree, each read once (a commit's parent is walked
        // before its tree, and every tip's parent is known to miss the blob before the empty
        // tree is needed); the walk that forgot its failures read the history again for every
        // tip (over 20,000 reads).
        assert_eq!(check.objects_read(), commits.len() as u64 + 1);
    }

    #[test]
    fn many_tips_over_a_complete_or_shallow_history_read_each_object_once() {
        let (dir, repo, empty, base) = with_base();
        // The client's shallow commit: its parent is not sent, nor in the repository.
        let shallow = shallow_commit(&repo, &empty);
        let on_base = chain(&repo, &base, 50);
        let on_shallow = chain(&repo, &shallow, 50);
        let mut ids: Vec<String> = on_base.iter().chain(&on_shallow).cloned().collect();
        ids.push(empty.clone());
        let index = pack(&repo, &dir.path().join("p"), &ids);
        let odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
        let mut check = Check::new(&odb, Some(&index), std::iter::empty())
            .with_shallow(HashSet::new(), [id(&shallow)].into_iter().collect());
        for c in on_base.iter().rev() {
            assert_eq!(check.tip(id(c)), Status::Connected);
            assert!(check.new_roots().is_empty());
        }
        for c in on_shallow.iter().rev().chain(&on_shallow) {
            assert_eq!(check.tip(id(c)), Status::Connected);
            assert_eq!(check.new_roots(), [id(&shallow)], "{c}");
        }
        assert_eq!(check.objects_read(), ids.len() as u64);
    }

    /// git's "theirs": a client shallow commit the push brings is a new shallow root of every
    /// tip that reaches it, though the repository has its parent.
    #[test]
    fn a_client_shallow_commit_in_the_push_is_a_root_though_its_parent_is_there() {
        let (dir, repo, empty, base) = with_base();
        let shallow = git(&repo, &["commit-tree", "-m", "shallow", "-p", &base, &empty]);
        let tip = git(&repo, &["commit-tree", "-m", "tip", "-p", &shallow, &empty]);
        let index = pack(&repo, &dir.path().join("p"), &[tip.clone(), shallow.clone()]);
        let odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
        let mut check = Check::new(&odb, Some(&index), std::iter::empty())
            .with_shallow(HashSet::new(), [id(&shallow)].into_iter().collect());
        assert_eq!(check.tip(id(&tip)), Status::Connected);
        assert_eq!(check.new_roots(), [id(&shallow)]);
        // The repository's own shallow commit is not a new root.
        let mut check = Check::new(&odb, Some(&index), std::iter::empty()).with_shallow(
            [id(&shallow)].into_iter().collect(),
            [id(&shallow)].into_iter().collect(),
        );
        assert_eq!(check.tip(id(&tip)), Status::Connected);
        assert!(check.new_roots().is_empty());
    }

    /// What is not complete is found so when it reaches a missing object or needs a new
    /// shallow root; an object the repository lists as not known to
    /// be complete is walked through rather than taken as complete, and a pack linking to one
    /// is not vouched for by its links.
    #[test]
    fn objects_no_tip_reaches_are_found_incomplete_and_suspects_are_walked_through() {
        let (dir, repo, empty, base) = with_base();
        let good = chain(&repo, &base, 1).pop().unwrap();
        let gone = "ab".repeat(20);
        let broken = git_with_input(
            &repo,
            &["mktree", "--missing"],
            &format!("100644 blob {gone}\tgone\n"),
        );
        let bad = git(&repo, &["commit-tree", "-p", &base, "-m", "bad", &broken]);
        let shallow = shallow_commit(&repo, &empty);
        let on_shallow = chain(&repo, &shallow, 1).pop().unwrap();
        let ids = [&good, &bad, &broken, &shallow, &on_shallow].map(|s| s.to_string());
        let index = pack(&repo, &dir.path().join("p"), &ids);
        let odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
        let check = || {
            Check::new(&odb, Some(&index), std::iter::empty())
                .with_shallow(HashSet::new(), [id(&shallow)].into_iter().collect())
        };
        let sorted = |mut v: Vec<ObjectId>| {
            v.sort();
            v
        };
        // Whether a tip needed the shallow root or not, the commits under it are found
        // complete only once that root is recorded; what reaches a missing object, never.
        for tip in [&good, &on_shallow] {
            let mut c = check();
            assert!(!c.self_contained(&[id(tip)]));
            assert_eq!(c.tip(id(tip)), Status::Connected);
            let found = c.incomplete();
            assert_eq!(sorted(found.missing), sorted(vec![id(&bad), id(&broken)]));
            assert_eq!(
                sorted(found.rooted),
                sorted(vec![id(&shallow), id(&on_shallow)])
            );
            assert_eq!(found.roots, vec![id(&shallow)]);
        }

        // Later, with those objects in the repository: the broken commit as a tip with no
        // pack is complete to a walk that stops at what the repository has, not to one that
        // walks through what is listed.
        let listed: HashSet<ObjectId> = [id(&bad), id(&broken)].into_iter().collect();
        let mut trusting = Check::new(&odb, None, std::iter::empty());
        assert_eq!(trusting.tip(id(&bad)), Status::Connected);
        // It relied on that object (listed by a concurrent push since, the verdict is stale).
        assert!(trusting.relied_on(&id(&bad)));
        assert!(!trusting.relied_on(&id(&good)));
        assert!(listed.iter().any(|id| trusting.made_stale_by(id)));
        let mut c = Check::new(&odb, None, std::iter::empty()).with_suspects(listed.clone());
        assert!(matches!(c.tip(id(&bad)), Status::Missing(Missing { id, .. }) if id == self::id(&gone)));
        // Given the list, the same list read again is nothing new.
        assert!(!listed.iter().any(|id| c.made_stale_by(id)));
        assert_eq!(c.tip(id(&base)), Status::Connected);
        // A listed blob is walked through like the rest, and one that is gone is missing.
        let with_blob: HashSet<ObjectId> = listed.iter().copied().chain([id(&gone)]).collect();
        let mut c = Check::new(&odb, None, std::iter::empty()).with_suspects(with_blob);
        assert!(matches!(c.tip(id(&bad)), Status::Missing(Missing { id, .. }) if id == self::id(&gone)));

        // A pack of one commit on the listed one: its links do not vouch for it.
        let on_bad = chain(&repo, &bad, 1).pop().unwrap();
        let index = pack(&repo, &dir.path().join("q"), std::slice::from_ref(&on_bad));
        let mut c = Check::new(&odb, Some(&index), std::iter::empty()).with_suspects(listed);
        assert!(!c.self_contained(&[id(&on_bad)]));
        assert!(matches!(c.tip(id(&on_bad)), Status::Missing(_)));
        let mut c = Check::new(&odb, Some(&index), std::iter::empty());
        assert!(!c.relied_on(&id(&bad)));
        assert!(c.self_contained(&[id(&on_bad)]));
        // The links it vouched for were relied on; nothing else.
        assert!(c.relied_on(&id(&bad)));
        assert!(!c.relied_on(&id(&good)));
    }

    /// The pass for incomplete objects (a push into a shallow repository: the pack's links
    /// do not vouch for it) does not inflate a blob a tip's walk met again: each object is
    /// still read at most once.
    #[test]
    fn the_incomplete_pass_does_not_read_a_pushed_blob_again() {
        let (dir, repo, _, base) = with_base();
        let blob = git_with_input(&repo, &["hash-object", "-w", "--stdin"], "content\n");
        let tree = git_with_input(&repo, &["mktree"], &format!("100644 blob {blob}\tf\n"));
        let commit = git(&repo, &["commit-tree", "-p", &base, "-m", "c", &tree]);
        let index = pack(&repo, &dir.path().join("p"), &[commit.clone(), tree, blob]);
        let odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
        let mut c = Check::new(&odb, Some(&index), std::iter::empty())
            .with_shallow([id(&base)].into_iter().collect(), HashSet::new());
        assert!(!c.self_contained(&[id(&commit)]));
        assert_eq!(c.tip(id(&commit)), Status::Connected);
        assert_eq!(c.objects_read(), 2, "the commit and its tree");
        assert_eq!(c.incomplete(), incomplete::Found::default());
        assert_eq!(c.objects_read(), 2, "nothing read again");
    }
}
