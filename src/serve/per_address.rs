//! Per-address caps: how many connections, push slots and fetch slots one client address may
//! hold at once, so that no client holds what the others need. An address is an IPv4 address
//! or an IPv6 /64 (one host, or one site: a client given a /64 has all of it); an IPv4-mapped
//! IPv6 address is its IPv4 address.
//!
//! Each address that holds or waits for a place has a tokio [`Semaphore`] in the table, dropped
//! when its last holder or waiter is gone: the table is as large as the connections the other
//! caps allow, and never more than [`MAX_ADDRESSES`]. Addresses of an explicit
//! `--trusted-proxy` are not capped (everyone behind the proxy comes from them).

use std::net::IpAddr;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub(super) use super::address::AddrGroup;
use super::*;

/// One per-address cap as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cap {
    /// No per-address cap (`0`).
    Off,
    /// At most this many per address.
    Max(usize),
}

impl Cap {
    /// The cap a flag asks for: `None` (not given) is half of the server-wide cap `global`
    /// (at least 1), so that one address never holds everything and an office behind one
    /// NAT address still has half of the server; `Some(0)` turns it off, and so does a cap no
    /// smaller than the server-wide one (which then answers alone).
    pub(super) fn from_flag(flag: Option<usize>, global: usize) -> Cap {
        match flag.unwrap_or((global / 2).max(1)) {
            0 => Cap::Off,
            n if n >= global => Cap::Off,
            n => Cap::Max(n),
        }
    }
}

/// Addresses tracked at most; past it a new address is not capped until there is room (the
/// server-wide caps still apply). Entries live only while held, so the connection caps keep
/// the table far below this.
pub(super) const MAX_ADDRESSES: usize = 100_000;

/// An address already holds as many as its cap allows.
#[derive(Debug, thiserror::Error)]
#[error("too many at once from one address")]
pub(super) struct Over;

/// One per-address cap and its table.
pub(super) struct PerAddress {
    cap: Cap,
    exempt: Vec<Cidr>,
    table: Mutex<HashMap<AddrGroup, Arc<Semaphore>>>,
}

/// A place held by an address, given back when dropped.
pub(super) struct AddrPermit {
    permit: Option<OwnedSemaphorePermit>,
    /// The table and key to clean up, when the address is tracked.
    tracked: Option<(Arc<PerAddress>, AddrGroup)>,
}

impl Drop for AddrPermit {
    fn drop(&mut self) {
        drop(self.permit.take());
        if let Some((table, key)) = self.tracked.take() {
            table.forget_if_unused(key);
        }
    }
}

/// What [`PerAddress::semaphore`] found for an address.
enum Tracked {
    /// Not capped (off, exempt, or the table is full).
    Untracked,
    Sem(Arc<Semaphore>),
}

impl PerAddress {
    pub(super) fn new(cap: Cap, exempt: Vec<Cidr>) -> Arc<PerAddress> {
        Arc::new(PerAddress {
            cap,
            exempt,
            table: Mutex::new(HashMap::new()),
        })
    }

    fn semaphore(&self, ip: IpAddr) -> Tracked {
        let Cap::Max(max) = self.cap else {
            return Tracked::Untracked;
        };
        if self.exempt.iter().any(|c| c.contains(ip)) {
            return Tracked::Untracked;
        }
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let key = AddrGroup::of(ip);
        if t.len() >= MAX_ADDRESSES && !t.contains_key(&key) {
            return Tracked::Untracked;
        }
        Tracked::Sem(
            t.entry(key)
                .or_insert_with(|| Arc::new(Semaphore::new(max)))
                .clone(),
        )
    }

    fn permit(self: &Arc<Self>, ip: IpAddr, permit: OwnedSemaphorePermit) -> AddrPermit {
        AddrPermit {
            permit: Some(permit),
            tracked: Some((self.clone(), AddrGroup::of(ip))),
        }
    }

