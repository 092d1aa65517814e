//! TLS between the nodes (`--cluster-ca`, `--cluster-cert`, `--cluster-key`) and to etcd
//! (`--etcd-ca`, `--etcd-cert`, `--etcd-key`): the PEM files read into rustls configurations,
//! and the node a certificate names.
//!
//! Between nodes it is mutual TLS with one cluster CA: a node's client side presents its
//! certificate and trusts only a server certificate chained to the cluster CA (the system's
//! roots are never consulted); its node listener (`--cluster-listen`) accepts only a client
//! that presents a certificate chained to the same CA. The node's one certificate serves both
//! ends, so it needs both `serverAuth` and `clientAuth` in its extended key usage (or none),
//! a subject alternative name for the host of its advertise URL, and one naming the node: the
//! URI `berth-node:<name>` ([`node_names`]; the callers check it, `http.rs` and the node
//! listener). [`NodeTls`] holds the node's configurations and reads its files again on
//! SIGHUP. To etcd, the client trusts `--etcd-ca` only and presents `--etcd-cert` (etcd's
//! `--client-cert-auth`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;

/// A CA, a certificate signed by it and the certificate's key: PEM files, with the flags
/// that named them (for the errors).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA's certificate(s): the only roots trusted.
    pub ca: PathBuf,
    /// This end's certificate chain.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The flags' prefix, `cluster` or `etcd` (`--cluster-ca`, `--etcd-cert`, …).
    pub flags: &'static str,
}

/// Why a TLS configuration could not be made from its files.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file cannot be read or holds no PEM object of its kind.
    #[error("cannot read --{flag} {path}: {why}")]
    Read {
        /// The flag (`cluster-ca`, `etcd-key`, …).
        flag: String,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
    /// rustls refused the certificates or the key (a key that does not match the
    /// certificate, a CA certificate it cannot use).
    #[error("cannot use --{flags}-ca/--{flags}-cert/--{flags}-key: {why}")]
    Config {
        /// `cluster` or `etcd`.
        flags: &'static str,
        /// rustls's reason.
        why: String,
    },
}

fn read_certs(flag: String, path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let read = |why: String| Error::Read {
        flag: flag.clone(),
        path: path.to_owned(),
        why,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| read(e.to_string()))?;
    if certs.is_empty() {
        return Err(read("no certificate in the file".into()));
    }
    Ok(certs)
}

impl TlsFiles {
    fn flag(&self, what: &str) -> String {
        format!("{}-{what}", self.flags)
    }

    fn config_error(&self, e: impl std::fmt::Display) -> Error {
        Error::Config {
            flags: self.flags,
            why: e.to_string(),
        }
    }

    /// The CA's certificates as the only roots.
    fn roots(&self) -> Result<rustls::RootCertStore, Error> {
        let mut roots = rustls::RootCertStore::empty();
        for c in read_certs(self.flag("ca"), &self.ca)? {
            roots.add(c).map_err(|e| Error::Read {
                flag: self.flag("ca"),
                path: self.ca.clone(),
                why: e.to_string(),
            })?;
        }
        Ok(roots)
    }

    /// This end's certificate chain and key.
    fn identity(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Error> {
        let certs = read_certs(self.flag("cert"), &self.cert)?;
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| Error::Read {
            flag: self.flag("key"),
            path: self.key.clone(),
            why: e.to_string(),
        })?;
        Ok((certs, key))
    }

