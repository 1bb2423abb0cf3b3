//! The lookup workload: providers, queriers, subscribers and the outage prober.
//!
//! - A **provider** owns one key. Each incarnation publishes a value, refreshes it every
//!   interval (adopting the service's meta-updates within the range it accepts), changes
//!   it, revokes it or dies silently, and after a while a new incarnation takes the key.
//!   Volatile updates are sent once (again elsewhere only if the connection fails);
//!   persistent ones are retried within Θ until the leader acknowledges them. The true
//!   state of the key ([`super::truth`]) changes when an update is first sent, or at
//!   death.
//! - A **querier** asks Get or List through a random device; `NoLeader` is retried at
//!   once through another device, a failed connection too.
//! - A **subscriber** watches a prefix through one device and keeps a view: a `Sync`
//!   replaces it, `Put` and `Removed` from the leader it follows apply in sequence; a gap,
//!   or events of another leader before its `Sync`, make it refresh its subscription at
//!   once with its position. It refreshes every interval, sometimes moves to another
//!   device, and moves when its device crashes.
//! - The **prober** queries through every device while an outage is being measured.

use super::world::{InFlight, World};
use std::collections::BTreeMap;
use std::time::Duration;
use tenure_core::DeviceId;
use tenure_core::io::{ClientError, Response};
use tenure_core::lookup::{
    Durability, EntryVersion, IntervalRange, LookupError, LookupRequest, LookupResponse, SubEvent,
    SubId, SubPosition, Watch, WatchEvent,
};
use tenure_core::rng::Rng;

use super::knobs::LookupKnobs;

/// One provider slot (its key) and its current incarnation.
#[derive(Clone, Debug)]
pub struct Provider {
    /// The key it owns.
    pub key: String,
    /// Volatile or persistent.
    pub durability: Durability,
    /// Refresh interval (meta-updates may change it within `adapt`).
    pub interval: Duration,
    /// The intervals it accepts.
    pub adapt: IntervalRange,
    incarnation: u64,
    changes: u64,
    /// The value announced (`None`: revoked or dead).
    pub value: Option<Vec<u8>>,
    last_stamp: u64,
    pending: Option<Update>,
    refresh_at: Option<u64>,
    reborn_at: Option<u64>,
    retry_at: Option<u64>,
    /// It dies silently at this real time (any time between two refreshes).
    dies_at: Option<u64>,
    timer_at: Option<u64>,
}

/// An update waiting for its answer.
#[derive(Clone, Debug)]
struct Update {
    req: LookupRequest,
    version: EntryVersion,
    first_sent_us: u64,
    inflight: Option<u64>,
    /// After a failure, the next attempt goes to the device after the failed one (a
    /// client walks its device list; drawing at random could miss the only live one).
    next: Option<DeviceId>,
}

/// A querier.
#[derive(Clone, Debug, Default)]
pub struct Querier {
    attempts: u32,
    busy: bool,
    /// Where a retry goes (the device after the one that failed).
    next: Option<DeviceId>,
}

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
    conn: u64,
    /// It saw a gap (or a leader it has no Sync from): it asks for a Sync (position
    /// `None`) until one comes.
    needs_sync: bool,
    refresh_at: u64,
    move_now: bool,
    last_resubscribe: u64,
    timer_at: Option<u64>,
}

/// What a request was for.
#[derive(Clone, Debug)]
enum ReqFor {
    Update {
        provider: usize,
        version: EntryVersion,
    },
    Query {
        querier: usize,
        req: LookupRequest,
    },
    Subscribe,
    Probe,
}

/// Every client of the run.
pub struct Workload {
    rng: Rng,
    /// Providers, one per key.
    pub providers: Vec<Provider>,
    /// Queriers.
    pub queriers: Vec<Querier>,
    /// Subscribers.
    pub subscribers: Vec<Subscriber>,
    reqs: BTreeMap<u64, ReqFor>,
    by_sub: BTreeMap<SubId, usize>,
}

/// Which client an index names (providers, then queriers, subscribers, the prober).
enum Who {
    Provider(usize),
    Querier(usize),
    Subscriber(usize),
    Prober,
}

const PREFIXES: [&str; 3] = ["/svc", "/cfg", "/"];

