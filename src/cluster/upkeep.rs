//! Placement upkeep: every repository on K copies, on the nodes rendezvous hashing over the
//! live, non-draining nodes names, one move at a time.
//!
//! Every [`UPKEEP_EVERY`] each node reads every repository's replica list (one range read of
//! `repos/`), the draining marks (`drain/`) and the live nodes, and asks [`decide::upkeep`]
//! what it is to do for each repository; exactly one node acts on each step:
//!
//! - **join** (the best ranked eligible node not listed, when the list has fewer than K
//!   replicas that are not draining; or the best ranked node of the top K not listed, when
//!   the list has K): it copies the repository from a listed replica (the catch-up:
//!   `resync.rs`'s snapshot and pack fetch, then the log's entries after it, `catchup.rs`),
//!   then adds itself to the list through a compare-and-swap on the list key's mod revision,
//!   publishing its applied entry in the same txn (so compaction waits for it), then catches
//!   up on what was committed meanwhile. It counts towards a push's quorum only once it
//!   prepares pushes, which needs the whole log applied.
//! - **remove** (the best ranked of the K replicas kept — not draining, best ranked — once
//!   all K are live and have applied the whole log): the draining or displaced replicas are
//!   taken off the list, again through a compare-and-swap.
//!
//! A listed replica that is down (no lease) keeps its place in the ranking for
//! `--replace-after` (10 minutes by default) from the round that first found it down here
//! ([`decide::placement_nodes`]): only then does a spare node join in its stead.
//!
//! A list changed under a push in flight makes its commit point's compare fail (`gate.rs`):
//! the push is compared again against the new list when the replicas that prepared it are
//! still a quorum there, else refused (nothing landed). One join per node per round, and no
//! join into a list longer than K: a repository is moved one copy at a time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::catchup::Error as CatchUpError;
use super::decide::{self, RemovedCopy, Upkeep};
use super::placement::{Placed, rendezvous};
use super::{Cluster, applied_seq, etcd, repo_dir, repo_key};
use crate::escape::Escaped;

