//! One push as both transports run it: the `receive::Options` for who pushes where (committer,
//! hook environment, the per-ref access check, the command cap, the cluster's commit gate), the
//! push slot it waits for, and the session's end (the access record, HEAD at the first pushed
//! branch). HTTP (`serve/mod.rs`) and ssh (`serve/ssh/`) each bring the request body and carry
//! the output; what a push is and how it is admitted is decided here, once.

use std::io::{Read, Write};
use std::net::IpAddr;
use std::sync::Arc;

use super::{Access, Identity, InFlight, Reject, Server, SlotKind};
use crate::cluster::{self, Cluster};
use crate::receive;
use crate::repo::Name;

/// The transport that brought a push: it names the committer's e-mail host part
/// (`<user>@http.<address>`, `<user>@ssh.<address>`) and whether the session is stateless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transport {
    /// Smart HTTP: `--stateless-rpc`, the advertisement was a request of its own.
    Http,
    /// ssh: one connection, advertisement and push in one session.
    Ssh,
}

/// A push's replication, when the repository is in a cluster: the cluster, the repository's
/// cluster name and its replicas.
pub(super) type Replicated = Option<(Arc<Cluster>, String, Vec<String>)>;

/// Who pushes into which repository, over what.
pub(super) struct Push<'a> {
    pub(super) server: &'a Server,
    pub(super) user: &'a Identity,
    pub(super) peer: IpAddr,
    pub(super) transport: Transport,
    /// The client's `GIT_PROTOCOL`.
    pub(super) protocol: Option<&'a str>,
    /// The repository as the client named it (for the access rules).
    pub(super) repo: &'a Name,
    /// Its git directory.
    pub(super) dir: &'a str,
}

impl Push<'_> {
    /// The session's options: the user as committer and in the hooks' environment, the
    /// access rules per ref, and in a cluster the pack streamed to the replicas and the refs
    /// committed through etcd.
    pub(super) fn options(&self, replicated: Replicated) -> receive::Options {
        let server = self.server;
        let host = self.peer.to_string();
        let domain = match self.transport {
            Transport::Http => "http",
            Transport::Ssh => "ssh",
        };
        let email = format!("{}@{domain}.{host}", self.user.name());
        let (pack_tee, commit_gate) = match replicated {
            Some((cluster, name, replicas)) => {
                let (tee, gate) = cluster::Gate::for_push(
                    cluster,
                    name,
                    self.dir,
                    replicas,
                    self.user.name(),
                    &email,
                );
                (Some(tee), Some(gate))
            }
            None => (None, None),
        };
        let ref_access = server.current_rules().map(|rules| {
            Arc::new(super::access::PushAccess {
                rules,
                repo: self.repo.clone(),
                user: self.user.clone(),
            }) as Arc<dyn receive::RefAccess>
        });
        receive::Options {
            stateless_rpc: self.transport == Transport::Http,
            max_command_bytes: Some(server.max_command_bytes),
            protocol_version: self.protocol.map(receive::protocol_version).unwrap_or(0),
            hook_env: hook_env(self.user, &host, &email, self.protocol),
            hook_environment: server.hook_environment.clone(),
            env: receive::Environment {
                committer_name: Some(self.user.name().to_owned()),
                committer_email: Some(email.clone()),
                ..server.env.clone()
            },
            ref_access,
            pack_tee,
            commit_gate,
            ..Default::default()
        }
    }
}

/// Wait (at most `--push-slot-timeout`) for a push slot, overall and for the client's address;
/// the slot and the in-flight gauge are held until the returned value is dropped.
pub(super) async fn admit(server: &Server, peer: IpAddr) -> Result<InFlight, Reject> {
    let permit = server.slot(SlotKind::Push, peer).await?;
    server.metrics.pushes_in_flight.inc();
    Ok(InFlight {
        metrics: server.metrics.clone(),
        _permit: permit,
    })
}

/// Run the session (on a blocking thread) and record its end: the outcome in the access log
/// and, before the client sees the end of the output, HEAD at the first branch pushed into a
/// repository whose HEAD names none.
pub(super) fn run(
    dir: &str,
    options: &receive::Options,
    input: impl Read,
    out: &mut impl Write,
    err: &mut impl Write,
    access: &Access,
) -> Result<receive::Outcome, receive::Fatal> {
    let result = receive::run(dir, options, input, out, err);
    match &result {
        Ok(outcome) => {
            super::repos::head_to_first_branch(dir, outcome);
            access.set_push(outcome);
        }
        Err(e) => access.set_outcome(format!("fatal: {e}")),
    }
    result
}

/// What git-http-backend's hooks find in their environment, from the web server's CGI
/// variables and its own setup: `REMOTE_USER` (only when authenticated), `REMOTE_ADDR`,
/// `GIT_PROTOCOL` (the `Git-Protocol` header), and the reflog identity as
/// `GIT_COMMITTER_NAME`/`GIT_COMMITTER_EMAIL`.
fn hook_env(
    user: &Identity,
    remote_addr: &str,
    email: &str,
    protocol: Option<&str>,
) -> Vec<(String, gix_object::bstr::BString)> {
    let mut env = Vec::new();
    if let Identity::User(u) = user {
        env.push(("REMOTE_USER".to_owned(), u.as_str().into()));
    }
    env.push(("REMOTE_ADDR".to_owned(), remote_addr.into()));
    if let Some(p) = protocol {
        env.push(("GIT_PROTOCOL".to_owned(), p.into()));
    }
    env.push(("GIT_COMMITTER_NAME".to_owned(), user.name().into()));
    env.push(("GIT_COMMITTER_EMAIL".to_owned(), email.into()));
    env
}
