//! The nemesis: one fault at a time, drawn from the run's seed. Every round is a
//! shuffled permutation of the kinds, so even a short run sees each of them:
//!
//! - `kill`: kill -9 one device, restart it later (same data directory);
//! - `pause`: SIGSTOP one device for longer than the chunk lease, then SIGCONT;
//! - `isolate`: one host drops everything from and to every other host;
//! - `split`: a minority of hosts drops everything from and to the majority;
//! - `one-way`: one host drops what the others send it (or what it sends them);
//! - `loss`: every host drops a share of its peer packets (`numgen random mod 100`);
//! - `delay`: every peer link delays what it carries by 5–200 ms with jitter (the
//!   proxies of [`crate::proxy`]; order within a connection is kept);
//! - `reorder`: every direction of every peer link gets a delay of its own (0–250 ms),
//!   so messages overtake each other across links, and a random link's connection is
//!   cut every 0.4–1.2 s, losing what it carried;
//! - `disk-stall`: one device's reads and writes of its data directory are held in the
//!   kernel ([`crate::disk`]) for longer than the chunk lease, then let through — left
//!   out where disks cannot stall here;
//! - `clock-step`: one device's wall clock steps forward or back by more than the chunk
//!   lease and the session TTL (30 s; one step in four an hour) for the fault's length,
//!   then back to true time; its monotonic clocks do not move ([`crate::clock`]);
//! - `clock-drift`: one device is killed (-9) and restarted with all its clocks running
//!   [`crate::clock::DRIFT_PPM`] fast or slow, within the drift the devices allow for,
//!   and at the fault's end killed and restarted at true rate again.
//!
//! The clock faults are left out where the clock shim (libfaketime) is missing, or
//! when the run turns them off.
//!
//! At most one fault is on at a time, so at most one device (a minority) is down. The
//! clients' traffic from the root namespace is never dropped or delayed: a client beside
//! a partitioned device still reaches it, as a client on the minority side would.

use crate::devices::Devices;
use crate::disk::Disks;
use crate::history::Recorder;
use crate::net::TestNet;
use crate::proxy::{Proxies, Shape};
use std::time::{Duration, Instant};
use tenure_core::rng::Rng;

/// The kinds of fault, in summary order.
pub const KINDS: [&str; 11] = [
    "kill",
    "pause",
    "isolate",
    "split",
    "one-way",
    "loss",
    "delay",
    "reorder",
    "disk-stall",
    "clock-step",
    "clock-drift",
];

/// How long faults last and how far apart they are.
#[derive(Clone, Debug)]
pub struct Pace {
    /// The chunk lease: pauses outlast it.
    pub lease: Duration,
    /// The clients' session TTL: clock steps exceed it and the lease.
    pub ttl: Duration,
    /// A fault lasts this long (ms, inclusive range), pauses aside.
    pub fault_ms: (u64, u64),
    /// Quiet time after each fault (ms, inclusive range).
    pub gap_ms: (u64, u64),
    /// Only these kinds ([`KINDS`]); empty: every kind.
    pub only: Vec<String>,
}

/// What the nemesis acts on.
pub struct Targets<'a> {
    /// The test hosts (nftables rules).
    pub net: &'a TestNet,
    /// The peer-link proxies.
    pub proxies: &'a Proxies,
    /// The devices' disks.
    pub disks: &'a Disks,
    /// The device processes.
    pub devices: &'a mut Devices,
    /// Where faults are recorded.
    pub rec: &'a Recorder,
}

fn ms(rng: &mut Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(lo + rng.below(hi.max(lo) - lo + 1))
}

/// A clock step's size (s): beyond the lease and the TTL — 30 s, or three times the
/// longer of them if that is more — or, one step in four, an hour.
fn step_secs(rng: &mut Rng, pace: &Pace) -> i64 {
    if rng.below(4) == 0 {
        3600
    } else {
        (3 * pace.lease.max(pace.ttl).as_secs()).max(30) as i64
    }
}

