//! From a request's repository name ([`Name`], decoded and validated once by the transport) to
//! a repository under the root; the creation of a repository by its first push (`--auto-init`,
//! or `C` in the access rules), the empty advertisement a missing one answers before that, and
//! its HEAD on the first branch pushed.
//!
//! **What is served** is a git directory at one of the name's [`Name::candidates`], reached from
//! the root through real directories only:
//! - **no symbolic link** on the way, in any component below the root (the root itself may lie
//!   behind one): the repository opened is then always the one whose name the access rules
//!   judged. A link pushed into a worktree (`receive.denyCurrentBranch=updateInstead`), or made
//!   by hand, is refused (403) whether it points inside the root or out of it;
//! - **not nested** in another repository: no directory on the way is a git directory or has a
//!   `.git` (a worktree). So a repository checked out into a worktree by a push is never served,
//!   nor created there, and its hooks and config never run.
//!
//! **Creation** is race-free: the repository is initialised in a hidden staging directory beside
//! its place (`.berth-init-*`, a name no request can spell) and renamed into place whole, one
//! creation at a time per server; a request never sees it half made, and every push that raced
//! to create it then pushes into it.

use super::*;
use crate::repo::Name;

/// Where a repository name leads under the root.
#[derive(Debug)]
pub(super) enum Resolved {
    /// An existing git directory (canonical, under the root).
    Repo(PathBuf),
    /// Nothing there yet; the path a new repository would take.
    Missing(PathBuf),
}

pub(super) use crate::repo::is_git_dir;

/// What is at `path`, a path below `root` made of a [`Name`]'s segments (and maybe `.git`),
/// looked at component by component without following links.
#[derive(Debug, PartialEq, Eq)]
enum Walk {
    /// Every component exists and is a directory.
    Dir,
    /// A component does not exist.
    Missing,
    /// A component is something else than a directory (a file).
    NotDir,
}

/// Walk `path` below `from` (a real directory already looked at: the root, or a directory
/// [`resolve`] walked), see [`Walk`]; a symbolic link anywhere on the way refuses it.
fn walk(from: &Path, path: &Path) -> Result<Walk, Reject> {
    let rel = path.strip_prefix(from).map_err(|_| Reject::Symlink)?;
    let mut at = from.to_path_buf();
    for c in rel.components() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Err(_) => return Ok(Walk::Missing),
            Ok(m) if m.file_type().is_symlink() => return Err(Reject::Symlink),
            Ok(m) if !m.is_dir() => return Ok(Walk::NotDir),
            Ok(_) => {}
        }
    }
    Ok(Walk::Dir)
}

/// Resolve `name` under `root` (canonical) as git's `enter_repo` tries names ([`Name::candidates`]),
/// through real directories only and not inside another repository (the module header).
pub(super) fn resolve(root: &Path, name: &Name) -> Result<Resolved, Reject> {
    let not_repo = || Reject::NotARepository(name.to_string());
    // The directories above the repository's own: real, and none of them a repository or a
    // worktree.
    let rel = name.relative_path();
    let mut above = root.to_path_buf();
    let segments: Vec<_> = rel.components().collect();
    for seg in &segments[..segments.len() - 1] {
        let parent = above.clone();
        above.push(seg);
        match walk(&parent, &above)? {
            Walk::Dir => {}
            Walk::Missing => return Ok(Resolved::Missing(name.created_at(root))),
            Walk::NotDir => return Err(not_repo()),
        }
        if is_git_dir(&above) || std::fs::symlink_metadata(above.join(".git")).is_ok() {
            tracing::info!(target: "berth::serve", repo = %name, "refused: inside another repository or its worktree");
            return Err(not_repo());
        }
    }
    for c in name.candidates(root) {
        if walk(&above, &c)? == Walk::Dir && is_git_dir(&c) {
            return Ok(Resolved::Repo(c));
        }
    }
    let at = name.created_at(root);
    if std::fs::symlink_metadata(&at).is_ok() {
        // Something that is not a repository is in the way.
        return Err(not_repo());
    }
    Ok(Resolved::Missing(at))
}

/// What a request's repository is.
#[derive(Debug)]
pub(super) enum Target {
    /// An existing repository (its git directory).
    Repo(PathBuf),
    /// None yet, and this client may create it by pushing, at this path: the push's POST
    /// will ([`Server::create`]); a GET of `info/refs` answers [`empty_advertisement`] and
    /// creates nothing.
    Creatable(PathBuf),
}

