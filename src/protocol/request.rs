//! The client's update request: shallow lines, the command list with its capabilities, and the
//! push options (`read_head_info` / `read_push_options` in git's `builtin/receive-pack.c`).
//!
//! Parsing is bounded: the number of commands, the number of push options and the bytes the
//! request may take are limited by the session's configuration.

use std::io::Read;

use gix_hash::ObjectId;
use gix_object::bstr::{BString, ByteSlice};

use crate::protocol::pktline::{self, Packet};

/// One `<old> <new> <ref>` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The value the client believes the ref has (zero: must not exist).
    pub old: ObjectId,
    /// The value to set (zero: delete).
    pub new: ObjectId,
    /// The ref name as the client sent it.
    pub name: BString,
}

impl Command {
    /// Whether the command deletes its ref.
    pub fn is_delete(&self) -> bool {
        self.new.is_null()
    }
    /// Whether the command creates its ref.
    pub fn is_create(&self) -> bool {
        self.old.is_null()
    }
}

/// The capabilities the client asked for (only those that were advertised count).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `report-status`
    pub report_status: bool,
    /// `report-status-v2`
    pub report_status_v2: bool,
    /// `side-band-64k`
    pub side_band_64k: bool,
    /// `quiet`
    pub quiet: bool,
    /// `atomic` (when advertised)
    pub atomic: bool,
    /// `push-options` (when advertised)
    pub push_options: bool,
    /// `agent=…`
    pub agent: Option<String>,
}

/// What may be accepted, as advertised.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `atomic` was advertised.
    pub atomic: bool,
    /// `push-options` was advertised.
    pub push_options: bool,
    /// At most this many commands.
    pub max_commands: usize,
    /// At most this many push options.
    pub max_push_options: usize,
    /// At most this many bytes for commands and options together.
    pub max_bytes: u64,
    /// The repository's object format (advertised as `object-format=`): the length of every
    /// id in commands and shallow lines, and the only `object-format=` a client may ask for.
    pub object_format: gix_hash::Kind,
}

/// The whole request before the pack, its commands each made a `C` as it is read (the
/// receiving session's per-command state, so a million commands are not held twice).
#[derive(Debug, Clone)]
pub struct Request<C = Command> {
    /// Commands in the order the client sent them.
    pub commands: Vec<C>,
    /// The capabilities the client asked for.
    pub capabilities: Capabilities,
    /// `shallow <oid>` lines: the client's shallow roots.
    pub shallow: Vec<ObjectId>,
    /// Push options, when negotiated.
    pub push_options: Vec<BString>,
    /// The push certificate of a signed push (between `push-cert` and `push-cert-end`), whose
    /// body carried the commands.
    pub push_cert: Option<Vec<u8>>,
}

/// A request git's receive-pack would die on. The `Display` text is git's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Framing error or hang-up.
    #[error(transparent)]
    Packet(#[from] pktline::Error),
    /// A command line that is not `<old> <new> <ref>`.
    #[error("protocol error: expected old/new/ref, got '{0}'")]
    ExpectedCommand(String),
    /// A bad `shallow` line.
    #[error("protocol error: expected shallow sha, got '{0}'")]
    ExpectedShallow(String),
    /// `object-format=` names another hash than the repository's.
    #[error("error: unsupported object format '{0}'")]
    UnsupportedObjectFormat(String),
    /// A non-data packet inside a push certificate.
    #[error("protocol error: got an unexpected packet")]
    UnexpectedPacket,
    /// Commands both signed and unsigned.
    #[error("protocol error: got both push certificate and unsigned commands")]
    CertAndCommands,
    /// A certificate without the blank line before its commands.
    #[error("malformed push certificate {0}")]
    MalformedCert(String),
    /// More commands than `berth.maxCommands`.
    #[error("protocol error: too many commands (more than {0}, see berth.maxCommands)")]
    TooManyCommands(usize),
    /// More push options than `berth.maxPushOptions`.
    #[error("protocol error: too many push options (more than {0}, see berth.maxPushOptions)")]
    TooManyPushOptions(usize),
    /// The request is larger than `berth.maxRequestBytes`.
    #[error("protocol error: request larger than {0} bytes (see berth.maxRequestBytes)")]
    TooLarge(u64),
}

impl<C> Default for Request<C> {
    fn default() -> Self {
        Request {
            commands: Vec::new(),
            capabilities: Capabilities::default(),
            shallow: Vec::new(),
            push_options: Vec::new(),
            push_cert: None,
        }
    }
}

