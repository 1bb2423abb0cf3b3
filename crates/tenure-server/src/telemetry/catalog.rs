//! Every metric a device exports, with its type, label and meaning: the one list that
//! the recorder describes (`# HELP`), registers at zero, and that `docs/metrics.md`, the
//! alert rules and the dashboard in `deploy/monitoring/` are checked against.
//!
//! A metric is registered when the recorder is installed, so that a series exists from
//! the device's start: a rate over a counter that appears only at its first event (a
//! session expiry, a failed snapshot) would be missing, not zero, and an alert or a
//! panel over it would say nothing. A metric with a label is registered for each of the
//! label's values listed here; one whose values are open (error kinds, request kinds,
//! stores) appears at its first use.

/// What kind of Prometheus metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (rates).
    Counter,
    /// A value now.
    Gauge,
    /// Observations in buckets (`_bucket`, `_sum`, `_count`).
    Histogram,
}

impl Kind {
    /// Its name in the Prometheus text format.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One exported metric.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// Its name as exported.
    pub name: &'static str,
    pub kind: Kind,
    /// Its label, if it has one (every labelled metric has exactly one).
    pub label: Option<&'static str>,
    /// The label's values registered at start (empty: the values are open, and the
    /// series appear at their first use).
    pub values: &'static [&'static str],
    /// What it measures (the `# HELP` line).
    pub help: &'static str,
}

const fn plain(name: &'static str, kind: Kind, help: &'static str) -> Metric {
    Metric {
        name,
        kind,
        label: None,
        values: &[],
        help,
    }
}

const fn labelled(
    name: &'static str,
    kind: Kind,
    label: &'static str,
    values: &'static [&'static str],
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        label: Some(label),
        values,
        help,
    }
}

use Kind::{Counter, Gauge, Histogram};

