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
    let git = |args: &[&str]| {
        let mut p = std::process::Command::new(environment.git_program());
        environment.apply(&mut p);
        environment.in_git_dir(&mut p, &repo.git_dir);
        p.args(args);
        p
    };
    if repo.config.housekeeping.auto_gc {
        let _span = info_span!("auto_gc").entered();
        let detach = if repo.config.housekeeping.auto_detach {
            "--detach"
        } else {
            "--no-detach"
        };
        let maintenance = git(&["maintenance", "run", "--auto", "--quiet", detach]);
        hooks::run_process(maintenance, None, keepalive, &mut Hooks::to_client(sb))?;
    }
    if repo.config.housekeeping.update_server_info {
        let mut p = git(&["update-server-info"]);
        p.stdin(std::process::Stdio::null());
        if let Ok(out) = p.output() {
            sb.stderr().write_all(&out.stderr)?;
        }
    }
    Ok(())
}
