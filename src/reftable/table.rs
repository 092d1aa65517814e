//! One table: [`TableWriter`] lays records out as git's `reftable/writer.c` does (block size,
//! padding, ref index when there are more than 3 ref blocks, obj section only when a ref index
//! was written, multi-level indexes, log section last, unpadded last block), and [`Table`]
//! parses a table's bytes (`reftable/table.c`): header, footer with CRC-32, ref iteration in
//! order, lookups through the index, log iteration, and [`Records`], a section read record
//! by record without decoding (what a compaction copies).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use gix_hash::ObjectId;
use gix_object::bstr::{BString, ByteSlice};

use super::block::{Block, BlockWriter};
use super::record::{
    self, BLOCK_TYPE_INDEX, BLOCK_TYPE_LOG, BLOCK_TYPE_OBJ, BLOCK_TYPE_REF, common_prefix,
    decode_key, decode_obj_value, decode_string, encode_obj_value, encode_string, get_varint,
    put_varint,
};
use super::{Error, LogRecord, LogUpdate, LogValue, RefRecord, RefValue, Result};

/// git's default block size.
pub const DEFAULT_BLOCK_SIZE: u32 = 4096;
/// git's default restart interval.
pub const DEFAULT_RESTART_INTERVAL: u16 = 16;
/// Header size of a version 1 table.
pub const HEADER_SIZE_V1: usize = 24;
/// Footer size of a version 1 table.
pub const FOOTER_SIZE_V1: usize = 68;
/// The largest block size the format allows.
pub const MAX_BLOCK_SIZE: u32 = (1 << 24) - 1;
/// The format id of a version 2 table of SHA-1 ids (`sha1`, git's `REFTABLE_FORMAT_ID_SHA1`).
const FORMAT_ID_SHA1: &[u8; 4] = b"sha1";
/// The format id of a version 2 table of SHA-256 ids (`s256`, git's
/// `REFTABLE_FORMAT_ID_SHA256`).
const FORMAT_ID_SHA256: &[u8; 4] = b"s256";

/// The version git writes for tables of `hash` ids: 1 for SHA-1, 2 (with the hash's format id
/// in the header) otherwise.
fn version_for(hash: gix_hash::Kind) -> u8 {
    if hash == gix_hash::Kind::Sha1 { 1 } else { 2 }
}

/// The size of a table's header when it holds `hash` ids.
pub fn header_size_for(hash: gix_hash::Kind) -> usize {
    header_size(version_for(hash))
}

/// The size of a table's footer when it holds `hash` ids.
pub fn footer_size_for(hash: gix_hash::Kind) -> usize {
    footer_size(version_for(hash))
}

fn header_size(version: u8) -> usize {
    if version == 2 { 28 } else { 24 }
}

fn footer_size(version: u8) -> usize {
    if version == 2 { 72 } else { 68 }
}

/// Options of a table writer, with git's defaults (`reftable.*` config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// `reftable.blockSize`, default 4096.
    pub block_size: u32,
    /// `reftable.restartInterval`, default 16.
    pub restart_interval: u16,
    /// `reftable.indexObjects`, default true: write obj blocks when there is a ref index.
    pub index_objects: bool,
    /// Do not pad blocks (git's `unpadded` option; not settable through git's config).
    pub unpadded: bool,
    /// Store log messages as given instead of normalizing to one line ending in `\n`.
    pub exact_log_message: bool,
    /// `reftable.geometricFactor`, default 2.
    pub geometric_factor: u8,
    /// Disable auto-compaction after an addition (`GIT_TEST_REFTABLE_AUTOCOMPACTION=false`).
    pub disable_auto_compact: bool,
    /// `reftable.lockTimeout`: how long to wait for `tables.list.lock` (default 100 ms; `-1`
    /// waits forever, `0` tries once).
    pub lock_timeout: crate::lockfile::Timeout,
    /// `core.fsync`: a new table and `tables.list.lock` are synced before `tables.list` is
    /// renamed into place when it has `reference` (git's `reftable_fsync`; not by default).
    pub fsync: crate::fsync::Durability,
    /// The repository's object format: SHA-1 tables are version 1, SHA-256 tables version 2
    /// with the hash id `s256` in their header, as git writes them.
    pub hash: gix_hash::Kind,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            block_size: DEFAULT_BLOCK_SIZE,
            restart_interval: DEFAULT_RESTART_INTERVAL,
            index_objects: true,
            unpadded: false,
            exact_log_message: false,
            geometric_factor: 2,
            disable_auto_compact: false,
            lock_timeout: crate::lockfile::Timeout::REFTABLE,
            fsync: crate::fsync::Durability::default(),
            hash: gix_hash::Kind::Sha1,
        }
    }
}

#[derive(Default)]
struct SectionStats {
    blocks: usize,
    offset: u64,
    index_offset: u64,
    index_blocks: usize,
}

/// Writes one table into `W`: into memory (a `Vec<u8>`, [`TableWriter::new`]) or streamed to
/// a file ([`TableWriter::to`]), a block at a time. Records must be added in key order: all
/// refs (sorted by name), then all logs (sorted by name, newest update index first).
pub struct TableWriter<W: Write = Vec<u8>> {
    opts: WriteOptions,
    min_update_index: u64,
    max_update_index: u64,
    out: W,
    /// The file `out` writes to, for errors (empty in memory).
    path: PathBuf,
    /// Bytes written to `out`.
    written: u64,
    pending_padding: usize,
    block: Option<BlockWriter>,
    last_key: Vec<u8>,
    index: Vec<(Vec<u8>, u64)>,
    obj_index: BTreeMap<Vec<u8>, Vec<u64>>,
    ref_stats: SectionStats,
    obj_stats: SectionStats,
    log_stats: SectionStats,
    idx_blocks: usize,
    object_id_len: u64,
    /// Scratch space for one record's value (and its payload or log key), kept between records.
    value: Vec<u8>,
    payload: Vec<u8>,
}

impl TableWriter {
    /// A writer of a table in memory covering update indexes `min..=max`.
    pub fn new(opts: WriteOptions, min_update_index: u64, max_update_index: u64) -> Result<Self> {
        TableWriter::to(
            Vec::new(),
            PathBuf::new(),
            opts,
            min_update_index,
            max_update_index,
        )
    }
}

