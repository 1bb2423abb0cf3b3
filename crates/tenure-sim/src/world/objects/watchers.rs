//! Watchers: one subscription at a time, resumed from the last revision seen after a
//! redirect, a quiet stream or a compaction; their events are checked as they come.

use super::{OBJ_WATCH_BASE, ObjKind, ObjReq, Owner, WATCH_CHECK_US, WATCH_QUIET_US};
use crate::world::{Event, World};
use tenure_core::io::{ClientError, ObjectRequest, Request, Response};
use tenure_core::objects::{Change, ObjectError};
use tenure_core::{ClientId, DeviceId};

impl World {
    /// Subscribe again, from the last revision seen (or from now, the first time).
    pub(super) fn subscribe(&mut self, w: usize) {
        self.obj.next_watch += 1;
        let sub = self.obj.next_watch;
        let wa = &mut self.obj.watchers[w];
        if wa.start.is_some() {
            self.report.objects.watch_resumes += 1;
        }
        wa.sub = sub;
        wa.live = false;
        wa.heard_at = self.now;
        let after = wa.start.map(|_| wa.last);
        let (store, prefix) = (wa.store, wa.prefix.clone());
        // Every other subscription asks for values, which checker 6 compares with the
        // changes they come with.
        let req = ObjectRequest::Watch {
            watch: sub,
            prefix,
            after,
            values: sub % 2 == 1,
        };
        let req = Request::Object { store, req };
        self.obj_request(Owner::Watcher(w), req, ObjKind::Watch { sub });
    }

    /// Re-read after `Compacted`: list the prefix, then watch from the list's revision.
    fn relist(&mut self, w: usize) {
        self.report.objects.watch_compacted += 1;
        let wa = &self.obj.watchers[w];
        let (store, prefix, sub) = (wa.store, wa.prefix.clone(), wa.sub);
        let req = Request::Object {
            store,
            req: ObjectRequest::List { prefix },
        };
        self.obj_request(Owner::Watcher(w), req, ObjKind::Relist { sub });
    }

    /// A watcher's periodic look at its subscription.
    pub(in crate::world) fn watch_check(&mut self, w: usize) {
        let wa = &self.obj.watchers[w];
        if wa.pending.is_none() && (!wa.live || self.now >= wa.heard_at + WATCH_QUIET_US) {
            self.obj_retarget(Owner::Watcher(w), None);
            self.subscribe(w);
        }
        self.schedule(self.now + WATCH_CHECK_US, Event::WatchCheck(w));
    }

    /// Conclude a watcher's request (`result` none: it gave up).
    pub(super) fn watch_done(
        &mut self,
        w: usize,
        id: u64,
        r: ObjReq,
        from: Option<DeviceId>,
        result: Option<Result<Response, ClientError>>,
    ) {
        if self.obj.watchers[w].pending == Some(id) {
            self.obj.watchers[w].pending = None;
        }
        let wa = &mut self.obj.watchers[w];
        match (r.kind, result) {
            // Only from the device the latest attempt went to: a client's stream to an
            // endpoint it gave up on is closed, and a late answer there never reaches it
            // (simulator seed 10677: a manager whose disk stalled answered two seconds
            // late and replayed revisions 13-17 after the watcher had 20 from another).
            (ObjKind::Watch { sub }, Some(Ok(Response::Watching { revision })))
                if sub == wa.sub && from.is_none_or(|d| d == wa.target) =>
            {
                wa.live = true;
                wa.heard_at = self.now;
                if wa.start.is_none() {
                    wa.start = Some(revision);
                    wa.last = revision;
                }
            }
            (
                ObjKind::Watch { sub },
                Some(Err(ClientError::Object(ObjectError::Compacted { .. }))),
            ) if sub == wa.sub => self.relist(w),
            (ObjKind::Relist { sub }, Some(Ok(Response::Objects { revision, .. })))
                if sub == wa.sub =>
            {
                if revision > wa.last {
                    wa.skipped.push((wa.last, revision));
                    wa.last = revision;
                }
                self.subscribe(w);
            }
            // Anything else: the periodic check subscribes again.
            _ => {}
        }
    }

    /// Changes for a watch, from device `d` (dropped unless the watcher's subscription is
    /// at `d`: its stream to any other device is closed).
    pub(in crate::world) fn obj_events(
        &mut self,
        d: DeviceId,
        client: ClientId,
        watch: u64,
        (changes, values): (Vec<Change>, Vec<Option<tenure_core::objects::Bytes>>),
    ) {
        let Some(w) = client.0.checked_sub(OBJ_WATCH_BASE).map(|w| w as usize) else {
            return;
        };
        let Some(wa) = self.obj.watchers.get_mut(w) else {
            return;
        };
        if wa.sub != watch || wa.start.is_none() || wa.target != d {
            return;
        }
        wa.heard_at = self.now;
        self.report.objects.watch_events += changes.len() as u64;
        wa.seen.extend(changes.iter().map(|c| c.revision));
        let (store, whole, prefix) = (wa.store, wa.whole, wa.prefix.clone());
        self.obj
            .check
            .watch_events(store, w, &prefix, whole, &mut wa.last, &changes);
        self.obj.check.watch_values(store, w, &changes, &values);
    }

    /// A watch ended at its manager: resume (where the redirect points), or re-read.
    pub(in crate::world) fn obj_watch_ended(
        &mut self,
        client: ClientId,
        watch: u64,
        reason: ClientError,
    ) {
        let Some(w) = client.0.checked_sub(OBJ_WATCH_BASE).map(|w| w as usize) else {
            return;
        };
        if self.obj.watchers.get(w).is_none_or(|wa| wa.sub != watch) {
            return;
        }
        self.obj.watchers[w].live = false;
        if self.obj.watchers[w].pending.is_some() {
            return;
        }
        match reason {
            ClientError::Object(ObjectError::Compacted { .. }) => self.relist(w),
            ClientError::NotManager { hint } => {
                self.obj_retarget(Owner::Watcher(w), hint);
                self.subscribe(w)
            }
            _ => {
                self.obj_retarget(Owner::Watcher(w), None);
                self.subscribe(w)
            }
        }
    }
}
