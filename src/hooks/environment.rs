//! Which of the receiving process's own environment variables the processes a push starts
//! (hooks, `git maintenance`, the push-to-checkout `git` commands) see: all of them, as git's
//! receive-pack passes them on ([`HookEnvironment::Inherit`], and
//! [`HookEnvironment::InheritWithGitDir`] for `berth receive-pack`), or a clean environment ([`HookEnvironment::Clean`], `berth serve`), so that a server's secrets
//! never reach a hook.
//!
//! A clean environment keeps, of the server's variables, only
//! - the base a hook needs to run: `PATH`, `HOME`, `USER`, `LOGNAME`, `TMPDIR`, `TZ`, `LANG`,
//!   `LANGUAGE` and `LC_*`;
//! - the `GIT_*` variables that configure git itself, so that a `git` run by a hook behaves as
//!   the server's own: the configuration files and `-c` settings (`GIT_CONFIG_NOSYSTEM`,
//!   `GIT_CONFIG_SYSTEM`, `GIT_CONFIG_GLOBAL`, `GIT_CONFIG_PARAMETERS`, `GIT_CONFIG_COUNT`,
//!   `GIT_CONFIG_KEY_<n>`, `GIT_CONFIG_VALUE_<n>`), `GIT_EXEC_PATH`, `GIT_TEMPLATE_DIR`,
//!   `GIT_ATTR_NOSYSTEM`, `GIT_NAMESPACE`, `GIT_ALTERNATE_OBJECT_DIRECTORIES`,
//!   `GIT_CEILING_DIRECTORIES`, `GIT_DISCOVERY_ACROSS_FILESYSTEM`, `GIT_DEFAULT_HASH`,
//!   `GIT_DEFAULT_REF_FORMAT`, the author identity and dates (`GIT_AUTHOR_NAME`,
//!   `GIT_AUTHOR_EMAIL`, `GIT_AUTHOR_DATE`, `GIT_COMMITTER_DATE`), the transport settings a
//!   mirroring hook needs (`GIT_SSH`, `GIT_SSH_COMMAND`, `GIT_SSH_VARIANT`, `GIT_ASKPASS`,
//!   `GIT_TERMINAL_PROMPT`, `GIT_ALLOW_PROTOCOL`, `GIT_USER_AGENT`, `GIT_HTTP_USER_AGENT`) and
//!   git's diagnostics (`GIT_TRACE*`, `GIT_TEST_*`). This is a list, not the `GIT_` prefix:
//!   a secret may well be called `GIT_TOKEN`;
//! - the names the operator allows (`berth serve --hook-env NAME`).
//!
//! Everything a session itself gives its hooks (`GIT_DIR`, the quarantine's object
//! directories, push options, push certificate variables, `GIT_PROTOCOL`, `REMOTE_USER`,
//! `REMOTE_ADDR`, the committer identity) is set over that, whichever variant.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::Arc;

/// The server's variables a clean environment keeps: exact names.
const BASE: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TZ", "LANG", "LANGUAGE",
];

/// git's own configuration variables a clean environment keeps: exact names.
const GIT: &[&str] = &[
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "GIT_ATTR_NOSYSTEM",
    "GIT_NAMESPACE",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_DEFAULT_HASH",
    "GIT_DEFAULT_REF_FORMAT",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_DATE",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_SSH_VARIANT",
    "GIT_ASKPASS",
    "GIT_TERMINAL_PROMPT",
    "GIT_ALLOW_PROTOCOL",
    "GIT_USER_AGENT",
    "GIT_HTTP_USER_AGENT",
];

/// Prefixes of kept variables: the locale, git's numbered `-c` settings, its diagnostics.
const PREFIXES: &[&str] = &[
    "LC_",
    "GIT_CONFIG_KEY_",
    "GIT_CONFIG_VALUE_",
    "GIT_TRACE",
    "GIT_TEST_",
];

/// What the processes a push starts take from the receiving process's environment.
#[derive(Debug, Clone, Default)]
pub enum HookEnvironment {
    /// Everything, as git's receive-pack passes it on; each process is given `GIT_DIR=.`.
    #[default]
    Inherit,
    /// Everything, from a process whose own environment already says `GIT_DIR=.` and that
    /// serves one repository: `berth receive-pack` sets it at its start, as git's receive-pack
    /// sets it in its own environment (`enter_repo`). A process started in the git directory
    /// then needs no variable of its own, and std hands it the environment as it is instead of
    /// copying the whole of it for every hook (~7 µs a hook, 1 point of the `update` hook's
    /// cost over spawning it, benches/README.md).
    InheritWithGitDir,
    /// Only these variables (chosen by [`HookEnvironment::clean`]), then the session's own.
    Clean {
        /// The variables kept, with their values, in the order they were read.
        kept: Arc<[(OsString, OsString)]>,
        /// `git` found on the kept `PATH` when the environment was made, if it was.
        git: Option<Arc<Path>>,
    },
}

