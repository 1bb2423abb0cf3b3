//! Who is calling ([`Principal`], [`Caller`]) and the refusal ([`Denied`]) a check
//! answers when a permission is missing.

use super::policy::Auth;
use super::rules::{Kind, Rule};
use super::secret::Hash;
use super::{Perm, SYSTEM_PREFIX};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tenure_client::proto;
use tonic::Status;

/// A configured token or certificate, compiled: how it is recognized and, per subtree,
/// the permissions it holds there with their implications expanded.
#[derive(Debug)]
pub struct Principal {
    /// The token's name, or the certificate's CN.
    pub(super) name: String,
    /// A token's hash (none for a certificate, which its CN names).
    pub(super) hash: Option<Hash>,
    /// (subtree without its trailing `/`, permission bits).
    rules: Vec<(String, u8)>,
    /// Its policy has been replaced ([`Auth::reload`]): callers holding it are judged
    /// by its successor in the current one.
    pub(super) retired: AtomicBool,
}

impl Principal {
    pub(super) fn new(name: &str, hash: Option<Hash>, rules: &[Rule]) -> Arc<Principal> {
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
pub(super) fn refuse(p: &Principal, perm: Perm, path: &str) -> Denied {
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
