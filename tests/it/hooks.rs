//! Hooks with the real git client, differentially: the same hooks are installed in a repository
//! served by `git receive-pack` and in one served by berth; what the client sees (stdout and
//! stderr whole) and what each hook recorded (arguments, stdin, environment, cwd) must match.

use crate::common;
use common::{Push, Receiver, World, ZERO};

/// A hook script that records how it was called into `$LOG` (the world's `hooks.log`) and
/// prints a line on stdout and one on stderr, which the client shows as `remote:` lines.
fn recording_hook(name: &str, exit: i32) -> String {
    format!(
        r#"#!/bin/sh
log="$(cd ../.. 2>/dev/null; pwd)/hooks.log"
[ -f "$log" ] || log="$(cd .. ; pwd)/hooks.log"
{{
  echo "== {name} $0 $*"
  echo "cwd=$(basename "$PWD") GIT_DIR=$GIT_DIR"
  echo "push options: ${{GIT_PUSH_OPTION_COUNT-unset}} ${{GIT_PUSH_OPTION_0-}} ${{GIT_PUSH_OPTION_1-}}"
  if [ -n "$GIT_QUARANTINE_PATH" ]; then
    echo "quarantine: yes $(basename "$(dirname "$GIT_QUARANTINE_PATH")")/$(basename "$GIT_QUARANTINE_PATH" | cut -c1-20)"
    [ "$GIT_OBJECT_DIRECTORY" = "$GIT_QUARANTINE_PATH" ] && echo "object dir is the quarantine"
  else
    echo "quarantine: no"
  fi
  case "{name}" in pre-receive|post-receive|reference-transaction) cat ;; esac
}} >>"$log"
if [ "{name}" = pre-receive ]; then
  while read old new ref; do :; done <"$log" # (stdin already consumed above)
  for obj in $(sed -n 's/^[0-9a-f]* \([0-9a-f]*\) refs.*/\1/p' "$log" | sort -u); do
    case $obj in *[!0]*)
      git cat-file -e $obj && echo "{name}: sees $obj" >>"$log" ;;
    esac
  done
fi
echo "{name} says hello on stdout"
echo "{name} says hello on stderr" >&2
exit {exit}
"#
    )
}

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    pushes: Vec<Push>,
    refs: String,
    log: String,
}

fn differential(scenario: impl Fn(&World, Receiver) -> Vec<Push>) -> Outcome {
    common::differential(|r| {
        let w = World::new();
        let pushes = scenario(&w, r);
        let log = std::fs::read_to_string(w.path("hooks.log")).unwrap_or_default();
        Outcome {
            pushes,
            refs: w.refs("srv.git"),
            log,
        }
    })
}

fn setup(w: &World, hooks: &[(&str, i32)]) {
    w.bare("srv.git");
    for (name, exit) in hooks {
        w.install_hook("srv.git", name, &recording_hook(name, *exit));
    }
    w.work("src");
    w.commit("src", "a", "1");
    w.git("src", &["branch", "topic"]);
}

/// The hooks whose contract git 2.47 and git master share. (`reference-transaction` changed:
/// master batches a push into one transaction and has a `preparing` state; it is tested on its
/// own below.)
const RECEIVE_HOOKS: [&str; 4] = ["pre-receive", "update", "post-receive", "post-update"];

