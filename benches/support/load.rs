//! The load benches' driver is `berth bench load` itself: `http_load`, `ssh_load` and
//! `cluster_load` start the servers they compare, run the `berth` binary built with them as
//! `berth bench load --url … --json` against each, and read its report back ([`Loaded`]).
//! What the command does not do, because it only sees the server from outside, is here: the
//! repositories made on the server's disk before the run, and `git fsck --strict` of each of
//! them afterwards.
//!
//! `bench load` makes its pushes before the clock starts, sends them as `git push` does, counts
//! a push only when its report says `unpack ok` and `ok <ref>`, and checks every acknowledged
//! push with `git ls-remote` after the run (`src/cli/bench/load.rs`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{git, run};

/// `name` from the environment as a number, else `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `name` from the environment as a comma-separated list, else `default`.
pub fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The machine's load average (`/proc/loadavg`'s first three figures).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// `12.3 ms`.
pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// How the clients share repositories (`bench load --repos`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repos {
    /// Every client on its own branch of the repository at the URL (`shared.git`).
    One,
    /// Client `c` in `c<c>.git` under the URL.
    Each,
}

impl Repos {
    /// `one` (or `shared`), `each` (or `own`); exits with a message otherwise.
    pub fn parse(s: &str) -> Repos {
        match s {
            "one" | "shared" => Repos::One,
            "each" | "own" => Repos::Each,
            other => {
                eprintln!("unknown shape {other:?} (one, each)");
                std::process::exit(2);
            }
        }
    }

    /// The `--repos` value.
    pub fn arg(self) -> &'static str {
        match self {
            Repos::One => "one",
            Repos::Each => "each",
        }
    }

    /// How the table names it.
    pub fn name(self) -> &'static str {
        match self {
            Repos::One => "one repository",
            Repos::Each => "repository per client",
        }
    }

    /// The repositories `clients` clients push to, relative to the URL's directory: `bench
    /// load`'s `--url` is `<dir>/shared.git` for [`Repos::One`], `<dir>` for [`Repos::Each`].
    pub fn repos(self, clients: usize) -> Vec<String> {
        match self {
            Repos::One => vec!["shared.git".into()],
            Repos::Each => (0..clients).map(|c| format!("c{c}.git")).collect(),
        }
    }

    /// The URL for the server's repository directory `dir_url` (no trailing slash).
    pub fn url(self, dir_url: &str) -> String {
        match self {
            Repos::One => format!("{dir_url}/shared.git"),
            Repos::Each => dir_url.to_owned(),
        }
    }
}

/// One error kind of a run: how many, and the first message.
#[derive(Debug, serde::Deserialize)]
pub struct ErrorKind {
    pub kind: String,
    pub count: usize,
    pub first: String,
}

/// `bench load --json`'s report (the fields the benches read).
#[derive(Debug, serde::Deserialize)]
pub struct Loaded {
    pub attempted: usize,
    pub acknowledged: usize,
    pub wall_s: f64,
    pub pushes_per_s: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub errors: Vec<ErrorKind>,
    pub verified: usize,
    pub verification_failures: Vec<String>,
    pub ok: bool,
}

impl Loaded {
    /// What went wrong, a line each: errors by kind, then verification failures.
    pub fn problems(&self) -> Vec<String> {
        self.errors
            .iter()
            .map(|e| format!("{} {}; the first: {}", e.count, e.kind, e.first))
            .chain(self.verification_failures.iter().cloned())
            .collect()
    }

    /// `p50 1.2 ms, p99 3.4 ms, max 5.6 ms`.
    pub fn latencies(&self) -> String {
        let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1} ms"));
        format!(
            "p50 {}, p99 {}, max {}",
            f(self.p50_ms),
            f(self.p99_ms),
            f(self.max_ms)
        )
    }
}

/// One run of `berth bench load`.
pub struct Load {
    /// The `--url`s (several: client `c` takes URL `c mod n`).
    pub urls: Vec<String>,
    pub clients: usize,
    /// Pushes per client.
    pub pushes: usize,
    pub repos: Repos,
    /// More options (`--identity`, `--ssh-option`, `--ca-file`).
    pub extra: Vec<OsString>,
    /// Where the pushes are built.
    pub workdir: PathBuf,
}

impl Load {
    /// Run it; its report, or why there is none (the command could not run, or wrote no
    /// report: exit status 2). A run with refused or unverified pushes is a report with `ok`
    /// false.
    pub fn run(&self) -> Result<Loaded, String> {
        let mut c = Command::new(env!("CARGO_BIN_EXE_berth"));
        c.args(["bench", "load", "--json", "--repos", self.repos.arg()])
            .args(["--clients", &self.clients.to_string()])
            .args(["--pushes", &self.pushes.to_string()])
            .arg("--workdir")
            .arg(&self.workdir)
            .args(&self.extra);
        for u in &self.urls {
            c.arg("--url").arg(u);
        }
        let out = c
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("berth bench load: {e}"))?;
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "berth bench load ({}) wrote no report ({e}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
    }
}

/// Under `root`: each of `repos` bare (`git init --bare -b main`, with `ref_format`, and
/// `http.receivepack=true` for git http-backend; berth ignores it).
pub fn init_repos(root: &Path, repos: &[String], ref_format: &str) {
    std::fs::create_dir_all(root).expect("mkdir root");
    for r in repos {
        let mut c = git(root);
        c.args(["init", "-q", "--bare", "-b", "main"])
            .arg(format!("--ref-format={ref_format}"))
            .arg(r);
        run(c, None);
        let mut c = git(&root.join(r));
        c.args(["config", "http.receivepack", "true"]);
        run(c, None);
    }
}

/// What `git fsck --strict` says is wrong with each of `repos` under `root` (`notice:` lines,
/// such as an unborn HEAD, are not).
pub fn fsck(root: &Path, repos: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for r in repos {
        let mut cmd = git(&root.join(r));
        cmd.args(["fsck", "--strict", "--no-progress"]);
        let out = match cmd.output() {
            Ok(o) => o,
            Err(e) => {
                problems.push(format!("{r}: git fsck: {e}"));
                continue;
            }
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        let noisy = stderr.lines().any(|l| !l.starts_with("notice:"));
        if !out.status.success() || noisy {
            problems.push(format!(
                "{r}: git fsck --strict: {}{stderr}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }
    problems
}
