//! The events of the world's queue: the device each one is an input to (a paused device
//! defers those) and the tag each one mixes into the run's fingerprint.

use tenure_core::DeviceId;
use tenure_core::io::PolicyCommand;
use tenure_core::lockctl::SessionId;
use tenure_core::msg::Msg;

/// An event of the world's queue.
#[derive(Clone, Debug)]
pub(super) enum Event {
    Deliver {
        from: DeviceId,
        to: DeviceId,
        boot: u64,
        /// The message's number on its channel (0: a snapshot protocol message).
        seq: u64,
        msg: Box<Msg>,
    },
    ClientArrive {
        req: u64,
        to: DeviceId,
        boot: u64,
    },
    ClientTimeout {
        req: u64,
        attempt: u32,
    },
    PolicyArrive {
        to: DeviceId,
        boot: u64,
        cmd: PolicyCommand,
    },
    Timer {
        device: DeviceId,
        generation: u64,
    },
    Nemesis,
    Workload,
    Policy,
    Restart(DeviceId),
    Resume(DeviceId),
    HealPartition(u64),
    Sample,
    LockStep(usize),
    LockArrive {
        req: u64,
        to: DeviceId,
        boot: u64,
    },
    LockTimeout {
        req: u64,
        attempt: u32,
    },
    KeepAliveDue(usize, SessionId),
    ClientDeadline(usize, SessionId),
    ClientResume(usize),
    ObjStep(usize),
    ObjArrive {
        req: u64,
        to: DeviceId,
        boot: u64,
    },
    ObjTimeout {
        req: u64,
        attempt: u32,
    },
    ObjKeepAlive(usize, SessionId),
    WatchCheck(usize),
    /// Start a snapshot at a random running device (while faults are on).
    Snapshot,
    /// The operator asks for a membership change (while faults are on).
    MembershipChange,
    /// The operator repeats membership request `i` unless the record shows it.
    MembershipRepeat(usize),
    /// Crash the manager of store 0 ([`SimConfig::crash_manager_at_us`]).
    CrashManager,
    /// Migrate the manager of store 0 off its chunks
    /// ([`SimConfig::migrate_manager_apart_at_us`]).
    MigrateApart,
    /// A commit of a device's disk is durable ([`disk`]).
    DiskSynced {
        device: DeviceId,
        boot: u64,
        commit: u64,
    },
}

impl Event {
    /// The device an event is an input to (paused devices defer these).
    pub(super) fn target(&self) -> Option<DeviceId> {
        match self {
            Event::Deliver { to, .. }
            | Event::ClientArrive { to, .. }
            | Event::LockArrive { to, .. }
            | Event::ObjArrive { to, .. }
            | Event::PolicyArrive { to, .. } => Some(*to),
            Event::Timer { device, .. } | Event::DiskSynced { device, .. } => Some(*device),
            _ => None,
        }
    }

    /// What the event mixes into the run's fingerprint (with its time).
    pub(super) fn tag(&self) -> u64 {
        match self {
            Event::Deliver { from, to, .. } => 1 | from.0 << 8 | to.0 << 24,
            Event::ClientArrive { req, to, .. } => 2 | to.0 << 8 | req << 24,
            Event::ClientTimeout { req, .. } => 3 | req << 8,
            Event::PolicyArrive { to, .. } => 4 | to.0 << 8,
            Event::Timer { device, .. } => 5 | device.0 << 8,
            Event::Nemesis => 6,
            Event::Workload => 7,
            Event::Policy => 8,
            Event::Restart(d) => 9 | d.0 << 8,
            Event::Resume(d) => 10 | d.0 << 8,
            Event::HealPartition(id) => 11 | id << 8,
            Event::Sample => 12,
            Event::LockStep(c) => 13 | (*c as u64) << 8,
            Event::LockArrive { req, to, .. } => 14 | to.0 << 8 | req << 24,
            Event::LockTimeout { req, .. } => 15 | req << 8,
            Event::KeepAliveDue(c, s) => 16 | (*c as u64) << 8 | s.0 << 24,
            Event::ClientDeadline(c, s) => 17 | (*c as u64) << 8 | s.0 << 24,
            Event::ClientResume(c) => 18 | (*c as u64) << 8,
            Event::ObjStep(c) => 19 | (*c as u64) << 8,
            Event::ObjArrive { req, to, .. } => 20 | to.0 << 8 | req << 24,
            Event::ObjTimeout { req, .. } => 21 | req << 8,
            Event::ObjKeepAlive(c, s) => 22 | (*c as u64) << 8 | s.0 << 24,
            Event::WatchCheck(w) => 23 | (*w as u64) << 8,
            Event::Snapshot => 24,
            Event::MembershipChange => 25,
            Event::MembershipRepeat(i) => 26 | (*i as u64) << 8,
            Event::CrashManager => 27,
            Event::MigrateApart => 28,
            Event::DiskSynced { device, commit, .. } => 29 | device.0 << 8 | commit << 24,
        }
    }
}
