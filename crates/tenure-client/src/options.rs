//! [`ClientOptions`]: timeouts, retry bounds, TLS, credentials and the transport a
//! [`Client`] uses.

use crate::tls;
use std::time::Duration;

/// Retry and timeout settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Connecting to one endpoint.
    pub connect_timeout: Duration,
    /// One RPC.
    pub request_timeout: Duration,
    /// Most attempts of one routed request.
    pub max_attempts: u32,
    /// Total time one routed request may take.
    pub retry_deadline: Duration,
    /// First backoff; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// Largest backoff.
    pub backoff_max: Duration,
    /// TTL asked for the sessions the client opens.
    pub session_ttl: Duration,
    /// `δ_c`: the bound on clock differences the cluster is configured with; the client's
    /// deadline for a session is this much earlier than the TTL alone would give.
    pub clock_drift: Duration,
    /// How long before a session's conservative deadline a guard reports that its lock
    /// may be lost ([`LockGuard::lost`](crate::LockGuard::lost)) when no keep-alive has extended it.
    pub loss_warning: Duration,
    /// Longest single wait RPC of a blocking acquire; the wait continues with a retry of
    /// the same request (the same place in the queue).
    pub wait_poll: Duration,
    /// Name reported to the servers (logs).
    pub client_name: String,
    /// How requests travel: a session stream per store (the default) or unary RPCs.
    pub transport: Transport,
    /// One attempt to reach a device (connect and first answer); a device that does not
    /// answer within it is passed over for `pass_over`.
    pub attempt_timeout: Duration,
    /// When an attempt has not answered within this, the next endpoint is tried too.
    pub hedge_after: Duration,
    /// How long an endpoint that did not answer is tried last.
    pub pass_over: Duration,
    /// Slack allowed past a timed wait before the client gives up on its own: a
    /// `Wait::Timeout(d)` call returns within `d` + this, whatever the devices do.
    pub wait_slack: Duration,
    /// TLS on every connection (the CA to trust, the certificate to present), or none:
    /// plaintext. A device with TLS refuses plaintext clients, and the reverse.
    pub tls: Option<tls::ClientTls>,
    /// The token presented on every call (`authorization: Bearer <token>`), for a
    /// cluster with authorization on; none: no token.
    pub token: Option<String>,
}

/// How a client's requests travel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// One session stream per store: pipelined requests, keep-alives and pushed events.
    #[default]
    Stream,
    /// One unary RPC per request and a keep-alive stream per session.
    Unary,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_secs(6),
            max_attempts: 60,
            retry_deadline: Duration::from_secs(20),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(500),
            session_ttl: Duration::from_secs(10),
            clock_drift: Duration::from_millis(50),
            loss_warning: Duration::from_secs(2),
            wait_poll: Duration::from_secs(30),
            client_name: format!("tenure-client/{}", std::process::id()),
            transport: Transport::Stream,
            attempt_timeout: Duration::from_secs(1),
            hedge_after: Duration::from_millis(150),
            pass_over: Duration::from_secs(5),
            wait_slack: Duration::from_millis(300),
            tls: None,
            token: None,
        }
    }
}

impl ClientOptions {
    /// These options with `token` presented on every call.
    pub fn with_token(mut self, token: impl Into<String>) -> ClientOptions {
        self.token = Some(token.into());
        self
    }
}
