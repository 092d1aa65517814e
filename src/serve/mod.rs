//! `berth serve`: git's smart HTTP protocol over tokio + axum, serving the repositories under one
//! root directory.
//!
//! This module owns the HTTP side only: routing (`info/refs`, `git-receive-pack`,
//! `git-upload-pack`, `/metrics`), resolving a URL to a repository under the root without
//! escaping it, creating repositories on first push (`--auto-init`), authenticating pushes (HTTP
//! Basic against argon2 hashes, or a header set by a trusted reverse proxy), request limits,
//! streaming bodies between the network and the blocking push session, the access log and the
//! metrics. A push itself is [`crate::receive::run`], exactly as for `berth receive-pack`;
//! fetches and clones run git's own `git upload-pack --stateless-rpc`.
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
use tokio_util::io::{ReaderStream, StreamReader, SyncIoBridge};

use crate::receive;

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
    /// Hashing a password failed.
    #[error("cannot hash password: {0}")]
    Hash(String),
}

/// The no-cache headers git-http-backend sends with every dynamic response.
const NO_CACHE: [(header::HeaderName, &str); 3] = [
    (header::EXPIRES, "Fri, 01 Jan 1980 00:00:00 GMT"),
    (header::PRAGMA, "no-cache"),
    (
        header::CACHE_CONTROL,
        "no-cache, max-age=0, must-revalidate",
    ),
];

/// The two services git speaks over smart HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Service {
    ReceivePack,
    UploadPack,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::ReceivePack => "git-receive-pack",
            Service::UploadPack => "git-upload-pack",
        }
    }
    fn from_name(s: &str) -> Option<Self> {
        match s {
            "git-receive-pack" => Some(Service::ReceivePack),
            "git-upload-pack" => Some(Service::UploadPack),
            _ => None,
        }
    }
}

/// One request's route.
#[derive(Debug)]
enum Route {
    InfoRefs { repo: String, service: Service },
    Rpc { repo: String, service: Service },
    Metrics,
}

/// Why a request was answered with an error status before any git ran.
#[derive(Debug, thiserror::Error)]
enum Reject {
    #[error("Not Found")]
    NotFound,
    #[error("Method Not Allowed")]
    Method(&'static str),
    #[error("Unsupported service: '{0}'")]
    UnsupportedService(String),
    #[error("invalid repository path: {0}")]
    BadPath(&'static str),
    #[error("repository path leaves the served root")]
    Escapes,
    #[error("Not a git repository: '{0}'")]
    NotARepository(String),
    #[error("Authentication required")]
    Unauthorized,
    #[error("Expected POST with Content-Type '{expected}', but received '{got}' instead.")]
    ContentType { expected: String, got: String },
    #[error("request body larger than the server accepts (--max-request-bytes)")]
    TooLarge,
    #[error("cannot create repository: {0}")]
    Init(String),
    #[error("{0}")]
    Internal(String),
}

impl Reject {
    fn status(&self) -> StatusCode {
        match self {
            Reject::NotFound | Reject::NotARepository(_) => StatusCode::NOT_FOUND,
            Reject::Method(_) => StatusCode::METHOD_NOT_ALLOWED,
            Reject::UnsupportedService(_) | Reject::Escapes => StatusCode::FORBIDDEN,
            Reject::BadPath(_) => StatusCode::BAD_REQUEST,
            Reject::Unauthorized => StatusCode::UNAUTHORIZED,
            Reject::ContentType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Reject::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Reject::Init(_) | Reject::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn response(&self) -> Response {
        let mut r = (self.status(), format!("{self}\n")).into_response();
        let h = r.headers_mut();
        for (k, v) in NO_CACHE {
            h.insert(k, HeaderValue::from_static(v));
        }
        match self {
            Reject::Unauthorized => {
                h.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"berth\""),
                );
            }
            Reject::Method(allow) => {
                h.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            _ => {}
        }
        r
    }
}

/// Who is pushing.
#[derive(Debug, Clone)]
enum Identity {
    User(String),
    Anonymous,
}

impl Identity {
    fn name(&self) -> &str {
        match self {
            Identity::User(u) => u,
            Identity::Anonymous => "anonymous",
        }
    }
}

/// The server's shared state.
struct Server {
    root: PathBuf,
    auto_init: bool,
    anonymous: bool,
    credentials: Option<Arc<Credentials>>,
    trusted_user_header: Option<header::HeaderName>,
    max_request_bytes: u64,
    idle_timeout: Duration,
    pushes: Arc<Semaphore>,
    init_lock: tokio::sync::Mutex<()>,
    metrics: Arc<Metrics>,
    /// The environment every push session gets, read once at start.
    env: receive::Environment,
}

/// The users allowed to push and their argon2 hashes.
struct Credentials {
    users: HashMap<String, String>,
    /// Verified against for unknown users, so both cases take the same time.
    dummy: String,
}

impl Credentials {
    fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::CredentialsFile {
            path: path.to_owned(),
            source,
        })?;
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || Error::CredentialsLine {
                path: path.to_owned(),
                line: i + 1,
            };
            let (user, hash) = line.split_once(':').ok_or_else(bad)?;
            if user.is_empty()
                || argon2::password_hash::phc::PasswordHash::new(hash).is_err()
                || !hash.starts_with("$argon2")
            {
                return Err(bad());
            }
            users.insert(user.to_owned(), hash.to_owned());
        }
        Ok(Credentials {
            users,
            dummy: hash_password("not a password")?,
        })
    }

