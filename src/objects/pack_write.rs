//! Writing a received pack and its index into a directory.
//!
//! What gix-pack's `Bundle::write_to_directory` does — the pack streamed to a temporary file
//! (a thin pack completed with the bases it lacks), indexed with its deltas resolved in
//! parallel, then named `pack-<checksum>.{keep,pack,idx}` — with four differences:
//! - The objects are named while the pack arrives ([`pack_resolve`]), from what reading it
//!   inflated ([`pack_read`]), on the cores the reading leaves idle (or, for a pack one thread
//!   is to resolve, on the reading thread itself). gix-pack names them once the whole pack is
//!   there, inflating every entry a second time: a whole-history push of git.git spent a third
//!   of its time reading on one core first.
//! - Where that gives up, the deltas are resolved
//!   after the pack has arrived, by gix-pack's traverse of its delta tree, through a
//!   [`PackMap`], which gives each page of the pack back once every entry on it has been read.
//!   Through the bundle's own mapping the whole pack stayed resident while the index was built
//!   (a whole-history push of git.git held its 303 MiB on top of the index). Every byte
//!   between the pack's header and its trailer belongs to exactly one entry, and the
//!   resolution reads each entry once, so the bytes a page has to give are known up front.
//! - Each object, as it is resolved to be named, also gives its links to a
//!   [`pack_links::Collector`]: the connectivity check needs them, and decoding the pack's
//!   commits and trees a second time for them cost a whole-history push of git.git 1.4 s.
//!   gix-pack's index writer has no place for that, so the index (version 2, git's
//!   `pack-format`) is written here.
//! - A pack to be unpacked gets back, up to a bound, the objects as the reading thread named
//!   them ([`Written::kept`]), for its loose objects to be written from.
//!
//! A pack whose deltas name in-pack bases by id (git sends offsets to a server that advertises
//! `ofs-delta`) is resolved as it arrives by the reading thread from its first such delta on
//! ([`pack_resolve`]). Where a base comes after a delta on it, the pack cannot have its delta
//! tree built before its objects are named: it is indexed by gix-pack's writer, reading the
//! finished file again, and its links are not collected.

use std::cell::Cell;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use gix_error::{OptionExt, ResultExt, message};
use gix_hash::ObjectId;
use gix_pack::data::entry::Header;
use gix_pack::data::input::{
    BytesToEntriesIter, EntriesToBytesIter, Entry, EntryDataMode, LookupRefDeltaObjectsIter, Mode,
};

use crate::objects::pack_links::{self, Outside};
use crate::objects::pack_map::{PackMap, Reader};
use crate::objects::pack_read::{self, Bytes, Counted};
use crate::objects::pack_resolve::{self, Resolvers, Resolving};

/// What was written: the pack and its index under their final names (`None` for a pack of no
/// objects). A new pack gets a `.keep` beside it, which guards it until refs point into it
/// ([`crate::objects::ingest::Quarantine::migrate`] moves it first and hands it back).
#[derive(Debug)]
pub struct Written {
    /// `pack-<checksum>.pack`.
    pub data_path: Option<PathBuf>,
    /// `pack-<checksum>.idx`.
    pub index_path: Option<PathBuf>,
    /// How many of the pack's entries are deltas (git's `Resolving deltas` count).
    pub deltas: u32,
    /// What the pack's commits, trees and tags link to outside it, taken as they were
    /// resolved; `None` when they were not (a pack with deltas on in-pack bases named by id).
    pub links: Option<Outside>,
    /// How its objects were named.
    pub resolution: Resolution,
    /// The objects the reading thread resolved and kept whole, in pack order (see
    /// [`write_to_directory`]'s `hand_back_bytes`); none when the pack was resolved otherwise.
    pub kept: Vec<pack_resolve::KeptObject>,
}

/// How a pack's objects were named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// As the pack arrived ([`pack_resolve`]).
    AsItArrived,
    /// After it had arrived, by gix-pack's traverse of its delta tree: the resolution as it
    /// arrived gave up.
    AfterItArrived,
    /// By gix-pack's index writer, reading the finished pack again: a delta names an in-pack
    /// base by id, and the pack was not resolved as it arrived (a base came after a delta on
    /// it, or the resolution gave up for another reason).
    ById,
}

/// The bounds of reading and resolving a pack (the tests turn them down).
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// [`pack_read::KEEP`].
    keep: u64,
    /// [`pack_resolve::CACHE_BYTES`].
    cache_bytes: usize,
    /// [`pack_resolve::REBUILD_ALLOWANCE`].
    rebuild_allowance: u64,
    /// [`pack_resolve::Options::hand_back_bytes`].
    hand_back_bytes: usize,
}

const BOUNDS: Bounds = Bounds {
    keep: pack_read::KEEP,
    cache_bytes: pack_resolve::CACHE_BYTES,
    rebuild_allowance: pack_resolve::REBUILD_ALLOWANCE,
    hand_back_bytes: 0,
};

/// The temporary pack file, written by the entry iterators and read back by the thin-pack
/// writer (which rewrites the header's count) and the resolver.
type Shared = Arc<Mutex<BufWriter<tempfile::NamedTempFile>>>;

