//! The Aladdin lookup service (seed 003, Arora, Wang & Russell; DESIGN §7).
//!
//! Every device is a lookup node: passive, active (a hot spare that applies every update)
//! or leader (the active node that also answers queries). Consistency is the seed's
//! *query-time, server-side* kind: providers' updates are multicast to every node and
//! applied by each active node independently; only the leader answers queries; a node
//! knows whether it is the leader, not who is ("weak leader": the oldest active node by
//! `<activeStartTime, id>` in its soft-state store).
//!
//! The machine is split by the seed's parts:
//! - [`sss`]: the soft-state store — heartbeats every `SS_HEARTBEAT_INTERVAL`, "node down"
//!   after three missed intervals, `LS_start_time` entries, fake ages timing out;
//! - [`node`]: the node states, `Join()` (Can-I-Join / Ack / Nack, retries, warm-up, the
//!   self-stabilising timeout), the leader thread and the maintainer;
//! - [`entries`]: the lookup data — volatile and persistent entries, subscriptions and
//!   alerts, and the main thread's queries and updates;
//! - [`policy`]: meta-updates, the seed's adaptivity cases a–d.
//!
//! A client request reaches some device (its *origin*). The origin multicasts it to the
//! up nodes; active nodes apply updates, the leader answers queries and acknowledges
//! persistent updates back to the origin, which replies to the client. Volatile updates
//! are not acknowledged: the origin answers at once. Pushed events (subscription changes,
//! alerts) travel from the leader to the subscription's origin, which hands them to the
//! driver as [`crate::Output::LookupEvent`].

pub mod entries;
mod main_thread;
pub mod node;
pub mod policy;
pub mod sss;

#[cfg(test)]
mod adapt_tests;
#[cfg(test)]
mod regressions;
#[cfg(test)]
mod tests;

use crate::ids::{ClientId, DeviceId};
use crate::lockctl::LockName;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub use node::{Node, NodeState};

/// The seed's named intervals and Tenure's limits (`[lookup]` in the TOML config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LookupSettings {
    /// Whether the device runs a lookup node at all (the store protocols' model checker
    /// turns it off to keep its state space to the stores).
    pub enabled: bool,
    /// `SS_HEARTBEAT_INTERVAL`: how often every node refreshes its soft state at the
    /// others. A node is down after three intervals without a heartbeat.
    #[serde(with = "crate::duration::millis")]
    pub heartbeat_interval: Duration,
    /// `ROUNDTRIP_COMMUNICATION_DELAY`: how long a joining node waits for Ack/Nack, and an
    /// origin for the leader's answer.
    #[serde(with = "crate::duration::millis")]
    pub roundtrip_delay: Duration,
    /// `MAX_VOLATILE_REFRESH_INTERVAL`: the longest refresh interval of a volatile entry,
    /// and the warm-up a joining node sleeps to build up volatile state.
    #[serde(with = "crate::duration::millis")]
    pub max_volatile_refresh_interval: Duration,
    /// `Max_Persistent_Refresh_Interval`: the longest refresh interval of any entry.
    #[serde(with = "crate::duration::millis")]
    pub max_persistent_refresh_interval: Duration,
    /// Θ: a provider retries an unacknowledged persistent update within this long (seed
    /// 003 relaxes "providers retry immediately" to "within Θ"). It sizes a persistent
    /// entry's lifetime (see [`LookupSettings::lifetime`]).
    #[serde(with = "crate::duration::millis")]
    pub max_retry_interval: Duration,
    /// The shortest refresh interval accepted.
    #[serde(with = "crate::duration::millis")]
    pub min_refresh_interval: Duration,
    /// `LONG_TIMEOUT`: the maintainer runs at least this often.
    #[serde(with = "crate::duration::millis")]
    pub long_timeout: Duration,
    /// `t`: the service keeps at most `t + 1` active (hot) nodes.
    pub hot_spares: usize,
    /// The UPS-designated node: always admitted, never steps down. `None`: no node is.
    pub ups: Option<DeviceId>,
    /// Largest value accepted, in bytes.
    pub max_value_bytes: usize,
    /// Adaptivity (meta-updates): the policy's thresholds.
    pub adapt: policy::AdaptSettings,
}

