//! What the runtime did and refused, for the operator. One set per process, recorded deep in the
//! act (the fence and the guard run below any handle a service could pass) and registered into
//! the process's registry by [`register`]. Every label is a code from a closed set.

use std::sync::LazyLock;

use telemetry::{Counters, Gauge, Histograms, LATENCY_BUCKETS, Registry};

#[derive(Debug)]
pub struct RuntimeMetrics {
    /// Acts by the contract's code (`OK`, `STALE_SNAPSHOT`, …).
    pub acts: Counters<1>,
    /// Grant refusals by the coverage rule's code.
    pub grant_refusals: Counters<1>,
    /// Acts whose outcome is unknown (the page did not settle, the fence refused, the guard let go).
    pub outcome_unknown: Counters<1>,
    /// Requests and windows the fence refused, by kind.
    pub fence_blocks: Counters<1>,
    /// Trusted inputs (presses, clicks, keys) the guard stopped during an act.
    pub guard_stops: Counters<1>,
    /// Browsers restarted after a crash, by whether the restart worked.
    pub restarts: Counters<1>,
    /// Dispatch tickets refused, by why.
    pub tickets_refused: Counters<1>,
    /// Open sessions, each holding a browser of the pool.
    pub sessions_open: Gauge,
    /// The pool's size.
    pub pool_size: Gauge,
    /// Observe, act, read-form and screenshot latency.
    pub latency: Histograms<1>,
}

pub static METRICS: LazyLock<RuntimeMetrics> = LazyLock::new(|| RuntimeMetrics {
    acts: Counters::default(),
    grant_refusals: Counters::default(),
    outcome_unknown: Counters::default(),
    fence_blocks: Counters::default(),
    guard_stops: Counters::default(),
    restarts: Counters::default(),
    tickets_refused: Counters::default(),
    sessions_open: Gauge::default(),
    pool_size: Gauge::default(),
    latency: telemetry::histograms(&LATENCY_BUCKETS),
});

/// Registers the runtime's metrics in `registry` (once per process).
pub fn register(registry: &mut Registry) {
    let m = &*METRICS;
    let r = registry.sub_registry_with_prefix("runtime");
    r.register(
        "acts",
        "Acts answered, by the tool contract's code (SESSION_ERROR: the call failed instead)",
        m.acts.clone(),
    );
    r.register("grant_refusals", "Acts a grant's constraint refused, by the coverage rule", m.grant_refusals.clone());
    r.register("outcome_unknown", "Acts sent whose outcome is unknown, by cause", m.outcome_unknown.clone());
    r.register("fence_blocks", "Requests and windows the fence refused, by kind", m.fence_blocks.clone());
    r.register("guard_stops", "Trusted inputs the guard stopped during an act", m.guard_stops.clone());
    r.register("browser_restarts", "Browsers restarted after a crash, by outcome", m.restarts.clone());
    r.register("tickets_refused", "Dispatch tickets refused, by code", m.tickets_refused.clone());
    r.register("sessions_open", "Open sessions, each holding one browser of the pool", m.sessions_open.clone());
    r.register("pool_size", "Browsers the pool may hold", m.pool_size.clone());
    r.register("call_seconds", "Time a call spent in the browser, by call", m.latency.clone());
}