impl Server {
    /// The repository `name` for `service`: resolved under the root, with the access rules
    /// applied when there are any. Creates nothing.
    pub(super) fn target(
        &self,
        name: &Name,
        service: Service,
        identity: Option<&Identity>,
    ) -> Result<Target, Reject> {
        let resolved = resolve(&self.root, name)?;
        let exists = matches!(resolved, Resolved::Repo(_));
        let may_create = match (self.current_rules(), identity) {
            (Some(rules), Some(who)) => {
                self.authorize(&rules, name, service, who, exists)?;
                true
            }
            _ => self.auto_init && name.has_git_suffix(),
        };
        let path = match resolved {
            Resolved::Repo(p) => return Ok(Target::Repo(p)),
            Resolved::Missing(p) => p,
        };
        if !(may_create && service == Service::ReceivePack) {
            if self.auto_init && service == Service::ReceivePack && !name.has_git_suffix() {
                return Err(Reject::AutoInitNeedsGitSuffix(name.to_string()));
            }
            return Err(Reject::NotARepository(name.to_string()));
        }
        Ok(Target::Creatable(path))
    }

    /// Create the bare repository `path` for `name` (a [`Target::Creatable`]), or find it
    /// created by a request that raced this one; a failure leaves no directory behind.
    pub(super) async fn create(&self, name: &Name, path: &Path) -> Result<PathBuf, Reject> {
        let _guard = self.init_lock.lock().await;
        // Another request may have created it meanwhile.
        if let Resolved::Repo(p) = resolve(&self.root, name)? {
            return Ok(p);
        }
        // The outermost directory this creation adds: removed again if it fails.
        let mut top = path.to_owned();
        while let Some(parent) = top.parent() {
            if parent == self.root || parent.exists() {
                break;
            }
            top = parent.to_owned();
        }
        let cleanup = |why: &str| {
            if top != path && top.starts_with(&self.root) && top != self.root {
                let _ = std::fs::remove_dir_all(&top);
            }
            Reject::Init(why.to_owned())
        };
        let parent = path.parent().unwrap_or(&self.root).to_owned();
        if let Err(e) = std::fs::create_dir_all(&parent) {
            tracing::warn!(target: "berth::serve", repo = %name, error = %e, "cannot create the repository's directory");
            return Err(cleanup("cannot create its directory"));
        }
        let staging = match tempfile::Builder::new()
            .prefix(STAGING_PREFIX)
            .tempdir_in(&parent)
        {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(target: "berth::serve", repo = %name, error = %e, "cannot make a staging directory");
                return Err(cleanup("cannot create its directory"));
            }
        };
        let out = tokio::process::Command::new("git")
            .args(["init", "--quiet", "--bare", "--"])
            .arg(staging.path())
            .stdin(std::process::Stdio::null())
            .output()
            .await;
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(target: "berth::serve", repo = %name, error = %e, "cannot run git init");
                return Err(cleanup("cannot run git init"));
            }
        };
        if !out.status.success() {
            // The details name server paths: for the log, not the client.
            tracing::warn!(
                target: "berth::serve",
                repo = %name,
                stderr = %Escaped::text(String::from_utf8_lossy(&out.stderr).trim()),
                "git init --bare failed"
            );
            return Err(cleanup("git init --bare failed"));
        }
        // Whole, in one step; if another server process put one there first, that one is it.
        let staged = staging.keep();
        if let Err(e) = std::fs::rename(&staged, path) {
            let _ = std::fs::remove_dir_all(&staged);
            if let Resolved::Repo(p) = resolve(&self.root, name)? {
                return Ok(p);
            }
            tracing::warn!(target: "berth::serve", repo = %name, error = %e, "cannot move the new repository into place");
            return Err(cleanup("cannot move it into place"));
        }
        match resolve(&self.root, name)? {
            Resolved::Repo(p) => {
                tracing::info!(target: "berth::serve", repo = %name, path = %Escaped::text(&p.display().to_string()), "created repository");
                if let Some(c) = self.cluster.get() {
                    c.created(name.key(), &p).await;
                }
                Ok(p)
            }
            Resolved::Missing(_) => Err(cleanup("repository vanished after init")),
        }
    }
}

/// The prefix of a creation's staging directory (no request can name one: a segment may not
/// start with `.`).
const STAGING_PREFIX: &str = ".berth-init-";

/// A staging directory older than this was left by a creation a crash interrupted (`git init`
/// takes milliseconds); a younger one may belong to another server process on the same root.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(3600);

/// How deep below the root [`remove_stale_staging`] looks (a name has at most this many
/// segments in practice; deeper directories are left alone).
const STAGING_DEPTH: usize = 16;

/// Remove the staging directories (`.berth-init-*`) under `root` that a crash left behind,
/// once at start: directories only, never into a repository or a link, and only those older
/// than [`STALE_STAGING`]. Returns the paths removed.
pub(super) fn remove_stale_staging(root: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let mut stack = vec![(root.to_owned(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            // Not following links: a link's own type.
            let Ok(kind) = e.file_type() else { continue };
            if !kind.is_dir() {
                continue;
            }
            let path = e.path();
            let name = e.file_name();
            if name.to_string_lossy().starts_with(STAGING_PREFIX) {
                let old = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > STALE_STAGING);
                if old && std::fs::remove_dir_all(&path).is_ok() {
                    tracing::info!(target: "berth::serve", path = %Escaped::text(&path.display().to_string()), "removed a repository creation a crash interrupted");
                    removed.push(path);
                }
            } else if depth + 1 < STAGING_DEPTH && !is_git_dir(&path) {
                stack.push((path, depth + 1));
            }
        }
    }
    removed
}

