//! fsck on receive: git's `--strict` over a received pack that has been indexed.
//!
//! Every received object is checked (`fsck_object`), every object they link to must have been
//! received or be in the repository with the kind the link wants, and then the `.gitmodules`
//! and `.gitattributes` blobs the trees named are checked (`fsck_finish`). The findings, and
//! the first error that refuses the push, are those git's `index-pack --strict` (or
//! `unpack-objects --strict`, for a pack under `receive.unpackLimit`) reports, checking the
//! objects in its order ([`Place`]).
//!
//! git gives each id the kind it first meets it as (the object itself, or a link to it) and
//! refuses any later meeting as another kind (`object_as_type`): a tree naming one object as a
//! blob and as a tree, a commit whose tree is a received blob. [`Strict::one_at_a_time`] is that
//! model, one object after the other through the object database, git's messages and all, in
//! the order of the program git runs: `index-pack` checks each object in turn,
//! `unpack-objects` parses them all as it unpacks them and then walks from each commit, tree
//! and tag depth first. A pack under `receive.unpackLimit` is checked that way only.
//!
//! [`Strict::over_the_delta_tree`] is what runs first: the pack's commits, trees and tags are
//! decoded once more through its delta tree, on several threads
//! ([`crate::objects::pack_links::LinkingObjects`]), and each link is checked as it is met
//! against the kind the pack's headers gave its object ([`Received`]); only the links to
//! objects outside the pack are kept, each with its first place. When no link disagrees with a
//! kind, git's model never refuses a meeting, and what the threads found, put back in order, is
//! what it reports. When one does, the push is refused, and the check runs again one object at
//! a time to say what git says first.

use std::collections::hash_map::Entry as Slot;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use gix_hash::ObjectId;
use gix_object::Kind;

use crate::objects::fsck::{self, Checker, Finding};
use crate::objects::pack_links::{CannotSay, Entry, LinkingObjects, cache_slots, slot_of};

/// An object's place in the order git checks the received objects. `index-pack`: whole objects
/// in pack order as they stream in, then the deltas once resolved (`delta` first); for
/// `unpack-objects`, pack order (`delta` is `false` throughout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    delta: bool,
    offset: u64,
}

/// The program git runs on the received pack, whose order and words the check follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Program {
    /// `index-pack`: the pack is kept.
    IndexPack,
    /// `unpack-objects`: a pack under `receive.unpackLimit`, turned into loose objects.
    UnpackObjects,
}

/// git's `--strict` over the received pack the index in [`Strict::check`] describes. `Ok`
/// holds warnings; `Err` the lines to print and the `fatal:` detail.
pub(super) struct Strict<'a> {
    /// The quarantine's object directory (the received objects and, through its alternates,
    /// the repository's).
    pub(super) objects: &'a Path,
    pub(super) options: fsck::Options,
    pub(super) alloc_limit: usize,
    /// Whose order and words.
    pub(super) program: Program,
    /// The shallow commits: their parents are not links.
    pub(super) shallow: &'a std::collections::HashSet<ObjectId>,
    pub(super) hash: gix_hash::Kind,
}

/// What [`Strict`] returns: its warnings, or why it refused the pack.
type Checked = Result<Vec<String>, Refused>;

/// Why [`Strict`] refused the pack, in git's words: the lines it prints first (fsck's
/// findings, the object table's complaint), then the `fatal:` detail.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", fatal.as_deref().unwrap_or("(died without a word)"))]
pub(super) struct Refused {
    pub(super) lines: Vec<String>,
    /// `None`: git's child died without a `fatal:` line.
    pub(super) fatal: Option<String>,
}

impl Refused {
    fn new(lines: Vec<String>, fatal: impl Into<String>) -> Self {
        Self {
            lines,
            fatal: Some(fatal.into()),
        }
    }

    fn silent(lines: Vec<String>) -> Self {
        Self { lines, fatal: None }
    }

    /// This refusal with `before` (the findings so far) printed ahead of its own lines.
    fn after(mut self, mut before: Vec<String>) -> Self {
        before.append(&mut self.lines);
        self.lines = before;
        self
    }
}

/// Each id outside the pack once, with the kind its first link wants and where that link is:
/// the place of the linking object, and the link's place in it.
type FirstLinks = foldhash::HashMap<ObjectId, (Place, u32, Kind)>;

/// Why the pass over the delta tree handed over to [`Strict::one_at_a_time`].
#[derive(Debug, thiserror::Error)]
enum HandOver {
    /// The pass could not run on this pack.
    #[error("the pass over the delta tree cannot run: {0:?}")]
    Cannot(CannotSay),
    /// Some index entry is not among the pack's entries.
    #[error("an object of the index is not among the pack's entries")]
    Unlisted,
    /// A link wants another kind than its object has, or than another link to it wants:
    /// git refuses the push, and what it says depends on which it met first.
    #[error("a link disagrees with the kind of its object")]
    Disagreement,
}

