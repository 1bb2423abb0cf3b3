//! Cluster membership at the server (DESIGN §6): the gRPC API (`service Cluster` in
//! `proto/cluster.proto`) and what the driver does when the membership record changes.
//!
//! The record is the core's ([`tenure_core::election::members`]): a versioned set of
//! members, changed only by the elected coordinator, persisted by every device. The API
//! passes an operator's `AddDevice` / `RemoveDevice` to the core as
//! `Input::Policy` ([`Call::Membership`]); the core forwards it to the coordinator, and the
//! call answers at once with the record this device has. A request is checked against
//! that record first, so what can never succeed (a retired id, removing below the
//! replication factor) gets a typed error instead of silence.
//!
//! Every adoption of a newer record ([`Observation::Members`]) reaches
//! [`apply_members`]: the members' peer addresses go to the transport (a member admitted
//! at runtime becomes a peer; a retired one is closed) and their client addresses to the
//! redirect hints ([`Endpoints`]), so a `NotManager` answer names a member admitted at
//! runtime as well as a configured one.
//!
//! A device that observes that it retired (`Observation::Retired`) stops: the driver lets
//! what it has in flight become durable and leave, then returns, and the process exits
//! with status 0 after logging why. A retired device started again exits at boot the
//! same way: its id never becomes a member again.
//!
//! [`Observation::Members`]: tenure_core::io::Observation::Members

use crate::driver::calls::Call;
use crate::transport::Transport;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tenure_client::proto::{self, cluster_server::Cluster};
use tenure_core::Device;
use tenure_core::election::Term;
use tenure_core::election::members::{MemberState, Members};
use tenure_core::ids::DeviceId;
use tenure_core::io::PolicyCommand;
use tokio::sync::{mpsc, oneshot};
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};
use tracing::info;

/// Client endpoints of the devices, for redirect hints: the configured peers', then the
/// membership record's. Shared by the client API and the driver.
#[derive(Clone, Debug, Default)]
pub struct Endpoints {
    inner: Arc<RwLock<HashMap<DeviceId, SocketAddr>>>,
}

impl From<HashMap<DeviceId, SocketAddr>> for Endpoints {
    fn from(m: HashMap<DeviceId, SocketAddr>) -> Endpoints {
        Endpoints {
            inner: Arc::new(RwLock::new(m)),
        }
    }
}

impl Endpoints {
    /// The client endpoint of `d`, if known.
    pub fn get(&self, d: DeviceId) -> Option<SocketAddr> {
        // Every change is a single insert or remove: a panic elsewhere cannot leave the
        // map half-changed.
        let m = self.inner.read().unwrap_or_else(|e| e.into_inner());
        m.get(&d).copied()
    }

    fn set(&self, d: DeviceId, addr: SocketAddr) {
        let mut m = self.inner.write().unwrap_or_else(|e| e.into_inner());
        m.insert(d, addr);
    }

    fn remove(&self, d: DeviceId) {
        let mut m = self.inner.write().unwrap_or_else(|e| e.into_inner());
        m.remove(&d);
    }
}

/// Bring the transport's peers and the redirect hints in line with a membership record:
/// every member with a peer address is reached there, every member with a client address
/// is hinted there, and retired devices are dropped from both. Members whose addresses
/// the record leaves empty (the devices configured at bootstrap) keep their configured
/// ones.
pub fn apply_members(
    me: DeviceId,
    members: &Members,
    transport: &Transport,
    endpoints: &Endpoints,
) {
    for (d, info) in &members.devices {
        if let Ok(a) = info.peer_addr.parse::<SocketAddr>()
            && *d != me
        {
            transport.set_peer(*d, a);
        }
        if let Ok(a) = info.client_addr.parse::<SocketAddr>() {
            endpoints.set(*d, a);
        }
    }
    for d in &members.retired {
        transport.remove_peer(*d);
        endpoints.remove(*d);
    }
}

/// A one-line account of a record, for logs.
pub fn describe(members: &Members) -> String {
    let list: Vec<String> = (members.devices.iter())
        .map(|(d, i)| match i.state {
            MemberState::Active => d.to_string(),
            MemberState::Retiring => format!("{d} (retiring)"),
        })
        .collect();
    let retired: Vec<String> = members.retired.iter().map(|d| d.to_string()).collect();
    format!(
        "version {}: members [{}], retired [{}]",
        members.version.n,
        list.join(", "),
        retired.join(", ")
    )
}

/// What the driver answers a [`Call::Membership`] with.
#[derive(Clone, Debug)]
pub struct MembersView {
    /// This device.
    pub device: DeviceId,
    /// Its membership record.
    pub members: Members,
    /// The coordinator it follows.
    pub coordinator: Option<Term>,
    /// Chunks per store (a removal may not go below it).
    pub replication: usize,
}

impl MembersView {
    /// The view of `dev`.
    pub fn of(dev: &Device) -> MembersView {
        MembersView {
            device: dev.id(),
            members: dev.members().clone(),
            coordinator: dev.coordinator(),
            replication: dev.config().cluster.replication,
        }
    }
}

