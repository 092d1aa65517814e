//! Entry points for the fuzz targets in `fuzz/`, shared with `tests/fuzz_corpus.rs`, which replays
//! the corpora on stable Rust. Each must return (not panic, not hang) on any input.

use crate::{pktline, request};

/// Read pkt-lines until the input is exhausted or malformed.
pub fn pktline(data: &[u8]) {
    let mut reader = pktline::Reader::new(data);
    while reader.read().is_ok() {}
}

/// Parse an update request, as the session does after the advertisement.
pub fn request(data: &[u8]) {
    let limits = request::Limits {
        atomic: true,
        push_options: true,
        max_commands: 1000,
        max_push_options: 100,
        max_bytes: 1 << 20,
    };
    let mut reader = pktline::Reader::new(data);
    let _ = request::read(&mut reader, &limits);
}
