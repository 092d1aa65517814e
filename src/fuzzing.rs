//! Entry points for the fuzz targets in `fuzz/`, shared with `tests/it/fuzz_corpus.rs`, which replays
//! the corpora on stable Rust. Each must return (not panic, not hang) on any input.

use gix_object::bstr::{BString, ByteSlice};

use crate::hooks::proc_receive;
use crate::protocol::{pktline, push_cert, report, request};
use crate::reftable;

/// Both object formats: every target runs its input against a SHA-1 and a SHA-256 repository.
const FORMATS: [gix_hash::Kind; 2] = [gix_hash::Kind::Sha1, gix_hash::Kind::Sha256];

/// Read pkt-lines until the input is exhausted or malformed.
pub fn pktline(data: &[u8]) {
    let mut reader = pktline::Reader::new(data);
    while reader.read().is_ok() {}
}

/// Parse an update request, as the session does after the advertisement (of a SHA-1 and of a
/// SHA-256 repository).
pub fn request(data: &[u8]) {
    for object_format in FORMATS {
        let limits = request::Limits {
            atomic: true,
            push_options: true,
            max_commands: 1000,
            max_push_options: 100,
            max_bytes: 1 << 20,
            object_format,
        };
        let mut reader = pktline::Reader::new(data);
        let _ = request::read(&mut reader, &limits);
    }
}

/// A scratch bare repository for [`pack`], made once per process (by hand, so that fuzzing needs
/// no `git`), and removed at exit by nobody: it lives in the system's temp directory.
fn scratch_repo(hash: gix_hash::Kind) -> Option<&'static std::path::Path> {
    static REPO: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    static REPO_SHA256: std::sync::OnceLock<Option<std::path::PathBuf>> =
        std::sync::OnceLock::new();
    let repo = if hash == gix_hash::Kind::Sha1 {
        &REPO
    } else {
        &REPO_SHA256
    };
    repo.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("berth-fuzz-")
            .tempdir()
            .ok()?
            .keep();
        for sub in ["objects/pack", "objects/info", "refs/heads", "refs/tags"] {
            std::fs::create_dir_all(dir.join(sub)).ok()?;
        }
        std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").ok()?;
        let config = if hash == gix_hash::Kind::Sha1 {
            "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
        } else {
            "[core]\n\trepositoryformatversion = 1\n\tbare = true\n[extensions]\n\tobjectformat = sha256\n"
        };
        std::fs::write(dir.join("config"), config).ok()?;
        Some(dir)
    })
    .as_deref()
}

/// Ingest `data` as the pack of a push into a scratch repository, with `receive.fsckObjects`
/// on and small limits, as the session does after the commands; the quarantine is dropped.
/// Into a SHA-1 and into a SHA-256 repository.
pub fn pack(data: &[u8]) {
    for hash in FORMATS {
        pack_into(data, hash);
    }
}

fn pack_into(data: &[u8], hash: gix_hash::Kind) {
    let Some(repo) = scratch_repo(hash) else {
        return;
    };
    let objects_dir = repo.join("objects");
    let Ok(objects) = gix_odb::at(&objects_dir, hash) else {
        return;
    };
    let Ok(mut quarantine) = crate::objects::ingest::Quarantine::create(&objects_dir) else {
        return;
    };
    let options = crate::objects::ingest::Options {
        max_input_size: 16 << 20,
        // Two threads: a kept pack is read and resolved as it arrives (`pack_read`,
        // `pack_resolve`), and resolved again after it arrived where that gives up.
        thread_limit: Some(2),
        unpack_limit: 3,
        fsck: Some(Vec::new()),
        max_object_size: 16 << 20,
        shallow: Default::default(),
        reject_thin_pack: false,
        object_format: hash,
        // Nothing is published: no fsync per input.
        files: crate::objects::pack_files::Options {
            durability: crate::fsync::Durability::NONE,
            ..Default::default()
        },
    };
    let mut input = data;
    if let Ok(received) =
        crate::objects::ingest::receive_pack(&mut input, &mut quarantine, &objects, options)
        && let Some(index) = received.index.as_ref()
    {
        // What the session does next: the connectivity walk over what arrived.
        if let Ok(q) = gix_odb::at(quarantine.path(), hash) {
            let mut check =
                crate::objects::connectivity::Check::new(&q, Some(index), std::iter::empty());
            for entry in index.iter().take(64) {
                let _ = check.tip(entry.oid);
            }
        }
    }
}

