//! The receive-side hooks of one session with git's contract for each (`githooks(5)`): when it
//! runs, its arguments, stdin and environment, and where its output goes (the client's band 2,
//! or receive-pack's stderr for reference-transaction and push-to-checkout). In-process hooks
//! run first.

use std::io::{self, Write};

use gix_hash::ObjectId;
use gix_object::bstr::BString;

use super::command::Cmd;
use super::options::SessionStderr;
use crate::hooks::proc_receive;
use crate::hooks::{self, Event, HookOutput, HookSet, Invocation, Verdict};
use crate::objects::ingest::Quarantine;
use crate::protocol::request::Command;
use crate::protocol::sideband::{Mode, Sideband};
use crate::refs::{RefUpdate, Refs, TransactionState};
use crate::repo::Repository;

/// The receive-side hooks of one session with git's contract for each: when it runs, its
/// arguments, stdin and environment, and where its output goes.
pub(super) struct Hooks<'a> {
    set: &'a HookSet,
    in_process: Option<&'a dyn hooks::InProcess>,
    git_dir: &'a std::path::Path,
    objects_dir: &'a std::path::Path,
    /// The repository's object format: the zero id in hook input is its.
    object_format: gix_hash::Kind,
    push_options: &'a [BString],
    pub(super) keepalive: Option<std::time::Duration>,
    /// [`Options::hook_env`].
    pub(super) base_env: &'a [(String, BString)],
    /// [`Options::hook_environment`].
    pub(super) environment: &'a hooks::HookEnvironment,
    /// A signed push's certificate.
    pub(super) certificate: Option<crate::protocol::push_cert::Certificate<'a>>,
    /// Its `GIT_PUSH_CERT*` variables, worked out (blob written, signature checked) the first
    /// time a hook needs them.
    certificate_env: std::cell::OnceCell<Vec<(String, BString)>>,
    config_file: &'a gix_config::File,
    /// `GIT_ALTERNATE_OBJECT_DIRECTORIES` as the session inherited it.
    inherited_alternates: Option<&'a str>,
    /// [`Options::stderr`](super::Options::stderr).
    stderr: &'a SessionStderr,
}

impl<'a> Hooks<'a> {
    pub(super) fn new(
        set: &'a HookSet,
        in_process: Option<&'a hooks::InProcessHooks>,
        repo: &'a Repository,
        push_options: &'a [BString],
        options: &'a super::Options,
        certificate: Option<crate::protocol::push_cert::Certificate<'a>>,
    ) -> Self {
        Hooks {
            set,
            in_process: in_process.map(|h| &*h.0),
            git_dir: &repo.git_dir,
            objects_dir: &repo.objects_dir,
            object_format: repo.object_format,
            push_options,
            keepalive: repo.config.hooks.keep_alive,
            base_env: &options.hook_env,
            environment: &options.hook_environment,
            certificate,
            certificate_env: std::cell::OnceCell::new(),
            config_file: &repo.config_file,
            inherited_alternates: options.env.alternate_object_directories.as_deref(),
            stderr: &options.stderr,
        }
    }

    /// `GIT_PUSH_CERT*` for pre- and post-receive of a signed push; the certificate blob goes
    /// into `objects_dir` (the quarantine during pre-receive).
    fn certificate_env(
        &self,
        objects_dir: &std::path::Path,
        diagnostics: &mut dyn Write,
    ) -> &[(String, BString)] {
        match &self.certificate {
            Some(cert) => self
                .certificate_env
                .get_or_init(|| cert.env(objects_dir, self.config_file, diagnostics)),
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
        output: HookOutput<'i>,
    ) -> Invocation<'i> {
        Invocation {
            git_dir: self.git_dir,
            args,
            stdin,
            base_env: self.base_env,
            env,
            env_remove: &[],
            environment: self.environment,
            keepalive: self.keepalive,
            output,
        }
    }

