//! Signed pushes: the `push-cert=<nonce>` capability (`receive.certNonceSeed`), the nonce's
//! HMAC and its check (`receive.certNonceSlop`), and the certificate's signature checked with
//! gpg or gpgsm as git's `check_signature` does, for the `GIT_PUSH_CERT*` variables that
//! pre-receive and post-receive get. receive-pack itself never refuses a push for its
//! signature; that is the hooks' decision.

use std::io::Write;
use std::process::{Command, Stdio};

use sha1::Digest;

/// HMAC-SHA1 (RFC 2104), as git's `hmac_hash` for SHA-1 repositories: plain SHA-1, not a
/// content hash, so the `sha1` crate.
fn hmac_sha1(key: &[u8], text: &[u8]) -> [u8; 20] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..20].copy_from_slice(&sha1::Sha1::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    let inner = sha1::Sha1::new()
        .chain_update(&ipad)
        .chain_update(text)
        .finalize();
    sha1::Sha1::new()
        .chain_update(&opad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// HMAC (RFC 2104) with the repository's hash, as git's `hmac_hash` (`the_hash_algo`): SHA-1
/// in SHA-1 repositories, SHA-256 in SHA-256 repositories (both have 64-byte blocks).
fn hmac(hash: gix_hash::Kind, key: &[u8], text: &[u8]) -> Vec<u8> {
    if hash == gix_hash::Kind::Sha1 {
        return hmac_sha1(key, text).to_vec();
    }
    const BLOCK: usize = 64;
    let digest = |parts: &[&[u8]]| -> Vec<u8> {
        let mut h = gix_hash::hasher(hash);
        for p in parts {
            h.update(p);
        }
        h.try_finalize()
            .map(|id| id.as_bytes().to_vec())
            .unwrap_or_default()
    };
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        let d = digest(&[key]);
        k[..d.len()].copy_from_slice(&d);
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    let inner = digest(&[&ipad, text]);
    digest(&[&opad, &inner])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The nonce git issues: `<stamp>-<hex HMAC(key = "<dir>:<stamp>", text = seed)>`, `dir`
/// being the directory argument exactly as given, the HMAC of the repository's hash `hash`.
pub fn nonce(hash: gix_hash::Kind, dir: &str, stamp: u64, seed: &str) -> String {
    format!(
        "{stamp}-{}",
        hex(&hmac(
            hash,
            format!("{dir}:{stamp}").as_bytes(),
            seed.as_bytes()
        ))
    )
}

/// What git reports in `GIT_PUSH_CERT_NONCE_STATUS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NonceStatus {
    /// `MISSING`: the certificate has no nonce.
    Missing,
    /// No nonce was issued (never exported).
    Unsolicited,
    /// `BAD`.
    Bad,
    /// `OK`.
    Ok,
    /// `SLOP`, with the age difference in seconds.
    Slop(i64),
}

impl NonceStatus {
    /// The variable's value.
    pub fn as_str(&self) -> &'static str {
        match self {
            NonceStatus::Missing => "MISSING",
            NonceStatus::Unsolicited => "UNSOLICITED",
            NonceStatus::Bad => "BAD",
            NonceStatus::Ok => "OK",
            NonceStatus::Slop(_) => "SLOP",
        }
    }
}

/// The value of the header `name` in the certificate's header lines.
pub fn header<'a>(cert: &'a str, name: &str) -> Option<&'a str> {
    cert.lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
}

/// Every `push-option` header, in order.
pub fn push_options(cert: &str) -> Vec<&str> {
    cert.lines()
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.strip_prefix("push-option "))
        .collect()
}

