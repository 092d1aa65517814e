//! How berth is started and what it refuses: under the name `git-receive-pack` (a symlink, as an
//! ssh forced command or in an exec-path would find it), repository formats it cannot write yet,
//! and `receive.maxInputSize`.

use crate::common;
use common::{Receiver, World, leftovers};

#[test]
fn symlink_named_git_receive_pack_behaves_as_receive_pack() {
    let w = World::new();
    std::fs::create_dir(w.path("bin")).unwrap();
    std::os::unix::fs::symlink(common::berth(), w.path("bin/git-receive-pack")).unwrap();
    w.bare("srv.git");
    w.work("src");
    let head = w.commit("src", "a", "1");
    let rp = format!(
        "--receive-pack={}",
        w.path("bin/git-receive-pack").display()
    );
    let out = w.git_out("src", &["push", &rp, "../srv.git", "main"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        w.refs("srv.git"),
        format!("{head} commit refs/heads/main\n")
    );
    w.assert_clean("srv.git");
}

/// A client whose repository has the other object format stops before sending anything, with
/// git's message, whichever format the server has; nothing is written.
#[test]
fn a_client_of_the_other_object_format_gets_gits_error() {
    for (server, client) in [("sha256", "sha1"), ("sha1", "sha256")] {
        for r in [Receiver::Git, Receiver::Berth] {
            let w = World::new();
            let fmt = |f: &str| format!("--object-format={f}");
            w.git(".", &["init", "-q", "--bare", &fmt(server), "srv.git"]);
            w.git(".", &["init", "-q", "-b", "main", &fmt(client), "src"]);
            w.commit("src", "a", "1");
            let p = w.push("src", r, "srv.git", &["main"]);
            assert!(!p.success, "{server} <- {client} via {r:?}");
            assert!(
                p.stderr.contains(
                    "fatal: the receiving end does not support this repository's hash algorithm"
                ),
                "{p:#?}"
            );
            assert_eq!(w.refs("srv.git"), "");
            assert!(leftovers(&w.path("srv.git")).is_empty());
        }
    }
}

/// `extensions.compatObjectFormat`: git master accepts pushes into it; so does berth, with the
/// same refs, a repository `git fsck --strict` finds clean, and the pack kept (git's index-pack
/// records no compatibility ids for a pack; berth writes no loose objects that would need them).
#[test]
fn pushes_into_a_repository_with_a_compat_object_format() {
    let w = World::new();
    w.git(
        ".",
        &["init", "-q", "--bare", "--object-format=sha256", "srv.git"],
    );
    w.git(
        "srv.git",
        &["config", "extensions.compatObjectFormat", "sha1"],
    );
    w.git(
        ".",
        &["init", "-q", "-b", "main", "--object-format=sha256", "src"],
    );
    let head = w.commit("src", "a", "1");
    let p = w.push("src", Receiver::Berth, "srv.git", &["main"]);
    assert!(p.success, "{p:#?}");
    assert_eq!(
        w.refs("srv.git"),
        format!("{head} commit refs/heads/main\n")
    );
    w.git("srv.git", &["fsck", "--strict"]);
    assert!(leftovers(&w.path("srv.git")).is_empty());
}

#[test]
fn max_input_size_refuses_large_packs() {
    let big: String = (0..20_000)
        .map(|i| format!("{i} some incompressible-ish text {}\n", i * 7919 % 10007))
        .collect();
    let run = |r: Receiver| {
        let w = World::new();
        w.bare("srv.git");
        w.git("srv.git", &["config", "receive.maxInputSize", "1000"]);
        w.work("src");
        w.commit("src", "big", &big);
        let p = w.push("src", r, "srv.git", &["main"]);
        assert_eq!(w.refs("srv.git"), "");
        assert!(leftovers(&w.path("srv.git")).is_empty());
        w.assert_clean("srv.git");
        p
    };
    let berth = common::differential(run);
    assert!(
        berth
            .stderr
            .contains("remote: fatal: pack exceeds maximum allowed size"),
        "{berth:#?}"
    );
    assert!(
        berth.stdout.contains("[remote rejected] (unpacker error)"),
        "{berth:#?}"
    );
}

/// `transfer.advertiseSID`: the advertisement carries git's trace2 session id, and the client's
/// `session-id` is logged to the trace2 event stream as `transfer/client-sid`, as git does.
#[test]
fn session_id_capability_and_trace2_client_sid() {
    let w = World::new();
    w.bare("srv.git");
    w.git("srv.git", &["config", "transfer.advertiseSID", "true"]);
    w.work("src");
    w.commit("src", "a", "1");
    let events = w.path("server-events");
    let rp = format!(
        "--receive-pack=GIT_TRACE2_EVENT='{}' '{}' receive-pack",
        events.display(),
        common::berth().display()
    );
    let mut cmd = w.git_cmd("src");
    cmd.args([
        "-c",
        "transfer.advertiseSID=true",
        "push",
        &rp,
        "../srv.git",
        "main",
    ]);
    assert!(cmd.output().unwrap().status.success());
    let server = std::fs::read_to_string(&events).unwrap();
    assert!(server.contains("\"key\":\"client-sid\""), "{server}");
    let advertised = w.git_with_stdin_cmd(
        {
            let mut c = w.cmd(common::berth(), ".");
            c.args(["receive-pack", "srv.git"]);
            c
        },
        b"0000",
    );
    let advertised = String::from_utf8_lossy(&advertised.stdout).into_owned();
    let sid = advertised
        .split(" session-id=")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap_or("");
    // `<time>-H<hash>-P<pid>`, as git's trace2 session ids.
    let parts: Vec<&str> = sid.split('-').collect();
    assert!(
        parts.len() == 3
            && parts[0].ends_with('Z')
            && parts[1].starts_with('H')
            && parts[2].starts_with('P'),
        "{advertised:?}"
    );
}

/// The command line is answered as git's builtin answers it: `-h` (and `--help-all`) print the
/// usage on stdout and exit 0 (git master's parse-options; git 2.47 exited 129, so against an
/// older git only the status differs), an unknown or malformed option prints git's `error:` line
/// and the usage on stderr, a missing or extra directory git's `fatal:` and usage; those with exit
/// status 129.
/// Options may be abbreviated and negated as git allows. Compared with `git receive-pack`,
/// started as `berth receive-pack` and as `git-receive-pack`.
#[test]
fn command_line_answers_as_git_receive_pack() {
    let w = World::new();
    std::fs::create_dir(w.path("bin")).unwrap();
    std::os::unix::fs::symlink(common::berth(), w.path("bin/git-receive-pack")).unwrap();
    let cases: &[&[&str]] = &[
        &["-h"],
        &["--help-all"],
        &["--bogus"],
        &["-x"],
        &["-qx"],
        &["-qh"],
        &["x", "-h"],
        &[],
        &["-q"],
        &["a", "b"],
        &["--", "a", "b"],
        &["--quiet=1"],
        &["--qu="],
        &["--no-stateless-rpc=1"],
        &["--no"],
        &["--no-"],
        &["--no-bogus"],
        &["-stateless"],
        &["-no-quiet"],
        &["-htt"],
        &["-q-x"],
        &["-é"],
        &["---"],
        &["--="],
        &["--n=1"],
        &["--git-completion-helper"],
        &["--git-completion-helper-all"],
        &["--skip-connectivity-check-typo"],
        &["--", "-h"],
        &["--end-of-options", "-h"],
        &["--st", "--ht", "--adv", "--rej", "missing.git"],
        &["--no-quiet", "--no-st", "--no-ad", "missing.git"],
        &["missing.git", "--bogus"],
    ];
    let observe = |program: &std::path::Path, pre: &[&str], args: &[&str], env: Option<&str>| {
        let mut c = w.cmd(program, ".");
        c.args(pre).args(args);
        if let Some(v) = env {
            c.env("GIT_TEST_DISALLOW_ABBREVIATED_OPTIONS", v);
        }
        let out = c.output().unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.code(),
        )
    };
    let git = std::path::Path::new("git");
    for env in [None, Some("1")] {
        for args in cases {
            let mut expected = observe(git, &["receive-pack"], args, env);
            // A request for help (usage on stdout, nothing on stderr) exits 0 as on git master.
            if expected.0.starts_with("usage: ") && expected.1.is_empty() {
                expected.2 = Some(0);
            }
            let berth = observe(&common::berth(), &["receive-pack"], args, env);
            assert_eq!(expected, berth, "berth receive-pack {args:?} ({env:?})");
            let dashed = observe(&w.path("bin/git-receive-pack"), &[], args, env);
            assert_eq!(expected, dashed, "git-receive-pack {args:?} ({env:?})");
        }
    }
    assert_eq!(
        observe(git, &["receive-pack"], &["-h"], None).0,
        "usage: git receive-pack <git-dir>\n\n    -q, --[no-]quiet      quiet\n\n"
    );
    // git opens the manual page for `--help`; berth, without one, answers as parse-options does
    // when `--help` reaches it: the usage, as for `-h`.
    let usage = "usage: git receive-pack <git-dir>\n\n    -q, --[no-]quiet      quiet\n\n";
    assert_eq!(
        observe(&common::berth(), &["receive-pack"], &["--help"], None),
        (usage.to_owned(), String::new(), Some(0))
    );
    // `-h` as git master answers it: the usage on stdout, exit status 0 (t0012).
    assert_eq!(
        observe(&common::berth(), &["receive-pack"], &["-h"], None),
        (usage.to_owned(), String::new(), Some(0))
    );
    // berth's own option, spelled out in full, on top of git's.
    let out = observe(
        &common::berth(),
        &["receive-pack"],
        &["--skip-connectivity-check", "missing.git"],
        None,
    );
    assert_eq!(
        out.1,
        "fatal: 'missing.git' does not appear to be a git repository\n"
    );
}

