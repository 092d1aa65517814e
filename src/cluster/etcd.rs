//! An etcd v3 client over etcd's gRPC-JSON gateway (`POST /v3/kv/range|put|txn`,
//! `/v3/lease/grant|keepalive`; keys and values base64 in JSON), on the hyper already in the
//! dependency tree.
//!
//! Why not the `etcd-client` crate: it is tonic + prost, whose build wants `protoc` and adds a
//! second HTTP/2 stack; berth needs six calls, each one JSON object in and out. The gateway is
//! part of every etcd v3 server (Debian's `etcd-server` 3.4 serves it on the client URLs).
//!
//! Over `https://` endpoints the client speaks TLS, trusting `--etcd-ca` only and presenting
//! `--etcd-cert` (etcd's `--client-cert-auth`); an endpoint of the other scheme is refused.
//!
//! A watch (`/v3/watch`) is one long POST whose answer streams one JSON object per line, on a
//! connection of its own; every other call goes over a kept-alive connection when one is idle
//! (`http::Pool`), not a new TCP connection (and TLS handshake) per call.
//!
//! Endpoints are tried in order, starting from the last one that answered; a member that does
//! not answer (killed, partitioned) costs one connect timeout, then the next is asked. Every
//! call is linearizable (etcd's default for range), so any member's answer is the cluster's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};

use super::http;

/// The largest etcd answer read (a range of a repository's log entries is the largest).
const MAX_ANSWER: usize = 64 << 20;

/// Why an etcd call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No endpoint is configured.
    #[error("etcd unreachable: no endpoint given")]
    NoEndpoint,
    /// An endpoint cannot be a request's URL.
    #[error("etcd unreachable: bad endpoint {0}")]
    BadEndpoint(String),
    /// No endpoint answered: the last one's failure.
    #[error("etcd unreachable: {0}")]
    Http(#[source] http::Error),
    /// No endpoint answered but with an unavailable status (5xx): the last one's.
    #[error("etcd unreachable: {url}: {status} {body}")]
    Unavailable {
        /// The endpoint's URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// Its answer.
        body: String,
    },
    /// A watch's stream ended.
    #[error("etcd unreachable: {0}: watch ended")]
    WatchEnded(String),
    /// A watch's stream failed.
    #[error("etcd unreachable: {url}: {source}")]
    WatchFailed {
        /// The endpoint.
        url: String,
        /// Why.
        #[source]
        source: hyper::Error,
    },
    /// An endpoint answered with an error.
    #[error("etcd {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The answer, shortened.
        body: String,
    },
    /// The answer is not JSON.
    #[error("etcd answer not understood: {0}")]
    Json(#[source] serde_json::Error),
    /// A key or value is not base64.
    #[error("etcd answer not understood: base64: {0}")]
    Base64(#[source] base64::DecodeError),
    /// A watch's line is longer than an answer may be.
    #[error("etcd answer not understood: watch: line too long")]
    LineTooLong,
    /// The etcd TLS files cannot be used.
    #[error("etcd: {0}")]
    Tls(#[source] super::tls::Error),
    /// An endpoint's scheme does not match whether TLS to etcd is configured.
    #[error("{}", if *.tls {
        format!("etcd endpoint {endpoint} is not https://, but --etcd-ca/--etcd-cert/--etcd-key are given: give its https:// URL")
    } else {
        format!("etcd endpoint {endpoint} is not http://: for https:// give --etcd-ca, --etcd-cert and --etcd-key")
    })]
    Scheme {
        /// The endpoint.
        endpoint: String,
        /// Whether TLS is configured.
        tls: bool,
    },
    /// A lease grant answered without the lease.
    #[error("etcd answer not understood: lease grant without an ID")]
    NoLeaseId,
}

impl Error {
    /// Whether no endpoint answered at all (etcd is down, or not up yet).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            Error::NoEndpoint
                | Error::BadEndpoint(_)
                | Error::Http(_)
                | Error::Unavailable { .. }
                | Error::WatchEnded(_)
                | Error::WatchFailed { .. }
        )
    }
}

/// One key's value and revisions.
#[derive(Debug, Clone)]
pub struct Kv {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// The revision of its last change.
    pub mod_revision: i64,
}

/// What a watch saw happen to a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The key was put: its new value.
    Put(Vec<u8>, Vec<u8>),
    /// The key was deleted (or its lease expired).
    Deleted(Vec<u8>),
}

