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
//!
//! The public API is what an embedder needs: [`receive::run`] with its [`receive::Options`] and
//! [`receive::Outcome`], in-process [`hooks`], the [`refs`] store and the [`reftable`] format, and
//! (feature `serve`, on by default) the smart HTTP server in [`serve`]. With
//! `default-features = false` the library has no web stack. The feature `internals` makes the
//! other modules public for berth's own tests, benches and fuzz targets; they are not a stable API.
#![deny(missing_docs, unsafe_code)]

/// A module that is public with the `internals` feature and private to the crate without it.
macro_rules! internal {
    ($(#[$meta:meta])* mod $name:ident;) => {
        $(#[$meta])*
        #[cfg(feature = "internals")]
        pub mod $name;
        $(#[$meta])*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unreachable_pub)]
        pub(crate) mod $name;
    };
}

#[cfg(feature = "serve")]
mod cluster;
mod escape;
pub mod fsync;
#[cfg(feature = "internals")]
pub mod fuzzing;
pub mod hooks;
pub mod lockfile;
internal! { mod objects; }
internal! { mod protocol; }
pub mod receive;
pub mod refs;
pub mod reftable;
internal! { mod repo; }
#[cfg(feature = "serve")]
pub mod serve;
#[cfg(test)]
mod test_git;

pub use gix_hash::ObjectId;

/// The version string berth advertises as `agent=berth/<version>`.
pub const AGENT: &str = concat!("berth/", env!("CARGO_PKG_VERSION"));
