//! Authorization (DESIGN §8, Security): named tokens and client certificates with
//! permissions per path prefix.
//!
//! The `[auth]` section of the configuration lists tokens by name, each with the SHA-256
//! of its secret (the file never holds a secret) and its rules, and client certificates by
//! their subject common name (CN), with rules of the same form:
//!
//! ```toml
//! [auth]
//! enabled = true
//!
//! [[auth.tokens]]
//! name = "ops"
//! sha256 = "<64 hex digits: `tenure token hash`>"
//! rules = [{ prefix = "/", perms = ["admin"] }]
//!
//! [[auth.tokens]]
//! name = "worker"
//! sha256 = "<64 hex digits>"
//! rules = [
//!   { prefix = "/jobs/", perms = ["lock"] },
//!   { prefix = "/config/", perms = ["read"] },
//! ]
//!
//! [[auth.certs]]
//! cn = "billing"                       # `tenure cert new billing` issues one
//! rules = [{ prefix = "/billing/", perms = ["write", "lock"] }]
//! ```
//!
//! A client sends `authorization: Bearer <secret>` with every call. The device hashes
//! the secret and compares the hash with every configured one in constant time. A client
//! may instead present a certificate on the TLS client port, as etcd's `--client-cert-auth`
//! takes one: the port asks for a certificate but does not require one; one that is not
//! signed by the cluster's CA fails the handshake; a verified one makes its subject CN the
//! caller's identity, looked up among `[[auth.certs]]`. A token, when the call carries
//! one, takes precedence over the certificate (so a client can present a certificate for
//! TLS alone and act as a token). A call with neither a known token nor a certificate
//! whose CN is configured fails with `UNAUTHENTICATED`; a call the caller may not make
//! fails with `PERMISSION_DENIED` naming the token, the permission and the path, before
//! the request reaches the core — a refused request changes nothing. On the session
//! stream the token is checked when the stream opens, and each request the token may not
//! make gets the typed `PermissionDenied` error; the stream stays up.
//!
//! Permissions ([`Perm`]), as an etcd or Consul user expects them:
//! - `read`: lock holders and listings, object get/head/list/watch, lookup get/list/watch,
//!   election leader/observe;
//! - `lock`: acquire and release locks, campaign, proclaim and resign elections (and
//!   `read`: a lock holder reads what it locks);
//! - `write`: object put/delete and multipart uploads, lookup publish/revoke (and `read`,
//!   as Consul's write does);
//! - `admin`: everything — cluster membership changes, snapshots, the test register, and
//!   every other permission.
//!
//! A rule's prefix is a path subtree with the boundaries the rest of Tenure uses for
//! prefixes ([`tenure_core::lookup::under`]): `/jobs/` and `/jobs` both cover `/jobs`
//! and every path below it, not `/jobsx`; `/` covers everything. A request that names a
//! listing or watch prefix needs the permission on that whole prefix. Requests that name
//! no path — opening, keeping alive and closing sessions, device and lookup-node status,
//! reading the membership record — need any valid token; so does reading the cluster's
//! own lookup entries under [`SYSTEM_PREFIX`] (device endpoints and store managers, which
//! clients route by and `Status` shows anyway). Operations on the whole cluster
//! (membership changes, snapshots) need `admin` on `/`.
//!
//! The section can change without a restart: on SIGHUP a device re-reads it from its
//! configuration file (`ServerHandle::reload_auth`, [`Auth::reload`]) and swaps the
//! whole policy at once; a file whose section does not parse or validate is refused,
//! logged, and the previous policy stays. Calls after the swap see only the new policy.
//! A session stream opened before it keeps its caller, judged from then on by the new
//! rules of the same token (the same hash) or certificate (the same CN); one the new
//! section no longer has gets `PermissionDenied` for each request.
//!
//! With `enabled = false` (the default) no token is asked for and everything is allowed,
//! as before the section existed. A certificate names a CN only when the client port is
//! TLS (`[tls]`); the names are compared exactly.

use serde::{Deserialize, Serialize};
use std::fmt;

mod policy;
mod principal;
mod rules;
mod secret;

pub use policy::Auth;
pub use principal::{Caller, Denied, Principal};
pub use rules::{AuthConfig, CertConfig, Kind, Rule, TokenConfig};
pub use secret::{hash_secret, new_secret};

/// The lookup prefix of the cluster's own entries, readable with any valid token.
pub const SYSTEM_PREFIX: &str = "/tenure";

/// The metadata key that carries a call's token.
pub const AUTHORIZATION: &str = "authorization";

