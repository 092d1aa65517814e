//! How a push is run: the invocation ([`Options`]) and the process environment it depends on
//! ([`Environment`]), read once by the binary or the server, never by the session itself.

use std::sync::Arc;

use gix_hash::ObjectId;
use gix_object::bstr::{BStr, BString};

use crate::hooks;

/// How receive-pack was invoked.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--stateless-rpc`: no advertisement; read the request, answer, exit (smart HTTP POST).
    pub stateless_rpc: bool,
    /// `--advertise-refs` / `--http-backend-info-refs`: only advertise (smart HTTP GET).
    pub advertise_refs: bool,
    /// `-q` / `--quiet`.
    pub quiet: bool,
    /// `--skip-connectivity-check`.
    pub skip_connectivity_check: bool,
    /// `--reject-thin-pack-for-testing`: do not complete thin packs (git's test option).
    pub reject_thin_pack: bool,
    /// The protocol version the client asked for (see [`protocol_version`]); 0 for none.
    pub protocol_version: u32,
    /// In-process hooks of an embedding program, run before the process hooks.
    pub in_process: Option<hooks::InProcessHooks>,
    /// Environment for every hook the session runs (`berth serve` passes git-http-backend's
    /// CGI variables: `REMOTE_USER`, `REMOTE_ADDR`, `GIT_PROTOCOL`).
    pub hook_env: Vec<(String, BString)>,
    /// What hooks (and the `git` commands a push runs) take from this process's environment:
    /// all of it, as git's receive-pack (the default), or a clean environment (`berth serve`).
    pub hook_environment: hooks::HookEnvironment,
    /// What the session takes from the process environment.
    pub env: Environment,
    /// What the `stderr` the session is given is.
    pub stderr: SessionStderr,
    /// Who may update which ref (`berth serve --access`): asked about every pushed ref after
    /// the connectivity check and before any hook runs (git's order: ref refusals, then
    /// pre-receive); a refused ref gets `ng <ref> <the checker's text>` and the others of a
    /// non-atomic push go on. `None` lets every ref through to the usual checks.
    pub ref_access: Option<Arc<dyn RefAccess>>,
    /// A cap on the bytes of commands and push options, below the repository's
    /// `berth.maxRequestBytes` (`berth serve --max-command-bytes`).
    pub max_command_bytes: Option<u64>,
    /// A replicated deployment's commit point (`berth serve --cluster`): told each prepared ref
    /// transaction (locks held, old values checked) before it is committed here. `None`: the
    /// push commits alone, as git does.
    pub commit_gate: Option<Arc<dyn CommitGate>>,
    /// Sees the pushed pack's bytes as the unpack phase reads them (`berth serve --cluster`
    /// streams them to the other replicas). `None`: nobody does.
    pub pack_tee: Option<Arc<dyn super::PackTee>>,
}

/// What the `stderr` a session is given is: it decides how a hook's output reaches it when the
/// output goes to receive-pack's stderr (no sideband).
#[derive(Debug, Clone, Default)]
pub enum SessionStderr {
    /// A writer of the caller's (`berth serve`, an embedding program): a hook's output is read
    /// from a pipe and written to it.
    #[default]
    Writer,
    /// The `stderr` writer writes to this file unbuffered (`berth receive-pack` hands over its
    /// own stderr): a hook writes there itself, with no pipe and no relay, as git's hooks do
    /// without sideband.
    File(Arc<std::os::fd::OwnedFd>),
}

/// The commit point of a replicated push, between this repository's [`crate::refs::Prepared`]
/// and its commit. The session calls [`CommitGate::decide`] with the batch it holds prepared;
/// `Ok` commits it here, then tells the returned [`GateCommit`] whether that worked; `Err`
/// drops the prepared transaction (abort: nothing written) and refuses the batch's refs with
/// the refusal's text as their `ng` reason (`cluster: …`; also on the client's band 2) — but
/// for a non-atomic
/// push whose refusal names only some refs ([`GateRefusal::lost`]), the session refuses those
/// and tries the others again in a new transaction.
pub trait CommitGate: Send + Sync + std::fmt::Debug {
    /// Decide `updates` (the batch still prepared, in order), checked against `current` (the
    /// refs the push was decided on).
    fn decide(
        &self,
        updates: &[crate::refs::RefUpdate],
        current: &crate::refs::Refs,
    ) -> Result<Box<dyn GateCommit>, GateRefusal>;

    /// How many more transactions a non-atomic batch tries for the refs a refusal did not
    /// name among its [`GateRefusal::lost`] (the gate's retry policy).
    fn lost_ref_retries(&self) -> u32;

    /// Before the session locks `updates`' refs: the push's turn to lock them, held until
    /// the batch is committed or given up (dropped after its locks are released). A
    /// replicated push may wait here for other pushes of these refs to be decided (the
    /// cluster's wait–die, which keeps pushes of one ref through several nodes from refusing
    /// each other all; `format` says whether the store locks each ref or all at once). By
    /// default none.
    fn turn(
        &self,
        updates: &[crate::refs::RefUpdate],
        format: crate::repo::RefFormat,
    ) -> Option<Box<dyn Send>> {
        let _ = (updates, format);
        None
    }