impl Workload {
    /// Draw the clients.
    pub(super) fn new(mut rng: Rng, k: &LookupKnobs) -> Workload {
        let s = &k.settings;
        let mut providers = Vec::new();
        let total = k.volatile_providers + k.persistent_providers;
        for i in 0..total {
            let volatile = i < k.volatile_providers;
            let (lo, hi) = if volatile {
                (
                    s.max_volatile_refresh_interval / 4,
                    s.max_volatile_refresh_interval,
                )
            } else {
                (
                    s.max_persistent_refresh_interval / 2,
                    s.max_persistent_refresh_interval,
                )
            };
            let lo = lo.max(s.min_refresh_interval);
            let span = (hi - lo).as_millis() as u64;
            let interval = lo + Duration::from_millis(rng.below(span + 1));
            // Half the providers accept meta-updates within [lo, hi]: a volatile range
            // ends at MVRI, so an entry never turns persistent under the provider.
            let adapt = if rng.chance(0.5) {
                IntervalRange::fixed(interval)
            } else {
                IntervalRange { min: lo, max: hi }
            };
            providers.push(Provider {
                key: format!("{}/p{i}", PREFIXES[i % 2]),
                durability: if volatile {
                    Durability::Volatile
                } else {
                    Durability::Persistent
                },
                interval,
                adapt,
                incarnation: 0,
                changes: 0,
                value: None,
                last_stamp: 0,
                pending: None,
                refresh_at: None,
                reborn_at: None,
                retry_at: None,
                dies_at: None,
                timer_at: None,
            });
        }
        let queriers = vec![Querier::default(); k.queriers];
        let mut subscribers = Vec::new();
        let mut by_sub = BTreeMap::new();
        for i in 0..k.subscribers {
            let sub = rng.next_u64();
            by_sub.insert(sub, i);
            let mvri = s.max_volatile_refresh_interval.as_millis() as u64;
            subscribers.push(Subscriber {
                sub,
                prefix: PREFIXES[rng.below(3) as usize].to_string(),
                interval: Duration::from_millis(mvri / 4 + rng.below(mvri * 3 / 4 + 1)),
                device: DeviceId(1 + rng.below(k.devices)),
                view: BTreeMap::new(),
                pos: None,
                diverged_since: None,
                conn: 0,
                needs_sync: false,
                refresh_at: 0,
                move_now: false,
                last_resubscribe: 0,
                timer_at: None,
            });
        }
        Workload {
            rng,
            providers,
            queriers,
            subscribers,
            reqs: BTreeMap::new(),
            by_sub,
        }
    }

    fn who(&self, c: usize) -> Who {
        let (p, q, s) = (
            self.providers.len(),
            self.queriers.len(),
            self.subscribers.len(),
        );
        if c < p {
            Who::Provider(c)
        } else if c < p + q {
            Who::Querier(c - p)
        } else if c < p + q + s {
            Who::Subscriber(c - p - q)
        } else {
            Who::Prober
        }
    }

    fn querier_client(&self, i: usize) -> usize {
        self.providers.len() + i
    }

    fn subscriber_client(&self, i: usize) -> usize {
        self.providers.len() + self.queriers.len() + i
    }

    fn prober_client(&self) -> usize {
        self.providers.len() + self.queriers.len() + self.subscribers.len()
    }
}

fn exp(rng: &mut Rng, mean: u64) -> u64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (-(1.0 - u).ln() * mean as f64) as u64 + 1
}

impl World {
    /// Start every client.
    pub(super) fn start_workload(&mut self) {
        for i in 0..self.work.providers.len() {
            let at = self.now + self.work.rng.below(500_000);
            self.work.providers[i].reborn_at = Some(at);
            self.client_rearm(i);
        }
        for i in 0..self.work.queriers.len() {
            let c = self.work.querier_client(i);
            let at = self.now + exp(&mut self.work.rng, self.k.query_think_mean_us);
            self.schedule(at, super::world::Ev::Client(c));
        }
        for i in 0..self.work.subscribers.len() {
            let c = self.work.subscriber_client(i);
            self.work.subscribers[i].refresh_at = self.now + self.work.rng.below(500_000);
            self.client_rearm(c);
        }
    }

    fn random_device(&mut self) -> DeviceId {
        DeviceId(1 + self.work.rng.below(self.k.devices))
    }

    /// A client's timer fired.
    pub(super) fn client_timer(&mut self, c: usize) {
        match self.work.who(c) {
            Who::Provider(i) => self.provider_timer(i),
            Who::Querier(i) => self.query(i),
            Who::Subscriber(i) => self.subscriber_timer(i),
            Who::Prober => {}
        }
    }

