//! From a URL path to a repository under the root, without escaping it, and the creation of
//! a repository on its first push (`--auto-init`).

use super::*;

/// Where a repository name leads under the root.
#[derive(Debug)]
pub(super) enum Resolved {
    /// An existing git directory (canonical, under the root).
    Repo(PathBuf),
    /// Nothing there yet; the path a new repository would take.
    Missing(PathBuf),
}

/// The relative path a URL's repository part names: decoded, no empty, `.` or `..` segments,
/// so never absolute and never upwards.
pub(super) fn relative_path(repo: &str) -> Result<PathBuf, Reject> {
    let name = percent_decode(repo).ok_or(Reject::BadPath("bad escape or not UTF-8"))?;
    if name.is_empty() {
        return Err(Reject::BadPath("empty"));
    }
    let mut rel = PathBuf::new();
    for seg in name.split('/') {
        match seg {
            "" => return Err(Reject::BadPath("absolute or empty segment")),
            "." | ".." => return Err(Reject::BadPath("'.' or '..' segment")),
            s if s.contains('\0') || s.contains('\\') => {
                return Err(Reject::BadPath("NUL or backslash"));
            }
            s => rel.push(s),
        }
    }
    Ok(rel)
}

/// Whether `p` is a git directory (as git's `is_git_directory`, without following `.git` files).
pub(super) fn is_git_dir(p: &Path) -> bool {
    p.join("HEAD").is_file() && p.join("objects").is_dir() && p.join("refs").is_dir()
}

/// Resolve `repo` (from the URL) under `root` (canonical) as git's `enter_repo` tries names:
/// `<p>/.git`, `<p>`, `<p>.git/.git`, `<p>.git`. Every existing candidate is canonicalized and
/// must stay under the root, so a symlink cannot lead out of it.
pub(super) fn resolve(root: &Path, repo: &str) -> Result<Resolved, Reject> {
    let rel = relative_path(repo)?;
    let base = root.join(&rel);
    let with_git = {
        let mut s = base.clone().into_os_string();
        s.push(".git");
        PathBuf::from(s)
    };
    let candidates = [
        base.join(".git"),
        base.clone(),
        with_git.join(".git"),
        with_git,
    ];
    for c in &candidates {
        if std::fs::symlink_metadata(c).is_err() {
            continue;
        }
        let canon = c.canonicalize().map_err(|_| Reject::Escapes)?;
        if !canon.starts_with(root) {
            return Err(Reject::Escapes);
        }
        if canon.is_dir() && is_git_dir(&canon) {
            return Ok(Resolved::Repo(canon));
        }
    }
    // Nothing usable exists: check that a new repository there would stay under the root and
    // not land inside another repository.
    let mut ancestor = base.parent();
    while let Some(a) = ancestor {
        if a.exists() {
            let canon = a.canonicalize().map_err(|_| Reject::Escapes)?;
            if !canon.starts_with(root) {
                return Err(Reject::Escapes);
            }
            break;
        }
        ancestor = a.parent();
    }
    let mut a = base.parent();
    while let Some(p) = a {
        if !p.starts_with(root) || p == root {
            break;
        }
        if is_git_dir(p) {
            return Err(Reject::NotARepository(repo.to_owned()));
        }
        a = p.parent();
    }
    if std::fs::symlink_metadata(&base).is_ok() {
        // Something that is not a repository is in the way.
        return Err(Reject::NotARepository(repo.to_owned()));
    }
    Ok(Resolved::Missing(base))
}

impl Server {
    /// The repository for `repo`, creating it when this is a push and auto-init is on.
    pub(super) async fn repository(&self, repo: &str, service: Service) -> Result<PathBuf, Reject> {
        let resolved = resolve(&self.root, repo)?;
        let path = match resolved {
            Resolved::Repo(p) => return Ok(p),
            Resolved::Missing(p) => p,
        };
        if !(self.auto_init && service == Service::ReceivePack && repo.ends_with(".git")) {
            return Err(Reject::NotARepository(repo.to_owned()));
        }
        let _guard = self.init_lock.lock().await;
        // Another request may have created it meanwhile.
        if let Resolved::Repo(p) = resolve(&self.root, repo)? {
            return Ok(p);
        }
        let parent = path.parent().unwrap_or(&self.root).to_owned();
        std::fs::create_dir_all(&parent).map_err(|e| Reject::Init(e.to_string()))?;
        let out = tokio::process::Command::new("git")
            .args(["init", "--quiet", "--bare"])
            .arg(&path)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| Reject::Init(format!("cannot run git init: {e}")))?;
        if !out.status.success() {
            // The details name server paths: for the log, not the client.
            tracing::warn!(
                target: "berth::serve",
                repo,
                stderr = %String::from_utf8_lossy(&out.stderr).trim(),
                "git init --bare failed"
            );
            return Err(Reject::Init("git init --bare failed".into()));
        }
        tracing::info!(target: "berth::serve", repo, path = %path.display(), "created repository");
        match resolve(&self.root, repo)? {
            Resolved::Repo(p) => Ok(p),
            Resolved::Missing(_) => Err(Reject::Init("repository vanished after init".into())),
        }
    }
}
