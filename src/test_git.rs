//! For unit tests: the real git, run with a fixed identity and without the user's or the
//! system's configuration, so that what it makes is the same on every machine.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `git <args>` in `dir` with `input` on its stdin; its stdout, trimmed. Panics unless it
/// succeeds.
pub(crate) fn git_with_input(dir: &Path, args: &[&str], input: &str) -> String {
    String::from_utf8(git_bytes(dir, args, input.as_bytes()))
        .expect("git's output is UTF-8")
        .trim()
        .to_owned()
}

/// `git <args>` in `dir` with `input` on its stdin; its stdout as it is (a pack). Panics
/// unless it succeeds.
pub(crate) fn git_bytes(dir: &Path, args: &[&str], input: &[u8]) -> Vec<u8> {
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
    stdin.write_all(input).expect("git reads its input");
    drop(stdin);
    let out = child.wait_with_output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    out.stdout
}

/// `git <args>` in `dir` with nothing on its stdin.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    git_with_input(dir, args, "")
}

/// A repository `r` in `dir` whose ten commits each change one of 40 files in a few
/// directories, so that the packs git makes of it hold trees and blobs as deltas; the commits,
/// oldest first.
pub(crate) fn history(dir: &Path) -> Vec<String> {
    git(dir, &["init", "-q", "-b", "main", "r"]);
    let repo = dir.join("r");
    let mut commits = Vec::new();
    for round in 0..10 {
        for f in 0..40 {
            let path = repo.join(format!("d{}/f{f}", f % 4));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let line = if f == round { round } else { 0 };
            std::fs::write(&path, format!("{}\n{line}\n", "common text\n".repeat(50))).unwrap();
        }
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", &format!("round {round}")]);
        commits.push(git(&repo, &["rev-parse", "HEAD"]));
    }
    commits
}

/// Write into `repo` a commit of the empty tree whose parent nobody has (as a push accepted
/// beside it left it), `message` telling such commits apart; its id.
pub(crate) fn commit_without_parent(repo: &Path, message: &str) -> gix_hash::ObjectId {
    let tree = git(repo, &["mktree"]);
    let id = commit_of(repo, &tree, &[&"ab".repeat(20)], message, Written::Loose);
    gix_hash::ObjectId::from_hex(id.as_bytes()).expect("git prints an id")
}

/// Whether [`commit_of`] writes the commit or only names it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    Loose,
    NameOnly,
}

/// A commit of `tree` with `parents` and `message`, none of which need exist (`hash-object
/// --literally`), written loose in `repo` or only named as `write` says; its id in hex.
pub(crate) fn commit_of(
    repo: &Path,
    tree: &str,
    parents: &[&str],
    message: &str,
    write: Written,
) -> String {
    let parents: String = parents.iter().map(|p| format!("parent {p}\n")).collect();
    let body = format!(
        "tree {tree}\n{parents}author A <a@x> 0 +0000\ncommitter C <c@x> 0 +0000\n\n{message}\n"
    );
    let mut args = vec!["hash-object", "-t", "commit", "--stdin", "--literally"];
    if write == Written::Loose {
        args.push("-w");
    }
    git_with_input(repo, &args, &body)
}

/// `git pack-objects` of `list` (its `--revs` input when `revs`) into `dir`, its deltas on
/// bases named by offset; the index.
pub(crate) fn pack(repo: &Path, dir: &Path, revs: bool, list: &str) -> gix_pack::index::File {
    pack_with(repo, dir, revs, &["--delta-base-offset"], list)
}

/// [`pack`] with `more` arguments to `git pack-objects` instead of `--delta-base-offset`.
pub(crate) fn pack_with(
    repo: &Path,
    dir: &Path,
    revs: bool,
    more: &[&str],
    list: &str,
) -> gix_pack::index::File {
    std::fs::create_dir_all(dir).unwrap();
    let base: PathBuf = dir.join("pack");
    let mut args = vec!["pack-objects", "-q", "--window=10", "--depth=50"];
    if revs {
        args.push("--revs");
    }
    args.extend(more);
    args.push(base.to_str().unwrap());
    let name = git_with_input(repo, &args, list);
    gix_pack::index::File::at(dir.join(format!("pack-{name}.idx")), gix_hash::Kind::Sha1).unwrap()
}

/// How many entries of the pack of `index` are deltas.
pub(crate) fn deltas_in(index: &gix_pack::index::File) -> u32 {
    let data =
        gix_pack::data::File::at(index.path().with_extension("pack"), index.object_hash()).unwrap();
    let deltas = index
        .iter()
        .filter(|e| data.entry(e.pack_offset).unwrap().header.is_delta())
        .count();
    u32::try_from(deltas).unwrap()
}
