//! `GET /metrics`: Prometheus counters, gauges and histograms (the `prometheus-client` crate,
//! OpenMetrics text), fed by the access log (each request and each push's
//! [`receive::Outcome`]), the connection layer, authentication, and a tracing layer that times
//! the phases of every push ([`phase_layer`]); with `--cluster`, the cluster's series too
//! ([`cluster::ClusterMetrics`], registered here, counted by the cluster).

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::*;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RequestLabels {
    service: &'static str,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PhaseLabel {
    phase: &'static str,
}

fn seconds_histogram() -> Histogram {
    // 1 ms … ~33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Time spent in each phase of a push, filled by [`phase_layer`] (process-wide: the tracing
/// subscriber is).
type PhaseFamily = Family<PhaseLabel, Histogram, fn() -> Histogram>;
static PHASES: LazyLock<PhaseFamily> =
    LazyLock::new(|| Family::new_with_constructor(seconds_histogram));

/// The phases of a push as [`crate::receive`] names its spans.
const PHASE_NAMES: [&str; 11] = [
    "advertise",
    "read_commands",
    "ingest",
    "connectivity",
    "pre_receive",
    "migrate",
    "update",
    "proc_receive",
    "report",
    "post_receive",
    "auto_gc",
];

/// A tracing layer that times the push phases' spans into `berth_push_phase_seconds`.
/// `berth serve` installs it beside its log output.
pub fn phase_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer;
    PhaseLayer.with_filter(tracing_subscriber::filter::filter_fn(|m| {
        m.is_span() && m.target().starts_with("berth::receive")
    }))
}

struct PhaseLayer;

struct Started(Instant, &'static str);

impl<S> tracing_subscriber::Layer<S> for PhaseLayer
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let name = attrs.metadata().name();
        if let Some(phase) = PHASE_NAMES.iter().find(|p| **p == name)
            && let Some(span) = ctx.span(id)
        {
            span.extensions_mut().insert(Started(Instant::now(), phase));
        }
    }
    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(Started(t, phase)) = span.extensions_mut().remove::<Started>()
        {
            PHASES
                .get_or_create(&PhaseLabel { phase })
                .observe(t.elapsed().as_secs_f64());
        }
    }
}

/// Everything `/metrics` shows.
pub(super) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    /// Pushes by [`receive::PushResult`]: ok, partial, rejected, error.
    pushes: Family<ResultLabel, Counter>,
    refs: Family<ResultLabel, Counter>,
    push_bytes: Counter,
    push_seconds: Histogram,
    pub(super) pushes_in_flight: Gauge,
    fetch_bytes: Counter,
    pub(super) upload_packs: Gauge,
    pub(super) open_connections: Gauge,
    pub(super) rejected_connections: Counter,
    auth_failures: Family<ReasonLabel, Counter>,
    rate_limited: Counter,
    pub(super) password_verifications: Counter,
    pub(super) auth_cache_hits: Counter,
    timeouts: Family<ReasonLabel, Counter>,
    busy: Family<ReasonLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(None)
    }
}

