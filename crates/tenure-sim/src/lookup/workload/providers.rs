//! Providers: each owns one key. Each incarnation publishes a value, refreshes it every
//! interval (adopting the service's meta-updates within the range it accepts), changes
//! it, revokes it or dies silently at any moment between two refreshes, and after a
//! while a new incarnation takes the key. Volatile updates are sent once (again through
//! the next device only if the connection fails); persistent ones are retried within Θ
//! until the leader acknowledges them. The true state of the key ([`crate::lookup::truth`])
//! changes when an update is first sent, or at death.

use super::{ReqFor, exp};
use crate::lookup::world::{InFlight, World};
use std::time::Duration;
use tenure_core::DeviceId;
use tenure_core::lookup::{
    Durability, EntryVersion, IntervalRange, LookupError, LookupRequest, LookupResponse,
};

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
    pub(super) incarnation: u64,
    pub(super) changes: u64,
    /// The value announced (`None`: revoked or dead).
    pub value: Option<Vec<u8>>,
    pub(super) last_stamp: u64,
    pub(super) pending: Option<Update>,
    pub(super) refresh_at: Option<u64>,
    pub(super) reborn_at: Option<u64>,
    pub(super) retry_at: Option<u64>,
    /// It dies silently at this real time (any time between two refreshes).
    pub(super) dies_at: Option<u64>,
    pub(super) timer_at: Option<u64>,
}

/// An update waiting for its answer.
#[derive(Clone, Debug)]
pub(super) struct Update {
    pub(super) req: LookupRequest,
    pub(super) version: EntryVersion,
    pub(super) first_sent_us: u64,
    pub(super) inflight: Option<u64>,
    /// After a failure, the next attempt goes to the device after the failed one (a
    /// client walks its device list; drawing at random could miss the only live one).
    pub(super) next: Option<DeviceId>,
}

impl World {
    pub(in crate::lookup) fn provider_timer(&mut self, i: usize) {
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

    pub(in crate::lookup) fn provider_reborn(&mut self, i: usize) {
        let p = &mut self.work.providers[i];
        p.incarnation += 1;
        p.changes = 0;
        p.reborn_at = None;
        self.provider_new_value(i);
        self.provider_publish(i);
    }

    pub(in crate::lookup) fn provider_new_value(&mut self, i: usize) {
        let p = &mut self.work.providers[i];
        p.changes += 1;
        let v = format!("p{i}i{}c{}", p.incarnation, p.changes).into_bytes();
        p.value = Some(v.clone());
        let key = p.key.clone();
        self.truth.set(&key, self.now, Some(v));
    }

    pub(in crate::lookup) fn provider_refresh(&mut self, i: usize) {
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

    pub(in crate::lookup) fn provider_dies(&mut self, i: usize) {
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

    pub(in crate::lookup) fn provider_version(&mut self, i: usize) -> EntryVersion {
        let p = &mut self.work.providers[i];
        p.last_stamp = (p.last_stamp + 1).max(self.now);
        EntryVersion {
            stamp: p.last_stamp,
            provider: ((i as u64 + 1) << 20) | p.incarnation,
        }
    }

    pub(in crate::lookup) fn provider_publish(&mut self, i: usize) {
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

    pub(in crate::lookup) fn provider_send(
        &mut self,
        i: usize,
        req: LookupRequest,
        version: EntryVersion,
    ) {
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

    pub(in crate::lookup) fn provider_attempt(&mut self, i: usize) {
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

    pub(in crate::lookup) fn provider_reply(
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
}
