//! The decoded objects of a pack being unpacked that deltas still to come need as their
//! bases: gix-pack's decode cache for `ingest`'s `unpack_objects`, so that each delta is
//! applied once however long its chain.
//!
//! gix-pack resolves a delta by walking its chain down to the first entry its cache holds and
//! applying every delta above it. With no cache, a chain of N deltas costs N(N+1)/2
//! applications, each of the whole object: a hostile push of a few kilobytes (one large blob,
//! then deltas that each change a byte of the one before) took 7.8 s to unpack at
//! `receive.unpackLimit`'s default of 100 objects, and grows with the square of an operator's
//! higher limit. git's `unpack-objects` reads each delta's base back whole, once.
//!
//! This cache keeps exactly the entries some later delta names as its base (counted before
//! the unpack), hands each over on its last use, and holds at most git's default
//! `core.deltaBaseCacheLimit` (or one entry, whatever its size: a chain has one base pending
//! at a time); past that it keeps nothing more and gix-pack walks the chain as before. The unpack visits the entries in pack order, in which a base comes before the
//! deltas on it (an offset delta always does).

use std::collections::HashMap;

use gix_object::Kind;

/// Which decoded entries of one pack later deltas still need, and those kept.
#[derive(Debug, Default)]
pub struct PendingBases {
    /// For each delta entry (by the offset of its data) that deltas name as their base, how
    /// many of those have not yet taken it from here.
    wanted: HashMap<u64, u32>,
    /// The decoded entries kept for them.
    kept: HashMap<u64, Kept>,
    /// The bytes of [`Self::kept`].
    bytes: usize,
    /// The buffer gix-pack gave up when a kept entry was handed over, for the next one kept:
    /// a fresh allocation of a large object costs its page faults again (none larger than
    /// the capacity).
    spare: Vec<u8>,
}

/// A decoded entry as gix-pack hands it to the cache.
#[derive(Debug)]
struct Kept {
    kind: Kind,
    compressed_size: usize,
    data: Vec<u8>,
}

impl PendingBases {
    /// The decoded bytes it holds at most (git's `core.deltaBaseCacheLimit` default), unless
    /// one entry alone is larger.
    pub const CAPACITY: usize = 96 << 20;

    /// One more delta names the delta entry whose data starts at `offset` as its base. (A base
    /// that is not itself a delta needs no entry: gix-pack inflates it without asking.)
    pub fn want(&mut self, offset: u64) {
        let n = self.wanted.entry(offset).or_default();
        *n = n.saturating_add(1);
    }
}

impl gix_pack::cache::DecodeEntry for PendingBases {
    fn put(&mut self, _pack: u32, offset: u64, data: &[u8], kind: Kind, compressed_size: usize) {
        let wanted = self.wanted.get(&offset).is_some_and(|n| *n > 0);
        // One entry is kept whatever its size: a chain of objects larger than the capacity
        // has one base pending at a time, and walking it again would cost the square.
        let fits = self.kept.is_empty() || self.bytes.saturating_add(data.len()) <= Self::CAPACITY;
        if !wanted || !fits || self.kept.contains_key(&offset) {
            return;
        }
        self.bytes += data.len();
        let mut kept = std::mem::take(&mut self.spare);
        kept.clear();
        kept.extend_from_slice(data);
        self.kept.insert(
            offset,
            Kept {
                kind,
                compressed_size,
                data: kept,
            },
        );
    }

    /// Only a kept entry counts as a use: gix-pack also asks for the entry it is about to
    /// decode, which no delta has taken from here.
    fn get(&mut self, _pack: u32, offset: u64, out: &mut Vec<u8>) -> Option<(Kind, usize)> {
        let kept = self.kept.get(&offset)?;
        let n = self.wanted.get_mut(&offset)?;
        *n = n.saturating_sub(1);
        if *n > 0 {
            out.clear();
            out.extend_from_slice(&kept.data);
            return Some((kept.kind, kept.compressed_size));
        }
        let mut last = self.kept.remove(&offset)?;
        self.bytes -= last.data.len();
        std::mem::swap(out, &mut last.data);
        // Kept for the next entry unless it is larger than the capacity: one entry beyond it
        // is held at a time, not two.
        if last.data.capacity() <= Self::CAPACITY {
            self.spare = last.data;
        }
        Some((last.kind, last.compressed_size))
    }
}

#[cfg(test)]
mod tests {
    use super::{Kind, PendingBases};
    use gix_pack::cache::DecodeEntry;

    /// Only what is wanted is kept, each use counted, the last one handing the bytes over;
    /// a lookup of what it does not hold changes nothing.
    #[test]
    fn a_base_is_kept_until_its_last_delta_took_it() {
        let mut c = PendingBases::default();
        c.want(10);
        c.want(10);
        let mut out = Vec::new();
        c.put(0, 20, b"not wanted", Kind::Blob, 3);
        assert_eq!(c.get(0, 20, &mut out), None);
        // Asked before it is decoded (gix-pack asks for the entry it decodes): no use.
        assert_eq!(c.get(0, 10, &mut out), None);
        c.put(0, 10, b"base", Kind::Tree, 7);
        assert_eq!(c.bytes, 4);
        c.put(0, 10, b"again", Kind::Tree, 7);
        assert_eq!(c.bytes, 4);
        assert_eq!(c.get(0, 10, &mut out), Some((Kind::Tree, 7)));
        assert_eq!(out, b"base");
        out.clear();
        assert_eq!(c.get(0, 10, &mut out), Some((Kind::Tree, 7)));
        assert_eq!(out, b"base");
        assert_eq!(c.bytes, 0);
        assert_eq!(c.get(0, 10, &mut out), None);
    }

    /// Past its capacity it keeps nothing more (gix-pack then walks the chain itself), but
    /// one entry it keeps whatever its size.
    #[test]
    fn nothing_more_is_kept_past_the_capacity_but_one_entry_whatever_its_size() {
        let mut c = PendingBases::default();
        c.want(1);
        c.want(2);
        let huge = vec![0u8; PendingBases::CAPACITY + 1];
        c.put(0, 1, &huge, Kind::Blob, 1);
        c.put(0, 2, &[0u8; 1], Kind::Blob, 1);
        assert_eq!(c.bytes, huge.len());
        let mut out = Vec::new();
        assert_eq!(c.get(0, 2, &mut out), None);
        assert_eq!(c.get(0, 1, &mut out), Some((Kind::Blob, 1)));
        assert_eq!(c.bytes, 0);

        let mut c = PendingBases::default();
        c.want(1);
        c.want(2);
        let big = vec![0u8; PendingBases::CAPACITY - 10];
        c.put(0, 1, &big, Kind::Blob, 1);
        c.put(0, 2, &[0u8; 11], Kind::Blob, 1);
        assert_eq!(c.bytes, PendingBases::CAPACITY - 10);
        let mut out = Vec::new();
        assert_eq!(c.get(0, 2, &mut out), None);
        assert_eq!(c.get(0, 1, &mut out), Some((Kind::Blob, 1)));
        assert_eq!(out.len(), big.len());
        assert_eq!(c.bytes, 0);
    }
}