    /// Objects this push builds on are not here: a thin pack's delta base, or an object a new
    /// ref value reaches. Whether that is the gate's doing (a replica behind its cluster's
    /// log, which may catch up meanwhile) and what becomes of the push; asked at most once a
    /// push. By default not the gate's: git's refusal stands.
    fn objects_missing(&self) -> Missing {
        Missing::Stands
    }
}

/// What a [`CommitGate`] makes of objects missing for a push ([`CommitGate::objects_missing`]).
#[derive(Debug, Clone)]
pub enum Missing {
    /// Not the gate's doing: git's refusal stands.
    Stands,
    /// They may be here now (the replica caught up): a check runs again. What cannot be run
    /// again (a pack already read) is refused with this refusal's text.
    MayBeHere(GateRefusal),
    /// Missing for the gate's reason: the commands are refused with this text.
    Refused(GateRefusal),
}

/// Why a [`CommitGate`] did not commit a batch.
#[derive(Debug, Clone)]
pub struct GateRefusal {
    /// Why, in the gate's own type; its `Display` is what the client is told (band 2, after
    /// `cluster: `).
    pub reason: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    /// The positions (in the batch) of the refs that caused it — another push changed them
    /// first — when the others would commit: a non-atomic push tries those again. `None`: the
    /// whole batch is refused.
    pub lost: Option<Vec<usize>>,
}

impl GateRefusal {
    /// The whole batch refused for `reason`.
    pub fn new(reason: impl std::error::Error + Send + Sync + 'static) -> Self {
        GateRefusal {
            reason: std::sync::Arc::new(reason),
            lost: None,
        }
    }

    /// Refused for `reason` because of the refs at `lost` (see [`GateRefusal::lost`]).
    pub fn lost(reason: impl std::error::Error + Send + Sync + 'static, lost: Vec<usize>) -> Self {
        GateRefusal {
            lost: Some(lost),
            ..GateRefusal::new(reason)
        }
    }
}

/// A batch the cluster committed: told how the local commit went, answers whether the push
/// may be acknowledged (`Err`: the refs are refused with its `Display`, though committed).
pub trait GateCommit: Send {
    /// The local commit succeeded (`true`) or failed.
    fn finish(
        self: Box<Self>,
        committed_here: bool,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// What a pushed ref update does to the ref, for a [`RefAccess`] check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefChange {
    /// The ref does not exist yet (old value is the null id).
    Create,
    /// The new value has the old one in its history.
    FastForward,
    /// The new value does not contain the old one (a force push), or either is not a commit.
    Rewind,
    /// The ref is deleted (new value is the null id).
    Delete,
}

/// An access check for pushed refs, run in-process for each ref before any hook.
pub trait RefAccess: Send + Sync + std::fmt::Debug {
    /// `Ok(())` lets the update of `name` (as the client sent it, without `GIT_NAMESPACE`)
    /// from `old` to `new` go on; `Err(text)` refuses it with `ng <name> <text>` (one line).
    fn check(
        &self,
        name: &BStr,
        old: ObjectId,
        new: ObjectId,
        change: RefChange,
    ) -> Result<(), String>;
}

/// The part of the process environment a push depends on, as git's receive-pack reads it.
/// [`Environment::from_process`] reads it; an embedder may fill it itself.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `GIT_NAMESPACE`: every ref operation happens under its prefix (empty for none).
    pub namespace: String,
    /// The reflog identity's name: `GIT_COMMITTER_NAME` (smart HTTP puts the authenticated
    /// user here, as git-http-backend does); `user.name` or the login name when `None`.
    pub committer_name: Option<String>,
    /// The reflog identity's email: `GIT_COMMITTER_EMAIL`; `user.email` or
    /// `<login>@<host>` when `None`.
    pub committer_email: Option<String>,
    /// `GIT_COMMITTER_DATE`, the reflog time; now when `None`.
    pub committer_date: Option<String>,
    /// The login name (`USER`), for the default reflog identity.
    pub user: Option<String>,
    /// The host name (`/etc/hostname`), for the default reflog email.
    pub host: Option<String>,
    /// `GIT_ALTERNATE_OBJECT_DIRECTORIES` as inherited: hooks that see the quarantine get it
    /// with the repository's object directory appended.
    pub alternate_object_directories: Option<String>,
    /// `GIT_USER_AGENT`: the `agent=` capability instead of berth's own.
    pub user_agent: Option<String>,
    /// `HOME`, for a repository named `~/<path>` and a `~/` in `receive.fsck.skipList`.
    pub home: Option<String>,
    /// `GIT_CONFIG_PARAMETERS`: the `git -c key=value` settings, applied over the files.
    pub config_parameters: Option<String>,
    /// `GIT_TEST_REFTABLE_AUTOCOMPACTION`: a false value turns reftable auto-compaction off.
    pub test_reftable_autocompaction: Option<String>,
    /// `GIT_TEST_FSYNC`: a false value syncs nothing (git's test suite sets it).
    pub test_fsync: Option<String>,
    /// Not from the process: what is synced whatever `core.fsync` says (a cluster node's
    /// `--cluster-durability`; [`crate::fsync::Floor::CoreFsync`] by default).
    pub durability_floor: crate::fsync::Floor,
}

