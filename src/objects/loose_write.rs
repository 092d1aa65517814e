//! Writing a push's objects as loose objects into its quarantine (`xx/yyyy…`, the deflated
//! `<kind> <size>\0<data>`), as git's `unpack-objects` writes them (`write_loose_object`,
//! at `core.looseCompression`'s level).
//!
//! Written here rather than through gix-odb's loose store, which per object creates a
//! compressor (zlib-rs zeroes its window and tables: 2.5 % of a cluster node's CPU under small
//! pushes, perf, 2026-12-06), a randomly named temporary file, and tries to create the
//! fan-out directory. Here one compressor is reset between objects, each fan-out directory is
//! created once, and each object is written (in one `write` unless it compresses to more than
//! 32 KiB) straight under its name: the quarantine is this push's own, nothing reads it before
//! the unpack is over, and a write cut short fails the push, whose quarantine is then removed
//! (git's temporary file and rename guard a live object directory, which this is not).
//!
//! The compressor is zlib-rs's own rather than gix-zlib's writer, which always asks for a
//! 32 KiB window: zlib-rs zeroes the window and its chain table when it makes a compressor, and
//! that is 128 KiB of fresh memory, 32 page faults, on every push that has objects to unpack.
//! The window here is the smallest that holds the largest object the writer is told of, so
//! nothing is compressed differently (no match is ever farther back than the object is long);
//! only the stream's header names the smaller window, which every inflater reads
//! (benches/README.md, "The loose objects' compressor sized to the objects").

use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Writes objects under one quarantine directory.
pub struct LooseWriter {
    dir: PathBuf,
    hash: gix_hash::Kind,
    level: gix_zlib::Compression,
    /// The size of the largest object the caller expects to write: the window the compressor
    /// is made with, at the first write.
    largest: u64,
    /// Made at the first write, reset for each object after it.
    compressor: Option<Compressor>,
    /// The compressed bytes of the object being written, up to [`OUT_CHUNK`] at a time
    /// (made at the first write).
    out: Vec<u8>,
    fanout_made: [bool; 256],
}

/// How much compressed output is gathered before it is written.
const OUT_CHUNK: usize = 32 * 1024;

/// zlib's `MIN_LOOKAHEAD`: how much of its window a compressor keeps for the bytes ahead, so
/// that a match can reach back at most the window less this.
const MIN_LOOKAHEAD: u64 = 262;

/// A zlib-rs compressor and the window it was made with.
struct Compressor {
    stream: zlib_rs::Deflate,
    window_bits: u8,
}

/// The smallest window (as zlib's `windowBits`, 9 to 15) in which a stream of `len` bytes is
/// compressed exactly as in the largest: every match it can find lies inside it.
fn window_bits_for(len: u64) -> u8 {
    (9..15)
        .find(|&bits| len.saturating_add(MIN_LOOKAHEAD) <= 1 << bits)
        .unwrap_or(15)
}