/// Check the certificate's nonce against the one issued (`issued`), as git's `check_nonce`.
/// In stateless mode (HTTP) a nonce issued by another request passes if its HMAC verifies;
/// within `slop_limit` seconds it counts as issued (and is what `issued` becomes).
pub fn check_nonce(
    hash: gix_hash::Kind,
    cert: &str,
    issued: &mut Option<String>,
    stateless: bool,
    dir: &str,
    seed: &str,
    slop_limit: i64,
) -> NonceStatus {
    let Some(received) = header(cert, "nonce") else {
        return NonceStatus::Missing;
    };
    let Some(ours) = issued.as_deref() else {
        return NonceStatus::Unsolicited;
    };
    if ours == received {
        return NonceStatus::Ok;
    }
    if !stateless {
        return NonceStatus::Bad;
    }
    let Some((stamp, _)) = received.split_once('-') else {
        return NonceStatus::Bad;
    };
    let Ok(stamp) = stamp.parse::<u64>() else {
        return NonceStatus::Bad;
    };
    if !received.starts_with(|c: char| c.is_ascii_digit() && c != '0') {
        return NonceStatus::Bad;
    }
    let expect = nonce(hash, dir, stamp, seed);
    let equal = expect.len() == received.len()
        && expect
            .bytes()
            .zip(received.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !equal {
        return NonceStatus::Bad;
    }
    let ours_stamp: i64 = ours
        .split('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // In 128 bits: the received stamp is any u64 (git's `(long)ostamp - (long)stamp` overflows
    // for a stamp near 2^63, and `labs` of the result may stay negative).
    let slop = i128::from(ours_stamp) - i128::from(stamp);
    if slop_limit != 0 && slop.abs() <= i128::from(slop_limit) {
        *issued = Some(received.to_owned());
        NonceStatus::Ok
    } else {
        NonceStatus::Slop(i64::try_from(slop).unwrap_or(if slop < 0 { i64::MIN } else { i64::MAX }))
    }
}

/// Where the signature starts: the last line that begins a signature (git's
/// `parse_signed_buffer`).
pub fn signature_start(cert: &[u8]) -> usize {
    let mut at = 0;
    let mut found = cert.len();
    while at < cert.len() {
        if signature_format(&cert[at..]).is_some() {
            found = at;
        }
        at = match cert[at..].iter().position(|&b| b == b'\n') {
            Some(eol) => at + eol + 1,
            None => cert.len(),
        };
    }
    found
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    OpenPgp,
    X509,
    Ssh,
}

fn signature_format(line: &[u8]) -> Option<Format> {
    const SIGS: [(&[u8], Format); 4] = [
        (b"-----BEGIN PGP SIGNATURE-----", Format::OpenPgp),
        (b"-----BEGIN PGP MESSAGE-----", Format::OpenPgp),
        (b"-----BEGIN SIGNED MESSAGE-----", Format::X509),
        (b"-----BEGIN SSH SIGNATURE-----", Format::Ssh),
    ];
    SIGS.iter()
        .find(|(s, _)| line.starts_with(s))
        .map(|(_, f)| *f)
}

/// The outcome of checking the signature: git's `%G?` letter, the signer and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// G, B, E, X, Y, R, or N (no or unverifiable signature).
    pub result: char,
    /// Who signed, as the signing tool names them.
    pub signer: String,
    /// The key id.
    pub key: String,
}

/// Check the signature over the certificate's payload with the tool git would use
/// (`gpg.program` / `gpg.openpgp.program`, `gpg.x509.program`, and for ssh signatures
/// `gpg.ssh.program` against `gpg.ssh.allowedSignersFile`).
/// git's own errors on the way (a missing `gpg.ssh.allowedSignersFile`) go to `diagnostics`.
pub fn verify(
    cert: &[u8],
    config: &gix_config::File,
    diagnostics: &mut dyn std::io::Write,
) -> Signature {
    let mut sig = Signature {
        result: 'N',
        signer: String::new(),
        key: String::new(),
    };
    let start = signature_start(cert);
    let (payload, signature) = cert.split_at(start);
    let program = match signature_format(signature) {
        Some(Format::OpenPgp) => config
            .string("gpg.openpgp.program")
            .or_else(|| config.string("gpg.program"))
            .map(|p| p.to_string())
            .unwrap_or_else(|| "gpg".into()),
        Some(Format::X509) => config
            .string("gpg.x509.program")
            .map(|p| p.to_string())
            .unwrap_or_else(|| "gpgsm".into()),
        Some(Format::Ssh) => return verify_ssh(payload, signature, config, diagnostics),
        None => return sig,
    };
    let Ok(mut sigfile) = tempfile::Builder::new().prefix(".git_vtag_tmp").tempfile() else {
        return sig;
    };
    if sigfile.write_all(signature).is_err() {
        return sig;
    }
    let mut cmd = Command::new(&program);
    if signature_format(signature) == Some(Format::OpenPgp) {
        cmd.arg("--keyid-format=long");
    }
    cmd.args(["--status-fd=1", "--verify"])
        .arg(sigfile.path())
        .arg("-");
    let child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else { return sig };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(payload);
    }
    let Ok(out) = child.wait_with_output() else {
        return sig;
    };
    const STATUS: [(&str, char, bool); 6] = [
        ("GOODSIG ", 'G', true),
        ("BADSIG ", 'B', true),
        ("ERRSIG ", 'E', false),
        ("EXPSIG ", 'X', true),
        ("EXPKEYSIG ", 'Y', true),
        ("REVKEYSIG ", 'R', true),
    ];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(line) = line.strip_prefix("[GNUPG:] ") else {
            continue;
        };
        for (prefix, result, has_uid) in STATUS {
            if let Some(rest) = line.strip_prefix(prefix) {
                sig.result = result;
                let (key, uid) = rest.split_once(' ').unwrap_or((rest, ""));
                sig.key = key.to_owned();
                if has_uid {
                    sig.signer = uid.to_owned();
                }
            }
        }
    }
    sig
}