/// How checking one object ended, when it had something to say.
enum Verdict {
    /// Its findings are warnings: the check goes on.
    Warnings,
    /// A finding is an error: `fsck error in packed object`.
    Error,
    /// The commit or tag `ObjectId` does not parse: git's line about it, if any, then
    /// `invalid <kind>`.
    Unparsable(fsck::Unparsable, ObjectId, Kind),
}

/// One object's outcome, kept when it has something to say.
struct Outcome {
    place: Place,
    findings: Vec<Finding>,
    verdict: Verdict,
}

/// The received objects' kinds, as the pack's entry headers gave them.
struct Received<'a> {
    index: &'a gix_pack::index::File,
    /// Every entry, in pack order.
    entries: Vec<Entry>,
    /// The index position of each entry of `entries`.
    positions: Vec<u32>,
    /// The kind of the object at each index position.
    kinds: Vec<Kind>,
}

impl<'a> Received<'a> {
    fn new(index: &'a gix_pack::index::File, entries: Vec<Entry>) -> Option<Self> {
        let count = entries.len();
        if index.num_objects() as usize != count {
            return None;
        }
        let mut positions = vec![u32::MAX; count];
        let mut kinds = vec![Kind::Blob; count];
        for position in 0..index.num_objects() {
            let offset = index.pack_offset_at_index(position);
            let at = entries.binary_search_by_key(&offset, |e| e.offset).ok()?;
            positions[at] = position;
            kinds[position as usize] = entries[at].kind;
        }
        Some(Received {
            index,
            entries,
            positions,
            kinds,
        })
    }

    /// The kind of `id`, if the pack holds it.
    fn kind_of(&self, id: &ObjectId) -> Option<Kind> {
        Some(self.kinds[self.index.lookup(id)? as usize])
    }

    /// The id and place of the object at `offset`.
    fn at(&self, offset: u64) -> Option<(ObjectId, Place)> {
        let at = self.entries.binary_search_by_key(&offset, |e| e.offset).ok()?;
        let place = Place {
            delta: self.entries[at].delta,
            offset,
        };
        Some((self.index.oid_at_index(self.positions[at]).to_owned(), place))
    }
}

/// What the threads hand back.
#[derive(Default)]
struct Merged {
    outcomes: Vec<Outcome>,
    outside: FirstLinks,
    /// Each thread's checker, for the blobs its trees named.
    checkers: Vec<Checker>,
}

/// One thread's share of the pass over the delta tree, handed back when dropped.
struct Share<'a> {
    merged: &'a Mutex<Merged>,
    received: &'a Received<'a>,
    shallow: &'a std::collections::HashSet<ObjectId>,
    hash: gix_hash::Kind,
    /// Raised by any thread that meets a [`HandOver::Disagreement`]: the others stop checking.
    disagreement: &'a AtomicBool,
    checker: Checker,
    outcomes: Vec<Outcome>,
    outside: FirstLinks,
    /// Ids lately found in the pack with the kind their link wanted, each in the slot its
    /// first bytes choose (a cache sized to the pack: the trees of a history name the same
    /// objects version after version).
    agreed: Box<[Option<(ObjectId, Kind)>]>,
    links: Vec<(ObjectId, Kind)>,
}

impl Clone for Share<'_> {
    fn clone(&self) -> Self {
        Share {
            checker: self.checker.clone(),
            outcomes: Vec::new(),
            outside: FirstLinks::default(),
            agreed: vec![None; self.agreed.len()].into_boxed_slice(),
            links: Vec::new(),
            ..*self
        }
    }
}

impl Share<'_> {
    /// Check the object at pack `offset`.
    fn object(&mut self, offset: u64, kind: Kind, data: &[u8]) {
        if self.disagreement.load(Ordering::Relaxed) {
            return;
        }
        let Some((oid, place)) = self.received.at(offset) else {
            self.disagreement.store(true, Ordering::Relaxed);
            return;
        };
        if let Err(why) = fsck::parse(kind, data, oid.kind()) {
            self.outcomes.push(Outcome {
                place,
                findings: Vec::new(),
                verdict: Verdict::Unparsable(why, oid, kind),
            });
            return;
        }
        let error = self.checker.check(&oid, kind, data);
        let findings = self.checker.take_findings();
        if error || !findings.is_empty() {
            let verdict = if error { Verdict::Error } else { Verdict::Warnings };
            self.outcomes.push(Outcome {
                place,
                findings,
                verdict,
            });
        }
        let skip_parents = kind == Kind::Commit && self.shallow.contains(&oid);
        self.links.clear();
        let links = &mut self.links;
        // An object that does not parse as far as its links links to nothing here.
        if fsck::for_each_link(kind, data, self.hash, |id, want| links.push((id, want))).is_err() {
            return;
        }
        let links = std::mem::take(&mut self.links);
        for (n, &(id, want)) in (0u32..).zip(&links) {
            if skip_parents && want == Kind::Commit {
                continue;
            }
            if !self.link(id, want, (place, n)) {
                self.disagreement.store(true, Ordering::Relaxed);
                return;
            }
        }
        self.links = links;
    }

    /// Meet the link to `id` wanting `want` at `at`; whether it agrees with what the pack and
    /// the links before it say.
    fn link(&mut self, id: ObjectId, want: Kind, at: (Place, u32)) -> bool {
        let slot = &mut self.agreed[slot_of(&id, self.agreed.len())];
        if let Some((seen, kind)) = slot
            && *seen == id
        {
            return *kind == want;
        }
        match self.received.kind_of(&id) {
            Some(kind) => {
                *slot = Some((id, kind));
                kind == want
            }
            None => keep_first(&mut self.outside, id, (at.0, at.1, want)),
        }
    }
}

