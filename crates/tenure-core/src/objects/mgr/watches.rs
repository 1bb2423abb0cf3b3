//! Object watches at the store's manager (DESIGN §5): a watch registered here gets the
//! changes at its prefix pushed as they are applied, in revision order; a *poll* is one
//! round of a watch forwarded from another device (DESIGN §8), answered once, with the
//! changes after its revision as soon as there are any, or empty after half a lease.
//!
//! Both wait behind a read barrier before anything leaves: a new manager's tables may
//! hold changes durable on one chunk only until the epoch's first batch is accepted
//! everywhere (simulator seed 28: a watcher was shown a put a regeneration had taken from
//! one chunk's unconfirmed ACCEPT; the manager failed before any chunk but its own had the
//! epoch's commit, and the next epoch rightly lost the put).

use super::*;
use crate::ctx::Ctx;
use crate::error::ClientError;
use crate::io::Output;
use crate::io::request::Response;
use crate::layout::manager::StoreAccess;
use crate::lockctl::LockName;
use crate::objects::table::{ChangeKind, ObjectTable};
use crate::objects::{Bytes, Change};

/// What a watch asked for, as the request carried it.
pub(super) struct Ask {
    pub prefix: String,
    pub after: Option<u64>,
    pub values: bool,
}

/// The values of `changes` for a watch that asked for them (one per change: the new
/// content when the table still holds it whole), else none.
fn values_of(t: &ObjectTable, changes: &[Change], want: bool, planted: bool) -> Vec<Option<Bytes>> {
    if !want {
        return Vec::new();
    }
    (changes.iter())
        .map(|c| match &c.kind {
            ChangeKind::Put { .. } if planted => t.active(&c.key).and_then(|m| m.value.clone()),
            ChangeKind::Put { uuid, .. } => (t.keys.get(c.key.as_str()))
                .and_then(|d| d.get(uuid))
                .and_then(|m| m.value.clone()),
            ChangeKind::Delete => None,
        })
        .collect()
}

fn check_prefix(prefix: &str) -> Result<(), ClientError> {
    LockName::parse_prefix(prefix)
        .map(|_| ())
        .map_err(|e| ClientError::InvalidName(e.to_string()))
}

impl ObjMgr {
    /// Register a watch of `client`: answered `Watching` after a read barrier, then the
    /// changes after its revision pushed.
    pub(super) fn watch(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        (client, req_id): (ClientId, u64),
        watch: u64,
        ask: Ask,
    ) -> Result<(), ClientError> {
        check_prefix(&ask.prefix)?;
        // A retried subscription (same watch id and request) is answered again; the
        // registration already made delivers everything after its revision.
        if let Some(w) = self.watches.get(&(client, watch))
            && w.prefix == ask.prefix
            && w.asked == ask.after
        {
            let revision = ask.after.unwrap_or(w.last);
            let r = Ok(Response::Watching { revision });
            st.after_barrier(ctx, client, req_id, r);
            return Ok(());
        }
        let t = &st.host.data.table.objects;
        let after = ask.after.unwrap_or(t.revision);
        let changes = t.changes_after(&ask.prefix, after)?;
        let values = values_of(
            t,
            &changes,
            ask.values,
            ctx.cfg.planted.objects_watch_active_value,
        );
        let current = t.revision.max(after);
        let r = Ok(Response::Watching { revision: after });
        st.after_barrier(ctx, client, req_id, r);
        if !changes.is_empty() {
            st.with_barrier(Output::ObjectEvents {
                client,
                watch,
                changes,
                values,
            });
        }
        let held = st.barrier_version();
        let w = Watch {
            prefix: ask.prefix,
            last: current,
            held,
            asked: ask.after,
            values: ask.values,
            poll: None,
        };
        self.watches.insert((client, watch), w);
        Ok(())
    }

    /// Remove a watch.
    pub(super) fn unwatch(&mut self, ctx: &mut Ctx<'_>, client: ClientId, req_id: u64, watch: u64) {
        self.watches.remove(&(client, watch));
        reply(ctx, client, req_id, Ok(Response::Unwatched));
    }

    /// One round of a forwarded watch: answered at once (after a read barrier) when
    /// there are changes after its revision, or when it asks for the current revision
    /// or not to wait; otherwise it waits as a watch of its own, answered by the next change at its
    /// prefix or empty at its deadline. A newer round with the same key answers the
    /// waiting one empty.
    pub(super) fn poll(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        (client, req_id): (ClientId, u64),
        (key, wait): (u64, bool),
        ask: Ask,
    ) -> Result<(), ClientError> {
        check_prefix(&ask.prefix)?;
        if let Some(old) = self.polls.remove(&key)
            && let Some(w) = self.watches.remove(&(old, key))
        {
            answer_poll(ctx, old, &w, Vec::new(), Vec::new());
        }
        let t = &st.host.data.table.objects;
        let Some(after) = ask.after else {
            let r = Response::Polled {
                revision: t.revision,
                changes: Vec::new(),
                values: Vec::new(),
            };
            st.after_barrier(ctx, client, req_id, Ok(r));
            return Ok(());
        };
        let changes = t.changes_after(&ask.prefix, after)?;
        if !changes.is_empty() || !wait {
            let values = values_of(
                t,
                &changes,
                ask.values,
                ctx.cfg.planted.objects_watch_active_value,
            );
            let r = Response::Polled {
                revision: t.revision.max(after),
                changes,
                values,
            };
            st.after_barrier(ctx, client, req_id, Ok(r));
            return Ok(());
        }
        let w = Watch {
            prefix: ask.prefix,
            last: t.revision.max(after),
            held: st.barrier_version(),
            asked: Some(after),
            values: ask.values,
            poll: Some(Poll {
                req_id,
                deadline: ctx.now + ctx.cfg.timing.lease / 2,
            }),
        };
        self.watches.insert((client, key), w);
        self.polls.insert(key, client);
        Ok(())
    }