impl<W: Write> TableWriter<W> {
    /// A writer of a table covering update indexes `min..=max` into `out`, the file at `path`
    /// (named in errors); a block is written as soon as it is full.
    pub fn to(
        out: W,
        path: PathBuf,
        opts: WriteOptions,
        min_update_index: u64,
        max_update_index: u64,
    ) -> Result<Self> {
        if opts.block_size == 0 || opts.block_size > MAX_BLOCK_SIZE {
            return Err(Error::InvalidRecord(format!(
                "block size {} out of range",
                opts.block_size
            )));
        }
        let mut w = TableWriter {
            opts,
            min_update_index,
            max_update_index,
            out,
            path,
            written: 0,
            pending_padding: 0,
            block: None,
            last_key: Vec::new(),
            index: Vec::new(),
            obj_index: BTreeMap::new(),
            ref_stats: SectionStats::default(),
            obj_stats: SectionStats::default(),
            log_stats: SectionStats::default(),
            idx_blocks: 0,
            object_id_len: 0,
            value: Vec::new(),
            payload: Vec::new(),
        };
        w.reinit_block(BLOCK_TYPE_REF);
        Ok(w)
    }

    /// The logical write position: bytes written plus padding queued for the next write.
    fn next(&self) -> u64 {
        self.written + self.pending_padding as u64
    }

    fn reinit_block(&mut self, typ: u8) {
        let header_off = if self.next() == 0 {
            header_size_for(self.opts.hash)
        } else {
            0
        };
        self.last_key.clear();
        self.block = Some(BlockWriter::new(
            typ,
            self.opts.block_size as usize,
            header_off,
            usize::from(self.opts.restart_interval.max(1)),
        ));
    }

    fn write_header(&self, dest: &mut [u8]) {
        dest[..4].copy_from_slice(b"REFT");
        dest[4] = version_for(self.opts.hash);
        dest[5..8].copy_from_slice(&self.opts.block_size.to_be_bytes()[1..]);
        dest[8..16].copy_from_slice(&self.min_update_index.to_be_bytes());
        dest[16..24].copy_from_slice(&self.max_update_index.to_be_bytes());
        if dest[4] == 2 {
            dest[24..28].copy_from_slice(match self.opts.hash {
                gix_hash::Kind::Sha1 => FORMAT_ID_SHA1,
                _ => FORMAT_ID_SHA256,
            });
        }
    }

    fn padded_write(&mut self, data: &[u8], padding: usize) -> Result<()> {
        const ZEROS: [u8; 4096] = [0; 4096];
        let mut pad = std::mem::replace(&mut self.pending_padding, padding);
        while pad > 0 {
            let n = pad.min(ZEROS.len());
            self.write(&ZEROS[..n])?;
            pad -= n;
        }
        self.write(data)
    }

    fn write(&mut self, data: &[u8]) -> Result<()> {
        self.out.write_all(data).map_err(|source| Error::Io {
            op: "write",
            path: self.path.clone(),
            source,
        })?;
        self.written += data.len() as u64;
        Ok(())
    }

