//! What a new user meets first, with the real git client against the built `berth serve`:
//! refusals that say what to do (a creation that needs `C`, a name that breaks the name rule,
//! `--auto-init`'s `.git`), the same `user=` for anonymous fetches and pushes in the access log,
//! and the README's own first-screen commands, run as written (with `master` and with `main` as
//! git's default branch name).

use crate::common;
use crate::serve::{Serve, credentials, git, ok};
use common::World;

/// A work repository `src` with one commit.
fn source(w: &World) {
    w.git(".", &["init", "-q", "src"]);
    w.commit("src", "a", "1");
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_push_that_would_create_a_repository_without_c_says_creation_needs_c() {
    let w = World::new();
    std::fs::write(w.path("creds"), credentials(&w, "alice", "pw")).unwrap();
    std::fs::write(w.path("access.conf"), "repo private\n    RW+ = alice\n").unwrap();
    let s = Serve::start(
        &w,
        &[
            "--credentials",
            w.path("creds").to_str().unwrap(),
            "--access",
            w.path("access.conf").to_str().unwrap(),
        ],
    );
    source(&w);
    let url = format!("http://alice:pw@{}/private.git", s.addr);
    let out = git(&w, "src", &["push", &url, "HEAD:refs/heads/main"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains(
            "remote: Not a git repository: 'private.git'. alice may push to it but not create \
             it: a push creates a repository only for a user given C on its repo line of the \
             access rules (C = alice)"
        ),
        "{e}"
    );
    // With C, the same push creates it.
    std::fs::write(
        w.path("access.conf"),
        "repo private\n    C = alice\n    RW+ = alice\n",
    )
    .unwrap();
    ok(git(&w, "src", &["push", &url, "HEAD:refs/heads/main"]));
}

#[test]
fn a_name_that_breaks_the_name_rule_says_the_rule() {
    let w = World::new();
    let s = Serve::start(&w, &[]);
    source(&w);
    for (name, why) in [
        ("-x.git", "a segment starts with '.' or '-'"),
        (
            "a%20b.git",
            "only letters, digits, '.', '_' and '-' in a segment",
        ),
    ] {
        let out = git(&w, "src", &["push", &s.url(name), "HEAD:refs/heads/main"]);
        assert!(!out.status.success());
        let e = stderr(&out);
        assert!(
            e.contains(&format!(
                "remote: invalid repository path: {why} (a repository name is at most 255 bytes \
                 of '/'-separated segments of ASCII letters, digits, '.', '_' and '-', none \
                 empty and none starting with '.' or '-')"
            )),
            "{name}: {e}"
        );
    }
}

#[test]
fn auto_init_of_a_name_without_git_says_to_push_to_name_git() {
    let w = World::new();
    let s = Serve::start(&w, &[]);
    source(&w);
    let out = git(&w, "src", &["push", &s.url("demo"), "HEAD:refs/heads/main"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains(
            "remote: Not a git repository: 'demo'. A push creates a repository (--auto-init) \
             only for a name ending in .git: push to 'demo.git'"
        ),
        "{e}"
    );
    ok(git(
        &w,
        "src",
        &["push", &s.url("demo.git"), "HEAD:refs/heads/main"],
    ));
}

#[test]
fn anonymous_fetches_and_pushes_log_the_same_user() {
    let w = World::new();
    let s = Serve::start(&w, &[]);
    source(&w);
    ok(git(
        &w,
        "src",
        &["push", &s.url("demo.git"), "HEAD:refs/heads/main"],
    ));
    ok(git(&w, ".", &["clone", "-q", &s.url("demo.git"), "back"]));
    // The last request's line is written once its response is done.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let log = s.log();
    let users: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" route=\"receive-pack\"") || l.contains(" route=\"upload-pack\""))
        .map(|l| l.split(" user=").nth(1).unwrap().split(' ').next().unwrap())
        .collect();
    assert!(users.len() >= 2, "{log}");
    assert!(users.iter().all(|u| *u == "anonymous"), "{users:?}\n{log}");
}
