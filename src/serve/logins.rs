//! What `berth serve` remembers about password logins and what it decides from that: failures,
//! to slow guessing without handing an attacker a way to lock a user out, and recent successes,
//! so a returning user's check goes first (`fair.rs`). Pure: the caller passes the time and
//! does the I/O. Every table is bounded, whatever names and addresses clients send.
//!
//! The rules, with `N` = `--auth-max-failures` and the window `--auth-failure-window`:
//! - an address (an IPv6 address by its /64) with `N` failures in the window, for any users,
//!   waits for the window's end;
//! - a user with `N` failures in the window, from anywhere, is under attack: an address that
//!   failed for that user in the window waits too (it had one guess, not `N`);
//! - an address that has not failed is never refused: the right password from a clean address
//!   always gets its check, however many addresses guess that user's password.

use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use super::address::AddrGroup;
use super::fair::Lane;

/// A user name as the tables keep it: a keyed hash, the same size whatever the client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct UserTag(pub(super) [u8; 16]);

/// `--auth-max-failures` and `--auth-failure-window`.
#[derive(Debug, Clone, Copy)]
pub(super) enum FailureLimit {
    /// `--auth-max-failures 0`: failures are not counted.
    Off,
    After {
        failures: NonZeroU32,
        window: Duration,
    },
}

impl FailureLimit {
    pub(super) fn new(failures: u32, window: Duration) -> FailureLimit {
        match NonZeroU32::new(failures) {
            None => FailureLimit::Off,
            Some(failures) => FailureLimit::After { failures, window },
        }
    }
}

/// Why an attempt waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// The address failed `N` times in the window.
    Address,
    /// The user is under attack and this address already failed for them.
    UserUnderAttack,
}

impl Why {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Why::Address => "address",
            Why::UserUnderAttack => "user_under_attack",
        }
    }
}

/// What to do with a login attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// Check the password, in this lane of the checkers' queue.
    Check(Lane),
    /// Refuse without a check (429); the window ends in `retry_after`.
    Wait { retry_after: Duration, why: Why },
}

/// A successful login from an address makes its user a returning user there for this long.
const RETURNING_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// Entries each failure table keeps at most (an entry is ~50 bytes: a few MiB in all).
const FAILURE_ENTRIES: usize = 65_536;
/// (user, address) pairs remembered as returning, at most.
const SUCCESS_ENTRIES: usize = 16_384;

/// Keys with a stamp (the start of a failure window, or the last success) and a value, at
/// most `cap` of them: a full table drops its expired entries, then its older half.
struct Table<K, V> {
    map: HashMap<K, (Instant, V)>,
    cap: usize,
}

impl<K: Hash + Eq + Copy, V: Copy> Table<K, V> {
    fn new(cap: usize) -> Self {
        Table {
            map: HashMap::new(),
            cap,
        }
    }

    /// The entry for `key`, if stamped less than `ttl` before `now`.
    fn live(&self, key: &K, now: Instant, ttl: Duration) -> Option<(Instant, V)> {
        self.map
            .get(key)
            .copied()
            .filter(|(at, _)| now.saturating_duration_since(*at) < ttl)
    }

    /// Make room for one more key.
    fn make_room(&mut self, now: Instant, ttl: Duration) {
        if self.map.len() < self.cap {
            return;
        }
        self.map
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
        if self.map.len() < self.cap {
            return;
        }
        let mut stamps: Vec<Instant> = self.map.values().map(|(at, _)| *at).collect();
        let mid = stamps.len() / 2;
        let (_, median, _) = stamps.select_nth_unstable(mid);
        let median = *median;
        self.map.retain(|_, (at, _)| *at > median);
    }

    fn set(&mut self, key: K, at: Instant, value: V, ttl: Duration) {
        if !self.map.contains_key(&key) {
            self.make_room(at, ttl);
        }
        self.map.insert(key, (at, value));
    }
}