fn locked(file: &Shared) -> io::Result<std::sync::MutexGuard<'_, BufWriter<tempfile::NamedTempFile>>> {
    file.lock()
        .map_err(|_| io::Error::other("the pack file's writer panicked"))
}

/// One object of the pack, for its index: where it is, its entry's CRC-32 and (once
/// resolved) its id.
struct Object {
    offset: u64,
    crc32: u32,
    id: ObjectId,
    kind: gix_object::Kind,
}

/// Why [`write_to_directory`] failed, and where: the place in the received pack of the entry
/// that could not be read, if it was one (git's `pack has bad object at offset <n>`).
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct WriteError {
    /// Where the broken entry starts in the received pack.
    pub entry_at: Option<u64>,
    /// What gix-pack or the file system said.
    pub source: gix_error::Error,
}

/// Read `pack` into `directory` as a pack and its index. Thin-pack bases are looked up in
/// `thin_lookup` (none: a thin pack fails); `options` are gix-pack's. Up to `hand_back_bytes` of
/// the objects the reading thread resolves are handed back whole ([`Written::kept`]; 0 for
/// none).
pub fn write_to_directory(
    pack: &mut dyn BufRead,
    directory: &Path,
    thin_lookup: Option<impl gix_object::Find>,
    object_hash: gix_hash::Kind,
    options: gix_pack::bundle::write::Options,
    hand_back_bytes: usize,
) -> Result<Written, WriteError> {
    let entry_at = Cell::new(None);
    let bounds = Bounds {
        hand_back_bytes,
        ..BOUNDS
    };
    write(pack, directory, thin_lookup, object_hash, options, bounds, &entry_at).map_err(|source| {
        WriteError {
            entry_at: entry_at.get(),
            source,
        }
    })
}

