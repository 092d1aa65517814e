//! report-status and report-status-v2: the per-ref verdicts sent to the client on band 1.

use std::io::{self, Write};

use gix_object::bstr::BStr;

use crate::pktline;
use crate::sideband::Sideband;

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

/// Build the report: `unpack ok|<error>`, then `ok <ref>` or `ng <ref> <reason>` per command in
/// the client's order, then a flush.
pub fn build<'a>(
    unpack: Option<&str>,
    results: impl Iterator<Item = (&'a BStr, Option<&'a str>)>,
) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut line = Vec::new();
    pktline::write_data(
        &mut buf,
        format!("unpack {}\n", unpack.unwrap_or("ok")).as_bytes(),
    )?;
    for (name, error) in results {
        line.clear();
        match error {
            None => line.extend_from_slice(b"ok "),
            Some(_) => line.extend_from_slice(b"ng "),
        }
        line.extend_from_slice(name);
        if let Some(reason) = error {
            line.push(b' ');
            line.extend_from_slice(reason.as_bytes());
        }
        line.push(b'\n');
        pktline::write_data(&mut buf, &line)?;
    }
    pktline::write_flush(&mut buf)?;
    Ok(buf)
}

/// Send a built report over the muxer's band 1.
pub fn send<W: Write, E: Write>(sideband: &mut Sideband<W, E>, report: &[u8]) -> io::Result<()> {
    sideband.data(report)?;
    sideband.flush()
}
