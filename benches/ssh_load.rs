//! Load run (not a timed test): small pushes over ssh from parallel clients against
//! `berth serve --ssh-listen` (the embedded russh server), against OpenSSH's sshd running
//! berth's `git-receive-pack` (the symlink to `berth`), and against sshd running git's
//! `git-receive-pack`, on loopback ephemeral ports, with the same pushes into fresh
//! repositories. Prints throughput and latency per server; every acknowledged push is checked
//! on the server (`git ls-remote`) and every repository with `git fsck --strict`; a server that
//! lost or refused a push is reported as FAILED, and the bench exits 1.
//!
//! Prerequisites (this bench installs nothing): OpenSSH's `sshd` (`/usr/sbin/sshd`, Debian's
//! `openssh-server`), `ssh` and `ssh-keygen`, git; run as a user sshd lets log in with a key
//! (root in CI).
//!
//! ```text
//! TMPDIR=/dev/shm cargo bench --bench ssh_load
//! ```
//!
//! `BERTH_LOAD_WORKERS` (default 8) clients push `BERTH_LOAD_PUSHES` (default 1000) pushes in
//! all, client `c` to its own repository `c<c>.git`. The pushes are `berth bench load`'s (the
//! binary built with this bench, `support/load.rs`): made before the clock starts; each is one
//! `ssh` process (a new connection, key exchange and public-key authentication, as each
//! `git push` over ssh makes) running `git-receive-pack '<path>'`, reading the advertisement
//! and sending the command, the flush and the pack; its latency is from spawning `ssh` to the
//! end of the report. The ssh client's CPU competes with the servers on a small machine alike
//! for all three.
//!
//! sshd runs the client's command through a forced command, `PATH=<dir>:$PATH; eval "exec
//! $SSH_ORIGINAL_COMMAND"`, where `<dir>` holds `git-receive-pack` as a link to `berth` for
//! one key and nothing for the other (git's own `git-receive-pack` from `PATH`).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use support::load::{Load, Repos, env_usize, fsck, init_repos, load_average};
use support::ports::free_ports;
use support::server::wait_port;

const SSHD: &str = "/usr/sbin/sshd";

fn keygen(path: &Path) -> String {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .expect("ssh-keygen");
    assert!(out.status.success());
    let mut p = path.as_os_str().to_owned();
    p.push(".pub");
    std::fs::read_to_string(p).unwrap().trim().to_owned()
}

