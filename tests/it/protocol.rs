//! Byte-level differential tests: the same hand-made request is fed to `git receive-pack` and to
//! `berth receive-pack` on identical repositories; what each writes back (advertisement with the
//! agent masked, report, sideband) and the refs each leaves must be identical.

use crate::common;
use common::{EMPTY_PACK, World, ZERO, leftovers, pkt};
use std::io::Write;
use std::process::Stdio;

/// What a receive-pack run produced.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    status: Option<i32>,
    stdout: String,
    stderr: String,
    refs: String,
}

fn run_receive_pack(
    w: &World,
    git: bool,
    repo: &str,
    args: &[&str],
    input: &[u8],
    env: &[(&str, &str)],
) -> Run {
    let mut cmd = if git {
        let mut c = w.git_cmd(".");
        c.arg("receive-pack");
        c
    } else {
        let mut c = w.cmd(common::berth(), ".");
        c.arg("receive-pack");
        c
    };
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args(args)
        .arg(repo)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let mask = |b: &[u8]| {
        let s = String::from_utf8_lossy(b).into_owned();
        mask_agent(&s.replace(w.root().to_str().unwrap(), "$ROOT"))
    };
    Run {
        status: out.status.code(),
        stdout: mask(&out.stdout),
        stderr: mask(&out.stderr),
        refs: if w.path(repo).exists() {
            w.refs(repo)
        } else {
            String::new()
        },
    }
}

/// Replace `agent=<x>` by `agent=AGENT` and fix up that pkt-line's length prefix.
fn mask_agent(s: &str) -> String {
    let Some(start) = s.find("agent=") else {
        return s.to_owned();
    };
    let end = start + s[start..].find('\n').unwrap_or(s.len() - start);
    let masked = format!("{}agent=AGENT{}", &s[..start], &s[end..]);
    // The line holding the agent starts at the last pkt-line boundary before it; recompute it
    // by re-walking the pkt-lines from the beginning.
    let bytes = s.as_bytes();
    let mut pos = 0;
    while pos + 4 <= bytes.len() {
        let Ok(len) = usize::from_str_radix(&s[pos..pos + 4], 16) else {
            break;
        };
        if len < 4 {
            pos += 4;
            continue;
        }
        if pos + len > start {
            let new_len = len - (end - start) + "agent=AGENT".len();
            return format!("{}{:04x}{}", &masked[..pos], new_len, &masked[pos + 4..]);
        }
        pos += len;
    }
    masked
}

/// Build the same world twice, run the same request against git and berth, compare, and
/// return berth's run (with the world, for further checks).
fn differential(
    setup: impl Fn(&World) -> Vec<u8>,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Run, World) {
    let wg = World::new();
    let input = setup(&wg);
    let git = run_receive_pack(&wg, true, "srv.git", args, &input, env);
    let wb = World::new();
    let input_b = setup(&wb);
    assert_eq!(input, input_b, "setup is not deterministic");
    let berth = run_receive_pack(&wb, false, "srv.git", args, &input, env);
    let sorted = |r: &Run| {
        let mut lines: Vec<&str> = r.stderr.lines().collect();
        lines.sort();
        Run {
            stderr: lines.join("\n"),
            stdout: r.stdout.clone(),
            refs: r.refs.clone(),
            status: r.status,
        }
    };
    assert_eq!(
        sorted(&git),
        sorted(&as_git_2_47(&berth)),
        "git receive-pack (left) and berth (right) differ"
    );
    (berth, wb)
}

/// The machine's git (2.47) predates git master's batched non-atomic ref transaction, which
/// berth follows (DEVELOPERS.md: follow master): master reports a typed reason where 2.47 says
/// `failed to update ref`, and reports per-ref errors after each batch, so `error:` lines come
/// in another order. This maps berth's (master's) report to 2.47's wording and sorts stderr
/// lines, so everything else is still compared byte for byte. Only plain (non-sideband)
/// reports are rewritten.
fn as_git_2_47(run: &Run) -> Run {
    let mut stdout = run.stdout.clone();
    for typed in [
        "incorrect old value provided",
        "reference already exists",
        "reference does not exist",
        "refname conflict",
        "invalid new value provided",
    ] {
        while let Some(at) = stdout.find(&format!(" {typed}\n")) {
            let start = stdout[..at].rfind("ng ").unwrap() - 4;
            let old_len = usize::from_str_radix(&stdout[start..start + 4], 16).unwrap();
            let new_len = old_len - typed.len() + "failed to update ref".len();
            stdout = format!(
                "{}{new_len:04x}{} failed to update ref\n{}",
                &stdout[..start],
                &stdout[start + 4..at],
                &stdout[at + typed.len() + 2..]
            );
        }
    }
    Run {
        status: run.status,
        stdout,
        stderr: run.stderr.clone(),
        refs: run.refs.clone(),
    }
}