    fn add_record(&mut self, typ: u8, key: &[u8], extra: u8, value: &[u8]) -> Result<()> {
        if !self.last_key.is_empty() && self.last_key.as_slice() >= key {
            return Err(Error::InvalidRecord(format!(
                "key {:?} not after {:?}",
                key.as_bstr(),
                self.last_key.as_bstr()
            )));
        }
        if key.is_empty() {
            return Err(Error::InvalidRecord("empty key".into()));
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        if self.block.is_none() {
            self.reinit_block(typ);
            self.last_key.extend_from_slice(key);
        }
        let block = self.block.as_mut().expect("initialized above");
        if block.typ != typ {
            return Err(Error::InvalidRecord(format!(
                "record of type {:?} in a {:?} section",
                typ as char, block.typ as char
            )));
        }
        if block.add(key, extra, value) {
            return Ok(());
        }
        self.flush_block()?;
        self.reinit_block(typ);
        self.last_key.extend_from_slice(key);
        if self
            .block
            .as_mut()
            .expect("initialized")
            .add(key, extra, value)
        {
            Ok(())
        } else {
            Err(Error::EntryTooLarge(format!(
                "record {:?} does not fit in a block of {} bytes",
                key.as_bstr(),
                self.opts.block_size
            )))
        }
    }

    fn flush_block(&mut self) -> Result<()> {
        let Some(block) = self.block.take() else {
            return Ok(());
        };
        if block.entries == 0 {
            self.block = Some(block);
            return Ok(());
        }
        let typ = block.typ;
        let last_key = block.last_key.clone();
        let mut raw = block.finish();
        let padding = if !self.opts.unpadded && typ != BLOCK_TYPE_LOG {
            (self.opts.block_size as usize).saturating_sub(raw.len())
        } else {
            0
        };
        let next = self.next();
        let stats = match typ {
            BLOCK_TYPE_REF => Some(&mut self.ref_stats),
            BLOCK_TYPE_OBJ => Some(&mut self.obj_stats),
            BLOCK_TYPE_LOG => Some(&mut self.log_stats),
            _ => None,
        };
        match stats {
            Some(s) => {
                if s.blocks == 0 && next > 0 {
                    s.offset = next;
                }
                s.blocks += 1;
            }
            None => self.idx_blocks += 1,
        }
        if next == 0 {
            self.write_header(&mut raw[..header_size_for(self.opts.hash)]);
        }
        self.padded_write(&raw, padding)?;
        self.index.push((last_key, next));
        Ok(())
    }

    fn finish_section(&mut self) -> Result<()> {
        let typ = self.block.as_ref().map_or(BLOCK_TYPE_REF, |b| b.typ);
        let before = self.idx_blocks;
        self.flush_block()?;
        let threshold = if self.opts.unpadded { 1 } else { 3 };
        let mut index_start = 0;
        while self.index.len() > threshold {
            index_start = self.next();
            self.reinit_block(BLOCK_TYPE_INDEX);
            let idx = std::mem::take(&mut self.index);
            for (key, off) in &idx {
                let mut v = Vec::new();
                put_varint(&mut v, *off);
                self.add_record(BLOCK_TYPE_INDEX, key, 0, &v)?;
            }
            self.flush_block()?;
        }
        self.index.clear();
        let stats = match typ {
            BLOCK_TYPE_OBJ => &mut self.obj_stats,
            BLOCK_TYPE_LOG => &mut self.log_stats,
            _ => &mut self.ref_stats,
        };
        stats.index_blocks = self.idx_blocks - before;
        stats.index_offset = index_start;
        self.last_key.clear();
        Ok(())
    }

    fn dump_object_index(&mut self) -> Result<()> {
        let mut max = 1;
        let mut prev: Option<&Vec<u8>> = None;
        for h in self.obj_index.keys() {
            if let Some(p) = prev {
                max = max.max(common_prefix(p, h));
            }
            prev = Some(h);
        }
        let id_len = max + 1;
        self.object_id_len = id_len as u64;
        self.reinit_block(BLOCK_TYPE_OBJ);
        let entries = std::mem::take(&mut self.obj_index);
        let mut value = Vec::new();
        for (hash, offsets) in &entries {
            let key = &hash[..id_len];
            value.clear();
            encode_obj_value(&mut value, offsets);
            let extra = record::obj_val_type(offsets);
            let block = self.block.as_mut().expect("obj block initialized");
            if block.add(key, extra, &value) {
                continue;
            }
            self.flush_block()?;
            self.reinit_block(BLOCK_TYPE_OBJ);
            let block = self.block.as_mut().expect("obj block initialized");
            if block.add(key, extra, &value) {
                continue;
            }
            value.clear();
            encode_obj_value(&mut value, &[]);
            if !block.add(key, 0, &value) {
                return Err(Error::EntryTooLarge(
                    "obj record does not fit in an empty block".into(),
                ));
            }
        }
        self.finish_section()
    }

    fn finish_public_section(&mut self) -> Result<()> {
        let Some(typ) = self.block.as_ref().map(|b| b.typ) else {
            return Ok(());
        };
        self.finish_section()?;
        if typ == BLOCK_TYPE_REF && self.opts.index_objects && self.ref_stats.index_blocks > 0 {
            self.dump_object_index()?;
        }
        self.obj_index.clear();
        self.block = None;
        Ok(())
    }

    /// Add a ref record; its `update_index` must lie within the table's limits.
    pub fn add_ref(&mut self, rec: &RefRecord) -> Result<()> {
        let mut payload = std::mem::take(&mut self.payload);
        payload.clear();
        match &rec.value {
            RefValue::Deletion => {}
            RefValue::Val1(id) => payload.extend_from_slice(id.as_bytes()),
            RefValue::Val2(id, peeled) => {
                payload.extend_from_slice(id.as_bytes());
                payload.extend_from_slice(peeled.as_bytes());
            }
            RefValue::Symref(target) => encode_string(&mut payload, target),
        }
        let ids: &[&ObjectId] = match &rec.value {
            RefValue::Val1(id) => &[id],
            RefValue::Val2(id, peeled) => &[id, peeled],
            _ => &[],
        };
        let res = match ids.iter().find(|id| id.kind() != self.opts.hash) {
            Some(id) => Err(Error::InvalidRecord(format!(
                "object id {id} is not {}",
                self.opts.hash
            ))),
            None => self.add_ref_raw(
                &rec.name,
                rec.update_index,
                rec.value.value_type(),
                &payload,
            ),
        };
        self.payload = payload;
        res
    }

    /// Add a ref record given as its parts: `name`, `update_index` (within the table's limits),
    /// value type `extra` and `payload`, the value's bytes after its update index (the object
    /// id(s) of the table's hash, or the symref target as a length-prefixed string): what a
    /// compaction copies from a table without decoding the record.
    pub fn add_ref_raw(
        &mut self,
        name: &[u8],
        update_index: u64,
        extra: u8,
        payload: &[u8],
    ) -> Result<()> {
        if update_index < self.min_update_index || update_index > self.max_update_index {
            return Err(Error::InvalidRecord(format!(
                "ref {} has update index {update_index} outside {}..={}",
                name.as_bstr(),
                self.min_update_index,
                self.max_update_index
            )));
        }
        let mut value = std::mem::take(&mut self.value);
        value.clear();
        put_varint(&mut value, update_index - self.min_update_index);
        value.extend_from_slice(payload);
        let res = self.add_record(BLOCK_TYPE_REF, name, extra, &value);
        self.value = value;
        res?;
        if self.opts.index_objects {
            let off = self.next();
            let hl = self.opts.hash.len_in_bytes();
            let ids = match extra {
                record::REF_VAL1 => 1,
                record::REF_VAL2 => 2,
                _ => 0,
            };
            for k in 0..ids {
                let Some(id) = payload.get(k * hl..(k + 1) * hl) else {
                    return Err(Error::InvalidRecord(format!(
                        "ref {} holds an object id shorter than {}",
                        name.as_bstr(),
                        self.opts.hash
                    )));
                };
                // Many refs point at one object: look up before allocating a key.
                match self.obj_index.get_mut(id) {
                    Some(offsets) if offsets.last() == Some(&off) => {}
                    Some(offsets) => offsets.push(off),
                    None => {
                        self.obj_index.insert(id.to_vec(), vec![off]);
                    }
                }
            }
        }
        Ok(())
    }

    /// Add a log record. An update's message is normalized as git does (trailing newlines
    /// stripped, one `\n` appended; a multi-line message is refused) unless
    /// [`WriteOptions::exact_log_message`] is set.
    pub fn add_log(&mut self, rec: &LogRecord) -> Result<()> {
        self.add_log_as(rec, !self.opts.exact_log_message)
    }

    /// [`TableWriter::add_log`], the message normalized when `normalize` says so whatever the
    /// options say (a compaction, storing the older tables' messages exactly, writing a new
    /// addition's records as adding them would have).
    pub fn add_log_as(&mut self, rec: &LogRecord, normalize: bool) -> Result<()> {
        let mut value = std::mem::take(&mut self.value);
        value.clear();
        let extra = match &rec.value {
            LogValue::Deletion => 0,
            LogValue::Update(u) => {
                value.extend_from_slice(u.old.as_bytes());
                value.extend_from_slice(u.new.as_bytes());
                encode_string(&mut value, &u.name);
                encode_string(&mut value, &u.email);
                put_varint(&mut value, u.time);
                value.extend_from_slice(&u.tz_offset.to_be_bytes());
                if normalize {
                    let msg = one_line(&rec.refname, &u.message)?;
                    put_varint(&mut value, msg.len() as u64 + 1);
                    value.extend_from_slice(msg);
                    value.push(b'\n');
                } else {
                    encode_string(&mut value, &u.message);
                }
                1
            }
        };
        let mut key = std::mem::take(&mut self.payload);
        key.clear();
        record::put_log_key(&mut key, &rec.refname, rec.update_index);
        let res = self.add_log_raw(&key, extra, &value);
        self.payload = key;
        self.value = value;
        res
    }

    /// Add a log record given as its key (`refname '\0' be64(!update_index)`), value type
    /// `extra` (0: tombstone, 1: update) and encoded value, stored as given (a compaction's
    /// copy of a record it did not decode). An update's index must be at most the table's
    /// maximum.
    pub fn add_log_raw(&mut self, key: &[u8], extra: u8, value: &[u8]) -> Result<()> {
        if extra != 0 {
            let Some((refname, update_index)) = record::split_log_key(key) else {
                return Err(Error::InvalidRecord(format!(
                    "log key {:?} has no update index",
                    key.as_bstr()
                )));
            };
            if update_index > self.max_update_index {
                return Err(Error::InvalidRecord(format!(
                    "log of {} has update index {update_index} above {}",
                    refname.as_bstr(),
                    self.max_update_index
                )));
            }
        }
        if self.block.as_ref().is_some_and(|b| b.typ == BLOCK_TYPE_REF) {
            self.finish_public_section()?;
        }
        // The section before the logs is not padded at its end.
        self.pending_padding = 0;
        self.add_record(BLOCK_TYPE_LOG, key, extra, value)
    }

    /// Finish the table: the last section, then the footer. Returns `out` holding the table
    /// and whether it is empty (git does not add empty tables to a stack).
    pub fn finish(mut self) -> Result<(W, bool)> {
        self.finish_public_section()?;
        self.pending_padding = 0;
        let empty = self.next() == 0;
        let mut header = vec![0u8; header_size_for(self.opts.hash)];
        self.write_header(&mut header);
        if empty {
            self.write(&header)?;
        }
        let mut footer = Vec::with_capacity(footer_size_for(self.opts.hash));
        footer.extend_from_slice(&header);
        footer.extend_from_slice(&self.ref_stats.index_offset.to_be_bytes());
        footer
            .extend_from_slice(&((self.obj_stats.offset << 5) | self.object_id_len).to_be_bytes());
        footer.extend_from_slice(&self.obj_stats.index_offset.to_be_bytes());
        footer.extend_from_slice(&self.log_stats.offset.to_be_bytes());
        footer.extend_from_slice(&self.log_stats.index_offset.to_be_bytes());
        let crc = zlib_rs::crc32::crc32(0, &footer);
        footer.extend_from_slice(&crc.to_be_bytes());
        self.write(&footer)?;
        Ok((self.out, empty))
    }
}

/// A table's bytes: its file mapped into memory, as git's `reftable/blocksource.c` maps it
/// (only the pages a read touches are loaded, and a table kept across reloads is shared, not
/// copied), or bytes given in memory.
#[derive(Debug)]
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A parsed table.
#[derive(Debug, Clone)]
pub struct Table {
    name: String,
    data: std::sync::Arc<Bytes>,
    /// Table bytes without the footer.
    size: usize,
    version: u8,
    hash: gix_hash::Kind,
    block_size: usize,
    min_update_index: u64,
    max_update_index: u64,
    ref_index_offset: u64,
    obj_offset: u64,
    object_id_len: u8,
    obj_index_offset: u64,
    log_offset: u64,
    log_index_offset: u64,
    refs_present: bool,
    logs_present: bool,
}

impl Table {
    /// Map and parse the table file at `path`.
    pub fn open(path: &Path) -> Result<Table> {
        let io = |op| {
            move |source| Error::Io {
                op,
                path: path.to_owned(),
                source,
            }
        };
        let file = std::fs::File::open(path).map_err(io("open"))?;
        let len = file.metadata().map_err(io("stat"))?.len();
        let data = if len == 0 {
            Bytes::Owned(Vec::new()) // not mappable; refused as corrupt below
        } else {
            // SAFETY: a table's file does not change once written: git and berth write it under
            // a temporary name and rename it into place, and remove it only after it has left
            // `tables.list`; a mapping stays valid after its file is removed. (A file truncated
            // under the mapping by hand would end the process with SIGBUS, as it would git.)
            #[allow(unsafe_code)]
            let map = unsafe { memmap2::Mmap::map(&file) };
            Bytes::Mapped(map.map_err(io("map"))?)
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Table::parse(name, data)
    }

    /// Parse a table from its bytes; `name` is used in errors.
    pub fn from_bytes(name: impl Into<String>, data: Vec<u8>) -> Result<Table> {
        Table::parse(name.into(), Bytes::Owned(data))
    }

    fn parse(name: String, data: Bytes) -> Result<Table> {
        let corrupt = |reason: &str| Error::Corrupt {
            table: name.clone(),
            reason: reason.to_owned(),
        };
        if data.len() < 5 || &data[..4] != b"REFT" {
            return Err(corrupt("no REFT magic"));
        }
        let version = data[4];
        if version != 1 && version != 2 {
            return Err(corrupt(&format!("unknown format version {version}")));
        }
        let (hs, fs) = (header_size(version), footer_size(version));
        if data.len() < hs + fs {
            return Err(corrupt(&format!(
                "{} bytes is shorter than a header and a footer",
                data.len()
            )));
        }
        let size = data.len() - fs;
        let footer = &data[size..];
        if footer[..hs] != data[..hs] {
            return Err(corrupt("footer does not repeat the header"));
        }
        let crc = zlib_rs::crc32::crc32(0, &footer[..fs - 4]);
        let stored = u32::from_be_bytes(footer[fs - 4..].try_into().expect("4 bytes"));
        if crc != stored {
            return Err(corrupt(&format!(
                "footer CRC-32 {stored:08x} does not match {crc:08x}"
            )));
        }
        let hash = if version == 2 {
            match &footer[24..28] {
                id if id == FORMAT_ID_SHA1 => gix_hash::Kind::Sha1,
                id if id == FORMAT_ID_SHA256 => gix_hash::Kind::Sha256,
                id => {
                    return Err(Error::Unsupported {
                        table: name,
                        reason: format!("format version 2 (hash {:?})", id.as_bstr()),
                    });
                }
            }
        } else {
            gix_hash::Kind::Sha1
        };
        let be64 = |at: usize| u64::from_be_bytes(footer[at..at + 8].try_into().expect("8 bytes"));
        let block_size = u32::from_be_bytes([0, footer[5], footer[6], footer[7]]) as usize;
        let obj = be64(hs + 8);
        let first_block_type = data[hs];
        let t = Table {
            size,
            version,
            hash,
            block_size,
            min_update_index: be64(8),
            max_update_index: be64(16),
            ref_index_offset: be64(hs),
            obj_offset: obj >> 5,
            object_id_len: (obj & 0x1f) as u8,
            obj_index_offset: be64(hs + 16),
            log_offset: be64(hs + 24),
            log_index_offset: be64(hs + 32),
            refs_present: size > hs && first_block_type == BLOCK_TYPE_REF,
            logs_present: (size > hs && first_block_type == BLOCK_TYPE_LOG) || be64(hs + 24) > 0,
            name,
            data: std::sync::Arc::new(data),
        };
        if t.obj_offset > 0 && t.object_id_len == 0 {
            return Err(t.corrupt("obj section without an object id length".into()));
        }
        if t.min_update_index > t.max_update_index {
            return Err(t.corrupt("min_update_index above max_update_index".into()));
        }
        Ok(t)
    }

    /// The object format of the ids it holds (version 1: SHA-1; version 2: its format id).
    pub fn hash(&self) -> gix_hash::Kind {
        self.hash
    }

    /// The table's file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The smallest update index of the table.
    pub fn min_update_index(&self) -> u64 {
        self.min_update_index
    }

    /// The largest update index of the table.
    pub fn max_update_index(&self) -> u64 {
        self.max_update_index
    }

    /// The table's size without the footer (git's `table->size`).
    pub fn size(&self) -> u64 {
        self.size as u64
    }

    /// The block size in the header (0 for unaligned tables).
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Position of the ref index (0: none).
    pub fn ref_index_offset(&self) -> u64 {
        self.ref_index_offset
    }

    /// Position of the first obj block (0: none) and the object id abbreviation length.
    pub fn obj_section(&self) -> (u64, u8) {
        (self.obj_offset, self.object_id_len)
    }

    fn corrupt(&self, reason: String) -> Error {
        Error::Corrupt {
            table: self.name.clone(),
            reason,
        }
    }

    fn block_at(&self, off: u64, want: Option<u8>) -> Result<Option<Block<'_>>> {
        let file = &self.data[..self.size];
        let Ok(off) = usize::try_from(off) else {
            return Err(self.corrupt(format!("offset {off} out of range")));
        };
        let header_off = if off == 0 {
            header_size(self.version)
        } else {
            0
        };
        Block::parse(file, off, header_off, self.block_size, want).map_err(|r| self.corrupt(r))
    }

