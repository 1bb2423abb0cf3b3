//! What goes into and comes out of a [`crate::Device`]: inputs and outputs here; client
//! requests and answers ([`request`]), outside-policy commands ([`policy`]), the persistent
//! state and the operations that change it ([`persist`]), observations ([`observation`]).

pub mod observation;
pub mod persist;
pub mod policy;
pub mod request;

pub use crate::config::CHECKPOINT_EVERY;
pub use crate::error::ClientError;
pub use observation::{EpochCause, Observation};
pub use persist::{
    ChunkPersist, DevicePersist, PersistOp, SHARE_TABLES_EVERY, SHARE_TABLES_OPS, TablesAfter,
};
pub use policy::PolicyCommand;
pub use request::{
    AttachSession, Attached, ObjectRequest, Request, Response, Under, WaitSpec, Writer,
};

use crate::ids::{ClientId, DeviceId};
use crate::msg::Msg;
use crate::time::Instant;
use serde::{Deserialize, Serialize};

/// One input to a device.
#[derive(Clone, Debug, PartialEq)]
// Values are moved, not copied, once each; boxing the large variant would add an
// allocation per message for no gain.
#[allow(clippy::large_enum_variant)]
pub enum Input {
    /// A message from another device (or from itself).
    Message {
        /// Sender.
        from: DeviceId,
        /// The message.
        msg: Msg,
    },
    /// Time has advanced; fire every timer due at `now`.
    Tick,
    /// A client request.
    Request {
        /// Client.
        client: ClientId,
        /// The client's request id (echoed in the reply).
        req_id: u64,
        /// The request.
        req: Request,
    },
    /// A command from an outside policy (an operator or the simulator's workload).
    Policy(PolicyCommand),
    /// A lookup request (seed 003): answered by this device, or multicast and answered
    /// when the lookup leader does.
    Lookup {
        /// Client.
        client: ClientId,
        /// The client's request id (echoed in the reply).
        req_id: u64,
        /// The request.
        req: crate::lookup::LookupRequest,
    },
    /// Start a consistent snapshot of the cluster from this device (seed 002 §14.1); the
    /// outputs say its id ([`Output::SnapshotStarted`]) and, later, its result.
    StartSnapshot,
}

/// One output of a device. Outputs are ordered: a `Persist` must be durable before any
/// later `Send` or `Reply` of the same batch leaves the device.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
// Values are moved, not copied, once each; boxing the large variant would add an
// allocation per message for no gain.
#[allow(clippy::large_enum_variant)]
pub enum Output {
    /// Send a message.
    Send {
        /// Destination.
        to: DeviceId,
        /// Message.
        msg: Msg,
    },
    /// Make a change to persistent state durable.
    Persist(PersistOp),
    /// Answer a client.
    Reply {
        /// Client.
        client: ClientId,
        /// Request id.
        req_id: u64,
        /// Result.
        result: Result<Response, ClientError>,
    },
    /// The earliest timer is now at this instant (call `handle(now, Tick)` then).
    SetTimer(Instant),
    /// Something checkers and metrics want to know about (no effect on the protocol).
    Observe(Observation),
    /// An event for a lookup subscription whose subscriber talks to this device.
    LookupEvent(crate::lookup::SubEvent),
    /// Object changes for a watch, in revision order.
    ObjectEvents {
        /// The watching client.
        client: ClientId,
        /// The client's watch id.
        watch: u64,
        /// The changes.
        changes: Vec<crate::objects::Change>,
        /// One per change when the watch asked for values (the new content, when the
        /// table holds it whole), else empty.
        values: Vec<Option<crate::objects::Bytes>>,
    },
    /// A watch ended (its manager stopped managing the store): resume elsewhere from
    /// the last revision seen.
    WatchEnded {
        /// The watching client.
        client: ClientId,
        /// The client's watch id.
        watch: u64,
        /// Why, and where to go.
        reason: ClientError,
    },
    /// A snapshot started here ([`Input::StartSnapshot`], or scheduled by the
    /// coordinator).
    SnapshotStarted {
        /// Its id.
        id: crate::snapshot::SnapshotId,
    },
    /// This device's recorded part of a snapshot: made durable by the driver before any
    /// later output of the batch is sent.
    SnapshotPart(Box<crate::snapshot::SnapshotPart>),
    /// A snapshot this device initiated ended.
    SnapshotEnded {
        /// Its id.
        id: crate::snapshot::SnapshotId,
        /// The devices whose parts make it up, or why it failed.
        result: Result<SnapshotSummary, String>,
    },
}

/// A completed snapshot, as its initiator knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSummary {
    /// Devices whose parts make up the snapshot.
    pub devices: Vec<DeviceId>,
    /// §14.2 termination detection: every device answered Done, so no message was in
    /// flight at the cut (the recorded channels are all empty).
    pub terminated: bool,
}