/// A comparison of a transaction.
#[derive(Debug, Clone)]
pub enum Compare {
    /// The key does not exist.
    Absent(Vec<u8>),
    /// The key's last change was at this revision (0: the key does not exist).
    ModRevision(Vec<u8>, i64),
}

/// One operation of a transaction.
#[derive(Debug, Clone)]
pub enum Op {
    /// Put a value (with a lease, or none).
    Put(Vec<u8>, Vec<u8>, Option<i64>),
    /// Read a key.
    Get(Vec<u8>),
}

/// What a transaction did.
#[derive(Debug)]
pub struct TxnResult {
    /// Whether every comparison held (the success branch ran).
    pub succeeded: bool,
    /// The keys read by the branch that ran, in order (one list per `Op::Get`).
    pub gets: Vec<Vec<Kv>>,
}

/// One kind of etcd request (the `op` of `berth_cluster_etcd_request_seconds`).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Call {
    /// `/v3/kv/range`: a get, a range, a prefix, keys.
    Range,
    /// `/v3/kv/put`.
    Put,
    /// `/v3/kv/deleterange`.
    DeleteRange,
    /// `/v3/kv/txn`.
    Txn,
    /// `/v3/lease/grant`.
    LeaseGrant,
    /// `/v3/lease/keepalive`.
    LeaseKeepalive,
}

impl Call {
    /// The gateway's path.
    fn path(self) -> &'static str {
        match self {
            Call::Range => "/v3/kv/range",
            Call::Put => "/v3/kv/put",
            Call::DeleteRange => "/v3/kv/deleterange",
            Call::Txn => "/v3/kv/txn",
            Call::LeaseGrant => "/v3/lease/grant",
            Call::LeaseKeepalive => "/v3/lease/keepalive",
        }
    }

    /// The metrics' label.
    pub fn as_str(self) -> &'static str {
        match self {
            Call::Range => "range",
            Call::Put => "put",
            Call::DeleteRange => "delete_range",
            Call::Txn => "txn",
            Call::LeaseGrant => "lease_grant",
            Call::LeaseKeepalive => "lease_keepalive",
        }
    }
}

/// Where a [`Client`] reports each request's time (the node's metrics; `berth cluster status`
/// has none). Declared here so that the client does not depend on who listens.
pub(super) trait Observe: Send + Sync + std::fmt::Debug {
    /// Request `call` took `took`, and failed or not.
    fn request(&self, call: Call, took: Duration, ok: bool);
}

