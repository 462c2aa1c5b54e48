//! What an operator sees of a running service: its Prometheus metrics on a listener of its own,
//! a health answer beside them, the gRPC server metrics in the ecosystem's names, and the logs
//! (JSON lines when the output is not a terminal).
//!
//! One registry per process, built at start-up: each crate registers its own families into it
//! (`Registry::sub`) and records where it decides. Label values come from closed sets only: an
//! enum, or a string checked against a list fixed at start-up (`Known`).
//!
//! Depends on no crate of the workspace and knows nothing of grants, gRPC services or browsers.

mod grpc;
mod listener;
mod logs;

use std::sync::Arc;

pub use grpc::{GrpcMetrics, code_name};
pub use listener::{Health, HealthCheck, MetricsError, MetricsListen, serve};
pub use logs::init_logs;
pub use prometheus_client::metrics::counter::Counter;
pub use prometheus_client::metrics::family::Family;
pub use prometheus_client::metrics::gauge::Gauge;
pub use prometheus_client::metrics::histogram::Histogram;
pub use prometheus_client::registry::Registry;

/// Buckets for a call's handling time, in seconds: from a keyed lookup (under a millisecond) to a
/// bounded wait for an owner (twenty seconds).
pub const LATENCY_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 20.0];

/// Buckets for a person's time, in seconds: how long an owner looked at a card before answering.
pub const DWELL_BUCKETS: [f64; 12] = [0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 300.0, 900.0];

/// A histogram family with `buckets`, for `Family::new_with_constructor`.
#[derive(Debug, Clone, Copy)]
pub struct Buckets(pub &'static [f64]);

impl prometheus_client::metrics::family::MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// A label set of `N` names and values, each `&'static str`: a value spelt in the code, so the
/// set of series is closed by construction.
pub type Labels<const N: usize> = [(&'static str, &'static str); N];

/// Counters by `N` labels.
pub type Counters<const N: usize> = Family<Labels<N>, Counter>;

/// Histograms by `N` labels.
pub type Histograms<const N: usize> = Family<Labels<N>, Histogram, Buckets>;

/// Gauges by `N` labels.
pub type Gauges<const N: usize> = Family<Labels<N>, Gauge>;

/// A histogram of `buckets`.
pub fn histogram(buckets: &'static [f64]) -> Histogram {
    Histogram::new(buckets.iter().copied())
}

/// A family of histograms with `buckets` for each label set.
pub fn histograms<L>(buckets: &'static [f64]) -> Family<L, Histogram, Buckets>
where
    L: Clone + std::hash::Hash + Eq,
{
    Family::new_with_constructor(Buckets(buckets))
}

/// The exposition of `registry` in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// A set of label values fixed at start-up; anything else is recorded as `other`, so a caller
/// who sends made-up names cannot grow the series without bound.
#[derive(Debug, Clone, Default)]
pub struct Known(Arc<std::collections::HashSet<String>>);

impl Known {
    pub fn new(values: impl IntoIterator<Item = String>) -> Self {
        Self(Arc::new(values.into_iter().collect()))
    }

    /// `value` when it is one of the set, otherwise `other`.
    pub fn label(&self, value: &str) -> String {
        if self.0.contains(value) { value.to_owned() } else { "other".to_owned() }
    }
}
