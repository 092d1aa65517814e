//! Bytes ↔ types for git's push protocol (`gitprotocol-pack`, `gitprotocol-common`): pkt-line
//! framing with git's limits, the sideband muxer, the ref advertisement, the client's request
//! (commands, shallow lines, push options, push certificate) and the report-status answer.
//!
//! Nothing here touches a repository's refs or objects beyond what it is handed.

pub mod advertise;
pub mod pktline;
pub mod push_cert;
pub mod report;
pub mod request;
pub mod sideband;
pub mod trace2;
