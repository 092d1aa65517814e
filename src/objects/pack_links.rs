//! What the commits, trees and tags of a received pack link to outside of it.
//!
//! The connectivity check's fast path: when every link of every commit, tree and tag in the
//! pack names an object in the pack or one the repository already has, everything a tip in the
//! pack reaches is there, without walking from each tip. Indexing decodes every object of the
//! pack once to name it; a [`Collector`] on each of its threads takes the links of the
//! commits, trees and tags as they go by, and [`Collected::outside`] keeps those the pack does
//! not hold, for the caller to look up in the repository. No object is decoded again.
//!
//! When indexing could not collect them (a pack whose deltas name in-pack bases by id is
//! indexed by gix-pack's own writer), [`external_links`] decodes the pack again through
//! gix-pack's delta tree: each base inflated once for all of its deltas, the chains spread over
//! threads, only chains of commits, trees and tags (git deltifies an object only against one of
//! its own kind, so a blob's chain is blobs throughout, and blobs link to nothing), through
//! the same [`Collector`]s.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use foldhash::HashMap;
use gix_hash::ObjectId;
use gix_object::Kind;
use gix_pack::data::entry::Header;

use crate::objects::pack_map::{PackMap, Reader};

/// Passes over the pack's entry headers to find the kind of each delta chain: an ofs-delta's
/// base always comes before it, so one pass does for packs git makes; a ref-delta may name a
/// base further on, each pass resolving one more link of such a chain. A pack that needs more
/// is left to the walk.
const KIND_PASSES: usize = 8;

/// A thread's links are handed over in batches of this many.
const BATCH: usize = 1024;

/// Slots of a thread's cache of ids lately seen, at most (a power of two): the trees of a
/// history name the same blobs and trees version after version, 59 million links to 335,000
/// objects in git.git. Caches of 4,096 and 16,384 slots were no faster. A small pack gets a
/// cache its size ([`Collected::for_pack`]): zeroing 2 MiB per thread was most of the links'
/// cost in a push of a few objects.
const SEEN_SLOTS: usize = 1 << 16;

/// Slots of a thread's cache of ids lately seen, at least.
const MIN_SEEN_SLOTS: usize = 64;

/// Why [`external_links`] cannot say what a pack links to; the caller then walks from each tip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CannotSay {
    /// The pack file is gone: its objects were unpacked as loose objects.
    PackGone,
    /// The kind of some delta chain was not found in [`KIND_PASSES`] passes (ref-deltas naming
    /// bases further on, chain after chain), or an entry header did not decode.
    ChainKinds,
    /// gix-pack's delta tree could not be built or traversed.
    Traversal,
    /// A commit, tree or tag does not parse as far as its links.
    Unparsable,
    /// A link wants an object of the pack as another kind than it is ([`Wants::agree_with`]).
    WrongKind,
}

/// The kinds the links to one object want it as, and whether git's walk parses it for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wants(u8);

impl Wants {
    /// A tree's entry with a blob's mode: git's walk only asks that the object exists.
    const BLOB_ENTRY: u8 = 1;
    /// Wanted as a tree, a commit, a tag or (by a tag) a blob: parsed as that.
    fn parsed_bit(kind: Kind) -> u8 {
        match kind {
            Kind::Tree => 2,
            Kind::Commit => 4,
            Kind::Tag => 8,
            Kind::Blob => 16,
        }
    }

    /// Wanted as `want` too, by a link of an object of kind `from`.
    pub fn with(self, from: Kind, want: Kind) -> Self {
        let bit = match (from, want) {
            (Kind::Tree, Kind::Blob) => Self::BLOB_ENTRY,
            _ => Self::parsed_bit(want),
        };
        Wants(self.0 | bit)
    }

    /// Whether git's walk parses the object for some link: an object of another kind fails it
    /// (`bad tree object`, `not a commit`, `bad object`). A tree's entry with a blob's mode
    /// only asks that the object exists.
    pub fn parsed(self) -> bool {
        self.0 & !Self::BLOB_ENTRY != 0
    }

