//! A hostile request (issue 24 item 5): N `create` commands naming objects that do not exist,
//! then the empty pack, fed to `receive-pack --stateless-rpc` of a bare repository holding one
//! packed commit. Every command must be refused with git's `missing necessary objects` and no
//! ref created; the bench checks both, and prints the wall time of each receiver, berth at
//! `BERTH_BENCH_N` commands (default 200,000) and `git receive-pack` at `BERTH_BENCH_GIT_N`
//! (default 10,000: git spends a `rev-list` process per refused command, ~27 s for 10,000),
//! with the time per command so the two read side by side.
//!
//! Then a second hostile request: one create for each commit of a chain whose root commit's
//! tree (which every commit keeps) names a blob that does not exist, and the pack of the chain:
//! every ref is refused, and a connectivity check that walked the history again for each tip
//! cost the square of the chain (`BERTH_BENCH_CHAIN` commits for berth, default 20,000;
//! `BERTH_BENCH_GIT_CHAIN` for git, default 2,000).
//!
//! `TMPDIR=/dev/shm cargo bench --bench missing_objects` (`BERTH_BENCH_RUNS`, default 3;
//! `BERTH_BENCH_GIT_N=0` and `BERTH_BENCH_GIT_CHAIN=0` leave git out).

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use sha1::Digest as _;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("missing_objects: `cargo bench --bench missing_objects`");
        return;
    }
    let n = support::load::env_usize("BERTH_BENCH_N", 200_000);
    let git_n = support::load::env_usize("BERTH_BENCH_GIT_N", 10_000);
    let runs = support::load::env_usize("BERTH_BENCH_RUNS", 3).max(1);
    let tmp = tempfile::Builder::new()
        .prefix("berth-missing-")
        .tempdir()
        .expect("tempdir");
    let berth = env!("CARGO_BIN_EXE_berth");
    println!("load average before: {}", support::load::load_average());
    let mut rows = vec![("berth receive-pack", vec![berth, "receive-pack"], n)];
    if git_n > 0 {
        rows.push(("git receive-pack", vec!["git", "receive-pack"], git_n));
    }
    println!(
        "{:<20} {:>9} {:>10} {:>10} {:>10} {:>14}",
        "receiver", "commands", "min", "median", "max", "per command"
    );
    for (name, cmd, count) in rows {
        let request = request(count);
        report(tmp.path(), name, &cmd, &request, count, runs);
    }
    let chain_n = support::load::env_usize("BERTH_BENCH_CHAIN", 20_000);
    let git_chain_n = support::load::env_usize("BERTH_BENCH_GIT_CHAIN", 2_000);
    let chain = broken_chain(tmp.path(), chain_n.max(git_chain_n));
    println!("one history missing its root blob, a create for each of its commits:");
    let mut rows = vec![("berth receive-pack", vec![berth, "receive-pack"], chain_n)];
    if git_chain_n > 0 {
        rows.push(("git receive-pack", vec!["git", "receive-pack"], git_chain_n));
    }
    for (name, cmd, count) in rows {
        let request = chain.request(count);
        report(tmp.path(), name, &cmd, &request, count + 1, runs);
    }
    println!("load average after: {}", support::load::load_average());
}

/// `runs` runs of `request` through `cmd`, which must refuse all of its `count` commands: the
/// row of `name`.
fn report(tmp: &Path, name: &str, cmd: &[&str], request: &[u8], count: usize, runs: usize) {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| one_run(tmp, cmd, request, count))
        .collect();
    times.sort();
    let med = support::median(&mut times.clone());
    println!(
        "{name:<20} {count:>9} {:>8.3} s {:>8.3} s {:>8.3} s {:>11.2} µs",
        times[0].as_secs_f64(),
        med.as_secs_f64(),
        times[times.len() - 1].as_secs_f64(),
        med.as_secs_f64() * 1e6 / count as f64
    );
}

/// A chain of commits on a root commit whose tree names a blob no object has (each commit
/// keeps that tree), in a repository of its own.
struct Chain {
    repo: std::path::PathBuf,
    /// The root, then the chain, oldest first.
    commits: Vec<String>,
    /// The root's tree.
    tree: String,
}

