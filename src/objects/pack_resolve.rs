//! Naming a received pack's objects while the pack is still arriving.
//!
//! To name an object of a pack, its entry is inflated, a delta applied to its base, and the
//! result hashed. gix-pack's delta tree needs every entry's place before it can be traversed.
//! So a whole-history push of git.git spent its first 3.5 s reading the pack on one core while
//! the other idled. Here the entries go, as they arrive, to resolver threads. Each thread owns
//! whole delta families (a base and every delta built on it, however deep). An offset delta's
//! base is always behind it in the pack, so its owner has resolved the base before the delta
//! comes. A pack of a handful of objects (one to be unpacked) is resolved by the thread reading
//! it, each entry as it is read ([`Resolvers::Reader`]): a thread started for it cost more than
//! its objects (its stack, a malloc arena of its own, the cgroup files read to count the cores).
//!
//! git's pack-objects writes each delta family together, base first (`compute_write_order`).
//! So a delta's base is nearly always among the last objects its owner resolved. Each owner
//! keeps those in a cache bounded in bytes. An evicted base is built again from the file: its
//! chain is inflated again up to a cached ancestor. On git.git's history (419,403 objects), a
//! 32 MiB cache had 5,590 bases built again: 32 MB inflated and 80 MB applied again, against
//! 640 MB inflated and 8.3 GB hashed in all.
//!
//! A delta that names its base by id (a pack written without `ofs-delta`, as libgit2 writes
//! them) can only be placed by whoever named that base: the threads name objects in their own
//! time. At the first such delta the reading thread takes over what the threads resolved so
//! far and resolves the rest of the pack itself (`Resolving::hand_to_the_reader`): one core,
//! but the pack is named as it arrives and its links taken, where gix-pack's writer read it
//! again after it arrived (a whole-history push of git.git written so: 16.6–18.5 s before).
//!
//! The resolution here is an attempt. It gives up on anything it does not expect: a delta
//! naming a base by id that has not been named before it, a base offset that is not an
//! entry's start, broken zlib or delta data, an object over the allocation limit, or
//! rebuilding bases costing more than the work itself. The pack is then resolved after it has
//! arrived, by gix-pack's traverse (or, for a delta on a base named by id, its index writer)
//! as before, which says what is wrong in git's words. So this changes how fast a pack is
//! indexed, never what is accepted or what an error says.
//!
//! For a pack to be unpacked, the reading thread also hands back whole, up to
//! [`Options::hand_back_bytes`], the objects it resolved ([`Resolved::kept`]): each object's loose
//! copy is then written from the bytes its id was computed from, not decoded from the pack
//! and hashed again.
//!
//! Delta application is written here: gix-pack's is private to it.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Condvar, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

use gix_hash::ObjectId;
use gix_object::Kind;
use gix_pack::data::entry::Header;
use gix_pack::data::input::Entry;

use crate::objects::pack_links::{Collected, Collector};
use crate::objects::pack_read::Bytes;

/// Bytes of resolved objects each resolver keeps for the deltas still to come (the newest one
/// is kept whatever its size). 16 MiB a thread: on git.git's history, two threads rebuilt
/// 32 MB (inflated) of evicted bases; 8 MiB a thread rebuilt twice as much.
pub const CACHE_BYTES: usize = 16 << 20;

/// Entries handed to a resolver together (one wake-up for each batch, not each entry), up to
/// [`BATCH_BYTES`] of them (a batch counted by entries alone held 64 blobs of 16 MiB: 2 GiB
/// of a 3 GiB push).
const BATCH: usize = 64;

/// The bytes of a batch, past which it is handed over.
const BATCH_BYTES: u64 = 256 << 10;

/// Bytes on their way to the resolvers (each entry's, and [`JOB_BYTES`] for each); the reader
/// waits when it is this far ahead. Deep, because a family's deltas come in long runs: while
/// the reader waits for one resolver to take a run, the other may run out of work (with 256
/// entries a resolver, a whole-history push of git.git took 12.9 s; with 16,384, 10.1 s).
pub const IN_FLIGHT: u64 = 16 << 20;

/// The bytes a pack's resolution keeps for each of its objects, in its caches and on the way
/// to them, up to [`CACHE_BYTES`] and [`IN_FLIGHT`]: a pack of a few thousand objects has few
/// bases to keep, and a server receiving many pushes at once should not hold the bounds for
/// each (nor should one of 12,000 incompressible blobs hold a third of itself; see the
/// `memory` tests).
pub const BYTES_AN_OBJECT: u64 = 128;

/// What an entry on its way costs beyond its bytes.
const JOB_BYTES: u64 = 128;

/// Spare buffers a resolver keeps for the next objects (evicted objects' and inflated
/// deltas'): an object built in a fresh allocation has its pages faulted in and zeroed anew
/// (system time 0.97 s against 0.62 s with spares, on git.git's history).
const SPARE: usize = 8;

/// The largest spare buffer kept (a larger one is given back to the allocator).
const SPARE_CAPACITY: usize = 1 << 20;

