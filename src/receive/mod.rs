//! One push, start to finish: [`run`] is the only place that knows the order of the phases,
//! and reads like git's `cmd_receive_pack` + `execute_commands`:
//!
//! ```text
//! advertise → read request → unpack (quarantine) → connectivity → hidden refs → pre-receive
//!           → migrate → aliased symrefs → proc-receive → decide + update (one ref transaction)
//!           → report → post-receive, post-update → housekeeping
//! ```
//!
//! Each phase takes what the previous one produced and returns early when it refuses; a
//! refused command keeps its [`Reason`](crate::protocol::report::Reason), and the quarantine is
//! dropped (removed) on every path that does not migrate it. The session writes only to the
//! sinks it is handed: the client's output and receive-pack's stderr. What happened is the
//! returned [`Outcome`].

use std::io::{BufReader, BufWriter, Read, Write};

use gix_object::bstr::{BString, ByteSlice};
use tracing::info_span;

mod advertise;
mod aliased;
mod command;
mod connectivity;
mod decide;
mod housekeeping;
mod missing;
mod options;
mod outcome;
mod run_hooks;
mod tee;
mod unpack;
mod update;

pub use crate::hooks::HookEnvironment;
pub use crate::protocol::report::{Reason, Rewrite, Status};
pub use crate::protocol::request::Command;
pub use housekeeping::{Maintenance, unattended as housekeeping_unattended};
pub use options::{
    CommitGate, Environment, GateCommit, GateRefusal, Missing, Options, RefAccess, RefChange,
    SessionStderr, protocol_version,
};
pub use outcome::{Fatal, Outcome, PushResult, Unpack};
pub use tee::{PackSink, PackTee};

use command::{Cmd, refuse_pending};
use decide::Decide;
use run_hooks::Hooks;

use crate::hooks::HookSet;
use crate::hooks::proc_receive::Proc;
use crate::objects::ingest::Quarantine;
use crate::objects::lookup::{Budget, Objects, Slots};
use crate::protocol::report;
use crate::protocol::request::{self, Start};
use crate::protocol::sideband::{Mode, Sideband};
use crate::protocol::{pktline, push_cert};
use crate::refs::RefStore;
use crate::repo::{Repository, policy};