/// One server under test: its URL (the repositories' directory), its key, its root; the server
/// is killed when dropped.
struct Target {
    name: &'static str,
    url: String,
    key: PathBuf,
    root: PathBuf,
    child: Child,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bench load` against `t`, then `git fsck` of its repositories; whether all went well.
fn run(t: &Target, dir: &Path, clients: usize, per_client: usize) -> bool {
    let repos = Repos::Each.repos(clients);
    let load = load_average();
    let report = Load {
        urls: vec![t.url.clone()],
        clients,
        pushes: per_client,
        repos: Repos::Each,
        extra: [
            "--identity".into(),
            t.key.clone().into_os_string(),
            "--ssh-option".into(),
            "StrictHostKeyChecking=no".into(),
            "--ssh-option".into(),
            "UserKnownHostsFile=/dev/null".into(),
            "--ssh-option".into(),
            "LogLevel=ERROR".into(),
        ]
        .into(),
        workdir: dir.to_owned(),
    }
    .run();
    let fsck = fsck(&t.root, &repos);
    match report {
        Ok(r) if r.ok && fsck.is_empty() => {
            println!(
                "{:<28} {} pushes in {:.2} s: {:.1} pushes/s, {} (load average {load})",
                t.name,
                r.acknowledged,
                r.wall_s,
                r.pushes_per_s.unwrap_or(0.0),
                r.latencies()
            );
            true
        }
        Ok(r) => {
            let problems: Vec<String> = r.problems().into_iter().chain(fsck).collect();
            println!(
                "{:<28} FAILED: {} of {} acknowledged, {} problems, first: {}",
                t.name,
                r.acknowledged,
                r.attempted,
                problems.len(),
                problems.first().map_or("none", String::as_str)
            );
            false
        }
        Err(e) => {
            println!("{:<28} FAILED: {e}", t.name);
            false
        }
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("ssh_load: a load run; run it with `cargo bench --bench ssh_load`");
        return;
    }
    if !Path::new(SSHD).is_file() {
        eprintln!("ssh_load: {SSHD} not found: install openssh-server first");
        std::process::exit(2);
    }
    let clients = env_usize("BERTH_LOAD_WORKERS", 8).max(1);
    let total = env_usize("BERTH_LOAD_PUSHES", 1000).max(clients);
    let per_client = total / clients;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    println!(
        "ssh_load: {} pushes ({clients} clients) in {}",
        clients * per_client,
        dir.display()
    );
    let berth = PathBuf::from(env!("CARGO_BIN_EXE_berth"));
    let keys = dir.join("keys");
    std::fs::create_dir_all(keys.join("keydir")).unwrap();
    let key = keys.join("id");
    let public = keygen(&key);
    std::fs::write(keys.join("keydir/bench.pub"), format!("{public}\n")).unwrap();
    let git_key = keys.join("id_git");
    let git_public = keygen(&git_key);
    let repos = Repos::Each.repos(clients);

    let mut ok = true;
    // The embedded server.
    {
        let root = dir.join("embedded");
        init_repos(&root, &repos, "files");
        let port = free_ports(1)[0];
        let mut child = Command::new(&berth)
            .arg("serve")
            .arg("--root")
            .arg(&root)
            .args(["--listen", "127.0.0.1:0", "--ssh-listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--keydir")
            .arg(keys.join("keydir"))
            .arg("--ssh-host-key")
            .arg(keys.join("host_key"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_port("berth serve", port, &mut child);
        let t = Target {
            name: "berth serve --ssh-listen",
            url: format!("ssh://git@127.0.0.1:{port}/"),
            key: key.clone(),
            root,
            child,
        };
        ok &= run(&t, dir, clients, per_client);
    }
    // OpenSSH's sshd: the client's command run with berth's `git-receive-pack` first on PATH for
    // one key, git's for the other.
    let sshd_dir = dir.join("sshd");
    let berth_bin = sshd_dir.join("berth-bin");
    std::fs::create_dir_all(&berth_bin).unwrap();
    std::os::unix::fs::symlink(&berth, berth_bin.join("git-receive-pack")).unwrap();
    let _ = std::fs::create_dir_all("/run/sshd");
    keygen(&sshd_dir.join("host_key"));
    let forced = |path_dir: &Path| {
        format!(
            "command=\"PATH={}:$PATH; eval \\\"exec $SSH_ORIGINAL_COMMAND\\\"\",no-pty,no-port-forwarding",
            path_dir.display()
        )
    };
    let empty = sshd_dir.join("git-bin");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(
        sshd_dir.join("authorized_keys"),
        format!(
            "{} {public}\n{} {git_public}\n",
            forced(&berth_bin),
            forced(&empty)
        ),
    )
    .unwrap();
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_owned();
    for (name, key, sub) in [
        ("sshd + berth receive-pack", &key, "sshd-berth"),
        ("sshd + git receive-pack", &git_key, "sshd-git"),
    ] {
        let root = dir.join(sub);
        init_repos(&root, &repos, "files");
        let port = free_ports(1)[0];
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/{sub}.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             PermitRootLogin prohibit-password\nMaxStartups 100\nMaxSessions 100\n",
            d = sshd_dir.display()
        );
        let cfg = sshd_dir.join(format!("{sub}.conf"));
        std::fs::write(&cfg, config).unwrap();
        let mut child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_port("sshd", port, &mut child);
        let t = Target {
            name,
            url: format!("ssh://{user}@127.0.0.1:{port}{}", root.display()),
            key: key.clone(),
            root,
            child,
        };
        ok &= run(&t, dir, clients, per_client);
    }
    if !ok {
        std::process::exit(1);
    }
}
