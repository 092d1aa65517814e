//! The repositories' logs in etcd, as [`Log`]: a log's head (`logs/<name>`: the last entry's
//! sequence number, txid and origin, and the key's mod revision, the commit point's compare),
//! the runs of entries after a base (`repos/<name>/entries/<seq>`), the one compare-and-put
//! that appends an entry (what a run means to a push is `decide.rs`'s to say). An [`Entry`] is
//! stored as `wire::Entry::stored` writes it and read back by `wire::Entry::from_stored`,
//! which checks everything a peer controls (names by git's rules, ids by length).

use std::sync::Arc;

use crate::refs::{Change, RefUpdate};

use super::{etcd, wire};

/// One committed batch of ref updates.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    /// 1 for the repository's first entry, then one more each.
    pub(super) seq: u64,
    /// The push's transaction id (random), as its replicas know it.
    pub(super) txid: String,
    /// The node that accepted the push.
    pub(super) origin: String,
    /// The ref updates, in order.
    pub(super) updates: Vec<RefUpdate>,
    /// The push's shallow roots ([`wire::Entry::shallow`]); empty for a push from a full clone.
    pub(super) shallow: Vec<gix_hash::ObjectId>,
}

/// Why the entries of a repository could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// etcd failed.
    #[error(transparent)]
    Etcd(#[from] super::etcd::Error),
    /// Entries of the range are gone (compacted).
    #[error("entries {from}..={to} not all in the log")]
    Missing { from: u64, to: u64 },
    /// An entry could not be read.
    #[error(transparent)]
    Decode(#[from] wire::Decode),
}

/// An entry as the commit point appends it: the push's updates borrowed, and packed once
/// ([`wire::Packed`]) for both its prepare's header and this entry.
#[derive(Debug, Clone, Copy)]
pub(super) struct Append<'a> {
    pub(super) seq: u64,
    pub(super) txid: &'a str,
    pub(super) origin: &'a str,
    pub(super) updates: &'a [RefUpdate],
    /// `updates`, packed.
    pub(super) packed: &'a wire::Packed,
    pub(super) shallow: &'a [gix_hash::ObjectId],
}

impl<'a> Append<'a> {
    /// The wire form, with the updates or (a head) without.
    fn wire(
        &self,
        updates: Option<&'a wire::Packed>,
    ) -> Result<wire::Entry<&'a wire::Packed>, wire::Invalid> {
        // A head carries neither updates nor shallow roots.
        let shallow = match updates {
            Some(_) => self.shallow.iter().copied().map(wire::Oid).collect(),
            None => Vec::new(),
        };
        Ok(wire::Entry {
            origin: wire::NodeName::try_from(self.origin)?,
            seq: self.seq,
            txid: wire::Id::try_from(self.txid)?,
            updates,
            shallow,
        })
    }

    /// The entry's head, the log key's value: all but the ref updates.
    pub(super) fn encode_head(&self) -> Result<Vec<u8>, wire::NotReplicable> {
        Ok(wire::encode(&self.wire(None)?))
    }

    /// The entry as stored in etcd (`entries/<seq>`, [`wire::Entry::stored`]).
    pub(super) fn encode(&self) -> Result<Vec<u8>, wire::NotReplicable> {
        Ok(self.wire(Some(self.packed))?.stored())
    }
}

impl Entry {
    /// An entry read from etcd (a head, from the log key, has no updates).
    pub(super) fn decode(b: &[u8]) -> Result<Entry, wire::Decode> {
        let e = wire::Entry::from_stored(b)?;
        Ok(Entry {
            seq: e.seq,
            txid: e.txid.into(),
            origin: e.origin.into(),
            updates: e.updates.unwrap_or_default().into(),
            shallow: e.shallow.into_iter().map(|id| id.0).collect(),
        })
    }
}

/// A log's head: its last entry's sequence number and the log key's mod revision (0, 0: no
/// entry yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) seq: u64,
    pub(super) rev: i64,
}

/// What [`Log::compare_and_put`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Put {
    /// The entry is in the log (put now, or found there: an earlier answer was lost).
    Committed,
    /// Another entry is the log's head: the head to try again from.
    Lost(Head),
    /// The repository's replica list changed since the push read it: the list now.
    Moved(super::placement::Placed),
}