#[test]
fn every_hook_runs_with_gits_arguments_stdin_environment_and_output_order() {
    let o = differential(|w, r| {
        setup(w, &RECEIVE_HOOKS.map(|h| (h, 0)));
        w.git(
            "srv.git",
            &["config", "receive.advertisePushOptions", "true"],
        );
        let mut p = vec![w.push(
            "src",
            r,
            "srv.git",
            &["-o", "first", "-o", "second opt", "main", "topic"],
        )];
        w.commit("src", "a", "2");
        p.push(w.push("src", r, "srv.git", &["main", "main:refs/heads/other"]));
        // Deletions on their own: git master runs them in a phase before the other updates.
        p.push(w.push(
            "src",
            r,
            "srv.git",
            &[":refs/heads/topic", ":refs/heads/never-existed"],
        ));
        p
    });
    assert!(o.pushes[0].success);
    let remote = o.pushes[0].remote_lines();
    assert_eq!(
        remote.first(),
        Some(&"remote: pre-receive says hello on stdout"),
        "{remote:#?}"
    );
    assert!(remote.contains(&"remote: update says hello on stderr"));
    assert!(remote.contains(&"remote: post-update says hello on stderr"));
    assert!(
        o.log.contains("== pre-receive hooks/pre-receive \n"),
        "{}",
        o.log
    );
    assert!(
        o.log
            .contains(&format!("== update hooks/update refs/heads/main {ZERO} "))
    );
    assert!(
        o.log.contains("push options: 2 first second opt"),
        "{}",
        o.log
    );
    assert!(o.log.contains("cwd=srv.git GIT_DIR=."));
    assert!(o.log.contains("pre-receive: sees "), "{}", o.log);
    assert!(
        o.log
            .contains("== post-update hooks/post-update refs/heads/main refs/heads/topic")
    );
    // A deleted ref that never existed is reported ok but not fed to the post hooks.
    assert!(
        o.pushes[2]
            .stderr
            .contains("remote: warning: deleting a non-existent ref")
    );
    assert!(o.log.ends_with("== post-update hooks/post-update refs/heads/topic\ncwd=srv.git GIT_DIR=.\npush options: unset  \nquarantine: no\n"), "{}", o.log);
}

/// git master's contract (t1416): one transaction for the whole push, `preparing`, `prepared`,
/// `committed`, each with every update on stdin, `$0` relative to the git directory.
#[test]
fn reference_transaction_sees_one_transaction_per_push() {
    let w = World::new();
    setup(&w, &[("reference-transaction", 0)]);
    let p = w.push("src", Receiver::Berth, "srv.git", &["main", "topic"]);
    assert!(p.success);
    let head = w.git("src", &["rev-parse", "main"]);
    let head = head.trim();
    let z = ZERO;
    let log = std::fs::read_to_string(w.path("hooks.log")).unwrap();
    let expected: String = ["preparing", "prepared", "committed"]
        .iter()
        .map(|state| {
            format!(
                "== reference-transaction hooks/reference-transaction {state}\ncwd=srv.git GIT_DIR=.\npush options: unset  \nquarantine: no\n{z} {head} refs/heads/main\n{z} {head} refs/heads/topic\n"
            )
        })
        .collect();
    assert_eq!(log, expected);
    // Its output goes to receive-pack's own stderr, not through the sideband, as git's.
    assert!(
        p.stderr
            .contains("\nreference-transaction says hello on stdout\n"),
        "{p:#?}"
    );
    assert!(
        !p.stderr.contains("remote: reference-transaction"),
        "{p:#?}"
    );
}

#[test]
fn pre_receive_refusal_declines_every_ref_and_keeps_objects_out() {
    let o = differential(|w, r| {
        setup(w, &[("pre-receive", 1), ("post-receive", 0)]);
        vec![w.push("src", r, "srv.git", &["main", "topic"])]
    });
    let p = &o.pushes[0];
    assert!(!p.success);
    assert!(
        p.stdout.contains(
            "!\trefs/heads/main:refs/heads/main\t[remote rejected] (pre-receive hook declined)"
        ),
        "{p:#?}"
    );
    assert!(
        o.log
            .contains("quarantine: yes objects/tmp_objdir-incoming"),
        "{}",
        o.log
    );
    assert!(o.log.contains("pre-receive: sees "), "{}", o.log);
    assert!(!o.log.contains("== post-receive"));
    assert_eq!(o.refs, "");
}

#[test]
fn pre_receive_refusal_leaves_no_object_behind() {
    let w = World::new();
    setup(&w, &[("pre-receive", 1)]);
    let head = w.git("src", &["rev-parse", "main"]);
    let p = w.push("src", Receiver::Berth, "srv.git", &["main"]);
    assert!(!p.success);
    assert!(
        !w.git_out("srv.git", &["cat-file", "-e", head.trim()])
            .status
            .success()
    );
    w.assert_clean("srv.git");
}

