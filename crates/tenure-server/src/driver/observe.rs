//! The driver's metrics: handles looked up once, request labels, the gauges set about
//! once a second, and observations turned into metrics and logs.

use super::Driver;
use std::collections::HashMap;
use tenure_core::ids::StoreId;
use tenure_core::io::{EpochCause, Observation, Request};
use tracing::{debug, info};

/// Handles of the metrics recorded for every request, message or turn: looked up in the
/// registry once, not at each use.
pub(super) struct HotMetrics {
    pub(super) batch_inputs: metrics::Histogram,
    pub(super) turn_seconds: metrics::Histogram,
    pub(super) accept_local: metrics::Histogram,
    pub(super) accept_remote: metrics::Histogram,
    pub(super) renewal_age_local: metrics::Histogram,
    pub(super) renewal_age_remote: metrics::Histogram,
    pub(super) writes: metrics::Counter,
    pub(super) chunk_ops_served: metrics::Counter,
    /// Latency histograms per request kind.
    pub(super) requests: HashMap<&'static str, RequestMetrics>,
}

impl HotMetrics {
    pub(super) fn new() -> HotMetrics {
        // Counters that may stay at zero for a long time are shown from the start.
        metrics::counter!("tenure_object_gc_lease_takeovers_total").increment(0);
        for outcome in ["sent", "applied", "refused"] {
            metrics::counter!("tenure_coordinator_commands_total", "outcome" => outcome)
                .increment(0);
        }
        HotMetrics {
            batch_inputs: metrics::histogram!("tenure_driver_batch_inputs"),
            turn_seconds: metrics::histogram!("tenure_driver_turn_seconds"),
            accept_local: metrics::histogram!("tenure_safetalk_accept_seconds", "chunk" => "local"),
            accept_remote: metrics::histogram!("tenure_safetalk_accept_seconds", "chunk" => "remote"),
            renewal_age_local: metrics::histogram!("tenure_lease_renewal_age_seconds", "chunk" => "local"),
            renewal_age_remote: metrics::histogram!("tenure_lease_renewal_age_seconds", "chunk" => "remote"),
            writes: metrics::counter!("tenure_writes_total"),
            chunk_ops_served: metrics::counter!("tenure_chunk_ops_served_total"),
            requests: HashMap::new(),
        }
    }

    /// The latency histograms of requests of `kind`.
    pub(super) fn request(&mut self, kind: &'static str) -> RequestMetrics {
        self.requests
            .entry(kind)
            .or_insert_with(|| RequestMetrics {
                answered: metrics::histogram!("tenure_request_answered_seconds", "kind" => kind),
                seconds: metrics::histogram!("tenure_request_seconds", "kind" => kind),
            })
            .clone()
    }
}

/// The latency histograms of one kind of request.
#[derive(Clone)]
pub(super) struct RequestMetrics {
    /// Until the core answered.
    pub(super) answered: metrics::Histogram,
    /// Until the answer left (durable).
    pub(super) seconds: metrics::Histogram,
}

/// The metric label of a request.
pub(super) fn request_kind(req: &Request) -> &'static str {
    match req {
        Request::Write { .. } => "write",
        Request::OpenSession { .. } => "open_session",
        Request::KeepAlive { .. } => "keep_alive",
        Request::CloseSession { .. } => "close_session",
        Request::Acquire { .. } => "acquire",
        Request::Release { .. } => "release",
        Request::ReleaseFenced { .. } => "release_fenced",
        Request::Holders { .. } => "holders",
        Request::LocksUnder { .. } => "locks_under",
        Request::AttachSession(_) => "attach_session",
        Request::Under(u) => request_kind(&u.req),
        Request::Object { req, .. } => {
            use tenure_core::io::ObjectRequest as O;
            match req {
                O::Put { .. } => "object_put",
                O::Get { .. } => "object_get",
                O::Head { .. } => "object_head",
                O::Delete { .. } => "object_delete",
                O::List { .. } => "object_list",
                O::MultipartInitiate { .. } => "object_multipart_initiate",
                O::MultipartPart { .. } => "object_multipart_part",
                O::MultipartComplete { .. } => "object_multipart_complete",
                O::MultipartAbort { .. } => "object_multipart_abort",
                O::Watch { .. } => "object_watch",
                O::Unwatch { .. } => "object_unwatch",
                O::Poll { .. } => "object_poll",
            }
        }
    }
}

