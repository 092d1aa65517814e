//! The ssh tunnel between nodes: an ssh session that reached a node holding no current replica
//! of its repository runs on a replica instead, over one HTTP/1.1 connection upgraded to a
//! byte stream (`POST /_berth/cluster/ssh`, `Connection: Upgrade`, `Upgrade: berth-ssh`,
//! answered `101 Switching Protocols`).
//!
//! The request says what to run in headers, each validated by the replica: [`SERVICE`]
//! (`git-receive-pack` or `git-upload-pack`), [`REPO`] (the path as the ssh client gave it),
//! [`USER`] (the user this node authenticated by key), [`ADDR`] (the client's address, for
//! the log and the reflog identity) and, optionally, [`PROTOCOL`] (the client's
//! `GIT_PROTOCOL`). Headers rather than a query: no escaping to get wrong.
//!
//! After the 101 both directions carry frames: 1 byte kind, 4 bytes big-endian length, that
//! many bytes (at most [`MAX_FRAME`]). Towards the replica: [`DATA`] (the client's bytes),
//! [`EOF`] (the client closed its side). Back: [`DATA`] (the client's stdout), [`STDERR`]
//! (its stderr, ssh extended data), [`EXIT`] (4 bytes big-endian exit status, the last frame).
//! This module owns the format and the opening side; `ssh/tunnel.rs` the sessions at either
//! end.

use std::io;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Cluster, http};

/// The internal endpoint's path.
pub(crate) const PATH: &str = "/_berth/cluster/ssh";
/// The `Upgrade` protocol name.
pub(crate) const PROTOCOL_NAME: &str = "berth-ssh";
/// Header: which git service.
pub(crate) const SERVICE: &str = "x-berth-ssh-service";
/// Header: the repository path as the ssh client named it.
pub(crate) const REPO: &str = "x-berth-ssh-repo";
/// Header: the authenticated user.
pub(crate) const USER: &str = "x-berth-ssh-user";
/// Header: the ssh client's address (`ip:port`).
pub(crate) const ADDR: &str = "x-berth-ssh-addr";
/// Header: the client's `GIT_PROTOCOL`, if it sent one.
pub(crate) const PROTOCOL: &str = "x-berth-ssh-protocol";

/// Frame: data (the client's input one way, its stdout the other).
pub(crate) const DATA: u8 = 1;
/// Frame: the client's stderr.
pub(crate) const STDERR: u8 = 2;
/// Frame: the exit status (4 bytes), the last frame from the replica.
pub(crate) const EXIT: u8 = 3;
/// Frame: the client closed its input (no payload).
pub(crate) const EOF: u8 = 4;
/// The largest frame payload either side accepts.
pub(crate) const MAX_FRAME: usize = 1 << 20;

/// The upgraded connection.
pub(crate) type Stream = TokioIo<hyper::upgrade::Upgraded>;

/// Why a tunnel could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The HTTP request failed.
    #[error(transparent)]
    Http(#[from] http::Error),
    /// The replica answered something else than 101.
    #[error("the replica refused the ssh tunnel: {0} {1}")]
    Refused(StatusCode, String),
    /// The replica is behind the repository's log (503 with `x-berth-behind`).
    #[error("the replica is behind the repository's log: {0}")]
    Behind(String),
    /// The upgrade itself failed.
    #[error("upgrade failed: {0}")]
    Upgrade(hyper::Error),
}

/// What the replica runs.
#[derive(Debug, Clone)]
pub(crate) struct Tunneled {
    pub(crate) service: &'static str,
    pub(crate) repo: String,
    pub(crate) user: String,
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) protocol: Option<String>,
}