/// Bytes a resolver may spend building evicted bases again beyond what it spent on its own
/// objects, before it gives up.
pub const REBUILD_ALLOWANCE: u64 = 64 << 20;

/// Who resolves the entries as they arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolvers {
    /// The thread reading the pack, each entry as soon as it is read.
    Reader,
    /// This many threads beside the reader (at least one, at most 255).
    Threads(usize),
}

/// What the resolution needs to know of the pack and of limits.
#[derive(Clone, Copy)]
pub struct Options {
    /// Who resolves the entries.
    pub resolvers: Resolvers,
    /// Bytes of resolved objects each thread keeps ([`CACHE_BYTES`]).
    pub cache_bytes: usize,
    /// Bytes a thread may spend building evicted bases again beyond its own objects
    /// ([`REBUILD_ALLOWANCE`]).
    pub rebuild_allowance: u64,
    /// The largest object (or delta) that may be allocated.
    pub alloc_limit: Option<usize>,
    /// The repository's object format.
    pub hash: gix_hash::Kind,
    /// Bytes of the reading thread's resolved objects handed back with their names
    /// ([`Resolved::kept`]; for a pack to be unpacked, whose loose objects are then written
    /// from them rather than decoded and hashed again); 0 for none.
    pub hand_back_bytes: usize,
}

/// What the resolution gives back: each entry's id and kind in pack order, and the objects
/// [`Options::hand_back_bytes`] asked to keep, in pack order.
pub struct Resolved {
    /// Each entry's id and kind, in pack order.
    pub named: Vec<(ObjectId, Kind)>,
    /// The objects kept whole, in pack order.
    pub kept: Vec<KeptObject>,
}

/// An object resolved on the reading thread, handed back whole: `data` is what `id` was
/// computed from.
#[derive(Debug)]
pub struct KeptObject {
    /// Where its entry starts in the pack.
    pub offset: u64,
    /// Its id, computed from `data`.
    pub id: ObjectId,
    /// Its kind.
    pub kind: Kind,
    /// Its content.
    pub data: Vec<u8>,
}

/// Why the resolution gave up, leaving the pack to be resolved after it has arrived.
#[derive(Debug, thiserror::Error)]
pub enum GaveUp {
    /// A delta names its base by id (an in-pack base of a pack sent without `ofs-delta`) that
    /// was not named before it.
    #[error("a delta names its base by id")]
    BaseById,
    /// An offset delta's base offset is not where an entry starts.
    #[error("a delta's base at {0} is not an entry")]
    BaseNotAnEntry(u64),
    /// An entry's zlib stream is broken, or inflates to another size than its header says.
    #[error("the entry at {0} does not inflate to its size")]
    Inflate(u64),
    /// A delta's instructions are broken or do not fit its base.
    #[error("the delta at {offset} is broken: {reason}")]
    Delta {
        /// Where the delta's entry starts.
        offset: u64,
        /// What is wrong with it.
        reason: BadDelta,
    },
    /// An object or delta is larger than may be allocated.
    #[error("the object at {0} is over the allocation limit")]
    TooLarge(u64),
    /// Building evicted bases again cost more than the objects themselves.
    #[error("building evicted bases again cost {0} bytes")]
    Rebuilding(u64),
    /// The pack file could not be read back.
    #[error("the pack file could not be read back")]
    Read(#[source] io::Error),
    /// An object could not be hashed.
    #[error("an object could not be hashed")]
    Hash,
    /// A resolver thread went away.
    #[error("a resolver thread went away")]
    Lost,
}

/// What is wrong with a delta's instructions (git's `patch_delta` refuses the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadDelta {
    /// A size in its header does not end within it.
    #[error("a size in its header is truncated")]
    TruncatedSize,
    /// The base size in its header is not the base's size.
    #[error("its base is not of the size it names")]
    BaseSize,
    /// Its result would be larger than may be allocated.
    #[error("its result is over the allocation limit")]
    TooLarge,
    /// An instruction ends early.
    #[error("an instruction is truncated")]
    Truncated,
    /// A copy reaches past the base's end.
    #[error("a copy reaches past the base")]
    CopyOutOfBase,
    /// Instruction 0, which is reserved.
    #[error("it uses the reserved instruction 0")]
    Reserved,
    /// The instructions write more or fewer bytes than the header promised.
    #[error("its result is not of the size it names")]
    ResultSize,
}

/// What the reading thread and the resolvers share: whether the resolution gave up, and how
/// many bytes are on their way.
pub struct Control {
    gave_up: AtomicBool,
    in_flight: Mutex<u64>,
    room: Condvar,
    /// The bytes that may be on their way.
    limit: u64,
}

impl Control {
    /// Let `limit` bytes be on their way ([`IN_FLIGHT`]).
    pub fn new(limit: u64) -> Self {
        Control {
            gave_up: AtomicBool::new(false),
            in_flight: Mutex::new(0),
            room: Condvar::new(),
            limit,
        }
    }

