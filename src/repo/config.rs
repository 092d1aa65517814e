//! The configuration receive-pack reads, resolved once per session into a [`Config`] made of one
//! typed part per consumer.
//!
//! Sources are git's: system, global, the repository's `config`, `GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`
//! and `GIT_CONFIG_PARAMETERS` (what `git -c k=v receive-pack` leaves in the environment), through
//! `gix-config`. Values are parsed as git parses them (`builtin/receive-pack.c`,
//! `receive_pack_config`).
//!
//! Every key is declared once, in [`KEYS`]: its name, what it means, and how its value is
//! applied. Defaults live in each part's `Default`. Loading never prints: what git would warn
//! about comes back as [`Warning`]s for the session to write to its stderr.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gix_config::File;

use crate::fsync::{Components, Durability, Method};
use crate::lockfile::Timeout;
use crate::objects::fsck::Setting as FsckSetting;
use crate::objects::pack_files::SharedRepository;

/// What to do when a push touches the checked-out branch (`receive.denyCurrentBranch`,
/// `receive.denyDeleteCurrent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyAction {
    /// Not configured: refuse, with git's long explanation.
    Unconfigured,
    /// `ignore` / false.
    Ignore,
    /// `warn`: allow with a warning.
    Warn,
    /// `refuse` / true.
    Refuse,
    /// `updateInstead`: update the worktree too.
    UpdateInstead,
}

impl DenyAction {
    fn parse(value: &str) -> Result<Self, Error> {
        Ok(match value.to_ascii_lowercase().as_str() {
            "ignore" => DenyAction::Ignore,
            "warn" => DenyAction::Warn,
            "refuse" => DenyAction::Refuse,
            "updateinstead" => DenyAction::UpdateInstead,
            other => match parse_bool(other) {
                Some(true) => DenyAction::Refuse,
                Some(false) => DenyAction::Ignore,
                None => return Err(Error::BadBool(value.to_owned())),
            },
        })
    }
}

/// How ref updates are logged (`core.logAllRefUpdates`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogRefUpdates {
    /// Log nothing (the default in a bare repository).
    Never,
    /// Log branches, remote-tracking refs, notes and HEAD (the default in a non-bare repository).
    Normal,
    /// `always`: log every ref.
    Always,
}

/// A configuration value git would die on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A boolean key had a value git does not take as a boolean.
    #[error("bad boolean config value '{0}'")]
    BadBool(String),
    /// A numeric key had a value git does not take as a number.
    #[error("bad numeric config value '{0}'")]
    BadNumber(String),
    /// `core.compression` or `core.looseCompression` out of zlib's range (git's
    /// `git_default_core_config`).
    #[error("bad zlib compression level {0}")]
    BadZlibLevel(i64),
    /// The configuration could not be read.
    #[error("unable to read configuration: {0}")]
    Read(String),
    /// `receive.fsck.<msg-id>` with a severity git does not know.
    #[error("Unknown fsck message type: '{0}'")]
    FsckSeverity(String),
    /// A `receive.fsck.*` key without a value, given with `git -c`.
    #[error("unable to parse '{0}' from command-line config")]
    MissingValueParameter(String),
    /// A `core.sharedRepository` mode that does not let the owner read and write.
    #[error(transparent)]
    SharedRepository(#[from] crate::objects::pack_files::BadSharedRepository),
    /// A `reftable.*` value out of the range git accepts.
    #[error("{0}")]
    ReftableOption(String),
    /// `hook.<name>.event` for a friendly name that is a hook event's name (git master dies:
    /// `hook.<event>.enabled` and `hook.<event>.jobs` would be ambiguous).
    #[error(
        "hook friendly-name '{0}' collides with a known event name; please choose a different friendly-name"
    )]
    HookNameIsEvent(String),
    /// A `receive.fsck.*` or `hook.<name>.*` key without a value in a configuration file.
    #[error("bad config variable '{key}' in file '{file}' at line {line}")]
    MissingValue {
        /// The key, lower case.
        key: String,
        /// The file, as git names it.
        file: String,
        /// The line it is on.
        line: usize,
    },
}

impl Error {
    /// The `error: ...` line git prints before it dies of this error, if any (git's
    /// `config_error_nonbool`), without its newline.
    pub fn preamble(&self) -> Option<String> {
        match self {
            Error::MissingValueParameter(key) | Error::MissingValue { key, .. } => {
                Some(format!("error: missing value for '{key}'"))
            }
            _ => None,
        }
    }
}

/// Something git's receive-pack warns about while reading its configuration; the session
/// writes it to its stderr as `warning: <message>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning(pub String);

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "warning: {}", self.0)
    }
}

/// Write `warnings` to `out` as git does, one `warning: ...` line each.
pub fn write_warnings(out: &mut impl std::io::Write, warnings: &[Warning]) -> std::io::Result<()> {
    for w in warnings {
        writeln!(out, "{w}")?;
    }
    Ok(())
}

/// Everything receive-pack consults, read once when the session starts, one part per consumer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// What the capability advertisement offers.
    pub advertisement: Advertisement,
    /// Which ref updates are refused, and which refs are hidden.
    pub policy: RefPolicy,
    /// How the pack is received and checked.
    pub ingest: Ingest,
    /// How hooks run.
    pub hooks: HookSettings,
    /// Bounds on the request.
    pub limits: Limits,
    /// What runs after a push.
    pub housekeeping: Housekeeping,
    /// Who writes reflog entries.
    pub identity: Identity,
    /// How the repository and its refs are laid out and written.
    pub storage: Storage,
    /// What is made durable before it is published, and how (`core.fsync`,
    /// `core.fsyncMethod`): packs, loose objects, refs, reftable tables.
    pub durability: Durability,
}

/// What the capability advertisement offers ([`crate::protocol::advertise::capabilities`]),
/// and the signed-push nonce settings it implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertisement {
    /// `receive.advertiseAtomic` (default true): `atomic`.
    pub atomic: bool,
    /// `receive.advertisePushOptions` (default false): `push-options`.
    pub push_options: bool,
    /// `transfer.advertiseSID` (default false): `session-id`.
    pub session_id: bool,
    /// `repack.useDeltaBaseOffset` (default true): `ofs-delta`.
    pub delta_base_offset: bool,
    /// `receive.certNonceSeed`: enables signed pushes (`push-cert=<nonce>`).
    pub cert_nonce_seed: Option<String>,
    /// `receive.certNonceSlop`: seconds by which another request's nonce may differ.
    pub cert_nonce_slop: i64,
}

impl Default for Advertisement {
    fn default() -> Self {
        Advertisement {
            atomic: true,
            push_options: false,
            session_id: false,
            delta_base_offset: true,
            cert_nonce_seed: None,
            cert_nonce_slop: 0,
        }
    }
}

/// Which ref updates are refused ([`crate::repo::policy`] and the session's checks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefPolicy {
    /// `receive.denyDeletes`
    pub deny_deletes: bool,
    /// `receive.denyNonFastForwards`
    pub deny_non_fast_forwards: bool,
    /// `receive.denyCurrentBranch`
    pub deny_current_branch: DenyAction,
    /// `receive.denyDeleteCurrent`
    pub deny_delete_current: DenyAction,
    /// `transfer.hideRefs` and `receive.hideRefs`, in the order they were met (trailing `/`
    /// removed): hidden from the advertisement and refused for update.
    pub hide_refs: Vec<String>,
    /// `receive.shallowUpdate`: accept updates that make new shallow roots.
    pub shallow_update: bool,
}

impl Default for RefPolicy {
    fn default() -> Self {
        RefPolicy {
            deny_deletes: false,
            deny_non_fast_forwards: false,
            deny_current_branch: DenyAction::Unconfigured,
            deny_delete_current: DenyAction::Unconfigured,
            hide_refs: Vec::new(),
            shallow_update: false,
        }
    }
}

/// How the pack is received and checked ([`crate::objects::ingest`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ingest {
    /// `receive.maxInputSize`, 0 for no limit.
    pub max_input_size: u64,
    /// `receive.unpackLimit`, else `transfer.unpackLimit`, else 100.
    pub unpack_limit: u32,
    /// `berth.maxObjectSize`: the largest object (or delta result) the pack may inflate to;
    /// bounds memory against deflate bombs.
    pub max_object_size: u64,
    /// `receive.fsckObjects`, else `transfer.fsckObjects`: check incoming objects as git's
    /// `index-pack --strict` does.
    pub fsck_objects: bool,
    /// `receive.fsck.<msg-id>` and `receive.fsck.skipList`, in configuration order (unknown ids
    /// already dropped with git's warning; skip lists relative to the repository).
    pub fsck: Vec<FsckSetting>,
    /// `pack.writeReverseIndex` (default true): write a `.rev` next to a kept pack's `.idx`.
    pub write_reverse_index: bool,
    /// `core.sharedRepository`: the permissions of the pack files and loose objects written.
    pub shared_repository: SharedRepository,
    /// `core.looseCompression`, else `core.compression`, else 1 (zlib's best speed), as git's
    /// `unpack-objects` compresses loose objects; -1 is zlib's default, 6.
    pub loose_compression: gix_zlib::Compression,
}

impl Default for Ingest {
    fn default() -> Self {
        Ingest {
            max_input_size: 0,
            unpack_limit: 100,
            max_object_size: 1 << 30,
            fsck_objects: false,
            fsck: Vec::new(),
            write_reverse_index: true,
            shared_repository: SharedRepository::Umask,
            loose_compression: gix_zlib::Compression::BEST_SPEED,
        }
    }
}

/// How hooks run ([`crate::hooks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookSettings {
    /// `receive.keepAlive` (default 5 seconds): how long a silent hook may run before the
    /// client is sent a keepalive; git's 0 or less disables them (`None`).
    pub keep_alive: Option<Duration>,
    /// `receive.procReceiveRefs`: which commands the proc-receive hook handles.
    pub proc_receive_refs: Vec<ProcReceiveRef>,
    /// The `hook.*` keys: config-defined hooks and how many of an event's hooks run at once.
    pub defined: HookConfig,
}