/// git's `verify_ssh_signed_buffer`: find the principals the allowed-signers file has for the
/// signature, verify against each until one is good.
fn verify_ssh(
    payload: &[u8],
    signature: &[u8],
    config: &gix_config::File,
    diagnostics: &mut dyn std::io::Write,
) -> Signature {
    let mut sig = Signature {
        result: 'N',
        signer: String::new(),
        key: String::new(),
    };
    let program = config
        .string("gpg.ssh.program")
        .map(|p| p.to_string())
        .unwrap_or_else(|| "ssh-keygen".into());
    let Some(allowed) = config
        .path("gpg.ssh.allowedSignersFile")
        .and_then(|p| p.interpolate(Default::default()).ok())
    else {
        let _ = writeln!(
            diagnostics,
            "error: gpg.ssh.allowedSignersFile needs to be configured and exist for ssh signature verification"
        );
        return sig;
    };
    let Ok(mut sigfile) = tempfile::Builder::new().prefix(".git_vtag_tmp").tempfile() else {
        return sig;
    };
    if sigfile.write_all(signature).is_err() {
        return sig;
    }
    let run = |args: &[&std::ffi::OsStr], input: &[u8]| -> Option<std::process::Output> {
        let mut child = Command::new(&program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input);
        }
        child.wait_with_output().ok()
    };
    use std::ffi::OsStr;
    let principals = run(
        &[
            OsStr::new("-Y"),
            OsStr::new("find-principals"),
            OsStr::new("-f"),
            allowed.as_os_str(),
            OsStr::new("-s"),
            sigfile.path().as_os_str(),
        ],
        b"",
    );
    let principals = principals
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let revocation = config
        .path("gpg.ssh.revocationFile")
        .and_then(|p| p.interpolate(Default::default()).ok());
    sig.result = 'B';
    for principal in principals
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.is_empty())
    {
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("-Y"),
            OsStr::new("verify"),
            OsStr::new("-n"),
            OsStr::new("git"),
            OsStr::new("-f"),
            allowed.as_os_str(),
            OsStr::new("-I"),
            OsStr::new(principal),
            OsStr::new("-s"),
            sigfile.path().as_os_str(),
        ];
        if let Some(r) = revocation.as_deref().filter(|r| r.exists()) {
            args.push(OsStr::new("-r"));
            args.push(r.as_os_str());
        }
        let Some(out) = run(&args, payload) else {
            continue;
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text.lines().next().unwrap_or_default();
        if out.status.success()
            && let Some(rest) = line.strip_prefix("Good \"git\" signature for ")
            && let Some(with) = rest.rfind(" with ")
        {
            sig.result = 'G';
            sig.signer = rest[..with].to_owned();
            if let Some(key) = rest[with..].find("key ") {
                sig.key = rest[with + key + 4..].to_owned();
            } else {
                sig.result = 'B';
            }
            return sig;
        }
    }
    sig
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc2202() {
        // RFC 2202 test case 2.
        assert_eq!(
            hex(&hmac_sha1(b"Jefe", b"what do ya want for nothing?")),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
        );
        // RFC 4231 test case 2 (HMAC-SHA-256), git's hmac_hash in SHA-256 repositories.
        assert_eq!(
            hex(&hmac(
                gix_hash::Kind::Sha256,
                b"Jefe",
                b"what do ya want for nothing?"
            )),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn stateless_slop_with_a_stamp_near_2_pow_63() {
        // A nonce whose HMAC is right (the seed is known here) but whose stamp is 2^63 or
        // ours + 2^63: the slop is out of i64 range; it used to overflow (a panic with overflow
        // checks, else a wrapped slop whose `abs` stayed negative and passed as within the
        // limit).
        let ours = nonce(gix_hash::Kind::Sha1, "/srv/repo.git", 1_700_000_000, "seed");
        for stamp in [1u64 << 63, 1_700_000_000 + (1u64 << 63), u64::MAX] {
            let received = nonce(gix_hash::Kind::Sha1, "/srv/repo.git", stamp, "seed");
            let cert = format!("certificate version 0.1\nnonce {received}\n\n");
            let mut issued = Some(ours.clone());
            let status = check_nonce(gix_hash::Kind::Sha1, &cert, &mut issued, true, "/srv/repo.git", "seed", 60);
            assert!(
                matches!(status, NonceStatus::Slop(_)),
                "{stamp}: {status:?}"
            );
            assert_eq!(issued.as_deref(), Some(ours.as_str()));
        }
        // Within the limit it is accepted, and becomes the nonce.
        let received = nonce(gix_hash::Kind::Sha1, "/srv/repo.git", 1_700_000_030, "seed");
        let cert = format!("nonce {received}\n\n");
        let mut issued = Some(ours.clone());
        let status = check_nonce(gix_hash::Kind::Sha1, &cert, &mut issued, true, "/srv/repo.git", "seed", 60);
        assert_eq!(status, NonceStatus::Ok);
        assert_eq!(issued.as_deref(), Some(received.as_str()));
        let mut issued = Some(ours);
        let status = check_nonce(gix_hash::Kind::Sha1, &cert, &mut issued, true, "/srv/repo.git", "seed", 10);
        assert_eq!(status, NonceStatus::Slop(-30));
    }

    #[test]
    fn headers_and_signature() {
        let cert = "certificate version 0.1\npusher A <a@b> 1 +0000\nnonce 1-ab\npush-option x\n\n0 1 refs/heads/a\n-----BEGIN PGP SIGNATURE-----\nzz\n-----END PGP SIGNATURE-----\n";
        assert_eq!(header(cert, "nonce"), Some("1-ab"));
        assert_eq!(push_options(cert), vec!["x"]);
        assert_eq!(
            &cert[signature_start(cert.as_bytes())..][..10],
            "-----BEGIN"
        );
    }
}

/// A signed push's certificate with what is needed to describe it to hooks.
#[derive(Debug, Clone)]
pub struct Certificate<'a> {
    /// The certificate, signature included.
    pub bytes: &'a [u8],
    /// The nonce this session issued (`receive.certNonceSeed`), if any.
    pub issued_nonce: Option<String>,
    /// Stateless (HTTP) mode: a nonce issued by another request may pass.
    pub stateless: bool,
    /// The directory argument, as given, for the nonce's HMAC.
    pub dir: &'a str,
    /// `receive.certNonceSeed`.
    pub seed: &'a str,
    /// `receive.certNonceSlop`.
    pub slop: i64,
    /// The repository's object format: the certificate blob's id and the nonce's HMAC.
    pub object_format: gix_hash::Kind,
}

