//! Large-pack ingest side by side: a whole repository pushed to an empty one, as one pack, fed to
//! `git index-pack --stdin --fix-thin` (what git's receive-pack runs for it), `git receive-pack`
//! and `berth receive-pack` (also with `--skip-connectivity-check`, to separate berth's ingest
//! from its connectivity walk; git 2.47's receive-pack has no such option), alternating, each into a fresh empty bare repository. Every run
//! is wrapped in `/usr/bin/time`, which reports the peak RSS of the command and the children it
//! waited for (git's receive-pack runs index-pack and rev-list as children); wall times are
//! measured here.
//!
//! `BERTH_BENCH_REPO=/path/to/bare.git cargo bench --bench ingest` pushes every branch and tag of
//! that repository (`BERTH_BENCH_RUNS`, default 2). `BERTH_BENCH_GIT_MASTER=/path/to/bin/git`
//! adds that git's receive-pack (git master built from source, issue 24's anchor), and every
//! receiver's time and peak RSS is then also printed as a multiple of it;
//! `BERTH_BENCH_BEFORE=/path/to/berth` adds that (earlier) berth binary's receive-pack. A mirror of git.git (~850,000 objects, a
//! ~500 MB pack with deep deltas) is a good subject. Without `BERTH_BENCH_REPO` it says so and
//! does nothing. The work directory is `$TMPDIR` (it needs about three times the pack's size).

