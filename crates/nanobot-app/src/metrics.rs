//! `nanobot serve`'s Prometheus exporter: the one recorder of the process, installed on the
//! first serve, every metric the libraries record described with its unit and its series
//! started at zero (a scraper sees each one before it first happens). The names and labels
//! are documented in the server's README (`crates/nanobot-serve/README.md`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::AppError;

/// Histogram buckets, in seconds: a lock wait or a search (milliseconds) up to a slow
/// model's answer (minutes).
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// How often old histogram samples are folded away (the exporter's upkeep).
const UPKEEP: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The renderer of the process's metrics, installing the exporter the first time.
pub fn renderer() -> Result<nanobot_serve::RenderMetrics, AppError> {
    let handle = match HANDLE.get() {
        Some(handle) => handle.clone(),
        None => {
            let handle = PrometheusBuilder::new()
                .set_buckets(SECONDS)
                .and_then(PrometheusBuilder::install_recorder)
                .map_err(|e| AppError::Usage(format!("cannot start the metrics exporter: {e}")))?;
            nanobot_serve::describe_metrics();
            let _ = HANDLE.set(handle.clone());
            let upkeep = handle.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(UPKEEP).await;
                    upkeep.run_upkeep();
                }
            });
            handle
        }
    };
    Ok(Arc::new(move || handle.render()))
}