    /// Whether `password` is `user`'s (blocking: argon2 is deliberately slow).
    fn verify(&self, user: &str, password: &str) -> bool {
        use argon2::password_hash::PasswordVerifier;
        let (hash, known) = match self.users.get(user) {
            Some(h) => (h.as_str(), true),
            None => (self.dummy.as_str(), false),
        };
        let ok = argon2::Argon2::default()
            .verify_password(password.as_bytes(), hash)
            .is_ok();
        ok && known
    }
}

/// An argon2id PHC string for `password`, for the credentials file.
pub fn hash_password(password: &str) -> Result<String, Error> {
    use argon2::password_hash::PasswordHasher;
    argon2::Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| Error::Hash(e.to_string()))
}

/// Counters for `/metrics`.
#[derive(Default)]
struct Metrics {
    requests: Mutex<HashMap<(&'static str, u16), u64>>,
    /// Pushes by [`receive::PushResult`]: ok, partial, rejected, error.
    pushes: [AtomicU64; 4],
    refs_updated: AtomicU64,
    refs_refused: AtomicU64,
    push_bytes: AtomicU64,
    push_micros: AtomicU64,
    pushes_in_flight: AtomicU64,
    fetch_bytes_out: AtomicU64,
}

impl Metrics {
    fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("# HELP berth_http_requests_total HTTP requests by service and status.\n");
        s.push_str("# TYPE berth_http_requests_total counter\n");
        let mut rows: Vec<_> = self
            .requests
            .lock()
            .map(|m| m.iter().map(|(k, v)| (*k, *v)).collect())
            .unwrap_or_default();
        rows.sort();
        for ((service, code), n) in rows {
            s.push_str(&format!(
                "berth_http_requests_total{{service=\"{service}\",code=\"{code}\"}} {n}\n"
            ));
        }
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        s.push_str("# HELP berth_pushes_total Pushes (POST git-receive-pack with commands) by result: every ref accepted (ok), some (partial), none (rejected), or the pack or session failed (error).\n");
        s.push_str("# TYPE berth_pushes_total counter\n");
        for (i, result) in PUSH_RESULTS.iter().enumerate() {
            s.push_str(&format!(
                "berth_pushes_total{{result=\"{}\"}} {}\n",
                result.as_str(),
                get(&self.pushes[i])
            ));
        }
        s.push_str("# HELP berth_push_refs_total Pushed refs by what the client was told: updated (ok) or refused (ng).\n");
        s.push_str("# TYPE berth_push_refs_total counter\n");
        s.push_str(&format!(
            "berth_push_refs_total{{result=\"updated\"}} {}\nberth_push_refs_total{{result=\"refused\"}} {}\n",
            get(&self.refs_updated),
            get(&self.refs_refused)
        ));
        s.push_str("# TYPE berth_push_request_bytes_total counter\n");
        s.push_str(&format!(
            "berth_push_request_bytes_total {}\n",
            get(&self.push_bytes)
        ));
        s.push_str("# TYPE berth_push_duration_seconds_sum counter\n");
        s.push_str(&format!(
            "berth_push_duration_seconds_sum {:.6}\n",
            get(&self.push_micros) as f64 / 1e6
        ));
        s.push_str("# TYPE berth_pushes_in_flight gauge\n");
        s.push_str(&format!(
            "berth_pushes_in_flight {}\n",
            get(&self.pushes_in_flight)
        ));
        s.push_str("# TYPE berth_fetch_response_bytes_total counter\n");
        s.push_str(&format!(
            "berth_fetch_response_bytes_total {}\n",
            get(&self.fetch_bytes_out)
        ));
        s
    }
}

