//! Lecture §14.3.3 measured (seed 002): messages per election of Tenure's own election
//! machines ([`tenure_core::election::Elector`]), bully and ring, for n = 3…32, with the
//! initiator chosen for the best and the worst case.
//!
//! Each run boots n electors over the simulator's network (one message time of latency
//! plus a seeded jitter), lets the boot elections settle on process n, then starts one
//! election at the chosen initiator and counts what it costs until the system is quiet.
//! Messages are counted the way the simulator counts them on every sweep
//! ([`crate::election::counted_id`]: ELECTION, OK, COORDINATOR, the ring's election and
//! announcement — not heartbeats, not the ring's transport acknowledgements).
//!
//! - Bully (§14.3.1, §14.3.3): the coordinator n has crashed (the lecture's setting, "the
//!   node with the highest ID that is alive"). Best case: n − 1 starts; worst: 1 starts.
//!   Tenure's bully does not know who is alive: the best-case candidate sends ELECTION
//!   to the crashed n, and COORDINATOR to every member, n included. Both counts are
//!   shown: everything sent, and what reached a live process (the lecture's n − 2).
//! - Ring (§14.3.2): every process alive; the election is passed n − 1 times and the
//!   announcement n − 1 times. Each hop is also acknowledged (that is how a dead successor
//!   is detected); the acknowledgements are shown beside the count.

use super::report::{Row, Verdict, median_max, num};
use crate::election::counted_id;
use crate::net::{Fate, NetParams, Network};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tenure_core::election::{Algorithm, ElectionMsg, ElectionSettings, Elector, ElectorOut, Term};
use tenure_core::rng::Rng;
use tenure_core::{DeviceId, Instant};

const EXP: &str = "election";
/// One message time (µs).
const MT: u64 = 1_000;

/// What one election cost.
#[derive(Clone, Copy, Debug, Default)]
struct Cost {
    /// Counted messages sent.
    sent: u64,
    /// Counted messages sent to a live process.
    to_live: u64,
    /// OK messages among them.
    oks: u64,
    /// The ring's acknowledgements (not counted).
    acks: u64,
    /// Whether every live process ended following the highest live id.
    agreed: bool,
}

struct Run {
    now: u64,
    electors: BTreeMap<DeviceId, Elector>,
    crashed: BTreeSet<DeviceId>,
    queue: BTreeMap<(u64, u64), (DeviceId, DeviceId, ElectionMsg)>,
    seq: u64,
    net: Network,
    cost: Cost,
}

impl Run {
    fn new(n: u64, algorithm: Algorithm, seed: u64) -> Run {
        let settings = ElectionSettings {
            algorithm,
            answer_timeout: Duration::from_micros(6 * MT),
            result_timeout: Duration::from_micros((4 * n + 20) * MT),
            // No election starts by itself during a measurement.
            heartbeat: Duration::from_secs(1_000_000),
            ..Default::default()
        };
        let members: Vec<DeviceId> = (1..=n).map(DeviceId).collect();
        let params = NetParams {
            latency_min_us: MT,
            latency_max_us: MT + MT / 2,
            slow_p: 0.0,
            slow_us: 0,
            loss: 0.0,
            duplicate: 0.0,
        };
        let mut r = Run {
            now: 0,
            electors: BTreeMap::new(),
            crashed: BTreeSet::new(),
            queue: BTreeMap::new(),
            seq: 0,
            net: Network::with_params(Rng::new(seed), &params),
            cost: Cost::default(),
        };
        for m in &members {
            let e = Elector::new(
                *m,
                members.clone(),
                [],
                settings.clone(),
                Term::default(),
                Instant(0),
            );
            r.electors.insert(*m, e);
            r.drain(*m);
        }
        r
    }

    fn drain(&mut self, id: DeviceId) {
        while let Some(o) = self.electors.get_mut(&id).and_then(|e| e.poll_output()) {
            let ElectorOut::Send { to, msg } = o else {
                continue;
            };
            if counted_id(&msg).is_some() {
                self.cost.sent += 1;
                if !self.crashed.contains(&to) {
                    self.cost.to_live += 1;
                }
                if matches!(msg, ElectionMsg::Ok { .. }) {
                    self.cost.oks += 1;
                }
            } else if matches!(msg, ElectionMsg::RingAck { .. }) {
                self.cost.acks += 1;
            }
            if let Fate::Deliver(times) = self.net.send(self.now, id, to) {
                for at in times {
                    self.seq += 1;
                    self.queue.insert((at, self.seq), (id, to, msg.clone()));
                }
            }
        }
    }

