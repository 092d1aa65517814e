//! Authentication that an attacker cannot turn against a user (#21): wrong passwords from other
//! addresses do not lock a user out, password checks are shared fairly so a user who logged in
//! before gets in while hundreds of random-name attackers from many addresses run, the
//! credentials file and the keydir are reread when they change (an old password, a removed key
//! stop working), and an ssh key offer costs the same whatever the keydir's size.
//!
//! Attackers are raw sockets bound to distinct loopback addresses (127.x.y.z), so each counts
//! as its own client address; everything stays on loopback and every loop is bounded.

use crate::common::World;
use crate::serve::{Serve, base64_basic, credentials, git, metric, ok, read_response};
use crate::ssh_serve;

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A TCP connection to `dst` from the loopback address `src` (bound before connecting).
fn connect_from(src: Ipv4Addr, dst: SocketAddr) -> std::io::Result<TcpStream> {
    crate::conn_limits::try_connect_from(&src.to_string(), &dst.to_string(), None)
}

/// The status of `GET /<repo>/info/refs?service=git-receive-pack` with Basic `user:password`,
/// sent from `src`.
fn probe_from(src: Ipv4Addr, addr: &str, repo: &str, user: &str, password: &str) -> u16 {
    let mut s = connect_from(src, addr.parse().unwrap()).unwrap();
    let req = format!(
        "GET /{repo}/info/refs?service=git-receive-pack HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Basic {}\r\nConnection: close\r\n\r\n",
        base64_basic(&format!("{user}:{password}"))
    );
    s.write_all(req.as_bytes()).unwrap();
    read_response(s).status
}