/// One request's access-log record: written (one line) and counted when the last holder drops
/// it, which for a streamed response is when its body has been sent or abandoned.
struct Access {
    start: Instant,
    method: Method,
    route: &'static str,
    repo: String,
    remote: SocketAddr,
    user: Mutex<String>,
    status: AtomicU16,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    too_large: std::sync::atomic::AtomicBool,
    outcome: Mutex<Option<String>>,
    /// What the push session did, when it read a request.
    push: Mutex<Option<PushSummary>>,
    metrics: Arc<Metrics>,
}

/// A push's outcome as the access log and the metrics count it.
#[derive(Debug, Clone, Copy)]
struct PushSummary {
    result: receive::PushResult,
    updated: usize,
    refused: usize,
}

/// The results in `berth_pushes_total`'s order.
const PUSH_RESULTS: [receive::PushResult; 4] = [
    receive::PushResult::Ok,
    receive::PushResult::Partial,
    receive::PushResult::Rejected,
    receive::PushResult::Error,
];

impl Access {
    fn set_status(&self, s: StatusCode) {
        self.status.store(s.as_u16(), Ordering::Relaxed);
    }
    /// Record what went wrong; the first reason wins.
    fn set_outcome(&self, o: impl Into<String>) {
        if let Ok(mut g) = self.outcome.lock()
            && g.is_none()
        {
            *g = Some(o.into());
        }
    }
    fn set_push(&self, outcome: &receive::Outcome) {
        if !outcome.requested {
            return;
        }
        if let Ok(mut g) = self.push.lock() {
            *g = Some(PushSummary {
                result: outcome.result(),
                updated: outcome.updated(),
                refused: outcome.refused(),
            });
        }
    }
    fn set_user(&self, u: &str) {
        if let Ok(mut g) = self.user.lock() {
            *g = u.to_owned();
        }
    }
}

impl Drop for Access {
    fn drop(&mut self) {
        let status = self.status.load(Ordering::Relaxed);
        let duration = self.start.elapsed();
        let bytes_in = self.bytes_in.load(Ordering::Relaxed);
        let bytes_out = self.bytes_out.load(Ordering::Relaxed);
        let failure = self.outcome.lock().ok().and_then(|g| g.clone());
        let push = self.push.lock().ok().and_then(|g| *g);
        // A push that failed after its answer started is an error whatever the session said.
        let push = push.map(|p| match &failure {
            Some(_) => PushSummary {
                result: receive::PushResult::Error,
                ..p
            },
            None => p,
        });
        let outcome = match (&failure, push) {
            (Some(f), _) => f.clone(),
            (None, Some(p)) => p.result.as_str().to_owned(),
            (None, None) => "ok".to_owned(),
        };
        let (refs_updated, refs_refused) = push.map_or((0, 0), |p| (p.updated, p.refused));
        let user = self.user.lock().map(|g| g.clone()).unwrap_or_default();
        tracing::info!(
            target: "berth::serve",
            method = %self.method,
            route = self.route,
            repo = %self.repo,
            user = %user,
            remote = %self.remote.ip(),
            status,
            bytes_in,
            bytes_out,
            duration_ms = %format_args!("{:.3}", duration.as_secs_f64() * 1e3),
            refs_updated,
            refs_refused,
            outcome = %outcome,
            "request"
        );
        let m = &self.metrics;
        if let Ok(mut r) = m.requests.lock() {
            *r.entry((self.route, status)).or_default() += 1;
        }
        if self.route == "receive-pack" {
            m.push_bytes.fetch_add(bytes_in, Ordering::Relaxed);
            m.push_micros
                .fetch_add(duration.as_micros() as u64, Ordering::Relaxed);
            let result = match push {
                Some(p) if status == 200 => Some(p.result),
                // A flush-only probe, or a request the session never read: not a push.
                None if status == 200 && failure.is_none() => None,
                _ => Some(receive::PushResult::Error),
            };
            if let Some(result) = result {
                let i = PUSH_RESULTS.iter().position(|r| *r == result).unwrap_or(3);
                m.pushes[i].fetch_add(1, Ordering::Relaxed);
            }
            m.refs_updated
                .fetch_add(refs_updated as u64, Ordering::Relaxed);
            m.refs_refused
                .fetch_add(refs_refused as u64, Ordering::Relaxed);
        } else if self.route == "upload-pack" {
            m.fetch_bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        }
    }
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
    let credentials = match &config.credentials {
        Some(p) => Some(Arc::new(Credentials::load(p)?)),
        None => None,
    };
    let trusted_user_header = match &config.trusted_user_header {
        Some(h) => Some(
            header::HeaderName::try_from(h.as_str()).map_err(|_| Error::HeaderName(h.clone()))?,
        ),
        None => None,
    };
    let server = Arc::new(Server {
        root: root.clone(),
        auto_init,
        anonymous,
        credentials,
        trusted_user_header,
        max_request_bytes: config.max_request_bytes,
        idle_timeout: config.idle_timeout,
        pushes: Arc::new(Semaphore::new(config.max_concurrent_pushes.max(1))),
        init_lock: tokio::sync::Mutex::new(()),
        metrics: Arc::new(Metrics::default()),
        env: receive::Environment::from_process(),
    });

