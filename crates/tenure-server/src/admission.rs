//! Admission: a device takes at most `limit` client requests into its core at once.
//!
//! One more is refused at once with `RESOURCE_EXHAUSTED` ("overloaded"), which clients
//! retry after a pause (etcd answers "too many requests" the same way), instead of
//! queueing without bound: queued requests held most of an overloaded device's heap,
//! and answering them late looked like failures to the clients and, through the time the
//! core spent on them, to the device's peers.
//!
//! On a session stream the refusal is that request's `Overloaded` answer, and the stream
//! goes on: its client sends the request again after a pause. Only the starts and ends of
//! object watches and observations wait for a place ([`Admission::wait`]): a stream's
//! window bounds how many wait.
//!
//! Requests that keep sessions alive or give something back are always admitted: a
//! keep-alive, a session close, a release. So is an acquire that waits: it is parked in
//! the lock table, not worked on, and its session's locks bound it.

use std::sync::Arc;
use tenure_core::ids::DeviceId;
use tenure_core::io::{Request, WaitSpec};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// How many client requests a device works on at once by default.
pub const DEFAULT_MAX_CLIENT_REQUESTS: usize = 4096;

/// The device's admission of client requests (shared by its services).
#[derive(Clone, Debug)]
pub struct Admission {
    permits: Arc<Semaphore>,
    limit: usize,
    device: Option<DeviceId>,
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
        }
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

    /// Admit a request that always counts (a lookup request).
    pub fn take(&self) -> Result<Admitted, Status> {
        match self.permits.clone().try_acquire_owned() {
            Ok(p) => Ok(Admitted(Some(p))),
            Err(_) => {
                metrics::counter!("tenure_client_overloaded_total").increment(1);
                Err(overloaded(self.device, self.limit))
            }
        }
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