/// What the client sent first.
#[derive(Debug)]
pub enum Start<C = Command> {
    /// A bare flush: the client wants nothing; the session ends without output.
    Nothing,
    /// A request.
    Request(Request<C>),
}

/// Read the request from `reader`, leaving it positioned at the pack.
pub fn read<R: Read>(reader: &mut pktline::Reader<R>, limits: &Limits) -> Result<Start, Error> {
    read_as(reader, limits)
}

/// [`read`], each command made a `C` as it is read.
pub fn read_as<C: From<Command>, R: Read>(
    reader: &mut pktline::Reader<R>,
    limits: &Limits,
) -> Result<Start<C>, Error> {
    let mut req = Request::<C>::default();
    let start = reader.bytes_read();
    let hex_len = limits.object_format.len_in_hex();
    let mut saw_any = false;
    loop {
        if reader.bytes_read() - start > limits.max_bytes {
            return Err(Error::TooLarge(limits.max_bytes));
        }
        let line = match reader.read()? {
            Packet::Data(d) => pktline::chomp(d),
            _ => break,
        };
        saw_any = true;
        if line.len() > 8 && line.starts_with(b"shallow ") {
            let hex = &line[8..];
            let oid = (hex.len() == hex_len)
                .then(|| ObjectId::from_hex(hex).ok())
                .flatten()
                .ok_or_else(|| Error::ExpectedShallow(lossy(hex)))?;
            req.shallow.push(oid);
            continue;
        }
        let (line, features) = match line.find_byte(0) {
            Some(nul) => (&line[..nul], Some(&line[nul + 1..])),
            None => (line, None),
        };
        if let Some(features) = features {
            parse_capabilities(features, limits, &mut req.capabilities)?;
        }
        if line == b"push-cert" {
            // A signed push: the certificate's lines are kept as they are (not chomped); a
            // flush inside it ends the whole request.
            let cert = req.push_cert.get_or_insert_with(Vec::new);
            let mut true_flush = false;
            loop {
                if reader.bytes_read() - start > limits.max_bytes {
                    return Err(Error::TooLarge(limits.max_bytes));
                }
                match reader.read()? {
                    Packet::Flush => {
                        true_flush = true;
                        break;
                    }
                    Packet::Data(b"push-cert-end\n") => break,
                    Packet::Data(d) => cert.extend_from_slice(d),
                    _ => return Err(Error::UnexpectedPacket),
                }
            }
            if true_flush {
                break;
            }
            continue;
        }
        if req.commands.len() >= limits.max_commands {
            return Err(Error::TooManyCommands(limits.max_commands));
        }
        req.commands.push(parse_command(line, hex_len)?.into());
    }
    if !saw_any {
        return Ok(Start::Nothing);
    }
    if let Some(cert) = &req.push_cert {
        if !req.commands.is_empty() {
            return Err(Error::CertAndCommands);
        }
        let body = cert
            .find(b"\n\n")
            .map(|i| i + 2)
            .ok_or_else(|| Error::MalformedCert(lossy(&cert[..cert.len().min(100)])))?;
        let end = crate::protocol::push_cert::signature_start(cert).max(body);
        for line in cert[body..end]
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
        {
            if req.commands.len() >= limits.max_commands {
                return Err(Error::TooManyCommands(limits.max_commands));
            }
            req.commands.push(parse_command(line, hex_len)?.into());
        }
    }
    if req.capabilities.push_options {
        loop {
            if reader.bytes_read() - start > limits.max_bytes {
                return Err(Error::TooLarge(limits.max_bytes));
            }
            let option = match reader.read()? {
                Packet::Data(d) => pktline::chomp(d),
                _ => break,
            };
            if req.push_options.len() >= limits.max_push_options {
                return Err(Error::TooManyPushOptions(limits.max_push_options));
            }
            req.push_options.push(option.into());
        }
    }
    Ok(Start::Request(req))
}

fn parse_command(line: &[u8], hex_len: usize) -> Result<Command, Error> {
    let bad = || Error::ExpectedCommand(lossy(line));
    if line.len() < 2 * hex_len + 3 || line[hex_len] != b' ' || line[2 * hex_len + 1] != b' ' {
        return Err(bad());
    }
    let old = command_id(&line[..hex_len]).ok_or_else(bad)?;
    let new = command_id(&line[hex_len + 1..2 * hex_len + 1]).ok_or_else(bad)?;
    Ok(Command {
        old,
        new,
        name: line[2 * hex_len + 2..].into(),
    })
}

