//! git's lock files: `<path>.lock`, created with `O_CREAT|O_EXCL`, held while a file is
//! rewritten and renamed over it (or removed to give up). Whoever creates it holds the lock.
//!
//! A writer that finds the lock held retries as git's `lock_file_timeout` (`lockfile.c`) does,
//! for as long as the caller's [`Timeout`] allows: git's three ref locks each have their own
//! (`core.filesRefLockTimeout`, default 100 ms, for `<ref>.lock`; `core.packedRefsTimeout`,
//! default 1000 ms, for `packed-refs.lock`; `reftable.lockTimeout`, default 100 ms, for
//! `tables.list.lock`). The waits between attempts grow quadratically — about 1, 4, 9, 16, …
//! ms, at most 1 s — and each is drawn at random between 75 % and 125 % of that, so that
//! writers that collided once do not collide again in lockstep. As in git, the timeout counts
//! the time slept, not the time spent creating the file, and the last wait may overrun it.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long to keep retrying a lock someone else holds (git's `timeout_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// Try once; a held lock fails at once (git's `0`).
    Once,
    /// Retry until about this many milliseconds were spent waiting (git's positive values).
    Millis(u64),
    /// Retry until the lock is free (git's negative values).
    Forever,
}

impl Timeout {
    /// A timeout as git's configuration gives it: 0 tries once, a negative value waits
    /// forever.
    pub fn from_millis(ms: i64) -> Timeout {
        match ms {
            0 => Timeout::Once,
            ms if ms < 0 => Timeout::Forever,
            ms => Timeout::Millis(ms as u64),
        }
    }

    /// git's `core.filesRefLockTimeout` default: 100 ms, for each `<ref>.lock`.
    pub const FILES_REF_LOCK: Timeout = Timeout::Millis(100);
    /// git's `core.packedRefsTimeout` default: 1000 ms, for `packed-refs.lock`.
    pub const PACKED_REFS: Timeout = Timeout::Millis(1000);
    /// git's `reftable.lockTimeout` default: 100 ms, for `tables.list.lock`.
    pub const REFTABLE: Timeout = Timeout::Millis(100);
}

/// git's first wait after a failed attempt (`INITIAL_BACKOFF_MS`).
const INITIAL_BACKOFF_MS: u64 = 1;
/// git's largest multiplier of [`INITIAL_BACKOFF_MS`] (`BACKOFF_MAX_MULTIPLIER`): waits stop
/// growing at 1 s.
const BACKOFF_MAX_MULTIPLIER: u64 = 1000;

/// Create `lock` (`O_CREAT|O_EXCL`, write-only, mode 0666 less the umask), retrying while it
/// exists as `timeout` allows. A lock still held at the end gives the `AlreadyExists` error of
/// the last attempt; any other failure is returned at once.
pub fn create(lock: &Path, timeout: Timeout) -> io::Result<File> {
    let attempt = || OpenOptions::new().write(true).create_new(true).open(lock);
    let mut backoff = Backoff::new();
    loop {
        match attempt() {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match backoff.next(timeout) {
                Some(wait) => std::thread::sleep(wait),
                None => return Err(e),
            },
            other => return other,
        }
    }
}

/// Wait while `held` says a lock is held by someone else, with git's backoff, for as long as
/// `timeout` allows; whether it was released. For a lock this process does not mean to take
/// (a writer whose result is awaited).
pub fn wait_while(timeout: Timeout, mut held: impl FnMut() -> bool) -> bool {
    let mut backoff = Backoff::new();
    while held() {
        match backoff.next(timeout) {
            Some(wait) => std::thread::sleep(wait),
            None => return false,
        }
    }
    true
}