    fn give_up(&self) {
        self.gave_up.store(true, Ordering::Relaxed);
        self.room.notify_all();
    }

    fn gave_up(&self) -> bool {
        self.gave_up.load(Ordering::Relaxed)
    }

    /// Wait until `bytes` more may be on their way (or the resolution gave up), and count them.
    fn reserve(&self, bytes: u64) {
        let Ok(mut in_flight) = self.in_flight.lock() else {
            return self.give_up();
        };
        while *in_flight > self.limit && !self.gave_up() {
            in_flight = match self.room.wait(in_flight) {
                Ok(guard) => guard,
                Err(_) => return self.give_up(),
            };
        }
        *in_flight += bytes;
    }

    /// `bytes` have been taken off the way.
    fn release(&self, bytes: u64) {
        if let Ok(mut in_flight) = self.in_flight.lock() {
            *in_flight = in_flight.saturating_sub(bytes);
        }
        self.room.notify_one();
    }
}

/// What an entry holds, as far as resolving it is concerned.
#[derive(Clone, Copy)]
enum Holds {
    /// A whole object of this kind.
    Object(Kind),
    /// A delta on the object whose entry starts here.
    Delta { base: u64 },
}

/// An entry handed to its resolver.
struct Job {
    /// Its place among the pack's entries.
    index: u32,
    entry: Place,
    bytes: Bytes,
}

impl Job {
    /// What it costs on its way.
    fn cost(&self) -> u64 {
        JOB_BYTES
            + match &self.bytes {
                Bytes::Inflated(b) | Bytes::Compressed(b) => b.len() as u64,
                Bytes::InFile => 0,
            }
    }
}

/// Where an entry is and what it holds: what building it again from the file needs.
#[derive(Clone, Copy)]
struct Place {
    offset: u64,
    header_size: u16,
    compressed_size: u64,
    decompressed_size: u64,
    holds: Holds,
}

/// What a resolver named: each entry's place among the pack's entries, id and kind.
type Named = Vec<(u32, ObjectId, Kind)>;

/// The resolution of one pack, fed by the thread reading it.
pub struct Resolving<'scope> {
    workers: Workers<'scope>,
    /// What a resolver is made of.
    recipe: Recipe<'scope>,
    /// Each entry's offset and the resolver that owns its family, in pack order.
    offsets: Vec<u64>,
    owners: Vec<u8>,
    /// The resolver the next family goes to.
    next_owner: usize,
    control: &'scope Control,
    /// Why the reading side gave up.
    reason: Option<GaveUp>,
}

/// Who resolves the entries, as [`Resolvers`] chose.
enum Workers<'scope> {
    /// The reading thread, through its one resolver.
    Reader(Box<Resolver<'scope>>),
    /// Threads, each fed through its queue.
    Threads {
        queues: Vec<Sender<Vec<Job>>>,
        /// Each resolver's batch being filled, and its cost.
        batches: Vec<(Vec<Job>, u64)>,
        handles: Vec<ScopedJoinHandle<'scope, Result<Resolver<'scope>, GaveUp>>>,
    },
}

/// What a resolver is made of: where it reads evicted bases back, where its links go, and its
/// bounds.
struct Recipe<'scope> {
    file: &'scope File,
    flush: &'scope (dyn Fn() -> io::Result<()> + Sync),
    collected: &'scope Collected,
    options: Options,
}

impl<'scope> Recipe<'scope> {
    fn resolver(&self) -> Resolver<'scope> {
        Resolver {
            file: self.file,
            flush: self.flush,
            collector: self.collected.collector(),
            cache: Cache::new(self.options.cache_bytes),
            places: Vec::new(),
            named: Vec::new(),
            kept: Vec::new(),
            hand_back_left: match self.options.resolvers {
                Resolvers::Reader => self.options.hand_back_bytes,
                Resolvers::Threads(_) => 0,
            },
            spare: Vec::new(),
            alloc_limit: self.options.alloc_limit.unwrap_or(usize::MAX),
            hash: self.options.hash,
            inflate: gix_zlib::Inflate::default(),
            produced: 0,
            rebuilt: 0,
            rebuild_allowance: self.options.rebuild_allowance,
            by_id: None,
        }
    }
}

impl Workers<'_> {
    /// How many resolvers own families.
    fn count(&self) -> usize {
        match self {
            Workers::Reader(_) => 1,
            Workers::Threads { queues, .. } => queues.len(),
        }
    }
}

