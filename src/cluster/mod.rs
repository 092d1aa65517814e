//! `berth serve --cluster`: every push replicated to several nodes and committed through etcd
//! (issue #15). etcd is the only consensus: berth nodes never vote among themselves.
//!
//! ```text
//! client ─push→ any node ─(holds no replica)→ forward.rs → a replica
//!                 │ accepting replica: receive::run decides as alone; its PackTee (tee.rs)
//!                 ├─ the client's pack, as it is read ─POST /_berth/cluster/stream→ other
//!                 │   replicas (incoming.rs): ingest and check it into a quarantine as it arrives
//!                 │ at each ref transaction (prepared, locks held) its CommitGate (gate.rs):
//!                 ├─ ref updates + the stream's id ─POST /_berth/cluster/prepare→ other
//!                 │   replicas (replica.rs): migrate that quarantine, check, prepare the same
//!                 │   transaction, hold it
//!                 ├─ majority prepared? → etcd txn on the repository's log key: compare its mod
//!                 │   revision with the one read before, put the entry (the commit point)
//!                 └─ commit here, ─POST /_berth/cluster/decide→ commit there; `ok` to the client
//!                     once a majority (or all, `--ack all`) applied it
//! ```
//!
//! ssh commands are routed the same way (`ssh/mod.rs`): a push on a current replica runs
//! with the same [`Gate`]; otherwise the ssh channel goes to a replica through the internal
//! tunnel (`tunnel.rs`, `POST /_berth/cluster/ssh` upgraded to a framed byte stream).
//!
//! Reads are served by a current replica only ([`Cluster::route`]): a replica behind the
//! repository's log (its `berth-cluster-seq` below the log head) forwards its clients'
//! requests to the others, and refuses a forwarded read (503 with `x-berth-behind`), so that
//! the forwarding node (`forward.rs`, `ssh/tunnel.rs`) tries the next live replica.
//!
//! This module owns joining (the cluster secret, created once, create-if-absent) and
//! [`Cluster`], which holds the node's parts, each with its state and its lock: its membership
//! (`membership.rs`: an etcd lease on `/berth/nodes/<name>`, the live nodes), the placement of
//! repositories (`placement.rs`: rendezvous hashing over the live nodes, recorded at creation
//! in `/berth/repos/<name>/replicas`), the recorded formats and copies (`copy.rs`), the logs
//! (`log.rs`), the upkeep that keeps every repository on K copies where rendezvous says —
//! fill-up, drain, rebalance (`upkeep.rs`), the applied sequences (`applied.rs`), the prepared
//! transactions waiting for a decision (`replica.rs`), the incoming pack streams
//! (`incoming.rs`), the catch-ups running (`catchup.rs`) and its series in `/metrics`
//! (`metrics.rs`). With `--cluster-ca`, every request to another node is mutual TLS with the
//! cluster CA (`tls.rs`, `http.rs`), served on the node listener only; with `--etcd-ca`, etcd
//! is reached over TLS with a client certificate.
//! etcd keys (all under `/berth/`): `nodes/<node>` (advertise URL, leased), `secret`,
//! `repos/<name>/replicas` (JSON list; changed only by a compare of its mod revision),
//! `drain/<node>` (a node being drained), `logs/<name>` (the last entry's head, JSON),
//! `repos/<name>/entries/<seq, 20 digits>` (the entries not yet applied by every replica, for a
//! replica that missed some), `repos/<name>/format` (object and ref format, for new copies), `repos/<name>/applied/<node>` (what each replica applied).
//! Each replica records the last sequence number it applied in `<git dir>/berth-cluster-seq`.
//! A replica that missed entries replays them (`catchup.rs`); one that lost its copy, or whose
//! next entry was compacted away, copies another replica's refs first (`resync.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::escape::Escaped;

mod applied;
mod catchup;
mod copy;
mod decide;
mod endpoint;
pub mod etcd;
mod forward;
mod gate;
mod heads;
pub mod http;
mod incoming;
mod locks;
mod log;
mod membership;
mod metrics;
mod objects;
mod placement;
mod replica;
mod resync;
mod serving;
pub mod status;
mod tee;
pub mod tls;
pub(crate) mod tunnel;
mod turns;
mod upkeep;
mod wire;

