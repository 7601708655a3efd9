//! `nanobot serve`'s metrics: the process's one recorder (`nanobot_serve`'s Prometheus
//! recorder), installed on the first serve with every metric described, rendered by
//! `/metrics`. The names and labels are documented in `crates/nanobot-serve/README.md`.

use std::sync::{Arc, OnceLock};

use nanobot_serve::PrometheusRecorder;

use crate::AppError;

static RECORDER: OnceLock<PrometheusRecorder> = OnceLock::new();

/// The renderer of the process's metrics, installing the recorder the first time.
pub fn renderer() -> Result<nanobot_serve::RenderMetrics, AppError> {
    let recorder = match RECORDER.get() {
        Some(recorder) => recorder.clone(),
        None => {
            let recorder = PrometheusRecorder::new();
            metrics::set_global_recorder(recorder.clone()).map_err(|_| {
                AppError::Usage("another metrics recorder is installed in this process".into())
            })?;
            nanobot_serve::describe_metrics();
            let _ = RECORDER.set(recorder.clone());
            recorder
        }
    };
    Ok(Arc::new(move || recorder.render()))
}
