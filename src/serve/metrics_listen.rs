//! Where `/metrics` is served: on its own listener (`--metrics-listen ADDR`, which also
//! answers `/healthz`), else on the main listener only when that listens on loopback, else
//! nowhere. The counters say who pushes how much and when; they are not for whoever can
//! reach a public port. The main listener answers 404 for `/metrics` when it does not serve
//! it, and always serves `/healthz`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{Server, metrics_response};

/// Where `/metrics` is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum MetricsAt {
    /// On the main listener (it listens on loopback and no `--metrics-listen` was given).
    Main,
    /// On a listener of its own, at this address (`--metrics-listen`).
    Own(String),
    /// Nowhere (the main listener is not on loopback and no `--metrics-listen` was given).
    Nowhere,
}

impl MetricsAt {
    /// The decision for `--metrics-listen` (if given) and whether every address the main
    /// listener listens on is loopback.
    pub(super) fn decide(metrics_listen: Option<&str>, main_on_loopback: bool) -> MetricsAt {
        match (metrics_listen, main_on_loopback) {
            (Some(addr), _) => MetricsAt::Own(addr.to_owned()),
            (None, true) => MetricsAt::Main,
            (None, false) => MetricsAt::Nowhere,
        }
    }

    /// Whether the main listener answers `/metrics`.
    pub(super) fn on_main(&self) -> bool {
        matches!(self, MetricsAt::Main)
    }
}

/// Bind `--metrics-listen` (before the server announces itself, so a bad address fails the
/// start) and serve `/metrics` and `/healthz` on it in the background, until the task is
/// aborted.
pub(super) async fn start(
    server: Arc<Server>,
    listen: &str,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), super::Error> {
    let addrs = super::resolve_listen(listen)?;
    let listener = super::bind(&addrs, listen).await?;
    let local = listener.local_addr().map_err(super::Error::Serve)?;
    let app = axum::Router::new().fallback(handle).with_state(server);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(target: "berth::serve", error = %e, "metrics listener failed");
        }
    });
    Ok((local, task))
}

/// `/metrics` and `/healthz`, GET or HEAD; 404 for anything else.
async fn handle(
    axum::extract::State(server): axum::extract::State<Arc<Server>>,
    req: axum::extract::Request,
) -> Response {
    let get = req.method() == Method::GET || req.method() == Method::HEAD;
    match (req.uri().path(), get) {
        ("/metrics", true) => metrics_response(&server),
        ("/healthz", true) => "ok\n".into_response(),
        ("/metrics" | "/healthz", false) => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_served_on_their_own_listener_or_on_loopback_only() {
        assert_eq!(
            MetricsAt::decide(Some("10.0.0.1:9100"), false),
            MetricsAt::Own("10.0.0.1:9100".into())
        );
        assert_eq!(
            MetricsAt::decide(Some("127.0.0.1:9100"), true),
            MetricsAt::Own("127.0.0.1:9100".into())
        );
        assert_eq!(MetricsAt::decide(None, true), MetricsAt::Main);
        assert_eq!(MetricsAt::decide(None, false), MetricsAt::Nowhere);
        assert!(MetricsAt::Main.on_main());
        assert!(!MetricsAt::Own("x".into()).on_main());
        assert!(!MetricsAt::Nowhere.on_main());
    }
}
