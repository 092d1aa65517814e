//! `berth cluster status`: the cluster as etcd holds it, for an operator. It reads the live
//! nodes (`nodes/<node>`, present only while the node's lease is), every repository's
//! replica list, log head and each replica's last applied entry, and judges each repository
//! ([`assess`], without I/O): short of K copies, being moved (more than K listed while a
//! copy is added before another is removed), a replica draining, down, or behind the log.
//! [`drain`] marks a node draining (`/berth/drain/<node>`, `berth cluster drain`): the nodes
//! then move its repositories to others (`upkeep.rs`) and take it off their lists.
//!
//! Three range reads of etcd (nodes, log heads, repositories), whatever the number of
//! repositories. A replica records its applied entry in etcd every few seconds when it
//! changed, so "behind" may lag the truth by that much; a node's own `berth-cluster-seq` is
//! exact.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::{etcd, log, wire};

/// How long each etcd request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What the status could not read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// etcd failed.
    #[error(transparent)]
    Etcd(#[from] etcd::Error),
    /// A node name that no node can have.
    #[error("invalid node name '{0}': letters, digits, '.', '_' and '-' only")]
    NodeName(String),
    /// A value in etcd is not what berth writes there.
    #[error("cannot read {key}: {source}")]
    Decode {
        /// The key.
        key: String,
        /// Why (the cluster's own decoding error).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A node whose lease is live.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    /// Its name.
    pub name: String,
    /// The URL other nodes reach it at.
    pub advertise: String,
}

/// One repository as etcd records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Repository {
    /// Its cluster name (the path without `.git`).
    pub name: String,
    /// The nodes holding it, in placement order.
    pub replicas: Vec<String>,
    /// The last entry of its log (0: no push yet).
    pub head: u64,
    /// Each replica's last applied entry as it last recorded it (absent: none recorded).
    pub applied: BTreeMap<String, u64>,
    /// What is wrong with it.
    pub findings: Vec<Finding>,
}

/// Something an operator should know about a repository.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// Fewer replicas than the cluster's `--replicas`.
    Short {
        /// How many it has.
        have: usize,
        /// How many it should have.
        want: usize,
    },
    /// A replica whose node has no live lease.
    Down {
        /// The node.
        node: String,
    },
    /// More replicas listed than K: a copy was added, the one it replaces not yet removed.
    Moving {
        /// How many it has.
        have: usize,
        /// How many it should have.
        want: usize,
    },
    /// A replica on a node marked draining: to be moved elsewhere.
    Draining {
        /// The node.
        node: String,
    },
    /// A replica that has not applied the whole log.
    Behind {
        /// The node.
        node: String,
        /// How many entries it misses.
        by: u64,
    },
}

/// The cluster's state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Status {
    /// The K it was judged against.
    pub replicas: usize,
    /// The live nodes, by name.
    pub nodes: Vec<Node>,
    /// The nodes marked draining, by name.
    pub draining: Vec<String>,
    /// Every repository, by name.
    pub repositories: Vec<Repository>,
}

impl Status {
    /// Whether no repository has a finding.
    pub fn healthy(&self) -> bool {
        self.repositories.iter().all(|r| r.findings.is_empty())
    }
}

/// What is wrong with a repository placed on `replicas`, at log entry `head`, with `applied`
/// as its replicas recorded, when `live` nodes hold leases, `draining` are marked draining
/// and the cluster wants `want` copies.
pub fn assess(
    replicas: &[String],
    head: u64,
    applied: &BTreeMap<String, u64>,
    live: &[String],
    draining: &[String],
    want: usize,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    if replicas.len() < want {
        findings.push(Finding::Short {
            have: replicas.len(),
            want,
        });
    }
    if replicas.len() > want {
        findings.push(Finding::Moving {
            have: replicas.len(),
            want,
        });
    }
    for node in replicas {
        if draining.contains(node) {
            findings.push(Finding::Draining { node: node.clone() });
        }
        if !live.contains(node) {
            findings.push(Finding::Down { node: node.clone() });
        }
        let at = applied.get(node).copied().unwrap_or(0);
        if at < head {
            findings.push(Finding::Behind {
                node: node.clone(),
                by: head - at,
            });
        }
    }
    findings
}

/// The copies judged against when `--replicas` is not given and the cluster recorded none.
const DEFAULT_REPLICAS: usize = 3;

