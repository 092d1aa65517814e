//! `berth serve --ssh-listen`: git over ssh from the same process as smart HTTP, on russh.
//!
//! A connection authenticates with a public key only; the key, found in a gitolite-style keydir
//! (`keys.rs`), decides the user, whatever user name the client gave. A session channel may then
//! run one exec request: `git-receive-pack '<path>'` (berth's own push session, in-process, as
//! for HTTP), `git-upload-pack '<path>'` (git's `git upload-pack`, with the client's
//! `GIT_PROTOCOL` environment request), or `info`; a shell request gets the `info` greeting.
//! Everything else (ptys, subsystems, port and agent forwarding, X11, other commands) is
//! refused. Paths resolve under the root exactly as HTTP URLs do ([`super::repos::resolve`]),
//! and every access decision goes through `access.rs`.
//!
//! With `--cluster`, a git command is routed as HTTP routes the same repository: on a current
//! replica it runs here ([`session`]; a push with the cluster's commit gate, so it is
//! replicated), else `tunnel.rs` runs it on a replica and relays its bytes unchanged (the
//! first live replica, in the recorded order, that is current and answers). A replica behind
//! the log runs no command (each starts with the refs' advertisement): a tunneled one it
//! refuses, so that the forwarding node tries the next; one of its own clients it tunnels to
//! another replica, or, when none is live, refuses with "behind the repository's log".
//!
//! Limits: a connection must authenticate within `auth_timeout` (or is dropped), a connection
//! silent in both directions for `idle_timeout` is dropped, at most `max_connections` connections
//! are served at once (more are closed at accept), and pushes share HTTP's slots, request-size
//! limit and idle limit on the pushed data. A client that goes away mid-push ends its session
//! like any failed push: the quarantine is removed.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::{Method, StatusCode};
use bytes::Bytes;
use russh::server::{Auth, Handler, Msg, Session};
use russh::{Channel, ChannelId, ChannelMsg, ChannelOpenFailure, ChannelReadHalf};
use tokio::sync::{Notify, mpsc};
use tokio_util::io::SyncIoBridge;

use super::body::{BodyReader, Bounds, Wording};
use super::push::Replicated;
use super::repos::is_git_dir;
use super::repos::{self, Resolved};
use super::{Access, Error, Identity, Reject, Server, Service};
use crate::cluster::{self, Cluster};
use crate::receive;
use crate::repo::Name;

mod access;
mod admission;
mod command;
mod keys;
mod tunnel;

pub(super) use tunnel::tunneled;

use super::Escaped;
use access::{Denied, Op, authorize};
use command::Command;

/// How the ssh side of `berth serve` is configured.
#[derive(Debug, Clone)]
pub struct SshConfig {
    /// The address to listen on (`host:port`; port 0 picks a free one).
    pub listen: String,
    /// The host key: read if it exists, else an ed25519 key is created there (mode 0600).
    pub host_key: PathBuf,
    /// The users' public keys, gitolite's keydir: `<user>.pub`, `<user>@<any>.pub`.
    pub keydir: PathBuf,
    /// How long a connection may take to authenticate.
    pub auth_timeout: Duration,
    /// How many connections are served at once; more are closed when accepted (after cutting
    /// off the one that has waited longest without authenticating, if any).
    pub max_connections: usize,
    /// How many connections from one address (IPv4, or IPv6 /64) are served at once; `None`
    /// for half of `max_connections`, `Some(0)` for no cap.
    pub max_connections_per_address: Option<usize>,
    /// Told the address and host key once the ssh socket listens (the binary prints them).
    pub on_listening: OnSshListening,
}

/// What `berth serve` tells its caller when the ssh side listens.
#[derive(Debug, Clone)]
pub struct SshListening {
    /// The bound address.
    pub addr: SocketAddr,
    /// The host key's `known_hosts` line for that address (`[ip]:port ssh-ed25519 AAAA…`).
    pub known_hosts: String,
    /// The host key's SHA-256 fingerprint, as `ssh-keygen -l` shows it.
    pub fingerprint: String,
    /// Whether the host key was created by this start.
    pub host_key_created: bool,
}

