//! # tenure-client
//!
//! The Rust client library for Tenure, and the gRPC code generated from
//! `proto/tenure.proto` ([`proto`], used by the server too).
//!
//! A [`Client`] is built from a list of device endpoints. Every request is routed by store:
//! the client remembers which endpoint managed each store last, follows `NotManager`
//! redirects (the hint names the manager's endpoint), and on `Unavailable` or a transport
//! failure tries the other endpoints with exponential backoff, within a bounded number of
//! attempts and a deadline. At most three redirects are followed in a row:
//! hints left by old managers can name each other, so a longer chain is left for the
//! endpoints in turn. The keep-alive tasks route the same way. Errors are typed
//! ([`Error`]), mirroring the protocol's.
//!
//! Every routed RPC goes through one generic loop ([`Client::routed`]), so adding an RPC
//! is one call with a closure that issues it and unpacks its `oneof result`.
//!
//! Locks ([`Client::lock`], module [`locks`]): the client opens one session,
//! transparently, for names of every store (DESIGN §4, "One session per client"), and
//! keeps it alive from a background task over a keep-alive stream. A [`LockGuard`] carries the grant's fencing token and the session's
//! conservative deadline (the local send time of the last answered keep-alive + TTL −
//! δ_c, [`tenure_core::session::client_deadline`]); [`LockGuard::lost`] resolves before
//! that deadline passes unless a keep-alive extends it. Dropping a guard releases the
//! lock from a spawned task. Acquires are retried with the same request id, which the
//! store replays as the same outcome, so a retry after a redirect or a failover never
//! grants twice.
//!
//! Lookup ([`lookup`], seed 003): [`Client::publish`] keeps an entry refreshed from a
//! background task ([`lookup::PublishHandle`]: newer versions, meta-updates applied,
//! persistent refreshes retried until acknowledged, revoked on drop);
//! [`Client::get`]/[`Client::list`]/[`Client::revoke`] go to any endpoint (the lookup
//! service is cluster-wide) and are retried on another one, and on `NoLeader`, within
//! the deadline; [`Client::watch`] and [`Client::alert`] keep a subscription on a `Watch`
//! stream and report every change, resynchronising after a gap, a failover or a
//! reconnection.
//!
//! Cluster membership ([`Client::cluster`], module [`cluster`], DESIGN §6): add a device
//! started to join, remove (drain and retire) one, read the membership record.
//!
//! Objects ([`Client::objects`], module [`objects`], seed 001): put (one message up to a
//! MiB, streamed above), get, head, conditional puts (create only, compare-and-set on
//! the revision, fenced by a lock guard's token), delete, list, multipart uploads, and
//! watches that resume from the last revision seen when the store's manager moves and
//! report a re-read explicitly when the history no longer reaches back. Writes carry the
//! client's session in the store and one request id for every attempt, so a retry after
//! a failover returns the first attempt's outcome.
//!
//! Snapshots ([`Client::snapshots`], module [`snapshots`], seed 002 §14.1): start a
//! consistent snapshot of the cluster on a device and wait for it to complete, list the
//! snapshots a device took part in, and fetch a device's part, checksummed.
//!
//! Elections ([`Client::elections`], module [`elections`], DESIGN §6): campaign (wait to
//! lead an election under the client's session in its store, publishing a value), a
//! [`elections::Leadership`] with its fencing token that tells the holder when leadership
//! may be lost before its conservative deadline (as a [`LockGuard`] does), proclaim,
//! resign, the current leader, and observations of every change, "no leader" included.

mod client;
pub mod cluster;
mod conn;
pub mod elections;
mod error;
pub mod locks;
pub mod lookup;
pub mod objects;
mod options;
mod routing;
pub mod snapshots;
pub mod status;
mod stream;
pub mod suspend;
pub mod tls;

use tonic::transport::Channel;

/// The channel every service client of this crate uses: a connection to one device, with
/// the client's token attached to every call ([`Credentials`]).
pub type Chan = tonic::service::interceptor::InterceptedService<Channel, Credentials>;

/// What a client presents on every call when the cluster requires a token: the
/// `authorization: Bearer <token>` metadata, or nothing (see [`ClientOptions::token`]).
#[derive(Clone, Default)]
pub struct Credentials(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Credentials(token)"
        } else {
            "Credentials(none)"
        })
    }
}

impl Credentials {
    /// The credentials of `opts`: its token, if any.
    pub fn of(opts: &ClientOptions) -> Result<Credentials> {
        let Some(token) = &opts.token else {
            return Ok(Credentials(None));
        };
        let token = token.trim();
        let mut v: tonic::metadata::MetadataValue<tonic::metadata::Ascii> =
            format!("Bearer {token}")
                .parse()
                .map_err(|_| Error::InvalidToken)?;
        if token.is_empty() || token.contains(' ') {
            return Err(Error::InvalidToken);
        }
        v.set_sensitive(true);
        Ok(Credentials(Some(v)))
    }
}

impl tonic::service::Interceptor for Credentials {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

pub use client::{Client, Version, channel};
pub(crate) use client::{Inner, lazy_channel, normalize};
pub use error::{Error, OVERLOADED, describe_status};
pub use locks::{
    FencingToken, Holder, LockGuard, LockMode, LockOptions, LockState, Loss, SessionState, Wait,
};
pub use options::{ClientOptions, Transport};
pub(crate) use routing::{Bounds, MAX_REDIRECTS, Redirects, within};

/// Code generated from `proto/tenure.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("tenure.v1");
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use proto::error::Kind;
    use std::time::{Duration, Instant};

