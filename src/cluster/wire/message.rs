//! The messages nodes send each other, and the values they keep in etcd, as serde types: the
//! prepare header, a log entry and its ref updates, a snapshot and the asks for one or for a
//! pack, a repository's format, the replica list, and the query of the stream, drop and decide
//! requests. Every field a peer controls is a validated type ([`RepoName`], [`Id`],
//! [`NodeName`], [`RefName`] by git's rules, [`Oid`] by gix_hash), so decoding refuses bad
//! input once, at the boundary.
//!
//! The JSON is what `serde_json::json!` wrote before these types (fields in alphabetical
//! order, an absent or `null` value where it had one): nodes of one build read each other's.
//! The one exception is a list of ref updates (a log entry's, a prepare header's): it is
//! written packed, one base64 string (`wire/packed.rs`), and read in either form.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::packed::{Packed, Updates};
use crate::refs::{Change, Expected, RefUpdate};

/// Why a field of a message was refused.
#[derive(Debug, thiserror::Error)]
pub(in crate::cluster) enum Invalid {
    /// Not a repository name as nodes send it (a `repo::Name`'s key).
    #[error("bad repository name")]
    RepoName,
    /// Not a transaction or stream id (1–64 hex digits).
    #[error("bad id")]
    Id,
    /// Not a node name (1–64 letters, digits, `.`, `_`, `-`).
    #[error("bad node name")]
    NodeName,
    /// Not a ref name a push could have written.
    #[error("bad ref name {0:?}")]
    RefName(String),
    /// Not an object id in hex (40 or 64 digits).
    #[error("bad object id: {0}")]
    ObjectId(#[from] gix_error::Error),
    /// An update without the new value its operation needs.
    #[error("object id missing")]
    NewMissing,
    /// A snapshot that lists a ref twice.
    #[error("a ref twice")]
    RefTwice,
    /// A sequence number in a query that is not a number.
    #[error("bad sequence number")]
    Seq,
    /// More object ids in a query than it carries.
    #[error("{0} object ids, more than {max}", max = OidList::MAX)]
    TooManyIds(usize),
}

/// A message that could not be decoded: what it was, and why.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct Decode {
    /// The message's name (`header`, `log entry`, …).
    pub(in crate::cluster) what: &'static str,
    /// serde's reason, which names the field and the [`Invalid`] check that failed.
    #[source]
    pub(in crate::cluster) source: serde_json::Error,
}

/// Decode the JSON message `what` from `b`.
pub(in crate::cluster) fn decode<T: DeserializeOwned>(
    what: &'static str,
    b: &[u8],
) -> Result<T, Decode> {
    serde_json::from_slice(b).map_err(|source| Decode { what, source })
}

/// The JSON of `message`.
pub(in crate::cluster) fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    // The types here serialize to JSON whatever their values (string keys, no maps).
    serde_json::to_vec(message).unwrap_or_default()
}

/// A request query that could not be decoded: which request, and why.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub(in crate::cluster) struct Query {
    /// The request (`stream`, `drop`, `decide`).
    pub(in crate::cluster) what: &'static str,
    #[source]
    pub(in crate::cluster) source: serde::de::value::Error,
}

/// Decode the query of request `what` (`k=v&…`, values as sent: nodes send names and ids
/// unescaped, and those need no escaping).
pub(in crate::cluster) fn decode_query<T: DeserializeOwned>(
    what: &'static str,
    query: &str,
) -> Result<T, Query> {
    let pairs = query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
    T::deserialize(serde::de::value::MapDeserializer::new(pairs))
        .map_err(|source| Query { what, source })
}

