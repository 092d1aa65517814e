//! Routing: which of git's smart HTTP endpoints a request is for, and the refusals a request
//! can get before any git work (with git-http-backend's statuses and texts).

use super::*;
use crate::repo::{Name, NameError};

/// The no-cache headers git-http-backend sends with every dynamic response.
pub(super) const NO_CACHE: [(header::HeaderName, &str); 3] = [
    (header::EXPIRES, "Fri, 01 Jan 1980 00:00:00 GMT"),
    (header::PRAGMA, "no-cache"),
    (
        header::CACHE_CONTROL,
        "no-cache, max-age=0, must-revalidate",
    ),
];

/// The two services git speaks over smart HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Service {
    ReceivePack,
    UploadPack,
}

impl Service {
    pub(super) fn name(self) -> &'static str {
        match self {
            Service::ReceivePack => "git-receive-pack",
            Service::UploadPack => "git-upload-pack",
        }
    }
    pub(super) fn from_name(s: &str) -> Option<Self> {
        match s {
            "git-receive-pack" => Some(Service::ReceivePack),
            "git-upload-pack" => Some(Service::UploadPack),
            _ => None,
        }
    }
}

/// One request's route; the repository named as [`Name`], decoded and checked here, once.
#[derive(Debug)]
pub(super) enum Route {
    InfoRefs { repo: Name, service: Service },
    Rpc { repo: Name, service: Service },
    Metrics,
    Health,
}

/// Why a request was answered with an error status before any git ran.
#[derive(Debug, thiserror::Error)]
pub(super) enum Reject {
    #[error("Not Found")]
    NotFound,
    #[error("Method Not Allowed")]
    Method(&'static str),
    #[error("Unsupported service: '{0}'")]
    UnsupportedService(String),
    /// The request's repository part is no [`Name`]: the route it was for (for the log) and
    /// the part as it came, still encoded.
    #[error("invalid repository path: {why} ({rule})", rule = crate::repo::name::RULE)]
    BadPath {
        route: &'static str,
        raw: String,
        why: NameError,
    },
    /// A symbolic link on the way to the repository ([`super::repos`]'s header).
    #[error("repository path has a symbolic link, which this server does not follow")]
    Symlink,
    #[error("Not a git repository: '{0}'")]
    NotARepository(String),
    /// A push to a missing repository by a user the access rules let push to it but not
    /// create it.
    #[error(
        "Not a git repository: '{repo}'. {user} may push to it but not create it: a push \
         creates a repository only for a user given C on its repo line of the access rules \
         (C = {user})"
    )]
    CreateNeedsC { repo: String, user: String },
    /// A push to a missing repository whose name does not end in `.git`, which `--auto-init`
    /// does not create.
    #[error(
        "Not a git repository: '{0}'. A push creates a repository (--auto-init) only for a \
         name ending in .git: push to '{0}.git'"
    )]
    AutoInitNeedsGitSuffix(String),
    #[error("Authentication required")]
    Unauthorized,
    /// The user may read the repository but not do this (`--access`).
    #[error("Forbidden: {0}")]
    Forbidden(String),
    #[error("Expected POST with Content-Type '{expected}', but received '{got}' instead.")]
    ContentType { expected: String, got: String },
    #[error("request body larger than the server accepts (--max-request-bytes)")]
    TooLarge,
    #[error("fatal: {0} (commands and push options: berth serve --max-command-bytes)")]
    CommandsTooLarge(String),
    #[error("cannot create repository: {0}")]
    Init(String),
    #[error("{0}")]
    Internal(String),
    #[error("server busy: no {0} slot free in time, retry later")]
    Busy(&'static str),
    #[error("too many failed logins, retry in {0} s")]
    RateLimited(u64),
    #[error("bad request: {0}")]
    BadHeader(String),
    #[error("{0} is accepted only from a --trusted-proxy address")]
    UntrustedHeader(String),
    /// The cluster cannot place or reach the repository now (`--cluster`).
    #[error("cluster: {0}")]
    Unavailable(String),
    /// This replica has not applied the repository's whole log (`--cluster`): the log head's
    /// sequence number, the one applied here.
    #[error(
        "cluster: this replica is behind the repository's log ({1} of {0} entries applied), retry"
    )]
    Behind(u64, u64),
}

impl Reject {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Reject::NotFound | Reject::NotARepository(_) | Reject::AutoInitNeedsGitSuffix(_) => {
                StatusCode::NOT_FOUND
            }
            Reject::CreateNeedsC { .. } => StatusCode::FORBIDDEN,
            Reject::Method(_) => StatusCode::METHOD_NOT_ALLOWED,
            Reject::UnsupportedService(_) | Reject::Symlink | Reject::Forbidden(_) => {
                StatusCode::FORBIDDEN
            }
            Reject::BadPath { .. } => StatusCode::BAD_REQUEST,
            Reject::Unauthorized => StatusCode::UNAUTHORIZED,
            Reject::ContentType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Reject::TooLarge | Reject::CommandsTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Reject::Init(_) | Reject::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Reject::Busy(_) | Reject::Unavailable(_) | Reject::Behind(..) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Reject::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            Reject::BadHeader(_) => StatusCode::BAD_REQUEST,
            Reject::UntrustedHeader(_) => StatusCode::FORBIDDEN,
        }
    }

    pub(super) fn response(&self) -> Response {
        let mut r = (self.status(), format!("{self}\n")).into_response();
        let h = r.headers_mut();
        for (k, v) in NO_CACHE {
            h.insert(k, HeaderValue::from_static(v));
        }
        match self {
            Reject::Unauthorized => {
                h.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"berth\""),
                );
            }
            Reject::Method(allow) => {
                h.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            Reject::Busy(_) | Reject::Unavailable(_) => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            Reject::Behind(seq, applied) => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                if let Ok(v) = HeaderValue::from_str(&format!("{applied}/{seq}")) {
                    h.insert(crate::cluster::BEHIND, v);
                }
            }
            Reject::RateLimited(secs) => {
                h.insert(header::RETRY_AFTER, HeaderValue::from(*secs));
            }
            _ => {}
        }
        r
    }
}

