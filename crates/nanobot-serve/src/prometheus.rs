//! A small recorder for the `metrics` facade that renders Prometheus' text format: counters,
//! gauges and histograms with fixed buckets, each series an atomic, nothing sampled or
//! expired. It is all `nanobot serve` needs, without the exporter crate's dependency tree
//! (a second `rand`, `getrandom` and Windows crates).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Histogram buckets, in seconds: a lock wait or a search (milliseconds) up to a slow
/// model's answer (minutes).
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// The process's metrics, as [`PrometheusRecorder::render`] writes them.
#[derive(Debug, Clone, Default)]
pub struct PrometheusRecorder {
    registry: Arc<Registry>,
}

/// Series by name, then by their labels (rendered `k="v",...`).
#[derive(Debug, Default)]
struct Registry {
    families: Mutex<BTreeMap<String, Family>>,
    help: Mutex<BTreeMap<String, String>>,
}

#[derive(Debug)]
enum Family {
    Counter(BTreeMap<String, Arc<Value>>),
    Gauge(BTreeMap<String, Arc<Value>>),
    Histogram(BTreeMap<String, Arc<Buckets>>),
}

/// One family's series, by label text.
type Series<T> = BTreeMap<String, Arc<T>>;

/// A counter (a whole number) or a gauge (an `f64`'s bits).
#[derive(Debug, Default)]
struct Value(AtomicU64);

/// One histogram series: a count per bucket (not cumulative), the sum's bits, the count.
#[derive(Debug)]
struct Buckets {
    counts: Vec<AtomicU64>,
    sum: AtomicU64,
    count: AtomicU64,
}

impl PrometheusRecorder {
    /// An empty recorder; install it with `metrics::set_global_recorder(recorder.clone())`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every series in the text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let families = self
            .registry
            .families
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let help = self.registry.help.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        for (name, family) in families.iter() {
            if let Some(text) = help.get(name) {
                let _ = writeln!(
                    out,
                    "# HELP {name} {}",
                    text.replace('\\', "\\\\").replace('\n', "\\n")
                );
            }
            match family {
                Family::Counter(series) => {
                    let _ = writeln!(out, "# TYPE {name} counter");
                    for (labels, value) in series {
                        let _ = writeln!(
                            out,
                            "{name}{} {}",
                            braces(labels),
                            value.0.load(Ordering::Relaxed)
                        );
                    }
                }
                Family::Gauge(series) => {
                    let _ = writeln!(out, "# TYPE {name} gauge");
                    for (labels, value) in series {
                        let v = f64::from_bits(value.0.load(Ordering::Relaxed));
                        let _ = writeln!(out, "{name}{} {v}", braces(labels));
                    }
                }
                Family::Histogram(series) => {
                    let _ = writeln!(out, "# TYPE {name} histogram");
                    for (labels, buckets) in series {
                        buckets.render(name, labels, &mut out);
                    }
                }
            }
        }
        out
    }

    fn describe(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        let text = match unit {
            Some(unit) if unit != Unit::Count => format!("{description} (in {})", unit.as_str()),
            _ => description.to_string(),
        };
        self.registry
            .help
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.as_str().to_owned(), text);
    }

    /// The series of `key` in the family `make` creates (a family first registered as
    /// another kind keeps that kind; this series then records nowhere).
    fn series<T: Default + Send + Sync + 'static>(
        &self,
        key: &Key,
        make: fn() -> Family,
        pick: fn(&mut Family) -> Option<&mut Series<T>>,
    ) -> Arc<T> {
        let mut families = self
            .registry
            .families
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let family = families.entry(key.name().to_owned()).or_insert_with(make);
        match pick(family) {
            Some(series) => series.entry(label_text(key)).or_default().clone(),
            None => Arc::new(T::default()),
        }
    }
}

impl Recorder for PrometheusRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.series(
            key,
            || Family::Counter(BTreeMap::new()),
            |f| match f {
                Family::Counter(s) => Some(s),
                _ => None,
            },
        ))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.series(
            key,
            || Family::Gauge(BTreeMap::new()),
            |f| match f {
                Family::Gauge(s) => Some(s),
                _ => None,
            },
        ))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.series(
            key,
            || Family::Histogram(BTreeMap::new()),
            |f| match f {
                Family::Histogram(s) => Some(s),
                _ => None,
            },
        ))
    }
}

impl CounterFn for Value {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

impl GaugeFn for Value {
    fn increment(&self, value: f64) {
        add_f64(&self.0, value);
    }

    fn decrement(&self, value: f64) {
        add_f64(&self.0, -value);
    }

    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets {
            counts: SECONDS_BUCKETS.iter().map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
            count: AtomicU64::new(0),
        }
    }
}

impl HistogramFn for Buckets {
    fn record(&self, value: f64) {
        if let Some(at) = SECONDS_BUCKETS.iter().position(|bound| value <= *bound) {
            self.counts[at].fetch_add(1, Ordering::Relaxed);
        }
        add_f64(&self.sum, value);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

impl Buckets {
    fn render(&self, name: &str, labels: &str, out: &mut String) {
        let mut cumulative = 0;
        let joined = |le: &str| {
            if labels.is_empty() {
                format!("{{le=\"{le}\"}}")
            } else {
                format!("{{{labels},le=\"{le}\"}}")
            }
        };
        for (bound, count) in SECONDS_BUCKETS.iter().zip(&self.counts) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{} {cumulative}",
                joined(&bound.to_string())
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{} {count}", joined("+Inf"));
        let sum = f64::from_bits(self.sum.load(Ordering::Relaxed));
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

/// Adds `delta` to the `f64` whose bits `cell` holds.
fn add_f64(cell: &AtomicU64, delta: f64) {
    let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
        Some((f64::from_bits(bits) + delta).to_bits())
    });
}

/// A key's labels as `k="v",...`, values escaped as the format asks.
fn label_text(key: &Key) -> String {
    let parts: Vec<String> = key
        .labels()
        .map(|l| {
            let value = l
                .value()
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{}=\"{value}\"", l.key())
        })
        .collect();
    parts.join(",")
}

fn braces(labels: &str) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    }
}