/// Every metric a device exports, by subsystem.
#[rustfmt::skip]
pub const METRICS: &[Metric] = &[
    // The device and its process.
    labelled("tenure_build_info", Gauge, "version", &[], "Always 1; the server's version is the label."),
    plain("process_resident_memory_bytes", Gauge, "Resident memory of the device process (Linux: /proc/self/status VmRSS)."),
    plain("process_virtual_memory_bytes", Gauge, "Virtual memory of the device process."),
    plain("process_cpu_seconds_total", Counter, "User and system CPU time of the device process, in whole seconds."),
    plain("process_open_fds", Gauge, "Open file descriptors of the device process."),
    plain("process_start_time_seconds", Gauge, "When the device process installed its metrics recorder, at its start (Unix seconds)."),
    // Layout: stores, managers, chunks (seed 000).
    plain("tenure_stores", Gauge, "Stores of the cluster, as this device's configuration says."),
    plain("tenure_managed_stores", Gauge, "Stores this device is the manager of."),
    plain("tenure_chunks", Gauge, "Chunks this device holds."),
    labelled("tenure_store_epoch", Gauge, "store", &[], "The epoch of each store this device became manager of (its last epoch here)."),
    labelled("tenure_epochs_total", Counter, "cause", &["regeneration", "migration", "relayout"], "Epochs this device started as a store's manager, by cause."),
    plain("tenure_regenerations_total", Counter, "Regenerations this device won as a store's manager (an epoch after a failure)."),
    labelled("tenure_relayouts_total", Counter, "committed", &["true", "false"], "Relayouts of a store's chunks finished here, committed or abandoned."),
    labelled("tenure_migrations_total", Counter, "committed", &["true", "false"], "Migrations of a store's manager role finished here, committed or abandoned."),
    plain("tenure_chunk_failures_total", Counter, "Chunks this device, as a manager, marked failed."),
    plain("tenure_chunk_commits_total", Counter, "Epoch commits of this device's chunks."),
    plain("tenure_chunks_collected_total", Counter, "Chunks of this device garbage-collected after the layout dropped them."),
    plain("tenure_chunk_ops_served_total", Counter, "Operations this device's chunks applied (the access protocol)."),
    // Replication and storage.
    plain("tenure_writes_total", Counter, "Writes of the test register acknowledged to their clients."),
    labelled("tenure_safetalk_accept_seconds", Histogram, "chunk", &["local", "remote"], "SafeTalk ACCEPT round trips from this manager to a chunk (out to ACCEPTED in)."),
    labelled("tenure_lease_renewal_age_seconds", Histogram, "chunk", &["local", "remote"], "Age of the renewal a chunk echoes when its next renewal request reaches this manager: the renewal's trip, the chunk's renewal period (600 ms) and the request's trip. Near the lease (2 s), leases lapse."),
    plain("tenure_storage_commit_seconds", Histogram, "One group commit: one durable write of the log."),
    plain("tenure_storage_commits_total", Counter, "Group commits."),
    plain("tenure_storage_ops_total", Counter, "Persist operations made durable by group commits."),
    plain("tenure_storage_checkpoints_total", Counter, "Checkpoints of the log into the database."),
    plain("tenure_storage_checkpoint_seconds", Histogram, "One checkpoint into the database."),
    plain("tenure_storage_checkpoint_wait_seconds", Histogram, "Time a commit waited for the checkpoint under way."),
    plain("tenure_storage_checkpoint_encode_seconds", Histogram, "Time a commit spent bringing the checkpoint's rows up to date and encoding them."),
    plain("tenure_storage_apply_seconds", Histogram, "Time the committing thread spent applying a durable group to its copy of the state (the next commit waits behind it)."),
    plain("tenure_wal_write_seconds", Histogram, "One durable write of a group to the log (write and fdatasync)."),
    plain("tenure_driver_batch_inputs", Histogram, "Inputs handled in one turn of the device's driver."),
    plain("tenure_driver_turn_seconds", Histogram, "One turn of the device's driver: its inputs handled and their outputs released (a long turn delays every peer message and timer behind it)."),
    // Client requests.
    labelled("tenure_request_seconds", Histogram, "kind", &[], "Client requests handed to the core, until their answer left (durable), by kind."),
    labelled("tenure_request_answered_seconds", Histogram, "kind", &[], "Client requests handed to the core, until the core answered, by kind."),
    plain("tenure_write_latency_seconds", Histogram, "Writes of the test register, as the gRPC handler timed them."),
    labelled("tenure_client_errors_total", Counter, "kind", &[], "Errors answered to clients, by kind."),
    plain("tenure_client_overloaded_total", Counter, "Client requests refused because the device had too many in the core."),
    labelled("tenure_client_tls_refused_total", Counter, "reason", &["plaintext", "handshake"], "Client connections refused on a TLS port."),
    labelled("tenure_stream_refused_total", Counter, "reason", &["window", "too_large", "wrong_store", "id_reused", "permission", "invalid_name", "invalid", "other"], "Requests refused on a session stream, by why (`window`: more in flight than the stream takes)."),
    // Sessions and locks (seed 004).
    plain("tenure_sessions", Gauge, "Open sessions of the stores this device manages."),
    plain("tenure_locks_held", Gauge, "Locks with at least one holder in the stores this device manages."),
    plain("tenure_sessions_opened_total", Counter, "Sessions opened through this device."),
    plain("tenure_sessions_closed_total", Counter, "Sessions closed by their clients through this device."),
    plain("tenure_keepalives_total", Counter, "Session keep-alives answered."),
    plain("tenure_keepalive_expired_total", Counter, "Keep-alives that found their session expired."),
    labelled("tenure_session_ends_total", Counter, "how", &["expired", "closed"], "Sessions ended in the stores this device manages."),
    plain("tenure_session_expiries_total", Counter, "Sessions that expired in the stores this device manages."),
    plain("tenure_expiry_released_locks_total", Counter, "Locks released because their session expired."),
    plain("tenure_lock_grants_total", Counter, "Locks granted through this device."),
    plain("tenure_lock_releases_total", Counter, "Locks released through this device."),
    plain("tenure_acquire_seconds", Histogram, "Lock acquires, from request to grant (waiting included)."),
    // Elections (DESIGN §6).
    labelled("tenure_election_campaigns_total", Counter, "outcome", &["elected", "failed", "abandoned"], "Election campaigns through this device, by outcome."),
    plain("tenure_election_resignations_total", Counter, "Leaders that resigned through this device."),
    // The cluster coordinator (DESIGN §6).
    plain("tenure_is_coordinator", Gauge, "1 while this device acts as the cluster's coordinator."),
    plain("tenure_coordinator_term", Gauge, "The coordinator's term as this device knows it (0: none known)."),
    plain("tenure_coordinator_changes_total", Counter, "Coordinator elections this device heard of."),
    labelled("tenure_coordinator_commands_total", Counter, "outcome", &["sent", "applied", "refused"], "Coordinator commands sent (as coordinator), applied, or refused as of an older term."),
    // Lookup (seed 003).
    plain("tenure_lookup_state", Gauge, "This device's lookup node: 0 passive, 1 joining, 2 warming up, 3 active, 4 leader."),
    plain("tenure_lookup_leader", Gauge, "1 while this device's lookup node is the leader."),
    plain("tenure_lookup_entries", Gauge, "Entries this device's lookup node holds."),
    plain("tenure_lookup_subscriptions", Gauge, "Subscriptions this device's lookup node serves."),
    plain("tenure_lookup_active_nodes", Gauge, "Lookup nodes this device's node hears as active."),
    plain("tenure_lookup_up_nodes", Gauge, "Lookup nodes this device's node hears."),
    plain("tenure_lookup_watch_streams", Gauge, "Lookup watch streams open at this device."),
    labelled("tenure_lookup_state_changes_total", Counter, "state", &["Passive", "Joining", "WarmingUp", "Active", "Leader"], "State changes of this device's lookup node, by the state entered."),
    plain("tenure_lookup_leader_changes_total", Counter, "Times this device's lookup node became the leader."),
    labelled("tenure_lookup_publishes_total", Counter, "durability", &["volatile", "persistent"], "Entries published through this device."),
    plain("tenure_lookup_meta_updates_total", Counter, "Publishes that changed an entry's metadata."),
    plain("tenure_lookup_revokes_total", Counter, "Entries revoked through this device."),
    plain("tenure_lookup_subscribes_total", Counter, "Lookup subscriptions started through this device."),
    labelled("tenure_lookup_expiries_total", Counter, "durability", &["volatile", "persistent"], "Lookup entries that expired at this node."),
    plain("tenure_lookup_persistent_removals_total", Counter, "Persistent lookup entries removed from this device's storage."),
    labelled("tenure_lookup_errors_total", Counter, "kind", &[], "Lookup requests refused, by kind."),
    labelled("tenure_lookup_query_seconds", Histogram, "kind", &["get", "list"], "Lookup queries through this device."),
    plain("tenure_lookup_answer_age_seconds", Histogram, "Age of a lookup answer: since the entry was last refreshed at the leader."),
    plain("tenure_lookup_events_dropped_total", Counter, "Lookup events lost because their watch stream was too far behind."),
    plain("tenure_lookup_events_unrouted_total", Counter, "Lookup events for a subscription with no stream here."),
    // Objects (seed 001).
    plain("tenure_objects", Gauge, "Objects in the stores this device manages."),
    plain("tenure_object_bytes", Gauge, "Bytes of the objects in the stores this device manages."),
    plain("tenure_object_gc_backlog", Gauge, "Object versions waiting for the collector in the stores this device manages."),
    plain("tenure_object_watches", Gauge, "Object watches served by this device."),
    plain("tenure_object_puts_total", Counter, "Objects put through this device."),
    plain("tenure_object_put_bytes_total", Counter, "Bytes of the objects put through this device."),
    plain("tenure_object_put_seconds", Histogram, "Object puts through this device."),
    plain("tenure_object_gets_total", Counter, "Objects read through this device."),
    plain("tenure_object_get_seconds", Histogram, "Object reads through this device."),
    plain("tenure_object_deletes_total", Counter, "Objects deleted through this device."),
    plain("tenure_object_gc_lease_takeovers_total", Counter, "Deletion leases taken over from a silent collector."),
    plain("tenure_object_watches_started_total", Counter, "Object watches started on session streams of this device."),
    labelled("tenure_object_watch_ends_total", Counter, "reason", &[], "Object watches ended, by reason."),
    plain("tenure_object_watch_events_total", Counter, "Batches of changes sent on Objects.Watch calls of this device."),
    // Snapshots (seed 002).
    plain("tenure_snapshots_started_total", Counter, "Snapshots this device initiated."),
    labelled("tenure_snapshots_total", Counter, "result", &["complete", "failed"], "Snapshots this device initiated that ended, by result."),
    plain("tenure_snapshot_seconds", Histogram, "Snapshots this device initiated, from start to complete."),
    plain("tenure_snapshot_last_success_timestamp_seconds", Gauge, "When the newest snapshot this device initiated completed (Unix seconds; 0: none on its disk)."),
    plain("tenure_snapshot_part_seconds", Histogram, "Writing this device's part of a snapshot durably."),
    plain("tenure_snapshot_part_bytes", Gauge, "Size of this device's newest snapshot part."),
    plain("tenure_snapshot_part_failures_total", Counter, "Parts this device could not write (their snapshots fail)."),
    labelled("tenure_snapshots_removed_total", Counter, "reason", &["retention", "deleted"], "Snapshots whose files this device removed."),
    // Authorization.
    labelled("tenure_auth_denied_total", Counter, "perm", &["read", "lock", "write", "admin"], "Calls refused for lack of a permission, by permission."),
    plain("tenure_auth_unauthenticated_total", Counter, "Calls refused with no valid token or certificate."),
    // The peer transport.
    plain("tenure_peer_messages_sent_total", Counter, "Messages sent to other devices."),
    plain("tenure_peer_writes_total", Counter, "Writes (flushes) on peer connections."),
    labelled("tenure_peer_store_states_total", Counter, "how", &["vote_whole", "vote_summary", "commit_whole", "commit_patch", "reconcile_whole", "reconcile_patch"], "Store states sent to other devices in epoch transitions, whole or as a summary or patch."),
    plain("tenure_peer_dropped_total", Counter, "Messages to other devices dropped (queue full or no connection)."),
    plain("tenure_peer_frames_rejected_total", Counter, "Peer connections closed over a bad frame."),
    plain("tenure_peer_tls_failures_total", Counter, "Peer TLS handshakes that failed."),
];

