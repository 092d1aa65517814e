//! Process hooks with git's contract: [`HookSet`] (looked up once per session), running a hook
//! with its arguments, stdin and environment and relaying its output, and the long-running
//! conversation the proc-receive hook needs.

use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gix_object::bstr::BString;

use crate::repo::config::HookConfig;

/// The hook events receive-pack runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// Once, before any ref is updated, with every command on stdin.
    PreReceive,
    /// Once per ref, with `<ref> <old> <new>` as arguments.
    Update,
    /// Once, after the report, with the updated refs on stdin.
    PostReceive,
    /// Once, after post-receive, with the updated ref names as arguments.
    PostUpdate,
    /// Around each ref transaction: `preparing`, `prepared`, `committed`, `aborted`.
    ReferenceTransaction,
    /// With `receive.denyCurrentBranch=updateInstead`, to update a worktree to a pushed commit.
    PushToCheckout,
    /// For the commands `receive.procReceiveRefs` selects: a pkt-line conversation in which the
    /// hook handles them itself (only the hooks-directory hook counts, as in git).
    ProcReceive,
}

impl Event {
    const ALL: [Event; 7] = [
        Event::PreReceive,
        Event::Update,
        Event::PostReceive,
        Event::PostUpdate,
        Event::ReferenceTransaction,
        Event::PushToCheckout,
        Event::ProcReceive,
    ];

    /// git's name for the event (and the hook file's name).
    pub fn name(self) -> &'static str {
        match self {
            Event::PreReceive => "pre-receive",
            Event::Update => "update",
            Event::PostReceive => "post-receive",
            Event::PostUpdate => "post-update",
            Event::ReferenceTransaction => "reference-transaction",
            Event::PushToCheckout => "push-to-checkout",
            Event::ProcReceive => "proc-receive",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One hook to run for an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    /// A file in the hooks directory: its path, and the `argv[0]` git gives it.
    File {
        /// Where it is.
        path: PathBuf,
        /// What it is called as (`hooks/<name>`).
        argv0: String,
    },
    /// `hook.<name>.command`, run through the shell.
    Configured {
        /// The friendly name.
        name: String,
        /// The command line.
        command: String,
    },
}

/// A configuration git's hook API dies on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An event is configured for a hook without a command.
    #[error("'hook.{0}.command' must be configured or 'hook.{0}.event' must be removed; aborting.")]
    MissingCommand(String),
}

/// The hooks of one session, looked up once.
#[derive(Debug, Default, Clone)]
pub struct HookSet {
    by_event: [Vec<Hook>; 7],
    /// Per event, how many of its hooks run at once (git's `get_hook_jobs`); 0 or 1: one after
    /// the other.
    jobs: [usize; 7],
}

static PROCESSES: AtomicUsize = AtomicUsize::new(0);

/// How many hook processes this process has started, for tests that prove absent hooks cost
/// nothing.
#[cfg(feature = "internals")]
pub fn processes_started() -> usize {
    PROCESSES.load(Ordering::Relaxed)
}

