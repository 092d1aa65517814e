//! Symbolic refs among the pushed names (git's `check_aliased_updates`): a pushed symref updates
//! the ref it points to; pushed together with that ref, both must say the same.

use std::io::{self, Write};

use gix_hash::ObjectId;
use gix_object::bstr::{BString, ByteSlice};

use super::command::Cmd;
use crate::protocol::report::Reason;
use crate::protocol::sideband::Sideband;
use crate::refs::RefStore;

/// A pushed name that is a symbolic ref updates the ref it points to; pushed together with
/// that ref, it is skipped when both say the same and both fail when they differ (git's
/// `check_aliased_updates`).
pub(super) fn check_aliased_updates<W: Write, E: Write>(
    cmds: &mut [Cmd],
    store: &dyn RefStore,
    namespace: &str,
    sb: &mut Sideband<W, E>,
) -> io::Result<()> {
    // The names as stored: under the namespace's prefix, if any (copied only then).
    let prefixed: Vec<Vec<u8>> = if namespace.is_empty() {
        Vec::new()
    } else {
        cmds.iter()
            .map(|c| [namespace.as_bytes(), c.command.name.as_slice()].concat())
            .collect()
    };
    let names: Vec<&[u8]> = if namespace.is_empty() {
        cmds.iter().map(|c| c.command.name.as_slice()).collect()
    } else {
        prefixed.iter().map(Vec::as_slice).collect()
    };
    let symrefs = store.symref_targets(&names);
    drop(names);
    if symrefs.iter().all(Option::is_none) {
        return Ok(());
    }
    let by_name: foldhash::HashMap<BString, usize> = cmds
        .iter()
        .enumerate()
        .map(|(i, c)| (c.command.name.clone(), i))
        .collect();
    for (i, target) in symrefs.into_iter().enumerate() {
        if cmds[i].error().is_some() {
            continue;
        }
        let Some(target) = target else {
            continue;
        };
        let Some(target) = target else {
            sb.error(format_args!(
                "refusing update to broken symref '{}'",
                cmds[i].command.name
            ))?;
            cmds[i].skip_update = true;
            cmds[i].refuse(Reason::BrokenSymref);
            continue;
        };
        let in_push = target
            .strip_prefix(namespace.as_bytes())
            .and_then(|t| by_name.get(t.as_bstr()));
        let Some(&j) = in_push else {
            cmds[i].set_target(target);
            continue;
        };
        cmds[i].skip_update = true;
        let (a, b) = (&cmds[i].command, &cmds[j].command);
        if a.old == b.old && a.new == b.new {
            continue;
        }
        let short = |id: &ObjectId| id.to_hex_with_len(7).to_string();
        sb.error(format_args!(
            "refusing inconsistent update between symref '{}' ({}..{}) and its target '{}' ({}..{})",
            a.name,
            short(&a.old),
            short(&a.new),
            b.name,
            short(&b.old),
            short(&b.new)
        ))?;
        cmds[j].skip_update = true;
        cmds[i].refuse(Reason::InconsistentAliasedUpdate);
        cmds[j].refuse(Reason::InconsistentAliasedUpdate);
    }
    Ok(())
}
