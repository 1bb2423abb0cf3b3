//! The election service (`service Elections` in `proto/elections.proto`; DESIGN §6): leader
//! election for clients, built on the store's locks, sessions and objects, in the shape of
//! etcd's `concurrency.Election` (Campaign, Proclaim, Resign, Leader, Observe).
//!
//! An election `NAME` is the exclusive lock `NAME/.election` (its holder leads, its FIFO
//! queue is the candidates in campaign order) and the object `NAME/.election`, the
//! leader's [`proto::LeaderRecord`]: value, fencing token, session. The record is
//! ephemeral to the leader's session and written only with the lock's token (server-side
//! fencing), so:
//!
//! - a leader whose session ends loses the lock and the record in the same expiry, and
//!   a deposed leader cannot overwrite its successor's record (its token is stale);
//! - `Leader` is one linearizable read of the record; `Observe` is an object watch of it:
//!   a put is a new leader (or a new value), a deletion is "no leader" — observers see
//!   the gap between two leaders, unlike etcd's `Observe`, which reports new leaders only.
//!
//! Every handler runs the same code paths as the lock and object services: the lock
//! requests through [`Api`]'s shared handlers, the object requests as the core's
//! [`ObjectRequest`](tenure_core::io::ObjectRequest)s with the same error mapping ([`Api::client_error`]).
//!
//! **Campaigns** wait in the lock's queue, which can take any time, so a campaign runs in
//! a task of its own, registered by `(store, session, request_id)`: a retry of the same
//! campaign (after the client's RPC deadline cut a long wait, or a lost answer) joins the
//! running task instead of queueing twice; the core replays the acquire by its request id
//! after a failover, and the record's put by the same `(session, request_id)`. When the
//! campaign's session ends, the core ends its wait (`SessionExpired`) and its place in the
//! queue is gone: a campaign never outlives its session (no zombie candidate, etcd's
//! issue with campaigns whose lease expired). A campaign whose callers all went away
//! (the RPC cancelled) and that nobody rejoins within [`ABANDON_GRACE`] of its election
//! gives the lock back without writing a record; one abandoned while its record was being
//! written resigns at once.
//!
//! **Resign** deletes the record if it is still this leadership's (compare-and-set on the
//! record's revision after reading it, so a successor's record is never touched), then
//! releases the lock fenced by the token: observers see "no leader" before the next
//! candidate is elected. It is a no-op for a leadership that already ended.

use crate::grpc::Api;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure_client::proto::{self, error::Kind};
use tenure_core::ids::SessionId;
use tenure_core::ids::StoreId;
use tokio::sync::{Notify, watch};
use tonic::Status;

mod calls;
mod observe;
mod service;

/// How long an elected campaign whose callers all went away waits for a retry to rejoin
/// it before it gives the lock back.
pub const ABANDON_GRACE: Duration = Duration::from_secs(2);

/// Largest leader value, in bytes (a value is a name or an address, not content: larger
/// ones get a typed `TooLarge`).
pub const MAX_VALUE_BYTES: usize = 32 * 1024;

/// A campaign's identity: its session and request id within the session's store.
type CampaignKey = (StoreId, SessionId, u64);

/// What a campaign's task ends with.
type CampaignOutcome = Result<proto::CampaignResponse, Status>;

/// One running campaign: its request, its callers, and its outcome once there is one.
#[derive(Debug)]
struct Running {
    request: proto::CampaignRequest,
    callers: AtomicUsize,
    rejoined: Notify,
    done: watch::Sender<Option<CampaignOutcome>>,
}

impl Running {
    /// Wait (at most `grace`) until a caller is attached; whether one is.
    async fn wait_for_caller(&self, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let notified = self.rejoined.notified();
            if self.callers.load(Ordering::SeqCst) > 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.callers.load(Ordering::SeqCst) > 0;
            }
        }
    }
}

/// A caller attached to a running campaign (detached when its RPC ends or is dropped).
struct Attached(Arc<Running>);

impl Attached {
    fn new(run: Arc<Running>) -> Attached {
        run.callers.fetch_add(1, Ordering::SeqCst);
        run.rejoined.notify_waiters();
        Attached(run)
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.callers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The election service over the client API's [`Api`].
#[derive(Clone, Debug)]
pub struct ElectionsApi {
    api: Api,
    campaigns: Arc<Mutex<HashMap<CampaignKey, Arc<Running>>>>,
}

impl ElectionsApi {
    /// The election service over `api`'s driver.
    pub fn new(api: Api) -> ElectionsApi {
        ElectionsApi {
            api,
            campaigns: Arc::default(),
        }
    }

    fn campaigns(&self) -> std::sync::MutexGuard<'_, HashMap<CampaignKey, Arc<Running>>> {
        // The map is consistent after any panic elsewhere: entries are inserted and
        // removed whole.
        self.campaigns.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An election name checked: its store and its lock's (and record's) key, and the store
/// of the session it is used under (the election's own store when there is none).
struct Election {
    name: String,
    store: StoreId,
    key: String,
    home: StoreId,
}

fn error(kind: Kind, message: String) -> proto::Error {
    proto::Error {
        kind: Some(kind),
        message,
    }
}

use crate::grpc::invalid_request as invalid;

#[cfg(test)]
mod tests {
    use tenure_client::elections::election_key;
    use tenure_core::config::store_of;

    #[test]
    fn an_election_key_is_a_child_of_its_name() {
        assert_eq!(election_key("/svc/db"), "/svc/db/.election");
        assert_eq!(
            store_of("/svc/db", 64),
            store_of(&election_key("/svc/db"), 64)
        );
    }
}
