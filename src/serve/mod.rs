//! `berth serve`: git's smart HTTP protocol over tokio + axum, serving the repositories under one
//! root directory.
//!
//! This module owns the HTTP side only: routing (`info/refs`, `git-receive-pack`,
//! `git-upload-pack`, `/metrics`), resolving a URL to a repository under the root without
//! escaping it, creating repositories on first push (`--auto-init`, or `C` in the access rules),
//! authenticating pushes (HTTP Basic against argon2 hashes, or a header set by a trusted reverse
//! proxy), access rules (`--access`: `rules.rs` parses and decides, `access.rs` applies), request limits,
//! streaming bodies between the network and the blocking push session, the access log and the
//! metrics. A push itself is [`crate::receive::run`], exactly as for `berth receive-pack`;
//! fetches and clones run git's own `git upload-pack --stateless-rpc`. With `--cluster`,
//! `crate::cluster` places repositories on several nodes, forwards requests to them, and commits
//! every push through etcd (docs/cluster.md).
//!
//! What git-http-backend does and this module copies: the `# service=` preamble (left out when
//! the client asks for protocol v2), content types, no-cache headers, the 415 for a wrong request
//! content type, `Content-Encoding: gzip` bodies, `Git-Protocol` → the session's protocol
//! version, and the authenticated user as the reflog identity (`<user>@http.<remote address>`).

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::io::{ReaderStream, SyncIoBridge};

use crate::receive;

mod access;
mod address;
mod auth;
mod body;
mod conn;
mod credentials;
mod fair;
mod limits;
mod log;
mod logins;
mod metrics;
mod metrics_listen;
mod per_address;
mod push;
mod rate;
mod repos;
mod routing;
mod rules;
mod session;
mod ssh;

use crate::cluster;
pub use crate::cluster::status as cluster_status;
pub use crate::cluster::tls::TlsFiles as ClusterTlsFiles;
pub use crate::cluster::{Ack, ClusterConfig};
pub(crate) use crate::escape::Escaped;
pub use crate::fsync::Floor as ClusterDurability;
pub use auth::hash_password;
use auth::*;
pub use conn::default_max_connections;
pub use limits::Limits;
use limits::*;
use log::*;
pub use metrics::phase_layer;
use metrics::*;
use per_address::{Slot, SlotKind};
use repos::Target;
use routing::*;
use session::*;
pub use ssh::{OnSshListening, SshConfig, SshListening};

/// How `berth serve` was configured.
#[derive(Debug, Clone)]
pub struct Config {
    /// The directory whose repositories are served.
    pub root: PathBuf,
    /// The address to listen on (`host:port`; port 0 picks a free one).
    pub listen: String,
    /// Create a bare repository on the first push to a missing `<name>.git`.
    pub auto_init: bool,
    /// Accept pushes without authentication.
    pub allow_anonymous_push: bool,
    /// A file of `user:<argon2 PHC hash>` lines for HTTP Basic authentication of pushes.
    pub credentials: Option<PathBuf>,
    /// A request header carrying the user name, set by a trusted reverse proxy.
    pub trusted_user_header: Option<String>,
    /// The largest request body accepted, after gzip decoding.
    pub max_request_bytes: u64,
    /// How many pushes run at once; more wait for a slot.
    pub max_concurrent_pushes: usize,
    /// How long a request body may stall before the request is abandoned.
    pub idle_timeout: Duration,
    /// Access rules (a subset of gitolite's `gitolite.conf`, see the README): who may read,
    /// push to which refs, and create which repositories; re-read when the file changes.
    pub access: Option<PathBuf>,
    /// Addresses (CIDRs) whose requests may carry the trusted user header; loopback when empty.
    pub trusted_proxies: Vec<String>,
    /// Serve HTTPS with this certificate chain and key (PEM files).
    pub tls: Option<Tls>,
    /// Timeouts and caps.
    pub limits: Limits,
    /// Also serve git over ssh (`--ssh-listen`); `None` for HTTP only.
    pub ssh: Option<SshConfig>,
    /// Join a replicated cluster through etcd (`--cluster`); `None` for a single node.
    pub cluster: Option<ClusterConfig>,
    /// Variables of the server's environment that hooks and `git upload-pack` get beyond the
    /// clean environment's base (`--hook-env NAME`; see [`receive::HookEnvironment`]).
    pub hook_env: Vec<String>,
    /// Serve `/metrics` (and `/healthz`) on this address of its own (`--metrics-listen`);
    /// without it, `/metrics` is served on the main listener only when that is on loopback.
    pub metrics_listen: Option<String>,
}