/// A callback for [`SshListening`] (the library itself prints nothing).
#[derive(Clone)]
pub struct OnSshListening(pub Arc<dyn Fn(&SshListening) + Send + Sync>);

impl std::fmt::Debug for OnSshListening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnSshListening")
    }
}

/// The ssh side's shared state.
struct State {
    server: Arc<Server>,
    keydir: Arc<keys::Keydir>,
    russh: Arc<russh::server::Config>,
    auth_timeout: Duration,
    connections: Arc<admission::Admission>,
    /// Commands running now, and a wake-up when one ends (for shutdown).
    commands: AtomicUsize,
    command_ended: Notify,
}

/// The running ssh listener.
pub(super) struct Running {
    accept: tokio::task::JoinHandle<()>,
    state: Arc<State>,
}

impl Running {
    /// Stop accepting connections and wait for the commands in flight (pushes, fetches) to end.
    pub(super) async fn shutdown(self) {
        self.accept.abort();
        loop {
            let ended = self.state.command_ended.notified();
            if self.state.commands.load(Ordering::SeqCst) == 0 {
                break;
            }
            ended.await;
        }
    }
}

/// Load the keys, bind the socket, announce it, and accept connections in the background.
pub(super) async fn start(server: Arc<Server>, cfg: &SshConfig) -> Result<Running, Error> {
    let (host_key, created) = keys::host_key(&cfg.host_key).map_err(Error::Ssh)?;
    let keydir = keys::Keydir::open(&cfg.keydir).map_err(Error::Ssh)?;
    let addrs = super::resolve_listen(&cfg.listen)?;
    let listener = super::bind(&addrs, &cfg.listen).await?;
    let local = listener.local_addr().map_err(Error::Serve)?;
    let public = host_key.public_key().clone();
    let russh = russh::server::Config {
        server_id: russh::SshId::Standard("SSH-2.0-berth".into()),
        methods: russh::MethodSet::from(&[russh::MethodKind::PublicKey][..]),
        // Public-key probes are answered at once; a failed signature waits, as sshd's.
        auth_rejection_time: Duration::from_millis(300),
        auth_rejection_time_initial: Some(Duration::ZERO),
        max_auth_attempts: 6,
        keys: vec![host_key],
        inactivity_timeout: Some(server.idle_timeout),
        nodelay: true,
        ..Default::default()
    };
    let state = Arc::new(State {
        server,
        keydir,
        russh: Arc::new(russh),
        auth_timeout: cfg.auth_timeout,
        connections: admission::Admission::new(
            cfg.max_connections,
            cfg.max_connections_per_address,
        ),
        commands: AtomicUsize::new(0),
        command_ended: Notify::new(),
    });
    tracing::info!(
        target: "berth::serve",
        listen = %local,
        keydir = %cfg.keydir.display(),
        "serving ssh"
    );
    (cfg.on_listening.0)(&SshListening {
        addr: local,
        known_hosts: keys::known_hosts_line(local, &public),
        fingerprint: public.fingerprint(russh::keys::HashAlg::Sha256).to_string(),
        host_key_created: created,
    });
    let accept = tokio::spawn(accept_loop(listener, state.clone()));
    Ok(Running { accept, state })
}

async fn accept_loop(listener: tokio::net::TcpListener, state: Arc<State>) {
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!(target: "berth::serve", error = %e, "ssh accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let admitted = match state.connections.admit(peer.ip()).await {
            Ok(a) => a,
            Err(why) => {
                tracing::warn!(target: "berth::serve", remote = %peer.ip(), "ssh connection refused: {why}");
                drop(sock);
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            connection(state, sock, peer, admitted).await;
        });
    }
}

