//! The projection workers' metrics: each projection's checkpoint, lag (events and seconds), batch
//! time, events applied, and whether its high-water mark is frozen (events wait past the
//! checkpoint and it has not moved: an open transaction somewhere holds every reader back).
//! One set per process.

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;

use telemetry::{Counters, Family, Gauges, Histograms, LATENCY_BUCKETS, Registry};

use crate::Projection;

#[derive(Debug)]
pub(crate) struct WorkerMetrics {
    pub(crate) applied: Counters<1>,
    pub(crate) batch: Histograms<1>,
    pub(crate) position: Gauges<1>,
    pub(crate) lag_events: Gauges<1>,
    pub(crate) lag_seconds: Family<telemetry::Labels<1>, telemetry::Gauge<f64, AtomicU64>>,
    pub(crate) frozen: Gauges<1>,
}

pub(crate) static METRICS: LazyLock<WorkerMetrics> = LazyLock::new(|| WorkerMetrics {
    applied: Counters::default(),
    batch: telemetry::histograms(&LATENCY_BUCKETS),
    position: Gauges::default(),
    lag_events: Gauges::default(),
    lag_seconds: Family::default(),
    frozen: Gauges::default(),
});

/// The label of `p`.
pub(crate) fn of(p: Projection) -> telemetry::Labels<1> {
    [("projection", p.name())]
}

/// Registers the workers' metrics in `registry` (once per process).
pub fn register(registry: &mut Registry) {
    let m = &*METRICS;
    let r = registry.sub_registry_with_prefix("projection");
    r.register("events_applied", "Events applied, by projection", m.applied.clone());
    r.register("batch_seconds", "Time to apply a batch and move the checkpoint, by projection", m.batch.clone());
    r.register("checkpoint_position", "The global position of the checkpoint, by projection", m.position.clone());
    r.register("lag_events", "Events committed past the checkpoint, by projection", m.lag_events.clone());
    r.register("lag_seconds", "Age of the first event past the checkpoint, by projection", m.lag_seconds.clone());
    r.register(
        "high_water_frozen",
        "1 while events wait past a checkpoint that has not moved for 30 s (an open transaction holds readers back)",
        m.frozen.clone(),
    );
}