/// Why a variable of the server's is kept in a clean environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// A hook needs it to run at all (`PATH`, `HOME`, the locale, …).
    Base,
    /// It configures git.
    Git,
    /// The operator named it (`--hook-env`).
    Allowed,
}

/// Why `name` stays in a clean environment, if it does, given the operator's `allow` list.
pub fn kept(name: &OsStr, allow: &[String]) -> Option<Kept> {
    let name = name.to_str()?;
    if allow.iter().any(|a| a == name) {
        Some(Kept::Allowed)
    } else if BASE.contains(&name) || name.starts_with("LC_") {
        Some(Kept::Base)
    } else if GIT.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p)) {
        Some(Kept::Git)
    } else {
        None
    }
}

impl HookEnvironment {
    /// A clean environment of `vars` (a process's environment): those [`kept`] with `allow`.
    pub fn clean(vars: impl IntoIterator<Item = (OsString, OsString)>, allow: &[String]) -> Self {
        let kept: Vec<_> = vars
            .into_iter()
            .filter(|(k, _)| kept(k, allow).is_some())
            .collect();
        let git = kept
            .iter()
            .find(|(k, _)| k == "PATH")
            .and_then(|(_, path)| on_path(path, "git"))
            .map(Arc::from);
        HookEnvironment::Clean {
            kept: kept.into(),
            git,
        }
    }

    /// The program to run for `git` in this environment: its path when the environment sets
    /// `PATH` (std's spawn, asked to look a program up on a `PATH` the child is given, forks
    /// instead of using `posix_spawn`, and a fork copies a large server's page tables for each
    /// command), else `git`, looked up as usual.
    pub fn git_program(&self) -> &OsStr {
        match self {
            HookEnvironment::Clean { git: Some(git), .. } => git.as_os_str(),
            _ => OsStr::new("git"),
        }
    }

    /// A clean environment of this process's variables (read now).
    pub fn clean_from_process(allow: &[String]) -> Self {
        Self::clean(std::env::vars_os(), allow)
    }

    /// Make `process` start from this environment; call it before setting the process's own
    /// variables (a clean environment clears those set before).
    pub fn apply(&self, process: &mut std::process::Command) {
        if let HookEnvironment::Clean { kept, .. } = self {
            process.env_clear();
            process.envs(kept.iter().map(|(k, v)| (k, v)));
        }
    }

    /// Run `process` in `git_dir` with `GIT_DIR=.`, as git runs its hooks and its own commands
    /// (the variable only where this environment does not carry it already).
    pub fn in_git_dir(&self, process: &mut std::process::Command, git_dir: &std::path::Path) {
        process.current_dir(git_dir);
        if !matches!(self, HookEnvironment::InheritWithGitDir) {
            process.env("GIT_DIR", ".");
        }
    }
}