/// A command's object id from its hex digits: the null id, the old value of every create and
/// the new value of every delete, found by one comparison instead of decoded (decoding an id
/// was 11 % of the instructions of a push of 10,000 new refs, half of it the zeros).
fn command_id(hex: &[u8]) -> Option<ObjectId> {
    const ZEROS: &[u8; 64] = &[b'0'; 64];
    // `from_hex_len` also names the kind of a shorter (abbreviated) id.
    match gix_hash::Kind::from_hex_len(hex.len()).filter(|k| k.len_in_hex() == hex.len()) {
        Some(kind) if hex == &ZEROS[..hex.len()] => Some(ObjectId::null(kind)),
        _ => ObjectId::from_hex(hex).ok(),
    }
}

fn parse_capabilities(
    features: &[u8],
    limits: &Limits,
    caps: &mut Capabilities,
) -> Result<(), Error> {
    // A client that does not say `object-format=` speaks SHA-1 (git's
    // `GIT_HASH_SHA1_LEGACY`); either way it must be the repository's. git compares the value
    // up to the next space, and names in its error everything from the value on.
    let mut format: Option<(&[u8], &[u8])> = None;
    for word in features.split(|&b| b == b' ').filter(|w| !w.is_empty()) {
        match word {
            b"report-status" => caps.report_status = true,
            b"report-status-v2" => caps.report_status_v2 = true,
            b"side-band-64k" => caps.side_band_64k = true,
            b"quiet" => caps.quiet = true,
            b"atomic" if limits.atomic => caps.atomic = true,
            b"push-options" if limits.push_options => caps.push_options = true,
            _ => {
                if let Some(f) = word.strip_prefix(b"object-format=") {
                    // git's parse_feature_value takes the first.
                    let at = f.as_ptr() as usize - features.as_ptr() as usize;
                    format.get_or_insert((f, &features[at..]));
                } else if let Some(agent) = word.strip_prefix(b"agent=") {
                    caps.agent = Some(lossy(agent));
                } else if let Some(sid) = word.strip_prefix(b"session-id=") {
                    // Logged as git does (trace2 `transfer/client-sid`); not otherwise used.
                    crate::protocol::trace2::data("transfer", "client-sid", &lossy(sid));
                }
                // Unknown capabilities are ignored, as git does.
            }
        }
    }
    let (format, shown) = format.unwrap_or((b"sha1", b"sha1"));
    if format != hash_name(limits.object_format).as_bytes() {
        return Err(Error::UnsupportedObjectFormat(lossy(shown)));
    }
    Ok(())
}

