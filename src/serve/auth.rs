//! Who is pushing: HTTP Basic against argon2 hashes from a credentials file (`berth passwd`),
//! or a header set by a trusted reverse proxy, or anonymous where allowed.

use super::*;

/// Who is pushing.
#[derive(Debug, Clone)]
pub(super) enum Identity {
    User(String),
    Anonymous,
}

impl Identity {
    pub(super) fn name(&self) -> &str {
        match self {
            Identity::User(u) => u,
            Identity::Anonymous => "anonymous",
        }
    }
}

/// The users allowed to push and their argon2 hashes.
pub(super) struct Credentials {
    pub(super) users: HashMap<String, String>,
    /// Verified against for unknown users, so both cases take the same time.
    pub(super) dummy: String,
}

impl Credentials {
    pub(super) fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::CredentialsFile {
            path: path.to_owned(),
            source,
        })?;
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || Error::CredentialsLine {
                path: path.to_owned(),
                line: i + 1,
            };
            let (user, hash) = line.split_once(':').ok_or_else(bad)?;
            if user.is_empty()
                || argon2::password_hash::phc::PasswordHash::new(hash).is_err()
                || !hash.starts_with("$argon2")
            {
                return Err(bad());
            }
            users.insert(user.to_owned(), hash.to_owned());
        }
        Ok(Credentials {
            users,
            dummy: hash_password("not a password")?,
        })
    }

    /// Whether `password` is `user`'s (blocking: argon2 is deliberately slow).
    pub(super) fn verify(&self, user: &str, password: &str) -> bool {
        use argon2::password_hash::PasswordVerifier;
        let (hash, known) = match self.users.get(user) {
            Some(h) => (h.as_str(), true),
            None => (self.dummy.as_str(), false),
        };
        let ok = argon2::Argon2::default()
            .verify_password(password.as_bytes(), hash)
            .is_ok();
        ok && known
    }
}

/// An argon2id PHC string for `password`, for the credentials file.
pub fn hash_password(password: &str) -> Result<String, Error> {
    use argon2::password_hash::PasswordHasher;
    argon2::Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| Error::Hash(e.to_string()))
}

/// `Authorization: Basic <base64(user:password)>` → `(user, password)`.
pub(super) fn parse_basic(v: &HeaderValue) -> Option<(String, String)> {
    use base64::Engine;
    let v = v.to_str().ok()?;
    let (scheme, rest) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (u, p) = s.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

impl Server {
    /// Who is pushing, or why they may not.
    pub(super) async fn authenticate(&self, headers: &HeaderMap) -> Result<Identity, Reject> {
        if let Some(h) = &self.trusted_user_header
            && let Some(v) = headers.get(h)
        {
            return match v.to_str() {
                Ok(u) if !u.trim().is_empty() => Ok(Identity::User(u.trim().to_owned())),
                _ => Err(Reject::Unauthorized),
            };
        }
        if let Some(creds) = &self.credentials
            && let Some(v) = headers.get(header::AUTHORIZATION)
        {
            let (user, password) = parse_basic(v).ok_or(Reject::Unauthorized)?;
            let creds = creds.clone();
            let name = user.clone();
            // argon2 takes tens of milliseconds of CPU: off the async threads.
            let ok = tokio::task::spawn_blocking(move || creds.verify(&name, &password))
                .await
                .unwrap_or(false);
            return if ok {
                Ok(Identity::User(user))
            } else {
                Err(Reject::Unauthorized)
            };
        }
        if self.anonymous {
            Ok(Identity::Anonymous)
        } else {
            Err(Reject::Unauthorized)
        }
    }
}
