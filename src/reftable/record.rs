//! Record encodings: git's varint, prefix-compressed keys, and the four record kinds (ref, log,
//! obj, index) as `reftable/record.c` lays them out. Every decoder is bounds-checked and returns
//! `None` on malformed input; callers turn that into a corruption error naming the table.

/// Block type byte of a ref block.
pub const BLOCK_TYPE_REF: u8 = b'r';
/// Block type byte of a log block.
pub const BLOCK_TYPE_LOG: u8 = b'g';
/// Block type byte of an obj block.
pub const BLOCK_TYPE_OBJ: u8 = b'o';
/// Block type byte of an index block.
pub const BLOCK_TYPE_INDEX: u8 = b'i';

/// Whether `t` is one of the four block types.
pub fn is_block_type(t: u8) -> bool {
    matches!(
        t,
        BLOCK_TYPE_REF | BLOCK_TYPE_LOG | BLOCK_TYPE_OBJ | BLOCK_TYPE_INDEX
    )
}

/// Ref value type: deletion (tombstone).
pub const REF_DELETION: u8 = 0;
/// Ref value type: one object id.
pub const REF_VAL1: u8 = 1;
/// Ref value type: object id and peeled object id.
pub const REF_VAL2: u8 = 2;
/// Ref value type: symbolic ref.
pub const REF_SYMREF: u8 = 3;

/// Decode one varint (the ofs-delta encoding of pack files) from the start of `buf`.
/// Returns the value and the number of bytes consumed; `None` on truncation or overflow.
pub fn get_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut i = 0;
    let mut c = *buf.first()?;
    i += 1;
    let mut val = u64::from(c & 0x7f);
    while c & 0x80 != 0 {
        val = val.checked_add(1)?;
        if val & (!0u64 << (64 - 7)) != 0 {
            return None;
        }
        c = *buf.get(i)?;
        i += 1;
        val = (val << 7) + u64::from(c & 0x7f);
    }
    Some((val, i))
}

/// Append the varint encoding of `value` to `out`.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    let mut tmp = [0u8; 10];
    let mut pos = tmp.len() - 1;
    tmp[pos] = (value & 0x7f) as u8;
    loop {
        value >>= 7;
        if value == 0 {
            break;
        }
        value -= 1;
        pos -= 1;
        tmp[pos] = 0x80 | (value & 0x7f) as u8;
    }
    out.extend_from_slice(&tmp[pos..]);
}

