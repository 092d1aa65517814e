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
use gix_object::{Find, Kind};
use gix_odb::Header;
use tracing::info_span;

use crate::hooks::proc_receive::{self, Proc};
use crate::hooks::{self, Event, HookSet, Invocation, Verdict};
use crate::objects::connectivity::{self, Check};
use crate::objects::ingest::{self, Quarantine};
use crate::protocol::request::{self, Command, Start};
use crate::protocol::sideband::{Mode, Sideband};
use crate::protocol::{advertise, pktline, report};
use crate::refs::{
    Atomicity, Change, Expected, RefError, RefStore, RefUpdate, Refs, SnapshotError,
    TransactionError, TransactionObserver, TransactionState,
};
use crate::repo::Repository;
use crate::repo::config::DenyAction;
use crate::repo::policy;

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
    /// The reflog identity `(name, email)`, taking precedence over `GIT_COMMITTER_*` and
    /// `user.*` (smart HTTP sets the authenticated user here, as git-http-backend does).
    pub committer: Option<(String, String)>,
    /// In-process hooks of an embedding program, run before the process hooks.
    pub in_process: Option<hooks::InProcessHooks>,
    /// Environment for every hook the session runs (`berth serve` passes git-http-backend's
    /// CGI variables: `REMOTE_USER`, `REMOTE_ADDR`, `GIT_PROTOCOL`).
    pub hook_env: Vec<(String, BString)>,
}

