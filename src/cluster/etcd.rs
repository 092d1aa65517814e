//! An etcd v3 client over etcd's gRPC API (`etcdserverpb.KV/Range|Put|DeleteRange|Txn`,
//! `Lease/LeaseGrant|LeaseKeepAlive`, `Watch/Watch`): protobuf messages (`etcd/proto.rs`)
//! over one HTTP/2 connection per endpoint (`etcd/grpc.rs`), on the hyper already in the
//! dependency tree.
//!
//! Why not etcd's JSON gateway, which this client spoke before: it is a second gRPC round
//! inside etcd with keys and values base64 in JSON around it. A 51 KB log entry (a
//! 10,000-ref push) took 4.1-4.4 ms to commit through it against 1.2 ms over gRPC on this
//! project's machine, and a small range and txn 0.4-0.6 ms more of etcd's CPU
//! (benches/README.md). Why not the `etcd-client` crate: tonic + prost with a build that
//! wants `protoc`, and a second HTTP/2 stack around the same hyper; berth needs seven calls.
//!
//! Over `https://` endpoints the client speaks TLS (ALPN `h2`), trusting `--etcd-ca` only and
//! presenting `--etcd-cert` (etcd's `--client-cert-auth`); an endpoint of the other scheme is
//! refused.
//!
//! A watch is one call whose request stays open and whose answer streams; every call to an
//! endpoint shares its connection.
//!
//! Endpoints are tried in order, starting from the last one that answered; a member that does
//! not answer (killed, partitioned) costs one connect timeout, then the next is asked. Every
//! call is linearizable (etcd's default for range), so any member's answer is the cluster's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::http;

mod grpc;
mod proto;

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
    /// No endpoint answered but with an unavailable status: the last one's.
    #[error("etcd unreachable: {url}: {status} {body}")]
    Unavailable {
        /// The call's URL.
        url: String,
        /// gRPC's `UNAVAILABLE` (14), or the HTTP status of an answer that is not gRPC's.
        status: u32,
        /// Why, as etcd said.
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
        /// The gRPC status code (3 `INVALID_ARGUMENT`, 8 `RESOURCE_EXHAUSTED`, …).
        status: u32,
        /// etcd's message.
        body: String,
    },
    /// An answer's message is not the call's.
    #[error("etcd answer not understood: {0}")]
    Proto(#[source] prost::DecodeError),
    /// An answer's message is compressed (none was asked for).
    #[error("etcd answer not understood: a compressed message")]
    Compressed,
    /// An answer's message is larger than berth reads.
    #[error("etcd answer not understood: a message of {0} bytes")]
    MessageTooLarge(usize),
    /// A unary call's answer ended without its message.
    #[error("etcd answer not understood: {0}: no message")]
    NoAnswer(String),
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
    /// Whether etcd refused the request as larger than it takes (its `--max-request-bytes`:
    /// etcd's own check, or gRPC's on the message it receives, 512 KiB above it).
    pub fn is_too_large(&self) -> bool {
        match self {
            Error::Status { status: 8, .. } => true,
            Error::Status { body, .. } => body.contains("request is too large"),
            _ => false,
        }
    }

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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The watch is in place: every change after this revision will be reported.
    Started(i64),
    /// The key was put: its new value, and the revision of the put.
    Put(Kv),
    /// The key was deleted (or its lease expired): its key, no value, and the revision of the
    /// delete.
    Deleted(Kv),
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
    /// `KV/Range`: a get, a range, a prefix, keys.
    Range,
    /// `KV/Put`.
    Put,
    /// `KV/DeleteRange`.
    DeleteRange,
    /// `KV/Txn`.
    Txn,
    /// `Lease/LeaseGrant`.
    LeaseGrant,
    /// `Lease/LeaseKeepAlive`, one renewal per call.
    LeaseKeepalive,
}

impl Call {
    /// The gRPC method's path.
    fn path(self) -> &'static str {
        match self {
            Call::Range => "/etcdserverpb.KV/Range",
            Call::Put => "/etcdserverpb.KV/Put",
            Call::DeleteRange => "/etcdserverpb.KV/DeleteRange",
            Call::Txn => "/etcdserverpb.KV/Txn",
            Call::LeaseGrant => "/etcdserverpb.Lease/LeaseGrant",
            Call::LeaseKeepalive => "/etcdserverpb.Lease/LeaseKeepAlive",
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
    /// One connection per endpoint, shared by every call to it.
    channels: Vec<grpc::Channel>,
    /// The endpoint that answered last.
    current: AtomicUsize,
    /// Where the next watch goes.
    watch_at: AtomicUsize,
    timeout: Duration,
    /// Where each request's time goes (a node's; `berth cluster status` has none).
    metrics: Option<Arc<dyn Observe>>,
    /// Plain, or TLS with `--etcd-ca`'s roots and `--etcd-cert`.
    transport: http::Transport,
}

fn kvs(kvs: Vec<proto::KeyValue>) -> Vec<Kv> {
    kvs.into_iter()
        .map(|kv| Kv {
            key: kv.key,
            value: kv.value,
            mod_revision: kv.mod_revision,
        })
        .collect()
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
        let channels = endpoints
            .iter()
            .flat_map(|e| e.split(','))
            .map(|e| e.trim().trim_end_matches('/').to_owned())
            .filter(|e| !e.is_empty())
            .map(grpc::Channel::new)
            .collect();
        Client {
            channels,
            current: AtomicUsize::new(0),
            watch_at: AtomicUsize::new(0),
            timeout,
            metrics: None,
            transport: http::Transport::Plain,
        }
    }