/// A permission a rule grants on a path subtree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Perm {
    /// Reads: holders, listings, gets, watches, leaders.
    Read,
    /// Locks and elections (implies read).
    Lock,
    /// Object and lookup changes (implies read).
    Write,
    /// Everything, cluster membership and snapshots included.
    Admin,
}

impl Perm {
    /// The name used in the configuration and in error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Perm::Read => "read",
            Perm::Lock => "lock",
            Perm::Write => "write",
            Perm::Admin => "admin",
        }
    }

    /// The bit of this permission alone.
    fn bit(self) -> u8 {
        1 << self as u8
    }

    /// The permissions granting this one implies: admin all, lock and write read.
    fn closure(self) -> u8 {
        match self {
            Perm::Read => Perm::Read.bit(),
            Perm::Lock => Perm::Lock.bit() | Perm::Read.bit(),
            Perm::Write => Perm::Write.bit() | Perm::Read.bit(),
            Perm::Admin => 0b1111,
        }
    }
}

impl fmt::Display for Perm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::secret::parse_hash;
    use super::*;
    use tenure_client::proto;
    use tonic::Request;
    use tonic::metadata::MetadataMap;

    fn token(name: &str, secret: &str, rules: &[(&str, &[Perm])]) -> TokenConfig {
        TokenConfig {
            name: name.into(),
            sha256: hash_secret(secret),
            rules: rules
                .iter()
                .map(|(p, perms)| Rule {
                    prefix: p.to_string(),
                    perms: perms.to_vec(),
                })
                .collect(),
        }
    }

    fn policy() -> Auth {
        Auth::new(&AuthConfig {
            enabled: true,
            tokens: vec![
                token("root", "s-root", &[("/", &[Perm::Admin])]),
                token("reader", "s-reader", &[("/", &[Perm::Read])]),
                token(
                    "worker",
                    "s-worker",
                    &[("/jobs/", &[Perm::Lock]), ("/config", &[Perm::Read])],
                ),
                token("writer", "s-writer", &[("/data/", &[Perm::Write])]),
            ],
            certs: vec![CertConfig {
                cn: "billing".into(),
                rules: vec![Rule {
                    prefix: "/billing/".into(),
                    perms: vec![Perm::Lock],
                }],
            }],
        })
        .unwrap()
    }

    fn md(v: Option<&str>) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Some(v) = v {
            m.insert(AUTHORIZATION, v.parse().unwrap());
        }
        m
    }

    fn caller(secret: &str) -> Caller {
        policy()
            .identify(&md(Some(&format!("Bearer {secret}"))), None)
            .unwrap()
    }

    #[test]
    fn prefixes_cover_their_subtree_only() {
        let w = caller("s-worker");
        assert!(w.check(Perm::Lock, "/jobs/a").is_ok());
        assert!(w.check(Perm::Lock, "/jobs/a/b").is_ok());
        // `/jobs/` covers `/jobs` itself (a lock on it covers only `/jobs/…`)...
        assert!(w.check(Perm::Lock, "/jobs").is_ok());
        // ...and not a sibling that merely starts with the same letters.
        assert!(w.check(Perm::Lock, "/jobsx").is_err());
        assert!(w.check(Perm::Lock, "/jobsx/a").is_err());
        assert!(w.check(Perm::Lock, "/other").is_err());
        // A rule without the trailing slash is the same subtree.
        assert!(w.check(Perm::Read, "/config").is_ok());
        assert!(w.check(Perm::Read, "/config/x").is_ok());
        assert!(w.check(Perm::Read, "/configx").is_err());
        // Listing a prefix needs the permission on all of it.
        assert!(w.check(Perm::Read, "/").is_err());
        assert!(w.check(Perm::Read, "/jobs/").is_ok());
    }

    #[test]
    fn admin_implies_everything_and_lock_and_write_imply_read() {
        let root = caller("s-root");
        for p in [Perm::Read, Perm::Lock, Perm::Write, Perm::Admin] {
            assert!(root.check(p, "/anything/at/all").is_ok(), "{p}");
            assert!(root.check(p, "/").is_ok(), "{p}");
        }
        let w = caller("s-worker");
        assert!(w.check(Perm::Read, "/jobs/a").is_ok());
        assert!(w.check(Perm::Write, "/jobs/a").is_err());
        assert!(w.check(Perm::Admin, "/jobs/a").is_err());
        let wr = caller("s-writer");
        assert!(wr.check(Perm::Read, "/data/x").is_ok());
        assert!(wr.check(Perm::Write, "/data/x").is_ok());
        assert!(wr.check(Perm::Lock, "/data/x").is_err());
        let r = caller("s-reader");
        assert!(r.check(Perm::Read, "/x").is_ok());
        assert!(r.check(Perm::Lock, "/x").is_err());
        assert!(r.check(Perm::Write, "/x").is_err());
    }

    #[test]
    fn a_refusal_names_the_token_the_permission_and_the_path() {
        let d = caller("s-reader").check(Perm::Lock, "/jobs/a").unwrap_err();
        assert_eq!(
            d.to_string(),
            "token \"reader\" has no lock permission on /jobs/a"
        );
        let s = d.status();
        assert_eq!(s.code(), tonic::Code::PermissionDenied);
        assert!(s.message().contains("reader"), "{}", s.message());
        let e = d.to_proto();
        let Some(proto::error::Kind::PermissionDenied(p)) = e.kind else {
            panic!("{e:?}")
        };
        assert_eq!(
            (p.token.as_str(), p.permission.as_str()),
            ("reader", "lock")
        );
        assert_eq!(p.path, "/jobs/a");
    }

    #[test]
    fn no_token_or_a_wrong_one_is_unauthenticated() {
        let a = policy();
        for v in [
            None,
            Some("Bearer nope"),
            Some("Basic s-root"),
            Some("Bearer "),
            Some("s-root"),
        ] {
            let e = a.identify(&md(v), None).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{v:?}");
            assert!(e.message().contains("TENURE_TOKEN"), "{}", e.message());
        }
        // The scheme is case-insensitive.
        assert!(a.identify(&md(Some("bearer s-root")), None).is_ok());
        let mut r = Request::new(());
        *r.metadata_mut() = md(Some("Bearer s-reader"));
        let e = a.authorize(&r, Perm::Admin, "/").unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
    }

    #[test]
    fn a_certificate_is_known_by_its_cn_and_a_token_takes_precedence() {
        let a = policy();
        let with_cert = |token: Option<&str>, cn: &str| {
            let mut r = Request::new(());
            *r.metadata_mut() = md(token);
            r.extensions_mut().insert(crate::tls::ClientConnInfo {
                tcp: tonic::transport::server::TcpConnectInfo {
                    local_addr: None,
                    remote_addr: None,
                },
                cert_cn: Some(cn.to_string()),
            });
            a.caller(&r)
        };
        let c = with_cert(None, "billing").unwrap();
        assert!(c.check(Perm::Lock, "/billing/x").is_ok());
        let d = c.check(Perm::Write, "/billing/x").unwrap_err();
        assert_eq!(
            d.to_string(),
            "certificate \"billing\" has no write permission on /billing/x"
        );
        // A CN no entry names, or a token's name, is not known.
        for cn in ["nobody", "root", ""] {
            let e = with_cert(None, cn).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{cn}");
            assert!(e.message().contains("[[auth.certs]]"), "{}", e.message());
        }
        // A token is used when given, whatever the certificate.
        let r = with_cert(Some("Bearer s-root"), "billing").unwrap();
        assert!(r.check(Perm::Admin, "/").is_ok());
        let e = with_cert(Some("Bearer nope"), "billing").unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
    }

    #[test]
    fn disabled_allows_everything_without_a_token() {
        let a = Auth::new(&AuthConfig::default()).unwrap();
        assert!(!a.enabled());
        let c = a.identify(&md(None), None).unwrap();
        assert!(c.check(Perm::Admin, "/").is_ok());
        // A section with tokens but not enabled is off too.
        let off = AuthConfig {
            enabled: false,
            tokens: vec![token("t", "s", &[("/", &[Perm::Read])])],
            ..Default::default()
        };
        assert!(!Auth::new(&off).unwrap().enabled());
    }

    #[test]
    fn a_reload_swaps_the_rules_for_new_and_open_callers() {
        let a = policy();
        let copy = a.clone();
        let bearer = |s: &str| md(Some(&format!("Bearer {s}")));
        let root = a.identify(&bearer("s-root"), None).unwrap();
        let open_worker = a.identify(&bearer("s-worker"), None).unwrap();
        // root loses admin and keeps read; worker goes; a new token comes.
        a.reload(&AuthConfig {
            enabled: true,
            tokens: vec![
                token("root", "s-root", &[("/", &[Perm::Read])]),
                token("new", "s-new", &[("/new/", &[Perm::Write])]),
            ],
            ..Default::default()
        })
        .unwrap();
        // Every clone sees the new policy.
        assert!(copy.identify(&bearer("s-new"), None).is_ok());
        let e = copy.identify(&bearer("s-worker"), None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        // Callers identified before it are judged by the new rules of the same token.
        assert!(root.check(Perm::Read, "/x").is_ok());
        assert!(root.check(Perm::Admin, "/").is_err());
        assert!(open_worker.check(Perm::Lock, "/jobs/a").is_err());
        // An invalid section changes nothing.
        let bad = AuthConfig {
            enabled: true,
            ..Default::default()
        };
        assert!(a.reload(&bad).is_err());
        assert!(a.identify(&bearer("s-new"), None).is_ok());
        // Off: everything is allowed, to open callers too.
        a.reload(&AuthConfig::default()).unwrap();
        assert!(!copy.enabled());
        assert!(root.check(Perm::Admin, "/").is_ok());
    }

    #[test]
    fn the_cluster_entries_are_readable_by_any_token() {
        let w = caller("s-worker");
        assert!(w.check_lookup_read("/tenure/stores/3").is_ok());
        assert!(w.check_lookup_read("/tenure").is_ok());
        assert!(w.check_lookup_read("/tenurex").is_err());
        assert!(w.check_lookup_read("/").is_err());
    }

    #[test]
    fn bad_sections_are_refused() {
        let ok = token("a", "s", &[("/", &[Perm::Read])]);
        let cases = [
            (true, vec![]),
            (true, vec![ok.clone(), ok.clone()]),
            (
                true,
                vec![
                    ok.clone(),
                    TokenConfig {
                        name: "b".into(),
                        ..ok.clone()
                    },
                ],
            ),
            (
                true,
                vec![TokenConfig {
                    sha256: "abc".into(),
                    ..ok.clone()
                }],
            ),
            (true, vec![token("a", "s", &[("jobs", &[Perm::Read])])]),
            (true, vec![token("a", "s", &[("/jobs//x", &[Perm::Read])])]),
            (true, vec![token("a", "s", &[("/jobs", &[])])]),
            (true, vec![token("", "s", &[("/", &[Perm::Read])])]),
        ];
        for (enabled, tokens) in cases {
            let cfg = AuthConfig {
                enabled,
                tokens,
                ..Default::default()
            };
            assert!(cfg.validate().is_err(), "{cfg:?}");
        }
        let cert = |cn: &str, perms: &[Perm]| CertConfig {
            cn: cn.into(),
            rules: vec![Rule {
                prefix: "/".into(),
                perms: perms.to_vec(),
            }],
        };
        for certs in [
            vec![cert("", &[Perm::Read])],
            vec![cert("a", &[Perm::Read]), cert("a", &[Perm::Lock])],
            vec![cert("a", &[])],
        ] {
            let cfg = AuthConfig {
                enabled: true,
                certs,
                ..Default::default()
            };
            assert!(cfg.validate().is_err(), "{cfg:?}");
        }
        // A certificate alone is enough, and may share a token's name.
        let certs_only = AuthConfig {
            enabled: true,
            certs: vec![cert("a", &[Perm::Read])],
            ..Default::default()
        };
        assert!(certs_only.validate().is_ok());
        assert!(
            AuthConfig {
                enabled: true,
                tokens: vec![ok],
                certs: vec![cert("a", &[Perm::Read])],
            }
            .validate()
            .is_ok()
        );
    }

    #[test]
    fn hashes_and_secrets() {
        // The SHA-256 test vector of "abc".
        assert_eq!(
            hash_secret("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let (a, b) = (new_secret().unwrap(), new_secret().unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with("tnr_") && a.len() == 4 + 64, "{a}");
        assert!(parse_hash(&hash_secret(&a)).is_some());
        assert!(parse_hash(&"g".repeat(64)).is_none());
    }

    #[test]
    fn the_section_reads_from_toml() {
        let text = format!(
            r#"
            enabled = true
            [[tokens]]
            name = "worker"
            sha256 = "{}"
            rules = [{{ prefix = "/jobs/", perms = ["read", "lock"] }}]
            [[certs]]
            cn = "billing"
            rules = [{{ prefix = "/billing/", perms = ["write"] }}]
            "#,
            hash_secret("x")
        );
        let cfg: AuthConfig = toml::from_str(&text).unwrap();
        assert!(cfg.validate().is_ok());
        assert_eq!(cfg.tokens[0].rules[0].perms, vec![Perm::Read, Perm::Lock]);
        assert_eq!(cfg.certs[0].cn, "billing");
        let back: AuthConfig = toml::from_str(&toml::to_string_pretty(&cfg).unwrap()).unwrap();
        assert_eq!(back, cfg);
    }
}
