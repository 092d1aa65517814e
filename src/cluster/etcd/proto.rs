//! The messages of etcd's v3 gRPC API that berth sends and reads (`etcdserverpb`'s
//! `rpc.proto`, `mvccpb`'s `kv.proto`), as prost types with the upstream field numbers. Only
//! the fields berth uses are declared: protobuf decoding skips the others.

/// `mvccpb.KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub(super) mod_revision: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub(super) value: Vec<u8>,
}

/// `mvccpb.Event`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Event {
    /// 0 `PUT`, 1 `DELETE`.
    #[prost(int32, tag = "1")]
    pub(super) r#type: i32,
    #[prost(message, optional, tag = "2")]
    pub(super) kv: Option<KeyValue>,
}

/// `mvccpb.Event.EventType.DELETE`.
pub(super) const EVENT_DELETE: i32 = 1;

/// `etcdserverpb.RangeRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(super) range_end: Vec<u8>,
    #[prost(bool, tag = "8")]
    pub(super) keys_only: bool,
}

/// `etcdserverpb.ResponseHeader`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ResponseHeader {
    /// The store's revision when the request was answered.
    #[prost(int64, tag = "3")]
    pub(super) revision: i64,
}

/// `etcdserverpb.RangeResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub(super) header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub(super) kvs: Vec<KeyValue>,
}

/// `etcdserverpb.PutRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(super) value: Vec<u8>,
    /// 0: no lease.
    #[prost(int64, tag = "3")]
    pub(super) lease: i64,
}

/// `etcdserverpb.PutResponse` (nothing berth reads).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PutResponse {}

/// `etcdserverpb.DeleteRangeRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct DeleteRangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(super) range_end: Vec<u8>,
}

/// `etcdserverpb.DeleteRangeResponse` (nothing berth reads).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct DeleteRangeResponse {}

/// `etcdserverpb.Compare`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Compare {
    /// 0 `EQUAL`.
    #[prost(int32, tag = "1")]
    pub(super) result: i32,
    /// 1 `CREATE`, 2 `MOD`.
    #[prost(int32, tag = "2")]
    pub(super) target: i32,
    #[prost(bytes = "vec", tag = "3")]
    pub(super) key: Vec<u8>,
    #[prost(oneof = "TargetUnion", tags = "5, 6")]
    pub(super) target_union: Option<TargetUnion>,
}

/// `etcdserverpb.Compare.CompareResult.EQUAL`.
pub(super) const COMPARE_EQUAL: i32 = 0;
/// `etcdserverpb.Compare.CompareTarget.CREATE`.
pub(super) const TARGET_CREATE: i32 = 1;
/// `etcdserverpb.Compare.CompareTarget.MOD`.
pub(super) const TARGET_MOD: i32 = 2;

/// `etcdserverpb.Compare.target_union`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum TargetUnion {
    #[prost(int64, tag = "5")]
    CreateRevision(i64),
    #[prost(int64, tag = "6")]
    ModRevision(i64),
}

/// `etcdserverpb.RequestOp`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RequestOp {
    #[prost(oneof = "Request", tags = "1, 2")]
    pub(super) request: Option<Request>,
}

/// `etcdserverpb.RequestOp.request`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum Request {
    #[prost(message, tag = "1")]
    Range(RangeRequest),
    #[prost(message, tag = "2")]
    Put(PutRequest),
}

/// `etcdserverpb.ResponseOp`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ResponseOp {
    #[prost(oneof = "Response", tags = "1, 2")]
    pub(super) response: Option<Response>,
}

/// `etcdserverpb.ResponseOp.response`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum Response {
    #[prost(message, tag = "1")]
    Range(RangeResponse),
    #[prost(message, tag = "2")]
    Put(PutResponse),
}

/// `etcdserverpb.TxnRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    pub(super) compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub(super) success: Vec<RequestOp>,
    #[prost(message, repeated, tag = "3")]
    pub(super) failure: Vec<RequestOp>,
}

/// `etcdserverpb.TxnResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct TxnResponse {
    #[prost(bool, tag = "2")]
    pub(super) succeeded: bool,
    #[prost(message, repeated, tag = "3")]
    pub(super) responses: Vec<ResponseOp>,
}

/// `etcdserverpb.LeaseGrantRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseGrantRequest {
    #[prost(int64, tag = "1")]
    pub(super) ttl: i64,
}

/// `etcdserverpb.LeaseGrantResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseGrantResponse {
    #[prost(int64, tag = "2")]
    pub(super) id: i64,
}

/// `etcdserverpb.LeaseKeepAliveRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseKeepAliveRequest {
    #[prost(int64, tag = "1")]
    pub(super) id: i64,
}

/// `etcdserverpb.LeaseKeepAliveResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseKeepAliveResponse {
    #[prost(int64, tag = "3")]
    pub(super) ttl: i64,
}

/// `etcdserverpb.WatchRequest` (a create request only).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct WatchRequest {
    #[prost(message, optional, tag = "1")]
    pub(super) create_request: Option<WatchCreateRequest>,
}

/// `etcdserverpb.WatchCreateRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct WatchCreateRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(super) range_end: Vec<u8>,
}

/// `etcdserverpb.WatchResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct WatchResponse {
    #[prost(message, optional, tag = "1")]
    pub(super) header: Option<ResponseHeader>,
    /// The answer to the create request: the watch reports every change after `header`'s
    /// revision.
    #[prost(bool, tag = "3")]
    pub(super) created: bool,
    #[prost(bool, tag = "4")]
    pub(super) canceled: bool,
    #[prost(string, tag = "6")]
    pub(super) cancel_reason: String,
    #[prost(message, repeated, tag = "11")]
    pub(super) events: Vec<Event>,
}
