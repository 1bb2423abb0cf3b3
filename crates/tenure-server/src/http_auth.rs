//! Who may read the metrics address ([`crate::status_page`]) when authorization is on.
//!
//! With `[auth]` enabled, the status page (`/`) and `/status.json` (lock names, holders,
//! sessions: everything a `read` on `/` shows) need a token that holds `read` on `/`;
//! so does `/metrics`, unless `[metrics] public = true` serves it to anyone (a Prometheus
//! that scrapes without a token). The token comes in the `Authorization` header, either
//! as `Bearer <token>` (curl, Prometheus's `authorization` setting) or as HTTP Basic with
//! any user name and the token as the password, which a browser asks for itself when it
//! is answered `401` with a `Basic` challenge; a token never appears in a URL (logs,
//! history, `Referer`). A call without a token, or with one the device does not know, is
//! answered `401`; a known token without `read` on `/`, `403`; both with a text body that
//! says why. The metrics address is plain HTTP: bind it where only trusted hosts reach it.
//!
//! With authorization off everything there is served to anyone, as before.

use crate::auth::{AUTHORIZATION, Auth, Perm};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tonic::metadata::MetadataMap;

/// The metrics address's access policy.
#[derive(Clone, Debug)]
pub struct Access {
    /// The device's authorization (reloads included).
    pub auth: Auth,
    /// `/metrics` is served without a token (`[metrics] public`).
    pub metrics_public: bool,
}

/// What a browser is told to ask for, and what a script may send instead.
const CHALLENGES: [&str; 2] = [
    "Basic realm=\"tenure status\", charset=\"UTF-8\"",
    "Bearer realm=\"tenure status\"",
];

/// The axum middleware in front of every route of the metrics address.
pub async fn guard(State(access): State<Access>, request: Request, next: Next) -> Response {
    let open = access.metrics_public && request.uri().path() == "/metrics";
    if open || !access.auth.enabled() {
        return next.run(request).await;
    }
    match access.check(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal,
    }
}

impl Access {
    /// Whether the request's token holds `read` on `/`, or the answer refusing it.
    #[allow(clippy::result_large_err)]
    fn check(&self, headers: &HeaderMap) -> Result<(), Response> {
        let how = "this device's status needs a token with read on / (authorization is \
                   on): send `Authorization: Bearer <token>`, or, in a browser, any user name \
                   and the token as the password";
        let unauthorized = |why: &str| {
            let mut r = (StatusCode::UNAUTHORIZED, format!("{why}: {how}\n")).into_response();
            for c in CHALLENGES {
                r.headers_mut().append(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static(c),
                );
            }
            r
        };
        let Some(secret) = secret(headers) else {
            return Err(unauthorized("no token given"));
        };
        let mut md = MetadataMap::new();
        if let Ok(v) = format!("Bearer {secret}").parse() {
            md.insert(AUTHORIZATION, v);
        }
        let Ok(caller) = self.auth.identify(&md, None) else {
            return Err(unauthorized("unknown token"));
        };
        caller
            .check(Perm::Read, "/")
            .map_err(|d| (StatusCode::FORBIDDEN, format!("{d}: {how}\n")).into_response())
    }
}

/// The token of an `Authorization` header: `Bearer <token>`, or `Basic` with the token
/// as the password.
fn secret(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    let rest = rest.trim();
    let token = if scheme.eq_ignore_ascii_case("bearer") {
        rest.to_string()
    } else if scheme.eq_ignore_ascii_case("basic") {
        let pair = String::from_utf8(base64(rest)?).ok()?;
        pair.split_once(':')?.1.to_string()
    } else {
        return None;
    };
    (!token.is_empty()).then_some(token)
}

/// Standard base64 (RFC 4648 §4, padding optional) decoded; none if it is not.
fn base64(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let s = s.trim_end_matches('=').as_bytes();
    let (mut out, mut acc, mut bits) = (Vec::with_capacity(s.len() * 3 / 4), 0u32, 0);
    for &c in s {
        acc = acc << 6 | u32::from(digit(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    // Leftover bits are padding and must be zero; a lone sixth of a byte is not base64.
    (bits < 6 && acc & ((1 << bits) - 1) == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, v.parse().unwrap());
        h
    }

    #[test]
    fn the_token_comes_as_bearer_or_as_a_basic_password() {
        assert_eq!(secret(&with("Bearer s-1")).as_deref(), Some("s-1"));
        assert_eq!(secret(&with("bearer  s-1 ")).as_deref(), Some("s-1"));
        // "anyone:s-1:x" — the password is everything after the first colon.
        assert_eq!(
            secret(&with("Basic YW55b25lOnMtMTp4")).as_deref(),
            Some("s-1:x")
        );
        assert_eq!(secret(&with("Basic OnMtMQ==")).as_deref(), Some("s-1"));
        for bad in ["s-1", "Bearer ", "Basic !!", "Basic YW55b25l", "Digest x"] {
            assert_eq!(secret(&with(bad)), None, "{bad}");
        }
        assert_eq!(secret(&HeaderMap::new()), None);
    }

    #[test]
    fn base64_decodes_the_rfc_vectors() {
        for (enc, dec) in [
            ("", ""),
            ("Zg==", "f"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYg==", "foob"),
            ("Zm9vYmE=", "fooba"),
            ("Zm9vYmFy", "foobar"),
        ] {
            assert_eq!(base64(enc).as_deref(), Some(dec.as_bytes()), "{enc}");
        }
        assert_eq!(base64("Z"), None);
        assert_eq!(base64("Zh=="), None);
    }
}