impl<'scope> Resolving<'scope> {
    /// Start the resolvers `options` asks for (threads in `scope`). They read evicted bases back
    /// from `file` (the pack being written) after `flush` has written out what is buffered, and
    /// give the links of what they resolve to `collected`, under `control`.
    pub fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        file: &'env File,
        flush: &'env (dyn Fn() -> io::Result<()> + Sync),
        collected: &'env Collected,
        control: &'scope Control,
        options: &Options,
    ) -> Self {
        let recipe = Recipe {
            file,
            flush,
            collected,
            options: *options,
        };
        let workers = match options.resolvers {
            Resolvers::Reader => Workers::Reader(Box::new(recipe.resolver())),
            Resolvers::Threads(threads) => {
                let (mut queues, mut handles) = (Vec::new(), Vec::new());
                for _ in 0..threads.clamp(1, usize::from(u8::MAX)) {
                    let (queue, jobs) = channel();
                    let mut resolver = recipe.resolver();
                    let handle = std::thread::Builder::new()
                        .name("berth.resolve".into())
                        .spawn_scoped(scope, move || {
                            let outcome = resolver.run(&jobs, control);
                            if outcome.is_err() {
                                control.give_up();
                            }
                            outcome.map(|()| resolver)
                        });
                    match handle {
                        Ok(handle) => {
                            queues.push(queue);
                            handles.push(handle);
                        }
                        Err(_) => break,
                    }
                }
                Workers::Threads {
                    batches: queues.iter().map(|_| (Vec::new(), 0)).collect(),
                    queues,
                    handles,
                }
            }
        };
        let mut resolving = Resolving {
            workers,
            recipe,
            offsets: Vec::new(),
            owners: Vec::new(),
            next_owner: 0,
            control,
            reason: None,
        };
        if resolving.workers.count() == 0 {
            resolving.give_up(GaveUp::Lost);
        }
        resolving
    }

    /// Hand `entry`, the next of the pack, with its `bytes` to the resolver of its family.
    pub fn arrived(&mut self, entry: &Entry, bytes: Bytes) {
        let offset = entry.pack_offset;
        let owner = self.owner(entry);
        self.offsets.push(offset);
        self.owners.push(owner.as_ref().map_or(0, |(owner, _)| *owner));
        if self.control.gave_up() {
            return;
        }
        let (owner, holds) = match owner {
            Ok(owner) => owner,
            Err(reason) => return self.give_up(reason),
        };
        let job = Job {
            index: u32::try_from(self.offsets.len() - 1).unwrap_or(u32::MAX),
            entry: Place {
                offset,
                header_size: entry.header_size,
                compressed_size: entry.compressed_size,
                decompressed_size: entry.decompressed_size,
                holds,
            },
            bytes,
        };
        let owner = usize::from(owner);
        let full = match &mut self.workers {
            Workers::Reader(resolver) => {
                if let Err(reason) = resolver.take(job) {
                    self.give_up(reason);
                }
                false
            }
            Workers::Threads { batches, .. } => {
                let (batch, cost) = &mut batches[owner];
                *cost += job.cost();
                batch.push(job);
                batch.len() >= BATCH || *cost >= BATCH_BYTES
            }
        };
        if full {
            self.send(owner);
        }
    }

    /// Hand `owner` (a thread) its batch.
    fn send(&mut self, owner: usize) {
        let Workers::Threads { queues, batches, .. } = &mut self.workers else {
            return;
        };
        let (batch, cost) = std::mem::take(&mut batches[owner]);
        if batch.is_empty() {
            return;
        }
        self.control.reserve(cost);
        let lost = self.control.gave_up() || queues[owner].send(batch).is_err();
        if lost {
            self.give_up(GaveUp::Lost);
        }
    }

    /// The resolver of `entry`'s family (the next in turn for a new family), and what it holds.
    fn owner(&mut self, entry: &Entry) -> Result<(u8, Holds), GaveUp> {
        let kind = match entry.header {
            Header::Commit => Kind::Commit,
            Header::Tree => Kind::Tree,
            Header::Blob => Kind::Blob,
            Header::Tag => Kind::Tag,
            Header::RefDelta { base_id } => {
                // Known only to a resolver on this thread, and only once named: a base named by
                // id may come after its delta, or be one of the repository's.
                self.hand_to_the_reader()?;
                let Workers::Reader(resolver) = &mut self.workers else {
                    return Err(GaveUp::Lost);
                };
                let base = resolver.offset_of(&base_id).ok_or(GaveUp::BaseById)?;
                return Ok((0, Holds::Delta { base }));
            }
            Header::OfsDelta { base_distance } => {
                let base = entry
                    .pack_offset
                    .checked_sub(base_distance)
                    .ok_or(GaveUp::BaseNotAnEntry(0))?;
                let at = self
                    .offsets
                    .binary_search(&base)
                    .map_err(|_| GaveUp::BaseNotAnEntry(base))?;
                return Ok((self.owners[at], Holds::Delta { base }));
            }
        };
        // In turn (choosing the resolver with the least work waiting measured the same).
        let owner = self.next_owner;
        self.next_owner = (owner + 1) % self.workers.count().max(1);
        Ok((u8::try_from(owner).unwrap_or(0), Holds::Object(kind)))
    }

    /// Resolve the rest of the pack on the reading thread, taking over what the threads
    /// resolved so far (their places and names; their caches are left, a base evicted so is
    /// built again from the file): a delta names its base by id, whose place only the thread
    /// that named it knows, and the threads name their objects in their own time.
    fn hand_to_the_reader(&mut self) -> Result<(), GaveUp> {
        if let Workers::Reader(_) = self.workers {
            return Ok(());
        }
        for owner in 0..self.workers.count() {
            self.send(owner);
        }
        let reader = Workers::Reader(Box::new(self.recipe.resolver()));
        let (Workers::Threads { queues, handles, .. }, Workers::Reader(reader)) =
            (std::mem::replace(&mut self.workers, reader), &mut self.workers)
        else {
            return Err(GaveUp::Lost);
        };
        drop(queues);
        for thread in handles {
            let resolver = thread.join().unwrap_or(Err(GaveUp::Lost))?;
            reader.adopt(resolver);
        }
        // In pack order, as the reading thread's own would be.
        reader.places.sort_unstable_by_key(|place| place.offset);
        reader.named.sort_unstable_by_key(|(index, ..)| *index);
        tracing::debug!(objects = reader.named.len(), "resolving on the reading thread from here");
        Ok(())
    }

    fn give_up(&mut self, reason: GaveUp) {
        self.control.give_up();
        self.reason.get_or_insert(reason);
    }

    /// Wait for the resolvers: each entry's id and kind in pack order, with the objects the
    /// reading thread handed back whole ([`Options::hand_back_bytes`]), or why the resolution
    /// gave up.
    pub fn finish(mut self) -> Result<Resolved, GaveUp> {
        for owner in 0..self.workers.count() {
            self.send(owner);
        }
        let Resolving {
            workers,
            offsets,
            reason,
            ..
        } = self;
        let mut kept = Vec::new();
        let outcome = match workers {
            Workers::Reader(resolver) => {
                let resolver = *resolver;
                kept = resolver.kept;
                Ok(vec![resolver.named])
            }
            Workers::Threads { queues, handles, .. } => {
                drop(queues);
                let mut outcome = Ok(Vec::new());
                for thread in handles {
                    let named = thread
                        .join()
                        .unwrap_or(Err(GaveUp::Lost))
                        .map(|resolver| resolver.named);
                    tracing::debug!(named = named.as_ref().map(Vec::len).ok(), "a resolver is done");
                    outcome = match (outcome, named) {
                        (Ok(mut all), Ok(named)) => {
                            all.push(named);
                            Ok(all)
                        }
                        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
                    };
                }
                outcome
            }
        };
        if let Some(reason) = reason {
            return Err(reason);
        }
        let mut by_index: Vec<Option<(ObjectId, Kind)>> = vec![None; offsets.len()];
        for (index, id, kind) in outcome?.into_iter().flatten() {
            let slot = by_index.get_mut(index as usize).ok_or(GaveUp::Lost)?;
            *slot = Some((id, kind));
        }
        let named = by_index
            .into_iter()
            .map(|named| named.ok_or(GaveUp::Lost))
            .collect::<Result<_, _>>()?;
        Ok(Resolved { named, kept })
    }
}

