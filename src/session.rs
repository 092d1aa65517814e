//! One push, start to finish. This is the only module that knows the order of the stages:
//!
//! ```text
//! advertise → read request → ingest (quarantine) → connectivity → hidden refs
//!           → migrate → decide (policy per ref) → commit (one ref transaction) → report
//! ```
//!
//! Each stage takes what the previous one produced; a rejected push stops at the stage that
//! rejects it, and the quarantine is dropped (removed) on every path that does not migrate it.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::{self, BufReader, BufWriter, Read, Write};

use gix_hash::ObjectId;
use gix_object::bstr::{BString, ByteSlice};
use gix_object::{Exists, Find, Kind};
use gix_odb::Header;
use tracing::info_span;

use crate::config::DenyAction;
use crate::connectivity::{self, Check};
use crate::ingest::{self, Quarantine};
use crate::refs::{FilesStore, RefError, RefUpdate, Refs, TransactionError};
use crate::repository::Repository;
use crate::request::{self, Command, Start};
use crate::sideband::{Mode, Sideband};
use crate::{advertise, pktline, policy, report};

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
}

/// What ends a session without a report: git's receive-pack `die()`s in these cases, so the
/// client sees `fatal: <message>` on stderr and exit code 128.
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    /// The repository cannot be served.
    #[error(transparent)]
    Repository(#[from] crate::repository::Error),
    /// The request is malformed or over a limit.
    #[error(transparent)]
    Request(#[from] request::Error),
    /// The refs could not be read.
    #[error("unable to read refs: {0}")]
    Refs(String),
    /// The object database could not be opened.
    #[error("unable to open object database: {0}")]
    Objects(io::Error),
    /// Writing to the client failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// One command on its way through the pipeline.
struct Cmd {
    command: Command,
    error: Option<Cow<'static, str>>,
    did_not_exist: bool,
}

impl Cmd {
    fn pending(&self) -> bool {
        self.error.is_none()
    }
}

/// Run one receive-pack session for the repository `dir` over `input` / `output`, with the
/// server's stderr for messages when there is no sideband.
pub fn run(
    dir: &str,
    options: &Options,
    input: impl Read,
    output: impl Write,
    stderr: impl Write,
) -> Result<(), Fatal> {
    let repo = Repository::open(dir)?;
    let config = &repo.config;
    let store = FilesStore::open(&repo.git_dir, config.log_ref_updates);
    let mut out = BufWriter::with_capacity(64 * 1024, output);

    if options.advertise_refs || !options.stateless_rpc {
        let _span = info_span!("advertise").entered();
        let refs = store.snapshot().map_err(Fatal::Refs)?;
        if protocol_version() == 1 {
            pktline::write_data(&mut out, b"version 1\n")?;
        }
        let alternates = alternate_tips(&repo.objects_dir);
        let caps = advertise::capabilities(config);
        advertise::write(
            &mut out,
            &refs,
            |n| policy::is_hidden(n.as_bstr(), &config.hide_refs),
            &alternates,
            &caps,
        )?;
    }
    if options.advertise_refs {
        return Ok(());
    }

    let mut reader = pktline::Reader::new(BufReader::with_capacity(64 * 1024, input));
    let limits = request::Limits {
        atomic: config.advertise_atomic,
        push_options: config.advertise_push_options,
        max_commands: config.max_commands,
        max_push_options: config.max_push_options,
        max_bytes: config.max_request_bytes,
    };
    let req = {
        let _span = info_span!("read_commands").entered();
        match request::read(&mut reader, &limits)? {
            Start::Nothing => return Ok(()),
            Start::Request(req) => req,
        }
    };
    let mode = if req.capabilities.side_band_64k {
        Mode::Band64k
    } else {
        Mode::None
    };
    let mut sb = Sideband::new(out, stderr, mode);
    let quiet = options.quiet || req.capabilities.quiet;
    let atomic = req.capabilities.atomic;
    let mut cmds: Vec<Cmd> = req
        .commands
        .into_iter()
        .map(|command| Cmd {
            command,
            error: None,
            did_not_exist: false,
        })
        .collect();

    let objects = gix_odb::at(&repo.objects_dir, gix_hash::Kind::Sha1).map_err(Fatal::Objects)?;

    // Ingest.
    let mut quarantine: Option<Quarantine> = None;
    let mut received = None;
    let mut unpack_error: Option<String> = None;
    if cmds.iter().any(|c| !c.command.is_delete()) {
        let _span = info_span!("ingest").entered();
        match Quarantine::create(&repo.objects_dir) {
            Err(e) => unpack_error = Some(ingest::UnpackError::Quarantine(e).to_string()),
            Ok(q) => {
                let opts = ingest::Options {
                    max_input_size: config.max_input_size,
                    thread_limit: None,
                    // git shows index-pack's progress only through the sideband.
                    count_deltas: !quiet && mode == Mode::Band64k,
                };
                match ingest::receive_pack(reader.inner_mut(), &q, &objects, opts) {
                    Ok(r) => {
                        // git's index-pack (used from receive.unpackLimit objects on) prints this.
                        if let Some(d) = r
                            .deltas
                            .filter(|&d| d > 0 && r.objects >= ingest::UNPACK_LIMIT)
                        {
                            sb.progress(
                                format!("Resolving deltas: 100% ({d}/{d}), done.\n").as_bytes(),
                            )?;
                        }
                        received = Some(r);
                    }
                    Err(e) => {
                        if let Some(detail) = e.detail() {
                            sb.progress(format!("fatal: {detail}\n").as_bytes())?;
                        }
                        unpack_error = Some(e.to_string());
                    }
                }
                quarantine = Some(q);
            }
        }
    }

    let mut keeps = Vec::new();
    if unpack_error.is_some() {
        for c in &mut cmds {
            c.error = Some("unpacker error".into());
        }
    } else {
        if !options.skip_connectivity_check {
            let _span = info_span!("connectivity").entered();
            check_connectivity(
                &mut cmds,
                &repo,
                quarantine.as_ref(),
                received.as_ref(),
                &req.shallow,
                &mut sb,
            )?;
        }
        for c in cmds.iter_mut().filter(|c| c.pending()) {
            if policy::is_hidden(c.command.name.as_bstr(), &config.hide_refs) {
                c.error = Some(if c.command.is_delete() {
                    "deny deleting a hidden ref".into()
                } else {
                    "deny updating a hidden ref".into()
                });
            }
        }
        if cmds.iter().any(Cmd::pending) {
            if let Some(q) = quarantine.as_mut() {
                let _span = info_span!("migrate").entered();
                match q.migrate(&repo.objects_dir) {
                    Ok(k) => keeps = k,
                    Err(_) => {
                        for c in cmds.iter_mut().filter(|c| c.pending()) {
                            c.error = Some("unable to migrate objects to permanent storage".into());
                        }
                    }
                }
            }
            if cmds.iter().any(Cmd::pending) {
                let _span = info_span!("update").entered();
                let ctx = Decide {
                    repo: &repo,
                    objects: &objects,
                    checked_out: repo.checked_out(),
                    refs: store.snapshot().map_err(Fatal::Refs)?,
                };
                let committer = committer(config);
                if atomic {
                    execute_atomic(&mut cmds, &ctx, &store, &committer, &mut sb)?;
                } else {
                    execute_non_atomic(&mut cmds, &ctx, &store, &committer, &mut sb)?;
                }
            }
        }
    }
    drop(quarantine);
    for keep in keeps {
        let _ = std::fs::remove_file(keep);
    }

    let kind = match (
        req.capabilities.report_status_v2,
        req.capabilities.report_status,
    ) {
        (true, _) => report::Kind::V2,
        (false, true) => report::Kind::V1,
        _ => report::Kind::None,
    };
    if kind != report::Kind::None {
        let _span = info_span!("report").entered();
        let results = cmds
            .iter()
            .map(|c| (c.command.name.as_bstr(), c.error.as_deref()));
        let buf = report::build(unpack_error.as_deref(), results)?;
        report::send(&mut sb, &buf)?;
    }
    sb.finish()?;
    Ok(())
}

fn check_connectivity<W: Write, E: Write>(
    cmds: &mut [Cmd],
    repo: &Repository,
    quarantine: Option<&Quarantine>,
    received: Option<&ingest::Received>,
    shallow: &[ObjectId],
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    let objects = match quarantine {
        Some(q) => gix_odb::at(q.path(), gix_hash::Kind::Sha1),
        None => gix_odb::at(&repo.objects_dir, gix_hash::Kind::Sha1),
    }
    .map_err(Fatal::Objects)?;
    let mut check = Check::new(
        &objects,
        received.and_then(|r| r.index.as_ref()),
        std::iter::empty(),
    );
    // Parents of the client's shallow roots are missing on purpose; needing one of them means
    // the push needs a new shallow root.
    let mut shallow_parents = HashSet::new();
    let mut buf = Vec::new();
    for id in shallow {
        if let Ok(Some(data)) = objects.try_find(id, &mut buf)
            && data.kind == Kind::Commit
        {
            for p in
                gix_object::CommitRefIter::from_bytes(data.data, gix_hash::Kind::Sha1).parent_ids()
            {
                shallow_parents.insert(p);
            }
        }
    }
    let mut failed = Vec::new();
    for c in cmds
        .iter_mut()
        .filter(|c| c.pending() && !c.command.is_delete())
    {
        if let connectivity::Status::Missing(m) = check.tip(c.command.new) {
            if shallow_parents.contains(&m.id) && !repo.config.shallow_update {
                c.error = Some("shallow update not allowed".into());
            } else {
                failed.push(m);
                c.error = Some("missing necessary objects".into());
            }
        }
    }
    // git's combined rev-list run reports the first problem through the muxer, then each
    // culprit's own run reports on receive-pack's stderr.
    if let Some(first) = failed.first() {
        sb.progress(first.message().as_bytes())?;
        for m in &failed {
            eprint!("{}", m.message());
        }
    }
    Ok(())
}

/// What the per-ref decision needs to know.
struct Decide<'a> {
    repo: &'a Repository,
    objects: &'a gix_odb::Handle,
    checked_out: Vec<(String, bool)>,
    /// The refs as the update stage starts.
    refs: Refs,
}

/// git's `update()`: the built-in checks for one command, returning the ref update to queue or
/// the reason it is refused, with git's messages on the way.
fn decide<W: Write, E: Write>(
    cmd: &mut Cmd,
    ctx: &Decide<'_>,
    sb: &mut Sideband<W, E>,
) -> io::Result<Result<Option<RefUpdate>, Cow<'static, str>>> {
    let config = &ctx.repo.config;
    let c = &cmd.command;
    let name = c.name.as_bstr();
    if !policy::is_valid_refname(name, c.is_delete()) {
        sb.error(format_args!(
            "refusing to update funny ref '{name}' remotely"
        ))?;
        return Ok(Err("funny refname".into()));
    }
    let worktree = ctx
        .checked_out
        .iter()
        .find(|(r, _)| r.as_bytes() == name.as_bytes());
    if let Some((_, true)) = worktree {
        match config.deny_current_branch {
            DenyAction::Ignore => {}
            DenyAction::Warn => sb.warning("updating the current branch")?,
            DenyAction::Refuse | DenyAction::Unconfigured => {
                sb.error(format_args!(
                    "refusing to update checked out branch: {name}"
                ))?;
                if config.deny_current_branch == DenyAction::Unconfigured {
                    sb.error(policy::REFUSE_CURRENT_BRANCH_MSG)?;
                }
                return Ok(Err("branch is currently checked out".into()));
            }
            DenyAction::UpdateInstead => {
                return Ok(Err(
                    "denyCurrentBranch = updateInstead is not supported by berth yet".into(),
                ));
            }
        }
    }
    if !c.is_delete() && !ctx.objects.exists(&c.new) {
        // git prints this with error(), on its own stderr.
        eprintln!(
            "error: unpack should have generated {}, but I can't find it!",
            c.new
        );
        return Ok(Err("bad pack".into()));
    }
    if !c.old.is_null() && c.is_delete() {
        if config.deny_deletes && name.starts_with(b"refs/heads/") {
            sb.error(format_args!("denying ref deletion for {name}"))?;
            return Ok(Err("deletion prohibited".into()));
        }
        if worktree.is_some() {
            match config.deny_delete_current {
                DenyAction::Ignore => {}
                DenyAction::Warn => sb.warning("deleting the current branch")?,
                DenyAction::Refuse | DenyAction::Unconfigured | DenyAction::UpdateInstead => {
                    if config.deny_delete_current == DenyAction::Unconfigured {
                        sb.error(policy::REFUSE_DELETE_CURRENT_MSG)?;
                    }
                    sb.error(format_args!(
                        "refusing to delete the current branch: {name}"
                    ))?;
                    return Ok(Err("deletion of the current branch prohibited".into()));
                }
            }
        }
    }
    if config.deny_non_fast_forwards
        && !c.is_delete()
        && !c.is_create()
        && name.starts_with(b"refs/heads/")
    {
        let kind = |id: &ObjectId| ctx.objects.try_header(id).ok().flatten().map(|h| h.kind());
        if kind(&c.old) != Some(Kind::Commit) || kind(&c.new) != Some(Kind::Commit) {
            eprintln!("error: bad sha1 objects for {name}");
            return Ok(Err("bad ref".into()));
        }
        if !is_ancestor(ctx.objects, c.old, c.new) {
            sb.error(format_args!(
                "denying non-fast-forward {name} (you should pull first)"
            ))?;
            return Ok(Err("non-fast-forward".into()));
        }
    }
    if c.is_delete() {
        let mut skip_old_check = false;
        if c.old.is_null() || !ctx.objects.exists(&c.old) {
            skip_old_check = true;
            if ctx.refs.get(name).is_some() {
                sb.warning("allowing deletion of corrupt ref")?;
            } else {
                sb.warning("deleting a non-existent ref")?;
                cmd.did_not_exist = true;
                return Ok(Ok(None));
            }
        }
        return Ok(Ok(Some(RefUpdate {
            name: c.name.clone(),
            old: c.old,
            new: c.new,
            skip_old_check,
        })));
    }
    if name.starts_with(b"refs/heads/") {
        let kind = ctx
            .objects
            .try_header(&c.new)
            .ok()
            .flatten()
            .map(|h| h.kind());
        if kind != Some(Kind::Commit) {
            let e = RefError::NonCommitToBranch {
                name: c.name.clone(),
                new: c.new,
            };
            sb.error(&e)?;
            return Ok(Err(e.reason().into()));
        }
    }
    Ok(Ok(Some(RefUpdate {
        name: c.name.clone(),
        old: c.old,
        new: c.new,
        skip_old_check: false,
    })))
}

