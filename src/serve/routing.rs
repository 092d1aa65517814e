//! Routing: which of git's smart HTTP endpoints a request is for, and the refusals a request
//! can get before any git work (with git-http-backend's statuses and texts).

use super::*;

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

/// One request's route.
#[derive(Debug)]
pub(super) enum Route {
    InfoRefs { repo: String, service: Service },
    Rpc { repo: String, service: Service },
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
    #[error("invalid repository path: {0}")]
    BadPath(&'static str),
    #[error("repository path leaves the served root")]
    Escapes,
    #[error("Not a git repository: '{0}'")]
    NotARepository(String),
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
            Reject::NotFound | Reject::NotARepository(_) => StatusCode::NOT_FOUND,
            Reject::Method(_) => StatusCode::METHOD_NOT_ALLOWED,
            Reject::UnsupportedService(_) | Reject::Escapes | Reject::Forbidden(_) => {
                StatusCode::FORBIDDEN
            }
            Reject::BadPath(_) => StatusCode::BAD_REQUEST,
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
                    h.insert(super::cluster::BEHIND, v);
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
            repo: repo.to_owned(),
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
            return Ok(Route::Rpc {
                repo: repo.to_owned(),
                service,
            });
        }
    }
    Err(Reject::NotFound)
}

/// Percent-decode a URL path; `None` if it is not valid UTF-8 or has a bad escape.
pub(super) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