#[test]
fn advertisement_is_byte_identical() {
    let (run, _) = differential(
        |w| {
            w.server_with_history();
            w.git("srv.git", &["tag", "-a", "-m", "t", "v1", "main"]);
            w.git(
                "srv.git",
                &[
                    "symbolic-ref",
                    "refs/remotes/origin/HEAD",
                    "refs/heads/main",
                ],
            );
            w.git("srv.git", &["update-ref", "refs/hidden/x", "main"]);
            w.git("srv.git", &["config", "receive.hideRefs", "refs/hidden"]);
            // An alternate whose tips become .have lines.
            w.bare("alt.git");
            w.git("src", &["push", "-q", "../alt.git", "main:refs/heads/alt"]);
            w.git(
                "alt.git",
                &["update-ref", "refs/heads/other", "refs/heads/alt~1"],
            );
            std::fs::write(
                w.path("srv.git/objects/info/alternates"),
                format!("{}\n", w.path("alt.git/objects").display()),
            )
            .unwrap();
            b"0000".to_vec()
        },
        &[],
        &[],
    );
    assert!(run.stdout.contains(&format!(" refs/heads/main\0report-status report-status-v2 delete-refs side-band-64k quiet atomic ofs-delta object-format={} agent=AGENT\n", common::object_format_cap())), "{:?}", run.stdout);
    assert!(run.stdout.contains(" .have\n"));
    assert!(!run.stdout.contains("refs/hidden"));
    assert!(run.stdout.ends_with("0000"));
}

#[test]
fn empty_repository_advertises_capabilities_line_and_version_1() {
    let (run, _) = differential(
        |w| {
            w.bare("srv.git");
            w.git(
                "srv.git",
                &["config", "receive.advertisePushOptions", "true"],
            );
            b"0000".to_vec()
        },
        &[],
        &[("GIT_PROTOCOL", "version=1")],
    );
    assert!(
        run.stdout.starts_with("000eversion 1\n"),
        "{:?}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains(&format!("{ZERO} capabilities^{{}}\0report-status")),
        "{:?}",
        run.stdout
    );
    assert!(run.stdout.contains(&format!(
        " push-options object-format={}",
        common::object_format_cap()
    )));
    differential(
        |w| {
            w.bare("srv.git");
            w.git("srv.git", &["config", "receive.advertiseAtomic", "false"]);
            Vec::new()
        },
        &["--advertise-refs"],
        &[],
    );
}

#[test]
fn bare_flush_in_stateless_rpc_writes_nothing() {
    let (run, _) = differential(
        |w| {
            w.server_with_history();
            b"0000".to_vec()
        },
        &["--stateless-rpc"],
        &[],
    );
    assert_eq!(run.stdout, "");
    assert_eq!(run.status, Some(0));
}

#[test]
fn report_for_stale_missing_duplicate_and_funny_commands() {
    for caps in [
        " report-status",
        " report-status-v2",
        " report-status atomic",
    ] {
        let (run, w) = differential(
            |w| {
                let (c1, c2) = w.server_with_history();
                let mut v = common::request(
                    &[
                        format!("{ZERO} {c1} refs/heads/new"),
                        format!("{c2} {c1} refs/heads/topic"), // stale old value
                        format!("{ZERO} {c1} refs/heads/main"), // create an existing ref
                        format!("{ZERO} {c1} refs/foo"),       // funny: one level
                        format!("{c1} {ZERO} refs/heads/nope"), // delete a missing ref
                        format!("{ZERO} {ZERO} refs/heads/gone"), // delete a missing ref, no old
                        format!("{ZERO} {c1} refs/heads/main/sub"), // D/F conflict
                    ],
                    caps,
                );
                v.extend(EMPTY_PACK);
                v
            },
            &[],
            &[],
        );
        assert!(run.stdout.contains("unpack ok\n"), "{run:?}");
        w.assert_clean("srv.git");
    }
}