impl HookSet {
    /// Look up every receive-side hook of the repository at `git_dir`: the config-defined ones
    /// from `defined` (the `hook.*` keys), then the hooks-directory hook, and how many of each
    /// event's hooks may run at once. git's warnings and its hint about a hook that is not
    /// executable go to `diagnostics` (receive-pack's stderr).
    pub fn discover(
        git_dir: &Path,
        config: &gix_config::File,
        defined: &HookConfig,
        diagnostics: &mut dyn Write,
    ) -> Result<Self, Error> {
        let mut set = HookSet::default();
        // git master's `warn_jobs_on_friendly_names`.
        for (name, _) in &defined.event_jobs {
            if defined.is_friendly_name(name) {
                let _ = writeln!(
                    diagnostics,
                    "warning: hook.{name}.jobs is set but '{name}' looks like a hook \
                     friendly-name, not an event name; hook.<event>.jobs uses the event name \
                     (e.g. hook.post-receive.jobs), so this setting will be ignored"
                );
            }
        }
        // git master's `build_hook_config_map` checks every event's hooks, receive-side or not.
        let mut serial_only = [false; 7];
        for (event_name, names) in &defined.events {
            let event = Event::ALL
                .iter()
                .copied()
                .find(|e| e.name() == event_name && *e != Event::ProcReceive);
            let event_disabled = defined.event_disabled(event_name);
            for name in names {
                let disabled = defined.disabled(name);
                let command = defined.command(name);
                if command.is_none() {
                    if !disabled {
                        return Err(Error::MissingCommand(name.clone()));
                    }
                    let _ = writeln!(
                        diagnostics,
                        "warning: disabled hook '{name}' has no command configured"
                    );
                }
                let Some(event) = event else {
                    continue;
                };
                // A configured hook without `parallel`, even a disabled one, keeps the event
                // serial (git's `get_hook_jobs` looks at the whole list).
                serial_only[event.index()] |= !defined.parallel(name);
                if let Some(command) = command.filter(|_| !disabled && !event_disabled) {
                    set.by_event[event.index()].push(Hook::Configured {
                        name: name.clone(),
                        command: command.to_owned(),
                    });
                }
            }
        }
        for event in Event::ALL {
            set.jobs[event.index()] = if event == Event::PushToCheckout || serial_only[event.index()]
            {
                // git runs push-to-checkout with RUN_HOOKS_OPT_INIT_FORCE_SERIAL.
                1
            } else {
                defined
                    .event_jobs(event.name())
                    .or(defined.jobs)
                    .unwrap_or(1)
            };
        }
        // Then the hooks-directory hook.
        let hooks_path = config.string("core.hooksPath").map(|p| p.to_string());
        for event in Event::ALL {
            let (path, argv0) = match &hooks_path {
                Some(dir) => {
                    let argv0 = format!("{}/{}", dir.trim_end_matches('/'), event.name());
                    (git_dir.join(&argv0), argv0)
                }
                None => (
                    git_dir.join("hooks").join(event.name()),
                    format!("hooks/{}", event.name()),
                ),
            };
            match std::fs::metadata(&path) {
                Ok(m) if m.is_file() && is_executable(&m) => {
                    set.by_event[event.index()].push(Hook::File { path, argv0 });
                }
                Ok(m)
                    if m.is_file()
                        && config
                            .boolean("advice.ignoredHook")
                            .ok()
                            .flatten()
                            .unwrap_or(true) =>
                {
                    let _ = writeln!(
                        diagnostics,
                        "hint: The '{argv0}' hook was ignored because it's not set as executable.\n\
                         hint: You can disable this warning with `git config set advice.ignoredHook false`."
                    );
                }
                _ => {}
            }
        }
        Ok(set)
    }

    /// Whether any hook is configured for `event`.
    pub fn has(&self, event: Event) -> bool {
        !self.by_event[event.index()].is_empty()
    }

    /// The hooks for `event`, in the order they run.
    pub fn get(&self, event: Event) -> &[Hook] {
        &self.by_event[event.index()]
    }

    /// How many of `event`'s hooks run at once: `hook.<event>.jobs`, else `hook.jobs`, else 1;
    /// 1 when a configured hook of the event lacks `hook.<name>.parallel`, and always for
    /// push-to-checkout.
    pub fn jobs(&self, event: Event) -> usize {
        self.jobs[event.index()].max(1)
    }

}

fn is_executable(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o111 != 0
}

/// How to run a hook.
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    /// The repository's git directory: the hook's working directory.
    pub git_dir: &'a Path,
    /// Arguments after `argv[0]`.
    pub args: &'a [BString],
    /// Bytes for the hook's stdin (`None` for `/dev/null`).
    pub stdin: Option<&'a [u8]>,
    /// Environment for every hook of the session (`berth serve` sets git-http-backend's
    /// `REMOTE_USER`, `REMOTE_ADDR`, `GIT_PROTOCOL` here), set before `env`.
    pub base_env: &'a [(String, BString)],
    /// Extra environment for this hook.
    pub env: &'a [(String, BString)],
    /// Environment variables to remove.
    pub env_remove: &'a [&'a str],
    /// What the hook takes from this process's environment, before all of the above.
    pub environment: &'a super::HookEnvironment,
    /// Tell the sink after this much silence (`receive.keepAlive`).
    pub keepalive: Option<Duration>,
    /// Where its stdout and stderr go when it runs alone (hooks run at once always relay).
    pub output: HookOutput<'a>,
}

