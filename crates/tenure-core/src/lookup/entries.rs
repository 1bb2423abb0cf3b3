//! The lookup data every active node keeps (the seed's main thread that applies updates and
//! answers queries is `main_thread`): volatile and persistent entries, subscriptions
//! and alerts, themselves soft state refreshed by their subscribers.

use super::policy::{self, Signals};
use super::{
    Durability, Entry, EntryView, LeaderId, LookupError, LookupMsg, LookupRequest, LookupResponse,
    LookupSettings, Meta, RemoveCause, SubEvent, SubId, SubPosition, Watch, WatchEvent, check_key,
    check_prefix, under,
};
use crate::ctx::Ctx;
use crate::ids::DeviceId;
use crate::io::Output;
use crate::io::persist::PersistOp;
use crate::msg::Msg;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// One subscription as every active node keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sub {
    /// What it watches.
    pub watch: Watch,
    /// The device its subscriber talks to (events go there).
    pub origin: DeviceId,
    /// Refresh interval.
    pub interval: Duration,
    /// It lapses at this local time unless refreshed.
    pub deadline: Instant,
    /// Local time it was first registered here.
    pub registered: Instant,
    /// Last sequence number this node sent as leader.
    pub seq: u64,
    /// When it sent it.
    pub last_sent: Instant,
    /// For an alert: the refresh time the alert already fired for.
    pub fired_for: Option<Instant>,
    /// For an alert: when its key was last refreshed here (the deadline runs from it once
    /// the entry has expired or been revoked).
    pub last_refresh: Option<Instant>,
}

/// Query demand on a key, for the adaptivity policy.
#[derive(Clone, Copy, Debug, Default)]
struct Demand {
    since: Instant,
    queries: u32,
}

/// Entries, tombstones and subscriptions of one node.
#[derive(Clone, Debug, Default)]
pub struct Entries {
    pub(super) map: BTreeMap<String, Entry>,
    expiry: BTreeSet<(Instant, String)>,
    pub(super) subs: BTreeMap<SubId, Sub>,
    demand: BTreeMap<String, Demand>,
    /// Meta-updates the leader sent for entries published through this node (origin).
    meta: BTreeMap<String, Meta>,
    /// Bumped by every insertion and removal (the device rebuilds what it derives from
    /// the entries only when this moved).
    generation: u64,
    /// The persistent entries this node booted with, kept until its first `Join()` ends
    /// (see [`Entries::restored`]).
    dormant: Vec<Entry>,
    /// Events pushed so far, to every subscription: never below any subscription's
    /// sequence number, so a subscription registered anew (it lapsed, or was dropped)
    /// starts above every number this node used for it before.
    pushed: u64,
}

/// An entry's lifetime ([`LookupSettings::lifetime`]), or a planted bug's.
fn lifetime(ctx: &Ctx, interval: Duration, durability: Durability) -> Duration {
    let p = &ctx.cfg.planted;
    match durability {
        Durability::Volatile if p.lookup_long_volatile_lifetime => interval * 4,
        Durability::Persistent if p.lookup_long_persistent_lifetime => {
            ctx.cfg.lookup.entry_lifetime(interval)
        }
        _ => ctx.cfg.lookup.lifetime(interval, durability),
    }
}

/// Validate a request before anything else: a rejected request changes nothing.
pub fn validate(s: &LookupSettings, req: &LookupRequest) -> Result<(), LookupError> {
    let interval_ok = |got: Duration, max: Duration| {
        if got < s.min_refresh_interval || got > max {
            Err(LookupError::BadInterval {
                got,
                min: s.min_refresh_interval,
                max,
            })
        } else {
            Ok(())
        }
    };
    match req {
        LookupRequest::Publish {
            key,
            value,
            interval,
            durability,
            adapt,
            ..
        } => {
            check_key(key)?;
            if value.len() > s.max_value_bytes {
                return Err(LookupError::TooLarge {
                    len: value.len(),
                    max: s.max_value_bytes,
                });
            }
            let max = match durability {
                Durability::Volatile => s.max_volatile_refresh_interval,
                Durability::Persistent => s.max_persistent_refresh_interval,
            };
            interval_ok(*interval, max)?;
            if adapt.min > *interval || adapt.max < *interval {
                return Err(LookupError::BadInterval {
                    got: *interval,
                    min: adapt.min,
                    max: adapt.max,
                });
            }
            interval_ok(adapt.min, s.max_persistent_refresh_interval)?;
            interval_ok(adapt.max, s.max_persistent_refresh_interval)
        }
        LookupRequest::Revoke { key, .. } | LookupRequest::Get { key } => check_key(key),
        LookupRequest::List { prefix } => check_prefix(prefix),
        LookupRequest::Subscribe {
            watch, interval, ..
        } => {
            match watch {
                Watch::Prefix(p) => check_prefix(p)?,
                Watch::Alert { key, within } => {
                    check_key(key)?;
                    interval_ok(*within, s.max_persistent_refresh_interval)?;
                }
            }
            interval_ok(*interval, s.max_persistent_refresh_interval)
        }
        LookupRequest::Unsubscribe { .. } | LookupRequest::Status => Ok(()),
    }
}