impl Metrics {
    /// Every series of the server, and with `--cluster` the cluster's.
    pub(super) fn new(cluster: Option<&cluster::ClusterMetrics>) -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            requests: Default::default(),
            pushes: Default::default(),
            refs: Default::default(),
            push_bytes: Default::default(),
            push_seconds: seconds_histogram(),
            pushes_in_flight: Default::default(),
            fetch_bytes: Default::default(),
            upload_packs: Default::default(),
            open_connections: Default::default(),
            rejected_connections: Default::default(),
            auth_failures: Default::default(),
            rate_limited: Default::default(),
            password_verifications: Default::default(),
            auth_cache_hits: Default::default(),
            timeouts: Default::default(),
            busy: Default::default(),
        };
        let r = &mut registry;
        r.register(
            "berth_http_requests",
            "HTTP requests by service and status",
            m.requests.clone(),
        );
        r.register(
            "berth_pushes",
            "Pushes (POST git-receive-pack with commands) by result: every ref accepted (ok), some (partial), none (rejected), or the pack or session failed (error)",
            m.pushes.clone(),
        );
        r.register(
            "berth_push_refs",
            "Pushed refs by what the client was told: updated (ok) or refused (ng)",
            m.refs.clone(),
        );
        r.register(
            "berth_push_request_bytes",
            "Request bytes of pushes, after gzip decoding",
            m.push_bytes.clone(),
        );
        r.register(
            "berth_push_duration_seconds",
            "Time from a push's request to the end of its response",
            m.push_seconds.clone(),
        );
        r.register(
            "berth_push_phase_seconds",
            "Time spent in each phase of a push session",
            PHASES.clone(),
        );
        r.register(
            "berth_pushes_in_flight",
            "Push sessions running",
            m.pushes_in_flight.clone(),
        );
        r.register(
            "berth_fetch_response_bytes",
            "Response bytes of git-upload-pack (fetch and clone)",
            m.fetch_bytes.clone(),
        );
        r.register(
            "berth_upload_packs_in_flight",
            "git upload-pack processes running",
            m.upload_packs.clone(),
        );
        r.register(
            "berth_open_connections",
            "Open client connections",
            m.open_connections.clone(),
        );
        r.register(
            "berth_rejected_connections",
            "Connections answered 503 at the connection cap (--max-connections)",
            m.rejected_connections.clone(),
        );
        r.register(
            "berth_auth_failures",
            "Failed authentications by reason",
            m.auth_failures.clone(),
        );
        r.register(
            "berth_auth_rate_limited",
            "Requests refused with 429 after too many failed authentications",
            m.rate_limited.clone(),
        );
        r.register(
            "berth_password_verifications",
            "argon2 password verifications run (a cached credential needs none)",
            m.password_verifications.clone(),
        );
        r.register(
            "berth_auth_cache_hits",
            "Requests authenticated from the credential cache",
            m.auth_cache_hits.clone(),
        );
        r.register(
            "berth_timeouts",
            "Connections or requests ended by a limit: header_read, keepalive, write, body_rate, idle_body, evicted",
            m.timeouts.clone(),
        );
        r.register(
            "berth_busy",
            "Requests answered 503 because a bounded resource stayed full: push_slot, upload_pack, auth",
            m.busy.clone(),
        );
        if let Some(c) = cluster {
            c.register(r);
        }
        Metrics { registry, ..m }
    }
}

impl Metrics {
    pub(super) fn render(&self) -> String {
        let mut s = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
    pub(super) fn request(&self, service: &'static str, code: u16) {
        self.requests
            .get_or_create(&RequestLabels { service, code })
            .inc();
    }
    pub(super) fn push(
        &self,
        result: Option<receive::PushResult>,
        updated: usize,
        refused: usize,
        bytes: u64,
        duration: Duration,
    ) {
        if let Some(r) = result {
            self.pushes
                .get_or_create(&ResultLabel { result: r.as_str() })
                .inc();
        }
        self.refs
            .get_or_create(&ResultLabel { result: "updated" })
            .inc_by(updated as u64);
        self.refs
            .get_or_create(&ResultLabel { result: "refused" })
            .inc_by(refused as u64);
        self.push_bytes.inc_by(bytes);
        self.push_seconds.observe(duration.as_secs_f64());
    }
    pub(super) fn fetch(&self, bytes: u64) {
        self.fetch_bytes.inc_by(bytes);
    }
    pub(super) fn auth_failure(&self, reason: &'static str) {
        self.auth_failures
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }
    pub(super) fn rate_limited(&self) {
        self.rate_limited.inc();
    }
    pub(super) fn timeout(&self, reason: &'static str) {
        self.timeouts.get_or_create(&ReasonLabel { reason }).inc();
    }
    pub(super) fn busy(&self, reason: &'static str) {
        self.busy.get_or_create(&ReasonLabel { reason }).inc();
    }
    /// Every result shows up (at 0) from the start.
    pub(super) fn init(&self) {
        for r in PUSH_RESULTS {
            let _ = self
                .pushes
                .get_or_create(&ResultLabel { result: r.as_str() });
        }
        for result in ["updated", "refused"] {
            let _ = self.refs.get_or_create(&ResultLabel { result });
        }
    }
}

pub(super) fn metrics_response(server: &Server) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        server.metrics.render(),
    )
        .into_response()
}
