//! [`Auth`]: the policy built from the configuration, and how it authenticates a request
//! (bearer token or client certificate) and checks its permissions.

use super::principal::{Caller, Principal};
use super::rules::AuthConfig;
use super::secret::{Hash, digest, parse_hash, same};
use super::{AUTHORIZATION, Perm};
use crate::config::ConfigError;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, RwLock};
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

/// The compiled tokens and certificates of an enabled `[auth]` section.
#[derive(Debug)]
pub(super) struct Policy {
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
pub(super) fn unauthenticated(why: &str) -> Status {
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
    pub(super) fn successor(&self, p: &Principal) -> Option<Caller> {
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
pub(super) fn bearer(v: &str) -> Option<&str> {
    let (scheme, token) = v.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}
