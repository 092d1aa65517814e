//! # berth — a git `receive-pack`
//!
//! `git push` talks to a server-side program, `receive-pack`, over a byte stream: the server
//! advertises its refs and capabilities, the client answers with a list of ref update commands
//! and a pack of the objects those refs need, and the server checks the objects, updates the refs
//! and reports back per ref. This crate is that server side, written to be byte-compatible with
//! `git receive-pack` and to leave an ordinary git repository behind.
//!
//! A push flows one way through the modules, driven by [`receive::run`]:
//!
//! ```text
//! advertise → request → ingest (quarantine) → connectivity → policy/decide → refs (one transaction) → report
//! ```
//!
//! Transports (stdio in `main.rs`, smart HTTP in [`serve`]) feed one session each and do not know
//! its stages.
#![deny(missing_docs, unsafe_code)]

pub mod fuzzing;
pub mod hooks;
pub mod objects;
pub mod protocol;
pub mod receive;
pub mod refs;
pub mod reftable;
pub mod repo;
pub mod serve;

pub use gix_hash::ObjectId;

/// The version string berth advertises as `agent=berth/<version>`.
pub const AGENT: &str = concat!("berth/", env!("CARGO_PKG_VERSION"));
