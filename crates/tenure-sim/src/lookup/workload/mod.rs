//! The lookup workload: providers ([`providers`]), queriers, subscribers
//! ([`subscribers`]) and the outage prober, and how requests and answers reach them.
//!
//! - A **querier** asks Get or List through a random device; `NoLeader` is retried at
//!   once through the next device, a failed connection too.
//! - The **prober** queries through every device while an outage is being measured.
//! - A client whose device is down hears of it one link latency later (connection
//!   refused or reset), as a gRPC client would; it retries through the next device.

mod providers;
mod subscribers;

pub use providers::Provider;
pub use subscribers::Subscriber;

use super::knobs::LookupKnobs;
use super::world::{InFlight, World};
use std::collections::BTreeMap;
use std::time::Duration;
use tenure_core::DeviceId;
use tenure_core::io::{ClientError, Response};
use tenure_core::lookup::{
    Durability, EntryVersion, IntervalRange, LookupError, LookupRequest, LookupResponse, SubId,
};
use tenure_core::rng::Rng;

/// A querier.
#[derive(Clone, Debug, Default)]
pub struct Querier {
    attempts: u32,
    busy: bool,
    /// Where a retry goes (the device after the one that failed).
    next: Option<DeviceId>,
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
