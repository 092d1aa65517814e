//! The cluster's series in `/metrics` (`berth serve --cluster` only: [`ClusterMetrics`] is
//! registered into the server's registry when the node joins a cluster, and nothing of it
//! without). The gate, the catch-up, the resync and the etcd client count into it at the points
//! where things happen; the decisions themselves (`decide.rs`) count nothing.
//!
//! - `berth_cluster_prepares_total{outcome}`: the other replicas' answers to the prepare
//!   requests of pushes accepted here ([`PrepareOutcome`]);
//! - `berth_cluster_quorum_failures_total`: batches refused here because fewer than the quorum
//!   prepared;
//! - `berth_cluster_commits_total`: entries this node put in a log (commit points won);
//! - `berth_cluster_lost_compares_total`: commit-point compares lost to another push's entry
//!   (each round);
//! - `berth_cluster_catchups_total{outcome}`, `berth_cluster_resyncs_total{outcome}`: this
//!   replica's catch-ups and full resyncs ([`CatchUpOutcome`], [`ResyncOutcome`]);
//! - `berth_cluster_etcd_request_seconds{op}` (histogram) and
//!   `berth_cluster_etcd_failures_total{op}`: every etcd request but the long-lived watches,
//!   from the first endpoint tried to the answer ([`etcd::Call`]);
//! - `berth_cluster_replica_lag_entries{repo,replica}`: per repository this node holds a
//!   replica of, and per replica of it, the log head's sequence number minus that replica's
//!   applied entry (this node's own exactly, the others' as they last published it). Set by
//!   [`Cluster::follow`](super::Cluster::follow)'s round every few seconds from what that round
//!   reads of etcd anyway (plus one range read of the repository's `applied/` keys), never by a
//!   scrape. The labels are repository and node names (validated as such, and escaped by
//!   prometheus-client's encoder); their number is bounded by the repositories placed on this
//!   node times their replicas: a repository this node does not hold has no series here.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::etcd;

/// How another replica answered a prepare request of a push accepted here.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub(super) enum PrepareOutcome {
    /// It prepared the transaction.
    Prepared,
    /// It answered that it did not (behind, no copy, the pack missing, a lock held).
    Refused,
    /// No answer: it could not be reached, or the request failed.
    Unreachable,
    /// Still preparing when the quorum's grace ran out: left out.
    Late,
}

/// How a catch-up ended (one that found another catch-up of the repository running is not
/// counted).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub(super) enum CatchUpOutcome {
    /// It applied entries (or resynced).
    Applied,
    /// There was nothing to apply by the time it looked.
    Current,
    /// It stopped on an error (it is tried again).
    Failed,
}

/// How a full resync ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub(super) enum ResyncOutcome {
    /// Another replica's refs were copied.
    Copied,
    /// No replica could be copied.
    Failed,
}

impl PrepareOutcome {
    const ALL: [PrepareOutcome; 4] = [
        PrepareOutcome::Prepared,
        PrepareOutcome::Refused,
        PrepareOutcome::Unreachable,
        PrepareOutcome::Late,
    ];
    fn as_str(self) -> &'static str {
        match self {
            PrepareOutcome::Prepared => "prepared",
            PrepareOutcome::Refused => "refused",
            PrepareOutcome::Unreachable => "unreachable",
            PrepareOutcome::Late => "late",
        }
    }
}

impl CatchUpOutcome {
    const ALL: [CatchUpOutcome; 3] = [
        CatchUpOutcome::Applied,
        CatchUpOutcome::Current,
        CatchUpOutcome::Failed,
    ];
    fn as_str(self) -> &'static str {
        match self {
            CatchUpOutcome::Applied => "applied",
            CatchUpOutcome::Current => "current",
            CatchUpOutcome::Failed => "failed",
        }
    }
}

impl ResyncOutcome {
    const ALL: [ResyncOutcome; 2] = [ResyncOutcome::Copied, ResyncOutcome::Failed];
    fn as_str(self) -> &'static str {
        match self {
            ResyncOutcome::Copied => "copied",
            ResyncOutcome::Failed => "failed",
        }
    }
}

