//! TLS between the nodes (`--cluster-ca`, `--cluster-cert`, `--cluster-key`) and to etcd
//! (`--etcd-ca`, `--etcd-cert`, `--etcd-key`): the PEM files read into rustls configurations.
//!
//! Between nodes it is mutual TLS with one cluster CA: a node's client side presents its
//! certificate and trusts only a server certificate chained to the cluster CA (the system's
//! roots are never consulted); its node listener (`--cluster-listen`) accepts only a client
//! that presents a certificate chained to the same CA. The node's one certificate serves both
//! ends, so it needs both `serverAuth` and `clientAuth` in its extended key usage (or none)
//! and a subject alternative name for the host of its advertise URL. To etcd, the client
//! trusts `--etcd-ca` only and presents `--etcd-cert` (etcd's `--client-cert-auth`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