/// The executable `program` the child's own lookup would find on `path` (a `PATH` value), or
/// `None` when that cannot be said here: a relative entry before it is relative to the child's
/// working directory (each repository), so the lookup is left to the child then. (The `which`
/// crate resolves relative entries against one directory given up front, which is not this.)
fn on_path(path: &OsStr, program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    for dir in std::env::split_paths(path) {
        if !dir.is_absolute() {
            return None;
        }
        let candidate = dir.join(program);
        if std::fs::metadata(&candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        {
            return Some(candidate);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn a_clean_environment_keeps_the_base_gits_configuration_and_the_allowed_names_only() {
        let server = vars(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/srv/git"),
            ("LC_ALL", "C"),
            ("TZ", "UTC"),
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("GIT_CONFIG_KEY_0", "core.bare"),
            ("GIT_CONFIG_VALUE_0", "true"),
            ("GIT_EXEC_PATH", "/usr/lib/git-core"),
            ("GIT_TRACE2_EVENT", "/tmp/t"),
            ("GIT_TOKEN", "secret"),
            ("GIT_DIR", "/elsewhere"),
            ("GIT_QUARANTINE_PATH", "/elsewhere/objects/q"),
            ("GIT_PROTOCOL", "version=2"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("DATABASE_URL", "postgres://u:p@h/db"),
            ("BERTH_TEST_SECRET", "hunter2"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
        ]);
        let names = |env: &HookEnvironment| match env {
            HookEnvironment::Clean { kept, .. } => kept
                .iter()
                .map(|(k, _)| k.to_string_lossy().into_owned())
                .collect::<Vec<_>>(),
            HookEnvironment::Inherit | HookEnvironment::InheritWithGitDir => panic!("not clean"),
        };
        let clean = HookEnvironment::clean(server.clone(), &[]);
        assert_eq!(
            names(&clean),
            [
                "PATH",
                "HOME",
                "LC_ALL",
                "TZ",
                "GIT_CONFIG_NOSYSTEM",
                "GIT_CONFIG_KEY_0",
                "GIT_CONFIG_VALUE_0",
                "GIT_EXEC_PATH",
                "GIT_TRACE2_EVENT",
            ]
        );
        let allowed = HookEnvironment::clean(server, &["BERTH_TEST_SECRET".to_owned()]);
        assert!(names(&allowed).contains(&"BERTH_TEST_SECRET".to_owned()));
        assert_eq!(names(&allowed).len(), 10);
        assert_eq!(kept(OsStr::new("PATH"), &[]), Some(Kept::Base));
        assert_eq!(kept(OsStr::new("GIT_SSH_COMMAND"), &[]), Some(Kept::Git));
        assert_eq!(kept(OsStr::new("GIT_TOKEN"), &[]), None);
        assert_eq!(
            kept(OsStr::new("GIT_TOKEN"), &["GIT_TOKEN".to_owned()]),
            Some(Kept::Allowed)
        );
        // A name that is not UTF-8 is nobody's variable here.
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(kept(OsStr::from_bytes(b"PATH\xff"), &[]), None);
    }

    #[test]
    fn only_an_environment_that_carries_git_dir_leaves_the_variable_to_it() {
        let dir = std::path::Path::new("/srv/r.git");
        for (environment, set) in [
            (HookEnvironment::Inherit, true),
            (HookEnvironment::InheritWithGitDir, false),
            (HookEnvironment::clean(vars(&[("PATH", "/bin")]), &[]), true),
        ] {
            let mut p = std::process::Command::new("true");
            environment.in_git_dir(&mut p, dir);
            assert_eq!(p.get_current_dir(), Some(dir));
            let git_dir = p.get_envs().find(|(k, _)| *k == "GIT_DIR");
            assert_eq!(git_dir.is_some(), set, "{environment:?}");
            if let Some((_, v)) = git_dir {
                assert_eq!(v, Some(OsStr::new(".")));
            }
        }
    }

    #[test]
    fn inherit_leaves_the_command_alone_and_clean_replaces_its_environment() {
        let mut inherit = std::process::Command::new("env");
        HookEnvironment::Inherit.apply(&mut inherit);
        assert_eq!(inherit.get_envs().count(), 0);
        let mut clean = std::process::Command::new("/usr/bin/env");
        clean.env("BEFORE", "dropped");
        HookEnvironment::clean(vars(&[("PATH", "/bin"), ("SECRET", "x")]), &[]).apply(&mut clean);
        clean.env("GIT_DIR", ".");
        let envs: Vec<_> = clean
            .get_envs()
            .map(|(k, v)| (k.to_owned(), v.map(OsStr::to_owned)))
            .collect();
        assert_eq!(
            envs,
            [
                ("GIT_DIR".into(), Some(".".into())),
                ("PATH".into(), Some("/bin".into()))
            ]
        );
        let out = clean.output().unwrap();
        let mut seen: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        seen.sort();
        assert_eq!(seen, ["GIT_DIR=.", "PATH=/bin"]);
    }

    /// `git` is found on the kept `PATH` once, so that spawning it needs no lookup.
    #[test]
    fn a_clean_environment_finds_git_on_its_path() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (empty, bin) = (dir.path().join("empty"), dir.path().join("bin"));
        std::fs::create_dir(&empty).unwrap();
        std::fs::create_dir(&bin).unwrap();
        let git = bin.join("git");
        std::fs::write(&git, "#!/bin/sh\n").unwrap();
        // Not executable: passed over.
        std::fs::write(empty.join("git"), "").unwrap();
        std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([&empty, &bin]).unwrap();
        let clean = HookEnvironment::clean([(OsString::from("PATH"), path)], &[]);
        assert_eq!(clean.git_program(), git.as_os_str());
        let nowhere = HookEnvironment::clean([(OsString::from("PATH"), empty.clone().into())], &[]);
        assert_eq!(nowhere.git_program(), "git");
        // A relative entry first: the child's lookup depends on its working directory.
        let relative = std::env::join_paths([std::path::Path::new("bin"), &bin]).unwrap();
        let relative = HookEnvironment::clean([(OsString::from("PATH"), relative)], &[]);
        assert_eq!(relative.git_program(), "git");
        assert_eq!(HookEnvironment::Inherit.git_program(), "git");
    }
}