/// The repositories' logs.
#[derive(Debug)]
pub(super) struct Log {
    etcd: Arc<etcd::Client>,
}

impl Log {
    pub(super) fn new(etcd: Arc<etcd::Client>) -> Log {
        Log { etcd }
    }

    /// The head of repository `name`'s log.
    pub(super) async fn head(&self, name: &str) -> Result<Head, super::Error> {
        Ok(self.head_at(name).await?.0)
    }

    /// The head of repository `name`'s log, and the store's revision it was read at.
    pub(super) async fn head_at(&self, name: &str) -> Result<(Head, i64), super::Error> {
        let (kv, revision) = self.etcd.get_at(&super::log_key(name)).await?;
        let head = match kv {
            None => Head { seq: 0, rev: 0 },
            Some(kv) => Head {
                seq: Entry::decode(&kv.value)?.seq,
                rev: kv.mod_revision,
            },
        };
        Ok((head, revision))
    }

    /// The sequence number of the entry of the push `txid` decided against entry `base` of
    /// repository `name`, `None` if no entry after `base` is it (its own head first: the usual
    /// case; else the entries after `base`, for pushes of other refs may have followed it).
    pub(super) async fn entry_of(
        &self,
        name: &str,
        base: u64,
        txid: &str,
    ) -> Result<Option<u64>, Error> {
        let Some(kv) = self.etcd.get(&super::log_key(name)).await? else {
            return Ok(None);
        };
        let head = Entry::decode(&kv.value)?;
        if head.txid == txid {
            return Ok(Some(head.seq));
        }
        if head.seq <= base {
            return Ok(None);
        }
        let entries = self.entries(name, base, head.seq).await?;
        Ok(entries.iter().find(|e| e.txid == txid).map(|e| e.seq))
    }

    /// The entries after `base` up to `head` of repository `name`, in log order (read from
    /// `entries/`; an error if one is missing, e.g. compacted).
    pub(super) async fn entries(
        &self,
        name: &str,
        base: u64,
        head: u64,
    ) -> Result<Vec<Entry>, Error> {
        let from = super::repo_key(name, &format!("entries/{:020}", base + 1));
        let to = super::repo_key(name, &format!("entries/{:020}", head + 1));
        let kvs = self.etcd.range(&from, &to).await?;
        if kvs.len() as u64 != head.saturating_sub(base) {
            return Err(Error::Missing {
                from: base + 1,
                to: head,
            });
        }
        Ok(kvs
            .iter()
            .map(|kv| Entry::decode(&kv.value))
            .collect::<Result<_, _>>()?)
    }

    /// One etcd txn, the commit point: if repository `name`'s log key's mod revision is
    /// still `rev` and its replicas key's still `placed` (the list the push was prepared on),
    /// put `head` (the entry's head) as the log key and `entry` (the entry `seq` of `txid`,
    /// encoded) as `entries/<seq>`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn compare_and_put(
        &self,
        name: &str,
        rev: i64,
        placed: i64,
        seq: u64,
        txid: &str,
        head: &[u8],
        entry: &[u8],
    ) -> Result<Put, etcd::Error> {
        let log_key = super::log_key(name);
        let replicas_key = super::repo_key(name, "replicas");
        let entry_key = super::repo_key(name, &format!("entries/{seq:020}"));
        let t = self
            .etcd
            .txn(
                &[
                    etcd::Compare::ModRevision(log_key.clone(), rev),
                    etcd::Compare::ModRevision(replicas_key.clone(), placed),
                ],
                &[
                    etcd::Op::Put(log_key.clone(), head.to_vec(), None),
                    etcd::Op::Put(entry_key, entry.to_vec(), None),
                ],
                &[etcd::Op::Get(log_key), etcd::Op::Get(replicas_key)],
            )
            .await?;
        if t.succeeded {
            return Ok(Put::Committed);
        }
        let head = t.gets.first().and_then(|g| g.first());
        let entry = head.and_then(|kv| Entry::decode(&kv.value).ok());
        // A retry after a lost answer finds its own entry: committed once.
        if entry.as_ref().is_some_and(|e| e.txid == txid) {
            return Ok(Put::Committed);
        }
        if let Some(kv) = t.gets.get(1).and_then(|g| g.first())
            && kv.mod_revision != placed
        {
            // An unreadable list is no list to go on with: the push is refused.
            let list = super::placement::parse_list(&kv.value).unwrap_or_default();
            return Ok(Put::Moved(super::placement::Placed {
                list,
                rev: kv.mod_revision,
            }));
        }
        Ok(Put::Lost(Head {
            seq: entry.map_or(0, |e| e.seq),
            rev: head.map_or(0, |kv| kv.mod_revision),
        }))
    }
}

