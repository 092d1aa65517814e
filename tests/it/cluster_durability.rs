//! `berth serve --cluster-durability`: with the default (`synced`) a node reports a push applied
//! only once it is on disk, in git's order: the objects (and the directories they were renamed
//! into), then the refs that need them (the ref's lock file, then its directory after the
//! rename), then the applied sequence (its temporary file, then the repository's directory
//! after the rename). The accepting node and the replicas (a small push: loose objects on n0
//! and n1, the streamed pack on n2, whose `receive.unpackLimit` is 1) run under `strace -f -y`
//! during one push, and the order of their syncs is read against the reply that says
//! "applied": a replica's `committed` to the decide request, the accepting node's `ok` to the
//! client. With `core-fsync` only what `core.fsync`
//! says is synced (git's default: the pack and its index). Always over plain HTTP, even
//! under `BERTH_TEST_CLUSTER_TLS=1`: strace reads the replies on the sockets.

use crate::cluster::push_ok;
use crate::cluster_fixture::{cluster, cluster_world};
use crate::cluster_stream::{eventually, traced};
use crate::common::World;

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

/// strace attached to every thread of a node, writing to a file.
struct Trace {
    strace: Child,
    file: std::path::PathBuf,
}

impl Trace {
    /// Attach to `pid`; once every thread is traced.
    fn attach(w: &World, pid: u32, name: &str) -> Trace {
        let file = w.path(&format!("{name}.trace"));
        let strace = Command::new("strace")
            .args(["-f", "-qq", "-y", "-s", "512", "-e", "signal=none"])
            .args([
                "-e",
                "trace=fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat,write,writev,sendto,sendmsg",
                "-o",
            ])
            .arg(&file)
            .args(["-p", &pid.to_string()])
            .spawn()
            .expect("strace (the CI installs it)");
        assert!(
            eventually(Duration::from_secs(60), || traced(pid)),
            "strace did not attach to {name}"
        );
        Trace { strace, file }
    }

    /// Once the trace holds a line with `until` (at most a minute), detach (SIGINT); its lines.
    fn finish(mut self, until: &str) -> Vec<String> {
        let found = eventually(Duration::from_secs(60), || {
            std::fs::read_to_string(&self.file).is_ok_and(|t| t.contains(until))
        });
        let _ = Command::new("kill")
            .args(["-INT", &self.strace.id().to_string()])
            .status();
        let _ = self.strace.wait();
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        assert!(found, "no {until} in the trace:\n{text}");
        text.lines().map(str::to_owned).collect()
    }
}

/// The path strace -y shows for the descriptor a call's first argument, if any:
/// `fsync(7</path/to/file>)`.
fn fd_path(line: &str) -> Option<&str> {
    let open = line.find('(')?;
    let rest = &line[open + 1..];
    let start = rest.find('<')?;
    let end = rest.find(">)").or_else(|| rest.find("> <unfinished"))?;
    (start < end).then(|| &rest[start + 1..end])
}

/// What a node synced, in trace order: each synced path, with the line it was synced at.
fn syncs(lines: &[String]) -> Vec<(usize, String)> {
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            let call = l.trim_start_matches(|c: char| c.is_ascii_digit()).trim();
            call.starts_with("fsync(") || call.starts_with("fdatasync(")
        })
        .filter_map(|(i, l)| Some((i, fd_path(l)?.to_owned())))
        .collect()
}

/// The first line at which `path` (relative to `repo`, `""` for the repository itself) is
/// synced.
fn synced_at(syncs: &[(usize, String)], repo: &Path, path: &str) -> Option<usize> {
    let want = if path.is_empty() {
        repo.to_path_buf()
    } else {
        repo.join(path)
    };
    let want = want.to_str().unwrap();
    syncs.iter().find(|(_, p)| p == want).map(|(i, _)| *i)
}

/// The first synced path matching `pred`, and its line.
fn first_sync(syncs: &[(usize, String)], pred: impl Fn(&str) -> bool) -> Option<usize> {
    syncs.iter().find(|(_, p)| pred(p)).map(|(i, _)| *i)
}

/// The line of the first write to a socket holding `data`.
fn reply_at(lines: &[String], data: &str) -> Option<usize> {
    lines.iter().position(|l| {
        let call = l.trim_start_matches(|c: char| c.is_ascii_digit()).trim();
        ["write(", "writev(", "sendto(", "sendmsg("]
            .iter()
            .any(|c| call.starts_with(c))
            && call.contains("socket:")
            && call.contains(data)
    })
}