/// A deletion of a ref that is not there still locks its name, as in git: one that would be a
/// directory of an existing loose ref, or have loose refs below it, is refused (`refname
/// conflict`, git 2.47's `failed to update ref`) where a plain missing one is `ok`.
#[test]
fn deleting_a_missing_ref_whose_name_conflicts_is_refused() {
    for caps in [" report-status", " report-status atomic"] {
        let (run, w) = differential(
            |w| {
                let (c1, _) = w.server_with_history();
                w.git("srv.git", &["update-ref", "refs/heads/d/e", &c1]);
                let mut v = common::request(
                    &[
                        format!("{ZERO} {ZERO} refs/heads/gone"),
                        format!("{ZERO} {ZERO} refs/heads/main/sub"),
                        format!("{ZERO} {ZERO} refs/heads/d"),
                    ],
                    caps,
                );
                v.extend(EMPTY_PACK);
                v
            },
            &[],
            &[],
        );
        assert!(
            // (The files backend says `cannot lock ref 'refs/heads/main/sub': ` first.)
            run.stderr
                .contains("'refs/heads/main' exists; cannot create 'refs/heads/main/sub'\n"),
            "{run:?}"
        );
        assert!(!run.stdout.contains("ok refs/heads/main/sub"), "{run:?}");
        w.assert_clean("srv.git");
    }
}