/// Record `link` of `id` in `links` unless an earlier one (by place) is there; whether it
/// wants the kind the others want.
fn keep_first(links: &mut FirstLinks, id: ObjectId, link: (Place, u32, Kind)) -> bool {
    match links.entry(id) {
        Slot::Vacant(v) => {
            v.insert(link);
            true
        }
        Slot::Occupied(mut o) => {
            let first = o.get_mut();
            if (link.0, link.1) < (first.0, first.1) {
                *first = (link.0, link.1, first.2);
            }
            first.2 == link.2
        }
    }
}

impl Drop for Share<'_> {
    fn drop(&mut self) {
        let Ok(mut merged) = self.merged.lock() else {
            return;
        };
        merged.outcomes.append(&mut self.outcomes);
        if merged.outside.is_empty() {
            std::mem::swap(&mut merged.outside, &mut self.outside);
        } else {
            for (id, first) in self.outside.drain() {
                if !keep_first(&mut merged.outside, id, first) {
                    self.disagreement.store(true, Ordering::Relaxed);
                }
            }
        }
        merged.checkers.push(self.checker.clone());
    }
}

/// git's table of the objects it met, as `object_as_type` keeps it: each id with the kind it
/// was first met as.
#[derive(Default)]
struct Table {
    kinds: foldhash::HashMap<ObjectId, Kind>,
    /// The ids first met through a link, in that order.
    linked: Vec<ObjectId>,
}

impl Table {
    /// Meet `id` as `kind` (`link`: through a link, not as the object itself); if it was met
    /// as another kind before, git's `object_as_type` line.
    fn meet(&mut self, id: ObjectId, kind: Kind, link: bool) -> Result<(), String> {
        match self.kinds.entry(id) {
            Slot::Occupied(o) if *o.get() != kind => Err(format!(
                "error: object {id} is a {}, not a {kind}",
                o.get()
            )),
            Slot::Occupied(_) => Ok(()),
            Slot::Vacant(v) => {
                v.insert(kind);
                if link {
                    self.linked.push(id);
                }
                Ok(())
            }
        }
    }
}