pub(crate) use endpoint::{INTERNAL_PREFIX, Internal, internal};
pub(crate) use forward::{
    BEHIND, BEHIND_PAUSE, BEHIND_WAIT, FORWARDED, Forwarding, Vouch, forward,
};
pub(crate) use gate::Gate;
pub(crate) use metrics::ClusterMetrics;
pub(crate) use tee::PushStream;
pub(crate) use tunnel::Tunneled;

/// How many replicas have to apply a push before the client is told `ok`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// More than half of `--replicas` (K), whatever number of replicas a repository has.
    Majority,
    /// All K.
    All,
}

impl std::fmt::Display for Ack {
    /// The `--ack` value.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ack::Majority => "majority",
            Ack::All => "all",
        })
    }
}

/// `--cluster`, `--node`, `--advertise`, `--replicas`, `--ack`, `--cluster-durability`.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// etcd client URLs (`http://host:port`).
    pub etcd: Vec<String>,
    /// This node's name, unique in the cluster.
    pub node: String,
    /// The URL other nodes reach this one at; default `http://<listen address>`.
    pub advertise: Option<String>,
    /// How many nodes hold each repository (all live nodes when fewer).
    pub replicas: usize,
    /// `--replace-after`: how long a listed replica is down (no lease, in this node's view)
    /// before a spare node replaces it (`upkeep.rs`).
    pub replace_after: std::time::Duration,
    /// `--delete-removed-after`: how long after this node was taken off a repository's list
    /// its copy is deleted (`upkeep.rs`).
    pub delete_removed_after: std::time::Duration,
    /// When a push is acknowledged.
    pub ack: Ack,
    /// What a replica makes durable before it reports a push applied
    /// (`--cluster-durability`): [`crate::fsync::Floor::Synced`] by default.
    pub durability: crate::fsync::Floor,
    /// `--cluster-ca`, `--cluster-cert`, `--cluster-key`: mutual TLS between the nodes, served
    /// on [`ClusterConfig::cluster_listen`]; `None` for plain HTTP on the main listener.
    pub node_tls: Option<tls::TlsFiles>,
    /// `--cluster-listen`: the node listener, the only one that serves other nodes (with
    /// [`ClusterConfig::node_tls`]).
    pub cluster_listen: Option<String>,
    /// `--etcd-ca`, `--etcd-cert`, `--etcd-key`: TLS with a client certificate to etcd.
    pub etcd_tls: Option<tls::TlsFiles>,
}

/// Why the node could not join the cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// etcd failed.
    #[error(transparent)]
    Etcd(#[from] etcd::Error),
    /// A TLS file between nodes cannot be used.
    #[error(transparent)]
    Tls(#[from] tls::Error),
    /// With TLS between nodes, an advertise URL that is not https.
    #[error(
        "--advertise {0} is not https://: with --cluster-ca the other nodes reach this one over TLS, at its --cluster-listen address"
    )]
    AdvertiseNotTls(String),
    /// A node name that cannot be a key segment.
    #[error("invalid node name '{0}': letters, digits, '.', '_' and '-' only")]
    NodeName(String),
    /// The cluster secret is missing though etcd said it is there.
    #[error("unreadable cluster state: no /berth/secret")]
    NoSecret,
    /// The cluster secret is not text.
    #[error("unreadable cluster state: /berth/secret is not text")]
    SecretNotText,
    /// A value in etcd (a replica list, a log head, a format) cannot be read.
    #[error("unreadable cluster state: {0}")]
    Unreadable(#[from] wire::Decode),
    /// A create-if-absent found neither its own value nor another.
    #[error("unreadable cluster state: {name}: no {what} recorded")]
    NotRecorded { name: String, what: &'static str },
    /// Another node forwarded a request for a repository this node holds no replica of.
    #[error(
        "unreadable cluster state: forwarded a request for {name}, which has no replica on {node}"
    )]
    NotAReplica { name: String, node: String },
    /// No replica of the repository is live.
    #[error("unreadable cluster state: no replica of {name} is live")]
    NoLiveReplica { name: String },
    /// This node's `--replicas` is not the cluster's (recorded by its first node).
    #[error(
        "--replicas {here} differs from the cluster's {recorded} (recorded at /berth/config/replicas by its first node): every node must run with the same --replicas"
    )]
    ReplicasDiffer { here: usize, recorded: usize },
    /// Too few nodes are live to place a new repository on the copies its pushes need.
    #[error(
        "only {live} nodes of the cluster are live; a new repository needs {need} (--replicas {want}, --ack {ack}): retry once more nodes are up"
    )]
    TooFewNodes {
        live: usize,
        need: usize,
        want: usize,
        ack: Ack,
    },
}