/// Where a process hook's stdout and stderr go.
#[derive(Debug, Clone, Copy)]
pub enum HookOutput<'a> {
    /// One pipe for both, read by the session and given to the sink in chunks of at most 128
    /// bytes (git's `copy_to_sideband`).
    Relayed,
    /// Straight to this file, which is where the sink would write them (the `berth
    /// receive-pack` command's own stderr, without sideband): the hook's stdout joined to it
    /// (git's `stdout_to_stderr`) and nothing read or relayed, as git runs a hook when there
    /// is no sideband (`ungroup`). Nothing waits for a process the hook leaves behind holding it.
    File(std::os::fd::BorrowedFd<'a>),
}

/// What a running hook produced.
#[derive(Debug)]
pub enum Output<'a> {
    /// Up to 128 bytes of its stdout or stderr.
    Data(&'a [u8]),
    /// It has been silent for the keepalive interval.
    Idle,
    /// A message of receive-pack's own about the hook (git's `error: cannot run <hook>: …`),
    /// for receive-pack's stderr rather than the hook's output channel.
    Diagnostic(&'a str),
}

pub(super) fn run_one(
    hook: &Hook,
    inv: &Invocation<'_>,
    sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
) -> io::Result<bool> {
    let started = match inv.output {
        HookOutput::Relayed => spawn_hook(hook, inv, spawn_piped).map(|(c, r)| (c, Some(r))),
        HookOutput::File(fd) => {
            let spawn = |p, stdin| spawn_onto(p, stdin, fd);
            spawn_hook(hook, inv, spawn).map(|c| (c, None))
        }
    };
    match started {
        Ok((child, Some(reader))) => relay(child, reader, inv.stdin, inv.keepalive, sink),
        Ok((child, None)) => feed(child, inv.stdin),
        Err(message) => {
            sink(Output::Diagnostic(&message))?;
            Ok(false)
        }
    }
}

/// Start `hook` as `inv` says through `spawn` (which sets where its output goes), its stdin
/// piped when `inv` has input. A hooks-directory hook the kernel cannot execute for want of a `#!`
/// line (`ENOEXEC`) is run by `/bin/sh`, as git's `start_command` does. If it cannot start:
/// git's message (`fatal: cannot exec '<hook>': <reason>`).
pub(super) fn spawn_hook<T>(
    hook: &Hook,
    inv: &Invocation<'_>,
    spawn: impl Fn(Process, bool) -> io::Result<T>,
) -> Result<T, String> {
    let piped = inv.stdin.is_some();
    let result = match spawn(command(hook, inv, false), piped) {
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) && matches!(hook, Hook::File { .. }) => {
            spawn(command(hook, inv, true), piped)
        }
        other => other,
    };
    result.map_err(|e| {
        let name = match hook {
            Hook::File { argv0, .. } if Path::new(argv0).is_relative() => argv0.clone(),
            Hook::File { path, .. } => path.to_string_lossy().into_owned(),
            Hook::Configured { command, .. } => command.clone(),
        };
        format!("fatal: cannot exec '{name}': {}\n", strerror(&e))
    })
}

/// The system's message for `e`, without Rust's ` (os error N)`.
fn strerror(e: &io::Error) -> String {
    let text = e.to_string();
    match text.rsplit_once(" (os error ") {
        Some((message, _)) => message.to_owned(),
        None => text,
    }
}

/// The process of `hook` as `inv` runs it, its stdio not yet set; `via_shell`: a
/// hooks-directory hook run by `/bin/sh` (git's retry after `ENOEXEC`).
fn command(hook: &Hook, inv: &Invocation<'_>, via_shell: bool) -> Process {
    let mut process = match hook {
        Hook::File { path, argv0 } => {
            // Exec'd by the relative name git uses, from the git directory, so that even a
            // script (whose `$0` is the path the kernel was given) sees `hooks/<name>`.
            let program = if Path::new(argv0).is_relative() {
                Path::new(argv0)
            } else {
                path.as_path()
            };
            if via_shell {
                let mut p = Process::new("/bin/sh");
                p.arg(program);
                p
            } else {
                let mut p = Process::new(program);
                p.arg0(argv0);
                p
            }
        }
        Hook::Configured { command, .. } => {
            let mut p = Process::new("/bin/sh");
            p.arg("-c").arg(format!("{command} \"$@\"")).arg(command);
            p
        }
    };
    for a in inv.args {
        process.arg(std::ffi::OsStr::from_bytes(a));
    }
    inv.environment.apply(&mut process);
    inv.environment.in_git_dir(&mut process, inv.git_dir);
    for k in inv.env_remove {
        process.env_remove(k);
    }
    for (k, v) in inv.base_env.iter().chain(inv.env) {
        process.env(k, std::ffi::OsStr::from_bytes(v));
    }
    process
}

