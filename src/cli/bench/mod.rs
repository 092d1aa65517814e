//! `berth bench many-refs`: the same many-ref push, byte for byte what `git push` sends, fed to
//! any number of named receive-pack commands side by side, over a sweep of cases, with
//! statistics, and as a table, JSON, CSV, markdown or an SVG plot.
//!
//! - [`args`]: the command line and its entry point;
//! - [`receiver`]: `NAME=COMMAND` and the baseline;
//! - [`case`]: what one case pushes;
//! - [`sweep`]: every combination of the listed values, one case after the other;
//! - [`run`]: one case, every receiver taking turns, each run verified;
//! - [`stats`]: mean ± σ, median, outliers, ratios with their σ, the noise verdict;
//! - [`output`]: the table, JSON, CSV and markdown;
//! - [`plot`]: the SVG.
//!
//! `berth bench load` ([`load`]): many clients' small pushes to any server over HTTP or ssh.

pub mod args;
pub mod case;
pub mod load;
pub mod output;
pub mod plot;
pub mod receiver;
pub mod run;
pub mod stats;
pub mod sweep;

pub use args::{ManyRefsArgs, many_refs_main};
pub use load::{LoadArgs, load_main};