/// Timeout of one etcd call (per endpoint).
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a starting node waits for etcd to answer before it gives up (and exits).
const JOIN_WAIT: Duration = Duration::from_secs(120);

/// A joined node: its identity and configuration, and the parts of its state, each owning its
/// state and its lock (membership, placement, the applied sequences, the prepared
/// transactions waiting for a decision, the incoming pack streams, the catch-ups running).
#[derive(Debug)]
pub(crate) struct Cluster {
    etcd: Arc<etcd::Client>,
    pub(crate) node: String,
    ack: Ack,
    /// Proves a request to the internal endpoint comes from a node of this cluster.
    secret: String,
    /// How this node reaches the others (plain, or mutual TLS with its certificate).
    peers: http::Peers,
    root: PathBuf,
    /// This node's lease and the live nodes (`membership.rs`).
    membership: membership::Membership,
    /// The repositories' replicas (`placement.rs`).
    placement: placement::Placement,
    /// The repositories' recorded formats and the creation of copies here (`copy.rs`).
    copies: copy::Copies,
    /// The repositories' logs (`log.rs`).
    log: log::Log,
    /// Their heads as the watch of the logs last saw them (`heads.rs`).
    heads: heads::Heads,
    /// What this node applied of each log, and published (`applied.rs`).
    applied: applied::Applied,
    /// Prepared transactions of pushes accepted elsewhere, waiting for their decision.
    pending: replica::Pending,
    /// The turns pushes took to lock refs here (`turns.rs`).
    turns: turns::Turns,
    /// Packs of pushes accepted elsewhere, streamed here, waiting for their prepare.
    streams: incoming::Streams,
    /// The repositories being caught up.
    catching: catchup::Catching,
    /// The environment repositories are opened with (the server's).
    env: crate::receive::Environment,
    /// The environment git runs in for a replica's housekeeping (the server's hooks').
    hooks: crate::receive::HookEnvironment,
    /// The largest pack a catch-up accepts from a peer (`--max-request-bytes`).
    max_pack: u64,
    /// How long an internal request's body may stay silent (the server's `--idle-timeout`).
    idle_timeout: std::time::Duration,
    /// The cluster's series in the server's `/metrics` (`metrics.rs`).
    metrics: Arc<ClusterMetrics>,
    /// The placement upkeep's hold-offs (`upkeep.rs`).
    clocks: upkeep::Clocks,
    /// The requests reading this node's copies (`serving.rs`).
    serving: serving::Serving,
}

pub(crate) use membership::Health;
pub use serving::Reading;