    fn electing(&self) -> bool {
        (self.electors.iter()).any(|(id, e)| !self.crashed.contains(id) && e.electing())
    }

    /// Deliver and fire timers until no message is in flight and no election runs.
    fn settle(&mut self) {
        let limit = self.now + 1_000_000 * MT;
        while (!self.queue.is_empty() || self.electing()) && self.now < limit {
            let next_msg = self.queue.keys().next().map(|k| k.0);
            let next_timer = (self.electors.iter())
                .filter(|(id, _)| !self.crashed.contains(id))
                .filter_map(|(_, e)| e.poll_timeout().map(|t| t.0))
                .min();
            let t = [next_msg, next_timer]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(limit);
            self.now = self.now.max(t);
            if next_msg == Some(t) {
                let (_, (from, to, msg)) = self.queue.pop_first().expect("message");
                if let Some(e) = self
                    .electors
                    .get_mut(&to)
                    .filter(|_| !self.crashed.contains(&to))
                {
                    e.handle_msg(Instant(self.now), from, msg);
                    self.drain(to);
                }
            } else {
                let due: Vec<DeviceId> = (self.electors.iter())
                    .filter(|(id, e)| {
                        !self.crashed.contains(id) && e.poll_timeout().is_some_and(|x| x.0 <= t)
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for id in due {
                    self.electors
                        .get_mut(&id)
                        .expect("elector")
                        .handle_timeout(Instant(t));
                    self.drain(id);
                }
            }
        }
    }

    /// One election started by `initiator`, after the boot elections settled and with
    /// `crashed` down.
    fn measure(mut self, initiator: DeviceId, crashed: &[DeviceId]) -> Cost {
        self.settle();
        self.crashed.extend(crashed.iter().copied());
        self.cost = Cost::default();
        let now = Instant(self.now);
        self.electors
            .get_mut(&initiator)
            .expect("initiator")
            .start_election(now);
        self.drain(initiator);
        self.settle();
        let top = (self.electors.keys().rev())
            .find(|d| !self.crashed.contains(d))
            .copied();
        self.cost.agreed = (self.electors.iter())
            .filter(|(id, _)| !self.crashed.contains(id))
            .all(|(_, e)| e.coordinator().map(|t| t.leader) == top);
        self.cost
    }
}

/// Bully with the coordinator n crashed, and ring with everyone alive, started by the
/// best and the worst initiator: per n, the costs over the sim seeds.
struct Measured {
    bully_best: Vec<Cost>,
    bully_worst: Vec<Cost>,
    ring_high: Vec<Cost>,
    ring_low: Vec<Cost>,
}

fn measure(n: u64, seeds: u64) -> Measured {
    let mut m = Measured {
        bully_best: Vec::new(),
        bully_worst: Vec::new(),
        ring_high: Vec::new(),
        ring_low: Vec::new(),
    };
    let top = [DeviceId(n)];
    for seed in 0..seeds {
        let s = tenure_core::rng::mix64(seed ^ n);
        m.bully_best
            .push(Run::new(n, Algorithm::Bully, s).measure(DeviceId(n - 1), &top));
        m.bully_worst
            .push(Run::new(n, Algorithm::Bully, s).measure(DeviceId(1), &top));
        m.ring_high
            .push(Run::new(n, Algorithm::Ring, s).measure(DeviceId(n), &[]));
        m.ring_low
            .push(Run::new(n, Algorithm::Ring, s).measure(DeviceId(1), &[]));
    }
    m
}

fn vals(c: &[Cost], f: impl Fn(&Cost) -> u64) -> Vec<f64> {
    c.iter().map(|c| f(c) as f64).collect()
}

fn row(what: String, paper: String, v: &[f64], verdict: Verdict, note: String) -> Row {
    super::report::measured(EXP, what, paper, v, verdict, note)
}

/// The rows: per n in `shown`, and a summary over every n in `sizes`.
pub fn rows(sizes: &[u64], shown: &[u64], seeds: u64) -> Vec<Row> {
    let mut out = Vec::new();
    let (mut best_ok, mut worst_ok, mut ring_ok) = (0, 0, 0);
    let mut worst_median: Vec<(u64, f64)> = Vec::new();
    for &n in sizes {
        let m = measure(n, seeds);
        let agreed = |c: &[Cost]| c.iter().all(|c| c.agreed);
        let live = vals(&m.bully_best, |c| c.to_live);
        let best = agreed(&m.bully_best) && live.iter().all(|v| *v == (n - 2) as f64);
        let worst_v = vals(&m.bully_worst, |c| c.sent);
        let worst = agreed(&m.bully_worst) && worst_v.iter().all(|v| *v <= (n * n) as f64);
        let ring: Vec<f64> = vals(&m.ring_high, |c| c.sent)
            .into_iter()
            .chain(vals(&m.ring_low, |c| c.sent))
            .collect();
        let ring_match = agreed(&m.ring_high)
            && agreed(&m.ring_low)
            && ring.iter().all(|v| *v == (2 * (n - 1)) as f64);
        best_ok += best as u64;
        worst_ok += worst as u64;
        ring_ok += ring_match as u64;
        worst_median.push((n, median_max(&worst_v).0));
        if !shown.contains(&n) {
            continue;
        }
        let sent = median_max(&vals(&m.bully_best, |c| c.sent));
        out.push(row(
            format!("bully, n={n}: best case (n−1 starts, n crashed)"),
            format!("n−2 = {}", n - 2),
            &live,
            if best { Verdict::Matches } else { Verdict::Fails },
            format!(
                "counted to live processes; sent {} (ELECTION to the crashed n, COORDINATOR to every member)",
                num(sent.1)
            ),
        ));
        let no_ok = median_max(&vals(&m.bully_worst, |c| c.sent - c.oks));
        out.push(row(
            format!("bully, n={n}: worst case (1 starts, n crashed)"),
            format!("O(n²), n² = {}", n * n),
            &worst_v,
            if worst {
                Verdict::WithinBound
            } else {
                Verdict::Fails
            },
            format!("with OK replies; without them median {}", num(no_ok.0)),
        ));
        let acks = median_max(&vals(&m.ring_low, |c| c.acks));
        out.push(row(
            format!("ring, n={n}: highest or lowest starts"),
            format!("2(n−1) = {}", 2 * (n - 1)),
            &ring,
            if ring_match {
                Verdict::Matches
            } else {
                Verdict::Fails
            },
            format!(
                "plus {} hop acknowledgements, not counted by the lecture",
                num(acks.0)
            ),
        ));
    }
    let (lo, hi) = (sizes.first().copied(), sizes.last().copied());
    if let (Some(lo), Some(hi)) = (lo, hi) {
        let k = sizes.len() as f64;
        let range = format!("n={lo}…{hi}");
        out.push(summary(
            format!("bully best case, {range}: sizes matching n−2"),
            k,
            best_ok,
        ));
        out.push(summary(
            format!("bully worst case, {range}: sizes within n²"),
            k,
            worst_ok,
        ));
        out.push(summary(
            format!("ring, {range}: sizes matching 2(n−1)"),
            k,
            ring_ok,
        ));
        out.push(growth(&range, &worst_median));
    }
    out
}

fn summary(what: String, k: f64, ok: u64) -> Row {
    let v = [ok as f64];
    let verdict = if ok as f64 == k {
        Verdict::Matches
    } else {
        Verdict::Fails
    };
    row(
        what,
        num(k),
        &v,
        verdict,
        "every sim seed of every size".into(),
    )
}

/// The growth exponent of bully's worst case: slope of log(messages) against log(n)
/// between the middle and the largest n (quadratic growth tends to 2, linear to 1,
/// cubic to 3).
fn growth(range: &str, medians: &[(u64, f64)]) -> Row {
    let (Some(a), Some(b)) = (medians.get(medians.len() / 2), medians.last()) else {
        return summary("bully worst case growth".into(), 1.0, 0);
    };
    let slope = (b.1.ln() - a.1.ln()) / ((b.0 as f64).ln() - (a.0 as f64).ln());
    let slope = (slope * 100.0).round() / 100.0;
    let ok = (1.5..=2.5).contains(&slope);
    row(
        format!("bully worst case, {range}: growth exponent"),
        "2 (O(n²))".into(),
        &[slope],
        if ok {
            Verdict::WithinBound
        } else {
            Verdict::Fails
        },
        format!(
            "slope of log(messages) over log(n), n={}…{}; accepted 1.5 to 2.5",
            a.0, b.0
        ),
    )
}
