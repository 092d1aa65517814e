//! Finding and opening the repository a push goes to, as git's `enter_repo` does, and refusing
//! repository formats berth cannot yet write correctly.

#[cfg(feature = "serve")]
mod head;
pub mod config;
pub mod name;
pub mod policy;

#[cfg(feature = "serve")]
pub(crate) use head::head_to_first_created;

// The server's (and the fuzz targets') repository names; unused by the receive-pack alone.
#[cfg_attr(not(feature = "serve"), allow(unused_imports))]
pub use name::{Name, NameError};

use std::path::{Path, PathBuf};

use self::config::{Config, Environment, Warning};

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
    /// What git would have warned about while reading the configuration; the session writes
    /// them to its stderr ([`config::write_warnings`]).
    pub config_warnings: Vec<Warning>,
    /// Where its refs live (`extensions.refStorage`).
    pub ref_format: RefFormat,
    /// Its object format (`extensions.objectFormat`): the hash of every object id it stores,
    /// advertises and accepts.
    pub object_format: gix_hash::Kind,
    /// `extensions.compatObjectFormat`, if set: git master keeps no compatibility map for
    /// objects that arrive in a kept pack, so pushes into it keep every pack (see
    /// [`crate::receive`]).
    pub compat_object_format: Option<gix_hash::Kind>,
}

impl Repository {
    /// Open the repository named by `dir` as `git receive-pack <dir>` would: a trailing `/` is
    /// ignored, a leading `~/` is the home directory, and `<dir>/.git`, `<dir>`, `<dir>.git/.git`
    /// and `<dir>.git` are tried in that order; a `.git` file is followed.
    /// `env` is what the configuration loader takes from the environment; its `HOME` also
    /// expands a leading `~/`.
    pub fn open(dir: &str, env: &Environment) -> Result<Self, Error> {
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
            let home = env.home.as_ref().ok_or_else(not_repo)?;
            base = format!("{}/{rest}", home.display());
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
        let loaded = Config::load(&git_dir, env)?;
        let Format {
            refs: ref_format,
            objects: object_format,
            compat: compat_object_format,
        } = check_format(&loaded.file)?;
        Ok(Repository {
            objects_dir: git_dir.join("objects"),
            git_dir,
            config: loaded.config,
            config_file: loaded.file,
            config_warnings: loaded.warnings,
            ref_format,
            object_format,
            compat_object_format,
        })
    }

    /// Whether the main worktree is bare (`core.bare`, else guessed from the directory name).
    pub fn is_bare(&self) -> bool {
        self.config
            .storage
            .bare
            .unwrap_or_else(|| self.git_dir.file_name().is_none_or(|n| n != ".git"))
    }

    /// The object its `HEAD` names when it is detached (a value, not a symbolic ref): a file
    /// in the files backend, a record of the stack in reftable.
    pub fn detached_head(&self) -> Option<gix_hash::ObjectId> {
        if self.ref_format == RefFormat::Reftable {
            let stack = crate::reftable::Stack::open(self.git_dir.join("reftable")).ok()?;
            return match stack.read_ref(b"HEAD").ok()?? {
                crate::reftable::RefValue::Val1(id) | crate::reftable::RefValue::Val2(id, _) => {
                    Some(id)
                }
                _ => None,
            };
        }
        let content = std::fs::read(self.git_dir.join("HEAD")).ok()?;
        let hex = content.strip_suffix(b"\n").unwrap_or(&content);
        gix_hash::ObjectId::from_hex(hex)
            .ok()
            .filter(|id| id.kind() == self.object_format)
    }

    /// The repository's shallow commits (`$GIT_DIR/shallow`), in file order.
    pub fn shallow(&self) -> Vec<gix_hash::ObjectId> {
        crate::objects::incomplete::recorded_shallow(&self.git_dir, self.object_format)
    }

