//! report-status and report-status-v2: the per-ref verdicts sent to the client on band 1.

use std::io::{self, Write};

use gix_hash::ObjectId;
use gix_object::bstr::{BStr, BString};

use crate::protocol::pktline;
use crate::protocol::sideband::Sideband;

/// Which report the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No report.
    None,
    /// `report-status`
    V1,
    /// `report-status-v2` (identical to v1 unless a proc-receive hook rewrote refs).
    V2,
}

/// What the proc-receive hook reported for a command it handled: each becomes another `ok`
/// entry with `option` lines in report-status-v2.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rewrite {
    /// `option refname`: the ref really updated.
    pub refname: Option<BString>,
    /// `option old-oid`.
    pub old: Option<ObjectId>,
    /// `option new-oid`.
    pub new: Option<ObjectId>,
    /// `option forced-update`.
    pub forced: bool,
}

/// One command's line in the report.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// The ref name as the client sent it.
    pub name: &'a BStr,
    /// `None` for `ok`, else the `ng` reason.
    pub error: Option<&'a str>,
    /// proc-receive's rewrites (v2 only).
    pub rewrites: &'a [Rewrite],
}

/// Build the report: `unpack ok|<error>`, then `ok <ref>` or `ng <ref> <reason>` per command in
/// the client's order (with report-status-v2, proc-receive's rewrites as `option` lines), then
/// a flush.
pub fn build<'a>(
    kind: Kind,
    unpack: Option<&str>,
    entries: impl Iterator<Item = Entry<'a>>,
) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut line = Vec::new();
    let mut put = |buf: &mut Vec<u8>, parts: &[&[u8]]| {
        line.clear();
        for p in parts {
            line.extend_from_slice(p);
        }
        line.push(b'\n');
        pktline::write_data(buf, &line)
    };
    put(&mut buf, &[b"unpack ", unpack.unwrap_or("ok").as_bytes()])?;
    for e in entries {
        match e.error {
            Some(reason) => put(&mut buf, &[b"ng ", e.name, b" ", reason.as_bytes()])?,
            None => put(&mut buf, &[b"ok ", e.name])?,
        }
        if kind != Kind::V2 || e.error.is_some() {
            continue;
        }
        for (i, r) in e.rewrites.iter().enumerate() {
            if i > 0 {
                put(&mut buf, &[b"ok ", e.name])?;
            }
            if let Some(name) = &r.refname {
                put(&mut buf, &[b"option refname ", name])?;
            }
            if let Some(old) = &r.old {
                put(&mut buf, &[b"option old-oid ", old.to_string().as_bytes()])?;
            }
            if let Some(new) = &r.new {
                put(&mut buf, &[b"option new-oid ", new.to_string().as_bytes()])?;
            }
            if r.forced {
                put(&mut buf, &[b"option forced-update"])?;
            }
        }
    }
    pktline::write_flush(&mut buf)?;
    Ok(buf)
}

/// Send a built report over the muxer's band 1.
pub fn send<W: Write, E: Write>(sideband: &mut Sideband<W, E>, report: &[u8]) -> io::Result<()> {
    sideband.data(report)?;
    sideband.flush()
}
