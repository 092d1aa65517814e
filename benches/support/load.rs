//! The load driver of `http_load` and `ssh_load`: chains of one-commit fast-forwards made
//! before the clock starts, the repositories seeded with each chain's first commit, client
//! threads that push their share in order, the run's latencies, and the check afterwards that
//! every branch holds its last pushed commit and every repository is `git fsck --strict` clean.
//!
//! Every timed push is a fast-forward by one commit (commit, tree, one ~1 KiB blob) from the
//! value the previous push of that branch set; a server counts a push only when its report says
//! `unpack ok` and `ok <ref>` (the transport checks that). Since each push names the previous
//! commit as its old value, a push that reported `ok` without landing would make the next push
//! of that branch fail its compare-and-swap, and the last one is checked after the run: all
//! `ok` plus the right last value means every counted push landed, and none was lost.
//!
//! The client threads, their summary (pushes/s, p50, p99, max) and the HTTP client are those of
//! `berth bench load` (`src/cli/bench/load.rs`, included here): these benches add the servers
//! they start and compare, and the seeding and `git fsck` of repositories on this machine.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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

/// The zero id (SHA-1).
pub const ZERO: &str = "0000000000000000000000000000000000000000";

/// One branch and the commits it goes through: `commits[0]` is seeded before the run, each
/// push moves it to the next.
#[derive(Debug, Clone)]
pub struct Chain {
    /// The repository, relative to the server's root (`shared.git`).
    pub repo: String,
    /// The full ref name.
    pub refname: String,
    /// The commits in order, the seeded one first.
    pub commits: Vec<String>,
}

/// One push ready to send: which chain, which step, and the pack that takes it there.
pub struct Step {
    /// Index into the chains.
    pub chain: usize,
    /// The old value (the chain's previous commit).
    pub old: String,
    /// The new value.
    pub new: String,
    /// `git pack-objects --revs` of `new ^old`, as `git push` sends it.
    pub pack: Vec<u8>,
}

/// The generated history: `gen.git` under `dir` holding every chain's commits.
pub struct History {
    /// The bare repository the commits were made in.
    pub gen_dir: PathBuf,
    /// The chains, in the order asked for.
    pub chains: Vec<Chain>,
}

/// Make, through one `git fast-import`, a chain of `len + 1` commits for each of `branches`
/// (`(repository, full ref name)`): the seed and `len` pushes.
pub fn history(dir: &Path, branches: &[(String, String)], len: usize) -> History {
    let gen_dir = dir.join("gen.git");
    super::init(&gen_dir);
    let mut stream = String::new();
    let mut mark = 0usize;
    let mut marks = Vec::new();
    for c in 0..branches.len() {
        let mut chain_marks: Vec<usize> = Vec::new();
        for k in 0..=len {
            mark += 1;
            let msg = format!("chain {c} commit {k}\n");
            let mut content = String::new();
            let mut x = (mark as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            while content.len() < 1024 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let _ = writeln!(content, "{x:016x}");
            }
            let _ = write!(
                stream,
                "commit refs/heads/c{c}\nmark :{mark}\ncommitter Bench <bench@example.com> {} +0000\ndata {}\n{msg}",
                1_700_000_000 + mark,
                msg.len()
            );
            if let Some(prev) = chain_marks.last() {
                let _ = writeln!(stream, "from :{prev}");
            }
            let _ = write!(
                stream,
                "M 100644 inline file.txt\ndata {}\n{content}\n",
                content.len()
            );
            chain_marks.push(mark);
        }
        marks.push(chain_marks);
    }
    let marks_file = dir.join("marks");
    let mut c = git(&gen_dir);
    c.arg("fast-import")
        .arg("--quiet")
        .arg(format!("--export-marks={}", marks_file.display()));
    run(c, Some(stream.as_bytes()));
    let text = std::fs::read_to_string(&marks_file).expect("marks");
    let mut ids = vec![String::new(); mark + 1];
    for line in text.lines() {
        let (m, id) = line.split_once(' ').expect("mark line");
        ids[m.trim_start_matches(':').parse::<usize>().expect("mark")] = id.to_owned();
    }
    let chains = branches
        .iter()
        .zip(&marks)
        .map(|((repo, refname), chain_marks)| Chain {
            repo: repo.clone(),
            refname: refname.clone(),
            commits: chain_marks.iter().map(|m| ids[*m].clone()).collect(),
        })
        .collect();
    History { gen_dir, chains }
}

