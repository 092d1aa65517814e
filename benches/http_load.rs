//! Load run (not a timed test): many small pushes at once over smart HTTP, against
//! `berth serve` and against `git http-backend` behind lighttpd (mod_cgi), on loopback
//! ephemeral ports, with the same repositories and the same pushes (issue 16 item 4: the
//! agent workload). Prints, per case, each server's pushes/s, p50 and p99 latency and berth's
//! ratio to git; every push counted was confirmed by its report, and after the run every branch
//! must hold its last acknowledged commit and every repository be `git fsck --strict` clean
//! (see `support/load.rs`). A server with a refused or lost push is reported FAILED, and the
//! bench exits 1.
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
//! - `BERTH_LOAD_SHAPES` (default `one,each`): `one` (or `shared`), every client pushes its own
//!   branch of the one repository `shared.git`; `each` (or `own`), client `c` pushes to its own
//!   repository `c<c>.git` (`bench load --repos one|each`).
//! - `BERTH_LOAD_CLIENTS` (default `1,8,64`): how many clients push at once.
//! - `BERTH_LOAD_REF_FORMATS` (default `files`; `files,reftable` for both): the repositories'
//!   ref storage (`git init --bare --ref-format=…`).
//!
//! Each case makes `BERTH_LOAD_PUSHES` pushes in all (default 1024, divided among the clients);
//! `BERTH_LOAD_ROUNDS` (default 1) runs each case that many times; `BERTH_LOAD_SERVERS=berth`
//! (or `git`) runs one server only, to profile it; `BERTH_LOAD_KEEP=1` leaves the directory
//! and the repositories behind for inspection; `BERTH_LOAD_SERVERS=berth,baseline` with
//! `BERTH_LOAD_BASELINE=<another berth binary>` compares two builds of berth in the same run.
//! Within a case the servers run one after the other, the first alternating from case to case,
//! each on fresh empty repositories.
//!
//! The pushes are `berth bench load`'s (this bench runs the `berth` binary built with it,
//! `support/load.rs`): made before the clock starts, sent as `git push` sends them (`GET
//! info/refs?service=git-receive-pack`, then `POST git-receive-pack`, one connection per
//! request), each client's first push creating its branch with a root commit and every next one
//! a one-commit fast-forward (commit, tree, one ~1 KiB blob; ~1 KB request); a push counts only
//! if its report says `unpack ok` and `ok <ref>`, and every acknowledged push is checked with
//! `git ls-remote` after the run. This bench adds what needs the server's disk: the
//! repositories made before, `git fsck --strict` of each after.
//!
//! berth serves the root at `http://127.0.0.1:<port>/<repo>` with its zero-configuration
//! defaults (its access log goes to a file; `BERTH_LOAD_BERTH_ARGS` adds options); lighttpd at
//! `http://127.0.0.1:<port>/git/<repo>` through `alias.url` + `cgi.assign` as in
//! git-http-backend's documentation, with `GIT_PROJECT_ROOT` and `GIT_HTTP_EXPORT_ALL` from
//! mod_setenv (the repositories have `http.receivepack=true`, which berth ignores).
//!
//! `BERTH_LOAD_AUTH=1`: every request carries HTTP Basic credentials (in the URL `bench load`
//! is given), checked by berth against an argon2 credentials file (`berth passwd`; its
//! credential cache spares all but the first checks) and by lighttpd (mod_auth, mod_authn_file
//! with a plain user file, which is what it costs there: no hashing at all).

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::load::{Load, Loaded, Repos, env_list, env_usize, fsck, init_repos, load_average};
use support::ports::free_ports;
use support::server::{Server, spawn_berth, wait_port};

/// The bench user's password (`BERTH_LOAD_AUTH=1`).
const PASSWORD: &str = "load-bench-password";

/// Whether every request is authenticated (`BERTH_LOAD_AUTH=1`).
fn authenticated() -> bool {
    std::env::var("BERTH_LOAD_AUTH").as_deref() == Ok("1")
}