/// [`write_to_directory`], telling `entry_at` where a broken entry starts.
fn write(
    pack: &mut dyn BufRead,
    directory: &Path,
    thin_lookup: Option<impl gix_object::Find>,
    object_hash: gix_hash::Kind,
    options: gix_pack::bundle::write::Options,
    bounds: Bounds,
    entry_at: &Cell<Option<u64>>,
) -> gix_error::Result<Written> {
    let temp = tempfile::NamedTempFile::new_in(directory)
        .or_raise(|| message("Could not create temporary pack file"))?;
    let temp_path = temp.path().to_owned();
    // Resolvers started as the pack arrives (the reading thread itself where one thread is to
    // resolve it: a pack that is to be unpacked), reading evicted bases back through their own
    // handle.
    let resolvers = match options.thread_limit {
        Some(1) => Resolvers::Reader,
        Some(n) if n > 1 => Resolvers::Threads(n),
        _ => Resolvers::Threads(std::thread::available_parallelism().map_or(1, usize::from)),
    };
    let readback = temp.as_file().try_clone().ok();
    let shared: Shared = Arc::new(Mutex::new(BufWriter::with_capacity(64 * 1024, temp)));
    // In a thin pack, where the last entry read whole ends in the received pack (the copy's
    // offsets move once a base is put in, and the writer reads one entry ahead).
    let good_end = Rc::new(Cell::new(0u64));
    let (mut entries, pack_version): (Box<dyn Iterator<Item = EntryAndBytes> + '_>, _) =
        match thin_lookup {
            Some(lookup) => {
                let consumed = Rc::new(Cell::new(0u64));
                let read = BytesToEntriesIter::new_from_header(
                    Counted {
                        inner: BufReader::new(pack),
                        consumed: consumed.clone(),
                    },
                    options.iteration_mode,
                    EntryDataMode::KeepAndCrc32,
                    object_hash,
                )?;
                let version = read.version();
                good_end.set(consumed.get());
                let marked = Marked {
                    inner: read,
                    consumed,
                    good_end: good_end.clone(),
                };
                let entries = LookupRefDeltaObjectsIter::new(marked, lookup, options.compression);
                let entries =
                    EntriesToBytesIter::new(entries, SharedFile(shared.clone()), version, object_hash)
                        .map(|entry| {
                            entry.map(|mut entry| {
                                let bytes = entry.compressed.take().map_or(Bytes::InFile, Bytes::Compressed);
                                (entry, bytes)
                            })
                        });
                (Box::new(entries), version)
            }
            None => {
                let copied = PassThrough {
                    reader: pack,
                    writer: shared.clone(),
                };
                if readback.is_some() && options.iteration_mode == Mode::Verify {
                    // Each entry with what it inflates to, for the resolvers.
                    let copy = shared.clone();
                    let path = temp_path.clone();
                    let entries = pack_read::Entries::new(
                        copied,
                        move || {
                            locked(&copy)?.flush()?;
                            std::fs::File::open(&path)
                        },
                        object_hash,
                        // Nothing over the repository's limit is kept (the resolvers refuse it).
                        options
                            .alloc_limit_bytes
                            .map_or(bounds.keep, |limit| bounds.keep.min(limit as u64)),
                    )?;
                    let version = entries.version();
                    (Box::new(entries), version)
                } else {
                    // Reads go through `read`, so that every byte consumed is copied.
                    let entries = BytesToEntriesIter::new_from_header(
                        BufReader::new(copied),
                        options.iteration_mode,
                        EntryDataMode::Crc32,
                        object_hash,
                    )?;
                    let version = entries.version();
                    (Box::new(entries.map(|entry| entry.map(|entry| (entry, Bytes::InFile)))), version)
                }
            }
        };

    // The stream: each entry's place and checksum, as it is copied to the file, and each entry
    // handed on to be resolved as it comes (unless its copy cannot be read back).
    let expected = entries.size_hint().0;
    let collected = pack_links::Collected::for_pack(expected);
    let for_objects = |bound: u64| {
        (expected as u64)
            .saturating_mul(pack_resolve::BYTES_AN_OBJECT)
            .clamp(1 << 20, bound.max(1 << 20))
            .min(bound)
    };
    let control = pack_resolve::Control::new(for_objects(pack_resolve::IN_FLIGHT));
    let flush = || locked(&shared).and_then(|mut file| file.flush());
    let (streamed, named) = std::thread::scope(|scope| {
        let mut resolving = readback.as_ref().map(|file| {
            Resolving::start(
                scope,
                file,
                &flush,
                &collected,
                &control,
                &pack_resolve::Options {
                    resolvers,
                    cache_bytes: usize::try_from(for_objects(bounds.cache_bytes as u64))
                        .unwrap_or(bounds.cache_bytes),
                    rebuild_allowance: bounds.rebuild_allowance,
                    alloc_limit: options.alloc_limit_bytes,
                    hash: object_hash,
                    hand_back_bytes: bounds.hand_back_bytes,
                },
            )
        });
        let streamed = {
            let _stream = tracing::info_span!("stream").entered();
            stream(&mut entries, &good_end, entry_at, resolving.as_mut())
        };
        drop(entries);
        let _wait = tracing::info_span!("resolve_wait").entered();
        (streamed, resolving.map(Resolving::finish))
    });
    let Streamed {
        objects,
        deltas,
        by_id,
        end,
        trailer,
    } = streamed?;
    if objects.is_empty() {
        return Ok(Written {
            data_path: None,
            index_path: None,
            deltas,
            links: None,
            resolution: Resolution::AsItArrived,
            kept: Vec::new(),
        });
    }
    u32::try_from(objects.len()).or_raise(|| {
        message!("Only u32::MAX objects can be stored in a pack, found {}", objects.len())
    })?;
    let pack_hash =
        trailer.ok_or_raise(|| message("The pack's last entry did not carry its checksum"))?;
    locked(&shared)
        .and_then(|mut file| file.flush())
        .or_raise(|| message("Could not write the pack file"))?;

    let index_temp = tempfile::NamedTempFile::new_in(directory)
        .or_raise(|| message("Could not create temporary index file"))?;
    let mut index_out = BufWriter::with_capacity(64 * 1024, index_temp);
    let mut kept = Vec::new();
    let named = match named {
        Some(Ok(resolved)) => {
            kept = resolved.kept;
            Some(resolved.named)
        }
        Some(Err(reason)) => {
            tracing::debug!(%reason, "the pack is resolved again once arrived");
            None
        }
        None => None,
    };
    let (links, resolution) = if by_id && named.is_none() {
        drop(objects);
        index_by_gix(&temp_path, &mut index_out, object_hash, &options, pack_version)?;
        (None, Resolution::ById)
    } else {
        let (objects, links, resolution) = match named {
            Some(named) => {
                let (objects, links) = in_id_order(objects, named, collected);
                (objects, links, Resolution::AsItArrived)
            }
            None => {
                let (objects, links) = resolve(&temp_path, objects, end, object_hash, &options)?;
                (objects, links, Resolution::AfterItArrived)
            }
        };
        tracing::info_span!("write_index")
            .in_scope(|| write_index(&mut index_out, &objects, &pack_hash, object_hash))
            .or_raise(|| message("Could not write pack index"))?;
        (Some(links), resolution)
    };

    let data_path = directory.join(format!("pack-{}.pack", pack_hash.to_hex()));
    let index_path = data_path.with_extension("idx");
    // When the same pack is there, its content is the same.
    if !data_path.is_file() {
        std::fs::write(data_path.with_extension("keep"), b"")
            .or_raise(|| message("Could not create pack keep file"))?;
        let file = Arc::try_unwrap(shared)
            .map_err(|_| io::Error::other("the pack file is still shared"))
            .and_then(|m| m.into_inner().map_err(|_| io::Error::other("poisoned")))
            .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
            .or_raise(|| message("Could not finish the pack file"))?;
        file.persist(&data_path)
            .map_err(|e| e.error)
            .or_raise(|| message("Could not persist pack file"))?;
    }
    if !index_path.is_file() {
        index_out
            .into_inner()
            .map_err(|e| e.into_error())
            .or_raise(|| message("Could not write pack index"))?
            .persist(&index_path)
            .map_err(|e| e.error)
            .or_raise(|| message("Could not persist pack index"))?;
    }
    Ok(Written {
        data_path: Some(data_path),
        index_path: Some(index_path),
        deltas,
        links,
        resolution,
        kept,
    })
}

/// An entry of the pack as read, with its bytes for the resolvers.
type EntryAndBytes = gix_error::Result<(Entry, Bytes)>;

/// What reading the pack found: each entry's offset and CRC-32 in pack order, how many are
/// deltas and whether one names its base by id, where the last entry ends, and the pack's
/// checksum.
struct Streamed {
    objects: Vec<(u64, u32)>,
    deltas: u32,
    by_id: bool,
    end: u64,
    trailer: Option<ObjectId>,
}

/// Read every entry of `entries`, handing each to `resolving`; `entry_at` is told where a
/// broken one starts.
fn stream(
    entries: &mut dyn Iterator<Item = EntryAndBytes>,
    good_end: &Cell<u64>,
    entry_at: &Cell<Option<u64>>,
    mut resolving: Option<&mut Resolving<'_>>,
) -> gix_error::Result<Streamed> {
    // The header's count is the sender's word: room for at most 65,536 entries up front (a
    // header counting 1.3 billion objects had 21 GB reserved for them; found by fuzzing).
    let mut objects: Vec<(u64, u32)> = Vec::with_capacity(entries.size_hint().0.min(1 << 16));
    let (mut deltas, mut by_id, mut end, mut trailer) = (0u32, false, 0u64, None);
    // Where a broken entry starts in the received pack, for git's `pack has bad object at
    // offset <n>`: the end of the last good one (in a thin pack, as its reader counted).
    for entry in entries {
        let at = match good_end.get() {
            0 if objects.is_empty() => 12,
            0 => end,
            n => n,
        };
        let (entry, bytes) = entry.inspect_err(|_| entry_at.set(Some(at)))?;
        match entry.header {
            Header::RefDelta { .. } => (deltas, by_id) = (deltas + 1, true),
            Header::OfsDelta { base_distance } => {
                // Refused as the entry arrives, in gix-pack's words (`ingest` knows them).
                Header::verified_base_pack_offset(entry.pack_offset, base_distance)
                    .ok_or_raise(|| {
                        message!(
                            "{base_distance} is not a valid offset for pack offset {}",
                            entry.pack_offset
                        )
                    })?;
                deltas += 1;
            }
            _ => {}
        }
        let crc32 = entry
            .crc32
            .ok_or_raise(|| message("the entry's CRC-32 was not computed"))?;
        objects.push((entry.pack_offset, crc32));
        end = entry.pack_offset + u64::from(entry.header_size) + entry.compressed_size;
        trailer = entry.trailer.or(trailer);
        if let Some(resolving) = resolving.as_deref_mut() {
            resolving.arrived(&entry, bytes);
        }
    }
    Ok(Streamed {
        objects,
        deltas,
        by_id,
        end,
        trailer,
    })
}

/// The pack's objects (each entry's offset and CRC-32 in `entries`, its id and kind in
/// `named`, both in pack order) in id order, and what the links `collected` took name outside
/// the pack.
fn in_id_order(
    entries: Vec<(u64, u32)>,
    named: Vec<(ObjectId, gix_object::Kind)>,
    collected: pack_links::Collected,
) -> (Vec<Object>, Outside) {
    let _in_order = tracing::info_span!("name_order").entered();
    let mut objects: Vec<Object> = (entries.into_iter().zip(named))
        .map(|((offset, crc32), (id, kind))| Object {
            offset,
            crc32,
            id,
            kind,
        })
        .collect();
    objects.sort_unstable_by(|a, b| pack_links::by_id(&a.id, &b.id));
    let links = collected.outside(objects.iter().map(|o| (o.id, o.kind)));
    (objects, links)
}

/// Resolve every object of the pack at `path` (each entry's offset and CRC-32 in `entries`,
/// the last ending at `end`) to name it, taking the links of its commits, trees and tags on the
/// way; the objects in id order, and what their links name outside the pack.
fn resolve(
    path: &Path,
    entries: Vec<(u64, u32)>,
    end: u64,
    hash: gix_hash::Kind,
    options: &gix_pack::bundle::write::Options,
) -> gix_error::Result<(Vec<Object>, Outside)> {
    let interrupt = AtomicBool::new(false);
    let objects = entries.len();
    let delta_tree = tracing::info_span!("delta_tree").entered();
    let tree = gix_pack::cache::delta::Tree::from_offsets_in_pack(
        path,
        entries.into_iter().map(|(offset, crc32)| Object {
            offset,
            crc32,
            id: hash.null(),
            kind: gix_object::Kind::Blob,
        }),
        &|object: &Object| object.offset,
        // Only offsets: a base named by id went to `index_by_gix`.
        &|_| Ok(None),
        &mut gix_features::progress::Discard,
        &interrupt,
        hash,
    )?;
    drop(delta_tree);
    let _traverse = tracing::info_span!("traverse").entered();
    let map = PackMap::open(path).or_raise(|| message("Could not map the pack file"))?;
    // Every byte between the header and the trailer is one entry's, read once.
    map.expect(gix_pack::data::header::SIZE as u64..end);
    let collected = pack_links::Collected::for_pack(objects);
    let mut collector = collected.collector();
    let outcome = tree.traverse(
        Reader::default().into_resolver(),
        &map,
        end,
        move |object: &mut Object, _, ctx| {
            let kind = ctx
                .entry
                .header
                .as_kind()
                .ok_or_raise(|| message("a resolved object has a delta's header"))?;
            object.id = gix_object::compute_hash(hash, kind, ctx.decompressed)?;
            object.kind = kind;
            collector.object(kind, ctx.decompressed, hash);
            Ok(())
        },
        gix_pack::cache::delta::traverse::Options {
            object_progress: Box::new(gix_features::progress::Discard),
            size_progress: &mut gix_features::progress::Discard,
            thread_limit: options.thread_limit,
            should_interrupt: &interrupt,
            object_hash: hash,
            alloc_limit_bytes: options.alloc_limit_bytes,
        },
    )?;
    drop(map);
    drop(_traverse);
    let _in_order = tracing::info_span!("name_order").entered();
    let mut objects: Vec<Object> = (outcome.roots.into_iter())
        .chain(outcome.children)
        .map(|item| item.data)
        .collect();
    objects.sort_unstable_by(|a, b| pack_links::by_id(&a.id, &b.id));
    let links = collected.outside(objects.iter().map(|o| (o.id, o.kind)));
    Ok((objects, links))
}

/// Index the finished pack at `path` with gix-pack's writer, reading it again.
fn index_by_gix(
    path: &Path,
    out: &mut dyn Write,
    hash: gix_hash::Kind,
    options: &gix_pack::bundle::write::Options,
    pack_version: gix_pack::data::Version,
) -> gix_error::Result<()> {
    let file = std::fs::File::open(path).or_raise(|| message("Could not read the pack file"))?;
    let mut entries = BytesToEntriesIter::new_from_header(
        BufReader::with_capacity(64 * 1024, file),
        gix_pack::data::input::Mode::AsIs,
        EntryDataMode::Crc32,
        hash,
    )?;
    gix_pack::index::write_data_iter_to_stream(
        options.index_version,
        || -> io::Result<_> {
            let map = PackMap::open(path)?;
            let end = map.bytes().len().saturating_sub(hash.len_in_bytes());
            map.expect(gix_pack::data::header::SIZE as u64..end as u64);
            Ok((Reader::default().into_resolver(), map))
        },
        &mut entries,
        options.thread_limit,
        &mut gix_features::progress::Discard,
        out,
        &AtomicBool::new(false),
        hash,
        options.alloc_limit_bytes,
        pack_version,
    )?;
    Ok(())
}

/// The index of `objects` (in id order) of the pack whose checksum is `pack_hash`: git's
/// version 2 (`Documentation/gitformat-pack.adoc`). gix-pack's encoder is private to it.
fn write_index(
    out: &mut dyn Write,
    objects: &[Object],
    pack_hash: &ObjectId,
    hash: gix_hash::Kind,
) -> io::Result<()> {
    /// Offsets from here on are in the table of 64-bit offsets.
    const LARGE: u64 = 0x8000_0000;
    let mut out = Hashed {
        inner: out,
        hasher: gix_hash::hasher(hash),
    };
    out.write_all(b"\xfftOc")?;
    out.write_all(&2u32.to_be_bytes())?;
    let mut fanout = [0u32; 256];
    for object in objects {
        fanout[usize::from(object.id.as_slice()[0])] += 1;
    }
    let mut total = 0u32;
    for count in fanout {
        total += count;
        out.write_all(&total.to_be_bytes())?;
    }
    for object in objects {
        out.write_all(object.id.as_slice())?;
    }
    for object in objects {
        out.write_all(&object.crc32.to_be_bytes())?;
    }
    let mut large = Vec::new();
    for object in objects {
        let small = if object.offset < LARGE {
            object.offset
        } else {
            large.push(object.offset);
            LARGE | (large.len() as u64 - 1)
        };
        let small = u32::try_from(small).map_err(|_| io::Error::other("too many large offsets"))?;
        out.write_all(&small.to_be_bytes())?;
    }
    for offset in large {
        out.write_all(&offset.to_be_bytes())?;
    }
    out.write_all(pack_hash.as_slice())?;
    let Hashed { inner, hasher } = out;
    let digest = hasher.try_finalize().map_err(io::Error::other)?;
    inner.write_all(digest.as_slice())
}

/// A writer that hashes what goes through it (the index's trailing checksum).
struct Hashed<'a> {
    inner: &'a mut dyn Write,
    hasher: gix_hash::Hasher,
}

