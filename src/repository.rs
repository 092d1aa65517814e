//! Finding and opening the repository a push goes to, as git's `enter_repo` does, and refusing
//! repository formats berth cannot yet write correctly.

use std::path::{Path, PathBuf};

use crate::config::{self, Config};

/// Why the repository cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No repository at that path (git's wording).
    #[error("'{0}' does not appear to be a git repository")]
    NotARepository(String),
    /// A format berth does not write yet.
    #[error("{0}")]
    Unsupported(String),
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] config::Error),
}

/// An opened repository: its directories and its configuration.
pub struct Repository {
    /// The git directory, absolute.
    pub git_dir: PathBuf,
    /// `<git_dir>/objects`.
    pub objects_dir: PathBuf,
    /// What receive-pack reads from the configuration.
    pub config: Config,
    /// The whole configuration, for what is looked up by pattern (hooks).
    pub config_file: gix_config::File,
}

impl Repository {
    /// Open the repository named by `dir` as `git receive-pack <dir>` would: a trailing `/` is
    /// ignored, a leading `~/` is the home directory, and `<dir>/.git`, `<dir>`, `<dir>.git/.git`
    /// and `<dir>.git` are tried in that order; a `.git` file is followed.
    pub fn open(dir: &str) -> Result<Self, Error> {
        let not_repo = || Error::NotARepository(dir.to_owned());
        let mut base = dir.trim_end_matches('/').to_owned();
        if base.is_empty() {
            base = if dir.is_empty() {
                return Err(not_repo());
            } else {
                "/".into()
            };
        }
        if let Some(rest) = base.strip_prefix("~/") {
            let home = std::env::var("HOME").map_err(|_| not_repo())?;
            base = format!("{home}/{rest}");
        }
        let candidates = [
            format!("{base}/.git"),
            base.clone(),
            format!("{base}.git/.git"),
            format!("{base}.git"),
        ];
        let git_dir = candidates
            .iter()
            .find_map(|c| resolve_git_dir(Path::new(c)))
            .ok_or_else(not_repo)?;
        let git_dir = git_dir.canonicalize().map_err(|_| not_repo())?;
        let (config, file) = Config::load(&git_dir)?;
        check_format(&file)?;
        Ok(Repository {
            objects_dir: git_dir.join("objects"),
            git_dir,
            config,
            config_file: file,
        })
    }

    /// Whether the main worktree is bare (`core.bare`, else guessed from the directory name).
    pub fn is_bare(&self) -> bool {
        self.config
            .bare
            .unwrap_or_else(|| self.git_dir.file_name().is_none_or(|n| n != ".git"))
    }

    /// The branches checked out: `(ref name, in a non-bare worktree)` for the main worktree's
    /// HEAD and each linked worktree's HEAD.
    pub fn checked_out(&self) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        if let Some(r) = read_symbolic_head(&self.git_dir.join("HEAD")) {
            out.push((r, !self.is_bare()));
        }
        if let Ok(dir) = std::fs::read_dir(self.git_dir.join("worktrees")) {
            for entry in dir.flatten() {
                if let Some(r) = read_symbolic_head(&entry.path().join("HEAD")) {
                    out.push((r, true));
                }
            }
        }
        out
    }
}

fn read_symbolic_head(path: &Path) -> Option<String> {
    let content = std::fs::read_to_string(path).ok()?;
    content
        .strip_prefix("ref: ")
        .map(|r| r.trim_end().to_owned())
}

/// `path` if it is a git directory, or the directory a `.git` file there points to.
fn resolve_git_dir(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        let content = std::fs::read_to_string(path).ok()?;
        let target = content.strip_prefix("gitdir: ")?.trim_end();
        let target = path.parent()?.join(target);
        return is_git_dir(&target).then_some(target);
    }
    is_git_dir(path).then(|| path.to_owned())
}

fn is_git_dir(path: &Path) -> bool {
    path.join("objects").is_dir() && path.join("refs").is_dir() && path.join("HEAD").is_file()
}

fn check_format(file: &gix_config::File) -> Result<(), Error> {
    if let Some(format) = file.string("extensions.objectFormat")
        && !format.eq_ignore_ascii_case(b"sha1")
    {
        return Err(Error::Unsupported(format!(
            "berth does not yet support repositories with extensions.objectFormat={format}; refusing to write"
        )));
    }
    if let Some(storage) = file.string("extensions.refStorage")
        && !storage.eq_ignore_ascii_case(b"files")
    {
        return Err(Error::Unsupported(format!(
            "berth does not yet support repositories with extensions.refStorage={storage}; refusing to write"
        )));
    }
    Ok(())
}