/// Start `process` with its stdout and stderr on one pipe, which is returned, and its stdin
/// piped (`stdin`) or `/dev/null`.
pub(super) fn spawn_piped(
    mut process: Process,
    stdin: bool,
) -> io::Result<(std::process::Child, io::PipeReader)> {
    let (reader, writer) = io::pipe()?;
    process
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() });
    let child = process.spawn()?;
    PROCESSES.fetch_add(1, Ordering::Relaxed);
    drop(process); // our copies of the pipe's write end: EOF comes when the hook exits
    Ok((child, reader))
}

/// Start `process` with its stdout and stderr on `file`, and its stdin piped (`stdin`) or
/// `/dev/null`.
fn spawn_onto(
    mut process: Process,
    stdin: bool,
    file: std::os::fd::BorrowedFd<'_>,
) -> io::Result<std::process::Child> {
    process
        .stdout(file.try_clone_to_owned()?)
        .stderr(file.try_clone_to_owned()?)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() });
    let child = process.spawn()?;
    PROCESSES.fetch_add(1, Ordering::Relaxed);
    Ok(child)
}

/// Feed `input` to a started `child` whose output is not ours to read ([`HookOutput::File`]),
/// then wait for it; whether it exited with status 0. A hook that does not read its input
/// (`EPIPE`) is fine, as with git.
fn feed(mut child: std::process::Child, input: Option<&[u8]>) -> io::Result<bool> {
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        let _ = stdin.write_all(input);
    }
    Ok(child.wait()?.success())
}

/// Run `process` with its stdout and stderr on one pipe relayed to `sink` in chunks of at most
/// 128 bytes, `stdin` fed to it (or `/dev/null`), and [`Output::Idle`] after each `keepalive`
/// of silence; all from the calling thread. Returns whether it exited with status 0.
pub fn run_process(
    process: Process,
    stdin: Option<&[u8]>,
    keepalive: Option<Duration>,
    sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
) -> io::Result<bool> {
    let program = process.get_program().to_string_lossy().into_owned();
    match spawn_piped(process, stdin.is_some()) {
        Ok((child, reader)) => relay(child, reader, stdin, keepalive, sink),
        Err(e) => {
            // As git: a program that cannot start is a failure, reported on stderr.
            sink(Output::Diagnostic(&format!("error: cannot run {program}: {e}\n")))?;
            Ok(false)
        }
    }
}

