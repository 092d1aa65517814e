//! A client's push data, bounded the same way whichever transport brings it: at most
//! `--max-request-bytes`, no silence longer than `--idle-timeout`, no slower than
//! `--min-body-rate` over each `--body-rate-window`, and no longer than `--max-body-time` from
//! the session's first read (so that data just above the rate cannot hold a slot forever). An
//! HTTP body (gzip already inflated) and an ssh channel's data both become a [`BodyReader`].

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio_util::io::StreamReader;

use super::{Access, Server};

/// The push data as an `AsyncRead` for the session.
pub(super) type BodyReader = StreamReader<
    std::pin::Pin<Box<dyn futures_util::Stream<Item = io::Result<Bytes>> + Send>>,
    Bytes,
>;

/// The server's bounds on a push's data.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// `--max-request-bytes`.
    pub(super) max: u64,
    /// `--idle-timeout`: the longest wait for the next data.
    pub(super) idle: Duration,
    /// `--min-body-rate` in bytes a second, 0 for none.
    pub(super) min_rate: u64,
    /// `--body-rate-window`.
    pub(super) window: Duration,
    /// `--max-body-time`.
    pub(super) total: Option<Duration>,
}

impl Bounds {
    /// The bounds `server` was started with.
    pub(super) fn of(server: &Server) -> Bounds {
        Bounds {
            max: server.max_request_bytes,
            idle: server.idle_timeout,
            min_rate: server.min_body_rate,
            window: server.body_rate_window,
            total: server.max_body_time,
        }
    }
}

/// How the access log names the data, as each transport's operators know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wording {
    /// "request body …"
    Http,
    /// "push data …"
    Ssh,
}

/// Why the data was cut off: the access log's outcome, and the metric's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Idle,
    TooSlow,
    TooLong,
}

impl Wording {
    fn outcome(self, cut: Cut) -> &'static str {
        match (self, cut) {
            (Wording::Http, Cut::Idle) => "request body idle too long",
            (Wording::Http, Cut::TooSlow) => "request body slower than --min-body-rate",
            (Wording::Http, Cut::TooLong) => "request body took longer than --max-body-time",
            (Wording::Ssh, Cut::Idle) => "push data idle too long",
            (Wording::Ssh, Cut::TooSlow) => "push data slower than --min-body-rate",
            (Wording::Ssh, Cut::TooLong) => "push data took longer than --max-body-time",
        }
    }

    fn too_large(self, max: u64) -> String {
        match self {
            Wording::Http => format!("request body larger than {max} bytes"),
            Wording::Ssh => format!("push larger than {max} bytes"),
        }
    }
}

impl Cut {
    fn reason(self) -> &'static str {
        match self {
            Cut::Idle => "idle_body",
            Cut::TooSlow => "body_rate",
            Cut::TooLong => "body_time",
        }
    }
}

/// Bytes received and time spent waiting for them in the current `--body-rate-window`.
#[derive(Default, Clone, Copy)]
struct Rate {
    bytes: u64,
    waited: Duration,
    /// Time since the last byte, for `--idle-timeout`.
    stalled: Duration,
    /// When the session began reading, for `--max-body-time`.
    started: Option<Instant>,
}

/// `data` as the session's reader, counted into `access.bytes_in`; with `bounds`, cut off (and
/// the reason recorded in `access` and the metrics) when it crosses one of them. Without, only
/// counted (an upload-pack's input).
pub(super) fn bounded<S>(
    data: S,
    bounds: Option<Bounds>,
    wording: Wording,
    access: &Arc<Access>,
) -> BodyReader
where
    S: Stream<Item = io::Result<Bytes>> + Send + Unpin + 'static,
{
    let access = access.clone();
    let s = futures_util::stream::unfold(Some((data, 0u64, Rate::default())), move |state| {
        let access = access.clone();
        async move {
            let (mut data, mut n, mut r) = state?;
            let Some(b) = bounds else {
                return match data.next().await? {
                    Ok(chunk) => {
                        n += chunk.len() as u64;
                        access.bytes_in.store(n, Ordering::Relaxed);
                        Some((Ok(chunk), Some((data, n, r))))
                    }
                    Err(e) => Some((Err(e), None)),
                };
            };
            let fail = |cut: Cut| {
                let what = wording.outcome(cut);
                access.set_outcome(what);
                access.metrics.timeout(cut.reason());
                Some((Err(io::Error::new(io::ErrorKind::TimedOut, what)), None))
            };
            // Wait for the client at most until the idle timeout, or until the waiting
            // time of the rate window is used up (then the window is judged).
            let budget = b.idle.saturating_sub(r.stalled);
            let budget = if b.min_rate > 0 {
                budget.min(b.window.saturating_sub(r.waited))
            } else {
                budget
            };
            // The whole body's time, from the session's first read.
            let started = *r.started.get_or_insert_with(Instant::now);
            let left = b.total.map(|t| t.saturating_sub(started.elapsed()));
            if left == Some(Duration::ZERO) {
                return fail(Cut::TooLong);
            }
            let budget = budget.min(left.unwrap_or(Duration::MAX));
            let t0 = Instant::now();
            let next = tokio::time::timeout(budget, data.next()).await;
            let spent = t0.elapsed();
            r.waited += spent;
            r.stalled += spent;
            if let Ok(Some(Ok(chunk))) = &next {
                r.bytes += chunk.len() as u64;
                r.stalled = Duration::ZERO;
            }
            if b.min_rate > 0 && r.waited >= b.window {
                if r.bytes < (b.min_rate as f64 * b.window.as_secs_f64()) as u64 {
                    return fail(Cut::TooSlow);
                }
                r.waited = Duration::ZERO;
                r.bytes = 0;
            }
            match next {
                Err(_) if r.stalled >= b.idle => fail(Cut::Idle),
                Err(_) if left.is_some_and(|l| spent >= l) => fail(Cut::TooLong),
                // The rate window ended without a verdict against the client: wait on.
                Err(_) => Some((Ok(Bytes::new()), Some((data, n, r)))),
                Ok(None) => None,
                Ok(Some(Err(e))) => Some((Err(e), None)),
                Ok(Some(Ok(chunk))) => {
                    n += chunk.len() as u64;
                    access.bytes_in.store(n, Ordering::Relaxed);
                    if n > b.max {
                        access.too_large.store(true, Ordering::Relaxed);
                        let what = wording.too_large(b.max);
                        access.set_outcome(what.clone());
                        Some((Err(io::Error::other(what)), None))
                    } else {
                        Some((Ok(chunk), Some((data, n, r))))
                    }
                }
            }
        }
    });
    StreamReader::new(Box::pin(s))
}
