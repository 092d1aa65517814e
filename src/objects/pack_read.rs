//! Reading a received pack's entries as they arrive, keeping what each inflates to.
//!
//! To find where an entry ends, its zlib stream has to be inflated. gix-pack's reader
//! (`BytesToEntriesIter`) inflates it into scratch space and drops the result, so whoever
//! resolves the entry inflates it again: on git.git's history, 640 MB inflated twice, 2.6 s of
//! CPU. [`Entries`] keeps the result for the resolvers ([`crate::objects::pack_resolve`]).
//! An entry inflating to more than [`KEEP`] bytes is only measured; its resolver reads it back
//! from the file.
//!
//! gix-pack's reader stays the judge of what a pack holds. On anything unusual (a broken zlib
//! stream, a size that does not match, a truncated or over-long pack, a wrong checksum, an
//! unknown object type), [`Entries`] hands over to gix-pack's reader. That reader starts
//! again at the pack's first byte: the bytes read so far from the file they were copied to,
//! then the rest as it arrives. It skips the entries already given, then gives the rest, or
//! fails where and as it fails without this module. Errors are therefore gix-pack's, word for
//! word.

use std::cell::Cell;
use std::fs::File;
use std::rc::Rc;
use std::io::{self, BufRead, BufReader, Read};

use gix_pack::data::input::{BytesToEntriesIter, Entry, EntryDataMode, Mode};

/// The largest entry whose inflated bytes are kept for its resolver: 32 MiB.
pub const KEEP: u64 = 32 << 20;

/// An entry's bytes, as handed to its resolver.
pub enum Bytes {
    /// What its zlib stream inflates to.
    Inflated(Vec<u8>),
    /// Its zlib stream.
    Compressed(Vec<u8>),
    /// Nothing: they are in the pack file.
    InFile,
}

/// Something [`Entries`] does not read itself, leaving it to gix-pack.
struct Unusual;

/// A received pack's entries with their bytes (see the module's documentation).
pub struct Entries<R, F> {
    state: State<R>,
    /// Where the bytes read so far were copied (flushed before it is read back).
    copy: F,
    hash: gix_hash::Kind,
    given: u32,
    version: gix_pack::data::Version,
}

enum State<R> {
    Own(Box<Own<R>>),
    Gix(Box<GixEntries<R>>),
    Done,
}

/// gix-pack's reader over the copy of what was read, then the rest.
type GixEntries<R> = BytesToEntriesIter<BufReader<io::Chain<io::Take<File>, R>>>;

/// This module's own reader.
struct Own<R> {
    read: BufReader<R>,
    offset: u64,
    left: u32,
    pack: gix_hash::Hasher,
    inflate: gix_zlib::Decompress,
    header: Vec<u8>,
    scratch: Vec<u8>,
    /// Entries inflating to at most this many bytes are kept.
    keep: u64,
    /// Bytes read from the source so far (the length of its copy).
    read_so_far: Rc<Cell<u64>>,
}

/// A reader that counts what its user consumed, not what it buffered ahead. Under a
/// `BufReader` it counts what the source gave (the length of the pack's copy); as a thin
/// pack's reader, whose entries are read one at a time through it, it says between two
/// entries where the next one starts in the received pack.
pub struct Counted<R> {
    /// The reader counted.
    pub inner: R,
    /// The bytes consumed through it so far.
    pub consumed: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.consumed.set(self.consumed.get() + n as u64);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counted<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.inner.consume(amt);
        self.consumed.set(self.consumed.get() + amt as u64);
    }
}