/// The deletion of a ref that is not there is in the transaction, as in git (2.47 and
/// master): the reference-transaction hook sees `<zero> <zero> <name>` in each state (git's
/// client does not send such a deletion, so the request is raw).
#[test]
fn reference_transaction_sees_the_deletion_of_a_missing_ref() {
    let w = World::new();
    w.server_with_history();
    let hook = w.path("srv.git/hooks/reference-transaction");
    std::fs::write(&hook, "#!/bin/sh\n{ echo \"$1\"; cat; } >>hook.log\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let before = w.refs("srv.git");
    let mut input = common::request(
        &[format!("{ZERO} {ZERO} refs/heads/gone")],
        " report-status",
    );
    input.extend(EMPTY_PACK);
    let run = run_receive_pack(&w, false, "srv.git", &[], &input, &[]);
    assert!(run.stdout.contains("ok refs/heads/gone\n"), "{run:?}");
    assert_eq!(run.stderr, "warning: deleting a non-existent ref\n");
    let log = std::fs::read_to_string(w.path("srv.git/hook.log")).unwrap();
    let line = format!("{ZERO} {ZERO} refs/heads/gone\n");
    assert_eq!(
        log,
        format!("preparing\n{line}prepared\n{line}committed\n{line}")
    );
    assert_eq!(w.refs("srv.git"), before);
    w.assert_clean("srv.git");
}

/// git master words a name conflict with a ref found only in `packed-refs` without 2.47's
/// `cannot lock ref` (its `refs_verify_refnames_available`, after the locks), for a create and
/// for the deletion of a ref that is not there alike (checked against git master
/// 1a3e64c6c4 by hand: 2.47 keeps the prefix, so this is not a differential test).
#[test]
fn a_name_conflict_with_a_packed_ref_in_git_masters_words() {
    let w = World::new();
    let (c1, _) = w.server_with_history();
    w.git("srv.git", &["update-ref", "refs/heads/d/e", &c1]);
    w.git("srv.git", &["pack-refs", "--all"]);
    let mut input = common::request(
        &[
            format!("{ZERO} {c1} refs/heads/main/new"),
            format!("{ZERO} {ZERO} refs/heads/main/sub"),
            format!("{ZERO} {ZERO} refs/heads/d"),
        ],
        " report-status",
    );
    input.extend(EMPTY_PACK);
    let before = w.refs("srv.git");
    let run = run_receive_pack(&w, false, "srv.git", &[], &input, &[]);
    let report = run.stdout.split_once("unpack ok\n").map_or("", |(_, r)| r);
    let lines: Vec<&str> = report
        .split('\n')
        .filter(|l| l.len() > 4)
        .map(|l| &l[4..])
        .filter(|l| l.starts_with("ng ") || l.starts_with("ok "))
        .collect();
    assert_eq!(
        lines,
        [
            "ng refs/heads/main/new refname conflict",
            "ng refs/heads/main/sub refname conflict",
            "ng refs/heads/d refname conflict",
        ],
        "{run:?}"
    );
    for (name, existing) in [
        ("refs/heads/main/new", "refs/heads/main"),
        ("refs/heads/main/sub", "refs/heads/main"),
        ("refs/heads/d", "refs/heads/d/e"),
    ] {
        let line = format!("error: '{existing}' exists; cannot create '{name}'\n");
        assert!(run.stderr.contains(&line), "{line:?} in {run:?}");
    }
    assert!(!run.stderr.contains("cannot lock ref"), "{run:?}");
    assert_eq!(w.refs("srv.git"), before);
    w.assert_clean("srv.git");
}

/// git 2.47 runs one transaction per ref and lets the first of two updates of one ref win;
/// git master (and berth) refuse the batch: "multiple updates for ref" and every command fails.
#[test]
fn duplicate_ref_in_one_push_fails_all() {
    let w = World::new();
    let (c1, _) = w.server_with_history();
    let mut input = common::request(
        &[
            format!("{ZERO} {c1} refs/heads/d"),
            format!("{ZERO} {c1} refs/heads/d"),
        ],
        " report-status",
    );
    input.extend(EMPTY_PACK);
    let run = run_receive_pack(&w, false, "srv.git", &["--stateless-rpc"], &input, &[]);
    assert_eq!(
        run.stdout,
        "000eunpack ok\n002ang refs/heads/d failed to update refs\n002ang refs/heads/d failed to update refs\n0000"
    );
    assert_eq!(
        run.stderr,
        "error: multiple updates for ref 'refs/heads/d' not allowed\n"
    );
    assert!(!run.refs.contains("refs/heads/d"));
}

#[test]
fn pack_lacking_an_object_is_refused_and_leaves_nothing() {
    for (atomic, with_good_ref) in [("", true), (" atomic", true), ("", false)] {
        let (run, w) = differential(
            |w| {
                let (c1, c2) = w.server_with_history();
                // A pack with the new commit but without its tree.
                let pack = w.pack(
                    false,
                    &format!(
                        "{c2}
"
                    ),
                );
                let mut cmds = vec![format!("{c1} {c2} refs/heads/main")];
                if with_good_ref {
                    cmds.push(format!("{ZERO} {c1} refs/heads/fine"));
                }
                let mut v = common::request(&cmds, &format!(" report-status{atomic}"));
                v.extend(pack);
                v
            },
            &[],
            &[],
        );
        assert!(
            run.stdout
                .contains("ng refs/heads/main missing necessary objects"),
            "{run:?}"
        );
        assert!(leftovers(&w.path("srv.git")).is_empty());
        if !with_good_ref {
            // Nothing was accepted, so the incomplete commit never left the quarantine. (When
            // another ref is accepted, git migrates the whole pack, and so does berth.)
            let c2 = w.git("src", &["rev-parse", "main"]);
            assert!(
                !w.git_out("srv.git", &["cat-file", "-e", c2.trim()])
                    .status
                    .success()
            );
            w.assert_clean("srv.git");
        }
    }
}

#[test]
fn bad_packs_are_unpacker_errors() {
    for pack in [&b""[..], b"JUNK", b"PACK\x00\x00\x00\x09\x00\x00\x00\x00"] {
        let (run, w) = differential(
            |w| {
                let (c1, c2) = w.server_with_history();
                let mut v =
                    common::request(&[format!("{c1} {c2} refs/heads/main")], " report-status");
                v.extend(pack);
                v
            },
            &[],
            &[],
        );
        assert!(
            run.stdout.contains("ng refs/heads/main unpacker error"),
            "{run:?}"
        );
        assert!(leftovers(&w.path("srv.git")).is_empty());
    }
}

#[test]
fn full_push_with_sideband_matches_git_byte_for_byte() {
    let (run, w) = differential(
        |w| {
            let (c1, c2) = w.server_with_history();
            let mut v = common::request(
                &[
                    format!("{c1} {c2} refs/heads/main"),
                    format!("{c1} {ZERO} refs/heads/topic"),
                ],
                &format!(
                    " report-status-v2 side-band-64k quiet object-format={} agent=git/2.47.3",
                    common::object_format_cap()
                ),
            );
            v.extend(w.pack(true, &format!("{c2}\n^{c1}\n")));
            v
        },
        &[],
        &[],
    );
    assert!(run.stdout.contains("ok refs/heads/main\n"));
    assert!(run.stdout.ends_with("0000"));
    w.assert_clean("srv.git");
}

#[test]
fn protocol_errors_die_like_git() {
    for input in [
        pkt("garbage"),
        b"00zz".to_vec(),
        pkt(&format!("{ZERO} {ZERO} refs/heads/x\0object-format=sha256")),
        [
            pkt(&format!("{ZERO} {ZERO} refs/heads/x")),
            b"0003".to_vec(),
        ]
        .concat(),
        pkt(&format!("{ZERO} {ZERO} refs/heads/x")),
    ] {
        let (run, _) = differential(
            |w| {
                w.bare("srv.git");
                input.clone()
            },
            &["--stateless-rpc"],
            &[],
        );
        assert_eq!(run.status, Some(128), "{run:?}");
        assert!(run.stderr.starts_with("fatal: "), "{run:?}");
    }
    let w = World::new();
    let run = run_receive_pack(&w, false, "nothing-here", &[], b"", &[]);
    assert_eq!(
        run.stderr,
        "fatal: 'nothing-here' does not appear to be a git repository\n"
    );
}

/// `GIT_NAMESPACE`: refs inside the namespace are advertised without its prefix and the others
/// as `.have`; updates land under the prefix; reports speak of the client's names.
#[test]
fn namespace_advertisement_and_updates() {
    let env = [("GIT_NAMESPACE", "ns")];
    let (run, w) = differential(
        |w| {
            let (c1, c2) = w.server_with_history();
            w.git(
                "srv.git",
                &["update-ref", "refs/namespaces/ns/refs/heads/main", &c1],
            );
            w.git(
                "srv.git",
                &["update-ref", "refs/namespaces/ns/refs/heads/hidden", &c1],
            );
            w.git(
                "srv.git",
                &["config", "receive.hideRefs", "refs/heads/hidden"],
            );
            let mut v = common::request(
                &[
                    format!("{c1} {c2} refs/heads/main"),
                    format!("{ZERO} {c1} refs/heads/new"),
                    format!("{ZERO} {c1} refs/heads/hidden/x"),
                ],
                " report-status",
            );
            v.extend(w.pack(true, &format!("{c2}\n^{c1}\n")));
            v
        },
        &[],
        &env,
    );
    assert!(run.stdout.contains(" refs/heads/main\n"), "{run:?}");
    assert!(run.stdout.contains(" .have\0"), "{run:?}");
    assert!(
        run.stdout.contains("ok refs/heads/main\n") && run.stdout.contains("ok refs/heads/new\n"),
        "{run:?}"
    );
    assert!(
        run.stdout
            .contains("ng refs/heads/hidden/x deny updating a hidden ref"),
        "{run:?}"
    );
    assert!(
        run.refs.contains(" refs/namespaces/ns/refs/heads/new\n"),
        "{run:?}"
    );
    w.assert_clean("srv.git");
}

/// In a namespace git's own checks see the names it queues: `refs/namespaces/<ns>/refs/heads/x`
/// is no branch, so a tag may go there; and a deletion without an old value asks whether the
/// name the client sent exists outside the namespace (`allowing deletion of corrupt ref`, then
/// the post hooks see it) rather than inside.
#[test]
fn namespace_branch_and_missing_ref_checks_see_gits_names() {
    let env = [("GIT_NAMESPACE", "ns")];
    let (run, w) = differential(
        |w| {
            let (c1, _) = w.server_with_history();
            w.git("srv.git", &["tag", "-a", "-m", "t", "v1", &c1]);
            let tag = w.git("srv.git", &["rev-parse", "v1"]);
            let hook = w.path("srv.git/hooks/post-receive");
            std::fs::write(&hook, "#!/bin/sh\necho post-receive: $(cat)\n").unwrap();
            std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            let mut v = common::request(
                &[
                    format!("{ZERO} {} refs/heads/tagged", tag.trim()),
                    format!("{ZERO} {ZERO} refs/heads/main"),
                    format!("{ZERO} {ZERO} refs/heads/none"),
                ],
                " report-status",
            );
            v.extend(EMPTY_PACK);
            v
        },
        &[],
        &env,
    );
    assert!(run.stdout.contains("ok refs/heads/tagged\n"), "{run:?}");
    assert!(
        run.stderr
            .contains("warning: allowing deletion of corrupt ref\n"),
        "{run:?}"
    );
    assert!(
        run.stderr
            .contains("warning: deleting a non-existent ref\n"),
        "{run:?}"
    );
    assert!(run.stderr.contains("refs/heads/main"), "{run:?}");
    assert!(
        run.refs.contains(" refs/namespaces/ns/refs/heads/tagged\n"),
        "{run:?}"
    );
    w.assert_clean("srv.git");
}

/// `core.alternateRefsCommand` and `core.alternateRefsPrefixes` choose the alternates' `.have`s.
#[test]
fn alternate_refs_command_and_prefixes() {
    for (key, value) in [
        ("core.alternateRefsPrefixes", "refs/heads/public"),
        (
            "core.alternateRefsCommand",
            "git --git-dir=\"$1\" rev-parse refs/heads/public/x #",
        ),
    ] {
        let (run, _) = differential(
            |w| {
                let (c1, c2) = w.server_with_history();
                w.bare("alt.git");
                w.git(
                    "src",
                    &[
                        "push",
                        "-q",
                        "../alt.git",
                        "main:refs/heads/public/x",
                        "main~1:refs/heads/private",
                    ],
                );
                let _ = (c1, c2);
                std::fs::write(
                    w.path("srv.git/objects/info/alternates"),
                    format!("{}\n", w.path("alt.git/objects").display()),
                )
                .unwrap();
                w.git("srv.git", &["config", key, value]);
                b"0000".to_vec()
            },
            &[],
            &[],
        );
        assert_eq!(run.stdout.matches(" .have\n").count(), 1, "{key}: {run:?}");
    }
}

/// Signed pushes: the certificate's commands, its push options checked against the pushed ones,
/// the nonce's HMAC (a nonce of another request passes in stateless mode within
/// `receive.certNonceSlop`), and the `GIT_PUSH_CERT*` variables post-receive gets — the same from
/// git and from berth.
#[test]
fn signed_push_certificate() {
    for options_match in [true, false] {
        let (run, w) = differential(
            |w| {
                let (c1, c2) = w.server_with_history();
                w.git("srv.git", &["config", "receive.certNonceSeed", "sekrit"]);
                w.git("srv.git", &["config", "receive.certNonceSlop", "100000000"]);
                w.git(
                    "srv.git",
                    &["config", "receive.advertisePushOptions", "true"],
                );
                let hook = w.path("srv.git/hooks/post-receive");
                std::fs::write(
                    &hook,
                    "#!/bin/sh\ncat >/dev/null\n{ git cat-file blob $GIT_PUSH_CERT | head -3; env | grep '^GIT_PUSH_CERT_' | grep -v '^GIT_PUSH_CERT=' | sort; } >../cert.log\n",
                )
                .unwrap();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
                let nonce = berth::protocol::push_cert::nonce(
                    common::object_format(),
                    "srv.git",
                    1_700_000_000,
                    "sekrit",
                );
                let cert_lines = [
                    "certificate version 0.1\n".to_owned(),
                    "pusher C O Mitter <committer@example.com> 1700000000 +0000\n".to_owned(),
                    "pushee srv.git\n".to_owned(),
                    format!("nonce {nonce}\n"),
                    "push-option ci.skip\n".to_owned(),
                    "\n".to_owned(),
                    format!("{c1} {c2} refs/heads/main\n"),
                    "-----BEGIN PGP SIGNATURE-----\n".to_owned(),
                    "not a real signature\n".to_owned(),
                    "-----END PGP SIGNATURE-----\n".to_owned(),
                ];
                let mut v = pkt("push-cert\0 report-status push-options");
                for l in &cert_lines {
                    v.extend(pkt(l));
                }
                v.extend(pkt("push-cert-end\n"));
                v.extend(b"0000");
                v.extend(pkt(if options_match { "ci.skip" } else { "other" }));
                v.extend(b"0000");
                v.extend(w.pack(true, &format!("{c2}\n^{c1}\n")));
                v
            },
            &["--stateless-rpc"],
            &[],
        );
        if options_match {
            assert!(run.stdout.contains("ok refs/heads/main"), "{run:?}");
            let log = std::fs::read_to_string(w.path("cert.log")).unwrap();
            assert!(log.starts_with("certificate version 0.1\n"), "{log}");
            assert!(log.contains("GIT_PUSH_CERT_NONCE_STATUS=OK"), "{log}");
        } else {
            assert!(
                run.stdout
                    .contains("ng refs/heads/main inconsistent push options"),
                "{run:?}"
            );
        }
    }
}