impl Default for LookupSettings {
    fn default() -> Self {
        LookupSettings {
            enabled: true,
            heartbeat_interval: Duration::from_millis(300),
            roundtrip_delay: Duration::from_millis(100),
            max_volatile_refresh_interval: Duration::from_secs(2),
            max_persistent_refresh_interval: Duration::from_secs(3600),
            max_retry_interval: Duration::from_secs(1),
            min_refresh_interval: Duration::from_millis(100),
            long_timeout: Duration::from_secs(2),
            hot_spares: 2,
            ups: None,
            max_value_bytes: 64 * 1024,
            adapt: policy::AdaptSettings::default(),
        }
    }
}

impl LookupSettings {
    /// How long after its last refresh an entry lives: two intervals (one lost refresh is
    /// masked, as three heartbeat intervals mask one lost heartbeat) plus a round trip.
    pub fn entry_lifetime(&self, interval: Duration) -> Duration {
        interval * 2 + self.roundtrip_delay
    }

    /// How long after its last refresh an entry (or tombstone) of this durability lives.
    /// Volatile: [`Self::entry_lifetime`]. Persistent: the interval, plus what getting a
    /// refresh acknowledged may take — a failover (3 heartbeat intervals), a retry (Θ)
    /// and two round trips (the failed attempt's and the retry's). Refreshes are retried
    /// until acknowledged, so no lost one needs masking, and a provider's death shows
    /// within seed 003's bound for low-frequency staleness, `MPRI + 3 HB + Θ + RTT + δ`
    /// (two intervals overshot it by up to an interval).
    pub fn lifetime(&self, interval: Duration, durability: Durability) -> Duration {
        match durability {
            Durability::Volatile => self.entry_lifetime(interval),
            Durability::Persistent => {
                interval + self.down_after() + self.max_retry_interval + self.roundtrip_delay * 2
            }
        }
    }

    /// "Node down": three heartbeat intervals without a heartbeat.
    pub fn down_after(&self) -> Duration {
        self.heartbeat_interval * 3
    }
}

/// An entry's version: the provider's stamp (microseconds of its clock, strictly
/// increasing per provider) and the provider's id. Updates are idempotent and
/// commutative: a node keeps the entry with the highest version, whatever order the
/// updates arrive in. Between providers the later stamp wins.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct EntryVersion {
    /// The provider's stamp.
    pub stamp: u64,
    /// The provider.
    pub provider: u64,
}

/// How a provider wants an entry kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Durability {
    /// High-frequency: refreshed optimistically, kept in memory, not acknowledged.
    Volatile,
    /// Low-frequency, critical: acknowledged by the leader, kept in stable storage on
    /// every active node, retried by the provider until acknowledged.
    Persistent,
}

/// One entry as nodes keep it (a tombstone when `value` is `None`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Key (a path).
    pub key: String,
    /// Value; `None` for a revoked entry kept as a tombstone until `deadline`.
    pub value: Option<Vec<u8>>,
    /// Version of the update that set it.
    pub version: EntryVersion,
    /// Refresh interval the provider promised.
    pub interval: Duration,
    /// Volatile or persistent.
    pub durability: Durability,
    /// The range of intervals the provider accepts in a meta-update (`min == max`: fixed).
    pub adapt: IntervalRange,
    /// Local time the entry (or tombstone) goes away unless refreshed.
    pub deadline: Instant,
    /// Local time of the last refresh.
    pub refreshed: Instant,
    /// Local time the value last changed (for the age policy and staleness metrics).
    pub changed: Instant,
    /// Refreshes since the value last changed (the age policy's measure).
    #[serde(default)]
    pub stable: u32,
}

/// The intervals a provider accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntervalRange {
    /// Shortest.
    pub min: Duration,
    /// Longest.
    pub max: Duration,
}

impl IntervalRange {
    /// Exactly `d`.
    pub fn fixed(d: Duration) -> IntervalRange {
        IntervalRange { min: d, max: d }
    }
}

/// A meta-update: the interval (and acknowledgement mode) the service asks a provider to
/// use for an entry from now on (seed 003, adaptivity).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Refresh interval to use.
    pub interval: Duration,
    /// Whether the entry is now acknowledged (and kept persistently).
    pub durability: Durability,
    /// Why (the seed's case).
    pub reason: policy::AdaptReason,
}

/// What an entry looks like to clients.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryView {
    /// Key.
    pub key: String,
    /// Value.
    pub value: Vec<u8>,
    /// Version.
    pub version: EntryVersion,
    /// Refresh interval.
    pub interval: Duration,
    /// Volatile or persistent.
    pub durability: Durability,
    /// Time since the last refresh at the answering leader.
    pub age: Duration,
}

