//! One device's snapshots (see the module documentation of [`crate::snapshot`]).

use super::{SnapMsg, SnapshotId, SnapshotPart, SnapshotSettings};
use crate::ids::DeviceId;
use crate::io::Output;
use crate::io::persist::DevicePersist;
use crate::io::persist::PersistOp;
use crate::msg::Msg;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Snapshots finished here that are remembered, so a late marker is answered and not
/// taken for a new snapshot.
const FINISHED_KEPT: usize = 256;

/// Snapshots recorded here that are remembered durably ([`PersistOp::SetSnapshots`]).
const RECORDED_KEPT: usize = 64;

/// The answer a device sent its predecessor when it finished a snapshot (Done or
/// Continue), sent again if the predecessor's marker comes again: the first answer may
/// have been lost, and the marker (a tag) comes again only because the predecessor has
/// not heard from this device.
type Answer = Option<(DeviceId, SnapMsg<Msg>)>;

/// One device's snapshot machine: every snapshot it takes part in.
#[derive(Clone, Debug, Default)]
pub struct Snapshots {
    last_serial: u64,
    active: BTreeMap<SnapshotId, Local>,
    finished: BTreeMap<SnapshotId, Answer>,
    finished_order: VecDeque<SnapshotId>,
    /// The snapshots recorded here, newest last, as stored durably.
    recorded: VecDeque<SnapshotId>,
    /// Snapshots recorded before the device last restarted: their recording (the
    /// channels, the part not yet written) was lost with the crash, and the state now
    /// reflects messages received after the cut, so they are never recorded again.
    earlier: BTreeSet<SnapshotId>,
    /// Planted bug (tests only): record the state after the message carrying a tag is
    /// processed, not before.
    pub plant_record_late: bool,
}

/// What a device knows of one snapshot it recorded.
#[derive(Clone, Debug)]
struct Local {
    /// When it recorded (local clock).
    recorded_at: Instant,
    /// Where its first marker came from (none at the initiator).
    pred: Option<DeviceId>,
    /// The recorded state, until the part leaves.
    state: Option<DevicePersist>,
    /// Incoming channels still recording.
    open: BTreeSet<DeviceId>,
    /// Messages recorded per incoming channel.
    channels: BTreeMap<DeviceId, Vec<Msg>>,
    /// Peers that have not acknowledged the marker: messages to them are tagged.
    unacked: BTreeSet<DeviceId>,
    /// Peers sent a marker that have not answered Done, Continue or NotSuccessor.
    awaiting: BTreeSet<DeviceId>,
    /// Devices of this subtree that finished.
    devices: BTreeSet<DeviceId>,
    /// The devices this one recorded with: its peers and itself.
    view: BTreeSet<DeviceId>,
    /// Whether every successor answered Done.
    all_done: bool,
    /// Index in the current batch's outputs where the recording happened: sends before
    /// it are before the cut and are not tagged (0 once the batch is over).
    tag_from: usize,
}

impl Snapshots {
    /// Start a snapshot at this device (the initiator), recording `state` now.
    pub fn start(
        &mut self,
        now: Instant,
        me: DeviceId,
        peers: &[DeviceId],
        state: DevicePersist,
        out: &mut Vec<Output>,
    ) -> SnapshotId {
        self.last_serial = (self.last_serial + 1).max(now.0);
        let id = SnapshotId {
            initiator: me,
            serial: self.last_serial,
        };
        self.record(now, me, id, None, peers, state, out);
        self.check(id, me, out);
        id
    }

    /// The machine of a device booting with `recorded` on disk (the snapshots it
    /// recorded in earlier lives).
    pub fn boot(recorded: Vec<SnapshotId>) -> Snapshots {
        Snapshots {
            // Serials go on above every snapshot recorded here before: a clock read from
            // an earlier origin after a restart (DESIGN §3, "Clocks") must not give a new
            // snapshot the id of one this device recorded in an earlier life.
            last_serial: recorded.iter().map(|s| s.serial).max().unwrap_or(0),
            earlier: recorded.iter().copied().collect(),
            recorded: recorded.into(),
            ..Snapshots::default()
        }
    }

