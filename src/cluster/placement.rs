//! Where each repository lives: rendezvous hashing over the live nodes, recorded at creation
//! in `/berth/repos/<name>/replicas` (create-if-absent: the first node to record it decides),
//! and fixed from then on, so [`Placement`] keeps what it read (its cache and its lock).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Error, etcd, repo_key, wire};
use crate::escape::Escaped;

/// The replicas of the repositories, as recorded.
#[derive(Debug)]
pub(super) struct Placement {
    etcd: Arc<etcd::Client>,
    /// How many nodes hold each repository, `--replicas` (fewer when placed short).
    replicas: usize,
    /// The replicas of each repository read so far: placement is fixed once recorded, so a
    /// request does not read it from etcd again.
    placed: Mutex<HashMap<String, Vec<String>>>,
}

impl Placement {
    pub(super) fn new(etcd: Arc<etcd::Client>, replicas: usize) -> Placement {
        Placement {
            etcd,
            replicas: replicas.max(1),
            placed: Mutex::default(),
        }
    }

    /// The replicas recorded for `name`, if the repository exists in the cluster (read from
    /// etcd once: placement does not change).
    pub(super) async fn replicas_of(&self, name: &str) -> Result<Option<Vec<String>>, Error> {
        if let Some(r) = self.placed.lock().ok().and_then(|p| p.get(name).cloned()) {
            return Ok(Some(r));
        }
        match self.etcd.get(&repo_key(name, "replicas")).await? {
            None => Ok(None),
            Some(kv) => {
                let r = parse_list(&kv.value)?;
                if let Ok(mut p) = self.placed.lock() {
                    p.insert(name.to_owned(), r.clone());
                }
                Ok(Some(r))
            }
        }
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
                &[etcd::Op::Put(key.clone(), value, None)],
                &[etcd::Op::Get(key)],
            )
            .await?;
        if t.succeeded {
            tracing::info!(target: "berth::cluster", repo = %Escaped::token(name), replicas = %chosen.join(","), "placed repository");
            return Ok(chosen);
        }
        match t.gets.first().and_then(|g| g.first()) {
            Some(kv) => parse_list(&kv.value),
            None => Err(Error::NotRecorded {
                name: name.to_owned(),
                what: "replicas",
            }),
        }
    }
}

/// The `n` nodes of `live` with the highest rendezvous score for `repo`, best first.
fn rendezvous(repo: &str, live: &[String], n: usize) -> Vec<String> {
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

/// A recorded replica list ([`wire::Replicas`]).
fn parse_list(v: &[u8]) -> Result<Vec<String>, Error> {
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
