//! Where each repository lives: rendezvous hashing over the live nodes that are not draining,
//! recorded at creation in `/berth/repos/<name>/replicas` (create-if-absent: the first node to
//! record it decides). The list changes afterwards only through a compare-and-swap on that
//! key's mod revision (`upkeep.rs`: a node fills a repository up to K, a drained or displaced
//! replica is removed), so [`Placement`] caches each list with the revision it was read at:
//! the commit point compares that revision (`gate.rs`), and a push decided on a stale list is
//! retried on the new one or refused, never acknowledged on a list that no longer holds.
//! Nodes marked draining (`/berth/drain/<node>`, `berth cluster drain`) get no new
//! repositories. K itself is the cluster's: the first node records its `--replicas` at
//! `/berth/config/replicas` (create-if-absent), and a node started with another K refuses to
//! join ([`Placement::agree_on_k`]): nodes with different K would add and remove copies
//! against each other.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::{Error, etcd, repo_key, wire};
use crate::escape::Escaped;

/// The etcd prefix of the draining marks: `/berth/drain/<node>`.
pub(crate) const DRAIN_PREFIX: &[u8] = b"/berth/drain/";

/// The etcd key of the cluster's K, as the first node's `--replicas` recorded it.
pub(crate) const REPLICAS_KEY: &[u8] = b"/berth/config/replicas";

/// A repository's replica list as recorded, and the mod revision of its key when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Placed {
    /// The replicas, in recorded order.
    pub(super) list: Vec<String>,
    /// The replicas key's mod revision: what a change of the list compares.
    pub(super) rev: i64,
}

/// The replicas of the repositories, as recorded.
#[derive(Debug)]
pub(super) struct Placement {
    etcd: Arc<etcd::Client>,
    /// How many nodes hold each repository, `--replicas` (fewer when placed short).
    replicas: usize,
    /// The replicas of each repository as last read, with the revision read: refreshed by
    /// the upkeep round every few seconds, by a lost compare at the commit point and by a
    /// change this node made.
    placed: Mutex<HashMap<String, Placed>>,
}

impl Placement {
    pub(super) fn new(etcd: Arc<etcd::Client>, replicas: usize) -> Placement {
        Placement {
            etcd,
            replicas: replicas.max(1),
            placed: Mutex::default(),
        }
    }