/// What one traced node did during the push: its trace and its copy's directory (canonical,
/// as strace shows it).
struct Traced {
    name: &'static str,
    lines: Vec<String>,
    dir: std::path::PathBuf,
}

/// Start a cluster with `args`, create `r.git`, then push one small commit (a few objects)
/// through n0 while every node is traced: the accepting node n0 and the replica n1 keep them
/// as loose objects (fewer than `receive.unpackLimit`, as git's receive-pack keeps them), the
/// replica n2, whose copy's `receive.unpackLimit` is 1, as the pack streamed to it.
fn traced_push(args: &[&str]) -> [Traced; 3] {
    let w = cluster_world().expect("checked by the caller");
    let (c, src) = cluster(&w).plain().args(args).with_repo("r.git");
    c.converged(&w, "r.git", 3);
    let n2 = c.nodes[2].dir("r.git").display().to_string();
    w.git(".", &["-C", &n2, "config", "receive.unpackLimit", "1"]);
    let dir = |i: usize| {
        w.path(&format!("node{i}"))
            .join("r.git")
            .canonicalize()
            .unwrap()
    };
    let pid = |i: usize| c.nodes[i].process.as_ref().unwrap().child.id();
    let traces = [
        Trace::attach(&w, pid(0), "n0"),
        Trace::attach(&w, pid(1), "n1"),
        Trace::attach(&w, pid(2), "n2"),
    ];
    w.commit(&src, "b/c", "two");
    push_ok(
        &w,
        &src,
        &c.nodes[0].url("r.git"),
        &["HEAD:refs/heads/main"],
    );
    c.converged(&w, "r.git", 3);
    let [t0, t1, t2] = traces;
    let traced = [
        ("n0", t0.finish("ok refs/heads/main"), dir(0)),
        ("n1", t1.finish("\"committed\""), dir(1)),
        ("n2", t2.finish("\"committed\""), dir(2)),
    ]
    .map(|(name, lines, dir)| Traced { name, lines, dir });
    c.assert_fsck(&w, "r.git");
    traced
}

/// The order a node made the push durable in, up to `reply` (the line of its answer): the
/// loose objects (in its quarantine) and their fan-out directories after the move, then the
/// ref's lock (written at prepare), its directory after the rename, the applied sequence and
/// the repository's directory after its rename.
fn assert_loose_objects_then_refs(t: &Traced, reply: usize) {
    let s = syncs(&t.lines);
    let shown = || format!("{} synced:\n{s:#?}", t.name);
    let quarantine = t.dir.join("objects").join("tmp_objdir-incoming-");
    let quarantine = quarantine.to_str().unwrap();
    let loose: Vec<usize> = s
        .iter()
        .filter(|(_, p)| p.starts_with(quarantine))
        .map(|(i, _)| *i)
        .collect();
    // A commit, a tree `b`, a blob, the root tree: four loose objects.
    assert!(loose.len() >= 4, "{}", shown());
    assert!(
        first_sync(&s, |p| p.ends_with(".pack")).is_none(),
        "{}",
        shown()
    );
    let objects = t.dir.join("objects");
    let fanout: Vec<usize> = s
        .iter()
        .filter(|(_, p)| {
            Path::new(p).parent() == Some(objects.as_path())
                && p.rsplit('/').next().is_some_and(|n| n.len() == 2)
        })
        .map(|(i, _)| *i)
        .collect();
    assert!(!fanout.is_empty(), "{}", shown());
    let d = &t.dir;
    let lock = synced_at(&s, d, "refs/heads/main.lock").unwrap_or_else(|| panic!("{}", shown()));
    let heads = synced_at(&s, d, "refs/heads").unwrap_or_else(|| panic!("{}", shown()));
    let seq = synced_at(&s, d, "berth-cluster-seq.tmp").unwrap_or_else(|| panic!("{}", shown()));
    let repo = synced_at(&s, d, "").unwrap_or_else(|| panic!("{}", shown()));
    let order = [
        *loose.iter().max().unwrap(),
        *fanout.iter().max().unwrap(),
        lock,
        heads,
        seq,
        repo,
        reply,
    ];
    assert!(
        order.windows(2).all(|p| p[0] < p[1]),
        "{}: loose objects, their directories, main.lock, refs/heads, seq, repository, reply at lines {order:?}\n{}",
        t.name,
        shown()
    );

    // Before the first loose object moves in, the push lists them in a file of its own,
    // synced with its directory (a power loss makes the renames durable in no particular
    // order: a commit could outlive its tree); once their directories are synced, and before
    // the reply, the file is removed.
    let pending = t.dir.join("objects/info/berth-incomplete.d");
    let listed = first_sync(&s, |p| {
        Path::new(p).parent() == Some(pending.as_path())
            && p.rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with(".tmp_objdir-incoming-"))
    })
    .unwrap_or_else(|| panic!("no own file synced: {}", shown()));
    let listed_dir = synced_at(&s, d, "objects/info/berth-incomplete.d")
        .unwrap_or_else(|| panic!("{}", shown()));
    let call = |l: &str, name: &str| {
        l.trim_start_matches(|c: char| c.is_ascii_digit())
            .trim()
            .starts_with(name)
    };
    let first_move = t
        .lines
        .iter()
        .position(|l| call(l, "rename") && l.contains(quarantine) && !l.contains("/pack/"))
        .unwrap_or_else(|| panic!("{}: no loose object renamed in", t.name));
    let pending_str = pending.to_str().unwrap();
    let removed = t
        .lines
        .iter()
        .position(|l| {
            call(l, "unlink") && l.contains(&format!("{pending_str}/tmp_objdir-incoming-"))
        })
        .unwrap_or_else(|| panic!("{}: the push's own file was not removed", t.name));
    let order = [
        listed,
        listed_dir,
        first_move,
        *fanout.iter().max().unwrap(),
        removed,
        reply,
    ];
    assert!(
        order.windows(2).all(|p| p[0] < p[1]),
        "{}: own file, its directory, first move, fan-out directories, own file removed, reply at lines {order:?}\n{}",
        t.name,
        shown()
    );
    let left: Vec<_> = std::fs::read_dir(&pending)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "{}: {left:?} left in {pending_str}",
        t.name
    );
}