    /// Schedule a provider's or subscriber's next timer, if it moved.
    fn client_rearm(&mut self, c: usize) {
        let (next, timer_at) = match self.work.who(c) {
            Who::Provider(i) => {
                let p = &mut self.work.providers[i];
                let next = [p.refresh_at, p.reborn_at, p.retry_at, p.dies_at]
                    .into_iter()
                    .flatten()
                    .min();
                (next, &mut p.timer_at)
            }
            Who::Subscriber(i) => {
                let s = &mut self.work.subscribers[i];
                (Some(s.refresh_at), &mut s.timer_at)
            }
            _ => return,
        };
        if let Some(t) = next
            && (*timer_at != Some(t))
        {
            *timer_at = Some(t);
            self.schedule(t, super::world::Ev::Client(c));
        }
    }

    // ---- providers --------------------------------------------------------------------

    fn provider_timer(&mut self, i: usize) {
        let now = self.now;
        let p = &mut self.work.providers[i];
        if p.timer_at.is_some_and(|t| t <= now) {
            p.timer_at = None;
        }
        if p.dies_at.is_some_and(|t| t <= now) {
            self.provider_dies(i);
        }
        let p = &mut self.work.providers[i];
        if p.retry_at.is_some_and(|t| t <= now) {
            p.retry_at = None;
            self.provider_attempt(i);
        }
        let p = &self.work.providers[i];
        if p.value.is_none() && p.reborn_at.is_some_and(|t| t <= now) {
            self.provider_reborn(i);
        } else if p.value.is_some() && p.refresh_at.is_some_and(|t| t <= now) {
            self.provider_refresh(i);
        }
        self.client_rearm(i);
    }

    fn provider_reborn(&mut self, i: usize) {
        let p = &mut self.work.providers[i];
        p.incarnation += 1;
        p.changes = 0;
        p.reborn_at = None;
        self.provider_new_value(i);
        self.provider_publish(i);
    }

    fn provider_new_value(&mut self, i: usize) {
        let p = &mut self.work.providers[i];
        p.changes += 1;
        let v = format!("p{i}i{}c{}", p.incarnation, p.changes).into_bytes();
        p.value = Some(v.clone());
        let key = p.key.clone();
        self.truth.set(&key, self.now, Some(v));
    }

    fn provider_refresh(&mut self, i: usize) {
        let r = self.work.rng.next_u64() as f64 / u64::MAX as f64;
        let (die, revoke, change) = (self.k.die_p, self.k.revoke_p, self.k.change_p);
        let reborn = self.now + exp(&mut self.work.rng, self.k.reborn_mean_us);
        let key = self.work.providers[i].key.clone();
        if r < die {
            // It refreshes one last time and dies before the next refresh, at any
            // moment: right after this one is the worst case for staleness.
            self.provider_publish(i);
            let interval = self.work.providers[i].interval.as_micros() as u64;
            let at = self.now + self.work.rng.below(interval);
            self.work.providers[i].dies_at = Some(at);
        } else if r < die + revoke {
            let p = &mut self.work.providers[i];
            p.value = None;
            p.refresh_at = None;
            p.reborn_at = Some(reborn);
            let durability = p.durability;
            let version = self.provider_version(i);
            self.truth.set(&key, self.now, None);
            self.mon.revoked(&key);
            let req = LookupRequest::Revoke {
                key,
                version,
                durability,
            };
            self.provider_send(i, req, version);
        } else {
            if r < die + revoke + change {
                self.provider_new_value(i);
            }
            self.provider_publish(i);
        }
    }

    fn provider_dies(&mut self, i: usize) {
        let reborn = self.now + exp(&mut self.work.rng, self.k.reborn_mean_us);
        let p = &mut self.work.providers[i];
        p.value = None;
        p.pending = None;
        p.retry_at = None;
        p.refresh_at = None;
        p.dies_at = None;
        p.reborn_at = Some(reborn);
        let key = p.key.clone();
        self.stats.deaths += 1;
        self.truth.set(&key, self.now, None);
        self.log(|| format!("provider {i} dies ({key})"));
    }

    fn provider_version(&mut self, i: usize) -> EntryVersion {
        let p = &mut self.work.providers[i];
        p.last_stamp = (p.last_stamp + 1).max(self.now);
        EntryVersion {
            stamp: p.last_stamp,
            provider: ((i as u64 + 1) << 20) | p.incarnation,
        }
    }

    fn provider_publish(&mut self, i: usize) {
        let version = self.provider_version(i);
        let p = &mut self.work.providers[i];
        p.refresh_at = Some(self.now + p.interval.as_micros() as u64);
        let req = LookupRequest::Publish {
            key: p.key.clone(),
            value: p.value.clone().expect("alive"),
            version,
            interval: p.interval,
            durability: p.durability,
            adapt: p.adapt,
        };
        self.provider_send(i, req, version);
    }