impl Write for Hashed<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The pack as read, copied to the temporary file.
struct PassThrough<'a> {
    reader: &'a mut dyn BufRead,
    writer: Shared,
}

impl Read for PassThrough<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.reader.read(buf)?;
        locked(&self.writer)?.write_all(&buf[..n])?;
        Ok(n)
    }
}

/// The received entries, each marking where it ends in the received pack ([`Counted`]) once it
/// was read whole: below the thin-pack writer's look-ahead and inserted bases.
struct Marked<I> {
    inner: I,
    consumed: Rc<Cell<u64>>,
    good_end: Rc<Cell<u64>>,
}

impl<I: Iterator<Item = gix_error::Result<Entry>>> Iterator for Marked<I> {
    type Item = gix_error::Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        let entry = self.inner.next();
        if let Some(Ok(_)) = entry {
            self.good_end.set(self.consumed.get());
        }
        entry
    }
}

/// The temporary file as the thin-pack writer needs it: written, read back and sought in.
struct SharedFile(Shared);

impl Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        locked(&self.0)?.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        locked(&self.0)?.flush()
    }
}

impl Read for SharedFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        locked(&self.0)?.get_mut().read(buf)
    }
}

impl Seek for SharedFile {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        locked(&self.0)?.seek(pos)
    }
}