impl Strict<'_> {
    /// Check the pack `index` describes, on `thread_limit` threads.
    pub(super) fn check(self, index: &gix_pack::index::File, thread_limit: Option<usize>) -> Checked {
        // unpack-objects walks depth first, an order the pass cannot give; its packs are small
        // (under `receive.unpackLimit`).
        if self.program == Program::UnpackObjects {
            return self.one_at_a_time(index);
        }
        match self.over_the_delta_tree(index, thread_limit) {
            Ok(checked) => checked,
            Err(why) => {
                tracing::debug!(%why, "fsck: checking one object at a time");
                self.one_at_a_time(index)
            }
        }
    }

    fn odb(&self) -> Result<gix_odb::Handle, Refused> {
        gix_odb::at_opts(
            self.objects,
            self.hash,
            None,
            gix_odb::store::init::Options {
                alloc_limit_bytes: Some(self.alloc_limit),
                ..Default::default()
            },
        )
        .map_err(|e| Refused::new(Vec::new(), e.to_string()))
    }

    /// The check with the pack's commits, trees and tags decoded once each through its delta
    /// tree, on `thread_limit` threads ([`LinkingObjects`]). Reading each object through the
    /// object database, every delta resolved from its chain's base again, took a
    /// whole-history push of git.git 16 s of its 24 s; keeping the first link to every id,
    /// not only to those outside the pack, 84 MiB of peak RSS.
    fn over_the_delta_tree(
        &self,
        index: &gix_pack::index::File,
        thread_limit: Option<usize>,
    ) -> Result<Checked, HandOver> {
        let (linking, entries) = LinkingObjects::prepare(index).map_err(HandOver::Cannot)?;
        let received = Received::new(index, entries).ok_or(HandOver::Unlisted)?;
        let merged = Mutex::new(Merged::default());
        let disagreement = AtomicBool::new(false);
        let mut share = Share {
            merged: &merged,
            received: &received,
            shallow: self.shallow,
            hash: self.hash,
            disagreement: &disagreement,
            checker: Checker::new(self.options.clone()),
            outcomes: Vec::new(),
            outside: FirstLinks::default(),
            agreed: vec![None; cache_slots(index.num_objects() as usize)].into_boxed_slice(),
            links: Vec::new(),
        };
        linking
            .each(thread_limit, move |offset, kind, data| {
                share.object(offset, kind, data)
            })
            .map_err(HandOver::Cannot)?;
        if disagreement.into_inner() {
            return Err(HandOver::Disagreement);
        }
        let Ok(merged) = merged.into_inner() else {
            return Ok(Err(Refused::new(Vec::new(), "fsck: a checking thread panicked")));
        };
        let mut checker = Checker::new(self.options.clone());
        for c in &merged.checkers {
            checker.merge_named_blobs(c);
        }
        let mut outcomes = merged.outcomes;
        outcomes.sort_unstable_by_key(|o| o.place);
        for o in outcomes {
            checker.findings.extend(o.findings);
            match o.verdict {
                Verdict::Warnings => {}
                Verdict::Error => {
                    return Ok(Err(Refused::new(lines(&checker), "fsck error in packed object")));
                }
                Verdict::Unparsable(why, oid, kind) => {
                    let line = why.error_line(&oid).into_iter().collect();
                    return Ok(Err(Refused::new(line, format!("invalid {kind}")).after(lines(&checker))));
                }
            }
        }
        let mut outside: Vec<_> = merged.outside.into_iter().collect();
        outside.sort_unstable_by_key(|(_, (place, n, _))| (*place, *n));
        let objects = match self.odb() {
            Ok(o) => o,
            Err(e) => return Ok(Err(e)),
        };
        let outside = outside.into_iter().map(|(id, (_, _, want))| (id, want));
        Ok(self.finish(&objects, checker, outside))
    }

    /// git's model: each received object read through the object database in git's order,
    /// every id met kept with the kind first met as ([`Table`]).
    fn one_at_a_time(self, index: &gix_pack::index::File) -> Checked {
        match self.program {
            Program::IndexPack => self.index_pack(index),
            Program::UnpackObjects => self.unpack_objects(index),
        }
    }

    /// `index-pack --strict`: each received object in turn, in [`Place`] order, parsed, checked
    /// and walked; then the objects outside the pack the links named.
    fn index_pack(self, index: &gix_pack::index::File) -> Checked {
        let objects = self.odb()?;
        let mut table = Table::default();
        let mut checker = Checker::new(self.options.clone());
        let mut buf = Vec::new();
        for oid in &check_order(index, Program::IndexPack) {
            let (kind, data) = match read(&objects, oid, &mut buf) {
                Ok(read) => read,
                Err(detail) => return Err(Refused::new(lines(&checker), detail)),
            };
            let step = self.parse(&mut table, oid, kind, data).and_then(|()| {
                if kind != Kind::Blob && checker.check(oid, kind, data) {
                    return Err(Refused::new(Vec::new(), "fsck error in packed object"));
                }
                self.walk(&mut table, oid, kind, data)
            });
            if let Err(refused) = step {
                return Err(refused.after(lines(&checker)));
            }
        }
        let outside = table
            .linked
            .iter()
            .filter(|id| index.lookup(*id).is_none())
            .map(|id| (*id, table.kinds[id]));
        self.finish(&objects, checker, outside)
    }

    /// `unpack-objects --strict`: every object parsed as it is unpacked, in pack order; then
    /// (`write_rest`) each commit, tree and tag in pack order checked and walked depth first,
    /// what each links to checked before its next link (a commit's tree before its parents),
    /// an object not received looked for in the repository as it is met, and an object whose
    /// links git's table refused failing once all its links were walked.
    fn unpack_objects(self, index: &gix_pack::index::File) -> Checked {
        let objects = self.odb()?;
        let order = check_order(index, Program::UnpackObjects);
        let mut table = Table::default();
        let mut checker = Checker::new(self.options.clone());
        let mut buf = Vec::new();
        // Checked and written (git's FLAG_WRITTEN): the received blobs as they are unpacked.
        let mut done = foldhash::HashSet::default();
        for oid in &order {
            let (kind, data) = match read(&objects, oid, &mut buf) {
                Ok(read) => read,
                Err(detail) => return Err(Refused::new(lines(&checker), detail)),
            };
            if let Err(refused) = self.parse(&mut table, oid, kind, data) {
                return Err(refused.after(lines(&checker)));
            }
            if kind == Kind::Blob {
                done.insert(*oid);
            }
        }
        /// An object being walked: its links, the next to walk, and whether git's table
        /// refused one.
        struct Walking {
            id: ObjectId,
            links: Vec<(ObjectId, Kind)>,
            next: usize,
            refused: bool,
        }
        let mut enter = |id: ObjectId,
                         table: &Table,
                         checker: &mut Checker,
                         done: &mut foldhash::HashSet<ObjectId>|
         -> Result<Option<Walking>, String> {
            if done.contains(&id) {
                return Ok(None);
            }
            if index.lookup(id).is_none() {
                let have = outside_kind(&objects, &id);
                if have != table.kinds.get(&id).copied() {
                    return Err("object of unexpected type".into());
                }
                done.insert(id);
                return Ok(None);
            }
            let (kind, data) = read(&objects, &id, &mut buf)?;
            if kind == Kind::Blob {
                done.insert(id);
                return Ok(None);
            }
            if checker.check(&id, kind, data) {
                return Err("fsck error in packed object".into());
            }
            let skip_parents = kind == Kind::Commit && self.shallow.contains(&id);
            let mut links = Vec::new();
            // An object that does not parse (the configuration may let that through the check
            // above) links to what was read of it before that.
            let _ = fsck::for_each_link(kind, data, self.hash, |link, want| {
                if !(skip_parents && want == Kind::Commit) {
                    links.push((link, want));
                }
            });
            // Done once walked (no link leads back to it: ids are hashes of content).
            Ok(Some(Walking {
                id,
                links,
                next: 0,
                refused: false,
            }))
        };
        for root in &order {
            let mut stack = match enter(*root, &table, &mut checker, &mut done) {
                Ok(walking) => walking.into_iter().collect::<Vec<_>>(),
                Err(detail) => return Err(Refused::new(lines(&checker), detail)),
            };
            while let Some(top) = stack.last_mut() {
                let Some(&(id, want)) = top.links.get(top.next) else {
                    let walked = stack.pop().expect("the top");
                    if walked.refused {
                        let detail = format!("Error on reachable objects of {}", walked.id);
                        return Err(Refused::new(lines(&checker), detail));
                    }
                    done.insert(walked.id);
                    continue;
                };
                top.next += 1;
                if let Err(line) = table.meet(id, want, true) {
                    checker.plain_error(line);
                    top.refused = true;
                    continue;
                }
                match enter(id, &table, &mut checker, &mut done) {
                    Ok(Some(walking)) => stack.push(walking),
                    Ok(None) => {}
                    Err(detail) => return Err(Refused::new(lines(&checker), detail)),
                }
            }
        }
        self.finish(&objects, checker, std::iter::empty())
    }

    /// git parsing the received object `oid`: it is met as its kind, it must parse, and a
    /// commit's tree and parents and a tag's object are met as what they are said to be.
    fn parse(&self, table: &mut Table, oid: &ObjectId, kind: Kind, data: &[u8]) -> Result<(), Refused> {
        if let Err(line) = table.meet(*oid, kind, false) {
            let fatal = match (kind, self.program) {
                (Kind::Blob, Program::IndexPack) => format!("invalid blob object {oid}"),
                (Kind::Blob, Program::UnpackObjects) => "invalid blob object".into(),
                _ => format!("invalid {kind}"),
            };
            return Err(Refused::new(vec![line], fatal));
        }
        if kind == Kind::Blob {
            return Ok(());
        }
        if kind == Kind::Tree {
            return Ok(());
        }
        let skip_parents = kind == Kind::Commit && self.shallow.contains(oid);
        let mut refused = None;
        // A commit or tag that does not parse is refused before any of its links is met.
        let parsed = fsck::for_each_link(kind, data, self.hash, |id, want| {
            if refused.is_some() || (skip_parents && want == Kind::Commit) {
                return;
            }
            if let Err(line) = table.meet(id, want, true) {
                let what = match (kind, want) {
                    (Kind::Tag, _) => format!("error: bad tag pointer to {id} in {oid}"),
                    (_, Kind::Tree) => format!("error: bad tree pointer {id} in commit {oid}"),
                    _ => format!("error: bad parent {id} in commit {oid}"),
                };
                refused = Some(Refused::new(vec![line, what], format!("invalid {kind}")));
            }
        });
        if let Err(fsck::Unlinkable::Unparsable(why)) = parsed {
            let line = why.error_line(oid).into_iter().collect();
            return Err(Refused::new(line, format!("invalid {kind}")));
        }
        refused.map_or(Ok(()), Err)
    }

    /// git walking the received object `oid` (`fsck_walk`): a tree's entries are met as what
    /// their modes say.
    fn walk(&self, table: &mut Table, oid: &ObjectId, kind: Kind, data: &[u8]) -> Result<(), Refused> {
        if kind != Kind::Tree {
            return Ok(());
        }
        let mut refused = None;
        // git's walk meets the entries before a bad one; the bad one is the tree check's.
        let _ = fsck::for_each_link(kind, data, self.hash, |id, want| {
            if refused.is_none()
                && let Err(line) = table.meet(id, want, true)
            {
                refused = Some(line);
            }
        });
        match refused {
            None => Ok(()),
            Some(line) => Err(Refused::new(
                vec![line],
                match self.program {
                    Program::IndexPack => format!("Not all child objects of {oid} are reachable"),
                    Program::UnpackObjects => format!("Error on reachable objects of {oid}"),
                },
            )),
        }
    }

    /// After every object was checked: the objects outside the pack that links named, each
    /// with the kind it was first met as, in the order first met (git's `check_objects` in
    /// index-pack, `check_object` in unpack-objects), then `fsck_finish` over the
    /// `.gitmodules` / `.gitattributes` blobs, received or not.
    fn finish(
        &self,
        objects: &gix_odb::Handle,
        mut checker: Checker,
        outside: impl Iterator<Item = (ObjectId, Kind)>,
    ) -> Checked {
        use gix_object::Find;
        use gix_odb::Header;
        for (id, want) in outside {
            let have = outside_kind(objects, &id);
            let detail = match (have, self.program) {
                (Some(k), _) if k == want => continue,
                (None, Program::IndexPack) => format!("did not receive expected object {id}"),
                (Some(k), Program::IndexPack) => {
                    format!("object {id}: expected type {want}, found {k}")
                }
                (_, Program::UnpackObjects) => "object of unexpected type".into(),
            };
            return Err(Refused::new(lines(&checker), detail));
        }
        // git's `fsck_finish` reports every pending blob, then dies once.
        let (mut err, mut printed) = (false, false);
        let mut buf = Vec::new();
        for oid in checker.pending_blobs() {
            let header = objects.try_header(&oid).ok().flatten();
            err |= match header {
                None => {
                    let index_pack = self.program == Program::IndexPack;
                    let (e, p) = checker.blob_missing(&oid, index_pack);
                    printed |= p;
                    e
                }
                Some(h) if h.kind() == Kind::Blob && h.size() > 100 << 20 => {
                    checker.blob_too_large(&oid)
                }
                Some(_) => match objects.try_find(&oid, &mut buf) {
                    Ok(Some(d)) => checker.finish_blob(&oid, (d.kind, d.data)),
                    _ => checker.blob_too_large(&oid),
                },
            };
        }
        if err {
            return Err(Refused::new(lines(&checker), "fsck error in pack objects"));
        }
        if printed {
            // The id went to index-pack's stdout, where receive-pack reads one line for the
            // pack's name and then stops reading: index-pack dies writing that line (SIGPIPE),
            // without a word.
            return Err(Refused::silent(lines(&checker)));
        }
        Ok(lines(&checker))
    }
}

