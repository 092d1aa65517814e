//! Replays the fuzz corpora (`fuzz/corpus/<target>/*`) on stable Rust, so every input the fuzzers
//! found interesting stays a regression test. Each entry must parse or fail without panicking.

use std::path::Path;

fn replay(target: &str, f: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        f(&data);
        // Every prefix too: truncated input is the most common malformation.
        for cut in 0..data.len().min(256) {
            f(&data[..cut]);
        }
        n += 1;
    }
    n
}

#[test]
fn request_corpus() {
    assert!(replay("request", berth::fuzzing::request) >= 6);
}

#[test]
fn pktline_corpus() {
    assert!(replay("pktline", berth::fuzzing::pktline) >= 6);
}

#[test]
fn pack_corpus() {
    assert!(replay("pack", berth::fuzzing::pack) >= 4);
}

#[test]
fn push_cert_corpus() {
    assert!(replay("push_cert", berth::fuzzing::push_cert) >= 3);
}

#[test]
fn proc_receive_corpus() {
    assert!(replay("proc_receive", berth::fuzzing::proc_receive) >= 4);
}

#[test]
fn reftable_corpus() {
    assert!(replay("reftable", berth::fuzzing::reftable) >= 3);
}

#[test]
fn repo_path_corpus() {
    assert!(replay("repo_path", berth::fuzzing::repo_path) >= 6);
}
