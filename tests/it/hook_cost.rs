//! "An absent hook costs nothing; a present hook costs its process": a 10,000-ref push is run
//! under `strace -f` and every process, thread and pipe berth creates is counted.

use crate::common;
use common::{EMPTY_PACK, World, ZERO, pkt};

/// What berth started during one push of `refs` new refs.
struct Started {
    /// Clone-like syscalls: processes and threads.
    spawns: usize,
    /// Of them, processes started by `fork` (a clone that does not share the address space
    /// and suspend the caller until the exec, as `posix_spawn`'s `CLONE_VM|CLONE_VFORK` does).
    forks: usize,
    execs: usize,
    pipes: usize,
    /// What the client got.
    report: String,
    /// receive-pack's stderr.
    stderr: String,
}

/// One push of `refs` new refs under `strace -f`, with an `update` hook that writes a line
/// to its stdout and one to its stderr, or none; the client asking for `side-band-64k` or not.
fn push_under_strace(with_update_hook: bool, refs: usize, sideband: bool) -> Started {
    let w = World::new();
    w.bare("srv.git");
    // Only the hook machinery is measured: no auto-maintenance child.
    w.git("srv.git", &["config", "receive.autogc", "false"]);
    // Hooks that exist for other events must not make `update` cost anything.
    std::fs::write(w.path("srv.git/hooks/README"), "not a hook\n").unwrap();
    if with_update_hook {
        let hook = w.path("srv.git/hooks/update");
        std::fs::write(&hook, "#!/bin/sh\necho \"out $1\"\necho \"err $1\" >&2\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    w.work("src");
    let head = w.commit("src", "a", "1");
    w.git("src", &["push", "-q", "../srv.git", "main"]);
    let mut input = Vec::new();
    for i in 0..refs {
        let caps = match (i, sideband) {
            (0, true) => "\0 report-status-v2 side-band-64k quiet",
            (0, false) => "\0 report-status-v2 quiet",
            _ => "",
        };
        input.extend(pkt(&format!("{ZERO} {head} refs/heads/b/{i:05}{caps}")));
    }
    input.extend(b"0000");
    input.extend(EMPTY_PACK);
    let trace = w.path("trace");
    let mut cmd = w.cmd("strace", ".");
    cmd.args([
        "-f",
        "-qq",
        "-e",
        "trace=clone,clone3,fork,vfork,execve,pipe,pipe2",
        "-o",
    ])
    .arg(&trace)
    .arg(common::berth())
    .args(["receive-pack", "--stateless-rpc", "srv.git"]);
    let out = w.git_with_stdin_cmd(cmd, &input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let trace = std::fs::read_to_string(&trace).unwrap();
    let spawn_lines: Vec<&str> = trace
        .lines()
        .filter(|l| {
            ["clone(", "clone3(", "fork(", "vfork("]
                .iter()
                .any(|s| l.contains(s))
        })
        .filter(|l| !l.contains("resumed>"))
        .collect();
    let spawns = spawn_lines.len();
    let forks = spawn_lines
        .iter()
        .filter(|l| {
            let spawned =
                l.contains("vfork(") || l.contains("CLONE_VM") && l.contains("CLONE_VFORK");
            !spawned
        })
        .count();
    let count = |call: &str| {
        trace
            .lines()
            .filter(|l| l.contains(call) && !l.contains("resumed>"))
            .count()
    };
    let (execs, pipes) = (count("execve("), count("pipe(") + count("pipe2("));
    assert_eq!(w.refs("srv.git").lines().count(), refs + 1);
    Started {
        spawns,
        forks,
        execs,
        pipes,
        report,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn absent_hooks_start_nothing_present_update_hook_starts_one_process_per_ref() {
    let s = push_under_strace(false, 10_000, true);
    assert!(s.report.contains("ok refs/heads/b/09999"));
    assert_eq!(s.spawns, 0, "no thread or process for absent hooks");
    assert_eq!(s.execs, 1, "only berth itself is exec'd");
    assert_eq!(s.pipes, 0, "no pipe for absent hooks");

    let s = push_under_strace(true, 300, true);
    assert_eq!(
        s.spawns, 300,
        "exactly one process per ref for the update hook, and no thread"
    );
    // Each hook runs in the repository (a working directory for the child): std's spawn
    // needs `posix_spawn_file_actions_addchdir_np` for that, and forks without it, which a
    // static link once left out (src/main.rs, `SPAWN_WITH_CHDIR`).
    assert_eq!(s.forks, 0, "each hook started by posix_spawn, none by fork");
    assert_eq!(s.execs, 1 + 300);
    assert_eq!(s.pipes, 300, "with sideband, each hook's output is relayed");
    assert!(
        s.report.contains("out refs/heads/b/00299") && s.report.contains("err refs/heads/b/00299")
    );
}

/// Without sideband a hook's output goes to receive-pack's stderr, and `berth receive-pack`'s
/// stderr is its own: the hook writes there itself (its stdout joined to it), as git's hooks
/// do, with no pipe and nothing relayed.
#[test]
fn without_sideband_the_update_hook_writes_to_receive_packs_stderr_itself() {
    let s = push_under_strace(true, 300, false);
    assert_eq!(s.spawns, 300);
    assert_eq!(s.forks, 0, "each hook started by posix_spawn, none by fork");
    assert_eq!(
        s.pipes, 0,
        "no pipe: the hook's output is not read by berth"
    );
    assert!(s.report.contains("ok refs/heads/b/00299"));
    for i in [0, 150, 299] {
        let name = format!("refs/heads/b/{i:05}");
        let lines = format!("out {name}\nerr {name}\n");
        assert!(s.stderr.contains(&lines), "{lines:?} in {:?}", s.stderr);
    }
    assert!(
        !s.report.contains("out refs/heads/b/"),
        "nothing on the client's channel"
    );
}

/// The environment array of each `execve` in an `strace -v` trace, by the program's path.
fn exec_environments(trace: &str) -> Vec<(String, Vec<String>)> {
    trace
        .lines()
        .filter(|l| l.contains("execve(\"") && l.ends_with("= 0"))
        .filter_map(|l| {
            let program = l.split("execve(\"").nth(1)?.split('"').next()?.to_owned();
            let env = l.rsplit_once("], [")?.1.rsplit_once("]) =")?.0;
            let env = env
                .trim_matches('"')
                .split("\", \"")
                .map(str::to_owned)
                .collect();
            Some((program, env))
        })
        .collect()
}

/// `berth receive-pack` says `GIT_DIR=.` in its own environment once, as git's receive-pack
/// does (`enter_repo`), so that a hook is given the receiving process's environment as it is
/// rather than a copy std rebuilds, sorted, for every hook: the hook's environment is
/// receive-pack's in its order with `GIT_DIR=.` added last (or in its place, when the caller
/// had one).
#[test]
fn the_update_hook_is_given_receive_packs_own_environment() {
    let w = World::new();
    w.bare("srv.git");
    w.git("srv.git", &["config", "receive.autogc", "false"]);
    let hook = w.path("srv.git/hooks/update");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho \"$GIT_DIR $(basename \"$PWD\")\" >&2\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.work("src");
    let head = w.commit("src", "a", "1");
    w.git("src", &["push", "-q", "../srv.git", "main"]);
    let run = |caller_git_dir: Option<&str>| {
        let mut input = Vec::new();
        for i in 0..3 {
            let caps = if i == 0 { "\0 report-status quiet" } else { "" };
            let run = caller_git_dir.map_or("a", |_| "b");
            input.extend(pkt(&format!("{ZERO} {head} refs/heads/{run}/{i}{caps}")));
        }
        input.extend(b"0000");
        input.extend(EMPTY_PACK);
        let trace = w.path("trace");
        let mut cmd = w.cmd("strace", ".");
        cmd.args(["-f", "-qq", "-v", "-s", "4096", "-e", "trace=execve", "-o"])
            .arg(&trace)
            .arg(common::berth())
            .args(["receive-pack", "--stateless-rpc", "srv.git"]);
        if let Some(dir) = caller_git_dir {
            cmd.env("GIT_DIR", dir);
        }
        let out = w.git_with_stdin_cmd(cmd, &input);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        assert_eq!(
            stderr,
            ". srv.git\n".repeat(3),
            "each hook sees GIT_DIR=. in the repository"
        );
        exec_environments(&std::fs::read_to_string(&trace).unwrap())
    };

    // berth's own environment, and each hook's (the hook's `basename` left out).
    let split = |execs: Vec<(String, Vec<String>)>| {
        let berth = execs[0].1.clone();
        let hooks: Vec<_> = execs
            .into_iter()
            .filter(|(program, _)| program == "hooks/update")
            .map(|(_, env)| env)
            .collect();
        assert_eq!(hooks.len(), 3);
        (berth, hooks)
    };
    let (berth, hooks) = split(run(None));
    assert!(!berth.iter().any(|v| v.starts_with("GIT_DIR=")));
    let mut expected = berth.clone();
    expected.push("GIT_DIR=.".to_owned());
    for env in &hooks {
        assert_eq!(
            env, &expected,
            "the hook's environment is receive-pack's, GIT_DIR last"
        );
    }

    // A caller's GIT_DIR is replaced where it stands.
    let (berth, hooks) = split(run(Some("/elsewhere")));
    let expected: Vec<_> = berth
        .iter()
        .map(|v| match v.as_str() {
            "GIT_DIR=/elsewhere" => "GIT_DIR=.".to_owned(),
            _ => v.clone(),
        })
        .collect();
    assert!(expected.contains(&"GIT_DIR=.".to_owned()));
    for env in &hooks {
        assert_eq!(env, &expected);
    }
}

/// A bare `srv.git` holding `main` at one commit, and `src` four commits ahead of it (each
/// tree a delta on the one before); `main`'s commit in `srv.git`.
fn four_commits_ahead() -> (World, String) {
    let w = World::new();
    w.bare("srv.git");
    w.git("srv.git", &["config", "receive.autogc", "false"]);
    w.work("src");
    let old = w.commit("src", "a", "1");
    w.git("src", &["push", "-q", "../srv.git", "main"]);
    for i in 0..4 {
        w.commit("src", &format!("f{i}"), &format!("{i}"));
    }
    (w, old)
}

/// The push traced into `trace` (`strace -f` of clone calls) started no thread, and left its
/// 12 objects loose beside the first push's 3 (one blob the same) in a repository git's
/// strict fsck takes.
fn unpacked_without_a_thread(w: &World, trace: &std::path::Path) {
    let trace = std::fs::read_to_string(trace).unwrap();
    let threads = trace.lines().filter(|l| l.contains("CLONE_THREAD")).count();
    assert_eq!(threads, 0, "{trace}");
    let loose = w.git("srv.git", &["count-objects"]);
    assert!(loose.starts_with("14 objects"), "{loose}");
    let fsck = w.git_out("srv.git", &["fsck", "--strict"]);
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
}

/// A pack small enough to become loose objects has its deltas resolved by the thread reading
/// it, as git's single-threaded unpack-objects resolves them: gix-pack would start one a core
/// (up to one an object) for each such push, and with one thread asked for it still starts
/// one. A push from the git client (a thin pack, its deltas on offsets) starts no thread:
/// counted under `strace -f`.
#[test]
fn a_push_unpacked_to_loose_objects_resolves_its_deltas_on_the_reading_thread() {
    let (w, _) = four_commits_ahead();
    let trace = git_push_traced(&w, "clone,clone3,prctl");
    unpacked_without_a_thread(&w, &trace);
}

/// `git push` of `src`'s `main` into `srv.git` with berth run under `strace -f -e
/// trace=<calls>`; the trace's path.
fn git_push_traced(w: &World, calls: &str) -> std::path::PathBuf {
    let trace = w.path("trace");
    let receiver = format!(
        "--receive-pack=strace -f -qq -e trace={calls} -o '{}' '{}' receive-pack",
        trace.display(),
        common::berth().display()
    );
    let out = w.git_out(
        "src",
        &["push", "--porcelain", &receiver, "../srv.git", "main"],
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("refs/heads/main:refs/heads/main"),
        "{report}"
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    trace
}

/// The same for a pack whose deltas name their bases by id (`pack-objects` without
/// `--delta-base-offset`, as libgit2 writes packs), each base before its deltas: the thread
/// reading it follows those deltas too, and starts none.
#[test]
fn a_push_unpacked_to_loose_objects_with_deltas_on_bases_named_by_id_starts_no_thread() {
    let (w, old) = four_commits_ahead();
    let new = w.git("src", &["rev-parse", "HEAD"]).trim().to_owned();
    let mut input = pkt(&format!(
        "{old} {new} refs/heads/main\0 report-status quiet"
    ));
    input.extend(b"0000");
    let pack = w.pack(true, &format!("{new}\n^{old}\n"));
    input.extend(&pack);
    let trace = w.path("trace");
    let mut cmd = w.cmd("strace", ".");
    cmd.args(["-f", "-qq", "-e", "trace=clone,clone3,prctl", "-o"])
        .arg(&trace)
        .arg(common::berth())
        .args(["receive-pack", "--stateless-rpc", "srv.git"]);
    let out = w.git_with_stdin_cmd(cmd, &input);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("ok refs/heads/main"), "{report}");
    unpacked_without_a_thread(&w, &trace);
    // The pack held deltas (without `--delta-base-offset`, on bases named by id).
    std::fs::write(w.path("sent.pack"), &pack).unwrap();
    w.git(".", &["index-pack", "sent.pack"]);
    let listed = w.git(".", &["verify-pack", "-v", "sent.idx"]);
    assert!(
        listed.contains("chain length = 1"),
        "no deltas in the pack:\n{listed}"
    );
}

/// berth is linked statically on Linux with glibc (`.cargo/config.toml`): a push from the git
/// client starts a `berth receive-pack` that maps no shared library (the dynamic loader's work
/// was 11–21 % of a small push's CPU, benches/README.md), counted under `strace -f`. The
/// binary keeps what a dynamically linked one has against exploits: it is position-independent
/// (loaded at a random address), has no loader named in it, and its relocated data is made
/// read-only after start (`PT_GNU_RELRO`); its relative relocations are packed (`DT_RELR`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn a_push_maps_no_shared_library_and_the_binary_keeps_aslr_and_relro() {
    let (w, _) = four_commits_ahead();
    let trace = git_push_traced(&w, "open,openat,execve,clone,clone3");
    // The pushed objects arrived, and nothing else was started.
    unpacked_without_a_thread(&w, &trace);
    let trace = std::fs::read_to_string(&trace).unwrap();
    assert_eq!(trace.matches("execve(").count(), 1, "{trace}");
    let shared: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains(".so.") || l.contains(".so\""))
        .collect();
    assert!(
        shared.is_empty(),
        "shared objects opened (was berth built with RUSTFLAGS set, which overrides \
         .cargo/config.toml's static link?): {shared:#?}"
    );

    // The ELF header and program headers (ELF-64, little-endian: x86-64 and aarch64).
    let mut head = vec![0u8; 64 * 1024];
    let n = std::io::Read::read(
        &mut std::fs::File::open(common::berth()).unwrap(),
        &mut head,
    )
    .unwrap();
    head.truncate(n);
    assert_eq!(&head[..4], b"\x7fELF");
    assert_eq!(head[4], 2, "ELF-64");
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap());
    const ET_DYN: u16 = 3;
    const PT_INTERP: u32 = 3;
    const PT_GNU_RELRO: u32 = 0x6474_e552;
    assert_eq!(u16_at(16), ET_DYN, "position-independent");
    let (phoff, phentsize, phnum) = (u64_at(32) as usize, u16_at(54) as usize, u16_at(56));
    let kinds: Vec<u32> = (0..usize::from(phnum))
        .map(|i| u32_at(phoff + i * phentsize))
        .collect();
    assert!(!kinds.contains(&PT_INTERP), "no dynamic loader named");
    assert!(kinds.contains(&PT_GNU_RELRO), "relocated data read-only");

    // Its relative relocations packed (DT_RELR in the dynamic section), which its start
    // applies from a small bitmap.
    const PT_DYNAMIC: u32 = 2;
    const DT_NULL: u64 = 0;
    const DT_RELR: u64 = 36;
    let dynamic = kinds
        .iter()
        .position(|&k| k == PT_DYNAMIC)
        .expect("a dynamic section");
    let ph = phoff + dynamic * phentsize;
    let (offset, size) = (u64_at(ph + 8), u64_at(ph + 32) as usize);
    let mut file = std::fs::File::open(common::berth()).unwrap();
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(offset)).unwrap();
    let mut entries = vec![0u8; size];
    std::io::Read::read_exact(&mut file, &mut entries).unwrap();
    let tags: Vec<u64> = entries
        .chunks_exact(16)
        .map(|e| u64::from_le_bytes(e[..8].try_into().unwrap()))
        .take_while(|&t| t != DT_NULL)
        .collect();
    assert!(
        tags.contains(&DT_RELR),
        "relative relocations packed (-z pack-relative-relocs): {tags:x?}"
    );
}
