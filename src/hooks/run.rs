//! Running an event's hooks ([`HookSet::run`]): one after the other, each through
//! [`process::run_one`](super::process::run_one), or, when `hook.jobs` allows it, all at once
//! through [`parallel`](super::parallel). This is the one place that chooses between the two,
//! so the process hook and the parallel runner need not know of each other.

use std::io;

use super::parallel;
use super::process::{Event, HookSet, Invocation, Output, run_one};

impl HookSet {
    /// Run every hook of `event`, relaying their output to `sink`: one after the other, their
    /// output as it comes, or, when [`HookSet::jobs`] allows more than one at once, as git's
    /// `run_processes_parallel` does ([`super::parallel`]): each gets the whole stdin, and its
    /// output reaches `sink` whole. Returns whether all exited with status 0 (git ORs the
    /// statuses; a hook that cannot start counts as a failure). Nothing happens for an event
    /// without hooks.
    pub fn run(
        &self,
        event: Event,
        invocation: &Invocation<'_>,
        sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
    ) -> io::Result<bool> {
        let hooks = self.get(event);
        let jobs = self.jobs(event);
        if jobs > 1 && hooks.len() > 1 {
            return parallel::run(hooks, jobs, invocation, sink);
        }
        let mut ok = true;
        for hook in hooks {
            ok &= run_one(hook, invocation, sink)?;
        }
        Ok(ok)
    }
}
