//! Blocks: a type byte, a 24-bit length, prefix-compressed records, the restart table (24-bit
//! offsets of the records stored without prefix compression) and its 16-bit count. Log blocks
//! are zlib-deflated after their 4-byte header, restart table included (`reftable/block.c`).

use std::borrow::Cow;

use super::record::{BLOCK_TYPE_LOG, decode_key, encode_key, is_block_type};

/// The most restart points one block can hold.
pub const MAX_RESTARTS: usize = (1 << 16) - 1;

/// Builds one block in memory, refusing a record that would not fit in `block_size` together
/// with the restart table (the same fit rule as git's `block_writer_add`).
pub struct BlockWriter {
    /// The block type byte.
    pub typ: u8,
    buf: Vec<u8>,
    header_off: usize,
    block_size: usize,
    restarts: Vec<u32>,
    /// Number of records added.
    pub entries: usize,
    restart_interval: usize,
    /// Key of the last record added.
    pub last_key: Vec<u8>,
    scratch: Vec<u8>,
}

impl BlockWriter {
    /// A new block of type `typ`; `header_off` is the file header's size for the table's first
    /// block and 0 otherwise (that space is left for the caller to fill).
    pub fn new(typ: u8, block_size: usize, header_off: usize, restart_interval: usize) -> Self {
        let mut buf = Vec::with_capacity(block_size);
        buf.resize(header_off, 0);
        buf.extend_from_slice(&[typ, 0, 0, 0]);
        BlockWriter {
            typ,
            buf,
            header_off,
            block_size,
            restarts: Vec::new(),
            entries: 0,
            restart_interval: restart_interval.max(1),
            last_key: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Add a record with `key`, value type `extra` and encoded `value`. Returns `false` (and
    /// leaves the block unchanged) when it does not fit.
    pub fn add(&mut self, key: &[u8], extra: u8, value: &[u8]) -> bool {
        let prev: &[u8] = if self.entries.is_multiple_of(self.restart_interval) {
            &[]
        } else {
            &self.last_key
        };
        self.scratch.clear();
        let mut is_restart = encode_key(&mut self.scratch, prev, key, extra);
        let n = self.scratch.len() + value.len();
        let mut rlen = self.restarts.len();
        if rlen >= MAX_RESTARTS {
            is_restart = false;
        }
        if is_restart {
            rlen += 1;
        }
        let remaining = self.block_size.saturating_sub(self.buf.len());
        if 2 + 3 * rlen + n > remaining {
            return false;
        }
        if is_restart {
            self.restarts.push(self.buf.len() as u32);
        }
        self.buf.extend_from_slice(&self.scratch);
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.entries += 1;
        true
    }

    /// Finish the block: restart table, count, length; deflate a log block. Returns the block's
    /// bytes, starting with the (unfilled) file header space of a first block.
    pub fn finish(mut self) -> Vec<u8> {
        for &r in &self.restarts {
            self.buf.extend_from_slice(&r.to_be_bytes()[1..]);
        }
        self.buf
            .extend_from_slice(&(self.restarts.len() as u16).to_be_bytes());
        let len = self.buf.len() as u32;
        self.buf[self.header_off + 1..self.header_off + 4].copy_from_slice(&len.to_be_bytes()[1..]);
        if self.typ == BLOCK_TYPE_LOG {
            let skip = self.header_off + 4;
            let compressed = deflate(&self.buf[skip..]);
            self.buf.truncate(skip);
            self.buf.extend_from_slice(&compressed);
        }
        self.buf
    }
}

/// zlib-deflate at level 9 (git's `deflateInit(zstream, 9)`, zlib header, 32 KiB window).
fn deflate(input: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; zlib_rs::compress_bound(input.len())];
    let config = zlib_rs::DeflateConfig::new(9);
    let (written, _rc) = zlib_rs::compress_slice(&mut out, input, config);
    let n = written.len();
    out.truncate(n);
    out
}

/// One parsed block of a table. `data` starts at the block's position in the file (so a first
/// block includes the file header) and ends at its `block_len` (uncompressed for log blocks).
#[derive(Debug)]
pub struct Block<'a> {
    /// The block type byte.
    pub typ: u8,
    /// The block bytes.
    pub data: Cow<'a, [u8]>,
    /// Where the block header starts within `data` (the file header's size for a first block).
    pub header_off: usize,
    /// Start of the restart table within `data`.
    pub restart_off: usize,
    /// Number of restart points.
    pub restart_count: usize,
    /// Bytes this block takes in the file, padding included: the distance to the next block.
    pub full_size: usize,
}

impl<'a> Block<'a> {
    /// Parse the block at `off` of `file` (the table without its footer). Returns `Ok(None)` at
    /// the end of the file or when the block's type is not `want` (the end of a section).
    pub fn parse(
        file: &'a [u8],
        off: usize,
        header_off: usize,
        table_block_size: usize,
        want: Option<u8>,
    ) -> Result<Option<Block<'a>>, String> {
        if off >= file.len() {
            return Ok(None);
        }
        let avail = &file[off..];
        let Some(&typ) = avail.get(header_off) else {
            return Err(format!("block at {off} is truncated"));
        };
        if !is_block_type(typ) {
            return Err(format!("invalid block type 0x{typ:02x} at offset {off}"));
        }
        if want.is_some_and(|w| w != typ) {
            return Ok(None);
        }
        let Some(len_bytes) = avail.get(header_off + 1..header_off + 4) else {
            return Err(format!("block header at {off} is truncated"));
        };
        let block_len = u32::from_be_bytes([0, len_bytes[0], len_bytes[1], len_bytes[2]]) as usize;
        if block_len < header_off + 4 + 2 {
            return Err(format!("block at {off} has impossible length {block_len}"));
        }
        let (data, full_size): (Cow<'a, [u8]>, usize) = if typ == BLOCK_TYPE_LOG {
            let skip = header_off + 4;
            let mut out = vec![0u8; block_len];
            out[..skip].copy_from_slice(&avail[..skip]);
            let mut inflate = zlib_rs::Inflate::new(true, 15);
            let status = inflate.decompress(
                &avail[skip..],
                &mut out[skip..],
                zlib_rs::InflateFlush::Finish,
            );
            if status != Ok(zlib_rs::Status::StreamEnd)
                || inflate.total_out() as usize != block_len - skip
            {
                return Err(format!("log block at {off} does not inflate to its length"));
            }
            let consumed = inflate.total_in() as usize;
            (Cow::Owned(out), skip + consumed)
        } else {
            let Some(data) = avail.get(..block_len) else {
                return Err(format!(
                    "block at {off} claims {block_len} bytes, the file has {}",
                    avail.len()
                ));
            };
            let full = if table_block_size == 0 {
                block_len
            } else if block_len < table_block_size && avail.get(block_len).is_some_and(|&b| b != 0)
            {
                // Not padded: the next block starts right after this one.
                block_len
            } else {
                table_block_size
            };
            (Cow::Borrowed(data), full)
        };
        let restart_count = u16::from_be_bytes([data[block_len - 2], data[block_len - 1]]) as usize;
        let restart_off = (block_len - 2)
            .checked_sub(3 * restart_count)
            .filter(|&r| r >= header_off + 4)
            .ok_or_else(|| format!("block at {off} has a restart table larger than itself"))?;
        Ok(Some(Block {
            typ,
            data,
            header_off,
            restart_off,
            restart_count,
            full_size,
        }))
    }

