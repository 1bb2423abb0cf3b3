//! The metrics address's HTTP side: the process's Prometheus recorder and the axum
//! routes (`/`, `/status.json`, `/metrics`) that serve a [`StatusPage`].

use super::StatusPage;
use super::html::{render, render_error};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusHandle};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// The process's Prometheus recorder: installed by the first device that serves a
/// metrics address, before its driver starts (what is recorded before the recorder is
/// installed is lost); every device of the process renders it (none: another recorder
/// was installed first).
pub fn recorder() -> Option<&'static PrometheusHandle> {
    static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    RECORDER
        .get_or_init(|| {
            let buckets = [
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0,
            ];
            // Inputs per driver turn are counts up to `MAX_BATCH`, not seconds.
            let batch = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
            // A renewal's age is at least the chunk's period (600 ms); the lease is 2 s.
            let renewal = [0.6, 0.65, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0, 3.0, 5.0];
            let built = metrics_exporter_prometheus::PrometheusBuilder::new()
                .set_buckets(&buckets)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("tenure_driver_batch_inputs".into()),
                        &batch,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("tenure_lease_renewal_age_seconds".into()),
                        &renewal,
                    )
                })
                .and_then(|b| b.install_recorder());
            match built {
                Ok(handle) => {
                    crate::telemetry::catalog::register();
                    crate::telemetry::process::started();
                    // The recorder drains its histograms only when asked to (the exporter's
                    // own listener did this with a task of its own).
                    let h = handle.clone();
                    let spawned = std::thread::Builder::new()
                        .name("tenure-metrics-upkeep".into())
                        .spawn(move || {
                            loop {
                                std::thread::sleep(Duration::from_secs(5));
                                h.run_upkeep();
                            }
                        });
                    if let Err(e) = spawned {
                        warn!("metrics upkeep not started: {e}");
                    }
                    Some(handle)
                }
                Err(e) => {
                    warn!("metrics recorder not installed: {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// Bind nothing: serve the metrics address on `listener` until `stop`.
/// Who may read it is `access`'s to say.
pub fn serve(
    listener: TcpListener,
    page: StatusPage,
    access: crate::http_auth::Access,
    stop: CancellationToken,
) {
    let addr = page.metrics_addr;
    let app = Router::new()
        .route("/", get(html))
        .route("/status.json", get(json))
        .route("/metrics", get(prometheus))
        .with_state(Arc::new(page))
        .layer(axum::middleware::from_fn_with_state(
            access,
            crate::http_auth::guard,
        ));
    tokio::spawn(async move {
        info!(%addr, "metrics and status page listening");
        let r = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(e) = r {
            error!(%addr, "metrics endpoint stopped: {e}");
        }
    });
}

pub(super) async fn prometheus() -> Response {
    crate::telemetry::process::sample();
    match recorder() {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no Prometheus recorder in this process\n",
        )
            .into_response(),
    }
}

pub(super) async fn json(State(page): State<Arc<StatusPage>>) -> Response {
    match page.gather().await {
        Ok(p) => match serde_json::to_string_pretty(&p) {
            Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        },
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
    }
}

pub(super) async fn html(State(page): State<Arc<StatusPage>>) -> Response {
    let body = match page.gather().await {
        Ok(p) => render(&p),
        Err(e) => render_error(page.me, &e),
    };
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}
