//! The connectivity walk side by side with git's: 10,000 new refs, one per commit of a
//! 10,000-commit history received as a pack into the quarantine of an empty repository; berth's
//! `connectivity::Check` (in process, as the session runs it) against the `git rev-list --objects
//! --stdin --not --all …` that `git receive-pack` runs for the same tips in the same quarantine
//! (a process: its start-up, ~1–2 ms, is part of git's cost). Runs alternate between the two.
//!
//! `TMPDIR=/dev/shm cargo bench --bench walk_vs_git` (commits from `BERTH_BENCH_COMMITS`, default
//! 10000; runs from `BERTH_BENCH_RUNS`, default 11). With `BERTH_BENCH_REPO=<bare repo>`, also
//! every branch and tag of that repository pushed to an empty one (a real history: a mirror of
//! git.git is ~420,000 objects; `BERTH_BENCH_REPO_RUNS` runs, default 3).

mod support;

use std::time::{Duration, Instant};

fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    // `cargo test --benches` runs this without `--bench`: one quick run only.
    let quick = !std::env::args().any(|a| a == "--bench");
    let k = if quick {
        100
    } else {
        env("BERTH_BENCH_COMMITS", 10_000)
    };
    let runs = if quick {
        1
    } else {
        env("BERTH_BENCH_RUNS", 11).max(1)
    };
    let repo = std::env::var_os("BERTH_BENCH_REPO")
        .filter(|_| !quick)
        .map(std::path::PathBuf::from);
    let cases = [
        Some(("empty trees", support::Shape::EmptyTrees)),
        Some(("one file changed per commit", support::Shape::Files)),
        None,
    ];
    for case in cases {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (name, walk, runs) = match (case, &repo) {
            (Some((name, shape)), _) => (
                format!("{k} tips, {k} commits, {name}"),
                support::walk_fixture(tmp.path(), k, shape),
                runs,
            ),
            (None, Some(repo)) => (
                format!("every branch and tag of {}", repo.display()),
                support::walk_of_repo(tmp.path(), repo),
                runs.min(env("BERTH_BENCH_REPO_RUNS", 3)),
            ),
            (None, None) => continue,
        };
        let (mut berth, mut git) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let t = Instant::now();
            walk.berth();
            berth.push(t.elapsed());
            let t = Instant::now();
            walk.git();
            git.push(t.elapsed());
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (b, g) = (support::median(&mut berth), support::median(&mut git));
        println!(
            "{name} ({} tips, {} objects), median of {runs}:\n  \
             git rev-list --objects --stdin --not --all  {:>8.1} ms  (min {:.1}, max {:.1})\n  \
             berth connectivity::Check                   {:>8.1} ms  (min {:.1}, max {:.1})  \
             ratio {:.3}x",
            walk.tips.len(),
            walk.objects,
            ms(g),
            ms(git[0]),
            ms(git[git.len() - 1]),
            ms(b),
            ms(berth[0]),
            ms(berth[berth.len() - 1]),
            b.as_secs_f64() / g.as_secs_f64()
        );
    }
}