fn start_berth(bin: &Path, root: &Path, dir: &Path) -> Server {
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(root);
    // Extra options for experiments (`--max-concurrent-pushes 64`); none by default.
    if let Ok(extra) = std::env::var("BERTH_LOAD_BERTH_ARGS") {
        cmd.args(extra.split_whitespace());
    }
    if authenticated() {
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
    let port = free_ports(1)[0];
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    let error_log = dir.join("lighttpd-error.log");
    let conf = dir.join("lighttpd.conf");
    let auth = if authenticated() {
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
    wait_port("lighttpd", port, &mut child);
    let addr = format!("127.0.0.1:{port}");
    Server {
        child,
        addr,
        prefix: "/git",
    }
}

/// What one server did in one case: `bench load`'s report and what `git fsck` found, or why
/// there is no report.
enum Verdict {
    Ok(Loaded),
    Failed {
        problems: Vec<String>,
        report: Option<Loaded>,
    },
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` (or `--all-targets`) does not, and
    // a load run has no place in a test run.
    if !std::env::args().any(|a| a == "--bench") {
        println!("http_load: a load run; run it with `cargo bench --bench http_load`");
        return;
    }
    let shapes: Vec<Repos> = env_list("BERTH_LOAD_SHAPES", "one,each")
        .iter()
        .map(|s| Repos::parse(s))
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
        load_average(),
        if authenticated() {
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
            let per_client = (total / n).max(1);
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
                        let sub = dir.join(format!("{}-{n}-{format}-{round}-{which}", shape.arg()));
                        let root = sub.join("repos");
                        let repos = shape.repos(n);
                        init_repos(&root, &repos, format);
                        let server = match which {
                            "berth" => {
                                start_berth(env!("CARGO_BIN_EXE_berth").as_ref(), &root, &sub)
                            }
                            "baseline" => start_berth(&baseline, &root, &sub),
                            _ => start_lighttpd(&lighttpd, &root, &sub),
                        };
                        let url = match authenticated() {
                            true => {
                                format!("http://bench:{PASSWORD}@{}{}", server.addr, server.prefix)
                            }
                            false => server.url(),
                        };
                        let load = load_average();
                        let report = Load {
                            urls: vec![shape.url(&url)],
                            clients: n,
                            pushes: per_client,
                            repos: shape,
                            extra: Vec::new(),
                            workdir: sub.clone(),
                        }
                        .run();
                        drop(server);
                        let mut problems = fsck(&root, &repos);
                        let result = match report {
                            Ok(r) if r.ok && problems.is_empty() => Verdict::Ok(r),
                            Ok(r) => {
                                problems.splice(0..0, r.problems());
                                Verdict::Failed {
                                    problems,
                                    report: Some(r),
                                }
                            }
                            Err(e) => {
                                problems.insert(0, e);
                                Verdict::Failed {
                                    problems,
                                    report: None,
                                }
                            }
                        };
                        failed |= matches!(result, Verdict::Failed { .. });
                        report_line(&case, which, &load, n * per_client, &result);
                        results.push((which, result));
                        if !keep {
                            let _ = std::fs::remove_dir_all(&root);
                        }
                    }
                    results.sort_by_key(|(w, _)| {
                        ["berth", "git", "baseline"].iter().position(|k| k == w)
                    });
                    rows.push(table_rows(&case, n * per_client, &results));
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
fn report_line(case: &str, which: &str, load: &str, pushes: usize, r: &Verdict) {
    let name = server_name(which);
    match r {
        Verdict::Ok(s) => println!(
            "  {case}: {name}: {} of {pushes} pushes acknowledged, refs (git ls-remote) and fsck \
             --strict verified: {:.1} pushes/s, {} (load average at start {load})",
            s.acknowledged,
            s.pushes_per_s.unwrap_or(0.0),
            s.latencies()
        ),
        Verdict::Failed { problems, report } => {
            println!(
                "  {case}: {name}: FAILED: {} of {pushes} pushes acknowledged, {} problems (load \
                 average at start {load})",
                report.as_ref().map_or(0, |r| r.acknowledged),
                problems.len()
            );
            for e in problems.iter().take(5) {
                println!("    {}", e.replace('\n', " | "));
            }
        }
    }
}

/// The table rows of one case, berth first, with berth's ratio to git.
fn table_rows(case: &str, pushes: usize, results: &[(&str, Verdict)]) -> Vec<String> {
    let of = |which: &str| {
        results
            .iter()
            .find(|r| r.0 == which)
            .and_then(|r| match &r.1 {
                Verdict::Ok(s) => s.pushes_per_s,
                Verdict::Failed { .. } => None,
            })
    };
    let ratio = match (of("berth"), of("git")) {
        (Some(b), Some(g)) => format!("{:.2}x", b / g),
        _ => String::new(),
    };
    let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1} ms"));
    results
        .iter()
        .map(|(which, r)| {
            let name = server_name(which);
            let ratio = if *which == "berth" { ratio.as_str() } else { "" };
            match r {
                Verdict::Ok(s) => format!(
                    "| {case} | {name} | {} | {:.2} s | {:.1} | {} | {} | {:.1} | {} | {ratio} |",
                    s.acknowledged,
                    s.wall_s,
                    s.pushes_per_s.unwrap_or(0.0),
                    f(s.p50_ms),
                    f(s.p99_ms),
                    s.p99_ms.unwrap_or(0.0) / s.p50_ms.unwrap_or(1.0).max(1e-9),
                    f(s.max_ms),
                ),
                Verdict::Failed { problems, report } => format!(
                    "| {case} | {name} | FAILED: {} of {pushes} acknowledged, {} problems | | | | | | | |",
                    report.as_ref().map_or(0, |r| r.acknowledged),
                    problems.len()
                ),
            }
        })
        .collect()
}