impl Entries {
    /// A booting node's data: its persistent entries, each given a fresh lifetime (a
    /// provider gets a chance to refresh after an outage, as sessions get a grace).
    ///
    /// Only a cluster that comes back from a full outage grants that lifetime: until its
    /// first `Join()` ends the node keeps what it booted with aside and its entries keep
    /// their own deadlines. Ack or Nack (a leader runs, so the cluster went on without
    /// this node) forgets what expired meanwhile ([`Entries::forget_restored`]) — else a
    /// node down longer than an entry's lifetime, or its tombstone's, brought a dead or
    /// revoked entry back to the leader through the Ack's anti-entropy. Only the
    /// self-stabilising timeout (no leader answered: the whole service was down) gives
    /// every restored entry a fresh lifetime ([`Entries::revive_restored`]).
    pub fn restored(ctx: &Ctx, mut persistent: Vec<Entry>) -> Entries {
        let mut e = Entries {
            // Sequence numbers start at the boot time in µs, so that a node that leads
            // again after a reboot under the same `LeaderId` continues above every number
            // its previous life used (while it pushed fewer than one event per µs). Its
            // `activeStartTime` differs after a reboot, unless soft state was corrupted
            // to the same value both times (simulator lookup world seed 1233: a
            // subscriber at seq 12 of d5's previous life got d5's Sync numbered 3).
            pushed: ctx.now.0,
            ..Entries::default()
        };
        if ctx.cfg.planted.lookup_forget_on_restart {
            persistent.clear();
        }
        for en in persistent {
            if en.deadline > ctx.now {
                e.insert(en.clone());
            }
            e.dormant.push(en);
        }
        e
    }

    /// `Join()` timed out (no leader anywhere): every entry this node booted with lives a
    /// fresh lifetime from now, unless a newer version arrived meanwhile.
    pub fn revive_restored(&mut self, ctx: &mut Ctx) {
        for mut en in std::mem::take(&mut self.dormant) {
            // The same version may be in the map already, with its own deadline.
            if self
                .map
                .get(&en.key)
                .is_some_and(|m| m.version > en.version)
            {
                continue;
            }
            let life = lifetime(ctx, en.interval, en.durability);
            en.deadline = en.deadline.max(ctx.now + life);
            ctx.persist(PersistOp::LookupPut(Box::new(en.clone())));
            self.insert(en);
        }
    }

    /// `Join()` got an Ack or a Nack (the cluster is live): the entries this node booted
    /// with that have expired since are gone, from its disk too.
    pub fn forget_restored(&mut self, ctx: &mut Ctx) {
        for en in std::mem::take(&mut self.dormant) {
            if !self.map.contains_key(&en.key) {
                ctx.persist(PersistOp::LookupRemove(en.key));
            }
        }
    }

