//! The report: figures per family, the ones that must be zero, and what failed.

use serde_json::{Map, Value, json};

/// What one family measured.
#[derive(Debug, Default)]
pub(crate) struct Family {
    /// Every figure, by name.
    pub(crate) figures: Map<String, Value>,
    /// The figures that must be zero, with their values.
    pub(crate) must_be_zero: Vec<(&'static str, u64)>,
    /// What a reader needs to replay a failure (seeds, inputs, directories).
    pub(crate) failures: Vec<String>,
}

impl Family {
    /// Records a figure.
    pub(crate) fn set(&mut self, name: &str, value: impl Into<Value>) {
        self.figures.insert(name.to_owned(), value.into());
    }

    /// Records a figure that must be zero.
    pub(crate) fn zero(&mut self, name: &'static str, value: u64) {
        self.figures.insert(name.to_owned(), json!(value));
        self.must_be_zero.push((name, value));
    }

    /// Records a failure (at most 20 are kept; the count says how many there were).
    pub(crate) fn fail(&mut self, what: String) {
        if self.failures.len() < 20 {
            self.failures.push(what);
        }
    }

    /// The names of the must-be-zero figures that are not.
    pub(crate) fn broken(&self) -> Vec<String> {
        self.must_be_zero
            .iter()
            .filter(|(_, value)| *value != 0)
            .map(|(name, value)| format!("{name} = {value}"))
            .collect()
    }

    pub(crate) fn to_json(&self, seconds: f64) -> Value {
        let zero: Map<String, Value> = self
            .must_be_zero
            .iter()
            .map(|(name, value)| ((*name).to_owned(), json!(value)))
            .collect();
        json!({
            "seconds": (seconds * 10.0).round() / 10.0,
            "figures": self.figures,
            "must_be_zero": zero,
            "failures": self.failures,
        })
    }
}

/// Percentiles of durations in milliseconds, rounded to 0.01 ms.
pub(crate) fn percentiles_ms(samples: &mut [f64]) -> Value {
    if samples.is_empty() {
        return json!(null);
    }
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let index = ((samples.len() - 1) as f64 * p).round() as usize;
        (samples[index] * 100.0).round() / 100.0
    };
    json!({ "p50": at(0.5), "p99": at(0.99), "max": at(1.0) })
}