#[test]
fn update_hook_refuses_one_ref() {
    let o = differential(|w, r| {
        setup(w, &[]);
        w.install_hook(
            "srv.git",
            "update",
            "#!/bin/sh\necho \"checking $1\"\n[ \"$1\" != refs/heads/topic ]\n",
        );
        vec![w.push("src", r, "srv.git", &["main", "topic"])]
    });
    let p = &o.pushes[0];
    assert!(
        p.stdout
            .contains("!\trefs/heads/topic:refs/heads/topic\t[remote rejected] (hook declined)"),
        "{p:#?}"
    );
    assert!(
        p.stderr
            .contains("remote: error: hook declined to update refs/heads/topic"),
        "{p:#?}"
    );
    assert!(o.refs.contains("refs/heads/main") && !o.refs.contains("refs/heads/topic"));
}

#[test]
fn atomic_push_with_a_declined_ref_changes_nothing() {
    let o = differential(|w, r| {
        setup(w, &[]);
        w.install_hook(
            "srv.git",
            "update",
            "#!/bin/sh\n[ \"$1\" != refs/heads/topic ]\n",
        );
        vec![w.push("src", r, "srv.git", &["--atomic", "main", "topic"])]
    });
    let p = &o.pushes[0];
    assert!(
        p.stdout.contains("(atomic push failure)") || p.stdout.contains("(hook declined)"),
        "{p:#?}"
    );
    assert_eq!(o.refs, "");
}

/// Config-defined hooks arrived in git 2.54, after the machine's git, so this is checked against
/// git master's documented behaviour rather than differentially.
#[test]
fn configured_hooks_run_before_the_hooks_directory_hook() {
    let w = World::new();
    setup(&w, &[("post-receive", 0)]);
    w.git("srv.git", &["config", "hook.audit.event", "post-receive"]);
    w.git(
        "srv.git",
        &[
            "config",
            "hook.audit.command",
            "echo audit got $(cat | wc -l) lines",
        ],
    );
    w.git("srv.git", &["config", "hook.off.event", "post-receive"]);
    w.git(
        "srv.git",
        &["config", "hook.off.command", "echo should not run"],
    );
    w.git("srv.git", &["config", "hook.off.enabled", "false"]);
    let p = w.push("src", Receiver::Berth, "srv.git", &["main", "topic"]);
    assert_eq!(
        p.remote_lines(),
        vec![
            "remote: audit got 2 lines",
            "remote: post-receive says hello on stdout",
            "remote: post-receive says hello on stderr"
        ]
    );
}

/// A hook without a `#!` line, which the kernel will not execute (`ENOEXEC`), is run by
/// `/bin/sh` as git's `start_command` does, `$0` still `hooks/<name>`.
#[test]
fn hooks_without_a_shebang_line_are_run_by_the_shell() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        for name in ["pre-receive", "update", "post-receive"] {
            w.install_hook("srv.git", name, "echo \"$0 $# $(cat | wc -l)\"\n");
        }
        w.work("src");
        w.commit("src", "a", "1");
        vec![w.push("src", r, "srv.git", &["main"])]
    });
    assert!(o.pushes[0].success, "{:#?}", o.pushes[0]);
    assert_eq!(
        o.pushes[0].remote_lines(),
        [
            "remote: hooks/pre-receive 0 1",
            "remote: hooks/update 3 0",
            "remote: hooks/post-receive 0 1"
        ]
    );
}

#[test]
fn hooks_that_do_not_read_stdin_are_fine() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.install_hook("srv.git", "pre-receive", "#!/bin/sh\necho ignoring input\n");
        w.work("src");
        let head = w.commit("src", "a", "1");
        w.create_refs("src", "refs/heads/b", 900, &head);
        vec![w.push("src", r, "srv.git", &["refs/heads/*:refs/heads/*"])]
    });
    assert!(o.pushes[0].success);
}

/// git master: a refusal in `prepared` aborts the transaction (the hook then sees `aborted`) and
/// receive-pack dies with `in 'prepared' phase, update aborted by the reference-transaction
/// hook`; the client gets no report. (git 2.47 has no `preparing` state and other wording.)
#[test]
fn reference_transaction_refusal_aborts_the_push() {
    let w = World::new();
    setup(&w, &[]);
    w.install_hook(
        "srv.git",
        "reference-transaction",
        "#!/bin/sh\necho \"$1\" >>../hooks.log\n[ \"$1\" != prepared ]\n",
    );
    let p = w.push("src", Receiver::Berth, "srv.git", &["main"]);
    assert!(!p.success);
    assert!(
        p.stderr.starts_with(
            "fatal: in 'prepared' phase, update aborted by the reference-transaction hook\n"
        ),
        "{p:#?}"
    );
    assert!(
        p.stderr
            .contains("unexpected disconnect while reading sideband packet"),
        "{p:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(w.path("hooks.log")).unwrap(),
        "preparing\nprepared\naborted\n"
    );
    assert_eq!(w.refs("srv.git"), "");
    w.assert_clean("srv.git");
}

