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

use crate::config::ConfigError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use tenure_client::proto;
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

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

/// One rule: permissions on a path subtree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// `/` or a path: the rule covers it and every path below it.
    pub prefix: String,
    /// What the token may do there.
    pub perms: Vec<Perm>,
}

/// One named token of `[auth]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The token's name (in logs and error messages; never secret).
    pub name: String,
    /// SHA-256 of the secret, 64 hex digits ([`hash_secret`], `tenure token hash`).
    pub sha256: String,
    /// What the token may do where.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// One client certificate of `[auth]`, named by its subject common name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertConfig {
    /// The subject common name of a certificate the cluster's CA issued.
    pub cn: String,
    /// What the certificate's holder may do where.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// The `[auth]` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Require a token or a client certificate on every call (default false: no
    /// authorization at all).
    pub enabled: bool,
    /// The tokens the devices know.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<TokenConfig>,
    /// The client certificates the devices know.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub certs: Vec<CertConfig>,
}

impl AuthConfig {
    /// Whether the section is absent or empty (not written out).
    pub fn is_default(&self) -> bool {
        *self == AuthConfig::default()
    }

    /// Check the section: unique names, hashes and CNs, hashes of 64 hex digits, prefixes
    /// that are `/` or paths, rules that grant something, and a token or a certificate
    /// when enabled.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(format!("auth: {m}")));
        if self.enabled && self.tokens.is_empty() && self.certs.is_empty() {
            return bad("enabled with no tokens or certificates would refuse every request".into());
        }
        let mut names = std::collections::BTreeSet::new();
        let mut hashes = std::collections::BTreeSet::new();
        for t in &self.tokens {
            if t.name.is_empty() {
                return bad("a token has an empty name".into());
            }
            if !names.insert(t.name.as_str()) {
                return bad(format!("two tokens are named {:?}", t.name));
            }
            let Some(h) = parse_hash(&t.sha256) else {
                return bad(format!(
                    "token {:?}: sha256 must be 64 hex digits (`tenure token hash`)",
                    t.name
                ));
            };
            if !hashes.insert(h) {
                return bad(format!("token {:?} has another token's sha256", t.name));
            }
            check_rules(Kind::Token, &t.name, &t.rules)?;
        }
        let mut cns = std::collections::BTreeSet::new();
        for c in &self.certs {
            if c.cn.is_empty() {
                return bad("a certificate has an empty cn".into());
            }
            if !cns.insert(c.cn.as_str()) {
                return bad(format!("two certificates have the cn {:?}", c.cn));
            }
            check_rules(Kind::Certificate, &c.cn, &c.rules)?;
        }
        Ok(())
    }
}

/// Check one token's or certificate's rules: prefixes that are `/` or paths, each
/// granting something.
fn check_rules(kind: Kind, name: &str, rules: &[Rule]) -> Result<(), ConfigError> {
    let bad = |m: String| Err(ConfigError::Invalid(format!("auth: {kind} {name:?}: {m}")));
    for r in rules {
        let base = r.prefix.trim_end_matches('/');
        if !base.is_empty()
            && let Err(e) = tenure_core::lockctl::LockName::parse(base)
        {
            return bad(format!("prefix {:?} is not / or a path ({e})", r.prefix));
        }
        if r.perms.is_empty() {
            return bad(format!("the rule for {:?} grants no permission", r.prefix));
        }
    }
    Ok(())
}

/// What a caller identified itself with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A bearer token (`[[auth.tokens]]`).
    Token,
    /// A client certificate (`[[auth.certs]]`).
    Certificate,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Token => "token",
            Kind::Certificate => "certificate",
        })
    }
}

/// A SHA-256 digest.
type Hash = [u8; 32];

/// The SHA-256 of a secret, as the configuration's `sha256` holds it (lowercase hex).
pub fn hash_secret(secret: &str) -> String {
    hex(&digest(secret))
}

fn digest(secret: &str) -> Hash {
    let d = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    let mut h = [0u8; 32];
    h.copy_from_slice(d.as_ref());
    h
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hash(s: &str) -> Option<Hash> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut h = [0u8; 32];
    for (i, byte) in h.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(h)
}

/// A new random secret (256 bits from the system's generator, hex), for a new token.
pub fn new_secret() -> Result<String, ConfigError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| ConfigError::Invalid("the system's random generator failed".into()))?;
    Ok(format!("tnr_{}", hex(&bytes)))
}

/// Equal digests, compared in constant time (no early exit on the first difference).
fn same(a: &Hash, b: &Hash) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// A configured token or certificate, compiled: how it is recognized and, per subtree,
/// the permissions it holds there with their implications expanded.
#[derive(Debug)]
pub struct Principal {
    /// The token's name, or the certificate's CN.
    name: String,
    /// A token's hash (none for a certificate, which its CN names).
    hash: Option<Hash>,
    /// (subtree without its trailing `/`, permission bits).
    rules: Vec<(String, u8)>,
    /// Its policy has been replaced ([`Auth::reload`]): callers holding it are judged
    /// by its successor in the current one.
    retired: AtomicBool,
}

