//! A local certificate authority for a cluster (rcgen): what `tenure cluster up` makes so
//! that the default cluster is encrypted, and what `cluster add` issues a new device's
//! certificate from.
//!
//! The CA is a self-signed ECDSA P-256 certificate whose name carries a fingerprint of its
//! key (two clusters' CAs never share a name). Its key stays in the cluster's data
//! directory (mode 0600); the name is derived from the key again when the CA is loaded to
//! issue more certificates, so the key file alone is enough to sign. A device's
//! certificate names `localhost`, `127.0.0.1` and the device's addresses, and serves for
//! both TLS server and client authentication (devices dial each other). A client's
//! certificate ([`Authority::issue_client`]) names no host and serves for client
//! authentication only: its subject common name is the identity `[[auth.certs]]` names.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use tenure_core::ids::DeviceId;

/// Why a certificate could not be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen failed to make or sign a certificate.
    #[error("generating {what}: {error}")]
    Generate {
        /// What.
        what: String,
        /// Why.
        error: rcgen::Error,
    },
    /// A file could not be read.
    #[error("reading {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The CA's key file is not a usable private key.
    #[error("the CA key {path} is not a usable PEM private key: {error}")]
    BadKey {
        /// The file.
        path: PathBuf,
        /// Why.
        error: rcgen::Error,
    },
    /// A file could not be written.
    #[error("writing {path}: {error}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

/// File name of the CA certificate in its directory.
pub const CA_CERT: &str = "ca.pem";
/// File name of the CA key in its directory.
pub const CA_KEY: &str = "ca.key";

/// A CA that can issue certificates.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate's file.
    pub cert_path: PathBuf,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("cert_path", &self.cert_path)
            .finish_non_exhaustive()
    }
}

/// The CA's parameters for `key`: its name carries the key's fingerprint.
fn ca_params(key: &KeyPair) -> CertificateParams {
    let mut p = CertificateParams::default();
    let id = p.key_identifier(key);
    let fingerprint: String = id.iter().take(6).map(|b| format!("{b:02x}")).collect();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Tenure");
    dn.push(
        DnType::CommonName,
        format!("Tenure cluster CA {fingerprint}"),
    );
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p
}

fn generate(what: &str) -> impl Fn(rcgen::Error) -> CertError + '_ {
    move |error| CertError::Generate {
        what: what.to_string(),
        error,
    }
}

/// Write `text` to `path`, readable by the owner only when `secret`.
fn write(path: &Path, text: &str, secret: bool) -> Result<(), CertError> {
    let err = |error| CertError::Write {
        path: path.to_path_buf(),
        error,
    };
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o.open(path).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)
}

impl Authority {
    /// Make a new CA in `dir` ([`CA_CERT`], [`CA_KEY`]), replacing any there.
    pub fn create(dir: &Path) -> Result<Authority, CertError> {
        std::fs::create_dir_all(dir).map_err(|error| CertError::Write {
            path: dir.to_path_buf(),
            error,
        })?;
        let key = KeyPair::generate().map_err(generate("the CA key"))?;
        let params = ca_params(&key);
        let cert = params
            .self_signed(&key)
            .map_err(generate("the CA certificate"))?;
        let cert_path = dir.join(CA_CERT);
        write(&dir.join(CA_KEY), &key.serialize_pem(), true)?;
        write(&cert_path, &cert.pem(), false)?;
        Ok(Authority {
            issuer: Issuer::new(params, key),
            cert_path,
        })
    }

    /// The CA made in `dir` before.
    pub fn load(dir: &Path) -> Result<Authority, CertError> {
        let key_path = dir.join(CA_KEY);
        let pem = std::fs::read_to_string(&key_path).map_err(|error| CertError::Read {
            path: key_path.clone(),
            error,
        })?;
        let key = KeyPair::from_pem(&pem).map_err(|error| CertError::BadKey {
            path: key_path,
            error,
        })?;
        let params = ca_params(&key);
        Ok(Authority {
            issuer: Issuer::new(params, key),
            cert_path: dir.join(CA_CERT),
        })
    }