/// A string newtype checked by `$valid`, refused with `$err`.
macro_rules! checked_string {
    ($(#[$doc:meta])* $name:ident, $valid:expr, $err:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub(in crate::cluster) struct $name(String);

        impl TryFrom<String> for $name {
            type Error = Invalid;
            fn try_from(s: String) -> Result<Self, Invalid> {
                let valid: fn(&str) -> bool = $valid;
                if valid(&s) {
                    Ok($name(s))
                } else {
                    let err: fn(String) -> Invalid = $err;
                    Err(err(s))
                }
            }
        }

        impl TryFrom<&str> for $name {
            type Error = Invalid;
            fn try_from(s: &str) -> Result<Self, Invalid> {
                $name::try_from(s.to_owned())
            }
        }

        impl From<$name> for String {
            fn from(n: $name) -> String {
                n.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

checked_string!(
    /// A repository name as nodes send it to each other: a [`crate::repo::Name`]'s key (the
    /// cluster's name of `team/app.git` is `team/app`).
    RepoName,
    |s| crate::repo::Name::new(s).is_ok_and(|n| n.key() == s),
    |_| Invalid::RepoName
);

checked_string!(
    /// A transaction or stream id as `random_hex` makes them: 1–64 hex digits.
    Id,
    |s| !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_hexdigit()),
    |_| Invalid::Id
);

checked_string!(
    /// A node's name, unique in the cluster: 1–64 letters, digits, `.`, `_` and `-`.
    NodeName,
    |s| {
        !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    },
    |_| Invalid::NodeName
);

checked_string!(
    /// A ref name a push could have written: `refs/…` by git's rules (`repo::policy`'s
    /// one-pass check; one component after `refs/` allowed).
    RefName,
    RefName::is_valid,
    Invalid::RefName
);

impl RefName {
    /// Whether `s` is a ref name a push could have written.
    pub(in crate::cluster) fn is_valid(s: &str) -> bool {
        crate::repo::policy::is_valid_refname(s.into(), true)
    }
}

impl Id {
    /// A new random id (16 bytes, as 32 hex digits).
    pub(in crate::cluster) fn random() -> Id {
        Id(crate::cluster::random_hex(16))
    }
}

macro_rules! as_str {
    ($($name:ident),*) => {
        $(impl $name {
            pub(in crate::cluster) fn as_str(&self) -> &str {
                &self.0
            }
        })*
    };
}

as_str!(RepoName, Id, RefName);

/// An object id, as hex on the wire (40 digits for SHA-1, 64 for SHA-256).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub(in crate::cluster) struct Oid(pub(in crate::cluster) gix_hash::ObjectId);

impl TryFrom<String> for Oid {
    type Error = Invalid;
    fn try_from(s: String) -> Result<Self, Invalid> {
        Ok(Oid(gix_hash::ObjectId::from_hex(s.as_bytes())?))
    }
}

impl From<Oid> for String {
    fn from(id: Oid) -> String {
        id.0.to_string()
    }
}

/// A log sequence number in a query (`seq=…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub(in crate::cluster) struct QuerySeq(pub(in crate::cluster) u64);

impl TryFrom<String> for QuerySeq {
    type Error = Invalid;
    fn try_from(s: String) -> Result<Self, Invalid> {
        s.parse().map(QuerySeq).map_err(|_| Invalid::Seq)
    }
}

/// A ref name that cannot travel between nodes.
#[derive(Debug, thiserror::Error)]
pub(in crate::cluster) enum NotReplicable {
    /// Ref names travel as UTF-8 text.
    #[error("a ref name is not UTF-8")]
    NotUtf8,
    /// A peer would refuse it.
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

/// One ref update as it travels: `{"name", "new", "old", "op"}` (`create` has no `old`,
/// `delete` no `new`; an `old` of `null` is no check, [`Expected::Any`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "UpdateFields", into = "UpdateFields")]
pub(in crate::cluster) struct Update {
    pub(in crate::cluster) name: RefName,
    pub(in crate::cluster) change: Change,
}

impl From<Update> for RefUpdate {
    fn from(u: Update) -> RefUpdate {
        RefUpdate {
            name: String::from(u.name).into(),
            change: u.change,
        }
    }
}

/// An update's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Op {
    Create,
    Update,
    Delete,
}

/// An update's old value: absent (a create), `null` (no check) or an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Old {
    #[default]
    Absent,
    Any,
    Is(Oid),
}

impl Old {
    fn is_absent(&self) -> bool {
        matches!(self, Old::Absent)
    }
}

impl Serialize for Old {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Old::Absent | Old::Any => s.serialize_none(),
            Old::Is(id) => id.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Old {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Option::<Oid>::deserialize(d)?.map_or(Old::Any, Old::Is))
    }
}

/// The fields of an [`Update`] as they are on the wire (alphabetical, as `json!` wrote them).
#[derive(Serialize, Deserialize)]
struct UpdateFields {
    name: RefName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    new: Option<Oid>,
    #[serde(default, skip_serializing_if = "Old::is_absent")]
    old: Old,
    op: Op,
}

impl TryFrom<UpdateFields> for Update {
    type Error = Invalid;
    fn try_from(f: UpdateFields) -> Result<Self, Invalid> {
        let expected = match f.old {
            Old::Is(id) => Expected::MustBe(id.0),
            Old::Absent | Old::Any => Expected::Any,
        };
        let new = || f.new.map(|n| n.0).ok_or(Invalid::NewMissing);
        let change = match f.op {
            Op::Create => Change::Create { new: new()? },
            Op::Update => Change::Update {
                old: expected,
                new: new()?,
            },
            Op::Delete => Change::Delete { old: expected },
        };
        Ok(Update {
            name: f.name,
            change,
        })
    }
}

impl From<Update> for UpdateFields {
    fn from(u: Update) -> UpdateFields {
        let old = |e: Expected| match e {
            Expected::MustBe(id) => Old::Is(Oid(id)),
            Expected::Any => Old::Any,
        };
        let (op, new, old) = match u.change {
            Change::Create { new } => (Op::Create, Some(Oid(new)), Old::Absent),
            Change::Update { old: o, new } => (Op::Update, Some(Oid(new)), old(o)),
            Change::Delete { old: o } => (Op::Delete, None, old(o)),
        };
        UpdateFields {
            name: u.name,
            new,
            old,
            op,
        }
    }
}

/// A log entry (`repos/<name>/entries/<seq>`), or its head without `updates` (the value of
/// `logs/<name>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::cluster) struct Entry<U = Updates> {
    /// The node that accepted the push.
    pub(in crate::cluster) origin: NodeName,
    /// 1 for the repository's first entry, then one more each.
    pub(in crate::cluster) seq: u64,
    /// The push's transaction id.
    pub(in crate::cluster) txid: Id,
    /// The ref updates, in order; `None` in a head. Written [`Packed`] once for the prepare
    /// and the entry, read as [`Updates`] (packed, or the JSON list entries had before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::cluster) updates: Option<U>,
    /// The shallow roots of the push (the client's `shallow` commits the accepting node holds
    /// as shallow, `$GIT_DIR/shallow`): a replica catching up checks connectivity with them and
    /// records the ones its copy needs. Absent in a head, and for a push from a full clone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::cluster) shallow: Vec<Oid>,
}

/// The first byte of a log entry stored in its binary form ([`Entry::stored`]); a JSON entry
/// (a head, or an entry stored before the binary form) starts with `{`.
const STORED_ENTRY: u8 = 1;

impl Entry<&Packed> {
    /// The entry as etcd stores it (`entries/<seq>`): [`STORED_ENTRY`], the length of a JSON
    /// header (u32, big-endian), the header (the entry without its updates), then the
    /// updates' packed bytes as they are. A 10,000-ref entry is ~51 KB so, not the 68 KB of
    /// base64 inside JSON it took before.
    pub(in crate::cluster) fn stored(&self) -> Vec<u8> {
        let header = encode(&Entry::<&Packed> {
            updates: None,
            ..self.clone()
        });
        let packed = self.updates.map_or(&[][..], |p| p.as_bytes());
        let mut out = Vec::with_capacity(5 + header.len() + packed.len());
        out.push(STORED_ENTRY);
        out.extend_from_slice(&(header.len() as u32).to_be_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(packed);
        out
    }
}

impl Entry {
    /// A log entry as etcd stores it, in either form ([`Entry::stored`], or JSON), every
    /// field checked.
    pub(in crate::cluster) fn from_stored(b: &[u8]) -> Result<Entry, Decode> {
        const WHAT: &str = "log entry";
        let Some((&STORED_ENTRY, rest)) = b.split_first() else {
            return decode(WHAT, b);
        };
        let refused = |why: &dyn std::fmt::Display| Decode {
            what: WHAT,
            source: serde::de::Error::custom(why),
        };
        let (len, rest) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| refused(&"truncated"))?;
        let (header, packed) = rest
            .split_at_checked(u32::from_be_bytes(*len) as usize)
            .ok_or_else(|| refused(&"truncated"))?;
        let mut entry: Entry = decode(WHAT, header)?;
        if entry.updates.is_some() {
            return Err(refused(&"updates in the header"));
        }
        let updates = super::packed::decode(packed).map_err(|e| refused(&e))?;
        entry.updates = Some(Updates(updates));
        Ok(entry)
    }
}

/// The header of `POST /_berth/cluster/prepare`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::cluster) struct Prepare<U = Updates> {
    /// The log sequence number the push was decided against.
    pub(in crate::cluster) base_seq: u64,
    pub(in crate::cluster) committer_email: String,
    pub(in crate::cluster) committer_name: String,
    pub(in crate::cluster) repo: RepoName,
    /// The id of the stream that brought the push's pack; `null`: the push has no pack.
    pub(in crate::cluster) stream: Option<Id>,
    pub(in crate::cluster) txid: Id,
    /// As a log entry's: [`Packed`] when written, [`Updates`] when read.
    pub(in crate::cluster) updates: U,
    /// The push's shallow roots, as [`Entry::shallow`]; absent for a push from a full clone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::cluster) shallow: Vec<Oid>,
    /// The accepting node: a replica prepared for the push resolves it from the log as soon as
    /// this node's lease is gone. Absent from an older node's header (the replica then waits
    /// out its decision timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::cluster) origin: Option<NodeName>,
    /// The push's age, which orders its turn to lock refs against other pushes' (`turns.rs`).
    /// Absent from an older node's header (the replica then takes it as the youngest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::cluster) age: Option<crate::cluster::turns::Age>,
}