/// A proc-receive hook (in Python, for its pkt-line I/O) that takes over `refs/for/*`: it
/// negotiates version 1, records what it was sent, and answers per ref as `$ANSWER` says.
const PROC_RECEIVE: &str = r#"#!/usr/bin/env python3
import os, sys
inp, out = sys.stdin.buffer, sys.stdout.buffer
def read():
    n = int(inp.read(4), 16)
    return None if n == 0 else inp.read(n - 4)
def write(s):
    b = s.encode()
    out.write(b"%04x" % (len(b) + 4) + b)
def section():
    lines = []
    while (l := read()) is not None:
        lines.append(l)
    return lines
log = open("../proc-receive.log", "ab")
for l in section():
    log.write(b"version: " + l.replace(b"\0", b" | ") + b"\n")
write("version=1\0push-options")
out.write(b"0000"); out.flush()
cmds = [c.decode().split() for c in section()]
for c in cmds:
    log.write(("command: %s %s %s\n" % tuple(c)).encode())
for o in section():
    log.write(b"option: " + o + b"\n")
sys.stderr.write("proc-receive: handling %d ref(s)\n" % len(cmds))
for old, new, ref in cmds:
    if ref.endswith("/bad"):
        write("ng " + ref + " not today")
    elif ref.endswith("/fall"):
        write("ok " + ref)
        write("option fall-through")
    else:
        write("ok " + ref)
        write("option refname refs/pull/123/head")
        write("option old-oid " + old)
        write("option new-oid " + new)
out.write(b"0000"); out.flush()
"#;

#[test]
fn proc_receive_handles_the_refs_it_is_given() {
    let o = differential(|w, r| {
        setup(w, &[("post-receive", 0)]);
        w.install_hook("srv.git", "proc-receive", PROC_RECEIVE);
        w.git(
            "srv.git",
            &["config", "receive.procReceiveRefs", "refs/for"],
        );
        w.git(
            "srv.git",
            &["config", "receive.advertisePushOptions", "true"],
        );
        let p = vec![w.push(
            "src",
            r,
            "srv.git",
            &[
                "-o",
                "reviewer=alice",
                "main",
                "main:refs/for/main/topic",
                "main:refs/for/main/bad",
                "main:refs/for/main/fall",
            ],
        )];
        let log = std::fs::read_to_string(w.path("proc-receive.log")).unwrap();
        std::fs::write(
            w.path("hooks.log"),
            format!(
                "{}{log}",
                std::fs::read_to_string(w.path("hooks.log")).unwrap_or_default()
            ),
        )
        .unwrap();
        p
    });
    let p = &o.pushes[0];
    assert!(
        p.stdout
            .contains("*\trefs/heads/main:refs/pull/123/head\t[new reference]"),
        "{p:#?}"
    );
    assert!(
        p.stdout
            .contains("!\trefs/heads/main:refs/for/main/bad\t[remote rejected] (not today)"),
        "{p:#?}"
    );
    assert!(
        p.stdout
            .contains("*\trefs/heads/main:refs/for/main/fall\t[new reference]"),
        "{p:#?}"
    );
    assert!(
        p.stderr.contains("remote: proc-receive: handling 3 ref(s)"),
        "{p:#?}"
    );
    assert!(
        o.log.contains("version: version=1 | atomic push-options")
            || o.log.contains("version: version=1 | push-options"),
        "{}",
        o.log
    );
    assert!(o.log.contains("option: reviewer=alice"), "{}", o.log);
    // post-receive sees the rewritten ref; the fall-through ref was updated by receive-pack.
    assert!(o.log.contains(" refs/pull/123/head\n"), "{}", o.log);
    assert!(
        o.refs.contains("refs/for/main/fall") && !o.refs.contains("refs/for/main/topic"),
        "{}",
        o.refs
    );
}