/// The service.
#[derive(Clone, Debug)]
pub struct ClusterApi {
    calls: mpsc::Sender<Call>,
    timeout: Duration,
    auth: crate::auth::Auth,
}

impl ClusterApi {
    /// A service that sends calls to a driver, each answered within `timeout`.
    pub fn new(calls: mpsc::Sender<Call>, timeout: Duration) -> ClusterApi {
        ClusterApi {
            calls,
            timeout,
            auth: crate::auth::Auth::disabled(),
        }
    }

    /// Authorize calls with `auth`: adding and removing devices needs `admin` on `/`,
    /// reading the record any valid token.
    pub fn with_auth(mut self, auth: crate::auth::Auth) -> ClusterApi {
        self.auth = auth;
        self
    }

    /// Hand `cmd` (if any) to the core, and take the record.
    async fn call(&self, cmd: Option<PolicyCommand>) -> Result<MembersView, Status> {
        let gone = || Status::unavailable("device is shutting down");
        let (tx, rx) = oneshot::channel();
        (self.calls)
            .send(Call::Membership { cmd, reply: tx })
            .await
            .map_err(|_| gone())?;
        let limit = self.timeout;
        tokio::time::timeout(limit, rx)
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!("no answer from the device within {limit:?}"))
            })?
            .map_err(|_| gone())
    }

    /// Check a request against the record, pass it on if it may succeed, answer.
    async fn request(
        &self,
        cmd: PolicyCommand,
    ) -> Result<GrpcResponse<proto::MembershipResponse>, Status> {
        let view = self.call(None).await?;
        if let Some(e) = refusal(&view, &cmd) {
            return Ok(answer(Err(e)));
        }
        info!(?cmd, "membership request passed on to the coordinator");
        let view = self.call(Some(cmd)).await?;
        Ok(answer(Ok(view)))
    }
}

/// Why `cmd` cannot succeed given `view`, if it cannot.
fn refusal(view: &MembersView, cmd: &PolicyCommand) -> Option<proto::membership_error::Kind> {
    use proto::membership_error::Kind as K;
    let m = &view.members;
    let (PolicyCommand::AddDevice { device, .. } | PolicyCommand::RemoveDevice { device }) = cmd
    else {
        return None;
    };
    if m.retired.contains(device) {
        return Some(K::Retired(format!(
            "device {device} retired from the cluster; a retired id never returns (start the \
             device under a new id)"
        )));
    }
    match cmd {
        PolicyCommand::AddDevice { .. }
            if m.devices.get(device).map(|i| i.state) == Some(MemberState::Retiring) =>
        {
            return Some(K::Retired(format!(
                "device {device} is retiring; it cannot be added back"
            )));
        }
        PolicyCommand::RemoveDevice { .. } => match m.devices.get(device).map(|i| i.state) {
            None => {
                return Some(K::NotMember(format!(
                    "device {device} is not a member (members: {:?})",
                    m.ids().iter().map(|d| d.0).collect::<Vec<_>>()
                )));
            }
            Some(MemberState::Active) if m.active().len() <= view.replication.max(1) => {
                return Some(K::TooFewDevices(format!(
                    "removing device {device} would leave {} active members, fewer than the \
                     {} chunks each store keeps; add a device first",
                    m.active().len() - 1,
                    view.replication
                )));
            }
            Some(_) => {}
        },
        _ => {}
    }
    if view.coordinator.is_none() {
        return Some(K::NoCoordinator(format!(
            "device {} follows no coordinator yet (an election is under way, or it waits to be \
             admitted); retry, or ask another device",
            view.device
        )));
    }
    None
}

fn answer(
    r: Result<MembersView, proto::membership_error::Kind>,
) -> GrpcResponse<proto::MembershipResponse> {
    use proto::membership_response::Result as R;
    let result = match r {
        Ok(v) => R::Ok(to_proto(&v)),
        Err(kind) => R::Error(proto::MembershipError { kind: Some(kind) }),
    };
    GrpcResponse::new(proto::MembershipResponse {
        result: Some(result),
    })
}

/// The wire form of a record.
pub fn to_proto(v: &MembersView) -> proto::Membership {
    let m = &v.members;
    proto::Membership {
        device: v.device.0,
        version: m.version.n,
        version_term: m.version.term.n,
        version_coordinator: m.version.term.leader.0,
        members: (m.devices.iter())
            .map(|(d, i)| proto::Member {
                id: d.0,
                state: match i.state {
                    MemberState::Active => proto::MemberState::Active,
                    MemberState::Retiring => proto::MemberState::Retiring,
                } as i32,
                peer_addr: i.peer_addr.clone(),
                client_addr: i.client_addr.clone(),
            })
            .collect(),
        retired: m.retired.iter().map(|d| d.0).collect(),
        coordinator: v.coordinator.map_or(0, |t| t.leader.0),
        coordinator_term: v.coordinator.map_or(0, |t| t.n),
    }
}

