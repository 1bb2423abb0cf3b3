//! TLS for the client port: rustls with the *ring* crypto provider, always chosen
//! explicitly (never the process default), so nothing depends on which provider some other
//! crate enabled.
//!
//! A client trusts one CA, the cluster's (`cluster up` makes one; see the `tenure` README),
//! and may present a certificate of its own. The PEM readers here are shared with the
//! server, which loads its certificate, key and CA with them: every failure names the file
//! and what was wrong with it.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why TLS material could not be loaded. Each names the file and its role.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("reading the {what} {path}: {error}")]
    Read {
        /// Its role ("CA certificate", "certificate", "private key").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file holds no PEM certificate.
    #[error("the {what} {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate {
        /// Its role.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The file holds no PEM private key.
    #[error("the {what} {path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    NoKey {
        /// Its role.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The file is not valid PEM.
    #[error("the {what} {path} is not valid PEM: {reason}")]
    BadPem {
        /// Its role.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// The file parsed but rustls refused it (a malformed certificate, a key that does
    /// not match the certificate, an unsupported algorithm).
    #[error("the {what} {path} cannot be used: {reason}")]
    Rejected {
        /// Its role.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What rustls said.
        reason: String,
    },
    /// A certificate and a key that rustls refused together (the key is not the
    /// certificate's, or of an unsupported kind).
    #[error("the certificate {cert} and the key {key} cannot be used together: {reason}")]
    IdentityRejected {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        reason: String,
    },
    /// rustls refused the combination of settings (a provider without the protocol
    /// versions asked for).
    #[error("building the TLS configuration: {0}")]
    Config(String),
}

/// The crypto provider every Tenure TLS configuration uses: rustls's *ring* provider.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        what,
        path: path.to_path_buf(),
        error,
    })
}

/// Every certificate in the PEM file `path` (at least one), in order.
pub fn load_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key in the PEM file `path`.
pub fn load_key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(what, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            what,
            path: path.to_path_buf(),
        },
        e => TlsError::BadPem {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
    })
}

/// The trust anchors of the CA file `path`: every certificate in it.
pub fn load_roots(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    const WHAT: &str = "CA certificate";
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certs(WHAT, path)? {
        roots.add(cert).map_err(|e| TlsError::Rejected {
            what: WHAT,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// A certificate chain and its key, as a client or a device presents them.
#[derive(Debug)]
pub struct Identity {
    /// The chain, leaf first.
    pub certs: Vec<CertificateDer<'static>>,
    /// The leaf's private key.
    pub key: PrivateKeyDer<'static>,
    /// Where the certificate came from (for errors).
    pub cert_path: PathBuf,
    /// Where the key came from (for errors).
    pub key_path: PathBuf,
}

impl Identity {
    /// Load a certificate chain and its key from PEM files.
    pub fn load(cert: &Path, key: &Path) -> Result<Identity, TlsError> {
        Ok(Identity {
            certs: load_certs("certificate", cert)?,
            key: load_key("private key", key)?,
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
        })
    }

    /// The error rustls gave when this identity was installed, naming its files.
    pub fn rejected(&self, e: rustls::Error) -> TlsError {
        let reason = match e {
            rustls::Error::InconsistentKeys(_) => "the key is not the certificate's".to_string(),
            e => e.to_string(),
        };
        TlsError::IdentityRejected {
            cert: self.cert_path.clone(),
            key: self.key_path.clone(),
            reason,
        }
    }
}

/// A client's TLS settings: the CA it trusts and the certificate it may present. Cheap to
/// clone.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Trust the CA certificate(s) in the PEM file `ca`; present the certificate and key
    /// in `identity`, if given (`(cert, key)` PEM files).
    pub fn from_files(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<ClientTls, TlsError> {
        let roots = load_roots(ca)?;
        let identity = identity.map(|(c, k)| Identity::load(c, k)).transpose()?;
        Self::from_parts(roots, identity)
    }

    /// Trust `roots`; present `identity` if given.
    pub fn from_parts(
        roots: rustls::RootCertStore,
        identity: Option<Identity>,
    ) -> Result<ClientTls, TlsError> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots);
        let mut config = match identity {
            None => builder.with_no_client_auth(),
            Some(id) => {
                let (certs, key) = (id.certs.clone(), id.key.clone_key());
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| id.rejected(e))?
            }
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(ClientTls {
            config: Arc::new(config),
        })
    }

    /// A client using this rustls configuration as it is (its provider, roots and ALPN
    /// are the caller's; gRPC needs `h2` among the ALPN protocols if any are set).
    pub fn from_config(config: Arc<rustls::ClientConfig>) -> ClientTls {
        ClientTls { config }
    }

    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.config.clone())
    }
}