    /// Record this node's K as the cluster's if none is recorded yet (create-if-absent), else
    /// check it is the recorded one: [`Error::ReplicasDiffer`] if not.
    pub(super) async fn agree_on_k(&self) -> Result<(), Error> {
        let key = REPLICAS_KEY.to_vec();
        let here = self.replicas.to_string().into_bytes();
        let t = self
            .etcd
            .txn(
                &[etcd::Compare::Absent(key.clone())],
                &[etcd::Op::Put(key.clone(), here, None)],
                &[etcd::Op::Get(key)],
            )
            .await?;
        if t.succeeded {
            return Ok(());
        }
        let recorded = t.gets.first().and_then(|g| g.first()).map(|kv| &kv.value);
        let recorded = recorded
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<usize>().ok())
            .ok_or(Error::NotRecorded {
                name: "/berth/config/replicas".into(),
                what: "number of replicas",
            })?;
        if recorded == self.replicas {
            Ok(())
        } else {
            Err(Error::ReplicasDiffer {
                here: self.replicas,
                recorded,
            })
        }
    }

    /// The replicas recorded for `name`, if the repository exists in the cluster (as last
    /// read; read from etcd when never read).
    pub(super) async fn replicas_of(&self, name: &str) -> Result<Option<Vec<String>>, Error> {
        Ok(self.placed_of(name).await?.map(|p| p.list))
    }

    /// The list and its revision for `name` (as last read; read from etcd when never read).
    pub(super) async fn placed_of(&self, name: &str) -> Result<Option<Placed>, Error> {
        if let Some(p) = self.cached(name) {
            return Ok(Some(p));
        }
        self.fresh(name).await
    }

    /// Whether `node` is one of `name`'s replicas: as last read, and if not, as etcd says now
    /// (a list this node has not seen yet may have added it).
    pub(super) async fn holds(&self, name: &str, node: &str) -> Result<bool, Error> {
        if self
            .cached(name)
            .is_some_and(|p| p.list.iter().any(|n| n == node))
        {
            return Ok(true);
        }
        Ok(self
            .fresh(name)
            .await?
            .is_some_and(|p| p.list.iter().any(|n| n == node)))
    }

    fn cached(&self, name: &str) -> Option<Placed> {
        self.placed.lock().ok().and_then(|p| p.get(name).cloned())
    }

    /// `name`'s list read from etcd now (and cached).
    pub(super) async fn fresh(&self, name: &str) -> Result<Option<Placed>, Error> {
        match self.etcd.get(&repo_key(name, "replicas")).await? {
            None => Ok(None),
            Some(kv) => {
                let p = Placed {
                    list: parse_list(&kv.value)?,
                    rev: kv.mod_revision,
                };
                self.learn(name, p.clone());
                Ok(Some(p))
            }
        }
    }

    /// Keep `placed` as `name`'s list unless a later one is known.
    pub(super) fn learn(&self, name: &str, placed: Placed) {
        if let Ok(mut p) = self.placed.lock() {
            match p.get(name) {
                Some(known) if known.rev > placed.rev => {}
                _ => {
                    p.insert(name.to_owned(), placed);
                }
            }
        }
    }

    /// Every repository's list, read from etcd in one range (and cached); by name.
    pub(super) async fn refresh_all(&self) -> Result<Vec<(String, Placed)>, Error> {
        let prefix = REPOS_PREFIX;
        let kvs = self.etcd.prefix(prefix).await?;
        let mut out = Vec::new();
        for kv in kvs {
            let Some(name) = repo_of_list_key(&kv.key) else {
                continue;
            };
            let Ok(list) = parse_list(&kv.value) else {
                tracing::warn!(target: "berth::cluster", repo = %Escaped::token(name), "unreadable replica list");
                continue;
            };
            let p = Placed {
                list,
                rev: kv.mod_revision,
            };
            self.learn(name, p.clone());
            out.push((name.to_owned(), p));
        }
        Ok(out)
    }

    /// Change `name`'s list from `from` to `to` if it is still `from` (its key's mod revision),
    /// putting `also` in the same txn; the new list, or the one found instead.
    pub(super) async fn change(
        &self,
        name: &str,
        from: &Placed,
        to: &[String],
        also: &[etcd::Op],
    ) -> Result<Result<Placed, Placed>, Error> {
        let key = repo_key(name, "replicas");
        let mut success = vec![etcd::Op::Put(key.clone(), wire::encode(&to), None)];
        success.extend_from_slice(also);
        success.push(etcd::Op::Get(key.clone()));
        let t = self
            .etcd
            .txn(
                &[etcd::Compare::ModRevision(key.clone(), from.rev)],
                &success,
                &[etcd::Op::Get(key)],
            )
            .await?;
        let now = match t.gets.first().and_then(|g| g.first()) {
            Some(kv) => Placed {
                list: parse_list(&kv.value)?,
                rev: kv.mod_revision,
            },
            None => {
                return Err(Error::NotRecorded {
                    name: name.to_owned(),
                    what: "replicas",
                });
            }
        };
        self.learn(name, now.clone());
        Ok(if t.succeeded { Ok(now) } else { Err(now) })
    }

    /// `--replicas`.
    pub(super) fn replicas(&self) -> usize {
        self.replicas
    }

    /// Place a new repository: the rendezvous choice over the `live` nodes, recorded unless
    /// another node recorded one first (then that one).
    pub(super) async fn place(&self, name: &str, live: &[String]) -> Result<Vec<String>, Error> {
        let chosen = rendezvous(name, live, self.replicas);
        let key = repo_key(name, "replicas");
        let value = wire::encode(&chosen);
        let t = self
            .etcd
            .txn(
                &[etcd::Compare::Absent(key.clone())],
                &[
                    etcd::Op::Put(key.clone(), value, None),
                    etcd::Op::Get(key.clone()),
                ],
                &[etcd::Op::Get(key)],
            )
            .await?;
        let Some(kv) = t.gets.first().and_then(|g| g.first()) else {
            return Err(Error::NotRecorded {
                name: name.to_owned(),
                what: "replicas",
            });
        };
        let placed = Placed {
            list: parse_list(&kv.value)?,
            rev: kv.mod_revision,
        };
        if t.succeeded {
            tracing::info!(target: "berth::cluster", repo = %Escaped::token(name), replicas = %placed.list.join(","), "placed repository");
        }
        self.learn(name, placed.clone());
        Ok(placed.list)
    }

    /// The nodes marked draining (`/berth/drain/<node>`).
    pub(super) async fn draining(&self) -> Result<BTreeSet<String>, Error> {
        draining(&self.etcd).await
    }
}