impl<K: Hash + Eq + Copy> Table<K, u32> {
    /// Count one failure of `key` in its window (a new window if the last one ended).
    fn count(&mut self, key: K, now: Instant, window: Duration) {
        let (start, n) = self.live(&key, now, window).unwrap_or((now, 0));
        self.set(key, start, n.saturating_add(1), window);
    }

    /// The rest of `key`'s window, if it has at least `n` failures in it.
    fn at_least(&self, key: &K, n: u32, now: Instant, window: Duration) -> Option<Duration> {
        let (start, count) = self.live(key, now, window)?;
        (count >= n).then(|| window.saturating_sub(now.saturating_duration_since(start)))
    }
}

/// The failure and success tables.
pub(super) struct Logins {
    limit: FailureLimit,
    by_addr: Table<AddrGroup, u32>,
    by_user: Table<UserTag, u32>,
    by_pair: Table<(UserTag, AddrGroup), u32>,
    returning: Table<(UserTag, AddrGroup), ()>,
}

impl Logins {
    pub(super) fn new(limit: FailureLimit) -> Logins {
        Logins {
            limit,
            by_addr: Table::new(FAILURE_ENTRIES),
            by_user: Table::new(FAILURE_ENTRIES),
            by_pair: Table::new(FAILURE_ENTRIES),
            returning: Table::new(SUCCESS_ENTRIES),
        }
    }

    /// Whether `user` from `addr` gets a password check now, and in which lane.
    pub(super) fn admit(&self, user: UserTag, addr: AddrGroup, now: Instant) -> Admission {
        if let FailureLimit::After { failures, window } = self.limit {
            let n = failures.get();
            if let Some(retry_after) = self.by_addr.at_least(&addr, n, now, window) {
                return Admission::Wait {
                    retry_after,
                    why: Why::Address,
                };
            }
            if self.by_user.at_least(&user, n, now, window).is_some()
                && let Some(retry_after) = self.by_pair.at_least(&(user, addr), 1, now, window)
            {
                return Admission::Wait {
                    retry_after,
                    why: Why::UserUnderAttack,
                };
            }
        }
        match self.returning.live(&(user, addr), now, RETURNING_FOR) {
            Some(_) => Admission::Check(Lane::Returning),
            None => Admission::Check(Lane::Other),
        }
    }

    /// A wrong password (or an unknown user) from `addr`.
    pub(super) fn failed(&mut self, user: UserTag, addr: AddrGroup, now: Instant) {
        if let FailureLimit::After { window, .. } = self.limit {
            self.by_addr.count(addr, now, window);
            self.by_user.count(user, now, window);
            self.by_pair.count((user, addr), now, window);
        }
    }

    /// The right password from `addr`: its failures there are forgiven, and it is a returning
    /// user there from now on.
    pub(super) fn succeeded(&mut self, user: UserTag, addr: AddrGroup, now: Instant) {
        self.by_pair.map.remove(&(user, addr));
        self.returning.set((user, addr), now, (), RETURNING_FOR);
    }

    /// Entries in all tables (for the tests of the bounds).
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.by_addr.map.len()
            + self.by_user.map.len()
            + self.by_pair.map.len()
            + self.returning.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(60);

    fn user(n: u8) -> UserTag {
        UserTag([n; 16])
    }

    fn v4(s: &str) -> AddrGroup {
        AddrGroup::of(s.parse().unwrap())
    }

    fn logins(n: u32) -> Logins {
        Logins::new(FailureLimit::new(n, W))
    }

    fn waits(a: Admission) -> Option<Why> {
        match a {
            Admission::Wait { why, .. } => Some(why),
            Admission::Check(_) => None,
        }
    }

    #[test]
    fn ipv6_counts_by_its_64_and_v4_mapped_as_v4() {
        assert_eq!(v4("2001:db8:1:2::1"), v4("2001:db8:1:2:ffff::9"));
        assert_ne!(v4("2001:db8:1:2::1"), v4("2001:db8:1:3::1"));
        assert_eq!(v4("::ffff:10.0.0.1"), v4("10.0.0.1"));
        assert_ne!(v4("10.0.0.1"), v4("10.0.0.2"));
    }

