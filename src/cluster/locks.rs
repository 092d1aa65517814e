//! Ref locks and quarantines a killed node left behind. A ref transaction holds `<ref>.lock`
//! files (and `packed-refs.lock`, or reftable's `tables.list.lock`) from prepare to commit; a
//! node killed in between (`kill -9`, a crash) leaves them, and every later transaction of
//! those refs on this replica would fail, so it could never catch up. A node killed while it
//! ingests a pack leaves its quarantine (`objects/tmp_objdir-incoming-*`), objects no ref
//! will ever point to. Nothing but this node writes the cluster's repositories in its root,
//! and at start-up none of its transactions or ingests is in flight: before it serves, the
//! node removes both from the repositories it has.

use std::path::Path;

/// Remove the ref lock files and quarantines of every repository under `root` (in cluster
/// mode the root holds the cluster's repositories); how many.
pub(super) fn remove_stale(root: &Path) -> usize {
    let mut removed = 0;
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if crate::repo::is_git_dir(&p) {
                removed += in_repository(&p);
            } else {
                stack.push(p);
            }
        }
    }
    removed
}

fn in_repository(git_dir: &Path) -> usize {
    let mut removed = 0;
    if let Ok(entries) = std::fs::read_dir(git_dir.join("objects")) {
        for e in entries.flatten() {
            let quarantine = e
                .file_name()
                .to_string_lossy()
                .starts_with("tmp_objdir-incoming-")
                && e.file_type().is_ok_and(|t| t.is_dir());
            if quarantine && std::fs::remove_dir_all(e.path()).is_ok() {
                tracing::warn!(target: "berth::cluster", quarantine = %crate::escape::Escaped::text(&e.path().display().to_string()), "removed a quarantine left by a killed ingest");
                removed += 1;
            }
        }
    }
    let mut remove = |p: &Path| {
        if std::fs::remove_file(p).is_ok() {
            tracing::warn!(target: "berth::cluster", lock = %crate::escape::Escaped::text(&p.display().to_string()), "removed a ref lock left by a killed transaction");
            removed += 1;
        }
    };
    for top in ["packed-refs.lock", "reftable/tables.list.lock", "HEAD.lock"] {
        let p = git_dir.join(top);
        if p.is_file() {
            remove(&p);
        }
    }
    let mut stack = vec![git_dir.join("refs")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() && p.extension().is_some_and(|x| x == "lock") => remove(&p),
                _ => {}
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    #[test]
    fn removes_ref_locks_and_quarantines_of_the_repositories_under_the_root() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("team/app.git");
        std::fs::create_dir_all(repo.join("refs/heads/x")).unwrap();
        std::fs::write(repo.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(repo.join("berth-cluster-seq"), "3\n").unwrap();
        std::fs::write(repo.join("refs/heads/x/y.lock"), "").unwrap();
        std::fs::write(repo.join("refs/heads/main"), "").unwrap();
        std::fs::write(repo.join("packed-refs.lock"), "").unwrap();
        std::fs::create_dir_all(repo.join("objects/tmp_objdir-incoming-Ab12/pack")).unwrap();
        std::fs::write(
            repo.join("objects/tmp_objdir-incoming-Ab12/pack/x.pack"),
            "",
        )
        .unwrap();
        std::fs::create_dir_all(repo.join("objects/pack")).unwrap();
        // Not a repository: left alone.
        let other = root.path().join("notes");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("a.lock"), "").unwrap();
        assert_eq!(super::remove_stale(root.path()), 3);
        assert!(!repo.join("objects/tmp_objdir-incoming-Ab12").exists());
        assert!(repo.join("objects/pack").is_dir());
        assert!(repo.join("refs/heads/main").is_file());
        assert!(!repo.join("refs/heads/x/y.lock").exists());
        assert!(other.join("a.lock").is_file());
    }
}