impl Principal {
    fn new(name: &str, hash: Option<Hash>, rules: &[Rule]) -> Arc<Principal> {
        let rules = rules
            .iter()
            .map(|r| {
                let bits = r.perms.iter().fold(0, |b, p| b | p.closure());
                (r.prefix.trim_end_matches('/').to_string(), bits)
            })
            .collect();
        Arc::new(Principal {
            name: name.to_string(),
            hash,
            rules,
            retired: AtomicBool::new(false),
        })
    }

    /// The token's name, or the certificate's CN.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the caller identified itself with.
    pub fn kind(&self) -> Kind {
        match self.hash {
            Some(_) => Kind::Token,
            None => Kind::Certificate,
        }
    }

    /// Whether the token holds `perm` on `path` (a name, key or prefix).
    pub fn allows(&self, perm: Perm, path: &str) -> bool {
        self.rules
            .iter()
            .any(|(base, bits)| bits & perm.bit() != 0 && tenure_core::lookup::under(path, base))
    }
}

/// Who makes a call.
#[derive(Clone, Debug)]
pub enum Caller {
    /// Authorization is off: anyone may do anything.
    Anyone,
    /// A configured token or client certificate, and the policy it came from.
    Token(Arc<Principal>, Auth),
}

impl Caller {
    /// Whether the caller may use `perm` on `path`, or why not. A caller identified
    /// before the policy was reloaded is judged by the current one.
    pub fn check(&self, perm: Perm, path: &str) -> Result<(), Denied> {
        match self {
            Caller::Anyone => Ok(()),
            Caller::Token(p, auth) if p.retired.load(Ordering::Acquire) => {
                match auth.successor(p) {
                    Some(now) => now.check(perm, path),
                    None => Err(refuse(p, perm, path)),
                }
            }
            Caller::Token(p, _) if p.allows(perm, path) => Ok(()),
            Caller::Token(p, _) => Err(refuse(p, perm, path)),
        }
    }

    /// [`Caller::check`] for a lookup read: the cluster's own entries are readable by
    /// any caller.
    pub fn check_lookup_read(&self, path: &str) -> Result<(), Denied> {
        if path != "/" && tenure_core::lookup::under(path, SYSTEM_PREFIX) {
            return Ok(());
        }
        self.check(Perm::Read, path)
    }
}

/// The refusal of `perm` on `path` to `p`.
fn refuse(p: &Principal, perm: Perm, path: &str) -> Denied {
    metrics::counter!("tenure_auth_denied_total", "perm" => perm.as_str()).increment(1);
    Denied {
        kind: p.kind(),
        token: p.name.clone(),
        perm,
        path: path.chars().take(256).collect(),
    }
}

/// A refused request: the token (or certificate), the permission it lacks and the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    /// A token or a certificate.
    pub kind: Kind,
    /// The token's name, or the certificate's CN.
    pub token: String,
    /// The permission needed.
    pub perm: Perm,
    /// Where.
    pub path: String,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} has no {} permission on {}",
            self.kind, self.token, self.perm, self.path
        )
    }
}

impl Denied {
    /// The unary calls' answer.
    pub fn status(&self) -> Status {
        Status::permission_denied(self.to_string())
    }

    /// The session stream's typed error.
    pub fn to_proto(&self) -> proto::Error {
        proto::Error {
            message: self.to_string(),
            kind: Some(proto::error::Kind::PermissionDenied(
                proto::PermissionDenied {
                    token: self.token.clone(),
                    permission: self.perm.as_str().to_string(),
                    path: self.path.clone(),
                },
            )),
        }
    }
}

impl From<Denied> for Status {
    fn from(d: Denied) -> Status {
        d.status()
    }
}

/// The compiled tokens and certificates of an enabled `[auth]` section.
#[derive(Debug)]
struct Policy {
    tokens: Vec<Arc<Principal>>,
    certs: Vec<Arc<Principal>>,
}

impl Policy {
    /// The token whose hash is the secret's; every configured hash is compared, whichever
    /// matches.
    fn by_hash(&self, h: &Hash) -> Option<Arc<Principal>> {
        let mut found = None;
        for t in &self.tokens {
            if t.hash.as_ref().is_some_and(|t| same(t, h)) {
                found = Some(t.clone());
            }
        }
        found
    }

    /// The certificate entry of a CN.
    fn by_cn(&self, cn: &str) -> Option<Arc<Principal>> {
        self.certs.iter().find(|c| c.name == cn).cloned()
    }
}

/// A device's authorization policy: off, or the configured tokens and certificates.
/// Cheap to clone; clones share the policy, which [`Auth::reload`] replaces for all.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    policy: Arc<RwLock<Option<Arc<Policy>>>>,
}