/// Length of the common prefix of `a` and `b`.
pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    // Eight bytes at a time (every record's key is compressed against the one before it).
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if x != y {
            return i + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Append a prefix-compressed key: `varint(prefix_len) varint(suffix_len << 3 | extra) suffix`.
/// Returns whether the record is a restart point (prefix length 0).
pub fn encode_key(out: &mut Vec<u8>, prev_key: &[u8], key: &[u8], extra: u8) -> bool {
    let prefix = common_prefix(prev_key, key);
    let suffix = &key[prefix..];
    put_varint(out, prefix as u64);
    put_varint(out, ((suffix.len() as u64) << 3) | u64::from(extra & 7));
    out.extend_from_slice(suffix);
    prefix == 0
}

/// Decode the lengths of a key: `(prefix_len, suffix_len, extra, bytes consumed)`.
pub fn decode_keylen(buf: &[u8]) -> Option<(u64, u64, u8, usize)> {
    let (prefix, n1) = get_varint(buf)?;
    let (sl, n2) = get_varint(buf.get(n1..)?)?;
    Some((prefix, sl >> 3, (sl & 7) as u8, n1 + n2))
}

/// Decode a key against the previous key `last_key` (updated in place). Returns `(extra, bytes
/// consumed)`.
pub fn decode_key(last_key: &mut Vec<u8>, buf: &[u8]) -> Option<(u8, usize)> {
    let (prefix, suffix, extra, n) = decode_keylen(buf)?;
    let rest = buf.get(n..)?;
    if prefix > last_key.len() as u64 || suffix > rest.len() as u64 {
        return None;
    }
    let suffix = suffix as usize;
    last_key.truncate(prefix as usize);
    last_key.extend_from_slice(&rest[..suffix]);
    Some((extra, n + suffix))
}

/// Append a length-prefixed string.
pub fn encode_string(out: &mut Vec<u8>, s: &[u8]) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Decode a length-prefixed string: `(string, bytes consumed)`.
pub fn decode_string(buf: &[u8]) -> Option<(&[u8], usize)> {
    let (len, n) = get_varint(buf)?;
    let rest = buf.get(n..)?;
    if len > rest.len() as u64 {
        return None;
    }
    Some((&rest[..len as usize], n + len as usize))
}

/// The key of a log record: `refname '\0' be64(!update_index)`.
pub fn log_key(refname: &[u8], update_index: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(refname.len() + 9);
    put_log_key(&mut k, refname, update_index);
    k
}

/// Append the key of a log record to `out`.
pub fn put_log_key(out: &mut Vec<u8>, refname: &[u8], update_index: u64) {
    out.extend_from_slice(refname);
    out.push(0);
    out.extend_from_slice(&(!update_index).to_be_bytes());
}

/// The order of two log records' keys ([`log_key`]) without building them.
pub fn log_key_cmp(a: (&[u8], u64), b: (&[u8], u64)) -> std::cmp::Ordering {
    let n = a.0.len().min(b.0.len());
    match a.0[..n].cmp(&b.0[..n]) {
        std::cmp::Ordering::Equal => {}
        o => return o,
    }
    let (ta, tb) = ((!a.1).to_be_bytes(), (!b.1).to_be_bytes());
    let ra = a.0[n..].iter().copied().chain([0]).chain(ta);
    let rb = b.0[n..].iter().copied().chain([0]).chain(tb);
    ra.cmp(rb)
}

/// Split a log key into `(refname, update_index)`.
pub fn split_log_key(key: &[u8]) -> Option<(&[u8], u64)> {
    if key.len() <= 9 || key[key.len() - 9] != 0 {
        return None;
    }
    let (name, ts) = key.split_at(key.len() - 9);
    let ts: [u8; 8] = ts[1..].try_into().ok()?;
    Some((name, !u64::from_be_bytes(ts)))
}

/// Append the value of an obj record (`offsets` are ref block positions, ascending).
/// Returns the value type (`extra`) to store in the key.
pub fn obj_val_type(offsets: &[u64]) -> u8 {
    if !offsets.is_empty() && offsets.len() < 8 {
        offsets.len() as u8
    } else {
        0
    }
}

/// Encode the value of an obj record.
pub fn encode_obj_value(out: &mut Vec<u8>, offsets: &[u64]) {
    if offsets.is_empty() || offsets.len() >= 8 {
        put_varint(out, offsets.len() as u64);
    }
    let mut last = 0;
    for (i, &off) in offsets.iter().enumerate() {
        put_varint(out, if i == 0 { off } else { off - last });
        last = off;
    }
}

/// Decode the value of an obj record: `(offsets, bytes consumed)`.
pub fn decode_obj_value(extra: u8, buf: &[u8]) -> Option<(Vec<u64>, usize)> {
    let mut pos = 0;
    let mut count = u64::from(extra);
    if extra == 0 {
        let (c, n) = get_varint(buf)?;
        count = c;
        pos += n;
    }
    // Each offset takes at least one byte: bound the allocation by the input.
    if count > buf.len() as u64 {
        return None;
    }
    let mut offsets = Vec::with_capacity(count as usize);
    let mut last = 0u64;
    for i in 0..count {
        let (v, n) = get_varint(buf.get(pos..)?)?;
        pos += n;
        last = if i == 0 { v } else { last.checked_add(v)? };
        offsets.push(last);
    }
    Some((offsets, pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_roundtrip_and_known_encodings() {
        for v in [
            0u64,
            1,
            127,
            128,
            129,
            16383,
            16384,
            1 << 40,
            u64::MAX >> 1,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(get_varint(&out), Some((v, out.len())), "value {v}");
        }
        let mut out = Vec::new();
        put_varint(&mut out, 128);
        assert_eq!(out, [0x80, 0x00]);
        assert_eq!(get_varint(&[0x80]), None);
        assert_eq!(get_varint(&[0xff; 12]), None);
    }

    #[test]
    fn common_prefix_at_every_length() {
        let a: Vec<u8> = (0..40u8).collect();
        for len in 0..=a.len() {
            for at in 0..len {
                let mut b = a[..len].to_vec();
                b[at] ^= 0x80;
                assert_eq!(common_prefix(&a[..len], &b), at, "{len} {at}");
                assert_eq!(common_prefix(&b, &a), at, "{len} {at}");
            }
            assert_eq!(common_prefix(&a[..len], &a), len);
            assert_eq!(common_prefix(&a, &a[..len]), len);
        }
    }

    #[test]
    fn key_prefix_compression() {
        let mut out = Vec::new();
        assert!(!encode_key(&mut out, b"refs/heads/a", b"refs/heads/b", 1));
        let mut last = b"refs/heads/a".to_vec();
        let (extra, n) = decode_key(&mut last, &out).unwrap();
        assert_eq!(
            (extra, n, last.as_slice()),
            (1, out.len(), &b"refs/heads/b"[..])
        );
        let mut empty = Vec::new();
        assert!(
            decode_key(&mut empty, &out).is_none(),
            "prefix longer than previous key"
        );
    }

    #[test]
    fn log_key_order_without_building_keys() {
        let names: [&[u8]; 5] = [b"HEAD", b"HEAD\0x", b"refs/a", b"refs/a/b", b"refs/ab"];
        for a in names {
            for b in names {
                for (ua, ub) in [(1, 1), (1, 2), (2, 1), (u64::MAX, 0)] {
                    assert_eq!(
                        log_key_cmp((a, ua), (b, ub)),
                        log_key(a, ua).cmp(&log_key(b, ub)),
                        "{a:?}@{ua} vs {b:?}@{ub}"
                    );
                }
            }
        }
    }

    #[test]
    fn log_keys_sort_newest_first() {
        assert!(log_key(b"HEAD", 5) < log_key(b"HEAD", 4));
        assert_eq!(
            split_log_key(&log_key(b"refs/x", 42)),
            Some((&b"refs/x"[..], 42))
        );
    }
}
