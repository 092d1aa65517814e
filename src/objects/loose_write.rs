//! Writing a push's objects as loose objects into its quarantine (`xx/yyyy…`, the deflated
//! `<kind> <size>\0<data>`), as git's `unpack-objects` writes them (`write_loose_object`,
//! at `core.looseCompression`'s level).
//!
//! Written here rather than through gix-odb's loose store, which per object creates a
//! compressor (zlib-rs zeroes its window and tables: 2.5 % of a cluster node's CPU under small
//! pushes, perf, 2026-12-06), a randomly named temporary file, and tries to create the
//! fan-out directory. Here one gix-zlib stream writer is reset between objects, each fan-out
//! directory is created once, and each object is written (in one `write` unless it compresses
//! to more than 32 KiB) straight under its name: the quarantine is this push's own, nothing
//! reads it before the unpack is over, and a write cut short fails the push, whose quarantine
//! is then removed (git's temporary file and rename guard a live object directory, which this
//! is not).

use std::cell::RefCell;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Writes objects under one quarantine directory.
pub struct LooseWriter {
    dir: PathBuf,
    hash: gix_hash::Kind,
    /// One zlib stream an object, into whichever file [`Slot`] holds.
    deflate: Box<gix_zlib::stream::deflate::Write<Slot>>,
    slot: Slot,
    fanout_made: [bool; 256],
}

/// The file of the object being written, where the compressor writes: shared with the writer
/// because gix-zlib's `deflate::Write` lends no access to its inner writer (only
/// `into_inner`, which would drop the compressor this type exists to keep).
#[derive(Clone, Default)]
struct Slot(Rc<RefCell<Option<std::fs::File>>>);

impl io::Write for Slot {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0.borrow_mut().as_mut() {
            Some(file) => file.write(buf),
            None => Err(io::Error::other("no loose object is being written")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
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
    /// A writer of `hash` objects into `dir`, compressed at `level` (`core.looseCompression`).
    pub fn new(dir: &Path, hash: gix_hash::Kind, level: gix_zlib::Compression) -> LooseWriter {
        let slot = Slot::default();
        LooseWriter {
            dir: dir.to_owned(),
            hash,
            deflate: Box::new(gix_zlib::stream::deflate::Write::new(slot.clone(), level)),
            slot,
            fanout_made: [false; 256],
        }
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
        *self.slot.0.borrow_mut() = Some(file);
        self.deflate.reset();
        let written = self
            .deflate
            .write_all(&gix_object::encode::loose_header(kind, data.len() as u64))
            .and_then(|()| self.deflate.write_all(data))
            // Finishes the stream.
            .and_then(|()| self.deflate.flush());
        let file = self.slot.0.borrow_mut().take().expect("put in above");
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
