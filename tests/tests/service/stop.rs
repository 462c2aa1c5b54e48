//! The owner's Stop, for one chat and for every chat.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

/// The owner's Stop: the grant ends, the pending card is denied, every act is denied with no card
/// and no approved token is spent, until the owner writes again; nobody else can stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_session_acts_on_nothing_until_the_owners_next_message() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    let s = scene(&mut client).await;
    let stop = || pb::StopSessionRequest { session_id: "s1".into() };
    let before = act(None);
    let allowed = client.authorize(owner(before.clone())).await.unwrap().into_inner();
    assert!(matches!(allowed.decision, Some(pb::authorize_reply::Decision::Allow(_))), "{allowed:?}");
    let at = position();
    let err = client.stop_session(intruder(stop())).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "another owner's session does not exist for the intruder");
    assert_eq!(position(), at, "the intruder's stop wrote nothing");

    client.stop_session(owner(stop())).await.unwrap();
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id: s.grant_id.clone(), min_position: None }));
    assert_eq!(g.await.unwrap().into_inner().end_reason, "revoked");
    let get = pb::GetApprovalRequest { approval_id: s.pending.approval_id.clone(), min_position: None };
    assert_eq!(client.get_approval(owner(get)).await.unwrap().into_inner().status, "DENIED");
    let wait =
        pb::AwaitApprovalRequest { session_id: "s1".into(), approval_id: s.pending.approval_id.clone(), wait_ms: 0 };
    let waited = client.await_approval(owner(wait)).await.unwrap().into_inner();
    assert_eq!((waited.status.as_str(), waited.approval_token.as_str()), (proto::AWAIT_STOPPED, ""));
    let denied = |r: pb::AuthorizeReply| match r.decision {
        Some(pb::authorize_reply::Decision::Deny(d)) => d.code,
        other => panic!("{other:?}"),
    };
    for text in [None, Some("hola")] {
        let reply = client.authorize(owner(act(text))).await.unwrap().into_inner();
        assert_eq!(denied(reply), proto::DENY_SESSION_STOPPED, "no allow and no card while stopped");
    }
    assert_eq!(proto::DENY_SESSION_STOPPED, grant_domain::model::SESSION_STOPPED, "the worker reads the domain's code");
    // A retry of a call allowed before the Stop is not answered with its ticket again.
    let retried = client.authorize(owner(before)).await.unwrap().into_inner();
    assert_eq!(denied(retried), proto::DENY_SESSION_STOPPED);
    let at = position();
    client.stop_session(owner(stop())).await.unwrap();
    assert_eq!(position(), at, "a second stop has nothing left to record");

    // Someone else's message does not lift it; the owner's does.
    let other = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m-other".into(), from_owner: false };
    client.record_message(owner(other)).await.unwrap();
    assert_eq!(denied(client.authorize(owner(act(None))).await.unwrap().into_inner()), "session_stopped");
    let mine = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m-owner".into(), from_owner: true };
    client.record_message(owner(mine)).await.unwrap();
    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    assert!(card.offer.is_some(), "after the owner's message the agent asks again: {card:?}");
}

/// Stop everything stops each of the owner's chats, whatever they hold (a grant, a card, or only a
/// run between acts), and none of another owner's; pressed again it has nothing left to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_everything_stops_every_chat_of_the_owner_and_no_one_elses() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    let s = scene(&mut client).await;
    let bare = pb::CreateSessionRequest { session_id: "s2".into(), surface: 1, ..Default::default() };
    client.create_session(owner(bare)).await.unwrap();
    let theirs = pb::CreateSessionRequest { session_id: "s3".into(), surface: 1, ..Default::default() };
    client.create_session(intruder(theirs)).await.unwrap();
    let reply = client.stop_everything(owner(pb::StopEverythingRequest {})).await.unwrap().into_inner();
    assert_eq!((reply.stopped, reply.more), (2, true), "{reply:?}");
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id: s.grant_id.clone(), min_position: None }));
    assert_eq!(g.await.unwrap().into_inner().end_reason, "revoked");
    let get = pb::GetApprovalRequest { approval_id: s.pending.approval_id.clone(), min_position: None };
    assert_eq!(client.get_approval(owner(get)).await.unwrap().into_inner().status, "DENIED");
    for session in ["s1", "s2"] {
        let reply = client.authorize(owner(pb::AuthorizeRequest { session_id: session.into(), ..act(None) })).await;
        match reply.unwrap().into_inner().decision {
            Some(pb::authorize_reply::Decision::Deny(d)) => assert_eq!(d.code, proto::DENY_SESSION_STOPPED),
            other => panic!("{session}: {other:?}"),
        }
    }
    let theirs = client.authorize(intruder(pb::AuthorizeRequest { session_id: "s3".into(), ..act(None) })).await;
    assert!(
        !matches!(theirs.unwrap().into_inner().decision, Some(pb::authorize_reply::Decision::Deny(_))),
        "another owner's chat is not stopped"
    );
    let at = position();
    let again = client.stop_everything(owner(pb::StopEverythingRequest {})).await.unwrap().into_inner();
    assert_eq!((again.stopped, again.more), (0, false));
    assert_eq!(position(), at, "nothing left to record");
}