/// `--tls-cert FILE --tls-key FILE`.
#[derive(Debug, Clone)]
pub struct Tls {
    /// The certificate chain, PEM.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address does not parse or resolve.
    #[error("cannot resolve listen address '{0}'")]
    Address(String),
    /// Non-loopback without authentication and without an explicit opt-in.
    #[error(
        "refusing to serve pushes on {0}, which is not a loopback address, without authentication: \
         give --credentials FILE (lines made by `berth passwd USER`), --trusted-user-header NAME \
         (behind a reverse proxy that authenticates), or --allow-anonymous-push to accept \
         pushes from anyone who can reach the port"
    )]
    Unauthenticated(String),
    /// The root directory cannot be created or used.
    #[error("cannot use root directory {path}: {source}")]
    Root {
        /// The root as given.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// The credentials file cannot be read.
    #[error("cannot read credentials file {path}: {source}")]
    CredentialsFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// A line of the credentials file is not `user:<argon2 hash>`.
    #[error("{path}:{line}: expected `user:<argon2 PHC hash>` (as printed by `berth passwd USER`)")]
    CredentialsLine {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
    },
    /// The trusted user header is not a valid header name.
    #[error("invalid header name '{0}' for --trusted-user-header")]
    HeaderName(String),
    /// Binding the listening socket failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What went wrong.
        source: io::Error,
    },
    /// The server failed while running.
    #[error("server error: {0}")]
    Serve(io::Error),
    /// The ssh side cannot start (host key, keydir).
    #[error("ssh: {0}")]
    Ssh(String),
    /// Hashing a password failed.
    #[error("cannot hash password: {0}")]
    Hash(String),
    /// The access rules file cannot be read or parsed.
    #[error("access rules: {0}")]
    Access(String),
    /// A `--trusted-proxy` that is not an address or CIDR.
    #[error("invalid --trusted-proxy '{0}': expected an address or ADDR/PREFIX")]
    TrustedProxy(String),
    /// The TLS certificate or key cannot be used.
    #[error("TLS: {0}")]
    Tls(String),
    /// `--cluster-ca` without `--cluster-listen`, or the other way round.
    #[error(
        "--cluster-listen ADDR and --cluster-ca/--cluster-cert/--cluster-key go together: the \
         nodes talk to each other over mutual TLS on that listener only"
    )]
    ClusterListen,
    /// Joining the cluster failed (`--cluster`).
    #[error("cluster: {0}")]
    Cluster(cluster::Error),
}

/// The server's shared state.
struct Server {
    root: PathBuf,
    auto_init: bool,
    anonymous: bool,
    /// `--credentials`: the users, re-read when their file changes.
    credentials: Option<credentials::CredentialsFile>,
    trusted_user_header: Option<header::HeaderName>,
    max_request_bytes: u64,
    idle_timeout: Duration,
    pushes: Arc<Semaphore>,
    push_slot_timeout: Duration,
    fetches: Arc<Semaphore>,
    min_body_rate: u64,
    body_rate_window: Duration,
    max_command_bytes: u64,
    conn_limits: conn::ConnLimits,
    max_connections: usize,
    /// Per-address caps on connections and slots (`per_address.rs`).
    per_address: per_address::Caps,
    /// `--max-body-time`: a request body's whole time; `None` for no limit.
    max_body_time: Option<Duration>,
    auth: Auth,
    init_lock: tokio::sync::Mutex<()>,
    metrics: Arc<Metrics>,
    /// `--access`: the rules, re-read when their file changes.
    rules: Option<rules::RulesFile>,
    /// The environment every push session gets, read once at start.
    env: receive::Environment,
    /// The object format a repository created by a push gets.
    new_repo_format: gix_hash::Kind,
    /// `--cluster`: set once the node joined (after the socket is bound).
    cluster: std::sync::OnceLock<Arc<cluster::Cluster>>,
    /// What hooks and `git upload-pack` take from the server's environment: a clean one.
    hook_environment: receive::HookEnvironment,
    /// Where `/metrics` is served.
    metrics_at: metrics_listen::MetricsAt,
    /// `--cluster-listen` (with `--cluster-ca`): node traffic (the internal endpoints, the
    /// forwarded requests and the client address they vouch for) is honoured only on that
    /// listener, whose every connection presented a certificate of the cluster CA.
    node_listener: bool,
}

