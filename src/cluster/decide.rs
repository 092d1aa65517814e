//! The cluster's decisions, without I/O: how many replicas make a quorum, where a replica stands
//! against the log, what the entries committed since a push's base are to it (the winners of a
//! lost compare), what the gate does next after losing one, the verdict a prepared replica
//! is told, what a prepared replica does with what it heard ([`resolve`]), the placement
//! upkeep's steps (the nodes ranked, a down replica held off: [`placement_nodes`], [`upkeep`];
//! a removed copy: [`removed_copy`]), and the one retry policy of a push ([`RETRY`]: lost
//! compares, lost refs, etcd failures at the commit point). The gate (`gate.rs`), the replica
//! (`replica.rs`), the upkeep (`upkeep.rs`) and the catch-up ask these; each is unit-tested here, the cases the fault script found among them
//! (docs/cluster.md).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::refs::RefUpdate;

use super::Ack;
use super::log::Entry;
use super::wire::VerdictWord;

/// How a push retries, in one place: what the gate does again after losing a compare to other
/// refs' pushes, how many more transactions a non-atomic batch tries for the refs a lost
/// compare did not touch, and how long the commit point retries etcd.
///
/// The bound: a push's commit point makes at most `lost_compare_rounds` compares that lose
/// (each a range read and one txn), in each of at most `1 + lost_ref_batches` transactions;
/// within one compare, etcd failures are retried every `etcd.pause` until `etcd.deadline`
/// has passed (then one etcd call more at most, `ETCD_TIMEOUT` per endpoint) and the push is
/// refused as unconfirmed. What etcd refuses whatever the retries (an entry larger than its
/// request limit) is not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Retry {
    /// Rounds of lost compares to pushes of other refs before the push gives up (with many
    /// pushes into one repository at once each round may lose to another of them: 50
    /// concurrent pushes to one repository needed 9–16).
    pub(super) lost_compare_rounds: u32,
    /// How many more transactions a non-atomic batch tries for its refs that a lost compare
    /// did not touch (the lost ones are refused).
    pub(super) lost_ref_batches: u32,
    /// etcd failing at the commit point (the answer may have been lost: retried with the same
    /// compare, so the entry is written at most once).
    pub(super) etcd: Backoff,
}

/// Retry a failing call every `pause` until `deadline` has passed since the first try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Backoff {
    pub(super) pause: Duration,
    pub(super) deadline: Duration,
}

/// The push's retry policy (see [`Retry`] for its bound).
pub(super) const RETRY: Retry = Retry {
    lost_compare_rounds: 64,
    lost_ref_batches: 3,
    etcd: Backoff {
        pause: Duration::from_millis(300),
        deadline: Duration::from_secs(15),
    },
};

/// How an etcd call at the commit point failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// etcd refuses the request whatever the retries (larger than its request limit).
    Refused,
    /// etcd did not answer, or answered with an error that may pass.
    Unavailable,
}

/// [`Backoff::after`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Try again after this pause.
    Again(Duration),
    /// Stop: the call failed for good.
    GiveUp,
}

impl Backoff {
    /// What to do after a call failed with `failure`, `elapsed` after the first try.
    pub(super) fn after(self, failure: Failure, elapsed: Duration) -> Next {
        match failure {
            Failure::Refused => Next::GiveUp,
            Failure::Unavailable if elapsed > self.deadline => Next::GiveUp,
            Failure::Unavailable => Next::Again(self.pause),
        }
    }
}

/// How many of a repository's `k` replicas must apply a push before it is acknowledged.
pub(super) fn needed(ack: Ack, k: usize) -> usize {
    match ack {
        Ack::Majority => k / 2 + 1,
        Ack::All => k,
    }
}

/// Whether the accepting replica and `prepared_peers` other replicas are a quorum of `need`.
pub(super) fn quorum(prepared_peers: usize, need: usize) -> Quorum {
    if 1 + prepared_peers >= need {
        Quorum::Met
    } else {
        Quorum::Short {
            prepared: 1 + prepared_peers,
        }
    }
}

/// [`quorum`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Quorum {
    /// Enough replicas prepared: the push may go to the commit point.
    Met,
    /// Only this many (the accepting replica included) prepared.
    Short { prepared: usize },
}

/// Where a replica that applied entry `applied` stands against a log whose head is `head`.
pub(super) fn position(applied: u64, head: u64) -> Position {
    match applied.cmp(&head) {
        std::cmp::Ordering::Equal => Position::Current,
        std::cmp::Ordering::Less => Position::Behind,
        std::cmp::Ordering::Greater => Position::Ahead,
    }
}

/// Where a replica stands when objects a push builds on are missing on it (a thin pack's
/// base, an object its new values reach): from the entry it had applied when the push began
/// (`then`), the one it applied now (`now`, after a catch-up) and the log's head.
pub(super) fn lacking(then: u64, now: u64, head: u64) -> Lacking {
    if now < head {
        Lacking::Behind
    } else if then < now {
        Lacking::CaughtUp
    } else {
        Lacking::NotBehind
    }
}

