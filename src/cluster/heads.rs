//! The repositories' log heads as this node last saw them ([`Heads`]): what routing a push's
//! `POST` asks (is this replica behind the log? `Cluster::route`) answered without a read
//! from etcd when the watch of the logs (`catchup.rs`) already told.
//!
//! A head seen here is never ahead of the log (sequence numbers only grow, and the watch
//! reports changes in order) and lags it by the watch's delivery at most. It is only ever a
//! routing hint: the gate reads the head again at the commit point and its compare decides
//! (`gate.rs`), so a stale one can send a push to be decided on a replica whose gate then
//! refuses it as behind, but never lets one land on a stale base. The advertisement (`GET
//! info/refs`, an ssh session's first answer) still reads the log itself: a client that saw
//! its push acknowledged through one node sees it through every other.
//!
//! A head enters from a read of the log ([`Heads::read`]) only while the watch is in place and
//! has reported no change after that read's revision, so every later change is an event still
//! to come; the watch's events update the heads present, and its end forgets them all. A head
//! neither read nor reported for [`MAX_AGE`] is not used: a watch whose stream stalled without
//! ending (a half-open connection) cannot keep one stale for longer. A push's `POST` follows
//! its `GET`, whose read refreshed the head moments before.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many repositories' heads are kept; past it they are all forgotten (a read of the log
/// each, until seen again).
const MAX_HEADS: usize = 1 << 16;

/// How long a head read or reported is used.
const MAX_AGE: Duration = Duration::from_secs(2);

/// The log heads seen, by repository.
#[derive(Debug, Default)]
pub(super) struct Heads {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The watch in place, and the last revision it reported; `None` while there is none.
    watched: Option<i64>,
    /// Each repository's head sequence number, as seen, and when it was read or reported.
    seqs: HashMap<String, (u64, Instant)>,
}

impl Heads {
    /// The watch of the logs is in place from `revision` on: what was seen before is forgotten.
    pub(super) fn started(&self, revision: i64) {
        let mut i = self.lock();
        i.seqs.clear();
        i.watched = Some(revision);
    }

    /// The watch ended: changes may go unseen until the next one is in place.
    pub(super) fn ended(&self) {
        let mut i = self.lock();
        i.seqs.clear();
        i.watched = None;
    }

    /// The watch saw `name`'s head put at `revision`: its entry `seq` (`None`: not readable,
    /// so not known).
    pub(super) fn put(&self, name: &str, seq: Option<u64>, revision: i64) {
        let mut i = self.lock();
        let Some(watched) = i.watched.as_mut() else {
            return;
        };
        *watched = (*watched).max(revision);
        match (i.seqs.get_mut(name), seq) {
            // Only news refreshes it: a watch catching up (its member behind the others)
            // reports changes a read already showed.
            (Some((known, at)), Some(seq)) if seq >= *known => {
                *known = seq;
                *at = Instant::now();
            }
            (Some(_), Some(_)) => {}
            (Some(_), None) => {
                i.seqs.remove(name);
            }
            (None, _) => {}
        }
    }

    /// The watch saw `name`'s log deleted at `revision`.
    pub(super) fn deleted(&self, name: &str, revision: i64) {
        let mut i = self.lock();
        if let Some(watched) = i.watched.as_mut() {
            *watched = (*watched).max(revision);
        }
        i.seqs.remove(name);
    }

    /// A read of the log found `name`'s head at `seq`, at the store's `revision`: kept if the
    /// watch will report every change after it.
    pub(super) fn read(&self, name: &str, seq: u64, revision: i64) {
        let mut i = self.lock();
        if i.watched.is_none_or(|w| revision < w) {
            return;
        }
        let now = Instant::now();
        if let Some((known, at)) = i.seqs.get_mut(name) {
            *known = (*known).max(seq);
            *at = now;
            return;
        }
        if i.seqs.len() >= MAX_HEADS {
            i.seqs.clear();
        }
        i.seqs.insert(name.to_owned(), (seq, now));
    }

    /// `name`'s head as seen, if known.
    pub(super) fn seq(&self, name: &str) -> Option<u64> {
        self.seq_at(name, Instant::now())
    }

    /// `name`'s head as seen, if known at `now`.
    fn seq_at(&self, name: &str, now: Instant) -> Option<u64> {
        let i = self.lock();
        i.watched?;
        let (seq, at) = i.seqs.get(name)?;
        (now.saturating_duration_since(*at) < MAX_AGE).then_some(*seq)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing here panics while holding it, and its state is whole after each method.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_read_is_known_only_while_the_watch_will_report_what_follows_it() {
        let h = Heads::default();
        // No watch: a read is not kept.
        h.read("r", 3, 100);
        assert_eq!(h.seq("r"), None);
        h.started(100);
        h.read("r", 3, 100);
        assert_eq!(h.seq("r"), Some(3));
        // The watch moves it on; an older read does not take it back.
        h.put("r", Some(4), 101);
        h.read("r", 3, 102);
        assert_eq!(h.seq("r"), Some(4));
        // A read older than what the watch already reported is not kept: a change between
        // them may have been reported before the head was known.
        h.put("other", Some(9), 110);
        h.read("s", 1, 105);
        assert_eq!(h.seq("s"), None);
        h.read("s", 1, 110);
        assert_eq!(h.seq("s"), Some(1));
        // An unreadable entry or a deleted log: not known.
        h.put("s", None, 111);
        assert_eq!(h.seq("s"), None);
        h.deleted("r", 112);
        assert_eq!(h.seq("r"), None);
        // The watch's end forgets everything, and a new watch starts from nothing.
        h.read("r", 5, 112);
        assert_eq!(h.seq("r"), Some(5));
        h.ended();
        assert_eq!(h.seq("r"), None);
        h.read("r", 5, 113);
        assert_eq!(h.seq("r"), None);
        h.started(113);
        assert_eq!(h.seq("r"), None);
    }

    #[test]
    fn a_head_neither_read_nor_reported_for_a_while_is_not_used() {
        let h = Heads::default();
        h.started(1);
        h.read("r", 3, 1);
        let later = Instant::now() + MAX_AGE;
        assert_eq!(h.seq_at("r", later), None);
        // Reported by the watch: used again; an older head reported (a watch catching up)
        // does not refresh it.
        std::thread::sleep(Duration::from_millis(2));
        h.put("r", Some(4), 2);
        assert_eq!(h.seq_at("r", later), Some(4));
        assert_eq!(h.seq_at("r", later + MAX_AGE), None);
        h.read("r", 6, 3);
        let later = Instant::now() + MAX_AGE;
        std::thread::sleep(Duration::from_millis(2));
        h.put("r", Some(5), 3);
        assert_eq!(h.seq_at("r", later), None);
    }

    #[test]
    fn heads_are_bounded() {
        let h = Heads::default();
        h.started(1);
        for n in 0..MAX_HEADS {
            h.read(&n.to_string(), 1, 1);
        }
        assert_eq!(h.seq("0"), Some(1));
        h.read("one more", 1, 1);
        assert_eq!(h.seq("0"), None);
        assert_eq!(h.seq("one more"), Some(1));
        assert!(h.lock().seqs.len() <= MAX_HEADS);
    }
}
