//! No client can hold what others need (issue #21): hostile clients against `berth serve` over
//! raw sockets (some bound to other loopback addresses, 127.0.0.2 and up, to be distinct
//! clients), with curl, the real git client and OpenSSH's ssh showing that everyone else is
//! still served: half-done TLS handshakes are evicted at the connection cap, one address cannot
//! fill the cap, slow readers lose their fetch slots, a trickling push body is cut at its
//! deadline, ssh connections that never authenticate make room, and an ssh push that finds no
//! slot is told so.

use crate::common;
use crate::serve::{self, Serve, certificate, closed_within, git, metric, ok, start_post};
use crate::ssh_serve;
use common::World;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A blocking connection to `addr` from the loopback address `from` (e.g. `127.0.0.2`), with a
/// receive buffer of `rcvbuf` bytes when given (set before the connect, so the window is small).
fn connect_from(from: &str, addr: &str, rcvbuf: Option<u32>) -> TcpStream {
    try_connect_from(from, addr, rcvbuf).unwrap()
}

/// [`connect_from`], or why the connection could not be made.
pub(crate) fn try_connect_from(
    from: &str,
    addr: &str,
    rcvbuf: Option<u32>,
) -> std::io::Result<TcpStream> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let s = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4()?;
        if let Some(n) = rcvbuf {
            sock.set_recv_buffer_size(n)?;
        }
        let bad = |e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
        sock.bind(format!("{from}:0").parse().map_err(bad)?)?;
        sock.connect(addr.parse().map_err(bad)?).await
    })?;
    let s = s.into_std()?;
    s.set_nonblocking(false)?;
    Ok(s)
}

#[test]
fn half_done_tls_handshakes_are_evicted_at_the_connection_cap() {
    let w = World::new();
    let (cert, key) = certificate(&w);
    let srv = Serve::start(
        &w,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--max-connections",
            "4",
            "--header-read-timeout",
            "60",
        ],
    );
    // Four clients (four addresses) open a TLS connection and never send their ClientHello.
    let stalled: Vec<TcpStream> = (2..6)
        .map(|i| connect_from(&format!("127.0.0.{i}"), &srv.addr, None))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // curl still gets through: the longest-waiting handshake made room.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&cert)
        .arg(format!("https://{}/healthz", srv.addr))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut first = stalled.into_iter().next().unwrap();
    // Closed by the eviction, well before its 60 s header-read timeout would have closed it.
    assert!(closed_within(&mut first, Duration::from_secs(30)));
}