/// [`lacking`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lacking {
    /// It had the whole log the client could have seen: the push itself lacks them (git's
    /// refusal stands).
    NotBehind,
    /// It applied entries since the push began: the objects may be here now (checked again
    /// where the push can be; the pack it could not complete is not read again).
    CaughtUp,
    /// It is behind the log still (its catch-up failed or took too long): the push is refused
    /// in the cluster's words, nothing landed.
    Behind,
}

/// [`position`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Position {
    /// It applied the whole log.
    Current,
    /// Entries are missing here: it catches up (and a push it accepts may go on only if those
    /// entries touch none of its refs, [`winners`]).
    Behind,
    /// It applied more than the head it read: read in the wrong order, never to go on from.
    Ahead,
}

/// What the entries committed after a push's base are to that push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Winners {
    /// They include this push's own entry (an answer lost earlier): committed at this seq.
    Ours(u64),
    /// None of them updates a ref of this push, or a ref above or below one.
    Disjoint,
    /// Some of them do: the positions (in the push's updates) of the refs they touch.
    Overlap(Vec<usize>),
}

/// What `entries` (committed after the base of the push `txid` of `updates`, in log order) are
/// to it. Any update of one of its refs, or of one above or below it, is a conflict — even one
/// that left the ref at the value this push expects: a replica commits on top of an entry only
/// once that entry is recorded in order there, so the catch-up and the resync never meet a ref
/// two unrecorded entries ahead (the fault script, seed 31).
pub(super) fn winners<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
    txid: &str,
    updates: &[RefUpdate],
) -> Winners {
    let mut touched = BTreeSet::new();
    for e in entries {
        if e.txid == txid {
            return Winners::Ours(e.seq);
        }
        touched.extend(e.updates.iter().map(|u| Vec::from(u.name.as_slice())));
    }
    let lost: Vec<usize> = updates
        .iter()
        .enumerate()
        .filter(|(_, u)| touches(&touched, &u.name))
        .map(|(i, _)| i)
        .collect();
    if lost.is_empty() {
        Winners::Disjoint
    } else {
        Winners::Overlap(lost)
    }
}

/// Whether an update of ref `name` conflicts with one of `touched`: the same ref, or one a
/// directory of the other (`refs/heads/a` and `refs/heads/a/b`).
pub(super) fn touches(touched: &BTreeSet<Vec<u8>>, name: &[u8]) -> bool {
    if touched.contains(name) {
        return true;
    }
    // A ref above it: each of its directories.
    let above = name
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .any(|(i, _)| touched.contains(&name[..i]));
    // A ref below it: the first name after `name/` starts with it.
    let mut dir = name.to_vec();
    dir.push(b'/');
    let below = touched
        .range(dir.clone()..)
        .next()
        .is_some_and(|n| n.starts_with(&dir));
    above || below
}

/// What the gate does after its compare-and-swap lost to other entries, in `round` (1-based).
pub(super) fn after_lost_compare(winners: Winners, round: u32) -> AfterLost {
    match winners {
        Winners::Ours(seq) => AfterLost::Committed(seq),
        Winners::Disjoint if round < RETRY.lost_compare_rounds => AfterLost::Retry,
        Winners::Disjoint => AfterLost::GiveUp,
        Winners::Overlap(lost) => AfterLost::Lost(lost),
    }
}

/// [`after_lost_compare`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum AfterLost {
    /// Its own entry is in the log at this seq (an earlier answer was lost).
    Committed(u64),
    /// The winners are other refs': try again after them.
    Retry,
    /// Other refs' pushes won [`Retry::lost_compare_rounds`] times: refuse, the client retries.
    GiveUp,
    /// The winners changed these refs of the push (positions in its updates): those are lost,
    /// the others may go on in a transaction of their own.
    Lost(Vec<usize>),
}

/// What a prepared replica is told to do with its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Commit it: it is the log's entry `seq`.
    Commit { seq: u64 },
    /// Abort it: it is in no entry of the log.
    Abort,
}

impl Verdict {
    /// Its form in the decide request's query (`verdict=…&seq=…`).
    pub(super) fn query(self) -> String {
        match self {
            Verdict::Commit { seq } => format!("verdict=commit&seq={seq}"),
            Verdict::Abort => "verdict=abort&seq=0".into(),
        }
    }

    /// Read back from a decide request's `verdict` and `seq`: a commit needs an entry (seq ≥ 1).
    pub(super) fn parse(verdict: VerdictWord, seq: Option<u64>) -> Option<Verdict> {
        match (verdict, seq) {
            (VerdictWord::Commit, Some(seq)) if seq > 0 => Some(Verdict::Commit { seq }),
            (VerdictWord::Commit, _) => None,
            (VerdictWord::Abort, _) => Some(Verdict::Abort),
        }
    }

    /// The word for logs and answers.
    pub(super) fn word(self) -> &'static str {
        match self {
            Verdict::Commit { .. } => "commit",
            Verdict::Abort => "abort",
        }
    }
}

