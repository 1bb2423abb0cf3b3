//! Printing the simulator's reports: one run, a summary over many seeds, and the parts
//! each workload adds (objects, elections, snapshots, membership, lookup, cost).

use super::perf::Perf;
use super::secs;
use tenure_sim::lookup::summary::{Extreme, LookupSummary};
use tenure_sim::{RunReport, Summary};

pub(super) fn print_run(r: &RunReport, wall_s: f64, k: usize, n: u64) {
    if r.lookup.is_some() {
        return print_lookup_run(r, wall_s);
    }
    println!(
        "seed {}: {:?} — {:.1} s simulated, {} events in {:.2} s ({:.0} events/s)",
        r.seed,
        r.outcome,
        secs(r.sim_us),
        r.events,
        wall_s,
        r.events as f64 / wall_s.max(1e-9)
    );
    if let Some(k) = &r.knobs {
        println!("  knobs: {k:?}");
    }
    for (d, c) in &r.clocks {
        println!("  clock d{d}: {c:?}");
    }
    println!("  faults: {:?}", r.faults);
    println!(
        "  regenerations {}, migrations {}, relayouts {}, operator commands {}, writes acked {}/{}, requests forwarded {}{}",
        r.regenerations,
        r.migrations,
        r.relayouts,
        r.policy_commands,
        r.writes_acked,
        r.writes_issued,
        r.forwarded,
        if r.forward { "" } else { " (forwarding off)" }
    );
    println!(
        "  max failover {:.3} s, liveness converged in {}",
        secs(r.max_failover_us),
        r.liveness_converged_us
            .map(|u| format!("{:.3} s", secs(u)))
            .unwrap_or_else(|| "—".into())
    );
    if let Some(k) = &r.lock_knobs {
        println!("  lock knobs: {k:?}");
    }
    if let Some(k) = &r.disk_knobs {
        println!("  disk knobs: {k:?}");
    }
    println!("  locks: {:?}", r.locks);
    println!("  checks: {:?}", r.checks);
    println!("  lock checks: {:?}", r.lock_checks);
    if let Some(k) = &r.object_knobs {
        println!("  object knobs: {k:?}");
        print_objects(&r.objects, "  ");
    }
    if let Some(k) = &r.election_knobs {
        println!("  election knobs: {k:?}");
    }
    print_elections(&r.elections, n, "  ");
    if let Some(k) = &r.snapshot_knobs {
        println!("  snapshot knobs: {k:?}");
    }
    print_snapshots(&r.snapshots, "  ");
    if let Some(k) = &r.membership_knobs {
        println!("  membership knobs: {k:?}");
    }
    print_membership(&r.membership, "  ");
    print_cost(&r.safetalk, r.locks.grants, k);
    for v in &r.violations {
        println!("  VIOLATION ({:?}): {v}", v.kind());
    }
}

