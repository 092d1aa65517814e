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

    /// Whether `password` is `user`'s (blocking: argon2 is deliberately slow). `memory` is the
    /// caller's argon2 working memory, grown to the hash's `m` parameter and kept for the next
    /// check: the allocator does not get to fragment ~19 MiB per check (it did, to gigabytes).
    pub(super) fn verify(
        &self,
        user: &str,
        password: &str,
        memory: &mut Vec<argon2::Block>,
    ) -> bool {
        let (hash, known) = match self.users.get(user) {
            Some(h) => (h.as_str(), true),
            None => (self.dummy.as_str(), false),
        };
        verify_hash(hash, password, memory) && known
    }
}

/// The most argon2 memory a stored hash may ask for (1 GiB), so a credentials line cannot make
/// every check allocate without bound.
const MAX_ARGON2_BLOCKS: usize = 1 << 20;

fn verify_hash(hash: &str, password: &str, memory: &mut Vec<argon2::Block>) -> bool {
    use argon2::password_hash::phc::PasswordHash;
    let Ok(phc) = PasswordHash::new(hash) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (&phc.salt, &phc.hash) else {
        return false;
    };
    let Ok(params) = argon2::Params::try_from(&phc) else {
        return false;
    };
    let Ok(algorithm) = argon2::Algorithm::try_from(phc.algorithm.as_str()) else {
        return false;
    };
    let version = match phc.version.map(argon2::Version::try_from).transpose() {
        Ok(v) => v.unwrap_or_default(),
        Err(_) => return false,
    };
    let blocks = params.block_count();
    if blocks > MAX_ARGON2_BLOCKS {
        return false;
    }
    if memory.len() < blocks {
        memory.resize_with(blocks, argon2::Block::default);
    }
    let expected: &[u8] = expected.as_ref();
    let mut out = vec![0u8; expected.len()];
    let ok = argon2::Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(
            password.as_bytes(),
            salt.as_ref(),
            &mut out,
            &mut memory[..blocks],
        )
        .is_ok();
    // Constant time in the output's length.
    ok && out.iter().zip(expected).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
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

/// A password verification to run on a verifier thread; the permit is released when it is done.
struct Job {
    creds: Arc<Credentials>,
    user: String,
    password: String,
    reply: oneshot::Sender<bool>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// What authentication keeps between requests: the verifier threads (a fixed few, so argon2's
/// ~19 MiB per check is allocated by at most that many threads at once and reused), the cache
/// of verified credentials, the failure limits, and the proxies trusted with the user header.
pub(super) struct Auth {
    permits: Arc<Semaphore>,
    jobs: std::sync::mpsc::SyncSender<Job>,
    wait: Duration,
    /// Keyed hashes of verified `user:password` pairs → (user, verified at).
    cache: Mutex<HashMap<[u8; 32], (String, Instant)>>,
    cache_key: [u8; 32],
    cache_ttl: Duration,
    by_user: FailureLimiter<String>,
    by_addr: FailureLimiter<std::net::IpAddr>,
    pub(super) trusted_proxies: Vec<Cidr>,
}

/// The longest user name and password a Basic header may carry (longer ones are a 401 without
/// any verification).
const MAX_USER_BYTES: usize = 256;
const MAX_PASSWORD_BYTES: usize = 1024;

/// Verified credentials kept at most (a full cache is emptied of expired entries, then cleared).
const CACHE_ENTRIES: usize = 10_000;

impl Auth {
    pub(super) fn new(limits: &Limits, trusted_proxies: Vec<Cidr>) -> Auth {
        let workers = limits.max_concurrent_auth.max(1);
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(workers);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..workers {
            let rx = rx.clone();
            let _ = std::thread::Builder::new()
                .name(format!("berth-auth-{i}"))
                .spawn(move || {
                    let mut memory = Vec::new();
                    loop {
                        let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                            Ok(j) => j,
                            Err(_) => return,
                        };
                        let ok = job.creds.verify(&job.user, &job.password, &mut memory);
                        let _ = job.reply.send(ok);
                    }
                });
        }
        let mut cache_key = [0u8; 32];
        {
            use std::io::Read;
            // Without randomness, a key from the clock and the process keeps hashes unguessable
            // enough for a cache that lives only in memory.
            if std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut cache_key))
                .is_err()
            {
                let seed = format!("{:?}{}", Instant::now(), std::process::id());
                cache_key[..seed.len().min(32)]
                    .copy_from_slice(&seed.as_bytes()[..seed.len().min(32)]);
            }
        }
        Auth {
            permits: Arc::new(Semaphore::new(workers)),
            jobs: tx,
            wait: limits.auth_wait,
            cache: Mutex::new(HashMap::new()),
            cache_key,
            cache_ttl: limits.auth_cache_ttl,
            by_user: FailureLimiter::new(limits.auth_max_failures, limits.auth_failure_window),
            by_addr: FailureLimiter::new(limits.auth_max_failures, limits.auth_failure_window),
            trusted_proxies,
        }
    }

    fn cache_key(&self, user: &str, password: &str) -> [u8; 32] {
        use blake2::digest::Digest;
        let mut h = blake2::Blake2b256::new();
        h.update(self.cache_key);
        h.update((user.len() as u64).to_le_bytes());
        h.update(user.as_bytes());
        h.update(password.as_bytes());
        h.finalize().into()
    }

    fn cached(&self, key: &[u8; 32], user: &str) -> bool {
        if self.cache_ttl.is_zero() {
            return false;
        }
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(key)
            .is_some_and(|(u, at)| u == user && at.elapsed() < self.cache_ttl)
    }

    fn remember(&self, key: [u8; 32], user: &str) {
        if self.cache_ttl.is_zero() {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_ENTRIES {
            let ttl = self.cache_ttl;
            cache.retain(|_, (_, at)| at.elapsed() < ttl);
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(key, (user.to_owned(), Instant::now()));
    }

    /// Verify on a verifier thread, waiting at most `wait` for one to be free.
    async fn verify(
        &self,
        creds: &Arc<Credentials>,
        user: &str,
        password: &str,
        metrics: &Metrics,
    ) -> Result<bool, Reject> {
        let permit =
            match tokio::time::timeout(self.wait, self.permits.clone().acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => {
                    metrics.busy("auth");
                    return Err(Reject::Busy("password verification"));
                }
            };
        let (reply, answer) = oneshot::channel();
        let job = Job {
            creds: creds.clone(),
            user: user.to_owned(),
            password: password.to_owned(),
            reply,
            _permit: permit,
        };
        // The permit guarantees a free worker, so the channel has room.
        self.jobs
            .try_send(job)
            .map_err(|_| Reject::Busy("password verification"))?;
        metrics.password_verifications.inc();
        Ok(answer.await.unwrap_or(false))
    }
}

impl Server {
    /// Who is pushing, or why they may not. A password, when given and checked, decides: a
    /// wrong one is a 401 whatever else the request carries. The trusted user header counts
    /// only from a `--trusted-proxy` address and only once.
    pub(super) async fn authenticate(
        &self,
        headers: &HeaderMap,
        remote: SocketAddr,
    ) -> Result<Identity, Reject> {
        let ip = remote.ip();
        let metrics = &self.metrics;
        let mut from_header = None;
        if let Some(h) = &self.trusted_user_header {
            let mut values = headers.get_all(h).iter();
            if let Some(v) = values.next() {
                if values.next().is_some() {
                    metrics.auth_failure("header_repeated");
                    return Err(Reject::BadHeader(format!("{h} given more than once")));
                }
                if !self.auth.trusted_proxies.iter().any(|c| c.contains(ip)) {
                    metrics.auth_failure("header_untrusted");
                    return Err(Reject::UntrustedHeader(h.to_string()));
                }
                match v.to_str() {
                    Ok(u) if !u.trim().is_empty() => from_header = Some(u.trim().to_owned()),
                    _ => {
                        metrics.auth_failure("header_empty");
                        return Err(Reject::Unauthorized);
                    }
                }
            }
        }
        if let Some(creds) = &self.credentials {
            let mut values = headers.get_all(header::AUTHORIZATION).iter();
            if let Some(v) = values.next() {
                if values.next().is_some() {
                    metrics.auth_failure("authorization_repeated");
                    return Err(Reject::BadHeader(
                        "Authorization given more than once".into(),
                    ));
                }
                // Bounded, so that the failure limits' keys stay small.
                let Some((user, password)) = parse_basic(v)
                    .filter(|(u, p)| u.len() <= MAX_USER_BYTES && p.len() <= MAX_PASSWORD_BYTES)
                else {
                    metrics.auth_failure("malformed");
                    return Err(Reject::Unauthorized);
                };
                let auth = &self.auth;
                let key = auth.cache_key(&user, &password);
                if auth.cached(&key, &user) {
                    metrics.auth_cache_hits.inc();
                    return Ok(Identity::User(user));
                }
                let blocked = auth
                    .by_addr
                    .blocked(&ip)
                    .into_iter()
                    .chain(auth.by_user.blocked(&user))
                    .max();
                if let Some(wait) = blocked {
                    metrics.rate_limited();
                    return Err(Reject::RateLimited(wait.as_secs().max(1)));
                }
                return if auth.verify(creds, &user, &password, metrics).await? {
                    auth.remember(key, &user);
                    Ok(Identity::User(user))
                } else {
                    metrics.auth_failure("password");
                    auth.by_addr.fail(&ip);
                    auth.by_user.fail(&user);
                    Err(Reject::Unauthorized)
                };
            }
        }
        if let Some(u) = from_header {
            return Ok(Identity::User(u));
        }
        if self.anonymous {
            Ok(Identity::Anonymous)
        } else {
            Err(Reject::Unauthorized)
        }
    }
}