impl Default for HookSettings {
    fn default() -> Self {
        HookSettings {
            keep_alive: Some(Duration::from_secs(5)),
            proc_receive_refs: Vec::new(),
            defined: HookConfig::default(),
        }
    }
}

/// The `hook.*` keys as git master's `hook_config_lookup_all` (`hook.c`) collects them: one pass
/// over the configuration in order, a bad value ignored with git's warning. Which hooks each
/// event then runs, and how many at once, is [`crate::hooks::HookSet`]'s business.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookConfig {
    /// `hook.jobs`, its last valid value (`-1` is the number of online CPUs); `None`: unset,
    /// which is one job (serial).
    pub jobs: Option<usize>,
    /// `hook.<event>.jobs`, its last valid value per event, resolved as `hook.jobs`.
    pub event_jobs: Vec<(String, usize)>,
    /// `hook.<name>.event`: per event, the friendly names, each where its last `event` key put
    /// it (an empty value removes the name from every event).
    pub events: Vec<(String, Vec<String>)>,
    /// `hook.<name>.command`, the last value per friendly name.
    pub commands: Vec<(String, String)>,
    /// The names whose `hook.<name>.enabled` is false: friendly names and events alike (git
    /// tells them apart only once every key is read).
    pub disabled: Vec<String>,
    /// `hook.<name>.parallel`, the last valid value per friendly name.
    pub parallel: Vec<(String, bool)>,
}

impl HookConfig {
    /// The command of the friendly name `name`.
    pub fn command(&self, name: &str) -> Option<&str> {
        lookup(&self.commands, name).map(String::as_str)
    }

    /// Whether `hook.<name>.parallel` is true.
    pub fn parallel(&self, name: &str) -> bool {
        lookup(&self.parallel, name).copied().unwrap_or(false)
    }

    /// Whether `hook.<name>.enabled` is false.
    pub fn disabled(&self, name: &str) -> bool {
        self.disabled.iter().any(|n| n == name)
    }

    /// `hook.<event>.jobs`.
    pub fn event_jobs(&self, event: &str) -> Option<usize> {
        lookup(&self.event_jobs, event).copied()
    }

    /// The friendly names `hook.<name>.event` gives `event`, in the order they run.
    pub fn names_for(&self, event: &str) -> &[String] {
        lookup(&self.events, event).map_or(&[], Vec::as_slice)
    }

    /// git's `is_friendly_name`: `name` has a `command`, `parallel` or `event` key (`enabled`
    /// does not tell, as events have it too).
    pub fn is_friendly_name(&self, name: &str) -> bool {
        lookup(&self.commands, name).is_some()
            || lookup(&self.parallel, name).is_some()
            || self.events.iter().any(|(_, names)| names.iter().any(|n| n == name))
    }

    /// `hook.<event>.enabled` is false: the event's configured hooks do not run. (A friendly
    /// name's own `enabled` is not an event's.)
    pub fn event_disabled(&self, event: &str) -> bool {
        self.disabled(event) && !self.is_friendly_name(event)
    }
}

fn lookup<'a, T>(pairs: &'a [(String, T)], key: &str) -> Option<&'a T> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn upsert<T>(pairs: &mut Vec<(String, T)>, key: &str, value: T) {
    match pairs.iter_mut().find(|(k, _)| k == key) {
        Some((_, v)) => *v = value,
        None => pairs.push((key.to_owned(), value)),
    }
}

/// The hook events git knows (`hook-list.h`, from `Documentation/githooks.adoc`): none may be a
/// friendly name.
pub const KNOWN_HOOK_EVENTS: &[&str] = &[
    "applypatch-msg",
    "commit-msg",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "p4-prepare-changelist",
    "post-applypatch",
    "post-checkout",
    "post-commit",
    "post-index-change",
    "post-merge",
    "post-receive",
    "post-rewrite",
    "post-update",
    "pre-applypatch",
    "pre-auto-gc",
    "pre-commit",
    "pre-merge-commit",
    "pre-push",
    "pre-rebase",
    "pre-receive",
    "prepare-commit-msg",
    "proc-receive",
    "push-to-checkout",
    "reference-transaction",
    "sendemail-validate",
    "update",
];

/// Bounds on the request ([`crate::protocol::request`]); berth's own keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `berth.maxCommands`: how many commands one push may carry.
    pub max_commands: usize,
    /// `berth.maxRequestBytes`: how many bytes the command list and push options may take.
    pub max_request_bytes: u64,
    /// `berth.maxPushOptions`: how many push options one push may carry.
    pub max_push_options: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_commands: 4_000_000,
            max_request_bytes: 1 << 30,
            max_push_options: 10_000,
        }
    }
}

/// What runs after a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Housekeeping {
    /// `receive.autogc` (and `maintenance.auto`): run `git maintenance run --auto` after a push.
    pub auto_gc: bool,
    /// `maintenance.autoDetach`, else `gc.autoDetach`: let that maintenance run in the background.
    pub auto_detach: bool,
    /// `receive.updateServerInfo`: refresh the dumb-HTTP info files after a push.
    pub update_server_info: bool,
    /// `gc.autoPackLimit`: more packs than this (kept ones aside) and `git gc --auto` repacks;
    /// 0 or less, never for that. One of the two triggers that make a cluster replica ask git
    /// for its maintenance (`cluster/objects.rs`).
    pub auto_pack_limit: i64,
    /// `gc.auto`: more loose objects in `objects/17` than this / 256 and `git gc --auto`
    /// packs them, the other trigger; 0 or less and it does nothing, whatever the packs, and a
    /// cluster replica then does not ask (default 6700, git's).
    pub auto_threshold: i64,
}

impl Default for Housekeeping {
    fn default() -> Self {
        Housekeeping {
            auto_gc: true,
            auto_detach: true,
            update_server_info: false,
            auto_pack_limit: 50,
            auto_threshold: 6700,
        }
    }
}

/// How long the files backend waits for a lock someone else holds: git's
/// `core.filesRefLockTimeout` for each `<ref>.lock`, `core.packedRefsTimeout` for
/// `packed-refs.lock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockTimeouts {
    /// `core.filesRefLockTimeout` (default 100 ms).
    pub files_ref: Timeout,
    /// `core.packedRefsTimeout` (default 1000 ms).
    pub packed_refs: Timeout,
}

impl Default for LockTimeouts {
    fn default() -> Self {
        LockTimeouts {
            files_ref: Timeout::FILES_REF_LOCK,
            packed_refs: Timeout::PACKED_REFS,
        }
    }
}

/// The reflog identity's configured part (the environment's `GIT_COMMITTER_*` come first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// `user.name`
    pub name: Option<String>,
    /// `user.email`
    pub email: Option<String>,
}

/// How the repository and its refs are laid out and written ([`crate::refs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storage {
    /// `core.bare`, if set.
    pub bare: Option<bool>,
    /// `core.logAllRefUpdates`; when unset, resolved against `core.bare` as git does (logging
    /// in a non-bare repository).
    pub log_ref_updates: LogRefUpdates,
    /// `reftable.blockSize`, `restartInterval`, `indexObjects`, `geometricFactor`,
    /// `autoCompaction`, `lockTimeout` (and `GIT_TEST_REFTABLE_AUTOCOMPACTION`, which git's own
    /// tests set), for reftable repositories.
    pub reftable: crate::reftable::WriteOptions,
    /// `core.filesRefLockTimeout` and `core.packedRefsTimeout`: how long the files backend
    /// waits for a `<ref>.lock` or `packed-refs.lock` someone else holds.
    pub lock_timeouts: LockTimeouts,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            bare: None,
            log_ref_updates: LogRefUpdates::Never,
            reftable: Default::default(),
            lock_timeouts: Default::default(),
        }
    }
}

/// What the loader takes from the process environment, filled from
/// [`crate::receive::Environment`], which reads it once. (`gix-config` itself also reads the
/// variables that choose configuration files (`HOME`, `XDG_CONFIG_HOME`, `GIT_CONFIG_NOSYSTEM`,
/// `GIT_CONFIG_COUNT`, ...).
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `GIT_CONFIG_PARAMETERS`: the `git -c key=value` settings, applied over the files.
    pub config_parameters: Option<String>,
    /// `GIT_TEST_REFTABLE_AUTOCOMPACTION`: a false value turns reftable auto-compaction off
    /// whatever `reftable.autoCompaction` says, as in git.
    pub test_reftable_autocompaction: Option<String>,
    /// `HOME`, for a `~/` at the start of `receive.fsck.skipList`.
    pub home: Option<PathBuf>,
    /// `GIT_TEST_FSYNC`: a false value syncs nothing whatever `core.fsync` says, as in git
    /// (whose test suite sets it).
    pub test_fsync: Option<String>,
    /// What is synced whatever `core.fsync` says (a cluster node's `--cluster-durability`).
    pub durability_floor: crate::fsync::Floor,
}


/// A loaded configuration: what receive-pack reads, the whole file (for what is looked up by
/// pattern, such as hooks), and what git would have warned about while reading it.
#[derive(Debug)]
pub struct Loaded {
    /// The typed settings.
    pub config: Config,
    /// The configuration as read, `GIT_CONFIG_PARAMETERS` applied.
    pub file: File,
    /// Warnings for the session's stderr, in the order git prints them.
    pub warnings: Vec<Warning>,
}

impl Config {
    /// Read the configuration of the repository at `git_dir` with git's precedence.
    pub fn load(git_dir: &Path, env: &Environment) -> Result<Loaded, Error> {
        let mut file = read_files(git_dir, env.home.as_deref())?;
        if let Some(params) = &env.config_parameters {
            for (key, value) in parse_config_parameters(params) {
                let lower = key.to_ascii_lowercase();
                if value.is_none() && lower.starts_with("receive.fsck.") {
                    return Err(Error::MissingValueParameter(lower));
                }
                let _ = file.set_raw_value(key.as_str(), value.as_deref().unwrap_or("true"));
            }
        }
        let (mut config, warnings) = match Self::from_file(&file, env) {
            Err(Error::MissingValue { key, .. }) => {
                let (file, line) = config_line(&git_dir.join("config"), &key)
                    .map(|l| ("config".to_owned(), l))
                    .unwrap_or_else(|| ("config".to_owned(), 0));
                return Err(Error::MissingValue { key, file, line });
            }
            other => other?,
        };
        for s in &mut config.ingest.fsck {
            if let FsckSetting::SkipList { path, .. } = s {
                *path = git_dir.join(expand_home(path, env.home.as_deref()));
            }
        }
        Ok(Loaded {
            config,
            file,
            warnings,
        })
    }