    let app = axum::Router::new()
        .fallback(handle)
        .with_state(server)
        .layer(tower_http::decompression::RequestDecompressionLayer::new().gzip(true));

    let mut last_err = None;
    let mut listener = None;
    for addr in &addrs {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                listener = Some(l);
                break;
            }
            Err(e) => last_err = Some((*addr, e)),
        }
    }
    let listener = match (listener, last_err) {
        (Some(l), _) => l,
        (None, Some((addr, source))) => return Err(Error::Bind { addr, source }),
        (None, None) => return Err(Error::Address(config.listen.clone())),
    };
    let local = listener.local_addr().map_err(Error::Serve)?;
    tracing::info!(
        target: "berth::serve",
        listen = %local,
        root = %root.display(),
        anonymous_push = anonymous,
        auto_init,
        "serving"
    );
    on_listening(local);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown_signal())
    .await
    .map_err(Error::Serve)?;
    tracing::info!(target: "berth::serve", "stopped");
    Ok(())
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

/// Split a request into its route, or say why it has none.
fn route(method: &Method, path: &str, query: Option<&str>) -> Result<Route, Reject> {
    if path == "/metrics" {
        return if method == Method::GET || method == Method::HEAD {
            Ok(Route::Metrics)
        } else {
            Err(Reject::Method("GET, HEAD"))
        };
    }
    let rest = path.strip_prefix('/').ok_or(Reject::NotFound)?;
    if let Some(repo) = rest.strip_suffix("/info/refs") {
        if method != Method::GET && method != Method::HEAD {
            return Err(Reject::Method("GET, HEAD"));
        }
        let service = query
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix("service="))
            .unwrap_or("");
        let service = Service::from_name(service)
            .ok_or_else(|| Reject::UnsupportedService(service.chars().take(64).collect()))?;
        return Ok(Route::InfoRefs {
            repo: repo.to_owned(),
            service,
        });
    }
    for service in [Service::ReceivePack, Service::UploadPack] {
        if let Some(repo) = rest
            .strip_suffix(service.name())
            .and_then(|r| r.strip_suffix('/'))
        {
            if method != Method::POST {
                return Err(Reject::Method("POST"));
            }
            return Ok(Route::Rpc {
                repo: repo.to_owned(),
                service,
            });
        }
    }
    Err(Reject::NotFound)
}

/// Percent-decode a URL path; `None` if it is not valid UTF-8 or has a bad escape.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Where a repository name leads under the root.
#[derive(Debug)]
enum Resolved {
    /// An existing git directory (canonical, under the root).
    Repo(PathBuf),
    /// Nothing there yet; the path a new repository would take.
    Missing(PathBuf),
}

/// The relative path a URL's repository part names: decoded, no empty, `.` or `..` segments,
/// so never absolute and never upwards.
fn relative_path(repo: &str) -> Result<PathBuf, Reject> {
    let name = percent_decode(repo).ok_or(Reject::BadPath("bad escape or not UTF-8"))?;
    if name.is_empty() {
        return Err(Reject::BadPath("empty"));
    }
    let mut rel = PathBuf::new();
    for seg in name.split('/') {
        match seg {
            "" => return Err(Reject::BadPath("absolute or empty segment")),
            "." | ".." => return Err(Reject::BadPath("'.' or '..' segment")),
            s if s.contains('\0') || s.contains('\\') => {
                return Err(Reject::BadPath("NUL or backslash"));
            }
            s => rel.push(s),
        }
    }
    Ok(rel)
}

/// Whether `p` is a git directory (as git's `is_git_directory`, without following `.git` files).
fn is_git_dir(p: &Path) -> bool {
    p.join("HEAD").is_file() && p.join("objects").is_dir() && p.join("refs").is_dir()
}