/// `alice:<password>` (and more lines) as a credentials file at `<world>/creds`.
fn write_creds(w: &World, users: &[(&str, &str)]) -> String {
    let text: String = users
        .iter()
        .map(|(u, p)| credentials(w, u, p))
        .collect::<Vec<_>>()
        .concat();
    // Through a rename, as an editor or a deployment would, so the server never reads half.
    let tmp = w.path("creds.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, w.path("creds")).unwrap();
    w.path("creds").display().to_string()
}

/// Poll `f` every 100 ms until it is true or `limit` has passed; whether it became true.
fn within(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Wrong passwords for alice from five other addresses block those addresses, never alice: the
/// first address has its three guesses (then it waits, for any user), and once alice is under
/// attack each further address has one; her right password from a clean address still pushes,
/// and a fresh address's first attempt is checked (401), not refused in advance.
#[test]
fn failures_from_other_addresses_do_not_lock_the_user_out() {
    let w = World::new();
    let creds = write_creds(&w, &[("alice", "s3cret"), ("bob", "b0b")]);
    let srv = Serve::start(
        &w,
        &[
            "--credentials",
            &creds,
            "--auth-max-failures",
            "3",
            "--auth-failure-window",
            "60",
            "--auth-cache-ttl",
            "0",
        ],
    );
    w.bare("repos/a.git");
    w.work("src");
    w.commit("src", "a", "1");
    for i in 2..=6u8 {
        let attacker = Ipv4Addr::new(127, 0, 0, i);
        let statuses: Vec<u16> = (0..5)
            .map(|n| probe_from(attacker, &srv.addr, "a.git", "alice", &format!("guess{n}")))
            .collect();
        if i == 2 {
            assert_eq!(statuses, [401, 401, 401, 429, 429]);
            // Per address across users: that address guessing another user waits too.
            assert_eq!(probe_from(attacker, &srv.addr, "a.git", "bob", "b0b"), 429);
        } else {
            assert_eq!(statuses, [401, 429, 429, 429, 429], "from 127.0.0.{i}");
        }
    }
    // alice from her own, clean address: her push lands.
    let url = format!("http://alice:s3cret@{}/a.git", srv.addr);
    ok(git(&w, "src", &["push", &url, "main"]));
    let local = Ipv4Addr::LOCALHOST;
    assert_eq!(probe_from(local, &srv.addr, "a.git", "bob", "b0b"), 200);
    // A new address guessing is checked, not locked out in advance.
    let fresh = Ipv4Addr::new(127, 0, 0, 9);
    assert_eq!(probe_from(fresh, &srv.addr, "a.git", "alice", "nope"), 401);
}

/// The login-fairness measurement of benches/README ("Login fairness (#21)"): `ATTACKERS`
/// clients from as many loopback addresses send random user names with wrong passwords as fast
/// as the server answers them, with the failure limits off (the worst case: an endless supply
/// of fresh addresses) and the cache off (every request of the real push is a full argon2
/// check). alice, who pushed before from her address, pushes again while they run.
#[test]
fn a_returning_user_pushes_within_seconds_while_hundreds_of_addresses_guess() {
    const ATTACKERS: usize = 500;
    // A quiet 2-core machine needs ~0.3 s (benches/README); ten times that.
    const LIMIT: Duration = Duration::from_secs(3);
    let w = World::new();
    let creds = write_creds(&w, &[("alice", "s3cret")]);
    let srv = Serve::start(
        &w,
        &[
            "--credentials",
            &creds,
            "--auth-max-failures",
            "0",
            "--auth-cache-ttl",
            "0",
            "--max-concurrent-auth",
            "2",
        ],
    );
    w.bare("repos/a.git");
    w.work("src");
    w.commit("src", "a", "1");
    let url = format!("http://alice:s3cret@{}/a.git", srv.addr);
    ok(git(&w, "src", &["push", &url, "main"]));

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let addr: SocketAddr = srv.addr.parse().unwrap();
    let attackers: Vec<_> = (0..ATTACKERS)
        .map(|i| {
            let (stop, sent) = (stop.clone(), sent.clone());
            let src = Ipv4Addr::new(127, 1 + (i / 250) as u8, (i % 250) as u8, 1 + (i % 7) as u8);
            std::thread::spawn(move || {
                let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
                for n in 0..2000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(mut s) = connect_from(src, addr) else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    let req = format!(
                        "GET /a.git/info/refs?service=git-receive-pack HTTP/1.1\r\nHost: {addr}\r\n\
                         Authorization: Basic {}\r\nConnection: close\r\n\r\n",
                        base64_basic(&format!("u{i}x{n}:wrong"))
                    );
                    if s.write_all(req.as_bytes()).is_err() {
                        continue;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    *statuses.entry(read_response(s).status).or_default() += 1;
                }
                statuses
            })
        })
        .collect();
    // Let the checkers' queue fill.
    std::thread::sleep(Duration::from_secs(3));
    let before = metric(&srv.addr, "berth_password_verifications_total");
    w.commit("src", "a", "2");
    let start = Instant::now();
    let pushed = git(&w, "src", &["push", &url, "main"]);
    let took = start.elapsed();
    let during = metric(&srv.addr, "berth_password_verifications_total") - before;
    stop.store(true, Ordering::Relaxed);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for a in attackers {
        for (s, n) in a.join().unwrap() {
            *statuses.entry(s).or_default() += n;
        }
    }
    eprintln!(
        "login fairness: alice pushed in {took:?} while {ATTACKERS} addresses guessed \
         ({} requests sent, {during} checks ran during the push, statuses {statuses:?})",
        sent.load(Ordering::Relaxed)
    );
    ok(pushed);
    assert!(took < LIMIT, "alice's push took {took:?}");
    assert!(
        statuses.get(&401).copied().unwrap_or(0) > 0
            && statuses.keys().all(|s| [401, 503].contains(s)),
        "the attackers were checked and refused: {statuses:?}"
    );
}

/// A changed credentials file takes effect within seconds, also for a password the cache holds;
/// a file that no longer loads keeps the last good one, with an error in the log.
#[test]
fn credentials_reload_on_change_and_the_cache_forgets_old_passwords() {
    let w = World::new();
    let creds = write_creds(&w, &[("alice", "old"), ("bob", "b0b")]);
    let srv = Serve::start(&w, &["--credentials", &creds, "--auth-max-failures", "0"]);
    w.bare("repos/a.git");
    w.work("src");
    w.commit("src", "a", "1");
    let local = Ipv4Addr::LOCALHOST;
    let status = |user: &str, password: &str| probe_from(local, &srv.addr, "a.git", user, password);
    assert_eq!(status("alice", "old"), 200);
    assert_eq!(status("alice", "old"), 200, "now cached");
    assert_eq!(status("bob", "b0b"), 200);

    write_creds(&w, &[("alice", "new")]);
    assert!(
        within(Duration::from_secs(10), || status("alice", "old") == 401),
        "the old password still works:\n{}",
        srv.log()
    );
    assert_eq!(status("alice", "new"), 200);
    assert_eq!(status("bob", "b0b"), 401, "a removed user is refused");
    let url = format!("http://alice:new@{}/a.git", srv.addr);
    ok(git(&w, "src", &["push", &url, "main"]));

    // A broken file: the last good credentials stay, and the log says why.
    std::fs::write(w.path("creds"), "alice:not-a-hash\n").unwrap();
    assert!(
        within(Duration::from_secs(10), || {
            let _ = status("alice", "new");
            srv.log().contains("credentials not reloaded")
        }),
        "no error logged:\n{}",
        srv.log()
    );
    assert_eq!(status("alice", "new"), 200);
    assert_eq!(status("alice", "old"), 401);
}

/// A synthetic ed25519 public key line (any 32 bytes are a key to the parser).
fn fake_key(i: u32) -> String {
    use base64::Engine;
    let mut blob = Vec::new();
    blob.extend_from_slice(&11u32.to_be_bytes());
    blob.extend_from_slice(b"ssh-ed25519");
    blob.extend_from_slice(&32u32.to_be_bytes());
    let mut k = [0u8; 32];
    k[..4].copy_from_slice(&i.to_be_bytes());
    k[4..8].copy_from_slice(&0x6265_7274u32.to_be_bytes());
    blob.extend_from_slice(&k);
    format!(
        "ssh-ed25519 {} u{i}\n",
        base64::engine::general_purpose::STANDARD.encode(blob)
    )
}

/// User plus system CPU time in a `/proc/.../stat` line.
fn cpu_of(stat: &str) -> Duration {
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// The CPU time the process has used, without its keydir rescan thread's (that one runs every
/// few seconds whatever the clients do, so a slow machine would count more of it).
fn cpu(pid: u32) -> Duration {
    let total = cpu_of(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap());
    let rescan: Duration = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "berth-keydir")
        })
        .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
        .map(|s| cpu_of(&s))
        .sum();
    total.saturating_sub(rescan)
}

