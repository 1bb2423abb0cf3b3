//! The `[auth]` configuration: rules, tokens and certificates, and their checks.

use super::Perm;
use super::secret::parse_hash;
use crate::config::ConfigError;
use serde::{Deserialize, Serialize};
use std::fmt;

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
    /// SHA-256 of the secret, 64 hex digits ([`hash_secret`](crate::auth::hash_secret), `tenure token hash`).
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
pub(super) fn check_rules(kind: Kind, name: &str, rules: &[Rule]) -> Result<(), ConfigError> {
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