/// [`Chain`] of `n` commits on the root, made by `git fast-import` ([`support::commits_on`]).
fn broken_chain(tmp: &Path, n: usize) -> Chain {
    let repo = tmp.join("chain.git");
    support::init(&repo);
    let text = |out: Vec<u8>| String::from_utf8(out).expect("utf-8").trim().to_owned();
    let mut c = support::git(&repo);
    c.args(["mktree", "--missing"]);
    let gone = "ab".repeat(20);
    let tree = text(support::run(
        c,
        Some(format!("100644 blob {gone}\tgone\n").as_bytes()),
    ));
    let mut c = support::git(&repo);
    c.args(["commit-tree", "-m", "root", &tree]);
    let root = text(support::run(c, None));
    let chain = support::commits_on(&repo, n, support::Shape::EmptyTrees, Some(&root));
    let mut commits = vec![root];
    commits.extend(chain.iter().map(ToString::to_string));
    Chain {
        repo,
        commits,
        tree,
    }
}

impl Chain {
    /// A create of `refs/heads/b<i>` for the root and each of the first `n` commits of the
    /// chain, and the pack of them.
    fn request(&self, n: usize) -> Vec<u8> {
        let commits = &self.commits[..=n];
        let mut buf = Vec::with_capacity(n * 110);
        for (i, c) in commits.iter().enumerate() {
            let mut line = format!("{} {c} refs/heads/b{i}", "0".repeat(40));
            if i == 0 {
                line.push_str("\0report-status side-band-64k quiet");
            }
            buf.extend_from_slice(format!("{:04x}{line}", line.len() + 4).as_bytes());
        }
        buf.extend_from_slice(b"0000");
        let ids: String = commits
            .iter()
            .chain(std::iter::once(&self.tree))
            .map(|id| format!("{id}\n"))
            .collect();
        let mut c = support::git(&self.repo);
        c.args(["pack-objects", "-q", "--stdout"]);
        buf.extend(support::run(c, Some(ids.as_bytes())));
        buf
    }
}

/// What a client sends for `n` creates of `refs/heads/b<i>` at ids no object has.
fn request(n: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(n * 110);
    for i in 0..n {
        let digest = sha1::Sha1::digest(format!("missing-{i}").as_bytes());
        let hex = berth::ObjectId::try_from(digest.as_slice()).expect("20 bytes");
        let mut line = format!("{} {hex} refs/heads/b{i}", "0".repeat(40));
        if i == 0 {
            line.push_str("\0report-status side-band-64k quiet");
        }
        buf.extend_from_slice(format!("{:04x}{line}", line.len() + 4).as_bytes());
    }
    buf.extend_from_slice(b"0000");
    let pack = b"PACK\0\0\0\x02\0\0\0\0";
    buf.extend_from_slice(pack);
    buf.extend_from_slice(&sha1::Sha1::digest(pack));
    buf
}

/// One run into a fresh repository: its wall time, after checking that every command was
/// refused and no ref was created.
fn one_run(tmp: &Path, cmd: &[&str], request: &[u8], n: usize) -> Duration {
    let repo = tmp.join("target.git");
    let _ = std::fs::remove_dir_all(&repo);
    support::init(&repo);
    let commits = support::commits(&repo, 1, support::Shape::EmptyTrees);
    assert_eq!(commits.len(), 1);
    let mut c = support::git(&repo);
    c.args(["repack", "-adq"]);
    support::run(c, None);

    let mut c = std::process::Command::new(cmd[0]);
    c.args(&cmd[1..])
        .args(["--stateless-rpc", "."])
        .current_dir(&repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let start = Instant::now();
    let mut child = c.spawn().expect("receive-pack");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = request.to_vec();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait");
    let elapsed = start.elapsed();
    let _ = writer.join();
    let report = band1(&out.stdout);
    let refused = packets(&report)
        .iter()
        .filter(|l| l.starts_with(b"ng ") && l.ends_with(b" missing necessary objects\n"))
        .count();
    assert_eq!(refused, n, "{}: not every command refused", cmd.join(" "));
    let mut c = support::git(&repo);
    c.args(["for-each-ref", "refs/heads/b*"]);
    assert!(support::run(c, None).is_empty(), "a ref was created");
    elapsed
}

/// The data packets of `data` up to its flush, read by berth's own pkt-line reader.
fn packets(data: &[u8]) -> Vec<Vec<u8>> {
    use berth::protocol::pktline::{Packet, Reader};
    let mut reader = Reader::new(data);
    let mut out = Vec::new();
    while let Ok(Packet::Data(d)) = reader.read() {
        out.push(d.to_vec());
    }
    out
}

/// What side-band-64k carried on band 1 (the report), its packets joined.
fn band1(data: &[u8]) -> Vec<u8> {
    packets(data)
        .into_iter()
        .filter_map(|p| p.strip_prefix(b"\x01").map(<[u8]>::to_vec))
        .flatten()
        .collect()
}