/// The leader that answered or pushed something: its `<activeStartTime, id>`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct LeaderId {
    /// `activeStartTime` (the leader's clock).
    pub start: Instant,
    /// Device.
    pub device: DeviceId,
}

/// A subscription's id, chosen by the subscriber (random); it names the subscription at
/// every node and survives the subscriber's reconnection to another device.
pub type SubId = u64;

/// What a subscription watches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Watch {
    /// Every entry whose key is the prefix or under it (`/` watches everything).
    Prefix(String),
    /// Alert when `key` is not refreshed within `within` of its last refresh (or of the
    /// registration, when it is absent).
    Alert {
        /// The key.
        key: String,
        /// The deadline, after each refresh.
        within: Duration,
    },
}

/// Where a subscriber has got to: the leader whose events it last applied and the
/// sequence number of the last one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubPosition {
    /// Leader.
    pub leader: LeaderId,
    /// Last event applied.
    pub seq: u64,
}

/// Requests to the lookup service (DESIGN §8: publish/refresh/revoke, get, list,
/// subscribe, alert).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LookupRequest {
    /// Create or refresh an entry.
    Publish {
        /// Key.
        key: String,
        /// Value.
        value: Vec<u8>,
        /// Version (the provider's stamp).
        version: EntryVersion,
        /// Refresh interval the provider promises.
        interval: Duration,
        /// Volatile or persistent.
        durability: Durability,
        /// Intervals the provider accepts in a meta-update.
        adapt: IntervalRange,
    },
    /// Remove an entry (persistent revokes are acknowledged).
    Revoke {
        /// Key.
        key: String,
        /// Version (later than the entry's).
        version: EntryVersion,
        /// Whether the revoke must be acknowledged.
        durability: Durability,
    },
    /// One entry.
    Get {
        /// Key.
        key: String,
    },
    /// Entries under a prefix.
    List {
        /// Prefix (`/` for all).
        prefix: String,
    },
    /// Register or refresh a subscription (soft state: it lapses unless refreshed within
    /// two `interval`s).
    Subscribe {
        /// Subscription id.
        sub: SubId,
        /// What it watches.
        watch: Watch,
        /// Refresh interval.
        interval: Duration,
        /// Where the subscriber has got to (`None`: it needs a full sync).
        position: Option<SubPosition>,
    },
    /// Drop a subscription.
    Unsubscribe {
        /// Subscription id.
        sub: SubId,
    },
    /// The node's own state (answered by the device asked, never forwarded).
    Status,
}

impl LookupRequest {
    /// Whether the request is a query the leader answers.
    pub fn is_query(&self) -> bool {
        matches!(self, LookupRequest::Get { .. } | LookupRequest::List { .. })
    }
}

/// Successful lookup replies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LookupResponse {
    /// A publish was sent (volatile: not acknowledged) or acknowledged by the leader
    /// (persistent). Carries a meta-update when the service wants another interval.
    Published {
        /// Whether the leader acknowledged it.
        acked: bool,
        /// The interval the service asks for, if it differs from the provider's.
        meta: Option<Meta>,
    },
    /// A revoke was sent or acknowledged.
    Revoked {
        /// Whether the leader acknowledged it.
        acked: bool,
    },
    /// The leader's answer to `Get`.
    Entry {
        /// The entry, if present.
        entry: Option<EntryView>,
        /// The leader that answered.
        leader: LeaderId,
    },
    /// The leader's answer to `List`.
    Entries {
        /// Entries in key order.
        entries: Vec<EntryView>,
        /// The leader that answered.
        leader: LeaderId,
    },
    /// A subscription was registered or refreshed (events follow as
    /// [`crate::Output::LookupEvent`]).
    Subscribed,
    /// A subscription was dropped.
    Unsubscribed,
    /// This node's state.
    Status(NodeView),
}

