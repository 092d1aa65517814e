//! The unpack phase: the pack that follows the commands is received into a quarantine (git's
//! `unpack` with `index-pack` / `unpack-objects`), with index-pack's progress relayed to the
//! client. Nothing is visible to the repository until the quarantine is migrated. The bytes
//! read are shown to `Options::pack_tee` as they are consumed (see `tee.rs`).

use std::io::{BufRead, Write};

use gix_hash::ObjectId;
use tracing::info_span;

use super::Options;
use super::outcome::Unpack;
use super::tee::Tee;
use crate::objects::ingest::{self, Quarantine, Received};
use crate::protocol::sideband::{Mode, Sideband};
use crate::repo::Repository;

/// What the unpack phase leaves for the next ones.
pub(super) struct Unpacked {
    /// How it went.
    pub(super) status: Unpack,
    /// The quarantine holding the received objects; removed when dropped unmigrated.
    pub(super) quarantine: Option<Quarantine>,
    /// The received pack's index, for the connectivity walk.
    pub(super) received: Option<Received>,
    /// It failed for a delta base the repository lacks ([`ingest::UnpackError::base_missing`]).
    pub(super) base_missing: bool,
}

/// Receive the pack from `input` when the commands need one (anything but deletions).
#[allow(clippy::too_many_arguments)]
pub(super) fn unpack<W: Write, E: Write>(
    input: &mut impl BufRead,
    needs_pack: bool,
    repo: &Repository,
    objects: &gix_odb::Handle,
    client_shallow: &[ObjectId],
    quiet: bool,
    options: &Options,
    sb: &mut Sideband<W, E>,
) -> std::io::Result<Unpacked> {
    let mut unpacked = Unpacked {
        status: Unpack::NotNeeded,
        quarantine: None,
        received: None,
        base_missing: false,
    };
    if !needs_pack {
        return Ok(unpacked);
    }
    let _span = info_span!("ingest").entered();
    let mut q = match repo.quarantine() {
        Ok(q) => q,
        Err(e) => {
            unpacked.status = Unpack::Failed(ingest::UnpackError::Quarantine(e).to_string());
            return Ok(unpacked);
        }
    };
    let opts = ingest::Options {
        reject_thin_pack: options.reject_thin_pack,
        ..repo.ingest_options(client_shallow)
    };
    let mut sink = options.pack_tee.as_ref().map(|t| t.start(client_shallow));
    let result = match sink.as_deref_mut() {
        Some(sink) => {
            let mut tee = Tee { inner: input, sink };
            ingest::receive_pack(&mut tee, &mut q, objects, opts)
        }
        None => ingest::receive_pack(input, &mut q, objects, opts),
    };
    if let Some(sink) = sink {
        sink.end(result.is_ok());
    }
    match result {
        Ok(r) => {
            for m in &r.messages {
                sb.progress(format!("{m}\n").as_bytes())?;
            }
            // git's index-pack (used from receive.unpackLimit objects on) prints this, only
            // through the sideband.
            let progress = !quiet && sb.mode() == Mode::Band64k;
            if let Some(d) = r.deltas.filter(|&d| d > 0 && progress) {
                let end = resolving_deltas_end(r.local_objects);
                sb.progress(format!("Resolving deltas: 100% ({d}/{d}), {end}.\n").as_bytes())?;
            }
            unpacked.status = Unpack::Ok;
            unpacked.received = Some(r);
        }
        Err(e) => {
            for m in e.messages() {
                sb.progress(format!("{m}\n").as_bytes())?;
            }
            if let Some(detail) = e.detail() {
                sb.progress(format!("fatal: {detail}\n").as_bytes())?;
            }
            unpacked.status = Unpack::Failed(e.to_string());
            unpacked.base_missing = e.base_missing();
        }
    }
    unpacked.quarantine = Some(q);
    Ok(unpacked)
}

/// How index-pack's `Resolving deltas` line ends (`stop_progress_msg` in `conclude_pack`):
/// `done`, or, when the pack was thin, how many objects of the repository completed it.
fn resolving_deltas_end(local_objects: u32) -> String {
    match local_objects {
        0 => "done".into(),
        1 => "completed with 1 local object".into(),
        n => format!("completed with {n} local objects"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn resolving_deltas_end_as_index_pack() {
        use super::resolving_deltas_end as end;
        assert_eq!(end(0), "done");
        assert_eq!(end(1), "completed with 1 local object");
        assert_eq!(end(3), "completed with 3 local objects");
    }
}