/// Split a request into its route, or say why it has none.
pub(super) fn route(method: &Method, path: &str, query: Option<&str>) -> Result<Route, Reject> {
    if path == "/metrics" || path == "/healthz" {
        return if method == Method::GET || method == Method::HEAD {
            Ok(if path == "/metrics" {
                Route::Metrics
            } else {
                Route::Health
            })
        } else {
            Err(Reject::Method("GET, HEAD"))
        };
    }
    let rest = path.strip_prefix('/').ok_or(Reject::NotFound)?;
    if let Some(repo) = rest.strip_suffix("/info/refs") {
        if method != Method::GET && method != Method::HEAD {
            return Err(Reject::Method("GET, HEAD"));
        }
        let service = query
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix("service="))
            .unwrap_or("");
        let service = Service::from_name(service)
            .ok_or_else(|| Reject::UnsupportedService(service.chars().take(64).collect()))?;
        return Ok(Route::InfoRefs {
            repo: name("info-refs", repo)?,
            service,
        });
    }
    for service in [Service::ReceivePack, Service::UploadPack] {
        if let Some(repo) = rest
            .strip_suffix(service.name())
            .and_then(|r| r.strip_suffix('/'))
        {
            if method != Method::POST {
                return Err(Reject::Method("POST"));
            }
            let route = match service {
                Service::ReceivePack => "receive-pack",
                Service::UploadPack => "upload-pack",
            };
            return Ok(Route::Rpc {
                repo: name(route, repo)?,
                service,
            });
        }
    }
    Err(Reject::NotFound)
}

/// The [`Name`] a URL's repository part spells, or the refusal of `route`'s request.
fn name(route: &'static str, encoded: &str) -> Result<Name, Reject> {
    Name::from_url_path(encoded).map_err(|why| Reject::BadPath {
        route,
        raw: encoded.chars().take(300).collect(),
        why,
    })
}

/// The property the `repo_path` fuzz target checks on a request path's repository part
/// (`data`, as it would stand in a URL): a path that maps to a repository name maps to exactly
/// one, whatever the spelling of its bytes, and the access decision is made on that name. Panics
/// where it does not hold.
#[cfg(any(test, feature = "internals"))]
pub(super) fn check_repo_path(data: &[u8]) {
    use super::rules::{Rules, Want, Who};
    let Ok(part) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(Route::InfoRefs { repo, .. }) = route(
        &Method::GET,
        &format!("/{part}/info/refs"),
        Some("service=git-upload-pack"),
    ) else {
        return;
    };
    // Its text is its one spelling without escapes; every byte escaped (either case of hex)
    // spells it too.
    assert_eq!(Name::from_url_path(repo.as_str()).as_ref(), Ok(&repo));
    for upper in [false, true] {
        let escaped: String = repo
            .as_str()
            .bytes()
            .map(|b| match upper {
                true => format!("%{b:02X}"),
                false => format!("%{b:02x}"),
            })
            .collect();
        let again = route(&Method::POST, &format!("/{escaped}/git-receive-pack"), None);
        assert!(
            matches!(&again, Ok(Route::Rpc { repo: r, .. }) if *r == repo),
            "{escaped}: {again:?}"
        );
    }
    // Nothing of it leaves a root, and the filesystem sees the same segments.
    let rel = repo.relative_path();
    assert!(
        rel.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
    );
    assert_eq!(rel.to_str(), Some(repo.as_str()));
    // The rules judge this name: its own `-` rule (naming it as requested, which the rules
    // read as its key) above `@all` keeps mallory out, in every spelling, while others get in.
    let text = format!(
        "repo {}\n    - = mallory\nrepo @all\n    R = @all\n",
        repo.as_str()
    );
    if let Ok(rules) = Rules::parse(&text, "fuzz") {
        assert!(
            rules
                .repo_access(&repo, Who::User("mallory"), Want::Read)
                .is_err(),
            "{part}"
        );
        assert!(
            rules
                .repo_access(&repo, Who::User("alice"), Want::Read)
                .is_ok(),
            "{part}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`check_repo_path`] over generated parts biased to what confuses decoders: escapes of
    /// every byte, `%` alone, `/`, `.`, hex digits and the `.git` suffix.
    #[test]
    fn every_repo_path_maps_to_one_name_judged_once() {
        const ALPHABET: &[&str] = &[
            "%", "%2", "%2e", "%2E", "%2f", "%2F", "%25", "%00", "%0a", "%ff", "%c3%a9", "/", ".",
            "..", ".git", "a", "B", "0", "-", "_", "s", "e", "c", "r", "t", "%73", "%65", "%41",
            "~", " ", "+", "\\",
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut named = 0;
        for _ in 0..20_000 {
            let len = 1 + next() % 12;
            let part: String = (0..len)
                .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize])
                .collect();
            check_repo_path(part.as_bytes());
            named += usize::from(name("info-refs", &part).is_ok());
        }
        // The generator reaches names, not only refusals.
        assert!(named > 1000, "{named}");
        check_repo_path(b"s%65cret.git");
        check_repo_path(b"team/%61pp");
        check_repo_path(b"x.git.git");
    }
}