    /// The client speaking TLS to its endpoints with `files` (`--etcd-ca`, `--etcd-cert`,
    /// `--etcd-key`): every endpoint must then be `https://`, and without them `http://`.
    pub fn with_tls(mut self, files: Option<&super::tls::TlsFiles>) -> Result<Client, Error> {
        let want = match files {
            Some(f) => {
                let mut config = (*f.client().map_err(Error::Tls)?).clone();
                // gRPC is HTTP/2, which etcd's TLS listener agrees to by ALPN.
                config.alpn_protocols = vec![b"h2".to_vec()];
                self.transport = http::Transport::Tls(Arc::new(config));
                "https://"
            }
            None => "http://",
        };
        match self.channels.iter().find(|c| !c.url.starts_with(want)) {
            Some(c) => Err(Error::Scheme {
                endpoint: c.url.clone(),
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

    /// Unary `call` with `request` on the first endpoint that answers, timed.
    async fn call<A: prost::Message + Default>(
        &self,
        call: Call,
        request: &impl prost::Message,
    ) -> Result<A, Error> {
        let start = Instant::now();
        let r = self.first_answer(call, request).await;
        if let Some(m) = &self.metrics {
            m.request(call, start.elapsed(), r.is_ok());
        }
        r
    }

    /// Unary `call` with `request` on the first endpoint that answers.
    async fn first_answer<A: prost::Message + Default>(
        &self,
        call: Call,
        request: &impl prost::Message,
    ) -> Result<A, Error> {
        let n = self.channels.len();
        let start = self.current.load(Ordering::Relaxed);
        let mut last = Error::NoEndpoint;
        for i in 0..n {
            let at = (start + i) % n;
            let channel = &self.channels[at];
            match (channel.unary(&self.transport, call.path(), request, self.timeout)).await {
                Ok(answer) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(answer);
                }
                // Unreachable, or no leader yet, or this member is cut off: ask the next one.
                Err(e) if e.is_unreachable() => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// The value of `key`, if it exists.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Kv>, Error> {
        Ok(self.get_at(key).await?.0)
    }

    /// The value of `key`, if any, and the store's revision it was read at: a change after
    /// that revision is one the value does not show.
    pub async fn get_at(&self, key: &[u8]) -> Result<(Option<Kv>, i64), Error> {
        let request = proto::RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        };
        let answer: proto::RangeResponse = self.call(Call::Range, &request).await?;
        let revision = answer.header.map_or(0, |h| h.revision);
        Ok((kvs(answer.kvs).into_iter().next(), revision))
    }

    /// Every key from `from` (inclusive) to `end` (exclusive), in key order.
    pub async fn range(&self, from: &[u8], end: &[u8]) -> Result<Vec<Kv>, Error> {
        let request = proto::RangeRequest {
            key: from.to_vec(),
            range_end: end.to_vec(),
            keys_only: false,
        };
        let answer: proto::RangeResponse = self.call(Call::Range, &request).await?;
        Ok(kvs(answer.kvs))
    }

    /// The keys (without values) under `prefix`.
    pub async fn keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        let request = proto::RangeRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
            keys_only: true,
        };
        let answer: proto::RangeResponse = self.call(Call::Range, &request).await?;
        Ok(answer.kvs.into_iter().map(|kv| kv.key).collect())
    }

    /// Every key under `prefix`.
    pub async fn prefix(&self, prefix: &[u8]) -> Result<Vec<Kv>, Error> {
        self.range(prefix, &prefix_end(prefix)).await
    }

    /// Put `value` at `key`, attached to `lease` when given.
    pub async fn put(&self, key: &[u8], value: &[u8], lease: Option<i64>) -> Result<(), Error> {
        let request = proto::PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            lease: lease.unwrap_or(0),
        };
        let _: proto::PutResponse = self.call(Call::Put, &request).await?;
        Ok(())
    }

    /// Delete every key from `from` (inclusive) to `end` (exclusive).
    pub async fn delete_range(&self, from: &[u8], end: &[u8]) -> Result<(), Error> {
        let request = proto::DeleteRangeRequest {
            key: from.to_vec(),
            range_end: end.to_vec(),
        };
        let _: proto::DeleteRangeResponse = self.call(Call::DeleteRange, &request).await?;
        Ok(())
    }

    /// If every comparison holds run `success`, else `failure`; atomically.
    pub async fn txn(
        &self,
        compare: &[Compare],
        success: &[Op],
        failure: &[Op],
    ) -> Result<TxnResult, Error> {
        let compare = compare
            .iter()
            .map(|c| match c {
                Compare::Absent(k) => proto::Compare {
                    result: proto::COMPARE_EQUAL,
                    target: proto::TARGET_CREATE,
                    key: k.clone(),
                    target_union: Some(proto::TargetUnion::CreateRevision(0)),
                },
                Compare::ModRevision(k, r) => proto::Compare {
                    result: proto::COMPARE_EQUAL,
                    target: proto::TARGET_MOD,
                    key: k.clone(),
                    target_union: Some(proto::TargetUnion::ModRevision(*r)),
                },
            })
            .collect();
        let ops = |ops: &[Op]| -> Vec<proto::RequestOp> {
            ops.iter()
                .map(|o| proto::RequestOp {
                    request: Some(match o {
                        Op::Put(k, v, lease) => proto::Request::Put(proto::PutRequest {
                            key: k.clone(),
                            value: v.clone(),
                            lease: lease.unwrap_or(0),
                        }),
                        Op::Get(k) => proto::Request::Range(proto::RangeRequest {
                            key: k.clone(),
                            ..Default::default()
                        }),
                    }),
                })
                .collect()
        };
        let request = proto::TxnRequest {
            compare,
            success: ops(success),
            failure: ops(failure),
        };
        let answer: proto::TxnResponse = self.call(Call::Txn, &request).await?;
        let gets = answer
            .responses
            .into_iter()
            .filter_map(|r| match r.response {
                Some(proto::Response::Range(range)) => Some(kvs(range.kvs)),
                _ => None,
            })
            .collect();
        Ok(TxnResult {
            succeeded: answer.succeeded,
            gets,
        })
    }

    /// Watch every key under `prefix` from now on: `on_event` is called with each key put
    /// (and its value) or deleted (a lease's key when the lease expired), until the stream
    /// ends or fails (a member killed): then the error, and the caller watches again (the
    /// next endpoint first).
    pub async fn watch(&self, prefix: &[u8], mut on_event: impl FnMut(Event)) -> Error {
        let n = self.channels.len().max(1);
        // Each watch on the next endpoint: one that ended may have been killed.
        let at = self.watch_at.fetch_add(1, Ordering::Relaxed) % n;
        let Some(channel) = self.channels.get(at) else {
            return Error::NoEndpoint;
        };
        let create = proto::WatchRequest {
            create_request: Some(proto::WatchCreateRequest {
                key: prefix.to_vec(),
                range_end: prefix_end(prefix),
            }),
        };
        // The request stays open while the watch runs: its end would end the watch.
        let first = futures_util::stream::once(async move {
            Ok::<_, std::convert::Infallible>(grpc::frame(&create))
        });
        let open = futures_util::StreamExt::chain(first, futures_util::stream::pending());
        let started = tokio::time::timeout(
            self.timeout,
            channel.start(
                &self.transport,
                "/etcdserverpb.Watch/Watch",
                axum::body::Body::from_stream(open),
            ),
        );
        let mut body = match started.await {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => return e,
            Err(_) => {
                channel.forget();
                return Error::Http(http::Error::Timeout(channel.url.clone()));
            }
        };
        let mut frames = grpc::Frames::default();
        loop {
            match http_body_util::BodyExt::frame(&mut body).await {
                None => return Error::WatchEnded(channel.url.clone()),
                Some(Err(source)) => {
                    return Error::WatchFailed {
                        url: channel.url.clone(),
                        source,
                    };
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => frames.extend(&data),
                    // The trailers: the watch ended, with its status.
                    Err(_) => return Error::WatchEnded(channel.url.clone()),
                },
            }
            loop {
                let answer = match frames.next_message::<proto::WatchResponse>() {
                    Ok(Some(a)) => a,
                    Ok(None) => break,
                    Err(e) => return e,
                };
                if answer.created {
                    on_event(Event::Started(answer.header.map_or(0, |h| h.revision)));
                }
                for e in answer.events {
                    let kv = e.kv.unwrap_or_default();
                    let kind = e.r#type;
                    let kv = Kv {
                        key: kv.key,
                        value: kv.value,
                        mod_revision: kv.mod_revision,
                    };
                    on_event(match kind {
                        proto::EVENT_DELETE => Event::Deleted(kv),
                        _ => Event::Put(kv),
                    });
                }
                if answer.canceled {
                    return Error::WatchEnded(channel.url.clone());
                }
            }
        }
    }

    /// A new lease of `ttl` seconds; its id.
    pub async fn grant(&self, ttl: i64) -> Result<i64, Error> {
        let request = proto::LeaseGrantRequest { ttl };
        let answer: proto::LeaseGrantResponse = self.call(Call::LeaseGrant, &request).await?;
        match answer.id {
            0 => Err(Error::NoLeaseId),
            id => Ok(id),
        }
    }

    /// Renew `lease`; whether it still exists (a TTL of 0 or less: expired). One message on
    /// the keep-alive stream, whose end after it ends the call.
    pub async fn keepalive(&self, lease: i64) -> Result<bool, Error> {
        let request = proto::LeaseKeepAliveRequest { id: lease };
        let answer: proto::LeaseKeepAliveResponse =
            self.call(Call::LeaseKeepalive, &request).await?;
        Ok(answer.ttl > 0)
    }
}