    /// Changes so far (see [`Entries::generation`]).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Live entries under a prefix, in key order.
    pub fn live_under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        (self.map.range(prefix.to_string()..))
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(_, e)| e)
            .filter(|e| e.value.is_some())
    }

    fn insert(&mut self, en: Entry) {
        self.generation += 1;
        if let Some(old) = self.map.get(&en.key) {
            self.expiry.remove(&(old.deadline, en.key.clone()));
        }
        self.expiry.insert((en.deadline, en.key.clone()));
        self.map.insert(en.key.clone(), en);
    }

    fn remove(&mut self, key: &str) -> Option<Entry> {
        let old = self.map.remove(key)?;
        self.generation += 1;
        self.expiry.remove(&(old.deadline, key.to_string()));
        Some(old)
    }

    /// One entry or tombstone (checkers).
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.map.get(key)
    }

    /// Live entries (not tombstones).
    pub fn live(&self) -> impl Iterator<Item = &Entry> {
        self.map.values().filter(|e| e.value.is_some())
    }

    /// How many live entries.
    pub fn live_entries(&self) -> usize {
        self.live().count()
    }

    /// How many subscriptions.
    pub fn subscriptions(&self) -> usize {
        self.subs.len()
    }

    /// The subscriptions (checkers).
    pub fn subs(&self) -> &BTreeMap<SubId, Sub> {
        &self.subs
    }

    /// The persistent store: persistent entries and tombstones.
    pub fn persistent_store(&self) -> Vec<Entry> {
        (self.map.values())
            .filter(|e| e.durability == Durability::Persistent)
            .cloned()
            .collect()
    }

    /// Take the newer of each persistent entry; return this node's persistent entries the
    /// other side lacks or has older (`union` both ways). A leader (`lid`) announces
    /// what the merge changes to its subscriptions, as it does for an update: a leader
    /// that took over and synced its subscribers before the others' stores reached it
    /// otherwise left them without the entries those stores brought.
    pub fn merge_persistent(
        &mut self,
        ctx: &mut Ctx,
        incoming: Vec<Entry>,
        lid: Option<LeaderId>,
    ) -> Vec<Entry> {
        let theirs: BTreeMap<String, crate::lookup::EntryVersion> = incoming
            .iter()
            .map(|e| (e.key.clone(), e.version))
            .collect();
        let back: Vec<Entry> = (self.map.values())
            .filter(|e| e.durability == Durability::Persistent)
            .filter(|e| theirs.get(&e.key).is_none_or(|v| *v < e.version))
            .cloned()
            .collect();
        for e in incoming {
            let old = self.map.get(&e.key);
            if old.is_some_and(|m| m.version == e.version && m.deadline < e.deadline) {
                // The same version, given a longer life elsewhere (restored with a fresh
                // lifetime after a full outage): it lives as long here. Else a node that
                // got the version from a node not yet back from its Join() kept the old
                // deadline and expired an entry every other node still keeps.
                ctx.persist(PersistOp::LookupPut(Box::new(e.clone())));
                self.insert(e);
                continue;
            }
            if old.is_none_or(|m| m.version < e.version) {
                let was_live = old.is_some_and(|m| m.value.is_some());
                let changed = old.map(|m| &m.value) != Some(&e.value);
                ctx.persist(PersistOp::LookupPut(Box::new(e.clone())));
                let (key, view) = (e.key.clone(), self.view(ctx.now, &e));
                self.insert(e);
                let event = match view {
                    Some(entry) => WatchEvent::Put { entry },
                    None if was_live => WatchEvent::Removed {
                        key: key.clone(),
                        cause: RemoveCause::Revoked,
                    },
                    None => continue,
                };
                if changed {
                    self.notify(ctx, lid, &key, event);
                }
            }
        }
        back
    }

    /// The node stepped down (`SSS_Delete("LS_start_time")`): its volatile entries and
    /// subscriptions stop being refreshed here and go; persistent ones stay on disk.
    pub fn step_down(&mut self, _ctx: &mut Ctx) {
        let volatile: Vec<String> = (self.map.values())
            .filter(|e| e.durability == Durability::Volatile)
            .map(|e| e.key.clone())
            .collect();
        for k in volatile {
            self.remove(&k);
        }
        self.subs.clear();
        self.demand.clear();
    }

    /// This node became the leader: it takes every subscription over with a full sync.
    pub fn became_leader(&mut self, ctx: &mut Ctx, lid: LeaderId) {
        let ids: Vec<SubId> = self.subs.keys().copied().collect();
        for id in ids {
            // The sequence goes on (see `sync`): a node that leads again under the same
            // `LeaderId` must not reuse numbers it sent before.
            self.sync(ctx, lid, id);
        }
    }

    pub(super) fn view(&self, now: Instant, e: &Entry) -> Option<EntryView> {
        Some(EntryView {
            key: e.key.clone(),
            value: e.value.clone()?,
            version: e.version,
            interval: e.interval,
            durability: e.durability,
            age: now.saturating_since(e.refreshed),
        })
    }

    pub(super) fn under_prefix(&self, now: Instant, prefix: &str) -> Vec<EntryView> {
        (self.live_under(prefix.trim_end_matches('/')))
            .filter(|e| under(&e.key, prefix))
            .filter_map(|e| self.view(now, e))
            .collect()
    }

    /// Send an event to a subscription's origin (or hand it to the driver when the origin
    /// is this device).
    fn push(&mut self, ctx: &mut Ctx, lid: LeaderId, sub: SubId, event: WatchEvent) {
        let Some(s) = self.subs.get_mut(&sub) else {
            return;
        };
        s.seq += 1;
        self.pushed += 1;
        s.last_sent = ctx.now;
        let ev = SubEvent {
            sub,
            leader: lid,
            seq: s.seq,
            event,
        };
        if s.origin == ctx.me() {
            ctx.out.push(Output::LookupEvent(ev));
        } else {
            ctx.send(s.origin, Msg::Lookup(LookupMsg::Event(ev)));
        }
    }

    fn sync(&mut self, ctx: &mut Ctx, lid: LeaderId, sub: SubId) {
        let Some(Watch::Prefix(p)) = self.subs.get(&sub).map(|s| s.watch.clone()) else {
            return;
        };
        // A Sync continues the sequence instead of restarting it at 1: were it to
        // restart, a subscriber that missed the Sync (one lost message) would take the
        // next events for old, already applied ones, and later apply events on a view
        // that lacks the Sync's state. Continuing, the lost Sync shows as a gap.
        if ctx.cfg.planted.lookup_sync_restarts_seq
            && let Some(s) = self.subs.get_mut(&sub)
        {
            s.seq = 0;
        }
        let entries = self.under_prefix(ctx.now, &p);
        self.push(ctx, lid, sub, WatchEvent::Sync { entries });
    }

    /// Tell the prefix subscriptions that cover `key` about a change (leader only).
    fn notify(&mut self, ctx: &mut Ctx, lid: Option<LeaderId>, key: &str, event: WatchEvent) {
        let Some(lid) = lid else { return };
        let ids: Vec<SubId> = (self.subs.iter())
            .filter(|(_, s)| matches!(&s.watch, Watch::Prefix(p) if under(key, p)))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.push(ctx, lid, id, event.clone());
        }
    }

    /// Apply a publish. Returns whether it was applied (or an idempotent repeat), or
    /// `StaleVersion`.
    pub(super) fn publish(
        &mut self,
        ctx: &mut Ctx,
        lid: Option<LeaderId>,
        req: &LookupRequest,
    ) -> Result<(), LookupError> {
        let LookupRequest::Publish {
            key,
            value,
            version,
            interval,
            durability,
            adapt,
        } = req
        else {
            return Ok(());
        };
        let old = self.map.get(key);
        match old.map(|o| o.version) {
            Some(v) if v == *version => return Ok(()),
            Some(v) if v > *version => return Err(LookupError::StaleVersion),
            _ => {}
        }
        let now = ctx.now;
        let changed = old.is_none_or(|o| o.value.as_ref() != Some(value));
        let was_persistent = old.is_some_and(|o| o.durability == Durability::Persistent);
        let stable = match old {
            Some(o) if !changed => o.stable.saturating_add(1),
            _ => 0,
        };
        let en = Entry {
            key: key.clone(),
            value: Some(value.clone()),
            version: *version,
            interval: *interval,
            durability: *durability,
            adapt: *adapt,
            deadline: now + lifetime(ctx, *interval, *durability),
            refreshed: now,
            changed: if changed {
                now
            } else {
                old.map_or(now, |o| o.changed)
            },
            stable,
        };
        match durability {
            Durability::Persistent => ctx.persist(PersistOp::LookupPut(Box::new(en.clone()))),
            Durability::Volatile if was_persistent => {
                ctx.persist(PersistOp::LookupRemove(key.clone()))
            }
            Durability::Volatile => {}
        }
        let view = self.view(now, &en);
        self.insert(en);
        for s in self.subs.values_mut() {
            if matches!(&s.watch, Watch::Alert { key: k, .. } if k == key) {
                s.last_refresh = Some(now);
            }
        }
        if changed && let Some(entry) = view {
            self.notify(ctx, lid, key, WatchEvent::Put { entry });
        }
        Ok(())
    }

    pub(super) fn revoke(
        &mut self,
        ctx: &mut Ctx,
        lid: Option<LeaderId>,
        req: &LookupRequest,
    ) -> Result<(), LookupError> {
        let LookupRequest::Revoke {
            key,
            version,
            durability,
        } = req
        else {
            return Ok(());
        };
        let old = self.map.get(key);
        match old.map(|o| o.version) {
            Some(v) if v == *version => return Ok(()),
            Some(v) if v > *version => return Err(LookupError::StaleVersion),
            _ => {}
        }
        let now = ctx.now;
        let was_live = old.is_some_and(|o| o.value.is_some());
        let interval = old.map_or(ctx.cfg.lookup.max_volatile_refresh_interval, |o| o.interval);
        let durability = match old {
            Some(o) if o.durability == Durability::Persistent => Durability::Persistent,
            _ => *durability,
        };
        let tomb = Entry {
            key: key.clone(),
            value: None,
            version: *version,
            interval,
            durability,
            adapt: super::IntervalRange::fixed(interval),
            deadline: now + lifetime(ctx, interval, durability),
            refreshed: now,
            changed: now,
            stable: 0,
        };
        if durability == Durability::Persistent {
            ctx.persist(PersistOp::LookupPut(Box::new(tomb.clone())));
        }
        self.insert(tomb);
        if was_live {
            self.notify(
                ctx,
                lid,
                key,
                WatchEvent::Removed {
                    key: key.clone(),
                    cause: RemoveCause::Revoked,
                },
            );
        }
        Ok(())
    }

    pub(super) fn subscribe(
        &mut self,
        ctx: &mut Ctx,
        lid: Option<LeaderId>,
        origin: DeviceId,
        req: &LookupRequest,
    ) {
        let LookupRequest::Subscribe {
            sub,
            watch,
            interval,
            position,
        } = req
        else {
            return;
        };
        let now = ctx.now;
        let deadline = now + ctx.cfg.lookup.entry_lifetime(*interval);
        let fresh = !self.subs.contains_key(sub);
        let s = self.subs.entry(*sub).or_insert_with(|| Sub {
            watch: watch.clone(),
            origin,
            interval: *interval,
            deadline,
            registered: now,
            // Not 0: under the same leader, a subscriber that missed this registration's
            // Sync would take its events for old ones (see `pushed`).
            seq: self.pushed,
            last_sent: now,
            fired_for: None,
            last_refresh: None,
        });
        let moved = s.origin != origin || s.watch != *watch;
        s.origin = origin;
        s.watch = watch.clone();
        s.interval = *interval;
        s.deadline = deadline;
        let Some(lid) = lid else { return };
        let behind = match position {
            None => true,
            Some(SubPosition { leader, seq }) => {
                *leader != lid
                    || *seq > s.seq
                    || (*seq < s.seq
                        && now.saturating_since(s.last_sent) > ctx.cfg.lookup.roundtrip_delay)
            }
        };
        if fresh || moved || behind {
            self.sync(ctx, lid, *sub);
        }
    }

    /// What the origin answers at once for a request the leader does not acknowledge.
    pub fn unacknowledged(
        &self,
        req: &LookupRequest,
    ) -> Option<Result<LookupResponse, LookupError>> {
        match req {
            LookupRequest::Publish {
                key,
                interval,
                durability: Durability::Volatile,
                ..
            } => {
                Some(Ok(LookupResponse::Published {
                    acked: false,
                    meta: self.meta.get(key).copied().filter(|m| {
                        m.interval != *interval || m.durability != Durability::Volatile
                    }),
                }))
            }
            LookupRequest::Revoke {
                durability: Durability::Volatile,
                ..
            } => Some(Ok(LookupResponse::Revoked { acked: false })),
            LookupRequest::Subscribe { .. } => Some(Ok(LookupResponse::Subscribed)),
            _ => None,
        }
    }

    /// Keep a meta-update for the provider's next refresh through this device.
    pub fn cache_meta(&mut self, key: String, meta: Meta) {
        self.meta.insert(key, meta);
    }

    /// The adaptivity policy's verdict for an entry (leader only).
    pub(super) fn meta_for(&self, ctx: &Ctx, key: &str) -> Option<Meta> {
        let e = self.map.get(key)?;
        let d = self.demand.get(key).copied().unwrap_or_default();
        let window = ctx.cfg.lookup.adapt.demand_window;
        let queries = if ctx.now.saturating_since(d.since) <= window {
            d.queries
        } else {
            0
        };
        let subscribed = (self.subs.values()).any(|s| {
            matches!(&s.watch, Watch::Prefix(p) if under(key, p))
                || matches!(&s.watch, Watch::Alert { key: k, .. } if k == key)
        });
        let m = policy::suggest(
            &ctx.cfg.lookup,
            e,
            Signals {
                queries_in_window: queries,
                subscribed,
                entries: self.map.len(),
            },
        );
        (m.interval != e.interval || m.durability != e.durability).then_some(m)
    }

    pub(super) fn count_query(&mut self, now: Instant, window: Duration, key: &str) {
        let d = self.demand.entry(key.to_string()).or_default();
        if now.saturating_since(d.since) > window {
            *d = Demand {
                since: now,
                queries: 0,
            };
        }
        d.queries += 1;
    }

    /// Expire entries, tombstones and subscriptions; fire alerts (leader).
    pub fn on_tick(&mut self, ctx: &mut Ctx, leader: bool, lid: LeaderId) {
        let now = ctx.now;
        let lid = leader.then_some(lid);
        while let Some((t, key)) = self.expiry.first().cloned() {
            if t > now {
                break;
            }
            let Some(e) = self.remove(&key) else { continue };
            if e.durability == Durability::Persistent {
                ctx.persist(PersistOp::LookupRemove(key.clone()));
            }
            self.meta.remove(&key);
            self.demand.remove(&key);
            if e.value.is_some() {
                ctx.observe(crate::io::observation::Observation::LookupExpired {
                    persistent: e.durability == Durability::Persistent,
                });
            }
            if e.value.is_some() && !ctx.cfg.planted.lookup_silent_expiry {
                self.notify(
                    ctx,
                    lid,
                    &key,
                    WatchEvent::Removed {
                        key: key.clone(),
                        cause: RemoveCause::Expired,
                    },
                );
            }
        }
        self.subs.retain(|_, s| s.deadline > now);
        let Some(lid) = lid else { return };
        let due: Vec<(SubId, String, Instant)> = (self.subs.iter())
            .filter_map(|(id, s)| {
                let Watch::Alert { key, within } = &s.watch else {
                    return None;
                };
                let base = self.alert_base(s, key);
                (base + *within <= now && s.fired_for != Some(base))
                    .then(|| (*id, key.clone(), base))
            })
            .collect();
        for (id, key, base) in due {
            if let Some(s) = self.subs.get_mut(&id) {
                s.fired_for = Some(base);
            }
            let silent_for = now.saturating_since(base);
            self.push(ctx, lid, id, WatchEvent::Alert { key, silent_for });
        }
    }

    fn alert_base(&self, s: &Sub, key: &str) -> Instant {
        match self.map.get(key) {
            Some(e) if e.value.is_some() => e.refreshed,
            // Gone (expired or revoked): silent since its last refresh, if it had one.
            _ => s.last_refresh.unwrap_or(s.registered).max(s.registered),
        }
    }

    /// The earliest timer of the data. Alerts fire only at the leader: a node that does
    /// not lead has no alert timer (it would be due and never fired).
    pub fn next_timeout(&self, leader: bool) -> Option<Instant> {
        let expiry = self.expiry.first().map(|(t, _)| *t);
        let subs = self.subs.values().map(|s| s.deadline).min();
        let alerts = (self.subs.values())
            .filter(|_| leader)
            .filter_map(|s| match &s.watch {
                Watch::Alert { key, within } => {
                    let base = self.alert_base(s, key);
                    (s.fired_for != Some(base)).then_some(base + *within)
                }
                Watch::Prefix(_) => None,
            })
            .min();
        [expiry, subs, alerts]
            .into_iter()
            .fold(None, crate::time::earliest)
    }
}