pub(super) fn print_summary(s: &Summary, cost: &Perf, k: usize, n: u64) {
    let wall_s = cost.wall_s;
    if s.lookup.common_runs + s.lookup.rare_runs > 0 {
        return print_lookup_summary(s, cost);
    }
    println!(
        "{} runs, {:.0} s simulated, {} events in {:.1} s wall ({:.0} runs/min, {:.0} events/s)",
        s.runs,
        secs(s.sim_us),
        s.events,
        wall_s,
        s.runs as f64 * 60.0 / wall_s.max(1e-9),
        s.events as f64 / wall_s.max(1e-9)
    );
    println!("{}", cost.line(s.events));
    let f = &s.faults;
    println!(
        "faults: partitions {} halves + {} isolate-one ({} one-way), heals {}, crashes {} ({} mid-batch), pauses {}, messages lost {}, duplicated {}; disks: {} unsynced groups lost, {} torn records refused, {} unsynced commits kept whole, {} stalled commits, chunk records {} whole and {} heads; wall clocks: {} steps forward, {} back, {} boots after a step",
        f.partitions_halves,
        f.partitions_isolate,
        f.one_way,
        f.heals,
        f.crashes,
        f.torn_crashes,
        f.pauses,
        f.lost,
        f.duplicated,
        f.unsynced_lost,
        f.torn_records,
        f.unsynced_survived,
        f.disk_stalls,
        f.records_whole,
        f.record_heads,
        f.clock_steps_forward,
        f.clock_steps_back,
        f.boots_after_step
    );
    for (label, f) in [
        ("after a wall-clock step", &s.step_windows.taken),
        (
            "at a drawn step's instant, none taken",
            &s.step_windows.not_taken,
        ),
    ] {
        if f.is_empty() {
            continue;
        }
        let (om, ox, gm, total) = f.figures();
        println!(
            "{} s windows {label}: {}; longest a store had no manager within one: median {:.3} s, max {:.3} s; lock grants: {total} (median {gm} per window)",
            tenure_sim::world::STEP_WINDOW_US / 1_000_000,
            f.len(),
            secs(om),
            secs(ox),
        );
    }
    println!(
        "regenerations {}, migrations {}, relayouts {}, operator commands {}, writes acked {}/{}, requests forwarded {}",
        s.regenerations,
        s.migrations,
        s.relayouts,
        s.policy_commands,
        s.writes_acked,
        s.writes_issued,
        s.forwarded
    );
    println!(
        "max failover {:.3} s, max liveness convergence {:.3} s",
        secs(s.max_failover_us),
        secs(s.max_liveness_us)
    );
    let l = &s.locks;
    println!(
        "locks: {} sessions opened, {} grants, {} releases acked ({} to a retry), {} acquires refused/timed out, {} session ends, {} client deadlines passed, {} client pauses, {} client crashes, {} history ops",
        l.sessions_opened,
        l.grants,
        l.releases,
        l.releases_retried,
        l.acquire_failures,
        l.session_ends,
        l.deadlines_passed,
        l.client_pauses,
        l.client_crashes,
        l.history_ops
    );
    println!(
        "pipelining: {} requests sent with others in flight, {} answered out of order, {} session streams resumed elsewhere, re-sending {} requests",
        l.pipelined, l.out_of_order, l.stream_resumes, l.resent
    );
    println!(
        "checks: {} manager, {} served-under-lease, {} acked-write-present, {} accepted-durable, {} same-stamp-same-table",
        s.checks.manager_checks,
        s.checks.served_checks,
        s.checks.write_checks,
        s.checks.durable_checks,
        s.checks.stamp_checks
    );
    let t = &s.transitions;
    println!(
        "transitions between devices: {} votes whole, {} by summary ({} asked whole again); {} commits whole, {} by patch ({} rows)",
        t.votes_whole,
        t.votes_summary,
        t.states_asked,
        t.commits_whole,
        t.commits_patch,
        t.patch_rows
    );
    println!(
        "chunks rejoining in a relayout: {} given the state whole, {} by patch ({} rows)",
        t.reconciles_whole, t.reconciles_patch, t.reconcile_rows
    );
    let c = &s.lock_checks;
    println!(
        "lock checks: {} mutual-exclusion pairs, {} fencing pairs, {} takeover lookups, {} ops linearizable ({} more name by name, in {} groups of covering names beyond the search bound), {} histories beyond the search bound",
        c.exclusion_checks,
        c.fencing_checks,
        c.takeover_checks,
        c.linearizable_ops,
        c.linearizable_ops_alone,
        c.linearizability_groups_unknown,
        c.linearizability_unknown
    );
    if s.objects.puts + s.objects.gets + s.objects.watch_events > 0 {
        print_objects(&s.objects, "");
    }
    print_elections(&s.elections, n, "");
    print_snapshots(&s.snapshots, "");
    print_membership(&s.membership, "");
    print_cost(&s.safetalk, s.locks.grants, k);
    println!(
        "violations: {} correctness, {} liveness",
        s.correctness_failures, s.liveness_failures
    );
}

