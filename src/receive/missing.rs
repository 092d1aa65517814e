//! Objects a push builds on that are not here — a thin pack's delta base, an object a new ref
//! value reaches — asked of the commit gate ([`CommitGate::objects_missing`]) before git's
//! refusal stands: a cluster replica behind its log lacks what the client saw elsewhere, and
//! says so in the cluster's words, or catches up and has the connectivity check run again.

use std::io::Write;

use super::command::Cmd;
use super::options::{CommitGate, Missing};
use crate::protocol::report::Reason;
use crate::protocol::sideband::Sideband;

/// The unpack failed (`base_missing`: for a delta base the repository lacks): the gate's
/// refusal (`cluster: …`, also on band 2), when the gate says it is its doing. The pack was
/// read: it is not received again, even if the objects are here now.
pub(super) fn after_unpack<W: Write, E: Write>(
    gate: Option<&dyn CommitGate>,
    base_missing: bool,
    sb: &mut Sideband<W, E>,
) -> std::io::Result<Option<String>> {
    let Some(gate) = gate.filter(|_| base_missing) else {
        return Ok(None);
    };
    match gate.objects_missing() {
        Missing::Stands => Ok(None),
        Missing::MayBeHere(refusal) | Missing::Refused(refusal) => {
            let text = format!("cluster: {}", refusal.reason);
            sb.error(&text)?;
            Ok(Some(text))
        }
    }
}

/// The connectivity check refused commands for missing objects: ask the gate. `Ok(true)`:
/// the objects may be here now, check again; `Ok(false)`: git's refusal stands, or the
/// commands it refused now read the gate's refusal (also on band 2).
pub(super) fn after_connectivity<W: Write, E: Write>(
    gate: Option<&dyn CommitGate>,
    cmds: &mut [Cmd],
    sb: &mut Sideband<W, E>,
) -> std::io::Result<bool> {
    let Some(gate) = gate else {
        return Ok(false);
    };
    match gate.objects_missing() {
        Missing::Stands => Ok(false),
        Missing::MayBeHere(_) => Ok(true),
        Missing::Refused(refusal) => {
            let text = format!("cluster: {}", refusal.reason);
            sb.error(&text)?;
            for c in cmds
                .iter_mut()
                .filter(|c| c.error() == Some(&Reason::MissingObjects))
            {
                c.refuse(Reason::Gate(text.clone()));
            }
            Ok(false)
        }
    }
}