fn execute_non_atomic<W: Write, E: Write>(
    cmds: &mut [Cmd],
    ctx: &Decide<'_>,
    store: &FilesStore,
    committer: &gix_actor::Signature,
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    // Deletions first, in their own batch, so a deleted `a/b` does not conflict with a new `a`.
    for deletions in [true, false] {
        let mut queued: Vec<(usize, RefUpdate)> = Vec::new();
        for (i, cmd) in cmds.iter_mut().enumerate() {
            if !cmd.pending() || cmd.command.is_delete() != deletions {
                continue;
            }
            match decide(cmd, ctx, sb)? {
                Ok(Some(u)) => queued.push((i, u)),
                Ok(None) => {}
                Err(reason) => cmd.error = Some(reason),
            }
        }
        if queued.is_empty() {
            continue;
        }
        match commit(store, &queued, false, ctx, committer) {
            Ok(results) => {
                for ((i, _), result) in queued.iter().zip(results) {
                    if let Err(e) = result {
                        sb.error(&e)?;
                        cmds[*i].error = Some(e.reason().into());
                    }
                }
            }
            Err(e) => {
                sb.error(&e)?;
                for c in cmds.iter_mut() {
                    c.error = Some("failed to update refs".into());
                }
            }
        }
    }
    Ok(())
}