    /// The `i`-th restart offset.
    pub fn restart(&self, i: usize) -> usize {
        let p = self.restart_off + 3 * i;
        u32::from_be_bytes([0, self.data[p], self.data[p + 1], self.data[p + 2]]) as usize
    }

    /// An iterator over the block's records from its first one.
    pub fn iter(&self) -> BlockIter<'_, 'a> {
        BlockIter {
            block: self,
            pos: self.header_off + 4,
            key: Vec::new(),
        }
    }
}

/// Walks the records of one block, rebuilding prefix-compressed keys.
pub struct BlockIter<'b, 'a> {
    block: &'b Block<'a>,
    pos: usize,
    /// The key of the record last returned.
    pub key: Vec<u8>,
}

impl BlockIter<'_, '_> {
    /// Decode the next record: its key lands in `self.key`, then `value` decodes the value from
    /// the bytes that follow (given the value type) and returns how many it consumed.
    pub fn next_record<T>(
        &mut self,
        value: impl FnOnce(&[u8], u8, &[u8]) -> Option<(T, usize)>,
    ) -> Result<Option<T>, String> {
        if self.pos >= self.block.restart_off {
            return Ok(None);
        }
        let area = &self.block.data[self.pos..self.block.restart_off];
        let (extra, n) = decode_key(&mut self.key, area)
            .ok_or_else(|| format!("bad record key at offset {}", self.pos))?;
        if self.key.is_empty() {
            return Err(format!("empty record key at offset {}", self.pos));
        }
        let (v, m) = value(&self.key, extra, &area[n..])
            .ok_or_else(|| format!("bad record value at offset {}", self.pos))?;
        self.pos += n + m;
        Ok(Some(v))
    }
}