impl Environment {
    /// Read the environment of this process.
    pub fn from_process() -> Self {
        let var = |k: &str| std::env::var(k).ok();
        Environment {
            namespace: var("GIT_NAMESPACE").unwrap_or_default(),
            committer_name: var("GIT_COMMITTER_NAME"),
            committer_email: var("GIT_COMMITTER_EMAIL"),
            committer_date: var("GIT_COMMITTER_DATE"),
            user: var("USER"),
            host: std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned()),
            alternate_object_directories: var("GIT_ALTERNATE_OBJECT_DIRECTORIES"),
            user_agent: var("GIT_USER_AGENT"),
            home: var("HOME"),
            config_parameters: var("GIT_CONFIG_PARAMETERS"),
            test_reftable_autocompaction: var("GIT_TEST_REFTABLE_AUTOCOMPACTION"),
            test_fsync: var("GIT_TEST_FSYNC"),
            durability_floor: Default::default(),
        }
    }

    /// What the configuration loader takes from it.
    pub(crate) fn for_config(&self) -> crate::repo::config::Environment {
        crate::repo::config::Environment {
            config_parameters: self.config_parameters.clone(),
            test_reftable_autocompaction: self.test_reftable_autocompaction.clone(),
            test_fsync: self.test_fsync.clone(),
            durability_floor: self.durability_floor,
            home: self.home.as_ref().map(std::path::PathBuf::from),
        }
    }

    /// The identity git would write into reflogs: `GIT_COMMITTER_*`, else `user.*`, else the
    /// login name at the host.
    pub(crate) fn committer(
        &self,
        user_name: Option<&str>,
        user_email: Option<&str>,
    ) -> gix_actor::Signature {
        let user = self.user.as_deref().unwrap_or("berth");
        let host = self.host.as_deref().unwrap_or("localhost");
        let name = self
            .committer_name
            .as_deref()
            .or(user_name)
            .unwrap_or(user)
            .to_owned();
        let email = self
            .committer_email
            .clone()
            .or_else(|| user_email.map(str::to_owned))
            .unwrap_or_else(|| format!("{user}@{host}"));
        let time = self
            .committer_date
            .as_deref()
            .and_then(|d| gix_date::parse(d, None).ok())
            .unwrap_or_else(now_local);
        gix_actor::Signature {
            name: without_crud(name.as_bytes()),
            email: without_crud(email.as_bytes()),
            time,
        }
    }
}

/// Now, with the local time zone's offset as git takes it (`localtime_r`'s `tm_gmtoff`, which
/// honours `TZ` and reads `/etc/localtime`). Not `gix_date::Time::now_local_or_utc`: jiff's
/// system time zone lists the whole zoneinfo directory (80 `getdents64` calls, 1.6 % of a
/// 10,000-ref push, measured with perf).
#[allow(unsafe_code)]
fn now_local() -> gix_date::Time {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let t = seconds as libc::time_t;
    // SAFETY: `localtime_r` only writes the `tm` it is given, which is zeroed plain data.
    let offset = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            0
        } else {
            tm.tm_gmtoff as i32
        }
    };
    gix_date::Time::new(seconds, offset)
}

/// git's `crud()` (ident.c): what is stripped from both ends of an identity's name and email.
fn is_crud(c: u8) -> bool {
    c <= 32 || b",:;<>\"\\'".contains(&c)
}

/// A name or email as git writes it into an identity (ident.c's
/// `strbuf_addstr_without_crud`): crud stripped from both ends, and `\n`, `<`, `>` removed
/// everywhere, so that a reflog line always parses (whoever the client says it is).
pub fn without_crud(s: &[u8]) -> BString {
    let start = s.iter().position(|&c| !is_crud(c)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&c| !is_crud(c))
        .map_or(start, |e| e + 1);
    s[start..end.max(start)]
        .iter()
        .copied()
        .filter(|c| !b"\n<>".contains(c))
        .collect::<Vec<u8>>()
        .into()
}

/// The protocol version a `GIT_PROTOCOL` value (or `Git-Protocol` header) asks for: the highest
/// `version=N`, 0 when none.
pub fn protocol_version(git_protocol: &str) -> u32 {
    git_protocol
        .split(':')
        .filter_map(|kv| kv.strip_prefix("version=")?.parse::<u32>().ok())
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_as_git_writes_them() {
        for (raw, clean) in [
            ("alice", "alice"),
            ("  <alice>  ", "alice"),
            ("a<b>c\nd", "abcd"),
            ("\"'x, y;:\\", "x, y"),
            ("<>", ""),
            ("\u{1b}[31mred\u{1b}", "[31mred"),
            ("ev\til", "ev\til"),
        ] {
            assert_eq!(without_crud(raw.as_bytes()), clean, "{raw:?}");
        }
    }
}
