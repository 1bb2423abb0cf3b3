//! What the client APIs send the driver ([`Call`]) and get back ([`Answer`],
//! [`DeviceEvent`]), and how the driver takes a call into the core.

use super::observe::{lookup_kind, request_kind};
use super::status::StatusView;
use super::{Driver, Pending};
use tenure_core::gate::Domain;
use tenure_core::ids::{ClientId, StoreId};
use tenure_core::io::{ClientError, Input, Output, Request, Response};
use tokio::sync::oneshot;

/// A client's answer.
pub type Answer = Result<Response, ClientError>;

/// A call from the client API into the driver.
#[derive(Debug)]
pub enum Call {
    /// A protocol request; the answer comes when the core replies.
    Request {
        /// The request.
        req: Request,
        /// Where the answer goes.
        reply: oneshot::Sender<Answer>,
    },
    /// A lookup request (seed 003); the answer comes when the core replies (at once, or
    /// when the lookup leader answers, or `NoLeader` after the round-trip delay).
    Lookup {
        /// The request.
        req: tenure_core::lookup::LookupRequest,
        /// Where the answer goes.
        reply: oneshot::Sender<Answer>,
    },
    /// A protocol request made as an existing client: the object watches of a session
    /// stream are made and removed as the stream's watch client ([`WatchRoutes`]), so
    /// the core's `(client, watch)` names the same watch in both.
    RequestAs {
        /// The client.
        client: ClientId,
        /// The request.
        req: Request,
        /// Where the answer goes.
        reply: oneshot::Sender<Answer>,
    },
    /// A snapshot of the device's state.
    Status {
        /// Whether to include the tables of the stores managed here and the device's
        /// other state ([`StatusDetail`], for the status page); the gRPC `Status` takes
        /// the counts only.
        detail: bool,
        /// Where it goes.
        reply: oneshot::Sender<StatusView>,
    },
    /// The membership record (DESIGN §6), after `cmd` is handed to the core as
    /// `Input::Policy`, if there is one ([`crate::cluster_api`]).
    Membership {
        /// An operator's `AddDevice` or `RemoveDevice`.
        cmd: Option<tenure_core::io::PolicyCommand>,
        /// Where the record goes.
        reply: oneshot::Sender<crate::cluster_api::MembersView>,
    },
    /// The store's manager as this device knows it (`Device::manager_hint`).
    Resolve {
        /// The store.
        store: StoreId,
        /// Where the device goes (none: not known here).
        reply: oneshot::Sender<Option<tenure_core::ids::DeviceId>>,
    },
    /// Start a consistent snapshot of the cluster here (`Input::StartSnapshot`); the
    /// reply is its id, at once ([`crate::snapshots::Book`] follows it).
    StartSnapshot {
        /// Where the id goes.
        reply: oneshot::Sender<tenure_core::snapshot::SnapshotId>,
    },
}

/// What the driver tells the client API's session streams (a broadcast: every stream
/// sees every event and keeps those of its store and session).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceEvent {
    /// This device stopped managing `store`: its streams end with a redirect.
    StoppedManaging {
        /// The store.
        store: StoreId,
    },
    /// A session's end is durable and applied at its manager (this device).
    SessionEnded {
        /// The store.
        store: StoreId,
        /// The session.
        session: tenure_core::ids::SessionId,
        /// Expired (true) or closed.
        expired: bool,
    },
}

impl Driver {
    pub(super) fn call(
        &mut self,
        call: Call,
        out: &mut Vec<Output>,
        statuses: &mut Vec<(oneshot::Sender<StatusView>, bool)>,
    ) {
        match call {
            Call::Request { req, reply } => {
                let id = self.next_client;
                self.call(
                    Call::RequestAs {
                        client: ClientId(id),
                        req,
                        reply,
                    },
                    out,
                    statuses,
                );
            }
            Call::RequestAs { client, req, reply } => {
                let id = self.next_client;
                self.next_client += 1;
                self.pending.insert(
                    id,
                    Pending {
                        domain: Domain::Store(req.store()),
                        metrics: self.metrics.request(request_kind(&req)),
                        reply,
                        started: std::time::Instant::now(),
                    },
                );
                self.input(
                    Input::Request {
                        client,
                        req_id: id,
                        req,
                    },
                    out,
                );
            }
            Call::Lookup { req, reply } => {
                let id = self.next_client;
                self.next_client += 1;
                self.pending.insert(
                    id,
                    Pending {
                        domain: Domain::Lookup,
                        metrics: self.metrics.request(lookup_kind(&req)),
                        reply,
                        started: std::time::Instant::now(),
                    },
                );
                self.input(
                    Input::Lookup {
                        client: ClientId(id),
                        req_id: id,
                        req,
                    },
                    out,
                );
            }
            Call::Status { detail, reply } => statuses.push((reply, detail)),
            Call::Membership { cmd, reply } => {
                if let Some(cmd) = cmd {
                    self.input(Input::Policy(cmd), out);
                }
                // Answered after the batch's outputs, once they are durable: an operator
                // is never shown a record its coordinator could still lose in a crash.
                self.member_replies.push(reply);
            }
            Call::Resolve { store, reply } => {
                let _ = reply.send(self.device.manager_hint(store));
            }
            Call::StartSnapshot { reply } => {
                let from = out.len();
                self.input(Input::StartSnapshot, out);
                if let Some(id) = out[from..].iter().find_map(|o| match o {
                    Output::SnapshotStarted { id } => Some(*id),
                    _ => None,
                }) {
                    let _ = reply.send(id);
                }
            }
        }
    }
}
