//! Load run (not a timed test): pushes over smart HTTP from parallel clients against
//! `berth serve` and against `git http-backend` behind lighttpd (mod_cgi), on loopback ephemeral
//! ports, with the same repositories and the same push sequence. Prints throughput and latency
//! per server, then checks that every pushed ref landed with the right value and that
//! `git fsck --strict` is clean on every repository; a server that lost or refused a push is
//! reported as FAILED instead of timed, and the bench exits non-zero.
//!
//! Prerequisite (this bench installs nothing): lighttpd with mod_cgi, mod_alias and mod_setenv,
//! e.g. `apt-get install -y lighttpd` on Debian; and git with `git http-backend`.
//!
//! ```text
//! TMPDIR=/dev/shm cargo bench --bench http_load
//! ```
//!
//! `BERTH_LOAD_WORKERS` (default 8) clients push `BERTH_LOAD_PUSHES` (default 1024) pushes in
//! all. Worker `w` alternates between a new commit on its own branch `refs/heads/w<w>` of the
//! shared repository `shared.git` and a new commit on `main` of its own repository
//! `own<w>.git`; every push is one commit (commit, tree, one ~1 KiB blob) on top of the
//! previous one of that branch, so each is a fast-forward the server must check.
//!
//! The client is not `git push`: each push is replayed as `git push` sends it — `GET
//! info/refs?service=git-receive-pack`, then `POST git-receive-pack` with the command line
//! (`report-status-v2 side-band-64k quiet object-format=sha1 agent=git/2.47.3`), the flush and
//! the pack `git pack-objects` made for it — over a plain HTTP/1.1 connection, one per request.
//! The request bodies are made before the clock starts, so the numbers measure the servers: a
//! real `git push` costs tens of milliseconds of client CPU (a handful of processes per push),
//! which on a small machine would compete with the server under test and dominate the latency.
//! The latency of a push is the GET plus the POST, up to the last byte of the report.
//!
//! Both servers get a fresh copy of the same empty repositories (bare, `http.receivepack=true`,
//! which berth ignores and git-http-backend needs for an unauthenticated push). berth serves
//! them at `http://127.0.0.1:<port>/<repo>` with its zero-configuration defaults (its access log
//! goes to a file); lighttpd at `http://127.0.0.1:<port>/git/<repo>` through
//! `alias.url` + `cgi.assign` as in git-http-backend's documentation, with `GIT_PROJECT_ROOT` and
//! `GIT_HTTP_EXPORT_ALL` from mod_setenv.
//!
//! `BERTH_LOAD_AUTH=1`: every request carries HTTP Basic credentials, checked by berth against
//! an argon2 credentials file (`berth passwd`; its credential cache spares all but the first
//! checks) and by lighttpd (mod_auth, mod_authn_file with a plain user file, which is what it
//! costs there: no hashing at all).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The bench user's password (`BERTH_LOAD_AUTH=1`).
const PASSWORD: &str = "load-bench-password";

/// `Authorization: Basic base64("bench:<PASSWORD>")`, when `BERTH_LOAD_AUTH=1`.
fn authorization() -> Option<&'static str> {
    static AUTH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    AUTH.get_or_init(|| {
        (std::env::var("BERTH_LOAD_AUTH").as_deref() == Ok("1")).then(|| {
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let b = format!("bench:{PASSWORD}").into_bytes();
            let mut out = String::from("Basic ");
            for chunk in b.chunks(3) {
                let n = chunk
                    .iter()
                    .enumerate()
                    .fold(0u32, |n, (i, &c)| n | (c as u32) << (16 - 8 * i));
                for i in 0..4 {
                    if i <= chunk.len() {
                        out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                    } else {
                        out.push('=');
                    }
                }
            }
            out
        })
    })
    .as_deref()
}

