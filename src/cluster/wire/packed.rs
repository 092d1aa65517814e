//! The compact form of a list of ref updates, as a log entry (`entries/<seq>`) and a prepare
//! header carry it: one base64 string of a binary encoding, not a JSON object per ref.
//!
//! A 10,000-ref push as JSON objects (`{"name":…,"new":…,"op":"create"}`) was ~95 bytes per
//! ref, written into etcd's raft log and WAL on every member and parsed by every replica. Here
//! each distinct object id is written once, in a table, and each ref name as the length it
//! shares with the previous name plus the rest: `refs/heads/b/1234` after `refs/heads/b/1233`
//! is 3 bytes of name. The layout (integers as LEB128 varints):
//!
//! ```text
//! 1                                  format version
//! n_ids, then n_ids × (len, id)      the distinct object ids (len 20: SHA-1, 32: SHA-256)
//! n_updates, then n_updates ×
//!   tag                              0 create, 1 update, 2 delete; + 4: an old value checked
//!   shared, rest_len, rest           the name: `shared` bytes of the previous name, then `rest`
//!   new index                        (create, update) into the ids
//!   old index                        (with + 4) into the ids
//! ```
//!
//! Decoding checks what a peer controls as the JSON form does: every name by git's rules
//! ([`RefName`]), every id by its length, every index and length within the input. The JSON
//! list of objects is still read ([`option`], [`list`]), so entries written before this
//! encoding stay readable.

use base64::Engine;
use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::refs::{Change, Expected, RefUpdate};

use super::{Invalid as NotARef, NotReplicable, RefName, Update};

/// The format's version byte.
const VERSION: u8 = 1;

/// Why a packed list of updates was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(in crate::cluster) enum Invalid {
    /// Not base64.
    #[error("packed updates: not base64")]
    Base64,
    /// A version this build does not know.
    #[error("packed updates: unknown version {0}")]
    Version(u8),
    /// The input ends inside a field.
    #[error("packed updates: truncated")]
    Truncated,
    /// A varint longer than 64 bits.
    #[error("packed updates: bad number")]
    Number,
    /// An object id of a length no hash has.
    #[error("packed updates: object id of {0} bytes")]
    IdLength(usize),
    /// A tag that is no operation.
    #[error("packed updates: bad tag {0}")]
    Tag(u8),
    /// An index past the id table.
    #[error("packed updates: id index {0} out of range")]
    Index(u64),
    /// A name sharing more than the previous name has.
    #[error("packed updates: name shares {0} bytes, more than the previous name")]
    Shared(u64),
    /// A name that is not a ref name a push could have written (as [`super::Invalid::RefName`]):
    /// its first 64 bytes, which the message shows escaped.
    #[error("packed updates: bad ref name {0:?}")]
    Name(String),
    /// Bytes after the last update.
    #[error("packed updates: {0} bytes after the end")]
    Trailing(usize),
    /// A name longer than a push's command line can carry.
    #[error("packed updates: a name of {0} bytes")]
    NameLength(usize),
    /// Names that would take more than [`MAX_EXPANSION`] times the input's size: each name
    /// shares its previous one's bytes for a few bytes of input, so without this bound a
    /// small input could make a huge list.
    #[error("packed updates: names of more than {MAX_EXPANSION} times the input's size")]
    Expansion,
}

/// The longest name a decoded update may have: a push's command is one pkt-line (at most
/// 65,516 bytes of payload), so no pushed ref name is longer.
const MAX_NAME: usize = 65_516;

/// How many times the input's size all decoded names together may take. A real entry's
/// names shrink by the prefix each shares with the previous one, ~5x for `refs/heads/b/0001234`
/// and short of 100x even for names of a thousand bytes differing at the end.
const MAX_EXPANSION: usize = 256;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The binary form of `updates`.
pub(in crate::cluster) fn encode(updates: &[Update]) -> Vec<u8> {
    pack(
        updates
            .iter()
            .map(|u| (u.name.as_str().as_bytes(), u.change)),
    )
}

