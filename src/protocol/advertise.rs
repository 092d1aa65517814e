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

/// Write the advertisement of `refs` and `alternate_tips` to `out` line by line (batching
/// them is a buffered writer's job: a repository's refs are never copied whole). With a
/// `namespace` prefix (`GIT_NAMESPACE`), refs inside it are advertised without it and the
/// others as `.have`; `is_hidden(name inside the namespace, full name)` leaves refs out.
/// `object_format` is the repository's (the zero id of `capabilities^{}`).
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
    // As git's `show_ref_cb`: the ids advertised so far, so that a `.have` (a ref outside the
    // namespace, an alternate's tip) names each id once and never one already advertised.
    // Without either there is no `.have` to write, and nothing to keep.
    let mut seen = (!namespace.is_empty() || !alternate_tips.is_empty()).then(HashSet::new);
    let mut lines = Lines {
        line: Vec::with_capacity(512),
        written: 0,
        capabilities,
    };
    for (full, oid) in refs.iter() {
        let name = full.strip_prefix(namespace.as_bytes());
        if is_hidden(name, full) {
            continue;
        }
        match name {
            Some(name) => {
                if let Some(seen) = seen.as_mut() {
                    seen.insert(oid);
                }
                lines.emit(out, &oid, name)?;
            }
            None => {
                if seen.as_mut().is_some_and(|s| s.insert(oid)) {
                    lines.emit(out, &oid, b".have")?;
                }
            }
        }
    }
    for oid in alternate_tips {
        if seen.as_mut().is_some_and(|s| s.insert(*oid)) {
            lines.emit(out, oid, b".have")?;
        }
    }
    if lines.written == 0 {
        lines.emit(out, &ObjectId::null(object_format), b"capabilities^{}")?;
    }
    // A shallow repository says where its history ends.
    for id in shallow {
        pktline::write_data(out, format!("shallow {id}\n").as_bytes())?;
    }
    pktline::write_flush(out)?;
    out.flush()
}

/// The advertisement's ref lines as they are written: the first one carries the capabilities.
struct Lines<'a> {
    line: Vec<u8>,
    written: usize,
    capabilities: &'a str,
}

impl Lines<'_> {
    fn emit(&mut self, out: &mut impl Write, oid: &ObjectId, name: &[u8]) -> io::Result<()> {
        let mut hex = [0u8; gix_hash::Kind::longest().len_in_hex()];
        let line = &mut self.line;
        line.clear();
        line.extend_from_slice(oid.hex_to_buf(&mut hex).as_bytes());
        line.push(b' ');
        line.extend_from_slice(name);
        if self.written == 0 {
            line.push(0);
            line.extend_from_slice(self.capabilities.as_bytes());
        }
        line.push(b'\n');
        self.written += 1;
        pktline::write_data(out, line)
    }
}