const ZERO: &str = "0000000000000000000000000000000000000000";
const CAPABILITIES: &str =
    "report-status-v2 side-band-64k quiet object-format=sha1 agent=git/2.47.3";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn git_cmd(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null");
    c
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_cmd(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn git_stdin(dir: &Path, args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = git_cmd(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn pkt(s: &str) -> Vec<u8> {
    format!("{:04x}{s}", s.len() + 4).into_bytes()
}

/// One branch that receives a sequence of commits.
struct Chain {
    repo: String,
    refname: String,
    commits: Vec<String>,
}

/// One push, ready to send.
struct Push {
    repo: String,
    refname: String,
    body: Vec<u8>,
}

/// The chains and, per worker, its pushes in order.
fn make_pushes(dir: &Path, workers: usize, per_worker: usize) -> (Vec<Chain>, Vec<Vec<Push>>) {
    let own = per_worker / 2;
    let shared = per_worker - own;
    let mut chains = Vec::new();
    for w in 0..workers {
        chains.push(Chain {
            repo: "shared.git".into(),
            refname: format!("refs/heads/w{w}"),
            commits: Vec::with_capacity(shared),
        });
        chains.push(Chain {
            repo: format!("own{w}.git"),
            refname: "refs/heads/main".into(),
            commits: Vec::with_capacity(own),
        });
    }
    let lens: Vec<usize> = (0..chains.len())
        .map(|i| if i % 2 == 0 { shared } else { own })
        .collect();
    // All commits through one fast-import: deterministic, and seconds rather than minutes.
    let gen_dir = dir.join("gen.git");
    git(dir, &["init", "-q", "--bare", gen_dir.to_str().unwrap()]);
    let mut stream = Vec::new();
    let mut mark = 0usize;
    let mut marks = Vec::new();
    for (c, &len) in lens.iter().enumerate() {
        let mut chain_marks = Vec::new();
        for k in 0..len {
            mark += 1;
            let msg = format!("chain {c} push {k}\n");
            let mut content = String::new();
            let mut x = (mark as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            while content.len() < 1024 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                content.push_str(&format!("{x:016x}\n"));
            }
            write!(
                stream,
                "commit refs/heads/c{c}\nmark :{mark}\ncommitter Bench <bench@example.com> {} +0000\ndata {}\n{msg}",
                1_700_000_000 + mark,
                msg.len()
            )
            .unwrap();
            if let Some(prev) = chain_marks.last() {
                writeln!(stream, "from :{prev}").unwrap();
            }
            write!(
                stream,
                "M 100644 inline file.txt\ndata {}\n{content}\n",
                content.len()
            )
            .unwrap();
            chain_marks.push(mark);
        }
        marks.push(chain_marks);
    }
    let marks_file = dir.join("marks");
    git_stdin(
        &gen_dir,
        &[
            "fast-import",
            "--quiet",
            &format!("--export-marks={}", marks_file.display()),
        ],
        &stream,
    );
    let text = std::fs::read_to_string(&marks_file).unwrap();
    let mut ids = vec![String::new(); mark + 1];
    for line in text.lines() {
        let (m, id) = line.split_once(' ').unwrap();
        ids[m.trim_start_matches(':').parse::<usize>().unwrap()] = id.to_owned();
    }
    for (chain, chain_marks) in chains.iter_mut().zip(&marks) {
        chain.commits = chain_marks.iter().map(|m| ids[*m].clone()).collect();
    }

    let mut per_worker_pushes: Vec<Vec<Push>> = (0..workers).map(|_| Vec::new()).collect();
    for (w, pushes) in per_worker_pushes.iter_mut().enumerate() {
        let (a, b) = (&chains[2 * w], &chains[2 * w + 1]);
        for i in 0..per_worker {
            let (chain, k) = if i % 2 == 0 { (a, i / 2) } else { (b, i / 2) };
            let new = &chain.commits[k];
            let old = if k == 0 { ZERO } else { &chain.commits[k - 1] };
            let revs = if k == 0 {
                format!("{new}\n")
            } else {
                format!("{new}\n^{old}\n")
            };
            let pack = git_stdin(
                &gen_dir,
                &["pack-objects", "--revs", "--stdout", "-q"],
                revs.as_bytes(),
            );
            let mut body = pkt(&format!("{old} {new} {}\0{CAPABILITIES}\n", chain.refname));
            body.extend_from_slice(b"0000");
            body.extend_from_slice(&pack);
            pushes.push(Push {
                repo: chain.repo.clone(),
                refname: chain.refname.clone(),
                body,
            });
        }
    }
    (chains, per_worker_pushes)
}

/// The same empty repositories for each server.
fn make_root(root: &Path, workers: usize) {
    std::fs::create_dir_all(root).unwrap();
    let mut repos = vec!["shared.git".to_owned()];
    repos.extend((0..workers).map(|w| format!("own{w}.git")));
    for r in &repos {
        git(root, &["init", "-q", "--bare", "-b", "main", r]);
        git(&root.join(r), &["config", "http.receivepack", "true"]);
    }
}

/// A minimal HTTP/1.1 exchange on a new connection (`Connection: close`): the status and the
/// body, de-chunked.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: git/2.47.3\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("Connection: close\r\n\r\n");
    let mut buf = req.into_bytes();
    buf.extend_from_slice(body);
    s.write_all(&buf)?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let bad = |what: &str| std::io::Error::other(format!("bad HTTP response: {what}"));
    let end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&resp[..end]).into_owned();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let mut rest = &resp[end + 4..];
    if !chunked {
        return Ok((status, rest.to_vec()));
    }
    let mut out = Vec::new();
    loop {
        let nl = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("chunk size"))?;
        let size = std::str::from_utf8(&rest[..nl])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .ok_or_else(|| bad("chunk size"))?;
        rest = &rest[nl + 2..];
        if size == 0 {
            return Ok((status, out));
        }
        if rest.len() < size + 2 {
            return Err(bad("truncated chunk"));
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// One push as `git push` makes it: discovery, then the request. `Err` says what went wrong.
fn push(addr: &str, prefix: &str, p: &Push) -> Result<(), String> {
    let auth: Vec<(&str, &str)> = authorization()
        .map(|a| ("Authorization", a))
        .into_iter()
        .collect();
    let (status, body) = http(
        addr,
        "GET",
        &format!("{prefix}/{}/info/refs?service=git-receive-pack", p.repo),
        &auth,
        b"",
    )
    .map_err(|e| format!("GET: {e}"))?;
    if status != 200 || !contains(&body, b"# service=git-receive-pack\n") {
        return Err(format!(
            "GET: status {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ));
    }
    let (status, body) = http(
        addr,
        "POST",
        &format!("{prefix}/{}/git-receive-pack", p.repo),
        &[
            ("Content-Type", "application/x-git-receive-pack-request"),
            ("Accept", "application/x-git-receive-pack-result"),
        ]
        .into_iter()
        .chain(auth.iter().copied())
        .collect::<Vec<_>>(),
        &p.body,
    )
    .map_err(|e| format!("POST: {e}"))?;
    if status != 200
        || !contains(&body, b"unpack ok\n")
        || !contains(&body, format!("ok {}\n", p.refname).as_bytes())
    {
        return Err(format!(
            "POST {} {}: status {status}: {}",
            p.repo,
            p.refname,
            String::from_utf8_lossy(&body[..body.len().min(300)])
        ));
    }
    Ok(())
}

/// A running server, stopped when dropped.
struct Server {
    child: Child,
    addr: String,
    prefix: &'static str,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_berth(root: &Path, dir: &Path) -> Server {
    let log = std::fs::File::create(dir.join("berth-serve.log")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(root);
    if authorization().is_some() {
        let mut passwd = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["passwd", "bench"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        passwd
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{PASSWORD}\n").as_bytes())
            .unwrap();
        let line = passwd.wait_with_output().unwrap();
        assert!(line.status.success());
        let creds = dir.join("credentials");
        std::fs::write(&creds, line.stdout).unwrap();
        cmd.arg("--credentials").arg(creds);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("berth serve: listening on http://")
        .and_then(|a| a.strip_suffix('/'))
        .unwrap_or_else(|| panic!("berth serve did not start: {line:?}"))
        .to_owned();
    Server {
        child,
        addr,
        prefix: "",
    }
}

fn find_lighttpd() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|d| d.join("lighttpd"))
        .find(|p| p.is_file())
}

fn start_lighttpd(lighttpd: &Path, root: &Path, dir: &Path) -> Server {
    let backend = PathBuf::from(git(dir, &["--exec-path"]).trim()).join("git-http-backend");
    if !backend.is_file() {
        eprintln!("http_load: {} is missing", backend.display());
        std::process::exit(2);
    }
    // An ephemeral port: bound by us, released, handed to lighttpd.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    let error_log = dir.join("lighttpd-error.log");
    let conf = dir.join("lighttpd.conf");
    let auth = if authorization().is_some() {
        let users = dir.join("lighttpd-users");
        std::fs::write(&users, format!("bench:{PASSWORD}\n")).unwrap();
        format!(
            r#"server.modules += ("mod_auth", "mod_authn_file")
auth.backend = "plain"
auth.backend.plain.userfile = "{}"
auth.require = ( "/git" => ( "method" => "basic", "realm" => "git", "require" => "valid-user" ) )
"#,
            users.display()
        )
    } else {
        String::new()
    };
    std::fs::write(
        &conf,
        format!(
            r#"server.modules = ("mod_alias", "mod_cgi", "mod_setenv")
server.document-root = "{www}"
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = "{error_log}"
server.max-connections = 1024
alias.url = ( "/git" => "{backend}" )
$HTTP["url"] =~ "^/git" {{
    cgi.assign = ( "" => "" )
    setenv.add-environment = (
        "GIT_PROJECT_ROOT" => "{root}",
        "GIT_HTTP_EXPORT_ALL" => ""
    )
}}
{auth}"#,
            www = www.display(),
            error_log = error_log.display(),
            backend = backend.display(),
            root = root.display(),
        ),
    )
    .unwrap();
    let mut child = Command::new(lighttpd)
        .arg("-D")
        .arg("-f")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("lighttpd-stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join("lighttpd-stderr.log")).unwrap_or_default()
                + &std::fs::read_to_string(&error_log).unwrap_or_default();
            eprintln!("http_load: lighttpd exited ({status}) on start:\n{log}");
            std::process::exit(2);
        }
        if TcpStream::connect(&addr).is_ok() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            eprintln!("http_load: lighttpd did not listen on {addr} within 10 s");
            std::process::exit(2);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Server {
        child,
        addr,
        prefix: "/git",
    }
}

struct Outcome {
    wall: Duration,
    latencies: Vec<Duration>,
    errors: Vec<String>,
}

fn run(server: &Server, pushes: &Arc<Vec<Vec<Push>>>) -> Outcome {
    let workers = pushes.len();
    let barrier = Arc::new(Barrier::new(workers + 1));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let pushes = pushes.clone();
            let barrier = barrier.clone();
            let addr = server.addr.clone();
            let prefix = server.prefix;
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut errors = Vec::new();
                barrier.wait();
                for p in &pushes[w] {
                    let t = Instant::now();
                    match push(&addr, prefix, p) {
                        Ok(()) => lat.push(t.elapsed()),
                        Err(e) => errors.push(e),
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    for h in handles {
        let (l, e) = h.join().unwrap();
        latencies.extend(l);
        errors.extend(e);
    }
    Outcome {
        wall: start.elapsed(),
        latencies,
        errors,
    }
}

/// What is wrong with the repositories after the run: refs that did not land, fsck errors.
fn verify(root: &Path, chains: &[Chain], workers: usize) -> Vec<String> {
    let mut problems = Vec::new();
    for c in chains {
        let Some(want) = c.commits.last() else {
            continue;
        };
        let out = git_cmd(&root.join(&c.repo))
            .args(["rev-parse", "--verify", "-q", &c.refname])
            .output()
            .unwrap();
        let got = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if &got != want {
            problems.push(format!(
                "{} {}: is {got:?}, pushed {want}",
                c.repo, c.refname
            ));
        }
    }
    let mut repos = vec!["shared.git".to_owned()];
    repos.extend((0..workers).map(|w| format!("own{w}.git")));
    for r in &repos {
        let out = git_cmd(&root.join(r))
            .args(["fsck", "--strict", "--no-progress"])
            .output()
            .unwrap();
        // `notice: HEAD points to an unborn branch` (shared.git has no `main`) is not an error.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let noisy = stderr.lines().any(|l| !l.starts_with("notice:"));
        if !out.status.success() || noisy {
            problems.push(format!(
                "{r}: git fsck --strict: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    problems
}

/// The nearest-rank percentile of sorted `v`.
fn percentile(v: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` (or `--all-targets`) does not, and
    // a load run has no place in a test run.
    if !std::env::args().any(|a| a == "--bench") {
        println!("http_load: a load run; run it with `cargo bench --bench http_load`");
        return;
    }
    let workers = env_usize("BERTH_LOAD_WORKERS", 8).max(1);
    let total = env_usize("BERTH_LOAD_PUSHES", 1024).max(workers);
    let per_worker = total / workers;
    let Some(lighttpd) = find_lighttpd() else {
        eprintln!(
            "http_load: lighttpd not found (on PATH, /usr/sbin or /usr/local/sbin). This bench \
             compares berth serve with git http-backend behind lighttpd and installs nothing: \
             install it first, e.g. `apt-get install -y lighttpd` (Debian)."
        );
        std::process::exit(2);
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = Instant::now();
    let (chains, pushes) = make_pushes(dir, workers, per_worker);
    let pushes = Arc::new(pushes);
    let n: usize = pushes.iter().map(Vec::len).sum();
    let bytes: usize = pushes.iter().flatten().map(|p| p.body.len()).sum();
    println!(
        "http_load: {n} pushes ({workers} workers, {} bytes per request on average) prepared in {:.1} s in {}",
        bytes / n,
        t.elapsed().as_secs_f64(),
        dir.display()
    );
    if authorization().is_some() {
        println!("http_load: every request authenticated (HTTP Basic)");
    }
    println!(
        "git {}",
        git(dir, &["--version"])
            .trim()
            .trim_start_matches("git version ")
    );

    let mut rows = Vec::new();
    let mut failed = false;
    for name in ["berth serve", "git http-backend (lighttpd mod_cgi)"] {
        let sub = if name.starts_with("berth") {
            "berth"
        } else {
            "http-backend"
        };
        let root = dir.join(sub).join("repos");
        make_root(&root, workers);
        let server = if sub == "berth" {
            start_berth(&root, &dir.join(sub))
        } else {
            start_lighttpd(&lighttpd, &root, &dir.join(sub))
        };
        let mut out = run(&server, &pushes);
        drop(server);
        let problems = verify(&root, &chains, workers);
        if !out.errors.is_empty() || !problems.is_empty() {
            failed = true;
            println!(
                "{name}: FAILED ({} of {n} pushes refused or broken, {} problems after the run)",
                out.errors.len(),
                problems.len()
            );
            for e in out.errors.iter().chain(&problems).take(10) {
                println!("  {e}");
            }
            rows.push(format!("| {name} | FAILED | | | | | |"));
            continue;
        }
        out.latencies.sort();
        let rate = n as f64 / out.wall.as_secs_f64();
        let row = format!(
            "| {name} | {n} | {:.2} s | {rate:.1} | {} | {} | {} |",
            out.wall.as_secs_f64(),
            ms(percentile(&out.latencies, 50.0)),
            ms(percentile(&out.latencies, 99.0)),
            ms(*out.latencies.last().unwrap()),
        );
        println!("{name}: {n} pushes landed, refs and fsck --strict verified");
        rows.push(row);
    }
    println!();
    println!("| server | pushes | wall | pushes/s | p50 | p99 | max |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!("{r}");
    }
    if failed {
        std::process::exit(1);
    }
}