impl History {
    /// Push `k` (1-based) of chain `chain`: the pack `git push` would send for it.
    pub fn step(&self, chain: usize, k: usize) -> Step {
        let commits = &self.chains[chain].commits;
        let (old, new) = (&commits[k - 1], &commits[k]);
        let mut c = git(&self.gen_dir);
        c.args(["pack-objects", "--revs", "--stdout", "-q"]);
        let pack = run(c, Some(format!("{new}\n^{old}\n").as_bytes()));
        Step {
            chain,
            old: old.clone(),
            new: new.clone(),
            pack,
        }
    }

    /// The push that creates chain `chain`'s branch at its first commit (the seed, for a
    /// server that must be seeded through pushes: a cluster).
    pub fn first(&self, chain: usize) -> Step {
        let new = &self.chains[chain].commits[0];
        let mut c = git(&self.gen_dir);
        c.args(["pack-objects", "--revs", "--stdout", "-q"]);
        Step {
            chain,
            old: ZERO.to_owned(),
            new: new.clone(),
            pack: run(c, Some(format!("{new}\n").as_bytes())),
        }
    }

    /// The repositories the chains live in, each once, in order of first appearance.
    pub fn repos(&self) -> Vec<String> {
        let mut repos: Vec<String> = Vec::new();
        for c in &self.chains {
            if !repos.contains(&c.repo) {
                repos.push(c.repo.clone());
            }
        }
        repos
    }

    /// Under `root`: every repository bare (`git init --bare -b main`, with `ref_format`,
    /// `http.receivepack=true`), each chain's branch at its first commit.
    pub fn seed(&self, root: &Path, ref_format: &str) {
        std::fs::create_dir_all(root).expect("mkdir root");
        for r in self.repos() {
            let mut c = git(root);
            c.args(["init", "-q", "--bare", "-b", "main"])
                .arg(format!("--ref-format={ref_format}"))
                .arg(&r);
            run(c, None);
            let mut c = git(&root.join(&r));
            c.args(["config", "http.receivepack", "true"]);
            run(c, None);
            let mut c = git(&self.gen_dir);
            c.args(["push", "-q"]).arg(root.join(&r));
            for ch in self.chains.iter().filter(|ch| ch.repo == r) {
                c.arg(format!("{}:{}", ch.commits[0], ch.refname));
            }
            run(c, None);
        }
    }

    /// What is wrong under `root` after a run in which every chain was pushed to its end:
    /// branches not at their last commit, repositories `git fsck --strict` complains about.
    pub fn verify(&self, root: &Path) -> Vec<String> {
        let mut problems = Vec::new();
        for c in &self.chains {
            let want = c.commits.last().expect("a chain has commits");
            let mut cmd = git(&root.join(&c.repo));
            cmd.args(["rev-parse", "--verify", "-q", &c.refname]);
            let out = cmd.output().expect("git rev-parse");
            let got = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if &got != want {
                problems.push(format!(
                    "{} {}: is {got:?}, pushed {want}",
                    c.repo, c.refname
                ));
            }
        }
        for r in self.repos() {
            let mut cmd = git(&root.join(&r));
            cmd.args(["fsck", "--strict", "--no-progress"]);
            let out = cmd.output().expect("git fsck");
            // `notice: HEAD points to an unborn branch` (shared.git has no `main`) is no error.
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
}

/// The client threads, the summary and the HTTP client are `berth bench load`'s own.
// A second crate (each bench) compiling the binary's file: not a duplicate within one crate.
#[allow(dead_code, unused_imports, clippy::duplicate_mod)]
#[path = "../../src/cli/bench/load.rs"]
mod driver;
#[allow(unused_imports)]
pub use driver::{
    Outcome, Summary, basic, contains, http, load_average, ms, percentile, pkt, run_clients,
};