mod support;

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Receiver {
    name: &'static str,
    /// Run in the target repository with the request (or, with `pack_only`, the pack) on stdin.
    args: Vec<String>,
    pack_only: bool,
    times: Vec<Duration>,
    rss_kib: Vec<u64>,
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("ingest: a long run; `BERTH_BENCH_REPO=<bare repo> cargo bench --bench ingest`");
        return;
    }
    let Some(repo) = std::env::var_os("BERTH_BENCH_REPO").map(PathBuf::from) else {
        println!(
            "ingest: set BERTH_BENCH_REPO to a bare repository to push (e.g. a mirror of git.git)"
        );
        return;
    };
    let runs: usize = std::env::var("BERTH_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
        .max(1);
    let tmp = tempfile::Builder::new()
        .prefix("berth-ingest-")
        .tempdir()
        .expect("tempdir");

    // The refs and the request: commands, flush, the pack of everything they reach.
    let mut c = support::git(&repo);
    c.args([
        "for-each-ref",
        "--format=%(objectname) %(refname)",
        "refs/heads/",
        "refs/tags/",
    ]);
    let refs = String::from_utf8(support::run(c, None)).expect("utf-8 refs");
    let refs: Vec<(&str, &str)> = refs.lines().filter_map(|l| l.split_once(' ')).collect();
    assert!(!refs.is_empty(), "no branch or tag in {}", repo.display());
    let request = tmp.path().join("request");
    let pack_offset;
    {
        let mut f = std::fs::File::create(&request).expect("request");
        let zero = "0".repeat(40);
        let mut head = Vec::new();
        for (i, (oid, name)) in refs.iter().enumerate() {
            let line = if i == 0 {
                format!(
                    "{zero} {oid} {name}\0 report-status-v2 quiet object-format=sha1 agent=git/2.47.3\n"
                )
            } else {
                format!("{zero} {oid} {name}\n")
            };
            write!(head, "{:04x}{line}", line.len() + 4).expect("write");
        }
        head.extend_from_slice(b"0000");
        f.write_all(&head).expect("write");
        pack_offset = head.len() as u64;
        let t = Instant::now();
        let mut po = support::git(&repo)
            .args([
                "pack-objects",
                "--stdout",
                "--revs",
                "--delta-base-offset",
                "-q",
            ])
            .stdin(Stdio::piped())
            .stdout(f)
            .spawn()
            .expect("pack-objects");
        {
            let mut stdin = po.stdin.take().expect("stdin");
            for (oid, _) in &refs {
                writeln!(stdin, "{oid}").expect("write");
            }
        }
        assert!(po.wait().expect("wait").success(), "pack-objects failed");
        eprintln!("ingest: pack made in {:.1?}", t.elapsed());
    }
    let size = std::fs::metadata(&request).expect("size").len() - pack_offset;
    let mut count = [0u8; 4];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(&request).expect("request");
        f.seek(SeekFrom::Start(pack_offset + 8)).expect("seek");
        f.read_exact(&mut count).expect("read");
    }
    let objects = u32::from_be_bytes(count);
    let berth = env!("CARGO_BIN_EXE_berth").to_owned();
    let rp = |cmd: &[&str]| -> Vec<String> {
        cmd.iter()
            .map(|s| s.to_string())
            .chain(["--stateless-rpc".into(), ".".into()])
            .collect()
    };
    let mut receivers = vec![
        Receiver {
            name: "git index-pack --stdin --fix-thin",
            args: ["git", "index-pack", "--stdin", "--fix-thin"]
                .map(String::from)
                .to_vec(),
            pack_only: true,
            times: Vec::new(),
            rss_kib: Vec::new(),
        },
        Receiver {
            name: "git receive-pack",
            args: rp(&["git", "receive-pack"]),
            pack_only: false,
            times: Vec::new(),
            rss_kib: Vec::new(),
        },
        Receiver {
            name: "berth receive-pack",
            args: rp(&[&berth, "receive-pack"]),
            pack_only: false,
            times: Vec::new(),
            rss_kib: Vec::new(),
        },
        Receiver {
            name: "berth receive-pack --skip-connectivity-check",
            args: rp(&[&berth, "receive-pack", "--skip-connectivity-check"]),
            pack_only: false,
            times: Vec::new(),
            rss_kib: Vec::new(),
        },
    ];
    // git master built from source: its receive-pack runs its own index-pack and rev-list.
    let master = std::env::var("BERTH_BENCH_GIT_MASTER").ok();
    if let Some(git) = &master {
        receivers.insert(
            2,
            Receiver {
                name: "git master receive-pack",
                args: rp(&[git, "receive-pack"]),
                pack_only: false,
                times: Vec::new(),
                rss_kib: Vec::new(),
            },
        );
    }
    // Another berth (an earlier build), to compare a change in the same run.
    let before = std::env::var("BERTH_BENCH_BEFORE").ok();
    if let Some(before) = &before {
        receivers.push(Receiver {
            name: "berth receive-pack (BERTH_BENCH_BEFORE)",
            args: rp(&[before, "receive-pack"]),
            pack_only: false,
            times: Vec::new(),
            rss_kib: Vec::new(),
        });
    }
    for run in 1..=runs {
        for r in &mut receivers {
            eprintln!("ingest: {}: run {run}/{runs}", r.name);
            let target = tmp.path().join("target.git");
            let _ = std::fs::remove_dir_all(&target);
            support::init(&target);
            let (t, rss) = time(r, &target, &request, pack_offset, refs.len());
            r.times.push(t);
            r.rss_kib.push(rss);
            let _ = std::fs::remove_dir_all(&target);
        }
    }
    println!(
        "{} refs, {objects} objects, a {:.1} MiB pack (from {}); {runs} runs each, alternating",
        refs.len(),
        size as f64 / (1 << 20) as f64,
        repo.display()
    );
    let base = support::median(&mut receivers[0].times.clone());
    let peak = |r: &Receiver| r.rss_kib.iter().max().copied().unwrap_or(0);
    let anchor = master.as_ref().map(|_| {
        let r = &receivers[2];
        (support::median(&mut r.times.clone()), peak(r))
    });
    println!(
        "{:<46} {:>10} {:>10} {:>10} {:>14} {:>8} {:>16}",
        "receiver", "min", "median", "max", "peak RSS", "ratio", "x master (RSS)"
    );
    for r in &mut receivers {
        let med = support::median(&mut r.times);
        let to_master = anchor.map_or(String::new(), |(t, rss)| {
            format!(
                "{:.3}x ({:.3}x)",
                med.as_secs_f64() / t.as_secs_f64(),
                peak(r) as f64 / rss.max(1) as f64
            )
        });
        println!(
            "{:<46} {:>8.2} s {:>8.2} s {:>8.2} s {:>10} MiB {:>7.3}x {:>16}",
            r.name,
            r.times[0].as_secs_f64(),
            med.as_secs_f64(),
            r.times[r.times.len() - 1].as_secs_f64(),
            peak(r) >> 10,
            med.as_secs_f64() / base.as_secs_f64(),
            to_master
        );
    }
}

/// One run of `r` in `target`: its wall time and peak RSS (KiB); panics if it fails or a
/// receive-pack's report is not `unpack ok` and one `ok` per ref.
fn time(
    r: &Receiver,
    target: &Path,
    request: &Path,
    pack_offset: u64,
    refs: usize,
) -> (Duration, u64) {
    let mut input = std::fs::File::open(request).expect("request");
    if r.pack_only {
        input.seek(SeekFrom::Start(pack_offset)).expect("seek");
    }
    let rusage = target.with_extension("time");
    let mut c = Command::new("/usr/bin/time");
    c.arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&rusage)
        .args(&r.args)
        .current_dir(target)
        .env("GIT_DIR", ".")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(input)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let out = c.output().expect("run");
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{}: {}",
        r.name,
        String::from_utf8_lossy(&out.stderr)
    );
    if !r.pack_only {
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(report.contains("unpack ok\n"), "{}: {report}", r.name);
        assert_eq!(
            report.matches("ok refs/").count(),
            refs,
            "{}: {report}",
            r.name
        );
    }
    let rss = std::fs::read_to_string(&rusage)
        .ok()
        .and_then(|s| s.lines().last()?.trim().parse().ok())
        .unwrap_or(0);
    (elapsed, rss)
}