    fn provider_send(&mut self, i: usize, req: LookupRequest, version: EntryVersion) {
        self.stats.updates += 1;
        self.work.providers[i].pending = Some(Update {
            req,
            version,
            first_sent_us: self.now,
            inflight: None,
            next: None,
        });
        self.provider_attempt(i);
    }

    fn provider_attempt(&mut self, i: usize) {
        let Some(u) = self.work.providers[i].pending.as_ref() else {
            return;
        };
        let (req, version, next) = (u.req.clone(), u.version, u.next);
        let d = match next {
            Some(d) => d,
            None => self.random_device(),
        };
        let req_id = self.request(i, d, req);
        self.work.reqs.insert(
            req_id,
            ReqFor::Update {
                provider: i,
                version,
            },
        );
        if let Some(u) = self.work.providers[i].pending.as_mut() {
            u.inflight = Some(req_id);
        }
    }

    fn provider_reply(
        &mut self,
        i: usize,
        f: &InFlight,
        version: EntryVersion,
        result: Option<Result<LookupResponse, LookupError>>,
    ) {
        let p = &mut self.work.providers[i];
        let Some(u) = p.pending.as_mut().filter(|u| u.version == version) else {
            return;
        };
        u.inflight = None;
        let n = self.k.devices;
        u.next = Some(DeviceId(f.device.0 % n + 1));
        let persistent = p.durability == Durability::Persistent;
        let theta = self.k.theta_us;
        match result {
            Some(Ok(LookupResponse::Published { acked, meta })) => {
                if let Some(m) = meta {
                    p.interval = m.interval.clamp(p.adapt.min, p.adapt.max);
                }
                let u = p.pending.take().expect("pending");
                // The entry lives by the interval of the update acknowledged, not the
                // one a meta-update asks for from the next refresh on.
                if persistent
                    && acked
                    && let LookupRequest::Publish { interval, .. } = u.req
                {
                    self.stats.acks += 1;
                    let key = p.key.clone();
                    self.mon
                        .acked(&key, version, u.first_sent_us, self.now, interval);
                }
            }
            Some(Ok(_)) | Some(Err(LookupError::StaleVersion)) => {
                p.pending = None;
            }
            Some(Err(LookupError::NoLeader)) | None => {
                // Retried through the next device: at once after a failed connection,
                // within Θ after NoLeader.
                let wait = if persistent && result.is_some() {
                    self.work.rng.below(theta + 1)
                } else {
                    0
                };
                p.retry_at = Some(self.now + wait);
                self.client_rearm(i);
            }
            Some(Err(e)) => {
                p.pending = None;
                self.log(|| format!("provider {i}: unexpected {e:?}"));
            }
        }
    }

    // ---- queriers -------------------------------------------------------------------

    fn query(&mut self, i: usize) {
        if self.work.queriers[i].busy {
            return;
        }
        let r = self.work.rng.below(10);
        let req = if r < 6 {
            let n = self.work.providers.len() as u64;
            let k = self.work.rng.below(n + 1);
            let key = match self.work.providers.get(k as usize) {
                Some(p) => p.key.clone(),
                None => "/svc/never".to_string(),
            };
            LookupRequest::Get { key }
        } else {
            let prefix = PREFIXES[(r % 3) as usize].to_string();
            LookupRequest::List { prefix }
        };
        self.work.queriers[i].attempts = 0;
        self.work.queriers[i].busy = true;
        self.query_send(i, req);
    }

    fn query_send(&mut self, i: usize, req: LookupRequest) {
        let c = self.work.querier_client(i);
        let d = match self.work.queriers[i].next.take() {
            Some(d) => d,
            None => self.random_device(),
        };
        self.work.queriers[i].attempts += 1;
        let req_id = self.request(c, d, req.clone());
        self.work
            .reqs
            .insert(req_id, ReqFor::Query { querier: i, req });
    }

    fn query_done(&mut self, i: usize) {
        self.work.queriers[i].busy = false;
        let c = self.work.querier_client(i);
        let at = self.now + exp(&mut self.work.rng, self.k.query_think_mean_us);
        self.schedule(at, super::world::Ev::Client(c));
    }