/// A card raised before the stop cannot be approved after it: its act would be denied anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_of_a_stopped_session_is_not_approved() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    client.stop_session(owner(pb::StopSessionRequest { session_id: "s1".into() })).await.unwrap();
    let once = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    let err = client.resolve_approval(owner(once)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(reason(&err), "APPROVAL_NOT_PENDING", "the stop denied it: {err:?}");
}

/// `CheckStop`, the runtime's last read before a dispatch and the worker's before a read: a ticket
/// of the session decided before its Stop is refused even once the owner writes again, one
/// decided after is not; a ticket of another tenant, a runtime naming another session, a worker
/// sending a ticket, a runtime sending none, another owner's session and a deleted session are
/// each refused or read as stopped, and none of it writes anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_stop_reads_the_owners_stop_and_trusts_nothing_else() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let keys = tests::ticket_keys();
    let ms = |t: time::OffsetDateTime| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap();
    let sealed = |tenant: &str, session: &str, decided: time::OffsetDateTime| {
        keys.seal(&pb::TicketBody {
            ticket_id: "t1".into(),
            tenant_id: tenant.into(),
            principal_id: "owner".into(),
            session_id: session.into(),
            authorization_kind: "approval".into(),
            decided_ms: ms(decided),
            not_after_ms: ms(decided + time::Duration::seconds(60)),
            ..Default::default()
        })
    };
    let check =
        |ticket: Option<pb::DispatchTicket>, session: &str| pb::CheckStopRequest { session_id: session.into(), ticket };
    let runtime = |m| with_role(Role::Runtime, "owner", m);
    let worker = |m| with_role(Role::Worker, "owner", m);
    let before = sealed(TENANT, "s1", time::OffsetDateTime::now_utc());
    let at = position();
    let ok = client.check_stop(runtime(check(Some(before.clone()), ""))).await.unwrap().into_inner();
    assert!(!ok.stopped && ok.dispatch_within_ms == 500, "{ok:?}");
    assert!(!client.check_stop(worker(check(None, "s1"))).await.unwrap().into_inner().stopped);

    // Nothing but the ticket's own session, tenant and seal is believed.
    let cases = [
        (
            "another tenant's ticket",
            runtime(check(Some(sealed("tenant-2", "s1", time::OffsetDateTime::now_utc())), "")),
        ),
        ("another session named", runtime(check(Some(before.clone()), "s2"))),
        ("a worker with a ticket", worker(check(Some(before.clone()), "s1"))),
        ("a runtime with none", runtime(check(None, "s1"))),
    ];
    for (case, request) in cases {
        let e = client.check_stop(request).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{case}: {e:?}");
    }
    let theirs = client.check_stop(with_role(Role::Worker, "intruder", check(None, "s1"))).await.unwrap_err();
    assert_eq!(theirs.code(), Code::NotFound, "another owner's session does not exist for them");
    let mut forged = before.clone();
    forged.mac[0] ^= 1;
    assert_eq!(client.check_stop(runtime(check(Some(forged), ""))).await.unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(position(), at, "a check writes nothing");

    // The owner's Stop: read as stopped; once the owner writes again, the ticket from before it
    // stays void and one decided after is good.
    client.stop_session(owner(pb::StopSessionRequest { session_id: "s1".into() })).await.unwrap();
    assert!(client.check_stop(runtime(check(Some(before.clone()), ""))).await.unwrap().into_inner().stopped);
    assert!(client.check_stop(worker(check(None, "s1"))).await.unwrap().into_inner().stopped);
    let said = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m2".into(), from_owner: true };
    client.record_message(owner(said)).await.unwrap();
    let still = client.check_stop(runtime(check(Some(before), ""))).await.unwrap().into_inner();
    assert!(still.stopped && still.dispatch_within_ms == 0, "a ticket from before the Stop: {still:?}");
    let after = sealed(TENANT, "s1", time::OffsetDateTime::now_utc());
    assert!(!client.check_stop(runtime(check(Some(after.clone()), ""))).await.unwrap().into_inner().stopped);
    assert!(!client.check_stop(worker(check(None, "s1"))).await.unwrap().into_inner().stopped);

    // A deleted chat: every ticket of it is void, and it exists for no worker.
    client.delete_session(owner(pb::DeleteSessionRequest { session_id: "s1".into() })).await.unwrap();
    assert!(client.check_stop(runtime(check(Some(after), ""))).await.unwrap().into_inner().stopped);
    assert_eq!(client.check_stop(worker(check(None, "s1"))).await.unwrap_err().code(), Code::NotFound);
}