    /// The snapshots recorded here, newest last (what is on disk).
    pub fn recorded(&self) -> Vec<SnapshotId> {
        self.recorded.iter().copied().collect()
    }

    /// Whether this device has recorded `id` already (it is running or finished here,
    /// or was recorded before a restart): its state is not needed for a marker of `id`.
    pub fn knows(&self, id: SnapshotId) -> bool {
        self.active.contains_key(&id)
            || self.finished.contains_key(&id)
            || self.earlier.contains(&id)
    }

    /// Whether `id` is being recorded here.
    pub fn is_active(&self, id: SnapshotId) -> bool {
        self.active.contains_key(&id)
    }

    /// Snapshots in progress here.
    pub fn active(&self) -> impl Iterator<Item = SnapshotId> + '_ {
        self.active.keys().copied()
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        now: Instant,
        me: DeviceId,
        id: SnapshotId,
        pred: Option<DeviceId>,
        peers: &[DeviceId],
        state: DevicePersist,
        out: &mut Vec<Output>,
    ) {
        out.push(Output::Observe(
            crate::io::observation::Observation::SnapshotRecorded { id },
        ));
        // Durable before the markers leave: a restart never records `id` again.
        self.recorded.push_back(id);
        if self.recorded.len() > RECORDED_KEPT {
            self.recorded.pop_front();
        }
        out.push(Output::Persist(PersistOp::SetSnapshots(self.recorded())));
        let peers: BTreeSet<DeviceId> = peers.iter().copied().collect();
        for p in &peers {
            out.push(Output::Send {
                to: *p,
                msg: Msg::Snapshot(SnapMsg::Marker { id }),
            });
        }
        let mut open = peers.clone();
        // The first marker starts the recording and closes its own channel.
        if let Some(p) = pred {
            open.remove(&p);
        }
        self.active.insert(
            id,
            Local {
                recorded_at: now,
                pred,
                state: Some(state),
                open,
                channels: BTreeMap::new(),
                unacked: peers.clone(),
                awaiting: peers.clone(),
                devices: BTreeSet::new(),
                view: peers.iter().copied().chain([me]).collect(),
                all_done: true,
                tag_from: out.len(),
            },
        );
    }

    /// A marker (or a tag) of `id` from `from`. `state` is the device's persistent state,
    /// needed (and recorded) only if this is the device's first marker of `id`
    /// ([`Self::knows`]).
    #[allow(clippy::too_many_arguments)]
    pub fn on_marker(
        &mut self,
        now: Instant,
        me: DeviceId,
        peers: &[DeviceId],
        from: DeviceId,
        id: SnapshotId,
        state: Option<DevicePersist>,
        out: &mut Vec<Output>,
    ) {
        out.push(Output::Send {
            to: from,
            msg: Msg::Snapshot(SnapMsg::MarkerAck { id }),
        });
        match self.active.get_mut(&id) {
            None if self.finished.contains_key(&id) => {
                // The predecessor is still waiting for this device's answer (it was lost);
                // anyone else learns this device is not its successor.
                let msg = match &self.finished[&id] {
                    Some((pred, answer)) if *pred == from => answer.clone(),
                    _ => SnapMsg::NotSuccessor { id },
                };
                out.push(Output::Send {
                    to: from,
                    msg: Msg::Snapshot(msg),
                });
            }
            None if self.earlier.contains(&id) => {
                // Recorded before a restart, and that recording is lost: the snapshot
                // cannot complete.
                self.give_up(me, peers, from, id, out);
            }
            None => {
                if !peers.contains(&from) {
                    return;
                }
                let Some(state) = state else {
                    return;
                };
                self.record(now, me, id, Some(from), peers, state, out);
            }
            Some(l) => {
                // A marker after the first only stops its channel (the first one's channel
                // is closed already, so a duplicate or a repeated tag changes nothing).
                if l.open.remove(&from) {
                    out.push(Output::Send {
                        to: from,
                        msg: Msg::Snapshot(SnapMsg::NotSuccessor { id }),
                    });
                }
            }
        }
        self.check(id, me, out);
    }

    /// A regular message from `from`, before the device processes it: recorded on every
    /// snapshot whose channel from `from` is open.
    pub fn on_regular(&mut self, from: DeviceId, msg: &Msg) {
        for l in self.active.values_mut() {
            if l.open.contains(&from) {
                l.channels.entry(from).or_default().push(msg.clone());
            }
        }
    }

    /// Any other snapshot message.
    pub fn on_msg(
        &mut self,
        me: DeviceId,
        from: DeviceId,
        msg: SnapMsg<Msg>,
        out: &mut Vec<Output>,
    ) {
        let id = match msg {
            SnapMsg::MarkerAck { id } => {
                if let Some(l) = self.active.get_mut(&id) {
                    l.unacked.remove(&from);
                }
                return;
            }
            SnapMsg::Done {
                id,
                ref devices,
                ref view,
            }
            | SnapMsg::Continue {
                id,
                ref devices,
                ref view,
            } => {
                let cont = matches!(msg, SnapMsg::Continue { .. });
                let Some(l) = self.active.get_mut(&id) else {
                    return;
                };
                if !l.awaiting.remove(&from) {
                    return;
                }
                if !view.iter().copied().eq(l.view.iter().copied()) {
                    let names = |v: &mut dyn Iterator<Item = &DeviceId>| {
                        v.map(|d| d.0.to_string()).collect::<Vec<_>>().join(", ")
                    };
                    let why = format!(
                        "device {} recorded it with devices {{{}}}, device {} with {{{}}}: the membership changed",
                        from.0,
                        names(&mut view.iter()),
                        me.0,
                        names(&mut l.view.iter())
                    );
                    self.fail(me, id, why, out);
                    return;
                }
                l.devices.extend(devices.iter().copied());
                l.all_done &= !cont;
                id
            }
            SnapMsg::NotSuccessor { id } => {
                if let Some(l) = self.active.get_mut(&id) {
                    l.awaiting.remove(&from);
                }
                id
            }
            SnapMsg::Abort { id } => {
                self.fail(me, id, format!("device {} gave up on it", from.0), out);
                return;
            }
            SnapMsg::Marker { .. } | SnapMsg::Tagged { .. } => return,
        };
        self.check(id, me, out);
    }

    /// Emit the part once every incoming channel is closed, and answer the predecessor
    /// (or, at the initiator, report the result) once every peer has answered.
    fn check(&mut self, id: SnapshotId, me: DeviceId, out: &mut Vec<Output>) {
        let Some(l) = self.active.get_mut(&id) else {
            return;
        };
        if !l.open.is_empty() {
            return;
        }
        if let Some(state) = l.state.take() {
            // Durable (the driver writes it) before the answer below leaves.
            out.push(Output::SnapshotPart(Box::new(SnapshotPart {
                id,
                device: me,
                state,
                channels: l.channels.clone(),
            })));
        }
        if !l.awaiting.is_empty() {
            return;
        }
        let l = self.active.remove(&id).expect("active");
        let quiet = l.channels.values().all(Vec::is_empty);
        let mut devices = l.devices;
        devices.insert(me);
        let devices: Vec<DeviceId> = devices.into_iter().collect();
        let done = l.all_done && quiet;
        let view: Vec<DeviceId> = l.view.into_iter().collect();
        let answer = match l.pred {
            Some(p) => {
                let msg = if done {
                    SnapMsg::Done { id, devices, view }
                } else {
                    SnapMsg::Continue { id, devices, view }
                };
                out.push(Output::Send {
                    to: p,
                    msg: Msg::Snapshot(msg.clone()),
                });
                Some((p, msg))
            }
            None => {
                out.push(Output::SnapshotEnded {
                    id,
                    result: Ok(crate::io::SnapshotSummary {
                        devices,
                        terminated: done,
                    }),
                });
                None
            }
        };
        self.remember(id, answer);
    }

    /// A message tagged with snapshot `id` came from a device that is not a peer here
    /// (this device's record does not list it yet). The message was sent after its
    /// sender's cut, and this device processes it without recording — no peer of this
    /// device recorded it — so a later marker must not make it record: its state would
    /// hold a message the cut says was never sent (simulator seed 1565: a coordinator
    /// this device's record did not list yet sent it a tagged membership record).
    pub fn on_tag_from_outside(
        &mut self,
        me: DeviceId,
        peers: &[DeviceId],
        from: DeviceId,
        id: SnapshotId,
        out: &mut Vec<Output>,
    ) {
        out.push(Output::Send {
            to: from,
            msg: Msg::Snapshot(SnapMsg::MarkerAck { id }),
        });
        if !self.knows(id) {
            self.give_up(me, peers, from, id, out);
        }
    }

    /// This device cannot take part in snapshot `id`: it remembers the snapshot as
    /// finished without a part, and the sender and the initiator are told to give up.
    fn give_up(
        &mut self,
        me: DeviceId,
        peers: &[DeviceId],
        from: DeviceId,
        id: SnapshotId,
        out: &mut Vec<Output>,
    ) {
        self.remember(id, None);
        let initiator = Some(id.initiator).filter(|i| *i != from);
        for to in std::iter::once(from).chain(initiator) {
            if to != me && (to == from || peers.contains(&to)) {
                out.push(Output::Send {
                    to,
                    msg: Msg::Snapshot(SnapMsg::Abort { id }),
                });
            }
        }
    }

    fn remember(&mut self, id: SnapshotId, answer: Answer) {
        if self.finished.insert(id, answer).is_none() {
            self.finished_order.push_back(id);
            if self.finished_order.len() > FINISHED_KEPT
                && let Some(old) = self.finished_order.pop_front()
            {
                self.finished.remove(&old);
            }
        }
    }

    /// Give up on snapshot `id` here; the initiator reports the failure.
    fn fail(&mut self, me: DeviceId, id: SnapshotId, why: String, out: &mut Vec<Output>) {
        let Some(l) = self.active.remove(&id) else {
            return;
        };
        self.remember(id, None);
        // Everyone still waiting on this device stops too.
        for p in l.awaiting.iter().chain(l.pred.iter()) {
            out.push(Output::Send {
                to: *p,
                msg: Msg::Snapshot(SnapMsg::Abort { id }),
            });
        }
        if id.initiator == me {
            out.push(Output::SnapshotEnded {
                id,
                result: Err(why),
            });
        }
    }

    /// The earliest deadline.
    pub fn next_timeout(&self, settings: &SnapshotSettings) -> Option<Instant> {
        (self.active.values())
            .map(|l| l.recorded_at + settings.timeout)
            .min()
    }

    /// Fail every snapshot that did not finish in time.
    pub fn on_tick(
        &mut self,
        now: Instant,
        me: DeviceId,
        settings: &SnapshotSettings,
        out: &mut Vec<Output>,
    ) {
        let late: Vec<(SnapshotId, Vec<DeviceId>)> = (self.active.iter())
            .filter(|(_, l)| l.recorded_at + settings.timeout <= now)
            .map(|(id, l)| (*id, l.open.union(&l.awaiting).copied().collect()))
            .collect();
        for (id, silent) in late {
            let names: Vec<String> = silent.iter().map(|d| d.0.to_string()).collect();
            let why = format!(
                "no answer within {:?} from device(s) {}",
                settings.timeout,
                names.join(", ")
            );
            self.fail(me, id, why, out);
        }
    }

    /// At the end of a batch: tag the messages of `out` that go to peers which have not acknowledged
    /// the marker of a snapshot recorded here (see the module documentation).
    pub fn tag(&mut self, out: &mut [Output]) {
        if self.active.values().all(|l| l.unacked.is_empty()) {
            return;
        }
        for (i, o) in out.iter_mut().enumerate() {
            let Output::Send { to, msg } = o else {
                continue;
            };
            if matches!(msg, Msg::Snapshot(_)) {
                continue;
            }
            let ids: Vec<SnapshotId> = (self.active.iter())
                .filter(|(_, l)| i >= l.tag_from && l.unacked.contains(to))
                .map(|(id, _)| *id)
                .collect();
            if ids.is_empty() {
                continue;
            }
            let inner = std::mem::replace(msg, Msg::Snapshot(SnapMsg::Abort { id: ids[0] }));
            *msg = Msg::Snapshot(SnapMsg::Tagged {
                ids,
                msg: Box::new(inner),
            });
        }
        for l in self.active.values_mut() {
            l.tag_from = 0;
        }
    }
}
