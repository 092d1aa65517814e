//! Memory stays bounded on a large push: a pack of 300 MiB of random (incompressible) blobs,
//! generated on the fly, is streamed to berth, whose peak RSS (`VmHWM`, sampled from
//! `/proc/<pid>/status` while it runs) must stay far below the pack's size.
//!
//! Ignored by default (it writes ~600 MiB to the temp directory and takes about a minute with a
//! debug build): `cargo test --test memory -- --ignored --nocapture`.

mod common;

use std::ffi::OsStr;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const ZERO: &str = "0000000000000000000000000000000000000000";
const BLOBS: usize = 300;
const BLOB_SIZE: usize = 1 << 20;

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn cmd(&self, program: impl AsRef<OsStr>) -> Command {
        common::isolated_command(
            program,
            self.dir.path(),
            self.dir.path(),
            "1700000000 +0000",
        )
    }

    fn git(&self, args: &[&str]) -> String {
        let out = self.cmd("git").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// `(VmHWM, RssAnon, RssFile)` of `pid` in KiB: the peak resident set so far (file-backed
/// mappings included), and the current anonymous (heap, stacks) and file-backed resident sets.
fn memory(pid: u32) -> Option<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((field("VmHWM:")?, field("RssAnon:")?, field("RssFile:")?))
}

#[test]
#[ignore = "writes ~600 MiB and takes about a minute; run with --ignored"]
fn a_300_mib_push_is_streamed_not_buffered() {
    let env = Env {
        dir: tempfile::Builder::new()
            .prefix("berth-memory-")
            .tempdir()
            .unwrap(),
    };
    env.git(&["init", "-q", "--bare", "srv.git"]);
    env.git(&["-C", "srv.git", "config", "receive.autogc", "false"]);
    env.git(&["init", "-q", "--bare", "src.git"]);

    // 300 blobs of 1 MiB of xorshift noise in one commit, streamed into fast-import.
    let mut fi = env
        .cmd("git")
        .args(["-C", "src.git", "fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut w = std::io::BufWriter::new(fi.stdin.take().unwrap());
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut buf = vec![0u8; BLOB_SIZE];
        for i in 0..BLOBS {
            for chunk in buf.chunks_exact_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes());
            }
            write!(w, "blob\nmark :{}\ndata {BLOB_SIZE}\n", i + 1).unwrap();
            w.write_all(&buf).unwrap();
            w.write_all(b"\n").unwrap();
        }
        write!(
            w,
            "commit refs/heads/main\ncommitter C O Mitter <committer@example.com> 1700000000 +0000\ndata 4\nbig\n"
        )
        .unwrap();
        for i in 0..BLOBS {
            writeln!(w, "M 100644 :{} f{i:03}", i + 1).unwrap();
        }
        w.write_all(b"\n").unwrap();
    }
    assert!(fi.wait().unwrap().success());
    let tip = env
        .git(&["-C", "src.git", "rev-parse", "main"])
        .trim()
        .to_owned();

    // The request, on disk: the command, a flush, the pack.
    let request = env.path("request");
    {
        let mut f = std::fs::File::create(&request).unwrap();
        let line =
            format!("{ZERO} {tip} refs/heads/main\0report-status quiet object-format=sha1\n");
        write!(f, "{:04x}{line}0000", line.len() + 4).unwrap();
        let mut po = env
            .cmd("git")
            .args(["-C", "src.git", "pack-objects", "--stdout", "--revs", "-q"])
            .stdin(Stdio::piped())
            .stdout(f)
            .spawn()
            .unwrap();
        po.stdin.take().unwrap().write_all(b"main\n").unwrap();
        assert!(po.wait().unwrap().success());
    }
    let size = std::fs::metadata(&request).unwrap().len();
    assert!(size > (BLOBS * BLOB_SIZE) as u64, "pack of {size} bytes");

    let start = std::time::Instant::now();
    let mut child = env
        .cmd(env!("CARGO_BIN_EXE_berth"))
        .args(["receive-pack", "--stateless-rpc", "srv.git"])
        .stdin(std::fs::File::open(&request).unwrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (mut hwm, mut anon, mut file) = (0, 0, 0);
    while child.try_wait().unwrap().is_none() {
        if let Some((h, a, f)) = memory(pid) {
            hwm = hwm.max(h);
            anon = anon.max(a);
            file = file.max(f);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let elapsed = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!(
        "pushed a {} MiB pack in {elapsed:.1?}; berth's peak RSS {} MiB (VmHWM), of which at \
         most {} MiB anonymous (heap) and {} MiB file-backed (the mapped pack and index)",
        size >> 20,
        hwm >> 10,
        anon >> 10,
        file >> 10
    );
    assert!(out.status.success());
    assert_eq!(
        stdout, "000eunpack ok\n0017ok refs/heads/main\n0000",
        "berth's report"
    );
    assert_eq!(
        env.git(&["-C", "srv.git", "rev-parse", "refs/heads/main"])
            .trim(),
        tip
    );
    let count = env.git(&["-C", "srv.git", "rev-list", "--objects", "--count", "main"]);
    assert_eq!(count.trim(), (BLOBS + 2).to_string());
    // The heap stays far below the pack: a fifth of it at most. (The pack is mapped to index
    // it, so the file-backed part of the RSS grows with it; those pages are the page cache's.)
    assert!(
        anon < size / 1024 / 5,
        "peak anonymous RSS {anon} KiB for a pack of {size} bytes"
    );
}
