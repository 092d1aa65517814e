//! Who is pushing: HTTP Basic against argon2 hashes from a credentials file (`berth passwd`),
//! or a header set by a trusted reverse proxy, or anonymous where allowed.

use super::address::AddrGroup;
use super::*;
use credentials::Credentials;
use fair::{FairQueue, Lane};
use logins::{Admission, FailureLimit, Logins, UserTag};

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

/// A password check waiting for, or running on, a verifier thread.
struct Job {
    creds: Arc<Credentials>,
    user: String,
    password: String,
    /// Told when a verifier takes the job; gone if the request stopped waiting (the job is
    /// then dropped unrun).
    started: oneshot::Sender<()>,
    reply: oneshot::Sender<bool>,
}

/// The verifier threads' work: the fair queue and a wake-up for them.
struct Checkers {
    queue: Mutex<FairQueue<Job>>,
    ready: std::sync::Condvar,
    closed: std::sync::atomic::AtomicBool,
}

impl Checkers {
    /// One verifier thread: take the next job, run it unless its request stopped waiting.
    fn work(&self) {
        let mut memory = Vec::new();
        loop {
            let (addr, job) = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if self.closed.load(Ordering::Relaxed) {
                        return;
                    }
                    if let Some(next) = q.pop() {
                        break next;
                    }
                    q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            if job.started.send(()).is_ok() {
                let ok = job.creds.verify(&job.user, &job.password, &mut memory);
                let _ = job.reply.send(ok);
            }
            self.queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .release(addr);
        }
    }
}

/// A verified `user:password` pair: for whom, against which stored hash, and when.
struct Verified {
    user: String,
    hash: Arc<str>,
    at: Instant,
}

/// What authentication keeps between requests: the verifier threads (a fixed few, so argon2's
/// ~19 MiB per check is allocated by at most that many threads at once and reused) and their
/// fair queue, the cache of verified credentials, the login tables (failure limits, returning
/// users), and the proxies trusted with the user header.
pub(super) struct Auth {
    checkers: Arc<Checkers>,
    wait: Duration,
    /// Keyed hashes of verified `user:password` pairs.
    cache: Mutex<HashMap<[u8; 32], Verified>>,
    cache_key: [u8; 32],
    cache_ttl: Duration,
    logins: Mutex<Logins>,
    pub(super) trusted_proxies: Vec<Cidr>,
}

/// The longest user name and password a Basic header may carry (longer ones are a 401 without
/// any verification).
const MAX_USER_BYTES: usize = 256;
const MAX_PASSWORD_BYTES: usize = 1024;

/// Verified credentials kept at most (a full cache is emptied of expired entries, then cleared).
const CACHE_ENTRIES: usize = 10_000;

/// Password checks waiting, per lane of the fair queue, at most (each holds a user name and a
/// password, at most ~1.3 KiB).
const MAX_WAITING_CHECKS: usize = 1024;

