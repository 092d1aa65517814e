//! Side by side: the same N-ref push fed to `git receive-pack` and to `berth receive-pack`, through
//! the library behind `berth bench many-refs` (one implementation; see `src/cli/bench.rs`).
//!
//! `cargo bench --bench many_refs` (N from `BERTH_BENCH_REFS`, default 10000; runs from
//! `BERTH_BENCH_RUNS`, default 7; TMPDIR=/dev/shm measures on tmpfs).

#[path = "../src/cli/bench.rs"]
#[allow(dead_code)]
mod bench;

fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let options = bench::Options {
        refs: env("BERTH_BENCH_REFS", 10_000),
        commits: env("BERTH_BENCH_COMMITS", 1),
        runs: env("BERTH_BENCH_RUNS", 7),
        ref_format: bench::RefFormat::Files,
        object_format: bench::ObjectFormat::Sha1,
        sideband: false,
        report: bench::Report::V2,
        atomic: false,
        update_hook: false,
        objects: bench::Scenario::Server,
        receivers: vec![
            "git receive-pack".into(),
            format!("'{}' receive-pack", env!("CARGO_BIN_EXE_berth")),
        ],
        workdir: None,
        floor: true,
    };
    match bench::many_refs(&options, &mut std::io::sink()) {
        Ok(r) => {
            print!("{}", r.table());
            assert!(r.all_ok(), "a receiver failed verification");
        }
        Err(e) => panic!("{e}"),
    }
}