/// The metric called `name`.
pub fn find(name: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|m| m.name == name)
}

/// Describe every metric to the installed recorder and register each at zero (with
/// each of its listed label values); `tenure_build_info` is set to 1.
pub fn register() {
    for m in METRICS {
        match m.kind {
            Counter => metrics::describe_counter!(m.name, m.help),
            Gauge => metrics::describe_gauge!(m.name, m.help),
            Histogram => metrics::describe_histogram!(m.name, m.help),
        }
        match m.label {
            None => touch(m.kind, m.name, Vec::new()),
            Some(label) => {
                for v in m.values {
                    touch(m.kind, m.name, vec![metrics::Label::new(label, *v)]);
                }
            }
        }
    }
    metrics::gauge!("tenure_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

/// Register one series without changing it.
fn touch(kind: Kind, name: &'static str, labels: Vec<metrics::Label>) {
    match kind {
        Counter => metrics::counter!(name, labels).increment(0),
        Gauge => metrics::gauge!(name, labels).increment(0.0),
        Histogram => {
            let _registered = metrics::histogram!(name, labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::Path;

    /// Names of the metrics the sources under `dir` record: the string literal after
    /// `counter!(`, `gauge!(` or `histogram!(`.
    fn recorded(dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                recorded(&p, out);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for mac in ["counter!(", "gauge!(", "histogram!("] {
                for (i, _) in text.match_indices(mac) {
                    let rest = text[i + mac.len()..].trim_start();
                    if let Some(lit) = rest.strip_prefix('"')
                        && let Some(end) = lit.find('"')
                        && lit[..end].starts_with(|c: char| c.is_ascii_lowercase())
                        && lit[..end]
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        out.insert(lit[..end].to_string());
                    }
                }
            }
        }
    }

    #[test]
    fn every_recorded_metric_is_in_the_catalog_and_back() {
        let mut used = BTreeSet::new();
        recorded(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut used,
        );
        assert!(used.len() > 50, "the scan found the metrics: {used:?}");
        let listed: BTreeSet<String> = METRICS.iter().map(|m| m.name.to_string()).collect();
        let missing: Vec<_> = used.difference(&listed).collect();
        assert!(
            missing.is_empty(),
            "recorded but not in METRICS: {missing:?}"
        );
        // The process metrics are recorded through their names in `process.rs`.
        let unused: Vec<_> = listed
            .difference(&used)
            .filter(|n| !n.starts_with("process_"))
            .collect();
        assert!(
            unused.is_empty(),
            "in METRICS but never recorded: {unused:?}"
        );
    }

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = BTreeSet::new();
        for m in METRICS {
            assert!(seen.insert(m.name), "{} listed twice", m.name);
            assert!(
                m.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                m.name
            );
            assert_eq!(
                m.kind == Counter,
                m.name.ends_with("_total"),
                "{}: counters, and only they, end in _total",
                m.name
            );
            assert!(m.label.is_some() || m.values.is_empty(), "{}", m.name);
            assert!(!m.help.is_empty(), "{}", m.name);
        }
    }
}