    /// Interpret an already-loaded configuration: every key of [`KEYS`], in that order (which
    /// is the order in which a bad value is found).
    pub fn from_file(file: &File, env: &Environment) -> Result<(Self, Vec<Warning>), Error> {
        let mut p = Parsing::default();
        for key in KEYS {
            match key.apply {
                Apply::Last(apply) => {
                    if let Some(v) = file.string(key.name) {
                        apply(&mut p, &v.to_string())?;
                    }
                }
                Apply::Each(_) | Apply::Family => {}
                Apply::Sections(read) => read(file, &mut p)?,
            }
        }
        // Every value of a multi-valued key, in configuration order across sections
        // (`transfer.hideRefs` and `receive.hideRefs` interleave).
        for section in file.sections() {
            if section.header().subsection_name().is_some() {
                continue;
            }
            let section_name = section.header().name();
            for key in KEYS {
                let Apply::Each(apply) = key.apply else {
                    continue;
                };
                let (sec, var) = key.name.split_once('.').expect("section.name");
                if !section_name.eq_ignore_ascii_case(sec.as_bytes()) {
                    continue;
                }
                for v in section.body().values(var) {
                    apply(&mut p, &v.to_string());
                }
            }
        }
        Ok(p.finish(env))
    }
}

/// git's configuration files in git's order (system, global, the repository's `config` and
/// its worktree file, then `GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`), includes followed.
///
/// Written here instead of calling `gix_config::File::from_git_dir`, which does the same and
/// also asks the `git` binary where its installation's file is (`git config -l
/// --show-origin`): one process per push, 1.2 ms measured (`benches/README.md`), more than a
/// tenth of a 10,000-ref push. git's system file on the platforms berth serves is
/// `/etc/gitconfig` or `GIT_CONFIG_SYSTEM` (`GIT_CONFIG_NOSYSTEM` skips it), which
/// `Source::System` reads.
fn read_files(git_dir: &Path, home: Option<&Path>) -> Result<File, Error> {
    use gix_config::file::{Metadata, includes, init};
    use gix_config::{Source, path::interpolate};

    fn read(e: impl std::fmt::Display) -> Error {
        Error::Read(e.to_string())
    }
    let includes = |conditional: bool| init::Options {
        includes: if conditional {
            includes::Options::follow(
                interpolate::Context {
                    home_dir: home,
                    ..Default::default()
                },
                includes::conditional::Context {
                    git_dir: Some(git_dir),
                    branch_name: None,
                },
            )
        } else {
            includes::Options::follow_without_conditional(home)
        },
        ..Default::default()
    };
    let mut env_var = |name: &str| std::env::var_os(name);
    let globals = [Source::System, Source::Git, Source::User]
        .into_iter()
        .filter_map(|source| {
            let path = source.storage_location(&mut env_var)?;
            path.is_file().then(|| Metadata::from(source).at(path))
        })
        .collect::<Vec<_>>();
    let mut file = File::from_paths_metadata(globals, includes(false))
        .map_err(read)?
        .unwrap_or_default();
    file.resolve_includes(includes(true)).map_err(read)?;
    let mut local = File::from_path_no_includes(git_dir.join("config"), Source::Local)
        .map_err(read)?;
    local.resolve_includes(includes(true)).map_err(read)?;
    let worktree = matches!(local.boolean("extensions.worktreeConfig"), Ok(Some(true)));
    file.append(local).map_err(read)?;
    if worktree {
        let mut tree = File::from_path_no_includes(git_dir.join("config.worktree"), Source::Worktree)
            .map_err(read)?;
        tree.resolve_includes(includes(true)).map_err(read)?;
        file.append(tree).map_err(read)?;
    }
    file.append(File::from_environment_overrides().map_err(read)?)
        .map_err(read)?;
    Ok(file)
}

/// One configuration key receive-pack reads.
pub struct Key {
    /// Its name as git's documentation spells it (keys are matched without regard to case).
    pub name: &'static str,
    /// What it does.
    pub doc: &'static str,
    apply: Apply,
}

/// How a key's values reach the [`Config`].
#[derive(Clone, Copy)]
enum Apply {
    /// The last value wins; only it is parsed.
    Last(fn(&mut Parsing, &str) -> Result<(), Error>),
    /// Every value counts, in configuration order.
    Each(fn(&mut Parsing, &str)),
    /// A family of keys under a subsection (`receive.fsck.*`), read from the sections.
    Sections(fn(&File, &mut Parsing) -> Result<(), Error>),
    /// A member of a family that an earlier key's [`Apply::Sections`] reads in the same pass
    /// (the `hook.*` keys, read in configuration order as git does).
    Family,
}

/// A [`Config`] being built, with what is resolved only once every key is read.
#[derive(Default)]
struct Parsing {
    c: Config,
    warnings: Vec<Warning>,
    /// `core.logAllRefUpdates`, if set (its default depends on `core.bare`).
    log_ref_updates: Option<LogRefUpdates>,
    /// `receive.fsckObjects` was set: `transfer.fsckObjects` is not consulted.
    receive_fsck_objects: bool,
    /// `maintenance.autoDetach` was set: `gc.autoDetach` is not consulted.
    maintenance_auto_detach: bool,
}

impl Parsing {
    fn finish(mut self, env: &Environment) -> (Config, Vec<Warning>) {
        let storage = &mut self.c.storage;
        storage.log_ref_updates = self
            .log_ref_updates
            .unwrap_or(if storage.bare == Some(true) {
                LogRefUpdates::Never
            } else {
                LogRefUpdates::Normal
            });
        if env
            .test_reftable_autocompaction
            .as_deref()
            .and_then(parse_bool)
            == Some(false)
        {
            storage.reftable.disable_auto_compact = true;
        }
        self.c.durability = self.c.durability.at_least(env.durability_floor);
        if env.test_fsync.as_deref().and_then(parse_bool) == Some(false) {
            self.c.durability.enabled = false;
        }
        (self.c, self.warnings)
    }
}

fn boolean(v: &str) -> Result<bool, Error> {
    parse_bool(v).ok_or_else(|| Error::BadBool(v.to_owned()))
}

fn number(v: &str) -> Result<i64, Error> {
    parse_int(v).ok_or_else(|| Error::BadNumber(v.to_owned()))
}

/// A number that must fit git's `int` (`git_config_int`).
fn int(v: &str) -> Result<i64, Error> {
    let n = number(v)?;
    i32::try_from(n)
        .map(i64::from)
        .map_err(|_| Error::BadNumber(v.to_owned()))
}

/// Declare a key whose last value is parsed: `key!("name", "doc", |p, v| ...)`.
macro_rules! last {
    ($name:literal, $doc:literal, |$p:ident, $v:ident| $body:expr) => {
        Key {
            name: $name,
            doc: $doc,
            apply: Apply::Last(|$p: &mut Parsing, $v: &str| {
                $body;
                Ok(())
            }),
        }
    };
}

/// Declare a key every value of which counts.
macro_rules! each {
    ($name:literal, $doc:literal, |$p:ident, $v:ident| $body:expr) => {
        Key {
            name: $name,
            doc: $doc,
            apply: Apply::Each(|$p: &mut Parsing, $v: &str| $body),
        }
    };
}

/// Declare a key of a family read all at once by the family's first key (`hook.*`).
macro_rules! family {
    ($name:literal, $doc:literal) => {
        Key {
            name: $name,
            doc: $doc,
            apply: Apply::Family,
        }
    };
}

