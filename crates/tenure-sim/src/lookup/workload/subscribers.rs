//! Subscribers: each watches a prefix through one device and keeps a view. A `Sync`
//! replaces it, `Put` and `Removed` from the leader it follows apply in sequence; a gap,
//! or events of a leader it has no `Sync` from, make it ask for a `Sync` (position
//! `None`) at once and at every refresh until one comes. It refreshes every interval,
//! sometimes moves to another device, and moves when its device crashes.

use super::{ReqFor, Who};
use crate::lookup::world::{Ev, World};
use std::collections::BTreeMap;
use std::time::Duration;
use tenure_core::DeviceId;
use tenure_core::lookup::{
    EntryVersion, LookupRequest, SubEvent, SubId, SubPosition, Watch, WatchEvent,
};

/// A subscriber and its view.
#[derive(Clone, Debug)]
pub struct Subscriber {
    /// Subscription id.
    pub sub: SubId,
    /// Prefix watched.
    pub prefix: String,
    /// Refresh interval.
    pub interval: Duration,
    /// The device it talks to.
    pub device: DeviceId,
    /// Its view: key → (value, version).
    pub view: BTreeMap<String, (Vec<u8>, EntryVersion)>,
    /// The leader it follows and the last event applied.
    pub pos: Option<SubPosition>,
    /// Since when its view differs from the leader's state (µs, real).
    pub diverged_since: Option<u64>,
    /// Its connection (bumped at every move: events on an older one are dropped).
    pub(super) conn: u64,
    /// It saw a gap (or a leader it has no Sync from): it asks for a Sync (position
    /// `None`) until one comes.
    pub(super) needs_sync: bool,
    pub(super) refresh_at: u64,
    pub(super) move_now: bool,
    pub(super) last_resubscribe: u64,
    pub(super) timer_at: Option<u64>,
}

impl World {
    pub(in crate::lookup) fn subscriber_timer(&mut self, i: usize) {
        let now = self.now;
        let s = &mut self.work.subscribers[i];
        if s.timer_at.is_some_and(|t| t <= now) {
            s.timer_at = None;
        }
        if s.refresh_at <= now {
            let move_p = self.k.move_p;
            let moves = s.move_now || self.work.rng.chance(move_p);
            self.subscribe(i, moves);
        }
        let c = self.work.subscriber_client(i);
        self.client_rearm(c);
    }

    /// Register or refresh the subscription with its position (moving first if asked).
    pub(in crate::lookup) fn subscribe(&mut self, i: usize, moves: bool) {
        if moves {
            let n = self.k.devices;
            let s = &self.work.subscribers[i];
            let d = if n > 1 {
                DeviceId(1 + (s.device.0 + self.work.rng.below(n - 1)) % n)
            } else {
                s.device
            };
            self.work.subscribers[i].device = d;
            self.work.subscribers[i].conn += 1;
            self.stats.moves += 1;
        }
        let s = &mut self.work.subscribers[i];
        s.move_now = false;
        s.refresh_at = self.now + s.interval.as_micros() as u64;
        s.last_resubscribe = self.now;
        let req = LookupRequest::Subscribe {
            sub: s.sub,
            watch: Watch::Prefix(s.prefix.clone()),
            interval: s.interval,
            position: if s.needs_sync { None } else { s.pos },
        };
        let d = s.device;
        let c = self.work.subscriber_client(i);
        let req_id = self.request(c, d, req);
        self.work.reqs.insert(req_id, ReqFor::Subscribe);
    }

    /// A device crashed: its subscribers move elsewhere (they notice one latency later).
    pub(in crate::lookup) fn subscribers_lost(&mut self, d: DeviceId) {
        for i in 0..self.work.subscribers.len() {
            if self.work.subscribers[i].device != d {
                continue;
            }
            let c = self.work.subscriber_client(i);
            let at = self.client_latency(c, d, false);
            let s = &mut self.work.subscribers[i];
            s.move_now = true;
            s.refresh_at = at;
            self.client_rearm(c);
        }
    }

    /// A device hands a subscription event to its driver: it goes to the subscriber if
    /// the subscriber talks to that device.
    pub(in crate::lookup) fn event_out(&mut self, d: DeviceId, ev: SubEvent) {
        let Some(&i) = self.work.by_sub.get(&ev.sub) else {
            return;
        };
        if self.work.subscribers[i].device != d {
            let seq = ev.seq;
            self.log(|| format!("{d}: event #{seq} of subscription {i} dropped (not attached)"));
            return;
        }
        let c = self.work.subscriber_client(i);
        let conn = self.work.subscribers[i].conn;
        let at = self.client_latency(c, d, false);
        self.schedule(
            at,
            Ev::Event {
                client: c,
                from: d,
                conn,
                ev: Box::new(ev),
            },
        );
    }

    /// A subscription event reaches its subscriber.
    pub(in crate::lookup) fn on_event(
        &mut self,
        c: usize,
        from: DeviceId,
        conn: u64,
        ev: SubEvent,
    ) {
        let Who::Subscriber(i) = self.work.who(c) else {
            return;
        };
        let s = &self.work.subscribers[i];
        if s.device != from || s.conn != conn {
            return; // the subscriber left that device: the stream is gone
        }
        let kind = match &ev.event {
            WatchEvent::Sync { entries } => format!("Sync of {}", entries.len()),
            WatchEvent::Put { entry } => format!("Put {}", entry.key),
            WatchEvent::Removed { key, cause } => format!("Removed {key} ({cause:?})"),
            WatchEvent::Alert { key, .. } => format!("Alert {key}"),
        };
        let (l, seq) = (ev.leader.device, ev.seq);
        self.log(|| format!("{from} -> client {c} event {l}#{seq} {kind}"));
        self.check_event_order(&ev, from);
        let s = &mut self.work.subscribers[i];
        let expected = s.pos.filter(|p| p.leader == ev.leader).map(|p| p.seq + 1);
        match ev.event {
            WatchEvent::Sync { entries } => {
                s.view = (entries.into_iter())
                    .map(|e| (e.key, (e.value, e.version)))
                    .collect();
                s.pos = Some(SubPosition {
                    leader: ev.leader,
                    seq: ev.seq,
                });
                s.needs_sync = false;
                self.stats.syncs += 1;
            }
            WatchEvent::Put { .. } | WatchEvent::Removed { .. } if expected == Some(ev.seq) => {
                match ev.event {
                    WatchEvent::Put { entry } => {
                        s.view.insert(entry.key, (entry.value, entry.version));
                    }
                    WatchEvent::Removed { key, .. } => {
                        s.view.remove(&key);
                    }
                    _ => {}
                }
                s.pos = Some(SubPosition {
                    leader: ev.leader,
                    seq: ev.seq,
                });
                self.stats.events_applied += 1;
            }
            WatchEvent::Put { .. } | WatchEvent::Removed { .. } => {
                let stale = expected.is_some_and(|e| ev.seq < e);
                let rtt = self.k.settings.roundtrip_delay.as_micros() as u64;
                if !stale {
                    // A gap, or a leader it has no Sync from: ask for one (once a round
                    // trip; the periodic refresh asks again if that request is lost).
                    s.needs_sync = true;
                    if self.now >= s.last_resubscribe + rtt {
                        self.stats.resubscribes += 1;
                        self.subscribe(i, false);
                    }
                }
            }
            WatchEvent::Alert { .. } => {}
        }
    }
}
