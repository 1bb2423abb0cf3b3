//! The manager's calls into its objects manager ([`crate::objects::mgr::ObjMgr`]), which
//! sees the manager only through [`StoreAccess`].

use super::*;
use crate::ctx::Ctx;
use crate::ids::{ClientId, DeviceId};
use crate::io::request::ObjectRequest;
use crate::objects::msg::BlockMsg;

impl Manager {
    /// An object request from a client (already known to be the manager with valid
    /// leases).
    pub(crate) fn object_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        req: ObjectRequest,
    ) {
        let (objects, mut st) = self.split();
        objects.request(&mut st, ctx, client, req_id, req);
    }

    /// Block traffic from a chunk of this store.
    pub(crate) fn on_block_msg(&mut self, ctx: &mut Ctx<'_>, from: DeviceId, msg: BlockMsg) {
        let (objects, mut st) = self.split();
        objects.on_block_msg(&mut st, ctx, from, msg);
    }

    /// A batch was applied: watches and collectors.
    pub(super) fn objects_applied(&mut self, ctx: &mut Ctx<'_>) {
        let (objects, mut st) = self.split();
        objects.applied(&mut st, ctx);
    }

    /// The role stops managing.
    pub(super) fn objects_stop(&mut self, ctx: &mut Ctx<'_>) {
        let (objects, mut st) = self.split();
        objects.stop(&mut st, ctx);
    }

    /// A new epoch began under this manager.
    pub(super) fn objects_enter(&mut self, ctx: &Ctx<'_>) {
        let (objects, mut st) = self.split();
        objects.enter(&mut st, ctx);
    }

    /// Fire due object timers.
    pub(super) fn objects_tick(&mut self, ctx: &mut Ctx<'_>) {
        let (objects, mut st) = self.split();
        objects.tick(&mut st, ctx);
    }

    /// The earliest object timer.
    pub(super) fn objects_next_timeout(&self) -> Option<Instant> {
        let managing = self.state() == MgrState::Manager;
        let live = if managing {
            self.live()
        } else {
            BTreeSet::new()
        };
        let attention = !self.host.data.table.objects.attention.is_empty();
        self.objects.next_timeout(managing, &live, attention)
    }
}
