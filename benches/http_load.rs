//! Load run (not a timed test): many small pushes at once over smart HTTP, against
//! `berth serve` and against `git http-backend` behind lighttpd (mod_cgi), on loopback
//! ephemeral ports, with the same repositories and the same pushes (issue 16 item 4: the
//! agent workload). Prints, per case, each server's pushes/s, p50 and p99 latency and berth's
//! ratio to git; every push counted was confirmed by its report, and after the run every branch
//! must hold its last pushed commit and every repository be `git fsck --strict` clean (see
//! `support/load.rs`). A server with a refused or lost push is reported FAILED, and the bench
//! exits 1.
//!
//! Prerequisite (this bench installs nothing): lighttpd with mod_cgi, mod_alias and mod_setenv,
//! e.g. `apt-get install -y lighttpd` on Debian; and git with `git http-backend`.
//!
//! ```text
//! TMPDIR=/dev/shm cargo bench --bench http_load
//! TMPDIR=/dev/shm BERTH_LOAD_SHAPES=shared BERTH_LOAD_CLIENTS=64 BERTH_LOAD_REF_FORMATS=reftable \
//!     cargo bench --bench http_load
//! ```
//!
//! The cases are every combination of:
//!
//! - `BERTH_LOAD_SHAPES` (default `shared,own`): `shared`, every client pushes its own branch
//!   `refs/heads/c<c>` of the one repository `shared.git`; `own`, client `c` pushes `main` of
//!   its own repository `own<c>.git`; `mixed`, client `c` alternates between the two (the
//!   workload of the first version of this bench).
//! - `BERTH_LOAD_CLIENTS` (default `1,8,64`): how many clients push at once.
//! - `BERTH_LOAD_REF_FORMATS` (default `files`; `files,reftable` for both): the repositories'
//!   ref storage (`git init --bare --ref-format=…`).
//!
//! Each case makes `BERTH_LOAD_PUSHES` pushes in all (default 1024, divided among the clients);
//! `BERTH_LOAD_ROUNDS` (default 1) runs each case that many times; `BERTH_LOAD_SERVERS=berth`
//! (or `git`) runs one server only, to profile it; `BERTH_LOAD_KEEP=1` leaves the directory
//! and the repositories behind for inspection; `BERTH_LOAD_SERVERS=berth,baseline` with
//! `BERTH_LOAD_BASELINE=<another berth binary>` compares two builds of berth in the same run. Within a case the two servers
//! run one after the other, the first alternating from case to case, each on a fresh copy of the
//! same seeded repositories. Each branch is seeded with a first commit before the clock starts,
//! so that every timed push is a one-commit fast-forward (commit, tree, one ~1 KiB blob;
//! ~1 KB request) that the server must check against the branch's current value.
//!
//! The client is not `git push`: each push is replayed as `git push` sends it — `GET
//! info/refs?service=git-receive-pack`, then `POST git-receive-pack` with the command line
//! (`report-status-v2 side-band-64k quiet object-format=sha1 agent=git/2.47.3`), the flush and
//! the pack `git pack-objects` made for it — over a plain HTTP/1.1 connection, one per request.
//! The request bodies are made before the clock starts, so the numbers measure the servers: a
//! real `git push` costs tens of milliseconds of client CPU (a handful of processes per push),
//! which on a small machine would compete with the server under test and dominate the latency.
//! The latency of a push is the GET plus the POST, up to the last byte of the report; a push
//! counts only if that report says `unpack ok` and `ok <ref>`.
//!
//! berth serves the root at `http://127.0.0.1:<port>/<repo>` with its zero-configuration
//! defaults (its access log goes to a file; `BERTH_LOAD_BERTH_ARGS` adds options); lighttpd at
//! `http://127.0.0.1:<port>/git/<repo>` through `alias.url` + `cgi.assign` as in
//! git-http-backend's documentation, with `GIT_PROJECT_ROOT` and `GIT_HTTP_EXPORT_ALL` from
//! mod_setenv (the repositories have `http.receivepack=true`, which berth ignores).
//!
//! `BERTH_LOAD_AUTH=1`: every request carries HTTP Basic credentials, checked by berth against
//! an argon2 credentials file (`berth passwd`; its credential cache spares all but the first
//! checks) and by lighttpd (mod_auth, mod_authn_file with a plain user file, which is what it
//! costs there: no hashing at all).

mod support;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::http::{self, Server, Shape, prepare, spawn_berth};
use support::load::{self, Summary, env_list, env_usize};

/// The bench user's password (`BERTH_LOAD_AUTH=1`).
const PASSWORD: &str = "load-bench-password";