    /// Changes were applied: deliver them to the watches, in revision order (a waiting
    /// poll is answered with them and ends).
    pub(crate) fn applied(&mut self, st: &mut StoreAccess<'_>, ctx: &mut Ctx<'_>) {
        let t = &st.host.data.table.objects;
        let confirmed = st.host.data.confirmed;
        let changed = t.revision != self.watched;
        self.watched = t.revision;
        let drop = ctx.cfg.planted.objects_watch_drop;
        let planted = ctx.cfg.planted.objects_watch_active_value;
        let mut ended = Vec::new();
        for ((client, watch), w) in self.watches.iter_mut() {
            if w.held.is_some_and(|v| v > confirmed) {
                continue;
            }
            // Released now: it missed what earlier batches changed.
            let released = w.held.take().is_some();
            if !changed && !released {
                continue;
            }
            match t.changes_after(&w.prefix, w.last) {
                Ok(mut changes) => {
                    if drop {
                        changes.retain(|c| c.revision % 2 == 1);
                    }
                    w.last = t.revision;
                    if changes.is_empty() {
                        continue;
                    }
                    let values = values_of(t, &changes, w.values, planted);
                    if w.poll.is_some() {
                        answer_poll(ctx, *client, w, changes, values);
                        ended.push((*client, *watch));
                    } else {
                        ctx.out.push(Output::ObjectEvents {
                            client: *client,
                            watch: *watch,
                            changes,
                            values,
                        });
                    }
                }
                Err(e) => {
                    ended.push((*client, *watch));
                    end(ctx, (*client, *watch), w, e.into());
                }
            }
        }
        for k in ended {
            self.remove_watch(k);
        }
    }

    fn remove_watch(&mut self, (client, watch): (ClientId, u64)) {
        if let Some(w) = self.watches.remove(&(client, watch))
            && w.poll.is_some()
        {
            self.polls.remove(&watch);
        }
    }

    /// This role stops managing: every watch ends with a redirect (a client resumes at
    /// the new manager from its last revision; a poll's device polls there).
    pub(super) fn end_watches(&mut self, st: &StoreAccess<'_>, ctx: &mut Ctx<'_>) {
        let hint = st.forwarding;
        self.polls.clear();
        for (k, w) in std::mem::take(&mut self.watches) {
            end(ctx, k, &w, ClientError::NotManager { hint });
        }
    }

    /// The earliest deadline of a waiting poll.
    pub(super) fn poll_deadline(&self) -> Option<Instant> {
        (self.polls.iter())
            .filter_map(|(key, c)| self.watches.get(&(*c, *key)))
            .filter_map(|w| w.poll.as_ref().map(|p| p.deadline))
            .min()
    }

    /// Answer the polls past their deadline, empty (their devices poll again).
    pub(super) fn expire_polls(&mut self, ctx: &mut Ctx<'_>) {
        let due: Vec<(ClientId, u64)> = (self.polls.iter())
            .map(|(key, c)| (*c, *key))
            .filter(|k| {
                (self.watches.get(k)).is_some_and(|w| w.poll.is_some_and(|p| p.deadline <= ctx.now))
            })
            .collect();
        for k in due {
            if let Some(w) = self.watches.get(&k) {
                answer_poll(ctx, k.0, w, Vec::new(), Vec::new());
            }
            self.remove_watch(k);
        }
    }
}

/// Answer a waiting poll with `changes` (none: nothing new up to its revision).
fn answer_poll(
    ctx: &mut Ctx<'_>,
    client: ClientId,
    w: &Watch,
    changes: Vec<Change>,
    values: Vec<Option<Bytes>>,
) {
    let Some(p) = w.poll else { return };
    let revision = if changes.is_empty() {
        w.asked.unwrap_or(w.last)
    } else {
        w.last
    };
    let r = Response::Polled {
        revision,
        changes,
        values,
    };
    reply(ctx, client, p.req_id, Ok(r));
}

/// A watch ends for `reason`: pushed to a client's watch, answered to a poll.
fn end(ctx: &mut Ctx<'_>, (client, watch): (ClientId, u64), w: &Watch, reason: ClientError) {
    match w.poll {
        Some(p) => reply(ctx, client, p.req_id, Err(reason)),
        None => ctx.out.push(Output::WatchEnded {
            client,
            watch,
            reason,
        }),
    }
}
