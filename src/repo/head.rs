//! The first pushed branch as HEAD: what a server does after the first push into a repository
//! whose HEAD names no branch (the HTTP and ssh front ends, and a cluster's replicas applying the
//! same push).

use std::path::Path;

use crate::escape::Escaped;

/// What `serve`'s `head_to_first_branch` does, for the branches `created` (full names, in push order) by a push
/// into `dir`: also run by a cluster's replicas, which apply the same pushes.
pub(crate) fn head_to_first_created(dir: &str, created: &[&[u8]]) {
    let Some(first) = created.first() else {
        return;
    };
    // The common case without a process: HEAD names a loose branch that exists.
    if let Ok(head) = std::fs::read_to_string(Path::new(dir).join("HEAD"))
        && let Some(target) = head.trim_end().strip_prefix("ref: refs/heads/")
        && !target.starts_with('.')
        && Path::new(dir).join("refs/heads").join(target).is_file()
    {
        return;
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("--git-dir")
            .arg(dir)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
    };
    if git(&["rev-parse", "-q", "--verify", "HEAD"]).is_some_and(|o| o.status.success()) {
        return;
    }
    let Some(branches) = git(&["for-each-ref", "--format=%(refname)", "refs/heads/"]) else {
        return;
    };
    if !branches.status.success()
        || !branches
            .stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .all(|l| created.contains(&l))
    {
        return;
    }
    let Ok(first) = std::str::from_utf8(first) else {
        return;
    };
    if let Some(o) = git(&["symbolic-ref", "HEAD", first])
        && !o.status.success()
    {
        tracing::warn!(target: "berth::serve", branch = %Escaped::token(first), "cannot point HEAD at the first pushed branch");
    }
}
