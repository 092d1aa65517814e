//! The order in which password checks run (argon2 on `--max-concurrent-auth` threads, slow on
//! purpose): a returning user's check (one who logged in from that address before,
//! `logins.rs`) goes before all others; the others take turns by client address; and no address
//! holds more than its share of the queue and the checkers, nor either lane more than its
//! capacity (the returning users' lane is a reserve attackers cannot fill). Pure: the threads and the requests around it are `auth.rs`'s.

use std::collections::{HashMap, VecDeque};

use super::address::AddrGroup;

/// Which line a check waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    /// A user who logged in from this address before: served first.
    Returning,
    /// Everyone else, in turns by address.
    Other,
}

/// Why a check was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum Refused {
    #[error("this address already has its share of password checks waiting or running")]
    AddressShare,
    #[error("too many password checks waiting")]
    QueueFull,
}

/// One lane: a queue per address, and the addresses in turn.
struct Turns<T> {
    by_addr: HashMap<AddrGroup, VecDeque<T>>,
    turn: VecDeque<AddrGroup>,
}

impl<T> Turns<T> {
    fn new() -> Self {
        Turns {
            by_addr: HashMap::new(),
            turn: VecDeque::new(),
        }
    }

    fn push(&mut self, addr: AddrGroup, item: T) {
        let q = self.by_addr.entry(addr).or_default();
        if q.is_empty() {
            self.turn.push_back(addr);
        }
        q.push_back(item);
    }

    /// The first item of the address whose turn it is; that address goes to the back.
    fn pop(&mut self) -> Option<(AddrGroup, T)> {
        let addr = self.turn.pop_front()?;
        let q = self.by_addr.get_mut(&addr)?;
        let item = q.pop_front()?;
        if q.is_empty() {
            self.by_addr.remove(&addr);
        } else {
            self.turn.push_back(addr);
        }
        Some((addr, item))
    }
}

/// The checks waiting to run, and how many each address has waiting or running.
pub(super) struct FairQueue<T> {
    returning: Turns<T>,
    other: Turns<T>,
    held: HashMap<AddrGroup, usize>,
    /// Waiting in the returning lane, in the other lane.
    waiting: (usize, usize),
    share: usize,
    capacity: usize,
}

impl<T> FairQueue<T> {
    /// At most `share` checks per address (waiting or running), `capacity` waiting per lane.
    pub(super) fn new(share: usize, capacity: usize) -> Self {
        FairQueue {
            returning: Turns::new(),
            other: Turns::new(),
            held: HashMap::new(),
            waiting: (0, 0),
            share: share.max(1),
            capacity: capacity.max(1),
        }
    }

    pub(super) fn push(&mut self, addr: AddrGroup, lane: Lane, item: T) -> Result<(), Refused> {
        let held = self.held.get(&addr).copied().unwrap_or(0);
        if held >= self.share {
            return Err(Refused::AddressShare);
        }
        let (waiting, turns) = match lane {
            Lane::Returning => (&mut self.waiting.0, &mut self.returning),
            Lane::Other => (&mut self.waiting.1, &mut self.other),
        };
        if *waiting >= self.capacity {
            return Err(Refused::QueueFull);
        }
        *waiting += 1;
        *self.held.entry(addr).or_default() += 1;
        turns.push(addr, item);
        Ok(())
    }

    /// The next check to run: returning users first, then the other addresses in turn. The
    /// address keeps holding its place until [`FairQueue::release`].
    pub(super) fn pop(&mut self) -> Option<(AddrGroup, T)> {
        if let Some(next) = self.returning.pop() {
            self.waiting.0 -= 1;
            return Some(next);
        }
        let next = self.other.pop()?;
        self.waiting.1 -= 1;
        Some(next)
    }

    /// A check popped for `addr` has ended (or was dropped unrun).
    pub(super) fn release(&mut self, addr: AddrGroup) {
        if let Some(n) = self.held.get_mut(&addr) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(n: u32) -> AddrGroup {
        AddrGroup::V4(n)
    }

    #[test]
    fn returning_users_go_first_and_addresses_take_turns() {
        let mut q = FairQueue::new(3, 100);
        for i in 0..3 {
            q.push(a(1), Lane::Other, format!("1.{i}")).unwrap();
        }
        q.push(a(2), Lane::Other, "2.0".to_owned()).unwrap();
        q.push(a(3), Lane::Returning, "alice".to_owned()).unwrap();
        let order: Vec<String> = std::iter::from_fn(|| q.pop().map(|(_, s)| s)).collect();
        assert_eq!(order, ["alice", "1.0", "2.0", "1.1", "1.2"]);
    }

    #[test]
    fn an_address_holds_at_most_its_share_until_released() {
        let mut q = FairQueue::new(2, 100);
        q.push(a(1), Lane::Other, 0).unwrap();
        q.push(a(1), Lane::Other, 1).unwrap();
        assert_eq!(q.push(a(1), Lane::Other, 2), Err(Refused::AddressShare));
        assert_eq!(q.push(a(1), Lane::Returning, 2), Err(Refused::AddressShare));
        q.push(a(2), Lane::Other, 3).unwrap();
        // Popped (running) still holds the share; released, it frees one place.
        let (addr, _) = q.pop().unwrap();
        assert_eq!(q.push(a(1), Lane::Other, 4), Err(Refused::AddressShare));
        q.release(addr);
        q.push(a(1), Lane::Other, 4).unwrap();
    }

    #[test]
    fn each_lane_is_bounded_and_attackers_cannot_fill_the_returning_one() {
        let mut q = FairQueue::new(1, 3);
        for i in 0..3 {
            q.push(a(i), Lane::Other, i).unwrap();
        }
        assert_eq!(q.push(a(8), Lane::Other, 8), Err(Refused::QueueFull));
        q.push(a(9), Lane::Returning, 9).unwrap();
        assert_eq!(q.pop().map(|(_, i)| i), Some(9));
        let (addr, _) = q.pop().unwrap();
        q.push(a(8), Lane::Other, 8).unwrap();
        q.release(addr);
        for i in 10..13 {
            q.push(a(i), Lane::Returning, i).unwrap();
        }
        assert_eq!(q.push(a(13), Lane::Returning, 13), Err(Refused::QueueFull));
    }

    /// Hundreds of attacker addresses and one returning user: whatever the attackers queued,
    /// the returning user's check is the next to run.
    #[test]
    fn a_returning_user_waits_for_no_attacker() {
        let mut q = FairQueue::new(2, 1024);
        for i in 0..500 {
            q.push(a(i), Lane::Other, i).unwrap();
        }
        for _ in 0..2 {
            q.pop();
        }
        q.push(a(10_000), Lane::Returning, 10_000).unwrap();
        assert_eq!(q.pop().map(|(_, i)| i), Some(10_000));
    }
}
