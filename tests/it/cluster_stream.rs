//! `berth serve --cluster`: the pushed pack streamed to the other replicas as the accepting node
//! reads it (`/_berth/cluster/stream`), with the harness of `cluster.rs` (three etcd members,
//! three berth nodes, the real git client over HTTP). Thin packs and packs on both sides of
//! `receive.unpackLimit` replicate with no `git pack-objects` on the accepting node; a push
//! refused by pre-receive, and a stream cut off by the accepting node's death, leave no
//! quarantine and no objects on the replicas.

use crate::cluster::{porcelain, push, push_ok, wait_for};
use crate::cluster_fixture::{cluster, cluster_world};
use crate::common::World;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The quarantine directories in the repository `dir` (berth's ingest names them as git's:
/// `objects/tmp_objdir-incoming-*`).
fn quarantines(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir.join("objects"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("tmp_objdir"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Wait (at most `limit`) until `check` holds; whether it did.
pub(crate) fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the repository `dir` has the object `id`.
fn has_object(w: &World, dir: &Path, id: &str) -> bool {
    w.git_out(dir, &["cat-file", "-e", id]).status.success()
}

/// A `git` first on the PATH that logs each argv line to `<world>/git-argv.log`; the PATH.
fn logging_git(w: &World) -> String {
    let real = Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_owned();
    assert!(!real.is_empty(), "no git on the PATH");
    let bin = w.path("logging-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = w.path("git-argv.log");
    std::fs::write(
        bin.join("git"),
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec '{real}' \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Deterministic incompressible bytes.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn thin_and_both_sides_of_unpack_limit_replicate_without_pack_objects_on_the_accepting_node() {
    let Some(w) = cluster_world() else { return };
    let path = logging_git(&w);
    let c = cluster(&w).env("PATH", &path).start();
    let url = c.nodes[0].url("r.git");
    let src = w.work("src");
    // A history with a large text file, so that the next push's pack is thin (a delta against
    // the file's first version, which only the server has).
    let text: String = (0..3000)
        .map(|i| format!("line {i} of the file\n"))
        .collect();
    w.commit(&src, "big.txt", &text);
    push_ok(&w, &src, &url, &["HEAD:refs/heads/main"]);
    c.converged(&w, "r.git", 3);

    // Thin, and above receive.unpackLimit (100 objects, kept as a pack): one line of the big
    // file changed, and 120 new files.
    for i in 0..120 {
        std::fs::write(w.path(&format!("{src}/g{i}.txt")), format!("g {i}\n")).unwrap();
    }
    w.commit(
        &src,
        "big.txt",
        &text.replace("line 1500 ", "line 1500 changed "),
    );
    let out = w.git_out(
        &src,
        &[
            "push",
            "--progress",
            "--porcelain",
            &url,
            "HEAD:refs/heads/main",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // index-pack's `Resolving deltas: … completed with 1 local object`: the pack was thin.
    assert!(stderr.contains("local object"), "{stderr}");

    // Below receive.unpackLimit (100 objects): three objects, exploded into loose objects.
    w.commit(&src, "small.txt", "small");
    push_ok(&w, &src, &url, &["HEAD:refs/heads/main"]);

    // Above it: 150 new blobs, kept as a pack.
    for i in 0..150 {
        std::fs::write(w.path(&format!("{src}/f{i}.txt")), format!("file {i}\n")).unwrap();
    }
    w.commit(&src, "f-last.txt", "last");
    push_ok(
        &w,
        &src,
        &url,
        &["HEAD:refs/heads/main", "HEAD:refs/heads/other"],
    );

    let refs = c.converged(&w, "r.git", 3);
    let head = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(refs.get("refs/heads/other"), Some(&head));

    // A deletion and an update in one (non-atomic) push: two ref transactions (the deletions
    // first), one pack; each replica's second prepare finds the objects the first migrated.
    w.commit(&src, "after.txt", "after the deletion");
    push_ok(
        &w,
        &src,
        &url,
        &[":refs/heads/other", "HEAD:refs/heads/main"],
    );

    let refs = c.converged(&w, "r.git", 3);
    let head = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(refs.get("refs/heads/main"), Some(&head));
    assert_eq!(refs.get("refs/heads/other"), None);
    for n in &c.nodes {
        assert_eq!(w.ref_map(n.dir("r.git")), refs, "{}", n.name);
        assert!(quarantines(&n.dir("r.git")).is_empty(), "{}", n.name);
    }
    c.assert_fsck(&w, "r.git");
    // Every ref transaction (five pushes, the last one two) was prepared by all three
    // replicas, none caught up later.
    let log0 = c.nodes[0].process.as_ref().unwrap().log();
    let committed = log0
        .lines()
        .filter(|l| l.contains("committed to the log"))
        .collect::<Vec<_>>();
    assert_eq!(committed.len(), 6, "{}", c.logs());
    assert!(
        committed.iter().all(|l| l.contains("prepared=3")),
        "{}",
        c.logs()
    );
    // No git pack-objects on the accepting node.
    let argv = std::fs::read_to_string(w.path("git-argv.log")).unwrap_or_default();
    let node0 = c.nodes[0].root.display().to_string();
    let packed: Vec<&str> = argv
        .lines()
        .filter(|l| l.contains("pack-objects") && l.contains(&node0))
        .collect();
    assert!(packed.is_empty(), "pack-objects on node 0: {packed:#?}");
    assert!(
        argv.lines().any(|l| l.contains(&node0)),
        "the wrapper saw no git of node 0's: {argv}"
    );
}

#[test]
fn a_push_refused_by_pre_receive_leaves_no_quarantine_and_no_objects_on_the_replicas() {
    let Some(w) = cluster_world() else { return };
    let (c, src) = cluster(&w).with_repo("r.git");
    let before = c.converged(&w, "r.git", 3);
    // node 0's pre-receive waits until the pack reached both other replicas' quarantines (it
    // was streamed there while node 0 read it), then refuses.
    let (d1, d2) = (c.nodes[1].dir("r.git"), c.nodes[2].dir("r.git"));
    let hook = c.nodes[0].dir("r.git").join("hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncat >/dev/null\ni=0\nwhile [ $i -lt 1200 ]; do\n  if ls -d '{}'/objects/tmp_objdir* >/dev/null 2>&1 && ls -d '{}'/objects/tmp_objdir* >/dev/null 2>&1; then\n    : > '{}'\n    echo 'refused by the test' >&2\n    exit 1\n  fi\n  sleep 0.1\n  i=$((i+1))\ndone\necho 'the pack never reached the replicas' >&2\nexit 1\n",
            d1.display(),
            d2.display(),
            w.path("streamed").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();

    let new = w.commit(&src, "b", &String::from_utf8_lossy(&noise(200_000, 7)));
    let out = push(
        &w,
        &src,
        &c.nodes[0].url("r.git"),
        &["HEAD:refs/heads/main"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        porcelain(&out).get("refs/heads/main"),
        Some(&false),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("pre-receive hook declined"), "{stdout}");
    assert!(stderr.contains("refused by the test"), "{stderr}");
    assert!(
        w.path("streamed").exists(),
        "the pack was not streamed to the replicas before the decision: {stderr}"
    );
    for n in &c.nodes {
        let dir = n.dir("r.git");
        assert!(
            eventually(Duration::from_secs(60), || quarantines(&dir).is_empty()),
            "{}: quarantine left: {:?}\n{}",
            n.name,
            quarantines(&dir),
            c.logs()
        );
        assert!(!has_object(&w, &dir, &new), "{} has {new}", n.name);
    }
    assert_eq!(c.converged(&w, "r.git", 3), before);
    c.assert_fsck(&w, "r.git");
}

#[test]
fn a_stream_cut_off_by_the_accepting_nodes_death_leaves_nothing_on_the_replicas() {
    let Some(w) = cluster_world() else { return };
    let (mut c, src) = cluster(&w).with_repo("r.git");
    let before = c.converged(&w, "r.git", 3);
    let old = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    std::fs::write(w.path(&format!("{src}/noise.bin")), noise(2 << 20, 11)).unwrap();
    w.git(&src, &["add", "-A"]);
    w.git(&src, &["commit", "-q", "-m", "noise"]);
    let new = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    let pack = w.git_with_stdin(
        &src,
        &["pack-objects", "--revs", "--stdout", "-q"],
        format!("{new}\n^{old}\n").as_bytes(),
    );
    assert!(pack.status.success());
    let pack = pack.stdout;
    assert!(pack.len() > 1 << 20);

    // A push by hand: the commands, then only half of the pack; the client stays connected.
    // (`common::request`: with ` object-format=sha256` on SHA-256, as git's send-pack says.)
    let mut body =
        crate::common::request(&[format!("{old} {new} refs/heads/main")], "report-status\n");
    let total = body.len() + pack.len();
    body.extend_from_slice(&pack[..pack.len() / 2]);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", c.nodes[0].port)).unwrap();
    write!(
        s,
        "POST /r.git/git-receive-pack HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-git-receive-pack-request\r\nContent-Length: {total}\r\n\r\n"
    )
    .unwrap();
    s.write_all(&body).unwrap();
    s.flush().unwrap();

    // The replicas are ingesting it as it arrives.
    let (d1, d2) = (c.nodes[1].dir("r.git"), c.nodes[2].dir("r.git"));
    assert!(
        eventually(Duration::from_secs(60), || !quarantines(&d1).is_empty()
            && !quarantines(&d2).is_empty()),
        "the pack was not streamed to the replicas while it arrived:\n{}",
        c.logs()
    );
    c.kill_node(0);
    drop(s);
    for (i, dir) in [(1, &d1), (2, &d2)] {
        assert!(
            eventually(Duration::from_secs(60), || quarantines(dir).is_empty()),
            "n{i}: quarantine left: {:?}\n{}",
            quarantines(dir),
            c.logs()
        );
        assert!(!has_object(&w, dir, &new), "n{i} has {new}");
    }
    c.start_node(&w, 0);
    assert_eq!(c.converged(&w, "r.git", 3), before);
    c.assert_fsck(&w, "r.git");
    // And the cluster takes the push from a client again.
    push_ok(
        &w,
        &src,
        &c.nodes[1].url("r.git"),
        &["HEAD:refs/heads/main"],
    );
    let refs = c.converged(&w, "r.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&new));
    wait_for(&c.nodes[0].dir("r.git").join("HEAD"), &c);
    c.assert_fsck(&w, "r.git");
}

#[test]
fn a_replica_too_slow_for_the_stream_is_left_out_after_the_stall_bound_and_catches_up() {
    let Some(w) = cluster_world() else { return };
    let (c, src) = cluster(&w).with_repo("r.git");
    // n2 stopped: it takes the stream's bytes until the sockets' buffers are full, then none.
    c.signal(2, "-STOP");
    std::fs::write(w.path(&format!("{src}/noise.bin")), noise(24 << 20, 5)).unwrap();
    w.git(&src, &["add", "-A"]);
    w.git(&src, &["commit", "-q", "-m", "noise"]);
    let new = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    let start = Instant::now();
    let out = push(
        &w,
        &src,
        &c.nodes[0].url("r.git"),
        &["HEAD:refs/heads/main"],
    );
    let took = start.elapsed();
    c.signal(2, "-CONT");
    assert!(
        out.status.success(),
        "push with n2 stopped: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    // Held up by the stall bound (10 s), not by the stopped replica: the push ended while n2 was
    // still stopped (it is continued only now), which is the behaviour; the bound is only there
    // to tell a push that waited out some other timeout (the idle timeout is 300 s), at ten times
    // what the push needs on a quiet machine in a debug build.
    assert!(took < Duration::from_secs(280), "{took:?}");
    let log0 = c.nodes[0].process.as_ref().unwrap().log();
    assert!(
        log0.contains("left out of this push"),
        "n2 was not dropped from the stream:\n{}",
        c.logs()
    );
    // Continued, it refuses what is left of the push and catches up.
    let refs = c.converged(&w, "r.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&new));
    for n in &c.nodes[1..] {
        let dir = n.dir("r.git");
        assert!(
            eventually(Duration::from_secs(60), || quarantines(&dir).is_empty()),
            "{}: quarantine left: {:?}\n{}",
            n.name,
            quarantines(&dir),
            c.logs()
        );
    }
    c.assert_fsck(&w, "r.git");
}

/// Whether every thread of process `pid` is traced (its `TracerPid` is set).
pub(crate) fn traced(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks.filter_map(Result::ok).all(|t| {
                std::fs::read_to_string(t.path().join("status")).is_ok_and(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("TracerPid:"))
                        .is_some_and(|v| v.trim() != "0")
                })
            })
        })
        .unwrap_or(false)
}

#[test]
fn a_replica_prepares_and_commits_ten_pushes_without_a_git_process() {
    let Some(w) = cluster_world() else { return };
    let (c, src) = cluster(&w).with_repo("r.git");
    // strace every thread of replica n1 from now on; its execve calls are its children's.
    let pid = c.nodes[1].process.as_ref().unwrap().child.id();
    let trace = w.path("n1.trace");
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=execve", "-o"])
        .arg(&trace)
        .args(["-p", &pid.to_string()])
        .spawn()
        .expect("strace (the CI installs it)");
    assert!(
        eventually(Duration::from_secs(60), || traced(pid)),
        "strace did not attach to n1"
    );
    let mut last = String::new();
    for i in 0..10 {
        last = w.commit(&src, "a", &format!("push {i}"));
        push_ok(
            &w,
            &src,
            &c.nodes[0].url("r.git"),
            &["HEAD:refs/heads/main"],
        );
    }
    let refs = c.converged(&w, "r.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&last));
    // Detach (SIGINT), then read what n1 ran.
    let _ = Command::new("kill")
        .args(["-INT", &strace.id().to_string()])
        .status();
    let _ = strace.wait();
    let calls = std::fs::read_to_string(&trace).unwrap();
    let execs: Vec<&str> = calls.lines().filter(|l| l.contains("execve(")).collect();
    assert!(
        execs.is_empty(),
        "n1 ran processes for the pushes:\n{}",
        execs.join("\n")
    );
    c.assert_fsck(&w, "r.git");
}

/// A pushed history kept as a pack (more objects than `receive.unpackLimit`) is vouched for on
/// every replica by the links its indexing of the streamed pack took, as on the accepting
/// node: each node's debug log says `found_by="indexing"`, and none decoded the pack's
/// commits and trees a second time (`found_by="decoding"`, what the replicas did before
/// 784f4a1).
#[test]
fn every_replica_vouches_for_a_pushed_history_with_the_links_its_indexing_took() {
    let Some(w) = cluster_world() else { return };
    let c = cluster(&w).env("RUST_LOG", "berth=debug").start();
    let src = w.work("src");
    for i in 0..60 {
        w.commit(&src, &format!("d{}/f{i}", i % 3), &format!("{i}\n"));
    }
    push_ok(
        &w,
        &src,
        &c.nodes[0].url("r.git"),
        &["HEAD:refs/heads/main"],
    );
    let head = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    let refs = c.converged(&w, "r.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&head));
    for n in &c.nodes {
        // Kept as a pack, so that there are links to take.
        let packs = std::fs::read_dir(n.dir("r.git").join("objects/pack"))
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
            .count();
        assert_eq!(packs, 1, "{}", n.name);
        let log = n.log();
        assert!(
            log.contains("links vouch for its tips found_by=\"indexing\""),
            "{}:\n{log}",
            n.name
        );
        assert!(!log.contains("found_by=\"decoding\""), "{}:\n{log}", n.name);
    }
    c.assert_fsck(&w, "r.git");
}
