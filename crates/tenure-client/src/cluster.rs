//! Cluster membership (DESIGN §6; `service Cluster` in `proto/cluster.proto`).
//!
//! The set of devices is a versioned record changed only by the cluster's elected
//! coordinator. [`ClusterApi::add_device`] and [`ClusterApi::remove_device`] ask a device
//! to pass the request on to the coordinator and return the record that device has; the
//! change shows in the record a few coordinator rounds later. Both are idempotent, so the
//! `wait_*` helpers repeat the request while they poll the record
//! ([`ClusterApi::wait_admitted`], [`ClusterApi::wait_retired`]): a request lost with a
//! coordinator that failed is made again.
//!
//! Adding a device: start it with `join = true` and every member among its peers, then
//! `add_device` with its id and addresses. Removing one: `remove_device`; its chunks move
//! and its managers migrate, then it leaves the record and stops serving.

use crate::Chan;
use crate::proto::{self, cluster_client::ClusterClient};
use crate::{Client, normalize};
use std::time::{Duration, Instant};

/// Membership call failures.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No device could be reached, or the call failed below the membership API.
    #[error(transparent)]
    Client(#[from] crate::Error),
    /// No coordinator is known to the device asked (an election is under way).
    #[error("no coordinator: {0}")]
    NoCoordinator(String),
    /// The id retired: it never becomes a member again.
    #[error("{0}")]
    Retired(String),
    /// The id is not a member.
    #[error("{0}")]
    NotMember(String),
    /// The removal would leave fewer active members than the replication factor.
    #[error("{0}")]
    TooFewDevices(String),
    /// The change did not show in the record in time.
    #[error("{0}")]
    Timeout(String),
    /// The server's answer does not follow the protocol.
    #[error("malformed answer from the server: {0}")]
    Malformed(&'static str),
}

/// Result of the membership calls.
pub type Result<T> = std::result::Result<T, ClusterError>;

/// A member's standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemberState {
    /// Serves: a candidate for chunks, managers and coordinator.
    Active,
    /// Being drained.
    Retiring,
}

impl std::fmt::Display for MemberState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemberState::Active => "active",
            MemberState::Retiring => "retiring",
        })
    }
}

/// One member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Device id.
    pub id: u64,
    /// Its standing.
    pub state: MemberState,
    /// Its peer address in the record (empty for devices configured at bootstrap).
    pub peer_addr: String,
    /// Its client address in the record (empty for devices configured at bootstrap).
    pub client_addr: String,
}

/// A membership record, as one device has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// The device that answered.
    pub device: u64,
    /// The record's change counter.
    pub version: u64,
    /// The coordinator that made the last change, and its term counter (0: bootstrap).
    pub changed_by: (u64, u64),
    /// Members, ascending by id.
    pub members: Vec<Member>,
    /// Retired devices, ascending.
    pub retired: Vec<u64>,
    /// The coordinator the answering device follows, and its term counter.
    pub coordinator: Option<(u64, u64)>,
}

impl Membership {
    /// The member `id`, if it is one.
    pub fn member(&self, id: u64) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// Whether `id` is an active member.
    pub fn is_active(&self, id: u64) -> bool {
        self.member(id)
            .is_some_and(|m| m.state == MemberState::Active)
    }

    /// Whether `id` retired.
    pub fn has_retired(&self, id: u64) -> bool {
        self.retired.contains(&id)
    }