    #[test]
    fn errors_read_as_what_failed_and_what_to_do() {
        assert_eq!(Error::SessionExpired(0).to_string(), "the session expired");
        assert_eq!(Error::SessionExpired(7).to_string(), "session 7 expired");
        let refused = tonic::Status::unavailable("tcp connect error");
        let text = Error::from_status(refused).to_string();
        assert!(
            text.starts_with("cannot connect (tcp connect error)"),
            "{text}"
        );
        assert!(text.contains("tenure cluster status"), "{text}");
        let late = Error::from_status(tonic::Status::deadline_exceeded("store 3"));
        assert_eq!(late.to_string(), "no answer in time: store 3");
        let other = Error::from_status(tonic::Status::internal("boom"));
        assert_eq!(other.to_string(), "request failed (Internal): boom");
        // Authorization's answers are typed and final.
        let denied = Error::from_status(tonic::Status::permission_denied("token \"t\" has no"));
        assert!(matches!(&denied, Error::PermissionDenied(m) if m.contains("\"t\"")));
        assert!(!denied.retryable() && !denied.transient_rpc());
        let anon = Error::from_status(tonic::Status::unauthenticated("no token given"));
        assert!(matches!(anon, Error::Unauthenticated(_)));
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_names_the_cause_not_the_transport_dump() {
        let c = Client::with_options(
            vec!["127.0.0.1:1".to_string()],
            ClientOptions {
                retry_deadline: std::time::Duration::from_millis(300),
                ..Default::default()
            },
        )
        .unwrap();
        let e = c.status_of("127.0.0.1:1").await.unwrap_err().to_string();
        assert!(e.starts_with("cannot connect ("), "{e}");
        assert!(!e.contains("tonic::transport"), "{e}");
    }

    #[test]
    fn endpoints_are_normalized_and_required() {
        assert!(matches!(
            Client::new(Vec::<String>::new()),
            Err(Error::NoEndpoints)
        ));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let c = Client::new(["127.0.0.1:1", "http://127.0.0.1:2"]).unwrap();
            assert_eq!(
                c.endpoints(),
                vec!["http://127.0.0.1:1", "http://127.0.0.1:2"]
            );
        });
    }

    #[test]
    fn redirect_chains_are_cut_after_three_hops() {
        let mut r = Redirects::default();
        assert_eq!(
            r.follow(Some("a:1"), "http://a:1"),
            None,
            "a hint to itself"
        );
        for (hint, from) in [
            ("b:1", "http://a:1"),
            ("a:1", "http://b:1"),
            ("b:1", "http://a:1"),
        ] {
            assert_eq!(r.follow(Some(hint), from), Some(format!("http://{hint}")));
        }
        assert_eq!(r.follow(Some("a:1"), "http://b:1"), None, "a fourth hop");
        // The count started over: the next chain is followed again.
        assert_eq!(
            r.follow(Some("a:1"), "http://b:1"),
            Some("http://a:1".into())
        );
        r.reset();
        assert_eq!(r.follow(None, "http://b:1"), None);
    }

    #[test]
    fn protocol_errors_map_to_typed_errors() {
        let e = Error::from_proto(proto::Error {
            kind: Some(Kind::NotManager(proto::NotManager {
                store: 3,
                hint_device: Some(2),
                hint_endpoint: "127.0.0.1:9".into(),
            })),
            message: String::new(),
        });
        assert!(
            matches!(e, Error::NotManager { store: 3, hint: Some(ref h) } if h == "127.0.0.1:9")
        );
        assert!(e.retryable());
        let e = Error::from_proto(proto::Error {
            kind: Some(Kind::UnknownStore(proto::UnknownStore { store: 99 })),
            message: String::new(),
        });
        assert!(matches!(e, Error::UnknownStore(99)));
        assert!(!e.retryable());
    }

    #[test]
    fn an_overload_answer_is_retried_and_a_message_too_large_is_not() {
        let mut s = tonic::Status::resource_exhausted("device d1 is overloaded");
        s.metadata_mut()
            .insert(OVERLOADED, tonic::metadata::MetadataValue::from_static("1"));
        let e = Error::from_status(s);
        assert!(matches!(e, Error::Overloaded(_)) && e.retryable(), "{e}");
        let e = Error::from_status(tonic::Status::resource_exhausted("message too large"));
        assert!(!matches!(e, Error::Overloaded(_)) && !e.retryable(), "{e}");
    }

    #[test]
    fn unreachable_endpoints_give_up_within_bounds() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Port 1 on loopback: nothing listens, connections are refused at once.
            let opts = ClientOptions {
                max_attempts: 4,
                retry_deadline: Duration::from_secs(5),
                transport: Transport::Unary,
                ..Default::default()
            };
            let c = Client::with_options(["127.0.0.1:1"], opts).unwrap();
            let err = c.write(0, 1, 1).await.unwrap_err();
            assert!(matches!(err, Error::GaveUp { attempts: 4, .. }), "{err}");
            // The session stream keeps trying until the retry deadline.
            let opts = ClientOptions {
                retry_deadline: Duration::from_millis(500),
                ..Default::default()
            };
            let c = Client::with_options(["127.0.0.1:1"], opts).unwrap();
            let started = Instant::now();
            let err = c.write(0, 1, 1).await.unwrap_err();
            assert!(matches!(err, Error::GaveUp { .. }), "{err}");
            assert!(started.elapsed() < Duration::from_secs(2));
        });
    }
}