/// Resolve `repo` (from the URL) under `root` (canonical) as git's `enter_repo` tries names:
/// `<p>/.git`, `<p>`, `<p>.git/.git`, `<p>.git`. Every existing candidate is canonicalized and
/// must stay under the root, so a symlink cannot lead out of it.
fn resolve(root: &Path, repo: &str) -> Result<Resolved, Reject> {
    let rel = relative_path(repo)?;
    let base = root.join(&rel);
    let with_git = {
        let mut s = base.clone().into_os_string();
        s.push(".git");
        PathBuf::from(s)
    };
    let candidates = [
        base.join(".git"),
        base.clone(),
        with_git.join(".git"),
        with_git,
    ];
    for c in &candidates {
        if std::fs::symlink_metadata(c).is_err() {
            continue;
        }
        let canon = c.canonicalize().map_err(|_| Reject::Escapes)?;
        if !canon.starts_with(root) {
            return Err(Reject::Escapes);
        }
        if canon.is_dir() && is_git_dir(&canon) {
            return Ok(Resolved::Repo(canon));
        }
    }
    // Nothing usable exists: check that a new repository there would stay under the root and
    // not land inside another repository.
    let mut ancestor = base.parent();
    while let Some(a) = ancestor {
        if a.exists() {
            let canon = a.canonicalize().map_err(|_| Reject::Escapes)?;
            if !canon.starts_with(root) {
                return Err(Reject::Escapes);
            }
            break;
        }
        ancestor = a.parent();
    }
    let mut a = base.parent();
    while let Some(p) = a {
        if !p.starts_with(root) || p == root {
            break;
        }
        if is_git_dir(p) {
            return Err(Reject::NotARepository(repo.to_owned()));
        }
        a = p.parent();
    }
    if std::fs::symlink_metadata(&base).is_ok() {
        // Something that is not a repository is in the way.
        return Err(Reject::NotARepository(repo.to_owned()));
    }
    Ok(Resolved::Missing(base))
}

impl Server {
    /// The repository for `repo`, creating it when this is a push and auto-init is on.
    async fn repository(&self, repo: &str, service: Service) -> Result<PathBuf, Reject> {
        let resolved = resolve(&self.root, repo)?;
        let path = match resolved {
            Resolved::Repo(p) => return Ok(p),
            Resolved::Missing(p) => p,
        };
        if !(self.auto_init && service == Service::ReceivePack && repo.ends_with(".git")) {
            return Err(Reject::NotARepository(repo.to_owned()));
        }
        let _guard = self.init_lock.lock().await;
        // Another request may have created it meanwhile.
        if let Resolved::Repo(p) = resolve(&self.root, repo)? {
            return Ok(p);
        }
        let parent = path.parent().unwrap_or(&self.root).to_owned();
        std::fs::create_dir_all(&parent).map_err(|e| Reject::Init(e.to_string()))?;
        let out = tokio::process::Command::new("git")
            .args(["init", "--quiet", "--bare"])
            .arg(&path)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| Reject::Init(format!("cannot run git init: {e}")))?;
        if !out.status.success() {
            // The details name server paths: for the log, not the client.
            tracing::warn!(
                target: "berth::serve",
                repo,
                stderr = %String::from_utf8_lossy(&out.stderr).trim(),
                "git init --bare failed"
            );
            return Err(Reject::Init("git init --bare failed".into()));
        }
        tracing::info!(target: "berth::serve", repo, path = %path.display(), "created repository");
        match resolve(&self.root, repo)? {
            Resolved::Repo(p) => Ok(p),
            Resolved::Missing(_) => Err(Reject::Init("repository vanished after init".into())),
        }
    }

    /// Who is pushing, or why they may not.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Identity, Reject> {
        if let Some(h) = &self.trusted_user_header
            && let Some(v) = headers.get(h)
        {
            return match v.to_str() {
                Ok(u) if !u.trim().is_empty() => Ok(Identity::User(u.trim().to_owned())),
                _ => Err(Reject::Unauthorized),
            };
        }
        if let Some(creds) = &self.credentials
            && let Some(v) = headers.get(header::AUTHORIZATION)
        {
            let (user, password) = parse_basic(v).ok_or(Reject::Unauthorized)?;
            let creds = creds.clone();
            let name = user.clone();
            // argon2 takes tens of milliseconds of CPU: off the async threads.
            let ok = tokio::task::spawn_blocking(move || creds.verify(&name, &password))
                .await
                .unwrap_or(false);
            return if ok {
                Ok(Identity::User(user))
            } else {
                Err(Reject::Unauthorized)
            };
        }
        if self.anonymous {
            Ok(Identity::Anonymous)
        } else {
            Err(Reject::Unauthorized)
        }
    }
}