#[test]
fn a_node_reports_a_push_applied_once_its_objects_then_refs_then_applied_sequence_are_synced() {
    if cluster_world().is_none() {
        return;
    }
    let [n0, n1, n2] = traced_push(&[]);

    // The accepting node, then `ok` to the client.
    let ok = reply_at(&n0.lines, "ok refs/heads/main").expect("n0's report to the client");
    assert_loose_objects_then_refs(&n0, ok);
    // A replica keeping the push as loose objects, as n0 does, then `committed`.
    let committed = reply_at(&n1.lines, "\"committed\"").expect("n1's decide reply");
    assert_loose_objects_then_refs(&n1, committed);

    // A replica keeping the streamed pack: the pack (in its quarantine), the pack directory
    // after the move, then the refs and the sequence as above; then `committed`.
    let s2 = syncs(&n2.lines);
    let d2 = &n2.dir;
    let shown = || format!("n2 synced:\n{s2:#?}");
    let pack = first_sync(&s2, |p| p.ends_with(".pack")).unwrap_or_else(|| panic!("{}", shown()));
    let idx = first_sync(&s2, |p| p.ends_with(".idx")).unwrap_or_else(|| panic!("{}", shown()));
    let pack_dir = synced_at(&s2, d2, "objects/pack").unwrap_or_else(|| panic!("{}", shown()));
    let lock = synced_at(&s2, d2, "refs/heads/main.lock").unwrap_or_else(|| panic!("{}", shown()));
    let heads = synced_at(&s2, d2, "refs/heads").unwrap_or_else(|| panic!("{}", shown()));
    let seq = synced_at(&s2, d2, "berth-cluster-seq.tmp").unwrap_or_else(|| panic!("{}", shown()));
    let repo = synced_at(&s2, d2, "").unwrap_or_else(|| panic!("{}", shown()));
    let committed = reply_at(&n2.lines, "\"committed\"").expect("n2's decide reply");
    let order = [pack.max(idx), pack_dir, lock, heads, seq, repo, committed];
    assert!(
        order.windows(2).all(|p| p[0] < p[1]),
        "n2: pack/idx, objects/pack, main.lock, refs/heads, seq, repository, reply at lines {order:?}\n{}",
        shown()
    );
}