/// The kind of `id`, an object outside the pack, if the repository has it (the empty tree it
/// always has, as git does).
fn outside_kind(objects: &gix_odb::Handle, id: &ObjectId) -> Option<Kind> {
    use gix_odb::Header;
    if crate::objects::lookup::is_empty_tree(id) {
        return Some(Kind::Tree);
    }
    objects.try_header(id).ok().flatten().map(|h| h.kind())
}

/// The kind and (but for a blob) the data of the received object `oid`, or git's words for
/// why it cannot be read.
fn read<'b>(
    objects: &gix_odb::Handle,
    oid: &ObjectId,
    buf: &'b mut Vec<u8>,
) -> Result<(Kind, &'b [u8]), String> {
    use gix_object::Find;
    use gix_odb::Header;
    let kind = match objects.try_header(oid) {
        Ok(Some(h)) => h.kind(),
        _ => return Err(format!("unable to read {oid}")),
    };
    if kind == Kind::Blob {
        return Ok((kind, &[]));
    }
    match objects.try_find(oid, buf) {
        Ok(Some(d)) => Ok((kind, d.data)),
        Ok(None) => Err(format!("unable to read {oid}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The received objects in git's order ([`Place`]), their headers read front to back (the
/// pages behind given back). Without the pack, all whole; an entry whose header does not
/// decode, a delta.
fn check_order(index: &gix_pack::index::File, program: Program) -> Vec<ObjectId> {
    let by_delta = program == Program::IndexPack;
    let map = crate::objects::pack_map::PackMap::open(&index.path().with_extension("pack")).ok();
    let mut entries: Vec<(Place, ObjectId)> = index
        .iter()
        .map(|e| {
            let place = Place {
                delta: map.is_some() && by_delta,
                offset: e.pack_offset,
            };
            (place, e.oid)
        })
        .collect();
    if let Some(map) = map
        && by_delta
    {
        entries.sort_unstable_by_key(|e| e.0.offset);
        let offsets: Vec<u64> = entries.iter().map(|e| e.0.offset).collect();
        map.each_header(&offsets, index.object_hash(), |at, entry| {
            entries[at].0.delta = entry.header.is_delta();
            Some(())
        });
    }
    entries.sort_unstable();
    entries.into_iter().map(|(_, oid)| oid).collect()
}

/// Every finding of `checker` so far, as lines.
fn lines(checker: &Checker) -> Vec<String> {
    checker.findings.iter().map(|f| f.line.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fsck::{Options, Setting};
    use crate::test_git::{git, git_with_input, history, pack, pack_with};

    /// `Strict` over the quarantine of `srv` with `settings`.
    fn strict<'a>(
        quarantine: &'a crate::objects::ingest::Quarantine,
        settings: &[Setting],
        program: Program,
        shallow: &'a std::collections::HashSet<ObjectId>,
    ) -> Strict<'a> {
        Strict {
            objects: quarantine.path(),
            options: Options::from_settings(settings, Path::new("."), gix_hash::Kind::Sha1)
                .unwrap(),
            alloc_limit: 1 << 30,
            program,
            shallow,
            hash: gix_hash::Kind::Sha1,
        }
    }

    /// The pass over the delta tree says what checking each object on its own says, in the
    /// same order: the same warnings, the same first error and `fatal:` detail, whichever
    /// thread checked which object. A history with deltas, three commits with bad emails on
    /// top, and a `.gitmodules` whose url git refuses (found by the tree, checked at the end).
    #[test]
    fn fsck_over_the_delta_tree_finds_what_checking_each_object_finds() {
        let dir = tempfile::tempdir().unwrap();
        let commits = history(dir.path());
        let repo = dir.path().join("r");
        std::fs::write(
            repo.join(".gitmodules"),
            "[submodule \"x\"]\n\tpath = x\n\turl = --upload-pack=evil\n",
        )
        .unwrap();
        git(&repo, &["add", ".gitmodules"]);
        git(&repo, &["commit", "-q", "-m", "modules"]);
        let tree = git(&repo, &["rev-parse", "HEAD^{tree}"]);
        let mut tip = git(&repo, &["rev-parse", "HEAD"]);
        for i in 0..3 {
            let body = format!(
                "tree {tree}\nparent {tip}\nauthor A <a@example.com> 1700000000 +0000\n\
                 committer C <c@example.com 1700000000 +0000\n\nbad email {i}\n"
            );
            tip = git_with_input(
                &repo,
                &["hash-object", "--literally", "-t", "commit", "-w", "--stdin"],
                &body,
            );
        }
        assert_eq!(commits.len(), 10);
        git(dir.path(), &["init", "-q", "--bare", "srv.git"]);
        let quarantine =
            crate::objects::ingest::Quarantine::create(&dir.path().join("srv.git/objects"))
                .unwrap();
        let index = pack(&repo, &quarantine.path().join("pack"), true, &format!("{tip}\n"));
        assert!(crate::test_git::deltas_in(&index) > 0);
        // The pass runs on this pack (it hands over to checking each object when it cannot).
        let decoded = std::sync::atomic::AtomicUsize::new(0);
        let (linking, _) = LinkingObjects::prepare(&index).unwrap();
        linking
            .each(None, |_, _, _| {
                decoded.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        let decoded = decoded.into_inner();
        assert!(decoded > 30, "{decoded} commits, trees and tags");
        let shallow = std::collections::HashSet::new();
        let severity = |id: &str, severity: &str| Setting::Severity {
            id: id.into(),
            severity: severity.into(),
        };
        for settings in [
            vec![],
            vec![severity("bademail", "warn")],
            vec![severity("bademail", "ignore"), severity("gitmodulesurl", "warn")],
        ] {
            let check = |program| strict(&quarantine, &settings, program, &shallow);
            for threads in [Some(1), Some(2), Some(4)] {
                let ours = check(Program::IndexPack).over_the_delta_tree(&index, threads).unwrap();
                let theirs = check(Program::IndexPack).one_at_a_time(&index);
                assert_eq!(ours, theirs, "{settings:?} {threads:?}");
            }
            // unpack-objects' depth-first order finds the same, in its order.
            let theirs = check(Program::UnpackObjects).one_at_a_time(&index);
            match settings.len() {
                0 => assert!(matches!(&theirs, Err(Refused { lines, .. }) if lines.len() == 1 && lines[0].contains("badEmail"))),
                1 => assert!(matches!(&theirs, Err(Refused { lines, .. }) if lines.len() == 4 && lines[3].contains("gitmodulesUrl"))),
                _ => assert!(matches!(&theirs, Ok(lines) if lines.len() == 1 && lines[0].contains("gitmodulesUrl"))),
            }
        }
    }

    /// Write an object of `kind` with `data` into `repo` as it is; its id.
    fn literally(repo: &Path, kind: &str, data: &[u8]) -> String {
        use std::io::Write;
        let mut child = std::process::Command::new("git")
            .args(["hash-object", "--literally", "-w", "--stdin", "-t", kind])
            .current_dir(repo)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(data).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// A raw tree of `entries` (mode, name, hex id).
    fn tree(entries: &[(&str, &str, &str)]) -> Vec<u8> {
        let mut v = Vec::new();
        for (mode, name, id) in entries {
            v.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            v.extend_from_slice(ObjectId::from_hex(id.as_bytes()).unwrap().as_slice());
        }
        v
    }

    /// An object met as two kinds refuses the push, as git's object table does: the pass over
    /// the delta tree sees the links disagree and hands over, and checking each object says
    /// what git says first. A tree naming a received blob as a blob and as a tree; a commit
    /// whose tree is a received blob; a tree naming one of the server's trees as a blob and
    /// as a tree (which the first link alone, a blob the server has as a tree, would have
    /// reported otherwise).
    #[test]
    fn an_object_met_as_two_kinds_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        history(dir.path());
        let repo = dir.path().join("r");
        git(dir.path(), &["clone", "-q", "--bare", "r", "srv.git"]);
        let blob = literally(&repo, "blob", b"hello\n");
        let old_tree = git(&repo, &["rev-parse", "HEAD^{tree}"]);
        let commit = |tree: &str| {
            let body = format!(
                "tree {tree}\nauthor A <a@example.com> 1700000000 +0000\n\
                 committer C <c@example.com> 1700000000 +0000\n\nx\n"
            );
            literally(&repo, "commit", body.as_bytes())
        };
        let both = literally(
            &repo,
            "tree",
            &tree(&[("100644", "a", &blob), ("40000", "b", &blob)]),
        );
        let outside = literally(
            &repo,
            "tree",
            &tree(&[("100644", "a", &old_tree), ("40000", "b", &old_tree)]),
        );
        let blob_as_tree = commit(&blob);
        let cases: [(Vec<String>, &str, &[&str]); 3] = [
            (
                vec![commit(&both), both.clone(), blob.clone()],
                "Not all child objects of {both} are reachable",
                &["error: object {blob} is a blob, not a tree"],
            ),
            (vec![blob_as_tree.clone(), blob.clone()], "", &[]),
            (
                vec![commit(&outside), outside.clone()],
                "Not all child objects of {outside} are reachable",
                &["error: object {old_tree} is a blob, not a tree"],
            ),
        ];
        let shallow = std::collections::HashSet::new();
        let fill = |s: &str| {
            s.replace("{both}", &both)
                .replace("{blob}", &blob)
                .replace("{outside}", &outside)
                .replace("{old_tree}", &old_tree)
        };
        for (n, (objects, fatal, lines)) in cases.iter().enumerate() {
            let quarantine =
                crate::objects::ingest::Quarantine::create(&dir.path().join("srv.git/objects"))
                    .unwrap();
            let index = pack_with(
                &repo,
                &quarantine.path().join("pack"),
                false,
                &[],
                &format!("{}\n", objects.join("\n")),
            );
            for threads in [Some(1), Some(2)] {
                let ours = strict(&quarantine, &[], Program::IndexPack, &shallow)
                    .over_the_delta_tree(&index, threads);
                assert!(matches!(ours, Err(HandOver::Disagreement)), "case {n}: {ours:?}");
            }
            let theirs = strict(&quarantine, &[], Program::IndexPack, &shallow).one_at_a_time(&index);
            let Err(Refused { lines: got, fatal: detail }) = &theirs else {
                panic!("case {n} passed: {theirs:?}")
            };
            if fatal.is_empty() {
                // Which of the commit and the blob git meets first decides the words.
                let commit_first = (
                    vec![
                        format!("error: object {blob} is a tree, not a blob"),
                    ],
                    format!("invalid blob object {blob}"),
                );
                let blob_first = (
                    vec![
                        format!("error: object {blob} is a blob, not a tree"),
                        format!("error: bad tree pointer {blob} in commit {blob_as_tree}"),
                    ],
                    "invalid commit".to_owned(),
                );
                let got = (got.clone(), detail.clone().unwrap_or_default());
                assert!(got == commit_first || got == blob_first, "case {n}: {got:?}");
            } else {
                assert_eq!(detail.as_deref(), Some(fill(fatal).as_str()), "case {n}");
                let lines: Vec<String> = lines.iter().map(|l| fill(l)).collect();
                assert_eq!(got, &lines, "case {n}");
            }
            // unpack-objects' words: it walks depth first, and looks for an object the
            // repository has as it meets it (the server's tree, wanted first as a blob).
            let theirs = strict(&quarantine, &[], Program::UnpackObjects, &shallow).one_at_a_time(&index);
            let detail = match n {
                0 => format!("Error on reachable objects of {both}"),
                1 => continue,
                _ => "object of unexpected type".to_owned(),
            };
            assert!(matches!(&theirs, Err(Refused { fatal: Some(d), .. }) if *d == detail), "case {n}: {theirs:?}");
        }
    }
}