/// An etcd client for a list of member URLs.
#[derive(Debug)]
pub struct Client {
    endpoints: Vec<String>,
    /// The endpoint that answered last.
    current: AtomicUsize,
    /// Where the next watch goes.
    watch_at: AtomicUsize,
    timeout: Duration,
    /// Where each request's time goes (a node's; `berth cluster status` has none).
    metrics: Option<Arc<dyn Observe>>,
    /// Plain, or TLS with `--etcd-ca`'s roots and `--etcd-cert`.
    transport: http::Transport,
    /// Kept-alive connections to the endpoints (not the watches': each has its own).
    pool: http::Pool,
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(v: &Value) -> Result<Vec<u8>, Error> {
    match v.as_str() {
        None => Ok(Vec::new()),
        Some(s) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(Error::Base64),
    }
}

/// proto3 JSON: 64-bit integers are strings, defaults are left out.
fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn kvs(v: &Value) -> Result<Vec<Kv>, Error> {
    let mut out = Vec::new();
    if let Some(list) = v.get("kvs").and_then(Value::as_array) {
        for kv in list {
            out.push(Kv {
                key: unb64(&kv["key"])?,
                value: unb64(&kv["value"])?,
                mod_revision: int(&kv["mod_revision"]),
            });
        }
    }
    Ok(out)
}

/// The key after every key that starts with `prefix` (etcd's `range_end` for a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl Client {
    /// A client for `endpoints` (`http://host:port`, comma-separated or one by one).
    pub fn new(endpoints: &[String], timeout: Duration) -> Client {
        let endpoints = endpoints
            .iter()
            .flat_map(|e| e.split(','))
            .map(|e| e.trim().trim_end_matches('/').to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        Client {
            endpoints,
            current: AtomicUsize::new(0),
            watch_at: AtomicUsize::new(0),
            timeout,
            metrics: None,
            transport: http::Transport::Plain,
            pool: http::Pool::default(),
        }
    }

    /// The client speaking TLS to its endpoints with `files` (`--etcd-ca`, `--etcd-cert`,
    /// `--etcd-key`): every endpoint must then be `https://`, and without them `http://`.
    pub fn with_tls(mut self, files: Option<&super::tls::TlsFiles>) -> Result<Client, Error> {
        let want = match files {
            Some(f) => {
                self.transport = http::Transport::Tls(f.client().map_err(Error::Tls)?);
                "https://"
            }
            None => "http://",
        };
        match self.endpoints.iter().find(|e| !e.starts_with(want)) {
            Some(e) => Err(Error::Scheme {
                endpoint: e.clone(),
                tls: files.is_some(),
            }),
            None => Ok(self),
        }
    }

    /// The client timing its requests into `metrics`.
    pub(super) fn observed(mut self, metrics: Arc<dyn Observe>) -> Client {
        self.metrics = Some(metrics);
        self
    }

    /// POST `body` to `call`'s path on the first endpoint that answers, timed.
    async fn call(&self, call: Call, body: Value) -> Result<Value, Error> {
        let start = Instant::now();
        let r = self.post(call.path(), body).await;
        if let Some(m) = &self.metrics {
            m.request(call, start.elapsed(), r.is_ok());
        }
        r
    }

    /// POST `body` to `path` on the first endpoint that answers.
    async fn post(&self, path: &str, body: Value) -> Result<Value, Error> {
        let n = self.endpoints.len();
        if n == 0 {
            return Err(Error::NoEndpoint);
        }
        let body = Bytes::from(body.to_string());
        let start = self.current.load(Ordering::Relaxed);
        let mut last = Error::NoEndpoint;
        for i in 0..n {
            let at = (start + i) % n;
            let url = http::join(&self.endpoints[at], path);
            let headers = [("content-type", "application/json")];
            match http::post_via(
                &self.pool,
                &self.transport,
                &url,
                &headers,
                body.clone(),
                MAX_ANSWER,
                self.timeout,
            )
            .await
            {
                Ok((200, answer)) => {
                    self.current.store(at, Ordering::Relaxed);
                    return serde_json::from_slice(&answer).map_err(Error::Json);
                }
                // Unavailable (no leader yet, or this member is cut off): ask the next one.
                Ok((status, answer)) if status >= 500 => {
                    last = Error::Unavailable {
                        url,
                        status,
                        body: String::from_utf8_lossy(&answer).into_owned(),
                    };
                }
                Ok((status, answer)) => {
                    return Err(Error::Status {
                        status,
                        body: String::from_utf8_lossy(&answer).chars().take(300).collect(),
                    });
                }
                Err(e) => last = Error::Http(e),
            }
        }
        Err(last)
    }

    /// The value of `key`, if it exists.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Kv>, Error> {
        let v = self.call(Call::Range, json!({"key": b64(key)})).await?;
        Ok(kvs(&v)?.into_iter().next())
    }

    /// Every key from `from` (inclusive) to `end` (exclusive), in key order.
    pub async fn range(&self, from: &[u8], end: &[u8]) -> Result<Vec<Kv>, Error> {
        let v = self
            .call(
                Call::Range,
                json!({"key": b64(from), "range_end": b64(end)}),
            )
            .await?;
        kvs(&v)
    }