/// Every key receive-pack reads, in the order their values are checked.
pub static KEYS: &[Key] = &[
    last!(
        "receive.denyDeletes",
        "Refuse to delete branches.",
        |p, v| { p.c.policy.deny_deletes = boolean(v)? }
    ),
    last!(
        "receive.denyNonFastForwards",
        "Refuse branch updates that are not fast-forwards.",
        |p, v| p.c.policy.deny_non_fast_forwards = boolean(v)?
    ),
    last!(
        "receive.denyCurrentBranch",
        "What to do with an update of a checked-out branch: refuse (the default, with git's \
         explanation), ignore, warn or updateInstead.",
        |p, v| p.c.policy.deny_current_branch = DenyAction::parse(v)?
    ),
    last!(
        "receive.denyDeleteCurrent",
        "What to do with a deletion of the checked-out branch: refuse (the default), ignore or warn.",
        |p, v| p.c.policy.deny_delete_current = DenyAction::parse(v)?
    ),
    each!(
        "receive.hideRefs",
        "A ref prefix (`!` to except one) hidden from the advertisement and refused for update.",
        |p, v| p.c.policy.hide_refs.push(hide_ref(v))
    ),
    each!(
        "transfer.hideRefs",
        "As receive.hideRefs, for every transfer command.",
        |p, v| p.c.policy.hide_refs.push(hide_ref(v))
    ),
    last!(
        "receive.advertiseAtomic",
        "Advertise the atomic capability (default true).",
        |p, v| p.c.advertisement.atomic = boolean(v)?
    ),
    last!(
        "receive.advertisePushOptions",
        "Advertise the push-options capability.",
        |p, v| p.c.advertisement.push_options = boolean(v)?
    ),
    last!(
        "transfer.advertiseSID",
        "Advertise the session-id capability.",
        |p, v| p.c.advertisement.session_id = boolean(v)?
    ),
    last!(
        "receive.certNonceSeed",
        "The secret signed-push nonces are made from; enables push-cert.",
        |p, v| p.c.advertisement.cert_nonce_seed = Some(v.to_owned())
    ),
    last!(
        "receive.certNonceSlop",
        "Seconds by which a signed push's nonce may be off and still be SLOP rather than BAD.",
        |p, v| p.c.advertisement.cert_nonce_slop = number(v)?
    ),
    last!(
        "repack.useDeltaBaseOffset",
        "Advertise ofs-delta (default true).",
        |p, v| p.c.advertisement.delta_base_offset = boolean(v)?
    ),
    last!(
        "core.compression",
        "zlib level (-1 for 6, 0 to 9) of loose objects written, unless core.looseCompression.",
        |p, v| p.c.ingest.loose_compression = zlib_level(v)?
    ),
    last!(
        "core.looseCompression",
        "zlib level (-1 for 6, 0 to 9) of the loose objects a small push is unpacked to (default 1).",
        |p, v| p.c.ingest.loose_compression = zlib_level(v)?
    ),
    last!(
        "receive.maxInputSize",
        "The largest pack accepted, in bytes; 0 for no limit.",
        |p, v| p.c.ingest.max_input_size = number(v)?.max(0) as u64
    ),
    last!(
        "transfer.unpackLimit",
        "Below this many objects a pack is unpacked to loose objects; receive.unpackLimit wins.",
        |p, v| p.c.ingest.unpack_limit = unpack_limit(v)?
    ),
    last!(
        "receive.unpackLimit",
        "Below this many objects a pack is unpacked to loose objects (default 100).",
        |p, v| p.c.ingest.unpack_limit = unpack_limit(v)?
    ),
    each!(
        "receive.procReceiveRefs",
        "`[<modifiers>:]<prefix>` of the commands the proc-receive hook handles.",
        |p, v| p.c.hooks.proc_receive_refs.push(ProcReceiveRef::parse(v))
    ),
    last!(
        "receive.keepAlive",
        "Seconds a hook may be silent before a keepalive is sent (default 5); 0 or less disables.",
        |p, v| p.c.hooks.keep_alive = match number(v)? {
            s if s > 0 => Some(Duration::from_secs(s as u64)),
            _ => None,
        }
    ),
    last!(
        "receive.shallowUpdate",
        "Accept updates that need new shallow roots.",
        |p, v| p.c.policy.shallow_update = boolean(v)?
    ),
    last!(
        "core.bare",
        "Whether the repository has no worktree.",
        |p, v| p.c.storage.bare = Some(boolean(v)?)
    ),
    last!(
        "core.logAllRefUpdates",
        "Write reflogs: false, true (branches, remotes, notes, HEAD) or always; by default true \
         unless the repository is bare.",
        |p, v| p.log_ref_updates = Some(if v.eq_ignore_ascii_case("always") {
            LogRefUpdates::Always
        } else if boolean(v)? {
            LogRefUpdates::Normal
        } else {
            LogRefUpdates::Never
        })
    ),
    last!(
        "reftable.blockSize",
        "The reftable block size, at most 16MB; 0 keeps the default.",
        |p, v| {
            let n = number(v)?;
            if !(0..=16_777_215).contains(&n) {
                return Err(Error::ReftableOption(
                    "reftable block size cannot exceed 16MB".into(),
                ));
            }
            if n > 0 {
                p.c.storage.reftable.block_size = n as u32;
            }
        }
    ),
    last!(
        "reftable.restartInterval",
        "Records between restart points, at most 65535; 0 keeps the default.",
        |p, v| {
            let n = number(v)?;
            if !(0..=i64::from(u16::MAX)).contains(&n) {
                return Err(Error::ReftableOption(format!(
                    "reftable block size cannot exceed {}",
                    u16::MAX
                )));
            }
            if n > 0 {
                p.c.storage.reftable.restart_interval = n as u16;
            }
        }
    ),
    last!(
        "reftable.indexObjects",
        "Write object index blocks (default true).",
        |p, v| p.c.storage.reftable.index_objects = boolean(v)?
    ),
    last!(
        "reftable.geometricFactor",
        "The factor of the geometric auto-compaction (default 2).",
        |p, v| p.c.storage.reftable.geometric_factor = number(v)?.clamp(0, 255) as u8
    ),
    last!(
        "reftable.lockTimeout",
        "Milliseconds to wait for tables.list.lock held by another writer (default 100; 0 tries \
         once, -1 waits forever).",
        |p, v| {
            let ms = number(v)?;
            if ms < -1 {
                return Err(Error::ReftableOption(
                    "reftable lock timeout does not support negative values other than -1".into(),
                ));
            }
            p.c.storage.reftable.lock_timeout = Timeout::from_millis(ms)
        }
    ),
    last!(
        "core.filesRefLockTimeout",
        "Milliseconds to wait for a <ref>.lock held by another writer (default 100; 0 tries \
         once, negative waits forever).",
        |p, v| p.c.storage.lock_timeouts.files_ref = Timeout::from_millis(int(v)?)
    ),
    last!(
        "core.packedRefsTimeout",
        "Milliseconds to wait for packed-refs.lock held by another writer (default 1000; 0 \
         tries once, negative waits forever).",
        |p, v| p.c.storage.lock_timeouts.packed_refs = Timeout::from_millis(int(v)?)
    ),
    last!(
        "reftable.autoCompaction",
        "Compact the stack after writing (default true).",
        |p, v| p.c.storage.reftable.disable_auto_compact = !boolean(v)?
    ),
    last!(
        "berth.maxCommands",
        "How many commands one push may carry (default 4000000, at least 1).",
        |p, v| p.c.limits.max_commands = number(v)?.max(1) as usize
    ),
    last!(
        "berth.maxRequestBytes",
        "How many bytes the command list and push options may take (default 1GiB, at least 1).",
        |p, v| p.c.limits.max_request_bytes = number(v)?.max(1) as u64
    ),
    last!(
        "berth.maxPushOptions",
        "How many push options one push may carry (default 10000).",
        |p, v| p.c.limits.max_push_options = number(v)?.max(0) as usize
    ),
    last!(
        "receive.autogc",
        "Run `git maintenance run --auto` after a push (default true).",
        |p, v| p.c.housekeeping.auto_gc = boolean(v)?
    ),
    last!(
        "maintenance.auto",
        "With receive.autogc, whether that maintenance runs (default true); not consulted when \
         receive.autogc is false.",
        |p, v| if p.c.housekeeping.auto_gc {
            p.c.housekeeping.auto_gc = boolean(v)?
        }
    ),
    last!(
        "maintenance.autoDetach",
        "Let the maintenance after a push run in the background (default true).",
        |p, v| {
            p.c.housekeeping.auto_detach = boolean(v)?;
            p.maintenance_auto_detach = true;
        }
    ),
    last!(
        "gc.autoPackLimit",
        "More packs than this (kept ones aside) and a cluster replica runs the maintenance a push \
         runs (default 50, git's; 0 or less: not for its packs). git's receive-pack does not \
         read it: a value git would refuse leaves the default, for git's maintenance to report.",
        |p, v| if let Some(n) = parse_int(v) {
            p.c.housekeeping.auto_pack_limit = n
        }
    ),
    last!(
        "gc.auto",
        "0 or less: a cluster replica does not ask for the maintenance of gc.autoPackLimit, which \
         git's gc --auto would not do (default 6700, git's). Not read by git's receive-pack: a \
         value git would refuse leaves the default.",
        |p, v| if let Some(n) = parse_int(v) {
            p.c.housekeeping.auto_threshold = n
        }
    ),
    last!(
        "gc.autoDetach",
        "As maintenance.autoDetach, when that is not set.",
        |p, v| if !p.maintenance_auto_detach {
            p.c.housekeeping.auto_detach = boolean(v)?
        }
    ),
    last!(
        "receive.updateServerInfo",
        "Run `git update-server-info` after a push.",
        |p, v| p.c.housekeeping.update_server_info = boolean(v)?
    ),
    last!("user.name", "The reflog identity's name.", |p, v| {
        p.c.identity.name = Some(v.to_owned())
    }),
    last!("user.email", "The reflog identity's email.", |p, v| {
        p.c.identity.email = Some(v.to_owned())
    }),
    last!(
        "receive.fsckObjects",
        "Check incoming objects as `index-pack --strict` does.",
        |p, v| {
            p.c.ingest.fsck_objects = boolean(v)?;
            p.receive_fsck_objects = true;
        }
    ),
    last!(
        "transfer.fsckObjects",
        "As receive.fsckObjects, when that is not set.",
        |p, v| if !p.receive_fsck_objects {
            p.c.ingest.fsck_objects = boolean(v)?
        }
    ),
    Key {
        name: "receive.fsck.<msg-id>",
        doc: "The severity (error, warn, ignore) of an fsck finding; `receive.fsck.skipList` \
              names a file of object ids not to check. An unknown id is skipped with a warning.",
        apply: Apply::Sections(read_fsck_settings),
    },
    last!(
        "pack.writeReverseIndex",
        "Write a `.rev` reverse index next to a kept pack's index (default true).",
        |p, v| p.c.ingest.write_reverse_index = boolean(v)?
    ),
    Key {
        name: "core.sharedRepository",
        doc: "Who may read (and write) what the push writes: umask (the default), group, all, \
              or an octal mode; applied to kept packs and loose objects as git does.",
        apply: Apply::Sections(read_shared_repository),
    },
    last!(
        "berth.maxObjectSize",
        "The largest object (or delta result) a pack may inflate to (default 1GiB, at least 1).",
        |p, v| p.c.ingest.max_object_size = number(v)?.max(1) as u64
    ),
    Key {
        name: "core.fsync",
        doc: "The components made durable before they are published: loose-object, pack, \
              pack-metadata, reference, ... and the aggregates objects, derived-metadata, \
              committed, added, all; `-name` removes one, `none` clears. By default pack and \
              pack-metadata (git's FSYNC_COMPONENTS_DEFAULT).",
        apply: Apply::Sections(read_fsync),
    },
    Key {
        name: "core.fsyncMethod",
        doc: "How: fsync (the default), writeout-only (write-back without a disk cache flush) \
              or batch (write-back per loose object, one flush before they are published).",
        apply: Apply::Sections(read_fsync_method),
    },
    last!(
        "core.fsyncObjectFiles",
        "Deprecated (use core.fsync): true syncs loose objects.",
        |p, v| {
            p.warnings.push(Warning(
                "core.fsyncObjectFiles is deprecated; use core.fsync instead".into(),
            ));
            p.c.durability.object_files = boolean(v)?;
        }
    ),
    Key {
        name: "hook.<name>.command",
        doc: "A config-defined hook: the shell command run for each event its \
              `hook.<name>.event` names (the last value counts). The `hook.*` keys are read in \
              one pass in configuration order, as git master's `hook_config_lookup_all`.",
        apply: Apply::Sections(read_hooks),
    },
    family!(
        "hook.<name>.event",
        "An event the hook runs for (multi-valued; an empty value clears the hook's events). A \
         known event's name may not be a friendly name."
    ),
    family!(
        "hook.<name>.enabled",
        "false: the hook does not run (default true)."
    ),
    family!(
        "hook.<name>.parallel",
        "true: the hook may run at the same time as the event's other hooks (default false; one \
         configured hook without it makes the whole event serial)."
    ),
    family!(
        "hook.<event>.enabled",
        "false: none of the event's configured hooks run (default true)."
    ),
    family!(
        "hook.<event>.jobs",
        "How many of the event's hooks run at once, overriding hook.jobs (-1: the number of CPUs; \
         0, other negative values and non-numbers are ignored with a warning)."
    ),
    family!(
        "hook.jobs",
        "How many of an event's hooks run at once (default 1; -1: the number of CPUs; other \
         values below 1 are ignored with a warning), when every configured hook of the event has \
         hook.<name>.parallel; push-to-checkout always runs serially."
    ),
];