    /// A place for `ip` now, or [`Over`].
    pub(super) fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Result<AddrPermit, Over> {
        match self.semaphore(ip) {
            Tracked::Untracked => Ok(AddrPermit {
                permit: None,
                tracked: None,
            }),
            Tracked::Sem(s) => match s.try_acquire_owned() {
                Ok(p) => Ok(self.permit(ip, p)),
                Err(_) => {
                    self.forget_if_unused(AddrGroup::of(ip));
                    Err(Over)
                }
            },
        }
    }

    /// A place for `ip`, waiting for one to be given back (bound the wait with a timeout).
    pub(super) async fn acquire(self: &Arc<Self>, ip: IpAddr) -> Result<AddrPermit, Over> {
        match self.semaphore(ip) {
            Tracked::Untracked => Ok(AddrPermit {
                permit: None,
                tracked: None,
            }),
            Tracked::Sem(s) => {
                // A waiter whose wait is dropped (timeout) drops its clone of `s` with it; the
                // entry goes with the last holder's drop, or with the cleanup below.
                let waiter = Waiter {
                    table: self.clone(),
                    key: AddrGroup::of(ip),
                };
                let r = s.acquire_owned().await;
                drop(waiter);
                r.map(|p| self.permit(ip, p)).map_err(|_| Over)
            }
        }
    }

    fn forget_if_unused(&self, key: AddrGroup) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        // Only the table's own handle left: nobody holds or waits.
        if t.get(&key).is_some_and(|s| Arc::strong_count(s) == 1) {
            t.remove(&key);
        }
    }

    /// Addresses in the table now.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Cleans up an address's entry when a wait for it ends without a place (dropped by a timeout).
struct Waiter {
    table: Arc<PerAddress>,
    key: AddrGroup,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        // The wait's own clone of the semaphore may still be alive here (it is dropped with
        // the future); a later holder's drop removes the entry then.
        self.table.forget_if_unused(self.key);
    }
}

/// The two kinds of slots a request may wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotKind {
    /// One of `--max-concurrent-pushes`.
    Push,
    /// One of `--max-concurrent-fetches` (a `git upload-pack`).
    Fetch,
}

impl SlotKind {
    /// The name in `Reject::Busy` for the server-wide cap, and for the address's.
    pub(super) fn names(self) -> (&'static str, &'static str) {
        match self {
            SlotKind::Push => ("push", "per-address push"),
            SlotKind::Fetch => ("upload-pack", "per-address upload-pack"),
        }
    }
    /// The `berth_busy_total` reasons, server-wide and per address.
    pub(super) fn busy_reasons(self) -> (&'static str, &'static str) {
        match self {
            SlotKind::Push => ("push_slot", "push_slot_address"),
            SlotKind::Fetch => ("upload_pack", "upload_pack_address"),
        }
    }
}

/// A push or fetch slot held: the server-wide one and the address's.
pub(super) struct Slot {
    pub(super) _global: OwnedSemaphorePermit,
    pub(super) _address: AddrPermit,
}

/// The per-address caps of the HTTP side and of the slots (ssh has its own connection cap).
pub(super) struct Caps {
    pub(super) connections: Arc<PerAddress>,
    pub(super) pushes: Arc<PerAddress>,
    pub(super) fetches: Arc<PerAddress>,
}

impl Caps {
    /// From the flags; `max_connections` and `max_pushes` are the server-wide caps.
    pub(super) fn new(
        limits: &Limits,
        max_connections: usize,
        max_pushes: usize,
        exempt: &[Cidr],
    ) -> Caps {
        let cap = |flag, global| PerAddress::new(Cap::from_flag(flag, global), exempt.to_vec());
        Caps {
            connections: cap(limits.max_connections_per_address, max_connections),
            pushes: cap(limits.max_pushes_per_address, max_pushes),
            fetches: cap(
                limits.max_fetches_per_address,
                limits.max_concurrent_fetches,
            ),
        }
    }
}

/// Which open connections an eviction may choose from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Any (the server-wide cap is reached).
    Any,
    /// Those of one address (its cap is reached).
    Address(AddrGroup),
}