/// Typed lookup errors. A rejected request changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum LookupError {
    /// The key or prefix is not a valid path.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The value is larger than the configured limit.
    #[error("value is {len} bytes, the limit is {max}")]
    TooLarge {
        /// Size of the value.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The refresh interval is out of range for the entry's durability.
    #[error("refresh interval {got:?} is out of range ({min:?}..={max:?})")]
    BadInterval {
        /// Asked for.
        got: Duration,
        /// Shortest accepted.
        min: Duration,
        /// Longest accepted.
        max: Duration,
    },
    /// No leader answered within the round-trip delay (a lookup outage: retry).
    #[error("no lookup leader answered (outage; retry)")]
    NoLeader,
    /// A version not newer than the one the entry has (a replay or a stale retry).
    #[error("stale version: the entry already has a newer one")]
    StaleVersion,
    /// Unsubscribe of a subscription no node knows.
    #[error("unknown subscription {0}")]
    UnknownSubscription(SubId),
}

/// A change pushed to a subscriber.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatchEvent {
    /// The leader's whole state under the prefix: the subscriber replaces its view (and
    /// reports what disappeared). Sent when a leader takes a subscription over, when a
    /// subscriber is behind, and on registration.
    Sync {
        /// Entries.
        entries: Vec<EntryView>,
    },
    /// One entry changed.
    Put {
        /// The entry.
        entry: EntryView,
    },
    /// One entry went away.
    Removed {
        /// Key.
        key: String,
        /// Revoked by its provider, or expired unrefreshed.
        cause: RemoveCause,
    },
    /// An alert's key was not refreshed in time.
    Alert {
        /// Key.
        key: String,
        /// Time since its last refresh (or since registration, if absent).
        silent_for: Duration,
    },
}

/// Why an entry left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoveCause {
    /// Its provider revoked it.
    Revoked,
    /// It was not refreshed within its lifetime.
    Expired,
}

/// A pushed event with its place in the leader's sequence for the subscription.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubEvent {
    /// Subscription.
    pub sub: SubId,
    /// The leader that sent it.
    pub leader: LeaderId,
    /// Sequence number (1, 2, … per leader and subscription; a `Sync` takes the next
    /// number too, so a missed event of any kind shows as a gap).
    pub seq: u64,
    /// The change.
    pub event: WatchEvent,
}

/// Messages between lookup nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LookupMsg {
    /// `SSS_PutValue`/`SSS_Update("LS_start_time")`: the sender's soft state, every
    /// `SS_HEARTBEAT_INTERVAL`.
    Heartbeat {
        /// `activeStartTime` when active (`None`: INFINITE, passive).
        start: Option<Instant>,
        /// Whether it believes it is the leader (status only; no node decides by it).
        leader: bool,
    },
    /// "Can I join".
    CanIJoin {
        /// Which attempt (answers to older ones are ignored).
        attempt: u64,
        /// The sender is the UPS-designated node.
        ups: bool,
    },
    /// "Ack": the leader admits the node and streams its persistent store
    /// (`ack(UPS_token)`).
    Ack {
        /// The attempt answered.
        attempt: u64,
        /// The leader's persistent entries (tombstones included).
        persistent: Vec<Entry>,
    },
    /// "Nack": `t + 1` active nodes already run.
    Nack {
        /// The attempt answered.
        attempt: u64,
    },
    /// A client request multicast by its origin device.
    Forward {
        /// The device the client asked.
        origin: DeviceId,
        /// The client at the origin.
        client: ClientId,
        /// The client's request id.
        req_id: u64,
        /// The request.
        req: LookupRequest,
    },
    /// The leader's answer to a forwarded query or acknowledged update.
    Answer {
        /// Client at the origin.
        client: ClientId,
        /// Request id.
        req_id: u64,
        /// The result.
        result: Result<LookupResponse, LookupError>,
    },
    /// Persistent entries the receiver may lack: on a join Ack, and in answer to a
    /// `MergeRequest`, which it acknowledges (sent even when empty).
    Merge {
        /// Entries (tombstones included).
        persistent: Vec<Entry>,
    },
    /// A node's persistent store, merged by the receiver, which answers with a `Merge` of
    /// what the sender lacks (anti-entropy of the persistent store). A node that became
    /// active without a leader (the self-stabilising timeout: the whole service was
    /// down) sends it to every node, so that its store is whole before its warm-up ends
    /// and it may lead; every node sends it to each new leader in its view, again with
    /// its heartbeats until that leader answers.
    MergeRequest {
        /// Entries (tombstones included).
        persistent: Vec<Entry>,
    },
    /// An event for a subscription whose origin is the receiver.
    Event(SubEvent),
    /// A meta-update for an entry published through the receiver.
    Meta {
        /// Key.
        key: String,
        /// The interval the service asks for.
        meta: Meta,
    },
}