/// Marks a request that came over the node listener (`--cluster-listen`).
#[derive(Debug, Clone, Copy)]
struct FromNodeListener;

/// A listener on the first of `addrs` (what `listen` resolved to) that can be bound.
async fn bind(addrs: &[SocketAddr], listen: &str) -> Result<tokio::net::TcpListener, Error> {
    let mut last_err = None;
    for addr in addrs {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) => last_err = Some((*addr, e)),
        }
    }
    Err(match last_err {
        Some((addr, source)) => Error::Bind { addr, source },
        None => Error::Address(listen.to_owned()),
    })
}

/// Whether every address `listen` resolves to is a loopback address.
fn resolve_listen(listen: &str) -> Result<Vec<SocketAddr>, Error> {
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|_| Error::Address(listen.to_owned()))?
        .collect();
    if addrs.is_empty() {
        return Err(Error::Address(listen.to_owned()));
    }
    Ok(addrs)
}

/// Run the server until SIGINT or SIGTERM, then let in-flight requests finish. `on_listening`
/// is told the bound address once the socket listens (the binary prints it).
pub async fn run(config: Config, on_listening: impl FnOnce(SocketAddr)) -> Result<(), Error> {
    let addrs = resolve_listen(&config.listen)?;
    let loopback = addrs.iter().all(|a| a.ip().is_loopback());
    let auth_configured = config.credentials.is_some() || config.trusted_user_header.is_some();
    if !auth_configured && !config.allow_anonymous_push && !loopback {
        return Err(Error::Unauthenticated(config.listen.clone()));
    }
    // The zero-configuration default: on loopback with no authentication, anyone local may push
    // and a push to a new `<name>.git` creates it.
    let implied = !auth_configured && loopback;
    let anonymous = config.allow_anonymous_push || implied;
    let auto_init = config.auto_init || implied;

    std::fs::create_dir_all(&config.root).map_err(|source| Error::Root {
        path: config.root.clone(),
        source,
    })?;
    let root = config.root.canonicalize().map_err(|source| Error::Root {
        path: config.root.clone(),
        source,
    })?;
    if root.to_str().is_none() {
        return Err(Error::Root {
            path: config.root.clone(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "path is not UTF-8"),
        });
    }
    {
        let root = root.clone();
        tokio::task::spawn_blocking(move || repos::remove_stale_staging(&root));
    }
    let credentials = match &config.credentials {
        Some(p) => Some(credentials::CredentialsFile::load(p)?),
        None => None,
    };
    let trusted_user_header = match &config.trusted_user_header {
        Some(h) => Some(
            header::HeaderName::try_from(h.as_str()).map_err(|_| Error::HeaderName(h.clone()))?,
        ),
        None => None,
    };
    let rules = match &config.access {
        Some(p) => Some(rules::RulesFile::load(p).map_err(Error::Access)?),
        None => None,
    };
    let mut trusted_proxies = Vec::new();
    for p in &config.trusted_proxies {
        trusted_proxies.push(Cidr::parse(p).ok_or_else(|| Error::TrustedProxy(p.clone()))?);
    }
    // Everyone behind an explicit proxy comes from its address: no per-address caps for it.
    let uncapped = trusted_proxies.clone();
    if trusted_proxies.is_empty() {
        trusted_proxies = vec![
            Cidr::parse("127.0.0.0/8").expect("valid"),
            Cidr::parse("::1").expect("valid"),
        ];
    }
    let tls = match &config.tls {
        Some(t) => Some(tls_acceptor(t)?),
        None => None,
    };
    // The node listener: mutual TLS with the cluster CA, before anything is bound.
    let node = match config
        .cluster
        .as_ref()
        .map(|c| (&c.node_tls, &c.cluster_listen))
    {
        Some((Some(files), Some(listen))) => {
            let tls = cluster::tls::NodeTls::load(files.clone())
                .map_err(|e| Error::Cluster(cluster::Error::Tls(e)))?;
            Some((Arc::new(tls), listen.clone()))
        }
        Some((Some(_), None)) | Some((None, Some(_))) => return Err(Error::ClusterListen),
        _ => None,
    };
    let limits = &config.limits;
    let max_connections = limits
        .max_connections
        .unwrap_or_else(default_max_connections);
    let max_pushes = config.max_concurrent_pushes.max(1);
    // The cluster's series are registered only in a cluster.
    let cluster_metrics = config
        .cluster
        .as_ref()
        .map(|_| Arc::new(cluster::ClusterMetrics::default()));
    let metrics = Arc::new(Metrics::new(cluster_metrics.as_deref()));
    metrics.init();
    let server = Arc::new(Server {
        root: root.clone(),
        auto_init,
        anonymous,
        credentials,
        trusted_user_header,
        max_request_bytes: config.max_request_bytes,
        idle_timeout: config.idle_timeout,
        pushes: Arc::new(Semaphore::new(max_pushes)),
        push_slot_timeout: limits.push_slot_timeout,
        fetches: Arc::new(Semaphore::new(limits.max_concurrent_fetches.max(1))),
        min_body_rate: limits.min_body_rate,
        body_rate_window: limits.body_rate_window.max(Duration::from_millis(100)),
        max_command_bytes: limits.max_command_bytes.max(1),
        conn_limits: conn::ConnLimits {
            header_read: limits.header_read_timeout,
            keepalive: limits.keepalive_timeout,
            write: limits.write_timeout,
            send_rate: rate::MinRate::new(limits.min_send_rate, limits.send_rate_window),
        },
        max_connections,
        per_address: per_address::Caps::new(limits, max_connections, max_pushes, &uncapped),
        max_body_time: (!limits.max_body_time.is_zero()).then_some(limits.max_body_time),
        auth: Auth::new(limits, trusted_proxies),
        init_lock: tokio::sync::Mutex::new(()),
        metrics,
        rules,
        env: receive::Environment {
            // A cluster node's pushes are on disk before it reports them applied.
            durability_floor: config
                .cluster
                .as_ref()
                .map_or(crate::fsync::Floor::CoreFsync, |c| c.durability),
            ..receive::Environment::from_process()
        },
        new_repo_format: repos::new_repository_format(),
        cluster: std::sync::OnceLock::new(),
        hook_environment: receive::HookEnvironment::clean_from_process(&config.hook_env),
        metrics_at: metrics_listen::MetricsAt::decide(config.metrics_listen.as_deref(), loopback),
        node_listener: node.is_some(),
    });

    let app = axum::Router::new()
        .fallback(handle)
        .with_state(server.clone())
        .layer(tower_http::decompression::RequestDecompressionLayer::new().gzip(true));

    let listener = bind(&addrs, &config.listen).await?;
    let local = listener.local_addr().map_err(Error::Serve)?;
    let node = match node {
        Some((acceptor, listen)) => {
            let node_listener = bind(&resolve_listen(&listen)?, &listen).await?;
            let at = node_listener.local_addr().map_err(Error::Serve)?;
            Some((acceptor, node_listener, at))
        }
        None => None,
    };
    if let Some(c) = &config.cluster {
        let joined = cluster::Cluster::join(
            c,
            node.as_ref().map(|n| n.0.clone()),
            &root,
            // Where the other nodes reach this one unless --advertise says.
            node.as_ref().map_or(local, |n| n.2),
            &server.env,
            &server.hook_environment,
            server.max_request_bytes,
            server.idle_timeout,
            cluster_metrics.unwrap_or_default(),
        )
        .await
        .map_err(Error::Cluster)?;
        let _ = server.cluster.set(joined);
    }
    tracing::info!(
        target: "berth::serve",
        listen = %local,
        root = %root.display(),
        anonymous_push = anonymous,
        auto_init,
        tls = tls.is_some(),
        max_connections = server.max_connections,
        "serving"
    );
    let metrics_task = match &server.metrics_at {
        metrics_listen::MetricsAt::Own(addr) => {
            let (at, task) = metrics_listen::start(server.clone(), addr).await?;
            tracing::info!(target: "berth::serve", listen = %at, "serving metrics");
            Some(task)
        }
        _ => None,
    };
    let ssh = match &config.ssh {
        Some(c) => Some(ssh::start(server.clone(), c).await?),
        None => None,
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let node_task = node.map(|(acceptor, node_listener, at)| {
        tracing::info!(target: "berth::serve", listen = %at, "serving the cluster's nodes (mutual TLS)");
        tokio::spawn(reload_on_hangup(acceptor.clone()));
        let node_app = app.clone().layer(axum::Extension(FromNodeListener));
        let mut stopped = stopped.clone();
        tokio::spawn(conn::serve(
            node_listener,
            node_app,
            server.clone(),
            Some(conn::Tls::Node(acceptor)),
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            },
        ))
    });
    on_listening(local);
    conn::serve(listener, app, server, tls.map(conn::Tls::Public), async {
        shutdown_signal().await;
        let _ = stop.send(true);
    })
    .await;
    let _ = stop.send(true);
    if let Some(task) = node_task {
        let _ = task.await;
    }
    if let Some(task) = metrics_task {
        task.abort();
    }
    if let Some(ssh) = ssh {
        ssh.shutdown().await;
    }
    tracing::info!(target: "berth::serve", "stopped");
    Ok(())
}

