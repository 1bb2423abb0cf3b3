//! Building a world from its configuration: the knobs and every generator, forked from
//! the run seed in a fixed order; the devices with their clocks, wall-clock steps and
//! disks; and the first events. The same code builds a cluster restored from a
//! snapshot's parts.

use super::{
    Event, Faults, Node, RESTORE_LATER_US, RunReport, SAMPLE_US, START_US, SimConfig, World, disk,
    elections, exp, managed, membership, objects, snapshots,
};
use crate::checks::Checker;
use crate::clock::Clock;
use crate::knobs::{DiskKnobs, Knobs, LockKnobs};
use crate::lockcheck::LockChecker;
use crate::net::Network;
use std::collections::{BTreeMap, BTreeSet};
use tenure_core::rng::{Rng, mix64};
use tenure_core::{ClusterConfig, DeviceConfig, DeviceId};

impl World {
    /// Build the world for a configuration (which must be valid, see
    /// [`SimConfig::validate`]).
    pub fn new(cfg: SimConfig) -> World {
        World::build(cfg, None)
    }

    /// Build a world; with `restore`, a cluster booting from a snapshot's parts (see
    /// [`crate::snapshot`]).
    pub(super) fn build(cfg: SimConfig, restore: Option<&crate::snapshot::Cut>) -> World {
        let mut root = Rng::new(mix64(cfg.seed ^ 0x7e4e_5e1d_0000_0001));
        let knobs = Knobs::draw(&mut root, cfg.devices);
        let mut net = Network::new(root.fork(), &knobs);
        net.faults_on = cfg.faults;
        let faults_on = cfg.faults;
        let nemesis_rng = root.fork();
        let workload_rng = root.fork();
        let policy_rng = root.fork();
        let mut clock_rng = root.fork();
        let mut device_rng = root.fork();
        let mut lock_rng = root.fork();
        let mut lock_knobs = LockKnobs::draw(&mut lock_rng, cfg.stores);
        let mut pipe_rng = root.fork();
        lock_knobs.draw_pipelining(&mut pipe_rng, cfg.pipelining);
        let mut obj_rng = root.fork();
        let obj_knobs = crate::objects::ObjectKnobs::draw(&mut obj_rng);
        let mut el_rng = root.fork();
        let el_knobs = crate::election::ElectionKnobs::draw(&mut el_rng);
        let mut snap_rng = root.fork();
        let snap_knobs = crate::snapshot::SnapshotKnobs::draw(&mut snap_rng);
        let mut mem_rng = root.fork();
        let mut mem_knobs = crate::membership::MembershipKnobs::draw(&mut mem_rng);
        if !cfg.faults || !cfg.membership || restore.is_some() {
            mem_knobs.spares = 0;
            mem_knobs.change_mean_us = 0;
        }
        let mut paths_rng = root.fork();
        lock_knobs.draw_paths(&mut paths_rng, cfg.lock_paths);
        let mut disk_rng = root.fork();
        let disk_knobs = DiskKnobs::draw(&mut disk_rng, cfg.disk);
        let mut group_rng = root.fork();
        // Sessions spanning stores need forwarding (the device serving the client
        // reaches each store's manager through it).
        let grouped = group_rng.chance(0.5);
        let mut cluster = ClusterConfig::new(cfg.devices, cfg.stores, cfg.replication);
        if let Some(cut) = restore {
            // A restored cluster is the snapshot's devices (a device whose disk holds no
            // record boots with them as its bootstrap record).
            cluster.devices = cut.parts.keys().copied().collect();
        }
        let bootstrap = tenure_core::election::members::Members::bootstrap(&cluster.devices);
        // Spare devices, started to join: ids above the members'.
        let top = cluster.devices.iter().map(|d| d.0).max().unwrap_or(0);
        let spares: Vec<DeviceId> = (1..=mem_knobs.spares).map(|i| DeviceId(top + i)).collect();
        let timing = tenure_core::Timing::default();
        let skew_max_us = timing.clock_drift.as_micros() as u64 / 2;
        let horizon = START_US + cfg.safety_us + cfg.liveness_us + 1_000_000;
        // A restored cluster's clocks went on after the cut, as the server's wall clocks
        // do: the times in the snapshot's state and in its replayed messages (a recovery
        // lease's expiry) lie in its past. Restarted from zero, a replayed lease taken at
        // 33 s held every chunk of a store for 33 s (sim seeds 42, 46 with 30 s of faults).
        let later_us = restore.map_or(0, |cut| cut.id.serial + RESTORE_LATER_US);
        // Wall-clock steps, from a generator of their own (the seed's other draws are
        // those it made before steps existed).
        let mut step_rng = Rng::new(mix64(cfg.seed ^ 0xc10c_57e9_0000_0001));
        // Forwarding, from a generator of its own too: three runs in four.
        let forward = Rng::new(mix64(cfg.seed ^ 0xf04a_4d00_0000_0001)).below(4) != 0;
        lock_knobs.grouped = grouped && forward;
        let drawn = step_rng.below(3) == 0;
        let stepping = cfg.planted.wall_clock_deadlines
            || (cfg.faults && restore.is_none() && cfg.clock_steps.unwrap_or(drawn));
        let step_limit_us = cfg.safety_us;
        let ttl_us = lock_knobs.ttl_ms * 1000;
        let lease_us = timing.lease.as_micros() as u64;
        let mut nodes = BTreeMap::new();
        let mut drawn_steps = Vec::new();
        for d in cluster.devices.iter().chain(&spares).copied() {
            let mut dc = DeviceConfig::new(d, cluster.clone());
            if spares.contains(&d) {
                dc.join = true;
                dc.cluster.devices.push(d);
            }
            dc.planted = cfg.planted.clone();
            dc.whole_record_every = cfg.whole_record_every;
            dc.objects = World::object_settings(obj_knobs.history, obj_knobs.inline_max);
            dc.election.algorithm = el_knobs.algorithm;
            dc.forward = forward;
            let disk = restore
                .and_then(|c| c.parts.get(&d))
                .map(|p| p.state.clone())
                .unwrap_or_default();
            nodes.insert(
                d,
                Node {
                    device: None,
                    written: disk.clone(),
                    pipe: disk::Pipe::booted(&disk, 0),
                    disk,
                    cfg: dc,
                    clock: {
                        let mut c =
                            Clock::draw(&mut clock_rng, skew_max_us, horizon).later(later_us);
                        // Drawn whether taken or not: the generator serves nothing else,
                        // and the same windows are measured without the steps.
                        let steps = draw_steps(&mut step_rng, step_limit_us, lease_us, ttl_us);
                        if cfg.faults {
                            drawn_steps.extend(steps.iter().map(|&(at, j)| (d.0, at, j)));
                        }
                        if stepping {
                            c = c.later(crate::clock::STEP_LIFT_US);
                            c.steps = steps;
                            c.wall_deadlines = cfg.planted.wall_clock_deadlines;
                        }
                        c
                    },
                    paused_until: None,
                    timer_generation: 0,
                    boot: 0,
                    rng: device_rng.fork(),
                    torn_crash: None,
                    held: None,
                    deferred: Vec::new(),
                    retire_pending: false,
                    retired: false,
                },
            );
        }
        let election = tenure_core::election::ElectionSettings {
            algorithm: el_knobs.algorithm,
            ..Default::default()
        };
        let mut w = World {
            report: RunReport {
                seed: cfg.seed,
                forward,
                knobs: Some(knobs.clone()),
                lock_knobs: Some(lock_knobs.clone()),
                disk_knobs: Some(disk_knobs.clone()),
                object_knobs: cfg.objects.then(|| obj_knobs.clone()),
                election_knobs: Some(el_knobs.clone()),
                snapshot_knobs: restore.is_none().then(|| snap_knobs.clone()),
                membership_knobs: restore.is_none().then(|| mem_knobs.clone()),
                clocks: nodes
                    .iter()
                    .map(|(d, n): (&DeviceId, &Node)| (d.0, n.clock.clone()))
                    .collect(),
                faults: Faults {
                    clock_steps_forward: (nodes.values().flat_map(|n: &Node| &n.clock.steps))
                        .filter(|(_, j)| *j > 0)
                        .count() as u64,
                    clock_steps_back: (nodes.values().flat_map(|n: &Node| &n.clock.steps))
                        .filter(|(_, j)| *j < 0)
                        .count() as u64,
                    ..Faults::default()
                },
                ..RunReport::default()
            },
            clock_drift: timing.clock_drift,
            cfg,
            knobs,
            nemesis_rng,
            workload_rng,
            policy_rng,
            net,
            skew_max_us,
            now: START_US,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            faults_on,
            checker: Checker::default(),
            next_req: 0,
            writes: BTreeMap::new(),
            lock_knobs,
            lock_rng,
            pipe_rng,
            paths_rng,
            disk_knobs,
            disk_rng,
            lock_clients: Vec::new(),
            session_children: Default::default(),
            lock_reqs: BTreeMap::new(),
            locks: LockChecker::default(),
            last_batch: BTreeMap::new(),
            delay: Default::default(),
            obj: objects::ObjectWorld {
                knobs: obj_knobs,
                rng: obj_rng,
                clients: Vec::new(),
                watchers: Vec::new(),
                reqs: BTreeMap::new(),
                check: Default::default(),
                collected: BTreeSet::new(),
                next_watch: 0,
            },
            obj_quiet: false,
            avail: managed::Availability {
                drawn_steps,
                ..Default::default()
            },
            hash: 0xcbf2_9ce4_8422_2325,
            tick: 0,
            delivering: None,
            elections: crate::election::ElectionChecker::new(&election),
            el: elections::ElectionWorld {
                knobs: el_knobs,
                rng: el_rng,
                coord_down: elections::CoordDown::Done,
                disturbed_at: 0,
                converged: false,
            },
            cuts: Default::default(),
            snap: snapshots::SnapshotWorld {
                knobs: snap_knobs,
                rng: snap_rng,
                to_restore: Vec::new(),
                restores_faulty: 0,
                members: BTreeMap::new(),
            },
            restore: restore.map(|_| Default::default()),
            members: crate::membership::MembershipChecker::new(bootstrap),
            mem: membership::MembershipWorld {
                knobs: mem_knobs,
                rng: mem_rng,
                requests: Vec::new(),
            },
        };
        if w.cfg.trace {
            let line = format!("config {:?}", w.cfg);
            w.trace(|| line);
            let line = format!("knobs {:?}", w.knobs);
            w.trace(|| line);
            let line = format!("lock knobs {:?}", w.lock_knobs);
            w.trace(|| line);
            let line = format!("disk knobs {:?}", w.disk_knobs);
            w.trace(|| line);
            if w.cfg.objects {
                let line = format!("object knobs {:?}", w.obj.knobs);
                w.trace(|| line);
            }
            let line = format!("election knobs {:?}", w.el.knobs);
            w.trace(|| line);
            let line = format!("snapshot knobs {:?}", w.snap.knobs);
            w.trace(|| line);
            let line = format!("membership knobs {:?}", w.mem.knobs);
            w.trace(|| line);
            let clocks: Vec<String> = w
                .nodes
                .iter()
                .map(|(d, n)| format!("{d} {:?}", n.clock))
                .collect();
            for c in clocks {
                w.trace(|| format!("clock {c}"));
            }
        }
        w.members.stats.runs_with_spares = (w.mem.knobs.spares > 0) as u64;
        let ids: Vec<DeviceId> = w.nodes.keys().copied().collect();
        for d in ids {
            w.boot(d);
        }
        if let Some(cut) = restore {
            w.deliver_recorded(cut);
            w.schedule(w.now + SAMPLE_US, Event::Sample);
            return w;
        }
        let t = w.exp_nemesis();
        w.schedule(t, Event::Nemesis);
        if let Some(at) = w.cfg.crash_manager_at_us {
            w.schedule(START_US + at, Event::CrashManager);
        }
        if let Some(at) = w.cfg.migrate_manager_apart_at_us {
            w.schedule(START_US + at, Event::MigrateApart);
        }
        if w.cfg.writes {
            let t = w.exp_workload();
            w.schedule(t, Event::Workload);
        }
        let t = w.now + exp(&mut w.policy_rng, w.knobs.policy_mean_us);
        w.schedule(t, Event::Policy);
        w.schedule(w.now + SAMPLE_US, Event::Sample);
        w.start_lock_clients();
        if w.cfg.objects {
            w.start_object_clients();
        }
        if w.cfg.faults {
            let t = w.now + exp(&mut w.snap.rng, w.snap.knobs.mean_us);
            w.schedule(t, Event::Snapshot);
        }
        if w.mem.knobs.change_mean_us > 0 {
            let t = w.now + exp(&mut w.mem.rng, w.mem.knobs.change_mean_us);
            w.schedule(t, Event::MembershipChange);
        }
        w
    }
}

/// A device's wall-clock steps ([`crate::clock`]): one or two in the safety phase, each
/// forward or back by 30 s, an hour, or a length between the lease and three session
/// TTLs.
fn draw_steps(rng: &mut Rng, within_us: u64, lease_us: u64, ttl_us: u64) -> Vec<(u64, i64)> {
    let mut steps: Vec<(u64, i64)> = (0..1 + rng.below(2))
        .map(|_| {
            let at = START_US + rng.below(within_us.max(1));
            let size = match rng.below(3) {
                0 => 30_000_000,
                1 => 3_600_000_000,
                _ => lease_us + rng.below(3 * ttl_us.max(1)),
            } as i64;
            (at, if rng.below(2) == 0 { size } else { -size })
        })
        .collect();
    steps.sort_unstable();
    steps
}