/// Random bytes as hex (the cluster secret, transaction ids).
fn random_hex(n: usize) -> String {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_err()
    {
        // Not secret then, but unique: time and process.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let seed = format!("{t}-{}", std::process::id());
        use blake2::digest::Digest;
        let h = blake2::Blake2b256::digest(seed.as_bytes());
        for (i, b) in buf.iter_mut().enumerate() {
            *b = h[i % h.len()];
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The etcd key of `what` of repository `name`.
fn repo_key(name: &str, what: &str) -> Vec<u8> {
    format!("/berth/repos/{name}/{what}").into_bytes()
}

/// The etcd key of repository `name`'s log head (its last entry's sequence number, txid and
/// origin; the entry itself is `entries/<seq>`). Apart from the other keys of the repository,
/// so that a watch of every log sees the heads only, not the entries' ref updates.
fn log_key(name: &str) -> Vec<u8> {
    format!("/berth/logs/{name}").into_bytes()
}

/// How the applied sequence files are made durable: as refs are with `--cluster-durability`
/// (`env.durability_floor`) and git's default `core.fsync`, nothing with `GIT_TEST_FSYNC=false`.
fn applied_durability(env: &crate::receive::Environment) -> crate::fsync::Durability {
    let enabled = env
        .test_fsync
        .as_deref()
        .and_then(crate::repo::config::parse_bool)
        != Some(false);
    crate::fsync::Durability {
        enabled,
        ..crate::fsync::Durability::default()
    }
    .at_least(env.durability_floor)
}

/// The git directory of `name` under `root` (`<root>/<name>.git`).
fn repo_dir(root: &Path, name: &str) -> PathBuf {
    root.join(format!("{name}.git"))
}

use applied::applied_seq;
use decide::needed;

impl Cluster {
    /// Join: take the secret (creating it if this is the first node), register under a
    /// lease kept alive in the background; reach the other nodes over `node_tls` (the node
    /// listener's, read again on SIGHUP) when given. The node counts into `metrics`
    /// (registered in the server's registry by the caller).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn join(
        config: &ClusterConfig,
        node_tls: Option<Arc<tls::NodeTls>>,
        root: &Path,
        local: std::net::SocketAddr,
        env: &crate::receive::Environment,
        hooks: &crate::receive::HookEnvironment,
        max_pack: u64,
        idle_timeout: std::time::Duration,
        metrics: Arc<ClusterMetrics>,
    ) -> Result<Arc<Cluster>, Error> {
        if wire::NodeName::try_from(config.node.as_str()).is_err() {
            return Err(Error::NodeName(config.node.clone()));
        }
        let etcd = etcd::Client::new(&config.etcd, ETCD_TIMEOUT)
            .with_tls(config.etcd_tls.as_ref())?
            .observed(metrics.clone());
        let etcd = Arc::new(etcd);
        // Every request to another node over TLS with the cluster CA, or none over TLS.
        let scheme = match &node_tls {
            Some(t) => {
                let names = t.names();
                if names != [config.node.as_str()] {
                    tracing::warn!(target: "berth::cluster", node = %config.node, names = %Escaped::text(&names.join(",")), "--cluster-cert does not name this node (URI berth-node:<name>): the other nodes will refuse it");
                }
                "https"
            }
            None => "http",
        };
        let key = b"/berth/secret".to_vec();
        let candidate = random_hex(32);
        // Nodes and etcd started together (the README's quick start, a host's boot): wait for
        // etcd to listen, saying so, rather than exit at once.
        let waiting_since = std::time::Instant::now();
        let mut said = None::<std::time::Instant>;
        let t = loop {
            let t = etcd
                .txn(
                    &[etcd::Compare::Absent(key.clone())],
                    &[etcd::Op::Put(
                        key.clone(),
                        candidate.clone().into_bytes(),
                        None,
                    )],
                    &[etcd::Op::Get(key.clone())],
                )
                .await;
            match t {
                Err(why) if why.is_unreachable() && waiting_since.elapsed() < JOIN_WAIT => {
                    if said.is_none_or(|s| s.elapsed() >= Duration::from_secs(10)) {
                        tracing::warn!(target: "berth::cluster", etcd = %Escaped::text(&config.etcd.join(",")), error = %Escaped::text(&why.to_string()), "waiting for etcd to answer before joining");
                        said = Some(std::time::Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                t => break t?,
            }
        };
        let secret = if t.succeeded {
            candidate
        } else {
            let kv = t
                .gets
                .first()
                .and_then(|g| g.first())
                .ok_or(Error::NoSecret)?;
            String::from_utf8(kv.value.clone()).map_err(|_| Error::SecretNotText)?
        };
        let peers = http::Peers::new(&config.node, &secret, node_tls)
            .ok_or_else(|| Error::NodeName(config.node.clone()))?;
        let advertise = config
            .advertise
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{local}"));
        if scheme == "https" && !advertise.starts_with("https://") {
            return Err(Error::AdvertiseNotTls(advertise));
        }
        let cluster = Arc::new(Cluster {
            membership: membership::Membership::new(etcd.clone(), config.node.clone(), advertise),
            placement: placement::Placement::new(etcd.clone(), config.replicas),
            applied: applied::Applied::new(applied_durability(env)),
            log: log::Log::new(etcd.clone()),
            heads: Default::default(),
            copies: copy::Copies::new(etcd.clone()),
            etcd,
            node: config.node.clone(),
            ack: config.ack,
            secret,
            peers,
            root: root.to_owned(),
            pending: Default::default(),
            turns: Default::default(),
            streams: Default::default(),
            catching: Default::default(),
            env: env.clone(),
            hooks: hooks.clone(),
            max_pack,
            idle_timeout,
            metrics,
            clocks: upkeep::Clocks::new(config.replace_after, config.delete_removed_after),
            serving: Default::default(),
        });
        // One K for the whole cluster: the first node's, or this node does not join.
        cluster.placement.agree_on_k().await?;
        let stale = locks::remove_stale(root);
        if stale > 0 {
            tracing::warn!(target: "berth::cluster", removed = stale, "removed ref locks and quarantines left by a killed node");
        }
        let lease = cluster.membership.register().await?;
        let c = cluster.clone();
        tokio::spawn(async move { c.membership.keep_alive(lease).await });
        // Catch up what was missed while down, then follow the logs.
        tokio::spawn(cluster.clone().follow());
        tokio::spawn(cluster.clone().watch_logs());
        // Prepared transactions resolve as soon as their accepting node's lease is gone.
        tokio::spawn(cluster.clone().watch_leases());
        // Every repository on K copies, where rendezvous says (`upkeep.rs`).
        tokio::spawn(cluster.clone().upkeep());
        tracing::info!(target: "berth::cluster", node = %cluster.node, advertise = %Escaped::text(cluster.membership.advertise()), "joined the cluster");
        Ok(cluster)
    }

    /// A repository `name` this node just created at `dir` for a push: record its format for
    /// the other replicas' copies (the gate records it again before the first entry, should
    /// etcd fail now).
    pub(crate) async fn created(&self, name: &str, dir: &Path) {
        let Some(d) = dir.to_str() else { return };
        let format = match crate::repo::Repository::open(d, &self.env.for_config()) {
            Ok(repo) => objects::Format::of(&repo),
            Err(e) => {
                tracing::warn!(target: "berth::cluster", repo = %Escaped::token(name), error = %Escaped::text(&e.to_string()), "cannot read a new repository's format");
                return;
            }
        };
        if let Err(e) = self.copies.record_format(name, &format).await {
            tracing::warn!(target: "berth::cluster", repo = %Escaped::token(name), error = %Escaped::text(&e.to_string()), "cannot record a new repository's format");
        }
    }

    /// Whether `given` is the cluster secret (compared as hashes, in constant time).
    /// `--replicas`: K, the copies every repository should have, its quorum reckoned from it.
    pub(crate) fn replicas(&self) -> usize {
        self.placement.replicas().max(1)
    }

    /// Whether etcd renewed this node's lease within its life (`/healthz`).
    pub(crate) fn health(&self) -> Health {
        self.membership.health()
    }

    /// How this node reaches the others.
    pub(crate) fn peers(&self) -> &http::Peers {
        &self.peers
    }

    /// `client`'s address, vouched for to a replica a request is forwarded to.
    pub(crate) fn vouch(&self, client: std::net::SocketAddr) -> Vouch {
        Vouch { client }
    }

    /// The client a request forwarded by a node of this cluster came from: its
    /// [`forward::CLIENT`] header, believed only beside the cluster secret.
    pub(crate) fn vouched_client(
        &self,
        headers: &axum::http::HeaderMap,
    ) -> Option<std::net::SocketAddr> {
        let secret = headers.get(wire::SECRET_HEADER)?;
        if !self.secret_matches(secret.as_bytes()) {
            return None;
        }
        headers.get(forward::CLIENT)?.to_str().ok()?.parse().ok()
    }

    fn secret_matches(&self, given: &[u8]) -> bool {
        use blake2::digest::Digest;
        let a = blake2::Blake2b256::digest(self.secret.as_bytes());
        let b = blake2::Blake2b256::digest(given);
        a.iter()
            .zip(b.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

/// Where a client's git request is served.
#[derive(Debug)]
pub(crate) enum Route {
    /// By the first of these live replicas (name, advertise URL, in the recorded order) that
    /// can: this node holds no replica, or is behind.
    Forward(Vec<(String, String)>),
    /// Here; the repository's replicas when it is in the cluster (a push is then replicated).
    Local(Option<Vec<String>>),
    /// Nowhere: this replica is behind the log and the request needs a current one (it was
    /// forwarded here, or no other replica is live). The log head's sequence number and the
    /// one applied here.
    Behind(u64, u64),
}

impl Cluster {
    /// A request served here reads `name`'s copy until the [`Reading`] is dropped (a removed
    /// copy is not deleted meanwhile).
    pub(crate) fn reading(&self, name: &str) -> Reading {
        self.serving.begin(name)
    }

    /// Where the request for `repo` goes: `push_rpc` for a push's POST (which places a
    /// new repository), `forwarded` when another node sent it here, `current` when only a
    /// replica that applied the whole log may serve it (every read, and an ssh push, whose
    /// session starts with the refs' advertisement; not a push's POST over HTTP, whose
    /// commit gate checks what it misses).
    pub(crate) async fn route(
        &self,
        repo: &crate::repo::Name,
        push_rpc: bool,
        forwarded: bool,
        current: bool,
    ) -> Result<(Option<String>, Route), Error> {
        let name = repo.key().to_owned();
        let replicas = match self.placement.replicas_of(&name).await? {
            Some(r) => r,
            None if push_rpc => {
                // Nodes being drained take no new repository.
                let draining = self.placement.draining().await?;
                let mut live = self.membership.live_names_now().await?;
                live.retain(|n| !draining.contains(n));
                // Never a repository whose pushes could be acknowledged on fewer copies than
                // the cluster promises: its quorum is reckoned from --replicas, not from who
                // is up.
                let need = decide::needed(self.ack, self.replicas());
                if live.len() < need {
                    return Err(Error::TooFewNodes {
                        live: live.len(),
                        need,
                        want: self.replicas(),
                        ack: self.ack,
                    });
                }
                self.placement.place(&name, &live).await?
            }
            None => return Ok((Some(name), Route::Local(None))),
        };
        let here = replicas.contains(&self.node);
        if !here {
            if forwarded {
                return Err(Error::NotAReplica {
                    name,
                    node: self.node.clone(),
                });
            }
            let live = self.membership.urls_of(&replicas).await?;
            if live.is_empty() {
                return Err(Error::NoLiveReplica { name });
            }
            return Ok((Some(name), Route::Forward(live)));
        }
        if !current && forwarded {
            return Ok((Some(name), Route::Local(Some(replicas))));
        }
        // A replica that is behind the log does not serve the repository. The advertisement
        // reads the log; the push that follows it may go by the head the watch saw
        // (`heads.rs`), for its gate reads the log again.
        let seen = if push_rpc && !current {
            self.heads.seq(&name)
        } else {
            None
        };
        let seq = match seen {
            Some(seq) => seq,
            None => {
                let (head, revision) = self.log.head_at(&name).await?;
                self.heads.read(&name, head.seq, revision);
                head.seq
            }
        };
        let applied = applied_seq(&repo_dir(&self.root, &name));
        if applied >= seq {
            return Ok((Some(name), Route::Local(Some(replicas))));
        }
        if forwarded {
            // The forwarding node tries the next replica.
            return Ok((Some(name), Route::Behind(seq, applied)));
        }
        let live = self.membership.urls_of(&replicas).await?;
        if !live.is_empty() {
            return Ok((Some(name), Route::Forward(live)));
        }
        if current {
            return Ok((Some(name), Route::Behind(seq, applied)));
        }
        Ok((Some(name), Route::Local(Some(replicas))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority() {
        assert_eq!(needed(Ack::Majority, 3), 2);
        assert_eq!(needed(Ack::Majority, 1), 1);
        assert_eq!(needed(Ack::Majority, 4), 3);
        assert_eq!(needed(Ack::All, 3), 3);
    }
}
