//! ssh commands of a cluster that run on another node, over the tunnel of
//! `cluster/tunnel.rs`: [`forward`] splices a channel of this node's ssh server to a replica
//! (when this node holds no current replica of the repository), and [`tunneled`] is the
//! replica's end, `POST /_berth/cluster/ssh`, which runs the same [`super::session`] as the
//! ssh server does here, with the same access checks for the user the forwarding node
//! authenticated by key. The client sees the bytes, stderr and exit status the replica's
//! session produced, unchanged.
//!
//! The repository's live replicas are tried in turn (the recorded order): one that cannot be
//! connected to (killed, still listed until its lease expires), does not answer, refuses, or
//! is behind the log (its end refuses the tunnel with 503 and `x-berth-behind` before the
//! upgrade: a behind replica serves no ssh command, since each starts with the refs'
//! advertisement) is passed over for the next; nothing of the client's input has gone out by
//! then.
//!
//! Bounds: frames of at most `cluster::tunnel::MAX_FRAME` bytes; a tunnel silent in both
//! directions for `--idle-timeout` is dropped at either end; a push's data has the same idle
//! and size limits as on the ssh server; the replica validates every header (service,
//! repository path as [`crate::repo::Name`] does, user name as a keydir would,
//! address, protocol).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::super::conn::Hold;
use super::super::routing::Reject;
use super::{
    Access, Escaped, In, Out, Run, Server, Service, Source, Where, fatal, keys, new_access, place,
    route_name, session, valid_git_protocol,
};
use crate::cluster::tunnel::{self, ADDR, DATA, EOF, EXIT, PROTOCOL, REPO, SERVICE, STDERR, USER};
use crate::cluster::{BEHIND_PAUSE, BEHIND_WAIT, Cluster, Tunneled, http};
use crate::repo::Name;

/// Run `run` on the replica at `url` and relay what it says to the client. The exit status.
#[allow(clippy::too_many_arguments)]
pub(super) async fn forward(
    server: &Arc<Server>,
    cluster: &Arc<Cluster>,
    replicas: &[(String, String)],
    run: &Run,
    mut source: Source,
    tx: &Out,
    mut closed: tokio::sync::watch::Receiver<bool>,
    access: &Arc<Access>,
) -> u32 {
    let idle = server.idle_timeout;
    let what = Tunneled {
        service: run.service.name(),
        repo: run.repo.to_string(),
        user: run.user.clone(),
        addr: run.peer,
        protocol: run.protocol.clone(),
    };
    let (node, stream) = match open_any(cluster, replicas, &what, idle).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(target: "berth::cluster", repo = %run.repo, error = %Escaped::text(&e.to_string()), "cannot forward an ssh command");
            return fatal(
                tx,
                access,
                StatusCode::SERVICE_UNAVAILABLE,
                "no replica of the repository could serve it".into(),
            )
            .await;
        }
    };
    tracing::debug!(target: "berth::cluster", repo = %run.repo, replica = %Escaped::token(&node), "ssh command forwarded");
    let (mut rd, mut wr) = tokio::io::split(stream);
    // Bytes the client sent on, so that a long upload is not taken for a silent tunnel.
    let sent = Arc::new(AtomicU64::new(0));
    let pumped = sent.clone();
    let in_access = access.clone();
    let pump = tokio::spawn(async move {
        while let Some(m) = source.next().await {
            match m {
                In::Data(b) => {
                    pumped.fetch_add(b.len() as u64 + 1, Ordering::Relaxed);
                    in_access
                        .bytes_in
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                    if tunnel::write_frame(&mut wr, DATA, &b).await.is_err() {
                        return;
                    }
                }
                In::Eof => {
                    let _ = tunnel::write_frame(&mut wr, EOF, &[]).await;
                    return;
                }
                In::Gone => break,
            }
        }
        // The client went away: the replica sees the stream end without an EOF frame.
        let _ = wr.shutdown().await;
    });
    let mut code = None;
    let mut seen = 0;
    loop {
        let frame = tokio::select! {
            f = tokio::time::timeout(idle, tunnel::read_frame(&mut rd)) => f,
            _ = closed.wait_for(|c| *c) => break,
        };
        let frame = match frame {
            Err(_) => {
                let now = sent.load(Ordering::Relaxed);
                if now != seen {
                    seen = now;
                    continue;
                }
                access.set_outcome("the ssh tunnel was idle too long");
                break;
            }
            Ok(Ok(Some(f))) => f,
            Ok(Ok(None)) | Ok(Err(_)) => break,
        };
        match frame {
            (DATA, b) => {
                access
                    .bytes_out
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
                if tx.send((false, b)).await.is_err() {
                    break;
                }
            }
            (STDERR, b) => {
                if tx.send((true, b)).await.is_err() {
                    break;
                }
            }
            (EXIT, b) if b.len() == 4 => {
                code = Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                break;
            }
            _ => break,
        }
    }
    pump.abort();
    match code {
        Some(c) => {
            access.set_status(if c == 0 {
                StatusCode::OK
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            });
            c
        }
        None => {
            fatal(
                tx,
                access,
                StatusCode::BAD_GATEWAY,
                "the replica serving the repository went away".into(),
            )
            .await
        }
    }
}