/// On every SIGHUP, read `--cluster-ca`, `--cluster-cert` and `--cluster-key` again: the node
/// listener's new connections and this node's new connections to the others use them; on an
/// error the ones in use stay (and it is logged).
async fn reload_on_hangup(tls: Arc<cluster::tls::NodeTls>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hup.recv().await.is_some() {
        match tls.reload() {
            Ok(()) => {
                tracing::info!(target: "berth::serve", names = %Escaped::text(&tls.names().join(",")), "SIGHUP: read --cluster-ca, --cluster-cert and --cluster-key again")
            }
            Err(e) => {
                tracing::warn!(target: "berth::serve", error = %Escaped::text(&e.to_string()), "SIGHUP: cannot read the cluster's TLS files again; the ones read before stay in use")
            }
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    tracing::info!(target: "berth::serve", "shutting down; letting requests in flight finish");
}

/// The `Git-Protocol` header's value, if it is usable as `GIT_PROTOCOL`.
fn git_protocol(headers: &HeaderMap) -> Option<String> {
    let v = headers.get("git-protocol")?.to_str().ok()?;
    // git-http-backend passes it through; keep it to the characters git itself sends.
    v.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b":=._-".contains(&b))
        .then(|| v.to_owned())
}

/// `GET /healthz`: `ok`, or in a cluster 503 while etcd has not renewed this node's lease
/// (the other nodes count it as gone; pushes through it fail until etcd is back).
fn health(server: &Server) -> Response {
    match server.cluster.get().map(|c| c.health()) {
        None | Some(cluster::Health::InCluster) => "ok\n".into_response(),
        Some(cluster::Health::EtcdUnreachable(since)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "etcd has not renewed this node's lease for {} s: not in the cluster\n",
                since.as_secs()
            ),
        )
            .into_response(),
    }
}