/// A device id from a request: 0 is no device.
fn device_id(id: u64) -> Result<DeviceId, Status> {
    if id == 0 {
        return Err(Status::invalid_argument("device id 0 is not a device"));
    }
    Ok(DeviceId(id))
}

/// An address from a request: an IP address and port.
fn address(what: &str, s: &str) -> Result<SocketAddr, Status> {
    s.parse().map_err(|_| {
        Status::invalid_argument(format!(
            "{what} {s:?} is not an IP address and port (host:port)"
        ))
    })
}

#[tonic::async_trait]
impl Cluster for ClusterApi {
    async fn add_device(
        &self,
        request: GrpcRequest<proto::AddDeviceRequest>,
    ) -> Result<GrpcResponse<proto::MembershipResponse>, Status> {
        (self.auth).authorize(&request, crate::auth::Perm::Admin, "/")?;
        let r = request.into_inner();
        let device = device_id(r.id)?;
        let peer = address("peer_addr", &r.peer_addr)?;
        let client = address("client_addr", &r.client_addr)?;
        self.request(PolicyCommand::AddDevice {
            device,
            peer_addr: peer.to_string(),
            client_addr: client.to_string(),
        })
        .await
    }

    async fn remove_device(
        &self,
        request: GrpcRequest<proto::RemoveDeviceRequest>,
    ) -> Result<GrpcResponse<proto::MembershipResponse>, Status> {
        (self.auth).authorize(&request, crate::auth::Perm::Admin, "/")?;
        let device = device_id(request.into_inner().id)?;
        self.request(PolicyCommand::RemoveDevice { device }).await
    }

    async fn members(
        &self,
        request: GrpcRequest<proto::MembersRequest>,
    ) -> Result<GrpcResponse<proto::MembershipResponse>, Status> {
        self.auth.caller(&request)?;
        Ok(answer(Ok(self.call(None).await?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::membership_error::Kind as K;
    use tenure_core::election::members::Members;

    fn view(ids: &[u64], coordinator: bool) -> MembersView {
        let ids: Vec<DeviceId> = ids.iter().map(|d| DeviceId(*d)).collect();
        MembersView {
            device: DeviceId(1),
            members: Members::bootstrap(&ids),
            coordinator: coordinator.then_some(Term {
                n: 1,
                leader: DeviceId(3),
            }),
            replication: 3,
        }
    }

    fn add(d: u64) -> PolicyCommand {
        PolicyCommand::AddDevice {
            device: DeviceId(d),
            peer_addr: "127.0.0.1:1".into(),
            client_addr: "127.0.0.1:2".into(),
        }
    }

    fn remove(d: u64) -> PolicyCommand {
        PolicyCommand::RemoveDevice {
            device: DeviceId(d),
        }
    }

    #[test]
    fn cluster_requests_that_cannot_succeed_are_refused_with_a_reason() {
        let v = view(&[1, 2, 3, 4], true);
        assert_eq!(refusal(&v, &add(5)), None);
        assert_eq!(refusal(&v, &remove(2)), None);
        assert!(matches!(refusal(&v, &remove(9)), Some(K::NotMember(_))));
        let v3 = view(&[1, 2, 3], true);
        assert!(matches!(
            refusal(&v3, &remove(2)),
            Some(K::TooFewDevices(_))
        ));
        let mut gone = view(&[1, 2, 3, 4], true);
        gone.members.retire(Term::default(), DeviceId(4));
        assert!(matches!(refusal(&gone, &add(4)), Some(K::Retired(_))));
        assert!(matches!(refusal(&gone, &remove(4)), Some(K::Retired(_))));
        let lost = view(&[1, 2, 3, 4], false);
        assert!(matches!(refusal(&lost, &add(5)), Some(K::NoCoordinator(_))));
    }

    #[test]
    fn cluster_record_maps_to_the_wire_with_states_and_addresses() {
        let mut v = view(&[1, 2, 3], true);
        let t = Term {
            n: 2,
            leader: DeviceId(3),
        };
        assert!(
            v.members
                .admit(t, DeviceId(4), "127.0.0.1:7104", "127.0.0.1:7204")
        );
        assert!(v.members.start_retiring(t, DeviceId(2), 3));
        let p = to_proto(&v);
        assert_eq!(
            (p.version, p.version_term, p.version_coordinator),
            (2, 2, 3)
        );
        assert_eq!((p.coordinator, p.coordinator_term), (3, 1));
        let states: Vec<(u64, i32)> = p.members.iter().map(|m| (m.id, m.state)).collect();
        let (a, r) = (
            proto::MemberState::Active as i32,
            proto::MemberState::Retiring as i32,
        );
        assert_eq!(states, vec![(1, a), (2, r), (3, a), (4, a)]);
        assert_eq!(p.members[3].client_addr, "127.0.0.1:7204");
    }
}
