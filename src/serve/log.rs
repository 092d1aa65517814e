//! The access log (one line per request, written when its response is done) and the
//! Prometheus counters derived from it and from each push's [`receive::Outcome`].

use super::*;

/// Counters for `/metrics`.
#[derive(Default)]
pub(super) struct Metrics {
    pub(super) requests: Mutex<HashMap<(&'static str, u16), u64>>,
    /// Pushes by [`receive::PushResult`]: ok, partial, rejected, error.
    pub(super) pushes: [AtomicU64; 4],
    pub(super) refs_updated: AtomicU64,
    pub(super) refs_refused: AtomicU64,
    pub(super) push_bytes: AtomicU64,
    pub(super) push_micros: AtomicU64,
    pub(super) pushes_in_flight: AtomicU64,
    pub(super) fetch_bytes_out: AtomicU64,
}

impl Metrics {
    pub(super) fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("# HELP berth_http_requests_total HTTP requests by service and status.\n");
        s.push_str("# TYPE berth_http_requests_total counter\n");
        let mut rows: Vec<_> = self
            .requests
            .lock()
            .map(|m| m.iter().map(|(k, v)| (*k, *v)).collect())
            .unwrap_or_default();
        rows.sort();
        for ((service, code), n) in rows {
            s.push_str(&format!(
                "berth_http_requests_total{{service=\"{service}\",code=\"{code}\"}} {n}\n"
            ));
        }
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        s.push_str("# HELP berth_pushes_total Pushes (POST git-receive-pack with commands) by result: every ref accepted (ok), some (partial), none (rejected), or the pack or session failed (error).\n");
        s.push_str("# TYPE berth_pushes_total counter\n");
        for (i, result) in PUSH_RESULTS.iter().enumerate() {
            s.push_str(&format!(
                "berth_pushes_total{{result=\"{}\"}} {}\n",
                result.as_str(),
                get(&self.pushes[i])
            ));
        }
        s.push_str("# HELP berth_push_refs_total Pushed refs by what the client was told: updated (ok) or refused (ng).\n");
        s.push_str("# TYPE berth_push_refs_total counter\n");
        s.push_str(&format!(
            "berth_push_refs_total{{result=\"updated\"}} {}\nberth_push_refs_total{{result=\"refused\"}} {}\n",
            get(&self.refs_updated),
            get(&self.refs_refused)
        ));
        s.push_str("# TYPE berth_push_request_bytes_total counter\n");
        s.push_str(&format!(
            "berth_push_request_bytes_total {}\n",
            get(&self.push_bytes)
        ));
        s.push_str("# TYPE berth_push_duration_seconds_sum counter\n");
        s.push_str(&format!(
            "berth_push_duration_seconds_sum {:.6}\n",
            get(&self.push_micros) as f64 / 1e6
        ));
        s.push_str("# TYPE berth_pushes_in_flight gauge\n");
        s.push_str(&format!(
            "berth_pushes_in_flight {}\n",
            get(&self.pushes_in_flight)
        ));
        s.push_str("# TYPE berth_fetch_response_bytes_total counter\n");
        s.push_str(&format!(
            "berth_fetch_response_bytes_total {}\n",
            get(&self.fetch_bytes_out)
        ));
        s
    }
}

/// One request's access-log record: written (one line) and counted when the last holder drops
/// it, which for a streamed response is when its body has been sent or abandoned.
pub(super) struct Access {
    pub(super) start: Instant,
    pub(super) method: Method,
    pub(super) route: &'static str,
    pub(super) repo: String,
    pub(super) remote: SocketAddr,
    pub(super) user: Mutex<String>,
    pub(super) status: AtomicU16,
    pub(super) bytes_in: AtomicU64,
    pub(super) bytes_out: AtomicU64,
    pub(super) too_large: std::sync::atomic::AtomicBool,
    pub(super) outcome: Mutex<Option<String>>,
    /// What the push session did, when it read a request.
    pub(super) push: Mutex<Option<PushSummary>>,
    pub(super) metrics: Arc<Metrics>,
}

