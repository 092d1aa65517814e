//! A repository's log entry (the value of `repos/<name>/log` and `repos/<name>/entries/<seq>`)
//! and the ref updates as they travel between nodes: JSON, ref names as UTF-8 text, object ids
//! as hex. Decoding checks everything a peer controls (names by git's rules, ids by length).
//! What a run of entries means to a push is `decide.rs`'s to say; [`Cluster::entries`] reads
//! them.

use gix_hash::ObjectId;
use serde_json::{Value, json};

use crate::refs::{Change, Expected, RefUpdate};

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
}

/// The JSON form of `updates`; `None` if a name is not UTF-8 (not replicable).
pub(super) fn updates_json(updates: &[RefUpdate]) -> Option<Value> {
    let mut out = Vec::with_capacity(updates.len());
    for u in updates {
        let name = std::str::from_utf8(&u.name).ok()?;
        let old = |e: &Expected| match e {
            Expected::MustBe(id) => json!(id.to_hex().to_string()),
            Expected::Any => Value::Null,
        };
        out.push(match &u.change {
            Change::Create { new } => json!({"name": name, "op": "create", "new": new.to_hex().to_string()}),
            Change::Update { old: o, new } => {
                json!({"name": name, "op": "update", "old": old(o), "new": new.to_hex().to_string()})
            }
            Change::Delete { old: o } => json!({"name": name, "op": "delete", "old": old(o)}),
        });
    }
    Some(Value::Array(out))
}

fn id(v: &Value) -> Result<ObjectId, String> {
    let s = v.as_str().ok_or("object id missing")?;
    ObjectId::from_hex(s.as_bytes()).map_err(|e| format!("bad object id: {e}"))
}

fn expected(v: &Value) -> Result<Expected, String> {
    if v.is_null() {
        Ok(Expected::Any)
    } else {
        id(v).map(Expected::MustBe)
    }
}

/// Whether `name`, sent by a peer, is a ref name a push could have written: `refs/…` by git's
/// rules (`repo::policy`'s one-pass check; one component after `refs/` allowed).
pub(super) fn valid_ref_name(name: &str) -> bool {
    crate::repo::policy::is_valid_refname(name.into(), true)
}

/// The ref updates of `v` (from [`updates_json`]), checked.
pub(super) fn parse_updates(v: &Value) -> Result<Vec<RefUpdate>, String> {
    let list = v.as_array().ok_or("updates: not a list")?;
    let mut out = Vec::with_capacity(list.len());
    for u in list {
        let name = u["name"].as_str().ok_or("update without a name")?;
        if !valid_ref_name(name) {
            return Err(format!("bad ref name {name:?}"));
        }
        let change = match u["op"].as_str() {
            Some("create") => Change::Create {
                new: id(&u["new"])?,
            },
            Some("update") => Change::Update {
                old: expected(&u["old"])?,
                new: id(&u["new"])?,
            },
            Some("delete") => Change::Delete {
                old: expected(&u["old"])?,
            },
            _ => return Err("unknown update op".into()),
        };
        out.push(RefUpdate {
            name: name.into(),
            change,
        });
    }
    Ok(out)
}

impl Entry {
    /// The entry's head, the log key's value: all but the ref updates.
    pub(super) fn encode_head(&self) -> Vec<u8> {
        json!({"seq": self.seq, "txid": self.txid, "origin": self.origin})
            .to_string()
            .into_bytes()
    }

    /// The entry as stored in etcd (`entries/<seq>`).
    pub(super) fn encode(&self) -> Option<Vec<u8>> {
        Some(
            json!({
                "seq": self.seq,
                "txid": self.txid,
                "origin": self.origin,
                "updates": updates_json(&self.updates)?,
            })
            .to_string()
            .into_bytes(),
        )
    }

    /// An entry read from etcd (a head, from the log key, has no updates).
    pub(super) fn decode(b: &[u8]) -> Result<Entry, String> {
        let v: Value = serde_json::from_slice(b).map_err(|e| format!("log entry: {e}"))?;
        Ok(Entry {
            seq: v["seq"].as_u64().ok_or("log entry without seq")?,
            txid: v["txid"].as_str().unwrap_or_default().to_owned(),
            origin: v["origin"].as_str().unwrap_or_default().to_owned(),
            updates: match &v["updates"] {
                Value::Null => Vec::new(),
                u => parse_updates(u)?,
            },
        })
    }
}

impl super::Cluster {
    /// The entries after `base` up to `head` of repository `name`, in log order (read from
    /// `entries/`; an error if one is missing, e.g. compacted).
    pub(super) async fn entries(
        &self,
        name: &str,
        base: u64,
        head: u64,
    ) -> Result<Vec<Entry>, String> {
        let from = super::repo_key(name, &format!("entries/{:020}", base + 1));
        let to = super::repo_key(name, &format!("entries/{:020}", head + 1));
        let kvs = self
            .etcd
            .range(&from, &to)
            .await
            .map_err(|e| e.to_string())?;
        if kvs.len() as u64 != head.saturating_sub(base) {
            return Err(format!("entries {}..={head} not all in the log", base + 1));
        }
        kvs.iter().map(|kv| Entry::decode(&kv.value)).collect()
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

    #[test]
    fn round_trip() {
        let a = ObjectId::from_hex(b"1111111111111111111111111111111111111111").unwrap();
        let b = ObjectId::from_hex(b"2222222222222222222222222222222222222222").unwrap();
        let e = Entry {
            seq: 7,
            txid: "t".into(),
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
        };
        let d = Entry::decode(&e.encode().unwrap()).unwrap();
        assert_eq!(d.seq, 7);
        assert_eq!(d.updates, e.updates);
        assert!(
            Entry::decode(
                br#"{"seq":1,"updates":[{"name":"refs/../x","op":"create","new":"11"}]}"#
            )
            .is_err()
        );
    }
}