    /// Walk the blocks of type `typ` from `start` to the end of that section, calling `f` for
    /// each block.
    fn for_each_block(
        &self,
        start: u64,
        typ: u8,
        mut f: impl FnMut(&Block<'_>) -> Result<bool>,
    ) -> Result<()> {
        let mut off = start;
        while let Some(block) = self.block_at(off, Some(typ))? {
            if !f(&block)? {
                break;
            }
            off += block.full_size as u64;
        }
        Ok(())
    }

    /// The parts of a ref record's value `v` of type `extra`: its update index, where its
    /// payload (the ids or the symref target) starts and the value's length.
    fn ref_value_parts(&self, extra: u8, v: &[u8]) -> Option<(u64, usize, usize)> {
        let (delta, n) = get_varint(v)?;
        let len = self.hash.len_in_bytes();
        let end = match extra {
            record::REF_DELETION => n,
            record::REF_VAL1 => n + len,
            record::REF_VAL2 => n + 2 * len,
            record::REF_SYMREF => n + decode_string(v.get(n..)?)?.1,
            _ => return None,
        };
        if end > v.len() {
            return None;
        }
        Some((self.min_update_index.checked_add(delta)?, n, end))
    }

    /// The length of a log record's value `v` of type `extra`, and the update index in its key.
    fn log_value_len(&self, key: &[u8], extra: u8, v: &[u8]) -> Option<(u64, usize)> {
        let (_, update_index) = record::split_log_key(key)?;
        let hash_size = self.hash.len_in_bytes();
        let len = match extra {
            0 => 0,
            1 => {
                let mut n = 2 * hash_size;
                n += decode_string(v.get(n..)?)?.1;
                n += decode_string(v.get(n..)?)?.1;
                n += get_varint(v.get(n..)?)?.1;
                v.get(n..n + 2)?;
                n += 2;
                n + decode_string(v.get(n..)?)?.1
            }
            _ => return None,
        };
        Some((update_index, len))
    }

    fn decode_ref(&self, key: &[u8], extra: u8, v: &[u8]) -> Option<(RefRecord<'static>, usize)> {
        let (update_index, start, end) = self.ref_value_parts(extra, v)?;
        let p = &v[start..end];
        let len = self.hash.len_in_bytes();
        let value = match extra {
            record::REF_DELETION => RefValue::Deletion,
            record::REF_VAL1 => RefValue::Val1(ObjectId::try_from(p).ok()?),
            record::REF_VAL2 => RefValue::Val2(
                ObjectId::try_from(&p[..len]).ok()?,
                ObjectId::try_from(&p[len..]).ok()?,
            ),
            _ => RefValue::Symref(decode_string(p)?.0.into()),
        };
        Some((
            RefRecord {
                name: BString::from(key).into(),
                update_index,
                value,
            },
            end,
        ))
    }

    fn decode_log(&self, key: &[u8], extra: u8, v: &[u8]) -> Option<(LogRecord, usize)> {
        let (update_index, end) = self.log_value_len(key, extra, v)?;
        let refname = BString::from(&key[..key.len() - 9]);
        if extra == 0 {
            let value = LogValue::Deletion;
            return Some((
                LogRecord {
                    refname,
                    update_index,
                    value,
                },
                0,
            ));
        }
        let hash_size = self.hash.len_in_bytes();
        let old = ObjectId::try_from(&v[..hash_size]).ok()?;
        let new = ObjectId::try_from(&v[hash_size..2 * hash_size]).ok()?;
        let mut n = 2 * hash_size;
        let (name, m) = decode_string(&v[n..])?;
        n += m;
        let (email, m) = decode_string(&v[n..])?;
        n += m;
        let (time, m) = get_varint(&v[n..])?;
        n += m;
        let tz_offset = i16::from_be_bytes([v[n], v[n + 1]]);
        n += 2;
        let (message, _) = decode_string(&v[n..])?;
        let value = LogValue::Update(LogUpdate {
            old,
            new,
            name: name.into(),
            email: email.into(),
            time,
            tz_offset,
            message: message.into(),
        });
        Some((
            LogRecord {
                refname,
                update_index,
                value,
            },
            end,
        ))
    }

    /// The ref section record by record, undecoded ([`Records`]).
    pub fn ref_records(&self) -> Records<'_> {
        Records::new(self, BLOCK_TYPE_REF, 0, self.refs_present)
    }