/// `Authorization: Basic base64("bench:<PASSWORD>")`, when `BERTH_LOAD_AUTH=1`.
fn authorization() -> Option<&'static str> {
    static AUTH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    AUTH.get_or_init(|| {
        (std::env::var("BERTH_LOAD_AUTH").as_deref() == Ok("1"))
            .then(|| support::load::basic(&format!("bench:{PASSWORD}")))
    })
    .as_deref()
}

fn start_berth(bin: &Path, root: &Path, dir: &Path) -> Server {
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(root);
    // Extra options for experiments (`--max-concurrent-pushes 64`); none by default.
    if let Ok(extra) = std::env::var("BERTH_LOAD_BERTH_ARGS") {
        cmd.args(extra.split_whitespace());
    }
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
    spawn_berth(cmd, &dir.join("berth-serve.log"))
}

fn find_lighttpd() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|d| d.join("lighttpd"))
        .find(|p| p.is_file())
}

fn start_lighttpd(lighttpd: &Path, root: &Path, dir: &Path) -> Server {
    let mut exec_path = support::git(dir);
    exec_path.arg("--exec-path");
    let exec_path = String::from_utf8(support::run(exec_path, None)).unwrap();
    let backend = PathBuf::from(exec_path.trim()).join("git-http-backend");
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

/// What one server did in one case: its summary, or why it failed.
enum Verdict {
    Ok(Summary),
    Failed {
        refused: usize,
        problems: usize,
        first: Vec<String>,
        landed: Option<Summary>,
    },
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` (or `--all-targets`) does not, and
    // a load run has no place in a test run.
    if !std::env::args().any(|a| a == "--bench") {
        println!("http_load: a load run; run it with `cargo bench --bench http_load`");
        return;
    }
    let shapes: Vec<Shape> = env_list("BERTH_LOAD_SHAPES", "shared,own")
        .iter()
        .map(|s| Shape::parse(s))
        .collect();
    let clients: Vec<usize> = env_list("BERTH_LOAD_CLIENTS", "1,8,64")
        .iter()
        .map(|s| s.parse::<usize>().unwrap_or(1).max(1))
        .collect();
    let formats = env_list("BERTH_LOAD_REF_FORMATS", "files");
    let total = env_usize("BERTH_LOAD_PUSHES", 1024).max(1);
    let rounds = env_usize("BERTH_LOAD_ROUNDS", 1).max(1);
    // `berth` alone (to profile it), `git` alone, or both (the default); `baseline` is the berth
    // binary `BERTH_LOAD_BASELINE` names (another build, to compare with in the same run).
    let servers: Vec<String> = env_list("BERTH_LOAD_SERVERS", "berth,git")
        .into_iter()
        .filter(|s| matches!(s.as_str(), "berth" | "git" | "baseline"))
        .collect();
    let baseline = PathBuf::from(std::env::var_os("BERTH_LOAD_BASELINE").unwrap_or_default());
    if servers.iter().any(|s| s == "baseline") && !baseline.is_file() {
        eprintln!(
            "http_load: BERTH_LOAD_SERVERS has baseline but BERTH_LOAD_BASELINE names no file"
        );
        std::process::exit(2);
    }
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
    // `BERTH_LOAD_KEEP=1`: leave the directory and the repositories for inspection.
    let keep = std::env::var("BERTH_LOAD_KEEP").as_deref() == Ok("1");
    let mut version = support::git(dir);
    version.arg("--version");
    let version = String::from_utf8(support::run(version, None)).unwrap();
    println!(
        "http_load: {} in {}; load average {}{}",
        version.trim(),
        dir.display(),
        load::load_average(),
        if authorization().is_some() {
            "; every request authenticated (HTTP Basic)"
        } else {
            ""
        }
    );

    let mut rows = Vec::new();
    let mut failed = false;
    let mut case_no = 0usize;
    for &shape in &shapes {
        for &n in &clients {
            let case_dir = dir.join(format!("{shape:?}-{n}"));
            std::fs::create_dir_all(&case_dir).unwrap();
            let t = Instant::now();
            let (history, work) = prepare(&case_dir, shape, n, total);
            let pushes: usize = work.iter().map(Vec::len).sum();
            println!(
                "\n{} clients, {}: {pushes} pushes prepared in {:.1} s",
                n,
                shape.name(),
                t.elapsed().as_secs_f64()
            );
            for format in &formats {
                for round in 0..rounds {
                    let case = format!("{n} × {}, {format}", shape.name());
                    let mut results: Vec<(&str, Verdict)> = Vec::new();
                    // Each case starts with the next server in turn.
                    let mut order = servers.clone();
                    let turn = case_no % order.len().max(1);
                    order.rotate_left(turn);
                    case_no += 1;
                    for which in order.iter().map(String::as_str) {
                        let sub = case_dir.join(format!("{format}-{round}-{which}"));
                        let root = sub.join("repos");
                        history.seed(&root, format);
                        let server = match which {
                            "berth" => {
                                start_berth(env!("CARGO_BIN_EXE_berth").as_ref(), &root, &sub)
                            }
                            "baseline" => start_berth(&baseline, &root, &sub),
                            _ => start_lighttpd(&lighttpd, &root, &sub),
                        };
                        let load = load::load_average();
                        let mut out = load::run_clients(&work, |_, p| {
                            http::push(&server.addr, server.prefix, authorization(), p)
                        });
                        drop(server);
                        let problems = history.verify(&root);
                        let summary = out.summary();
                        let result = if out.errors.is_empty() && problems.is_empty() {
                            Verdict::Ok(summary.expect("pushes"))
                        } else {
                            failed = true;
                            Verdict::Failed {
                                refused: out.errors.len(),
                                problems: problems.len(),
                                first: out
                                    .errors
                                    .iter()
                                    .chain(&problems)
                                    .take(5)
                                    .cloned()
                                    .collect(),
                                landed: summary,
                            }
                        };
                        report(&case, which, &load, pushes, &result);
                        results.push((which, result));
                        if !keep {
                            let _ = std::fs::remove_dir_all(&root);
                        }
                    }
                    results.sort_by_key(|(w, _)| {
                        ["berth", "git", "baseline"].iter().position(|k| k == w)
                    });
                    rows.push(table_rows(&case, pushes, &results));
                }
            }
        }
    }
    println!();
    println!(
        "| case | server | pushes | wall | pushes/s | p50 | p99 | p99/p50 | max | berth/git pushes/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows.iter().flatten() {
        println!("{r}");
    }
    if keep {
        println!("http_load: kept {}", tmp.keep().display());
    }
    if failed {
        std::process::exit(1);
    }
}

fn server_name(which: &str) -> &'static str {
    match which {
        "berth" => "berth serve",
        "baseline" => "berth serve (BERTH_LOAD_BASELINE)",
        _ => "git http-backend (lighttpd mod_cgi)",
    }
}

/// One line per server as it finishes.
fn report(case: &str, which: &str, load: &str, pushes: usize, r: &Verdict) {
    let name = server_name(which);
    match r {
        Verdict::Ok(s) => println!(
            "  {case}: {name}: {} of {pushes} pushes confirmed, refs and fsck --strict verified: \
             {:.1} pushes/s, p50 {}, p99 {}, max {} (load average at start {load})",
            s.pushes,
            s.rate,
            load::ms(s.p50),
            load::ms(s.p99),
            load::ms(s.max)
        ),
        Verdict::Failed {
            refused,
            problems,
            first,
            ..
        } => {
            println!(
                "  {case}: {name}: FAILED: {refused} of {pushes} pushes refused or broken, \
                 {problems} problems after the run (load average at start {load})"
            );
            for e in first {
                println!("    {}", e.replace('\n', " | "));
            }
        }
    }
}

/// The table rows of one case, berth first, with berth's ratio to git.
fn table_rows(case: &str, pushes: usize, results: &[(&str, Verdict)]) -> Vec<String> {
    let rate = |r: &Verdict| match r {
        Verdict::Ok(s) => Some(s.rate),
        Verdict::Failed { .. } => None,
    };
    let of = |which: &str| {
        results
            .iter()
            .find(|r| r.0 == which)
            .and_then(|r| rate(&r.1))
    };
    let ratio = match (of("berth"), of("git")) {
        (Some(b), Some(g)) => format!("{:.2}x", b / g),
        _ => String::new(),
    };
    results
        .iter()
        .map(|(which, r)| {
            let name = server_name(which);
            let ratio = if *which == "berth" { ratio.as_str() } else { "" };
            match r {
                Verdict::Ok(s) => format!(
                    "| {case} | {name} | {} | {:.2} s | {:.1} | {} | {} | {:.1} | {} | {ratio} |",
                    s.pushes,
                    s.wall.as_secs_f64(),
                    s.rate,
                    load::ms(s.p50),
                    load::ms(s.p99),
                    s.p99.as_secs_f64() / s.p50.as_secs_f64(),
                    load::ms(s.max),
                ),
                Verdict::Failed { refused, problems, landed, .. } => format!(
                    "| {case} | {name} | FAILED: {refused} of {pushes} refused, {problems} problems | {} | | | | | | |",
                    landed.map(|s| format!("{} confirmed in {:.2} s", s.pushes, s.wall.as_secs_f64())).unwrap_or_default()
                ),
            }
        })
        .collect()
}