/// Label values of the enums: their `as_str`.
macro_rules! label_value {
    ($($t:ty),*) => {$(
        impl EncodeLabelValue for $t {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    )*};
}
label_value!(PrepareOutcome, CatchUpOutcome, ResyncOutcome, etcd::Call);

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PrepareLabel {
    outcome: PrepareOutcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CatchUpLabel {
    outcome: CatchUpOutcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResyncLabel {
    outcome: ResyncOutcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EtcdLabel {
    op: etcd::Call,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LagLabels {
    repo: String,
    replica: String,
}

fn etcd_histogram() -> Histogram {
    // 0.5 ms … ~16 s (an etcd call may take its timeout per endpoint).
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Every series of the cluster (see the module header).
#[derive(Debug)]
pub(crate) struct ClusterMetrics {
    prepares: Family<PrepareLabel, Counter>,
    quorum_failures: Counter,
    commits: Counter,
    lost_compares: Counter,
    catchups: Family<CatchUpLabel, Counter>,
    resyncs: Family<ResyncLabel, Counter>,
    etcd_seconds: Family<EtcdLabel, Histogram, fn() -> Histogram>,
    etcd_failures: Family<EtcdLabel, Counter>,
    lag: std::sync::Arc<Lag>,
}

impl Default for ClusterMetrics {
    fn default() -> Self {
        let m = ClusterMetrics {
            prepares: Default::default(),
            quorum_failures: Default::default(),
            commits: Default::default(),
            lost_compares: Default::default(),
            catchups: Default::default(),
            resyncs: Default::default(),
            etcd_seconds: Family::new_with_constructor(etcd_histogram),
            etcd_failures: Default::default(),
            lag: Default::default(),
        };
        // Every outcome shows up (at 0) from the start.
        for outcome in PrepareOutcome::ALL {
            let _ = m.prepares.get_or_create(&PrepareLabel { outcome });
        }
        for outcome in CatchUpOutcome::ALL {
            let _ = m.catchups.get_or_create(&CatchUpLabel { outcome });
        }
        for outcome in ResyncOutcome::ALL {
            let _ = m.resyncs.get_or_create(&ResyncLabel { outcome });
        }
        m
    }
}

impl ClusterMetrics {
    /// Register every series into `r` (the server's registry).
    pub(crate) fn register(&self, r: &mut Registry) {
        r.register(
            "berth_cluster_prepares",
            "Other replicas' answers to the prepare requests of pushes accepted here: prepared, refused, unreachable, late (still preparing when the quorum's grace ran out)",
            self.prepares.clone(),
        );
        r.register(
            "berth_cluster_quorum_failures",
            "Push batches refused here because fewer replicas than the quorum prepared",
            self.quorum_failures.clone(),
        );
        r.register(
            "berth_cluster_commits",
            "Log entries this node committed (etcd commit points won)",
            self.commits.clone(),
        );
        r.register(
            "berth_cluster_lost_compares",
            "Commit-point compares lost to another push's entry, each round",
            self.lost_compares.clone(),
        );
        r.register(
            "berth_cluster_catchups",
            "Catch-ups of this node's replicas by outcome: applied (entries or a resync), current (nothing to apply), failed",
            self.catchups.clone(),
        );
        r.register(
            "berth_cluster_resyncs",
            "Full resyncs of this node's replicas by outcome: copied, failed",
            self.resyncs.clone(),
        );
        r.register(
            "berth_cluster_etcd_request_seconds",
            "Time of each etcd request (watches aside), every endpoint it tried included, by operation",
            self.etcd_seconds.clone(),
        );
        r.register(
            "berth_cluster_etcd_failures",
            "etcd requests that failed (no endpoint answered, or an error answer), by operation",
            self.etcd_failures.clone(),
        );
        r.register_collector(Box::new(self.lag.clone()));
    }

    pub(super) fn prepare(&self, outcome: PrepareOutcome, n: u64) {
        self.prepares
            .get_or_create(&PrepareLabel { outcome })
            .inc_by(n);
    }

    pub(super) fn quorum_failure(&self) {
        self.quorum_failures.inc();
    }

    pub(super) fn commit(&self) {
        self.commits.inc();
    }

    pub(super) fn lost_compare(&self) {
        self.lost_compares.inc();
    }

    pub(super) fn catch_up(&self, outcome: CatchUpOutcome) {
        self.catchups.get_or_create(&CatchUpLabel { outcome }).inc();
    }

    pub(super) fn resync(&self, outcome: ResyncOutcome) {
        self.resyncs.get_or_create(&ResyncLabel { outcome }).inc();
    }

    /// The lags of one round of [`Cluster::follow`](super::Cluster::follow): every
    /// repository this node holds, each replica's lag; replaces the last round's.
    pub(super) fn set_lags(&self, lags: Lags) {
        if let Ok(mut l) = self.lag.0.lock() {
            *l = lags;
        }
    }
}

/// Per repository and replica, how many entries it is behind its log's head.
pub(super) type Lags = BTreeMap<(String, String), u64>;

/// Each replica of a repository at log entry `head` and its lag: `me` (this node) at `mine`,
/// exactly; the others at what they `published` (none published: the whole log).
pub(super) fn lags_of(
    head: u64,
    replicas: &[String],
    me: &str,
    mine: u64,
    published: impl Fn(&str) -> Option<u64>,
) -> Vec<(String, u64)> {
    replicas
        .iter()
        .map(|r| {
            let at = if r == me {
                mine
            } else {
                published(r).unwrap_or(0)
            };
            (r.clone(), head.saturating_sub(at))
        })
        .collect()
}

/// The lag gauges, as the last round set them, encoded when scraped.
#[derive(Debug, Default)]
struct Lag(Mutex<Lags>);

impl Collector for Lag {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let family = Family::<LagLabels, Gauge>::default();
        if let Ok(lags) = self.0.lock() {
            for ((repo, replica), lag) in lags.iter() {
                let labels = LagLabels {
                    repo: repo.clone(),
                    replica: replica.clone(),
                };
                family
                    .get_or_create(&labels)
                    .set(i64::try_from(*lag).unwrap_or(i64::MAX));
            }
        }
        let metric = encoder.encode_descriptor(
            "berth_cluster_replica_lag_entries",
            "Per repository this node holds and per replica of it: the log head's sequence number minus the replica's last applied entry (this node's exact, the others' as they last published it, every few seconds)",
            None,
            family.metric_type(),
        )?;
        family.encode(metric)
    }
}

impl etcd::Observe for ClusterMetrics {
    fn request(&self, op: etcd::Call, took: Duration, ok: bool) {
        let label = EtcdLabel { op };
        self.etcd_seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if !ok {
            self.etcd_failures.get_or_create(&label).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn render(m: &ClusterMetrics) -> String {
        let mut r = Registry::default();
        m.register(&mut r);
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &r).unwrap();
        s
    }

    #[test]
    fn lag_is_the_head_minus_what_each_replica_applied() {
        let published = |n: &str| match n {
            "b" => Some(4),
            "c" => Some(9),
            _ => None,
        };
        assert_eq!(
            lags_of(7, &names(&["a", "b", "c", "d"]), "a", 7, published),
            vec![
                ("a".to_owned(), 0),
                ("b".to_owned(), 3),
                // Published ahead of the head this node read (it read the head first).
                ("c".to_owned(), 0),
                // Nothing published: the whole log.
                ("d".to_owned(), 7),
            ]
        );
        // This node's own value is its own, whatever it published.
        assert_eq!(
            lags_of(7, &names(&["b"]), "b", 7, published),
            vec![("b".to_owned(), 0)]
        );
    }

    #[test]
    fn every_series_is_exposed_with_outcomes_from_enums() {
        let m = ClusterMetrics::default();
        let text = render(&m);
        for line in [
            "berth_cluster_prepares_total{outcome=\"prepared\"} 0",
            "berth_cluster_prepares_total{outcome=\"late\"} 0",
            "berth_cluster_quorum_failures_total 0",
            "berth_cluster_commits_total 0",
            "berth_cluster_lost_compares_total 0",
            "berth_cluster_catchups_total{outcome=\"current\"} 0",
            "berth_cluster_resyncs_total{outcome=\"copied\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        m.prepare(PrepareOutcome::Prepared, 2);
        m.prepare(PrepareOutcome::Unreachable, 1);
        m.quorum_failure();
        m.commit();
        m.lost_compare();
        m.catch_up(CatchUpOutcome::Failed);
        m.resync(ResyncOutcome::Copied);
        etcd::Observe::request(&m, etcd::Call::Txn, Duration::from_millis(3), true);
        etcd::Observe::request(&m, etcd::Call::Range, Duration::from_millis(1), false);
        let text = render(&m);
        for line in [
            "berth_cluster_prepares_total{outcome=\"prepared\"} 2",
            "berth_cluster_prepares_total{outcome=\"unreachable\"} 1",
            "berth_cluster_quorum_failures_total 1",
            "berth_cluster_commits_total 1",
            "berth_cluster_lost_compares_total 1",
            "berth_cluster_catchups_total{outcome=\"failed\"} 1",
            "berth_cluster_resyncs_total{outcome=\"copied\"} 1",
            "berth_cluster_etcd_request_seconds_count{op=\"txn\"} 1",
            "berth_cluster_etcd_request_seconds_count{op=\"range\"} 1",
            "berth_cluster_etcd_failures_total{op=\"range\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(!text.contains("etcd_failures_total{op=\"txn\"}"), "{text}");
    }

    #[test]
    fn lags_replace_the_last_round_and_labels_are_escaped_by_the_encoder() {
        let m = ClusterMetrics::default();
        let mut lags = Lags::new();
        lags.insert(("team/app".into(), "n1".into()), 3);
        lags.insert(("team/app".into(), "n2".into()), 0);
        m.set_lags(lags);
        let text = render(&m);
        assert!(
            text.contains("# TYPE berth_cluster_replica_lag_entries gauge"),
            "{text}"
        );
        assert!(
            text.contains("berth_cluster_replica_lag_entries{repo=\"team/app\",replica=\"n1\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("berth_cluster_replica_lag_entries{repo=\"team/app\",replica=\"n2\"} 0"),
            "{text}"
        );
        // A repository no longer held is gone with the next round.
        let mut lags = Lags::new();
        // Never a repository name, but the encoder is what escapes a label.
        lags.insert(("a\"b\\c\nd".into(), "n1".into()), 1);
        m.set_lags(lags);
        let text = render(&m);
        assert!(!text.contains("team/app"), "{text}");
        assert!(
            text.contains(r#"berth_cluster_replica_lag_entries{repo="a\"b\\c\nd",replica="n1"} 1"#),
            "{text}"
        );
    }
}
