//! Who may do what (`--access FILE`): the identity of every request when access rules are on,
//! the repository-level decision (read, push, create) with its status (401 where signing in
//! could help, 404 where the user may not even read, 403 where they may read but not push),
//! and the per-ref check handed to the push session ([`receive::RefAccess`]).

use super::rules::{RefWant, Rules, Want, Who};
use super::*;
use crate::repo::Name;

impl Identity {
    /// As the rules see it.
    pub(super) fn who(&self) -> Who<'_> {
        match self {
            Identity::User(u) => Who::User(u),
            Identity::Anonymous => Who::Anonymous,
        }
    }
}

impl Server {
    /// Who makes this request: without access rules only pushes are authenticated (as
    /// before); with them every request is, and one that brings no credentials is anonymous.
    pub(super) async fn identify(
        &self,
        headers: &HeaderMap,
        service: Service,
        remote: SocketAddr,
    ) -> Result<Option<Identity>, Reject> {
        if self.rules.is_none() {
            return match service {
                Service::ReceivePack => self.authenticate(headers, remote).await.map(Some),
                Service::UploadPack => Ok(None),
            };
        }
        let brings_credentials = headers.contains_key(header::AUTHORIZATION)
            || self
                .trusted_user_header
                .as_ref()
                .is_some_and(|h| headers.contains_key(h));
        if brings_credentials {
            self.authenticate(headers, remote).await.map(Some)
        } else {
            Ok(Some(Identity::Anonymous))
        }
    }

    /// The access rules as of this request, when `--access` is given.
    pub(super) fn current_rules(&self) -> Option<Arc<Rules>> {
        self.rules.as_ref().map(|f| f.current())
    }

    /// Whether `who` may use `service` on `repo`, which exists or not (a push to a
    /// missing one needs `C`). A refusal does not tell whether the repository exists: 404
    /// unless the user may read it, 401 for an anonymous request that signing in could help.
    pub(super) fn authorize(
        &self,
        rules: &Rules,
        repo: &Name,
        service: Service,
        who: &Identity,
        exists: bool,
    ) -> Result<(), Reject> {
        let anonymous = matches!(who, Identity::Anonymous);
        let want = match (service, exists) {
            (Service::UploadPack, _) => Want::Read,
            (Service::ReceivePack, true) => Want::Write,
            (Service::ReceivePack, false) => Want::Create,
        };
        let auth_configured = self.credentials.is_some() || self.trusted_user_header.is_some();
        // Whether `who` could push to the repository were it there (a creation refused).
        let could_write = || rules.repo_access(repo, who.who(), Want::Write).is_ok();
        let refuse = |denied: super::rules::Denied| {
            // A missing repository that a signed-in user could push to asks for credentials
            // as an existing one would: the creation may be theirs, or its refusal explained.
            let signed_in_could = rules.signed_in_could(repo, want)
                || (want == Want::Create && rules.signed_in_could(repo, Want::Write));
            if anonymous && auth_configured && signed_in_could {
                return Reject::Unauthorized;
            }
            if want == Want::Create && could_write() {
                return Reject::CreateNeedsC {
                    repo: repo.to_string(),
                    user: who.name().to_owned(),
                };
            }
            let readable = exists && rules.repo_access(repo, who.who(), Want::Read).is_ok();
            if readable {
                Reject::Forbidden(denied.to_string())
            } else {
                Reject::NotARepository(repo.to_string())
            }
        };
        rules.repo_access(repo, who.who(), want).map_err(refuse)?;
        // Anonymous pushes need the rules *and* the server's consent (`--allow-anonymous-push`
        // or the loopback default).
        if anonymous && service == Service::ReceivePack && !self.anonymous {
            return Err(Reject::Unauthorized);
        }
        Ok(())
    }
}

/// The per-ref check of one push: the rules as of the request, for its repository and user.
#[derive(Debug)]
pub(super) struct PushAccess {
    pub(super) rules: Arc<Rules>,
    pub(super) repo: Name,
    pub(super) user: Identity,
}

impl receive::RefAccess for PushAccess {
    fn check(
        &self,
        name: &gix_object::bstr::BStr,
        _old: gix_hash::ObjectId,
        _new: gix_hash::ObjectId,
        change: receive::RefChange,
    ) -> Result<(), String> {
        let want = match change {
            receive::RefChange::Create | receive::RefChange::FastForward => RefWant::Write,
            receive::RefChange::Rewind | receive::RefChange::Delete => RefWant::Rewind,
        };
        let name = name.to_string();
        self.rules
            .ref_access(&self.repo, self.user.who(), &name, want)
            .map_err(|d| d.to_string())
    }
}
