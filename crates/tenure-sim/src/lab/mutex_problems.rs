//! The "Problems" column of Fig. 14.7 (seed 002 §14.4), shown by runs rather than
//! stated: each fault is injected into a run and the outcome observed — how many waiting
//! requests never entered within [`HORIZON_US`] — beside a control run without the fault.
//! Also the checker's runs: every algorithm under contention (never two inside), and
//! with its planted bug (the checker must catch it).

use super::mutex::{centralized, decentralized, ricart_agrawala, token_ring};
use super::mutex_sim::{Demand, MT, MutexSim};
use super::report::{Row, Verdict, median_max, num};
use tenure_core::DeviceId;
use tenure_core::mutex::token_ring::TokenRing;
use tenure_core::mutex::{MutualExclusion, Phase};

const EXP: &str = "mutex";
/// How long a blocked request is watched (µs): 10 000 message times.
pub const HORIZON_US: u64 = 10_000 * MT;
/// Length of a contention run (µs).
const CONTENTION_US: u64 = 3_000 * MT;

/// Processes still waiting at the end of a run.
fn blocked<M: MutualExclusion>(sim: &MutexSim<M>, alive: &[DeviceId]) -> u64 {
    alive
        .iter()
        .filter(|p| sim.phase(**p) == Phase::Wanting)
        .count() as u64
}

/// When a fault strikes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum When {
    /// Before anyone asks.
    Start,
    /// As soon as the first process has entered.
    FirstEntry,
}

/// Every process but `skip` asks at once (message times jittered); `fault` acts `when`.
/// Returns the processes (not crashed) left waiting after the horizon.
fn fault_run<M: MutualExclusion>(
    procs: Vec<M>,
    seed: u64,
    skip: &[DeviceId],
    when: When,
    fault: &dyn Fn(&mut MutexSim<M>),
) -> u64 {
    let mut sim = MutexSim::new(procs, seed, MT / 2, 5 * MT, Demand::Once);
    let askers: Vec<DeviceId> = (sim.ids().into_iter())
        .filter(|p| !skip.contains(p))
        .collect();
    if when == When::Start {
        fault(&mut sim);
    }
    for p in &askers {
        sim.request_at(*p, MT);
    }
    while sim.entries.is_empty() && sim.now < HORIZON_US {
        sim.run_until(sim.now + MT / 10);
    }
    if when == When::FirstEntry {
        fault(&mut sim);
    }
    sim.run_until(sim.now + HORIZON_US);
    let alive: Vec<DeviceId> = askers.into_iter().filter(|p| !sim.crashed(*p)).collect();
    blocked(&sim, &alive)
}

/// A "Problems" row: the fault must leave requests blocked, the control none.
fn problem(what: &str, paper: &str, faulty: &[f64], control: &[f64], asked: u64) -> Row {
    let (median, max) = median_max(faulty);
    let seen = faulty.iter().all(|b| *b > 0.0) && control.iter().all(|b| *b == 0.0);
    Row {
        experiment: EXP,
        what: what.into(),
        paper: paper.into(),
        median,
        max,
        verdict: if seen {
            Verdict::Matches
        } else {
            Verdict::Fails
        },
        note: format!(
            "requests still waiting after {} message times, of {asked} asked; without the fault: max {}",
            HORIZON_US / MT,
            num(median_max(control).1)
        ),
    }
}

/// Every process contends for `CONTENTION_US`: the run, for the checker and the
/// decentralized attempts.
fn contention<M: MutualExclusion>(
    procs: Vec<M>,
    seed: u64,
    probe: Option<fn(&M) -> u64>,
) -> MutexSim<M> {
    let demand = Demand::Again {
        think_max_us: 3 * MT,
    };
    let mut sim = MutexSim::new(procs, seed, MT / 2, 2 * MT, demand);
    if let Some(probe) = probe {
        sim.set_probe(probe);
    }
    for (i, p) in sim.ids().into_iter().enumerate() {
        sim.request_at(p, (i as u64 % 3) * MT / 3);
    }
    sim.run_until(CONTENTION_US);
    sim
}

