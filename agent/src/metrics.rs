//! The harness's metrics, for the operator and as evals (the contract: every enforcement counter
//! is one): runs by how they ended, escalations by reason, rule enforcements by rule (model and
//! runtime disagreeing on `consequential` among them), steps per run. One set per process.

use std::sync::LazyLock;

use telemetry::{Counters, Histogram, Registry};

use crate::rules::End;

#[derive(Debug)]
struct HarnessMetrics {
    runs: Counters<1>,
    escalations: Counters<1>,
    enforcements: Counters<1>,
    steps: Histogram,
}

static METRICS: LazyLock<HarnessMetrics> = LazyLock::new(|| HarnessMetrics {
    runs: Counters::default(),
    escalations: Counters::default(),
    enforcements: Counters::default(),
    steps: telemetry::histogram(&STEP_BUCKETS),
});

const STEP_BUCKETS: [f64; 8] = [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0];

/// Registers the harness's metrics in `registry` (once per process).
pub fn register(registry: &mut Registry) {
    let m = &*METRICS;
    let r = registry.sub_registry_with_prefix("harness");
    r.register("runs", "Runs ended, by end (done or escalated)", m.runs.clone());
    r.register("escalations", "Runs escalated, by reason", m.escalations.clone());
    r.register("enforcements", "Rule enforcements, by rule (each one an eval)", m.enforcements.clone());
    r.register("steps_per_run", "Steps a run took before it ended", m.steps.clone());
}

/// One run ended as `end` after `steps`, with `counts` enforcements by rule.
pub(crate) fn ended(end: &End, steps: u32, counts: &std::collections::HashMap<&'static str, u32>) {
    let m = &*METRICS;
    m.steps.observe(f64::from(steps));
    match end {
        End::Done { .. } => m.runs.get_or_create(&[("end", "done")]).inc(),
        End::Escalated { reason, .. } => {
            m.runs.get_or_create(&[("end", "escalated")]).inc();
            m.escalations.get_or_create(&[("reason", reason.code())]).inc()
        }
    };
    for (rule, n) in counts {
        m.enforcements.get_or_create(&[("rule", *rule)]).inc_by(u64::from(*n));
    }
}
