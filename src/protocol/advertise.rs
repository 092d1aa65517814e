//! The ref advertisement: what receive-pack says first (`write_head_info` in git).
//!
//! Every visible ref under `refs/` in name order, then the tips of alternate repositories as
//! `.have` lines (each object id once, never one already advertised), capabilities after a NUL
//! on the first line, `<zero-id> capabilities^{}` when there is nothing else to send, then a flush.

use std::collections::HashSet;
use std::io::{self, Write};

use gix_hash::ObjectId;

use crate::protocol::pktline;
use crate::refs::Refs;
use crate::repo::config::Advertisement;

/// The capability list, in git's order; `user_agent` is `GIT_USER_AGENT`.
/// `object_format` is the repository's.
pub fn capabilities(
    config: &Advertisement,
    push_cert_nonce: Option<&str>,
    user_agent: Option<&str>,
    object_format: gix_hash::Kind,
) -> String {
    let mut caps = String::from("report-status report-status-v2 delete-refs side-band-64k quiet");
    if config.atomic {
        caps.push_str(" atomic");
    }
    if config.delta_base_offset {
        caps.push_str(" ofs-delta");
    }
    if let Some(nonce) = push_cert_nonce {
        caps.push_str(" push-cert=");
        caps.push_str(nonce);
    }
    if config.push_options {
        caps.push_str(" push-options");
    }
    if config.session_id {
        caps.push_str(" session-id=");
        caps.push_str(crate::protocol::trace2::session_id());
    }
    caps.push_str(" object-format=");
    caps.push_str(crate::protocol::request::hash_name(object_format));
    caps.push_str(" agent=");
    caps.push_str(&agent(user_agent));
    caps
}

/// `berth/<version>`, or `user_agent` (`GIT_USER_AGENT`) with non-printable bytes replaced, as
/// git does.
pub fn agent(user_agent: Option<&str>) -> String {
    match user_agent {
        Some(a) => a
            .chars()
            .map(|c| if c.is_ascii_graphic() { c } else { '.' })
            .collect(),
        None => crate::AGENT.to_owned(),
    }
}

/// Write the advertisement of `refs` and `alternate_tips`. With a `namespace` prefix
/// (`GIT_NAMESPACE`), refs inside it are advertised without it and the others as `.have`;
/// `is_hidden(name inside the namespace, full name)` leaves refs out. `object_format` is the
/// repository's (the zero id of `capabilities^{}`).
#[allow(clippy::too_many_arguments)]
pub fn write(
    out: &mut impl Write,
    object_format: gix_hash::Kind,
    refs: &Refs,
    namespace: &str,
    is_hidden: impl Fn(Option<&[u8]>, &[u8]) -> bool,
    alternate_tips: &[ObjectId],
    capabilities: &str,
    shallow: &[ObjectId],
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(64 * (refs.len_hint() + 1));
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
    for (full, oid) in refs.iter() {
        let name = full.strip_prefix(namespace.as_bytes());
        if is_hidden(name, full) {
            continue;
        }
        match name {
            Some(name) => {
                seen.insert(oid);
                emit(&mut buf, &oid, name)?;
            }
            None => {
                if seen.insert(oid) {
                    emit(&mut buf, &oid, b".have")?;
                }
            }
        }
    }
    for oid in alternate_tips {
        if seen.insert(*oid) {
            emit(&mut buf, oid, b".have")?;
        }
    }
    if seen.is_empty() {
        emit(&mut buf, &ObjectId::null(object_format), b"capabilities^{}")?;
    }
    // A shallow repository says where its history ends.
    for id in shallow {
        pktline::write_data(&mut buf, format!("shallow {id}\n").as_bytes())?;
    }
    pktline::write_flush(&mut buf)?;
    out.write_all(&buf)?;
    out.flush()
}