/// `Authorization: Basic <base64(user:password)>` → `(user, password)`.
fn parse_basic(v: &HeaderValue) -> Option<(String, String)> {
    use base64::Engine;
    let v = v.to_str().ok()?;
    let (scheme, rest) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (u, p) = s.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

/// The `Git-Protocol` header's value, if it is usable as `GIT_PROTOCOL`.
fn git_protocol(headers: &HeaderMap) -> Option<String> {
    let v = headers.get("git-protocol")?.to_str().ok()?;
    // git-http-backend passes it through; keep it to the characters git itself sends.
    v.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b":=._-".contains(&b))
        .then(|| v.to_owned())
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
    let routed = route(&method, &path, query.as_deref());
    let (route_name, repo) = match &routed {
        Ok(Route::InfoRefs { repo, .. }) => ("info-refs", repo.clone()),
        Ok(Route::Rpc {
            repo,
            service: Service::ReceivePack,
        }) => ("receive-pack", repo.clone()),
        Ok(Route::Rpc { repo, .. }) => ("upload-pack", repo.clone()),
        Ok(Route::Metrics) => ("metrics", String::new()),
        Err(_) => ("other", path.chars().take(200).collect()),
    };
    let access = Arc::new(Access {
        start: Instant::now(),
        method,
        route: route_name,
        repo,
        remote,
        user: Mutex::new("-".into()),
        status: AtomicU16::new(0),
        bytes_in: AtomicU64::new(0),
        bytes_out: AtomicU64::new(0),
        too_large: Default::default(),
        outcome: Mutex::new(None),
        push: Mutex::new(None),
        metrics: server.metrics.clone(),
    });
    let result = match routed {
        Ok(Route::Metrics) => Ok(metrics_response(&server)),
        Ok(r) => serve_git(&server, r, remote, req, &access).await,
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

fn metrics_response(server: &Server) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        server.metrics.render(),
    )
        .into_response()
}

async fn serve_git(
    server: &Arc<Server>,
    route: Route,
    remote: SocketAddr,
    req: Request,
    access: &Arc<Access>,
) -> Result<Response, Reject> {
    let (repo, service, rpc) = match route {
        Route::InfoRefs { repo, service } => (repo, service, false),
        Route::Rpc { repo, service } => (repo, service, true),
        Route::Metrics => return Err(Reject::NotFound),
    };
    let headers = req.headers().clone();
    let identity = if service == Service::ReceivePack {
        let id = server.authenticate(&headers).await?;
        access.set_user(id.name());
        Some(id)
    } else {
        None
    };
    let dir = server.repository(&repo, service).await?;
    let dir = dir
        .to_str()
        .ok_or(Reject::NotARepository(repo.clone()))?
        .to_owned();
    let protocol = git_protocol(&headers);
    let version = protocol
        .as_deref()
        .map(receive::protocol_version)
        .unwrap_or(0);

    if !rpc {
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
                upload_pack(dir, true, protocol, None, content_type, preamble, access).await
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
    let body = body_reader(req.into_body(), server, access);
    let result_type = format!("application/x-{}-result", service.name());
    match service {
        Service::ReceivePack => {
            let user = identity.unwrap_or(Identity::Anonymous);
            let host = remote.ip().to_string();
            let email = format!("{}@http.{host}", user.name());
            let options = receive::Options {
                stateless_rpc: true,
                protocol_version: version,
                hook_env: hook_env(&user, &host, &email, protocol.as_deref()),
                env: receive::Environment {
                    committer_name: Some(user.name().to_owned()),
                    committer_email: Some(email),
                    ..server.env.clone()
                },
                ..Default::default()
            };
            // Wait for a push slot; the permit travels with the blocking session.
            let permit = server
                .pushes
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| Reject::Internal("server shutting down".into()))?;
            let metrics = server.metrics.clone();
            metrics.pushes_in_flight.fetch_add(1, Ordering::Relaxed);
            let guard = InFlight {
                metrics,
                _permit: permit,
            };
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
            upload_pack(dir, false, protocol, Some(body), &result_type, None, access).await
        }
    }
}