/// A tunnel to the first of `replicas` (name, advertise URL, in the recorded order) that
/// opens one, and its name. Nothing of the client's input is read before the tunnel is open,
/// so any failure (cannot connect: killed, still listed until its lease expires; no answer;
/// refused; behind the log) passes to the next one; when one said it is behind and none
/// opened, the round is tried again for up to [`BEHIND_WAIT`].
async fn open_any(
    cluster: &Arc<Cluster>,
    replicas: &[(String, String)],
    what: &Tunneled,
    timeout: Duration,
) -> Result<(String, tunnel::Stream), tunnel::Error> {
    let deadline = std::time::Instant::now() + BEHIND_WAIT;
    let mut last = tunnel::Error::Http(http::Error::Url("no replica is live".into()));
    loop {
        let mut behind = false;
        for (node, url) in replicas {
            match cluster.open_tunnel(node, url, what, timeout).await {
                Ok(s) => return Ok((node.clone(), s)),
                Err(e) => {
                    behind |= matches!(e, tunnel::Error::Behind(_));
                    tracing::info!(target: "berth::cluster", repo = %Escaped::token(&what.repo), replica = %Escaped::token(node), error = %Escaped::text(&e.to_string()), "replica passed over for an ssh command");
                    last = e;
                }
            }
        }
        if !behind || std::time::Instant::now() + BEHIND_PAUSE > deadline {
            return Err(last);
        }
        tokio::time::sleep(BEHIND_PAUSE).await;
    }
}

/// Why a tunnel request is refused before it is upgraded.
fn refuse(status: StatusCode, why: &str) -> Response {
    (status, format!("{why}\n")).into_response()
}

/// The headers of a tunnel request, each checked.
fn parse(headers: &HeaderMap) -> Result<Run, &'static str> {
    let get = |h: &str| headers.get(h).and_then(|v| v.to_str().ok());
    let service = match get(SERVICE) {
        Some("git-receive-pack") => Service::ReceivePack,
        Some("git-upload-pack") => Service::UploadPack,
        _ => return Err("bad or missing service"),
    };
    let repo = get(REPO).ok_or("missing repository")?;
    // The name as the forwarding node read it, read again here: the same rule.
    let repo = Name::new(repo).map_err(|_| "bad repository name")?;
    let user = get(USER).ok_or("missing user")?;
    if !keys::valid_user(user) {
        return Err("bad user name");
    }
    let peer: SocketAddr = get(ADDR)
        .and_then(|a| a.parse().ok())
        .ok_or("bad or missing client address")?;
    let protocol = match get(PROTOCOL) {
        None => None,
        Some(p) if valid_git_protocol(p) => Some(p.to_owned()),
        Some(_) => return Err("bad protocol"),
    };
    Ok(Run {
        service,
        repo,
        user: user.to_owned(),
        peer,
        protocol,
    })
}