/// The ask of `POST /_berth/cluster/snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::cluster) struct SnapshotAsk {
    pub(in crate::cluster) repo: RepoName,
}

/// A replica's refs at the last entry it applied: the answer of `POST
/// /_berth/cluster/snapshot` (`{"head", "refs": [[name, id], …], "seq"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::cluster) struct Snapshot {
    /// The ref HEAD names, if it is symbolic.
    pub(in crate::cluster) head: Option<RefName>,
    pub(in crate::cluster) refs: SnapshotRefs,
    /// The last entry applied.
    pub(in crate::cluster) seq: u64,
}

/// A snapshot's refs, sorted by name, each once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(RefName, Oid)>", into = "Vec<(RefName, Oid)>")]
pub(in crate::cluster) struct SnapshotRefs(Vec<(RefName, Oid)>);

impl TryFrom<Vec<(RefName, Oid)>> for SnapshotRefs {
    type Error = Invalid;
    fn try_from(mut refs: Vec<(RefName, Oid)>) -> Result<Self, Invalid> {
        refs.sort();
        if refs.windows(2).any(|p| p[0].0 == p[1].0) {
            return Err(Invalid::RefTwice);
        }
        Ok(SnapshotRefs(refs))
    }
}

impl From<SnapshotRefs> for Vec<(RefName, Oid)> {
    fn from(r: SnapshotRefs) -> Self {
        r.0
    }
}

