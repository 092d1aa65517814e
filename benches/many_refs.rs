//! Side by side: the same N-ref push (refs only, the objects already on the server, the 32-byte
//! empty pack `git push` sends) fed to `git receive-pack` and to `berth receive-pack`, the target
//! reset before every run and checked after it. Prints min / median per receiver and the ratio.
//!
//! `cargo bench --bench many_refs` (N from `BERTH_BENCH_REFS`, default 10000; runs from
//! `BERTH_BENCH_RUNS`, default 7).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EMPTY_PACK: &[u8] = b"PACK\x00\x00\x00\x02\x00\x00\x00\x00\x02\x9d\x08\x82\x3b\xd8\xa8\xea\xb5\x10\xad\x6a\xc7\x5c\x82\x3c\xfd\x3e\xd3\x1e";

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn main() {
    let n: usize = std::env::var("BERTH_BENCH_REFS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let runs: usize = std::env::var("BERTH_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    // TMPDIR=/dev/shm measures on tmpfs, as the published numbers are.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    git(root, &["init", "-q", "--bare", "srv.git"]);
    git(root, &["init", "-q", "src"]);
    let src = root.join("src");
    git(
        &src,
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ],
    );
    let head = git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    git(&src, &["push", "-q", "../srv.git", "HEAD:refs/heads/main"]);
    let srv = root.join("srv.git");
    let pristine_packed = std::fs::read(srv.join("packed-refs")).ok();

    let zero = "0".repeat(40);
    let mut input = Vec::new();
    for i in 0..n {
        let line = if i == 0 {
            format!(
                "{zero} {head} refs/heads/b/{i:07}\0 report-status-v2 quiet object-format=sha1 agent=git/2.47.3"
            )
        } else {
            format!("{zero} {head} refs/heads/b/{i:07}")
        };
        input.extend(format!("{:04x}{line}", line.len() + 4).into_bytes());
    }
    input.extend(b"0000");
    input.extend(EMPTY_PACK);

    let berth = env!("CARGO_BIN_EXE_berth");
    let receivers: Vec<(&str, Vec<&str>)> = vec![
        (
            "git receive-pack",
            vec!["git", "receive-pack", "--stateless-rpc"],
        ),
        (
            "berth receive-pack",
            vec![berth, "receive-pack", "--stateless-rpc"],
        ),
    ];
    let reset = || {
        let _ = std::fs::remove_dir_all(srv.join("refs/heads/b"));
        match &pristine_packed {
            Some(p) => std::fs::write(srv.join("packed-refs"), p).unwrap(),
            None => {
                let _ = std::fs::remove_file(srv.join("packed-refs"));
            }
        }
    };
    let mut results = Vec::new();
    for (name, argv) in &receivers {
        let mut times = Vec::new();
        for _ in 0..runs {
            reset();
            let start = Instant::now();
            let mut child = Command::new(argv[0])
                .args(&argv[1..])
                .arg(&srv)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&input).unwrap();
            let out = child.wait_with_output().unwrap();
            times.push(start.elapsed());
            let report = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                report.matches("ok refs/heads/b/").count(),
                n,
                "{name} did not report ok for every ref"
            );
            let refs = git(
                &srv,
                &["for-each-ref", "--format=%(objectname)", "refs/heads/b/"],
            );
            assert!(
                refs.lines().count() == n && refs.lines().all(|l| l == head),
                "{name} wrote wrong refs"
            );
        }
        times.sort();
        results.push((
            name.to_string(),
            times[0],
            times[times.len() / 2],
            times[times.len() - 1],
        ));
    }
    let base = results[0].2;
    println!("{n} new refs, objects already on the server, {runs} runs each");
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>8}",
        "receiver", "min", "median", "max", "ratio"
    );
    for (name, min, med, max) in &results {
        let ms = |d: &Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
        println!(
            "{name:<22} {:>10} {:>10} {:>10} {:>7.2}x",
            ms(min),
            ms(med),
            ms(max),
            med.as_secs_f64() / base.as_secs_f64()
        );
    }
}