/// Who a request comes from.
#[derive(Debug, Clone, Copy)]
struct Client {
    /// The TCP peer: the address `--trusted-proxy` and the trusted user header are judged by.
    peer: SocketAddr,
    /// The client itself: the peer, or the client a node of the cluster forwarded the request
    /// for. Per-address slots, the access log, the hooks' `REMOTE_ADDR` and the reflog
    /// identity use it.
    addr: SocketAddr,
    /// Whether a node's marks on the request (`x-berth-forwarded`, the address it vouches
    /// for) count: it came over the node listener, or there is none.
    node_traffic: bool,
}

/// The single handler: route, authenticate, resolve the repository, run the service.
async fn handle(
    State(server): State<Arc<Server>>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    // Node traffic is honoured on the node listener only, when there is one.
    let node_traffic =
        !server.node_listener || req.extensions().get::<FromNodeListener>().is_some();
    // There, every request names the node it comes from, which its certificate names.
    if let Some(conn::PeerNodes(names)) = req.extensions().get::<conn::PeerNodes>() {
        let claimed = req
            .headers()
            .get(cluster::http::NODE_HEADER)
            .and_then(|v| v.to_str().ok());
        if claimed.is_none_or(|c| names != &[c]) {
            return (
                StatusCode::FORBIDDEN,
                format!(
                    "not that node: the client certificate names {}, the request claims {}\n",
                    Escaped::text(&names.join(",")),
                    Escaped::text(claimed.unwrap_or("no node"))
                ),
            )
                .into_response();
        }
    }
    if path.starts_with(cluster::INTERNAL_PREFIX)
        && let Some(c) = server.cluster.get()
    {
        if !node_traffic {
            return (
                StatusCode::FORBIDDEN,
                "not a node of this cluster: nodes reach each other on the cluster listener, \
                 over TLS with a certificate of the cluster CA\n",
            )
                .into_response();
        }
        return match cluster::internal(c, req).await {
            cluster::Internal::Answered(response) => response,
            cluster::Internal::SshTunnel(req) => ssh::tunneled(&server, c, req).await,
        };
    }
    let routed = route(&method, &path, query.as_deref());
    let (route_name, repo) = match &routed {
        Ok(Route::InfoRefs { repo, .. }) => ("info-refs", repo.to_string()),
        Ok(Route::Rpc {
            repo,
            service: Service::ReceivePack,
        }) => ("receive-pack", repo.to_string()),
        Ok(Route::Rpc { repo, .. }) => ("upload-pack", repo.to_string()),
        Ok(Route::Metrics) => ("metrics", String::new()),
        Ok(Route::Health) => ("healthz", String::new()),
        Err(Reject::BadPath { route, raw, .. }) => (*route, raw.clone()),
        Err(_) => ("other", path.chars().take(200).collect()),
    };
    // The client: for a request another node of the cluster forwarded, the one it vouches for
    // (the TCP peer is that node).
    let client = Client {
        peer: remote,
        addr: server
            .cluster
            .get()
            .filter(|_| node_traffic)
            .and_then(|c| c.vouched_client(req.headers()))
            .unwrap_or(remote),
        node_traffic,
    };
    let access = Access::new(&server.metrics, method, route_name, repo, client.addr, "-");
    let result = match routed {
        Ok(Route::Metrics) if server.metrics_at.on_main() => Ok(metrics_response(&server)),
        Ok(Route::Metrics) => Err(Reject::NotFound),
        Ok(Route::Health) => Ok(health(&server)),
        Ok(r) => serve_git(&server, r, client, req, &access).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(resp) => {
            access.set_status(resp.status());
            resp
        }
        Err(e) => {
            access.set_status(e.status());
            access.set_outcome(e.to_string());
            e.response()
        }
    }
}