/// A push's outcome as the access log and the metrics count it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PushSummary {
    pub(super) result: receive::PushResult,
    pub(super) updated: usize,
    pub(super) refused: usize,
}

/// The results in `berth_pushes_total`'s order.
pub(super) const PUSH_RESULTS: [receive::PushResult; 4] = [
    receive::PushResult::Ok,
    receive::PushResult::Partial,
    receive::PushResult::Rejected,
    receive::PushResult::Error,
];

impl Access {
    pub(super) fn set_status(&self, s: StatusCode) {
        self.status.store(s.as_u16(), Ordering::Relaxed);
    }
    /// Record what went wrong; the first reason wins.
    pub(super) fn set_outcome(&self, o: impl Into<String>) {
        if let Ok(mut g) = self.outcome.lock()
            && g.is_none()
        {
            *g = Some(o.into());
        }
    }
    pub(super) fn set_push(&self, outcome: &receive::Outcome) {
        if !outcome.requested {
            return;
        }
        if let Ok(mut g) = self.push.lock() {
            *g = Some(PushSummary {
                result: outcome.result(),
                updated: outcome.updated(),
                refused: outcome.refused(),
            });
        }
    }
    pub(super) fn set_user(&self, u: &str) {
        if let Ok(mut g) = self.user.lock() {
            *g = u.to_owned();
        }
    }
}

impl Drop for Access {
    fn drop(&mut self) {
        let status = self.status.load(Ordering::Relaxed);
        let duration = self.start.elapsed();
        let bytes_in = self.bytes_in.load(Ordering::Relaxed);
        let bytes_out = self.bytes_out.load(Ordering::Relaxed);
        let failure = self.outcome.lock().ok().and_then(|g| g.clone());
        let push = self.push.lock().ok().and_then(|g| *g);
        // A push that failed after its answer started is an error whatever the session said.
        let push = push.map(|p| match &failure {
            Some(_) => PushSummary {
                result: receive::PushResult::Error,
                ..p
            },
            None => p,
        });
        let outcome = match (&failure, push) {
            (Some(f), _) => f.clone(),
            (None, Some(p)) => p.result.as_str().to_owned(),
            (None, None) => "ok".to_owned(),
        };
        let (refs_updated, refs_refused) = push.map_or((0, 0), |p| (p.updated, p.refused));
        let user = self.user.lock().map(|g| g.clone()).unwrap_or_default();
        tracing::info!(
            target: "berth::serve",
            method = %self.method,
            route = self.route,
            repo = %Escaped::token(&self.repo),
            user = %Escaped::token(&user),
            remote = %self.remote.ip(),
            status,
            bytes_in,
            bytes_out,
            duration_ms = %format_args!("{:.3}", duration.as_secs_f64() * 1e3),
            refs_updated,
            refs_refused,
            outcome = %Escaped::text(&outcome),
            "request"
        );
        let m = &self.metrics;
        if let Ok(mut r) = m.requests.lock() {
            *r.entry((self.route, status)).or_default() += 1;
        }
        if self.route == "receive-pack" {
            m.push_bytes.fetch_add(bytes_in, Ordering::Relaxed);
            m.push_micros
                .fetch_add(duration.as_micros() as u64, Ordering::Relaxed);
            let result = match push {
                Some(p) if status == 200 => Some(p.result),
                // A flush-only probe, or a request the session never read: not a push.
                None if status == 200 && failure.is_none() => None,
                _ => Some(receive::PushResult::Error),
            };
            if let Some(result) = result {
                let i = PUSH_RESULTS.iter().position(|r| *r == result).unwrap_or(3);
                m.pushes[i].fetch_add(1, Ordering::Relaxed);
            }
            m.refs_updated
                .fetch_add(refs_updated as u64, Ordering::Relaxed);
            m.refs_refused
                .fetch_add(refs_refused as u64, Ordering::Relaxed);
        } else if self.route == "upload-pack" {
            m.fetch_bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        }
    }
}

pub(super) fn metrics_response(server: &Server) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        server.metrics.render(),
    )
        .into_response()
}