/// Feed `stdin` to a started `child` and relay what it writes on `reader` to `sink`, until it
/// exits; whether it exited with status 0.
fn relay(
    mut child: std::process::Child,
    mut reader: io::PipeReader,
    inv_stdin: Option<&[u8]>,
    keepalive: Option<Duration>,
    sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
) -> io::Result<bool> {
    let input = inv_stdin.unwrap_or_default();
    let mut written = 0;
    let mut stdin = child.stdin.take();
    if let Some(s) = &stdin {
        if input.is_empty() {
            stdin = None;
        } else {
            let flags = rustix::fs::fcntl_getfl(s)?;
            rustix::fs::fcntl_setfl(s, flags | rustix::fs::OFlags::NONBLOCK)?;
        }
    }
    let timeout = keepalive.map(|d| rustix::event::Timespec {
        tv_sec: d.as_secs() as _,
        tv_nsec: d.subsec_nanos() as _,
    });
    let mut buf = [0u8; 128];
    loop {
        let (readable, writable) = {
            use rustix::event::{PollFd, PollFlags};
            let mut fds = vec![PollFd::new(&reader, PollFlags::IN)];
            if let Some(s) = &stdin {
                fds.push(PollFd::new(s, PollFlags::OUT));
            }
            let n = match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                (false, false)
            } else {
                (
                    !fds[0].revents().is_empty(),
                    fds.get(1).is_some_and(|f| !f.revents().is_empty()),
                )
            }
        };
        if !readable && !writable {
            sink(Output::Idle)?;
            continue;
        }
        if writable && let Some(s) = stdin.as_mut() {
            let end = input.len().min(written + 64 * 1024);
            match s.write(&input[written..end]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The hook does not read its input (EPIPE): fine, as with git.
                Err(_) => written = input.len(),
            }
            if written >= input.len() {
                stdin = None;
            }
        }
        if readable {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => sink(Output::Data(&buf[..n]))?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    drop(stdin);
    Ok(child.wait()?.success())
}

/// A hook spoken to in pkt-lines over its stdin and stdout (proc-receive), its stderr relayed
/// like any hook's output. Reads, writes and the relay share one `poll` loop on the calling
/// thread, so neither side can block the other.
pub struct Conversation {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: std::process::ChildStdout,
    stderr: Option<std::process::ChildStderr>,
    buf: Vec<u8>,
    stdout_eof: bool,
    keepalive: Option<Duration>,
}

/// A packet the hook sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookPacket {
    /// A data line, its trailing LF removed.
    Data(Vec<u8>),
    /// A flush (or delimiter) packet.
    Flush,
    /// The hook closed its stdout (or sent something that is not a pkt-line).
    Eof,
}

/// What the start of a hook's output holds, as [`frame`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framed {
    /// A whole packet, and how many bytes it took.
    Packet(HookPacket, usize),
    /// Not a pkt-line (a bad length): git dies with this message (`fatal: protocol error: …`).
    Bad(String),
    /// Not a whole packet yet: more output is needed.
    Incomplete,
}

/// Take the first pkt-line from `buf`, the hook's output read so far. A data line loses its
/// trailing LF; lengths 0 to 2 are a flush (or delimiter); anything but four hex digits, 3, and
/// lengths above git's 65520 are [`Framed::Bad`], with git's message.
pub fn frame(buf: &[u8]) -> Framed {
    let Some(head) = buf.get(..4) else {
        return Framed::Incomplete;
    };
    let len = head
        .iter()
        .all(u8::is_ascii_hexdigit)
        .then(|| std::str::from_utf8(head).ok())
        .flatten()
        .and_then(|h| usize::from_str_radix(h, 16).ok());
    match len {
        None => Framed::Bad(format!(
            "protocol error: bad line length character: {}",
            String::from_utf8_lossy(head)
        )),
        Some(n @ (3 | 65521..)) => Framed::Bad(format!("protocol error: bad line length {n}")),
        Some(0..=2) => Framed::Packet(HookPacket::Flush, 4),
        Some(n) => match buf.get(4..n) {
            Some(line) => {
                let line = line.strip_suffix(b"\n").unwrap_or(line);
                Framed::Packet(HookPacket::Data(line.to_vec()), n)
            }
            None => Framed::Incomplete,
        },
    }
}

impl Conversation {
    /// Start the first hook of `event` from `set`, if there is one.
    pub fn start(set: &HookSet, event: Event, inv: &Invocation<'_>) -> io::Result<Option<Self>> {
        let Some(Hook::File { path, argv0 }) = set.get(event).first() else {
            return Ok(None);
        };
        let mut p = Process::new(if Path::new(argv0).is_relative() {
            Path::new(argv0)
        } else {
            path.as_path()
        });
        inv.environment.apply(&mut p);
        inv.environment.in_git_dir(&mut p, inv.git_dir);
        p.arg0(argv0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in inv.base_env.iter().chain(inv.env) {
            p.env(k, std::ffi::OsStr::from_bytes(v));
        }
        let mut child = p.spawn()?;
        PROCESSES.fetch_add(1, Ordering::Relaxed);
        let stdin = child.stdin.take();
        if let Some(s) = &stdin {
            let flags = rustix::fs::fcntl_getfl(s)?;
            rustix::fs::fcntl_setfl(s, flags | rustix::fs::OFlags::NONBLOCK)?;
        }
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(io::Error::other("hook pipes missing"));
        };
        Ok(Some(Conversation {
            child,
            stdin,
            stdout,
            stderr: Some(stderr),
            buf: Vec::new(),
            stdout_eof: false,
            keepalive: inv.keepalive,
        }))
    }