/// What git-http-backend's hooks find in their environment, from the web server's CGI
/// variables and its own setup: `REMOTE_USER` (only when authenticated), `REMOTE_ADDR`,
/// `GIT_PROTOCOL` (the `Git-Protocol` header), and the reflog identity as
/// `GIT_COMMITTER_NAME`/`GIT_COMMITTER_EMAIL`.
fn hook_env(
    user: &Identity,
    remote_addr: &str,
    email: &str,
    protocol: Option<&str>,
) -> Vec<(String, gix_object::bstr::BString)> {
    let mut env = Vec::new();
    if let Identity::User(u) = user {
        env.push(("REMOTE_USER".to_owned(), u.as_str().into()));
    }
    env.push(("REMOTE_ADDR".to_owned(), remote_addr.into()));
    if let Some(p) = protocol {
        env.push(("GIT_PROTOCOL".to_owned(), p.into()));
    }
    env.push(("GIT_COMMITTER_NAME".to_owned(), user.name().into()));
    env.push(("GIT_COMMITTER_EMAIL".to_owned(), email.into()));
    env
}

/// A push slot and the in-flight gauge, released when the push session ends.
struct InFlight {
    metrics: Arc<Metrics>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics
            .pushes_in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request body as an `AsyncRead`: gzip already inflated by the decompression layer, counted
/// against `--max-request-bytes`, and abandoned when the client stalls past `--idle-timeout`.
type BodyReader = StreamReader<
    std::pin::Pin<Box<dyn futures_util::Stream<Item = io::Result<Bytes>> + Send>>,
    Bytes,
>;

fn body_reader(body: Body, server: &Server, access: &Arc<Access>) -> BodyReader {
    let max = server.max_request_bytes;
    let idle = server.idle_timeout;
    let access = access.clone();
    let stream = body.into_data_stream();
    let s = futures_util::stream::unfold(Some((stream, 0u64)), move |state| {
        let access = access.clone();
        async move {
            let (mut stream, mut n) = state?;
            match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => {
                    access.set_outcome("request body idle too long");
                    Some((
                        Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "request body idle too long",
                        )),
                        None,
                    ))
                }
                Ok(None) => None,
                Ok(Some(Err(e))) => Some((Err(io::Error::other(e)), None)),
                Ok(Some(Ok(b))) => {
                    n += b.len() as u64;
                    access.bytes_in.store(n, Ordering::Relaxed);
                    if n > max {
                        access.too_large.store(true, Ordering::Relaxed);
                        access.set_outcome(format!("request body larger than {max} bytes"));
                        Some((
                            Err(io::Error::other(format!(
                                "request body larger than {max} bytes"
                            ))),
                            None,
                        ))
                    } else {
                        Some((Ok(b), Some((stream, n))))
                    }
                }
            }
        }
    });
    StreamReader::new(Box::pin(s))
}

/// The session's output, handed to the response body chunk by chunk as it is written.
struct ChannelWriter {
    tx: mpsc::Sender<Bytes>,
    access: Arc<Access>,
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.tx
            .blocking_send(Bytes::copy_from_slice(buf))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "client went away"))?;
        self.access
            .bytes_out
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What the session writes to its stderr (messages git would print on the server), kept for
/// the log up to a bound.
#[derive(Default)]
struct Capped(Vec<u8>);

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = (64 * 1024usize).saturating_sub(self.0.len());
        self.0.extend_from_slice(&buf[..buf.len().min(room)]);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A 200 response with git's no-cache headers whose body is `head` then `rest`; `access` is
/// held until the body is done, so the log line has the whole request.
fn streaming_response(
    content_type: &str,
    head: Vec<Bytes>,
    rest: impl futures_util::Stream<Item = io::Result<Bytes>> + Send + 'static,
    access: Arc<Access>,
) -> Response {
    let body = futures_util::stream::iter(head.into_iter().map(Ok))
        .chain(rest)
        .chain(futures_util::stream::once(async move {
            drop(access);
            Ok(Bytes::new())
        }));
    let mut r = Response::new(Body::from_stream(body));
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    for (k, v) in NO_CACHE {
        h.insert(k, HeaderValue::from_static(v));
    }
    r
}