async fn serve_git(
    server: &Arc<Server>,
    route: Route,
    client: Client,
    req: Request,
    access: &Arc<Access>,
) -> Result<Response, Reject> {
    let (repo, service, rpc) = match route {
        Route::InfoRefs { repo, service } => (repo, service, false),
        Route::Rpc { repo, service } => (repo, service, true),
        Route::Metrics | Route::Health => return Err(Reject::NotFound),
    };
    let headers = req.headers().clone();
    // Who asks, before the repository is looked at (a 401 says nothing of it).
    let identity = server.identify(&headers, service, client.peer).await?;
    let remote = client.addr;
    // Unauthenticated is `anonymous` in the log for a fetch (not identified without access
    // rules) as for a push.
    access.set_user(
        identity
            .as_ref()
            .map_or(Identity::Anonymous.name(), Identity::name),
    );
    let protocol = git_protocol(&headers);
    let version = protocol
        .as_deref()
        .map(receive::protocol_version)
        .unwrap_or(0);
    // Cluster: served here, or by a replica.
    let mut replicated = None;
    if let Some(c) = server.cluster.get() {
        let forwarded = client.node_traffic && headers.contains_key(cluster::FORWARDED);
        let push_rpc = rpc && service == Service::ReceivePack;
        let (name, routed) = c
            .route(&repo, push_rpc, forwarded, !push_rpc)
            .await
            .map_err(|e| {
                tracing::warn!(target: "berth::cluster", repo = %repo, error = %Escaped::text(&e.to_string()), "cannot route");
                match e {
                    cluster::Error::TooFewNodes { .. } => Reject::Unavailable(e.to_string()),
                    _ => Reject::Unavailable("no replica of the repository can serve it now".into()),
                }
            })?;
        match (name, routed) {
            (_, cluster::Route::Forward(replicas)) => {
                let trusted = match (&server.trusted_user_header, &identity) {
                    (Some(h), Some(Identity::User(u))) => Some((h, u.as_str())),
                    _ => None,
                };
                let how = cluster::Forwarding {
                    node: &c.node,
                    peers: c.peers(),
                    trusted_user: trusted,
                    timeout: server.idle_timeout + server.push_slot_timeout,
                    idle: server.idle_timeout,
                    replayable: !push_rpc,
                    client: c.vouch(remote),
                };
                return cluster::forward(req, &replicas, &how)
                    .await
                    .map_err(|e| {
                        tracing::warn!(target: "berth::cluster", repo = %repo, error = %Escaped::text(&e.to_string()), "cannot forward");
                        Reject::Unavailable("no replica of the repository could serve it".into())
                    });
            }
            (_, cluster::Route::Behind(seq, applied)) => {
                return Err(Reject::Behind(seq, applied));
            }
            (Some(name), cluster::Route::Local(Some(replicas))) => {
                if let Ok(mut r) = access.reading.lock() {
                    *r = Some(c.reading(&name));
                }
                if push_rpc {
                    replicated = Some((c.clone(), name, replicas));
                }
            }
            _ => {}
        }
    }
    let (dir, to_create) = match server.target(&repo, service, identity.as_ref())? {
        Target::Repo(dir) => (Some(dir), None),
        // Created once the POST is known to be a well-formed push (below).
        Target::Creatable(path) if rpc => (None, Some(path)),
        Target::Creatable(_) => {
            // A push may create it: advertise an empty repository, create nothing yet.
            let preamble = (version != 2).then(|| {
                let line = format!("# service={}\n", service.name());
                Bytes::from(format!("{:04x}{line}0000", line.len() + 4))
            });
            let adv = repos::empty_advertisement(version, &server.env, server.new_repo_format);
            access
                .bytes_out
                .fetch_add(adv.len() as u64, Ordering::Relaxed);
            return Ok(streaming_response(
                "application/x-git-receive-pack-advertisement",
                preamble.into_iter().chain(Some(adv)).collect(),
                futures_util::stream::empty(),
                access.clone(),
            ));
        }
    };
    let as_dir = |dir: PathBuf| {
        dir.to_str()
            .map(str::to_owned)
            .ok_or(Reject::NotARepository(repo.to_string()))
    };

    if let (false, Some(dir)) = (rpc, &dir) {
        let dir = as_dir(dir.clone())?;
        // Discovery: the preamble, unless the client asked for v2 (as git-http-backend).
        let preamble = (version != 2).then(|| {
            let line = format!("# service={}\n", service.name());
            Bytes::from(format!("{:04x}{line}0000", line.len() + 4))
        });
        let content_type = match service {
            Service::ReceivePack => "application/x-git-receive-pack-advertisement",
            Service::UploadPack => "application/x-git-upload-pack-advertisement",
        };
        return match service {
            Service::ReceivePack => {
                let options = receive::Options {
                    advertise_refs: true,
                    stateless_rpc: true,
                    protocol_version: version,
                    env: server.env.clone(),
                    ..Default::default()
                };
                Ok(run_session(
                    dir,
                    options,
                    None,
                    content_type,
                    preamble,
                    access.clone(),
                    None,
                )
                .await)
            }
            Service::UploadPack => {
                let permit = server.slot(SlotKind::Fetch, remote.ip()).await?;
                upload_pack(
                    dir,
                    true,
                    protocol,
                    None,
                    content_type,
                    preamble,
                    access,
                    Some(permit),
                    &server.hook_environment,
                )
                .await
            }
        };
    }

    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let expected = format!("application/x-{}-request", service.name());
    if content_type.as_deref() != Some(expected.as_str()) {
        return Err(Reject::ContentType {
            expected,
            got: content_type.unwrap_or_else(|| "(null)".into()),
        });
    }
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        && len > server.max_request_bytes
    {
        return Err(Reject::TooLarge);
    }
    let dir = match (dir, to_create) {
        (Some(dir), _) => as_dir(dir)?,
        (None, Some(path)) => as_dir(server.create(&repo, &path).await?)?,
        (None, None) => return Err(Reject::NotARepository(repo.to_string())),
    };
    let body = body_reader(req.into_body(), server, access);
    let result_type = format!("application/x-{}-result", service.name());
    match service {
        Service::ReceivePack => {
            let user = identity.unwrap_or(Identity::Anonymous);
            let push = push::Push {
                server,
                user: &user,
                peer: remote.ip(),
                transport: push::Transport::Http,
                protocol: protocol.as_deref(),
                repo: &repo,
                dir: &dir,
            };
            let options = push.options(replicated);
            // Wait for a push slot, for a while; the permit travels with the blocking session.
            let guard = push::admit(server, remote.ip()).await?;
            Ok(run_session(
                dir,
                options,
                Some(body),
                &result_type,
                None,
                access.clone(),
                Some(guard),
            )
            .await)
        }
        Service::UploadPack => {
            let permit = server.slot(SlotKind::Fetch, remote.ip()).await?;
            upload_pack(
                dir,
                false,
                protocol,
                Some(body),
                &result_type,
                None,
                access,
                Some(permit),
                &server.hook_environment,
            )
            .await
        }
    }
}