/// The binary form of `updates`, each a name (already checked) and its change.
fn pack<'a>(updates: impl ExactSizeIterator<Item = (&'a [u8], Change)>) -> Vec<u8> {
    let mut ids: Vec<gix_hash::ObjectId> = Vec::new();
    let mut index: std::collections::HashMap<gix_hash::ObjectId, u64> =
        std::collections::HashMap::new();
    let mut id_of = |id: gix_hash::ObjectId| -> u64 {
        *index.entry(id).or_insert_with(|| {
            ids.push(id);
            ids.len() as u64 - 1
        })
    };
    let mut body = Vec::with_capacity(updates.len() * 8);
    put_varint(&mut body, updates.len() as u64);
    let mut previous: &[u8] = b"";
    for (name, change) in updates {
        let (tag, new, old) = match change {
            Change::Create { new } => (0u8, Some(new), None),
            Change::Update { old, new } => (1, Some(new), expected(old)),
            Change::Delete { old } => (2, None, expected(old)),
        };
        body.push(tag | if old.is_some() { 4 } else { 0 });
        let shared = name
            .iter()
            .zip(previous)
            .take_while(|(a, b)| a == b)
            .count();
        put_varint(&mut body, shared as u64);
        put_varint(&mut body, (name.len() - shared) as u64);
        body.extend_from_slice(&name[shared..]);
        previous = name;
        if let Some(new) = new {
            put_varint(&mut body, id_of(new));
        }
        if let Some(old) = old {
            put_varint(&mut body, id_of(old));
        }
    }
    let mut out = Vec::with_capacity(body.len() + 4 + ids.len() * 33);
    out.push(VERSION);
    put_varint(&mut out, ids.len() as u64);
    for id in &ids {
        let bytes = id.as_bytes();
        put_varint(&mut out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }
    out.extend_from_slice(&body);
    out
}

/// A push's ref updates packed once for every message that carries them (the prepare's
/// header writes them as a base64 string, the log entry as they are): a 10,000-ref push's
/// names are checked and packed once, not once per message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::cluster) struct Packed(Vec<u8>);

impl Packed {
    /// `updates` packed; an error if a name cannot travel (not UTF-8, or one a peer would
    /// refuse, checked as [`RefName`] checks it).
    pub(in crate::cluster) fn of(updates: &[RefUpdate]) -> Result<Packed, NotReplicable> {
        for u in updates {
            let name = std::str::from_utf8(&u.name).map_err(|_| NotReplicable::NotUtf8)?;
            if !RefName::is_valid(name) {
                return Err(NotARef::RefName(name.to_owned()).into());
            }
        }
        let packed = pack(updates.iter().map(|u| (u.name.as_slice(), u.change)));
        Ok(Packed(packed))
    }

    /// The binary form.
    pub(in crate::cluster) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl Serialize for Packed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

/// A message's ref updates as read: packed, or the JSON list of objects entries had before
/// this encoding; every name and id checked. Written packed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::cluster) struct Updates(pub(in crate::cluster) Vec<Update>);

impl From<Updates> for Vec<RefUpdate> {
    fn from(u: Updates) -> Vec<RefUpdate> {
        u.0.into_iter().map(RefUpdate::from).collect()
    }
}

impl Serialize for Updates {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Packed(encode(&self.0)).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Updates {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Updates, D::Error> {
        d.deserialize_any(EitherForm).map(Updates)
    }
}

fn expected(e: Expected) -> Option<gix_hash::ObjectId> {
    match e {
        Expected::MustBe(id) => Some(id),
        Expected::Any => None,
    }
}

/// A reader over the input, every read bounded.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> Result<u8, Invalid> {
        let (b, rest) = self.0.split_first().ok_or(Invalid::Truncated)?;
        self.0 = rest;
        Ok(*b)
    }

    fn varint(&mut self) -> Result<u64, Invalid> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Invalid::Number)
    }

    fn bytes(&mut self, n: u64) -> Result<&'a [u8], Invalid> {
        let n = usize::try_from(n).map_err(|_| Invalid::Truncated)?;
        if n > self.0.len() {
            return Err(Invalid::Truncated);
        }
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(b)
    }
}

