//! Load run (not a timed test): small pushes over ssh from parallel clients against
//! `berth serve --ssh-listen` (the embedded russh server), against OpenSSH's sshd with a forced
//! `berth receive-pack`, and against sshd with a forced `git receive-pack`, on loopback ephemeral
//! ports, with the same repositories and the same pushes. Prints throughput and latency per
//! server, then checks that every repository ends at the last pushed commit and that
//! `git fsck --strict` is clean; a server that lost or refused a push is reported as FAILED.
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
//! all; worker `w` pushes a chain of commits (each: commit, tree, one ~1 KiB blob) to `main` of
//! its own repository `own<w>.git`, each a fast-forward of the previous (the branch is seeded
//! with the chain's first commit before the clock starts). Every push is one
//! `ssh` process (a new connection, key exchange and public-key authentication, as each
//! `git push` over ssh makes) running the remote command with the request on its stdin: the
//! command line (`report-status quiet`), the flush, and the pack `git pack-objects` made for it
//! before the clock started. Its latency is from spawning `ssh` to the end of the report.
//! The ssh client's CPU competes with the servers on a small machine alike for all three.
//! The driver (history, seeding, client threads, verification) is `support/load.rs`, shared
//! with `http_load`.

mod support;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::load::{self, History, env_usize, pkt};

const SSHD: &str = "/usr/sbin/sshd";

/// Per worker: the request bodies of its pushes, in order.
type Work = Vec<Vec<Vec<u8>>>;

fn make_pushes(dir: &Path, workers: usize, per_worker: usize) -> (History, Work) {
    let branches: Vec<(String, String)> = (0..workers)
        .map(|w| (format!("own{w}.git"), "refs/heads/main".to_owned()))
        .collect();
    let history = load::history(dir, &branches, per_worker);
    let work = (0..workers)
        .map(|w| {
            (1..=per_worker)
                .map(|k| {
                    let step = history.step(w, k);
                    let mut body = pkt(&format!(
                        "{} {} refs/heads/main\0report-status quiet\n",
                        step.old, step.new
                    ));
                    body.extend_from_slice(b"0000");
                    body.extend_from_slice(&step.pack);
                    body
                })
                .collect()
        })
        .collect();
    (history, work)
}

fn run_stdin(mut cmd: Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_port(port: u16, child: &mut Child) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "server exited");
        assert!(start.elapsed() < Duration::from_secs(20), "no listener");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One server under test: how to reach it and the remote command for worker `w`.
struct Target {
    name: &'static str,
    /// The login name: anything for berth, an account for sshd.
    login: String,
    port: u16,
    key: PathBuf,
    root: PathBuf,
    command: Box<dyn Fn(usize) -> String + Send + Sync>,
    child: Child,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ssh_cmd(t: &Target, w: usize) -> Command {
    let mut c = Command::new("ssh");
    c.arg("-i")
        .arg(&t.key)
        .args([
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-p",
        ])
        .arg(t.port.to_string())
        .arg(format!("{}@127.0.0.1", t.login))
        .arg((t.command)(w));
    c
}

fn run(t: &Target, history: &History, work: &Work) -> bool {
    let mut out = load::run_clients(work, |w, body| {
        let out = run_stdin(ssh_cmd(t, w), body);
        if out.status.success()
            && out.stdout.windows(9).any(|x| x == b"unpack ok")
            && out.stdout.windows(19).any(|x| x == b"ok refs/heads/main\n")
        {
            Ok(())
        } else {
            Err(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    let mut errors = std::mem::take(&mut out.errors);
    errors.extend(history.verify(&t.root));
    match out.summary() {
        Some(s) if errors.is_empty() => {
            println!(
                "{:<28} {} pushes in {:.2} s: {:.1} pushes/s, p50 {}, p99 {}, max {}",
                t.name,
                s.pushes,
                s.wall.as_secs_f64(),
                s.rate,
                load::ms(s.p50),
                load::ms(s.p99),
                load::ms(s.max)
            );
            true
        }
        _ => {
            println!(
                "{:<28} FAILED: {} errors, first: {}",
                t.name,
                errors.len(),
                errors.first().map_or("no push confirmed", String::as_str)
            );
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
    let workers = env_usize("BERTH_LOAD_WORKERS", 8).max(1);
    let total = env_usize("BERTH_LOAD_PUSHES", 1000).max(workers);
    let per_worker = total / workers;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = Instant::now();
    let (history, work) = make_pushes(dir, workers, per_worker);
    println!(
        "ssh_load: {} pushes ({workers} workers) prepared in {:.1} s in {}",
        workers * per_worker,
        t.elapsed().as_secs_f64(),
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

    let mut ok = true;
    // The embedded server.
    {
        let root = dir.join("embedded");
        history.seed(&root, "files");
        let port = free_port();
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
        wait_port(port, &mut child);
        let t = Target {
            name: "berth serve --ssh-listen",
            login: "git".into(),
            port,
            key: key.clone(),
            root,
            command: Box::new(|w| format!("git-receive-pack '/own{w}.git'")),
            child,
        };
        ok &= run(&t, &history, &work);
    }
    // OpenSSH's sshd with forced commands: berth receive-pack for one key, git receive-pack for
    // the other; the client's command is the repository path.
    let sshd_dir = dir.join("sshd");
    std::fs::create_dir_all(&sshd_dir).unwrap();
    let _ = std::fs::create_dir_all("/run/sshd");
    keygen(&sshd_dir.join("host_key"));
    std::fs::write(
        sshd_dir.join("authorized_keys"),
        format!(
            "command=\"exec {} receive-pack \\\"$SSH_ORIGINAL_COMMAND\\\"\",no-pty,no-port-forwarding {public}\n\
             command=\"exec git receive-pack \\\"$SSH_ORIGINAL_COMMAND\\\"\",no-pty,no-port-forwarding {git_public}\n",
            berth.display()
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
        history.seed(&root, "files");
        let port = free_port();
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
        wait_port(port, &mut child);
        let r = root.clone();
        let t = Target {
            name,
            login: user.clone(),
            port,
            key: key.clone(),
            root,
            command: Box::new(move |w| r.join(format!("own{w}.git")).display().to_string()),
            child,
        };
        ok &= run(&t, &history, &work);
    }
    if !ok {
        std::process::exit(1);
    }
}