/// What the object clients and watchers did (seed 001), and how often the object
/// checkers compared something.
pub(super) fn print_objects(o: &tenure_sim::objects::ObjectStats, indent: &str) {
    println!(
        "{indent}objects: {} puts ({} inline, {} multi-block, {} ephemeral), {} gets ({} missing, {} data unavailable), {} heads, {} deletes, multipart {} started / {} parts ({} again) / {} completed / {} aborted, CAS {} wins / {} losses, fenced {} landed / {} refused, {} oversized refused, {} sessions lapsed, watch events {} ({} resumes, {} re-reads after compaction), GC'd manifests {} ({} block deletions sent), {} requests given up, longest settle {:.3} s",
        o.puts,
        o.inline,
        o.multi_block,
        o.ephemeral,
        o.gets,
        o.get_missing,
        o.get_unavailable,
        o.heads,
        o.deletes,
        o.multipart_started,
        o.parts,
        o.parts_again,
        o.multipart_completed,
        o.multipart_aborted,
        o.cas_wins,
        o.cas_losses,
        o.fenced_landed,
        o.fenced_refused,
        o.too_large,
        o.sessions_lapsed,
        o.watch_events,
        o.watch_resumes,
        o.watch_compacted,
        o.gc_manifests,
        o.blocks_deleted,
        o.gave_up,
        secs(o.settle_us)
    );
    let k = &o.checks;
    println!(
        "{indent}object checks: {} reads, {} CAS wins, {} revisions cross-checked, {} acks in the final history, {} active blocks on chunks, {} deletions vs active manifests, {} stores collected, {} fenced puts, {} watch events, {} manifest merges",
        k.read_checks,
        k.cas_checks,
        k.revision_checks,
        k.ack_checks,
        k.block_checks,
        k.delete_checks,
        k.collect_checks,
        k.fence_checks,
        k.watch_checks,
        k.merge_checks
    );
}

/// What the elections did, and the counted messages per election beside the lecture's
/// figures (seed 002 §14.3.3) for n devices.
pub(super) fn print_elections(e: &tenure_sim::election::ElectionStats, n: u64, indent: &str) {
    if e.bully.runs + e.ring.runs == 0 {
        return;
    }
    let bound = tenure_sim::election::convergence_bound_us(&Default::default(), n);
    println!(
        "{indent}elections: {} terms followed, {} commands sent ({} applied, {} refused as stale), {} crashes and pauses aimed at the coordinator, {} coordinators paused with a command decided but not yet sent, {} liveness phases with the coordinator kept down, longest convergence {:.3} s (bound {:.3} s)",
        e.terms,
        e.commands_sent,
        e.commands_applied,
        e.commands_refused,
        e.coordinator_faults,
        e.paused_at_command,
        e.coordinator_kept_down,
        secs(e.max_convergence_us),
        secs(bound)
    );
    let h = |h: &tenure_sim::election::Histogram| match (h.median(), h.max()) {
        (Some(m), Some(x)) => format!("median {m}, max {x} ({} counted)", h.count()),
        _ => "none counted".to_string(),
    };
    if e.bully.runs > 0 {
        let b = &e.bully;
        println!(
            "{indent}  bully ({} runs): messages per election {}; when the highest running device initiated: {} — lecture best case n − 2 = {} to live processes (the highest live initiates after the coordinator crashed; {n} in all with its ELECTION and COORDINATOR to the crashed one)",
            b.runs,
            h(&b.per_election),
            h(&b.per_election_highest),
            n.saturating_sub(2)
        );
        println!(
            "{indent}    per episode (every election until the next quiet spell) {}; begun by the lowest device with all running: {} — lecture worst case O(n²): n² − 1 = {} when the lowest initiates with all live",
            h(&b.per_episode),
            h(&b.per_episode_lowest),
            (n * n).saturating_sub(1)
        );
    }
    if e.ring.runs > 0 {
        let r = &e.ring;
        println!(
            "{indent}  ring ({} runs): messages per election {} — lecture 2(n − 1) = {} with every process live (more when successors are skipped or messages lost); per episode {}",
            r.runs,
            h(&r.per_election),
            2 * n.saturating_sub(1),
            h(&r.per_episode)
        );
    }
    println!(
        "{indent}election checks: {} commands and roles against their term's coordinator, {} applied commands against the newest term seen, {} convergence samples",
        e.coordinator_checks, e.fencing_checks, e.convergence_checks
    );
}