    fn from_proto(m: proto::Membership) -> Result<Membership> {
        let members = (m.members.into_iter())
            .map(|x| {
                let state = match proto::MemberState::try_from(x.state) {
                    Ok(proto::MemberState::Active) => MemberState::Active,
                    Ok(proto::MemberState::Retiring) => MemberState::Retiring,
                    _ => return Err(ClusterError::Malformed("unknown member state")),
                };
                Ok(Member {
                    id: x.id,
                    state,
                    peer_addr: x.peer_addr,
                    client_addr: x.client_addr,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Membership {
            device: m.device,
            version: m.version,
            changed_by: (m.version_coordinator, m.version_term),
            members,
            retired: m.retired,
            coordinator: (m.coordinator != 0).then_some((m.coordinator, m.coordinator_term)),
        })
    }
}

/// The membership API of a [`Client`].
#[derive(Clone, Debug)]
pub struct ClusterApi {
    client: Client,
}

impl Client {
    /// The cluster membership API.
    pub fn cluster(&self) -> ClusterApi {
        ClusterApi {
            client: self.clone(),
        }
    }
}

fn unpack(r: proto::MembershipResponse) -> Result<Membership> {
    use proto::membership_error::Kind as K;
    use proto::membership_response::Result as R;
    match r.result {
        Some(R::Ok(m)) => Membership::from_proto(m),
        Some(R::Error(e)) => Err(match e.kind {
            Some(K::NoCoordinator(s)) => ClusterError::NoCoordinator(s),
            Some(K::Retired(s)) => ClusterError::Retired(s),
            Some(K::NotMember(s)) => ClusterError::NotMember(s),
            Some(K::TooFewDevices(s)) => ClusterError::TooFewDevices(s),
            None => ClusterError::Malformed("empty error"),
        }),
        None => Err(ClusterError::Malformed("empty result")),
    }
}

/// How often the `wait_*` helpers poll the record and repeat the request.
const POLL: Duration = Duration::from_millis(200);
const REPEAT: Duration = Duration::from_secs(2);

impl ClusterApi {
    fn channel(&self, endpoint: &str) -> Result<ClusterClient<Chan>> {
        let ep = normalize(endpoint.to_string());
        let ch = crate::lazy_channel(&ep, self.client.options())?;
        Ok(ClusterClient::new(ch))
    }

    /// `ask` of each endpoint in turn, but those in `skip`, until one answers with
    /// something other than a transport failure or `NoCoordinator`.
    async fn first<F, Fut>(&self, skip: &[String], ask: F) -> Result<Membership>
    where
        F: Fn(ClusterClient<Chan>) -> Fut,
        Fut: std::future::Future<
                Output = std::result::Result<proto::MembershipResponse, crate::Error>,
            >,
    {
        let mut last = ClusterError::Client(crate::Error::NoEndpoints);
        let limit = self.client.options().attempt_timeout;
        for ep in self.client.endpoints() {
            if skip.contains(&ep) {
                continue;
            }
            let c = self.channel(&ep)?;
            let r = match tokio::time::timeout(limit, ask(c)).await {
                Ok(Ok(r)) => unpack(r),
                Ok(Err(e)) => Err(e.into()),
                Err(_) => Err(crate::Error::DeadlinePassed.into()),
            };
            match r {
                Err(e @ (ClusterError::Client(_) | ClusterError::NoCoordinator(_))) => last = e,
                r => return r,
            }
        }
        Err(last)
    }

    /// The record of the first device that answers (the endpoints in turn).
    pub async fn members(&self) -> Result<Membership> {
        self.members_skipping(&[]).await
    }

    /// The record of the first device that answers, but those at `skip` (a device being
    /// removed knows last that it left).
    pub async fn members_skipping(&self, skip: &[String]) -> Result<Membership> {
        self.first(skip, |mut c| async move {
            (c.members(proto::MembersRequest {}).await)
                .map(|r| r.into_inner())
                .map_err(crate::Error::from_status)
        })
        .await
    }

    /// The record of the device at `endpoint`.
    pub async fn members_of(&self, endpoint: &str) -> Result<Membership> {
        let mut c = self.channel(endpoint)?;
        let limit = self.client.options().request_timeout;
        let r = crate::within(limit, "Members", c.members(proto::MembersRequest {})).await?;
        unpack(r)
    }

    /// Ask for device `id` to be admitted with its addresses (through the first device
    /// that answers); the record that device has.
    pub async fn add_device(
        &self,
        id: u64,
        peer_addr: &str,
        client_addr: &str,
    ) -> Result<Membership> {
        let req = proto::AddDeviceRequest {
            id,
            peer_addr: peer_addr.to_string(),
            client_addr: client_addr.to_string(),
        };
        self.first(&[], |mut c| {
            let req = req.clone();
            async move {
                (c.add_device(req).await)
                    .map(|r| r.into_inner())
                    .map_err(crate::Error::from_status)
            }
        })
        .await
    }

    /// Ask for device `id` to be drained and retired, through the first device that
    /// answers, but those at `skip`; the record that device has.
    pub async fn remove_device(&self, id: u64, skip: &[String]) -> Result<Membership> {
        self.first(skip, |mut c| async move {
            (c.remove_device(proto::RemoveDeviceRequest { id }).await)
                .map(|r| r.into_inner())
                .map_err(crate::Error::from_status)
        })
        .await
    }

    /// Add device `id` and wait until the record names it an active member, at most
    /// `limit`; the request is repeated while it does not.
    pub async fn wait_admitted(
        &self,
        id: u64,
        peer_addr: &str,
        client_addr: &str,
        limit: Duration,
    ) -> Result<Membership> {
        let start = Instant::now();
        let mut asked: Option<Instant> = None;
        let mut last = None;
        loop {
            if asked.is_none_or(|t| t.elapsed() >= REPEAT) {
                match self.add_device(id, peer_addr, client_addr).await {
                    Ok(_) => asked = Some(Instant::now()),
                    Err(e @ (ClusterError::Retired(_) | ClusterError::Malformed(_))) => {
                        return Err(e);
                    }
                    Err(e) => last = Some(e.to_string()),
                }
            }
            match self.members().await {
                Ok(m) if m.is_active(id) => return Ok(m),
                Ok(_) => {}
                Err(e) => last = Some(e.to_string()),
            }
            if start.elapsed() > limit {
                return Err(ClusterError::Timeout(format!(
                    "device {id} was not admitted within {limit:?}{}",
                    last.map(|e| format!(" (last error: {e})"))
                        .unwrap_or_default()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Remove device `id` and wait until the record lists it retired, at most `limit`,
    /// asking the devices but those at `skip`; the request is repeated while the record
    /// does not name it retiring. `progress` is called with each record seen.
    pub async fn wait_retired(
        &self,
        id: u64,
        skip: &[String],
        limit: Duration,
        mut progress: impl FnMut(&Membership),
    ) -> Result<Membership> {
        let start = Instant::now();
        let mut asked: Option<Instant> = None;
        let mut last = None;
        loop {
            match self.members_skipping(skip).await {
                Ok(m) if m.has_retired(id) => return Ok(m),
                Ok(m) => {
                    progress(&m);
                    let retiring = m
                        .member(id)
                        .is_some_and(|x| x.state == MemberState::Retiring);
                    if !retiring && asked.is_none_or(|t| t.elapsed() >= REPEAT) {
                        match self.remove_device(id, skip).await {
                            Ok(_) => asked = Some(Instant::now()),
                            Err(ClusterError::Retired(_)) => {}
                            Err(
                                e @ (ClusterError::NotMember(_)
                                | ClusterError::TooFewDevices(_)
                                | ClusterError::Malformed(_)),
                            ) => return Err(e),
                            Err(e) => last = Some(e.to_string()),
                        }
                    }
                }
                Err(e) => last = Some(e.to_string()),
            }
            if start.elapsed() > limit {
                return Err(ClusterError::Timeout(format!(
                    "device {id} did not retire within {limit:?}{}",
                    last.map(|e| format!(" (last error: {e})"))
                        .unwrap_or_default()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