/// What receive-pack advertises for a repository without refs, without the repository: `<zero
/// id> capabilities^{}` with the default capabilities, then a flush (`version 1` first when
/// asked). For a missing repository the client may create by pushing; `format` is the one
/// `git init --bare` will give it ([`new_repository_format`]).
pub(super) fn empty_advertisement(
    version: u32,
    env: &receive::Environment,
    format: gix_hash::Kind,
) -> Bytes {
    let mut out = Vec::new();
    if version == 1 {
        let _ = crate::protocol::pktline::write_data(&mut out, b"version 1\n");
    }
    let caps = crate::protocol::advertise::capabilities(
        &crate::repo::config::Advertisement::default(),
        None,
        env.user_agent.as_deref(),
        format,
    );
    let _ = crate::protocol::advertise::write(
        &mut out,
        format,
        &crate::refs::Refs::default(),
        "",
        |_, _| false,
        &[],
        &caps,
        &[],
    );
    Bytes::from(out)
}

/// The object format `git init --bare` gives a new repository, as git decides it:
/// `GIT_DEFAULT_HASH`, else `init.defaultObjectFormat`, else SHA-1. Asked once, at start.
pub(super) fn new_repository_format() -> gix_hash::Kind {
    let named = std::env::var("GIT_DEFAULT_HASH").ok().or_else(|| {
        let out = std::process::Command::new("git")
            .args(["config", "--get", "init.defaultObjectFormat"])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    });
    match named.as_deref() {
        Some("sha256") => gix_hash::Kind::Sha256,
        _ => gix_hash::Kind::Sha1,
    }
}

/// After a push into a repository whose HEAD names no branch and whose only branches are the
/// ones this push created: point HEAD at the first of them, as GitHub and Gitea do, so a clone
/// checks it out. Runs before the client sees the end of the response.
pub(super) fn head_to_first_branch(dir: &str, outcome: &receive::Outcome) {
    let created: Vec<&[u8]> = outcome
        .iter()
        .filter(|(command, status)| {
            **status == receive::Status::Updated
                && command.old.is_null()
                && !command.new.is_null()
                && command.name.starts_with(b"refs/heads/")
        })
        .map(|(command, _)| command.name.as_slice())
        .collect();
    crate::repo::head_to_first_created(dir, &created);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stale_staging_directories_outside_repositories_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let old = |p: &Path| {
            std::fs::create_dir_all(p).unwrap();
            let two_hours = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
            std::fs::File::open(p)
                .unwrap()
                .set_modified(two_hours)
                .unwrap();
        };
        old(&r.join("team/.berth-init-crashed"));
        old(&r.join(".berth-init-top"));
        std::fs::create_dir_all(r.join("team/.berth-init-in-flight")).unwrap();
        // Inside a repository: not ours to judge.
        for d in ["repo.git/objects", "repo.git/refs"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::write(r.join("repo.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        old(&r.join("repo.git/.berth-init-inside"));
        // A link is not followed.
        let outside = tempfile::tempdir().unwrap();
        old(&outside.path().join(".berth-init-elsewhere"));
        std::os::unix::fs::symlink(outside.path(), r.join("link")).unwrap();

        let mut removed = remove_stale_staging(r);
        removed.sort();
        assert_eq!(
            removed,
            vec![
                r.join(".berth-init-top"),
                r.join("team/.berth-init-crashed")
            ]
        );
        assert!(r.join("team/.berth-init-in-flight").is_dir());
        assert!(r.join("repo.git/.berth-init-inside").is_dir());
        assert!(outside.path().join(".berth-init-elsewhere").is_dir());
    }

    #[test]
    fn empty_advertisement_is_an_empty_repositorys() {
        let adv = empty_advertisement(0, &receive::Environment::default(), gix_hash::Kind::Sha1);
        let text = String::from_utf8_lossy(&adv);
        assert!(
            text.starts_with(&format!(
                "{:04x}0000000000000000000000000000000000000000 capabilities^{{}}\0report-status ",
                u16::try_from(adv.len() - 4).unwrap()
            )),
            "{text:?}"
        );
        assert!(text.ends_with("\n0000"), "{text:?}");
        let v1 = empty_advertisement(1, &receive::Environment::default(), gix_hash::Kind::Sha1);
        assert!(v1.starts_with(b"000eversion 1\n"));
    }
}