    #[test]
    fn an_address_waits_after_n_failures_for_any_users_until_its_window_ends() {
        let mut l = logins(3);
        let t = Instant::now();
        let a = v4("10.0.0.1");
        for i in 0..3 {
            assert_eq!(waits(l.admit(user(i), a, t)), None);
            l.failed(user(i), a, t);
        }
        match l.admit(user(9), a, t + Duration::from_secs(20)) {
            Admission::Wait { retry_after, why } => {
                assert_eq!(why, Why::Address);
                assert_eq!(retry_after, Duration::from_secs(40));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(waits(l.admit(user(9), a, t + W)), None, "window over");
    }

    #[test]
    fn a_user_under_attack_is_never_refused_from_a_clean_address() {
        let mut l = logins(3);
        let t = Instant::now();
        let alice = user(1);
        // A hundred addresses guess alice's password once each.
        for i in 0..100u32 {
            let a = AddrGroup::V4(0x0a00_0000 + i);
            assert_eq!(waits(l.admit(alice, a, t)), None, "address {i} is clean");
            l.failed(alice, a, t);
        }
        // Each attacker had one guess: alice is under attack, so a second one waits.
        assert_eq!(
            waits(l.admit(alice, AddrGroup::V4(0x0a00_0005), t)),
            Some(Why::UserUnderAttack)
        );
        // alice from home: checked.
        let home = v4("192.0.2.7");
        assert_eq!(
            l.admit(alice, home, t),
            Admission::Check(Lane::Other),
            "never locked out from an address that has not failed"
        );
        // Before the user is under attack, an address has N guesses.
        let mut l = logins(3);
        let a = v4("10.9.9.9");
        l.failed(alice, a, t);
        l.failed(alice, a, t);
        assert_eq!(waits(l.admit(alice, a, t)), None);
    }

    #[test]
    fn success_forgives_the_pair_and_makes_a_returning_user() {
        let mut l = logins(3);
        let t = Instant::now();
        let (alice, home) = (user(1), v4("192.0.2.7"));
        assert_eq!(l.admit(alice, home, t), Admission::Check(Lane::Other));
        l.failed(alice, home, t);
        l.succeeded(alice, home, t);
        assert_eq!(l.admit(alice, home, t), Admission::Check(Lane::Returning));
        // Only from that address, and only that user.
        assert_eq!(
            l.admit(alice, v4("192.0.2.8"), t),
            Admission::Check(Lane::Other)
        );
        assert_eq!(l.admit(user(2), home, t), Admission::Check(Lane::Other));
        assert_eq!(
            l.admit(alice, home, t + RETURNING_FOR),
            Admission::Check(Lane::Other)
        );
    }

    #[test]
    fn off_counts_nothing_but_still_knows_returning_users() {
        let mut l = logins(0);
        let t = Instant::now();
        let a = v4("10.0.0.1");
        for _ in 0..1000 {
            l.failed(user(1), a, t);
        }
        assert_eq!(l.admit(user(1), a, t), Admission::Check(Lane::Other));
        l.succeeded(user(1), a, t);
        assert_eq!(l.admit(user(1), a, t), Admission::Check(Lane::Returning));
    }

    #[test]
    fn tables_stay_bounded_under_random_names_and_addresses_and_keep_counting() {
        let mut l = logins(3);
        let t = Instant::now();
        for i in 0..(FAILURE_ENTRIES as u32 * 3) {
            let mut name = [0u8; 16];
            name[..4].copy_from_slice(&i.to_le_bytes());
            l.failed(
                UserTag(name),
                AddrGroup::V4(i),
                t + Duration::from_micros(i as u64),
            );
        }
        assert!(l.entries() <= 3 * FAILURE_ENTRIES, "{}", l.entries());
        // The newest attacker is still counted: full tables drop their oldest, not new keys.
        let last = t + Duration::from_secs(1);
        let a = v4("10.200.0.1");
        for _ in 0..3 {
            l.failed(user(7), a, last);
        }
        assert_eq!(waits(l.admit(user(8), a, last)), Some(Why::Address));
    }
}