    /// Where a receive hook's output goes in `mode`: without sideband it is receive-pack's
    /// stderr, and when that is a file the hook writes there itself, as git's do.
    fn receive_hook_destination(&self, mode: Mode) -> HookOutput<'_> {
        use std::os::fd::AsFd;
        match (mode, self.stderr) {
            (Mode::None, SessionStderr::File(file)) => HookOutput::File(file.as_fd()),
            _ => HookOutput::Relayed,
        }
    }

    /// Relay hook output to band 2 (stderr without sideband) and keepalives while it is silent.
    pub(super) fn to_client<W: Write, E: Write>(
        sb: &mut Sideband<W, E>,
    ) -> impl FnMut(hooks::Output<'_>) -> io::Result<()> + '_ {
        move |o| match o {
            hooks::Output::Data(d) => sb.progress(d),
            hooks::Output::Idle => sb.keepalive(),
            hooks::Output::Diagnostic(m) => sb.stderr().write_all(m.as_bytes()),
        }
    }

    /// Relay the output of a receive hook (pre-receive, update, post-receive, post-update) as
    /// [`Hooks::to_client`] does, receive-pack's own message about a hook that cannot start
    /// included: git master's stderr is the sideband while these hooks run
    /// (`prepare_sideband_async`).
    fn receive_hook_output<W: Write, E: Write>(
        sb: &mut Sideband<W, E>,
    ) -> impl FnMut(hooks::Output<'_>) -> io::Result<()> + '_ {
        move |o| match o {
            hooks::Output::Data(d) => sb.progress(d),
            hooks::Output::Idle => sb.keepalive(),
            hooks::Output::Diagnostic(m) => sb.progress(m.as_bytes()),
        }
    }

    /// Relay hook output to receive-pack's stderr, not to the client's band (the
    /// reference-transaction and push-to-checkout hooks, as git's).
    fn to_stderr(
        diagnostics: &mut dyn Write,
    ) -> impl FnMut(hooks::Output<'_>) -> io::Result<()> + '_ {
        move |o| match o {
            hooks::Output::Data(d) => diagnostics.write_all(d),
            hooks::Output::Diagnostic(m) => diagnostics.write_all(m.as_bytes()),
            hooks::Output::Idle => Ok(()),
        }
    }

    /// pre-receive: every command on stdin, inside the quarantine. `false` declines the push.
    pub(super) fn pre_receive<W: Write, E: Write>(
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
        env.extend_from_slice(self.certificate_env(
            quarantine.map_or(self.objects_dir, Quarantine::path),
            sb.stderr(),
        ));
        if let Some(q) = quarantine {
            env.extend(quarantine_env(
                q.path(),
                self.objects_dir,
                self.inherited_alternates,
            ));
        }
        self.set.run(
            Event::PreReceive,
            &self.invocation(
                &[],
                Some(&stdin),
                &env,
                self.receive_hook_destination(sb.mode()),
            ),
            &mut Self::receive_hook_output(sb),
        )
    }

    /// update: `<ref> <old> <new>`. `false` declines this ref.
    pub(super) fn update<W: Write, E: Write>(
        &self,
        c: &Command,
        sb: &mut Sideband<W, E>,
    ) -> io::Result<bool> {
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
            &self.invocation(&args, None, &[], self.receive_hook_destination(sb.mode())),
            &mut Self::receive_hook_output(sb),
        )
    }

    /// reference-transaction: `<old> <new> <ref>` per update; its output goes to stderr, not
    /// to the client, as git's. `false` aborts the transaction.
    pub(super) fn transaction(
        &self,
        state: TransactionState,
        updates: &[RefUpdate],
        diagnostics: &mut dyn Write,
    ) -> bool {
        if let Some(h) = self.in_process
            && let Verdict::Refuse(msg) = h.reference_transaction(state, updates)
        {
            let _ = writeln!(diagnostics, "{msg}");
            return false;
        }
        if !self.set.has(Event::ReferenceTransaction) {
            return true;
        }
        let mut stdin = Vec::with_capacity(updates.len() * 100);
        for u in updates {
            let _ = writeln!(
                stdin,
                "{} {} {}",
                u.old_id(self.object_format),
                u.new_id(self.object_format),
                u.name
            );
        }
        let args = [BString::from(state.name())];
        self.set
            .run(
                Event::ReferenceTransaction,
                &self.invocation(&args, Some(&stdin), &[], HookOutput::Relayed),
                &mut Self::to_stderr(diagnostics),
            )
            .unwrap_or(false)
    }

    /// `receive.denyCurrentBranch=updateInstead`: bring the worktree that has the pushed branch
    /// checked out to `new`, through the push-to-checkout hook if there is one, else as git's
    /// push-to-deploy (refresh, no unstaged or staged changes, `read-tree -u -m`). Output goes
    /// to stderr, not to the client, as git's.
    pub(super) fn update_worktree(
        &self,
        new: ObjectId,
        wt: &crate::repo::Worktree,
        refs: &Refs,
        diagnostics: &mut dyn Write,
    ) -> Result<(), &'static str> {
        let Some(path) = wt.path.as_deref() else {
            return Err("denyCurrentBranch = updateInstead needs a worktree");
        };
        let git_dir = std::path::absolute(&wt.git_dir).unwrap_or_else(|_| wt.git_dir.clone());
        let git_dir_env = (
            "GIT_DIR".to_string(),
            BString::from(git_dir.as_os_str().as_encoded_bytes()),
        );
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
                    &self.invocation(&args, None, &env, HookOutput::Relayed),
                    &mut Self::to_stderr(diagnostics),
                )
                .unwrap_or(false);
            return if ok {
                Ok(())
            } else {
                Err("push-to-checkout hook declined")
            };
        }
        // git runs these with their output on its stderr.
        let mut git = |dir: &std::path::Path, args: &[&str]| {
            let mut p = std::process::Command::new(self.environment.git_program());
            self.environment.apply(&mut p);
            p.args(args)
                .current_dir(dir)
                .env("GIT_DIR", &git_dir)
                .stdin(std::process::Stdio::null());
            hooks::run_process(p, None, None, &mut Self::to_stderr(diagnostics)).unwrap_or(false)
        };
        let head_is_born = wt
            .head
            .as_deref()
            .and_then(|h| refs.get(h.as_bytes()))
            .is_some();
        // git's empty_tree_oid_hex(the_hash_algo).
        let empty_tree = self.object_format.empty_tree().to_string();
        let base = if head_is_born {
            "HEAD"
        } else {
            empty_tree.as_str()
        };
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
    pub(super) fn proc_receive<W: Write, E: Write>(
        &self,
        cmds: &mut [Cmd],
        atomic: bool,
        push_options: bool,
        sb: &mut Sideband<W, E>,
    ) -> io::Result<bool> {
        let inv = self.invocation(&[], None, &[], HookOutput::Relayed);
        let (ok, message) = {
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
                .map(|c| (c.proc, c.take_error(), c.take_rewrites()))
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
            let reported = proc_receive::converse(
                &mut proc_receive::Running {
                    conversation: &mut conv,
                    sink: &mut sink,
                },
                &mut slots,
                atomic,
                push_options,
                self.push_options,
            );
            let states: Vec<_> = slots
                .into_iter()
                .map(|s| (s.proc, s.error, s.rewrites))
                .collect();
            for (c, (proc, error, rewrites)) in cmds.iter_mut().zip(states) {
                c.proc = proc;
                c.set_error(error);
                c.set_rewrites(rewrites);
            }
            let reported = reported?;
            let finished = conv.finish(&mut sink)?;
            (finished && reported.ok, reported.message())
        };
        if let Some(message) = message {
            sb.error(message)?;
        }
        Ok(ok)
    }

    /// post-receive: the refs that were updated (not those that did not exist) on stdin.
    pub(super) fn post_receive<W: Write, E: Write>(
        &self,
        cmds: &[Cmd],
        sb: &mut Sideband<W, E>,
    ) -> io::Result<()> {
        let updated = || cmds.iter().filter(|c| c.updated());
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
        env.extend_from_slice(self.certificate_env(self.objects_dir, sb.stderr()));
        self.set.run(
            Event::PostReceive,
            &self.invocation(
                &[],
                Some(&stdin),
                &env,
                self.receive_hook_destination(sb.mode()),
            ),
            &mut Self::receive_hook_output(sb),
        )?;
        Ok(())
    }

    /// post-update: the names of the refs that were updated, as arguments.
    pub(super) fn post_update<W: Write, E: Write>(
        &self,
        cmds: &[Cmd],
        sb: &mut Sideband<W, E>,
    ) -> io::Result<()> {
        if !self.set.has(Event::PostUpdate) {
            return Ok(());
        }
        let args: Vec<BString> = cmds
            .iter()
            .filter(|c| c.updated())
            .map(|c| c.command.name.clone())
            .collect();
        if args.is_empty() {
            return Ok(());
        }
        self.set.run(
            Event::PostUpdate,
            &self.invocation(&args, None, &[], self.receive_hook_destination(sb.mode())),
            &mut Self::receive_hook_output(sb),
        )?;
        Ok(())
    }
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
        if c.rewrites().is_empty() {
            line(&c.command.old, &c.command.new, &c.command.name);
        }
        for r in c.rewrites() {
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
    inherited: Option<&str>,
) -> Vec<(String, BString)> {
    let q = BString::from(quarantine.as_os_str().as_encoded_bytes());
    let mut main = objects_dir.to_string_lossy().into_owned();
    if main.contains(':') || main.starts_with('"') {
        main = format!("\"{}\"", main.replace('\\', "\\\\").replace('"', "\\\""));
    }
    let alternates = match inherited {
        Some(inherited) if !inherited.is_empty() => format!("{inherited}:{main}"),
        _ => main,
    };
    vec![
        ("GIT_ALTERNATE_OBJECT_DIRECTORIES".into(), alternates.into()),
        ("GIT_OBJECT_DIRECTORY".into(), q.clone()),
        ("GIT_QUARANTINE_PATH".into(), q),
    ]
}