/// Every `hook.*` key, in configuration order, as git master's `hook_config_lookup_all`: a bad
/// `jobs` or `parallel` value is ignored with git's warning, a `hook.<name>.*` key without a
/// value is fatal, and so is a friendly name that is a known event's.
fn read_hooks(file: &File, p: &mut Parsing) -> Result<(), Error> {
    let h = &mut p.c.hooks.defined;
    let warnings = &mut p.warnings;
    for section in file.sections() {
        let header = section.header();
        if !header.name().eq_ignore_ascii_case(b"hook") {
            continue;
        }
        let name = header.subsection_name().map(|n| n.to_string());
        let body = section.body();
        let vars: Vec<String> = body.value_names().collect();
        for (i, var) in vars.iter().enumerate() {
            let lower = var.to_ascii_lowercase();
            let nth = vars[..i].iter().filter(|v| v.eq_ignore_ascii_case(var)).count();
            let last = !vars[i + 1..].iter().any(|v| v.eq_ignore_ascii_case(var));
            // gix-config gives a key without `=` as an empty value; only the last one of a name
            // can be told from `key =`.
            let value = match body.values(var).get(nth) {
                Some(v) if v.is_empty() && last && body.value_implicit(var) == Some(None) => None,
                v => v.map(|v| v.to_string()),
            };
            let Some(name) = name.as_deref() else {
                // `hook.jobs`; a key without a value is ignored.
                if lower == "jobs"
                    && let Some(v) = value
                    && let Some(n) = hook_jobs("hook.jobs", &v, warnings)
                {
                    h.jobs = Some(n);
                }
                continue;
            };
            let Some(value) = value else {
                return Err(Error::MissingValue {
                    key: format!("hook.{name}.{lower}"),
                    file: String::new(),
                    line: 0,
                });
            };
            match lower.as_str() {
                "event" if value.is_empty() => {
                    for (_, names) in &mut h.events {
                        names.retain(|n| n != name);
                    }
                }
                "event" => {
                    if KNOWN_HOOK_EVENTS.contains(&name) {
                        return Err(Error::HookNameIsEvent(name.to_owned()));
                    }
                    if name == value {
                        warnings.push(Warning(format!(
                            "hook friendly-name '{name}' is the same as its event; this may \
                             cause ambiguity with hook.{name}.enabled"
                        )));
                    }
                    let names = match h.events.iter().position(|(e, _)| *e == value) {
                        Some(i) => &mut h.events[i].1,
                        None => {
                            h.events.push((value, Vec::new()));
                            &mut h.events.last_mut().expect("just pushed").1
                        }
                    };
                    names.retain(|n| n != name);
                    names.push(name.to_owned());
                }
                "command" => upsert(&mut h.commands, name, value),
                "enabled" => match maybe_bool(&value) {
                    Some(false) if !h.disabled(name) => h.disabled.push(name.to_owned()),
                    Some(true) => h.disabled.retain(|n| n != name),
                    // Already disabled, or not a boolean: ignored, as git does.
                    _ => {}
                },
                "parallel" => match maybe_bool(&value) {
                    Some(b) => upsert(&mut h.parallel, name, b),
                    None => warnings.push(Warning(format!(
                        "hook.{name}.parallel must be a boolean, ignoring: '{value}'"
                    ))),
                },
                "jobs" => {
                    if let Some(n) = hook_jobs(&format!("hook.{name}.jobs"), &value, warnings) {
                        upsert(&mut h.event_jobs, name, n);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// A `hook.jobs` or `hook.<event>.jobs` value: a positive integer, or `-1` for the number of
/// online CPUs; anything else is ignored with git's warning.
fn hook_jobs(key: &str, value: &str, warnings: &mut Vec<Warning>) -> Option<usize> {
    match parse_int(value).and_then(|n| i32::try_from(n).ok()) {
        None => warnings.push(Warning(format!(
            "{key} must be an integer, ignoring: '{value}'"
        ))),
        Some(-1) => return Some(online_cpus()),
        Some(n) if n > 0 => return Some(n as usize),
        Some(_) => warnings.push(Warning(format!(
            "{key} must be a positive integer or -1, ignoring: '{value}'"
        ))),
    }
    None
}

/// git's `git_parse_maybe_bool`: an empty value is false, a number is true unless 0, anything
/// else is not a boolean.
fn maybe_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "" => Some(false),
        other => parse_bool(other),
    }
}

/// git's `online_cpus`: the processors online (`sysconf(_SC_NPROCESSORS_ONLN)`), at least 1.
#[allow(unsafe_code)]
pub fn online_cpus() -> usize {
    // SAFETY: sysconf only reads a system value.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// The last value of `key` (`core.fsync`, `core.fsyncMethod`), or git's "missing value" error
/// for a key written without `=` (git's `config_error_nonbool`).
fn nonbool(file: &File, key: &str) -> Result<Option<String>, Error> {
    match file.string_implicit(key) {
        None => Ok(None),
        Some(Some(value)) => Ok(Some(value.to_string())),
        Some(None) => Err(Error::MissingValue {
            key: key.to_ascii_lowercase(),
            file: String::new(),
            line: 0,
        }),
    }
}

/// `core.fsync`, its last value, as git's `parse_fsync_components`.
fn read_fsync(file: &File, p: &mut Parsing) -> Result<(), Error> {
    if let Some(value) = nonbool(file, "core.fsync")? {
        let warnings = &mut p.warnings;
        p.c.durability.components = Components::parse(&value, |w| warnings.push(Warning(w)));
    }
    Ok(())
}

/// `core.fsyncMethod`, its last value; an unknown one is ignored with git's warning.
fn read_fsync_method(file: &File, p: &mut Parsing) -> Result<(), Error> {
    if let Some(value) = nonbool(file, "core.fsyncMethod")? {
        match Method::parse(&value) {
            Some(m) => p.c.durability.method = m,
            None => p.warnings.push(Warning(format!(
                "ignoring unknown core.fsyncMethod value '{value}'"
            ))),
        }
    }
    Ok(())
}

/// `core.sharedRepository`, its last value; a key without `=` means `group` (git's
/// `git_config_perm` with a NULL value).
fn read_shared_repository(file: &File, p: &mut Parsing) -> Result<(), Error> {
    let Some(value) = file.string("core.sharedRepository") else {
        return Ok(());
    };
    let value = value.to_string();
    // gix-config reads a key without `=` as an empty value; its boolean is then true.
    let implicit = value.is_empty()
        && matches!(file.boolean("core.sharedRepository"), Ok(Some(true)));
    p.c.ingest.shared_repository =
        SharedRepository::parse((!implicit).then_some(value.as_str()))?;
    Ok(())
}

/// A `hideRefs` value: trailing slashes do not count.
fn hide_ref(v: &str) -> String {
    let mut v = v.to_owned();
    while v.len() > 1 && v.ends_with('/') {
        v.pop();
    }
    v
}

/// A zlib level as git's `core.compression` takes it: -1 for zlib's default (6), else 0 to 9.
fn zlib_level(v: &str) -> Result<gix_zlib::Compression, Error> {
    let n = int(v)?;
    let level = if n == -1 { 6 } else { n };
    i32::try_from(level)
        .ok()
        .and_then(gix_zlib::Compression::new)
        .ok_or(Error::BadZlibLevel(n))
}

/// An unpack limit as berth keeps it (negative is 0).
fn unpack_limit(v: &str) -> Result<u32, Error> {
    Ok(number(v)?.clamp(0, u32::MAX as i64) as u32)
}

/// `receive.fsck.*` as git's `receive_pack_config` reads it: `skipList` is a path, any other key
/// a message id whose value must be `error`, `warn` or `ignore` (an unknown id is skipped with
/// a warning; an unknown severity is fatal; a missing value is fatal).
fn read_fsck_settings(file: &File, p: &mut Parsing) -> Result<(), Error> {
    let Some(sections) = file.sections_by_name("receive") else {
        return Ok(());
    };
    for section in sections {
        if section.header().subsection_name().map(|n| n.as_ref()) != Some(&b"fsck"[..]) {
            continue;
        }
        let body = section.body();
        let mut seen: Vec<String> = Vec::new();
        for name in body.value_names() {
            let lower = name.to_ascii_lowercase();
            let nth = seen.iter().filter(|s| **s == lower).count();
            seen.push(lower.clone());
            let values = body.values(&name);
            let key = format!("receive.fsck.{lower}");
            let Some(value) = values.get(nth) else {
                return Err(Error::MissingValue {
                    key,
                    file: String::new(),
                    line: 0,
                });
            };
            let value = value.to_string();
            if lower == "skiplist" {
                p.c.ingest.fsck.push(FsckSetting::SkipList {
                    path: PathBuf::from(&value),
                    configured: value,
                });
                continue;
            }
            if crate::objects::fsck::Msg::parse(&lower).is_none() {
                p.warnings
                    .push(Warning(format!("skipping unknown msg id '{lower}'")));
                continue;
            }
            if crate::objects::fsck::parse_severity(&value).is_none() {
                return Err(Error::FsckSeverity(value));
            }
            p.c.ingest.fsck.push(FsckSetting::Severity {
                id: lower,
                severity: value,
            });
        }
    }
    Ok(())
}

/// The line of `path` that sets `key` (`section.subsection.name`) without a value, for git's
/// "bad config variable" message.
fn config_line(path: &Path, key: &str) -> Option<usize> {
    let text = std::fs::read_to_string(path).ok()?;
    let name = key.rsplit('.').next()?;
    text.lines()
        .position(|l| l.trim().eq_ignore_ascii_case(name))
        .map(|i| i + 1)
}

/// git's `git_config_pathname`: a leading `~/` is the home directory.
fn expand_home(p: &Path, home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix("~"), home) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => p.to_owned(),
    }
}

/// One `receive.procReceiveRefs` value: `[<modifiers>:]<prefix>`, modifiers `a` (create), `d`
/// (delete), `m` (modify) and `!` (refs not under the prefix); no modifiers means `adm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcReceiveRef {
    /// The ref prefix, without trailing `/`.
    pub prefix: String,
    /// Matches creations.
    pub add: bool,
    /// Matches deletions.
    pub delete: bool,
    /// Matches updates.
    pub modify: bool,
    /// Matches refs *not* under the prefix.
    pub negative: bool,
}

impl ProcReceiveRef {
    fn parse(value: &str) -> Self {
        let (mods, prefix) = match value.split_once(':') {
            Some((mods, prefix)) => (Some(mods), prefix),
            None => (None, value),
        };
        let has = |c: char| mods.is_none_or(|m| m.contains(c));
        ProcReceiveRef {
            prefix: prefix.trim_end_matches('/').to_owned(),
            add: has('a'),
            delete: has('d'),
            modify: has('m'),
            negative: mods.is_some_and(|m| m.contains('!')),
        }
    }

    /// Whether a command `old → new` on `name` is selected (git's `proc_receive_ref_matches`
    /// applied over all values).
    pub fn selects(refs: &[ProcReceiveRef], name: &[u8], old_null: bool, new_null: bool) -> bool {
        for p in refs {
            if (!p.add && old_null)
                || (!p.delete && new_null)
                || (!p.modify && !old_null && !new_null)
            {
                continue;
            }
            let under = name
                .strip_prefix(p.prefix.as_bytes())
                .is_some_and(|rest| rest.is_empty() || rest[0] == b'/');
            if under != p.negative {
                return true;
            }
        }
        false
    }
}

/// git's boolean syntax.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "" => Some(true),
        "false" | "no" | "off" => Some(false),
        other => parse_int(other).map(|n| n != 0),
    }
}