    /// Whether every link wants what the object is, `kind` (a blob's entry wanting a blob):
    /// then no order of git's walk can refuse it. Of an object some link [`Wants::parsed`],
    /// git's walk refuses exactly what does not agree: parsed as another kind, or named by an
    /// entry with a blob's mode while it is not a blob and is also parsed as what it is (its
    /// table meets it as both). An entry with a blob's mode alone naming a tree passes.
    pub fn agree_with(self, kind: Kind) -> bool {
        let own = match kind {
            Kind::Blob => Self::BLOB_ENTRY | Self::parsed_bit(Kind::Blob),
            kind => Self::parsed_bit(kind),
        };
        self.0 & !own == 0
    }
}

/// The distinct objects outside the pack that its commits, trees and tags link to (gitlinks
/// are not links), with the kinds they are wanted as, or why this cannot be said.
pub type Outside = Result<HashMap<ObjectId, Wants>, CannotSay>;

/// The links the [`Collector`]s of one indexing took: one map for all threads (a set for each
/// held git.git's 335,000 linked ids twice over, +18 MiB of peak RSS).
pub struct Collected {
    set: Mutex<HashMap<ObjectId, Wants>>,
    broken: AtomicBool,
    /// The slots of each thread's cache (a power of two).
    slots: usize,
}

impl Collected {
    /// The links of a pack of `objects` entries: each thread's cache of lately seen ids is
    /// sized to the ids such a pack can name (twice its objects), within bounds.
    pub fn for_pack(objects: usize) -> Self {
        Collected {
            set: Mutex::default(),
            broken: AtomicBool::default(),
            slots: cache_slots(objects),
        }
    }

    /// A collector for one thread of the indexing (clone it for each further thread).
    pub fn collector(&self) -> Collector<'_> {
        Collector {
            collected: self,
            batch: Vec::with_capacity(BATCH),
            seen: vec![None; self.slots].into_boxed_slice(),
        }
    }

    /// What the collected links name outside the pack, whose objects `in_pack` yields in id
    /// order with their kinds; [`CannotSay::WrongKind`] when a link wants one of them as
    /// another kind than it is (whether git's walk refuses it depends on what else it meets:
    /// the walk from each tip says).
    pub fn outside(self, in_pack: impl IntoIterator<Item = (ObjectId, Kind)>) -> Outside {
        if self.broken.into_inner() {
            return Err(CannotSay::Unparsable);
        }
        let set = self.set.into_inner().map_err(|_| CannotSay::Traversal)?;
        // Both in order, the pack's ids are passed over once (a binary search of them for each
        // link cost git.git's history 0.5 s).
        let mut links: Vec<(ObjectId, Wants)> = set.into_iter().collect();
        links.sort_unstable_by(|a, b| by_id(&a.0, &b.0));
        let mut in_pack = in_pack.into_iter().peekable();
        let mut outside = HashMap::default();
        for (id, wants) in links {
            while in_pack.next_if(|p| p.0 < id).is_some() {}
            match in_pack.peek() {
                Some((p, kind)) if *p == id => {
                    if !wants.agree_with(*kind) {
                        return Err(CannotSay::WrongKind);
                    }
                }
                _ => {
                    outside.insert(id, wants);
                }
            }
        }
        Ok(outside)
    }
}

/// One indexing thread's view of the links: each commit, tree and tag it resolves goes through
/// [`Collector::object`]; links not lately seen go to the shared map in batches.
pub struct Collector<'a> {
    collected: &'a Collected,
    batch: Vec<(ObjectId, Wants)>,
    /// Links lately seen, each in the slot its id's first bytes choose (a direct-mapped cache
    /// in front of the map).
    seen: Box<[Option<(ObjectId, Wants)>]>,
}

impl Collector<'_> {
    /// Take the links of an object of `kind` (blobs have none) whose content is `data`.
    pub fn object(&mut self, kind: Kind, data: &[u8], hash: gix_hash::Kind) {
        if kind == Kind::Blob {
            return;
        }
        let (batch, seen) = (&mut self.batch, &mut self.seen);
        let parsed = crate::objects::fsck::for_each_link(kind, data, hash, |id, want| {
            let want = Wants::default().with(kind, want);
            let slot = &mut seen[slot_of(&id, seen.len())];
            if *slot != Some((id, want)) {
                *slot = Some((id, want));
                batch.push((id, want));
            }
        });
        if parsed.is_err() {
            self.collected.broken.store(true, Ordering::Relaxed);
        }
        if self.batch.len() >= BATCH {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        match self.collected.set.lock() {
            Ok(mut set) => {
                for (id, want) in self.batch.drain(..) {
                    let wants = set.entry(id).or_default();
                    *wants = Wants(wants.0 | want.0);
                }
            }
            Err(_) => self.collected.broken.store(true, Ordering::Relaxed),
        }
    }
}