/// The updates of the binary form `b`, every field checked.
pub(in crate::cluster) fn decode(b: &[u8]) -> Result<Vec<Update>, Invalid> {
    let mut input = Input(b);
    match input.byte()? {
        VERSION => {}
        v => return Err(Invalid::Version(v)),
    }
    let n_ids = input.varint()?;
    // Each id takes at least 21 bytes: a count past the input is refused before allocating.
    let mut ids = Vec::with_capacity(n_ids.min(input.0.len() as u64 / 21) as usize);
    for _ in 0..n_ids {
        let len = input.varint()?;
        let bytes = input.bytes(len)?;
        let id = gix_hash::ObjectId::try_from(bytes).map_err(|_| Invalid::IdLength(bytes.len()))?;
        ids.push(id);
    }
    let id = |i: u64| -> Result<gix_hash::ObjectId, Invalid> {
        usize::try_from(i)
            .ok()
            .and_then(|i| ids.get(i).copied())
            .ok_or(Invalid::Index(i))
    };
    let n = input.varint()?;
    // Each update takes at least 4 bytes.
    let mut updates = Vec::with_capacity(n.min(input.0.len() as u64 / 4) as usize);
    let mut previous: Vec<u8> = Vec::new();
    let mut name_bytes = 0usize;
    for _ in 0..n {
        let tag = input.byte()?;
        let checked = tag & 4 != 0;
        let shared = input.varint()?;
        if shared > previous.len() as u64 {
            return Err(Invalid::Shared(shared));
        }
        let rest_len = input.varint()?;
        let rest = input.bytes(rest_len)?;
        previous.truncate(shared as usize);
        if previous.len() + rest.len() > MAX_NAME {
            return Err(Invalid::NameLength(previous.len() + rest.len()));
        }
        previous.extend_from_slice(rest);
        name_bytes += previous.len();
        if name_bytes > MAX_EXPANSION.saturating_mul(b.len()) {
            return Err(Invalid::Expansion);
        }
        let name = std::str::from_utf8(&previous)
            .ok()
            .and_then(|s| RefName::try_from(s).ok())
            .ok_or_else(|| {
                // For a log line: at most 64 bytes of it, shown escaped (`{:?}`).
                Invalid::Name(String::from_utf8_lossy(&previous[..previous.len().min(64)]).into())
            })?;
        let old = |input: &mut Input<'_>| -> Result<Expected, Invalid> {
            match checked {
                true => Ok(Expected::MustBe(id(input.varint()?)?)),
                false => Ok(Expected::Any),
            }
        };
        let change = match tag & !4 {
            0 if !checked => Change::Create {
                new: id(input.varint()?)?,
            },
            1 => {
                let new = id(input.varint()?)?;
                Change::Update {
                    old: old(&mut input)?,
                    new,
                }
            }
            2 => Change::Delete {
                old: old(&mut input)?,
            },
            _ => return Err(Invalid::Tag(tag)),
        };
        updates.push(Update { name, change });
    }
    match input.0.len() {
        0 => Ok(updates),
        n => Err(Invalid::Trailing(n)),
    }
}

/// Reads either form: a base64 string of the binary form, or a JSON list of update objects.
struct EitherForm;

