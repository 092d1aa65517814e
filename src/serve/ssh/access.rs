//! The ssh transport's repository-level access decision, [`authorize`]: the same access rules
//! (`--access FILE`) as HTTP, for the user the key names. Without rules, anyone with a key in
//! the keydir may read and push every repository, and a push to a missing `<name>.git` creates
//! it when auto-init is on, as for an authenticated HTTP user. Each pushed ref is checked by
//! the same in-process [`crate::receive::RefAccess`] as over HTTP (`PushAccess`).

use super::super::{Identity, Server, Service};
use crate::repo::Name;

/// What a user wants to do with a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// Fetch or clone (`git-upload-pack`).
    Read,
    /// Push (`git-receive-pack`) to an existing repository.
    Write,
    /// Push to a repository that does not exist yet (gitolite's `C`).
    Create,
}

/// Why access was refused; the text is shown to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Denied(pub(super) String);

/// May `user` do `op` on `repo`? The
/// access rules decide, as for HTTP ([`Server::authorize`]); without rules, yes (creation
/// still needs auto-init, which [`Server::target`] checks).
pub(super) fn authorize(server: &Server, user: &str, repo: &Name, op: Op) -> Result<(), Denied> {
    let Some(rules) = server.current_rules() else {
        return Ok(());
    };
    let (service, exists) = match op {
        Op::Read => (Service::UploadPack, true),
        Op::Write => (Service::ReceivePack, true),
        Op::Create => (Service::ReceivePack, false),
    };
    let who = Identity::User(user.to_owned());
    server
        .authorize(&rules, repo, service, &who, exists)
        .map_err(|reject| {
            Denied(match reject {
                // A repository the user may not read does not exist, as over HTTP's 404.
                super::super::Reject::NotARepository(_) | super::super::Reject::Unauthorized => {
                    format!("repository '{repo}' not found")
                }
                other => other.to_string(),
            })
        })
}