/// A node's state as status pages and checkers see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    /// The device.
    pub device: DeviceId,
    /// Passive, joining, warming up, active or leader.
    pub state: NodeState,
    /// `activeStartTime` (`None`: INFINITE).
    pub start: Option<Instant>,
    /// Devices its soft-state store shows up, with their `LS_start_time`.
    pub up: Vec<(DeviceId, Option<Instant>)>,
    /// The oldest active node in its soft-state store (its view of the leader).
    pub leader: Option<DeviceId>,
    /// Live entries it keeps.
    pub entries: usize,
    /// Subscriptions it keeps.
    pub subscriptions: usize,
}

/// Validate a key (a path like a lock name: `/service/api/1`).
pub fn check_key(key: &str) -> Result<(), LookupError> {
    LockName::parse(key)
        .map(|_| ())
        .map_err(|e| LookupError::InvalidKey(e.to_string().replacen("lock name", "key", 1)))
}

/// Validate a prefix (`/` or a path).
pub fn check_prefix(prefix: &str) -> Result<(), LookupError> {
    LockName::parse_prefix(prefix)
        .map(|_| ())
        .map_err(|e| LookupError::InvalidKey(e.to_string().replacen("lock name", "prefix", 1)))
}

/// Whether `key` is `prefix` or under it.
pub fn under(key: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || key == p || (key.starts_with(p) && key.as_bytes().get(p.len()) == Some(&b'/'))
}

/// The origin of entry times on the wire. Entries travel between nodes (a join's Ack,
/// Merge, MergeRequest) with their times — deadline, last refresh, last change — read
/// relative to the sender's clock, as this origin plus (time − sender's now); the
/// receiver reads them back against its own clock. No node reads another's clock
/// (DESIGN §3, "Clocks"): each device's clock has an origin of its own. An entry arrives
/// with its lifetime counted from its arrival, a message delay longer than the sender
/// counted: it outlives its provider's silence by that delay at most, the seed's δ.
const WIRE_ZERO: u64 = 1 << 62;

fn shift(t: Instant, from: Instant, to: Instant) -> Instant {
    Instant((t.0 as i128 - from.0 as i128 + to.0 as i128).max(0) as u64)
}

fn map_times(mut entries: Vec<Entry>, f: impl Fn(Instant) -> Instant) -> Vec<Entry> {
    for e in &mut entries {
        e.deadline = f(e.deadline);
        e.refreshed = f(e.refreshed);
        e.changed = f(e.changed);
    }
    entries
}

/// Entries as they leave this node (times relative to `now`).
pub(crate) fn to_wire(entries: Vec<Entry>, now: Instant) -> Vec<Entry> {
    map_times(entries, |t| shift(t, now, Instant(WIRE_ZERO)))
}

/// Entries as they arrive (times read back against `now`).
pub(crate) fn from_wire(entries: Vec<Entry>, now: Instant) -> Vec<Entry> {
    map_times(entries, |t| shift(t, Instant(WIRE_ZERO), now))
}

#[cfg(test)]
mod wire_tests {
    use super::*;

    // DESIGN §3, "Clocks": an entry's times cross between nodes whose clocks have
    // different origins as lengths from the sender's now.
    #[test]
    fn entries_travel_with_times_relative_to_the_senders_clock() {
        let e = Entry {
            key: "/a".into(),
            value: Some(vec![1]),
            version: EntryVersion {
                stamp: 1,
                provider: 1,
            },
            interval: Duration::from_secs(1),
            durability: Durability::Persistent,
            adapt: IntervalRange::fixed(Duration::from_secs(1)),
            deadline: Instant(5_000_000_000 + 3_000_000),
            refreshed: Instant(5_000_000_000 - 1_000_000),
            changed: Instant(5_000_000_000 - 9_000_000),
            stable: 0,
        };
        // Sent at 5,000 s on the sender's clock, received at 7 s on the receiver's.
        let wire = to_wire(vec![e.clone()], Instant(5_000_000_000));
        let got = from_wire(wire, Instant(7_000_000)).remove(0);
        assert_eq!(got.deadline, Instant(10_000_000));
        assert_eq!(got.refreshed, Instant(6_000_000));
        // A change older than the receiver's origin reads as its origin.
        assert_eq!(got.changed, Instant(0));
        assert_eq!((got.key, got.version), (e.key, e.version));
    }
}