impl<R: Read, F: FnMut() -> io::Result<File>> Entries<Counted<R>, F> {
    /// Read the pack from `source`, which copies everything it gives to a file; `copy` flushes
    /// that file and opens it for reading, should gix-pack's reader have to take over. What
    /// entries inflate to is kept up to `keep` bytes ([`KEEP`]).
    pub fn new(source: R, copy: F, hash: gix_hash::Kind, keep: u64) -> gix_error::Result<Self> {
        let count = Rc::<Cell<u64>>::default();
        let mut read = BufReader::with_capacity(
            64 * 1024,
            Counted {
                inner: source,
                consumed: count.clone(),
            },
        );
        let mut header = [0u8; gix_pack::data::header::SIZE];
        let mut entries = Entries {
            state: State::Done,
            copy,
            hash,
            given: 0,
            version: gix_pack::data::Version::V2,
        };
        let parsed = read
            .read_exact(&mut header)
            .ok()
            .and_then(|()| gix_pack::data::header::decode(&header).ok());
        let Some((version, objects)) = parsed else {
            entries.state = State::Own(Box::new(Own::new(read, 0, hash, keep, count)));
            entries.hand_over()?;
            return Ok(entries);
        };
        entries.version = version;
        let mut own = Own::new(read, objects, hash, keep, count);
        own.pack.update(&header);
        entries.state = State::Own(Box::new(own));
        Ok(entries)
    }
}

impl<R, F> Entries<R, F> {
    /// The pack's version, from its header.
    pub fn version(&self) -> gix_pack::data::Version {
        self.version
    }
}

impl<R: Read> Own<R> {
    fn new(read: BufReader<R>, left: u32, hash: gix_hash::Kind, keep: u64, count: Rc<Cell<u64>>) -> Self {
        Own {
            read,
            offset: gix_pack::data::header::SIZE as u64,
            left,
            pack: gix_hash::hasher(hash),
            inflate: gix_zlib::Decompress::new(),
            header: Vec::with_capacity(32),
            scratch: Vec::new(),
            keep,
            read_so_far: count,
        }
    }

    /// The next entry with its bytes.
    fn next(&mut self, hash: gix_hash::Kind) -> Result<(Entry, Bytes), Unusual> {
        self.left -= 1;
        self.header.clear();
        let parsed = gix_pack::data::Entry::from_read(
            &mut Recording {
                inner: &mut self.read,
                bytes: &mut self.header,
            },
            self.offset,
            hash.len_in_bytes(),
        )
        .map_err(|_| Unusual)?;
        let size = parsed.decompressed_size;
        let mut crc32 = crc32fast::Hasher::new();
        crc32.update(&self.header);
        self.pack.update(&self.header);
        let mut kept = (size <= self.keep).then(Vec::new);
        let compressed_size = self.inflate(size, kept.as_mut(), &mut crc32)?;
        let header_size = u16::try_from(self.header.len()).map_err(|_| Unusual)?;
        let entry = Entry {
            header: parsed.header,
            header_size,
            pack_offset: self.offset,
            compressed: None,
            compressed_size,
            crc32: Some(crc32.finalize()),
            decompressed_size: size,
            trailer: None,
        };
        self.offset += u64::from(header_size) + compressed_size;
        let trailer = if self.left == 0 {
            let mut trailer = hash.null();
            self.read
                .read_exact(trailer.as_mut_slice())
                .map_err(|_| Unusual)?;
            let pack = std::mem::replace(&mut self.pack, gix_hash::hasher(hash));
            let actual = pack.try_finalize().map_err(|_| Unusual)?;
            if actual != trailer {
                return Err(Unusual);
            }
            Some(trailer)
        } else {
            None
        };
        let bytes = kept.map_or(Bytes::InFile, Bytes::Inflated);
        Ok((Entry { trailer, ..entry }, bytes))
    }