/// Read the cluster's state from etcd at `endpoints` (over TLS with `tls`: `--etcd-ca`,
/// `--etcd-cert`, `--etcd-key`), judged against `want` copies (`None`: the cluster's K, as
/// its first node recorded it at `/berth/config/replicas`; 3 when none is recorded).
pub async fn read(
    endpoints: &[String],
    tls: Option<&super::tls::TlsFiles>,
    want: Option<usize>,
) -> Result<Status, Error> {
    let etcd = etcd::Client::new(endpoints, TIMEOUT).with_tls(tls)?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let decode_err = |key: &[u8], source: wire::Decode| Error::Decode {
        key: text(key),
        source: Box::new(source),
    };
    let want = match want {
        Some(k) => k,
        None => match etcd.get(super::placement::REPLICAS_KEY).await? {
            None => DEFAULT_REPLICAS,
            Some(kv) => text(&kv.value)
                .trim()
                .parse::<usize>()
                .map_err(|e| Error::Decode {
                    key: text(&kv.key),
                    source: Box::new(e),
                })?,
        },
    }
    .max(1);

    let nodes_prefix = b"/berth/nodes/";
    let mut nodes: Vec<Node> = etcd
        .prefix(nodes_prefix)
        .await?
        .into_iter()
        .map(|kv| Node {
            name: text(&kv.key[nodes_prefix.len().min(kv.key.len())..]),
            advertise: text(&kv.value),
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let live: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let draining: Vec<String> = super::placement::draining(&etcd)
        .await
        .map_err(|e| match e {
            super::Error::Etcd(e) => Error::Etcd(e),
            e => Error::Decode {
                key: "/berth/drain/".into(),
                source: Box::new(e),
            },
        })?
        .into_iter()
        .collect();

    // Log heads: small values, one range.
    let logs_prefix = b"/berth/logs/";
    let mut heads = BTreeMap::new();
    for kv in etcd.prefix(logs_prefix).await? {
        let name = text(&kv.key[logs_prefix.len().min(kv.key.len())..]);
        let entry = log::Entry::decode(&kv.value).map_err(|e| decode_err(&kv.key, e))?;
        heads.insert(name, entry.seq);
    }

    // Replica lists and applied entries, in one range: the entries beside them (ref updates)
    // come along but are only those not yet applied everywhere (compaction deletes the rest).
    let repos_prefix = b"/berth/repos/";
    let mut repos: BTreeMap<String, (Vec<String>, BTreeMap<String, u64>)> = BTreeMap::new();
    for kv in etcd.prefix(repos_prefix).await? {
        let rest = text(&kv.key[repos_prefix.len().min(kv.key.len())..]);
        if let Some(name) = rest.strip_suffix("/replicas") {
            let list: wire::Replicas =
                wire::decode("replicas", &kv.value).map_err(|e| decode_err(&kv.key, e))?;
            repos.entry(name.to_owned()).or_default().0 =
                list.into_iter().map(String::from).collect();
        } else if let Some((name, node)) = rest.split_once("/applied/") {
            let seq = text(&kv.value).trim().parse().unwrap_or(0);
            repos
                .entry(name.to_owned())
                .or_default()
                .1
                .insert(node.to_owned(), seq);
        }
    }
    let repositories = repos
        .into_iter()
        .filter(|(_, (replicas, _))| !replicas.is_empty())
        .map(|(name, (replicas, applied))| {
            let head = heads.get(&name).copied().unwrap_or(0);
            let findings = assess(&replicas, head, &applied, &live, &draining, want);
            Repository {
                name,
                replicas,
                head,
                applied,
                findings,
            }
        })
        .collect();
    Ok(Status {
        replicas: want,
        nodes,
        draining,
        repositories,
    })
}

/// Mark `node` draining in the cluster's etcd at `endpoints` (`berth cluster drain`): new
/// repositories are no longer placed on it, and the nodes move each of its repositories to
/// another live node before taking it off the repository's list. Over TLS with `tls` as
/// [`read`].
pub async fn drain(
    endpoints: &[String],
    tls: Option<&super::tls::TlsFiles>,
    node: &str,
) -> Result<(), Error> {
    if wire::NodeName::try_from(node).is_err() {
        return Err(Error::NodeName(node.to_owned()));
    }
    let etcd = etcd::Client::new(endpoints, TIMEOUT).with_tls(tls)?;
    let key = [super::placement::DRAIN_PREFIX, node.as_bytes()].concat();
    etcd.put(&key, b"draining", None).await?;
    Ok(())
}

/// The repositories whose lists still name `node`, by name.
pub fn listing<'s>(status: &'s Status, node: &str) -> Vec<&'s str> {
    status
        .repositories
        .iter()
        .filter(|r| r.replicas.iter().any(|n| n == node))
        .map(|r| r.name.as_str())
        .collect()
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Short { have, want } => write!(f, "short: {have} of {want} copies"),
            Finding::Moving { have, want } => {
                write!(f, "moving: {have} copies listed, {want} wanted")
            }
            Finding::Draining { node } => write!(f, "{node} draining"),
            Finding::Down { node } => write!(f, "{node} down"),
            Finding::Behind { node, by } => write!(f, "{node} behind by {by}"),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "nodes: {} live", self.nodes.len())?;
        for n in &self.nodes {
            let draining = if self.draining.contains(&n.name) {
                "  (draining)"
            } else {
                ""
            };
            writeln!(f, "  {}  {}{draining}", n.name, n.advertise)?;
        }
        for d in self
            .draining
            .iter()
            .filter(|d| !self.nodes.iter().any(|n| n.name == **d))
        {
            writeln!(f, "  {d}  (draining, down)")?;
        }
        let troubled = self
            .repositories
            .iter()
            .filter(|r| !r.findings.is_empty())
            .count();
        writeln!(
            f,
            "repositories: {} ({} with findings; {} copies wanted)",
            self.repositories.len(),
            troubled,
            self.replicas
        )?;
        for r in &self.repositories {
            let applied: Vec<String> = r
                .replicas
                .iter()
                .map(|n| match r.applied.get(n) {
                    Some(seq) => format!("{n}={seq}"),
                    None => format!("{n}=-"),
                })
                .collect();
            let findings: Vec<String> = r.findings.iter().map(ToString::to_string).collect();
            writeln!(
                f,
                "  {}  log {}  applied {}{}",
                r.name,
                r.head,
                applied.join(" "),
                if findings.is_empty() {
                    String::new()
                } else {
                    format!("  [{}]", findings.join("; "))
                }
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_repository_on_k_live_current_replicas_is_fine() {
        let applied = BTreeMap::from([("a".into(), 5), ("b".into(), 5), ("c".into(), 5)]);
        let found = assess(
            &names(&["a", "b", "c"]),
            5,
            &applied,
            &names(&["a", "b", "c"]),
            &[],
            3,
        );
        assert_eq!(found, vec![]);
    }

    #[test]
    fn short_down_and_behind_are_each_found() {
        let applied = BTreeMap::from([("a".into(), 7)]);
        let found = assess(
            &names(&["a", "b"]),
            9,
            &applied,
            &names(&["a", "c"]),
            &[],
            3,
        );
        assert_eq!(
            found,
            vec![
                Finding::Short { have: 2, want: 3 },
                Finding::Behind {
                    node: "a".into(),
                    by: 2
                },
                Finding::Down { node: "b".into() },
                Finding::Behind {
                    node: "b".into(),
                    by: 9
                },
            ]
        );
    }

    #[test]
    fn a_repository_without_pushes_is_behind_nowhere() {
        let found = assess(&names(&["a"]), 0, &BTreeMap::new(), &names(&["a"]), &[], 1);
        assert_eq!(found, vec![]);
    }

    #[test]
    fn a_move_under_way_and_a_draining_replica_are_found() {
        let applied = BTreeMap::from([
            ("a".into(), 2),
            ("b".into(), 2),
            ("c".into(), 2),
            ("d".into(), 2),
        ]);
        let found = assess(
            &names(&["a", "b", "c", "d"]),
            2,
            &applied,
            &names(&["a", "b", "c", "d"]),
            &names(&["b"]),
            3,
        );
        assert_eq!(
            found,
            vec![
                Finding::Moving { have: 4, want: 3 },
                Finding::Draining { node: "b".into() },
            ]
        );
        assert_eq!(found[0].to_string(), "moving: 4 copies listed, 3 wanted");
        assert_eq!(found[1].to_string(), "b draining");
    }
}