/// Inject faults until `until`, then heal everything and restart what is down.
pub async fn run(t: Targets<'_>, mut rng: Rng, until: Instant, pace: Pace) -> anyhow::Result<()> {
    let Targets {
        net,
        proxies,
        disks,
        devices,
        rec,
    } = t;
    let lease = pace.lease;
    let n = devices.len() as u64;
    let all: Vec<u64> = (1..=n).collect();
    let mut round: Vec<&str> = Vec::new();
    // Let the workload start before the first fault.
    tokio::time::sleep(ms(&mut rng, 1000, 2000)).await;
    while Instant::now() + Duration::from_secs(2) < until {
        if round.is_empty() {
            round = (KINDS.iter().copied())
                .filter(|k| *k != "disk-stall" || disks.available())
                .filter(|k| !k.starts_with("clock-") || devices.has_clocks())
                .filter(|k| pace.only.is_empty() || pace.only.iter().any(|o| o == k))
                .collect();
            if round.is_empty() {
                anyhow::bail!(
                    "none of the faults asked for ({:?}) can run here",
                    pace.only
                );
            }
            for i in (1..round.len()).rev() {
                round.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let kind = round.pop().expect("non-empty");
        let target = 1 + rng.below(n);
        let others: Vec<u64> = all.iter().copied().filter(|d| *d != target).collect();
        let left = until.saturating_duration_since(Instant::now());
        let dur = ms(&mut rng, pace.fault_ms.0, pace.fault_ms.1).min(left);
        match kind {
            "kill" => {
                let f = rec.fault(kind, format!("kill -9 d{target}"), vec![target]);
                devices.kill(target)?;
                tokio::time::sleep(dur).await;
                devices.spawn(target)?;
                rec.fault_end(f);
            }
            "pause" => {
                let dur = lease + ms(&mut rng, 500, 3000);
                let f = rec.fault(kind, format!("SIGSTOP d{target} for {dur:?}"), vec![target]);
                devices.pause(target)?;
                tokio::time::sleep(dur).await;
                devices.resume(target)?;
                rec.fault_end(f);
            }
            "isolate" => {
                let f = rec.fault(kind, format!("d{target} | {others:?}"), vec![target]);
                net.set_rules(target, &others, &others, None)?;
                tokio::time::sleep(dur).await;
                net.heal()?;
                rec.fault_end(f);
            }
            "split" => {
                let mut hosts = all.clone();
                for i in (1..hosts.len()).rev() {
                    hosts.swap(i, rng.below(i as u64 + 1) as usize);
                }
                let minority: Vec<u64> = hosts[..((n as usize - 1) / 2).max(1)].to_vec();
                let majority: Vec<u64> = hosts[minority.len()..].to_vec();
                let f = rec.fault(
                    kind,
                    format!("{minority:?} | {majority:?}"),
                    minority.clone(),
                );
                for m in &minority {
                    net.set_rules(*m, &majority, &majority, None)?;
                }
                tokio::time::sleep(dur).await;
                net.heal()?;
                rec.fault_end(f);
            }
            "one-way" => {
                let inbound = rng.below(2) == 0;
                let detail = if inbound {
                    format!("d{target} hears nothing from {others:?}")
                } else {
                    format!("nothing from d{target} reaches {others:?}")
                };
                let f = rec.fault(kind, detail, vec![target]);
                if inbound {
                    net.set_rules(target, &others, &[], None)?;
                } else {
                    net.set_rules(target, &[], &others, None)?;
                }
                tokio::time::sleep(dur).await;
                net.heal()?;
                rec.fault_end(f);
            }
            "disk-stall" => {
                let dur = lease + ms(&mut rng, 500, 3000);
                let f = rec.fault(
                    kind,
                    format!("d{target}'s {} held for {dur:?}", disks.describe(target)),
                    vec![target],
                );
                disks.stall(target)?;
                tokio::time::sleep(dur).await;
                disks.release(target)?;
                rec.fault_end(f);
            }
            "clock-step" => {
                let secs = step_secs(&mut rng, &pace);
                let offset = if rng.below(2) == 0 { secs } else { -secs };
                // The fault counts from when the device surely reads the stepped clock
                // to when it surely reads true time again.
                devices.step_clock(target, offset)?;
                tokio::time::sleep(crate::clock::until_read()).await;
                let f = rec.fault(
                    kind,
                    format!(
                        "d{target} wall clock {}",
                        crate::clock::describe_offset(offset)
                    ),
                    vec![target],
                );
                tokio::time::sleep(dur).await;
                devices.step_clock(target, 0)?;
                tokio::time::sleep(crate::clock::until_read()).await;
                rec.fault_end(f);
            }
            "clock-drift" => {
                let drift = crate::clock::DRIFT_PPM;
                let ppm = if rng.below(2) == 0 { drift } else { -drift };
                let f = rec.fault(
                    kind,
                    format!("d{target} clocks {ppm:+} ppm (restarted)"),
                    vec![target],
                );
                devices.restart_drifting(target, ppm)?;
                tokio::time::sleep(dur).await;
                devices.restart_drifting(target, 0)?;
                rec.fault_end(f);
            }
            "delay" => {
                let base = 5 + rng.below(196);
                let jitter = rng.below(base / 2 + 1);
                let f = rec.fault(
                    kind,
                    format!("every peer link +{base} ms ± {jitter} ms"),
                    all.clone(),
                );
                proxies.set_all(Shape {
                    delay: Duration::from_millis(base),
                    jitter: Duration::from_millis(jitter),
                });
                tokio::time::sleep(dur).await;
                proxies.clear();
                rec.fault_end(f);
            }
            "reorder" => {
                let mut slow = (0, 0, 0);
                for a in 1..=n {
                    for b in (1..=n).filter(|b| *b != a) {
                        let d = rng.below(251);
                        slow = slow.max((d, a, b));
                        proxies.set(
                            a,
                            b,
                            Shape {
                                delay: Duration::from_millis(d),
                                jitter: Duration::from_millis(rng.below(21)),
                            },
                        );
                    }
                }
                let f = rec.fault(
                    kind,
                    format!(
                        "each way 0-250 ms, cuts (d{}->d{} {})",
                        slow.1, slow.2, slow.0
                    ),
                    all.clone(),
                );
                let end = Instant::now() + dur;
                loop {
                    let step = ms(&mut rng, 400, 1200);
                    if Instant::now() + step >= end {
                        break;
                    }
                    tokio::time::sleep(step).await;
                    let a = 1 + rng.below(n);
                    let b = 1 + (a + rng.below(n - 1)) % n;
                    proxies.cut(a, b);
                }
                tokio::time::sleep_until(end.into()).await;
                proxies.clear();
                rec.fault_end(f);
            }
            _ => {
                let pct = 10 + rng.below(31) as u32;
                let f = rec.fault(kind, format!("{pct}% of peer packets dropped"), all.clone());
                for d in &all {
                    net.set_rules(*d, &[], &[], Some(pct))?;
                }
                tokio::time::sleep(dur).await;
                net.heal()?;
                rec.fault_end(f);
            }
        }
        if let Some((id, st)) = devices.exited().into_iter().next() {
            anyhow::bail!(
                "device {id} exited on its own ({st}); see {}",
                devices.log(id).display()
            );
        }
        tokio::time::sleep(ms(&mut rng, pace.gap_ms.0, pace.gap_ms.1)).await;
    }
    Ok(())
}