/// Each thread gets its own (empty) batch and cache.
impl Clone for Collector<'_> {
    fn clone(&self) -> Self {
        self.collected.collector()
    }
}

/// A thread's last batch is handed over when its collector goes.
impl Drop for Collector<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The order of ids, told mostly by their first eight bytes as one number (ids are uniformly
/// distributed): sorting git.git's 419,403 ids by the whole id, one `memcmp` call a
/// comparison, took 0.1 s more.
pub(crate) fn by_id(a: &ObjectId, b: &ObjectId) -> std::cmp::Ordering {
    let prefix = |id: &ObjectId| {
        let bytes: [u8; 8] = id.as_slice()[..8].try_into().expect("ids are longer");
        u64::from_be_bytes(bytes)
    };
    prefix(a).cmp(&prefix(b)).then_with(|| a.cmp(b))
}

/// The slots of a direct-mapped cache of ids met in a pack of `objects` entries: twice its
/// objects (the ids it can name, about), a power of two within bounds.
pub(crate) fn cache_slots(objects: usize) -> usize {
    (objects.min(SEEN_SLOTS) * 2)
        .next_power_of_two()
        .clamp(MIN_SEEN_SLOTS, SEEN_SLOTS)
}

/// The slot of `id` in a cache of `slots` ids (a power of two, at most [`SEEN_SLOTS`]).
pub(crate) fn slot_of(id: &ObjectId, slots: usize) -> usize {
    let bytes = id.as_slice();
    (usize::from(bytes[0]) << 8 | usize::from(bytes[1])) & (slots - 1)
}

/// [`Outside`] found by decoding the pack's commits, trees and tags again, for a pack whose
/// indexing did not collect its links.
pub fn external_links(index: &gix_pack::index::File, thread_limit: Option<usize>) -> Outside {
    let hash = index.object_hash();
    let collected = Collected::for_pack(index.num_objects() as usize);
    let mut collector = collected.collector();
    let (linking, entries) = LinkingObjects::prepare(index)?;
    linking.each(thread_limit, move |_, kind, data| {
        collector.object(kind, data, hash);
    })?;
    let kind_at = |offset: u64| {
        let at = entries.binary_search_by_key(&offset, |e| e.offset).ok()?;
        Some(entries[at].kind)
    };
    // The index lists the pack's ids in order.
    let in_pack = index
        .iter()
        .map(|entry| Some((entry.oid, kind_at(entry.pack_offset)?)))
        .collect::<Option<Vec<_>>>()
        .ok_or(CannotSay::ChainKinds)?;
    collected.outside(in_pack)
}

/// An entry of a pack, as its header and its delta chain's base tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Where it starts in the pack.
    pub offset: u64,
    /// The kind of its object: its base's, for a delta.
    pub kind: Kind,
    /// Whether it is stored as a delta.
    pub delta: bool,
}

/// The commits, trees and tags of an indexed pack, to be decoded once each:
/// [`LinkingObjects::prepare`] reads every entry's header, [`LinkingObjects::each`] decodes.
pub struct LinkingObjects<'a> {
    index: &'a gix_pack::index::File,
    map: PackMap,
    pack_end: u64,
    /// The offsets of the entries of the chains of commits, trees and tags, in pack order.
    linking: Vec<u64>,
}