impl Certificate<'_> {
    /// Write the certificate as a blob into `objects_dir` (the quarantine while there is one)
    /// and return git's `GIT_PUSH_CERT*` variables.
    pub fn env(
        &self,
        objects_dir: &std::path::Path,
        config: &gix_config::File,
        diagnostics: &mut dyn std::io::Write,
    ) -> Vec<(String, gix_object::bstr::BString)> {
        use gix_object::Write as _;
        let mut env = Vec::new();
        let loose = gix_odb::loose::Store::at(objects_dir, self.object_format);
        let Ok(blob) = loose.write_buf(gix_object::Kind::Blob, self.bytes) else {
            return env;
        };
        let sig = verify(self.bytes, config, diagnostics);
        let (issued, status) = self.nonce_status();
        env.push(("GIT_PUSH_CERT".into(), blob.to_string().into()));
        env.push(("GIT_PUSH_CERT_SIGNER".into(), sig.signer.into()));
        env.push(("GIT_PUSH_CERT_KEY".into(), sig.key.into()));
        env.push(("GIT_PUSH_CERT_STATUS".into(), sig.result.to_string().into()));
        if let Some(nonce) = issued {
            env.push(("GIT_PUSH_CERT_NONCE".into(), nonce.into()));
            env.push(("GIT_PUSH_CERT_NONCE_STATUS".into(), status.as_str().into()));
            if let NonceStatus::Slop(slop) = status {
                env.push(("GIT_PUSH_CERT_NONCE_SLOP".into(), slop.to_string().into()));
            }
        }
        env
    }

    /// The nonce as `GIT_PUSH_CERT_NONCE` gives it (the issued one, or the received one when
    /// stateless slop accepted it) and `GIT_PUSH_CERT_NONCE_STATUS`: the certificate's headers
    /// (before its signature) checked with [`check_nonce`].
    pub fn nonce_status(&self) -> (Option<String>, NonceStatus) {
        let text = String::from_utf8_lossy(&self.bytes[..signature_start(self.bytes)]).into_owned();
        let mut issued = self.issued_nonce.clone();
        let status = check_nonce(
            self.object_format,
            &text,
            &mut issued,
            self.stateless,
            self.dir,
            self.seed,
            self.slop,
        );
        (issued, status)
    }

    /// Whether the certificate's `push-option` headers are exactly `options` (git's
    /// `check_cert_push_options`).
    pub fn options_match(&self, options: &[gix_object::bstr::BString]) -> bool {
        let text = String::from_utf8_lossy(self.bytes);
        let in_cert = push_options(&text);
        in_cert.len() == options.len()
            && in_cert
                .iter()
                .zip(options)
                .all(|(a, b)| a.as_bytes() == b.as_slice())
    }
}