    /// The client side: trusts the CA only, presents the certificate; HTTP/1.1.
    pub fn client(&self) -> Result<Arc<rustls::ClientConfig>, Error> {
        let roots = self.roots()?;
        let (certs, key) = self.identity()?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| self.config_error(e))?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(|e| self.config_error(e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// The node listener's side: presents the certificate, and requires of every client a
    /// certificate chained to the CA (the handshake fails without one).
    pub fn server(&self) -> Result<tokio_rustls::TlsAcceptor, Error> {
        let roots = Arc::new(self.roots()?);
        let (certs, key) = self.identity()?;
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| self.config_error(e))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| self.config_error(e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .map_err(|e| self.config_error(e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

/// The URI subject alternative name that names a node: `berth-node:<name>`.
pub const NODE_URI: &str = "berth-node:";

/// The nodes certificate `der` names (its `berth-node:` URIs, in order); empty when it names
/// none or is not a certificate DER can read.
pub fn node_names(der: &[u8]) -> Vec<String> {
    san_uris(der)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|u| u.strip_prefix(NODE_URI).map(str::to_owned))
        .collect()
}

/// One DER element at the start of `b`: its tag, its content and what follows it.
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, b) = b.split_first()?;
    let (len, b) = if first < 0x80 {
        (usize::from(first), b)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n]
            .iter()
            .fold(0usize, |a, &x| (a << 8) | usize::from(x));
        (len, &b[n..])
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// The URIs of certificate `der`'s subject alternative name extension (RFC 5280 4.2.1.6);
/// `None` when the DER cannot be read that far.
fn san_uris(der: &[u8]) -> Option<Vec<String>> {
    const SEQUENCE: u8 = 0x30;
    const EXTENSIONS: u8 = 0xa3; // [3] EXPLICIT in TBSCertificate
    const SAN_OID: [u8; 3] = [0x55, 0x1d, 0x11]; // 2.5.29.17
    const URI: u8 = 0x86; // GeneralName [6] IMPLICIT IA5String
    let (SEQUENCE, cert, _) = tlv(der)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = tlv(cert)? else {
        return None;
    };
    let mut uris = Vec::new();
    while !tbs.is_empty() {
        let (tag, content, rest) = tlv(tbs)?;
        tbs = rest;
        if tag != EXTENSIONS {
            continue;
        }
        let (SEQUENCE, mut exts, _) = tlv(content)? else {
            return None;
        };
        while !exts.is_empty() {
            let (SEQUENCE, ext, rest) = tlv(exts)? else {
                return None;
            };
            exts = rest;
            let (0x06, oid, value) = tlv(ext)? else {
                return None;
            };
            if oid != SAN_OID {
                continue;
            }
            // `critical BOOLEAN DEFAULT FALSE`, then the OCTET STRING.
            let (mut tag, mut value, rest) = tlv(value)?;
            if tag == 0x01 {
                (tag, value, _) = tlv(rest)?;
            }
            if tag != 0x04 {
                return None;
            }
            let (SEQUENCE, mut names, _) = tlv(value)? else {
                return None;
            };
            while !names.is_empty() {
                let (tag, name, rest) = tlv(names)?;
                names = rest;
                if tag == URI {
                    uris.push(std::str::from_utf8(name).ok()?.to_owned());
                }
            }
        }
    }
    Some(uris)
}

/// A node's TLS between nodes: its client and server configurations, made from
/// `--cluster-ca`, `--cluster-cert` and `--cluster-key`, and made again from them on
/// [`NodeTls::reload`] (SIGHUP). A connection takes the configuration current when it
/// starts; one already open keeps its own.
pub struct NodeTls {
    files: TlsFiles,
    current: RwLock<Configs>,
}

#[derive(Clone)]
struct Configs {
    client: Arc<rustls::ClientConfig>,
    server: tokio_rustls::TlsAcceptor,
    /// The nodes this node's certificate names.
    names: Vec<String>,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl NodeTls {
    /// The configurations made from `files`.
    pub fn load(files: TlsFiles) -> Result<NodeTls, Error> {
        let current = RwLock::new(Self::configs(&files)?);
        Ok(NodeTls { files, current })
    }

    fn configs(files: &TlsFiles) -> Result<Configs, Error> {
        let names = read_certs(files.flag("cert"), &files.cert)?
            .first()
            .map(|c| node_names(c))
            .unwrap_or_default();
        Ok(Configs {
            client: files.client()?,
            server: files.server()?,
            names,
        })
    }

    /// Read the files again; on an error the configurations in use stay.
    pub fn reload(&self) -> Result<(), Error> {
        let fresh = Self::configs(&self.files)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    fn now(&self) -> Configs {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The client configuration in use.
    pub fn client(&self) -> Arc<rustls::ClientConfig> {
        self.now().client
    }

    /// The node listener's acceptor in use.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.now().server
    }

    /// The nodes the certificate in use names (`berth-node:` URIs).
    pub fn names(&self) -> Vec<String> {
        self.now().names
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
            flags: "cluster",
        }
    }

    /// Made with `openssl req -x509 … -addext "subjectAltName=critical,DNS:localhost,URI:berth-node:n1,IP:127.0.0.1"`.
    const NAMING_N1: &str = "-----BEGIN CERTIFICATE-----
MIIBnDCCAUKgAwIBAgIUHWlzV9QFwNgeC3U/x5pgR/7cPHwwCgYIKoZIzj0EAwIw
DDEKMAgGA1UEAwwBdDAeFw0yNjEyMDMwNjI3NDhaFw0zNjExMzAwNjI3NDhaMAwx
CjAIBgNVBAMMAXQwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASFiAX6BsY+ApbL
u86vkRkl8FitgopLeg8w13RMgK3yf/3xSU8eU6bq+mPEbbPlwqisd69M+aR11+cb
oQI7jyS/o4GBMH8wHQYDVR0OBBYEFBvwy3RldauUw2D7M8dTB/vvYRt3MB8GA1Ud
IwQYMBaAFBvwy3RldauUw2D7M8dTB/vvYRt3MA8GA1UdEwEB/wQFMAMBAf8wLAYD
VR0RAQH/BCIwIIIJbG9jYWxob3N0hg1iZXJ0aC1ub2RlOm4xhwR/AAABMAoGCCqG
SM49BAMCA0gAMEUCIQCZmCrs8tiljeSVj9tk22Os9/d4rui49Ihtd9n9WIUeXgIg
VSpceLqxjiQjzM993vgIQRNw3+SGYUKQJfUZRuKjsWg=
-----END CERTIFICATE-----";
    /// The same with `subjectAltName=DNS:localhost` alone.
    const NAMING_NONE: &str = "-----BEGIN CERTIFICATE-----
MIIBgzCCASmgAwIBAgIUXnRyt2GymezlMHf39MlieQPzdCcwCgYIKoZIzj0EAwIw
DDEKMAgGA1UEAwwBdDAeFw0yNjEyMDMwNjI3NDBaFw0zNjExMzAwNjI3NDBaMAwx
CjAIBgNVBAMMAXQwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAATYteBgHJ+cmOOb
YcJQtpGE29Zz4Ig1ffd4Lx0d5bx3cpLgAJmleKdwpFSdhJiAUZSTY3x98styL9J3
3c91nHxEo2kwZzAdBgNVHQ4EFgQUlxAlX3nvnx/rsutyt60GjR/pqW4wHwYDVR0j
BBgwFoAUlxAlX3nvnx/rsutyt60GjR/pqW4wDwYDVR0TAQH/BAUwAwEB/zAUBgNV
HREEDTALgglsb2NhbGhvc3QwCgYIKoZIzj0EAwIDSAAwRQIhAKO6kKrT11paD73B
HPj4GzNpEUMyOrMUGN2M72q0bUuzAiA1iZncsW0B/2wEoFNSfsFUYnPFz/AJ4AHM
M4GBajZy6A==
-----END CERTIFICATE-----";

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .as_ref()
            .to_vec()
    }

    #[test]
    fn a_certificate_names_the_node_of_its_berth_node_uri() {
        let n1 = der(NAMING_N1);
        assert_eq!(node_names(&n1), ["n1"]);
        assert!(node_names(&der(NAMING_NONE)).is_empty());
        // Cut anywhere, it names nobody (and nothing panics).
        for len in 0..n1.len() {
            assert!(node_names(&n1[..len]).is_empty(), "{len}");
        }
        assert!(node_names(b"\x30\x84\xff\xff\xff\xff").is_empty());
    }

    #[test]
    fn a_missing_or_empty_file_names_its_flag_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let e = f.client().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.starts_with("cannot read --cluster-ca "), "{e}");
        assert!(e.contains("ca.pem"), "{e}");
        std::fs::write(&f.ca, "not a certificate\n").unwrap();
        let e = f.server().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            e.contains("--cluster-ca") && e.contains("no certificate in the file"),
            "{e}"
        );
    }
}