/// One connection, from the version exchange to its end; dropped if it has not authenticated
/// within the auth timeout.
async fn connection(
    state: Arc<State>,
    sock: tokio::net::TcpStream,
    peer: SocketAddr,
    admitted: admission::Admitted,
) {
    // A second handle on the socket, to cut it off whatever state the protocol is in.
    let (sock, killer) = match sock.into_std().and_then(|s| {
        let k = s.try_clone()?;
        Ok((tokio::net::TcpStream::from_std(s)?, Arc::new(k)))
    }) {
        Ok(x) => x,
        Err(_) => return,
    };
    let authed = Arc::new(AtomicBool::new(false));
    // Until it authenticates, the connection may be cut off to make room for another.
    admitted.watch(killer.clone(), authed.clone());
    let (closed_tx, closed) = tokio::sync::watch::channel(false);
    let conn = Conn {
        state: state.clone(),
        peer,
        user: None,
        authed: authed.clone(),
        channels: HashMap::new(),
        closed,
        refused_key_logged: false,
    };
    let timeout = state.auth_timeout;
    let watchdog = tokio::spawn(async move {
        tokio::time::sleep(timeout).await;
        if !authed.load(Ordering::SeqCst) {
            tracing::info!(target: "berth::serve", remote = %peer.ip(), "ssh authentication timeout");
            let _ = killer.shutdown(std::net::Shutdown::Both);
        }
    });
    match russh::server::run_stream(state.russh.clone(), sock, conn).await {
        Ok(session) => {
            if let Err(e) = session.await {
                tracing::debug!(target: "berth::serve", remote = %peer.ip(), error = %e, "ssh connection ended");
            }
        }
        Err(e) => {
            tracing::debug!(target: "berth::serve", remote = %peer.ip(), error = %e, "ssh handshake failed");
        }
    }
    watchdog.abort();
    // Commands still writing to this connection stop waiting for it.
    let _ = closed_tx.send(true);
}

/// A session channel that has not run its command yet.
struct Pending {
    channel: Channel<Msg>,
    /// `GIT_PROTOCOL` from an env request.
    protocol: Option<String>,
    /// Requests and data seen before the command: bounded, since russh queues them for the
    /// channel until someone reads it.
    seen: usize,
}

const MAX_PENDING_MESSAGES: usize = 64;
const MAX_CHANNELS: usize = 8;

/// One connection's protocol handler.
struct Conn {
    state: Arc<State>,
    peer: SocketAddr,
    user: Option<String>,
    authed: Arc<AtomicBool>,
    channels: HashMap<ChannelId, Pending>,
    /// Becomes true when the connection has ended.
    closed: tokio::sync::watch::Receiver<bool>,
    /// Whether a key not in the keydir was logged already (once per connection: a client
    /// offers each key of its agent in turn).
    refused_key_logged: bool,
}

impl Conn {
    /// Count a message on a channel that has no command yet; close it past the bound.
    fn bump(&mut self, id: ChannelId, session: &mut Session) -> Result<(), russh::Error> {
        if let Some(p) = self.channels.get_mut(&id) {
            p.seen += 1;
            if p.seen > MAX_PENDING_MESSAGES {
                self.channels.remove(&id);
                session.close(id)?;
            }
        }
        Ok(())
    }

    /// Refuse a request on `id` with a message on the client's stderr and exit status 1.
    fn refuse(
        &mut self,
        id: ChannelId,
        msg: &str,
        session: &mut Session,
    ) -> Result<(), russh::Error> {
        tracing::info!(
            target: "berth::serve",
            remote = %self.peer.ip(),
            user = %Escaped::token(self.user.as_deref().unwrap_or("-")),
            refused = %Escaped::text(msg),
            "ssh request refused"
        );
        self.channels.remove(&id);
        session.channel_success(id)?;
        session.extended_data(id, 1, Bytes::from(format!("berth: {msg}\n")))?;
        session.exit_status_request(id, 1)?;
        session.eof(id)?;
        session.close(id)
    }

    async fn accept_key(&self, key: &russh::keys::PublicKey) -> Option<String> {
        self.state.keydir.user(key).await
    }
}

impl Handler for Conn {
    type Error = russh::Error;

    async fn auth_publickey_offered(
        &mut self,
        user: &str,
        offer: russh::server::PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(match self.accept_key(offer.public_key).await {
            Some(_) => Auth::Accept,
            None => {
                // The operator's clue when a user's key is missing: its fingerprint, never the
                // key itself.
                if !self.refused_key_logged {
                    self.refused_key_logged = true;
                    tracing::info!(
                        target: "berth::serve",
                        remote = %self.peer.ip(),
                        login = %Escaped::token(user),
                        key = %offer.public_key.fingerprint(russh::keys::HashAlg::Sha256),
                        "ssh key not in the keydir; refused (more keys this connection offers are not logged)"
                    );
                }
                Auth::reject()
            }
        })
    }