    /// One round of `poll`: write from `out` if given and writable (returns bytes written),
    /// buffer what the hook wrote on stdout, relay its stderr.
    fn pump(
        &mut self,
        out: Option<&[u8]>,
        sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
    ) -> io::Result<usize> {
        use rustix::event::{PollFd, PollFlags};
        let timeout = self.keepalive.map(|d| rustix::event::Timespec {
            tv_sec: d.as_secs() as _,
            tv_nsec: d.subsec_nanos() as _,
        });
        let (out_ready, err_ready, in_ready) = {
            let mut fds = Vec::with_capacity(3);
            let out_i = (!self.stdout_eof).then(|| {
                fds.push(PollFd::new(&self.stdout, PollFlags::IN));
                fds.len() - 1
            });
            let err_i = self.stderr.as_ref().map(|e| {
                fds.push(PollFd::new(e, PollFlags::IN));
                fds.len() - 1
            });
            let in_i = match (&self.stdin, out) {
                (Some(s), Some(_)) => {
                    fds.push(PollFd::new(s, PollFlags::OUT));
                    Some(fds.len() - 1)
                }
                _ => None,
            };
            if fds.is_empty() {
                return Ok(0);
            }
            let n = match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => return Ok(0),
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                sink(Output::Idle)?;
                return Ok(0);
            }
            let ready = |i: Option<usize>| i.is_some_and(|i| !fds[i].revents().is_empty());
            (ready(out_i), ready(err_i), ready(in_i))
        };
        let mut chunk = [0u8; 4096];
        if err_ready && let Some(e) = self.stderr.as_mut() {
            match e.read(&mut chunk[..128]) {
                Ok(0) | Err(_) => self.stderr = None,
                Ok(n) => sink(Output::Data(&chunk[..n]))?,
            }
        }
        if out_ready {
            match self.stdout.read(&mut chunk) {
                Ok(0) | Err(_) => self.stdout_eof = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
        if in_ready && let (Some(s), Some(out)) = (self.stdin.as_mut(), out) {
            return match s.write(out) {
                Ok(n) => Ok(n),
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted =>
                {
                    Ok(0)
                }
                Err(e) => Err(e),
            };
        }
        Ok(0)
    }

    /// Write `data` to the hook's stdin. Fails if the hook stopped reading.
    pub fn send(
        &mut self,
        data: &[u8],
        sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut written = 0;
        while written < data.len() {
            if self.stdin.is_none() {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            written += self.pump(Some(&data[written..]), sink)?;
        }
        Ok(())
    }

    /// Write one data pkt-line.
    pub fn send_line(
        &mut self,
        line: &[u8],
        sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut pkt = Vec::with_capacity(line.len() + 4);
        crate::protocol::pktline::write_data(&mut pkt, line)?;
        self.send(&pkt, sink)
    }

    /// Read the hook's next packet.
    pub fn read_packet(
        &mut self,
        sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
    ) -> io::Result<HookPacket> {
        loop {
            match frame(&self.buf) {
                Framed::Packet(packet, used) => {
                    self.buf.drain(..used);
                    return Ok(packet);
                }
                // git reads the hook's output gently only at EOF: a bad length is fatal.
                Framed::Bad(message) => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, message));
                }
                Framed::Incomplete => {}
            }
            if self.stdout_eof {
                return Ok(HookPacket::Eof);
            }
            self.pump(None, sink)?;
        }
    }

    /// Close the hook's stdin and stdout, relay the rest of its stderr and wait for it.
    pub fn finish(
        mut self,
        sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
    ) -> io::Result<bool> {
        self.stdin = None;
        // Whatever the hook still says on stdout is read and dropped, so it cannot block on it.
        while self.stderr.is_some() || !self.stdout_eof {
            self.pump(None, sink)?;
            self.buf.clear();
        }
        Ok(self.child.wait()?.success())
    }
}
