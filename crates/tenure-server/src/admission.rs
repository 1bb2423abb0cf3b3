//! Admission: a device takes at most `limit` client requests into its core at once.
//!
//! One more is refused at once with `RESOURCE_EXHAUSTED` ("overloaded"), which clients
//! retry after a pause (etcd answers "too many requests" the same way), instead of
//! queueing without bound: queued requests held most of an overloaded device's heap,
//! and answering them late looked like failures to the clients and, through the time the
//! core spent on them, to the device's peers.
//!
//! A session stream's request waits for a place, in turn, up to
//! [`STREAM_ADMISSION_WAIT`] (`stream_admission_wait_ms`; the stream's window bounds how many wait); then it is
//! answered `Overloaded` on the stream, not run, and the stream goes on: its client sends
//! the request again after a pause. (Refused at once, 160,000 try-acquires of 10,000
//! sessions retried against 12,288 places in a lottery the freshest won: 70% of them were
//! still refused 20 s on.) The starts and ends of object watches and observations wait
//! without that bound ([`Admission::wait`]).
//!
//! Requests that keep sessions alive or give something back are always admitted: a
//! keep-alive, a session close, a release. So is an acquire that waits: it is parked in
//! the lock table, not worked on, and its session's locks bound it.

use std::sync::Arc;
use std::time::Duration;
use tenure_core::ids::DeviceId;
use tenure_core::io::{Request, WaitSpec};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// How long a session stream's request waits for a place before it is answered
/// `Overloaded`: well inside the client's 6-s bound for an answer, with the 5-s request
/// timeout after it.
pub const STREAM_ADMISSION_WAIT: Duration = Duration::from_secs(1);

/// How many client requests a device works on at once by default.
pub const DEFAULT_MAX_CLIENT_REQUESTS: usize = 4096;

/// The device's admission of client requests (shared by its services).
#[derive(Clone, Debug)]
pub struct Admission {
    permits: Arc<Semaphore>,
    limit: usize,
    device: Option<DeviceId>,
    /// How long a session stream's request waits for a place.
    stream_wait: Duration,
}

/// A request admitted: it counts against the limit until this is dropped. `None` inside
/// for a request that is always admitted.
#[derive(Debug)]
#[must_use]
pub struct Admitted(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Default for Admission {
    fn default() -> Self {
        Admission::new(DEFAULT_MAX_CLIENT_REQUESTS, None)
    }
}

impl Admission {
    /// At most `limit` requests at once (at least one).
    pub fn new(limit: usize, device: Option<DeviceId>) -> Admission {
        let limit = limit.max(1);
        Admission {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            device,
            stream_wait: STREAM_ADMISSION_WAIT,
        }
    }

    /// A session stream's requests wait up to `wait` for a place (zero: refused at once).
    pub fn with_stream_wait(mut self, wait: Duration) -> Admission {
        self.stream_wait = wait;
        self
    }

    /// How long a session stream's request waits for a place.
    pub fn stream_wait(&self) -> Duration {
        self.stream_wait
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Requests admitted and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.limit - self.permits.available_permits()
    }

    /// Admit a core request, or the overload error.
    pub fn request(&self, req: &Request) -> Result<Admitted, Status> {
        if always_admitted(req) {
            return Ok(Admitted(None));
        }
        self.take()
    }

    /// Admit a core request when there is a place (a session stream's: its window
    /// bounds how many wait).
    pub async fn wait(&self, req: &Request) -> Admitted {
        if always_admitted(req) {
            return Admitted(None);
        }
        // The semaphore is never closed.
        Admitted(self.permits.clone().acquire_owned().await.ok())
    }

    /// Admit a core request when a place frees within `limit`, in the order they asked
    /// (the semaphore is fair), or the overload error.
    pub async fn wait_within(&self, req: &Request, limit: Duration) -> Result<Admitted, Status> {
        if always_admitted(req) {
            return Ok(Admitted(None));
        }
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return Ok(Admitted(Some(p)));
        }
        if limit.is_zero() {
            return Err(self.refuse());
        }
        match tokio::time::timeout(limit, self.permits.clone().acquire_owned()).await {
            Ok(p) => Ok(Admitted(p.ok())),
            Err(_) => Err(self.refuse()),
        }
    }

    /// Admit a request that always counts (a lookup request).
    pub fn take(&self) -> Result<Admitted, Status> {
        match self.permits.clone().try_acquire_owned() {
            Ok(p) => Ok(Admitted(Some(p))),
            Err(_) => Err(self.refuse()),
        }
    }

    /// A refusal, counted: the overload answer.
    fn refuse(&self) -> Status {
        metrics::counter!("tenure_client_overloaded_total").increment(1);
        overloaded(self.device, self.limit)
    }
}