impl<'a> LinkingObjects<'a> {
    /// Read the header of every entry of the pack `index` describes, front to back, the pages
    /// behind given back: the decoder, and every entry, in pack order.
    pub fn prepare(index: &'a gix_pack::index::File) -> Result<(Self, Vec<Entry>), CannotSay> {
        let hash = index.object_hash();
        let map = PackMap::open(&index.path().with_extension("pack"))
            .map_err(|_| CannotSay::PackGone)?;
        let pack_end = map.bytes().len().saturating_sub(hash.len_in_bytes()) as u64;
        let entries = tracing::info_span!("chain_kinds")
            .in_scope(|| chain_kinds(index, &map))
            .ok_or(CannotSay::ChainKinds)?;
        // Only the chains of commits, trees and tags are read, each entry once: what each page
        // has to give is those entries' bytes.
        let ends = entries.iter().skip(1).map(|e| e.offset).chain([pack_end]);
        let linking = entries
            .iter()
            .zip(ends)
            .filter(|(e, _)| e.kind != Kind::Blob)
            .map(|(e, end)| {
                map.expect(e.offset..end);
                e.offset
            })
            .collect();
        let linking = LinkingObjects {
            index,
            map,
            pack_end,
            linking,
        };
        Ok((linking, entries))
    }

    /// Decode each commit, tree and tag once, the delta chains spread over `thread_limit`
    /// threads, and hand each to `inspect` (its pack offset, kind and data) on a clone of
    /// `inspect` per thread; blobs' chains are not read.
    pub fn each<F>(self, thread_limit: Option<usize>, mut inspect: F) -> Result<(), CannotSay>
    where
        F: FnMut(u64, Kind, &[u8]) + Clone + Send,
    {
        let LinkingObjects {
            index,
            map,
            pack_end,
            linking,
        } = self;
        let hash = index.object_hash();
        let interrupt = AtomicBool::new(false);
        let tree = tracing::info_span!("delta_tree")
            .in_scope(|| {
                gix_pack::cache::delta::Tree::from_offsets_in_pack(
                    &index.path().with_extension("pack"),
                    linking.into_iter(),
                    &|offset: &u64| *offset,
                    &|id| Ok(index.lookup(id).map(|i| index.pack_offset_at_index(i))),
                    &mut gix_features::progress::Discard,
                    &interrupt,
                    hash,
                )
            })
            .map_err(|_| CannotSay::Traversal)?;
        let _traverse = tracing::info_span!("traverse").entered();
        tree.traverse(
            Reader::default().into_resolver(),
            &map,
            pack_end,
            move |offset: &mut u64, _, ctx| {
                let kind = gix_error::OptionExt::ok_or_raise(ctx.entry.header.as_kind(), || {
                    gix_error::message("a resolved object has a delta's header")
                })?;
                inspect(*offset, kind, ctx.decompressed);
                Ok(())
            },
            gix_pack::cache::delta::traverse::Options {
                object_progress: Box::new(gix_features::progress::Discard),
                size_progress: &mut gix_features::progress::Discard,
                thread_limit,
                should_interrupt: &interrupt,
                object_hash: hash,
                // The pack was indexed, every object and delta result within the push's bound;
                // these are the same objects.
                alloc_limit_bytes: None,
            },
        )
        .map_err(|_| CannotSay::Traversal)?;
        Ok(())
    }
}

/// Every entry of the pack, in pack order, with the kind of its delta chain. Each pass reads
/// the entries' headers front to back and gives back the pages behind it.
fn chain_kinds(index: &gix_pack::index::File, map: &PackMap) -> Option<Vec<Entry>> {
    let mut offsets: Vec<u64> = (0..index.num_objects())
        .map(|i| index.pack_offset_at_index(i))
        .collect();
    offsets.sort_unstable();
    let position = |offset: u64| offsets.binary_search(&offset).ok();
    let mut kinds: Vec<Option<Kind>> = vec![None; offsets.len()];
    let mut deltas = vec![false; offsets.len()];
    let hash = index.object_hash();
    for _ in 0..KIND_PASSES {
        let mut unresolved = false;
        map.each_header(&offsets, hash, |at, entry| {
            if kinds[at].is_some() {
                return Some(());
            }
            deltas[at] = entry.header.is_delta();
            kinds[at] = match entry.header {
                Header::OfsDelta { base_distance } => {
                    kinds[position(entry.checked_base_pack_offset(base_distance)?)?]
                }
                Header::RefDelta { base_id } => {
                    let base = index.pack_offset_at_index(index.lookup(base_id)?);
                    kinds[position(base)?]
                }
                header => Some(header.as_kind()?),
            };
            unresolved |= kinds[at].is_none();
            Some(())
        })?;
        if !unresolved {
            return Some(
                offsets
                    .iter()
                    .zip(kinds)
                    .zip(deltas)
                    .map(|((offset, kind), delta)| Entry {
                        offset: *offset,
                        kind: kind.expect("all resolved"),
                        delta,
                    })
                    .collect(),
            );
        }
    }
    None
}