/// What ends a session without a report: git's receive-pack `die()`s in these cases, so the
/// client sees `fatal: <message>` on stderr and exit code 128.
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    /// The repository cannot be served.
    #[error(transparent)]
    Repository(#[from] crate::repo::Error),
    /// The request is malformed or over a limit.
    #[error(transparent)]
    Request(#[from] request::Error),
    /// The refs could not be read.
    #[error("unable to read refs: {0}")]
    Refs(SnapshotError),
    /// The object database could not be opened.
    #[error("unable to open object database: {0}")]
    Objects(io::Error),
    /// Writing to the client failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The hook configuration is unusable.
    #[error(transparent)]
    Hooks(#[from] hooks::Error),
    /// The reference-transaction hook refused in the `preparing` or `prepared` phase.
    #[error("in '{0}' phase, update aborted by the reference-transaction hook")]
    TransactionHook(&'static str),
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

/// One command on its way through the pipeline.
struct Cmd {
    command: Command,
    error: Option<Cow<'static, str>>,
    did_not_exist: bool,
    /// Handled through another command (a symref pushed together with its target).
    skip_update: bool,
    /// The ref the update really goes to, when the pushed name is a symbolic ref.
    target: Option<BString>,
    /// Whether the proc-receive hook handles this command.
    proc: Proc,
    /// What the proc-receive hook reported it did.
    rewrites: Vec<report::Rewrite>,
    /// The client's shallow commits this update makes shallow roots of the repository
    /// (`receive.shallowUpdate`).
    new_shallow: Vec<ObjectId>,
}

impl Cmd {
    /// No error so far (reported `ok` if it stays so).
    fn pending(&self) -> bool {
        self.error.is_none()
    }

    /// Still to be decided and written (git's `should_process_cmd`).
    fn should_process(&self) -> bool {
        self.error.is_none() && !self.skip_update
    }

    /// Still to be decided and written by berth itself (not by the proc-receive hook).
    fn for_berth(&self) -> bool {
        self.should_process() && self.proc == Proc::No
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
    let hook_set = HookSet::discover(&repo.git_dir, &repo.config_file)?;
    // Signed pushes: the nonce is issued when the session starts, as git does.
    let push_cert_nonce = config.cert_nonce_seed.as_deref().map(|seed| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        crate::protocol::push_cert::nonce(dir, now, seed)
    });
    // As git: every ref operation happens under `GIT_NAMESPACE`'s prefix; clients, reports and
    // hooks see the names without it.
    let namespace = policy::namespace_prefix(&std::env::var("GIT_NAMESPACE").unwrap_or_default());
    let store = repo.ref_store();
    let mut out = BufWriter::with_capacity(64 * 1024, output);

    if options.advertise_refs || !options.stateless_rpc {
        let _span = info_span!("advertise").entered();
        let refs = store.snapshot().map_err(Fatal::Refs)?;
        if options.protocol_version == 1 {
            pktline::write_data(&mut out, b"version 1\n")?;
        }
        let alternates = advertise::alternate_tips(&repo);
        let caps = advertise::capabilities(config, push_cert_nonce.as_deref());
        advertise::write(
            &mut out,
            &refs,
            &namespace,
            |name, full| {
                policy::is_hidden_in_namespace(
                    name.map(|n| n.as_bstr()),
                    full.as_bstr(),
                    &config.hide_refs,
                )
            },
            &alternates,
            &caps,
            &repo.shallow(),
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
    let hooks = Hooks::new(
        &hook_set,
        options.in_process.as_ref(),
        &repo,
        &req.push_options,
    );
    let certificate =
        req.push_cert
            .as_deref()
            .map(|bytes| crate::protocol::push_cert::Certificate {
                bytes,
                issued_nonce: push_cert_nonce.clone(),
                stateless: options.stateless_rpc,
                dir,
                seed: config.cert_nonce_seed.as_deref().unwrap_or_default(),
                slop: config.cert_nonce_slop,
            });
    let hooks = Hooks {
        base_env: &options.hook_env,
        certificate,
        ..hooks
    };
    let atomic = req.capabilities.atomic;
    let mut cmds: Vec<Cmd> = req
        .commands
        .into_iter()
        .map(|command| Cmd {
            command,
            error: None,
            did_not_exist: false,
            skip_update: false,
            target: None,
            proc: Proc::No,
            rewrites: Vec::new(),
            new_shallow: Vec::new(),
        })
        .collect();
    if let Some(cert) = &hooks.certificate
        && !cert.options_match(&req.push_options)
    {
        for c in &mut cmds {
            c.error = Some("inconsistent push options".into());
        }
    }

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
                    unpack_limit: config.unpack_limit,
                    reject_thin_pack: options.reject_thin_pack,
                    fsck: config.fsck_objects.then(|| config.fsck.clone()),
                    max_object_size: config.max_object_size,
                    shallow: repo
                        .shallow()
                        .into_iter()
                        .chain(req.shallow.iter().copied())
                        .collect(),
                };
                match ingest::receive_pack(reader.inner_mut(), &q, &objects, opts) {
                    Ok(r) => {
                        for m in &r.messages {
                            sb.progress(format!("{m}\n").as_bytes())?;
                        }
                        // git's index-pack (used from receive.unpackLimit objects on) prints this.
                        if let Some(d) = r.deltas.filter(|&d| d > 0) {
                            sb.progress(
                                format!("Resolving deltas: 100% ({d}/{d}), done.\n").as_bytes(),
                            )?;
                        }
                        received = Some(r);
                    }
                    Err(e) => {
                        for m in e.messages() {
                            sb.progress(format!("{m}\n").as_bytes())?;
                        }
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

    let mut keeps = KeepFiles(Vec::new());
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
            let full = [namespace.as_bytes(), c.command.name.as_slice()].concat();
            if policy::is_hidden_in_namespace(
                Some(c.command.name.as_bstr()),
                full.as_bstr(),
                &config.hide_refs,
            ) {
                c.error = Some(if c.command.is_delete() {
                    "deny deleting a hidden ref".into()
                } else {
                    "deny updating a hidden ref".into()
                });
            }
        }
        let mut proc_receive = false;
        for c in cmds.iter_mut().filter(|c| c.should_process()) {
            let selected = crate::repo::config::ProcReceiveRef::selects(
                &config.proc_receive_refs,
                &c.command.name,
                c.command.old.is_null(),
                c.command.new.is_null(),
            );
            if selected {
                c.proc = Proc::Scheduled;
                proc_receive = true;
            }
        }
        let accepted = {
            let _span = info_span!("pre_receive").entered();
            hooks.pre_receive(&cmds, quarantine.as_ref(), &mut sb)?
        };
        if !accepted {
            for c in cmds.iter_mut().filter(|c| c.pending()) {
                c.error = Some("pre-receive hook declined".into());
            }
        } else if cmds.iter().any(Cmd::pending) {
            if let Some(q) = quarantine.as_mut() {
                let _span = info_span!("migrate").entered();
                match q.migrate(&repo.objects_dir) {
                    Ok(k) => keeps.0 = k,
                    Err(_) => {
                        for c in cmds.iter_mut().filter(|c| c.pending()) {
                            c.error = Some("unable to migrate objects to permanent storage".into());
                        }
                    }
                }
            }
            if cmds.iter().any(Cmd::pending) {
                let _span = info_span!("update").entered();
                check_aliased_updates(&mut cmds, store.as_ref(), &namespace, &mut sb)?;
                if proc_receive {
                    let _span = info_span!("proc_receive").entered();
                    let advertised_options = req.capabilities.push_options;
                    if !hooks.proc_receive(&mut cmds, atomic, advertised_options, &mut sb)? {
                        for c in cmds.iter_mut().filter(|c| c.pending()) {
                            if c.proc != Proc::Returned && (c.proc == Proc::Scheduled || atomic) {
                                c.error = Some("fail to run proc-receive hook".into());
                            }
                        }
                    }
                }
                let ctx = Decide {
                    repo: &repo,
                    namespace: &namespace,
                    hooks: &hooks,
                    objects: &objects,
                    worktrees: repo.worktrees(),
                    refs: store.snapshot().map_err(Fatal::Refs)?,
                    kinds: Default::default(),
                };
                let committer = committer(config, options.committer.as_ref());
                if atomic {
                    execute_atomic(&mut cmds, &ctx, store.as_ref(), &committer, &mut sb)?;
                } else {
                    execute_non_atomic(&mut cmds, &ctx, store.as_ref(), &committer, &mut sb)?;
                }
            }
        }
    }
    drop(quarantine);
    drop(keeps);

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
        let entries = cmds.iter().map(|c| report::Entry {
            name: c.command.name.as_bstr(),
            error: c.error.as_deref(),
            rewrites: &c.rewrites,
        });
        let buf = report::build(kind, unpack_error.as_deref(), entries)?;
        report::send(&mut sb, &buf)?;
    }
    {
        let _span = info_span!("post_receive").entered();
        hooks.post_receive(&cmds, &mut sb)?;
        hooks.post_update(&cmds, &mut sb)?;
    }
    housekeeping(&repo, hooks.keepalive, &mut sb)?;
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
    let client_shallow: HashSet<ObjectId> = shallow.iter().copied().collect();
    let mut check = Check::new(
        &objects,
        received.and_then(|r| r.index.as_ref()),
        std::iter::empty(),
    )
    .with_shallow(repo.shallow().into_iter().collect(), client_shallow);
    // All tips at once first, as git's combined rev-list; each on its own only if that fails.
    let tips: Vec<ObjectId> = cmds
        .iter()
        .filter(|c| c.pending() && !c.command.is_delete())
        .map(|c| c.command.new)
        .collect();
    check.prewalk(&tips);
    let mut failed = Vec::new();
    for c in cmds
        .iter_mut()
        .filter(|c| c.pending() && !c.command.is_delete())
    {
        match check.tip(c.command.new) {
            connectivity::Status::Missing(m) => {
                failed.push(m);
                c.error = Some("missing necessary objects".into());
            }
            connectivity::Status::Connected if !check.new_roots().is_empty() => {
                if repo.config.shallow_update {
                    c.new_shallow = check.new_roots().to_vec();
                } else {
                    c.error = Some("shallow update not allowed".into());
                }
            }
            connectivity::Status::Connected => {}
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

/// A pushed name that is a symbolic ref updates the ref it points to; pushed together with
/// that ref, it is skipped when both say the same and both fail when they differ (git's
/// `check_aliased_updates`).
fn check_aliased_updates<W: Write, E: Write>(
    cmds: &mut [Cmd],
    store: &dyn RefStore,
    namespace: &str,
    sb: &mut Sideband<W, E>,
) -> io::Result<()> {
    // The names as stored: under the namespace's prefix, if any (copied only then).
    let prefixed: Vec<Vec<u8>> = if namespace.is_empty() {
        Vec::new()
    } else {
        cmds.iter()
            .map(|c| [namespace.as_bytes(), c.command.name.as_slice()].concat())
            .collect()
    };
    let names: Vec<&[u8]> = if namespace.is_empty() {
        cmds.iter().map(|c| c.command.name.as_slice()).collect()
    } else {
        prefixed.iter().map(Vec::as_slice).collect()
    };
    let symrefs = store.symref_targets(&names);
    drop(names);
    if symrefs.iter().all(Option::is_none) {
        return Ok(());
    }
    let by_name: std::collections::HashMap<BString, usize> = cmds
        .iter()
        .enumerate()
        .map(|(i, c)| (c.command.name.clone(), i))
        .collect();
    for (i, target) in symrefs.into_iter().enumerate() {
        if cmds[i].error.is_some() {
            continue;
        }
        let Some(target) = target else {
            continue;
        };
        let Some(target) = target else {
            sb.error(format_args!(
                "refusing update to broken symref '{}'",
                cmds[i].command.name
            ))?;
            cmds[i].skip_update = true;
            cmds[i].error = Some("broken symref".into());
            continue;
        };
        let in_push = target
            .strip_prefix(namespace.as_bytes())
            .and_then(|t| by_name.get(t.as_bstr()));
        let Some(&j) = in_push else {
            cmds[i].target = Some(target);
            continue;
        };
        cmds[i].skip_update = true;
        let (a, b) = (&cmds[i].command, &cmds[j].command);
        if a.old == b.old && a.new == b.new {
            continue;
        }
        let short = |id: &ObjectId| id.to_hex_with_len(7).to_string();
        sb.error(format_args!(
            "refusing inconsistent update between symref '{}' ({}..{}) and its target '{}' ({}..{})",
            a.name,
            short(&a.old),
            short(&a.new),
            b.name,
            short(&b.old),
            short(&b.new)
        ))?;
        cmds[j].skip_update = true;
        cmds[i].error = Some("inconsistent aliased update".into());
        cmds[j].error = Some("inconsistent aliased update".into());
    }
    Ok(())
}

/// What the per-ref decision needs to know.
struct Decide<'a> {
    repo: &'a Repository,
    /// `GIT_NAMESPACE`'s prefix, or empty.
    namespace: &'a str,
    hooks: &'a Hooks<'a>,
    objects: &'a gix_odb::Handle,
    worktrees: Vec<crate::repo::Worktree>,
    /// The refs as the update stage starts.
    refs: Refs,
    /// Object kinds looked up so far: many refs of one push often point at one object.
    kinds: std::cell::RefCell<std::collections::HashMap<ObjectId, Option<Kind>>>,
}

impl Decide<'_> {
    /// The ref a command really updates: its symref target, or its name in the namespace.
    fn full_name(&self, cmd: &Cmd) -> BString {
        match &cmd.target {
            Some(target) => target.clone(),
            None => [self.namespace.as_bytes(), cmd.command.name.as_slice()]
                .concat()
                .into(),
        }
    }

    /// The kind of the object `id`, `None` if it does not exist; looked up once per push.
    fn kind(&self, id: &ObjectId) -> Option<Kind> {
        *self
            .kinds
            .borrow_mut()
            .entry(*id)
            .or_insert_with(|| self.objects.try_header(id).ok().flatten().map(|h| h.kind()))
    }
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
    let worktree = ctx.worktrees.iter().find(|w| {
        w.head
            .as_deref()
            .is_some_and(|h| h.as_bytes() == name.as_bytes())
    });
    let mut update_worktree = None;
    if let Some(wt) = worktree.filter(|w| !w.is_bare()) {
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
            // Let the other checks intervene first.
            DenyAction::UpdateInstead => update_worktree = Some(wt),
        }
    }
    if !c.is_delete() && ctx.kind(&c.new).is_none() {
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
        // The checked-out branch, or, in a namespace, the branch the repository's HEAD names.
        let main_head = ctx.worktrees.first().and_then(|w| w.head.as_deref());
        if worktree.is_some()
            || (!ctx.namespace.is_empty()
                && main_head.is_some_and(|h| h.as_bytes() == ctx.full_name(cmd).as_slice()))
        {
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
        if ctx.kind(&c.old) != Some(Kind::Commit) || ctx.kind(&c.new) != Some(Kind::Commit) {
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
    if !ctx.hooks.update(c, sb)? {
        sb.error(format_args!("hook declined to update {name}"))?;
        return Ok(Err("hook declined".into()));
    }
    if let Some(wt) = update_worktree
        && let Err(reason) = ctx.hooks.update_worktree(c.new, wt, &ctx.refs)
    {
        return Ok(Err(reason.into()));
    }
    if c.is_delete() {
        let mut old = Expected::MustBe(c.old);
        if c.old.is_null() || ctx.kind(&c.old).is_none() {
            old = Expected::Any;
            if ctx.refs.get(&ctx.full_name(cmd)).is_some() {
                sb.warning("allowing deletion of corrupt ref")?;
            } else {
                sb.warning("deleting a non-existent ref")?;
                cmd.did_not_exist = true;
                return Ok(Ok(None));
            }
        }
        return Ok(Ok(Some(RefUpdate {
            name: ctx.full_name(cmd),
            change: Change::Delete { old },
        })));
    }
    if name.starts_with(b"refs/heads/") && ctx.kind(&c.new) != Some(Kind::Commit) {
        let e = RefError::NonCommitToBranch {
            name: c.name.clone(),
            new: c.new,
        };
        sb.error(&e)?;
        return Ok(Err(e.reason().into()));
    }
    if !cmd.new_shallow.is_empty() && ctx.repo.add_shallow(&cmd.new_shallow).is_err() {
        return Ok(Err("shallow error".into()));
    }
    let change = if c.old.is_null() {
        Change::Create { new: c.new }
    } else {
        Change::Update {
            old: Expected::MustBe(c.old),
            new: c.new,
        }
    };
    Ok(Ok(Some(RefUpdate {
        name: ctx.full_name(cmd),
        change,
    })))
}

fn execute_non_atomic<W: Write, E: Write>(
    cmds: &mut [Cmd],
    ctx: &Decide<'_>,
    store: &dyn RefStore,
    committer: &gix_actor::Signature,
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    // Deletions first, in their own batch, so a deleted `a/b` does not conflict with a new `a`.
    // The first batch is checked against the refs read for the decisions; a later one against
    // the refs as the earlier batch left them.
    let mut after_first: Option<Refs> = None;
    for deletions in [true, false] {
        let (mut queued, mut updates) = (
            Vec::with_capacity(cmds.len()),
            Vec::with_capacity(cmds.len()),
        );
        for (i, cmd) in cmds.iter_mut().enumerate() {
            if !cmd.for_berth() || cmd.command.is_delete() != deletions {
                continue;
            }
            match decide(cmd, ctx, sb)? {
                Ok(Some(u)) => {
                    queued.push(i);
                    updates.push(u);
                }
                Ok(None) => {}
                Err(reason) => cmd.error = Some(reason),
            }
        }
        if queued.is_empty() {
            continue;
        }
        let current = match &after_first {
            Some(refs) => refs,
            None => &ctx.refs,
        };
        let result = commit(store, &updates, false, current, ctx, committer);
        if deletions {
            after_first = Some(store.snapshot().map_err(Fatal::Refs)?);
        }
        match result {
            Ok(results) => {
                for (i, result) in queued.iter().zip(results) {
                    if let Err(e) = result {
                        sb.error(&e)?;
                        cmds[*i].error = Some(e.reason().into());
                    }
                }
            }
            Err(e) => {
                if let Some(state) = e.hook_aborted() {
                    return Err(Fatal::TransactionHook(state.name()));
                }
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
    store: &dyn RefStore,
    committer: &gix_actor::Signature,
    sb: &mut Sideband<W, E>,
) -> Result<(), Fatal> {
    let mut updates: Vec<RefUpdate> = Vec::with_capacity(cmds.len());
    let mut failure: Option<&'static str> = None;
    for cmd in cmds.iter_mut() {
        if !cmd.for_berth() {
            continue;
        }
        match decide(cmd, ctx, sb)? {
            Ok(Some(u)) => updates.push(u),
            Ok(None) => {}
            Err(reason) => {
                cmd.error = Some(reason);
                failure = Some("atomic push failure");
                break;
            }
        }
    }
    if failure.is_none()
        && !updates.is_empty()
        && let Err(e) = commit(store, &updates, true, &ctx.refs, ctx, committer)
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
    store: &dyn RefStore,
    updates: &[RefUpdate],
    atomic: bool,
    current: &Refs,
    ctx: &Decide<'_>,
    committer: &gix_actor::Signature,
) -> Result<Vec<Result<(), RefError>>, TransactionError> {
    let options = crate::refs::Options {
        atomicity: if atomic {
            Atomicity::AllOrNothing
        } else {
            Atomicity::PerRef
        },
        current,
        committer,
        objects: ctx.objects,
    };
    let mut observer = ctx.hooks;
    let prepared = store.transaction(options).prepare(updates, &mut observer)?;
    Ok(prepared.commit()?)
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

/// The protocol version a `GIT_PROTOCOL` value (or `Git-Protocol` header) asks for: the highest
/// `version=N`, 0 when none.
pub fn protocol_version(git_protocol: &str) -> u32 {
    git_protocol
        .split(':')
        .filter_map(|kv| kv.strip_prefix("version=")?.parse::<u32>().ok())
        .max()
        .unwrap_or(0)
}

/// The identity git would write into reflogs: `over` (the session's override), else
/// `GIT_COMMITTER_*`, else `user.*`, else the login name at the host.
fn committer(
    config: &crate::repo::config::Config,
    over: Option<&(String, String)>,
) -> gix_actor::Signature {
    let user = std::env::var("USER").unwrap_or_else(|_| "berth".into());
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    let name = over
        .map(|o| o.0.clone())
        .or_else(|| std::env::var("GIT_COMMITTER_NAME").ok())
        .or_else(|| config.user_name.clone())
        .unwrap_or_else(|| user.clone());
    let email = over
        .map(|o| o.1.clone())
        .or_else(|| std::env::var("GIT_COMMITTER_EMAIL").ok())
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

/// The receive-side hooks of one session with git's contract for each: when it runs, its
/// arguments, stdin and environment, and where its output goes.
struct Hooks<'a> {
    set: &'a HookSet,
    in_process: Option<&'a dyn hooks::InProcess>,
    git_dir: &'a std::path::Path,
    objects_dir: &'a std::path::Path,
    push_options: &'a [BString],
    keepalive: Option<std::time::Duration>,
    /// [`Options::hook_env`].
    base_env: &'a [(String, BString)],
    /// A signed push's certificate.
    certificate: Option<crate::protocol::push_cert::Certificate<'a>>,
    /// Its `GIT_PUSH_CERT*` variables, worked out (blob written, signature checked) the first
    /// time a hook needs them.
    certificate_env: std::cell::OnceCell<Vec<(String, BString)>>,
    config_file: &'a gix_config::File,
}

/// The hooks are told the ref transaction's states (git's `reference-transaction` hook).
impl TransactionObserver for &Hooks<'_> {
    fn state(&mut self, state: TransactionState, updates: &[RefUpdate]) -> bool {
        self.transaction(state, updates)
    }
}

impl<'a> Hooks<'a> {
    fn new(
        set: &'a HookSet,
        in_process: Option<&'a hooks::InProcessHooks>,
        repo: &'a Repository,
        push_options: &'a [BString],
    ) -> Self {
        Hooks {
            set,
            in_process: in_process.map(|h| &*h.0),
            git_dir: &repo.git_dir,
            objects_dir: &repo.objects_dir,
            push_options,
            keepalive: (repo.config.keep_alive > 0)
                .then(|| std::time::Duration::from_secs(repo.config.keep_alive as u64)),
            base_env: &[],
            certificate: None,
            certificate_env: std::cell::OnceCell::new(),
            config_file: &repo.config_file,
        }
    }

    /// `GIT_PUSH_CERT*` for pre- and post-receive of a signed push; the certificate blob goes
    /// into `objects_dir` (the quarantine during pre-receive).
    fn certificate_env(&self, objects_dir: &std::path::Path) -> &[(String, BString)] {
        match &self.certificate {
            Some(cert) => self
                .certificate_env
                .get_or_init(|| cert.env(objects_dir, self.config_file)),
            None => &[],
        }
    }

    /// `GIT_PUSH_OPTION_<n>` and `GIT_PUSH_OPTION_COUNT` (always set, as git does).
    fn push_option_env(&self) -> Vec<(String, BString)> {
        let mut env: Vec<(String, BString)> = self
            .push_options
            .iter()
            .enumerate()
            .map(|(i, o)| (format!("GIT_PUSH_OPTION_{i}"), o.clone()))
            .collect();
        env.push((
            "GIT_PUSH_OPTION_COUNT".into(),
            self.push_options.len().to_string().into(),
        ));
        env
    }

    fn invocation<'i>(
        &'i self,
        args: &'i [BString],
        stdin: Option<&'i [u8]>,
        env: &'i [(String, BString)],
    ) -> Invocation<'i> {
        Invocation {
            git_dir: self.git_dir,
            args,
            stdin,
            base_env: self.base_env,
            env,
            env_remove: &[],
            keepalive: self.keepalive,
        }
    }

    /// Relay hook output to band 2 (stderr without sideband) and keepalives while it is silent.
    fn to_client<W: Write, E: Write>(
        sb: &mut Sideband<W, E>,
    ) -> impl FnMut(hooks::Output<'_>) -> io::Result<()> + '_ {
        move |o| match o {
            hooks::Output::Data(d) => sb.progress(d),
            hooks::Output::Idle => sb.keepalive(),
        }
    }

    /// pre-receive: every command on stdin, inside the quarantine. `false` declines the push.
    fn pre_receive<W: Write, E: Write>(
        &self,
        cmds: &[Cmd],
        quarantine: Option<&Quarantine>,
        sb: &mut Sideband<W, E>,
    ) -> io::Result<bool> {
        if let Some(h) = self.in_process {
            let commands: Vec<Command> = cmds.iter().map(|c| c.command.clone()).collect();
            let push = hooks::Push {
                commands: &commands,
                push_options: self.push_options,
                quarantine: quarantine.map(Quarantine::path),
            };
            if let Verdict::Refuse(msg) = h.pre_receive(&push) {
                sb.progress(format!("{msg}\n").as_bytes())?;
                return Ok(false);
            }
        }
        if !self.set.has(Event::PreReceive) {
            return Ok(true);
        }
        let stdin = command_lines(cmds.iter());
        let mut env = self.push_option_env();
        env.extend_from_slice(
            self.certificate_env(quarantine.map_or(self.objects_dir, Quarantine::path)),
        );
        if let Some(q) = quarantine {
            env.extend(quarantine_env(q.path(), self.objects_dir));
        }
        self.set.run(
            Event::PreReceive,
            &self.invocation(&[], Some(&stdin), &env),
            &mut Self::to_client(sb),
        )
    }

    /// update: `<ref> <old> <new>`. `false` declines this ref.
    fn update<W: Write, E: Write>(&self, c: &Command, sb: &mut Sideband<W, E>) -> io::Result<bool> {
        if let Some(h) = self.in_process
            && let Verdict::Refuse(msg) = h.update(c)
        {
            sb.progress(format!("{msg}\n").as_bytes())?;
            return Ok(false);
        }
        if !self.set.has(Event::Update) {
            return Ok(true);
        }
        let args = [
            c.name.clone(),
            c.old.to_string().into(),
            c.new.to_string().into(),
        ];
        self.set.run(
            Event::Update,
            &self.invocation(&args, None, &[]),
            &mut Self::to_client(sb),
        )
    }

    /// reference-transaction: `<old> <new> <ref>` per update; its output goes to stderr, not
    /// to the client, as git's. `false` aborts the transaction.
    fn transaction(&self, state: TransactionState, updates: &[RefUpdate]) -> bool {
        if let Some(h) = self.in_process
            && let Verdict::Refuse(msg) = h.reference_transaction(state, updates)
        {
            eprintln!("{msg}");
            return false;
        }
        if !self.set.has(Event::ReferenceTransaction) {
            return true;
        }
        let mut stdin = Vec::with_capacity(updates.len() * 100);
        for u in updates {
            let _ = writeln!(stdin, "{} {} {}", u.old_id(), u.new_id(), u.name);
        }
        let args = [BString::from(state.name())];
        let mut to_stderr = |o: hooks::Output<'_>| match o {
            hooks::Output::Data(d) => io::stderr().write_all(d),
            hooks::Output::Idle => Ok(()),
        };
        self.set
            .run(
                Event::ReferenceTransaction,
                &self.invocation(&args, Some(&stdin), &[]),
                &mut to_stderr,
            )
            .unwrap_or(false)
    }

    /// `receive.denyCurrentBranch=updateInstead`: bring the worktree that has the pushed branch
    /// checked out to `new`, through the push-to-checkout hook if there is one, else as git's
    /// push-to-deploy (refresh, no unstaged or staged changes, `read-tree -u -m`). Output goes
    /// to stderr, not to the client, as git's.
    fn update_worktree(
        &self,
        new: ObjectId,
        wt: &crate::repo::Worktree,
        refs: &Refs,
    ) -> Result<(), &'static str> {
        let Some(path) = wt.path.as_deref() else {
            return Err("denyCurrentBranch = updateInstead needs a worktree");
        };
        let git_dir = std::path::absolute(&wt.git_dir).unwrap_or_else(|_| wt.git_dir.clone());
        let git_dir_env = (
            "GIT_DIR".to_string(),
            BString::from(git_dir.as_os_str().as_encoded_bytes()),
        );
        let mut to_stderr = |o: hooks::Output<'_>| match o {
            hooks::Output::Data(d) => io::stderr().write_all(d),
            hooks::Output::Idle => Ok(()),
        };
        if self.set.has(Event::PushToCheckout) {
            let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
            let env = [
                git_dir_env,
                (
                    "GIT_WORK_TREE".to_string(),
                    BString::from(path.as_os_str().as_encoded_bytes()),
                ),
            ];
            let args = [BString::from(new.to_string())];
            let ok = self
                .set
                .run(
                    Event::PushToCheckout,
                    &self.invocation(&args, None, &env),
                    &mut to_stderr,
                )
                .unwrap_or(false);
            return if ok {
                Ok(())
            } else {
                Err("push-to-checkout hook declined")
            };
        }
        let git = |dir: &std::path::Path, args: &[&str]| {
            let mut p = std::process::Command::new("git");
            p.args(args)
                .current_dir(dir)
                .env("GIT_DIR", &git_dir)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::from(io::stderr()));
            p.status().is_ok_and(|s| s.success())
        };
        let head_is_born = wt
            .head
            .as_deref()
            .and_then(|h| refs.get(h.as_bytes()))
            .is_some();
        const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        let base = if head_is_born { "HEAD" } else { EMPTY_TREE };
        let new = new.to_string();
        if !git(
            path,
            &["update-index", "-q", "--ignore-submodules", "--refresh"],
        ) {
            Err("Up-to-date check failed")
        } else if !git(
            path,
            &["diff-files", "--quiet", "--ignore-submodules", "--"],
        ) {
            Err("Working directory has unstaged changes")
        } else if !git(
            self.git_dir,
            &[
                "diff-index",
                "--quiet",
                "--cached",
                "--ignore-submodules",
                base,
                "--",
            ],
        ) {
            Err("Working directory has staged changes")
        } else if !git(path, &["read-tree", "-u", "-m", &new]) {
            Err("Could not update working tree to new HEAD")
        } else {
            Ok(())
        }
    }

    /// proc-receive: the selected commands go to the hook, which reports per ref (git's
    /// `run_proc_receive_hook`). `false` when the conversation or the hook failed.
    fn proc_receive<W: Write, E: Write>(
        &self,
        cmds: &mut [Cmd],
        atomic: bool,
        push_options: bool,
        sb: &mut Sideband<W, E>,
    ) -> io::Result<bool> {
        let inv = self.invocation(&[], None, &[]);
        let mut errmsg = String::new();
        let ok = {
            let mut sink = Self::to_client(sb);
            let Some(mut conv) = hooks::Conversation::start(self.set, Event::ProcReceive, &inv)?
            else {
                drop(sink);
                sb.error("cannot find hook 'proc-receive'")?;
                return Ok(false);
            };
            // The conversation works on slots holding the commands' proc-receive state, which
            // go back into the commands afterwards, whatever the outcome.
            let states: Vec<_> = cmds
                .iter_mut()
                .map(|c| (c.proc, c.error.take(), std::mem::take(&mut c.rewrites)))
                .collect();
            let mut slots: Vec<proc_receive::Slot<'_>> = cmds
                .iter()
                .zip(states)
                .map(|(c, (proc, error, rewrites))| proc_receive::Slot {
                    command: &c.command,
                    skip_update: c.skip_update,
                    proc,
                    error,
                    rewrites,
                })
                .collect();
            let ok = proc_receive::converse(
                &mut proc_receive::Running {
                    conversation: &mut conv,
                    sink: &mut sink,
                },
                &mut slots,
                atomic,
                push_options,
                self.push_options,
                &mut errmsg,
            );
            let states: Vec<_> = slots
                .into_iter()
                .map(|s| (s.proc, s.error, s.rewrites))
                .collect();
            for (c, (proc, error, rewrites)) in cmds.iter_mut().zip(states) {
                c.proc = proc;
                c.error = error;
                c.rewrites = rewrites;
            }
            let ok = ok?;
            conv.finish(&mut sink)? && ok
        };
        if !errmsg.is_empty() {
            sb.error(errmsg.strip_suffix('\n').unwrap_or(&errmsg))?;
        }
        Ok(ok)
    }

    /// post-receive: the refs that were updated (not those that did not exist) on stdin.
    fn post_receive<W: Write, E: Write>(
        &self,
        cmds: &[Cmd],
        sb: &mut Sideband<W, E>,
    ) -> io::Result<()> {
        let updated = || cmds.iter().filter(|c| c.pending() && !c.did_not_exist);
        if updated().next().is_none() {
            return Ok(());
        }
        if let Some(h) = self.in_process {
            let commands: Vec<Command> = updated().map(|c| c.command.clone()).collect();
            h.post_receive(&hooks::Push {
                commands: &commands,
                push_options: self.push_options,
                quarantine: None,
            });
        }
        if !self.set.has(Event::PostReceive) {
            return Ok(());
        }
        let stdin = command_lines(updated());
        let mut env = self.push_option_env();
        env.extend_from_slice(self.certificate_env(self.objects_dir));
        self.set.run(
            Event::PostReceive,
            &self.invocation(&[], Some(&stdin), &env),
            &mut Self::to_client(sb),
        )?;
        Ok(())
    }

    /// post-update: the names of the refs that were updated, as arguments.
    fn post_update<W: Write, E: Write>(
        &self,
        cmds: &[Cmd],
        sb: &mut Sideband<W, E>,
    ) -> io::Result<()> {
        if !self.set.has(Event::PostUpdate) {
            return Ok(());
        }
        let args: Vec<BString> = cmds
            .iter()
            .filter(|c| c.pending() && !c.did_not_exist)
            .map(|c| c.command.name.clone())
            .collect();
        if args.is_empty() {
            return Ok(());
        }
        self.set.run(
            Event::PostUpdate,
            &self.invocation(&args, None, &[]),
            &mut Self::to_client(sb),
        )?;
        Ok(())
    }
}

/// What git's receive-pack does after every push, whatever its outcome: `git maintenance run
/// --auto` (`receive.autogc`; it decides itself whether there is anything to do, e.g. too many
/// packs) with its output relayed to the client, and `git update-server-info` when
/// `receive.updateServerInfo` asks for it.
fn housekeeping<W: Write, E: Write>(
    repo: &Repository,
    keepalive: Option<std::time::Duration>,
    sb: &mut Sideband<W, E>,
) -> io::Result<()> {
    let git = |args: &[&str]| {
        let mut p = std::process::Command::new("git");
        p.args(args).current_dir(&repo.git_dir).env("GIT_DIR", ".");
        p
    };
    if repo.config.auto_gc {
        let _span = info_span!("auto_gc").entered();
        let detach = if repo.config.auto_detach {
            "--detach"
        } else {
            "--no-detach"
        };
        let maintenance = git(&["maintenance", "run", "--auto", "--quiet", detach]);
        hooks::run_process(maintenance, None, keepalive, &mut Hooks::to_client(sb))?;
    }
    if repo.config.update_server_info {
        let mut p = git(&["update-server-info"]);
        p.stdout(std::process::Stdio::null());
        let _ = p.status();
    }
    Ok(())
}

/// `<old> <new> <ref>` lines, as pre- and post-receive read them; a command the proc-receive
/// hook rewrote gives one line per rewrite, with what the hook reported.
fn command_lines<'c>(cmds: impl Iterator<Item = &'c Cmd>) -> Vec<u8> {
    let mut out = Vec::new();
    for c in cmds {
        let mut line = |old: &ObjectId, new: &ObjectId, name: &[u8]| {
            let _ = write!(out, "{old} {new} ");
            out.extend_from_slice(name);
            out.push(b'\n');
        };
        if c.rewrites.is_empty() {
            line(&c.command.old, &c.command.new, &c.command.name);
        }
        for r in &c.rewrites {
            line(
                r.old.as_ref().unwrap_or(&c.command.old),
                r.new.as_ref().unwrap_or(&c.command.new),
                r.refname.as_ref().unwrap_or(&c.command.name),
            );
        }
    }
    out
}

/// The environment that lets a hook read the quarantined objects (git's `tmp_objdir_env`).
fn quarantine_env(
    quarantine: &std::path::Path,
    objects_dir: &std::path::Path,
) -> Vec<(String, BString)> {
    let q = BString::from(quarantine.as_os_str().as_encoded_bytes());
    let mut main = objects_dir.to_string_lossy().into_owned();
    if main.contains(':') || main.starts_with('"') {
        main = format!("\"{}\"", main.replace('\\', "\\\\").replace('"', "\\\""));
    }
    let alternates = match std::env::var("GIT_ALTERNATE_OBJECT_DIRECTORIES") {
        Ok(inherited) if !inherited.is_empty() => format!("{inherited}:{main}"),
        _ => main,
    };
    vec![
        ("GIT_ALTERNATE_OBJECT_DIRECTORIES".into(), alternates.into()),
        ("GIT_OBJECT_DIRECTORY".into(), q.clone()),
        ("GIT_QUARANTINE_PATH".into(), q),
    ]
}
