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

/// The README's first-screen block: the fenced block after its `<!-- first-screen: … -->` line.
fn first_screen() -> Vec<String> {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let mut lines = readme
        .lines()
        .skip_while(|l| !l.starts_with("<!-- first-screen:"))
        .skip(1);
    assert!(
        lines.next().is_some_and(|l| l.starts_with("```")),
        "README.md: no fenced block after <!-- first-screen: -->"
    );
    lines
        .take_while(|l| !l.starts_with("```"))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// Run the README's first-screen commands as written in a fresh world whose git names its
/// first branch `branch`: the server (the built binary for `cargo run --release --`, on a free
/// port instead of 8080), the push from a repository with a commit, the clone; then the clone
/// has that branch checked out.
fn readme_first_screen_with_default_branch(branch: &str) {
    let w = World::fixed_clock(
        "berth-readme-",
        &format!("[init]\n\tdefaultBranch = {branch}\n[pack]\n\tthreads = 1\n"),
    );
    w.git(".", &["init", "-q", "src"]);
    w.commit("src", "README", "hello\n");
    let mut server = None;
    let mut ran = Vec::new();
    for line in first_screen() {
        assert!(!line.contains(['"', '\'', '$', '|', ';', '&']), "{line}");
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["cargo", "run", "--release", "--", "serve", rest @ ..] => {
                let mut cmd = w.cmd(common::berth(), ".");
                cmd.arg("serve")
                    .args(rest)
                    .args(["--listen", "127.0.0.1:0"]);
                let p = common::ServeProcess::spawn(cmd, |out| out.contains('\n'));
                let addr = p
                    .stdout
                    .trim()
                    .strip_prefix("berth serve: listening on http://")
                    .and_then(|a| a.strip_suffix('/'))
                    .unwrap_or_else(|| panic!("{:?}\n{}", p.stdout, p.log()))
                    .to_owned();
                server = Some((p, addr));
                ran.push("serve");
            }
            ["cargo", "test", ..] => {} // this test's own runner
            ["git", sub @ ("push" | "clone"), ..] => {
                let (_, addr) = server.as_ref().expect("the server starts first");
                let args: Vec<String> = words[1..]
                    .iter()
                    .map(|a| a.replace("127.0.0.1:8080", addr))
                    .collect();
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let cwd = if *sub == "clone" { "." } else { "src" };
                let out = git(&w, cwd, &args);
                assert!(
                    out.status.success(),
                    "README command `{line}` failed with init.defaultBranch={branch}:\n{}",
                    stderr(&out)
                );
                ran.push(if *sub == "clone" { "clone" } else { "push" });
            }
            _ => panic!("README.md's first screen has a command this test does not run: {line}"),
        }
    }
    assert_eq!(
        ran,
        ["serve", "push", "clone"],
        "README.md's first screen changed"
    );
    let head = w.git("demo", &["symbolic-ref", "HEAD"]);
    assert_eq!(head.trim(), format!("refs/heads/{branch}"));
    assert_eq!(
        std::fs::read_to_string(w.path("demo/README")).unwrap(),
        "hello\n",
        "the clone has HEAD checked out"
    );
}

#[test]
fn readme_first_screen_works_with_master_as_the_default_branch() {
    readme_first_screen_with_default_branch("master");
}

#[test]
fn readme_first_screen_works_with_main_as_the_default_branch() {
    readme_first_screen_with_default_branch("main");
}

#[test]
fn version_names_the_commit_of_the_checkout() {
    let out = std::process::Command::new(common::berth())
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8(out.stdout).unwrap();
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let expected = match head.status.success() {
        true => format!(
            "berth {} ({})\n",
            env!("CARGO_PKG_VERSION"),
            String::from_utf8_lossy(&head.stdout).trim()
        ),
        // Built from a tarball: the package version alone.
        false => format!("berth {}\n", env!("CARGO_PKG_VERSION")),
    };
    assert_eq!(version, expected);
}

#[test]
fn an_unknown_ssh_key_is_logged_by_its_fingerprint_not_its_key() {
    use crate::ssh_serve;
    let w = ssh_serve::world();
    let srv = ssh_serve::Serve::start(&w, &[]);
    // mallory's key is in no file of the keydir.
    let public = ssh_serve::keygen(&w, "mallory");
    let out = ssh_serve::ssh(&w, &srv, "mallory", &["git@127.0.0.1", "info"]);
    assert!(!out.status.success());
    let fingerprint = std::process::Command::new("ssh-keygen")
        .args(["-l", "-E", "sha256", "-f"])
        .arg(w.path("keys/mallory.pub"))
        .output()
        .unwrap();
    let fingerprint = String::from_utf8(fingerprint.stdout).unwrap();
    let fingerprint = fingerprint.split(' ').nth(1).unwrap().to_owned();
    let start = std::time::Instant::now();
    while !srv.log().contains("ssh key not in the keydir") {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no log line for the unknown key:\n{}",
            srv.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log = srv.log();
    let line = log
        .lines()
        .find(|l| l.contains("ssh key not in the keydir"))
        .unwrap();
    assert!(line.contains(&fingerprint), "{line}");
    let blob = public.split(' ').nth(1).unwrap();
    assert!(!log.contains(blob), "the key itself is in the log:\n{log}");
}