/// A proc-receive hook whose report has a malformed pkt-line length: git reads the report
/// strictly and dies with `fatal: protocol error: bad line length character: …`; berth the same,
/// with no ref changed.
#[test]
fn proc_receive_report_with_a_bad_length_is_fatal_as_in_git() {
    // The hook answers with one malformed line and exits at once, writing nothing else (so
    // nothing races with receive-pack's death).
    let bad = PROC_RECEIVE.replace(
        "sys.stderr.write(\"proc-receive: handling %d ref(s)\\n\" % len(cmds))",
        "out.write(b\"+00aok refs/for/main/topic\\n\"); out.flush(); sys.exit(0)",
    );
    assert_ne!(bad, PROC_RECEIVE);
    let o = differential(|w, r| {
        setup(w, &[]);
        w.install_hook("srv.git", "proc-receive", &bad);
        w.git(
            "srv.git",
            &["config", "receive.procReceiveRefs", "refs/for"],
        );
        vec![w.push("src", r, "srv.git", &["main", "main:refs/for/main/topic"])]
    });
    let p = &o.pushes[0];
    assert!(!p.success, "{p:#?}");
    assert!(
        p.stderr
            .contains("fatal: protocol error: bad line length character: +00a"),
        "{p:#?}"
    );
    assert_eq!(o.refs, "");
}

/// A push of `refs/heads/x` to `head` without sideband, as the raw request a client sends.
fn push_without_sideband(head: &str) -> Vec<u8> {
    let mut input = common::pkt(&format!("{ZERO} {head} refs/heads/x\0report-status quiet"));
    input.extend(b"0000");
    input.extend(common::EMPTY_PACK);
    input
}

/// Without sideband, git's receive-pack lets a receive hook write to its own stderr (`ungroup`,
/// stdout joined to stderr); `berth receive-pack` does the same: receive-pack's stderr holds the
/// same bytes, in the same order, as git's.
#[test]
fn without_sideband_hook_output_reaches_stderr_as_with_git() {
    let w = World::new();
    w.work("src");
    let head = w.commit("src", "a", "1");
    let script = "#!/bin/sh\necho \"out $1\"\necho \"err $1\" >&2\necho \"out again\"\n";
    let mut stderr = Vec::new();
    for (repo, program, subcommand) in [
        ("git.git", "git".into(), "receive-pack"),
        ("berth.git", common::berth(), "receive-pack"),
    ] {
        w.bare(repo);
        w.git(repo, &["config", "receive.autogc", "false"]);
        w.git("src", &["push", "-q", &format!("../{repo}"), "main"]);
        for hook in ["pre-receive", "update", "post-receive", "post-update"] {
            w.install_hook(repo, hook, &script.replace("$1", &format!("{hook} $1")));
        }
        let mut cmd = w.cmd(program, ".");
        cmd.args([subcommand, "--stateless-rpc", repo]);
        let out = w.git_with_stdin_cmd(cmd, &push_without_sideband(&head));
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("ok refs/heads/x"));
        stderr.push(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    assert!(stderr[0].contains("out update refs/heads/x\nerr update refs/heads/x\n"));
    assert_eq!(stderr[1], stderr[0], "berth's stderr against git's");
}

/// Without sideband berth does not read a hook's output, so a process the hook leaves behind
/// holding its stderr does not hold up the push (git's receive-pack does not wait for it
/// either). Through a pipe it would: the push would end only when that process does (in 600 s;
/// the test allows 120).
#[test]
fn without_sideband_a_process_a_hook_leaves_behind_does_not_hold_up_the_push() {
    use std::io::Write;
    let w = World::new();
    let head = w.server_with_main();
    w.install_hook(
        "srv.git",
        "update",
        "#!/bin/sh\nsleep 600 &\necho $! > left-behind.pid\n",
    );
    let stderr = std::fs::File::create(w.path("stderr")).unwrap();
    let mut cmd = w.cmd(common::berth(), ".");
    cmd.args(["receive-pack", "--stateless-rpc", "srv.git"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(stderr);
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&push_without_sideband(&head))
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let pid = std::fs::read_to_string(w.path("srv.git/left-behind.pid")).unwrap();
    let _ = std::process::Command::new("kill").arg(pid.trim()).status();
    assert!(
        status.is_some(),
        "the push waited for the hook's leftover process"
    );
    assert!(status.unwrap().success());
    assert_eq!(
        w.git("srv.git", &["rev-parse", "refs/heads/x"]).trim(),
        head
    );
}