/// The server's CPU for `n` connections offering a key it does not know (each refused).
fn cpu_for_refused_offers(w: &World, srv: &ssh_serve::Serve, n: usize) -> Duration {
    let pid = srv.process.child.id();
    let before = cpu(pid);
    for _ in 0..n {
        let out = ssh_serve::ssh(w, srv, "mallory", &["git@127.0.0.1", "info"]);
        assert_eq!(out.status.code(), Some(255), "{out:?}");
    }
    cpu(pid) - before
}

/// With 20,000 keys in the keydir, a key offer costs what it costs with one (the keys are an
/// index, not a directory walk per offer), and the index still follows the directory: a
/// removed key file and a key removed from a file in place stop working.
#[test]
fn ssh_key_offers_cost_the_same_with_twenty_thousand_keys() {
    const OFFERS: usize = 30;
    let small = ssh_serve::world();
    ssh_serve::keygen(&small, "mallory");
    let big = ssh_serve::world();
    ssh_serve::keygen(&big, "mallory");
    let bob = ssh_serve::keygen(&big, "bob");
    std::fs::write(big.path("keydir/bob.pub"), &bob).unwrap();
    for i in 0..20_000 {
        std::fs::write(big.path(&format!("keydir/u{i}.pub")), fake_key(i)).unwrap();
    }
    let small_srv = ssh_serve::Serve::start(&small, &[]);
    let big_srv = ssh_serve::Serve::start(&big, &[]);
    assert!(
        String::from_utf8_lossy(
            &ssh_serve::ssh(&big, &big_srv, "alice", &["git@127.0.0.1", "info"]).stdout
        )
        .contains("hello alice")
    );
    let one = cpu_for_refused_offers(&small, &small_srv, OFFERS);
    let many = cpu_for_refused_offers(&big, &big_srv, OFFERS);
    eprintln!(
        "server CPU for {OFFERS} refused key offers: {one:?} with 1 key, {many:?} with 20,002"
    );
    // Ticks are 10 ms: a margin for them, and three times the one-key cost.
    assert!(
        many <= one * 3 + Duration::from_millis(300),
        "{many:?} with 20,002 keys against {one:?} with one"
    );

    // The index follows the directory.
    let info = |key: &str| ssh_serve::ssh(&big, &big_srv, key, &["git@127.0.0.1", "info"]);
    assert!(String::from_utf8_lossy(&info("bob").stdout).contains("hello bob"));
    std::fs::remove_file(big.path("keydir/alice@laptop.pub")).unwrap();
    assert!(
        within(Duration::from_secs(10), || info("alice").status.code()
            == Some(255)),
        "a removed key file still lets alice in"
    );
    // Rewritten in place (same file, the directory unchanged): found by the periodic rescan.
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(big.path("keydir/bob.pub"))
        .unwrap()
        .write_all(b"# bob's key was revoked\n")
        .unwrap();
    assert!(
        within(Duration::from_secs(20), || info("bob").status.code()
            == Some(255)),
        "a key removed from its file still lets bob in"
    );
    assert!(big_srv.log().contains("ssh keydir loaded"));
}