/// The rows for `n` processes over `seeds` seeds.
pub fn rows(n: u64, seeds: u64) -> Vec<Row> {
    let mut out = Vec::new();
    let (mut cf, mut cc, mut rf, mut rc, mut lf, mut hf, mut tc) = Default::default();
    let (mut df, mut dc) = (Vec::new(), Vec::new());
    let last = DeviceId(n);
    for seed in 0..seeds {
        let coord = [DeviceId(1)];
        let crash_coord = |s: &mut MutexSim<_>| s.crash(DeviceId(1));
        push(
            &mut cf,
            fault_run(
                centralized(n, false),
                seed,
                &coord,
                When::FirstEntry,
                &crash_coord,
            ),
        );
        push(
            &mut cc,
            fault_run(
                centralized(n, false),
                seed,
                &coord,
                When::FirstEntry,
                &|_| {},
            ),
        );
        // A minority of coordinators crashes: the majority still answers.
        let minority = |s: &mut MutexSim<_>| s.crash(DeviceId(n));
        push(
            &mut df,
            fault_run(
                decentralized(n, seed, false),
                seed,
                &[last],
                When::Start,
                &minority,
            ),
        );
        push(
            &mut dc,
            fault_run(
                decentralized(n, seed, false),
                seed,
                &[last],
                When::Start,
                &|_| {},
            ),
        );
        let crash_idle = |s: &mut MutexSim<_>| s.crash(DeviceId(n));
        push(
            &mut rf,
            fault_run(
                ricart_agrawala(n, false),
                seed,
                &[last],
                When::Start,
                &crash_idle,
            ),
        );
        push(
            &mut rc,
            fault_run(
                ricart_agrawala(n, false),
                seed,
                &[last],
                When::Start,
                &|_| {},
            ),
        );
        let lose = |s: &mut MutexSim<TokenRing>| s.lose_next_message();
        push(
            &mut lf,
            fault_run(token_ring(n, false), seed, &[], When::FirstEntry, &lose),
        );
        let crash_holder = |s: &mut MutexSim<TokenRing>| {
            let holder = s.entries.last().map(|e| e.who).expect("an entry");
            s.crash(holder);
        };
        push(
            &mut hf,
            fault_run(
                token_ring(n, false),
                seed,
                &[],
                When::FirstEntry,
                &crash_holder,
            ),
        );
        push(
            &mut tc,
            fault_run(token_ring(n, false), seed, &[], When::FirstEntry, &|_| {}),
        );
    }
    let asked = n - 1;
    out.push(problem(
        &format!("centralized, n={n}: coordinator crash"),
        "coordinator crash",
        &cf,
        &cc,
        asked,
    ));
    let (median, max) = median_max(&df);
    let survived = df.iter().chain(&dc).all(|b| *b == 0.0);
    out.push(Row {
        experiment: EXP,
        what: format!("decentralized, n={n}: one coordinator crash"),
        paper: "survived while a majority answers".into(),
        median,
        max,
        verdict: if survived {
            Verdict::Matches
        } else {
            Verdict::Fails
        },
        note: format!(
            "requests still waiting, of {asked} asked: the other coordinators are a majority"
        ),
    });
    out.extend(starvation(n, seeds));
    out.push(problem(
        &format!("Ricart-Agrawala, n={n}: crash of an idle process"),
        "crash of any process",
        &rf,
        &rc,
        asked,
    ));
    out.push(problem(
        &format!("token ring, n={n}: lost token"),
        "lost token",
        &lf,
        &tc,
        n,
    ));
    out.push(problem(
        &format!("token ring, n={n}: crashed holder"),
        "process crash",
        &hf,
        &tc,
        n,
    ));
    out.extend(checker_rows(n, seeds));
    out
}

fn push(v: &mut Vec<f64>, x: u64) {
    v.push(x as f64);
}