#[test]
fn with_core_fsync_durability_a_node_syncs_what_core_fsync_says_only() {
    if cluster_world().is_none() {
        return;
    }
    let traced = traced_push(&["--cluster-durability", "core-fsync"]);
    for t in &traced {
        let s = syncs(&t.lines);
        let dir = t.dir.to_str().unwrap();
        // Nothing of the repository but packs and their metadata (git's default core.fsync).
        let other: Vec<&String> = s
            .iter()
            .map(|(_, p)| p)
            .filter(|p| p.starts_with(dir))
            .filter(|p| {
                let n = p.rsplit('/').next().unwrap_or("");
                !(n.ends_with(".pack") || n.ends_with(".idx") || n.ends_with(".rev"))
            })
            .collect();
        assert!(other.is_empty(), "{} synced {other:#?}", t.name);
    }
    // The replica keeping the streamed pack still syncs it, as git does.
    let s2 = syncs(&traced[2].lines);
    assert!(
        first_sync(&s2, |p| p.ends_with(".pack")).is_some(),
        "n2 synced:\n{s2:#?}"
    );
}

/// What a power loss in the middle of a replica's move can leave (the renames durable in no
/// particular order): a push's commit in the copy without its tree, and the push's own file
/// listing the objects that were moving in (synced before the first of them moved). The
/// copy's catch-up does not take that commit as complete for being there: it asks a peer for
/// it and for what it reaches, and the copy ends whole (`git fsck --strict`).
#[test]
fn a_commit_left_without_its_tree_by_a_power_loss_mid_move_is_fetched_again_by_the_catch_up() {
    let Some(w) = cluster_world() else { return };
    let (mut c, src) = cluster(&w).with_repo("r.git");
    c.converged(&w, "r.git", 3);
    c.kill_node(1);
    let new = w.commit(&src, "d/e", "two");
    c.must_push(
        &w,
        &src,
        0,
        "r.git",
        &["HEAD:refs/heads/main"],
        "a push with n1 down",
    );
    let copy = c.nodes[1].dir("r.git");
    let moved = w.git(
        &src,
        &["rev-list", "--objects", "--no-object-names", "HEAD^!"],
    );
    let body = w.git(&src, &["cat-file", "commit", &new]);
    let planted = w.git_with_stdin(
        &copy,
        &["hash-object", "-t", "commit", "-w", "--stdin"],
        body.as_bytes(),
    );
    assert_eq!(String::from_utf8_lossy(&planted.stdout).trim(), new);
    let tree = w.git(&src, &["rev-parse", "HEAD^{tree}"]).trim().to_owned();
    let has = |id: &str| {
        w.git_cmd(&copy)
            .args(["cat-file", "-e", id])
            .status()
            .unwrap()
            .success()
    };
    assert!(has(&new) && !has(&tree), "the state a power loss can leave");
    let pending = copy.join("objects/info/berth-incomplete.d");
    std::fs::create_dir_all(&pending).unwrap();
    let lines: String = moved
        .lines()
        .map(|id| format!("moving {}\n", id.trim()))
        .collect();
    std::fs::write(pending.join("tmp_objdir-incoming-lost"), lines).unwrap();

    c.start_node(&w, 1);
    let refs = c.converged(&w, "r.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&new));
    assert!(has(&tree), "n1 fetched the tree again");
    c.assert_fsck(&w, "r.git");
}

/// A pre-receive hook that leaves directories in the quarantine named almost as fan-out
/// directories are (`AB`, `+1`) does not fail the push on a node syncing directories (the
/// default): they are no fan-out directories git reads, and are not moved in. (They were
/// taken for fan-out directories 0xab and 0x01, moved in under their own names, and `ab` and
/// `01` synced instead, which failed.)
#[test]
fn a_hooks_odd_directories_in_the_quarantine_do_not_fail_a_synced_push() {
    let Some(w) = cluster_world() else { return };
    let hooks = w.path("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let hook = hooks.join("pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\ncat >/dev/null\nfor d in AB +1; do mkdir -p \"$GIT_OBJECT_DIRECTORY/$d\" && : > \"$GIT_OBJECT_DIRECTORY/$d/x\" || exit 1; done\nexit 0\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = cluster(&w)
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "core.hooksPath")
        .env("GIT_CONFIG_VALUE_0", hooks.to_str().unwrap())
        .start();
    let src = w.work("src");
    w.commit(&src, "a", "one");
    c.must_push(
        &w,
        &src,
        0,
        "odd.git",
        &["HEAD:refs/heads/main"],
        "the first push",
    );
    w.commit(&src, "a", "two");
    c.must_push(
        &w,
        &src,
        0,
        "odd.git",
        &["HEAD:refs/heads/main"],
        "the second push",
    );
    c.converged(&w, "odd.git", 3);
    let objects = c.nodes[0].dir("odd.git").join("objects");
    for odd in ["AB", "+1"] {
        assert!(!objects.join(odd).exists(), "{odd} moved in");
    }
    w.git(c.nodes[0].dir("odd.git"), &["fsck", "--strict"]);
}