    /// The log section record by record, undecoded ([`Records`]).
    pub fn log_records(&self) -> Records<'_> {
        Records::new(self, BLOCK_TYPE_LOG, self.log_offset, self.logs_present)
    }

    /// All ref records of the table in name order, tombstones included.
    pub fn refs(&self) -> Result<Vec<RefRecord<'static>>> {
        let mut out = Vec::new();
        if !self.refs_present {
            return Ok(out);
        }
        self.for_each_block(0, BLOCK_TYPE_REF, |block| {
            let mut it = block.iter();
            while let Some(rec) = it
                .next_record(|k, e, v| self.decode_ref(k, e, v))
                .map_err(|r| self.corrupt(r))?
            {
                if out.last().is_some_and(|p: &RefRecord| p.name >= rec.name) {
                    return Err(self.corrupt(format!("ref {} out of order", rec.name)));
                }
                out.push(rec);
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// All log records of the table in key order (by name, newest first), tombstones included.
    pub fn logs(&self) -> Result<Vec<LogRecord>> {
        let mut out = Vec::new();
        if !self.logs_present {
            return Ok(out);
        }
        let mut last_key: Vec<u8> = Vec::new();
        self.for_each_block(self.log_offset, BLOCK_TYPE_LOG, |block| {
            let mut it = block.iter();
            while let Some(rec) = it
                .next_record(|k, e, v| self.decode_log(k, e, v))
                .map_err(|r| self.corrupt(r))?
            {
                let key = rec.key();
                if !last_key.is_empty() && last_key >= key {
                    return Err(self.corrupt(format!("log of {} out of order", rec.refname)));
                }
                last_key = key;
                out.push(rec);
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// Find the block that may hold `key` through the index whose top level starts at
    /// `index_offset`: returns the block position, or `None` when the key is past the last one.
    fn seek_index(&self, index_offset: u64, key: &[u8]) -> Result<Option<u64>> {
        let mut level_start = index_offset;
        for _depth in 0..64 {
            let mut target = None;
            self.for_each_block(level_start, BLOCK_TYPE_INDEX, |block| {
                let mut it = block.iter();
                while let Some(off) = it
                    .next_record(|_, _, v| get_varint(v))
                    .map_err(|r| self.corrupt(r))?
                {
                    if it.key.as_slice() >= key {
                        target = Some(off);
                        return Ok(false);
                    }
                }
                Ok(true)
            })?;
            let Some(off) = target else {
                return Ok(None);
            };
            match self.block_at(off, None)? {
                Some(b) if b.typ == BLOCK_TYPE_INDEX => level_start = off,
                Some(_) => return Ok(Some(off)),
                None => return Err(self.corrupt(format!("index points past the end: {off}"))),
            }
        }
        Err(self.corrupt("index deeper than 64 levels".into()))
    }

    /// Look up one ref record (a tombstone included) by name.
    pub fn read_ref(&self, name: &[u8]) -> Result<Option<RefRecord<'static>>> {
        if !self.refs_present {
            return Ok(None);
        }
        let mut found = None;
        let mut scan = |block: &Block<'_>| -> Result<bool> {
            let mut it = block.iter();
            while let Some(rec) = it
                .next_record(|k, e, v| self.decode_ref(k, e, v))
                .map_err(|r| self.corrupt(r))?
            {
                match rec.name.as_bytes().cmp(name) {
                    std::cmp::Ordering::Less => {}
                    std::cmp::Ordering::Equal => {
                        found = Some(rec);
                        return Ok(false);
                    }
                    std::cmp::Ordering::Greater => return Ok(false),
                }
            }
            Ok(true)
        };
        if self.ref_index_offset > 0 {
            let Some(off) = self.seek_index(self.ref_index_offset, name)? else {
                return Ok(None);
            };
            match self.block_at(off, Some(BLOCK_TYPE_REF))? {
                Some(block) => {
                    scan(&block)?;
                }
                None => {
                    return Err(self.corrupt(format!("ref index points at {off}, no ref block")));
                }
            }
        } else {
            self.for_each_block(0, BLOCK_TYPE_REF, scan)?;
        }
        Ok(found)
    }

    /// The obj section: abbreviated object ids and the ref block positions that reference them.
    pub fn objects(&self) -> Result<Vec<(Vec<u8>, Vec<u64>)>> {
        let mut out = Vec::new();
        if self.obj_offset == 0 {
            return Ok(out);
        }
        self.for_each_block(self.obj_offset, BLOCK_TYPE_OBJ, |block| {
            let mut it = block.iter();
            while let Some(offsets) = it
                .next_record(|_, e, v| decode_obj_value(e, v))
                .map_err(|r| self.corrupt(r))?
            {
                out.push((it.key.clone(), offsets));
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// Check the whole table: every ref, log, obj and index record decodes, keys are ordered.
    pub fn verify(&self) -> Result<()> {
        self.refs()?;
        self.logs()?;
        self.objects()?;
        for start in [
            self.ref_index_offset,
            self.obj_index_offset,
            self.log_index_offset,
        ] {
            if start > 0 {
                self.for_each_block(start, BLOCK_TYPE_INDEX, |block| {
                    let mut it = block.iter();
                    while it
                        .next_record(|_, _, v| get_varint(v))
                        .map_err(|r| self.corrupt(r))?
                        .is_some()
                    {}
                    Ok(true)
                })?;
            }
        }
        Ok(())
    }
}

/// One section (refs or logs) of a table read record by record, as a compaction copies it:
/// the current record's key, value type and encoded value, borrowed from the table (a log
/// block from its inflated copy), checked as [`Table::refs`] and [`Table::logs`] check them
/// (bounds, key order) but never decoded into owned records.
pub struct Records<'t> {
    table: &'t Table,
    typ: u8,
    /// Position of the block being read, or of the next one when `block` is `None`.
    off: u64,
    block: Option<Block<'t>>,
    done: bool,
    /// Where the next record starts in `block`.
    pos: usize,
    /// Whether `key` is the last key of the previous block (the next record restarts).
    fresh_block: bool,
    key: Vec<u8>,
    prev: Vec<u8>,
    started: bool,
    extra: u8,
    update_index: u64,
    /// The current record's value, and (refs) where its payload starts, in `block`.
    value: std::ops::Range<usize>,
    payload: usize,
}

impl<'t> Records<'t> {
    fn new(table: &'t Table, typ: u8, off: u64, present: bool) -> Self {
        Records {
            table,
            typ,
            off,
            block: None,
            done: !present,
            pos: 0,
            fresh_block: true,
            key: Vec::new(),
            prev: Vec::new(),
            started: false,
            extra: 0,
            update_index: 0,
            value: 0..0,
            payload: 0,
        }
    }

    /// Move to the next record; `false` at the end of the section.
    pub fn advance(&mut self) -> Result<bool> {
        let table = self.table;
        loop {
            if self.done {
                return Ok(false);
            }
            let block = match &self.block {
                Some(b) => b,
                None => match table.block_at(self.off, Some(self.typ))? {
                    Some(b) => {
                        self.pos = b.header_off + 4;
                        self.fresh_block = true;
                        self.block.insert(b)
                    }
                    None => {
                        self.done = true;
                        return Ok(false);
                    }
                },
            };
            if self.pos >= block.restart_off {
                self.off += block.full_size as u64;
                self.block = None;
                continue;
            }
            let at = self.pos;
            let area = &block.data[at..block.restart_off];
            std::mem::swap(&mut self.key, &mut self.prev);
            self.key.clear();
            if !self.fresh_block {
                self.key.extend_from_slice(&self.prev);
            }
            self.fresh_block = false;
            let (extra, n) = decode_key(&mut self.key, area)
                .ok_or_else(|| table.corrupt(format!("bad record key at offset {at}")))?;
            if self.key.is_empty() {
                return Err(table.corrupt(format!("empty record key at offset {at}")));
            }
            let v = &area[n..];
            let bad = || table.corrupt(format!("bad record value at offset {at}"));
            let (update_index, payload, len) = if self.typ == BLOCK_TYPE_REF {
                table.ref_value_parts(extra, v).ok_or_else(bad)?
            } else {
                let (ui, len) = table.log_value_len(&self.key, extra, v).ok_or_else(bad)?;
                (ui, 0, len)
            };
            if self.started && self.prev >= self.key {
                return Err(table.corrupt(if self.typ == BLOCK_TYPE_REF {
                    format!("ref {} out of order", self.key.as_bstr())
                } else {
                    let name = &self.key[..self.key.len() - 9];
                    format!("log of {} out of order", name.as_bstr())
                }));
            }
            self.started = true;
            self.extra = extra;
            self.update_index = update_index;
            self.value = at + n..at + n + len;
            self.payload = at + n + payload;
            self.pos = at + n + len;
            return Ok(true);
        }
    }

    /// The current record's key: a ref's name, a log record's `refname '\0' be64(!index)`.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The current record's value type.
    pub fn extra(&self) -> u8 {
        self.extra
    }

    /// The current record's update index.
    pub fn update_index(&self) -> u64 {
        self.update_index
    }

    /// The current record's encoded value.
    pub fn value(&self) -> &[u8] {
        self.block
            .as_ref()
            .map_or(&[][..], |b| &b.data[self.value.clone()])
    }

    /// The current ref record's value after its update index (ids or symref target).
    pub fn payload(&self) -> &[u8] {
        self.block
            .as_ref()
            .map_or(&[][..], |b| &b.data[self.payload..self.value.end])
    }

    /// The current record decoded as a ref record.
    pub fn decode_ref(&self) -> Result<RefRecord<'static>> {
        let at = self.value.start;
        self.table
            .decode_ref(&self.key, self.extra, self.value())
            .map(|(r, _)| r)
            .ok_or_else(|| {
                self.table
                    .corrupt(format!("bad record value at offset {at}"))
            })
    }

    /// The current record decoded as a log record.
    pub fn decode_log(&self) -> Result<LogRecord> {
        let at = self.value.start;
        self.table
            .decode_log(&self.key, self.extra, self.value())
            .map(|(r, _)| r)
            .ok_or_else(|| {
                self.table
                    .corrupt(format!("bad record value at offset {at}"))
            })
    }

    /// The table read.
    pub fn table(&self) -> &'t Table {
        self.table
    }
}

/// A size no table holding the ref records `refs` (sorted, distinct) is below, as
/// auto-compaction weighs it (its bytes without the footer, less the header but one byte): the
/// sum of their [`record_floor`]s.
pub fn size_floor(refs: &[RefRecord], hash: gix_hash::Kind) -> u64 {
    refs.iter().map(|r| record_floor(&r.value, hash)).sum()
}

/// The fewest bytes a ref record of `value` takes in a table of distinct, ascending keys: a
/// byte of prefix length, one of suffix length and one of suffix, a byte of update index,
/// and its ids or target.
pub fn record_floor(value: &RefValue, hash: gix_hash::Kind) -> u64 {
    let hl = hash.len_in_bytes() as u64;
    4 + match value {
        RefValue::Deletion => 0,
        RefValue::Val1(_) => hl,
        RefValue::Val2(..) => 2 * hl,
        RefValue::Symref(t) => 1 + t.len() as u64,
    }
}

/// Write one table from records already sorted (refs by name, logs by key).
/// A reflog message as git stores it: trailing newlines stripped and one `\n` appended; a
/// message of several lines is refused.
pub fn normalize_log_message(refname: &[u8], msg: &[u8]) -> Result<Vec<u8>> {
    let mut m = one_line(refname, msg)?.to_vec();
    m.push(b'\n');
    Ok(m)
}

/// `msg` without its trailing newlines, refused when it has several lines.
fn one_line<'m>(refname: &[u8], mut msg: &'m [u8]) -> Result<&'m [u8]> {
    while let [rest @ .., b'\n'] = msg {
        msg = rest;
    }
    if msg.contains(&b'\n') {
        return Err(Error::InvalidRecord(format!(
            "multi-line reflog message for {}",
            refname.as_bstr()
        )));
    }
    Ok(msg)
}

/// Write one table holding `refs` then `logs` (each in key order).
pub fn write_table(
    opts: WriteOptions,
    min_update_index: u64,
    max_update_index: u64,
    refs: &[RefRecord],
    logs: &[LogRecord],
) -> Result<(Vec<u8>, bool)> {
    let mut w = TableWriter::new(opts, min_update_index, max_update_index)?;
    for r in refs {
        w.add_ref(r)?;
    }
    for l in logs {
        w.add_log(l)?;
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u32) -> ObjectId {
        let mut b = [0u8; 20];
        b[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
        b[19] = i as u8;
        ObjectId::try_from(&b[..]).expect("20 bytes")
    }

    /// A table with every section: several ref blocks, a ref index, obj blocks, log blocks
    /// and a log index.
    fn full_table() -> (Vec<u8>, Vec<RefRecord<'static>>, Vec<LogRecord>) {
        let opts = WriteOptions {
            block_size: 512,
            ..WriteOptions::default()
        };
        let refs: Vec<RefRecord> = (0..300)
            .map(|i| RefRecord {
                name: BString::from(format!("refs/heads/r{i:04}")).into(),
                update_index: 5 + (i % 3) as u64,
                value: match i % 4 {
                    0 => RefValue::Val2(id(i), id(i + 1000)),
                    1 => RefValue::Symref("refs/heads/r0000".into()),
                    2 => RefValue::Deletion,
                    _ => RefValue::Val1(id(i)),
                },
            })
            .collect();
        let logs: Vec<LogRecord> = (0..200)
            .map(|i| LogRecord {
                refname: format!("refs/heads/r{:04}", i / 2).into(),
                update_index: 7 - (i % 2) as u64,
                value: if i % 7 == 3 {
                    LogValue::Deletion
                } else {
                    LogValue::Update(LogUpdate {
                        old: id(i),
                        new: id(i + 1),
                        name: "N".into(),
                        email: "e@x".into(),
                        time: 1_700_000_000 + u64::from(i),
                        tz_offset: -700,
                        message: format!("message {i}\n").into(),
                    })
                },
            })
            .collect();
        let (bytes, empty) = write_table(opts, 5, 7, &refs, &logs).expect("write");
        assert!(!empty);
        (bytes, refs, logs)
    }

    #[test]
    fn full_table_round_trips() {
        let (bytes, refs, logs) = full_table();
        let t = Table::from_bytes("t", bytes).expect("parse");
        assert!(t.ref_index_offset() > 0, "ref index written");
        let (obj, id_len) = t.obj_section();
        assert!(obj > 0 && id_len >= 2, "obj section written");
        assert!(t.log_index_offset > 0, "log index written");
        assert_eq!(t.refs().expect("refs"), refs);
        assert_eq!(t.logs().expect("logs"), logs);
        for r in &refs {
            assert_eq!(t.read_ref(&r.name).expect("lookup").as_ref(), Some(r));
        }
        assert_eq!(t.read_ref(b"refs/heads/zzz").expect("lookup"), None);
        t.verify().expect("verify");
        // Every object id of a Val1/Val2 ref is in the obj section, abbreviated.
        let objects = t.objects().expect("objects");
        for r in &refs {
            if let RefValue::Val1(x) | RefValue::Val2(x, _) = &r.value {
                let key = &x.as_bytes()[..usize::from(id_len)];
                assert!(objects.iter().any(|(k, _)| k == key), "{x} indexed");
            }
        }
    }

    #[test]
    fn empty_table_is_header_and_footer() {
        let (bytes, empty) = write_table(WriteOptions::default(), 1, 1, &[], &[]).expect("write");
        assert!(empty);
        assert_eq!(bytes.len(), HEADER_SIZE_V1 + FOOTER_SIZE_V1);
        let t = Table::from_bytes("e", bytes).expect("parse");
        assert!(t.refs().expect("refs").is_empty() && t.logs().expect("logs").is_empty());
    }

    #[test]
    fn writer_refuses_bad_input() {
        let r = |name: &str, ui| RefRecord {
            name: BString::from(name).into(),
            update_index: ui,
            value: RefValue::Deletion,
        };
        let opts = WriteOptions::default();
        assert!(
            write_table(opts, 1, 1, &[r("b", 1), r("a", 1)], &[]).is_err(),
            "unsorted"
        );
        assert!(
            write_table(opts, 1, 1, &[r("a", 1), r("a", 1)], &[]).is_err(),
            "duplicate"
        );
        assert!(
            write_table(opts, 2, 3, &[r("a", 1)], &[]).is_err(),
            "below min"
        );
        let long = "x".repeat(5000);
        assert!(
            matches!(
                write_table(opts, 1, 1, &[r(&long, 1)], &[]),
                Err(Error::EntryTooLarge(_))
            ),
            "too big"
        );
    }

    #[test]
    fn truncated_and_corrupted_tables_never_panic() {
        let (bytes, _, _) = full_table();
        let exercise = |data: Vec<u8>| -> bool {
            match Table::from_bytes("c", data) {
                Ok(t) => {
                    let ok = [
                        t.refs().is_ok(),
                        t.logs().is_ok(),
                        t.objects().is_ok(),
                        t.read_ref(b"refs/heads/r0150").is_ok(),
                        t.verify().is_ok(),
                    ];
                    ok.iter().all(|&x| x)
                }
                Err(e) => {
                    assert!(e.to_string().contains("table c"), "{e}");
                    false
                }
            }
        };
        for len in 0..bytes.len() {
            assert!(!exercise(bytes[..len].to_vec()), "prefix {len} accepted");
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..1000 {
            let mut data = bytes.clone();
            for _ in 0..1 + seed % 4 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed % data.len() as u64) as usize;
                data[at] = (seed >> 56) as u8;
            }
            exercise(data);
        }
    }
}