/// Run a receive-pack session on a blocking thread with `input` as its request, and answer
/// with its output as it comes. The status is decided by the first output: a session that
/// fails before writing anything is a 500 (413 when the body was over the limit), as
/// git-http-backend's `die()` before the headers.
async fn run_session(
    dir: String,
    options: receive::Options,
    input: Option<BodyReader>,
    content_type: &str,
    preamble: Option<Bytes>,
    access: Arc<Access>,
    slot: Option<InFlight>,
) -> Response {
    let (tx, mut rx) = mpsc::channel::<Bytes>(8);
    let (done_tx, done_rx) = oneshot::channel::<Result<(), String>>();
    let input = input.map(SyncIoBridge::new);
    let dir_shown = dir.clone();
    let task_access = access.clone();
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let writer = ChannelWriter {
            tx,
            access: task_access.clone(),
        };
        let mut stderr = Capped::default();
        let result = match input {
            Some(r) => receive::run(&dir, &options, r, writer, &mut stderr),
            None => receive::run(&dir, &options, io::empty(), writer, &mut stderr),
        };
        let msg = String::from_utf8_lossy(&stderr.0);
        if !msg.trim().is_empty() {
            tracing::debug!(target: "berth::serve", repo = %task_access.repo, stderr = %msg.trim(), "session stderr");
        }
        match &result {
            Ok(outcome) => task_access.set_push(outcome),
            Err(e) => task_access.set_outcome(format!("fatal: {e}")),
        }
        let _ = done_tx.send(result.map(drop).map_err(|e| e.to_string()));
    });
    match rx.recv().await {
        Some(first) => {
            let head = preamble.into_iter().chain(Some(first)).collect();
            let rest = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|b| (Ok(b), rx))
            });
            streaming_response(content_type, head, rest, access)
        }
        None => match done_rx.await {
            Ok(Ok(())) => streaming_response(
                content_type,
                preamble.into_iter().collect(),
                futures_util::stream::empty(),
                access,
            ),
            Ok(Err(_)) if access.too_large.load(Ordering::Relaxed) => Reject::TooLarge.response(),
            // As the client named it, not as the server's file system does.
            Ok(Err(e)) => {
                Reject::Internal(format!("fatal: {}", e.replace(&dir_shown, &access.repo)))
                    .response()
            }
            Err(_) => Reject::Internal("push session failed".into()).response(),
        },
    }
}

/// Run `git upload-pack --stateless-rpc [--advertise-refs] <dir>` with the request on its stdin
/// and its stdout streamed back: berth implements the receive side only.
async fn upload_pack(
    dir: String,
    advertise: bool,
    protocol: Option<String>,
    body: Option<BodyReader>,
    content_type: &str,
    preamble: Option<Bytes>,
    access: &Arc<Access>,
) -> Result<Response, Reject> {
    use std::process::Stdio;
    let mut cmd = tokio::process::Command::new("git");
    cmd.args(["upload-pack", "--stateless-rpc"]);
    if advertise {
        cmd.arg("--advertise-refs");
    }
    cmd.arg(&dir)
        .stdin(if body.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match &protocol {
        Some(p) => cmd.env("GIT_PROTOCOL", p),
        None => cmd.env_remove("GIT_PROTOCOL"),
    };
    let mut child = cmd
        .spawn()
        .map_err(|e| Reject::Internal(format!("cannot run git upload-pack: {e}")))?;
    if let (Some(mut body), Some(mut stdin)) = (body, child.stdin.take()) {
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut body, &mut stdin).await;
            let _ = stdin.shutdown().await;
        });
    }
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Reject::Internal("git upload-pack has no stdout".into()))?;
    let stderr = child.stderr.take();
    let stderr_task = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = Vec::new();
        if let Some(e) = stderr {
            let _ = e.take(64 * 1024).read_to_end(&mut buf).await;
        }
        String::from_utf8_lossy(&buf).trim().to_owned()
    });
    let mut out = ReaderStream::with_capacity(stdout, 64 * 1024);
    match out.next().await {
        Some(Ok(first)) => {
            let a = access.clone();
            tokio::spawn(async move {
                let status = child.wait().await;
                let err = stderr_task.await.unwrap_or_default();
                if !status.map(|s| s.success()).unwrap_or(false) {
                    a.set_outcome(format!("git upload-pack failed: {err}"));
                }
            });
            let counter = access.clone();
            let rest = out.map(move |r| {
                if let Ok(b) = &r {
                    counter
                        .bytes_out
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                }
                r
            });
            access
                .bytes_out
                .fetch_add(first.len() as u64, Ordering::Relaxed);
            let head = preamble.into_iter().chain(Some(first)).collect();
            Ok(streaming_response(content_type, head, rest, access.clone()))
        }
        _ => {
            let status = child.wait().await;
            let err = stderr_task.await.unwrap_or_default();
            if status.map(|s| s.success()).unwrap_or(false) {
                Ok(streaming_response(
                    content_type,
                    preamble.into_iter().collect(),
                    futures_util::stream::empty(),
                    access.clone(),
                ))
            } else if access.too_large.load(Ordering::Relaxed) {
                Err(Reject::TooLarge)
            } else {
                Err(Reject::Internal(format!("git upload-pack failed: {err}")))
            }
        }
    }
}
