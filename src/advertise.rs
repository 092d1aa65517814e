//! The ref advertisement: what receive-pack says first (`write_head_info` in git).
//!
//! Every visible ref under `refs/` in name order, then the tips of alternate repositories as
//! `.have` lines (each object id once, never one already advertised), capabilities after a NUL
//! on the first line, `<zero-id> capabilities^{}` when there is nothing else to send, then a flush.

use std::collections::HashSet;
use std::io::{self, Write};

use gix_hash::ObjectId;

use crate::config::Config;
use crate::pktline;
use crate::refs::Refs;

/// The capability list, in git's order.
pub fn capabilities(config: &Config) -> String {
    let mut caps = String::from("report-status report-status-v2 delete-refs side-band-64k quiet");
    if config.advertise_atomic {
        caps.push_str(" atomic");
    }
    if config.use_delta_base_offset {
        caps.push_str(" ofs-delta");
    }
    if config.advertise_push_options {
        caps.push_str(" push-options");
    }
    if config.advertise_sid {
        caps.push_str(" session-id=");
        caps.push_str(crate::trace2::session_id());
    }
    caps.push_str(" object-format=sha1 agent=");
    caps.push_str(&agent());
    caps
}

/// `berth/<version>`, or `GIT_USER_AGENT` with non-printable bytes replaced, as git does.
pub fn agent() -> String {
    match std::env::var("GIT_USER_AGENT") {
        Ok(a) => a
            .chars()
            .map(|c| if c.is_ascii_graphic() { c } else { '.' })
            .collect(),
        Err(_) => crate::AGENT.to_owned(),
    }
}

/// Write the advertisement of `refs` (hidden ones left out by `is_hidden`) and `alternate_tips`.
pub fn write(
    out: &mut impl Write,
    refs: &Refs,
    is_hidden: impl Fn(&[u8]) -> bool,
    alternate_tips: &[ObjectId],
    capabilities: &str,
    shallow: &[ObjectId],
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(64 * (refs.len() + 1));
    let mut seen = HashSet::new();
    let mut line = Vec::with_capacity(512);
    let mut first = true;
    let mut emit = |buf: &mut Vec<u8>, oid: &ObjectId, name: &[u8]| -> io::Result<()> {
        line.clear();
        line.extend_from_slice(oid.to_hex().to_string().as_bytes());
        line.push(b' ');
        line.extend_from_slice(name);
        if first {
            line.push(0);
            line.extend_from_slice(capabilities.as_bytes());
            first = false;
        }
        line.push(b'\n');
        pktline::write_data(buf, &line)
    };
    for (name, oid) in refs.iter() {
        if is_hidden(name) {
            continue;
        }
        seen.insert(*oid);
        emit(&mut buf, oid, name)?;
    }
    for oid in alternate_tips {
        if seen.insert(*oid) {
            emit(&mut buf, oid, b".have")?;
        }
    }
    if seen.is_empty() {
        emit(
            &mut buf,
            &ObjectId::null(gix_hash::Kind::Sha1),
            b"capabilities^{}",
        )?;
    }
    // A shallow repository says where its history ends.
    for id in shallow {
        pktline::write_data(&mut buf, format!("shallow {id}\n").as_bytes())?;
    }
    pktline::write_flush(&mut buf)?;
    out.write_all(&buf)?;
    out.flush()
}
