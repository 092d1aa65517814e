//! Side by side: the same N-ref push fed to `git receive-pack` and to `berth receive-pack`, through
//! the library behind `berth bench many-refs` (one implementation; see `src/cli/bench/`).
//!
//! `cargo bench --bench many_refs` (N from `BERTH_BENCH_REFS`, default 10000; runs from
//! `BERTH_BENCH_RUNS`, default 7; TMPDIR=/dev/shm measures on tmpfs).

#[path = "../src/cli/bench/mod.rs"]
// The unit tests' imports are unused without the test harness.
#[allow(dead_code, unused_imports)]
mod bench;

fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let options = bench::sweep::Options {
        refs: vec![env("BERTH_BENCH_REFS", 10_000)],
        commits: vec![env("BERTH_BENCH_COMMITS", 1)],
        ref_formats: vec![bench::case::RefFormat::Files],
        object_formats: vec![bench::case::ObjectFormat::Sha1],
        objects: vec![bench::case::Scenario::Server],
        reports: vec![bench::case::Report::V2],
        sideband: vec![bench::case::Switch::Off],
        atomic: vec![bench::case::Switch::Off],
        update_hook: vec![bench::case::Switch::Off],
        warmup: 1,
        runs: env("BERTH_BENCH_RUNS", 7),
        receivers: vec![
            bench::receiver::Receiver {
                name: "git".into(),
                command: "git receive-pack".into(),
            },
            bench::receiver::Receiver {
                name: "berth".into(),
                command: format!("'{}' receive-pack", env!("CARGO_BIN_EXE_berth")),
            },
        ],
        workdir: None,
        floor: bench::run::Floor::WhereItApplies,
    };
    match bench::sweep::run(&options, &mut std::io::sink()) {
        Ok(r) => {
            print!("{}", bench::output::table(&r, bench::stats::NOISY_CV));
            assert!(r.all_ok(), "a receiver failed verification");
        }
        Err(e) => panic!("{e}"),
    }
}