fn execute_atomic<W: Write, E: Write>(
    cmds: &mut [Cmd],
    ctx: &Decide<'_>,
    store: &FilesStore,
    committer: &gix_actor::Signature,
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    let mut queued: Vec<(usize, RefUpdate)> = Vec::new();
    let mut failure: Option<&'static str> = None;
    for (i, cmd) in cmds.iter_mut().enumerate() {
        if !cmd.pending() {
            continue;
        }
        match decide(cmd, ctx, sb)? {
            Ok(Some(u)) => queued.push((i, u)),
            Ok(None) => {}
            Err(reason) => {
                cmd.error = Some(reason);
                failure = Some("atomic push failure");
                break;
            }
        }
    }
    if failure.is_none()
        && !queued.is_empty()
        && let Err(e) = commit(store, &queued, true, ctx, committer)
    {
        sb.error(&e)?;
        failure = Some("atomic transaction failed");
    }
    if let Some(reason) = failure {
        for c in cmds.iter_mut().filter(|c| c.pending()) {
            c.error = Some(reason.into());
        }
    }
    Ok(())
}

fn commit(
    store: &FilesStore,
    queued: &[(usize, RefUpdate)],
    atomic: bool,
    ctx: &Decide<'_>,
    committer: &gix_actor::Signature,
) -> Result<Vec<Result<(), RefError>>, TransactionError> {
    let mut names = HashSet::with_capacity(queued.len());
    for (_, u) in queued {
        if !names.insert(u.name.as_bstr()) {
            return Err(TransactionError::Store(format!(
                "multiple updates for ref '{}' not allowed",
                u.name
            )));
        }
    }
    let current: Refs = store.snapshot().map_err(TransactionError::Store)?;
    let updates: Vec<RefUpdate> = queued.iter().map(|(_, u)| u.clone()).collect();
    store.commit(&updates, &current, atomic, committer, ctx.objects)
}