/// The name a server's certificate must hold for `host` (an IP address or a DNS name, as
/// in a URI: IPv6 in brackets).
pub fn server_name(host: &str) -> Option<ServerName<'static>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).ok()
}

/// What a device sends a client that speaks plaintext HTTP/2 to its TLS port, inside an
/// HTTP/2 GOAWAY frame the client's HTTP/2 stack reports; [`crate::describe_status`]
/// recognises it.
pub const TLS_REQUIRED: &str = "this device requires TLS";

/// The bytes a TLS port answers a plaintext HTTP/2 client with: the server's connection
/// preface (an empty SETTINGS frame), then GOAWAY with `INADEQUATE_SECURITY` and
/// [`TLS_REQUIRED`] as its debug data, so the client fails with a reason instead of a
/// dropped connection.
pub fn plaintext_refusal() -> Vec<u8> {
    let mut out = vec![0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    let debug = TLS_REQUIRED.as_bytes();
    let len = 8 + debug.len();
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, 0x7, 0]);
    out.extend_from_slice(&[0, 0, 0, 0]); // stream 0
    out.extend_from_slice(&[0, 0, 0, 0]); // last stream id: none was processed
    out.extend_from_slice(&0xcu32.to_be_bytes()); // INADEQUATE_SECURITY
    out.extend_from_slice(debug);
    out
}

/// A TLS handshake with a device failed: what happened and what to check.
#[derive(Debug, thiserror::Error)]
#[error("TLS handshake with {endpoint} failed: {reason}; {hint}")]
pub struct HandshakeError {
    /// The device's address.
    pub endpoint: String,
    /// What rustls or the connection said.
    pub reason: String,
    /// What to check.
    pub hint: &'static str,
    /// Trying again cannot help: the certificate is not trusted, or the device does not
    /// speak TLS (rather than a connection that broke during the handshake).
    pub permanent: bool,
}

impl HandshakeError {
    pub(crate) fn new(endpoint: &str, e: &std::io::Error) -> HandshakeError {
        let rustls = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        let (hint, permanent) = match rustls {
            Some(rustls::Error::InvalidCertificate(_)) => (
                "the device's certificate is not signed by the CA given, or does not name its \
                 address (is the CA the cluster's?)",
                true,
            ),
            Some(rustls::Error::InvalidMessage(_))
            | Some(rustls::Error::InappropriateMessage { .. })
            | Some(rustls::Error::InappropriateHandshakeMessage { .. }) => (
                "the device does not speak TLS (a cluster started with --insecure takes \
                 plaintext clients: give no CA)",
                true,
            ),
            Some(rustls::Error::AlertReceived(_)) => (
                "the device refused the handshake (is the client certificate of the cluster's CA?)",
                true,
            ),
            _ if e.kind() == std::io::ErrorKind::UnexpectedEof => (
                "the device closed the connection during the handshake (does it speak TLS? a \
                 cluster started with --insecure does not)",
                false,
            ),
            _ => ("check the device's address and that it is running", false),
        };
        HandshakeError {
            endpoint: endpoint.to_string(),
            reason: e.to_string(),
            hint,
            permanent,
        }
    }
}

/// Whether `s` failed for a reason another attempt cannot fix: the device requires TLS
/// from a plaintext client, or a handshake failed on a certificate or on a device that
/// does not speak TLS.
pub(crate) fn permanent_failure(s: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(s);
    while let Some(e) = source {
        if let Some(h) = e.downcast_ref::<HandshakeError>() {
            return h.permanent;
        }
        if e.to_string().contains(TLS_REQUIRED) {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_name_the_file() {
        let dir = std::env::temp_dir().join(format!("tenure-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let e = ClientTls::from_files(&missing, None).unwrap_err();
        assert_eq!(
            e.to_string().matches("os error").count(),
            1,
            "the reason is said once: {e}"
        );
        assert!(matches!(e, TlsError::Read { .. }), "{e}");
        assert!(e.to_string().contains("missing.pem"), "{e}");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not pem at all\n").unwrap();
        let e = ClientTls::from_files(&empty, None).unwrap_err();
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");
        let e = load_key("private key", &empty).unwrap_err();
        assert!(matches!(e, TlsError::NoKey { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_refusal_is_a_settings_then_a_goaway_frame() {
        let b = plaintext_refusal();
        assert_eq!(&b[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        let len = ((b[9] as usize) << 16) | ((b[10] as usize) << 8) | b[11] as usize;
        assert_eq!(b[12], 7, "GOAWAY");
        assert_eq!(b.len(), 18 + len);
        assert!(b.ends_with(TLS_REQUIRED.as_bytes()));
    }
}
