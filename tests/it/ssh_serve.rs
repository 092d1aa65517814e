//! `berth serve --ssh-listen`: the embedded ssh server driven by the real OpenSSH client and
//! git over ssh, with the printed host key pinned (`StrictHostKeyChecking=yes`): push, fetch,
//! clone, protocol v2, keys (wrong, added while running), refused requests, concurrent pushes,
//! the host key across restarts, a client cut off mid-push, and the same push through OpenSSH's
//! sshd with a forced `berth receive-pack` leaving an identical repository.

use crate::common;
use common::World;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running `berth serve` with ssh, killed when dropped.
pub(crate) struct Serve {
    pub(crate) ssh_port: u16,
    known_hosts_line: String,
    pub(crate) process: common::ServeProcess,
}

impl Serve {
    /// `berth serve --root <world>/repos --listen 127.0.0.1:0 --ssh-listen 127.0.0.1:0
    /// --keydir <world>/keydir --ssh-host-key <world>/host_key <args>`; waits for the lines
    /// it prints and writes the known_hosts file the clients pin.
    pub(crate) fn start(w: &World, args: &[&str]) -> Serve {
        Serve::start_with_env(w, args, &[])
    }

    /// As [`Serve::start`], with more environment for the server process.
    pub(crate) fn start_with_env(w: &World, args: &[&str], env: &[(&str, &str)]) -> Serve {
        let mut cmd = w.cmd(common::berth(), ".");
        cmd.envs(env.iter().copied())
            .arg("serve")
            .arg("--root")
            .arg(w.path("repos"))
            .args(["--listen", "127.0.0.1:0", "--ssh-listen", "127.0.0.1:0"])
            .arg("--keydir")
            .arg(w.path("keydir"))
            .arg("--ssh-host-key")
            .arg(w.path("host_key"))
            .args(args);
        let said = |out: &str, prefix: &str| {
            out.lines()
                .find_map(|l| l.trim().strip_prefix(prefix).map(str::to_owned))
        };
        let process = common::ServeProcess::spawn(cmd, |out| {
            said(out, "berth serve: listening on ssh://").is_some()
                && said(out, "berth serve: known_hosts ").is_some()
        });
        let port = said(&process.stdout, "berth serve: listening on ssh://")
            .and_then(|a| a.trim_end_matches('/').rsplit(':').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no ssh port in {:?}", process.stdout));
        let known = said(&process.stdout, "berth serve: known_hosts ").unwrap();
        let s = Serve {
            ssh_port: port,
            known_hosts_line: known,
            process,
        };
        std::fs::write(w.path("known_hosts"), format!("{}\n", s.known_hosts_line)).unwrap();
        s
    }

    pub(crate) fn log(&self) -> String {
        self.process.log()
    }

    /// `ssh://git@127.0.0.1:<port>/<repo>`.
    pub(crate) fn url(&self, repo: &str) -> String {
        format!("ssh://git@127.0.0.1:{}/{repo}", self.ssh_port)
    }

    /// The ssh command line for `key` (under `<world>/keys/`), pinning the printed host key.
    pub(crate) fn ssh(&self, w: &World, key: &str) -> String {
        format!(
            "ssh -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o UserKnownHostsFile={} \
             -o StrictHostKeyChecking=yes -o LogLevel=ERROR -p {}",
            w.path("keys").join(key).display(),
            w.path("known_hosts").display(),
            self.ssh_port
        )
    }
}

/// A new ed25519 key `<world>/keys/<name>`; its public half is returned.
pub(crate) fn keygen(w: &World, name: &str) -> String {
    let dir = w.path("keys");
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(dir.join(name))
        .output()
        .expect("ssh-keygen (openssh-client) must be installed");
    assert!(out.status.success(), "{out:?}");
    std::fs::read_to_string(dir.join(format!("{name}.pub"))).unwrap()
}

/// A world with `keydir/alice@laptop.pub` and an empty `repos/`.
pub(crate) fn world() -> World {
    let w = World::new();
    std::fs::create_dir_all(w.path("keydir")).unwrap();
    std::fs::create_dir_all(w.path("repos")).unwrap();
    let alice = keygen(&w, "alice");
    std::fs::write(w.path("keydir/alice@laptop.pub"), alice).unwrap();
    w
}

/// git in `repo` over ssh with `key`.
pub(crate) fn git_ssh(w: &World, srv: &Serve, key: &str, repo: &str, args: &[&str]) -> Output {
    w.git_cmd(repo)
        .env("GIT_SSH_COMMAND", srv.ssh(w, key))
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `ssh <args>` with `key`; the command's output whatever its status.
pub(crate) fn ssh(w: &World, srv: &Serve, key: &str, args: &[&str]) -> Output {
    let line = srv.ssh(w, key);
    let mut parts = line.split(' ');
    let mut c = w.cmd(parts.next().unwrap(), ".");
    c.args(parts).args(args).stdin(Stdio::null());
    c.output().unwrap()
}

#[test]
fn push_fetch_clone_keys_and_refusals() {
    let w = world();
    let srv = Serve::start(&w, &[]);
    w.work("src");
    w.commit("src", "a", "1");
    w.git("src", &["tag", "-a", "-m", "t", "v1"]);

    // A push to a new repository creates it (auto-init on loopback) and lands.
    let out = ok(git_ssh(
        &w,
        &srv,
        "alice",
        "src",
        &["push", "--porcelain", &srv.url("demo.git"), "main", "v1"],
    ));
    assert!(
        out.contains("*\trefs/heads/main:refs/heads/main\t[new branch]"),
        "{out}"
    );
    let expected = w.refs("src");
    let expected: String = expected
        .lines()
        .filter(|l| !l.contains("refs/remotes/"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(w.refs("repos/demo.git"), expected);
    w.assert_clean("repos/demo.git");
    // The key's user is the pusher, whatever the ssh login name.
    let line = srv
        .log()
        .lines()
        .find(|l| l.contains("route=\"receive-pack\""))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(
        line.contains("method=SSH") && line.contains("user=alice") && line.contains("outcome=ok"),
        "{}",
        srv.log()
    );
    w.git(
        "repos/demo.git",
        &["config", "core.logAllRefUpdates", "true"],
    );

    // Hooks see the key's user as under HTTP: REMOTE_USER, REMOTE_ADDR, the reflog identity.
    let hook = w.path("repos/demo.git/hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho \"hook: $REMOTE_USER $REMOTE_ADDR $GIT_COMMITTER_NAME $GIT_COMMITTER_EMAIL\"\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    // Clone (protocol v2 by default), then an update pushed from the clone and fetched.
    ok(git_ssh(
        &w,
        &srv,
        "alice",
        ".",
        &["clone", "-q", "-b", "main", &srv.url("demo.git"), "clone"],
    ));
    assert_eq!(
        w.git("clone", &["rev-parse", "HEAD"]),
        w.git("src", &["rev-parse", "main"])
    );
    let c2 = w.commit("clone", "b", "2");
    let out = git_ssh(&w, &srv, "alice", "clone", &["push", "origin", "main"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("remote: hook: alice 127.0.0.1 alice alice@ssh.127.0.0.1"),
        "{out:?}"
    );
    // The reflog identity is the key's user, as git-http-backend's is the HTTP user.
    let reflog = w.git(
        "repos/demo.git",
        &[
            "reflog",
            "show",
            "-1",
            "--format=%gn <%ge>",
            "refs/heads/main",
        ],
    );
    assert_eq!(reflog.trim(), "alice <alice@ssh.127.0.0.1>");
    ok(git_ssh(
        &w,
        &srv,
        "alice",
        "src",
        &["fetch", "-q", &srv.url("demo.git"), "main"],
    ));
    assert_eq!(w.git("src", &["rev-parse", "FETCH_HEAD"]).trim(), c2);
    // GIT_PROTOCOL reaches git upload-pack: the server answers in version 2 when asked.
    let out = w
        .git_cmd("src")
        .env("GIT_SSH_COMMAND", srv.ssh(&w, "alice"))
        .env("GIT_TRACE_PACKET", "1")
        .args([
            "-c",
            "protocol.version=2",
            "ls-remote",
            &srv.url("demo.git"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("< version 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The scp-like spelling names the same repository.
    let scp = "git@127.0.0.1:demo.git";
    let out = w
        .git_cmd("src")
        .env(
            "GIT_SSH_COMMAND",
            srv.ssh(&w, "alice").replace(" -p ", " -o Port="),
        )
        .args(["ls-remote", scp, "refs/heads/main"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&c2),
        "{out:?}"
    );

    // The greeting: who you are and what you may read and write.
    let out = ssh(&w, &srv, "alice", &["git@127.0.0.1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("hello alice") && text.contains(" R W\tdemo.git"),
        "{text}"
    );

    // Missing repository for a fetch: git's message, nothing created.
    let out = git_ssh(
        &w,
        &srv,
        "alice",
        "src",
        &["ls-remote", &srv.url("nope.git")],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Not a git repository"),
        "{out:?}"
    );
    assert!(!w.path("repos/nope.git").exists());

    // A key not in the keydir is refused; added to the keydir (in a subdirectory, as gitolite
    // allows), it works without a restart.
    let bob = keygen(&w, "bob");
    let out = git_ssh(&w, &srv, "bob", "src", &["ls-remote", &srv.url("demo.git")]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied (publickey)"),
        "{out:?}"
    );
    std::fs::create_dir_all(w.path("keydir/team")).unwrap();
    std::fs::write(w.path("keydir/team/bob.pub"), &bob).unwrap();
    let out = ssh(&w, &srv, "bob", &["git@127.0.0.1", "info"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("hello bob"),
        "{out:?}"
    );
    // Removed again, refused again.
    std::fs::remove_file(w.path("keydir/team/bob.pub")).unwrap();
    let out = ssh(&w, &srv, "bob", &["git@127.0.0.1", "info"]);
    assert_eq!(out.status.code(), Some(255), "{out:?}");

    // Shells, ptys, forwarding and subsystems are refused.
    let out = ssh(&w, &srv, "alice", &["git@127.0.0.1", "sh", "-c", "id"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("berth: unknown command 'sh -c id'"),
        "{out:?}"
    );
    assert!(out.stdout.is_empty());
    let out = ssh(&w, &srv, "alice", &["-tt", "git@127.0.0.1"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PTY allocation request failed"),
        "{out:?}"
    );
    let out = ssh(&w, &srv, "alice", &["-W", "127.0.0.1:22", "git@127.0.0.1"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("forwarding failed"),
        "{out:?}"
    );
    let free = crate::common::free_ports(1)[0];
    let fwd = format!("127.0.0.1:{free}:127.0.0.1:22");
    let out = ssh(
        &w,
        &srv,
        "alice",
        &[
            "-o",
            "ExitOnForwardFailure=yes",
            "-N",
            "-R",
            &fwd,
            "git@127.0.0.1",
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("forwarding failed"),
        "{out:?}"
    );
    let out = ssh(&w, &srv, "alice", &["-s", "git@127.0.0.1", "sftp"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("subsystem request failed"),
        "{out:?}"
    );
    w.assert_clean("repos/demo.git");
}

#[test]
fn eight_concurrent_pushes_land() {
    let w = world();
    let srv = Serve::start(&w, &["--max-concurrent-pushes", "4"]);
    w.bare("repos/shared.git");
    w.work("src");
    w.commit("src", "a", "0");
    for i in 0..8 {
        w.git("src", &["branch", &format!("b{i}")]);
    }
    let ssh_cmd = srv.ssh(&w, "alice");
    let url = srv.url("shared.git");
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let mut c = w.git_cmd("src");
            c.env("GIT_SSH_COMMAND", &ssh_cmd)
                .args(["push", "-q", &url, &format!("b{i}")]);
            std::thread::spawn(move || c.output().unwrap())
        })
        .collect();
    for h in handles {
        ok(h.join().unwrap());
    }
    let refs = w.refs("repos/shared.git");
    assert_eq!(refs.lines().count(), 8, "{refs}");
    w.assert_clean("repos/shared.git");
    let pushes = srv.log().matches("route=\"receive-pack\"").count();
    assert_eq!(pushes, 8, "{}", srv.log());
}

#[test]
fn host_key_is_created_private_and_stable_across_restarts() {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let first = Serve::start(&w, &[]);
    let key_of = |line: &str| line.split_once(' ').unwrap().1.to_owned();
    let key = key_of(&first.known_hosts_line);
    assert!(key.starts_with("ssh-ed25519 "), "{key}");
    let mode = std::fs::metadata(w.path("host_key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    drop(first);
    let second = Serve::start(&w, &[]);
    assert_eq!(key_of(&second.known_hosts_line), key);
    // The pinned key is the one the server uses: strict checking passes.
    let out = ssh(&w, &second, "alice", &["git@127.0.0.1", "info"]);
    assert!(out.status.success(), "{out:?}");
    // A different host key fails the pin.
    std::fs::write(
        w.path("known_hosts"),
        format!(
            "[127.0.0.1]:{} {}",
            second.ssh_port,
            keygen(&w, "other").rsplit_once(' ').unwrap().0
        ),
    )
    .unwrap();
    let out = ssh(&w, &second, "alice", &["git@127.0.0.1", "info"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("HOST IDENTIFICATION HAS CHANGED"),
        "{out:?}"
    );
}

/// Deterministic incompressible bytes.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Read pkt-lines up to and including a flush.
pub(crate) fn read_until_flush(r: &mut impl Read) {
    loop {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&len).unwrap(), 16).unwrap();
        if n == 0 {
            return;
        }
        let mut body = vec![0u8; n - 4];
        r.read_exact(&mut body).unwrap();
    }
}

#[test]
fn client_gone_mid_push_leaves_nothing_behind() {
    let w = world();
    let srv = Serve::start(&w, &[]);
    w.bare("repos/cut.git");
    w.work("src");
    std::fs::write(w.path("src/big.bin"), noise(4 << 20, 5)).unwrap();
    let c = {
        w.git("src", &["add", "big.bin"]);
        w.git("src", &["commit", "-q", "-m", "big"]);
        w.git("src", &["rev-parse", "HEAD"]).trim().to_owned()
    };
    let pack = w.pack(true, &format!("{c}\n"));
    let line = srv.ssh(&w, "alice");
    let mut parts = line.split(' ');
    let mut child = w
        .cmd(parts.next().unwrap(), ".")
        .args(parts)
        .args(["git@127.0.0.1", "git-receive-pack '/cut.git'"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    read_until_flush(&mut stdout);
    let mut stdin = child.stdin.take().unwrap();
    let mut req = common::request(
        &[format!("{} {c} refs/heads/main", common::ZERO)],
        "report-status",
    );
    req.extend_from_slice(&pack[..pack.len() / 2]);
    stdin.write_all(&req).unwrap();
    stdin.flush().unwrap();
    // The pack is being received into a quarantine...
    let objects = w.path("repos/cut.git/objects");
    let start = Instant::now();
    while !std::fs::read_dir(&objects)
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("tmp_objdir"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no quarantine appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // ...when the client dies.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        common::leftovers_after_session(&w.path("repos/cut.git")),
        Vec::<std::path::PathBuf>::new()
    );
    assert_eq!(w.refs("repos/cut.git"), "");
    w.assert_clean("repos/cut.git");
}

const SSHD: &str = "/usr/sbin/sshd";

/// A running OpenSSH sshd, killed when dropped.
struct Sshd {
    child: Child,
    port: u16,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// sshd on a free loopback port with `authorized_keys` as its only key file (as tests/ssh.rs).
fn start_sshd(dir: &Path, authorized_keys: &str) -> Sshd {
    assert!(
        Path::new(SSHD).is_file(),
        "{SSHD} is missing: install openssh-server (apt-get install -y openssh-server)"
    );
    let _ = std::fs::create_dir_all("/run/sshd");
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(dir.join("host_key"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::write(dir.join("authorized_keys"), authorized_keys).unwrap();
    let port = crate::common::free_ports(1)[0];
    let config = format!(
        "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host_key\nPidFile {dir}/sshd.pid\n\
         AuthorizedKeysFile {dir}/authorized_keys\nStrictModes no\nUsePAM no\n\
         PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
         PermitRootLogin prohibit-password\n",
        dir = dir.display()
    );
    std::fs::write(dir.join("sshd_config"), config).unwrap();
    let child = Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(dir.join("sshd_config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut sshd = Sshd { child, port };
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(sshd.child.try_wait().unwrap().is_none(), "sshd exited");
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "sshd did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sshd
}

/// Every object of a repository: `<oid> <type> <size>` lines.
fn objects(w: &World, repo: &str) -> String {
    w.git(
        repo,
        &[
            "cat-file",
            "--batch-all-objects",
            "--batch-check",
            "--unordered",
        ],
    )
    .lines()
    .collect::<std::collections::BTreeSet<_>>()
    .into_iter()
    .map(|l| format!("{l}\n"))
    .collect()
}

#[test]
fn embedded_and_openssh_forced_command_leave_identical_repositories() {
    let w = world();
    let srv = Serve::start(&w, &[]);
    w.bare("repos/embedded.git");
    w.bare("forced.git");
    w.work("src");
    w.commit("src", "a", "1");
    w.git("src", &["tag", "-a", "-m", "t", "v1"]);
    w.commit("src", "b", "2");
    w.git("src", &["branch", "topic", "HEAD~1"]);

    let alice_pub = std::fs::read_to_string(w.path("keys/alice.pub")).unwrap();
    let forced = format!(
        "command=\"{} receive-pack {}\",no-pty,no-port-forwarding {}\n",
        common::berth().display(),
        w.path("forced.git").display(),
        alice_pub.trim()
    );
    let sshd = start_sshd(&w.path("sshd"), &forced);
    let sshd_cmd = format!(
        "ssh -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no \
         -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -p {}",
        w.path("keys/alice").display(),
        sshd.port
    );
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    let forced_url = format!("ssh://{}@127.0.0.1:{}/forced.git", user.trim(), sshd.port);

    for (ssh, url) in [
        (srv.ssh(&w, "alice"), srv.url("embedded.git")),
        (sshd_cmd, forced_url),
    ] {
        let push = |flags: &[&str], refspecs: &[&str]| {
            let out = w
                .git_cmd("src")
                .env("GIT_SSH_COMMAND", &ssh)
                .arg("push")
                .args(flags)
                .arg(&url)
                .args(refspecs)
                .output()
                .unwrap();
            assert!(out.status.success(), "{url}: {out:?}");
        };
        push(&[], &["main", "topic", "v1"]);
        // An update and a deletion in the second push.
        push(
            &["--force"],
            &["main~1:refs/heads/main", ":refs/heads/topic"],
        );
    }
    let forced: PathBuf = w.path("forced.git");
    assert!(forced.is_dir());
    assert_eq!(w.refs("repos/embedded.git"), w.refs("forced.git"));
    assert_eq!(objects(&w, "repos/embedded.git"), objects(&w, "forced.git"));
    assert_eq!(
        w.git("repos/embedded.git", &["symbolic-ref", "HEAD"]),
        w.git("forced.git", &["symbolic-ref", "HEAD"])
    );
    w.assert_clean("repos/embedded.git");
    w.assert_clean("forced.git");
}

/// Everything a connection sends until the server closes it (or `limit` passes: panics).
pub(crate) fn read_to_close(s: &mut TcpStream, limit: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return all,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return all,
            Err(e) => panic!("connection still open after {limit:?}: {e}"),
        }
    }
}

#[test]
fn connection_cap_and_authentication_timeout() {
    let w = world();
    let srv = Serve::start(
        &w,
        &[
            "--ssh-auth-timeout",
            "1",
            "--ssh-max-connections",
            "2",
            "--ssh-max-connections-per-address",
            "0",
        ],
    );
    let addr = ("127.0.0.1", srv.ssh_port);
    let mut idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Both are served: the server's version line comes first.
    for s in &mut idle {
        let mut line = [0u8; 8];
        s.read_exact(&mut line).unwrap();
        assert_eq!(&line, b"SSH-2.0-");
    }
    // A third is served too: the one that has waited longest without authenticating is cut
    // off to make room (conn_limits.rs has the per-address side).
    let mut third = TcpStream::connect(addr).unwrap();
    read_to_close(&mut idle[0], Duration::from_secs(5));
    let mut line = [0u8; 8];
    third.read_exact(&mut line).unwrap();
    assert_eq!(&line, b"SSH-2.0-");
    idle[0] = third;
    // The two that never authenticate are dropped after the timeout.
    let start = Instant::now();
    for s in &mut idle {
        read_to_close(s, Duration::from_secs(10));
    }
    assert!(start.elapsed() >= Duration::from_millis(500));
    // Then there is room again (once the server has noticed: a moment after the close).
    let start = Instant::now();
    loop {
        let out = ssh(&w, &srv, "alice", &["git@127.0.0.1", "info"]);
        if out.status.success() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{out:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn push_size_limit_applies_over_ssh() {
    let w = world();
    let srv = Serve::start(&w, &["--max-request-bytes", "20000"]);
    w.bare("repos/l.git");
    w.work("src");
    std::fs::write(w.path("src/big.bin"), noise(200_000, 9)).unwrap();
    w.git("src", &["add", "big.bin"]);
    w.git("src", &["commit", "-q", "-m", "big"]);
    let out = git_ssh(
        &w,
        &srv,
        "alice",
        "src",
        &["push", &srv.url("l.git"), "main"],
    );
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(w.refs("repos/l.git"), "");
    assert_eq!(
        common::leftovers_after_session(&w.path("repos/l.git")),
        Vec::<std::path::PathBuf>::new()
    );
    assert!(
        srv.log().contains("push larger than 20000 bytes"),
        "{}",
        srv.log()
    );
}

/// The access rules are HTTP's: over ssh the key names the user, a denied ref among allowed
/// ones gets `ng`, a repository the user may not read does not exist, `C` creates, and the
/// first branch pushed into a new repository is its HEAD.
#[test]
fn access_rules_apply_over_ssh() {
    let w = world();
    let bob = keygen(&w, "bob");
    std::fs::write(w.path("keydir/bob.pub"), bob).unwrap();
    std::fs::write(
        w.path("access.conf"),
        "repo team/app\n    RW+ = alice\n    -   refs/tags/ = bob\n    RW  = bob\n\
         repo secret\n    RW+ = alice\n\
         repo team/new-.*\n    C   = alice\n    RW+ = alice\n",
    )
    .unwrap();
    let access = w.path("access.conf");
    let srv = Serve::start(&w, &["--access", access.to_str().unwrap()]);
    w.bare("repos/team/app.git");
    w.bare("repos/secret.git");
    w.work("src");
    w.commit("src", "a", "1");
    w.git("src", &["tag", "v1"]);

    // bob: the branch lands, the tag is refused by the `-` rule, in one push.
    let out = git_ssh(
        &w,
        &srv,
        "bob",
        "src",
        &[
            "push",
            "--porcelain",
            &srv.url("team/app.git"),
            "main",
            "v1",
        ],
    );
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("*\trefs/heads/main:refs/heads/main\t[new branch]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("!\trefs/tags/v1:refs/tags/v1\t[remote rejected] (access denied"),
        "{stdout}"
    );
    let refs = w.refs("repos/team/app.git");
    assert!(
        refs.contains("refs/heads/main") && !refs.contains("refs/tags/v1"),
        "{refs}"
    );

    // bob may not read `secret`: it does not exist for him.
    let out = git_ssh(&w, &srv, "bob", ".", &["ls-remote", &srv.url("secret.git")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not found"), "{err}");
    // alice may.
    ok(git_ssh(
        &w,
        &srv,
        "alice",
        ".",
        &["ls-remote", &srv.url("secret.git")],
    ));

    // alice creates team/new-x by pushing (C), bob may not; HEAD is the first pushed branch.
    w.git("src", &["branch", "trunk"]);
    let out = git_ssh(
        &w,
        &srv,
        "bob",
        "src",
        &["push", &srv.url("team/new-x.git"), "trunk"],
    );
    assert!(!out.status.success());
    assert!(!w.path("repos/team/new-x.git").exists());
    ok(git_ssh(
        &w,
        &srv,
        "alice",
        "src",
        &["push", &srv.url("team/new-x.git"), "trunk"],
    ));
    assert_eq!(
        w.git("repos/team/new-x.git", &["symbolic-ref", "HEAD"])
            .trim(),
        "refs/heads/trunk"
    );
}