    /// Settle a push's list of commits that needed new shallow roots
    /// ([`crate::objects::incomplete::Pending::settle`]) against the shallow roots recorded now,
    /// after its ref update. A failure is logged, not returned: the push is over, and the file
    /// stays, still read as part of the list (nothing is taken as complete that is not).
    pub fn settle_incomplete(&self, pending: crate::objects::incomplete::Pending) {
        if let Err(e) = pending.settle(&self.shallow(), &self.git_dir, self.config.durability) {
            tracing::error!(error = %crate::escape::Escaped::text(&e.to_string()), "cannot settle the list of commits that needed shallow roots");
        }
    }

    /// A quarantine for objects pushed into this repository (git's `tmp_objdir`), with the
    /// permissions and durability its configuration asks for.
    pub fn quarantine(&self) -> std::io::Result<crate::objects::ingest::Quarantine> {
        Ok(crate::objects::ingest::Quarantine::create(&self.objects_dir)?
            .with_git_dir(&self.git_dir)
            .with_shared_repository(self.config.ingest.shared_repository)
            .with_durability(self.config.durability))
    }

    /// How a pack pushed into this repository is taken in, as its configuration asks
    /// (`receive.*` and `transfer.*`, `pack.writeReverseIndex`, `core.sharedRepository`,
    /// durability): by a client's push, and alike by a replica taking the same pack from the
    /// node that accepted it. `shallow`: the push's shallow commits, besides the repository's.
    pub fn ingest_options(&self, shallow: &[gix_hash::ObjectId]) -> crate::objects::ingest::Options {
        let ingest = &self.config.ingest;
        crate::objects::ingest::Options {
            max_input_size: ingest.max_input_size,
            thread_limit: None,
            // With `extensions.compatObjectFormat`, git's unpack-objects would record each
            // loose object's compatibility id (`loose-object-idx`), which berth does not write;
            // index-pack records none, so keep the pack as index-pack would.
            unpack_limit: if self.compat_object_format.is_some() {
                0
            } else {
                ingest.unpack_limit
            },
            reject_thin_pack: false,
            fsck: ingest.fsck_objects.then(|| ingest.fsck.clone()),
            max_object_size: ingest.max_object_size,
            shallow: self.shallow().into_iter().chain(shallow.iter().copied()).collect(),
            object_format: self.object_format,
            files: crate::objects::pack_files::Options {
                write_reverse_index: ingest.write_reverse_index,
                shared: ingest.shared_repository,
                durability: self.config.durability,
                loose_compression: ingest.loose_compression,
            },
        }
    }

    /// Add `roots` to `$GIT_DIR/shallow`, under git's `shallow.lock`.
    pub fn add_shallow(&self, roots: &[gix_hash::ObjectId]) -> std::io::Result<()> {
        let mut all = self.shallow();
        all.extend(
            roots
                .iter()
                .filter(|r| !all.contains(r))
                .copied()
                .collect::<Vec<_>>(),
        );
        all.sort();
        let lock_path = self.git_dir.join("shallow.lock");
        let mut lock = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock_path)?;
        let content: String = all.iter().map(|id| format!("{id}\n")).collect();
        let written =
            std::io::Write::write_all(&mut lock, content.as_bytes()).and_then(|_| lock.sync_all());
        if let Err(e) =
            written.and_then(|_| std::fs::rename(&lock_path, self.git_dir.join("shallow")))
        {
            let _ = std::fs::remove_file(&lock_path);
            return Err(e);
        }
        Ok(())
    }

    /// Every worktree of the repository: the main one, then the linked ones
    /// (`$GIT_DIR/worktrees/<id>`), with the branch each has checked out.
    pub fn worktrees(&self) -> Vec<Worktree> {
        let mut out = Vec::new();
        let bare = self.is_bare();
        let main_path = self
            .config_file
            .string("core.worktree")
            .map(|p| self.git_dir.join(p.to_string()))
            .or_else(|| {
                (!bare)
                    .then(|| self.git_dir.parent().map(Path::to_owned))
                    .flatten()
            });
        out.push(Worktree {
            path: if bare { None } else { main_path },
            git_dir: self.git_dir.clone(),
            head: read_symbolic_head(&self.git_dir, self.ref_format),
        });
        if let Ok(dir) = std::fs::read_dir(self.git_dir.join("worktrees")) {
            for entry in dir.flatten() {
                let wt_git_dir = entry.path();
                let path = std::fs::read_to_string(wt_git_dir.join("gitdir"))
                    .ok()
                    .and_then(|p| Path::new(p.trim_end()).parent().map(Path::to_owned));
                out.push(Worktree {
                    path,
                    head: read_symbolic_head(&wt_git_dir, self.ref_format),
                    git_dir: wt_git_dir,
                });
            }
        }
        out
    }
}

