//! Whose turn it is to lock a repository's refs on this node: wait–die between pushes that
//! want the same ref at once.
//!
//! A push accepted on one node locks its refs there first (the session's ref transaction),
//! then asks every other replica to prepare (lock) them too, and needs a quorum. Pushes of one
//! ref accepted on different nodes at once would each hold their own node and be refused by
//! every other: none reaches the quorum, and all are refused (three nodes, three pushes of one
//! branch, each through another node). So before a transaction locks refs here, whether its
//! accepting session's or a replica's prepare, it takes its turn ([`Turns::take`]) by the
//! push's [`Age`], which every node orders alike: a push meeting an older holder of one of its
//! refs gives way at once (dies: refused, or, for a session's non-atomic batch, those refs are
//! left to fail their locks); one meeting only younger holders waits until they are decided
//! (at most a bound, then it gives way). Waits go from older to younger only, so they never
//! form a circle, and among pushes in conflict the youngest that holds a ref never waits: it
//! is decided, and a push lands.
//!
//! A reftable repository has one lock for all its refs (`tables.list.lock`): there, every push
//! wants the whole store, and pushes of different refs take turns as pushes of one ref do
//! ([`Store`]); without that, pushes of different branches through different nodes at once
//! each held their own node's store and were refused by every other.
//!
//! A turn is released after the transaction's locks are (commit or abort); a lock held by a
//! transaction that took no turn (a catch-up applying entries) is met as before: git's lock
//! timeout, then refused.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use std::hash::BuildHasher;

use serde::{Deserialize, Serialize};

/// How long a push waits for younger pushes holding its refs to be decided before it gives
/// way (a younger push's decision takes its prepare round and one etcd txn).
pub(super) const WAIT: Duration = Duration::from_secs(20);

/// A push's age, the same on every node: when its accepting node began it (µs since the
/// epoch), then a random number for pushes begun in the same µs. Smaller is older.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(in crate::cluster) struct Age(pub(in crate::cluster) u64, pub(in crate::cluster) u64);

impl Age {
    /// The age of a push begun now.
    pub(super) fn now() -> Age {
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        // A hasher keyed anew for each push (foldhash's random state, no I/O) of the time.
        let tie = foldhash::quality::RandomState::default().hash_one(micros);
        Age(micros, tie)
    }

    /// The age of a prepare from a node that sends none: younger than every push, so it
    /// never waits (as before turns, it is refused by any holder).
    pub(super) const UNKNOWN: Age = Age(u64::MAX, u64::MAX);
}

/// What a transaction does about the holders of its refs ([`turn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
    /// Nobody else holds them: take them.
    Go,
    /// Only younger pushes hold some: wait until they are decided.
    Wait,
    /// An older push holds one: give way.
    Die,
}

/// The turn of a push of age `mine` whose refs are held, some of them, by pushes of the ages
/// `holders` (its own age among them is itself, another batch of the same push).
pub(super) fn turn(mine: Age, holders: impl IntoIterator<Item = Age>) -> Turn {
    let mut younger = false;
    for a in holders {
        if a < mine {
            return Turn::Die;
        }
        younger |= a != mine;
    }
    if younger { Turn::Wait } else { Turn::Go }
}

/// What a transaction asks of its turn when an older push holds one of its refs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ask {
    /// All its refs or nothing (a replica's prepare): it gives way as a whole.
    AllOrNothing,
    /// Each ref on its own (a session's non-atomic batch): it takes the refs nobody holds
    /// and leaves the others to fail their locks.
    PerRef,
}

/// A push gave way to an older one holding its refs here.
#[derive(Debug, thiserror::Error)]
#[error("a ref of this push is held by an older push being decided here; retry")]
pub(super) struct GaveWay;

/// One holder of refs of a repository.
#[derive(Debug)]
struct Holder {
    /// Tells it from the other holders, for its release.
    serial: u64,
    age: Age,
    /// The hashes of its ref names ([`Turns::hashes`]), sorted, each once.
    names: Vec<u64>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// The holders of each repository's refs (by its cluster name).
    repos: HashMap<String, Vec<Holder>>,
}

/// The turns taken on this node, by repository.
#[derive(Debug, Default, Clone)]
pub(super) struct Turns {
    inner: Arc<(Mutex<State>, Condvar)>,
    /// Ref names are held as 64-bit hashes under this node's random key: no name is copied
    /// (a push of a million refs takes its turn in ~8 MB), and two names that collide (never
    /// on purpose: the key is secret) only make a push wait or give way needlessly; the
    /// locks themselves are the files'.
    key: foldhash::quality::RandomState,
}

