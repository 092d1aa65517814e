//! Streaming between the network and the blocking git work: the request body into a push
//! session or `git upload-pack`, and their output back as the response body.

use super::body::BodyReader;
use super::*;

use std::sync::atomic::AtomicUsize;

/// A push slot and the in-flight gauge, released when the push session ends.
pub(super) struct InFlight {
    pub(super) metrics: Arc<Metrics>,
    pub(super) _permit: Slot,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics.pushes_in_flight.dec();
    }
}

/// An HTTP request body (gzip already inflated by the decompression layer) as the session's
/// reader, within the server's bounds (`body.rs`).
pub(super) fn body_reader(body: Body, server: &Server, access: &Arc<Access>) -> BodyReader {
    let data = body.into_data_stream().map(|r| r.map_err(io::Error::other));
    super::body::bounded(
        data,
        Some(super::body::Bounds::of(server)),
        super::body::Wording::Http,
        access,
    )
}

/// The session's output, handed to the response body chunk by chunk as it is written.
pub(super) struct ChannelWriter {
    pub(super) tx: mpsc::Sender<Bytes>,
    pub(super) access: Arc<Access>,
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
pub(super) struct Capped(Vec<u8>);

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
pub(super) fn streaming_response(
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
pub(super) async fn run_session(
    dir: String,
    options: receive::Options,
    input: Option<BodyReader>,
    content_type: &str,
    preamble: Option<Bytes>,
    access: Arc<Access>,
    slot: Option<InFlight>,
) -> Response {
    let (tx, mut rx) = mpsc::channel::<Bytes>(8);
    // The error text, and whether it is the commands over their byte cap (a 413).
    let (done_tx, done_rx) = oneshot::channel::<Result<(), (String, bool)>>();
    let input = input.map(SyncIoBridge::new);
    let dir_shown = dir.clone();
    let task_access = access.clone();
    let pushed = input.is_some();
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        // Dropped at the end of the session, panic or not.
        let _running = pushed.then(PushRunning::start);
        let mut writer = ChannelWriter {
            tx,
            access: task_access.clone(),
        };
        let mut stderr = Capped::default();
        // Ends before the client sees the end of the response (the writer's drop).
        let result = match input {
            Some(r) => super::push::run(&dir, &options, r, &mut writer, &mut stderr, &task_access),
            None => super::push::run(
                &dir,
                &options,
                io::empty(),
                &mut writer,
                &mut stderr,
                &task_access,
            ),
        };
        drop(writer);
        let msg = String::from_utf8_lossy(&stderr.0);
        if !msg.trim().is_empty() {
            tracing::debug!(target: "berth::serve", repo = %Escaped::token(&task_access.repo), stderr = %Escaped::text(msg.trim()), "session stderr");
        }
        let _ = done_tx.send(result.map(drop).map_err(|e| {
            let over = matches!(
                e,
                receive::Fatal::Request(crate::protocol::request::Error::TooLarge(_))
            );
            (e.to_string(), over)
        }));
    });
    match rx.recv().await {
        // The body crossed --max-request-bytes before the session answered: the same 413 as
        // for a declared oversize body (the session's in-band error is dropped with `rx`).
        Some(_) if access.too_large.load(Ordering::Relaxed) => Reject::TooLarge.response(),
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
            Ok(Err((e, true))) => Reject::CommandsTooLarge(e).response(),
            // As the client named it, not as the server's file system does.
            Ok(Err((e, false))) => {
                Reject::Internal(format!("fatal: {}", e.replace(&dir_shown, &access.repo)))
                    .response()
            }
            Err(_) => Reject::Internal("push session failed".into()).response(),
        },
    }
}

/// Run `git upload-pack --stateless-rpc [--advertise-refs] <dir>` with the request on its stdin
/// and its stdout streamed back: berth implements the receive side only.
#[allow(clippy::too_many_arguments)]
pub(super) async fn upload_pack(
    dir: String,
    advertise: bool,
    protocol: Option<String>,
    body: Option<BodyReader>,
    content_type: &str,
    preamble: Option<Bytes>,
    access: &Arc<Access>,
    slot: Option<Slot>,
    environment: &receive::HookEnvironment,
) -> Result<Response, Reject> {
    use std::process::Stdio;
    let mut cmd = tokio::process::Command::new(environment.git_program());
    // Its hooks and configured commands get what a push's hooks get.
    environment.apply(cmd.as_std_mut());
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
    // The slot (and the gauge) last as long as the process.
    let gauge = access.metrics.upload_packs.clone();
    gauge.inc();
    let slot = (
        slot,
        scopeguard(move || {
            gauge.dec();
        }),
    );
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
                drop(slot);
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

/// Runs `f` when dropped.
pub(super) struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

pub(super) fn scopeguard<F: FnOnce()>(f: F) -> OnDrop<F> {
    OnDrop(Some(f))
}

/// A push session in this process, counted from its start to its end, so that the memory
/// pushes freed is given back when the last of them ends (see [`PushRunning::finish`]).
struct PushRunning;

/// Push sessions running now.
static PUSHES_RUNNING: AtomicUsize = AtomicUsize::new(0);
/// When memory was last given back, in milliseconds since [`epoch`].
static LAST_TRIM_MS: AtomicU64 = AtomicU64::new(0);
/// Trim at least this often while pushes overlap without a pause.
const TRIM_INTERVAL_MS: u64 = 1000;

fn epoch() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

impl PushRunning {
    fn start() -> PushRunning {
        PUSHES_RUNNING.fetch_add(1, Ordering::Relaxed);
        PushRunning
    }
}

impl Drop for PushRunning {
    /// The push has ended: give the freed memory back if it was the last one running, or if
    /// the last time was [`TRIM_INTERVAL_MS`] ago. `malloc_trim` walks every arena and
    /// `madvise`s its free pages, each a TLB shootdown across the process's threads: after
    /// every one of 64 concurrent pushes it was a tenth of the server's CPU (benches/README.md,
    /// issue 16), while trimming when the server goes idle releases the same memory.
    fn drop(&mut self) {
        let others = PUSHES_RUNNING.fetch_sub(1, Ordering::Relaxed) - 1;
        let now = epoch().elapsed().as_millis() as u64;
        let last = LAST_TRIM_MS.load(Ordering::Relaxed);
        if (others == 0 || now.saturating_sub(last) >= TRIM_INTERVAL_MS)
            && LAST_TRIM_MS
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            release_memory();
        }
    }
}

/// Give the memory a push freed back to the system: glibc keeps freed heap memory in its
/// arenas (a push with many push options or refs would leave the process that much larger).
#[allow(unsafe_code)]
fn release_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and trims the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
