//! Pushes over a real OpenSSH `sshd` on loopback to berth, with the stock git client: berth as
//! the forced command of an `authorized_keys` line, and as `git-receive-pack` (a symlink to
//! berth) named by the client. sshd must be installed (`/usr/sbin/sshd`, Debian's
//! `openssh-server`; `.ci/run` installs it): without it this test fails, it does not skip.

use crate::common;
use common::World;

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SSHD: &str = "/usr/sbin/sshd";

/// A running sshd, killed when dropped.
struct Sshd {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "berth-test", "-f"])
        .arg(path)
        .output()
        .expect("ssh-keygen (openssh-client) must be installed");
    assert!(out.status.success(), "{out:?}");
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Start sshd on a free loopback port with `authorized_keys` as its only key file.
fn start_sshd(dir: &Path, authorized_keys: &str) -> Sshd {
    assert!(
        Path::new(SSHD).is_file(),
        "{SSHD} is missing: install openssh-server (apt-get install -y openssh-server)"
    );
    // sshd started as root insists on its privilege separation directory.
    let _ = std::fs::create_dir_all("/run/sshd");
    if !dir.join("host_key").exists() {
        keygen(&dir.join("host_key"));
    }
    std::fs::write(dir.join("authorized_keys"), authorized_keys).unwrap();
    // The port is free when picked (below the ephemeral range: no client socket takes it), but
    // a process outside the tests may bind it first: sshd then exits, and another port is tried. sshd is ready when it answers with its banner (not merely when something listens).
    for attempt in 1..=5 {
        let port = crate::common::free_ports(1)[0];
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host_key\nPidFile {dir}/sshd.pid\n\
             AuthorizedKeysFile {dir}/authorized_keys\nStrictModes no\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             PermitRootLogin prohibit-password\nLogLevel VERBOSE\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        let log = dir.join("sshd.log");
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut sshd = Sshd { child, port, log };
        let start = Instant::now();
        loop {
            if let Some(status) = sshd.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(&sshd.log).unwrap_or_default();
                if attempt < 5 && log.contains("Address already in use") {
                    break;
                }
                panic!("sshd exited with {status}:\n{log}");
            }
            if answers_ssh(port) {
                return sshd;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "sshd did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// Whether an SSH server answers on `port` with its banner.
fn answers_ssh(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut banner = [0u8; 4];
    s.read_exact(&mut banner).is_ok() && &banner == b"SSH-"
}

/// git's ssh command for the test key and port.
fn ssh_command(keys: &Path, port: u16) -> String {
    format!(
        "ssh -i {} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -p {port}",
        keys.join("id").display()
    )
}

#[test]
fn push_over_openssh_to_berth() {
    let w = World::new();
    let keys = w.path("ssh");
    std::fs::create_dir(&keys).unwrap();
    keygen(&keys.join("id"));
    let pubkey = std::fs::read_to_string(keys.join("id.pub")).unwrap();
    let berth = common::berth();
    w.bare("forced.git");
    w.bare("plain.git");
    // One key with berth as its forced command, whatever the client asks to run.
    let forced = format!(
        "command=\"{} receive-pack {}\",no-pty,no-port-forwarding,no-agent-forwarding,no-X11-forwarding {}",
        berth.display(),
        w.path("forced.git").display(),
        pubkey.trim()
    );
    let sshd = start_sshd(&keys, &format!("{forced}\n"));

    let ssh = ssh_command(&keys, sshd.port);
    let user = whoami();
    let url = |path: &Path| format!("ssh://{user}@127.0.0.1:{}{}", sshd.port, path.display());

    w.work("src");
    w.commit("src", "a", "1");
    w.git("src", &["tag", "-a", "-m", "t", "v1"]);
    w.commit("src", "b", "2");
    let push = |remote: &str, extra: &[&str]| {
        let mut c = w.git_cmd("src");
        c.env("GIT_SSH_COMMAND", &ssh)
            .args(["push", "--porcelain"])
            .args(extra)
            .args([remote, "main", "v1"]);
        c.output().unwrap()
    };
    let log = || std::fs::read_to_string(&sshd.log).unwrap_or_default();

    // The forced command: the URL's path is ignored, berth serves forced.git.
    let out = push(&url(Path::new("/anything.git")), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}\nsshd:\n{}",
        String::from_utf8_lossy(&out.stderr),
        log()
    );
    assert!(
        stdout.contains("*\trefs/heads/main:refs/heads/main\t[new branch]")
            && stdout.contains("*\trefs/tags/v1:refs/tags/v1\t[new tag]"),
        "{stdout}"
    );
    let expected = w.git(
        "src",
        &[
            "for-each-ref",
            "--format=%(objectname) %(objecttype) %(refname)",
            "refs/heads",
            "refs/tags",
        ],
    );
    assert_eq!(w.refs("forced.git"), expected);
    w.assert_clean("forced.git");
    assert!(
        log().contains("Accepted publickey"),
        "the push did not go through sshd:\n{}",
        log()
    );

    // A second push of a new commit: an update over the same transport.
    w.commit("src", "c", "3");
    let out = push(&url(Path::new("/anything.git")), &[]);
    assert!(out.status.success(), "{out:?}");
    let main = w.git("src", &["rev-parse", "main"]);
    assert_eq!(w.git("forced.git", &["rev-parse", "refs/heads/main"]), main);
    w.assert_clean("forced.git");
    drop(sshd);

    // Without a forced command, git runs `git-receive-pack '<path>'` on the server: here a
    // `git-receive-pack` symlink to berth, named with --receive-pack.
    let bin = w.path("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(&berth, bin.join("git-receive-pack")).unwrap();
    let sshd = start_sshd(&keys, &pubkey);
    let url = format!(
        "ssh://{user}@127.0.0.1:{}{}",
        sshd.port,
        w.path("plain.git").display()
    );
    let rp = format!("--receive-pack={}", bin.join("git-receive-pack").display());
    let mut c = w.git_cmd("src");
    let out = c
        .env("GIT_SSH_COMMAND", ssh_command(&keys, sshd.port))
        .args(["push", "--porcelain", &rp, &url, "main", "v1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{out:?}\nsshd:\n{}",
        std::fs::read_to_string(&sshd.log).unwrap_or_default()
    );
    assert_eq!(w.refs("plain.git"), w.refs("forced.git"));
    w.assert_clean("plain.git");
}