/// A turn taken: its refs are this push's to lock here until it is dropped (after the
/// transaction's locks are released).
#[derive(Debug)]
pub(super) struct Taken {
    turns: Turns,
    repo: String,
    serial: u64,
}

impl Drop for Taken {
    fn drop(&mut self) {
        let (state, released) = &*self.turns.inner;
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(holders) = s.repos.get_mut(&self.repo) {
            holders.retain(|h| h.serial != self.serial);
            if holders.is_empty() {
                s.repos.remove(&self.repo);
            }
        }
        released.notify_all();
    }
}

/// What a ref transaction of a repository locks, as its ref storage does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Store {
    /// Each ref on its own (files: a `<ref>.lock` each).
    PerRef,
    /// The whole store at once (reftable: `tables.list.lock`).
    Whole,
}

impl Store {
    /// How `format` locks.
    pub(super) fn of(format: crate::repo::RefFormat) -> Store {
        match format {
            crate::repo::RefFormat::Files => Store::PerRef,
            crate::repo::RefFormat::Reftable => Store::Whole,
        }
    }
}

/// The name every transaction of a [`Store::Whole`] wants besides its refs: no ref is named so.
const WHOLE_STORE: &[u8] = b"";

impl Turns {
    /// Take the turn of a push of age `age` for `names` of `repo`, whose refs `store` locks,
    /// waiting at most `wait` for younger holders (see the module's header).
    pub(super) fn take<'n>(
        &self,
        repo: &str,
        age: Age,
        names: impl IntoIterator<Item = &'n [u8]>,
        store: Store,
        ask: Ask,
        wait: Duration,
    ) -> Result<Taken, GaveWay> {
        let whole = (store == Store::Whole).then_some(WHOLE_STORE);
        let mut names: Vec<u64> = names
            .into_iter()
            .chain(whole)
            .map(|n| self.key.hash_one(n))
            .collect();
        names.sort_unstable();
        names.dedup();
        let deadline = Instant::now() + wait;
        let (state, released) = &*self.inner;
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        let mut waited = false;
        loop {
            let holders = s.repos.get(repo).map_or(&[][..], Vec::as_slice);
            let conflicting = holders
                .iter()
                .filter(|h| h.age != age && overlap(&h.names, &names))
                .map(|h| h.age);
            let now = Instant::now();
            match turn(age, conflicting) {
                Turn::Go => break,
                Turn::Wait if now < deadline => {
                    if !waited {
                        waited = true;
                        tracing::info!(target: "berth::cluster", repo = %crate::escape::Escaped::token(repo), "waiting for younger pushes holding its refs to be decided");
                    }
                    s = released
                        .wait_timeout(s, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                Turn::Wait | Turn::Die => match ask {
                    Ask::AllOrNothing => {
                        tracing::info!(target: "berth::cluster", repo = %crate::escape::Escaped::token(repo), "gave way to a push holding its refs");
                        return Err(GaveWay);
                    }
                    Ask::PerRef => {
                        // The refs another push holds are left to fail their locks.
                        names.retain(|n| {
                            !holders
                                .iter()
                                .any(|h| h.age != age && h.names.binary_search(n).is_ok())
                        });
                        break;
                    }
                },
            }
        }
        let serial = s.next;
        s.next += 1;
        s.repos
            .entry(repo.to_owned())
            .or_default()
            .push(Holder { serial, age, names });
        Ok(Taken {
            turns: self.clone(),
            repo: repo.to_owned(),
            serial,
        })
    }
}

/// Whether the sorted lists `held` and `wanted` share a name.
fn overlap(held: &[u64], wanted: &[u64]) -> bool {
    let (small, large) = if held.len() <= wanted.len() {
        (held, wanted)
    } else {
        (wanted, held)
    };
    small.iter().any(|n| large.binary_search(n).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names<'n>(n: &[&'n str]) -> Vec<&'n [u8]> {
        n.iter().map(|s| s.as_bytes()).collect()
    }

    /// `turns`' turn, all or nothing, waiting at most [`WAIT`].
    fn take(turns: &Turns, repo: &str, age: Age, refs: &[&str]) -> Result<Taken, GaveWay> {
        turns.take(
            repo,
            age,
            names(refs),
            Store::PerRef,
            Ask::AllOrNothing,
            WAIT,
        )
    }

    /// In a repository whose refs are locked all at once (reftable), pushes of different refs
    /// take turns: a younger one gives way to an older holder, an older one waits for a
    /// younger holder; with a lock per ref (files) they do not meet.
    #[test]
    fn pushes_of_different_refs_take_turns_where_the_store_is_locked_whole() {
        let turns = Turns::default();
        let ask = |age: Age, r: &str, store: Store, wait: Duration| {
            turns.take("r", age, names(&[r]), store, Ask::AllOrNothing, wait)
        };
        let held = ask(Age(5, 0), "refs/heads/a", Store::Whole, WAIT).unwrap();
        assert!(ask(Age(9, 0), "refs/heads/b", Store::Whole, WAIT).is_err());
        let short = Duration::from_millis(20);
        assert!(
            ask(Age(1, 0), "refs/heads/c", Store::Whole, short).is_err(),
            "the older waits for the younger holder (here at most 20 ms, then gives way)"
        );
        drop(held);
        let files = ask(Age(5, 0), "refs/heads/a", Store::PerRef, WAIT).unwrap();
        let other = ask(Age(9, 0), "refs/heads/b", Store::PerRef, WAIT).unwrap();
        drop((files, other));
        assert!(ask(Age(9, 0), "refs/heads/b", Store::Whole, WAIT).is_ok());
    }

    #[test]
    fn the_older_waits_for_the_younger_and_the_younger_gives_way() {
        let (old, mid, young) = (Age(1, 0), Age(2, 0), Age(2, 1));
        assert_eq!(turn(mid, []), Turn::Go);
        assert_eq!(turn(mid, [mid]), Turn::Go, "its own other batch");
        assert_eq!(turn(mid, [young]), Turn::Wait);
        assert_eq!(turn(mid, [young, old]), Turn::Die);
        assert_eq!(turn(young, [mid]), Turn::Die);
        assert_eq!(turn(Age::UNKNOWN, [young]), Turn::Die);
    }

    #[test]
    fn a_younger_holder_released_lets_the_older_take_its_turn() {
        let turns = Turns::default();
        let young = take(&turns, "r", Age(5, 0), &["refs/heads/a"]).unwrap();
        // Another repository, or other refs: no conflict.
        let other = take(&turns, "s", Age(9, 0), &["refs/heads/a"]).unwrap();
        let disjoint = take(&turns, "r", Age(9, 0), &["refs/heads/b"]).unwrap();
        // Older than the holder: waits for it; younger: gives way at once.
        assert!(take(&turns, "r", Age(10, 0), &["refs/heads/b", "refs/heads/c"]).is_err());
        let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = {
            let (turns, released) = (turns.clone(), released.clone());
            std::thread::spawn(move || {
                let t = take(&turns, "r", Age(1, 0), &["refs/heads/c", "refs/heads/a"]);
                // Its turn came only once the younger holder was released.
                t.is_ok() && released.load(std::sync::atomic::Ordering::SeqCst)
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        released.store(true, std::sync::atomic::Ordering::SeqCst);
        drop(young);
        assert!(
            waiter.join().unwrap(),
            "the older push waits for the younger and takes its turn once it is released"
        );
        drop((other, disjoint));
        assert!(turns.inner.0.lock().unwrap().repos.is_empty());
    }

    #[test]
    fn a_wait_is_bounded_and_a_per_ref_batch_leaves_the_held_refs() {
        let turns = Turns::default();
        let _young = take(&turns, "r", Age(5, 0), &["refs/heads/a"]).unwrap();
        let ask = names(&["refs/heads/a", "refs/heads/b"]);
        assert!(
            turns
                .take(
                    "r",
                    Age(1, 0),
                    ask.clone(),
                    Store::PerRef,
                    Ask::AllOrNothing,
                    Duration::from_millis(20)
                )
                .is_err()
        );
        let per_ref = turns
            .take("r", Age(6, 0), ask, Store::PerRef, Ask::PerRef, WAIT)
            .unwrap();
        let s = turns.inner.0.lock().unwrap();
        let mine = s.repos["r"]
            .iter()
            .find(|h| h.serial == per_ref.serial)
            .unwrap();
        assert_eq!(mine.names, [turns.key.hash_one(b"refs/heads/b".as_slice())]);
    }
}