    async fn auth_publickey(
        &mut self,
        login: &str,
        key: russh::server::VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        match self.accept_key(key.public_key).await {
            Some(user) => {
                tracing::debug!(
                    target: "berth::serve",
                    remote = %self.peer.ip(),
                    user = %user,
                    login = %Escaped::token(login),
                    key = %key.public_key.fingerprint(russh::keys::HashAlg::Sha256),
                    "ssh authenticated"
                );
                self.user = Some(user);
                self.authed.store(true, Ordering::SeqCst);
                Ok(Auth::Accept)
            }
            None => Ok(Auth::reject()),
        }
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: russh::server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        if self.user.is_none() || self.channels.len() >= MAX_CHANNELS {
            reply.reject(ChannelOpenFailure::ResourceShortage).await;
            return Ok(());
        }
        reply.accept().await;
        self.channels.insert(
            channel.id(),
            Pending {
                channel,
                protocol: None,
                seen: 0,
            },
        );
        Ok(())
    }

    async fn channel_open_direct_tcpip(
        &mut self,
        _channel: Channel<Msg>,
        host: &str,
        port: u32,
        _originator_address: &str,
        _originator_port: u32,
        reply: russh::server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        tracing::info!(target: "berth::serve", remote = %self.peer.ip(), host = %Escaped::token(host), port, "ssh port forwarding refused");
        reply
            .reject(ChannelOpenFailure::AdministrativelyProhibited)
            .await;
        Ok(())
    }

    async fn channel_close(
        &mut self,
        channel: ChannelId,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.channels.remove(&channel);
        Ok(())
    }

    async fn data(
        &mut self,
        channel: ChannelId,
        _data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.bump(channel, session)
    }

    async fn env_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        value: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.bump(channel, session)?;
        let ok = name == "GIT_PROTOCOL" && valid_git_protocol(value);
        match self.channels.get_mut(&channel) {
            Some(p) if ok => {
                p.protocol = Some(value.to_owned());
                session.channel_success(channel)
            }
            _ => session.channel_failure(channel),
        }
    }

    async fn pty_request(
        &mut self,
        channel: ChannelId,
        _term: &str,
        _col_width: u32,
        _row_height: u32,
        _pix_width: u32,
        _pix_height: u32,
        _modes: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        // The client says "PTY allocation request failed" and goes on (as with gitolite).
        self.bump(channel, session)?;
        session.channel_failure(channel)
    }

    async fn x11_request(
        &mut self,
        channel: ChannelId,
        _single_connection: bool,
        _x11_auth_protocol: &str,
        _x11_auth_cookie: &str,
        _x11_screen_number: u32,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.bump(channel, session)?;
        session.channel_failure(channel)
    }

    async fn subsystem_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let name: String = name.chars().take(64).collect();
        tracing::info!(target: "berth::serve", remote = %self.peer.ip(), subsystem = %Escaped::token(&name), "ssh subsystem refused");
        self.channels.remove(&channel);
        session.extended_data(
            channel,
            1,
            Bytes::from(format!(
                "berth: subsystem '{name}' refused: this server runs only git commands\n"
            )),
        )?;
        session.channel_failure(channel)
    }

    async fn shell_request(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.start(channel, Command::Info, session)
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        match command::parse(data) {
            Ok(cmd) => self.start(channel, cmd, session),
            Err(command::Refused(msg)) => self.refuse(channel, &msg, session),
        }
    }
}

impl Conn {
    /// Run `cmd` on the channel in its own task.
    fn start(
        &mut self,
        id: ChannelId,
        cmd: Command,
        session: &mut Session,
    ) -> Result<(), russh::Error> {
        let (Some(pending), Some(user)) = (self.channels.remove(&id), self.user.clone()) else {
            return session.channel_failure(id);
        };
        session.channel_success(id)?;
        let state = self.state.clone();
        let peer = self.peer;
        let closed = self.closed.clone();
        state.commands.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let Pending {
                channel, protocol, ..
            } = pending;
            let conn = Peer { addr: peer, closed };
            run_command(&state, channel, user, conn, protocol, cmd).await;
            state.commands.fetch_sub(1, Ordering::SeqCst);
            state.command_ended.notify_waiters();
        });
        Ok(())
    }
}

