//! The MCP server's metrics: tool calls by tool and how they were answered, their time, and
//! runs started. Tool names and answers are closed sets (an unknown tool is `other`). The runs'
//! own enforcements are the harness's families, registered beside these.

use std::sync::LazyLock;

use telemetry::{Counters, Histograms, Registry};

#[derive(Debug)]
struct McpMetrics {
    calls: Counters<2>,
    seconds: Histograms<1>,
    runs: Counters<1>,
}

const SECONDS: [f64; 10] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 60.0, 600.0];

static METRICS: LazyLock<McpMetrics> = LazyLock::new(|| McpMetrics {
    calls: Counters::default(),
    seconds: telemetry::histograms(&SECONDS),
    runs: Counters::default(),
});

/// Registers the MCP server's metrics, and the harness's, in `registry` (once per process).
pub fn register(registry: &mut Registry) {
    let m = &*METRICS;
    let r = registry.sub_registry_with_prefix("mcp");
    r.register(
        "tool_calls",
        "Tool calls, by tool and answer (ok, refused, unauthenticated, unavailable)",
        m.calls.clone(),
    );
    r.register(
        "tool_call_seconds",
        "Time to answer a tool call, by tool (an approval waits for the owner)",
        m.seconds.clone(),
    );
    r.register("runs", "Runs started, by how the start went (started, refused)", m.runs.clone());
    agent::metrics::register(registry);
}

/// A tool's name as a label: one of the contract's, or `other`.
fn tool_label(tool: &str) -> &'static str {
    agent::tools::tools().into_iter().map(|t| t.name).find(|n| *n == tool).unwrap_or("other")
}

/// One call answered.
pub(crate) fn called(tool: &str, answer: &'static str, seconds: f64) {
    let m = &*METRICS;
    let tool = tool_label(tool);
    m.calls.get_or_create(&[("tool", tool), ("answer", answer)]).inc();
    m.seconds.get_or_create(&[("tool", tool)]).observe(seconds);
}

/// One run's start, `started` or `refused`.
pub(crate) fn run_started(how: &'static str) {
    METRICS.runs.get_or_create(&[("start", how)]).inc();
}