/// A worktree of the repository.
#[derive(Debug, Clone)]
pub struct Worktree {
    /// Its working directory; `None` for a bare main worktree.
    pub path: Option<PathBuf>,
    /// Its git directory (the repository's, or `worktrees/<id>` for a linked one).
    pub git_dir: PathBuf,
    /// The branch its HEAD names, if HEAD is symbolic.
    pub head: Option<String>,
}

impl Worktree {
    /// Whether it has no working directory.
    pub fn is_bare(&self) -> bool {
        self.path.is_none()
    }
}

/// The branch the `HEAD` of the worktree whose git directory is `git_dir` names: a file in the
/// files backend, a record of that worktree's own stack in reftable.
fn read_symbolic_head(git_dir: &Path, format: RefFormat) -> Option<String> {
    if format == RefFormat::Reftable {
        let stack = crate::reftable::Stack::open(git_dir.join("reftable")).ok()?;
        return match stack.read_ref(b"HEAD").ok()?? {
            crate::reftable::RefValue::Symref(target) => String::from_utf8(target.into()).ok(),
            _ => None,
        };
    }
    let content = std::fs::read_to_string(git_dir.join("HEAD")).ok()?;
    content
        .strip_prefix("ref: ")
        .map(|r| r.trim_end().to_owned())
}

/// Where a repository keeps its refs (`extensions.refStorage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefFormat {
    /// Loose files and `packed-refs`.
    Files,
    /// A reftable stack in `$GIT_DIR/reftable`.
    Reftable,
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

/// Whether `path` is a git directory (as git's `is_git_directory`, without following `.git` files).
pub(crate) fn is_git_dir(path: &Path) -> bool {
    path.join("objects").is_dir() && path.join("refs").is_dir() && path.join("HEAD").is_file()
}

/// The formats a repository's extensions declare.
struct Format {
    refs: RefFormat,
    objects: gix_hash::Kind,
    compat: Option<gix_hash::Kind>,
}

/// A hash algorithm by git's name for it (`hash_algo_by_name`).
fn hash_by_name(name: &[u8]) -> Option<gix_hash::Kind> {
    match name {
        b"sha1" => Some(gix_hash::Kind::Sha1),
        b"sha256" => Some(gix_hash::Kind::Sha256),
        _ => None,
    }
}

/// The repository's formats, or why berth cannot write it (git's `check_repo_format` wording
/// for values git itself refuses).
fn check_format(file: &gix_config::File) -> Result<Format, Error> {
    let objects = match file.string("extensions.objectFormat") {
        None => gix_hash::Kind::Sha1,
        Some(value) => hash_by_name(&value).ok_or_else(|| {
            Error::Unsupported(format!(
                "invalid value for 'extensions.objectformat': '{value}'"
            ))
        })?,
    };
    let compat = match file.string("extensions.compatObjectFormat") {
        None => None,
        Some(value) => Some(hash_by_name(&value).ok_or_else(|| {
            Error::Unsupported(format!(
                "invalid value for 'extensions.compatobjectformat': '{value}'"
            ))
        })?),
    };
    let refs = match file.string("extensions.refStorage") {
        None => RefFormat::Files,
        Some(s) if s.eq_ignore_ascii_case(b"files") => RefFormat::Files,
        Some(s) if s.eq_ignore_ascii_case(b"reftable") => RefFormat::Reftable,
        Some(storage) => {
            return Err(Error::Unsupported(format!(
                "berth does not support repositories with extensions.refStorage={storage}; refusing to write"
            )));
        }
    };
    Ok(Format {
        refs,
        objects,
        compat: compat.filter(|&c| c != objects),
    })
}
