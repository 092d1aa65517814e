//! The access log (one line per request, written when its response is done) and the
//! Prometheus counters derived from it and from each push's [`receive::Outcome`]. Every value
//! a client has a say in goes through [`Escaped`], so a line has exactly its fields.

use super::*;

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
    /// In a cluster, the copy of the repository this request reads here, held until the
    /// answer ends (a removed copy is not deleted meanwhile).
    pub(super) reading: Mutex<Option<crate::cluster::Reading>>,
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
    /// A new record of a request to `route` (and `repo`) from `remote`, by `user` so far,
    /// started now.
    pub(super) fn new(
        metrics: &Arc<Metrics>,
        method: Method,
        route: &'static str,
        repo: String,
        remote: SocketAddr,
        user: &str,
    ) -> Arc<Access> {
        Arc::new(Access {
            start: Instant::now(),
            method,
            route,
            repo,
            remote,
            user: Mutex::new(user.to_owned()),
            status: AtomicU16::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            too_large: Default::default(),
            outcome: Mutex::new(None),
            push: Mutex::new(None),
            metrics: metrics.clone(),
            reading: Mutex::new(None),
        })
    }

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
        // Counted before the line is written: whoever sees the line sees its counts.
        let m = &self.metrics;
        m.request(self.route, status);
        if self.route == "receive-pack" {
            let result = match push {
                Some(p) if status == 200 => Some(p.result),
                // A flush-only probe, or a request the session never read: not a push.
                None if status == 200 && failure.is_none() => None,
                _ => Some(receive::PushResult::Error),
            };
            m.push(result, refs_updated, refs_refused, bytes_in, duration);
        } else if self.route == "upload-pack" {
            m.fetch(bytes_out);
        }
        tracing::info!(
            target: "berth::serve",
            method = %Escaped::token(self.method.as_str()),
            // The server's own name for it, written quoted.
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::escape::tests::{hostile_values, parse_fields};

    /// A `Write` into a shared buffer, for a subscriber's writer.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_access_line_has_exactly_its_fields_whatever_the_client_sent() {
        let buf = Buf::default();
        let writer = buf.clone();
        // The text format `berth serve --log-format text` writes (without colours).
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let metrics = Arc::new(Metrics::default());
        let remote: SocketAddr = "192.0.2.7:1234".parse().unwrap();
        let values = hostile_values();
        tracing::subscriber::with_default(subscriber, || {
            for v in &values {
                let a = Access::new(&metrics, Method::POST, "other", v.clone(), remote, v);
                a.set_status(StatusCode::UNSUPPORTED_MEDIA_TYPE);
                a.set_outcome(v.clone());
            }
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), values.len(), "one line per request:\n{out}");
        for (line, v) in lines.iter().zip(&values) {
            let (_, fields) = line
                .split_once(" berth::serve: request ")
                .unwrap_or_else(|| panic!("{line:?}"));
            let fields = parse_fields(fields).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                keys,
                [
                    "method",
                    "route",
                    "repo",
                    "user",
                    "remote",
                    "status",
                    "bytes_in",
                    "bytes_out",
                    "duration_ms",
                    "refs_updated",
                    "refs_refused",
                    "outcome"
                ],
                "{line:?}"
            );
            let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
            assert_eq!(get("method"), Some("POST"));
            assert_eq!(get("route"), Some("other"));
            assert_eq!(get("repo"), Some(v.as_str()), "{line:?}");
            assert_eq!(get("user"), Some(v.as_str()), "{line:?}");
            assert_eq!(get("outcome"), Some(v.as_str()), "{line:?}");
            assert_eq!(get("status"), Some("415"));
            assert_eq!(get("remote"), Some("192.0.2.7"));
        }
    }
}
