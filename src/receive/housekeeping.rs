//! Housekeeping after every push, whatever its outcome (git's `cmd_receive_pack` tail).

use std::io::{self, Write};

use tracing::info_span;

use super::run_hooks::Hooks;
use crate::hooks;
use crate::protocol::sideband::Sideband;
use crate::repo::Repository;

/// What git's receive-pack does after every push, whatever its outcome: `git maintenance run
/// --auto` (`receive.autogc`; it decides itself whether there is anything to do, e.g. too many
/// packs) with its output relayed to the client, and `git update-server-info` when
/// `receive.updateServerInfo` asks for it.
pub(super) fn housekeeping<W: Write, E: Write>(
    repo: &Repository,
    keepalive: Option<std::time::Duration>,
    environment: &hooks::HookEnvironment,
    sb: &mut Sideband<W, E>,
) -> io::Result<()> {
    if let Some(maintenance) = maintenance(repo, environment) {
        let _span = info_span!("auto_gc").entered();
        hooks::run_process(maintenance, None, keepalive, &mut Hooks::to_client(sb))?;
    }
    if let Some(mut p) = update_server_info(repo, environment)
        && let Ok(out) = p.output()
    {
        sb.stderr().write_all(&out.stderr)?;
    }
    Ok(())
}

/// Whether [`unattended`] housekeeping asks git for its maintenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maintenance {
    /// As after a push: when `receive.autogc` says.
    AsConfigured,
    /// Not this time: the caller found nothing for it to do.
    Skip,
}

/// [`housekeeping`] after a push that has no client to tell, its output discarded: a
/// replica's copy of a push a cluster accepted on another node (`cluster/replica.rs`), an
/// ordinary repository to maintain as any a push reached.
pub fn unattended(
    repo: &Repository,
    environment: &hooks::HookEnvironment,
    maintain: Maintenance,
) -> io::Result<()> {
    use std::process::Stdio;
    let maintenance = match maintain {
        Maintenance::AsConfigured => maintenance(repo, environment),
        Maintenance::Skip => None,
    };
    if let Some(mut maintenance) = maintenance {
        let _span = info_span!("auto_gc").entered();
        maintenance
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        maintenance.status()?;
    }
    if let Some(mut p) = update_server_info(repo, environment) {
        p.stdout(Stdio::null()).stderr(Stdio::null());
        p.status()?;
    }
    Ok(())
}

/// `git update-server-info`, its stdin closed, when `receive.updateServerInfo` asks for it.
fn update_server_info(
    repo: &Repository,
    environment: &hooks::HookEnvironment,
) -> Option<std::process::Command> {
    if !repo.config.housekeeping.update_server_info {
        return None;
    }
    let mut p = git(repo, environment, &["update-server-info"]);
    p.stdin(std::process::Stdio::null());
    Some(p)
}

/// `git maintenance run --auto --quiet` as git's receive-pack runs it, detached as
/// `maintenance.autoDetach` (or `gc.autoDetach`) says; `None` when `receive.autogc` is off.
fn maintenance(
    repo: &Repository,
    environment: &hooks::HookEnvironment,
) -> Option<std::process::Command> {
    let housekeeping = &repo.config.housekeeping;
    if !housekeeping.auto_gc {
        return None;
    }
    let detach = match housekeeping.auto_detach {
        true => "--detach",
        false => "--no-detach",
    };
    let args = ["maintenance", "run", "--auto", "--quiet", detach];
    Some(git(repo, environment, &args))
}

/// `git <args>` in `repo`'s git directory, in the hooks' environment.
fn git(
    repo: &Repository,
    environment: &hooks::HookEnvironment,
    args: &[&str],
) -> std::process::Command {
    let mut p = std::process::Command::new(environment.git_program());
    environment.apply(&mut p);
    environment.in_git_dir(&mut p, &repo.git_dir);
    p.args(args);
    p
}
