//! Conversions between the lookup service's wire messages (`service Lookup` in
//! `proto/tenure.proto`) and the core's types ([`tenure_core::lookup`]). The server
//! renders answers with the `*_to_proto` functions and reads requests with the
//! `*_from_proto` ones; the client does the reverse, so both sides share one mapping.

use crate::proto::{self, lookup_error::Kind as LKind};
use std::time::Duration;
use tenure_core::Instant;
use tenure_core::ids::DeviceId;
use tenure_core::lookup::{
    Durability, EntryVersion, EntryView, LeaderId, LookupError, Meta, NodeState, NodeView,
    RemoveCause, SubEvent, SubPosition, WatchEvent, policy::AdaptReason,
};

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

/// Durability on the wire.
pub fn durability_to_proto(d: Durability) -> i32 {
    match d {
        Durability::Volatile => proto::Durability::Volatile as i32,
        Durability::Persistent => proto::Durability::Persistent as i32,
    }
}

/// Durability from the wire (an unknown value is an error).
pub fn durability_from_proto(d: i32) -> Result<Durability, String> {
    match proto::Durability::try_from(d) {
        Ok(proto::Durability::Volatile) => Ok(Durability::Volatile),
        Ok(proto::Durability::Persistent) => Ok(Durability::Persistent),
        Err(_) => Err(format!("unknown durability {d}")),
    }
}

/// A version on the wire.
pub fn version_to_proto(v: EntryVersion) -> proto::EntryVersion {
    proto::EntryVersion {
        stamp: v.stamp,
        provider: v.provider,
    }
}

/// A version from the wire.
pub fn version_from_proto(v: proto::EntryVersion) -> EntryVersion {
    EntryVersion {
        stamp: v.stamp,
        provider: v.provider,
    }
}

/// An entry on the wire.
pub fn entry_to_proto(e: &EntryView) -> proto::LookupEntry {
    proto::LookupEntry {
        key: e.key.clone(),
        value: e.value.clone(),
        version: Some(version_to_proto(e.version)),
        interval_ms: ms(e.interval),
        durability: durability_to_proto(e.durability),
        age_ms: ms(e.age),
    }
}

/// An entry from the wire (an unknown durability reads as volatile).
pub fn entry_from_proto(e: proto::LookupEntry) -> EntryView {
    EntryView {
        durability: durability_from_proto(e.durability).unwrap_or(Durability::Volatile),
        key: e.key,
        value: e.value,
        version: version_from_proto(e.version.unwrap_or_default()),
        interval: Duration::from_millis(e.interval_ms),
        age: Duration::from_millis(e.age_ms),
    }
}

/// The leader that answered, on the wire.
pub fn leader_to_proto(l: LeaderId) -> proto::LeaderRef {
    proto::LeaderRef {
        start_micros: l.start.0,
        device: l.device.0,
    }
}

/// The leader that answered, from the wire.
pub fn leader_from_proto(l: Option<proto::LeaderRef>) -> LeaderId {
    let l = l.unwrap_or_default();
    LeaderId {
        start: Instant(l.start_micros),
        device: DeviceId(l.device),
    }
}

/// A subscriber's position on the wire.
pub fn position_to_proto(p: SubPosition) -> proto::SubPosition {
    proto::SubPosition {
        leader: Some(leader_to_proto(p.leader)),
        seq: p.seq,
    }
}

/// A subscriber's position from the wire.
pub fn position_from_proto(p: proto::SubPosition) -> SubPosition {
    SubPosition {
        leader: leader_from_proto(p.leader),
        seq: p.seq,
    }
}

/// The name of an adaptivity case on the wire.
pub fn reason_name(r: AdaptReason) -> &'static str {
    match r {
        AdaptReason::Demand => "demand",
        AdaptReason::Age => "age",
        AdaptReason::OnDemand => "on_demand",
        AdaptReason::Load => "load",
        AdaptReason::Requested => "requested",
    }
}

fn reason_from_name(s: &str) -> AdaptReason {
    match s {
        "demand" => AdaptReason::Demand,
        "age" => AdaptReason::Age,
        "on_demand" => AdaptReason::OnDemand,
        "load" => AdaptReason::Load,
        _ => AdaptReason::Requested,
    }
}

/// A meta-update on the wire.
pub fn meta_to_proto(m: &Meta) -> proto::Meta {
    proto::Meta {
        interval_ms: ms(m.interval),
        durability: durability_to_proto(m.durability),
        reason: reason_name(m.reason).to_string(),
    }
}

/// A meta-update from the wire (`None` when it names no usable interval).
pub fn meta_from_proto(m: proto::Meta) -> Option<Meta> {
    (m.interval_ms > 0).then(|| Meta {
        interval: Duration::from_millis(m.interval_ms),
        durability: durability_from_proto(m.durability).unwrap_or(Durability::Volatile),
        reason: reason_from_name(&m.reason),
    })
}

/// A typed lookup error on the wire. `key` is the request's key or prefix (the core's
/// `InvalidKey` carries only the reason).
pub fn error_to_proto(e: &LookupError, key: &str) -> proto::LookupError {
    let kind = match e {
        LookupError::InvalidKey(reason) => LKind::InvalidKey(proto::InvalidKey {
            key: key.chars().take(256).collect(),
            reason: reason.clone(),
        }),
        LookupError::TooLarge { len, max } => LKind::TooLarge(proto::ValueTooLarge {
            size: *len as u64,
            limit: *max as u64,
        }),
        LookupError::BadInterval { got, min, max } => LKind::BadInterval(proto::BadInterval {
            got_ms: ms(*got),
            min_ms: ms(*min),
            max_ms: ms(*max),
        }),
        LookupError::NoLeader => LKind::NoLeader(proto::NoLeader {}),
        LookupError::StaleVersion => LKind::StaleVersion(proto::StaleVersion {}),
        LookupError::UnknownSubscription(sub) => {
            LKind::UnknownSubscription(proto::UnknownSubscription { sub: *sub })
        }
    };
    proto::LookupError {
        kind: Some(kind),
        message: e.to_string(),
    }
}