impl Auth {
    pub(super) fn new(limits: &Limits, trusted_proxies: Vec<Cidr>) -> Auth {
        let workers = limits.max_concurrent_auth.max(1);
        // An address may hold as many checks as there are verifiers (at least two: a client's
        // few parallel requests), never more, whatever it sends.
        let checkers = Arc::new(Checkers {
            queue: Mutex::new(FairQueue::new(workers.max(2), MAX_WAITING_CHECKS)),
            ready: std::sync::Condvar::new(),
            closed: std::sync::atomic::AtomicBool::new(false),
        });
        for i in 0..workers {
            let checkers = checkers.clone();
            let _ = std::thread::Builder::new()
                .name(format!("berth-auth-{i}"))
                .spawn(move || checkers.work());
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
            checkers,
            wait: limits.auth_wait,
            cache: Mutex::new(HashMap::new()),
            cache_key,
            cache_ttl: limits.auth_cache_ttl,
            logins: Mutex::new(Logins::new(FailureLimit::new(
                limits.auth_max_failures,
                limits.auth_failure_window,
            ))),
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

    /// The user name as the login tables keep it.
    fn tag(&self, user: &str) -> UserTag {
        use blake2::digest::Digest;
        let mut h = blake2::Blake2b256::new();
        h.update(self.cache_key);
        h.update(b"user");
        h.update(user.as_bytes());
        let full: [u8; 32] = h.finalize().into();
        let mut tag = [0u8; 16];
        tag.copy_from_slice(&full[..16]);
        UserTag(tag)
    }

    fn logins(&self) -> std::sync::MutexGuard<'_, Logins> {
        self.logins.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the pair was verified within the TTL against the hash `creds` hold for the user
    /// now: a reloaded file with another password (or without the user) voids the entry.
    fn cached(&self, key: &[u8; 32], user: &str, creds: &Credentials) -> bool {
        if self.cache_ttl.is_zero() {
            return false;
        }
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(key).is_some_and(|v| {
            v.user == user
                && v.at.elapsed() < self.cache_ttl
                && creds.hash_of(user).is_some_and(|h| *h == v.hash)
        })
    }

    fn remember(&self, key: [u8; 32], user: &str, creds: &Credentials) {
        let Some(hash) = creds.hash_of(user) else {
            return;
        };
        if self.cache_ttl.is_zero() {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_ENTRIES {
            let ttl = self.cache_ttl;
            cache.retain(|_, v| v.at.elapsed() < ttl);
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(
            key,
            Verified {
                user: user.to_owned(),
                hash: hash.clone(),
                at: Instant::now(),
            },
        );
    }

    /// Verify on a verifier thread, in `lane` of the fair queue for `addr`: refused at once
    /// (503) when the address has its share or the lane is full, and when no verifier took the
    /// check within `wait`.
    async fn verify(
        &self,
        creds: &Arc<Credentials>,
        user: &str,
        password: &str,
        addr: AddrGroup,
        lane: Lane,
        metrics: &Metrics,
    ) -> Result<bool, Reject> {
        let (started, taken) = oneshot::channel();
        let (reply, answer) = oneshot::channel();
        let job = Job {
            creds: creds.clone(),
            user: user.to_owned(),
            password: password.to_owned(),
            started,
            reply,
        };
        let queued = self
            .checkers
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(addr, lane, job);
        if let Err(why) = queued {
            tracing::debug!(target: "berth::serve", refused = %why, "password check refused");
            metrics.busy("auth");
            return Err(Reject::Busy("password verification"));
        }
        self.checkers.ready.notify_one();
        match tokio::time::timeout(self.wait, taken).await {
            Ok(Ok(())) => {}
            _ => {
                metrics.busy("auth");
                return Err(Reject::Busy("password verification"));
            }
        }
        metrics.password_verifications.inc();
        Ok(answer.await.unwrap_or(false))
    }
}

impl Drop for Auth {
    fn drop(&mut self) {
        self.checkers.closed.store(true, Ordering::Relaxed);
        self.checkers.ready.notify_all();
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
                let creds = creds.current();
                let key = auth.cache_key(&user, &password);
                if auth.cached(&key, &user, &creds) {
                    metrics.auth_cache_hits.inc();
                    return Ok(Identity::User(user));
                }
                let (tag, addr) = (auth.tag(&user), AddrGroup::of(ip));
                let lane = match auth.logins().admit(tag, addr, Instant::now()) {
                    Admission::Check(lane) => lane,
                    Admission::Wait { retry_after, why } => {
                        tracing::debug!(target: "berth::serve", remote = %ip, why = why.as_str(), "login attempt must wait");
                        metrics.rate_limited();
                        return Err(Reject::RateLimited(retry_after.as_secs().max(1)));
                    }
                };
                return if auth
                    .verify(&creds, &user, &password, addr, lane, metrics)
                    .await?
                {
                    auth.remember(key, &user, &creds);
                    auth.logins().succeeded(tag, addr, Instant::now());
                    Ok(Identity::User(user))
                } else {
                    metrics.auth_failure("password");
                    auth.logins().failed(tag, addr, Instant::now());
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