/// The nodes marked draining in `etcd`.
pub(super) async fn draining(etcd: &etcd::Client) -> Result<BTreeSet<String>, Error> {
    Ok(etcd
        .keys(DRAIN_PREFIX)
        .await?
        .into_iter()
        .filter_map(|k| String::from_utf8(k.get(DRAIN_PREFIX.len()..)?.to_vec()).ok())
        .collect())
}

/// The `n` nodes of `live` with the highest rendezvous score for `repo`, best first.
pub(super) fn rendezvous(repo: &str, live: &[String], n: usize) -> Vec<String> {
    use blake2::digest::Digest;
    let mut scored: Vec<([u8; 8], &String)> = live
        .iter()
        .map(|node| {
            let mut h = blake2::Blake2b256::new();
            h.update(node.as_bytes());
            h.update([0]);
            h.update(repo.as_bytes());
            let d = h.finalize();
            let mut s = [0u8; 8];
            s.copy_from_slice(&d[..8]);
            (s, node)
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    scored.into_iter().take(n).map(|(_, n)| n.clone()).collect()
}

/// The repository whose replica list `key` is (`/berth/repos/<name>/replicas`), if it is one
/// and names a repository as nodes send it (the name becomes a path).
pub(super) fn repo_of_list_key(key: &[u8]) -> Option<&str> {
    key.strip_prefix(REPOS_PREFIX)
        .and_then(|k| k.strip_suffix(b"/replicas".as_slice()))
        .and_then(|n| std::str::from_utf8(n).ok())
        .filter(|n| wire::RepoName::try_from(*n).is_ok())
}

/// The prefix of every repository's keys.
pub(super) const REPOS_PREFIX: &[u8] = b"/berth/repos/";

/// A recorded replica list ([`wire::Replicas`]).
pub(super) fn parse_list(v: &[u8]) -> Result<Vec<String>, Error> {
    let list: wire::Replicas = wire::decode("replicas", v)?;
    Ok(list.into_iter().map(String::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_is_stable_and_spreads() {
        let live: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        let one = rendezvous("repo", &live, 3);
        assert_eq!(one, rendezvous("repo", &live, 3));
        assert_eq!(one.len(), 3);
        // Taking a node away that was not chosen changes nothing.
        let left: Vec<String> = live.iter().filter(|n| !one.contains(n)).cloned().collect();
        let rest: Vec<String> = live.iter().filter(|n| **n != left[0]).cloned().collect();
        assert_eq!(rendezvous("repo", &rest, 3), one);
        let firsts: std::collections::HashSet<String> = (0..50)
            .map(|i| rendezvous(&format!("r{i}"), &live, 1)[0].clone())
            .collect();
        assert_eq!(firsts.len(), 4);
        assert_eq!(rendezvous("x", &live[..2], 3).len(), 2);
    }
}
