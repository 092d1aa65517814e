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

/// The capability list, in git's order.
pub fn capabilities(config: &Advertisement, push_cert_nonce: Option<&str>) -> String {
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

/// Write the advertisement of `refs` and `alternate_tips`. With a `namespace` prefix
/// (`GIT_NAMESPACE`), refs inside it are advertised without it and the others as `.have`;
/// `is_hidden(name inside the namespace, full name)` leaves refs out.
#[allow(clippy::too_many_arguments)]
pub fn write(
    out: &mut impl Write,
    refs: &Refs,
    namespace: &str,
    is_hidden: impl Fn(Option<&[u8]>, &[u8]) -> bool,
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
    for (full, oid) in refs.iter() {
        let name = full.strip_prefix(namespace.as_bytes());
        if is_hidden(name, full) {
            continue;
        }
        match name {
            Some(name) => {
                seen.insert(*oid);
                emit(&mut buf, oid, name)?;
            }
            None => {
                if seen.insert(*oid) {
                    emit(&mut buf, oid, b".have")?;
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

/// The tips of every repository this one borrows objects from (transitively), for `.have`
/// lines, as git's `odb_for_each_alternate_ref`: each alternate whose objects directory is
/// `<repo>/objects` of a repository with `refs/` contributes its refs' values, or, with
/// `core.alternateRefsCommand`, what that command prints for the repository's path (one object
/// id per line); `core.alternateRefsPrefixes` limits the refs.
pub fn alternate_tips(repo: &crate::repo::Repository) -> Vec<ObjectId> {
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
                    .stderr(std::process::Stdio::inherit())
                    .output();
                let Ok(out) = out else { continue };
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    match ObjectId::from_hex(line.as_bytes()) {
                        Ok(id) => tips.push(id),
                        Err(_) => {
                            eprintln!("warning: invalid line while parsing alternate refs: {line}");
                            break;
                        }
                    }
                }
            }
            None => {
                let Ok(refs) = crate::refs::open_other(path).snapshot() else {
                    continue;
                };
                for (name, id) in refs.iter() {
                    let wanted = prefixes.is_empty()
                        || prefixes.iter().any(|p| {
                            name.strip_prefix(p.trim_end_matches('/').as_bytes())
                                .is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
                        });
                    if wanted {
                        tips.push(*id);
                    }
                }
            }
        }
    }
    tips
}