impl Server {
    /// A push or fetch slot for a client at `remote`: first one of its address's
    /// (`--max-pushes-per-address`, `--max-fetches-per-address`), then one of the server's,
    /// waiting at most `--push-slot-timeout` for both (then 503 with `Retry-After`).
    async fn slot(&self, kind: SlotKind, remote: std::net::IpAddr) -> Result<Slot, Reject> {
        let (slots, per_address) = match kind {
            SlotKind::Push => (&self.pushes, &self.per_address.pushes),
            SlotKind::Fetch => (&self.fetches, &self.per_address.fetches),
        };
        let ((name, address_name), (reason, address_reason)) = (kind.names(), kind.busy_reasons());
        let deadline = tokio::time::Instant::now() + self.push_slot_timeout;
        let address = match tokio::time::timeout_at(deadline, per_address.acquire(remote)).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => return Err(Reject::Internal("server shutting down".into())),
            Err(_) => {
                self.metrics.busy(address_reason);
                return Err(Reject::Busy(address_name));
            }
        };
        match tokio::time::timeout_at(deadline, slots.clone().acquire_owned()).await {
            Ok(Ok(p)) => Ok(Slot {
                _global: p,
                _address: address,
            }),
            Ok(Err(_)) => Err(Reject::Internal("server shutting down".into())),
            Err(_) => {
                self.metrics.busy(reason);
                Err(Reject::Busy(name))
            }
        }
    }
}

/// The `repo_path` fuzz target's entry point (`crate::fuzzing::repo_path`).
#[cfg(feature = "internals")]
#[doc(hidden)]
pub fn fuzz_repo_path(data: &[u8]) {
    routing::check_repo_path(data);
}

/// The TLS acceptor for `--tls-cert`/`--tls-key`.
fn tls_acceptor(t: &Tls) -> Result<tokio_rustls::TlsAcceptor, Error> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let certs = CertificateDer::pem_file_iter(&t.cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| Error::Tls(format!("{}: {e}", t.cert.display())))?;
    if certs.is_empty() {
        return Err(Error::Tls(format!(
            "{}: no certificate in the file",
            t.cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&t.key)
        .map_err(|e| Error::Tls(format!("{}: {e}", t.key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| Error::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