/// Run one receive-pack session for the repository `dir` over `input` / `output`, with
/// receive-pack's own stderr (`stderr`) for what git writes there; nothing else is written to.
pub fn run(
    dir: &str,
    options: &Options,
    input: impl Read,
    output: impl Write,
    mut stderr: impl Write,
) -> Result<Outcome, Fatal> {
    let repo = Repository::open(dir, &options.env.for_config())?;
    crate::repo::config::write_warnings(&mut stderr, &repo.config_warnings)?;
    let config = &repo.config;
    // Signed pushes: the nonce is issued when the session starts, as git does.
    let push_cert_nonce = config.advertisement.cert_nonce_seed.as_deref().map(|seed| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        push_cert::nonce(repo.object_format, dir, now, seed)
    });
    // As git: every ref operation happens under `GIT_NAMESPACE`'s prefix; clients, reports and
    // hooks see the names without it.
    let namespace = policy::namespace_prefix(&options.env.namespace);
    let store = crate::refs::of_repository(&repo);
    let mut out = BufWriter::with_capacity(64 * 1024, output);

    if options.advertise_refs || !options.stateless_rpc {
        advertise::advertise(
            &mut out,
            &repo,
            store.as_ref(),
            &namespace,
            push_cert_nonce.as_deref(),
            options,
            &mut stderr,
        )?;
    }
    if options.advertise_refs {
        out.flush()?;
        return Ok(Outcome::default());
    }

    let mut reader = pktline::Reader::new(BufReader::with_capacity(64 * 1024, input));
    let limits = request::Limits {
        atomic: config.advertisement.atomic,
        push_options: config.advertisement.push_options,
        max_commands: config.limits.max_commands,
        max_push_options: config.limits.max_push_options,
        max_bytes: options
            .max_command_bytes
            .map_or(config.limits.max_request_bytes, |m| {
                m.min(config.limits.max_request_bytes)
            }),
        object_format: repo.object_format,
    };
    let req = {
        let _span = info_span!("read_commands").entered();
        match request::read_as::<Cmd, _>(&mut reader, &limits)? {
            Start::Nothing => {
                out.flush()?;
                return Ok(Outcome::default());
            }
            Start::Request(req) => req,
        }
    };
    // Looked up once there are commands: an advertisement, or a client with nothing to push,
    // runs no hook (nor does git look one up then).
    let hook_set = HookSet::discover(
        &repo.git_dir,
        &repo.config_file,
        &config.hooks.defined,
        &mut stderr,
    )?;
    let mode = if req.capabilities.side_band_64k {
        Mode::Band64k
    } else {
        Mode::None
    };
    let mut sb = Sideband::new(out, stderr, mode);
    let quiet = options.quiet || req.capabilities.quiet;
    let certificate = req
        .push_cert
        .as_deref()
        .map(|bytes| push_cert::Certificate {
            bytes,
            issued_nonce: push_cert_nonce.clone(),
            stateless: options.stateless_rpc,
            dir,
            seed: config
                .advertisement
                .cert_nonce_seed
                .as_deref()
                .unwrap_or_default(),
            slop: config.advertisement.cert_nonce_slop,
            object_format: repo.object_format,
        });
    let hooks = Hooks::new(
        &hook_set,
        options.in_process.as_ref(),
        &repo,
        &req.push_options,
        options,
        certificate,
    );
    let mut cmds = req.commands;
    if let Some(cert) = &hooks.certificate
        && !cert.options_match(&req.push_options)
    {
        refuse_pending(&mut cmds, Reason::InconsistentPushOptions);
    }

    let objects = gix_odb::at(&repo.objects_dir, repo.object_format).map_err(Fatal::Objects)?;
    // The push's later stores are opened with as many slots, without counting them again.
    let slots = Slots::of(&objects);
    // The phases after the unpack re-read the object directories at most once after a miss.
    let refresh = Budget::default();
    let needs_pack = cmds.iter().any(|c| !c.command.is_delete());
    let unpacked = unpack::unpack(
        reader.inner_mut(),
        needs_pack,
        &repo,
        &objects,
        &req.shallow,
        quiet,
        options,
        &mut sb,
    )?;
    let mut quarantine = unpacked.quarantine;
    let mut unpack_status = unpacked.status;
    let gate = options.commit_gate.as_deref();
    if matches!(unpack_status, Unpack::Failed(_)) {
        // A delta base missing because the commit gate's replica is behind: its words.
        match missing::after_unpack(gate, unpacked.base_missing, &mut sb)? {
            Some(text) => {
                refuse_pending(&mut cmds, Reason::Gate(text.clone()));
                unpack_status = Unpack::Failed(text);
            }
            None => refuse_pending(&mut cmds, Reason::UnpackerError),
        }
    } else {
        let session = Session {
            repo: &repo,
            store: store.as_ref(),
            refresh: refresh.clone(),
            slots,
            namespace: &namespace,
            hooks: &hooks,
            options,
            atomic: req.capabilities.atomic,
            advertised_push_options: req.capabilities.push_options,
        };
        if !options.skip_connectivity_check {
            let check = |cmds: &mut [Cmd]| {
                // Opened for each check: one after a gate's catch-up sees what it brought.
                let dir = quarantine
                    .as_ref()
                    .map_or(&*repo.objects_dir, Quarantine::path);
                let pushed = slots
                    .open(dir, repo.object_format)
                    .map_err(Fatal::Objects)?;
                connectivity::check_connectivity(
                    cmds,
                    &repo,
                    &pushed,
                    unpacked.received.as_ref(),
                    &req.shallow,
                    &objects,
                    refresh.clone(),
                )
            };
            let mut failed = check(&mut cmds)?;
            // Missing because the commit gate's replica is behind: checked again once it
            // caught up, or refused in the gate's words.
            if !failed.commands.is_empty() && missing::after_connectivity(gate, &mut cmds, &mut sb)?
            {
                failed = check(&mut cmds)?;
            }
            if let Some(q) = quarantine.as_mut() {
                q.set_incomplete(std::mem::take(&mut failed.incomplete));
            }
            if failed.combined.is_some()
                || cmds
                    .iter()
                    .any(|c| c.error() == Some(&Reason::MissingObjects))
            {
                connectivity::report_missing(&failed, &mut sb)?;
            }
        }
        execute_commands(&session, &mut cmds, quarantine.as_mut(), &mut sb)?;
    }
    drop(quarantine);

    let kind = match (
        req.capabilities.report_status_v2,
        req.capabilities.report_status,
    ) {
        (true, _) => report::Kind::V2,
        (false, true) => report::Kind::V1,
        _ => report::Kind::None,
    };
    let statuses: Vec<Status> = cmds.iter().map(Cmd::status).collect();
    send_report(kind, &unpack_status, &cmds, &statuses, &mut sb)?;
    {
        let _span = info_span!("post_receive").entered();
        hooks.post_receive(&cmds, &mut sb)?;
        hooks.post_update(&cmds, &mut sb)?;
    }
    housekeeping::housekeeping(&repo, hooks.keepalive, hooks.environment, &mut sb)?;
    sb.finish()?;
    // In place: a `Cmd` is larger than the `Command` it holds.
    let commands = cmds.into_iter().map(|c| c.command).collect();
    Ok(Outcome {
        requested: true,
        unpack: unpack_status,
        commands,
        statuses,
    })
}