/// The metric label of a lookup request.
pub(super) fn lookup_kind(req: &tenure_core::lookup::LookupRequest) -> &'static str {
    use tenure_core::lookup::LookupRequest as L;
    match req {
        L::Publish { .. } => "lookup_publish",
        L::Revoke { .. } => "lookup_revoke",
        L::Get { .. } => "lookup_get",
        L::List { .. } => "lookup_list",
        L::Subscribe { .. } => "lookup_subscribe",
        L::Unsubscribe { .. } => "lookup_unsubscribe",
        L::Status => "lookup_status",
    }
}

impl Driver {
    /// The object gauges of the stores managed here: active objects and their bytes, the
    /// collector's backlog (manifests pending deletion), and the watches served.
    pub(super) fn object_gauges(&self) {
        let t = self.tallies.objects();
        let (objects, bytes, backlog) = (t.objects, t.bytes, t.gc_backlog);
        metrics::gauge!("tenure_objects").set(objects as f64);
        metrics::gauge!("tenure_object_bytes").set(bytes as f64);
        metrics::gauge!("tenure_object_gc_backlog").set(backlog as f64);
        metrics::gauge!("tenure_object_watches").set(self.watches.len() as f64);
    }
}

impl Driver {
    /// The layout's gauges and the session and lock counts of the stores managed here
    /// (set about once a second).
    pub(super) fn table_gauges(&self) {
        let cfg = self.device.config();
        metrics::gauge!("tenure_stores").set(f64::from(cfg.cluster.stores));
        metrics::gauge!("tenure_chunks").set(self.device.chunk_views().len() as f64);
        let mut sessions = 0usize;
        for m in self.device.manager_views() {
            if let Some(t) = self.device.managed_tables(m.store) {
                sessions += t.sessions.open.len();
            }
        }
        let held = self.tallies.locks_held();
        metrics::gauge!("tenure_sessions").set(sessions as f64);
        metrics::gauge!("tenure_locks_held").set(held as f64);
    }
}

/// The coordinator's gauges (set about once a second): its term as this device knows
/// it, and whether this device acts as the coordinator.
pub(super) fn coordinator_gauges(d: &tenure_core::Device) {
    metrics::gauge!("tenure_coordinator_term").set(d.coordinator().map_or(0.0, |t| t.n as f64));
    metrics::gauge!("tenure_is_coordinator")
        .set(f64::from(u8::from(d.acting_coordinator().is_some())));
}

/// The lookup node's gauges (set about once a second from its view).
pub(super) fn lookup_gauges(v: &tenure_core::lookup::NodeView) {
    use tenure_core::lookup::NodeState;
    metrics::gauge!("tenure_lookup_entries").set(v.entries as f64);
    metrics::gauge!("tenure_lookup_subscriptions").set(v.subscriptions as f64);
    let active = v.up.iter().filter(|(_, s)| s.is_some()).count();
    metrics::gauge!("tenure_lookup_active_nodes").set(active as f64);
    metrics::gauge!("tenure_lookup_up_nodes").set(v.up.len() as f64);
    let state = match v.state {
        NodeState::Passive => 0.0,
        NodeState::Joining => 1.0,
        NodeState::WarmingUp => 2.0,
        NodeState::Active => 3.0,
        NodeState::Leader => 4.0,
    };
    metrics::gauge!("tenure_lookup_state").set(state);
}

fn store_label(s: StoreId) -> String {
    s.0.to_string()
}