/// What a prepared replica heard while it waited for its verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Heard {
    /// The accepting node's decide request.
    Verdict(Verdict),
    /// The accepting node's prepare connection closed before its verdict: it died (kill -9
    /// closes its sockets at once), or the network between the two failed, or it gave up on
    /// this replica.
    OriginGone,
    /// The accepting node's lease is gone from etcd (expired: the node stopped, or is cut off
    /// from etcd): the etcd watch of `nodes/` saw its key deleted, or a poll of the live nodes
    /// found it missing. It cannot commit the push any more without registering again first.
    LeaseGone,
    /// Nothing, for the whole decision timeout.
    Nothing,
}

/// What the repository's log says of a prepared transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Logged {
    /// Committed as entry `seq`.
    At(u64),
    /// In no entry after the push's base.
    Absent,
    /// etcd could not say.
    Unknown,
}

/// [`resolve`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resolve {
    /// Carry this verdict out.
    Carry(Verdict),
    /// Ask the log (authoritative) whether the transaction is in it.
    AskLog,
    /// The log could not say: listen again for a while (the verdict may still come), then ask
    /// again; at the decision timeout the replica has heard [`Heard::Nothing`].
    AskAgain,
}

/// Whether a prepared replica polling the live nodes (`live`, the watch of `nodes/` being
/// its first word) has lost the push's accepting node `origin`.
pub(super) fn origin_lost(origin: &str, live: &[String]) -> bool {
    !live.iter().any(|n| n == origin)
}

/// What a prepared replica does, having `heard` this and (once asked) read `logged` off the
/// log. A verdict is carried out as told. Without one, the log decides: committed there →
/// commit; not there → abort (if the accepting node, alive after all, commits it later, this
/// replica is behind by that entry and catches up; it counted for no acknowledgement, since
/// only a replica that answered the decide request counts). A log that cannot be read is asked
/// again until the decision timeout; then (heard nothing) the push aborts here, as behind.
pub(super) fn resolve(heard: Heard, logged: Option<Logged>) -> Resolve {
    match (heard, logged) {
        (Heard::Verdict(v), _) => Resolve::Carry(v),
        (_, None) => Resolve::AskLog,
        (_, Some(Logged::At(seq))) => Resolve::Carry(Verdict::Commit { seq }),
        (_, Some(Logged::Absent)) => Resolve::Carry(Verdict::Abort),
        (Heard::OriginGone | Heard::LeaseGone, Some(Logged::Unknown)) => Resolve::AskAgain,
        (Heard::Nothing, Some(Logged::Unknown)) => Resolve::Carry(Verdict::Abort),
    }
}

/// What the gate does when the commit point found the repository's replica list changed
/// since the push read it (a node joined, or a drained or displaced one was removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterMoved {
    /// This node and the replicas that prepared, counted in the new list only, are still a
    /// quorum: compare again against the new list.
    Retry,
    /// This node is not in the new list: it may not commit the repository's pushes.
    NotHere,
    /// Too few of those that prepared are in the new list (the others were removed).
    Short { prepared: usize },
}

/// [`AfterMoved`] for a push accepted on `me` and prepared on `prepared`, when the list is
/// now `list` and a push needs `need` copies.
pub(super) fn after_moved(
    list: &[String],
    me: &str,
    prepared: &[String],
    need: usize,
) -> AfterMoved {
    if !list.iter().any(|n| n == me) {
        return AfterMoved::NotHere;
    }
    let still = 1 + prepared
        .iter()
        .filter(|p| *p != me && list.contains(p))
        .count();
    if still >= need {
        AfterMoved::Retry
    } else {
        AfterMoved::Short { prepared: still }
    }
}

/// One step of a repository's placement upkeep, as one node sees it ([`upkeep`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Upkeep {
    /// Nothing for this node to do.
    Nothing,
    /// This node copies the repository, then adds itself to the list: the list has fewer
    /// than K replicas that are not draining (filling up), or this node is in the
    /// rendezvous top K of the eligible nodes and not listed (rebalancing; K+1 copies until
    /// the displaced one leaves).
    Join,
    /// This node removes these replicas from the list: draining, or displaced by a better
    /// ranked one; the K kept are live and have applied the whole log.
    Remove(Vec<String>),
}

/// The nodes a repository's placement is ranked over ([`upkeep`]'s `ranked`, in
/// rendezvous order once ranked): the eligible ones (`eligible`: live, not draining), and the
/// replicas on `list`, not draining, that have been down for less than `replace_after`
/// (`down_for`, as this node saw it): held off, they keep their place, so that no spare is
/// copied in for an outage that may be short. Past it, they rank with the down nodes (last),
/// and a spare in the top K joins.
pub(super) fn placement_nodes(
    eligible: &[String],
    list: &[String],
    draining: &BTreeSet<String>,
    down_for: impl Fn(&str) -> Duration,
    replace_after: Duration,
) -> Vec<String> {
    let mut nodes = eligible.to_vec();
    for n in list {
        if !nodes.contains(n) && !draining.contains(n) && down_for(n) < replace_after {
            nodes.push(n.clone());
        }
    }
    nodes.sort();
    nodes
}