/// Output for the client, in program order: `(stderr?, bytes)`.
type Out = mpsc::Sender<(bool, Bytes)>;

/// Whether `value` may be passed on as `GIT_PROTOCOL` (what git itself sends).
fn valid_git_protocol(value: &str) -> bool {
    value.len() <= 256
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b":=._-".contains(&b))
}

/// What the client sends on a session: its data, then the end of its input, or nothing more
/// because it went away.
enum In {
    Data(Bytes),
    Eof,
    Gone,
}

/// A session's input, from an ssh channel here or from a tunnel (`tunnel.rs`).
type Source = std::pin::Pin<Box<dyn futures_util::Stream<Item = In> + Send>>;

/// The channel's data, up to its EOF or close.
fn channel_source(read: ChannelReadHalf) -> Source {
    Box::pin(futures_util::stream::unfold(
        Some(read),
        |read| async move {
            let mut read = read?;
            loop {
                return match read.wait().await {
                    Some(ChannelMsg::Data { data }) => Some((In::Data(data), Some(read))),
                    Some(ChannelMsg::Eof) => Some((In::Eof, None)),
                    Some(ChannelMsg::Close) | None => Some((In::Gone, None)),
                    Some(_) => continue,
                };
            }
        },
    ))
}

/// A git command to run: which, on what, for whom.
#[derive(Debug, Clone)]
struct Run {
    service: Service,
    /// The repository, as [`Name::from_ssh_path`] read the client's path.
    repo: Name,
    /// The user the key names.
    user: String,
    /// The client's address (for a tunneled session, the one the forwarding node saw).
    peer: SocketAddr,
    protocol: Option<String>,
}

/// Where a git command runs in cluster mode.
enum Where {
    /// Here (replicated when a push to a repository of the cluster), reading this node's copy
    /// of a repository of the cluster (held for the session).
    Here(Replicated, Option<cluster::Reading>),
    /// On the first of these live replicas (name, advertise URL) that can.
    Replica(Arc<Cluster>, Vec<(String, String)>),
}

/// Route `service` on `repo` as HTTP does ([`Cluster::route`]; a push places a new
/// repository): here when this node holds a current replica, or is not in a cluster.
async fn place(
    server: &Arc<Server>,
    repo: &Name,
    service: Service,
    forwarded: bool,
) -> Result<Where, Reject> {
    let Some(c) = server.cluster.get() else {
        return Ok(Where::Here(None, None));
    };
    let push = service == Service::ReceivePack;
    let (name, routed) = c
        .route(repo, push, forwarded, true)
        .await
        .map_err(|e| {
            tracing::warn!(target: "berth::cluster", repo = %repo, error = %Escaped::text(&e.to_string()), "cannot route an ssh command");
            match e {
                cluster::Error::TooFewNodes { .. } => Reject::Unavailable(e.to_string()),
                _ => Reject::Unavailable("no replica of the repository can serve it now".into()),
            }
        })?;
    Ok(match (name, routed) {
        (_, cluster::Route::Forward(replicas)) => Where::Replica(c.clone(), replicas),
        (_, cluster::Route::Behind(seq, applied)) => return Err(Reject::Behind(seq, applied)),
        (Some(name), cluster::Route::Local(Some(replicas))) => {
            let reading = Some(c.reading(&name));
            let replicated = push.then(|| (c.clone(), name, replicas));
            Where::Here(replicated, reading)
        }
        _ => Where::Here(None, None),
    })
}

/// Tell the client `fatal: <msg>` and fail the command (exit status 128).
async fn fatal(tx: &Out, access: &Access, status: StatusCode, msg: String) -> u32 {
    access.set_status(status);
    access.set_outcome(msg.clone());
    let _ = tx
        .send((true, Bytes::from(format!("fatal: {msg}\n"))))
        .await;
    128
}