/// What the snapshots did, and how often the snapshot checkers compared something.
pub(super) fn print_snapshots(s: &tenure_sim::snapshot::SnapshotStats, indent: &str) {
    if s.started == 0 {
        return;
    }
    println!(
        "{indent}snapshots: {} started, {} completed ({} terminated: nothing in flight), {} failed; {} parts, {} messages recorded in flight, {} records by a restarted device; {} restored ({} events, every store managed within {:.3} s)",
        s.started,
        s.completed,
        s.terminated,
        s.failed,
        s.parts,
        s.channel_messages,
        s.rerecords,
        s.restores,
        s.restore_events,
        secs(s.restore_max_us)
    );
    println!(
        "{indent}snapshot checks: {} channel pairs (processed ≤ sent), {} recorded messages matched, {} recorded chunks, {} restored facts",
        s.pair_checks, s.channel_checks, s.state_checks, s.restore_checks
    );
}

/// What the membership changes did (DESIGN §6), with the simulated time each took, and
/// how often the membership checkers looked.
pub(super) fn print_membership(m: &tenure_sim::membership::MembershipStats, indent: &str) {
    if m.adds_requested + m.removes_requested + m.runs_with_spares == 0 {
        return;
    }
    let h = |h: &tenure_sim::election::Histogram| match (h.median(), h.max()) {
        (Some(med), Some(x)) => format!(
            "median {:.3} s, max {:.3} s",
            med as f64 / 1e3,
            x as f64 / 1e3
        ),
        _ => "none".to_string(),
    };
    println!(
        "{indent}membership: {} runs with spares; {} adds asked ({} admitted: {}), {} removes asked ({} retired: {}), {} retired processes stopped, {} requests sent (repeats included), {} liveness phases began with a change pending, longest settle after faults stopped {:.3} s",
        m.runs_with_spares,
        m.adds_requested,
        m.adds_admitted,
        h(&m.add_ms),
        m.removes_requested,
        m.removes_retired,
        h(&m.remove_ms),
        m.retirements,
        m.requests_sent,
        m.pending_at_liveness,
        secs(m.max_settle_us)
    );
    println!(
        "{indent}membership checks: {} records against their device's previous one and their version, {} actions and chunks against retirements, {} settle samples",
        m.record_checks, m.retired_checks, m.convergence_checks
    );
}

/// Measured SafeTalk message cost next to Menasce's formulas (seed 004 §8), for stores of
/// k chunks (the replication) whose manager holds one of them.
pub(super) fn print_cost(c: &tenure_sim::world::SafeTalkCost, grants: u64, k: usize) {
    if c.batches == 0 {
        return;
    }
    let remote = c.accept_remote + c.accepted_remote + c.confirm_remote;
    println!(
        "safetalk: {} batches carrying {} changes ({:.2} per batch); remote messages: {} ACCEPT, {} ACCEPTED, {} standalone CONFIRM",
        c.batches,
        c.ops,
        c.ops as f64 / c.batches as f64,
        c.accept_remote,
        c.accepted_remote,
        c.confirm_remote
    );
    let per_change = remote as f64 / c.ops.max(1) as f64;
    println!(
        "  per batch and remote chunk: {:.2} messages (SafeTalk: 3 = ACCEPT, ACCEPTED, CONFIRM; two-phase commit: 4)",
        c.per_batch_per_chunk()
    );
    println!(
        "  per change: {per_change:.2} remote SafeTalk messages + request + answer = {:.2} M; Menasce C_updt for k = {k} chunks: (3k-1)M = {} M with the LC among the k sites, (3k+2)M = {} M otherwise",
        per_change + 2.0,
        3 * k - 1,
        3 * k + 2
    );
    println!(
        "  per grant: {:.2} remote SafeTalk messages (every change of the run, register writes and barriers included, over the grants)",
        remote as f64 / grants.max(1) as f64
    );
}