/// Requests no limit refuses: they keep sessions alive, give back, or only wait.
pub fn always_admitted(req: &Request) -> bool {
    match req {
        Request::KeepAlive { .. }
        | Request::CloseSession { .. }
        | Request::Release { .. }
        | Request::ReleaseFenced { .. } => true,
        Request::Acquire { wait, .. } => !matches!(wait, WaitSpec::Try),
        _ => false,
    }
}

/// The overload answer: `RESOURCE_EXHAUSTED`, which clients retry after a pause.
pub fn overloaded(device: Option<DeviceId>, limit: usize) -> Status {
    let who = device.map_or("the device".to_string(), |d| format!("device {d}"));
    let mut s = Status::resource_exhausted(format!(
        "{who} is overloaded ({limit} client requests in flight): retry after a pause"
    ));
    s.metadata_mut().insert(
        tenure_client::OVERLOADED,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tenure_core::ids::SessionId;
    use tenure_core::ids::StoreId;

    fn write() -> Request {
        Request::OpenSession {
            store: StoreId(0),
            ttl: Duration::from_secs(10),
        }
    }

    #[test]
    fn the_request_past_the_limit_is_refused_as_overloaded_and_a_freed_place_admits_again() {
        let a = Admission::new(2, Some(DeviceId(3)));
        let one = a.request(&write()).unwrap();
        let _two = a.request(&write()).unwrap();
        assert_eq!(a.in_flight(), 2);
        let e = a.request(&write()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("device d3 is overloaded"), "{e}");
        assert!(e.metadata().contains_key(tenure_client::OVERLOADED));
        drop(one);
        assert_eq!(a.in_flight(), 1);
        let _three = a.request(&write()).unwrap();
        assert!(a.take().is_err());
    }

    #[tokio::test]
    async fn a_stream_request_waits_for_a_place() {
        let a = Admission::new(1, None);
        let held = a.take().unwrap();
        let waiting = tokio::spawn({
            let a = a.clone();
            async move { a.wait(&write()).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(held);
        let _admitted = waiting.await.unwrap();
        assert_eq!(a.in_flight(), 1);
    }

    #[tokio::test]
    async fn a_stream_request_waits_in_turn_within_its_bound_then_is_overloaded() {
        let bound = Duration::from_millis(100);
        let a = Admission::new(1, Some(DeviceId(2))).with_stream_wait(bound);
        let held = a.take().unwrap();
        // No place frees within the bound: the overload answer, after the bound.
        let started = std::time::Instant::now();
        let e = a.wait_within(&write(), a.stream_wait()).await.unwrap_err();
        assert!(started.elapsed() >= bound);
        assert!(e.metadata().contains_key(tenure_client::OVERLOADED), "{e}");
        assert!(e.message().contains("device d2 is overloaded"), "{e}");
        // A place freed within the bound admits the first to wait, then the next.
        let long = Duration::from_secs(30);
        let first = tokio::spawn({
            let a = a.clone();
            async move { a.wait_within(&write(), long).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = tokio::spawn({
            let a = a.clone();
            async move { a.wait_within(&write(), long).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        let admitted = first.await.unwrap().expect("the first in turn");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!second.is_finished());
        drop(admitted);
        assert!(second.await.unwrap().is_ok());
        // A zero bound refuses at once; keep-alives are admitted whatever the bound.
        let _held = a.take().unwrap();
        assert!(a.wait_within(&write(), Duration::ZERO).await.is_err());
        let ka = Request::KeepAlive {
            store: StoreId(0),
            session: SessionId(1),
        };
        assert!(a.wait_within(&ka, Duration::ZERO).await.is_ok());
    }

    #[test]
    fn keep_alives_releases_and_waits_pass_a_full_device() {
        let a = Admission::new(1, None);
        let _held = a.take().unwrap();
        let session = SessionId(7);
        let store = StoreId(1);
        for req in [
            Request::KeepAlive { store, session },
            Request::CloseSession { store, session },
        ] {
            assert!(a.request(&req).is_ok(), "{req:?}");
        }
        assert!(a.request(&write()).is_err());
        assert_eq!(a.in_flight(), 1);
    }
}