    /// The keys (without values) under `prefix`.
    pub async fn keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        let v = self
            .call(
                Call::Range,
                json!({"key": b64(prefix), "range_end": b64(&prefix_end(prefix)), "keys_only": true}),
            )
            .await?;
        Ok(kvs(&v)?.into_iter().map(|kv| kv.key).collect())
    }

    /// Every key under `prefix`.
    pub async fn prefix(&self, prefix: &[u8]) -> Result<Vec<Kv>, Error> {
        self.range(prefix, &prefix_end(prefix)).await
    }

    /// Put `value` at `key`, attached to `lease` when given.
    pub async fn put(&self, key: &[u8], value: &[u8], lease: Option<i64>) -> Result<(), Error> {
        let mut body = json!({"key": b64(key), "value": b64(value)});
        if let Some(l) = lease {
            body["lease"] = json!(l.to_string());
        }
        self.call(Call::Put, body).await.map(drop)
    }

    /// Delete every key from `from` (inclusive) to `end` (exclusive).
    pub async fn delete_range(&self, from: &[u8], end: &[u8]) -> Result<(), Error> {
        self.call(
            Call::DeleteRange,
            json!({"key": b64(from), "range_end": b64(end)}),
        )
        .await
        .map(drop)
    }

    /// If every comparison holds run `success`, else `failure`; atomically.
    pub async fn txn(
        &self,
        compare: &[Compare],
        success: &[Op],
        failure: &[Op],
    ) -> Result<TxnResult, Error> {
        let cmp: Vec<Value> = compare
            .iter()
            .map(|c| match c {
                Compare::Absent(k) => json!({"key": b64(k), "target": "CREATE",
                    "create_revision": "0", "result": "EQUAL"}),
                Compare::ModRevision(k, r) => json!({"key": b64(k), "target": "MOD",
                    "mod_revision": r.to_string(), "result": "EQUAL"}),
            })
            .collect();
        let ops = |ops: &[Op]| -> Vec<Value> {
            ops.iter()
                .map(|o| match o {
                    Op::Put(k, v, lease) => {
                        let mut p = json!({"key": b64(k), "value": b64(v)});
                        if let Some(l) = lease {
                            p["lease"] = json!(l.to_string());
                        }
                        json!({ "request_put": p })
                    }
                    Op::Get(k) => json!({"request_range": {"key": b64(k)}}),
                })
                .collect()
        };
        let v = self
            .call(
                Call::Txn,
                json!({"compare": cmp, "success": ops(success), "failure": ops(failure)}),
            )
            .await?;
        let mut gets = Vec::new();
        if let Some(rs) = v.get("responses").and_then(Value::as_array) {
            for r in rs {
                if let Some(range) = r.get("response_range") {
                    gets.push(kvs(range)?);
                }
            }
        }
        Ok(TxnResult {
            succeeded: v.get("succeeded").and_then(Value::as_bool).unwrap_or(false),
            gets,
        })
    }

    /// Watch every key under `prefix` from now on: `on_event` is called with each key put
    /// (and its value) or deleted (a lease's key when the lease expired), until the stream
    /// ends or fails (a member killed): then the error, and the caller watches again (the
    /// next endpoint first).
    pub async fn watch(&self, prefix: &[u8], mut on_event: impl FnMut(Event)) -> Error {
        use http_body_util::BodyExt;
        let n = self.endpoints.len().max(1);
        // Each watch on the next endpoint: one that ended may have been killed.
        let at = self.watch_at.fetch_add(1, Ordering::Relaxed) % n;
        let Some(base) = self.endpoints.get(at) else {
            return Error::NoEndpoint;
        };
        let body =
            json!({"create_request": {"key": b64(prefix), "range_end": b64(&prefix_end(prefix))}});
        let req = axum::http::Request::builder()
            .method("POST")
            .uri(http::join(base, "/v3/watch"))
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_string()));
        let Ok(req) = req else {
            return Error::BadEndpoint(base.clone());
        };
        let resp = match http::send_via(&self.transport, req, self.timeout).await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                return Error::Status {
                    status: r.status().as_u16(),
                    body: String::new(),
                };
            }
            Err(e) => return Error::Http(e),
        };
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        loop {
            match body.frame().await {
                None => return Error::WatchEnded(base.clone()),
                Some(Err(source)) => {
                    return Error::WatchFailed {
                        url: base.clone(),
                        source,
                    };
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        buf.extend_from_slice(&data);
                    }
                }
            }
            // One JSON object per line; a line longer than an answer may be is not etcd's.
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                let events = v["result"]["events"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for e in events {
                    if let Ok(key) = unb64(&e["kv"]["key"]) {
                        // The gateway leaves out a PUT's type (the enum's default).
                        on_event(match e["type"].as_str() {
                            Some("DELETE") => Event::Deleted(key),
                            _ => Event::Put(key, unb64(&e["kv"]["value"]).unwrap_or_default()),
                        });
                    }
                }
            }
            if buf.len() > MAX_ANSWER {
                return Error::LineTooLong;
            }
        }
    }

    /// A new lease of `ttl` seconds; its id.
    pub async fn grant(&self, ttl: i64) -> Result<i64, Error> {
        let v = self
            .call(Call::LeaseGrant, json!({"TTL": ttl.to_string()}))
            .await?;
        match int(&v["ID"]) {
            0 => Err(Error::NoLeaseId),
            id => Ok(id),
        }
    }

    /// Renew `lease`; whether it still exists (a TTL of 0 or less: expired).
    pub async fn keepalive(&self, lease: i64) -> Result<bool, Error> {
        let v = self
            .call(Call::LeaseKeepalive, json!({"ID": lease.to_string()}))
            .await?;
        Ok(int(&v["result"]["TTL"]) > 0)
    }
}