/// Run `run` here: access checks, the repository (created by a push when allowed), then
/// berth's push session (with the cluster's commit gate when `replicated`) or git's
/// `upload-pack`. The same for a command of this node's ssh server and for one tunneled from
/// another node. The exit status.
async fn session(
    server: &Arc<Server>,
    run: &Run,
    replicated: Replicated,
    source: Source,
    tx: &Out,
    access: &Arc<Access>,
) -> u32 {
    match prepare(server, &run.user, &run.repo, run.service).await {
        Ok(dir) => match run.service {
            Service::ReceivePack => {
                receive_pack(server, dir, source, tx, run, replicated, access).await
            }
            Service::UploadPack => {
                // As over HTTP: a fetch slot (the server's and its address's), at most
                // --push-slot-timeout, then the client is told.
                let _slot = match server.slot(super::SlotKind::Fetch, run.peer.ip()).await {
                    Ok(s) => s,
                    Err(r) => return fatal(tx, access, r.status(), r.to_string()).await,
                };
                let env = &server.hook_environment;
                upload_pack(dir, source, tx, run.protocol.clone(), access, env).await
            }
        },
        Err(reject) => {
            // As git's own messages for a repository it cannot use.
            let status = match &reject {
                Refusal::Denied(_) => StatusCode::FORBIDDEN,
                Refusal::Reject(r) => r.status(),
            };
            fatal(tx, access, status, reject.to_string()).await
        }
    }
}

/// A blocking writer to the client's stdout or stderr.
struct OutWriter {
    tx: Out,
    stderr: bool,
    access: Arc<Access>,
}

impl Write for OutWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.tx
            .blocking_send((self.stderr, Bytes::copy_from_slice(buf)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "client went away"))?;
        if !self.stderr {
            self.access
                .bytes_out
                .fetch_add(buf.len() as u64, Ordering::Relaxed);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The client end of a command: its address, and whether its connection has ended.
struct Peer {
    addr: SocketAddr,
    closed: tokio::sync::watch::Receiver<bool>,
}

/// The access log's route name of `service`.
fn route_name(service: Service) -> &'static str {
    match service {
        Service::ReceivePack => "receive-pack",
        Service::UploadPack => "upload-pack",
    }
}

/// The access-log record of one ssh command.
fn new_access(
    server: &Server,
    route: &'static str,
    repo: &str,
    peer: SocketAddr,
    user: &str,
) -> Arc<Access> {
    let method = Method::from_bytes(b"SSH").unwrap_or(Method::GET);
    Access::new(&server.metrics, method, route, repo.to_owned(), peer, user)
}

/// Run one command to its end: output forwarded as it comes, then exit status, EOF, close.
async fn run_command(
    state: &Arc<State>,
    channel: Channel<Msg>,
    user: String,
    conn: Peer,
    protocol: Option<String>,
    cmd: Command,
) {
    let peer = conn.addr;
    let mut closed = conn.closed;
    let tunnel_closed = closed.clone();
    let idle = state.server.idle_timeout;
    let (route, repo, service) = match &cmd {
        Command::Git { service, repo } => {
            (route_name(*service), Some(repo.clone()), Some(*service))
        }
        Command::Info => ("info", None, None),
    };
    let access = new_access(
        &state.server,
        route,
        repo.as_ref().map_or("", Name::as_str),
        peer,
        &user,
    );
    let (read, write) = channel.split();
    let (tx, mut rx) = mpsc::channel::<(bool, Bytes)>(16);
    let fwd_access = access.clone();
    let forward = tokio::spawn(async move {
        while let Some((stderr, b)) = rx.recv().await {
            let send = async {
                if stderr {
                    write.extended_data_bytes(1, b).await
                } else {
                    write.data_bytes(b).await
                }
            };
            // A client that stops reading (its window stays shut) or whose connection ended
            // must not hold the session, its push slot and its quarantine.
            let sent = tokio::select! {
                r = send => r.is_ok(),
                _ = closed.wait_for(|c| *c) => false,
                _ = tokio::time::sleep(idle) => false,
            };
            if !sent {
                fwd_access.set_outcome("client went away");
                break;
            }
        }
        drop(rx);
        write
    });
    let code = match service {
        None => {
            let text = info(state.server.clone(), user).await;
            access.bytes_out.store(text.len() as u64, Ordering::Relaxed);
            let _ = tx.send((false, Bytes::from(text))).await;
            0
        }
        Some(service) => {
            let Some(repo) = repo else { return };
            let run = Run {
                service,
                repo,
                user,
                peer,
                protocol,
            };
            let source = channel_source(read);
            match place(&state.server, &run.repo, service, false).await {
                Ok(Where::Here(replicated, _reading)) => {
                    session(&state.server, &run, replicated, source, &tx, &access).await
                }
                Ok(Where::Replica(cluster, replicas)) => {
                    tunnel::forward(
                        &state.server,
                        &cluster,
                        &replicas,
                        &run,
                        source,
                        &tx,
                        tunnel_closed,
                        &access,
                    )
                    .await
                }
                Err(r) => fatal(&tx, &access, r.status(), r.to_string()).await,
            }
        }
    };
    if access.status.load(Ordering::Relaxed) == 0 {
        access.set_status(if code == 0 {
            StatusCode::OK
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        });
    }
    drop(tx);
    if let Ok(write) = forward.await {
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            let _ = write.exit_status(code).await;
            let _ = write.eof().await;
            let _ = write.close().await;
        })
        .await;
    }
}