    /// Inflate the zlib stream at the reader into `kept` (or scratch space), exactly `size`
    /// bytes, hashing what it consumes; the stream's compressed size.
    fn inflate(
        &mut self,
        size: u64,
        mut kept: Option<&mut Vec<u8>>,
        crc32: &mut crc32fast::Hasher,
    ) -> Result<u64, Unusual> {
        use gix_zlib::{FlushDecompress, Status};
        self.inflate.reset();
        if let Some(kept) = kept.as_deref_mut() {
            // `size` is at most `keep`.
            kept.resize(usize::try_from(size).map_err(|_| Unusual)?, 0);
        } else if self.scratch.is_empty() {
            self.scratch = vec![0; 64 * 1024];
        }
        let (mut written, mut compressed) = (0u64, 0u64);
        loop {
            let input = self.read.fill_buf().map_err(|_| Unusual)?;
            let eof = input.is_empty();
            let out = match kept.as_deref_mut() {
                Some(kept) => &mut kept[usize::try_from(written).map_err(|_| Unusual)?..],
                None => &mut self.scratch[..],
            };
            let (before_in, before_out) = (self.inflate.total_in(), self.inflate.total_out());
            let flush = if eof {
                FlushDecompress::Finish
            } else {
                FlushDecompress::None
            };
            let status = self.inflate.decompress(input, out, flush);
            let consumed = usize::try_from(self.inflate.total_in() - before_in).map_err(|_| Unusual)?;
            let produced = self.inflate.total_out() - before_out;
            let taken = input.get(..consumed).ok_or(Unusual)?;
            crc32.update(taken);
            self.pack.update(taken);
            self.read.consume(consumed);
            written += produced;
            compressed += consumed as u64;
            if written > size {
                return Err(Unusual);
            }
            match status {
                Ok(Status::StreamEnd) => break,
                Ok(_) if eof || (consumed == 0 && produced == 0) => return Err(Unusual),
                Ok(_) => {}
                Err(_) => return Err(Unusual),
            }
        }
        if written != size {
            return Err(Unusual);
        }
        Ok(compressed)
    }
}

impl<R: Read, F: FnMut() -> io::Result<File>> Entries<Counted<R>, F> {
    /// Let gix-pack's reader read the pack again from its start, skipping what was given.
    fn hand_over(&mut self) -> gix_error::Result<()> {
        let State::Own(own) = std::mem::replace(&mut self.state, State::Done) else {
            return Ok(());
        };
        let read_so_far = own.read_so_far.get();
        let Counted { inner: rest, .. } = own.read.into_inner();
        let copy = (self.copy)().map_err(gix_error::Error::from_error)?;
        let again = BufReader::with_capacity(64 * 1024, copy.take(read_so_far).chain(Counted {
            inner: rest,
            consumed: Rc::default(),
        }));
        let mut gix = BytesToEntriesIter::new_from_header(
            again,
            Mode::Verify,
            EntryDataMode::Crc32,
            self.hash,
        )?;
        self.version = gix.version();
        for _ in 0..self.given {
            match gix.next() {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        self.state = State::Gix(Box::new(gix));
        Ok(())
    }
}

impl<R: Read, F: FnMut() -> io::Result<File>> Iterator for Entries<Counted<R>, F> {
    type Item = gix_error::Result<(Entry, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        if let State::Own(own) = &mut self.state {
            if own.left == 0 {
                self.state = State::Done;
                return None;
            }
            match own.next(self.hash) {
                Ok(entry) => {
                    self.given += 1;
                    if own.left == 0 {
                        self.state = State::Done;
                    }
                    return Some(Ok(entry));
                }
                Err(Unusual) => {
                    if let Err(e) = self.hand_over() {
                        self.state = State::Done;
                        return Some(Err(e));
                    }
                }
            }
        }
        match &mut self.state {
            State::Gix(gix) => match gix.next()? {
                Ok(entry) => Some(Ok((entry, Bytes::InFile))),
                Err(e) => {
                    self.state = State::Done;
                    Some(Err(e))
                }
            },
            _ => None,
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = match &self.state {
            State::Own(own) => own.left as usize,
            State::Gix(gix) => gix.size_hint().0,
            State::Done => 0,
        };
        (left, Some(left))
    }
}

/// A reader that keeps a copy of what is read through it (an entry's header).
struct Recording<'a, R> {
    inner: &'a mut R,
    bytes: &'a mut Vec<u8>,
}

impl<R: Read> Read for Recording<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}