/// One lookup run: its knobs, what it did, and its measured maxima beside its bounds.
pub(super) fn print_lookup_run(r: &RunReport, wall_s: f64) {
    let Some(l) = &r.lookup else { return };
    println!(
        "seed {}: {:?} — lookup world, {:?} profile — {:.1} s simulated, {} events in {:.2} s",
        r.seed,
        r.outcome,
        l.profile,
        secs(r.sim_us),
        r.events,
        wall_s
    );
    if let Some(k) = &r.lookup_knobs {
        println!("  knobs: {k:?}");
    }
    println!(
        "  faults: {} crashes ({} of the leader), {} power outages, {} full restarts, {} messages lost, {} partitions, {} pauses, {} corruptions",
        l.crashes,
        l.leader_crashes,
        l.power_outages,
        l.full_restarts,
        l.lost,
        l.partitions,
        l.pauses,
        l.corruptions
    );
    print_lookup_work(l);
    let b = &l.bounds;
    let row = |name: &str, n: u64, max: u64, bound: u64| {
        println!(
            "  {name}: {n} measured, max {:.3} s (bound {:.3} s)",
            secs(max),
            secs(bound)
        );
    };
    row(
        "outage after a leader crash",
        l.outages,
        l.max_outage_us,
        b.outage_us,
    );
    row(
        "volatile staleness",
        l.volatile_checks,
        l.max_volatile_staleness_us,
        b.volatile_us,
    );
    row(
        "persistent staleness",
        l.persistent_checks,
        l.max_persistent_staleness_us,
        b.persistent_us,
    );
    row(
        "subscriber divergence",
        l.view_checks,
        l.max_divergence_us,
        b.subscriber_us,
    );
    row(
        "stabilisation",
        l.stabilisations,
        l.max_stabilisation_us,
        b.stabilisation_us,
    );
    for v in &r.violations {
        println!("  VIOLATION ({:?}): {v}", v.kind());
    }
}

pub(super) fn print_lookup_work(l: &tenure_sim::lookup::LookupStats) {
    println!(
        "  workload: {} updates ({} persistent acked), {} provider deaths, {} answers, {} NoLeader, {} failed connections, {} events applied ({} syncs), {} resubscribes, {} moves",
        l.updates,
        l.acks,
        l.deaths,
        l.answers,
        l.no_leader,
        l.failed,
        l.events_applied,
        l.syncs,
        l.resubscribes,
        l.moves
    );
    println!(
        "  checks: {} leader samples after quiet, {} acked-persistent answers, {} subscriber views",
        l.leader_checks, l.acked_checks, l.view_checks
    );
}

/// A lookup sweep: totals, then each measure's maximum beside its run's bound, and the
/// worst measured/bound ratio.
pub(super) fn print_lookup_summary(s: &Summary, cost: &Perf) {
    let wall_s = cost.wall_s;
    let l: &LookupSummary = &s.lookup;
    let t = &l.totals;
    println!(
        "{} lookup runs ({} common, {} rare), {:.0} s simulated, {} events in {:.1} s wall ({:.0} runs/min)",
        s.runs,
        l.common_runs,
        l.rare_runs,
        secs(t.sim_us),
        t.events,
        wall_s,
        s.runs as f64 * 60.0 / wall_s.max(1e-9)
    );
    println!("{}", cost.line(t.events));
    println!(
        "faults: {} crashes ({} of the leader), {} power outages, {} full restarts, {} messages lost, {} partitions, {} pauses, {} corruptions",
        t.crashes,
        t.leader_crashes,
        t.power_outages,
        t.full_restarts,
        t.lost,
        t.partitions,
        t.pauses,
        t.corruptions
    );
    print_lookup_work(t);
    let row = |name: &str, e: &Extreme| {
        println!(
            "{name}: max {:.3} s (seed {}, its bound {:.3} s); worst ratio {:.2} of the bound (seed {}); {} runs measured it",
            secs(e.max_us),
            e.seed,
            secs(e.bound_us),
            e.ratio,
            e.ratio_seed,
            e.runs
        );
    };
    row(
        "outage after a leader crash (bound 3 HB + detection slack + query round trip)",
        &l.outage,
    );
    row("volatile staleness (bound 2 MVRI + δ)", &l.volatile);
    row(
        "persistent staleness (bound MPRI + 3 HB + Θ + RTT + δ)",
        &l.persistent,
    );
    row("subscriber divergence (bound 2 MVRI + δ)", &l.divergence);
    row(
        "stabilisation (bound 3 (3 HB + LONG_TIMEOUT + MVRI) + 3 RTT + δ_c)",
        &l.stabilisation,
    );
    println!(
        "violations: {} correctness, {} liveness",
        s.correctness_failures, s.liveness_failures
    );
}
