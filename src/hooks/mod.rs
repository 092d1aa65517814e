//! Hooks: the one way a push runs operator code, git's process hooks and in-process Rust hooks.
//!
//! [`HookSet::discover`] looks every hook up once per session: config-defined hooks
//! (`hook.<name>.command` + `hook.<name>.event`, in config order) then the hooks-directory hook
//! (`$GIT_DIR/hooks/<event>` or `core.hooksPath`), as git's `list_hooks`. An event without a hook
//! is an empty list, and running it does nothing: no process, no thread, no pipe, no input built
//! (callers build input lazily, after [`HookSet::has`]).
//!
//! A process hook runs with git's contract: cwd is `$GIT_DIR` and `GIT_DIR=.`, a hooks-directory
//! hook is exec'd with `argv[0]` = `hooks/<name>` (or `<core.hooksPath>/<name>`), a configured
//! hook through `sh -c '<command> "$@"'`; stdout and stderr share one pipe, which the session's
//! thread relays in chunks of at most 128 bytes (git's `copy_to_sideband`) to the [`Sink`] it is
//! given, and stdin is fed from the same thread. One `poll` loop does both, so a hook costs its
//! process and nothing else: no relay thread, no feeder thread, no muxer of its own. While a hook
//! is silent for `receive.keepAlive` seconds the sink is told, so the session can send keepalives.
//! When the sink would only write to a file the caller hands over (`berth receive-pack`'s own
//! stderr, `HookOutput::File`), the hook writes there itself, as git's hooks do without
//! sideband: no pipe at all.
//!
//! When `hook.jobs` or `hook.<event>.jobs` allows it and every configured hook of the event has
//! `hook.<name>.parallel`, the event's hooks run at the same time as in git master
//! ([`parallel`]): still from the one thread and one `poll` loop, each hook's output buffered
//! and relayed whole.
//!
//! The public part of this module is the in-process hook API ([`InProcess`]); the process hooks
//! ([`process`]) and the proc-receive protocol ([`proc_receive`]) are the crate's own (public
//! with the `internals` feature).

mod environment;
internal! { mod process; }
internal! { mod proc_receive; }
mod parallel;
mod run;

pub use self::environment::{HookEnvironment, Kept, kept};
pub(crate) use self::process::*;

use std::path::Path;

use gix_object::bstr::BString;

/// A command of the push, as in-process hooks see it.
pub use crate::protocol::request::Command;
use crate::refs::{RefUpdate, TransactionState};

/// The verdict of an in-process hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go on.
    Accept,
    /// Refuse, with a message shown to the client as hook output.
    Refuse(String),
}

/// What an in-process hook is told about the push.
#[derive(Debug, Clone, Copy)]
pub struct Push<'a> {
    /// The commands, in the client's order (for post-receive: those that succeeded).
    pub commands: &'a [Command],
    /// The push options.
    pub push_options: &'a [BString],
    /// The quarantine, while the pushed objects are in it (pre-receive only).
    pub quarantine: Option<&'a Path>,
}

/// In-process hooks for programs that embed berth. They run at the same points as the process
/// hooks of the same name, before them, at no process cost. Every method has a default that
/// accepts.
pub trait InProcess: Send + Sync {
    /// Before anything is written. Refusing declines every ref (`pre-receive hook declined`).
    fn pre_receive(&self, _push: &Push<'_>) -> Verdict {
        Verdict::Accept
    }
    /// Per ref, after the built-in checks. Refusing declines this ref (`hook declined`).
    fn update(&self, _command: &Command) -> Verdict {
        Verdict::Accept
    }
    /// Around the ref transaction; refusing in `Preparing` or `Prepared` aborts it.
    fn reference_transaction(&self, _state: TransactionState, _updates: &[RefUpdate]) -> Verdict {
        Verdict::Accept
    }
    /// After the report, with the refs that were updated.
    fn post_receive(&self, _push: &Push<'_>) {}
}

/// An [`InProcess`] hook set, shareable and printable, for [`crate::receive::Options`].
#[derive(Clone)]
pub struct InProcessHooks(pub std::sync::Arc<dyn InProcess>);

impl std::fmt::Debug for InProcessHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InProcessHooks")
    }
}
