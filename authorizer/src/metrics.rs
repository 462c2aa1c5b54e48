//! What the authority decided and recorded, as counters an operator can ask of: how often the
//! code stopped the model, how often a task grant did not cover an act and why, how grants end.
//! Recorded where each decision is made; every label is a code from a closed set.

use grant_domain::catalogue::{AuthorizationKind, Event};
use grant_domain::model::{Decision, NotCovered};
use telemetry::{Counter, Counters, Registry};

/// The authorizer's own metrics (the gate's gRPC metrics are `transport`'s).
#[derive(Debug, Clone, Default)]
pub struct AuthorizerMetrics {
    authorizations: Counters<2>,
    denials: Counters<1>,
    replayed: Counters<1>,
    approvals_requested: Counters<1>,
    approvals_resolved: Counters<1>,
    grants_created: Counter,
    grants_ended: Counters<1>,
    uses: Counter,
    retries: Counters<1>,
    facts_refused: Counters<1>,
    tokens: Counters<1>,
}

impl AuthorizerMetrics {
    /// Registers every family in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("authorizer");
        r.register(
            "authorizations",
            "Authorize calls decided, by decision (allow, require_approval, deny) and what allowed it",
            m.authorizations.clone(),
        );
        r.register("denials", "Acts refused outright (no card), by code", m.denials.clone());
        r.register(
            "replayed_calls",
            "Retried Authorize calls answered with their first decision, spending nothing",
            m.replayed.clone(),
        );
        r.register(
            "approvals_requested",
            "Cards asked, by why no grant covered the act (no_task_grant when there was none)",
            m.approvals_requested.clone(),
        );
        r.register("approvals_resolved", "Cards answered, by the owner's choice", m.approvals_resolved.clone());
        r.register("task_grants_created", "Task grants created by Allow for this task", m.grants_created.clone());
        r.register("task_grants_ended", "Task grants ended, by reason", m.grants_ended.clone());
        r.register(
            "task_grant_uses",
            "Acts a task grant allowed (each one use, consumed before dispatch)",
            m.uses.clone(),
        );
        r.register(
            "decision_retries",
            "Decisions made again from a fresh read after another request changed what they read",
            m.retries.clone(),
        );
        r.register(
            "sealed_facts_refused",
            "Sealed facts, text or form refused, by reason (FACTS_NOT_SEALED, FACTS_INVALID)",
            m.facts_refused.clone(),
        );
        r.register("token_redemptions", "Approval tokens redeemed or refused", m.tokens.clone());
        m
    }

    /// One Authorize call's decision, fresh (`replayed` false) or a retry's.
    pub(crate) fn decided(&self, decision: &Decision, replayed: bool) {
        let (name, kind) = match decision {
            Decision::Allow { kind, .. } => ("allow", kind.code()),
            Decision::RequireApproval { .. } => ("require_approval", "none"),
            Decision::Deny(_) => ("deny", "none"),
        };
        if replayed {
            self.replayed.get_or_create(&[("decision", name)]).inc();
            return;
        }
        self.authorizations.get_or_create(&[("decision", name), ("kind", kind)]).inc();
        if let Decision::Deny(denial) = decision {
            self.denials.get_or_create(&[("code", denial.label())]).inc();
        }
    }

    /// Events the authority has just committed (never a replay's: those were counted when first
    /// recorded).
    pub(crate) fn recorded(&self, events: &[Event]) {
        for event in events {
            match event {
                Event::ApprovalRequested(a) => {
                    let reason = a.not_covered_reason.as_deref().map_or("no_task_grant", NotCovered::label);
                    self.approvals_requested.get_or_create(&[("reason", reason)]).inc();
                }
                Event::ApprovalResolved(r) => {
                    self.approvals_resolved.get_or_create(&[("resolution", r.resolution.code())]).inc();
                }
                Event::TaskGrantCreated(_) => {
                    self.grants_created.inc();
                }
                Event::TaskGrantEnded(e) => {
                    self.grants_ended.get_or_create(&[("reason", e.reason.code())]).inc();
                }
                Event::ToolCallAuthorized(u) if u.grant_id.is_some() => {
                    self.uses.inc();
                }
                // An approve-once card's act, allowed once: the third kind of allow.
                Event::ApprovalTokenRedeemed(_) => {
                    self.tokens.get_or_create(&[("outcome", "redeemed")]).inc();
                    let once = [("decision", "allow"), ("kind", AuthorizationKind::Approval.code())];
                    self.authorizations.get_or_create(&once).inc();
                }
                _ => {}
            }
        }
    }

    /// A decision made again: `what` is `command`, `authorize`, or `remembered` (an allow decided
    /// on a remembered read whose use found something moved since).
    pub(crate) fn retried(&self, what: &'static str) {
        self.retries.get_or_create(&[("what", what)]).inc();
    }

    /// Sealed facts, text or a form refused for `reason`.
    pub(crate) fn facts_refused(&self, reason: &'static str) {
        self.facts_refused.get_or_create(&[("reason", reason)]).inc();
    }

    /// An approval token's redemption: `redeemed` or `refused`.
    pub(crate) fn token(&self, outcome: &'static str) {
        self.tokens.get_or_create(&[("outcome", outcome)]).inc();
    }
}