impl Cluster {
    /// Open a tunnel to node `node` at `base` (its advertise URL) for `what`; `timeout`
    /// bounds the connect and the answer.
    pub(crate) async fn open_tunnel(
        &self,
        node: &str,
        base: &str,
        what: &Tunneled,
        timeout: Duration,
    ) -> Result<Stream, Error> {
        let url = http::join(base, PATH);
        let mut b = Request::builder()
            .method("POST")
            .uri(&url)
            .header("connection", "upgrade")
            .header("upgrade", PROTOCOL_NAME)
            .header(super::FORWARDED, &self.node)
            .header(SERVICE, what.service)
            .header(REPO, &what.repo)
            .header(USER, &what.user)
            .header(ADDR, what.addr.to_string());
        if let Some(p) = &what.protocol {
            b = b.header(PROTOCOL, p);
        }
        let req = b
            .body(Body::empty())
            .map_err(|_| http::Error::Url(url.clone()))?;
        let resp = self.peers.send(node, req, timeout).await?;
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            let status = resp.status();
            let behind = status == StatusCode::SERVICE_UNAVAILABLE
                && resp.headers().contains_key(super::BEHIND);
            let body = http::read_body(resp.into_body(), 4096, timeout, &url)
                .await
                .unwrap_or_default();
            let why = String::from_utf8_lossy(&body).trim().to_owned();
            return Err(if behind {
                Error::Behind(why)
            } else {
                Error::Refused(status, why)
            });
        }
        let up = tokio::time::timeout(timeout, hyper::upgrade::on(resp))
            .await
            .map_err(|_| Error::Http(http::Error::Timeout(url.clone())))?
            .map_err(Error::Upgrade)?;
        Ok(TokioIo::new(up))
    }
}

/// Write one frame.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    kind: u8,
    payload: &[u8],
) -> io::Result<()> {
    for chunk in payload
        .chunks(MAX_FRAME)
        .chain(payload.is_empty().then_some(&[][..]))
    {
        let mut head = [0u8; 5];
        head[0] = kind;
        head[1..].copy_from_slice(&(chunk.len() as u32).to_be_bytes());
        w.write_all(&head).await?;
        w.write_all(chunk).await?;
    }
    w.flush().await
}

/// Read one frame: `None` at a clean end of the stream (before a frame began). A frame longer
/// than [`MAX_FRAME`] or of an unknown kind is an error.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Option<(u8, Bytes)>> {
    let mut head = [0u8; 5];
    match r.read(&mut head[..1]).await? {
        0 => return Ok(None),
        _ => r.read_exact(&mut head[1..]).await?,
    };
    let kind = head[0];
    if !(DATA..=EOF).contains(&kind) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("ssh tunnel: unknown frame kind {kind}"),
        ));
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("ssh tunnel: frame of {len} bytes"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    Ok(Some((kind, Bytes::from(buf))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_bounds_hold() {
        let mut buf = Vec::new();
        write_frame(&mut buf, DATA, b"hello").await.unwrap();
        write_frame(&mut buf, EOF, b"").await.unwrap();
        write_frame(&mut buf, EXIT, &7u32.to_be_bytes())
            .await
            .unwrap();
        let mut r = &buf[..];
        assert_eq!(
            read_frame(&mut r).await.unwrap(),
            Some((DATA, Bytes::from_static(b"hello")))
        );
        assert_eq!(read_frame(&mut r).await.unwrap(), Some((EOF, Bytes::new())));
        assert_eq!(
            read_frame(&mut r).await.unwrap(),
            Some((EXIT, Bytes::copy_from_slice(&7u32.to_be_bytes())))
        );
        assert_eq!(read_frame(&mut r).await.unwrap(), None);
        // Too long, unknown kind, cut short: errors, not panics.
        let mut big = vec![DATA];
        big.extend_from_slice(&((MAX_FRAME as u32) + 1).to_be_bytes());
        assert!(read_frame(&mut &big[..]).await.is_err());
        assert!(read_frame(&mut &[9u8, 0, 0, 0, 0][..]).await.is_err());
        assert!(read_frame(&mut &[DATA, 0, 0, 0, 5, 1][..]).await.is_err());
        // A large payload goes as several frames.
        let mut buf = Vec::new();
        write_frame(&mut buf, DATA, &vec![0u8; MAX_FRAME + 3])
            .await
            .unwrap();
        let mut r = &buf[..];
        assert_eq!(
            read_frame(&mut r).await.unwrap().map(|f| f.1.len()),
            Some(MAX_FRAME)
        );
        assert_eq!(
            read_frame(&mut r).await.unwrap().map(|f| f.1.len()),
            Some(3)
        );
    }
}