/// `POST /_berth/cluster/ssh` (the secret already checked): run a forwarded ssh command here.
pub(in crate::serve) async fn tunneled(
    server: &Arc<Server>,
    _cluster: &Arc<Cluster>,
    mut req: Request,
) -> Response {
    let run = match parse(req.headers()) {
        Ok(r) => r,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
    };
    let upgrade_asked = req
        .headers()
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(tunnel::PROTOCOL_NAME));
    if !upgrade_asked {
        return refuse(StatusCode::BAD_REQUEST, "expected Upgrade: berth-ssh");
    }
    let (replicated, reading) = match place(server, &run.repo, run.service, true).await {
        Ok(Where::Here(r, reading)) => (r, reading),
        Ok(Where::Replica(..)) => {
            return refuse(StatusCode::CONFLICT, "no current replica here");
        }
        // Behind the log: 503 with `x-berth-behind`, and the forwarding node tries another.
        Err(r @ Reject::Behind(..)) => return r.response(),
        Err(r) => return refuse(StatusCode::CONFLICT, &r.to_string()),
    };
    // The connection is this session's until it ends: no keep-alive timeout on it.
    let busy = req.extensions().get::<Hold>().map(Hold::busy);
    let upgrade = hyper::upgrade::on(&mut req);
    let server = server.clone();
    tokio::spawn(async move {
        let (_busy, _reading) = (busy, reading);
        match upgrade.await {
            Ok(up) => serve(server, run, replicated, hyper_util::rt::TokioIo::new(up)).await,
            Err(e) => {
                tracing::warn!(target: "berth::cluster", error = %Escaped::text(&e.to_string()), "ssh tunnel upgrade failed")
            }
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "upgrade")
        .header("upgrade", tunnel::PROTOCOL_NAME)
        .body(axum::body::Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The replica's end of a tunnel: the session, its output framed, then its exit status.
async fn serve(
    server: Arc<Server>,
    run: Run,
    replicated: super::Replicated,
    stream: tunnel::Stream,
) {
    let idle = server.idle_timeout;
    let access = new_access(
        &server,
        route_name(run.service),
        run.repo.as_str(),
        run.peer,
        &run.user,
    );
    let (rd, mut wr) = tokio::io::split(stream);
    // Frames written back, so that a long answer is not taken for a silent tunnel.
    let written = Arc::new(AtomicU64::new(0));
    let source = frames(rd, idle, written.clone());
    let (tx, mut rx) = mpsc::channel::<(bool, Bytes)>(16);
    let out_access = access.clone();
    let writer = tokio::spawn(async move {
        while let Some((stderr, b)) = rx.recv().await {
            let kind = if stderr { STDERR } else { DATA };
            match tokio::time::timeout(idle, tunnel::write_frame(&mut wr, kind, &b)).await {
                Ok(Ok(())) => {
                    written.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    out_access.set_outcome("the forwarding node went away");
                    return None;
                }
            }
        }
        Some(wr)
    });
    let code = session(&server, &run, replicated, source, &tx, &access).await;
    if access.status.load(Ordering::Relaxed) == 0 {
        access.set_status(if code == 0 {
            StatusCode::OK
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        });
    }
    drop(tx);
    if let Ok(Some(mut wr)) = writer.await {
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            let _ = tunnel::write_frame(&mut wr, EXIT, &code.to_be_bytes()).await;
            let _ = wr.shutdown().await;
        })
        .await;
    }
}

/// The client's input from the tunnel: [`DATA`] frames up to an [`EOF`] frame; the stream's
/// end, a bad frame, or silence both ways for `idle` is the client gone.
fn frames(
    rd: tokio::io::ReadHalf<tunnel::Stream>,
    idle: Duration,
    written: Arc<AtomicU64>,
) -> Source {
    Box::pin(futures_util::stream::unfold(
        Some((rd, 0u64)),
        move |state| {
            let written = written.clone();
            async move {
                let (mut rd, mut seen) = state?;
                loop {
                    return match tokio::time::timeout(idle, tunnel::read_frame(&mut rd)).await {
                        Err(_) => {
                            let now = written.load(Ordering::Relaxed);
                            if now != seen {
                                seen = now;
                                continue;
                            }
                            Some((In::Gone, None))
                        }
                        Ok(Ok(Some((DATA, b)))) => Some((In::Data(b), Some((rd, seen)))),
                        Ok(Ok(Some((EOF, _)))) => Some((In::Eof, None)),
                        Ok(Ok(_)) | Ok(Err(_)) => Some((In::Gone, None)),
                    };
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            if let Ok(v) = v.parse() {
                h.insert(*k, v);
            }
        }
        h
    }

    const GOOD: [(&str, &str); 5] = [
        (SERVICE, "git-receive-pack"),
        (REPO, "team/app.git"),
        (USER, "alice@example.com"),
        (ADDR, "192.0.2.7:50022"),
        (PROTOCOL, "version=2"),
    ];

    fn with(key: &'static str, value: Option<&str>) -> HeaderMap {
        let mut pairs: Vec<(&'static str, &str)> =
            GOOD.iter().filter(|(k, _)| *k != key).copied().collect();
        if let Some(v) = value {
            pairs.push((key, v));
        }
        headers(&pairs)
    }

    #[test]
    fn every_tunnel_header_is_checked() {
        let run = parse(&headers(&GOOD)).unwrap();
        assert_eq!(run.service, Service::ReceivePack);
        assert_eq!(run.repo.as_str(), "team/app.git");
        assert_eq!(run.user, "alice@example.com");
        assert_eq!(run.peer.to_string(), "192.0.2.7:50022");
        assert_eq!(run.protocol.as_deref(), Some("version=2"));
        assert_eq!(parse(&with(PROTOCOL, None)).unwrap().protocol, None);
        let up = parse(&with(SERVICE, Some("git-upload-pack"))).unwrap();
        assert_eq!(up.service, Service::UploadPack);
        let refused: &[(&'static str, Option<&str>)] = &[
            (SERVICE, None),
            (SERVICE, Some("git-upload-archive")),
            (REPO, None),
            (REPO, Some("")),
            (REPO, Some("../etc/passwd")),
            (REPO, Some("team/.hidden")),
            (REPO, Some("a%2e%2e/b")),
            (REPO, Some("~alice/x")),
            (REPO, Some("a b")),
            (USER, None),
            (USER, Some("")),
            (USER, Some("-alice")),
            (USER, Some("al ice")),
            (USER, Some("alice\"x")),
            (ADDR, None),
            (ADDR, Some("localhost")),
            (PROTOCOL, Some("version=2 x")),
            (PROTOCOL, Some(&"v".repeat(300))),
        ];
        for (k, v) in refused {
            assert!(parse(&with(k, *v)).is_err(), "{k}: {v:?} accepted");
        }
        let long = "a/".repeat(600) + "x";
        assert!(parse(&with(REPO, Some(&long))).is_err());
    }
}