/// Why a command was refused before any git ran.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("{}", .0.0)]
    Denied(Denied),
    #[error("{0}")]
    Reject(Reject),
}

/// Check access and resolve (or create) the repository, as HTTP does for the same path.
async fn prepare(
    server: &Arc<Server>,
    user: &str,
    repo: &Name,
    service: Service,
) -> Result<String, Refusal> {
    let op = match service {
        Service::UploadPack => Op::Read,
        Service::ReceivePack => {
            match repos::resolve(&server.root, repo).map_err(Refusal::Reject)? {
                Resolved::Repo(_) => Op::Write,
                Resolved::Missing(_) => Op::Create,
            }
        }
    };
    authorize(server, user, repo, op).map_err(Refusal::Denied)?;
    let who = Identity::User(user.to_owned());
    let dir = match server
        .target(repo, service, Some(&who))
        .map_err(Refusal::Reject)?
    {
        super::repos::Target::Repo(dir) => dir,
        super::repos::Target::Creatable(path) => {
            server.create(repo, &path).await.map_err(Refusal::Reject)?
        }
    };
    dir.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Refusal::Reject(Reject::NotARepository(repo.to_string())))
}

/// The client's data as a reader: ends at the client's EOF, fails if the client goes away
/// first; for a push (`bounds`), within the server's bounds as an HTTP body is (`body.rs`).
fn input(source: Source, bounds: Option<Bounds>, access: &Arc<Access>) -> BodyReader {
    use futures_util::StreamExt;
    let gone = access.clone();
    let data = source
        .scan(false, move |ended, msg| {
            let item = match msg {
                _ if *ended => None,
                In::Data(data) => Some(Ok(data)),
                In::Eof => None,
                In::Gone => {
                    *ended = true;
                    gone.set_outcome("client went away");
                    Some(Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "client went away",
                    )))
                }
            };
            std::future::ready(item)
        })
        .boxed();
    super::body::bounded(data, bounds, Wording::Ssh, access)
}

/// berth's push session on a blocking thread, fed from the channel.
async fn receive_pack(
    server: &Arc<Server>,
    dir: String,
    source: Source,
    tx: &Out,
    run: &Run,
    replicated: Replicated,
    access: &Arc<Access>,
) -> u32 {
    let user = Identity::User(run.user.clone());
    let push = super::push::Push {
        server,
        user: &user,
        peer: run.peer.ip(),
        transport: super::push::Transport::Ssh,
        protocol: run.protocol.as_deref(),
        repo: &run.repo,
        dir: &dir,
    };
    let options = push.options(replicated);
    // As over HTTP: at most --push-slot-timeout for a slot, then the client is told.
    let slot = match super::push::admit(server, run.peer.ip()).await {
        Ok(slot) => slot,
        Err(r) => return fatal(tx, access, r.status(), r.to_string()).await,
    };
    let input = SyncIoBridge::new(input(source, Some(Bounds::of(server)), access));
    let mut out = OutWriter {
        tx: tx.clone(),
        stderr: false,
        access: access.clone(),
    };
    let mut err = OutWriter {
        tx: tx.clone(),
        stderr: true,
        access: access.clone(),
    };
    let access = access.clone();
    let repo = access.repo.clone();
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        match super::push::run(&dir, &options, input, &mut out, &mut err, &access) {
            Ok(_) => 0,
            Err(e) => {
                // As the client named it, not as the server's file system does.
                let lines = String::from_utf8_lossy(&e.die_lines()).replace(&dir, &repo);
                let _ = err.write_all(lines.as_bytes());
                128
            }
        }
    })
    .await
    .unwrap_or(128)
}