/// git's backoff between attempts: the `n`th wait is about `n²` ms (at most 1 s), drawn
/// between 75 % and 125 % of that.
struct Backoff {
    n: u64,
    multiplier: u64,
    /// Milliseconds left to wait (git's `remaining_ms`).
    remaining: i64,
    started: bool,
    rng: u64,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            n: 1,
            multiplier: 1,
            remaining: 0,
            started: false,
            rng: seed(),
        }
    }

    /// The wait before the next attempt, or `None` once `timeout` is used up.
    fn next(&mut self, timeout: Timeout) -> Option<Duration> {
        if !self.started {
            self.started = true;
            self.remaining = match timeout {
                Timeout::Once => return None,
                Timeout::Millis(ms) => ms.min(i64::MAX as u64) as i64,
                Timeout::Forever => 0,
            };
        }
        if matches!(timeout, Timeout::Millis(_)) && self.remaining <= 0 {
            return None;
        }
        let backoff_ms = self.multiplier * INITIAL_BACKOFF_MS;
        let wait_ms = (750 + self.random() % 500) * backoff_ms / 1000;
        self.remaining -= wait_ms as i64;
        // (n+1)² = n² + 2n + 1
        self.multiplier += 2 * self.n + 1;
        if self.multiplier > BACKOFF_MAX_MULTIPLIER {
            self.multiplier = BACKOFF_MAX_MULTIPLIER;
        } else {
            self.n += 1;
        }
        Some(Duration::from_millis(wait_ms))
    }

    /// xorshift64*: enough to spread waiters apart, which is all git's `rand()` does here.
    fn random(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32
    }
}

/// A different seed per waiter: git seeds with its pid, once per process, and a process is one
/// push there; here many pushes share a process (`berth serve`), so the seed also counts the
/// waiters and takes the clock.
fn seed() -> u64 {
    static WAITERS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    let mut x = (u64::from(std::process::id()) << 32)
        ^ nanos
        ^ WAITERS
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // splitmix64's finalizer: neighbouring seeds give unrelated sequences; never zero.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The waits git makes for a timeout: quadratic growth within ±25 %, capped at 1 s, and the
    /// total slept just past the timeout (git's last wait may overrun it).
    #[test]
    fn backoff_follows_git() {
        for timeout in [100u64, 1000] {
            let mut b = Backoff::new();
            let mut waits = Vec::new();
            while let Some(w) = b.next(Timeout::Millis(timeout)) {
                waits.push(w.as_millis() as u64);
            }
            for (i, w) in waits.iter().enumerate() {
                let n = (i as u64 + 1).pow(2).min(1000);
                assert!(*w >= n * 750 / 1000 && *w <= n * 1250 / 1000, "{i}: {w}");
            }
            let total: u64 = waits.iter().sum();
            let before_last: u64 = total - waits.last().unwrap();
            assert!(before_last < timeout && total >= timeout, "{waits:?}");
        }
        let mut b = Backoff::new();
        assert_eq!(b.next(Timeout::Once), None);
        let mut b = Backoff::new();
        let waits: Vec<_> = (0..40).map(|_| b.next(Timeout::Forever).unwrap()).collect();
        assert!(waits[39] >= Duration::from_millis(750), "{waits:?}");
    }

    #[test]
    fn timeouts_from_git_values() {
        assert_eq!(Timeout::from_millis(0), Timeout::Once);
        assert_eq!(Timeout::from_millis(-1), Timeout::Forever);
        assert_eq!(Timeout::from_millis(-5), Timeout::Forever);
        assert_eq!(Timeout::from_millis(250), Timeout::Millis(250));
    }

    #[test]
    fn create_waits_for_a_lock_released_within_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("x.lock");
        std::fs::write(&lock, "").unwrap();
        assert_eq!(
            create(&lock, Timeout::Once).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        let start = std::time::Instant::now();
        assert!(create(&lock, Timeout::Millis(30)).is_err());
        assert!(start.elapsed() >= Duration::from_millis(30));
        let releaser = std::thread::spawn({
            let lock = lock.clone();
            move || {
                std::thread::sleep(Duration::from_millis(50));
                std::fs::remove_file(lock).unwrap();
            }
        });
        create(&lock, Timeout::Millis(1000)).unwrap();
        releaser.join().unwrap();
        assert!(lock.exists());
    }
}