/// Turn an observation into metrics and logs.
pub(super) fn observe(obs: &Observation, hot: &HotMetrics) {
    match obs {
        Observation::BecameManager {
            store,
            epoch,
            cause,
            ..
        } => {
            let cause = match cause {
                EpochCause::Regeneration => "regeneration",
                EpochCause::Migration => "migration",
                EpochCause::Relayout => "relayout",
            };
            info!(%store, %epoch, cause, "became manager");
            metrics::counter!("tenure_epochs_total", "cause" => cause).increment(1);
            if cause == "regeneration" {
                metrics::counter!("tenure_regenerations_total").increment(1);
            }
            metrics::gauge!("tenure_store_epoch", "store" => store_label(*store))
                .set(epoch.0 as f64);
            metrics::gauge!("tenure_managed_stores").increment(1.0);
        }
        Observation::StoppedManaging { store, epoch } => {
            info!(%store, %epoch, "stopped managing");
            metrics::gauge!("tenure_managed_stores").decrement(1.0);
        }
        Observation::ChunkFailed { store, chunk, why } => {
            info!(%store, %chunk, %why, "chunk marked failed");
            metrics::counter!("tenure_chunk_failures_total").increment(1);
        }
        Observation::ChunkCommitted { chunk, epoch } => {
            debug!(%chunk, %epoch, "chunk committed epoch");
            metrics::counter!("tenure_chunk_commits_total").increment(1);
        }
        Observation::ChunkCollected { chunk } => {
            info!(%chunk, "chunk garbage-collected");
            metrics::counter!("tenure_chunks_collected_total").increment(1);
        }
        Observation::WriteAcked { .. } => hot.writes.increment(1),
        Observation::ChunkServed { .. } => hot.chunk_ops_served.increment(1),
        Observation::RelayoutBegun {
            store,
            patched,
            whole,
        } => {
            let whole: Vec<String> = (whole.iter())
                .map(|(c, why)| format!("{c} ({why})"))
                .collect();
            info!(%store, patched, whole = %whole.join(", "), "relayout begun");
        }
        Observation::Relayout { store, committed } => {
            info!(%store, committed, "relayout finished");
            metrics::counter!("tenure_relayouts_total", "committed" => committed.to_string())
                .increment(1);
        }
        Observation::Migration { store, committed } => {
            info!(%store, committed, "migration finished");
            metrics::counter!("tenure_migrations_total", "committed" => committed.to_string())
                .increment(1);
        }
        Observation::SessionEnding {
            store,
            session,
            expired,
            released,
            ..
        } => {
            let how = if *expired { "expired" } else { "closed" };
            info!(%store, session = session.0, how, locks = released.len(), "session ending");
            metrics::counter!("tenure_session_ends_total", "how" => how).increment(1);
            if *expired {
                metrics::counter!("tenure_session_expiries_total").increment(1);
                metrics::counter!("tenure_expiry_released_locks_total")
                    .increment(released.len() as u64);
            }
        }
        Observation::LookupState { state, start } => {
            use tenure_core::lookup::NodeState;
            info!(?state, start = start.map(|s| s.0), "lookup node state");
            let label = tenure_client::lookup::convert::state_name(*state);
            metrics::counter!("tenure_lookup_state_changes_total", "state" => label).increment(1);
            if *state == NodeState::Leader {
                metrics::counter!("tenure_lookup_leader_changes_total").increment(1);
            }
            metrics::gauge!("tenure_lookup_leader")
                .set(f64::from(u8::from(*state == NodeState::Leader)));
        }
        Observation::LookupExpired { persistent } => {
            let d = if *persistent {
                "persistent"
            } else {
                "volatile"
            };
            metrics::counter!("tenure_lookup_expiries_total", "durability" => d).increment(1);
        }
        Observation::GcLeaseTakeover { store } => {
            info!(%store, "deletion lease taken over");
            metrics::counter!("tenure_object_gc_lease_takeovers_total").increment(1);
        }
        Observation::Coordinator { term } => {
            info!(coordinator = %term.leader, term = term.n, "coordinator elected");
            metrics::gauge!("tenure_coordinator_term").set(term.n as f64);
            metrics::counter!("tenure_coordinator_changes_total").increment(1);
        }
        Observation::CommandSent { term, to, cmd } => {
            debug!(term = term.n, %to, ?cmd, "coordinator command sent");
            metrics::counter!("tenure_coordinator_commands_total", "outcome" => "sent")
                .increment(1);
        }
        Observation::CommandApplied { term, cmd } => {
            info!(term = term.n, coordinator = %term.leader, ?cmd, "coordinator command applied");
            metrics::counter!("tenure_coordinator_commands_total", "outcome" => "applied")
                .increment(1);
        }
        Observation::CommandRefused { term, newest } => {
            info!(
                term = term.n,
                newest = newest.n,
                "coordinator command of an older term refused"
            );
            metrics::counter!("tenure_coordinator_commands_total", "outcome" => "refused")
                .increment(1);
        }
        // Observations the core adds later are logged until they get a metric.
        #[allow(unreachable_patterns)]
        _ => debug!(?obs, "observation"),
    }
}