/// A push certificate as a signed push brings it and the session handles it, short of the
/// signature check (which runs gpg): through the request parser as `push-cert` ..
/// `push-cert-end` (the commands come from its body), then its headers, nonce check (stateful,
/// stateless, with and without slop) and `push-option` headers against the request's options.
/// As a SHA-1 and as a SHA-256 repository.
pub fn push_cert(data: &[u8]) {
    for hash in FORMATS {
        push_cert_in(data, hash);
    }
}

fn push_cert_in(data: &[u8], hash: gix_hash::Kind) {
    const DIR: &str = "/srv/repo.git";
    const SEED: &str = "fuzz-seed";
    // As `git push --signed` sends it: the certificate a line per pkt-line, then the push
    // options the certificate names.
    let text = String::from_utf8_lossy(data);
    let mut stream = Vec::new();
    let mut put = |line: &[u8]| {
        for chunk in line.chunks(pktline::LARGE_PACKET_DATA_MAX) {
            let _ = pktline::write_data(&mut stream, chunk);
        }
    };
    put(b"push-cert\0report-status-v2 side-band-64k atomic push-options agent=git/2.47.3\n");
    for line in data.split_inclusive(|&b| b == b'\n') {
        put(line);
    }
    put(b"push-cert-end\n");
    for option in push_cert::push_options(&text) {
        put(option.as_bytes());
    }
    let _ = pktline::write_flush(&mut stream);
    let options: Vec<BString> = match request::read(
        &mut pktline::Reader::new(&stream[..]),
        &request::Limits {
            atomic: true,
            push_options: true,
            max_commands: 1000,
            max_push_options: 100,
            max_bytes: 1 << 20,
            object_format: hash,
        },
    ) {
        Ok(request::Start::Request(req)) => req.push_options,
        _ => Vec::new(),
    };

    let headers = String::from_utf8_lossy(&data[..push_cert::signature_start(data)]);
    for name in ["certificate version", "pusher", "pushee", "nonce"] {
        let _ = push_cert::header(&headers, name);
    }
    let issued = push_cert::nonce(hash, DIR, 1_700_000_000, SEED);
    for (issued_nonce, stateless, slop) in [
        (None, false, 0),
        (Some(issued.clone()), false, 0),
        (Some(issued.clone()), true, 0),
        (Some(issued.clone()), true, 60),
    ] {
        let cert = push_cert::Certificate {
            bytes: data,
            issued_nonce,
            stateless,
            dir: DIR,
            seed: SEED,
            slop,
            object_format: hash,
        };
        let _ = cert.nonce_status();
        let _ = cert.options_match(&options);
        let _ = cert.options_match(&[]);
    }
    // A nonce whose HMAC is right for its stamp, which fuzzing cannot forge: the stateless
    // slop check on whatever stamp the input has.
    if let Some(received) = push_cert::header(&headers, "nonce")
        && let Some((stamp, _)) = received.split_once('-')
        && let Ok(stamp) = stamp.parse::<u64>()
    {
        let good = push_cert::nonce(hash, DIR, stamp, SEED);
        let resigned = headers.replacen(&format!("nonce {received}"), &format!("nonce {good}"), 1);
        for slop in [0, 60, i64::MAX] {
            let _ = push_cert::check_nonce(
                hash,
                &resigned,
                &mut Some(issued.clone()),
                true,
                DIR,
                SEED,
                slop,
            );
        }
    }
}

/// What a proc-receive hook wrote on its stdout, through the conversation the session has
/// with it (version negotiation, then the report) over a fixed push of six commands, two of
/// them not selected; then the report-status-v2 the session builds from it. The first byte
/// chooses the session's side: bit 0 `atomic`, bit 1 `push-options`, bits 2-4 how many sends
/// the hook accepts before it stops reading (7: all), bit 5 a selected command that already
/// failed, bit 6 a selected command handled through another (a symref's target). The commands'
/// ids are SHA-1, then SHA-256.
pub fn proc_receive(data: &[u8]) {
    for hash in FORMATS {
        proc_receive_in(data, hash);
    }
}