/// git's name for a hash algorithm (`object-format=` values, `extensions.objectFormat`).
pub fn hash_name(kind: gix_hash::Kind) -> &'static str {
    match kind {
        gix_hash::Kind::Sha1 => "sha1",
        _ => "sha256",
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        atomic: true,
        push_options: true,
        max_commands: 3,
        max_push_options: 2,
        max_bytes: 1 << 20,
        object_format: gix_hash::Kind::Sha1,
    };
    const A: &str = "1111111111111111111111111111111111111111";
    const Z: &str = "0000000000000000000000000000000000000000";

    fn pkt(s: &str) -> String {
        format!("{:04x}{s}", s.len() + 4)
    }

    fn parse(bytes: &str) -> Result<Start, Error> {
        read(&mut pktline::Reader::new(bytes.as_bytes()), &LIMITS)
    }

    #[test]
    fn commands_capabilities_options() {
        let input = format!(
            "{}{}0000{}{}0000PACK",
            pkt(&format!(
                "{Z} {A} refs/heads/main\0 report-status-v2 side-band-64k atomic push-options object-format=sha1 agent=git/2.47"
            )),
            pkt(&format!("{A} {Z} refs/heads/old\n")),
            pkt("opt=1\n"),
            pkt("two"),
        );
        let mut reader = pktline::Reader::new(input.as_bytes());
        let Start::Request(req) = read(&mut reader, &LIMITS).unwrap() else {
            panic!()
        };
        assert_eq!(req.commands.len(), 2);
        assert_eq!(req.commands[0].name, "refs/heads/main");
        assert!(req.commands[1].is_delete());
        assert_eq!(req.commands[1].name, "refs/heads/old");
        assert!(
            req.capabilities.report_status_v2
                && req.capabilities.atomic
                && req.capabilities.side_band_64k
        );
        assert!(!req.capabilities.report_status);
        assert_eq!(
            req.push_options,
            vec![BString::from("opt=1"), BString::from("two")]
        );
        let mut rest = Vec::new();
        reader.into_inner().read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"PACK");
    }

    #[test]
    fn a_command_id_is_what_gix_hash_decodes_the_zeros_included() {
        for hex in [
            "0".repeat(40),
            "0".repeat(64),
            format!("{}1", "0".repeat(39)),
            A.to_owned(),
            "a".repeat(64),
            "0".repeat(39),
            "0".repeat(41),
            format!("{}g", "0".repeat(39)),
            String::new(),
        ] {
            assert_eq!(
                command_id(hex.as_bytes()),
                ObjectId::from_hex(hex.as_bytes()).ok(),
                "{hex:?}"
            );
        }
        assert!(command_id(Z.as_bytes()).is_some_and(|id| id.is_null()));
        let sha256 = command_id("0".repeat(64).as_bytes()).unwrap();
        assert_eq!(sha256.kind(), gix_hash::Kind::Sha256);
    }

    #[test]
    fn bare_flush_is_nothing() {
        assert!(matches!(parse("0000"), Ok(Start::Nothing)));
    }

    #[test]
    fn errors_in_gits_words() {
        let e = parse(&format!("{}0000", pkt("garbage"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "protocol error: expected old/new/ref, got 'garbage'"
        );
        let e = parse(&format!(
            "{}0000",
            pkt(&format!("{Z} {A} refs/heads/x\0object-format=sha256"))
        ))
        .unwrap_err();
        assert_eq!(e.to_string(), "error: unsupported object format 'sha256'");
        let e = parse(&format!("{}0000", pkt("shallow xyz"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "protocol error: expected shallow sha, got 'xyz'"
        );
        let many: String = (0..4)
            .map(|i| pkt(&format!("{Z} {A} refs/heads/{i}")))
            .collect();
        let e = parse(&format!("{many}0000")).unwrap_err();
        assert!(e.to_string().contains("too many commands"));
        let e = parse(&pkt(&format!("{Z} {A} refs/heads/x"))).unwrap_err();
        assert_eq!(e.to_string(), "the remote end hung up unexpectedly");
    }

    #[test]
    fn sha256_ids_and_the_clients_object_format() {
        let limits = Limits {
            object_format: gix_hash::Kind::Sha256,
            ..LIMITS
        };
        let parse = |bytes: &str| read(&mut pktline::Reader::new(bytes.as_bytes()), &limits);
        let (a, z) = ("1".repeat(64), "0".repeat(64));
        let Start::Request(req) = parse(&format!(
            "{}{}0000",
            pkt(&format!(
                "{z} {a} refs/heads/main\0report-status object-format=sha256 agent=git/2.47"
            )),
            pkt(&format!("shallow {a}")),
        ))
        .unwrap() else {
            panic!()
        };
        assert_eq!(req.commands[0].new.kind(), gix_hash::Kind::Sha256);
        assert_eq!(req.shallow[0].to_string(), a);
        // A SHA-1 client: without object-format=, or naming sha1 (git shows the rest of the
        // capability list from the value on).
        let e = parse(&format!("{}0000", pkt(&format!("{Z} {A} refs/heads/x\0report-status"))))
            .unwrap_err();
        assert_eq!(e.to_string(), "error: unsupported object format 'sha1'");
        let e = parse(&format!(
            "{}0000",
            pkt(&format!("{z} {a} refs/heads/x\0object-format=sha1 agent=x"))
        ))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "error: unsupported object format 'sha1 agent=x'"
        );
        // SHA-1 ids where SHA-256 ones are due.
        let e = parse(&format!(
            "{}0000",
            pkt(&format!("{Z} {A} refs/heads/x\0object-format=sha256"))
        ))
        .unwrap_err();
        assert!(e.to_string().starts_with("protocol error: expected old/new/ref"));
        let e = parse(&format!("{}0000", pkt(&format!("shallow {A}")))).unwrap_err();
        assert!(e.to_string().starts_with("protocol error: expected shallow sha"));
    }
}