/// How often a node looks at every repository's placement.
pub(super) const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Why an upkeep round stopped.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// etcd failed, or its state could not be read.
    #[error(transparent)]
    Cluster(#[from] super::Error),
    /// etcd failed.
    #[error(transparent)]
    Etcd(#[from] etcd::Error),
    /// Copying the repository here failed.
    #[error("copying the repository here: {0}")]
    Copy(#[from] CatchUpError),
    /// The log has entries and no copy came.
    #[error("no copy of the repository came from its replicas")]
    NoCopy,
}

/// The upkeep's clocks, as this node saw them: since when each listed node has been down
/// (`--replace-after` holds its replacement off until then), and since when each repository
/// this node holds a copy of has not listed it (`--delete-removed-after`).
#[derive(Debug)]
pub(super) struct Clocks {
    replace_after: Duration,
    delete_removed_after: Duration,
    /// Listed nodes without a lease, and the round that first found them so.
    down_since: Mutex<HashMap<String, Instant>>,
    /// Repositories with a copy here whose list does not name this node, and the round that
    /// first found them so.
    unlisted_since: Mutex<HashMap<String, Instant>>,
}

impl Clocks {
    pub(super) fn new(replace_after: Duration, delete_removed_after: Duration) -> Clocks {
        Clocks {
            replace_after,
            delete_removed_after,
            down_since: Mutex::new(HashMap::new()),
            unlisted_since: Mutex::new(HashMap::new()),
        }
    }

    /// How long `name`'s copy here has been unlisted (its clock started now if not yet), or
    /// its clock stopped (`listed`).
    fn unlisted_for(&self, name: &str, listed: bool) -> Duration {
        let Ok(mut since) = self.unlisted_since.lock() else {
            return Duration::ZERO;
        };
        if listed {
            since.remove(name);
            return Duration::ZERO;
        }
        since
            .entry(name.to_owned())
            .or_insert_with(Instant::now)
            .elapsed()
    }

    /// This round found `listed` nodes with `live` among them: start the clock of each down one
    /// not timed yet, stop those of the live ones; how long each has been down.
    fn down_for(&self, listed: &[&String], live: &[String]) -> HashMap<String, Duration> {
        let Ok(mut since) = self.down_since.lock() else {
            return HashMap::new();
        };
        let now = Instant::now();
        since.retain(|n, _| !live.contains(n));
        for n in listed.iter().filter(|n| !live.contains(n)) {
            since.entry((*n).clone()).or_insert(now);
        }
        since.iter().map(|(n, at)| (n.clone(), now - *at)).collect()
    }
}

impl Cluster {
    /// Forever: an upkeep round every [`UPKEEP_EVERY`].
    pub(super) async fn upkeep(self: Arc<Self>) {
        loop {
            tokio::time::sleep(UPKEEP_EVERY).await;
            if let Err(e) = self.upkeep_round().await {
                tracing::warn!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "placement upkeep");
            }
        }
    }

    /// One round over every repository (see the module header); at most one join.
    async fn upkeep_round(self: &Arc<Self>) -> Result<(), Error> {
        let lists = self.placement.refresh_all().await?;
        let draining = self.placement.draining().await?;
        let live = self.membership.live_names().await?;
        let eligible: Vec<String> = live
            .iter()
            .filter(|n| !draining.contains(*n))
            .cloned()
            .collect();
        let k = self.replicas();
        let listed: Vec<&String> = lists.iter().flat_map(|(_, p)| &p.list).collect();
        let down = self.clocks.down_for(&listed, &live);
        let down_for = |n: &str| down.get(n).copied().unwrap_or_default();
        for (name, placed) in &lists {
            self.removed_copy(name, placed.list.contains(&self.node))
                .await;
        }
        for (name, placed) in lists {
            let nodes = decide::placement_nodes(
                &eligible,
                &placed.list,
                &draining,
                down_for,
                self.clocks.replace_after,
            );
            let ranked = rendezvous(&name, &nodes, nodes.len());
            let listed = placed.list.contains(&self.node);
            let moving = placed.list.len() > k || placed.list.iter().any(|n| draining.contains(n));
            // Whether the kept replicas are current matters only to a replica that may remove.
            let current = if listed && moving {
                let head = self.log.head(&name).await?.seq;
                let published = self.published_of(&name).await?;
                let dir = repo_dir(&self.root, &name);
                let mine = applied_seq(&dir);
                Some((head, published, mine))
            } else {
                None
            };
            let step = decide::upkeep(&self.node, k, &placed.list, &ranked, &draining, |n| {
                let Some((head, published, mine)) = &current else {
                    return false;
                };
                let at = if n == self.node {
                    Some(*mine)
                } else {
                    published.iter().find(|(p, _)| p == n).map(|(_, seq)| *seq)
                };
                live.iter().any(|l| l == n) && at.is_some_and(|a| a >= *head)
            });
            match step {
                Upkeep::Nothing => {}
                Upkeep::Join => {
                    let why = if placed
                        .list
                        .iter()
                        .filter(|n| !draining.contains(*n))
                        .count()
                        < k
                    {
                        "short"
                    } else {
                        "rebalance"
                    };
                    if let Err(e) = self.join_replicas(&name, &placed, why).await {
                        tracing::warn!(target: "berth::cluster", repo = %Escaped::token(&name), error = %Escaped::text(&e.to_string()), "cannot join the repository's replicas; trying again later");
                    }
                    // One copy per round: a move's catch-up is not starved by the next.
                    return Ok(());
                }
                Upkeep::Remove(remove) => self.remove_replicas(&name, &placed, &remove).await,
            }
        }
        Ok(())
    }

    /// Delete this node's copy of `name` once its list has not named this node for
    /// `--delete-removed-after` (as [`decide::removed_copy`] says: the list read again first,
    /// never while a request reads it, a pack stream of it is held or a catch-up of it runs).
    async fn removed_copy(&self, name: &str, listed: bool) {
        let dir = repo_dir(&self.root, name);
        if !listed && !crate::repo::is_git_dir(&dir) {
            return;
        }
        let after = self.clocks.delete_removed_after;
        let unlisted_for = self.clocks.unlisted_for(name, listed);
        if listed || decide::removed_copy(unlisted_for, after, None, false) == RemovedCopy::Wait {
            return;
        }
        let listed_now = match self.placement.fresh(name).await {
            Ok(p) => p.is_some_and(|p| p.list.contains(&self.node)),
            Err(_) => return,
        };
        // No catch-up starts while the copy goes (it would find one running).
        let catching = self.catching.start(name);
        let in_use =
            catching.is_none() || self.serving.count(name) > 0 || self.streams.held(name) > 0;
        match decide::removed_copy(unlisted_for, after, Some(listed_now), in_use) {
            RemovedCopy::Keep => {
                self.clocks.unlisted_for(name, true);
            }
            RemovedCopy::Delete => {
                let root = self.root.clone();
                let removed =
                    tokio::task::spawn_blocking(move || super::copy::remove_copy(&root, &dir))
                        .await;
                match removed {
                    Ok(Ok(())) => {
                        self.clocks.unlisted_for(name, true);
                        tracing::info!(target: "berth::cluster", repo = %Escaped::token(name), unlisted_s = unlisted_for.as_secs(), "deleted the copy of a repository whose replicas no longer include this node");
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(target: "berth::cluster", repo = %Escaped::token(name), error = %Escaped::text(&e.to_string()), "cannot delete a removed copy")
                    }
                    Err(_) => {}
                }
            }
            RemovedCopy::Wait | RemovedCopy::ReadList | RemovedCopy::InUse => {}
        }
        drop(catching);
    }

    /// What each replica of `name` published as applied (`applied/<node>`, one range read).
    async fn published_of(&self, name: &str) -> Result<Vec<(String, u64)>, etcd::Error> {
        let prefix = repo_key(name, "applied/");
        Ok(self
            .etcd
            .prefix(&prefix)
            .await?
            .into_iter()
            .filter_map(|kv| {
                let node = String::from_utf8(kv.key.get(prefix.len()..)?.to_vec()).ok()?;
                let seq = std::str::from_utf8(&kv.value).ok()?.parse().ok()?;
                Some((node, seq))
            })
            .collect())
    }

    /// Copy `name` here from its replicas, then add this node to its list `placed` (CAS).
    async fn join_replicas(
        self: &Arc<Self>,
        name: &str,
        placed: &Placed,
        why: &str,
    ) -> Result<(), Error> {
        tracing::info!(target: "berth::cluster", repo = %Escaped::token(name), replicas = %placed.list.join(","), why, "copying a repository to join its replicas");
        let dir = repo_dir(&self.root, name);
        // The resync and the entries after it, from the listed replicas; `None`: another
        // catch-up of it runs here (tried again next round).
        if self.catch_up(name).await?.is_none() {
            return Ok(());
        }
        let head = self.log.head(name).await?.seq;
        if head > 0 && !crate::repo::is_git_dir(&dir) {
            return Err(Error::NoCopy);
        }
        let applied = applied_seq(&dir);
        let mut to = placed.list.clone();
        to.push(self.node.clone());
        let publish = etcd::Op::Put(
            repo_key(name, &format!("applied/{}", self.node)),
            applied.to_string().into_bytes(),
            None,
        );
        match self.placement.change(name, placed, &to, &[publish]).await? {
            Ok(now) => {
                tracing::info!(target: "berth::cluster", repo = %Escaped::token(name), replicas = %now.list.join(","), applied, head, "joined the repository's replicas");
                // What was committed between the copy and the join.
                self.clone().spawn_catch_up(name.to_owned());
            }
            Err(now) => {
                tracing::info!(target: "berth::cluster", repo = %Escaped::token(name), replicas = %now.list.join(","), "the replica list changed while copying; looking again next round");
            }
        }
        Ok(())
    }

    /// Take `remove` off `name`'s list `placed` (CAS).
    async fn remove_replicas(&self, name: &str, placed: &Placed, remove: &[String]) {
        let to: Vec<String> = placed
            .list
            .iter()
            .filter(|n| !remove.contains(n))
            .cloned()
            .collect();
        match self.placement.change(name, placed, &to, &[]).await {
            Ok(Ok(now)) => {
                tracing::info!(target: "berth::cluster", repo = %Escaped::token(name), removed = %remove.join(","), replicas = %now.list.join(","), "removed replicas from the repository's list");
            }
            Ok(Err(now)) => {
                tracing::info!(target: "berth::cluster", repo = %Escaped::token(name), replicas = %now.list.join(","), "the replica list changed; looking again next round");
            }
            Err(e) => {
                tracing::warn!(target: "berth::cluster", repo = %Escaped::token(name), error = %Escaped::text(&e.to_string()), "cannot change the replica list");
            }
        }
    }
}
