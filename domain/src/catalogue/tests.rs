//! The catalogue's own tests: spellings, round trips and upcasts.

use super::*;
use time::OffsetDateTime;

#[test]
fn codes_are_the_payload_spellings() {
    for k in AuthorizationKind::ALL {
        assert_eq!(serde_json::to_value(k).unwrap(), serde_json::json!(k.code()));
    }
    for r in Resolution::ALL {
        assert_eq!(serde_json::to_value(r).unwrap(), serde_json::json!(r.code()));
    }
    for r in EndReason::ALL {
        assert_eq!(serde_json::to_value(r).unwrap(), serde_json::json!(r.code()));
        assert_eq!(EndReason::from_code(r.code()), Some(r));
    }
    assert_eq!(EndReason::from_code("session_deleted"), Some(EndReason::Revoked));
    assert_eq!(EndReason::from_code("nope"), None);
}
use serde_json::json;

fn view() -> ActionView {
    ActionView { action_kind: "click".into(), action_summary: "Click a button".into(), ..ActionView::default() }
}

#[test]
fn an_early_session_deleted_end_reads_as_revoked_and_is_written_so_no_more() {
    let grant_id = Uuid::nil();
    let old: TaskGrantEnded =
        serde_json::from_value(json!({ "grant_id": grant_id, "reason": "session_deleted" })).unwrap();
    assert_eq!(old.reason, EndReason::Revoked);
    assert_eq!(serde_json::to_value(EndReason::Revoked).unwrap(), json!("revoked"));
}

#[test]
fn every_type_is_listed_once() {
    let mut names: Vec<_> = Event::TYPES.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Event::TYPES.len());
}

#[test]
fn payloads_round_trip_through_json() {
    let now = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    let events = [
        Event::ApprovalResolved(ApprovalResolved {
            approval_id: Uuid::nil(),
            resolution: Resolution::ApproveForTask,
            status: ApprovalStatus::Approved,
            grant_id: Some(Uuid::nil()),
        }),
        Event::ToolCallAuthorized(ToolCallAuthorized {
            session_id: "s1".into(),
            run_id: "r1".into(),
            tool_call_id: "t1".into(),
            authorization_kind: AuthorizationKind::BrowserTaskGrant,
            grant_id: Some(Uuid::nil()),
            use_ordinal: Some(7),
            typed_chars: 5,
            view: view(),
            snapshot_id: Some("snap_0123456789ab".into()),
            decided: None,
        }),
        Event::ApprovalRequested(ApprovalRequested {
            approval_id: Uuid::nil(),
            session_id: "s1".into(),
            run_id: "r1".into(),
            view: view(),
            offer: None,
            not_covered_reason: Some("payment".into()),
            expires_at: now,
            binding: None,
            agent_version: "agent-1".into(),
        }),
    ];
    for e in events {
        let text = serde_json::to_string(&e.payload()).unwrap();
        let back = Event::decode(e.event_type(), e.schema_version(), serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, e);
    }
}

#[test]
fn approve_for_task_resolves_to_approved() {
    assert_eq!(Resolution::ApproveForTask.status(), ApprovalStatus::Approved);
    assert_eq!(Resolution::ApproveOnce.status(), ApprovalStatus::Approved);
    assert_eq!(Resolution::Deny.status(), ApprovalStatus::Denied);
    // Taking the tab over denies the agent's act; clients read it under its own name.
    assert_eq!(Resolution::TakeOver.status(), ApprovalStatus::Denied);
    let taken = crate::model::ApprovalState::Resolved(Resolution::TakeOver);
    assert_eq!(taken.code(), "TAKEN_OVER");
}

#[test]
fn approval_resolved_v1_upcasts() {
    let cases = [
        ("approved", Resolution::ApproveOnce, ApprovalStatus::Approved),
        ("denied", Resolution::Deny, ApprovalStatus::Denied),
    ];
    for (decision, resolution, status) in cases {
        let v1 = json!({ "approval_id": Uuid::nil(), "decision": decision });
        let got = Event::decode("approval.resolved", 1, v1).unwrap();
        assert_eq!(
            got,
            Event::ApprovalResolved(ApprovalResolved { approval_id: Uuid::nil(), resolution, status, grant_id: None })
        );
    }
    let bad = json!({ "approval_id": Uuid::nil(), "decision": "maybe" });
    assert!(matches!(Event::decode("approval.resolved", 1, bad), Err(DecodeError::Malformed { .. })));
}

/// Version 3 named `take_over`; version 2 payloads (including the take-overs written as v2
/// before the bump) read unchanged, and an unknown resolution stays malformed.
#[test]
fn approval_resolved_v2_upcasts_and_v3_is_current() {
    let resolved = Event::ApprovalResolved(ApprovalResolved {
        approval_id: Uuid::nil(),
        resolution: Resolution::TakeOver,
        status: ApprovalStatus::Denied,
        grant_id: None,
    });
    assert_eq!(resolved.schema_version(), 3);
    for resolution in ["approve_once", "approve_for_task", "deny", "take_over"] {
        let status = if resolution.starts_with("approve") { "APPROVED" } else { "DENIED" };
        let v2 = json!({ "approval_id": Uuid::nil(), "resolution": resolution, "status": status, "grant_id": null });
        let got = Event::decode("approval.resolved", 2, v2.clone()).unwrap();
        assert_eq!(got.payload(), v2, "{resolution}");
    }
    let v2 = json!({ "approval_id": Uuid::nil(), "resolution": "shrug", "status": "DENIED", "grant_id": null });
    assert!(matches!(Event::decode("approval.resolved", 2, v2), Err(DecodeError::Malformed { .. })));
    assert!(matches!(
        Event::decode("approval.resolved", 4, json!({})),
        Err(DecodeError::NewerVersion { newest: 3, .. })
    ));
}

#[test]
fn unknown_and_newer_are_errors() {
    assert_eq!(
        Event::decode("grant.teleported", 1, json!({})),
        Err(DecodeError::UnknownType("grant.teleported".into()))
    );
    assert!(matches!(
        Event::decode("approval.expired", 2, json!({})),
        Err(DecodeError::NewerVersion { newest: 1, .. })
    ));
    assert!(matches!(
        Event::decode("approval.expired", 1, json!({ "approval_id": Uuid::nil(), "extra": 1 })),
        Err(DecodeError::Malformed { .. })
    ));
}

#[test]
fn a_destination_kind_is_stored_as_its_code() {
    for kind in super::DestinationKind::ALL {
        assert_eq!(serde_json::to_value(kind).unwrap(), serde_json::json!(kind.code()));
    }
}
