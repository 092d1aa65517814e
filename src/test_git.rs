//! For unit tests: the real git, run with a fixed identity and without the user's or the
//! system's configuration, so that what it makes is the same on every machine.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// `git <args>` in `dir` with `input` on its stdin; its stdout, trimmed. Panics unless it
/// succeeds.
pub(crate) fn git_with_input(dir: &Path, args: &[&str], input: &str) -> String {
    let mut child = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "A")
        .env("GIT_AUTHOR_EMAIL", "a@example.com")
        .env("GIT_COMMITTER_NAME", "C")
        .env("GIT_COMMITTER_EMAIL", "c@example.com")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git runs");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin
        .write_all(input.as_bytes())
        .expect("git reads its input");
    drop(stdin);
    let out = child.wait_with_output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout)
        .expect("git's output is UTF-8")
        .trim()
        .to_owned()
}

/// `git <args>` in `dir` with nothing on its stdin.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    git_with_input(dir, args, "")
}