    /// Issue a certificate for `name` (its common name) valid for `localhost`,
    /// `127.0.0.1` and `addrs`, for server and client authentication; write it and its
    /// key to `cert` and `key`.
    pub fn issue(
        &self,
        name: &str,
        addrs: &[IpAddr],
        cert: &Path,
        key: &Path,
    ) -> Result<(), CertError> {
        self.issue_names(name, &[], addrs, cert, key)
    }

    /// Issue device `id`'s certificate: as [`Authority::issue`], and naming the device
    /// ([`crate::tls::peer_name`]), which its peers check on the peer port — a device
    /// holding a certificate of the cluster's CA can speak only for itself.
    pub fn issue_device(
        &self,
        id: DeviceId,
        addrs: &[IpAddr],
        cert: &Path,
        key: &Path,
    ) -> Result<(), CertError> {
        let name = format!("tenure device {id}");
        self.issue_names(&name, &[crate::tls::peer_name(id)], addrs, cert, key)
    }

    /// Issue device `id`'s certificate for a host also known by the DNS names `hosts`:
    /// as [`Authority::issue_device`], with those names among its subject alternative
    /// names (a deployment bundle's device, reached by its host name or address).
    pub fn issue_host_device(
        &self,
        id: DeviceId,
        hosts: &[String],
        addrs: &[IpAddr],
        cert: &Path,
        key: &Path,
    ) -> Result<(), CertError> {
        let name = format!("tenure device {id}");
        let mut names = vec![crate::tls::peer_name(id)];
        names.extend(
            hosts
                .iter()
                .filter(|h| !names.contains(h))
                .cloned()
                .collect::<Vec<_>>(),
        );
        self.issue_names(&name, &names, addrs, cert, key)
    }

    /// Issue the device of `cfg` its certificate, under `tls/` of its data directory,
    /// valid for its peer and client addresses: the TLS files its configuration names.
    pub fn issue_config(
        &self,
        cfg: &crate::config::ServerConfig,
    ) -> Result<crate::tls::TlsFiles, CertError> {
        let dir = cfg.data_dir.join("tls");
        let files = crate::tls::TlsFiles {
            ca: self.cert_path.clone(),
            cert: dir.join("device.pem"),
            key: dir.join("device.key"),
        };
        let addrs = [cfg.peer_listen.ip(), cfg.client_listen.ip()];
        self.issue_device(DeviceId(cfg.id), &addrs, &files.cert, &files.key)?;
        Ok(files)
    }