/// Why an object was not written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Its bytes hash to another id than the one it was written for.
    #[error("object {expected} of the received pack decoded as {actual}")]
    Mismatch {
        /// The id it should have.
        expected: gix_hash::ObjectId,
        /// The id its bytes have.
        actual: gix_hash::ObjectId,
    },
    /// Its id could not be computed (a SHA-1 collision attack detected).
    #[error("cannot hash object {0}")]
    Hash(gix_hash::ObjectId),
    /// It could not be compressed, or it or its fan-out directory written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        // The kind kept (a full disk stays one), the path with it.
        let kind = match &e {
            Error::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// What [`LooseWriter::write`] did.
pub enum Written {
    /// The object was written to `path` through `file`, still open (for syncing and its mode).
    New {
        /// `dir/xx/yyyy…`.
        path: PathBuf,
        /// The file, open for writing.
        file: std::fs::File,
    },
    /// The object was there already (a pack holding it twice) and was left as it is.
    Present,
}

impl LooseWriter {
    /// A writer of `hash` objects into `dir`, compressed at `level` (`core.looseCompression`),
    /// none of them (header included) expected to be longer than `largest` bytes. One that is
    /// longer is written as well, by a compressor made again with the largest window.
    pub fn new(
        dir: &Path,
        hash: gix_hash::Kind,
        level: gix_zlib::Compression,
        largest: u64,
    ) -> LooseWriter {
        LooseWriter {
            dir: dir.to_owned(),
            hash,
            level,
            largest,
            compressor: None,
            out: Vec::new(),
            fanout_made: [false; 256],
        }
    }

    /// The compressor for a stream of `len` bytes, reset: the one made before when its window
    /// holds them, else one made now.
    fn compressor(&mut self, len: u64) -> &mut zlib_rs::Deflate {
        let needed = window_bits_for(len);
        match &mut self.compressor {
            Some(c) if c.window_bits >= needed => c.stream.reset(),
            slot => {
                let window_bits = match slot {
                    // Told too little: the largest window, not a third compressor.
                    Some(_) => 15,
                    None => needed.max(window_bits_for(self.largest)),
                };
                let stream = zlib_rs::Deflate::new(self.level.level(), true, window_bits);
                *slot = Some(Compressor {
                    stream,
                    window_bits,
                });
            }
        }
        &mut self.compressor.as_mut().expect("set above").stream
    }

    /// Compress `header` then `data` into `file` as one zlib stream.
    fn deflate(&mut self, header: &[u8], data: &[u8], file: &mut std::fs::File) -> io::Result<()> {
        use zlib_rs::{DeflateFlush, Status};
        let len = (header.len() + data.len()) as u64;
        if self.out.is_empty() {
            // No more than the largest object can need: a buffer is memory touched.
            let most = self.largest.max(len).min(OUT_CHUNK as u64) as usize;
            self.out = vec![0; zlib_rs::compress_bound(most).min(OUT_CHUNK)];
        }
        let mut out = std::mem::take(&mut self.out);
        let mut filled = 0;
        let stream = self.compressor(len);
        let mut result = Ok(());
        'streams: for (mut input, flush) in
            [(header, DeflateFlush::NoFlush), (data, DeflateFlush::Finish)]
        {
            loop {
                let (read, wrote) = (stream.total_in(), stream.total_out());
                let status = match stream.compress(input, &mut out[filled..], flush) {
                    Ok(s) => s,
                    Err(e) => {
                        result = Err(io::Error::other(format!("zlib: {e:?}")));
                        break 'streams;
                    }
                };
                let produced = (stream.total_out() - wrote) as usize;
                let consumed = (stream.total_in() - read) as usize;
                filled += produced;
                input = &input[consumed..];
                if filled == out.len() {
                    if let Err(e) = file.write_all(&out) {
                        result = Err(e);
                        break 'streams;
                    }
                    filled = 0;
                } else if produced == 0 && consumed == 0 {
                    result = Err(io::Error::other(format!("zlib made no progress ({status:?})")));
                    break 'streams;
                }
                match flush {
                    DeflateFlush::Finish if status == Status::StreamEnd => break,
                    DeflateFlush::Finish => {}
                    _ if input.is_empty() => break,
                    _ => {}
                }
            }
        }
        if result.is_ok() && filled > 0 {
            result = file.write_all(&out[..filled]);
        }
        self.out = out;
        result
    }

    /// Write the object `id` of `kind` with `data`, after checking that they hash to `id`.
    pub fn write(
        &mut self,
        id: &gix_hash::oid,
        kind: gix_object::Kind,
        data: &[u8],
    ) -> Result<Written, Error> {
        let actual = gix_object::compute_hash(self.hash, kind, data)
            .map_err(|_| Error::Hash(id.to_owned()))?;
        if actual != id {
            return Err(Error::Mismatch {
                expected: id.to_owned(),
                actual,
            });
        }
        self.write_named(id, kind, data)
    }

    /// [`Self::write`] for an object whose `id` the caller computed from these very `data` (the
    /// pack's reading thread named it so): not hashed again.
    pub fn write_named(
        &mut self,
        id: &gix_hash::oid,
        kind: gix_object::Kind,
        data: &[u8],
    ) -> Result<Written, Error> {
        let mut hex = gix_hash::Kind::hex_buf();
        let hex = id.hex_to_buf(&mut hex);
        let fanout = usize::from(id.as_bytes()[0]);
        let fanout_dir = self.dir.join(&hex[..2]);
        if !self.fanout_made[fanout] {
            match std::fs::create_dir(&fanout_dir) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                    return Err(Error::Io {
                        path: fanout_dir,
                        source: e,
                    });
                }
                _ => self.fanout_made[fanout] = true,
            }
        }
        let path = fanout_dir.join(&hex[2..]);
        let file = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(Written::Present),
            Err(source) => return Err(Error::Io { path, source }),
        };
        let mut file = file;
        let header = gix_object::encode::loose_header(kind, data.len() as u64);
        let written = self.deflate(&header, data, &mut file);
        match written {
            Ok(()) => Ok(Written::New { path, file }),
            Err(source) => {
                // Not left half written under its name (the push fails; this is tidiness).
                drop(file);
                let _ = std::fs::remove_file(&path);
                Err(Error::Io { path, source })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object is compressed as in a 32 KiB window, byte for byte after the stream's header,
    /// whose window is the smallest that holds the largest object the writer was told of.
    #[test]
    fn objects_compress_as_in_the_largest_window_in_the_smallest_that_holds_them() {
        let dir = tempfile::tempdir().unwrap();
        let level = gix_zlib::Compression::BEST_SPEED;
        for size in [0usize, 100, 250, 251, 3_000, 20_000, 32_505, 32_506, 200_000] {
            let data: Vec<u8> = (0..size).map(|i| (i * i / 7 % 251) as u8).collect();
            let header = gix_object::encode::loose_header(gix_object::Kind::Blob, size as u64);
            let len = (header.len() + size) as u64;
            let mut w = LooseWriter::new(dir.path(), gix_hash::Kind::Sha1, level, len);
            let id = gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, &data)
                .unwrap();
            let Written::New { path, file } = w.write(&id, gix_object::Kind::Blob, &data).unwrap()
            else {
                panic!("{size}: not written");
            };
            drop(file);
            let ours = std::fs::read(&path).unwrap();
            let whole = [&header[..], &data].concat();
            let mut theirs = vec![0u8; zlib_rs::compress_bound(whole.len())];
            let n = zlib_rs::compress_slice(&mut theirs, &whole, zlib_rs::DeflateConfig::new(level.level()))
                .0
                .len();
            theirs.truncate(n);
            assert_eq!(ours[2..], theirs[2..], "{size}: compressed differently");
            let bits = (ours[0] >> 4) + 8;
            assert_eq!(bits, window_bits_for(len), "{size}");
            assert!(
                (bits == 15 || len + MIN_LOOKAHEAD <= 1 << bits)
                    && (bits == 9 || len + MIN_LOOKAHEAD > 1 << (bits - 1)),
                "{size}: a {bits}-bit window"
            );
        }
        assert_eq!(window_bits_for(0), 9);
        assert_eq!(window_bits_for(1 << 20), 15);
        assert_eq!(window_bits_for(u64::MAX), 15);
        // A size no object has (a pack's header may claim it) makes no larger buffer.
        let mut w = LooseWriter::new(dir.path(), gix_hash::Kind::Sha1, level, u64::MAX);
        let id = gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, b"x").unwrap();
        assert!(matches!(w.write(&id, gix_object::Kind::Blob, b"x"), Ok(Written::New { .. })));
        assert_eq!(w.out.len(), zlib_rs::compress_bound(OUT_CHUNK).min(OUT_CHUNK));
    }

    /// Objects written here read back through gix-odb's loose store (zlib, header, data) under
    /// their ids, one compressor serving them all; a wrong id is refused and writes nothing.
    #[test]
    fn objects_read_back_as_written_and_a_wrong_id_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = LooseWriter::new(
            dir.path(),
            gix_hash::Kind::Sha1,
            gix_zlib::Compression::BEST_SPEED,
            16,
        );
        let big: Vec<u8> = (0..200_000u32).flat_map(|i| (i * 7919).to_le_bytes()).collect();
        let objects: Vec<(gix_object::Kind, Vec<u8>)> = vec![
            (gix_object::Kind::Blob, b"hello\n".to_vec()),
            (gix_object::Kind::Blob, Vec::new()),
            (gix_object::Kind::Blob, big),
            (gix_object::Kind::Blob, vec![b'a'; 100_000]),
        ];
        let store = gix_odb::loose::Store::at(dir.path(), gix_hash::Kind::Sha1);
        for (kind, data) in &objects {
            let id = gix_object::compute_hash(gix_hash::Kind::Sha1, *kind, data).unwrap();
            let written = w.write(&id, *kind, data).unwrap();
            assert!(matches!(written, Written::New { .. }));
            drop(written);
            let again = w.write(&id, *kind, data).unwrap();
            assert!(matches!(again, Written::Present), "written twice");
            let mut buf = Vec::new();
            let read = store.try_find(&id, &mut buf).unwrap().expect("written");
            assert_eq!(read.kind, *kind);
            assert_eq!(read.data, &data[..]);
        }
        let wrong = gix_hash::ObjectId::null(gix_hash::Kind::Sha1);
        let before = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(matches!(
            w.write(&wrong, gix_object::Kind::Blob, b"x"),
            Err(Error::Mismatch { .. })
        ));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), before);
    }
}