/// What the phases after the unpack share.
struct Session<'a> {
    repo: &'a Repository,
    store: &'a dyn RefStore,
    /// How often a missing object may still make the push re-read the object directories.
    refresh: Budget,
    /// How many pack indices the push's object stores hold.
    slots: Slots,
    /// `GIT_NAMESPACE`'s prefix, or empty.
    namespace: &'a str,
    hooks: &'a Hooks<'a>,
    options: &'a Options,
    /// The client asked for an atomic push.
    atomic: bool,
    /// The client sent push options (the capability was negotiated).
    advertised_push_options: bool,
}

/// The `.keep` files that protect a migrated pack until the refs point into it; removed when
/// the ref update is over, however it ended.
struct KeepFiles(Vec<std::path::PathBuf>);

impl Drop for KeepFiles {
    fn drop(&mut self) {
        for keep in &self.0 {
            let _ = std::fs::remove_file(keep);
        }
    }
}

/// git's `execute_commands`: from the checks that need the received objects to the ref
/// transaction, one named step each, returning as soon as no command is left to process.
fn execute_commands<W: Write, E: Write>(
    s: &Session<'_>,
    cmds: &mut [Cmd],
    quarantine: Option<&mut Quarantine>,
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    refuse_hidden(s, cmds);
    refuse_by_access(s, cmds, quarantine.as_deref(), sb)?;
    let proc_receive = select_proc_receive(s, cmds);

    let accepted = {
        let _span = info_span!("pre_receive").entered();
        s.hooks.pre_receive(cmds, quarantine.as_deref(), sb)?
    };
    if !accepted {
        refuse_pending(cmds, Reason::PreReceiveDeclined);
        return Ok(());
    }
    if !cmds.iter().any(Cmd::pending) {
        return Ok(());
    }

    let (_keeps, pending) = match quarantine {
        None => (KeepFiles(Vec::new()), None),
        Some(q) => {
            let _span = info_span!("migrate").entered();
            match q.migrate(&s.repo.objects_dir) {
                Ok(m) => (KeepFiles(m.keeps), m.pending),
                Err(e) => {
                    // git's report says no more; the operator's log says why.
                    tracing::error!(error = %crate::escape::Escaped::text(&e.to_string()), "cannot move the push's objects into the repository");
                    refuse_pending(cmds, Reason::MigrateFailed);
                    return Ok(());
                }
            }
        }
    };
    // However the update ends (a client gone mid-way included), what needed a shallow root
    // is settled after it.
    let updated = update_refs(s, cmds, proc_receive, sb);
    if let Some(pending) = pending {
        s.repo.settle_incomplete(pending);
    }
    updated
}

/// From the migrated objects to the ref transaction: symbolic refs, `proc-receive`, the
/// per-command decisions and the update.
fn update_refs<W: Write, E: Write>(
    s: &Session<'_>,
    cmds: &mut [Cmd],
    proc_receive: bool,
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    if !cmds.iter().any(Cmd::pending) {
        return Ok(());
    }
    let _span = info_span!("update").entered();
    aliased::check_aliased_updates(cmds, s.store, s.namespace, sb)?;
    if proc_receive {
        let _span = info_span!("proc_receive").entered();
        if !s
            .hooks
            .proc_receive(cmds, s.atomic, s.advertised_push_options, sb)?
        {
            for c in cmds.iter_mut().filter(|c| c.pending()) {
                if c.proc != Proc::Returned && (c.proc == Proc::Scheduled || s.atomic) {
                    c.refuse(Reason::ProcReceiveFailed);
                }
            }
        }
    }
    // Opened after the migration: its first lookup lists the packs that came with the push.
    let objects = s
        .slots
        .open(&s.repo.objects_dir, s.repo.object_format)
        .map(|h| Objects::new(&h, s.refresh.clone()))
        .map_err(Fatal::Objects)?;
    let ctx = Decide {
        repo: s.repo,
        namespace: s.namespace,
        hooks: s.hooks,
        objects: &objects,
        worktrees: s.repo.worktrees(),
        refs: s.store.snapshot().map_err(Fatal::Refs)?,
        kinds: Default::default(),
        gate: s.options.commit_gate.as_deref(),
    };
    let config = &s.repo.config;
    let committer = s.options.env.committer(
        config.identity.name.as_deref(),
        config.identity.email.as_deref(),
    );
    if s.atomic {
        update::execute_atomic(cmds, &ctx, s.store, &committer, sb)
    } else {
        update::execute_non_atomic(cmds, &ctx, s.store, &committer, sb)
    }
}

