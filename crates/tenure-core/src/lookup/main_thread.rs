//! The seed's main thread for receiving announcements and queries (seed 003): one
//! multicast request arriving at a node, applied to its [`super::entries`] data and, at the
//! leader, answered.

use super::node::Node;
use super::{Durability, LookupError, LookupMsg, LookupRequest, LookupResponse};
use crate::ctx::Ctx;
use crate::ids::DeviceId;
use crate::msg::Msg;

impl Node {
    /// The seed's `main_thread_for_receiving_announcements_and_queries`: one multicast
    /// request arriving at this node. Returns the answer this node gives as leader (a
    /// query, an acknowledged update, an unsubscribe), if any.
    pub(super) fn deliver(
        &mut self,
        ctx: &mut Ctx,
        origin: DeviceId,
        req: &LookupRequest,
    ) -> Option<Result<LookupResponse, LookupError>> {
        let leader = self.is_leader();
        let lid = leader.then(|| self.leader_id());
        let now = ctx.now;
        match req {
            LookupRequest::Get { key } => {
                let lid = lid?;
                let window = ctx.cfg.lookup.adapt.demand_window;
                self.data.count_query(now, window, key);
                let mut entry = self.data.map.get(key).and_then(|e| self.data.view(now, e));
                if ctx.cfg.planted.lookup_fabricated_answer
                    && let Some(e) = &mut entry
                {
                    e.value.push(b'?');
                }
                Some(Ok(LookupResponse::Entry { entry, leader: lid }))
            }
            LookupRequest::List { prefix } => {
                let lid = lid?;
                let entries = self.data.under_prefix(now, prefix);
                Some(Ok(LookupResponse::Entries {
                    entries,
                    leader: lid,
                }))
            }
            LookupRequest::Publish {
                key, durability, ..
            } => {
                if !self.applies_updates() {
                    return None;
                }
                let applied = self.data.publish(ctx, lid, req);
                lid?;
                let meta = applied
                    .as_ref()
                    .ok()
                    .and_then(|_| self.data.meta_for(ctx, key));
                match durability {
                    // `if (bIsLeader && update_needs_acknowledgement) reply(status)`.
                    Durability::Persistent => {
                        Some(applied.map(|_| LookupResponse::Published { acked: true, meta }))
                    }
                    Durability::Volatile => {
                        if let Some(meta) = meta {
                            if origin == self.me {
                                self.data.cache_meta(key.clone(), meta);
                            } else {
                                let key = key.clone();
                                ctx.send(origin, Msg::Lookup(LookupMsg::Meta { key, meta }));
                            }
                        }
                        None
                    }
                }
            }
            LookupRequest::Revoke { durability, .. } => {
                if !self.applies_updates() {
                    return None;
                }
                let applied = self.data.revoke(ctx, lid, req);
                lid?;
                (*durability == Durability::Persistent)
                    .then(|| applied.map(|_| LookupResponse::Revoked { acked: true }))
            }
            LookupRequest::Subscribe { .. } => {
                if self.applies_updates() {
                    self.data.subscribe(ctx, lid, origin, req);
                }
                None
            }
            LookupRequest::Unsubscribe { sub } => {
                // Only the subscription's own origin drops it: a subscriber that moved to
                // another device keeps it when its old stream's end unsubscribes.
                let known = self.applies_updates()
                    && match self.data.subs.get(sub) {
                        Some(s) if s.origin == origin => self.data.subs.remove(sub).is_some(),
                        Some(_) => true,
                        None => false,
                    };
                lid?;
                Some(if known {
                    Ok(LookupResponse::Unsubscribed)
                } else {
                    Err(LookupError::UnknownSubscription(*sub))
                })
            }
            LookupRequest::Status => None,
        }
    }
}