    /// Issue a client's certificate whose subject common name is `name`: no host names,
    /// client authentication only (it cannot serve as a device's).
    pub fn issue_client(&self, name: &str, cert: &Path, key: &Path) -> Result<(), CertError> {
        let client = [ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(name, Vec::new(), &client, cert, key)
    }

    fn issue_names(
        &self,
        name: &str,
        names: &[String],
        addrs: &[IpAddr],
        cert: &Path,
        key: &Path,
    ) -> Result<(), CertError> {
        let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        sans.extend(names.iter().cloned());
        for a in addrs {
            let a = a.to_string();
            if !sans.contains(&a) {
                sans.push(a);
            }
        }
        let both = [
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.sign(name, sans, &both, cert, key)
    }

    fn sign(
        &self,
        name: &str,
        sans: Vec<String>,
        usages: &[ExtendedKeyUsagePurpose],
        cert: &Path,
        key: &Path,
    ) -> Result<(), CertError> {
        let what = format!("the certificate of {name}");
        let mut p = CertificateParams::new(sans).map_err(generate(&what))?;
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name
            .push(DnType::OrganizationName, "Tenure");
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = usages.to_vec();
        p.use_authority_key_identifier_extension = true;
        let pair = KeyPair::generate().map_err(generate(&what))?;
        let signed = p.signed_by(&pair, &self.issuer).map_err(generate(&what))?;
        if let Some(dir) = cert.parent() {
            std::fs::create_dir_all(dir).map_err(|error| CertError::Write {
                path: dir.to_path_buf(),
                error,
            })?;
        }
        write(key, &pair.serialize_pem(), true)?;
        write(cert, &signed.pem(), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{DeviceTls, TlsFiles};

    /// A CA loaded again from its key issues certificates that chain to the certificate
    /// made at creation; rustls accepts the files.
    #[test]
    fn a_reloaded_ca_issues_certificates_of_the_same_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Authority::create(dir.path()).unwrap();
        ca.issue(
            "d1",
            &[],
            &dir.path().join("d1.pem"),
            &dir.path().join("d1.key"),
        )
        .unwrap();
        let again = Authority::load(dir.path()).unwrap();
        again
            .issue(
                "d2",
                &["10.0.0.2".parse().unwrap()],
                &dir.path().join("d2.pem"),
                &dir.path().join("d2.key"),
            )
            .unwrap();
        let roots = tenure_client::tls::load_roots(&ca.cert_path).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            tenure_client::tls::provider(),
        )
        .build()
        .unwrap();
        for d in ["d1", "d2"] {
            let certs =
                tenure_client::tls::load_certs("certificate", &dir.path().join(format!("{d}.pem")))
                    .unwrap();
            verifier
                .verify_client_cert(&certs[0], &[], rustls::pki_types::UnixTime::now())
                .unwrap_or_else(|e| panic!("{d}: {e}"));
        }
        DeviceTls::load(&TlsFiles {
            ca: ca.cert_path.clone(),
            cert: dir.path().join("d2.pem"),
            key: dir.path().join("d2.key"),
        })
        .unwrap();
        let mode = std::fs::metadata(dir.path().join(CA_KEY)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
    }

    /// A client's certificate carries its name as the subject CN (what the client port
    /// reads), chains to the CA for client authentication, and names no device; its key
    /// is its owner's only.
    #[test]
    fn a_client_certificate_is_named_by_its_cn() {
        let dir = tempfile::tempdir().unwrap();
        let p = |f: &str| dir.path().join(f);
        let ca = Authority::create(dir.path()).unwrap();
        ca.issue_client("billing-7", &p("c.crt"), &p("c.key"))
            .unwrap();
        ca.issue_device(DeviceId(1), &[], &p("d1.pem"), &p("d1.key"))
            .unwrap();
        let load = |f: &str| tenure_client::tls::load_certs("certificate", &p(f)).unwrap();
        let client = load("c.crt").remove(0);
        let cn = crate::tls::common_name;
        assert_eq!(cn(&client).as_deref(), Some("billing-7"));
        assert_eq!(cn(&load("d1.pem")[0]).as_deref(), Some("tenure device d1"));
        assert!(
            cn(&load(CA_CERT)[0])
                .unwrap()
                .starts_with("Tenure cluster CA ")
        );
        assert!(!crate::tls::names_device(&client, DeviceId(1)));
        for bad in [&[][..], &[0x30, 0x82, 0xff], &client[..40]] {
            assert_eq!(cn(&bad.to_vec().into()), None);
        }
        let roots = tenure_client::tls::load_roots(&ca.cert_path).unwrap();
        rustls::server::WebPkiClientVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            tenure_client::tls::provider(),
        )
        .build()
        .unwrap()
        .verify_client_cert(&client, &[], rustls::pki_types::UnixTime::now())
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(p("c.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    /// A certificate and a key that do not belong together are refused, naming the file.
    #[test]
    fn a_mismatched_key_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Authority::create(dir.path()).unwrap();
        let p = |f: &str| dir.path().join(f);
        ca.issue("d1", &[], &p("d1.pem"), &p("d1.key")).unwrap();
        ca.issue("d2", &[], &p("d2.pem"), &p("d2.key")).unwrap();
        let e = DeviceTls::load(&TlsFiles {
            ca: ca.cert_path.clone(),
            cert: p("d1.pem"),
            key: p("d2.key"),
        })
        .unwrap_err();
        assert!(
            e.to_string().contains("d1.pem") && e.to_string().contains("d2.key"),
            "{e}"
        );
        let e = DeviceTls::load(&TlsFiles {
            ca: p("nope.pem"),
            cert: p("d1.pem"),
            key: p("d1.key"),
        })
        .unwrap_err();
        assert!(e.to_string().contains("nope.pem"), "{e}");
    }
}