/// The configuration comes from git's files in git's order, read by berth itself: the system
/// file (`GIT_CONFIG_SYSTEM`), the global one and what it includes (over the system's), the
/// repository's, and `GIT_CONFIG_COUNT` over them all. Each source sets a key the push runs
/// into; the client sees the same as from git receive-pack, and the same refs are left.
#[test]
fn configuration_sources_and_their_order_are_gits() {
    let seen = common::differential(|r| {
        let w = World::new();
        let srv = w.bare("srv.git");
        w.work("src");
        let first = w.commit("src", "a", "1");
        w.commit("src", "a", "2");
        for b in ["gone", "hidden", "kept"] {
            w.git("src", &["branch", b]);
        }
        w.git(
            "src",
            &["push", "-q", "../srv.git", "main", "gone", "hidden", "kept"],
        );
        w.git("src", &["reset", "-q", "--hard", &first]);
        std::fs::write(
            w.path("system.cfg"),
            "[receive]\n\tdenyDeletes = true\n\tdenyNonFastForwards = false\n",
        )
        .unwrap();
        std::fs::write(
            w.path("home/extra.inc"),
            "[receive]\n\tdenyNonFastForwards = true\n",
        )
        .unwrap();
        let global = std::fs::read_to_string(w.path("home/.gitconfig")).unwrap();
        std::fs::write(
            w.path("home/.gitconfig"),
            format!("{global}[include]\n\tpath = extra.inc\n"),
        )
        .unwrap();
        w.git(&srv, &["config", "receive.hideRefs", "refs/heads/hidden"]);
        // git clears GIT_CONFIG_COUNT for a local transport: set it in the remote command.
        let rp = format!(
            "--receive-pack=GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=receive.hideRefs \
             GIT_CONFIG_VALUE_0=refs/heads/kept {}",
            r.command()
        );
        let out = w
            .git_cmd("src")
            .env_remove("GIT_CONFIG_NOSYSTEM")
            .env("GIT_CONFIG_SYSTEM", w.path("system.cfg"))
            .args(["push", "--porcelain", &rp, "../srv.git"])
            .args(["+main:main", ":gone", "main:hidden", "+main:kept"])
            .output()
            .unwrap();
        let push = common::Push::from_output(&out, w.root());
        (push, w.refs("srv.git").replace(&first, "FIRST"))
    });
    let verdicts = [
        ":refs/heads/gone\t[remote rejected] (deletion prohibited)",
        "refs/heads/main:refs/heads/main\t[remote rejected] (non-fast-forward)",
        "refs/heads/main:refs/heads/hidden\t[remote rejected] (deny updating a hidden ref)",
        "refs/heads/main:refs/heads/kept\t[remote rejected] (deny updating a hidden ref)",
    ];
    for v in verdicts {
        assert!(seen.0.stdout.contains(v), "{v}: {seen:#?}");
    }
}

/// Without `GIT_COMMITTER_DATE` the reflog's time is now, at the offset of the local time zone
/// as `TZ` gives it (git's `localtime_r`; a POSIX rule, which needs no zoneinfo files): the
/// same offset as git receive-pack writes.
#[test]
fn reflog_time_zone_is_the_local_one() {
    let zones = common::differential(|r| {
        let w = World::new();
        let srv = w.bare("srv.git");
        w.git(&srv, &["config", "core.logAllRefUpdates", "true"]);
        w.work("src");
        w.commit("src", "a", "1");
        let rp = format!("--receive-pack={}", r.command());
        let out = w
            .git_cmd("src")
            .env_remove("GIT_COMMITTER_DATE")
            .env("TZ", "IST-5:30")
            .args(["push", "-q", &rp, "../srv.git", "main"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let log = w.git(
            &srv,
            &["reflog", "show", "--format=%gd", "--date=iso", "main"],
        );
        log.trim_end().rsplit(' ').next().unwrap().to_owned()
    });
    assert_eq!(zones, "+0530}");
}