/// The new value of `u`, `None` for a deletion.
pub(super) fn new_of(u: &RefUpdate) -> Option<gix_hash::ObjectId> {
    match u.change {
        Change::Create { new } | Change::Update { new, .. } => Some(new),
        Change::Delete { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refs::Expected;
    use gix_hash::ObjectId;

    /// `e` as the commit point appends it.
    fn append<'a>(e: &'a Entry, packed: &'a wire::Packed) -> Append<'a> {
        Append {
            seq: e.seq,
            txid: &e.txid,
            origin: &e.origin,
            updates: &e.updates,
            packed,
            shallow: &e.shallow,
        }
    }

    #[test]
    fn round_trip() {
        let a = ObjectId::from_hex(b"1111111111111111111111111111111111111111").unwrap();
        let b = ObjectId::from_hex(b"2222222222222222222222222222222222222222").unwrap();
        let e = Entry {
            seq: 7,
            txid: "ab".into(),
            origin: "n1".into(),
            updates: vec![
                RefUpdate {
                    name: "refs/heads/a".into(),
                    change: Change::Create { new: a },
                },
                RefUpdate {
                    name: "refs/heads/b".into(),
                    change: Change::Update {
                        old: Expected::MustBe(a),
                        new: b,
                    },
                },
                RefUpdate {
                    name: "refs/heads/c".into(),
                    change: Change::Delete { old: Expected::Any },
                },
            ],
            shallow: vec![b],
        };
        let packed = wire::Packed::of(&e.updates).unwrap();
        let d = Entry::decode(&append(&e, &packed).encode().unwrap()).unwrap();
        assert_eq!((d.txid.as_str(), d.origin.as_str()), ("ab", "n1"));
        assert_eq!(d.seq, 7);
        assert_eq!(d.updates, e.updates);
        assert_eq!(d.shallow, vec![b]);
        // The head (the log key) carries neither the updates nor the shallow roots.
        let head = Entry::decode(&append(&e, &packed).encode_head().unwrap()).unwrap();
        assert!(head.updates.is_empty() && head.shallow.is_empty());
        // An entry without shallow roots is written as before.
        let full = Entry {
            shallow: Vec::new(),
            ..e.clone()
        };
        assert!(
            !String::from_utf8(append(&full, &packed).encode().unwrap())
                .unwrap()
                .contains("shallow")
        );
        assert!(
            Entry::decode(
                br#"{"origin":"n","seq":1,"txid":"ab","updates":[{"name":"refs/../x","op":"create","new":"11"}]}"#
            )
            .is_err()
        );
    }

    /// What the commit point writes to etcd for the bench's 10,000-ref push (`refs/heads/b/<i>`
    /// at one commit): the updates packed, under 6 bytes a ref as stored (the packed bytes as
    /// they are; ~6.8 as base64 inside JSON before), where the JSON object per ref took ~92.
    #[test]
    fn the_entry_of_ten_thousand_new_refs_takes_a_few_bytes_a_ref() {
        let new = gix_hash::ObjectId::from_hex(&[b'e'; 40]).unwrap();
        let e = Entry {
            seq: 1,
            txid: "ab".into(),
            origin: "n1".into(),
            updates: (0..10_000)
                .map(|i| RefUpdate {
                    name: format!("refs/heads/b/{i}").into(),
                    change: Change::Create { new },
                })
                .collect(),
            shallow: Vec::new(),
        };
        let packed = wire::Packed::of(&e.updates).unwrap();
        let stored = append(&e, &packed).encode().unwrap();
        assert!(stored.len() < 6 * e.updates.len(), "{} bytes", stored.len());
        assert_eq!(Entry::decode(&stored).unwrap().updates, e.updates);
    }
}