/// Open a POST git-receive-pack from `from` declaring a body it never sends: a request in flight
/// (not idle, so not evictable) for as long as the server lets it be.
fn stalled_post(from: &str, addr: &str) -> TcpStream {
    let mut s = connect_from(from, addr, None);
    s.write_all(
        format!(
            "POST /x.git/git-receive-pack HTTP/1.1\r\nHost: {addr}\r\n\
             Content-Type: application/x-git-receive-pack-request\r\nContent-Length: 1000\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    s
}

#[test]
fn one_address_cannot_fill_the_connection_cap() {
    let w = World::new();
    let srv = Serve::start(
        &w,
        &[
            "--max-connections",
            "8",
            "--min-body-rate",
            "0",
            "--header-read-timeout",
            "60",
        ],
    );
    w.bare("repos/x.git");
    w.work("src");
    let c = w.commit("src", "a", "1");
    // One address opens as many stalled requests as the whole server may have connections.
    let mut stalled: Vec<TcpStream> = (0..8)
        .map(|_| {
            let s = stalled_post("127.0.0.2", &srv.addr);
            std::thread::sleep(Duration::from_millis(30));
            s
        })
        .collect();
    // Everyone else is still served: curl, and git's push and clone.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .arg(format!("http://{}/healthz", srv.addr))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ok(git(&w, "src", &["push", &srv.url("y.git"), "main"]));
    ok(git(&w, ".", &["clone", "-q", &srv.url("y.git"), "back"]));
    assert_eq!(w.git("back", &["rev-parse", "HEAD"]).trim(), c);
    // The address's requests past its cap (half of 8) were refused with a reason.
    let last = stalled.last_mut().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = Vec::new();
    let _ = last.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("from your address"),
        "{answer}"
    );
}

/// Read the connection at about `per_tick` bytes every 50 ms until `stop` is set.
fn read_slowly(mut s: TcpStream, per_tick: usize, stop: Arc<AtomicBool>) {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = vec![0u8; per_tick];
    while !stop.load(Ordering::Relaxed) {
        if let Ok(0) = s.read(&mut buf) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn slow_readers_lose_their_fetch_slots_and_clones_go_through() {
    let w = World::new();
    let srv = Serve::start(
        &w,
        &[
            "--max-concurrent-fetches",
            "2",
            "--push-slot-timeout",
            "2",
            "--write-timeout",
            "60",
            "--min-send-rate",
            "100000",
            "--send-rate-window",
            "1",
        ],
    );
    w.work("src");
    std::fs::write(w.path("src/big.bin"), serve::noise(8 << 20, 3)).unwrap();
    w.git("src", &["add", "big.bin"]);
    w.git("src", &["commit", "-q", "-m", "big"]);
    let c = w.git("src", &["rev-parse", "HEAD"]).trim().to_owned();
    ok(git(&w, "src", &["push", &srv.url("f.git"), "main"]));
    // Two clients (two addresses) ask for the whole pack and read it at ~20 KB/s.
    let mut body = common::pkt(&format!("want {c}\n"));
    body.extend_from_slice(b"0000");
    body.extend(common::pkt("done\n"));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (2..4)
        .map(|i| {
            let mut s = connect_from(&format!("127.0.0.{i}"), &srv.addr, Some(4096));
            s.write_all(
                format!(
                    "POST /f.git/git-upload-pack HTTP/1.1\r\nHost: {}\r\n\
                     Content-Type: application/x-git-upload-pack-request\r\n\
                     Content-Length: {}\r\n\r\n",
                    srv.addr,
                    body.len()
                )
                .as_bytes(),
            )
            .unwrap();
            s.write_all(&body).unwrap();
            let stop = stop.clone();
            std::thread::spawn(move || read_slowly(s, 1024, stop))
        })
        .collect();
    // Both are dropped once a window of waiting on them saw too few bytes (they still have
    // the bytes already in the socket buffers to read, so they see the close much later).
    let dropped = "berth_timeouts_total{reason=\"send_rate\"}";
    let start = Instant::now();
    let count = || {
        let m = crate::serve::http(&srv.addr, "GET", "/metrics", &[], b"");
        let m = String::from_utf8(m.body).unwrap();
        m.lines()
            .find_map(|l| l.strip_prefix(dropped)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    while count() < 2.0 && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metric(&srv.addr, dropped), 2.0, "{}", srv.log());
    ok(git(&w, ".", &["clone", "-q", &srv.url("f.git"), "back"]));
    assert_eq!(w.git("back", &["rev-parse", "HEAD"]).trim(), c);
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
}

#[test]
fn a_push_body_just_above_the_minimum_rate_is_cut_at_its_deadline() {
    let w = World::new();
    let srv = Serve::start(
        &w,
        &[
            "--max-concurrent-pushes",
            "1",
            "--min-body-rate",
            "100",
            "--body-rate-window",
            "1",
            "--max-body-time",
            "2",
        ],
    );
    w.bare("repos/t.git");
    w.work("src");
    std::fs::write(w.path("src/big.bin"), serve::noise(30_000, 9)).unwrap();
    w.git("src", &["add", "big.bin"]);
    w.git("src", &["commit", "-q", "-m", "big"]);
    let c = w.git("src", &["rev-parse", "HEAD"]).trim().to_owned();
    let req = serve::push_request(&w, "src", &c);
    // The commands and a part of the pack, then 50 bytes every 250 ms: 200 bytes/s, twice
    // the minimum rate, for as long as the server takes them.
    let mut holder = start_post(&srv.addr, "t.git", req.len(), &req[..1000]);
    let mut tx = holder.try_clone().unwrap();
    let rest = req[1000..].to_vec();
    let trickle = std::thread::spawn(move || {
        for chunk in rest.chunks(50).take(80) {
            std::thread::sleep(Duration::from_millis(250));
            if tx.write_all(chunk).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    assert!(
        closed_within(&mut holder, Duration::from_secs(20)),
        "the trickling push still holds its slot"
    );
    // Two seconds of body, bounded at ten times that.
    assert!(start.elapsed() < Duration::from_secs(20));
    trickle.join().unwrap();
    assert!(
        srv.log().contains("longer than --max-body-time"),
        "{}",
        srv.log()
    );
    // The only push slot is free again: the real client's push lands.
    ok(git(&w, "src", &["push", &srv.url("t.git"), "main"]));
    assert_eq!(
        serve::server_refs(&w, "repos/t.git"),
        format!("{c} commit refs/heads/main\n")
    );
}

#[test]
fn ssh_connections_that_never_authenticate_make_room() {
    let w = ssh_serve::world();
    let srv = ssh_serve::Serve::start(
        &w,
        &["--ssh-max-connections", "2", "--ssh-auth-timeout", "60"],
    );
    let addr = format!("127.0.0.1:{}", srv.ssh_port);
    // Two clients (two addresses) connect and never authenticate.
    let mut idle: Vec<TcpStream> = (2..4)
        .map(|i| {
            let mut s = connect_from(&format!("127.0.0.{i}"), &addr, None);
            let mut line = [0u8; 8];
            s.read_exact(&mut line).unwrap();
            assert_eq!(&line, b"SSH-2.0-");
            s
        })
        .collect();
    // A user with a key still gets in: the one waiting longest is cut off.
    let out = ssh_serve::ssh(&w, &srv, "alice", &["git@127.0.0.1", "info"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        srv.log()
    );
    ssh_serve::read_to_close(&mut idle[0], Duration::from_secs(5));
}

#[test]
fn an_ssh_push_that_finds_no_slot_in_time_is_told_the_server_is_busy() {
    let w = ssh_serve::world();
    let srv = ssh_serve::Serve::start(
        &w,
        &[
            "--max-concurrent-pushes",
            "1",
            "--push-slot-timeout",
            "1",
            "--min-body-rate",
            "0",
        ],
    );
    w.bare("repos/b.git");
    w.work("src");
    let c = w.commit("src", "a", "1");
    // An ssh push holds the only slot: its commands and half its pack sent, then nothing.
    let line = srv.ssh(&w, "alice");
    let mut parts = line.split(' ');
    let mut holder = w
        .cmd(parts.next().unwrap(), ".")
        .args(parts)
        .args(["git@127.0.0.1", "git-receive-pack '/b.git'"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut advertisement = holder.stdout.take().unwrap();
    ssh_serve::read_until_flush(&mut advertisement);
    let pack = w.pack(true, &format!("{c}\n"));
    let mut req = common::request(
        &[format!("{} {c} refs/heads/main", common::ZERO)],
        "report-status",
    );
    req.extend_from_slice(&pack[..pack.len() / 2]);
    let mut stdin = holder.stdin.take().unwrap();
    stdin.write_all(&req).unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut push = w
        .git_cmd("src")
        .env("GIT_SSH_COMMAND", srv.ssh(&w, "alice"))
        .args(["push", &srv.url("b.git"), "main"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // One second of waiting for the slot, bounded at ten times that.
    let start = Instant::now();
    let status = loop {
        if let Some(s) = push.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = push.kill();
            let _ = push.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // (Not read before: a push still waiting leaves its ssh holding the pipe open.)
    let status = status.expect("the ssh push still waits for a slot after 10 s");
    let mut stderr = String::new();
    push.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("fatal: server busy: no push slot free in time, retry later"),
        "{stderr}"
    );
    let _ = holder.kill();
    let _ = holder.wait();
}

/// An ssh command's `ssh … git@127.0.0.1 <remote command>` with its stdin and stdout piped.
fn ssh_command(w: &World, srv: &ssh_serve::Serve, remote: &str) -> std::process::Child {
    let line = srv.ssh(w, "alice");
    let mut parts = line.split(' ');
    w.cmd(parts.next().unwrap(), ".")
        .args(parts)
        .args(["git@127.0.0.1", remote])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait for `child` at most `limit`; its status, or `None` (then it was killed).
fn wait_at_most(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ssh_fetches_take_fetch_slots_and_one_that_finds_none_is_told() {
    let w = ssh_serve::world();
    let srv = ssh_serve::Serve::start(
        &w,
        &["--max-concurrent-fetches", "1", "--push-slot-timeout", "1"],
    );
    w.bare("repos/b.git");
    w.work("src");
    w.commit("src", "a", "1");
    w.git(
        "src",
        &[
            "push",
            "-q",
            w.path("repos/b.git").to_str().unwrap(),
            "main",
        ],
    );
    // One ssh fetch holds the only fetch slot: the advertisement read, then nothing.
    let mut holder = ssh_command(&w, &srv, "git-upload-pack '/b.git'");
    let mut advertisement = holder.stdout.take().unwrap();
    ssh_serve::read_until_flush(&mut advertisement);
    let mut other = w
        .git_cmd("src")
        .env("GIT_SSH_COMMAND", srv.ssh(&w, "alice"))
        .args(["ls-remote", &srv.url("b.git")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // One second of waiting for the slot, bounded at ten times that.
    let status = wait_at_most(&mut other, Duration::from_secs(10))
        .expect("the ssh fetch still waits for a slot after 10 s");
    let mut stderr = String::new();
    other
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("server busy: no upload-pack slot free in time, retry later"),
        "{stderr}"
    );
    // Once the holder is gone, the slot is free again.
    drop(holder.stdin.take());
    let _ = wait_at_most(&mut holder, Duration::from_secs(30));
    let out = w
        .git_cmd("src")
        .env("GIT_SSH_COMMAND", srv.ssh(&w, "alice"))
        .args(["ls-remote", &srv.url("b.git")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_ssh_push_trickling_under_the_idle_timeout_is_cut_at_max_body_time() {
    trickle_an_ssh_push(
        &["--max-body-time", "2", "--min-body-rate", "0"],
        "push data took longer than --max-body-time",
    );
}

#[test]
fn an_ssh_push_slower_than_the_minimum_rate_is_cut_as_an_http_body_is() {
    trickle_an_ssh_push(
        &["--min-body-rate", "1000", "--body-rate-window", "1"],
        "push data slower than --min-body-rate",
    );
}

/// A push over ssh sent a byte every 200 ms (5 B/s, far under the idle timeout of 300 s): the
/// server started with `args` cuts it off, logs `why`, and leaves nothing behind.
fn trickle_an_ssh_push(args: &[&str], why: &str) {
    let w = ssh_serve::world();
    let srv = ssh_serve::Serve::start(&w, args);
    w.bare("repos/b.git");
    w.work("src");
    let c = w.commit("src", "a", "1");
    let mut push = ssh_command(&w, &srv, "git-receive-pack '/b.git'");
    let mut advertisement = push.stdout.take().unwrap();
    ssh_serve::read_until_flush(&mut advertisement);
    let pack = w.pack(true, &format!("{c}\n"));
    let mut req = common::request(
        &[format!("{} {c} refs/heads/main", common::ZERO)],
        "report-status",
    );
    req.extend_from_slice(&pack[..pack.len() - 1]);
    let mut stdin = push.stdin.take().unwrap();
    let start = Instant::now();
    let mut cut = false;
    for b in &req {
        if stdin.write_all(&[*b]).and_then(|()| stdin.flush()).is_err()
            || push.try_wait().unwrap().is_some()
        {
            cut = true;
            break;
        }
        // Ten times the bound (2 s of total time, or a 1 s window judged).
        if start.elapsed() > Duration::from_secs(20) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = wait_at_most(&mut push, Duration::from_secs(20));
    assert!(
        cut || status.is_some_and(|s| !s.success()),
        "the trickle went on"
    );
    serve_log_wait(&srv, why);
    assert_eq!(w.refs("repos/b.git"), "");
    assert_eq!(
        common::leftovers_after_session(&w.path("repos/b.git")),
        Vec::<std::path::PathBuf>::new()
    );
}

/// Wait up to 60 s for `needle` in the ssh server's log.
fn serve_log_wait(srv: &ssh_serve::Serve, needle: &str) {
    let start = Instant::now();
    while !srv.process.log().contains(needle) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no {needle:?} in:\n{}",
            srv.process.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