/// The connection to close to make room: of those in `scope` that may be evicted now (waiting
/// for a request, in a TLS handshake, or not authenticated over ssh), the one waiting longest.
pub(super) fn victim<I: Copy>(
    candidates: impl IntoIterator<Item = (I, AddrGroup, Instant)>,
    scope: Scope,
) -> Option<I> {
    candidates
        .into_iter()
        .filter(|(_, key, _)| match scope {
            Scope::Any => true,
            Scope::Address(k) => *key == k,
        })
        .min_by_key(|(_, _, since)| *since)
        .map(|(id, _, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(
            AddrGroup::of(ip("2001:db8:1:2::1")),
            AddrGroup::of(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            AddrGroup::of(ip("2001:db8:1:2::1")),
            AddrGroup::of(ip("2001:db8:1:3::1"))
        );
        assert_eq!(
            AddrGroup::of(ip("::ffff:10.0.0.1")),
            AddrGroup::of(ip("10.0.0.1"))
        );
        assert_ne!(AddrGroup::of(ip("10.0.0.1")), AddrGroup::of(ip("10.0.0.2")));
    }

    #[test]
    fn default_cap_is_half_the_global_one() {
        assert_eq!(Cap::from_flag(None, 16), Cap::Max(8));
        assert_eq!(Cap::from_flag(None, 3), Cap::Max(1));
        assert_eq!(Cap::from_flag(None, 1), Cap::Off);
        assert_eq!(Cap::from_flag(Some(16), 16), Cap::Off);
        assert_eq!(Cap::from_flag(Some(0), 16), Cap::Off);
        assert_eq!(Cap::from_flag(Some(3), 16), Cap::Max(3));
    }

    #[test]
    fn an_address_holds_at_most_its_cap_and_the_table_empties() {
        let t = PerAddress::new(Cap::Max(2), vec![]);
        let a1 = t.try_acquire(ip("10.0.0.1")).unwrap();
        let a2 = t.try_acquire(ip("10.0.0.1")).unwrap();
        assert!(t.try_acquire(ip("10.0.0.1")).is_err());
        // Another address is not affected.
        let b = t.try_acquire(ip("10.0.0.2")).unwrap();
        assert_eq!(t.tracked(), 2);
        drop(a1);
        let a3 = t.try_acquire(ip("10.0.0.1")).unwrap();
        drop((a2, a3, b));
        assert_eq!(t.tracked(), 0);
    }

    #[test]
    fn off_and_exempt_addresses_are_not_tracked() {
        let off = PerAddress::new(Cap::Off, vec![]);
        let held: Vec<_> = (0..10)
            .map(|_| off.try_acquire(ip("10.0.0.1")).unwrap())
            .collect();
        assert_eq!(off.tracked(), 0);
        drop(held);
        let proxied = PerAddress::new(Cap::Max(1), vec![Cidr::parse("10.9.0.0/16").unwrap()]);
        let _a = proxied.try_acquire(ip("10.9.1.1")).unwrap();
        let _b = proxied.try_acquire(ip("10.9.1.1")).unwrap();
        assert_eq!(proxied.tracked(), 0);
    }

    #[tokio::test]
    async fn a_waiter_gets_the_place_given_back_and_a_timed_out_one_leaves_nothing() {
        let t = PerAddress::new(Cap::Max(1), vec![]);
        let held = t.try_acquire(ip("10.0.0.1")).unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(50), t.acquire(ip("10.0.0.1")));
        assert!(waited.await.is_err());
        let t2 = t.clone();
        let waiter = tokio::spawn(async move { t2.acquire(ip("10.0.0.1")).await.is_ok() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        assert!(waiter.await.unwrap());
        assert_eq!(t.tracked(), 0);
    }

    #[test]
    fn the_victim_is_the_longest_waiting_in_scope() {
        let t0 = Instant::now();
        let a = AddrGroup::of(ip("10.0.0.1"));
        let b = AddrGroup::of(ip("10.0.0.2"));
        let c = [
            (1, a, t0 + Duration::from_secs(2)),
            (2, b, t0),
            (3, a, t0 + Duration::from_secs(1)),
        ];
        assert_eq!(victim(c, Scope::Any), Some(2));
        assert_eq!(victim(c, Scope::Address(a)), Some(3));
        let none = AddrGroup::of(ip("10.0.0.3"));
        assert_eq!(victim(c, Scope::Address(none)), None);
    }
}
