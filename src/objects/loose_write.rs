//! Writing a push's objects as loose objects into its quarantine (`xx/yyyy…`, the deflated
//! `<kind> <size>\0<data>`), as git's `unpack-objects` writes them (`write_loose_object`,
//! at `core.looseCompression`'s level).
//!
//! Written by hand rather than through gix-odb's loose store, which per object creates a
//! compressor (zlib-rs zeroes its window and tables: 2.5 % of a cluster node's CPU under small
//! pushes, perf, 2026-12-06), a randomly named temporary file, and tries to create the
//! fan-out directory. Here one compressor is reset between objects, each fan-out directory is
//! created once, and each object is written (in one `write` unless it compresses to more than
//! 256 KiB) straight under its name: the
//! quarantine is this push's own, nothing reads it before the unpack is over, and a write cut
//! short fails the push, whose quarantine is then removed (git's temporary file and rename
//! guard a live object directory, which this is not).

use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use gix_zlib::stream::deflate::{Compress, FlushCompress};

/// Writes objects under one quarantine directory.
pub struct LooseWriter {
    dir: PathBuf,
    hash: gix_hash::Kind,
    compress: Compress,
    out: Vec<u8>,
    fanout_made: [bool; 256],
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
    /// It could not be compressed.
    #[error("cannot compress object {0}")]
    Compress(gix_hash::ObjectId),
    /// It, or its fan-out directory, could not be written.
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

/// One object written: its file, still open (for syncing and its mode).
pub struct Written {
    /// `dir/xx/yyyy…`.
    pub path: PathBuf,
    /// The file, open for writing; `None` when the object was there already.
    pub file: Option<std::fs::File>,
}

impl LooseWriter {
    /// A writer of `hash` objects into `dir`, compressed at `level` (`core.looseCompression`).
    pub fn new(dir: &Path, hash: gix_hash::Kind, level: gix_zlib::Compression) -> LooseWriter {
        LooseWriter {
            dir: dir.to_owned(),
            hash,
            compress: Compress::new(level),
            out: Vec::new(),
            fanout_made: [false; 256],
        }
    }

    /// Write the object `id` of `kind` with `data`, after checking that they hash to `id`. An
    /// object already there (a pack holding it twice) is left as it is.
    pub fn write(
        &mut self,
        id: &gix_hash::oid,
        kind: gix_object::Kind,
        data: &[u8],
    ) -> Result<Written, Error> {
        let header = gix_object::encode::loose_header(kind, data.len() as u64);
        let mut hasher = gix_hash::hasher(self.hash);
        hasher.update(&header);
        hasher.update(data);
        let actual = hasher
            .try_finalize()
            .map_err(|_| Error::Hash(id.to_owned()))?;
        if actual != id {
            return Err(Error::Mismatch {
                expected: id.to_owned(),
                actual,
            });
        }
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
        let mut file = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Ok(Written { path, file: None });
            }
            Err(source) => return Err(Error::Io { path, source }),
        };
        match self.deflate(&header, data, &mut file) {
            Ok(()) => Ok(Written {
                path,
                file: Some(file),
            }),
            Err(e) => {
                // Not left half written under its name (the push fails; this is tidiness).
                let _ = std::fs::remove_file(&path);
                Err(match e {
                    Deflate::Zlib => Error::Compress(id.to_owned()),
                    Deflate::Write(source) => Error::Io { path, source },
                })
            }
        }
    }

    /// `header` then `data`, deflated as one zlib stream into `file`, a buffer at a time:
    /// one `write` for all but large objects, and never a second copy of a large one in memory.
    fn deflate(
        &mut self,
        header: &[u8],
        data: &[u8],
        file: &mut std::fs::File,
    ) -> Result<(), Deflate> {
        use gix_zlib::Status;
        self.compress.reset();
        // zlib's worst case (stored blocks: 5 bytes a 16 KiB block, and the stream's own),
        // up to a bound: what does not fit is written out as the buffer fills.
        let len = header.len() + data.len();
        self.out.resize((len + len / 16_000 * 5 + 64).min(BUFFER), 0);
        let mut filled = 0;
        for (mut input, flush) in [(header, FlushCompress::None), (data, FlushCompress::Finish)] {
            loop {
                if filled == self.out.len() {
                    file.write_all(&self.out).map_err(Deflate::Write)?;
                    filled = 0;
                }
                let (in_before, out_before) = (self.compress.total_in(), self.compress.total_out());
                let status = self
                    .compress
                    .compress(input, &mut self.out[filled..], flush)
                    .map_err(|_| Deflate::Zlib)?;
                let wrote = (self.compress.total_out() - out_before) as usize;
                let read = (self.compress.total_in() - in_before) as usize;
                filled += wrote;
                input = &input[read..];
                match status {
                    Status::StreamEnd => {
                        return file.write_all(&self.out[..filled]).map_err(Deflate::Write);
                    }
                    _ if flush == FlushCompress::None && input.is_empty() => break,
                    // No progress with room left: zlib is stuck.
                    _ if wrote == 0 && read == 0 && filled < self.out.len() => {
                        return Err(Deflate::Zlib);
                    }
                    _ => {}
                }
            }
        }
        Err(Deflate::Zlib)
    }
}

/// The compressed output's buffer at most.
const BUFFER: usize = 256 * 1024;

/// Why [`LooseWriter::deflate`] failed.
enum Deflate {
    Zlib,
    Write(io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Objects written here read back through gix-odb's loose store (zlib, header, data) under
    /// their ids, one compressor serving them all; a wrong id is refused and writes nothing.
    #[test]
    fn objects_read_back_as_written_and_a_wrong_id_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = LooseWriter::new(
            dir.path(),
            gix_hash::Kind::Sha1,
            gix_zlib::Compression::BEST_SPEED,
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
            assert!(written.file.is_some());
            drop(written);
            let again = w.write(&id, *kind, data).unwrap();
            assert!(again.file.is_none(), "written twice");
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
