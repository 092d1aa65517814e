//! From a URL path to a repository under the root, without escaping it; the repository name
//! rule; the creation of a repository by its first push (`--auto-init`, or `C` in the access
//! rules), the empty advertisement a missing one answers before that, and its HEAD on the
//! first branch pushed.
//!
//! **Name rule** (every request): the decoded path is at most [`MAX_NAME`] bytes of `/`-separated
//! segments, each non-empty, of ASCII letters, digits, `.`, `_` and `-`, not starting with `.`
//! or `-`. So no newline, escape sequence, space, option-like `-x` or hidden `.x` segment ever
//! reaches a file name, a git command line or a log line.

use super::*;

/// The longest repository name (decoded URL path), in bytes.
pub(super) const MAX_NAME: usize = 255;

/// Whether `name` (decoded) follows the name rule; the reason when not.
pub(super) fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty");
    }
    if name.len() > MAX_NAME {
        return Err("longer than 255 bytes");
    }
    for seg in name.split('/') {
        match seg.as_bytes().first() {
            None => return Err("absolute or empty segment"),
            Some(b'.') if seg == "." || seg == ".." => return Err("'.' or '..' segment"),
            Some(b'.' | b'-') => return Err("a segment starts with '.' or '-'"),
            Some(_) => {}
        }
        if !seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err("only letters, digits, '.', '_' and '-' in a segment");
        }
    }
    Ok(())
}

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
    check_name(&name).map_err(Reject::BadPath)?;
    Ok(name.split('/').collect())
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
    /// The repository `repo` (URL name) for `service`: resolved under the root, with the
    /// access rules applied when there are any. Creates nothing.
    pub(super) fn target(
        &self,
        repo: &str,
        service: Service,
        identity: Option<&Identity>,
    ) -> Result<Target, Reject> {
        let resolved = resolve(&self.root, repo)?;
        let exists = matches!(resolved, Resolved::Repo(_));
        let may_create = match (self.current_rules(), identity) {
            (Some(rules), Some(who)) => {
                self.authorize(&rules, repo, service, who, exists)?;
                true
            }
            _ => self.auto_init && repo.ends_with(".git"),
        };
        let path = match resolved {
            Resolved::Repo(p) => return Ok(Target::Repo(p)),
            Resolved::Missing(p) => p,
        };
        if !(may_create && service == Service::ReceivePack) {
            return Err(Reject::NotARepository(repo.to_owned()));
        }
        // `team/app` names `team/app.git` once created, as `resolve` tries it.
        Ok(Target::Creatable(if repo.ends_with(".git") {
            path
        } else {
            let mut p = path.into_os_string();
            p.push(".git");
            PathBuf::from(p)
        }))
    }

    /// Create the bare repository `path` for `repo` (a [`Target::Creatable`]); a failure
    /// leaves no directory behind.
    pub(super) async fn create(&self, repo: &str, path: &Path) -> Result<PathBuf, Reject> {
        let _guard = self.init_lock.lock().await;
        // Another request may have created it meanwhile.
        if let Resolved::Repo(p) = resolve(&self.root, repo)? {
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
        let cleanup = |why: String| {
            if top.starts_with(&self.root) && top != self.root {
                let _ = std::fs::remove_dir_all(&top);
            }
            Reject::Init(why)
        };
        let parent = path.parent().unwrap_or(&self.root).to_owned();
        if let Err(e) = std::fs::create_dir_all(&parent) {
            tracing::warn!(target: "berth::serve", repo = %Escaped::token(repo), error = %e, "cannot create the repository's directory");
            return Err(cleanup("cannot create its directory".into()));
        }
        let out = tokio::process::Command::new("git")
            .args(["init", "--quiet", "--bare", "--"])
            .arg(path)
            .stdin(std::process::Stdio::null())
            .output()
            .await;
        let out = match out {
            Ok(o) => o,
            Err(e) => return Err(cleanup(format!("cannot run git init: {e}"))),
        };
        if !out.status.success() {
            // The details name server paths: for the log, not the client.
            tracing::warn!(
                target: "berth::serve",
                repo = %Escaped::token(repo),
                stderr = %Escaped::text(String::from_utf8_lossy(&out.stderr).trim()),
                "git init --bare failed"
            );
            return Err(cleanup("git init --bare failed".into()));
        }
        match resolve(&self.root, repo)? {
            Resolved::Repo(p) => {
                tracing::info!(target: "berth::serve", repo = %Escaped::token(repo), path = %Escaped::text(&p.display().to_string()), "created repository");
                if let (Some(c), Some(name)) = (self.cluster.get(), super::cluster::repo_name(repo))
                {
                    c.created(&name, &p).await;
                }
                Ok(p)
            }
            Resolved::Missing(_) => Err(cleanup("repository vanished after init".into())),
        }
    }
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
    head_to_first_created(dir, &created);
}

/// [`head_to_first_branch`] for the branches `created` (full names, in push order) by a push
/// into `dir`: also run by a cluster's replicas, which apply the same pushes.
pub(super) fn head_to_first_created(dir: &str, created: &[&[u8]]) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_rule() {
        for good in [
            "a.git",
            "team/app.git",
            "team/app",
            "A_b-c.1/x",
            &"x".repeat(255),
        ] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "/abs",
            "a//b",
            "a/",
            ".",
            "..",
            "a/../b",
            ".hidden.git",
            "team/.git",
            "-upload-pack.git",
            "team/-x",
            "a\nb",
            "a\u{1b}[31m",
            "sp ace",
            "tab\t",
            "back\\slash",
            "nul\0",
            "ünïcode",
            "\u{202e}evil",
            "q?uery",
            &"x".repeat(256),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
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