/// Refuse updates of hidden refs (`receive.hideRefs`), as git's `reject_updates_to_hidden`.
fn refuse_hidden(s: &Session<'_>, cmds: &mut [Cmd]) {
    // Nothing is hidden without patterns: no per-command name to build then.
    if s.repo.config.policy.hide_refs.is_empty() {
        return;
    }
    for c in cmds.iter_mut().filter(|c| c.pending()) {
        let full = [s.namespace.as_bytes(), c.command.name.as_slice()].concat();
        if policy::is_hidden_in_namespace(
            Some(c.command.name.as_bstr()),
            full.as_bstr(),
            &s.repo.config.policy.hide_refs,
        ) {
            let delete = c.command.is_delete();
            c.refuse(Reason::HiddenRef { delete });
        }
    }
}

/// Refuse the updates the embedder's [`RefAccess`] check denies (`berth serve --access`),
/// before any hook sees them (all of an atomic push when one is denied). Whether an update is a fast-forward is decided against the
/// quarantine, where the pushed objects are until the migration.
fn refuse_by_access<W: Write, E: Write>(
    s: &Session<'_>,
    cmds: &mut [Cmd],
    quarantine: Option<&Quarantine>,
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    let Some(access) = &s.options.ref_access else {
        return Ok(());
    };
    let _span = info_span!("access").entered();
    // A pushed symbolic ref changes the ref it points to (`check_aliased_updates`, later): that
    // ref is judged too, as the ref the push really writes.
    let full: Vec<Vec<u8>> = cmds
        .iter()
        .map(|c| [s.namespace.as_bytes(), c.command.name.as_slice()].concat())
        .collect();
    let targets = s
        .store
        .symref_targets(&full.iter().map(Vec::as_slice).collect::<Vec<_>>());
    drop(full);
    let mut objects = None;
    let mut denied = false;
    for (c, target) in cmds.iter_mut().zip(targets).filter(|(c, _)| c.pending()) {
        let (old, new) = (c.command.old, c.command.new);
        let change = if c.command.is_delete() {
            RefChange::Delete
        } else if old.is_null() {
            RefChange::Create
        } else {
            if objects.is_none() {
                let dir = quarantine.map_or(s.repo.objects_dir.as_path(), Quarantine::path);
                let odb = s
                    .slots
                    .open(dir, s.repo.object_format)
                    .map(|h| Objects::new(&h, s.refresh.clone()))
                    .map_err(Fatal::Objects)?;
                objects = Some(odb);
            }
            match &objects {
                Some(odb) if decide::is_ancestor(odb, old, new) => RefChange::FastForward,
                _ => RefChange::Rewind,
            }
        };
        // The target as the rules see names: inside the namespace, without its prefix.
        let target = target
            .flatten()
            .map(|t| match t.strip_prefix(s.namespace.as_bytes()) {
                Some(rel) => BString::from(rel),
                None => t,
            });
        let verdict = access
            .check(c.command.name.as_bstr(), old, new, change)
            .and_then(|()| match &target {
                Some(t) => access
                    .check(t.as_bstr(), old, new, change)
                    .map_err(|text| format!("{text} (the symbolic ref's target {t})")),
                None => Ok(()),
            });
        if let Err(text) = verdict {
            // One line for the report, whatever the checker wrote.
            let text: String = text
                .chars()
                .map(|ch| if ch.is_control() { ' ' } else { ch })
                .collect();
            sb.error(format_args!("{}: {text}", c.command.name))?;
            c.refuse(Reason::AccessDenied(text));
            denied = true;
        }
    }
    // An atomic push is all or nothing: one denied ref refuses the others.
    if denied && s.atomic {
        refuse_pending(cmds, Reason::AtomicPushFailure);
    }
    Ok(())
}

/// Mark the commands `receive.procReceiveRefs` hands to the proc-receive hook; whether any is.
fn select_proc_receive(s: &Session<'_>, cmds: &mut [Cmd]) -> bool {
    let mut any = false;
    for c in cmds.iter_mut().filter(|c| c.should_process()) {
        if crate::repo::config::ProcReceiveRef::selects(
            &s.repo.config.hooks.proc_receive_refs,
            &c.command.name,
            c.command.old.is_null(),
            c.command.new.is_null(),
        ) {
            c.proc = Proc::Scheduled;
            any = true;
        }
    }
    any
}

/// Send report-status (v1 or v2) over band 1, rendered from each command's status.
fn send_report<W: Write, E: Write>(
    kind: report::Kind,
    unpack: &Unpack,
    cmds: &[Cmd],
    statuses: &[Status],
    sb: &mut Sideband<W, E>,
) -> std::io::Result<()> {
    if kind == report::Kind::None {
        return Ok(());
    }
    let _span = info_span!("report").entered();
    let entries = cmds.iter().zip(statuses).map(|(c, status)| report::Entry {
        name: c.command.name.as_bstr(),
        status,
    });
    let unpack = match unpack {
        Unpack::Failed(e) => Some(e.as_str()),
        Unpack::Ok | Unpack::NotNeeded => None,
    };
    report::send(sb, kind, unpack, entries)
}