impl SnapshotRefs {
    /// The refs, sorted by name.
    pub(in crate::cluster) fn list(&self) -> &[(RefName, Oid)] {
        &self.0
    }

    /// Whether `name` is among them.
    pub(in crate::cluster) fn contains(&self, name: &str) -> bool {
        self.0.binary_search_by(|r| r.0.as_str().cmp(name)).is_ok()
    }
}

/// The ask of `POST /_berth/cluster/pack`: the objects of `want` not reachable from `have`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::cluster) struct PackAsk {
    pub(in crate::cluster) have: Vec<Oid>,
    pub(in crate::cluster) repo: RepoName,
    pub(in crate::cluster) want: Vec<Oid>,
}

/// An object format `git init` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(in crate::cluster) enum ObjectFormat {
    Sha1,
    Sha256,
}

impl ObjectFormat {
    /// The name `git init --object-format` takes.
    pub(in crate::cluster) fn as_str(self) -> &'static str {
        match self {
            ObjectFormat::Sha1 => "sha1",
            ObjectFormat::Sha256 => "sha256",
        }
    }
}

/// A ref format `git init` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(in crate::cluster) enum RefFormat {
    Files,
    Reftable,
}

impl RefFormat {
    /// The name `git init --ref-format` takes.
    pub(in crate::cluster) fn as_str(self) -> &'static str {
        match self {
            RefFormat::Files => "files",
            RefFormat::Reftable => "reftable",
        }
    }
}

/// A repository's formats as the cluster records them (`repos/<name>/format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::cluster) struct Format {
    pub(in crate::cluster) object_format: ObjectFormat,
    pub(in crate::cluster) ref_format: RefFormat,
}

/// A repository's replicas as recorded (`repos/<name>/replicas`), best first.
pub(in crate::cluster) type Replicas = Vec<NodeName>;

/// The query of `POST /_berth/cluster/stream`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(in crate::cluster) struct StreamQuery {
    pub(in crate::cluster) repo: RepoName,
    pub(in crate::cluster) stream: Id,
    /// The client's `shallow` lines (`shallow=<id>,<id>…`): the commits whose parents the
    /// pack may lack, as the accepting node's own ingest takes them.
    #[serde(default, deserialize_with = "present")]
    pub(in crate::cluster) shallow: Option<OidList>,
}

/// Object ids in a query, comma-separated, at most [`OidList::MAX`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub(in crate::cluster) struct OidList(pub(in crate::cluster) Vec<gix_hash::ObjectId>);

impl OidList {
    /// The most ids a query carries (a SHA-256 list of that many is 65 KiB).
    pub(in crate::cluster) const MAX: usize = 1000;