#[cfg(test)]
mod tests {
    //! Against packs made by git: a whole history with deltas links outside nothing, a pack of
    //! the last commits links to what it builds on, a missing blob is named, and an object that
    //! does not parse makes the pass give up.

    use super::*;

    use crate::test_git::{deltas_in, git, git_with_input, history, pack_with};

    /// A pack whose deltas name their bases by id: those this pass is for (indexing takes the
    /// links of the others).
    fn pack(
        repo: &std::path::Path,
        dir: &std::path::Path,
        revs: bool,
        list: &str,
    ) -> gix_pack::index::File {
        pack_with(repo, dir, revs, &[], list)
    }

    fn id(hex: &str) -> ObjectId {
        ObjectId::from_hex(hex.as_bytes()).unwrap()
    }

    #[test]
    fn ids_are_ordered_as_their_bytes() {
        let ids: Vec<ObjectId> = [[0u8; 20], [1; 20], [255; 20]]
            .into_iter()
            .chain((0..20).map(|i| {
                let mut id = [7u8; 20];
                id[i] = 8;
                id
            }))
            .map(|b| ObjectId::from_bytes_or_panic(&b))
            .collect();
        for a in &ids {
            for b in &ids {
                assert_eq!(by_id(a, b), a.cmp(b), "{a} {b}");
            }
        }
    }

    /// What git's walk refuses: an object parsed as another kind than it is, or named by an
    /// entry with a blob's mode while also wanted as what it is; an entry with a blob's mode
    /// alone naming a tree passes, as in git.
    #[test]
    fn wants_refuse_what_git_walks_as_another_kind() {
        use Kind::{Blob, Commit, Tag, Tree};
        let wants = |links: &[(Kind, Kind)]| {
            links
                .iter()
                .fold(Wants::default(), |w, (from, want)| w.with(*from, *want))
        };
        let entry = (Tree, Blob);
        let subtree = (Tree, Tree);
        let tree_of = (Commit, Tree);
        let parent = (Commit, Commit);
        let tagged_blob = (Tag, Blob);
        assert!(!wants(&[entry]).parsed());
        assert!(wants(&[tagged_blob]).parsed());
        for (links, kind, refused) in [
            (&[entry][..], Blob, false),
            (&[entry], Tree, false),
            (&[entry], Commit, false),
            (&[entry, subtree], Tree, true),
            (&[entry, subtree], Blob, true),
            (&[subtree, tree_of], Tree, false),
            (&[subtree], Blob, true),
            (&[tree_of], Commit, true),
            (&[parent], Commit, false),
            (&[parent], Tree, true),
            (&[tagged_blob], Blob, false),
            (&[tagged_blob], Commit, true),
            (&[tagged_blob, entry], Blob, false),
            (&[(Tag, Tag)], Tag, false),
            (&[(Tag, Tag)], Commit, true),
        ] {
            let w = wants(links);
            assert_eq!(w.parsed() && !w.agree_with(kind), refused, "{links:?} as {kind}");
            let agree = links.iter().all(|(_, want)| *want == kind);
            assert_eq!(wants(links).agree_with(kind), agree, "{links:?} as {kind}");
        }
    }

