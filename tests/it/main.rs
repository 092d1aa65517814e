//! berth's integration tests, one binary: each module is one suite (`cargo test --test it
//! push::` runs the push suite). The tests run in parallel threads of this one process, so none
//! may change process-wide state (the current directory, environment variables); what they share
//! is in [`common`].

mod common;
mod ports;

mod auth_hardening;
mod bad_input;
mod bench;
mod cluster;
mod cluster_durability;
mod cluster_fixture;
mod cluster_metrics;
mod cluster_outcomes;
mod cluster_placement;
mod cluster_reads;
mod cluster_resync;
mod cluster_shallow;
mod cluster_ssh;
mod cluster_stream;
mod cluster_tls;
mod config;
mod conn_limits;
mod crash;
mod durability;
mod fuzz_corpus;
mod hook_cost;
mod hooks;
mod in_process;
mod invocation;
mod lock_wait;
mod memory;
mod missing_objects;
mod onboarding;
mod parallel_hooks;
mod protocol;
mod push;
mod races;
mod refs_batch;
mod reftable;
mod reftable_push;
mod repo_names;
mod sample_hooks;
mod serve;
mod serve_hardening;
mod ssh;
mod ssh_serve;