    /// The query value of `ids`: `None` when there are none, or more than [`OidList::MAX`].
    pub(in crate::cluster) fn query(ids: &[gix_hash::ObjectId]) -> Option<String> {
        (!ids.is_empty() && ids.len() <= Self::MAX).then(|| {
            ids.iter()
                .map(|id| id.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
    }
}

impl TryFrom<String> for OidList {
    type Error = Invalid;
    fn try_from(s: String) -> Result<Self, Invalid> {
        let ids = s
            .split(',')
            .map(|id| gix_hash::ObjectId::from_hex(id.as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        if ids.len() > Self::MAX {
            return Err(Invalid::TooManyIds(ids.len()));
        }
        Ok(OidList(ids))
    }
}

/// The query of `POST /_berth/cluster/drop`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(in crate::cluster) struct DropQuery {
    pub(in crate::cluster) stream: Id,
}

/// A decision's word in the decide query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(in crate::cluster) enum VerdictWord {
    Commit,
    Abort,
}

/// The query of `POST /_berth/cluster/decide`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(in crate::cluster) struct DecideQuery {
    pub(in crate::cluster) repo: RepoName,
    pub(in crate::cluster) txid: Id,
    /// A query's values are text: present is `Some`, whatever serde's `Option` would expect.
    #[serde(default, deserialize_with = "present")]
    pub(in crate::cluster) seq: Option<QuerySeq>,
    pub(in crate::cluster) verdict: VerdictWord,
}

/// A query value that is there.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gix_hash::ObjectId;

    fn oid(c: char) -> ObjectId {
        ObjectId::from_hex(c.to_string().repeat(40).as_bytes()).unwrap()
    }

    fn sample_updates() -> Vec<RefUpdate> {
        vec![
            RefUpdate {
                name: "refs/heads/a".into(),
                change: Change::Create { new: oid('1') },
            },
            RefUpdate {
                name: "refs/heads/b".into(),
                change: Change::Update {
                    old: Expected::MustBe(oid('1')),
                    new: oid('2'),
                },
            },
            RefUpdate {
                name: "refs/heads/c".into(),
                change: Change::Update {
                    old: Expected::Any,
                    new: oid('2'),
                },
            },
            RefUpdate {
                name: "refs/heads/d".into(),
                change: Change::Delete { old: Expected::Any },
            },
            RefUpdate {
                name: "refs/heads/e".into(),
                change: Change::Delete {
                    old: Expected::MustBe(oid('2')),
                },
            },
        ]
    }

    /// [`sample_updates`] as read from a message.
    fn sample_list() -> Updates {
        let read = |u: &RefUpdate| Update {
            name: RefName::try_from(std::str::from_utf8(&u.name).unwrap()).unwrap(),
            change: u.change,
        };
        Updates(sample_updates().iter().map(read).collect())
    }

    /// What a sender writes once ([`super::super::Packed`]) is what a reader reads, and the
    /// same string a list of updates is written as; a name a peer would refuse is refused
    /// before it is sent.
    #[test]
    fn updates_packed_once_read_back_as_they_were() {
        let packed = super::super::Packed::of(&sample_updates()).unwrap();
        let written = serde_json::to_string(&packed).unwrap();
        assert_eq!(written, serde_json::to_string(&sample_list()).unwrap());
        let read: Updates = serde_json::from_str(&written).unwrap();
        assert_eq!(Vec::<RefUpdate>::from(read), sample_updates());
        let bad = |name: &[u8]| {
            super::super::Packed::of(&[RefUpdate {
                name: name.into(),
                change: Change::Delete { old: Expected::Any },
            }])
        };
        assert!(matches!(
            bad(b"refs/heads/\xff"),
            Err(NotReplicable::NotUtf8)
        ));
        assert!(matches!(
            bad(b"refs/heads/a..b"),
            Err(NotReplicable::Invalid(Invalid::RefName(n))) if n == "refs/heads/a..b"
        ));
    }

    /// A log entry is stored binary, and the two JSON forms entries were stored in before are
    /// still read; a stored entry cut anywhere, or with updates in its header, is refused.
    #[test]
    fn stored_entries_are_read_in_every_form() {
        let packed = super::super::Packed::of(&sample_updates()).unwrap();
        let written = Entry {
            origin: NodeName::try_from("n1").unwrap(),
            seq: 7,
            txid: Id::try_from("ab").unwrap(),
            updates: Some(&packed),
            shallow: vec![Oid(oid('4'))],
        };
        let read = Entry {
            updates: Some(sample_list()),
            ..decode::<Entry>("log entry", &encode(&written)).unwrap()
        };
        let stored = written.stored();
        assert_eq!(stored[0], STORED_ENTRY);
        assert_eq!(Entry::from_stored(&stored).unwrap(), read);
        // Before: JSON, the updates packed in base64 inside it, or one JSON object each.
        assert_eq!(Entry::from_stored(&encode(&written)).unwrap(), read);
        assert_eq!(Entry::from_stored(&encode(&read)).unwrap(), read);
        let list = serde_json::json!({
            "origin": "n1", "seq": 7, "txid": "ab", "updates": read.updates.as_ref().unwrap().0,
            "shallow": ["4".repeat(40)],
        });
        let list = serde_json::to_vec(&list).unwrap();
        assert_eq!(Entry::from_stored(&list).unwrap(), read);
        for cut in 1..stored.len() {
            assert!(Entry::from_stored(&stored[..cut]).is_err(), "cut at {cut}");
        }
        let mut twice = vec![STORED_ENTRY];
        let header = encode(&written);
        twice.extend_from_slice(&(header.len() as u32).to_be_bytes());
        twice.extend_from_slice(&header);
        twice.extend_from_slice(packed.as_bytes());
        assert!(Entry::from_stored(&twice).is_err());
    }

    #[test]
    fn the_json_is_what_json_macro_wrote() {
        let (a, b) = ("1".repeat(40), "2".repeat(40));
        let entry = Entry {
            origin: NodeName::try_from("n1").unwrap(),
            seq: 7,
            txid: Id::try_from("ab").unwrap(),
            updates: Some(sample_list()),
            shallow: Vec::new(),
        };
        let want = format!(
            r#"{{"origin":"n1","seq":7,"txid":"ab","updates":[{{"name":"refs/heads/a","new":"{a}","op":"create"}},{{"name":"refs/heads/b","new":"{b}","old":"{a}","op":"update"}},{{"name":"refs/heads/c","new":"{b}","old":null,"op":"update"}},{{"name":"refs/heads/d","old":null,"op":"delete"}},{{"name":"refs/heads/e","old":"{b}","op":"delete"}}]}}"#
        );
        // The updates are packed now (`wire/packed.rs`); the list above is still read.
        let packed = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            super::super::packed::encode(&entry.updates.as_ref().unwrap().0),
        );
        assert_eq!(
            String::from_utf8(encode(&entry)).unwrap(),
            format!(r#"{{"origin":"n1","seq":7,"txid":"ab","updates":"{packed}"}}"#)
        );
        assert_eq!(
            decode::<Entry>("log entry", want.as_bytes()).unwrap(),
            entry
        );
        let head = Entry {
            updates: None,
            ..entry.clone()
        };
        assert_eq!(
            String::from_utf8(encode(&head)).unwrap(),
            r#"{"origin":"n1","seq":7,"txid":"ab"}"#
        );
        let prepare = Prepare {
            base_seq: 3,
            committer_email: "e@x".into(),
            committer_name: "N".into(),
            repo: RepoName::try_from("team/app").unwrap(),
            stream: None,
            txid: Id::try_from("ab").unwrap(),
            updates: Updates::default(),
            shallow: Vec::new(),
            origin: None,
            age: None,
        };
        assert_eq!(
            String::from_utf8(encode(&prepare)).unwrap(),
            r#"{"base_seq":3,"committer_email":"e@x","committer_name":"N","repo":"team/app","stream":null,"txid":"ab","updates":"AQAA"}"#
        );
        let from_n1 = Prepare {
            origin: Some(NodeName::try_from("n1").unwrap()),
            ..prepare.clone()
        };
        let encoded = encode(&from_n1);
        assert!(String::from_utf8_lossy(&encoded).ends_with(r#""updates":"AQAA","origin":"n1"}"#));
        assert_eq!(decode::<Prepare>("header", &encoded).unwrap(), from_n1);
        assert!(decode::<Prepare>("header", br#"{"base_seq":3,"committer_email":"e@x","committer_name":"N","repo":"team/app","stream":null,"txid":"ab","updates":[],"origin":"../x"}"#).is_err());
        // The push's age, for its turn: two numbers.
        let aged = Prepare {
            age: Some(crate::cluster::turns::Age(1_764_000_000_000_000, 7)),
            ..from_n1.clone()
        };
        let encoded = encode(&aged);
        assert!(
            String::from_utf8_lossy(&encoded)
                .ends_with(r#""origin":"n1","age":[1764000000000000,7]}"#)
        );
        assert_eq!(decode::<Prepare>("header", &encoded).unwrap(), aged);
        assert!(decode::<Prepare>("header", br#"{"base_seq":3,"committer_email":"e@x","committer_name":"N","repo":"team/app","stream":null,"txid":"ab","updates":[],"age":[-1,2]}"#).is_err());
        let snap = Snapshot {
            head: Some(RefName::try_from("refs/heads/main").unwrap()),
            refs: SnapshotRefs::try_from(vec![(
                RefName::try_from("refs/heads/main").unwrap(),
                Oid(oid('1')),
            )])
            .unwrap(),
            seq: 4,
        };
        assert_eq!(
            String::from_utf8(encode(&snap)).unwrap(),
            format!(r#"{{"head":"refs/heads/main","refs":[["refs/heads/main","{a}"]],"seq":4}}"#)
        );
        let ask = PackAsk {
            have: vec![Oid(oid('2'))],
            repo: RepoName::try_from("r").unwrap(),
            want: vec![Oid(oid('1'))],
        };
        assert_eq!(
            String::from_utf8(encode(&ask)).unwrap(),
            format!(r#"{{"have":["{b}"],"repo":"r","want":["{a}"]}}"#)
        );
        let format = Format {
            object_format: ObjectFormat::Sha256,
            ref_format: RefFormat::Reftable,
        };
        assert_eq!(
            String::from_utf8(encode(&format)).unwrap(),
            r#"{"object_format":"sha256","ref_format":"reftable"}"#
        );
    }

    #[test]
    fn round_trip() {
        let entry = Entry {
            origin: NodeName::try_from("node-1.a_b").unwrap(),
            seq: u64::MAX,
            txid: Id::try_from("0123456789abcdef").unwrap(),
            updates: Some(sample_list()),
            shallow: vec![Oid(oid('4'))],
        };
        let back: Entry = decode("log entry", &encode(&entry)).unwrap();
        assert_eq!(back, entry);
        // The stream's query: the client's shallow lines, comma-separated, checked.
        let (a, b) = ("1".repeat(40), "2".repeat(40));
        let q: StreamQuery =
            decode_query("stream", &format!("repo=r&stream=ab&shallow={a},{b}")).unwrap();
        assert_eq!(q.shallow, Some(OidList(vec![oid('1'), oid('2')])));
        assert_eq!(
            OidList::query(&[oid('1'), oid('2')]).as_deref(),
            Some(format!("{a},{b}").as_str())
        );
        assert_eq!(OidList::query(&[]), None);
        let q: StreamQuery = decode_query("stream", "repo=r&stream=ab").unwrap();
        assert_eq!(q.shallow, None);
        assert!(decode_query::<StreamQuery>("stream", "repo=r&stream=ab&shallow=xyz").is_err());
        let many = vec![oid('1'); OidList::MAX + 1];
        assert_eq!(OidList::query(&many), None);
        let too_many = many
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        assert!(
            decode_query::<StreamQuery>("stream", &format!("repo=r&stream=ab&shallow={too_many}"))
                .is_err()
        );
        assert_eq!(
            Vec::<RefUpdate>::from(back.updates.unwrap()),
            sample_updates()
        );
        let sha256 = ObjectId::from_hex("3".repeat(64).as_bytes()).unwrap();
        let snap = Snapshot {
            head: None,
            refs: SnapshotRefs::try_from(vec![
                (RefName::try_from("refs/tags/v1").unwrap(), Oid(sha256)),
                (RefName::try_from("refs/heads/x").unwrap(), Oid(sha256)),
            ])
            .unwrap(),
            seq: 0,
        };
        let back: Snapshot = decode("snapshot", &encode(&snap)).unwrap();
        assert_eq!(back, snap);
        assert_eq!(back.refs.list()[0].0.as_str(), "refs/heads/x");
        assert!(back.refs.contains("refs/tags/v1") && !back.refs.contains("refs/tags"));
        let q: DecideQuery =
            decode_query("decide", "repo=team/app&txid=ab&verdict=commit&seq=9&x=y").unwrap();
        assert_eq!(q.seq, Some(QuerySeq(9)));
        assert_eq!(q.verdict, VerdictWord::Commit);
        let q: DecideQuery = decode_query("decide", "repo=r&txid=ab&verdict=abort").unwrap();
        assert_eq!((q.seq, q.verdict), (None, VerdictWord::Abort));
        let q: StreamQuery = decode_query("stream", "repo=r&stream=00ff").unwrap();
        assert_eq!((q.repo.as_str(), q.stream.as_str()), ("r", "00ff"));
    }

    #[test]
    fn hostile_input_is_refused() {
        let id = "1".repeat(40);
        let long = "a".repeat(65);
        let update = |u: &str| format!(r#"{{"origin":"n","seq":1,"txid":"ab","updates":[{u}]}}"#);
        for bad in [
            // Missing fields, wrong types, not JSON.
            r#"{"seq":1,"txid":"ab"}"#.to_owned(),
            r#"{"origin":"n","txid":"ab"}"#.to_owned(),
            r#"{"origin":"n","seq":-1,"txid":"ab"}"#.to_owned(),
            r#"{"origin":"n","seq":"1","txid":"ab"}"#.to_owned(),
            r#"{"origin":"n","seq":1}"#.to_owned(),
            r#"["origin"]"#.to_owned(),
            "not json".to_owned(),
            String::new(),
            // Bad ids and names.
            r#"{"origin":"n","seq":1,"txid":"xyz"}"#.to_owned(),
            r#"{"origin":"n","seq":1,"txid":""}"#.to_owned(),
            format!(r#"{{"origin":"n","seq":1,"txid":"{long}"}}"#),
            r#"{"origin":"a/b","seq":1,"txid":"ab"}"#.to_owned(),
            format!(r#"{{"origin":"{long}","seq":1,"txid":"ab"}}"#),
            // Bad updates.
            update(r#"{"name":"refs/../x","op":"create","new":"11"}"#),
            update(&format!(
                r#"{{"name":"refs/heads/a..b","op":"create","new":"{id}"}}"#
            )),
            update(&format!(r#"{{"name":"HEAD","op":"create","new":"{id}"}}"#)),
            update(&format!(
                r#"{{"name":"refs/heads/a","op":"move","new":"{id}"}}"#
            )),
            update(&format!(r#"{{"name":"refs/heads/a","new":"{id}"}}"#)),
            update(&format!(r#"{{"op":"create","new":"{id}"}}"#)),
            update(r#"{"name":"refs/heads/a","op":"create"}"#),
            update(r#"{"name":"refs/heads/a","op":"update","old":null}"#),
            update(&format!(
                r#"{{"name":"refs/heads/a","op":"create","new":"{id}1"}}"#
            )),
            update(&format!(
                r#"{{"name":"refs/heads/a","op":"create","new":"{}"}}"#,
                "1".repeat(39)
            )),
            update(&format!(
                r#"{{"name":"refs/heads/a","op":"create","new":"{}"}}"#,
                "g".repeat(40)
            )),
            update(&format!(
                r#"{{"name":"refs/heads/a","op":"delete","old":"{}"}}"#,
                "1".repeat(65)
            )),
            update(r#"{"name":"refs/heads/a","op":"delete","old":7}"#),
            update(r#"7"#),
        ] {
            assert!(
                decode::<Entry>("log entry", bad.as_bytes()).is_err(),
                "{bad}"
            );
        }
        // An oversized name is refused by the name rules (no component may be that long
        // where git's check_refname_format would not take it), an oversized id by its length.
        let huge = format!("refs/heads/{}", "a".repeat(1 << 20));
        let r = decode::<Snapshot>(
            "snapshot",
            format!(r#"{{"head":"{huge}.lock","refs":[],"seq":1}}"#).as_bytes(),
        );
        assert!(r.is_err());
        for bad in [
            format!(r#"{{"head":null,"refs":[["HEAD","{id}"]],"seq":4}}"#),
            format!(
                r#"{{"head":null,"refs":[["refs/heads/a","{id}"],["refs/heads/a","{id}"]],"seq":4}}"#
            ),
            r#"{"head":null,"refs":[["refs/heads/a"]],"seq":4}"#.to_owned(),
            format!(r#"{{"head":null,"refs":[["refs/heads/a","{id}","x"]],"seq":4}}"#),
            r#"{"head":"../x","refs":[],"seq":4}"#.to_owned(),
            r#"{"head":null,"seq":4}"#.to_owned(),
            r#"{"head":null,"refs":{},"seq":4}"#.to_owned(),
        ] {
            assert!(
                decode::<Snapshot>("snapshot", bad.as_bytes()).is_err(),
                "{bad}"
            );
        }
        for bad in [
            r#"{"repo":"../r"}"#,
            r#"{"repo":"r.git"}"#,
            r#"{"repo":""}"#,
            r#"{"repo":"/r"}"#,
            r#"{"repo":null}"#,
            r#"{}"#,
        ] {
            assert!(
                decode::<SnapshotAsk>("snapshot", bad.as_bytes()).is_err(),
                "{bad}"
            );
        }
        for bad in [
            format!(r#"{{"have":[],"repo":"r","want":["{id}","zz"]}}"#),
            format!(r#"{{"have":"{id}","repo":"r","want":[]}}"#),
            r#"{"repo":"r","want":[]}"#.to_owned(),
        ] {
            assert!(decode::<PackAsk>("pack", bad.as_bytes()).is_err(), "{bad}");
        }
        for bad in [
            r#"{"object_format":"md5","ref_format":"files"}"#,
            r#"{"object_format":"sha1","ref_format":"--upload-pack=x"}"#,
            r#"{"object_format":"sha1"}"#,
        ] {
            assert!(decode::<Format>("format", bad.as_bytes()).is_err(), "{bad}");
        }
        let header = |repo: &str, txid: &str, stream: &str| {
            format!(
                r#"{{"base_seq":0,"committer_email":"","committer_name":"","repo":{repo},"stream":{stream},"txid":{txid},"updates":[]}}"#
            )
        };
        assert!(
            decode::<Prepare>("header", header(r#""r""#, r#""ab""#, "null").as_bytes()).is_ok()
        );
        for bad in [
            header(r#""../r""#, r#""ab""#, "null"),
            header(r#""r""#, r#""a b""#, "null"),
            header(r#""r""#, r#""ab""#, r#""zz""#),
            header(r#""r""#, r#""ab""#, "7"),
            header("null", r#""ab""#, "null"),
        ] {
            assert!(
                decode::<Prepare>("header", bad.as_bytes()).is_err(),
                "{bad}"
            );
        }
        for bad in [
            "repo=r",
            "stream=ab",
            "repo=../r&stream=ab",
            "repo=r&stream=not-hex",
            "repo=r&stream=ab&stream=cd",
            "",
        ] {
            assert!(decode_query::<StreamQuery>("stream", bad).is_err(), "{bad}");
        }
        for bad in [
            "repo=r&txid=ab&verdict=maybe&seq=1",
            "repo=r&txid=ab&verdict=commit&seq=-1",
            "repo=r&txid=ab&verdict=commit&seq=x",
            "repo=r&verdict=abort",
        ] {
            assert!(decode_query::<DecideQuery>("decide", bad).is_err(), "{bad}");
        }
        let e = decode::<Entry>("log entry", br#"{"origin":"n","seq":1,"txid":"zz"}"#).unwrap_err();
        assert!(e.to_string().starts_with("log entry: bad id"), "{e}");
    }
}