/// What becomes of this node's copy of a repository whose list (as the upkeep round read it)
/// does not name this node ([`removed_copy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RemovedCopy {
    /// Not unlisted for `--delete-removed-after` yet: kept for now.
    Wait,
    /// Unlisted long enough: read the list from etcd again before anything is deleted.
    ReadList,
    /// Listed again (a join, or the cache was stale): kept, its clock stopped.
    Keep,
    /// Still unlisted, but a request reads it, a pack stream of it is held or a catch-up of
    /// it runs: tried again next round.
    InUse,
    /// Still unlisted, long enough, and nobody uses it: deleted.
    Delete,
}

/// [`RemovedCopy`] for a copy unlisted for `unlisted_for` (this node's view), deleted after
/// `after`; `listed_now` is the list read again (`None`: not read yet), `in_use` whether
/// anything reads or writes it.
pub(super) fn removed_copy(
    unlisted_for: Duration,
    after: Duration,
    listed_now: Option<bool>,
    in_use: bool,
) -> RemovedCopy {
    if unlisted_for < after {
        return RemovedCopy::Wait;
    }
    match listed_now {
        None => RemovedCopy::ReadList,
        Some(true) => RemovedCopy::Keep,
        Some(false) if in_use => RemovedCopy::InUse,
        Some(false) => RemovedCopy::Delete,
    }
}

/// What `me` does for a repository listed on `list`, when `ranked` are the eligible nodes
/// (live, not draining) in the repository's rendezvous order, `draining` the nodes marked
/// draining, `k` the copies wanted and `current(node)` says whether a listed node is live and
/// has applied the whole log. Exactly one node acts on each step: the best ranked eligible
/// node missing from the list joins; the best ranked of the kept replicas removes. A list
/// longer than K (a move under way) takes no joiner until it is shrunk back: one move per
/// repository at a time.
pub(super) fn upkeep(
    me: &str,
    k: usize,
    list: &[String],
    ranked: &[String],
    draining: &BTreeSet<String>,
    current: impl Fn(&str) -> bool,
) -> Upkeep {
    let rank = |n: &String| ranked.iter().position(|r| r == n).unwrap_or(usize::MAX);
    // The replicas to keep: not draining, best ranked first (those not eligible, i.e. down,
    // after the live ones, in list order).
    let mut keep: Vec<&String> = list.iter().filter(|n| !draining.contains(*n)).collect();
    keep.sort_by_key(|n| rank(n));
    let missing: Vec<&String> = ranked.iter().filter(|n| !list.contains(n)).collect();
    if !list.iter().any(|n| n == me) {
        if draining.contains(me) || list.len() > k {
            return Upkeep::Nothing;
        }
        let joiner = if keep.len() < k {
            // Filling up: the best ranked eligible node that is not a replica.
            missing.first()
        } else {
            // Rebalancing: the best ranked of the top K that is not a replica.
            missing.iter().find(|n| rank(n) < k)
        };
        return match joiner {
            Some(j) if j.as_str() == me => Upkeep::Join,
            _ => Upkeep::Nothing,
        };
    }
    if keep.len() < k {
        return Upkeep::Nothing;
    }
    keep.truncate(k);
    let remove: Vec<String> = list.iter().filter(|n| !keep.contains(n)).cloned().collect();
    if remove.is_empty() || keep.iter().any(|n| !current(n)) {
        return Upkeep::Nothing;
    }
    if keep.first().map(|n| n.as_str()) == Some(me) {
        Upkeep::Remove(remove)
    } else {
        Upkeep::Nothing
    }
}

/// What a push the cluster refused (or acknowledged short) did, as its client is told first
/// (`ng <ref> cluster: <outcome>: <why>`): whether to retry, or whether it landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Nothing of it is in the log: no replica keeps it; the client may push again.
    NotApplied,
    /// It is in the log (committed): every replica applies it, fewer had when the client
    /// was answered.
    Landed,
    /// Nobody knows yet (etcd did not confirm the commit point): a fetch tells.
    MayHaveLanded,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Outcome::NotApplied => "not applied",
            Outcome::Landed => "landed",
            Outcome::MayHaveLanded => "may have landed",
        })
    }
}

/// What becomes of this node's copy of a repository once a push to it is over and nothing of
/// it was committed: a first push refused (a hook, no quorum) leaves a copy no entry ever
/// wrote, which a later `ls-remote`, the access rules and `git init`'s absence must not take
/// for a repository ([`unused_copy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UnusedCopy {
    /// Nothing ever landed in it, and no push is on its way into it: removed.
    Remove,
    /// The log has an entry: the copy is the repository's (or catches up to it).
    Committed,
    /// It holds refs (written before the cluster held it, or by a catch-up).
    HasRefs,
    /// Another push's pack is arriving or waiting for its prepare (a stream of the repository
    /// held here, or a quarantine in its objects): that push may still land.
    InUse,
    /// Its refs could not be read: left alone.
    Unreadable,
}