/// Whether `ancestor` is reachable from `tip` through parents.
fn is_ancestor(objects: &gix_odb::Handle, ancestor: ObjectId, tip: ObjectId) -> bool {
    let mut seen = HashSet::new();
    let mut stack = vec![tip];
    let mut buf = Vec::new();
    while let Some(id) = stack.pop() {
        if id == ancestor {
            return true;
        }
        if !seen.insert(id) {
            continue;
        }
        if let Ok(Some(data)) = objects.try_find(&id, &mut buf) {
            stack.extend(
                gix_object::CommitRefIter::from_bytes(data.data, gix_hash::Kind::Sha1).parent_ids(),
            );
        }
    }
    false
}

/// The tips of the repositories this one borrows objects from, for `.have` lines.
fn alternate_tips(objects_dir: &std::path::Path) -> Vec<ObjectId> {
    let Ok(list) = std::fs::read_to_string(objects_dir.join("info/alternates")) else {
        return Vec::new();
    };
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .flat_map(|l| crate::refs::alternate_tips(&objects_dir.join(l)))
        .collect()
}

/// The protocol version the client asked for in `GIT_PROTOCOL` (the highest `version=N`).
fn protocol_version() -> u32 {
    std::env::var("GIT_PROTOCOL")
        .ok()
        .and_then(|p| {
            p.split(':')
                .filter_map(|kv| kv.strip_prefix("version=")?.parse::<u32>().ok())
                .max()
        })
        .unwrap_or(0)
}

/// The identity git would write into reflogs: `GIT_COMMITTER_*`, else `user.*`, else the
/// login name at the host.
fn committer(config: &crate::config::Config) -> gix_actor::Signature {
    let user = std::env::var("USER").unwrap_or_else(|_| "berth".into());
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    let name = std::env::var("GIT_COMMITTER_NAME")
        .ok()
        .or_else(|| config.user_name.clone())
        .unwrap_or_else(|| user.clone());
    let email = std::env::var("GIT_COMMITTER_EMAIL")
        .ok()
        .or_else(|| config.user_email.clone())
        .unwrap_or_else(|| format!("{user}@{host}"));
    let time = std::env::var("GIT_COMMITTER_DATE")
        .ok()
        .and_then(|d| gix_date::parse(&d, None).ok())
        .unwrap_or_else(gix_date::Time::now_local_or_utc);
    gix_actor::Signature {
        name: BString::from(name),
        email: BString::from(email),
        time,
    }
}
