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

/// A scratch bare repository for [`pack`], made once per process (by hand, so that fuzzing needs
/// no `git`), and removed at exit by nobody: it lives in the system's temp directory.
fn scratch_repo() -> Option<&'static std::path::Path> {
    static REPO: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    REPO.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("berth-fuzz-")
            .tempdir()
            .ok()?
            .keep();
        for sub in ["objects/pack", "objects/info", "refs/heads", "refs/tags"] {
            std::fs::create_dir_all(dir.join(sub)).ok()?;
        }
        std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").ok()?;
        std::fs::write(
            dir.join("config"),
            "[core]\n\trepositoryformatversion = 0\n\tbare = true\n",
        )
        .ok()?;
        Some(dir)
    })
    .as_deref()
}

/// Ingest `data` as the pack of a push into a scratch repository, with `receive.fsckObjects`
/// on and small limits, as the session does after the commands; the quarantine is dropped.
pub fn pack(data: &[u8]) {
    let Some(repo) = scratch_repo() else {
        return;
    };
    let objects_dir = repo.join("objects");
    let Ok(objects) = gix_odb::at(&objects_dir, gix_hash::Kind::Sha1) else {
        return;
    };
    let Ok(quarantine) = crate::ingest::Quarantine::create(&objects_dir) else {
        return;
    };
    let options = crate::ingest::Options {
        max_input_size: 16 << 20,
        thread_limit: Some(1),
        count_deltas: true,
        unpack_limit: 3,
        fsck: Some(Vec::new()),
        max_object_size: 16 << 20,
        shallow: Default::default(),
        reject_thin_pack: false,
    };
    let mut input = data;
    if let Ok(received) = crate::ingest::receive_pack(&mut input, &quarantine, &objects, options)
        && let Some(index) = received.index.as_ref()
    {
        // What the session does next: the connectivity walk over what arrived.
        if let Ok(q) = gix_odb::at(quarantine.path(), gix_hash::Kind::Sha1) {
            let mut check = crate::connectivity::Check::new(&q, Some(index), std::iter::empty());
            for entry in index.iter().take(64) {
                let _ = check.tip(entry.oid);
            }
        }
    }
}