/// [`UnusedCopy`] for a copy whose repository's log head is `log_seq`, with `refs` refs
/// (`None`: unreadable), while `streams_held` pack streams of it are held here and its objects
/// hold `quarantines` quarantines.
pub(super) fn unused_copy(
    log_seq: u64,
    refs: Option<usize>,
    streams_held: usize,
    quarantines: usize,
) -> UnusedCopy {
    if log_seq > 0 {
        return UnusedCopy::Committed;
    }
    match refs {
        None => UnusedCopy::Unreadable,
        Some(n) if n > 0 => UnusedCopy::HasRefs,
        Some(_) if streams_held > 0 || quarantines > 0 => UnusedCopy::InUse,
        Some(_) => UnusedCopy::Remove,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refs::{Change, Expected};
    use gix_hash::ObjectId;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn missing_objects_are_the_clusters_only_when_the_replica_was_behind() {
        // Current throughout: the push lacks them itself.
        assert_eq!(lacking(4, 4, 4), Lacking::NotBehind);
        // Behind when the push began, caught up since.
        assert_eq!(lacking(3, 4, 4), Lacking::CaughtUp);
        // Still behind, whatever it applied meanwhile.
        assert_eq!(lacking(3, 3, 4), Lacking::Behind);
        assert_eq!(lacking(2, 3, 4), Lacking::Behind);
        // The head read before a concurrent entry was applied here.
        assert_eq!(lacking(4, 5, 4), Lacking::CaughtUp);
    }

    #[test]
    fn a_changed_list_keeps_the_push_only_if_its_prepared_replicas_are_still_a_quorum() {
        let prepared = names(&["b", "c"]);
        // A node joined: everyone who prepared is still listed.
        assert_eq!(
            after_moved(&names(&["a", "b", "c", "d"]), "a", &prepared, 2),
            AfterMoved::Retry
        );
        // c was removed: a and b are still two of the needed two.
        assert_eq!(
            after_moved(&names(&["a", "b", "d"]), "a", &names(&["c"]), 2),
            AfterMoved::Short { prepared: 1 }
        );
        assert_eq!(
            after_moved(&names(&["a", "b", "d"]), "a", &prepared, 2),
            AfterMoved::Retry
        );
        assert_eq!(
            after_moved(&names(&["a", "b", "d"]), "a", &prepared, 3),
            AfterMoved::Short { prepared: 2 }
        );
        // The accepting node itself was removed.
        assert_eq!(
            after_moved(&names(&["b", "c", "d"]), "a", &prepared, 2),
            AfterMoved::NotHere
        );
    }

    #[test]
    fn a_short_repository_is_filled_by_the_best_ranked_node_only() {
        let none = BTreeSet::new();
        let ranked = names(&["c", "a", "b"]);
        let list = names(&["a", "b"]);
        assert_eq!(
            upkeep("c", 3, &list, &ranked, &none, |_| true),
            Upkeep::Join
        );
        assert_eq!(
            upkeep("a", 3, &list, &ranked, &none, |_| true),
            Upkeep::Nothing
        );
        // Two nodes missing: only the better ranked joins first.
        let ranked = names(&["d", "c", "a"]);
        let list = names(&["a"]);
        assert_eq!(
            upkeep("d", 3, &list, &ranked, &none, |_| true),
            Upkeep::Join
        );
        assert_eq!(
            upkeep("c", 3, &list, &ranked, &none, |_| true),
            Upkeep::Nothing
        );
        // Nobody else eligible: nothing.
        assert_eq!(
            upkeep(
                "a",
                3,
                &names(&["a", "b"]),
                &names(&["a", "b"]),
                &none,
                |_| true
            ),
            Upkeep::Nothing
        );
    }

    #[test]
    fn a_draining_replica_is_replaced_first_then_removed_once_the_rest_are_current() {
        let draining = BTreeSet::from(["b".to_string()]);
        let ranked = names(&["a", "c", "d"]);
        let list = names(&["a", "b", "c"]);
        // d fills in for b; the draining node itself never joins anything.
        assert_eq!(
            upkeep("d", 3, &list, &ranked, &draining, |_| true),
            Upkeep::Join
        );
        assert_eq!(
            upkeep("b", 3, &names(&["a", "c", "d"]), &ranked, &draining, |_| {
                true
            }),
            Upkeep::Nothing
        );
        // Nobody removes b before the three kept are current.
        let four = names(&["a", "b", "c", "d"]);
        assert_eq!(
            upkeep("a", 3, &four, &ranked, &draining, |n| n != "d"),
            Upkeep::Nothing
        );
        assert_eq!(
            upkeep("a", 3, &four, &ranked, &draining, |_| true),
            Upkeep::Remove(names(&["b"]))
        );
        // Only the best ranked kept replica acts.
        assert_eq!(
            upkeep("c", 3, &four, &ranked, &draining, |_| true),
            Upkeep::Nothing
        );
        // Too few left to keep K: b stays.
        assert_eq!(
            upkeep("a", 3, &list, &names(&["a", "c"]), &draining, |_| true),
            Upkeep::Nothing
        );
    }

    #[test]
    fn a_replica_down_is_replaced_by_a_spare_live_node_and_removed_last() {
        let none = BTreeSet::new();
        // c is down: only a, b and the spare d are eligible.
        let ranked = names(&["a", "b", "d"]);
        let list = names(&["a", "b", "c"]);
        assert_eq!(
            upkeep("d", 3, &list, &ranked, &none, |_| true),
            Upkeep::Join
        );
        let four = names(&["a", "b", "c", "d"]);
        let live = |n: &str| n != "c";
        assert_eq!(
            upkeep("a", 3, &four, &ranked, &none, live),
            Upkeep::Remove(names(&["c"]))
        );
        // Not before d is current.
        assert_eq!(
            upkeep("a", 3, &four, &ranked, &none, |n| n == "a" || n == "b"),
            Upkeep::Nothing
        );
    }

    #[test]
    fn a_replica_down_for_less_than_the_hold_off_keeps_its_place() {
        let none = BTreeSet::new();
        let hold = Duration::from_secs(600);
        let list = names(&["a", "b", "c"]);
        let eligible = names(&["a", "b", "d"]);
        let down = |secs: u64| move |n: &str| Duration::from_secs(if n == "c" { secs } else { 0 });
        // c down for 9 minutes: ranked with the live nodes, so the spare d is not in the top 3
        // (c ranks above it here) and does not join; no one is removed.
        let held = placement_nodes(&eligible, &list, &none, down(540), hold);
        assert_eq!(held, names(&["a", "b", "c", "d"]));
        let ranked = names(&["c", "a", "b", "d"]);
        assert_eq!(
            upkeep("d", 3, &list, &ranked, &none, |_| true),
            Upkeep::Nothing
        );
        assert_eq!(
            upkeep("c", 3, &list, &ranked, &none, |n| n != "c"),
            Upkeep::Nothing
        );
        // 10 minutes: c is left out of the ranking and d replaces it.
        let past = placement_nodes(&eligible, &list, &none, down(600), hold);
        assert_eq!(past, eligible);
        assert_eq!(
            upkeep("d", 3, &list, &names(&["a", "b", "d"]), &none, |_| true),
            Upkeep::Join
        );
        // A draining replica is never held off; a node not listed never counts.
        let draining = BTreeSet::from(["c".to_owned()]);
        assert_eq!(
            placement_nodes(&eligible, &list, &draining, down(1), hold),
            eligible
        );
        let other = names(&["a", "b", "e"]);
        assert_eq!(
            placement_nodes(&eligible, &other, &none, |_| Duration::ZERO, hold),
            names(&["a", "b", "d", "e"])
        );
        // A zero hold-off replaces at once.
        assert_eq!(
            placement_nodes(&eligible, &list, &none, down(0), Duration::ZERO),
            eligible
        );
    }

    #[test]
    fn a_removed_copy_is_deleted_only_when_still_unlisted_long_enough_and_unused() {
        let (m, after) = (Duration::from_secs(60), Duration::from_secs(600));
        for listed in [None, Some(true), Some(false)] {
            for used in [false, true] {
                assert_eq!(removed_copy(9 * m, after, listed, used), RemovedCopy::Wait);
            }
        }
        assert_eq!(
            removed_copy(after, after, None, false),
            RemovedCopy::ReadList
        );
        assert_eq!(
            removed_copy(after, after, None, true),
            RemovedCopy::ReadList
        );
        assert_eq!(
            removed_copy(11 * m, after, Some(true), false),
            RemovedCopy::Keep
        );
        assert_eq!(
            removed_copy(11 * m, after, Some(true), true),
            RemovedCopy::Keep
        );
        assert_eq!(
            removed_copy(11 * m, after, Some(false), true),
            RemovedCopy::InUse
        );
        assert_eq!(
            removed_copy(11 * m, after, Some(false), false),
            RemovedCopy::Delete
        );
        assert_eq!(
            removed_copy(Duration::ZERO, Duration::ZERO, Some(false), false),
            RemovedCopy::Delete
        );
    }

    #[test]
    fn a_new_node_in_the_top_k_joins_and_the_displaced_replica_is_removed() {
        let none = BTreeSet::new();
        let ranked = names(&["a", "d", "b", "c"]);
        let list = names(&["a", "b", "c"]);
        assert_eq!(
            upkeep("d", 3, &list, &ranked, &none, |_| true),
            Upkeep::Join
        );
        // Not in the top K: it stays out.
        let ranked_low = names(&["a", "b", "c", "d"]);
        assert_eq!(
            upkeep("d", 3, &list, &ranked_low, &none, |_| true),
            Upkeep::Nothing
        );
        let four = names(&["a", "b", "c", "d"]);
        assert_eq!(
            upkeep("a", 3, &four, &ranked, &none, |_| true),
            Upkeep::Remove(names(&["c"]))
        );
        // A move under way takes no other joiner.
        let ranked5 = names(&["e", "a", "d", "b", "c"]);
        assert_eq!(
            upkeep("e", 3, &four, &ranked5, &none, |_| true),
            Upkeep::Nothing
        );
    }

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes_or_panic(&[n; 20])
    }

    fn update(name: &str, old: Option<u8>, new: u8) -> RefUpdate {
        RefUpdate {
            name: name.into(),
            change: match old {
                None => Change::Create { new: id(new) },
                Some(o) => Change::Update {
                    old: Expected::MustBe(id(o)),
                    new: id(new),
                },
            },
        }
    }

    fn entry(seq: u64, txid: &str, updates: Vec<RefUpdate>) -> Entry {
        Entry {
            seq,
            txid: txid.into(),
            origin: "n0".into(),
            updates,
            shallow: Vec::new(),
        }
    }

    #[test]
    fn quorum_of_k_replicas() {
        for (ack, k, need) in [
            (Ack::Majority, 1, 1),
            (Ack::Majority, 2, 2),
            (Ack::Majority, 3, 2),
            (Ack::Majority, 5, 3),
            (Ack::All, 3, 3),
        ] {
            assert_eq!(needed(ack, k), need, "{ack:?} {k}");
        }
        // Three replicas, majority: the accepting one and one other.
        assert_eq!(quorum(1, 2), Quorum::Met);
        assert_eq!(quorum(0, 2), Quorum::Short { prepared: 1 });
        assert_eq!(quorum(2, 3), Quorum::Met);
        assert_eq!(quorum(1, 3), Quorum::Short { prepared: 2 });
    }

    #[test]
    fn a_replica_against_the_log() {
        assert_eq!(position(4, 4), Position::Current);
        assert_eq!(position(3, 4), Position::Behind);
        assert_eq!(position(0, 1), Position::Behind);
        assert_eq!(position(5, 4), Position::Ahead);
    }

    #[test]
    fn winners_of_a_lost_compare() {
        let push = [
            update("refs/heads/main", Some(1), 2),
            update("refs/heads/dev", None, 3),
        ];
        // Other refs only: disjoint.
        let others = [entry(5, "b", vec![update("refs/heads/other", None, 9)])];
        assert_eq!(winners(&others, "a", &push), Winners::Disjoint);
        // No entries (nothing won): disjoint.
        assert_eq!(winners(&[], "a", &push), Winners::Disjoint);
        // The same ref: lost, that ref only.
        let same = [
            entry(5, "b", vec![update("refs/heads/x", None, 9)]),
            entry(6, "c", vec![update("refs/heads/dev", None, 4)]),
        ];
        assert_eq!(winners(&same, "a", &push), Winners::Overlap(vec![1]));
        // A ref above or below one of them (a directory/file conflict): lost.
        let above = [entry(5, "b", vec![update("refs/heads/main/x", None, 9)])];
        assert_eq!(winners(&above, "a", &push), Winners::Overlap(vec![0]));
        let below = [entry(5, "b", vec![update("refs/heads", None, 9)])];
        assert_eq!(winners(&below, "a", &push), Winners::Overlap(vec![0, 1]));
        // Its own entry among them (the answer to its compare was lost): committed there.
        let ours = [
            entry(5, "b", vec![update("refs/heads/main", Some(1), 7)]),
            entry(6, "a", push.to_vec()),
        ];
        assert_eq!(winners(&ours, "a", &push), Winners::Ours(6));
    }

    /// The fault script's seed 31: an entry that left `main` at the value this push expects
    /// (1 → 7 → 1) was once taken for no conflict; two replicas then stuck at entry 230, each
    /// with different refs. It is a conflict.
    #[test]
    fn an_entry_that_left_the_ref_at_the_expected_value_is_a_conflict() {
        let push = [update("refs/heads/main", Some(1), 2)];
        let there_and_back = [
            entry(229, "b", vec![update("refs/heads/main", Some(1), 7)]),
            entry(230, "c", vec![update("refs/heads/main", Some(7), 1)]),
        ];
        assert_eq!(
            winners(&there_and_back, "a", &push),
            Winners::Overlap(vec![0])
        );
    }

    #[test]
    fn touches_the_same_ref_and_the_refs_above_and_below_it() {
        let touched: std::collections::BTreeSet<Vec<u8>> =
            [&b"refs/heads/a/b"[..], b"refs/heads/c", b"refs/tags/v1"]
                .iter()
                .map(|n| n.to_vec())
                .collect();
        for (name, yes) in [
            (&b"refs/heads/a/b"[..], true),
            (b"refs/heads/a", true),
            (b"refs/heads/a/b/c", true),
            (b"refs/heads/c/d", true),
            (b"refs/heads/c", true),
            (b"refs/heads/ab", false),
            (b"refs/heads/a-b", false),
            (b"refs/heads/cc", false),
            (b"refs/tags/v", false),
            (b"refs/tags/v10", false),
        ] {
            assert_eq!(
                touches(&touched, name),
                yes,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn after_a_lost_compare() {
        assert_eq!(
            after_lost_compare(Winners::Ours(9), 1),
            AfterLost::Committed(9)
        );
        assert_eq!(after_lost_compare(Winners::Disjoint, 1), AfterLost::Retry);
        assert_eq!(
            after_lost_compare(Winners::Disjoint, RETRY.lost_compare_rounds - 1),
            AfterLost::Retry
        );
        assert_eq!(
            after_lost_compare(Winners::Disjoint, RETRY.lost_compare_rounds),
            AfterLost::GiveUp
        );
        assert_eq!(
            after_lost_compare(Winners::Overlap(vec![2]), 1),
            AfterLost::Lost(vec![2])
        );
    }

    /// The timings the cluster tests rely on: an entry too large is refused at once; etcd
    /// unavailable is retried every 300 ms for about 15 s.
    #[test]
    fn the_commit_point_retries_etcd_for_15_seconds_and_a_refusal_never() {
        let b = RETRY.etcd;
        assert_eq!(b.after(Failure::Refused, Duration::ZERO), Next::GiveUp);
        assert_eq!(
            b.after(Failure::Unavailable, Duration::ZERO),
            Next::Again(Duration::from_millis(300))
        );
        assert_eq!(
            b.after(Failure::Unavailable, Duration::from_secs(15)),
            Next::Again(Duration::from_millis(300))
        );
        assert_eq!(
            b.after(Failure::Unavailable, Duration::from_millis(15_001)),
            Next::GiveUp
        );
        assert_eq!(RETRY.lost_compare_rounds, 64);
        assert_eq!(RETRY.lost_ref_batches, 3);
    }

    #[test]
    fn verdicts_on_the_wire_and_from_the_log() {
        for v in [Verdict::Commit { seq: 7 }, Verdict::Abort] {
            let q = format!("repo=r&txid=ab&{}", v.query());
            let q: super::super::wire::DecideQuery =
                super::super::wire::decode_query("decide", &q).unwrap();
            assert_eq!(Verdict::parse(q.verdict, q.seq.map(|s| s.0)), Some(v));
        }
        // A commit names an entry; anything else is no verdict.
        assert_eq!(Verdict::parse(VerdictWord::Commit, Some(0)), None);
        assert_eq!(Verdict::parse(VerdictWord::Commit, None), None);
        assert_eq!(
            Verdict::parse(VerdictWord::Abort, Some(3)),
            Some(Verdict::Abort)
        );
    }

    /// A prepared replica: the verdict when told; else the log's (asked at once when the
    /// accepting node's connection closed or its lease is gone, or at the decision timeout), asked again while etcd
    /// cannot say until the timeout, then aborted.
    #[test]
    fn what_a_prepared_replica_does_with_what_it_heard() {
        let commit = Verdict::Commit { seq: 4 };
        for logged in [None, Some(Logged::At(9)), Some(Logged::Absent)] {
            assert_eq!(
                resolve(Heard::Verdict(commit), logged),
                Resolve::Carry(commit)
            );
            assert_eq!(
                resolve(Heard::Verdict(Verdict::Abort), logged),
                Resolve::Carry(Verdict::Abort)
            );
        }
        for heard in [Heard::OriginGone, Heard::LeaseGone, Heard::Nothing] {
            assert_eq!(resolve(heard, None), Resolve::AskLog);
            assert_eq!(resolve(heard, Some(Logged::At(4))), Resolve::Carry(commit));
            assert_eq!(
                resolve(heard, Some(Logged::Absent)),
                Resolve::Carry(Verdict::Abort)
            );
        }
        for heard in [Heard::OriginGone, Heard::LeaseGone] {
            assert_eq!(resolve(heard, Some(Logged::Unknown)), Resolve::AskAgain);
        }
        assert_eq!(
            resolve(Heard::Nothing, Some(Logged::Unknown)),
            Resolve::Carry(Verdict::Abort)
        );
        let live = ["n0".to_owned(), "n2".to_owned()];
        assert!(!origin_lost("n0", &live));
        assert!(origin_lost("n1", &live));
        assert!(origin_lost("n1", &[]));
    }

    #[test]
    fn only_a_copy_nothing_landed_in_and_nothing_is_arriving_for_is_removed() {
        assert_eq!(unused_copy(0, Some(0), 0, 0), UnusedCopy::Remove);
        assert_eq!(unused_copy(1, Some(0), 0, 0), UnusedCopy::Committed);
        assert_eq!(unused_copy(3, Some(5), 1, 1), UnusedCopy::Committed);
        assert_eq!(unused_copy(0, Some(2), 0, 0), UnusedCopy::HasRefs);
        assert_eq!(unused_copy(0, Some(0), 1, 0), UnusedCopy::InUse);
        assert_eq!(unused_copy(0, Some(0), 0, 1), UnusedCopy::InUse);
        assert_eq!(unused_copy(0, None, 0, 0), UnusedCopy::Unreadable);
    }

    #[test]
    fn the_outcomes_read_as_the_client_is_told_them() {
        assert_eq!(Outcome::NotApplied.to_string(), "not applied");
        assert_eq!(Outcome::Landed.to_string(), "landed");
        assert_eq!(Outcome::MayHaveLanded.to_string(), "may have landed");
    }
}
