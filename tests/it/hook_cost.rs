//! "An absent hook costs nothing; a present hook costs its process": a 10,000-ref push is run
//! under `strace -f` and every process and thread berth creates is counted.

use crate::common;
use common::{EMPTY_PACK, World, ZERO, pkt};

/// Counts of what berth started during one 10,000-ref push: (clone-like syscalls, execve).
fn push_under_strace(with_update_hook: bool, refs: usize) -> (usize, usize, String) {
    let w = World::new();
    w.bare("srv.git");
    // Only the hook machinery is measured: no auto-maintenance child.
    w.git("srv.git", &["config", "receive.autogc", "false"]);
    // Hooks that exist for other events must not make `update` cost anything.
    std::fs::write(w.path("srv.git/hooks/README"), "not a hook\n").unwrap();
    if with_update_hook {
        let hook = w.path("srv.git/hooks/update");
        std::fs::write(&hook, "#!/bin/sh\nexit 0\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    w.work("src");
    let head = w.commit("src", "a", "1");
    w.git("src", &["push", "-q", "../srv.git", "main"]);
    let mut input = Vec::new();
    for i in 0..refs {
        let caps = if i == 0 {
            "\0 report-status-v2 side-band-64k quiet"
        } else {
            ""
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
        "trace=clone,clone3,fork,vfork,execve",
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
    let spawns = trace
        .lines()
        .filter(|l| {
            ["clone(", "clone3(", "fork(", "vfork("]
                .iter()
                .any(|s| l.contains(s))
        })
        .filter(|l| !l.contains("resumed>"))
        .count();
    let execs = trace
        .lines()
        .filter(|l| l.contains("execve(") && !l.contains("resumed>"))
        .count();
    assert_eq!(w.refs("srv.git").lines().count(), refs + 1);
    (spawns, execs, report)
}

#[test]
fn absent_hooks_start_nothing_present_update_hook_starts_one_process_per_ref() {
    let (spawns, execs, report) = push_under_strace(false, 10_000);
    assert!(report.contains("ok refs/heads/b/09999"));
    assert_eq!(spawns, 0, "no thread or process for absent hooks");
    assert_eq!(execs, 1, "only berth itself is exec'd");

    let (spawns, execs, _) = push_under_strace(true, 300);
    assert_eq!(
        spawns, 300,
        "exactly one process per ref for the update hook, and no thread"
    );
    assert_eq!(execs, 1 + 300);
}