fn proc_receive_in(data: &[u8], hash: gix_hash::Kind) {
    let Some((&mode, output)) = data.split_first() else {
        return;
    };
    // Two fixed ids of the format: the start of the hex below, as long as the format's ids.
    const HEX: &str =
        "ce858e653cdbf70f7c1ae1f2a6c2a1a9d4b0e1e8102939797ab91a4f201d131418d2c9d919dcdd2c";
    let id = |hex: &str| {
        gix_hash::ObjectId::from_hex(&hex.as_bytes()[..hash.len_in_hex()]).unwrap_or(hash.null())
    };
    let (a, b) = (id(HEX), id(&HEX[16..]));
    let zero = hash.null();
    let commands: Vec<request::Command> = [
        (a, b, "refs/heads/main"),
        (zero, b, "refs/for/main/topic"),
        (a, zero, "refs/for/next/topic"),
        (b, a, "refs/heads/foo"),
        (zero, a, "refs/for/a/b/c/my/topic"),
        (zero, b, "refs/for/main/topic"),
    ]
    .into_iter()
    .map(|(old, new, name)| request::Command {
        old,
        new,
        name: name.into(),
    })
    .collect();
    let mut slots: Vec<proc_receive::Slot<'_>> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| proc_receive::Slot {
            command: c,
            skip_update: i == 4 && mode & 0x40 != 0,
            proc: if c.name.starts_with(b"refs/for/") {
                proc_receive::Proc::Scheduled
            } else {
                proc_receive::Proc::No
            },
            error: (i == 2 && mode & 0x20 != 0)
                .then(|| report::Reason::ProcReceive("failed".into())),
            rewrites: Vec::new(),
        })
        .collect();
    let sends = match (mode >> 2) & 7 {
        7 => None,
        n => Some(usize::from(n)),
    };
    let options = [BString::from("issue=123"), BString::from("reviewer=user1")];
    let _ = proc_receive::converse(
        &mut proc_receive::Replay::new(output, sends),
        &mut slots,
        mode & 1 != 0,
        mode & 2 != 0,
        &options,
    );
    let statuses: Vec<_> = slots
        .iter()
        .map(|s| {
            let status = match &s.error {
                Some(reason) => report::Status::Rejected(reason.clone()),
                None => report::Status::ProcReceive(s.rewrites.clone()),
            };
            (s.command.name.clone(), status)
        })
        .collect();
    let _ = report::write(
        &mut std::io::sink(),
        report::Kind::V2,
        None,
        statuses.iter().map(|(name, status)| report::Entry {
            name: name.as_bstr(),
            status,
        }),
    );
}

/// One reftable table's bytes: parsed, every ref, log, obj and index record read, and a few
/// names looked up (through the ref index when there is one). A second pass gives the same
/// bytes a footer that matches (the header repeated, the CRC-32 recomputed), so that mutations
/// of the header and footer fields reach the reader instead of stopping at the footer check.
pub fn reftable(data: &[u8]) {
    reftable_table(data.to_vec());
    // Version 1 (SHA-1) and version 2 (the hash id after the header's first 24 bytes).
    let (header, footer) = match data.get(4) {
        Some(1) => (24, 68),
        Some(2) => (28, 72),
        _ => return,
    };
    if data.len() >= header + footer {
        let mut fixed = data.to_vec();
        let footer = fixed.len() - footer;
        fixed.copy_within(..header, footer);
        let crc = zlib_rs::crc32::crc32(0, &fixed[footer..fixed.len() - 4]);
        let n = fixed.len();
        fixed[n - 4..].copy_from_slice(&crc.to_be_bytes());
        if fixed != data {
            reftable_table(fixed);
        }
    }
}

fn reftable_table(bytes: Vec<u8>) {
    let Ok(table) = reftable::Table::from_bytes("fuzz.ref", bytes) else {
        return;
    };
    let refs = table.refs();
    let _ = table.logs();
    let _ = table.objects();
    let _ = table.verify();
    let mut names: Vec<BString> = ["HEAD", "refs/heads/main", "refs/heads/zzzz", ""]
        .into_iter()
        .map(BString::from)
        .collect();
    if let Ok(refs) = &refs {
        for r in refs.iter().take(3).chain(refs.last()) {
            names.push(r.name.clone().into_owned());
            let mut after = r.name.clone().into_owned();
            after.push(0);
            names.push(after);
        }
    }
    for name in &names {
        let _ = table.read_ref(name);
    }
}

/// A request path's repository part (as it stands in a URL): one name, in every spelling,
/// judged by the access rules as that name (`serve`'s `routing::check_repo_path`).
#[cfg(feature = "serve")]
pub fn repo_path(data: &[u8]) {
    crate::serve::fuzz_repo_path(data);
}