    fn query_reply(
        &mut self,
        i: usize,
        req: LookupRequest,
        f: &InFlight,
        result: Option<Result<LookupResponse, LookupError>>,
    ) {
        match result {
            Some(Ok(LookupResponse::Entry { entry, leader })) => {
                let LookupRequest::Get { key } = &req else {
                    return self.query_done(i);
                };
                self.stats.answers += 1;
                self.check_answer(key, entry.as_ref(), f.sent_us, leader);
                self.query_done(i);
            }
            Some(Ok(LookupResponse::Entries { entries, leader })) => {
                let LookupRequest::List { prefix } = &req else {
                    return self.query_done(i);
                };
                self.stats.answers += 1;
                let keys: Vec<String> = self.truth.keys_under(prefix).map(String::from).collect();
                for key in keys {
                    let e = entries.iter().find(|e| e.key == key);
                    self.check_answer(&key, e, f.sent_us, leader);
                }
                // Entries no workload provider owns are fabricated, except the ones Tenure
                // publishes about itself (`/tenure/...`).
                for e in &entries {
                    let system = tenure_core::lookup::under(&e.key, "/tenure");
                    if !system && !self.truth.keys_under(prefix).any(|k| k == e.key) {
                        self.check_answer(&e.key, Some(e), f.sent_us, leader);
                    }
                }
                self.query_done(i);
            }
            Some(Err(LookupError::NoLeader)) | None => {
                if result.is_some() {
                    self.stats.no_leader += 1;
                }
                if self.work.queriers[i].attempts < 20 {
                    self.work.queriers[i].next = Some(DeviceId(f.device.0 % self.k.devices + 1));
                    self.query_send(i, req);
                } else {
                    self.query_done(i);
                }
            }
            Some(_) => self.query_done(i),
        }
    }

    // ---- subscribers ------------------------------------------------------------------

    fn subscriber_timer(&mut self, i: usize) {
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
    fn subscribe(&mut self, i: usize, moves: bool) {
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
    pub(super) fn subscribers_lost(&mut self, d: DeviceId) {
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
    pub(super) fn event_out(&mut self, d: DeviceId, ev: SubEvent) {
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
            super::world::Ev::Event {
                client: c,
                from: d,
                conn,
                ev: Box::new(ev),
            },
        );
    }

    /// A subscription event reaches its subscriber.
    pub(super) fn on_event(&mut self, c: usize, from: DeviceId, conn: u64, ev: SubEvent) {
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

    // ---- the prober ---------------------------------------------------------------------

    /// While an outage is measured, query through every device each probe period.
    pub(super) fn probe(&mut self) {
        if !self.mon.outage_open() {
            return;
        }
        let c = self.work.prober_client();
        for d in self.ids() {
            let req_id = self.request(
                c,
                d,
                LookupRequest::Get {
                    key: "/probe/k".into(),
                },
            );
            self.work.reqs.insert(req_id, ReqFor::Probe);
        }
        self.schedule(self.now + self.k.probe_us, super::world::Ev::Probe);
    }

    // ---- answers ------------------------------------------------------------------------

    /// A device's answer reached its client.
    pub(super) fn on_reply(
        &mut self,
        req_id: u64,
        f: InFlight,
        result: Result<Response, ClientError>,
    ) {
        let result = match result {
            Ok(Response::Lookup(r)) => Ok(r),
            Err(ClientError::Lookup(e)) => Err(e),
            other => {
                self.log(|| format!("req {req_id}: unexpected {other:?}"));
                return;
            }
        };
        self.client_answer(req_id, f, Some(result));
    }

    /// A request's connection failed, or its client stopped waiting.
    pub(super) fn on_failed(&mut self, req_id: u64, f: InFlight) {
        self.stats.failed += 1;
        self.client_answer(req_id, f, None);
    }

    fn client_answer(
        &mut self,
        req_id: u64,
        f: InFlight,
        result: Option<Result<LookupResponse, LookupError>>,
    ) {
        let Some(what) = self.work.reqs.remove(&req_id) else {
            return;
        };
        match what {
            ReqFor::Update { provider, version } => {
                self.provider_reply(provider, &f, version, result)
            }
            ReqFor::Query { querier, req } => self.query_reply(querier, req, &f, result),
            ReqFor::Subscribe => {
                if result.is_none() {
                    let Who::Subscriber(i) = self.work.who(f.client) else {
                        return;
                    };
                    self.subscribe(i, true);
                }
            }
            ReqFor::Probe => {
                if let Some(Ok(LookupResponse::Entry { .. })) = result {
                    self.outage_answered(f.sent_us);
                }
            }
        }
    }
}
