//! Writing a received pack and its index into a directory.
//!
//! What gix-pack's `Bundle::write_to_directory` does — the pack streamed to a temporary file
//! (a thin pack completed with the bases it lacks), indexed with its deltas resolved in
//! parallel, then named `pack-<checksum>.{keep,pack,idx}` — with one difference: the deltas are
//! resolved through a [`PackMap`], which gives each page of the pack back once every entry on
//! it has been read. Through the bundle's own mapping the whole pack stayed resident while the
//! index was built (a whole-history push of git.git held its 303 MiB on top of the index).
//! Every byte between the pack's header and its trailer belongs to exactly one entry, and the
//! resolution reads each entry once, so the bytes a page has to give are known up front.

use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use gix_error::{ResultExt, message};
use gix_pack::data::input::{
    BytesToEntriesIter, EntriesToBytesIter, Entry, EntryDataMode, LookupRefDeltaObjectsIter,
};

use crate::objects::pack_map::{PackMap, Reader};

/// What was written: the pack and its index under their final names (`None` for a pack of no
/// objects). A new pack gets a `.keep` beside it, which guards it until refs point into it
/// ([`crate::objects::ingest::Quarantine::migrate`] moves it first and hands it back).
#[derive(Debug)]
pub struct Written {
    /// `pack-<checksum>.pack`.
    pub data_path: Option<PathBuf>,
    /// `pack-<checksum>.idx`.
    pub index_path: Option<PathBuf>,
}

/// The temporary pack file, written by the entry iterators and read back by the thin-pack
/// writer (which rewrites the header's count) and the resolver.
type Shared = Arc<Mutex<BufWriter<tempfile::NamedTempFile>>>;

fn locked(file: &Shared) -> io::Result<std::sync::MutexGuard<'_, BufWriter<tempfile::NamedTempFile>>> {
    file.lock()
        .map_err(|_| io::Error::other("the pack file's writer panicked"))
}

/// Read `pack` into `directory` as a pack and its index. Thin-pack bases are looked up in
/// `thin_lookup` (none: a thin pack fails); `options` are gix-pack's.
pub fn write_to_directory(
    pack: &mut dyn BufRead,
    directory: &Path,
    thin_lookup: Option<impl gix_object::Find>,
    object_hash: gix_hash::Kind,
    options: gix_pack::bundle::write::Options,
) -> gix_error::Result<Written> {
    let temp = tempfile::NamedTempFile::new_in(directory)
        .or_raise(|| message("Could not create temporary pack file"))?;
    let temp_path = temp.path().to_owned();
    let shared: Shared = Arc::new(Mutex::new(BufWriter::with_capacity(64 * 1024, temp)));
    let (mut entries, pack_version): (Box<dyn Iterator<Item = gix_error::Result<Entry>> + '_>, _) =
        match thin_lookup {
            Some(lookup) => {
                let entries = LookupRefDeltaObjectsIter::new(
                    BytesToEntriesIter::new_from_header(
                        BufReader::new(pack),
                        options.iteration_mode,
                        EntryDataMode::KeepAndCrc32,
                        object_hash,
                    )?,
                    lookup,
                    options.compression,
                );
                let version = entries.inner.version();
                let entries =
                    EntriesToBytesIter::new(entries, SharedFile(shared.clone()), version, object_hash);
                (Box::new(entries), version)
            }
            None => {
                let copied = PassThrough {
                    reader: pack,
                    writer: shared.clone(),
                };
                // Reads go through `read`, so that every byte consumed is copied.
                let entries = BytesToEntriesIter::new_from_header(
                    BufReader::new(copied),
                    options.iteration_mode,
                    EntryDataMode::Crc32,
                    object_hash,
                )?;
                let version = entries.version();
                (Box::new(entries), version)
            }
        };

    let index_temp = tempfile::NamedTempFile::new_in(directory)
        .or_raise(|| message("Could not create temporary index file"))?;
    let mut index_out = BufWriter::with_capacity(64 * 1024, index_temp);
    let interrupt = AtomicBool::new(false);
    let resolver_file = shared.clone();
    let outcome = gix_pack::index::write_data_iter_to_stream(
        options.index_version,
        move || -> io::Result<_> {
            locked(&resolver_file)?.flush()?;
            let map = PackMap::open(&temp_path)?;
            // Every byte between the header and the trailer is one entry's, read once.
            let end = map.bytes().len().saturating_sub(object_hash.len_in_bytes());
            map.expect(gix_pack::data::header::SIZE as u64..end as u64);
            Ok((Reader::default().into_resolver(), map))
        },
        &mut entries,
        options.thread_limit,
        &mut gix_features::progress::Discard,
        &mut index_out,
        &interrupt,
        object_hash,
        options.alloc_limit_bytes,
        pack_version,
    )?;
    drop(entries);
    if outcome.num_objects == 0 {
        return Ok(Written {
            data_path: None,
            index_path: None,
        });
    }
    let data_path = directory.join(format!("pack-{}.pack", outcome.data_hash.to_hex()));
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
    })
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