/// `git upload-pack <dir>` with the channel as its stdin and its stdout and stderr sent back.
async fn upload_pack(
    dir: String,
    source: Source,
    tx: &Out,
    protocol: Option<String>,
    access: &Arc<Access>,
    environment: &receive::HookEnvironment,
) -> u32 {
    use std::process::Stdio;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut cmd = tokio::process::Command::new(environment.git_program());
    // Its hooks and configured commands get what a push's hooks get.
    environment.apply(cmd.as_std_mut());
    cmd.args(["upload-pack", "--strict"])
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match &protocol {
        Some(p) => cmd.env("GIT_PROTOCOL", p),
        None => cmd.env_remove("GIT_PROTOCOL"),
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            access.set_outcome(format!("cannot run git upload-pack: {e}"));
            let _ = tx
                .send((true, Bytes::from("fatal: cannot run git upload-pack\n")))
                .await;
            return 128;
        }
    };
    let mut body = input(source, None, access);
    let stdin_task = child.stdin.take().map(|mut stdin| {
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut body, &mut stdin).await;
            let _ = stdin.shutdown().await;
        })
    });
    let pump = |r: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>, stderr: bool| {
        let tx = tx.clone();
        let access = access.clone();
        tokio::spawn(async move {
            let Some(mut r) = r else { return };
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match r.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if !stderr {
                            access.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        if tx
                            .send((stderr, Bytes::copy_from_slice(&buf[..n])))
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
        })
    };
    let out = pump(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        false,
    );
    let err = pump(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        true,
    );
    let _ = out.await;
    let _ = err.await;
    let status = child.wait().await;
    if let Some(t) = stdin_task {
        t.abort();
    }
    match status {
        Ok(s) if s.success() => 0,
        Ok(s) => {
            access.set_outcome(format!("git upload-pack exited with {s}"));
            s.code().map(|c| c as u32).unwrap_or(128)
        }
        Err(e) => {
            access.set_outcome(format!("git upload-pack: {e}"));
            128
        }
    }
}

/// gitolite's `info`: who you are and which repositories you may read (R) or write (W).
async fn info(server: Arc<Server>, user: String) -> String {
    tokio::task::spawn_blocking(move || {
        let mut s = format!("hello {user}, this is berth serve over ssh\n\n");
        let repos = list_repositories(&server.root, 1000);
        for name in repos.iter().filter_map(|r| Name::new(r).ok()) {
            let r = authorize(&server, &user, &name, Op::Read).is_ok();
            let w = authorize(&server, &user, &name, Op::Write).is_ok();
            if r || w {
                s.push_str(&format!(
                    " {} {}\t{name}\n",
                    if r { "R" } else { " " },
                    if w { "W" } else { " " }
                ));
            }
        }
        if repos.is_empty() {
            s.push_str(" (no repositories yet)\n");
        }
        s.push_str("\nThis server has no shell: use git clone, fetch and push over ssh.\n");
        s
    })
    .await
    .unwrap_or_default()
}

/// The repositories under `root`, as paths relative to it, in name order (at most `max`).
fn list_repositories(root: &Path, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_owned(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if !ft.is_dir() || e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if is_git_dir(&p) || is_git_dir(&p.join(".git")) {
                if let Ok(rel) = p.strip_prefix(root) {
                    out.push(rel.to_string_lossy().into_owned());
                }
            } else if depth < 6 {
                stack.push((p, depth + 1));
            }
        }
        if out.len() >= max {
            break;
        }
    }
    out.sort();
    out.truncate(max);
    out
}