/// Decentralized under contention: attempts per entry (the k of 3mk) and messages per
/// entry against 3(n − 1) per attempt.
fn starvation(n: u64, seeds: u64) -> Vec<Row> {
    let (mut k_max, mut msgs, mut waits) = (Vec::new(), Vec::new(), Vec::new());
    let mut within = true;
    let mut refused = Vec::new();
    for seed in 0..seeds {
        let sim = contention(decentralized(n, seed, false), seed, Some(|p| p.attempt()));
        let ks: Vec<u64> = sim.entries.iter().map(|e| e.probe).collect();
        let total_k: u64 = ks.iter().sum();
        k_max.push(ks.iter().copied().max().unwrap_or(0) as f64);
        msgs.push(sim.sent as f64 / sim.entries.len().max(1) as f64);
        // Attempts still running at the end (at most one per process) are counted too.
        within &= sim.sent <= 3 * (n - 1) * (total_k + n);
        refused.push((total_k - ks.len() as u64) as f64 / total_k.max(1) as f64);
        let w = (sim.entries.iter())
            .map(|e| (e.entered_us - e.requested_us) / MT)
            .max()
            .unwrap_or(0);
        waits.push(w as f64);
    }
    let (kmed, kmax) = median_max(&k_max);
    let (_, wmax) = median_max(&waits);
    let (fmed, _) = median_max(&refused);
    let (mmed, mmax) = median_max(&msgs);
    vec![
        Row {
            experiment: EXP,
            what: format!("decentralized, n={n}: most attempts for one entry, under contention"),
            paper: "starvation".into(),
            median: kmed,
            max: kmax,
            verdict: if kmax > 1.0 {
                Verdict::Matches
            } else {
                Verdict::Fails
            },
            note: format!(
                "all {n} contend; {:.0}% of attempts refused (median); longest wait {} message times",
                fmed * 100.0,
                num(wmax)
            ),
        },
        Row {
            experiment: EXP,
            what: format!("decentralized, n={n}: messages per entry/exit under contention"),
            paper: format!("3mk, m = {}", n - 1),
            median: mmed,
            max: mmax,
            verdict: if within {
                Verdict::WithinBound
            } else {
                Verdict::Fails
            },
            note: "at most 3(n−1) per attempt, summed over the measured attempts".into(),
        },
    ]
}

/// Never two inside under contention, and the planted bug caught, per algorithm.
fn checker_rows(n: u64, seeds: u64) -> Vec<Row> {
    let mut out = Vec::new();
    let mut run = |name: &str, clean: &dyn Fn(u64) -> (u64, u64), bug: &dyn Fn(u64) -> u64| {
        let (mut v, mut entries, mut caught) = (Vec::new(), 0, Vec::new());
        for seed in 0..seeds {
            let (violations, e) = clean(seed);
            v.push(violations as f64);
            entries += e;
            caught.push(bug(seed) as f64);
        }
        let (median, max) = median_max(&v);
        out.push(Row {
            experiment: EXP,
            what: format!("{name}, n={n}: two inside at once, under contention"),
            paper: "never".into(),
            median,
            max,
            verdict: if max == 0.0 {
                Verdict::Matches
            } else {
                Verdict::Fails
            },
            note: format!("{entries} entries checked"),
        });
        let (median, max) = median_max(&caught);
        let all = caught.iter().all(|c| *c > 0.0);
        out.push(Row {
            experiment: EXP,
            what: format!("{name}, n={n}: checker on the planted bug"),
            paper: "caught".into(),
            median,
            max,
            verdict: if all {
                Verdict::Matches
            } else {
                Verdict::Fails
            },
            note: "violations found with the algorithm broken on purpose".into(),
        });
    };
    fn go<M: MutualExclusion>(procs: Vec<M>, seed: u64) -> (u64, u64) {
        let sim = contention(procs, seed, None);
        (sim.checker.violations.len() as u64, sim.checker.entries)
    }
    run("centralized", &|s| go(centralized(n, false), s), &|s| {
        go(centralized(n, true), s).0
    });
    run(
        "decentralized",
        &|s| go(decentralized(n, s, false), s),
        &|s| go(decentralized(n, s, true), s).0,
    );
    run(
        "Ricart-Agrawala",
        &|s| go(ricart_agrawala(n, false), s),
        &|s| go(ricart_agrawala(n, true), s).0,
    );
    run("token ring", &|s| go(token_ring(n, false), s), &|s| {
        go(token_ring(n, true), s).0
    });
    out
}
