//! The objects a push brings: the quarantine they are received into, the pack ingest
//! (`index-pack` / `unpack-objects`), fsck on receive and the connectivity check that every new
//! ref value is complete.

pub mod connectivity;
pub mod fsck;
pub mod gitmodules;
pub mod incomplete;
pub mod incomplete_prune;
pub mod ingest;
pub mod lookup;
pub mod loose_write;
pub mod move_order;
pub mod pack_links;
pub mod pack_map;
pub mod pack_read;
pub mod pack_resolve;
pub mod pack_write;
mod pending_bases;
pub mod pack_files;
pub mod settle;
mod strict;