/// git's integer syntax, with the `k`, `m`, `g` suffixes.
pub fn parse_int(v: &str) -> Option<i64> {
    let v = v.trim();
    let (digits, factor) = match v.chars().last()?.to_ascii_lowercase() {
        'k' => (&v[..v.len() - 1], 1i64 << 10),
        'm' => (&v[..v.len() - 1], 1 << 20),
        'g' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    digits.parse::<i64>().ok()?.checked_mul(factor)
}

/// Parse `GIT_CONFIG_PARAMETERS`: single-quoted `'key'='value'` (or old-style `'key=value'`)
/// entries separated by spaces. A key without `=` has no value.
pub fn parse_config_parameters(s: &str) -> Vec<(String, Option<String>)> {
    fn quoted(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
        // git's sq_quote: 'a'\''b' is a'b.
        let mut out = String::new();
        loop {
            if chars.next_if_eq(&'\'').is_none() {
                return if out.is_empty() { None } else { Some(out) };
            }
            for c in chars.by_ref() {
                if c == '\'' {
                    break;
                }
                out.push(c);
            }
            if chars.peek() == Some(&'\\') {
                chars.next();
                if let Some(c) = chars.next() {
                    out.push(c);
                }
            } else {
                return Some(out);
            }
        }
    }
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(first) = quoted(&mut chars) else {
            break;
        };
        if chars.next_if_eq(&'=').is_some() {
            // `'key'=` without a quoted value is git's encoding of a key without a value.
            let value = quoted(&mut chars);
            out.push((first, value));
        } else if let Some((k, v)) = first.split_once('=') {
            out.push((k.to_owned(), Some(v.to_owned())));
        } else {
            out.push((first, None));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(Config, Vec<Warning>), Error> {
        parse_with(text, &Environment::default())
    }

    fn parse_with(text: &str, env: &Environment) -> Result<(Config, Vec<Warning>), Error> {
        Config::from_file(&File::try_from(text).unwrap(), env)
    }

    /// Per key of [`KEYS`]: a value and what it must do (something other than the default).
    #[allow(clippy::type_complexity)]
    const SAMPLES: &[(&str, &str, fn(&Config) -> bool)] = &[
        ("receive.denyDeletes", "true", |c| c.policy.deny_deletes),
        ("receive.denyNonFastForwards", "yes", |c| {
            c.policy.deny_non_fast_forwards
        }),
        ("receive.denyCurrentBranch", "updateInstead", |c| {
            c.policy.deny_current_branch == DenyAction::UpdateInstead
        }),
        ("receive.denyDeleteCurrent", "warn", |c| {
            c.policy.deny_delete_current == DenyAction::Warn
        }),
        ("receive.hideRefs", "refs/x//", |c| {
            c.policy.hide_refs == ["refs/x"]
        }),
        ("transfer.hideRefs", "!refs/y", |c| {
            c.policy.hide_refs == ["!refs/y"]
        }),
        ("receive.advertiseAtomic", "false", |c| {
            !c.advertisement.atomic
        }),
        ("receive.advertisePushOptions", "on", |c| {
            c.advertisement.push_options
        }),
        ("transfer.advertiseSID", "1", |c| c.advertisement.session_id),
        ("receive.certNonceSeed", "seed", |c| {
            c.advertisement.cert_nonce_seed.as_deref() == Some("seed")
        }),
        ("receive.certNonceSlop", "30", |c| {
            c.advertisement.cert_nonce_slop == 30
        }),
        ("repack.useDeltaBaseOffset", "off", |c| {
            !c.advertisement.delta_base_offset
        }),
        ("core.compression", "9", |c| {
            c.ingest.loose_compression == gix_zlib::Compression::BEST
        }),
        ("core.looseCompression", "-1", |c| {
            c.ingest.loose_compression == gix_zlib::Compression::DEFAULT
        }),
        ("receive.maxInputSize", "1k", |c| {
            c.ingest.max_input_size == 1024
        }),
        ("transfer.unpackLimit", "7", |c| c.ingest.unpack_limit == 7),
        ("receive.unpackLimit", "8", |c| c.ingest.unpack_limit == 8),
        ("receive.procReceiveRefs", "ad:refs/for/", |c| {
            c.hooks.proc_receive_refs
                == [ProcReceiveRef {
                    prefix: "refs/for".into(),
                    add: true,
                    delete: true,
                    modify: false,
                    negative: false,
                }]
        }),
        ("receive.keepAlive", "0", |c| c.hooks.keep_alive.is_none()),
        ("receive.shallowUpdate", "true", |c| c.policy.shallow_update),
        ("core.bare", "true", |c| {
            c.storage.bare == Some(true) && c.storage.log_ref_updates == LogRefUpdates::Never
        }),
        ("core.logAllRefUpdates", "always", |c| {
            c.storage.log_ref_updates == LogRefUpdates::Always
        }),
        ("reftable.blockSize", "8k", |c| {
            c.storage.reftable.block_size == 8192
        }),
        ("reftable.restartInterval", "5", |c| {
            c.storage.reftable.restart_interval == 5
        }),
        ("reftable.indexObjects", "false", |c| {
            !c.storage.reftable.index_objects
        }),
        ("reftable.geometricFactor", "3", |c| {
            c.storage.reftable.geometric_factor == 3
        }),
        ("reftable.lockTimeout", "-1", |c| {
            c.storage.reftable.lock_timeout == Timeout::Forever
        }),
        ("core.filesRefLockTimeout", "1k", |c| {
            c.storage.lock_timeouts.files_ref == Timeout::Millis(1024)
        }),
        ("core.packedRefsTimeout", "0", |c| {
            c.storage.lock_timeouts.packed_refs == Timeout::Once
        }),
        ("reftable.autoCompaction", "false", |c| {
            c.storage.reftable.disable_auto_compact
        }),
        ("berth.maxCommands", "10", |c| c.limits.max_commands == 10),
        ("berth.maxRequestBytes", "1m", |c| {
            c.limits.max_request_bytes == 1 << 20
        }),
        ("berth.maxPushOptions", "0", |c| {
            c.limits.max_push_options == 0
        }),
        ("receive.autogc", "false", |c| !c.housekeeping.auto_gc),
        ("maintenance.auto", "false", |c| !c.housekeeping.auto_gc),
        ("maintenance.autoDetach", "false", |c| {
            !c.housekeeping.auto_detach
        }),
        ("gc.autoPackLimit", "1k", |c| c.housekeeping.auto_pack_limit == 1024),
        ("gc.auto", "0", |c| c.housekeeping.auto_threshold == 0),
        ("gc.autoDetach", "false", |c| !c.housekeeping.auto_detach),
        ("receive.updateServerInfo", "true", |c| {
            c.housekeeping.update_server_info
        }),
        ("user.name", "A U Thor", |c| {
            c.identity.name.as_deref() == Some("A U Thor")
        }),
        ("user.email", "a@b", |c| {
            c.identity.email.as_deref() == Some("a@b")
        }),
        ("receive.fsckObjects", "true", |c| c.ingest.fsck_objects),
        ("transfer.fsckObjects", "true", |c| c.ingest.fsck_objects),
        ("receive.fsck.<msg-id>", "warn", |c| {
            c.ingest.fsck
                == [FsckSetting::Severity {
                    id: "missingemail".into(),
                    severity: "warn".into(),
                }]
        }),
        ("pack.writeReverseIndex", "false", |c| {
            !c.ingest.write_reverse_index
        }),
        ("core.sharedRepository", "group", |c| {
            c.ingest.shared_repository == SharedRepository::Add(0o660)
        }),
        ("berth.maxObjectSize", "2g", |c| {
            c.ingest.max_object_size == 2 << 30
        }),
        ("core.fsync", "reference,-pack", |c| {
            c.durability.components.intersects(Components::REFERENCE)
                && !c.durability.components.intersects(Components::PACK)
        }),
        ("core.fsyncMethod", "batch", |c| {
            c.durability.method == Method::Batch
        }),
        ("core.fsyncObjectFiles", "true", |c| c.durability.object_files),
        ("hook.<name>.command", "true", |c| {
            c.hooks.defined.command("audit") == Some("true")
        }),
        ("hook.<name>.event", "pre-receive", |c| {
            c.hooks.defined.names_for("pre-receive") == ["audit"]
        }),
        ("hook.<name>.enabled", "false", |c| {
            c.hooks.defined.disabled("audit")
        }),
        ("hook.<name>.parallel", "true", |c| {
            c.hooks.defined.parallel("audit")
        }),
        ("hook.<event>.enabled", "false", |c| {
            c.hooks.defined.event_disabled("pre-receive")
        }),
        ("hook.<event>.jobs", "2", |c| {
            c.hooks.defined.event_jobs("pre-receive") == Some(2)
        }),
        ("hook.jobs", "3", |c| c.hooks.defined.jobs == Some(3)),
    ];

    /// `[section "sub"] var = value` for `section.var` or `section.sub.var`, the names spelled by
    /// `case`.
    fn config_text(name: &str, value: &str, case: fn(&str) -> String) -> String {
        let name = name
            .replace("<msg-id>", "missingEmail")
            .replace("<name>", "audit")
            .replace("<event>", "pre-receive");
        let mut parts: Vec<&str> = name.split('.').collect();
        let var = parts.pop().unwrap();
        let header = match parts.as_slice() {
            [section] => format!("[{}]", case(section)),
            // Subsections are case-sensitive: only the section and the variable change.
            [section, sub] => format!("[{} \"{sub}\"]", case(section)),
            _ => unreachable!("{name}"),
        };
        format!("{header}\n\t{} = {value}\n", case(var))
    }

    #[test]
    fn every_key_parses_its_git_spellings() {
        let names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        let sampled: Vec<&str> = SAMPLES.iter().map(|s| s.0).collect();
        assert_eq!(names, sampled, "every key has a sample, in table order");
        let defaults = parse("").unwrap().0;
        for (name, value, check) in SAMPLES {
            assert!(
                !check(&defaults),
                "{name}: the sample must change the default"
            );
            let spellings: [fn(&str) -> String; 3] = [
                str::to_owned,
                str::to_ascii_lowercase,
                str::to_ascii_uppercase,
            ];
            for case in spellings {
                let text = config_text(name, value, case);
                let (c, warnings) = parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
                assert!(check(&c), "{text}: {c:#?}");
                // git warns whenever the deprecated key is set.
                let deprecated = *name == "core.fsyncObjectFiles";
                assert_eq!(warnings.is_empty(), !deprecated, "{text}");
            }
        }
        for key in KEYS {
            assert!(!key.doc.is_empty(), "{}", key.name);
        }
    }

    /// git master's `hook_config_lookup_all`, key by key in configuration order.
    #[test]
    fn hook_keys_as_git_master_reads_them() {
        let (c, warnings) = parse(
            "[hook]\n\tjobs = 2\n\tjobs = 0\n\tjobs = many\n\
             [hook \"a\"]\n\tevent = pre-receive\n\tcommand = one\n\tcommand = two\n\
             \tparallel = maybe\n\tparallel = yes\n\tjobs = 3\n\
             [hook \"b\"]\n\tevent = pre-receive\n\tevent = update\n\tenabled = false\n\
             \tenabled = nonsense\n\
             [hook \"a\"]\n\tevent = pre-receive\n\
             [hook \"c\"]\n\tevent = update\n\tevent =\n\
             [hook \"pre-receive\"]\n\tjobs = -1\n\tenabled = false\n\
             [hook \"post-update\"]\n\tjobs = 0\n\
             [hook \"x-event\"]\n\tevent = x-event\n\tcommand = true\n",
        )
        .unwrap();
        let h = &c.hooks.defined;
        assert_eq!(h.jobs, Some(2), "0 and a non-number are ignored");
        assert_eq!(h.names_for("pre-receive"), ["b", "a"], "last-seen order");
        assert_eq!(h.names_for("update"), ["b"], "an empty event clears c's");
        assert_eq!(h.command("a"), Some("two"));
        assert!(h.parallel("a") && !h.parallel("b"));
        assert!(h.disabled("b"), "a non-boolean enabled is ignored");
        assert_eq!(h.event_jobs("a"), Some(3));
        assert_eq!(h.event_jobs("pre-receive"), Some(online_cpus()));
        assert_eq!(h.event_jobs("post-update"), None);
        assert!(h.event_disabled("pre-receive") && !h.event_disabled("b"));
        assert_eq!(
            warnings,
            [
                "hook.jobs must be a positive integer or -1, ignoring: '0'",
                "hook.jobs must be an integer, ignoring: 'many'",
                "hook.a.parallel must be a boolean, ignoring: 'maybe'",
                "hook.post-update.jobs must be a positive integer or -1, ignoring: '0'",
                "hook friendly-name 'x-event' is the same as its event; this may cause \
                 ambiguity with hook.x-event.enabled",
            ]
            .map(|w| Warning(w.into()))
        );
        for text in [
            "[hook \"update\"]\n\tevent = post-receive\n",
            "[hook \"pre-push\"]\n\tevent = pre-push\n",
        ] {
            let err = parse(text).unwrap_err();
            assert!(matches!(err, Error::HookNameIsEvent(_)), "{text}");
            assert!(
                err.to_string().ends_with(
                    "collides with a known event name; please choose a different friendly-name"
                ),
                "{err}"
            );
        }
        // A friendly name's key without a value is fatal; hook.jobs without one is ignored.
        assert!(matches!(
            parse("[hook \"a\"]\n\tcommand\n"),
            Err(Error::MissingValue { key, .. }) if key == "hook.a.command"
        ));
        assert_eq!(parse("[hook]\n\tjobs\n").unwrap().0.hooks.defined.jobs, None);
    }

    #[test]
    fn boolean_and_number_spellings() {
        for v in ["true", "yes", "on", "1", "-1", "1k", "TRUE", "On", ""] {
            assert_eq!(parse_bool(v), Some(true), "{v}");
        }
        for v in ["false", "no", "off", "0", "FALSE", "Off"] {
            assert_eq!(parse_bool(v), Some(false), "{v}");
        }
        assert_eq!(parse_bool("nope"), None);
        assert_eq!(parse_int("1k"), Some(1024));
        assert_eq!(parse_int("2M"), Some(2 << 20));
        assert_eq!(parse_int("1g"), Some(1 << 30));
        assert_eq!(parse_int(" -3 "), Some(-3));
        assert_eq!(parse_int("1x"), None);
        for (v, d) in [
            ("ignore", DenyAction::Ignore),
            ("false", DenyAction::Ignore),
            ("WARN", DenyAction::Warn),
            ("refuse", DenyAction::Refuse),
            ("yes", DenyAction::Refuse),
            ("updateInstead", DenyAction::UpdateInstead),
        ] {
            assert_eq!(DenyAction::parse(v).unwrap(), d, "{v}");
        }
        assert!(matches!(DenyAction::parse("maybe"), Err(Error::BadBool(v)) if v == "maybe"));
    }

    /// The defaults of `builtin/receive-pack.c`, `refs/reftable-backend.c` and
    /// `Documentation/config/*.adoc`, and berth's own limits.
    #[test]
    fn defaults_equal_gits() {
        let c = Config::default();
        assert_eq!(
            c.advertisement,
            Advertisement {
                atomic: true,
                push_options: false,
                session_id: false,
                delta_base_offset: true,
                cert_nonce_seed: None,
                cert_nonce_slop: 0,
            }
        );
        assert_eq!(
            c.policy,
            RefPolicy {
                deny_deletes: false,
                deny_non_fast_forwards: false,
                deny_current_branch: DenyAction::Unconfigured,
                deny_delete_current: DenyAction::Unconfigured,
                hide_refs: vec![],
                shallow_update: false,
            }
        );
        assert_eq!(
            c.ingest,
            Ingest {
                max_input_size: 0,
                unpack_limit: 100,
                max_object_size: 1 << 30,
                fsck_objects: false,
                fsck: vec![],
                write_reverse_index: true,
                shared_repository: SharedRepository::Umask,
                loose_compression: gix_zlib::Compression::BEST_SPEED,
            }
        );
        assert_eq!(c.hooks.keep_alive, Some(Duration::from_secs(5)));
        assert!(c.hooks.proc_receive_refs.is_empty());
        assert_eq!(
            c.limits,
            Limits {
                max_commands: 4_000_000,
                max_request_bytes: 1 << 30,
                max_push_options: 10_000,
            }
        );
        assert_eq!(
            c.housekeeping,
            Housekeeping {
                auto_gc: true,
                auto_detach: true,
                update_server_info: false,
                auto_pack_limit: 50,
                auto_threshold: 6700,
            }
        );
        assert_eq!(c.identity, Identity::default());
        assert_eq!(
            c.durability,
            Durability {
                components: Components::DEFAULT,
                method: Method::Fsync,
                object_files: false,
                enabled: true,
                directories: crate::fsync::Directories::Unsynced,
            }
        );
        let rt = c.storage.reftable;
        assert_eq!(
            (rt.block_size, rt.restart_interval, rt.index_objects),
            (4096, 16, true)
        );
        assert_eq!(
            (
                rt.geometric_factor,
                rt.lock_timeout,
                rt.disable_auto_compact
            ),
            (2, Timeout::Millis(100), false)
        );

        // An empty configuration is the defaults, but for what depends on bareness: reflogs
        // are written unless the repository is bare.
        let (read, warnings) = parse("").unwrap();
        assert!(warnings.is_empty());
        let expected = Config {
            storage: Storage {
                log_ref_updates: LogRefUpdates::Normal,
                ..c.storage
            },
            ..c.clone()
        };
        assert_eq!(read, expected);
        let bare = parse("[core]\n\tbare = true\n").unwrap().0;
        assert_eq!(bare.storage.log_ref_updates, LogRefUpdates::Never);
        let non_bare = parse("[core]\n\tbare = false\n").unwrap().0;
        assert_eq!(non_bare.storage.log_ref_updates, LogRefUpdates::Normal);
    }

    #[test]
    fn last_one_wins_and_receive_over_transfer() {
        let c = parse("[receive]\n\tdenyDeletes = true\n\tdenydeletes = false\n")
            .unwrap()
            .0;
        assert!(!c.policy.deny_deletes);
        // Only the last value is parsed.
        let c = parse("[receive]\n\tdenyDeletes = bogus\n[receive]\n\tdenyDeletes = on\n")
            .unwrap()
            .0;
        assert!(c.policy.deny_deletes);
        // receive.* wins over transfer.* whatever their order.
        for text in [
            "[receive]\n\tunpackLimit = 3\n[transfer]\n\tunpackLimit = 9\n",
            "[transfer]\n\tunpackLimit = 9\n[receive]\n\tunpackLimit = 3\n",
        ] {
            assert_eq!(parse(text).unwrap().0.ingest.unpack_limit, 3, "{text}");
        }
        for text in [
            "[receive]\n\tfsckObjects = false\n[transfer]\n\tfsckObjects = true\n",
            "[transfer]\n\tfsckObjects = true\n[receive]\n\tfsckObjects = false\n",
        ] {
            assert!(!parse(text).unwrap().0.ingest.fsck_objects, "{text}");
        }
        // core.looseCompression over core.compression whatever their order, as git's
        // `zlib_compression_seen`; -1 is zlib's default; out of range is fatal, as in git.
        for text in [
            "[core]\n\tlooseCompression = 0\n\tcompression = 9\n",
            "[core]\n\tcompression = 9\n\tlooseCompression = 0\n",
        ] {
            let c = parse(text).unwrap().0;
            assert_eq!(c.ingest.loose_compression, gix_zlib::Compression::NONE, "{text}");
        }
        let c = parse("[core]\n\tcompression = -1\n").unwrap().0;
        assert_eq!(c.ingest.loose_compression, gix_zlib::Compression::DEFAULT);
        for (text, message) in [
            ("[core]\n\tcompression = 10\n", "bad zlib compression level 10"),
            ("[core]\n\tlooseCompression = -2\n", "bad zlib compression level -2"),
            ("[core]\n\tcompression = fast\n", "bad numeric config value 'fast'"),
        ] {
            assert_eq!(parse(text).unwrap_err().to_string(), message, "{text}");
        }
        let c = parse("[gc]\n\tautoDetach = false\n[maintenance]\n\tautoDetach = true\n")
            .unwrap()
            .0;
        assert!(c.housekeeping.auto_detach);
        // maintenance.auto only matters when receive.autogc is on.
        let c = parse("[receive]\n\tautogc = false\n[maintenance]\n\tauto = bogus\n")
            .unwrap()
            .0;
        assert!(!c.housekeeping.auto_gc);
        // Both hideRefs families, in configuration order.
        let c = parse(
            "[receive]\n\thideRefs = refs/a/\n[transfer]\n\thideRefs = !refs/a/b\n\
             [receive]\n\thideRefs = refs/c\n[receive \"sub\"]\n\thideRefs = refs/no\n",
        )
        .unwrap()
        .0;
        assert_eq!(c.policy.hide_refs, ["refs/a", "!refs/a/b", "refs/c"]);
    }

    #[test]
    fn errors_as_git() {
        let err = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            err("[receive]\n\tdenyDeletes = maybe\n"),
            "bad boolean config value 'maybe'"
        );
        assert_eq!(
            err("[receive]\n\tunpackLimit = lots\n"),
            "bad numeric config value 'lots'"
        );
        // A key git's receive-pack does not read fails nothing.
        let (c, _) = parse("[gc]\n\tautoPackLimit = lots\n").unwrap();
        assert_eq!(c.housekeeping.auto_pack_limit, 50);
        assert_eq!(
            err("[reftable]\n\tblockSize = 16m\n"),
            "reftable block size cannot exceed 16MB"
        );
        assert_eq!(
            err("[reftable]\n\trestartInterval = 65536\n"),
            "reftable block size cannot exceed 65535"
        );
        assert_eq!(
            err("[receive \"fsck\"]\n\tmissingEmail = bogus\n"),
            "Unknown fsck message type: 'bogus'"
        );
        // Keys are checked in table order.
        assert_eq!(
            err("[receive]\n\tautogc = x\n\tdenyDeletes = y\n"),
            "bad boolean config value 'y'"
        );
    }

    #[test]
    fn fsync_keys_as_git() {
        let (c, warnings) = parse(
            "[core]\n\tfsync = bogus,reference\n\tfsyncMethod = sometimes\n",
        )
        .unwrap();
        assert!(c.durability.components.intersects(Components::REFERENCE));
        assert_eq!(c.durability.method, Method::Fsync);
        assert_eq!(
            warnings,
            [
                Warning("ignoring unknown core.fsync component 'bogus'".into()),
                Warning("ignoring unknown core.fsyncMethod value 'sometimes'".into()),
            ]
        );
        // An empty value is the default; no value at all is git's "missing value".
        let c = parse("[core]\n\tfsync = none\n\tfsync =\n").unwrap().0;
        assert_eq!(c.durability.components, Components::DEFAULT);
        for text in ["[core]\n\tfsync\n", "[core]\n\tfsyncMethod\n"] {
            let e = parse(text).unwrap_err();
            assert!(matches!(e, Error::MissingValue { .. }), "{text}: {e}");
        }
        let env = Environment {
            test_fsync: Some("0".into()),
            ..Default::default()
        };
        let c = parse_with("[core]\n\tfsync = all\n", &env).unwrap().0;
        assert!(!c.durability.enabled);
        assert!(!c.durability.syncs(Components::ALL));
    }

    #[test]
    fn warnings_are_returned_not_printed() {
        let (c, warnings) = parse(
            "[receive \"fsck\"]\n\tnoSuchId = warn\n\tbadDate = ignore\n\tskipList = ~/skip\n",
        )
        .unwrap();
        assert_eq!(
            warnings,
            [Warning("skipping unknown msg id 'nosuchid'".into())]
        );
        assert_eq!(c.ingest.fsck.len(), 2);
        let mut out = Vec::new();
        write_warnings(&mut out, &warnings).unwrap();
        assert_eq!(out, b"warning: skipping unknown msg id 'nosuchid'\n");
    }

    #[test]
    fn environment_is_the_loaders_input() {
        let env = Environment {
            test_reftable_autocompaction: Some("false".into()),
            ..Default::default()
        };
        let c = parse_with("[reftable]\n\tautoCompaction = true\n", &env)
            .unwrap()
            .0;
        assert!(c.storage.reftable.disable_auto_compact);
        assert_eq!(
            expand_home(Path::new("~/skip"), Some(Path::new("/home/u"))),
            Path::new("/home/u/skip")
        );
        assert_eq!(expand_home(Path::new("~/skip"), None), Path::new("~/skip"));

        let dir = tempfile::tempdir().unwrap();
        let git_dir = dir.path();
        std::fs::write(git_dir.join("config"), "[receive]\n\tdenyDeletes = true\n").unwrap();
        let env = Environment {
            config_parameters: Some(
                "'receive.denyDeletes'='false' 'receive.fsck.skipList'='~/s'".into(),
            ),
            home: Some("/home/u".into()),
            ..Default::default()
        };
        let loaded = Config::load(git_dir, &env).unwrap();
        assert!(!loaded.config.policy.deny_deletes);
        assert_eq!(
            loaded.config.ingest.fsck,
            [FsckSetting::SkipList {
                path: "/home/u/s".into(),
                configured: "~/s".into(),
            }]
        );
        let env = Environment {
            config_parameters: Some("'receive.fsck.skipList'".into()),
            ..Default::default()
        };
        let e = Config::load(git_dir, &env).unwrap_err();
        assert_eq!(
            e.preamble().as_deref(),
            Some("error: missing value for 'receive.fsck.skiplist'")
        );
        assert_eq!(
            e.to_string(),
            "unable to parse 'receive.fsck.skiplist' from command-line config"
        );
    }

    #[test]
    fn config_parameters() {
        assert_eq!(
            parse_config_parameters("'receive.denydeletes'='false' 'a.b=c' 'x.y' 'q.r'='it'\\''s'"),
            vec![
                ("receive.denydeletes".into(), Some("false".into())),
                ("a.b".into(), Some("c".into())),
                ("x.y".into(), None),
                ("q.r".into(), Some("it's".into())),
            ]
        );
        // git master writes a key given without a value as `'key'=`.
        assert_eq!(
            parse_config_parameters("'receive.fsck.skiplist'= 'a.b'=''"),
            vec![
                ("receive.fsck.skiplist".into(), None),
                ("a.b".into(), Some(String::new()))
            ]
        );
    }
}
