//! The advertisement phase: the refs (under `GIT_NAMESPACE`, hidden refs left out), the tips of
//! alternate repositories as `.have`s, the capabilities and the shallow commits, written before
//! the client says anything (git's `write_head_info`).

use std::io::Write;

use gix_hash::ObjectId;
use gix_object::bstr::ByteSlice;
use tracing::info_span;

use super::{Fatal, Options};
use crate::protocol::{advertise, pktline};
use crate::refs::RefStore;
use crate::repo::{Repository, policy};

/// Write the advertisement to `out`; git's diagnostics about alternates go to `diagnostics`.
pub(super) fn advertise(
    out: &mut impl Write,
    repo: &Repository,
    store: &dyn RefStore,
    namespace: &str,
    push_cert_nonce: Option<&str>,
    options: &Options,
    diagnostics: &mut dyn Write,
) -> Result<(), Fatal> {
    let _span = info_span!("advertise").entered();
    let config = &repo.config;
    let refs = store.snapshot().map_err(Fatal::Refs)?;
    if options.protocol_version == 1 {
        pktline::write_data(out, b"version 1\n")?;
    }
    let alternates = alternate_tips(repo, diagnostics);
    let caps = advertise::capabilities(
        &config.advertisement,
        push_cert_nonce,
        options.env.user_agent.as_deref(),
        repo.object_format,
    );
    advertise::write(
        out,
        repo.object_format,
        &refs,
        namespace,
        |name, full| {
            policy::is_hidden_in_namespace(
                name.map(|n| n.as_bstr()),
                full.as_bstr(),
                &config.policy.hide_refs,
            )
        },
        &alternates,
        &caps,
        &repo.shallow(),
    )?;
    Ok(())
}

/// The tips of every repository this one borrows objects from (transitively), for `.have`
/// lines, as git's `odb_for_each_alternate_ref`: each alternate whose objects directory is
/// `<repo>/objects` of a repository with `refs/` contributes its refs' values, or, with
/// `core.alternateRefsCommand`, what that command prints for the repository's path (one object
/// id per line); `core.alternateRefsPrefixes` limits the refs.
fn alternate_tips(repo: &Repository, diagnostics: &mut dyn Write) -> Vec<ObjectId> {
    let command = repo
        .config_file
        .string("core.alternateRefsCommand")
        .map(|c| c.to_string());
    let prefixes: Vec<String> = repo
        .config_file
        .string("core.alternateRefsPrefixes")
        .map(|p| {
            p.to_string()
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let mut tips = Vec::new();
    for objects in crate::objects::ingest::alternates_of(&repo.objects_dir) {
        let Some(path) = objects
            .to_str()
            .and_then(|p| p.strip_suffix("/objects"))
            .map(std::path::Path::new)
        else {
            continue;
        };
        if !path.join("refs").is_dir() {
            continue;
        }
        match &command {
            Some(command) => {
                let out = std::process::Command::new("/bin/sh")
                    .arg("-c")
                    .arg(format!("{command} \"$@\""))
                    .arg(command)
                    .arg(path)
                    // receive-pack runs from the git directory, so a relative command is found there.
                    .current_dir(&repo.git_dir)
                    .env_remove("GIT_DIR")
                    .env_remove("GIT_OBJECT_DIRECTORY")
                    .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
                    .env_remove("GIT_QUARANTINE_PATH")
                    .stdin(std::process::Stdio::null())
                    .output();
                let Ok(out) = out else { continue };
                // The command's stderr is receive-pack's, as in git.
                let _ = diagnostics.write_all(&out.stderr);
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    let id = (line.len() == repo.object_format.len_in_hex())
                        .then(|| ObjectId::from_hex(line.as_bytes()).ok())
                        .flatten();
                    match id {
                        Some(id) => tips.push(id),
                        None => {
                            let _ = writeln!(
                                diagnostics,
                                "warning: invalid line while parsing alternate refs: {line}"
                            );
                            break;
                        }
                    }
                }
            }
            None => {
                let Ok(refs) = crate::refs::open_other(path, repo.object_format).snapshot() else {
                    continue;
                };
                for (name, id) in refs.iter() {
                    let wanted = prefixes.is_empty()
                        || prefixes.iter().any(|p| {
                            name.strip_prefix(p.trim_end_matches('/').as_bytes())
                                .is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
                        });
                    if wanted {
                        tips.push(id);
                    }
                }
            }
        }
    }
    tips
}