/// A request the server could not read, as a typed lookup error.
pub fn invalid_request(reason: impl Into<String>) -> proto::LookupError {
    let reason = reason.into();
    proto::LookupError {
        message: format!("invalid request: {reason}"),
        kind: Some(LKind::InvalidRequest(proto::InvalidLookupRequest {
            reason,
        })),
    }
}

/// A pushed event on the wire.
pub fn event_to_proto(ev: SubEvent) -> proto::WatchEventMsg {
    use proto::watch_event_msg::Event as E;
    let event = match ev.event {
        WatchEvent::Sync { entries } => E::Sync(proto::Sync {
            entries: entries.iter().map(entry_to_proto).collect(),
        }),
        WatchEvent::Put { entry } => E::Put(entry_to_proto(&entry)),
        WatchEvent::Removed { key, cause } => E::Removed(proto::Removed {
            key,
            cause: match cause {
                RemoveCause::Revoked => "revoked",
                RemoveCause::Expired => "expired",
            }
            .to_string(),
        }),
        WatchEvent::Alert { key, silent_for } => E::Alert(proto::Alert {
            key,
            silent_for_ms: ms(silent_for),
        }),
    };
    proto::WatchEventMsg {
        sub: ev.sub,
        leader: Some(leader_to_proto(ev.leader)),
        seq: ev.seq,
        event: Some(event),
    }
}

/// A pushed event from the wire (`None` when it carries no event).
pub fn event_from_proto(ev: proto::WatchEventMsg) -> Option<SubEvent> {
    use proto::watch_event_msg::Event as E;
    let event = match ev.event? {
        E::Sync(s) => WatchEvent::Sync {
            entries: s.entries.into_iter().map(entry_from_proto).collect(),
        },
        E::Put(e) => WatchEvent::Put {
            entry: entry_from_proto(e),
        },
        E::Removed(r) => WatchEvent::Removed {
            key: r.key,
            cause: if r.cause == "revoked" {
                RemoveCause::Revoked
            } else {
                RemoveCause::Expired
            },
        },
        E::Alert(a) => WatchEvent::Alert {
            key: a.key,
            silent_for: Duration::from_millis(a.silent_for_ms),
        },
    };
    Some(SubEvent {
        sub: ev.sub,
        leader: leader_from_proto(ev.leader),
        seq: ev.seq,
        event,
    })
}

/// The name of a node state on the wire.
pub fn state_name(s: NodeState) -> &'static str {
    match s {
        NodeState::Passive => "Passive",
        NodeState::Joining => "Joining",
        NodeState::WarmingUp => "WarmingUp",
        NodeState::Active => "Active",
        NodeState::Leader => "Leader",
    }
}

/// A node's view on the wire.
pub fn node_view_to_proto(v: &NodeView) -> proto::NodeStatusResponse {
    proto::NodeStatusResponse {
        device: v.device.0,
        state: state_name(v.state).to_string(),
        start_micros: v.start.map(|s| s.0),
        up: (v.up.iter())
            .map(|(d, s)| proto::SssPeer {
                device: d.0,
                start_micros: s.map(|s| s.0),
            })
            .collect(),
        leader: v.leader.map(|d| d.0),
        entries: v.entries as u64,
        subscriptions: v.subscriptions as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> EntryView {
        EntryView {
            key: "/svc/a".into(),
            value: b"10.0.0.1:80".to_vec(),
            version: EntryVersion {
                stamp: 17,
                provider: 99,
            },
            interval: Duration::from_millis(1500),
            durability: Durability::Persistent,
            age: Duration::from_millis(20),
        }
    }

    #[test]
    fn entries_and_events_round_trip() {
        assert_eq!(entry_from_proto(entry_to_proto(&entry())), entry());
        let leader = LeaderId {
            start: Instant(123),
            device: DeviceId(2),
        };
        for event in [
            WatchEvent::Sync {
                entries: vec![entry()],
            },
            WatchEvent::Put { entry: entry() },
            WatchEvent::Removed {
                key: "/svc/a".into(),
                cause: RemoveCause::Revoked,
            },
            WatchEvent::Removed {
                key: "/svc/a".into(),
                cause: RemoveCause::Expired,
            },
            WatchEvent::Alert {
                key: "/svc/a".into(),
                silent_for: Duration::from_millis(700),
            },
        ] {
            let ev = SubEvent {
                sub: 5,
                leader,
                seq: 3,
                event,
            };
            assert_eq!(event_from_proto(event_to_proto(ev.clone())), Some(ev));
        }
        let p = SubPosition { leader, seq: 9 };
        assert_eq!(position_from_proto(position_to_proto(p)), p);
        let m = Meta {
            interval: Duration::from_secs(4),
            durability: Durability::Persistent,
            reason: AdaptReason::Age,
        };
        assert_eq!(meta_from_proto(meta_to_proto(&m)), Some(m));
    }

    #[test]
    fn errors_are_typed_on_the_wire() {
        let e = error_to_proto(&LookupError::TooLarge { len: 10, max: 5 }, "/k");
        assert!(matches!(
            e.kind,
            Some(LKind::TooLarge(proto::ValueTooLarge { size: 10, limit: 5 }))
        ));
        let e = error_to_proto(&LookupError::InvalidKey("no leading /".into()), "k");
        assert!(matches!(e.kind, Some(LKind::InvalidKey(ref k)) if k.key == "k"));
        assert!(durability_from_proto(7).is_err());
    }
}