/// Why a caller is not known: the `UNAUTHENTICATED` answer.
#[allow(clippy::result_large_err)]
fn unauthenticated(why: &str) -> Status {
    metrics::counter!("tenure_auth_unauthenticated_total").increment(1);
    Status::unauthenticated(format!(
        "{why}: this cluster requires a token (`--auth-token` or TENURE_TOKEN; on the wire \
         `authorization: Bearer <token>`) or a client certificate it knows"
    ))
}

impl Auth {
    /// No authorization: every call is allowed.
    pub fn disabled() -> Auth {
        Auth::default()
    }

    /// The policy of an `[auth]` section (validated).
    pub fn new(cfg: &AuthConfig) -> Result<Auth, ConfigError> {
        cfg.validate()?;
        if !cfg.enabled {
            return Ok(Auth::disabled());
        }
        let tokens = (cfg.tokens.iter())
            .map(|t| {
                Principal::new(
                    &t.name,
                    Some(parse_hash(&t.sha256).expect("validated")),
                    &t.rules,
                )
            })
            .collect();
        let certs = (cfg.certs.iter())
            .map(|c| Principal::new(&c.cn, None, &c.rules))
            .collect();
        Ok(Auth {
            policy: Arc::new(RwLock::new(Some(Arc::new(Policy { tokens, certs })))),
        })
    }

    /// The policy now (none: authorization is off).
    fn current(&self) -> Option<Arc<Policy>> {
        (self.policy.read().unwrap_or_else(PoisonError::into_inner)).clone()
    }

    /// Use the policy of `cfg` from now on, for every clone of this `Auth`; when `cfg`
    /// is not valid, keep the current one and say why.
    pub fn reload(&self, cfg: &AuthConfig) -> Result<(), ConfigError> {
        let next = Auth::new(cfg)?.current();
        let old = std::mem::replace(
            &mut *self.policy.write().unwrap_or_else(PoisonError::into_inner),
            next,
        );
        for p in old.iter().flat_map(|o| o.tokens.iter().chain(&o.certs)) {
            p.retired.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// What the current policy makes of a caller identified as `p` by an older one:
    /// the same token (hash) or certificate (CN), if it still has it.
    fn successor(&self, p: &Principal) -> Option<Caller> {
        let Some(policy) = self.current() else {
            return Some(Caller::Anyone);
        };
        let now = match &p.hash {
            Some(h) => policy.by_hash(h),
            None => policy.by_cn(&p.name),
        };
        Some(Caller::Token(now?, self.clone()))
    }

    /// Whether calls need a token or a certificate, and how many of each there are.
    pub fn summary(&self) -> Option<(usize, usize)> {
        (self.current()).map(|p| (p.tokens.len(), p.certs.len()))
    }

    /// Whether calls need a token or a certificate.
    pub fn enabled(&self) -> bool {
        self.summary().is_some()
    }

    /// The caller of a call: [`Caller::Anyone`] when authorization is off; when it is
    /// on, the token the call's metadata carries, else the client certificate of its
    /// connection ([`crate::tls::ClientConnInfo`]); `UNAUTHENTICATED` when neither is
    /// one the device knows.
    // The Err is a tonic Status, as every handler returns (large, but built only on
    // refusal).
    #[allow(clippy::result_large_err)]
    pub fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let cn = (request.extensions().get::<crate::tls::ClientConnInfo>())
            .and_then(|i| i.cert_cn.as_deref());
        self.identify(request.metadata(), cn)
    }

    /// [`Auth::caller`] from a call's metadata and its certificate's CN, if any.
    #[allow(clippy::result_large_err)]
    pub fn identify(&self, md: &MetadataMap, cert_cn: Option<&str>) -> Result<Caller, Status> {
        let Some(policy) = self.current() else {
            return Ok(Caller::Anyone);
        };
        let found = match (md.get(AUTHORIZATION), cert_cn) {
            (Some(value), _) => {
                let Some(secret) = value.to_str().ok().and_then(bearer) else {
                    return Err(unauthenticated(
                        "the authorization metadata is not `Bearer <token>`",
                    ));
                };
                policy
                    .by_hash(&digest(secret))
                    .ok_or_else(|| unauthenticated("unknown token"))?
            }
            (None, Some(cn)) => policy.by_cn(cn).ok_or_else(|| {
                unauthenticated(&format!(
                    "the client certificate's common name {cn:?} is not in [[auth.certs]]"
                ))
            })?,
            (None, None) => return Err(unauthenticated("no token given")),
        };
        Ok(Caller::Token(found, self.clone()))
    }

    /// The caller of a call that needs `perm` on `path`, or the status refusing it.
    #[allow(clippy::result_large_err)]
    pub fn authorize<T>(
        &self,
        request: &Request<T>,
        perm: Perm,
        path: &str,
    ) -> Result<Caller, Status> {
        let caller = self.caller(request)?;
        caller.check(perm, path)?;
        Ok(caller)
    }
}

/// The token of an `authorization` value `Bearer <token>` (the scheme in any case).
fn bearer(v: &str) -> Option<&str> {
    let (scheme, token) = v.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

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