/// One resolver (a thread's, or the reading thread's): the families it owns, their places,
/// and the objects it keeps.
struct Resolver<'env> {
    file: &'env File,
    flush: &'env (dyn Fn() -> io::Result<()> + Sync),
    collector: Collector<'env>,
    cache: Cache,
    /// The places of the entries it was handed, in pack order.
    places: Vec<Place>,
    named: Named,
    /// Buffers to build the next objects in.
    spare: Vec<Vec<u8>>,
    alloc_limit: usize,
    hash: gix_hash::Kind,
    inflate: gix_zlib::Inflate,
    /// Bytes inflated and built for its own entries, and for evicted bases built again.
    produced: u64,
    rebuilt: u64,
    rebuild_allowance: u64,
    /// The offset of each object named so far, by id: made when a delta first names its base
    /// by id, on the reading thread (a resolver thread cannot know which thread named a base).
    by_id: Option<HashMap<ObjectId, u64>>,
    /// The objects handed back whole ([`Options::hand_back_bytes`]), and the bytes left for more.
    kept: Vec<KeptObject>,
    hand_back_left: usize,
}

impl Resolver<'_> {
    /// Resolve the batches that come through `batches` (a thread's work).
    fn run(&mut self, batches: &Receiver<Vec<Job>>, control: &Control) -> Result<(), GaveUp> {
        while let Ok(batch) = batches.recv() {
            if control.gave_up() {
                return Ok(());
            }
            let cost = batch.iter().map(Job::cost).sum();
            for job in batch {
                self.take(job)?;
            }
            // Released once resolved: a batch being resolved is still held.
            control.release(cost);
        }
        Ok(())
    }

    /// Resolve `job`'s entry, name it, take its links and keep it for the deltas to come.
    fn take(&mut self, job: Job) -> Result<(), GaveUp> {
        self.places.push(job.entry);
        let (kind, data) = self.resolve(job.entry, job.bytes)?;
        let id = gix_object::compute_hash(self.hash, kind, &data).map_err(|_| GaveUp::Hash)?;
        if data.len() <= self.hand_back_left {
            self.hand_back_left -= data.len();
            self.kept.push(KeptObject {
                offset: job.entry.offset,
                id,
                kind,
                data: data.clone(),
            });
        }
        self.collector.object(kind, &data, self.hash);
        self.named.push((job.index, id, kind));
        if let Some(by_id) = &mut self.by_id {
            by_id.insert(id, job.entry.offset);
        }
        self.keep(job.entry.offset, kind, data);
        Ok(())
    }

    /// Take over what `other` resolved: its places and names (its links went to the same
    /// collection), and what it spent.
    fn adopt(&mut self, other: Resolver<'_>) {
        self.places.extend_from_slice(&other.places);
        self.named.extend_from_slice(&other.named);
        self.produced += other.produced;
        self.rebuilt += other.rebuilt;
    }

    /// Where the object `id`, named already, starts.
    fn offset_of(&mut self, id: &ObjectId) -> Option<u64> {
        let (places, named) = (&self.places, &self.named);
        let by_id = self.by_id.get_or_insert_with(|| {
            // Named in the order handed, each in one go: the n-th named is the n-th place.
            (named.iter().zip(places))
                .map(|((_, id, _), place)| (*id, place.offset))
                .collect()
        });
        by_id.get(id).copied()
    }

    /// Put an object in the cache, keeping what it evicts to build the next ones in.
    fn keep(&mut self, offset: u64, kind: Kind, data: Vec<u8>) {
        for evicted in self.cache.put(offset, kind, data) {
            self.spare(evicted);
        }
    }

    fn spare(&mut self, buffer: Vec<u8>) {
        if self.spare.len() < SPARE && buffer.capacity() <= SPARE_CAPACITY {
            self.spare.push(buffer);
        }
    }

    /// An empty buffer for `size` bytes, a spare one if one is large enough.
    fn buffer(&mut self, size: usize) -> Vec<u8> {
        let mut buffer = match self.spare.iter().position(|b| b.capacity() >= size) {
            Some(i) => self.spare.swap_remove(i),
            None => self.spare.pop().unwrap_or_default(),
        };
        buffer.clear();
        buffer.reserve(size);
        buffer
    }

    /// The kind and content of the object at `place`, whose bytes are `bytes`.
    fn resolve(&mut self, place: Place, bytes: Bytes) -> Result<(Kind, Vec<u8>), GaveUp> {
        let inflated = match bytes {
            // The reader keeps up to its own bound, not the repository's.
            Bytes::Inflated(inflated) if inflated.len() > self.alloc_limit => {
                return Err(GaveUp::TooLarge(place.offset));
            }
            Bytes::Inflated(inflated) => inflated,
            Bytes::Compressed(compressed) => self.inflate(place, &compressed)?,
            Bytes::InFile => {
                (self.flush)().map_err(GaveUp::Read)?;
                self.read_back(place)?
            }
        };
        self.produced += inflated.len() as u64;
        if let Holds::Delta { base } = place.holds {
            self.rebuild(base)?;
        }
        let (kind, data) = self.build(place, inflated)?;
        if let Holds::Delta { .. } = place.holds {
            self.produced += data.len() as u64;
        }
        Ok((kind, data))
    }

    /// The object at `place`, which inflates to `inflated`: that, or the delta applied to its
    /// base (in the cache).
    fn build(&mut self, place: Place, inflated: Vec<u8>) -> Result<(Kind, Vec<u8>), GaveUp> {
        match place.holds {
            Holds::Object(kind) => Ok((kind, inflated)),
            Holds::Delta { base } => {
                let mut result = self.buffer(0);
                let (kind, base) = self.cache.get(base).ok_or(GaveUp::BaseNotAnEntry(base))?;
                apply(base, &inflated, self.alloc_limit, &mut result)
                    .map_err(|reason| GaveUp::Delta { offset: place.offset, reason })?;
                self.spare(inflated);
                Ok((kind, result))
            }
        }
    }

    /// Make sure the object at `offset` (an entry this resolver was handed) is in the cache,
    /// building it and the evicted part of its chain again from the file.
    fn rebuild(&mut self, offset: u64) -> Result<(), GaveUp> {
        let mut chain = Vec::new();
        let mut at = offset;
        while !self.cache.contains(at) {
            let place = self.place(at)?;
            chain.push(place);
            match place.holds {
                Holds::Object(_) => break,
                Holds::Delta { base } => at = base,
            }
        }
        if chain.is_empty() {
            return Ok(());
        }
        (self.flush)().map_err(GaveUp::Read)?;
        for place in chain.into_iter().rev() {
            let inflated = self.read_back(place)?;
            self.rebuilt += inflated.len() as u64 + 64;
            let (kind, data) = self.build(place, inflated)?;
            if let Holds::Delta { .. } = place.holds {
                self.rebuilt += data.len() as u64;
            }
            self.keep(place.offset, kind, data);
            if self.rebuilt > self.produced.saturating_add(self.rebuild_allowance) {
                return Err(GaveUp::Rebuilding(self.rebuilt));
            }
        }
        Ok(())
    }

    /// The entry at `place` read back from the file and inflated (what it has is flushed).
    fn read_back(&mut self, place: Place) -> Result<Vec<u8>, GaveUp> {
        let start = place.offset + u64::from(place.header_size);
        let len = usize::try_from(place.compressed_size)
            .ok()
            .filter(|len| *len <= self.alloc_limit)
            .ok_or(GaveUp::TooLarge(place.offset))?;
        let mut compressed = vec![0; len];
        self.file
            .read_exact_at(&mut compressed, start)
            .map_err(GaveUp::Read)?;
        self.inflate(place, &compressed)
    }

    /// The place of the entry at `offset`, one this resolver was handed.
    fn place(&self, offset: u64) -> Result<Place, GaveUp> {
        self.places
            .binary_search_by_key(&offset, |p| p.offset)
            .map(|i| self.places[i])
            .map_err(|_| GaveUp::BaseNotAnEntry(offset))
    }

    /// `compressed` inflated to exactly the size `place`'s header says.
    fn inflate(&mut self, place: Place, compressed: &[u8]) -> Result<Vec<u8>, GaveUp> {
        let size = usize::try_from(place.decompressed_size)
            .ok()
            .filter(|size| *size <= self.alloc_limit)
            .ok_or(GaveUp::TooLarge(place.offset))?;
        let mut out = self.buffer(size);
        out.resize(size, 0);
        self.inflate.reset();
        match self.inflate.once(compressed, &mut out) {
            Ok((gix_zlib::Status::StreamEnd, _, written)) if written == size => Ok(out),
            _ => Err(GaveUp::Inflate(place.offset)),
        }
    }
}

