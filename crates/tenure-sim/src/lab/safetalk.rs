//! SafeTalk against two-phase commit (seed 004 §3) and Menasce's update cost (seed 004
//! §8), measured by running Tenure's store and lock service in the simulator.
//!
//! Each run is a calm simulator run ([`crate::world`], faults off) of `k` devices with
//! stores of `k` chunks, under the seed's lock workload; the simulator counts every
//! SafeTalk message a manager exchanges with a chunk on another device
//! ([`crate::world::SafeTalkCost`]: ACCEPT, ACCEPTED, standalone CONFIRM). With one chunk
//! per device, every manager holds one chunk of its store: the LC is among the k sites.
//!
//! - Per update and remote participant SafeTalk costs ACCEPT, ACCEPTED, CONFIRM — 3 —
//!   and less when the CONFIRM rides on the next ACCEPT (Tenure piggybacks it when
//!   another batch follows). Two-phase commit costs 4: measured from a run of the small
//!   machine in [`super::twopc`].
//! - C_updt (§8) = (3k − 1)M with the LC among the k sites: 3 messages per remote site
//!   and the application's request and answer. The request and answer cross between a
//!   client and the manager, outside the device network the simulator counts, so they
//!   are added as 2. An update is one ACCEPT round to the k − 1 remote chunks (one chunk
//!   per device, the manager's own is local), costing the measured messages per ACCEPT
//!   and remote chunk; Tenure commits a group of changes per round (group commit), which
//!   Menasce's model, one change per round, does not. The (3k + 2)M case (LC at none of the k sites) needs a manager on a
//!   device without a chunk of its store, which this run does not arrange: not measured.

use super::report::{Row, Verdict, measured, median_max, num};
use super::twopc;
use crate::world::{SafeTalkCost, SimConfig, run};

const EXP: &str = "safetalk";
const EXP_UPDATE: &str = "update";

/// One calm run with stores of `k` chunks on `k` devices.
fn cost(k: u64, seed: u64) -> SafeTalkCost {
    let mut c = SimConfig::new(seed);
    c.devices = k;
    c.stores = 4;
    c.replication = k as usize;
    c.safety_us = 5_000_000;
    c.liveness_us = 5_000_000;
    c.faults = false;
    c.objects = false;
    c.membership = false;
    c.writes = false;
    run(c).safetalk
}

/// SafeTalk vs two-phase commit, stores of `k` chunks.
pub fn rows(k: u64, seeds: u64) -> Vec<Row> {
    let (mut per, mut standalone, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    let tpc = twopc::messages_for_one_update(k) as f64 / k as f64;
    for seed in 0..seeds {
        let c = cost(k, seed);
        let p = c.per_batch_per_chunk();
        per.push(p);
        standalone.push(c.confirm_remote as f64 / c.accept_remote.max(1) as f64);
        ratio.push(tpc / p);
    }
    let safetalk_ok = per.iter().all(|p| *p > 2.0 && *p <= 3.0);
    let (smed, _) = median_max(&standalone);
    let tpc_ok = tpc == 4.0;
    let ratio_ok = ratio.iter().all(|r| *r >= 4.0 / 3.0);
    vec![
        measured(
            EXP,
            format!("SafeTalk, k={k}: messages per update per remote participant"),
            "3".into(),
            &per,
            if safetalk_ok {
                Verdict::WithinBound
            } else {
                Verdict::Fails
            },
            format!(
                "ACCEPT + ACCEPTED + CONFIRM; {:.0}% of CONFIRMs standalone (median), the rest piggybacked on the next ACCEPT",
                smed * 100.0
            ),
        ),
        measured(
            EXP,
            format!("two-phase commit, k={k}: messages per update per participant"),
            "4".into(),
            &[tpc],
            if tpc_ok {
                Verdict::Matches
            } else {
                Verdict::Fails
            },
            "PREPARE + VOTE + COMMIT + ACK, counted in a run of the 2PC machine".into(),
        ),
        measured(
            EXP,
            format!("2PC over SafeTalk, k={k}: message ratio"),
            "4/3 = 1.33".into(),
            &ratio,
            if ratio_ok {
                Verdict::WithinBound
            } else {
                Verdict::Fails
            },
            "at least one third more; more where SafeTalk's CONFIRM is piggybacked".into(),
        ),
    ]
}

/// C_updt for stores of k = 2…9 chunks, the LC among the k sites.
pub fn update_rows(ks: &[u64], seeds: u64) -> Vec<Row> {
    let mut out = Vec::new();
    for &k in ks {
        let mut v = Vec::new();
        for seed in 0..seeds {
            let per_chunk = cost(k, seed).per_batch_per_chunk();
            v.push((((k - 1) as f64 * per_chunk + 2.0) * 100.0).round() / 100.0);
        }
        let (lo, hi) = ((2 * k) as f64, (3 * k - 1) as f64);
        let ok = v.iter().all(|x| *x >= lo && *x <= hi);
        out.push(measured(
            EXP_UPDATE,
            format!("C_updt, k={k}: LC among the k sites (M per update)"),
            format!("(3k−1)M = {}", 3 * k - 1),
            &v,
            if ok { Verdict::WithinBound } else { Verdict::Fails },
            format!(
                "k − 1 remote chunks × measured messages per ACCEPT and remote chunk + request + answer; {} with every CONFIRM piggybacked",
                num(lo)
            ),
        ));
    }
    out
}