impl<'de> Visitor<'de> for EitherForm {
    type Value = Vec<Update>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("packed ref updates (a base64 string) or a list of updates")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Vec<Update>, E> {
        let b = base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|_| E::custom(Invalid::Base64))?;
        decode(&b).map_err(E::custom)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Update>, A::Error> {
        let mut out = Vec::new();
        while let Some(u) = seq.next_element::<Update>()? {
            out.push(u);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(hex: &str) -> gix_hash::ObjectId {
        gix_hash::ObjectId::from_hex(hex.repeat(40 / hex.len()).as_bytes()).unwrap()
    }

    fn update(name: &str, change: Change) -> Update {
        Update {
            name: RefName::try_from(name).unwrap(),
            change,
        }
    }

    fn every_kind() -> Vec<Update> {
        vec![
            update("refs/heads/main", Change::Create { new: id("a") }),
            update(
                "refs/heads/main2",
                Change::Update {
                    old: Expected::MustBe(id("a")),
                    new: id("b"),
                },
            ),
            update(
                "refs/tags/v1",
                Change::Update {
                    old: Expected::Any,
                    new: id("c"),
                },
            ),
            update(
                "refs/heads/gone",
                Change::Delete {
                    old: Expected::MustBe(id("b")),
                },
            ),
            update("refs/heads/any", Change::Delete { old: Expected::Any }),
        ]
    }

    #[test]
    fn every_kind_of_update_round_trips() {
        let u = every_kind();
        assert_eq!(decode(&encode(&u)).unwrap(), u);
        assert_eq!(decode(&encode(&[])).unwrap(), Vec::<Update>::new());
    }

    #[test]
    fn sha256_ids_round_trip() {
        let long = gix_hash::ObjectId::from_hex("ab".repeat(32).as_bytes()).unwrap();
        let u = vec![update("refs/heads/x", Change::Create { new: long })];
        assert_eq!(decode(&encode(&u)).unwrap(), u);
    }

    /// The 10,000-ref push of the bench: at most 8 bytes per ref where the JSON took ~95.
    #[test]
    fn ten_thousand_new_refs_at_one_commit_take_a_few_bytes_each() {
        let u: Vec<Update> = (0..10_000)
            .map(|i| {
                update(
                    &format!("refs/heads/b/{i}"),
                    Change::Create { new: id("e") },
                )
            })
            .collect();
        let packed = encode(&u);
        assert!(packed.len() <= 8 * u.len(), "{} bytes", packed.len());
        let json = serde_json::to_vec(&u).unwrap();
        assert!(
            json.len() >= 10 * packed.len(),
            "{} against {}",
            json.len(),
            packed.len()
        );
        assert_eq!(decode(&packed).unwrap(), u);
    }

    #[test]
    fn what_a_peer_controls_is_checked() {
        let good = encode(&every_kind());
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(decode(&trailing), Err(Invalid::Trailing(1)));
        let mut version = good.clone();
        version[0] = 2;
        assert_eq!(decode(&version), Err(Invalid::Version(2)));
        // One id of 3 bytes, no updates.
        assert_eq!(decode(&[1, 1, 3, 1, 2, 3, 0]), Err(Invalid::IdLength(3)));
        // No ids; one create of `refs/x` whose new id is index 0.
        let create = |name: &[u8], tag: u8| {
            let mut b = vec![1, 0, 1, tag, 0, name.len() as u8];
            b.extend_from_slice(name);
            b.push(0);
            b
        };
        assert_eq!(decode(&create(b"refs/x", 0)), Err(Invalid::Index(0)));
        assert!(matches!(
            decode(&create(b"refs/../x", 0)),
            Err(Invalid::Name(_))
        ));
        assert_eq!(decode(&create(b"refs/x", 3)), Err(Invalid::Tag(3)));
        // A create with an old value is no operation either.
        assert_eq!(decode(&create(b"refs/x", 4)), Err(Invalid::Tag(4)));
        // The first name cannot share bytes with a previous one.
        assert_eq!(decode(&[1, 0, 1, 0, 5, 0, 0]), Err(Invalid::Shared(5)));
    }

    #[test]
    fn the_json_list_of_before_is_still_read() {
        #[derive(serde::Deserialize)]
        struct Holder {
            updates: Updates,
        }
        let u = every_kind();
        let old = serde_json::json!({ "updates": u });
        let read: Holder = serde_json::from_value(old).unwrap();
        assert_eq!(read.updates.0, u);
        let new = format!(
            r#"{{"updates":"{}"}}"#,
            base64::engine::general_purpose::STANDARD.encode(encode(&u))
        );
        let read: Holder = serde_json::from_str(&new).unwrap();
        assert_eq!(read.updates.0, u);
    }

    /// A small input whose names each repeat a long previous name for a few bytes refuses
    /// instead of growing a list of names hundreds of times its size.
    #[test]
    fn names_that_expand_far_past_the_input_are_refused() {
        let long = format!("refs/heads/{}", "x".repeat(60_000));
        let mut b = vec![VERSION];
        put_varint(&mut b, 1);
        put_varint(&mut b, 20);
        b.extend_from_slice(&[7u8; 20]);
        let n = 100_000u64;
        put_varint(&mut b, n);
        // The first update names the long ref; every later one shares all of it and adds
        // nothing (shared = its length, rest empty): six bytes of input per 60 kB name.
        b.push(0);
        put_varint(&mut b, 0);
        put_varint(&mut b, long.len() as u64);
        b.extend_from_slice(long.as_bytes());
        put_varint(&mut b, 0);
        for _ in 1..n {
            b.push(0);
            put_varint(&mut b, long.len() as u64);
            put_varint(&mut b, 0);
            put_varint(&mut b, 0);
        }
        // ~1 MB of input that would otherwise make 6 GB of names.
        assert!(b.len() < 1_100_000);
        assert_eq!(decode(&b), Err(Invalid::Expansion));

        // A name longer than a pkt-line can carry.
        let mut b = vec![VERSION];
        put_varint(&mut b, 0);
        put_varint(&mut b, 1);
        b.push(2);
        put_varint(&mut b, 0);
        let huge = format!("refs/heads/{}", "y".repeat(70_000));
        put_varint(&mut b, huge.len() as u64);
        b.extend_from_slice(huge.as_bytes());
        assert_eq!(decode(&b), Err(Invalid::NameLength(huge.len())));
    }
}