/// The resolved objects a resolver keeps, the least lately used evicted first once they hold
/// more than their bound (the newest is kept whatever its size).
struct Cache {
    objects: HashMap<u64, Cached>,
    /// Offsets by when they were last used.
    by_use: BTreeMap<u64, u64>,
    clock: u64,
    bytes: usize,
    limit: usize,
}

struct Cached {
    used: u64,
    kind: Kind,
    data: Vec<u8>,
}

impl Cache {
    fn new(limit: usize) -> Self {
        Cache {
            objects: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
            bytes: 0,
            limit,
        }
    }

    fn contains(&self, offset: u64) -> bool {
        self.objects.contains_key(&offset)
    }

    fn get(&mut self, offset: u64) -> Option<(Kind, &[u8])> {
        let cached = self.objects.get_mut(&offset)?;
        self.clock += 1;
        self.by_use.remove(&cached.used);
        cached.used = self.clock;
        self.by_use.insert(self.clock, offset);
        Some((cached.kind, &cached.data))
    }

    /// Keep `data`, giving back what it evicts.
    fn put(&mut self, offset: u64, kind: Kind, data: Vec<u8>) -> Vec<Vec<u8>> {
        let mut evicted = Vec::new();
        self.clock += 1;
        self.bytes += data.len();
        let cached = Cached {
            used: self.clock,
            kind,
            data,
        };
        if let Some(old) = self.objects.insert(offset, cached) {
            self.by_use.remove(&old.used);
            self.bytes -= old.data.len();
            evicted.push(old.data);
        }
        self.by_use.insert(self.clock, offset);
        while self.bytes > self.limit && self.objects.len() > 1 {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some(old) = self.objects.remove(&oldest) {
                self.bytes -= old.data.len();
                evicted.push(old.data);
            }
        }
        evicted
    }
}