    #[test]
    fn a_whole_history_links_outside_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let commits = history(dir.path());
        let repo = dir.path().join("r");
        let index = pack(&repo, &dir.path().join("all"), true, &commits[9]);
        assert!(deltas_in(&index) > 0, "the pack should hold deltas");
        for threads in [Some(1), None] {
            assert_eq!(external_links(&index, threads), Ok(HashMap::default()));
        }
    }

    #[test]
    fn the_last_commits_link_to_what_they_build_on() {
        let dir = tempfile::tempdir().unwrap();
        let commits = history(dir.path());
        let repo = dir.path().join("r");
        let index = pack(
            &repo,
            &dir.path().join("top"),
            true,
            &format!("{}\n^{}\n", commits[9], commits[7]),
        );
        let external = external_links(&index, None).expect("the pass can say");
        // The parent of the oldest commit in the pack, and the unchanged directories and files
        // of the trees it sent, named by id; all from the older history.
        assert!(external.contains_key(&id(&commits[7])), "{external:?}");
        let old = git(&repo, &["rev-list", "--objects", &commits[7]]);
        let old: std::collections::HashSet<ObjectId> =
            old.lines().map(|l| id(&l[..40])).collect();
        for e in external.keys() {
            assert!(index.lookup(e).is_none(), "{e} is in the pack");
            assert!(old.contains(e), "{e} is not an older object");
        }
        // Exactly what `rev-list --objects` sees of the old side: the parent, and each entry
        // of the new trees that names an object that did not change, each wanted as the kind
        // its entry's mode says.
        let mut expected = HashMap::default();
        let since = format!("^{}", commits[7]);
        for line in git(&repo, &["rev-list", "--objects", &commits[9], &since]).lines() {
            let object = &line[..40];
            let kind = git(&repo, &["cat-file", "-t", object]);
            if kind == "tree" {
                for entry in git(&repo, &["ls-tree", object]).lines() {
                    let mut fields = entry.split_whitespace().skip(1);
                    let kind = Kind::from_bytes(fields.next().unwrap().as_bytes()).unwrap();
                    let named = id(&fields.next().unwrap()[..40]);
                    if index.lookup(named).is_none() {
                        let wants: &mut Wants = expected.entry(named).or_default();
                        *wants = wants.with(Kind::Tree, kind);
                    }
                }
            }
        }
        expected.insert(
            id(&commits[7]),
            Wants::default().with(Kind::Commit, Kind::Commit),
        );
        assert_eq!(external, expected);
    }

    #[test]
    fn a_missing_blob_is_named_and_a_broken_object_or_a_gone_pack_gives_up() {
        let dir = tempfile::tempdir().unwrap();
        let commits = history(dir.path());
        let repo = dir.path().join("r");
        let missing = "ab".repeat(20);
        let tree = git_with_input(
            &repo,
            &["mktree", "--missing"], &format!("100644 blob {missing}\tgone\n"));
        let index = pack(&repo, &dir.path().join("gone"), false, &format!("{tree}\n"));
        let external = external_links(&index, None).expect("the pass can say");
        assert_eq!(
            external,
            [(id(&missing), Wants::default().with(Kind::Tree, Kind::Blob))].into_iter().collect()
        );

        let broken = git_with_input(
            &repo,
            &["hash-object", "--literally", "-t", "commit", "-w", "--stdin"], "no tree line\n");
        let index = pack(
            &repo,
            &dir.path().join("broken"),
            false,
            &format!("{broken}\n{}\n", commits[0]),
        );
        assert_eq!(external_links(&index, None), Err(CannotSay::Unparsable));

        // A pack whose objects were unpacked as loose objects is gone: nothing to vouch with.
        std::fs::remove_file(index.path().with_extension("pack")).unwrap();
        assert_eq!(external_links(&index, None), Err(CannotSay::PackGone));
    }

    /// A cache of lately seen ids is sized to its pack, a power of two within bounds, and every
    /// id has a slot in it.
    #[test]
    fn caches_are_sized_to_the_pack() {
        assert_eq!(cache_slots(0), MIN_SEEN_SLOTS);
        assert_eq!(cache_slots(3), MIN_SEEN_SLOTS);
        assert_eq!(cache_slots(1000), 2048);
        assert_eq!(cache_slots(419_403), SEEN_SLOTS);
        assert_eq!(cache_slots(usize::MAX), SEEN_SLOTS);
        let id = ObjectId::from_hex(b"ffffffffffffffffffffffffffffffffffffffff").unwrap();
        assert_eq!(slot_of(&id, 64), 63);
        assert_eq!(slot_of(&id, SEEN_SLOTS), SEEN_SLOTS - 1);
    }
}