#[cfg(test)]
mod tests {
    //! Against git: the index written is byte for byte the one git wrote for the same pack,
    //! whether its deltas name their bases by offset (indexed here) or by id (by gix-pack), and
    //! the links taken while indexing are those the decoding pass finds.

    use std::path::Path;

    use super::*;

    use crate::objects::pack_links::{CannotSay, external_links};
    use crate::test_git::{deltas_in, git_with_input, history, pack, pack_with};

    /// The pack of `index` written again into `dir` as received.
    fn rewrite(index: &gix_pack::index::File, dir: &Path) -> (Written, gix_pack::index::File) {
        rewrite_within(index, dir, Some(2), BOUNDS)
    }

    /// [`rewrite`] by `threads` threads within `bounds`.
    fn rewrite_within(
        index: &gix_pack::index::File,
        dir: &Path,
        threads: Option<usize>,
        bounds: Bounds,
    ) -> (Written, gix_pack::index::File) {
        std::fs::create_dir_all(dir).unwrap();
        let bytes = std::fs::read(index.path().with_extension("pack")).unwrap();
        let written = written(&bytes, dir, threads, bounds).unwrap();
        let ours = written.index_path.clone().expect("an index");
        let ours = gix_pack::index::File::at(ours, gix_hash::Kind::Sha1).unwrap();
        (written, ours)
    }