/// A size of a delta's header (git's `get_delta_hdr_size`), and the rest of the delta.
pub(super) fn delta_size(delta: &[u8]) -> Result<(u64, &[u8]), BadDelta> {
    let mut size = 0u64;
    for (i, byte) in delta.iter().enumerate() {
        let shift = 7 * i;
        if shift >= 64 {
            break;
        }
        size |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((size, &delta[i + 1..]));
        }
    }
    Err(BadDelta::TruncatedSize)
}

/// Build in `out` the object `delta` builds on `base` (git's `patch_delta`), if it is at most
/// `alloc_limit` bytes.
fn apply(base: &[u8], delta: &[u8], alloc_limit: usize, out: &mut Vec<u8>) -> Result<(), BadDelta> {
    let (base_size, delta) = delta_size(delta)?;
    if base_size != base.len() as u64 {
        return Err(BadDelta::BaseSize);
    }
    let (result_size, mut delta) = delta_size(delta)?;
    let result_size = usize::try_from(result_size)
        .ok()
        .filter(|size| *size <= alloc_limit)
        .ok_or(BadDelta::TooLarge)?;
    out.clear();
    out.reserve(result_size);
    while let Some((&op, rest)) = delta.split_first() {
        delta = rest;
        if op & 0x80 != 0 {
            let (mut offset, mut size) = (0usize, 0usize);
            for (bit, shift) in [(0x01, 0), (0x02, 8), (0x04, 16), (0x08, 24)] {
                if op & bit != 0 {
                    let (&byte, rest) = delta.split_first().ok_or(BadDelta::Truncated)?;
                    offset |= usize::from(byte) << shift;
                    delta = rest;
                }
            }
            for (bit, shift) in [(0x10, 0), (0x20, 8), (0x40, 16)] {
                if op & bit != 0 {
                    let (&byte, rest) = delta.split_first().ok_or(BadDelta::Truncated)?;
                    size |= usize::from(byte) << shift;
                    delta = rest;
                }
            }
            if size == 0 {
                size = 0x10000;
            }
            let copied = offset
                .checked_add(size)
                .and_then(|end| base.get(offset..end))
                .ok_or(BadDelta::CopyOutOfBase)?;
            if copied.len() > result_size - out.len() {
                return Err(BadDelta::ResultSize);
            }
            out.extend_from_slice(copied);
        } else if op != 0 {
            let size = usize::from(op);
            let inserted = delta.get(..size).ok_or(BadDelta::Truncated)?;
            if size > result_size - out.len() {
                return Err(BadDelta::ResultSize);
            }
            out.extend_from_slice(inserted);
            delta = &delta[size..];
        } else {
            return Err(BadDelta::Reserved);
        }
    }
    if out.len() != result_size {
        return Err(BadDelta::ResultSize);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(base: &[u8], delta: &[u8], alloc_limit: usize) -> Result<Vec<u8>, BadDelta> {
        let mut out = b"left over".to_vec();
        apply(base, delta, alloc_limit, &mut out).map(|()| out)
    }

    /// A delta's header: `base` and `result` sizes in git's variable-length encoding.
    fn header(base: usize, result: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for mut size in [base, result] {
            loop {
                let byte = (size & 0x7f) as u8;
                size >>= 7;
                if size == 0 {
                    out.push(byte);
                    break;
                }
                out.push(byte | 0x80);
            }
        }
        out
    }

    #[test]
    fn a_delta_copies_from_its_base_and_inserts_its_own_bytes() {
        let base = vec![b'x'; 200];
        let mut delta = header(200, 0x10000 + 3 + 130);
        // Copy 130 bytes from offset 70 (one offset byte, one size byte)...
        delta.extend([0x80 | 0x01 | 0x10, 70, 130]);
        // ... insert three bytes ...
        delta.extend([3, b'a', b'b', b'c']);
        // ... and copy with size 0, which means 0x10000: more than the base holds.
        let mut too_far = delta.clone();
        too_far.extend([0x80]);
        assert_eq!(applied(&base, &too_far, usize::MAX), Err(BadDelta::CopyOutOfBase));
        let short = header(200, 133);
        let mut exact = short.clone();
        exact.extend([0x80 | 0x01 | 0x10, 70, 130, 3, b'a', b'b', b'c']);
        let out = applied(&base, &exact, usize::MAX).unwrap();
        assert_eq!(out.len(), 133);
        assert_eq!(&out[130..], b"abc");
        assert_eq!(applied(&base, &exact, 132), Err(BadDelta::TooLarge));
    }

    #[test]
    fn broken_deltas_are_refused_as_git_refuses_them() {
        let base = vec![b'x'; 10];
        let cases: [(Vec<u8>, BadDelta); 7] = [
            (vec![0x80], BadDelta::TruncatedSize),
            ([header(9, 1), vec![1, b'a']].concat(), BadDelta::BaseSize),
            ([header(10, 1), vec![0]].concat(), BadDelta::Reserved),
            ([header(10, 2), vec![2, b'a']].concat(), BadDelta::Truncated),
            ([header(10, 1), vec![0x80 | 0x01]].concat(), BadDelta::Truncated),
            ([header(10, 1), vec![2, b'a', b'b']].concat(), BadDelta::ResultSize),
            ([header(10, 3), vec![0x80 | 0x01 | 0x10, 8, 3]].concat(), BadDelta::CopyOutOfBase),
        ];
        for (delta, want) in cases {
            assert_eq!(applied(&base, &delta, usize::MAX), Err(want), "{delta:?}");
        }
        assert_eq!(
            applied(&base, &[header(10, 2), vec![1, b'a']].concat(), usize::MAX),
            Err(BadDelta::ResultSize)
        );
    }

    #[test]
    fn the_cache_keeps_what_was_used_last_within_its_bound_and_always_the_newest() {
        let mut cache = Cache::new(10);
        let _ = cache.put(1, Kind::Blob, vec![0; 4]);
        let _ = cache.put(2, Kind::Blob, vec![0; 4]);
        assert!(cache.get(1).is_some());
        let _ = cache.put(3, Kind::Tree, vec![0; 4]);
        assert!(cache.contains(1) && cache.contains(3) && !cache.contains(2));
        let _ = cache.put(4, Kind::Blob, vec![0; 100]);
        assert!(cache.contains(4) && !cache.contains(1) && !cache.contains(3));
        assert_eq!(cache.bytes, 100);
        let _ = cache.put(5, Kind::Blob, vec![0; 1]);
        assert!(cache.contains(5) && !cache.contains(4));
        assert_eq!(cache.get(5).map(|(kind, data)| (kind, data.len())), Some((Kind::Blob, 1)));
    }
}