    /// `pack` written into `dir` by `threads` threads within `bounds`.
    fn written(
        pack: &[u8],
        dir: &Path,
        threads: Option<usize>,
        bounds: Bounds,
    ) -> Result<Written, WriteError> {
        written_as(pack, dir, None::<gix_object::find::Never>, threads, bounds)
    }

    /// [`written`], read as a thin pack to be completed through `thin_lookup` when there is one
    /// (gix-pack's reader, not [`pack_read`]).
    fn written_as(
        pack: &[u8],
        dir: &Path,
        thin_lookup: Option<impl gix_object::Find>,
        threads: Option<usize>,
        bounds: Bounds,
    ) -> Result<Written, WriteError> {
        std::fs::create_dir_all(dir).unwrap();
        let entry_at = Cell::new(None);
        let options = gix_pack::bundle::write::Options {
            thread_limit: threads,
            ..Default::default()
        };
        write(
            &mut { pack },
            dir,
            thin_lookup,
            gix_hash::Kind::Sha1,
            options,
            bounds,
            &entry_at,
        )
        .map_err(|source| WriteError {
            entry_at: entry_at.get(),
            source,
        })
    }

    #[test]
    fn the_index_is_the_one_git_writes_and_the_deltas_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let commits = history(dir.path());
        let repo = dir.path().join("r");
        let by_offset = pack(&repo, &dir.path().join("ofs"), true, &commits[9]);
        let by_id = pack_with(&repo, &dir.path().join("ref"), true, &[], &commits[9]);
        // By resolver threads, and by the thread reading the pack (which takes over from the
        // threads at the first delta on a base named by id).
        let cases = [
            (&by_offset, true, Some(2)),
            (&by_offset, true, Some(1)),
            (&by_id, true, Some(2)),
            (&by_id, true, Some(1)),
        ];
        for (git_index, collects, threads) in cases {
            let n = deltas_in(git_index);
            assert!(n > 0, "the pack should hold deltas");
            let (written, ours) = rewrite_within(git_index, &dir.path().join("ours"), threads, BOUNDS);
            assert_eq!(
                std::fs::read(ours.path()).unwrap(),
                std::fs::read(git_index.path()).unwrap(),
                "{} {threads:?}",
                git_index.path().display()
            );
            assert_eq!(written.deltas, n);
            assert_eq!(written.links.is_some(), collects);
            let how = if collects {
                Resolution::AsItArrived
            } else {
                Resolution::ById
            };
            assert_eq!(written.resolution, how, "{threads:?}");
            std::fs::remove_dir_all(dir.path().join("ours")).unwrap();
        }
    }

    /// `data` zlib-compressed.
    fn deflated(data: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; zlib_rs::compress_bound(data.len())];
        let written = zlib_rs::compress_slice(&mut out, data, zlib_rs::DeflateConfig::new(1)).0.len();
        out.truncate(written);
        out
    }

    /// A pack of `entries` (type, size, what follows the header) with its checksum.
    fn hand_made(entries: &[(u8, usize, Vec<u8>)]) -> Vec<u8> {
        let mut pack = b"PACK\0\0\0\x02".to_vec();
        pack.extend(u32::try_from(entries.len()).unwrap().to_be_bytes());
        for (kind, size, rest) in entries {
            let (mut size, mut byte) = (*size >> 4, (kind << 4) | (*size as u8 & 0x0f));
            while size > 0 {
                pack.push(byte | 0x80);
                (byte, size) = ((size & 0x7f) as u8, size >> 7);
            }
            pack.push(byte);
            pack.extend(rest);
        }
        let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
        hasher.update(&pack);
        pack.extend(hasher.try_finalize().unwrap().as_bytes());
        pack
    }

    #[test]
    fn a_delta_on_a_base_named_by_id_is_followed_by_the_reading_thread_when_the_base_came_first() {
        let dir = tempfile::tempdir().unwrap();
        let base = b"the base of a delta that names it by id\n";
        let base_id = gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, base).unwrap();
        // Copy the whole base, then insert five bytes.
        let len = u8::try_from(base.len()).unwrap();
        let mut delta = vec![len, len + 5, 0x90, len, 5];
        delta.extend(b"more\n");
        let blob = (3, base.len(), deflated(base));
        let mut on_base = base_id.as_bytes().to_vec();
        on_base.extend(deflated(&delta));
        let ref_delta = (7, delta.len(), on_base);
        let mut result = base.to_vec();
        result.extend(b"more\n");
        let result_id = gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, &result).unwrap();
        let cases = [
            // The base first: the reading thread follows the delta (taking over from the
            // threads, which cannot know where a base named by id is).
            ("base first", vec![blob.clone(), ref_delta.clone()], Some(1), Resolution::AsItArrived),
            ("base first", vec![blob.clone(), ref_delta.clone()], Some(2), Resolution::AsItArrived),
            // The base after its delta (git's index-pack takes that too): gix-pack's writer.
            ("base after", vec![ref_delta.clone(), blob.clone()], Some(1), Resolution::ById),
            ("base after", vec![ref_delta, blob], Some(2), Resolution::ById),
        ];
        for (i, (what, entries, threads, how)) in cases.into_iter().enumerate() {
            let pack = hand_made(&entries);
            let into = dir.path().join(format!("{i}"));
            let written = written(&pack, &into, threads, BOUNDS).expect(what);
            assert_eq!(written.resolution, how, "{what} {threads:?}");
            assert_eq!(written.deltas, 1, "{what} {threads:?}");
            let ours = written.index_path.expect("an index");
            // git's index of the same pack.
            let theirs = into.join("git.pack");
            std::fs::write(&theirs, &pack).unwrap();
            crate::test_git::git(&into, &["index-pack", "git.pack"]);
            assert_eq!(
                std::fs::read(&ours).unwrap(),
                std::fs::read(theirs.with_extension("idx")).unwrap(),
                "{what} {threads:?}"
            );
            let index = gix_pack::index::File::at(&ours, gix_hash::Kind::Sha1).unwrap();
            assert!(index.lookup(result_id).is_some() && index.lookup(base_id).is_some(), "{what}");
        }
    }

    #[test]
    fn the_links_taken_while_indexing_are_those_decoding_finds() {
        let dir = tempfile::tempdir().unwrap();
        let commits = history(dir.path());
        let repo = dir.path().join("r");
        // The whole history links outside nothing; its last commits link to what they build on.
        let all = pack(&repo, &dir.path().join("all"), true, &commits[9]);
        let (written, _) = rewrite(&all, &dir.path().join("ours-all"));
        assert_eq!(written.links, Some(Ok(Default::default())));
        let since = format!("{}\n^{}\n", commits[9], commits[7]);
        let top = pack(&repo, &dir.path().join("top"), true, &since);
        let (written, ours) = rewrite(&top, &dir.path().join("ours-top"));
        let links = written.links.expect("taken").expect("parsed");
        let id = |hex: &str| ObjectId::from_hex(hex.as_bytes()).unwrap();
        assert!(links.contains_key(&id(&commits[7])), "{links:?}");
        assert!(links.len() > 1, "{links:?}");
        assert_eq!(Ok(links), external_links(&ours, None));

        // A commit without its tree line: the links cannot be said.
        let broken = git_with_input(
            &repo,
            &["hash-object", "--literally", "-t", "commit", "-w", "--stdin"],
            "no tree line\n",
        );
        let list = format!("{broken}\n{}\n", commits[0]);
        let index = pack(&repo, &dir.path().join("broken"), false, &list);
        let (written, _) = rewrite(&index, &dir.path().join("ours-broken"));
        assert_eq!(written.links, Some(Err(CannotSay::Unparsable)));
    }

    #[test]
    fn bases_evicted_or_not_kept_are_read_back_and_a_resolution_that_gives_up_is_done_again() {
        let dir = tempfile::tempdir().unwrap();
        let commits = history(dir.path());
        let repo = dir.path().join("r");
        let git_index = pack(&repo, &dir.path().join("ofs"), true, &commits[9]);
        let wanted = std::fs::read(git_index.path()).unwrap();
        let (by_default, _) = rewrite(&git_index, &dir.path().join("default"));
        let cases = [
            // Nothing kept from reading: every entry read back from the file, every base not
            // the last one resolved built again from it.
            (0, 1, u64::MAX, Resolution::AsItArrived),
            // Building bases again not allowed: given up, resolved once arrived.
            (u64::MAX, 1, 0, Resolution::AfterItArrived),
        ];
        for (i, (keep, cache_bytes, rebuild_allowance, how)) in cases.into_iter().enumerate() {
            let bounds = Bounds {
                keep,
                cache_bytes,
                rebuild_allowance,
                hand_back_bytes: 0,
            };
            for threads in [Some(2), Some(1)] {
                let dir = dir.path().join(format!("{i}-{threads:?}"));
                let (written, ours) = rewrite_within(&git_index, &dir, threads, bounds);
                assert_eq!(written.resolution, how, "{bounds:?} {threads:?}");
                assert_eq!(std::fs::read(ours.path()).unwrap(), wanted, "{bounds:?} {threads:?}");
                assert_eq!(written.links, by_default.links, "{bounds:?} {threads:?}");
            }
        }
    }

    #[test]
    fn a_broken_pack_is_refused_in_the_words_and_at_the_place_of_gix_packs_reader() {
        let dir = tempfile::tempdir().unwrap();
        let commits = history(dir.path());
        let repo = dir.path().join("r");
        let git_index = pack(&repo, &dir.path().join("ofs"), true, &commits[9]);
        let good = std::fs::read(git_index.path().with_extension("pack")).unwrap();
        let mut broken: Vec<(String, Vec<u8>)> = Vec::new();
        // Every 101st byte changed (header, entries, trailer), and the pack cut short there.
        for at in (0..good.len()).step_by(101).chain([good.len() - 1]) {
            let mut changed = good.clone();
            changed[at] ^= 0x5a;
            broken.push((format!("byte {at} changed"), changed));
            broken.push((format!("cut at {at}"), good[..at].to_vec()));
        }
        // Another object type.
        let mut other = good.clone();
        other[12] = (other[12] & 0x8f) | (5 << 4);
        broken.push(("type 5".into(), other));
        let mut refused = 0;
        for (i, (what, pack)) in broken.iter().enumerate() {
            let dir = |how: &str| dir.path().join(format!("{how}{i}"));
            let on_threads = written(pack, &dir("t"), Some(2), BOUNDS);
            let on_the_reader = written(pack, &dir("r"), Some(1), BOUNDS);
            let by_gix = written_as(pack, &dir("g"), Some(gix_object::find::Never), Some(1), BOUNDS);
            match (on_threads, on_the_reader, by_gix) {
                (Err(threads), Err(reader), Err(gix)) => {
                    refused += 1;
                    for ours in [threads, reader] {
                        assert_eq!(format!("{:#}", ours.source), format!("{:#}", gix.source), "{what}");
                        assert_eq!(ours.entry_at, gix.entry_at, "{what}");
                    }
                }
                (Ok(threads), Ok(reader), Ok(_)) => {
                    assert_eq!(threads.resolution, Resolution::AsItArrived, "{what}");
                    assert_eq!(reader.resolution, Resolution::AsItArrived, "{what}");
                }
                (threads, reader, gix) => panic!(
                    "{what}: {:?} and {:?} against {:?}",
                    threads.map(|w| w.resolution),
                    reader.map(|w| w.resolution),
                    gix.map(|w| w.resolution)
                ),
            }
        }
        assert!(refused > broken.len() / 2, "{refused} of {}", broken.len());
    }

    #[test]
    fn a_header_counting_objects_the_pack_does_not_hold_reserves_nothing_for_them() {
        let dir = tempfile::tempdir().unwrap();
        for threads in [Some(1), Some(2)] {
            // The fuzzer's input: 0x50410000 objects announced, none there.
            let pack = b"PACK\0\0\0\x02PA\0\0";
            let refused = written(pack, &dir.path().join("a"), threads, BOUNDS);
            assert!(refused.is_err(), "{threads:?}");
            let mut pack = b"PACK\0\0\0\x02\xff\xff\xff\xff".to_vec();
            pack.extend_from_slice(&[0; 20]);
            let refused = written(&pack, &dir.path().join("b"), threads, BOUNDS);
            assert!(refused.is_err(), "{threads:?}");
        }
    }

    #[test]
    fn offsets_past_two_gib_go_to_the_table_of_large_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let id = |b: u8| ObjectId::from_bytes_or_panic(&[b; 20]);
        let objects = [(id(1), 12), (id(2), 3 << 30), (id(3), 0x7fff_ffff), (id(4), 5 << 32)]
            .map(|(id, offset)| Object {
                offset,
                crc32: u32::from(id.as_slice()[0]),
                id,
                kind: gix_object::Kind::Blob,
            });
        let path = dir.path().join("pack-x.idx");
        let mut out = Vec::new();
        write_index(&mut out, &objects, &id(9), gix_hash::Kind::Sha1).unwrap();
        std::fs::write(&path, &out).unwrap();
        let index = gix_pack::index::File::at(&path, gix_hash::Kind::Sha1).unwrap();
        assert_eq!(index.num_objects(), 4);
        for (i, object) in objects.iter().enumerate() {
            let i = u32::try_from(i).unwrap();
            assert_eq!(index.oid_at_index(i), object.id.as_ref());
            assert_eq!(index.pack_offset_at_index(i), object.offset);
            assert_eq!(index.crc32_at_index(i), Some(object.crc32));
        }
        assert_eq!(index.pack_checksum(), id(9));
        assert_eq!(index.verify_checksum(&mut gix_features::progress::Discard, &AtomicBool::new(false)).ok(), Some(index.index_checksum()));
    }
}
