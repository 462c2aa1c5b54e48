//! Pages that fight the click: decoys, handlers, focus, refreshes, the fold.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

#[tokio::test]
async fn a_control_over_the_click_point_never_takes_the_click() {
    let mut s = stack().await;
    for path in ["/lesson/overlay", "/lesson/clipped", "/lesson/through"] {
        let (session, reply) = click_next(&mut s, path).await;
        assert!(!reply.ok && !reply.dispatched, "{path}: {reply:?}");
        assert_eq!(rt::ActCode::try_from(reply.code), Ok(rt::ActCode::NodeNotInteractable), "{path}: {reply:?}");
        assert!(reply.detail.contains("lies over"), "{path}: {reply:?}");
        assert!(!checked(&mut s, &session, "Subscribe to offers").await, "{path}: the decoy took the click");
        close(&mut s, session).await;
    }
    stayed_inside(&s);
}

#[tokio::test]
async fn a_page_that_moves_the_decoy_in_before_or_during_the_click_is_stopped() {
    let mut s = stack().await;
    // Brought over the button as the pointer arrives: the click goes to the decoy, and the guard
    // stops it with its default action.
    let (session, reply) = click_next(&mut s, "/lesson/before").await;
    assert!(reply.dispatched && reply.outcome_unknown, "{reply:?}");
    assert!(reply.detail.contains("guard stopped"), "{reply:?}");
    assert!(!checked(&mut s, &session, "Subscribe to offers").await, "the decoy took the click");
    close(&mut s, session).await;
    // Swapped in under the press: whatever the click reaches, the decoy does not change.
    let (session, reply) = click_next(&mut s, "/lesson/during").await;
    assert!(reply.dispatched, "{reply:?}");
    assert!(!checked(&mut s, &session, "Subscribe to offers").await, "the decoy took the click");
    stayed_inside(&s);
}

#[tokio::test]
async fn a_handler_that_clicks_a_link_out_of_the_prefix_meets_the_fence() {
    let mut s = stack().await;
    let (_, reply) = click_next(&mut s, "/lesson/relay").await;
    assert!(reply.dispatched && reply.outcome_unknown, "{reply:?}");
    assert!(reply.detail.contains("fence refused"), "{reply:?}");
    stayed_inside(&s);
}

#[tokio::test]
async fn keys_go_only_to_the_element_that_holds_focus() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "el gato")]);
    let session = s.open("profile-1", "/lesson/focus", 50).await.unwrap();
    let typing = |s: &Stack, o: &rt::ObserveReply, name: &str| {
        let mut act = click(&session, o, node(o, name).0);
        act.expected_role = rt::Role::Textbox as i32;
        act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "answer".into() }));
        s.grant(&mut act, task_constraint());
        act
    };
    let filled = |o: &rt::ObserveReply, name: &str| node(o, name).0.state.as_ref().is_some_and(|st| st.filled);

    // An element that cannot hold focus takes no key (one that does not activate it: Enter or
    // Space on it would be its click, refused before the focus check).
    let o = s.observe(&session).await;
    let mut press = click(&session, &o, node(&o, "Listen").0);
    press.action = Some(rt::act_request::Action::Press(rt::Press { key: "ArrowDown".into() }));
    s.grant(&mut press, task_constraint());
    let reply = s.act(press).await.unwrap();
    assert!(!reply.dispatched && reply.detail.contains("does not hold focus"), "{reply:?}");

    // A field that hands focus on is refused before anything is typed, or (where the browser
    // moves focus only after the check, as Chromium 148 does) every key is stopped by the guard
    // and the outcome is unknown: either way no key reaches another field.
    let o = s.observe(&session).await;
    let reply = s.act(typing(&s, &o, "Your answer")).await.unwrap();
    let refused = !reply.dispatched && reply.detail.contains("does not hold focus");
    let stopped = reply.outcome_unknown && reply.detail.contains("the guard stopped");
    assert!(refused || stopped, "{reply:?}");
    let o = s.observe(&session).await;
    assert!(!filled(&o, "Your answer") && !filled(&o, "Offer code"), "{o:?}");

    // Focus moved by the first key: the rest never reach the other field.
    let reply = s.act(typing(&s, &o, "Second answer")).await.unwrap();
    assert!(reply.dispatched && reply.outcome_unknown, "{reply:?}");
    assert!(reply.detail.contains("guard stopped"), "{reply:?}");
    let o = s.observe(&session).await;
    assert!(!filled(&o, "Offer code"), "keys reached the field focus moved to: {o:?}");

    // Focus resolved through an open shadow root: the field inside takes the text.
    let reply = s.act(typing(&s, &o, "Boxed answer")).await.unwrap();
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    let o = s.observe(&session).await;
    assert!(filled(&o, "Boxed answer") && !filled(&o, "Offer code"), "{o:?}");
    stayed_inside(&s);
}

/// The record's limits of page script: the runtime bounds the act's own input, not what the
/// page's script does in response. A change here means the limits moved; update the record.
#[tokio::test]
async fn page_script_limit_a_handler_may_click_a_check_box() {
    let mut s = stack().await;
    let (session, reply) = click_next(&mut s, "/lesson/handler").await;
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    assert!(checked(&mut s, &session, "Subscribe to offers").await, "element.click() from a handler is not trusted");
    stayed_inside(&s);
}

#[tokio::test]
async fn page_script_limit_a_delayed_refresh_is_not_fenced() {
    let mut s = stack().await;
    let (_, reply) = click_next(&mut s, "/lesson/delayed").await;
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    assert!(!s.fixture.requests().iter().any(|r| r.path() == "/account/later"), "the act settled first");
    // The refresh fires a second later, after the fence is down: the origin guard alone holds it.
    let (ten, beat) = (std::time::Duration::from_secs(10), std::time::Duration::from_millis(50));
    tests::poll_until("the delayed refresh", ten, beat, || async {
        s.fixture.requests().iter().any(|r| r.path() == "/account/later").then_some(())
    })
    .await;
    assert!(s.fixture.requests().iter().all(|r| r.host == LESSON));
}

/// The origin guard holds outside acts too: a refresh the act scheduled for later, to another
/// site, never loads; the tab is left on the browser's error page.
#[tokio::test]
async fn page_script_limit_a_delayed_refresh_off_the_origins_meets_the_origin_guard() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/away-later",
        r#"<!doctype html><title>Later</title>
<button onclick="const m = document.createElement('meta'); m.httpEquiv = 'refresh'; m.content = '1; url=https://www.elsewhere.test/win'; document.head.append(m)">Next</button>"#,
    );
    let (session, reply) = click_next(&mut s, "/lesson/away-later").await;
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    left_for_the_error_page(&mut s, &session).await;
    assert!(s.fixture.requests().iter().all(|r| r.host == LESSON), "{:?}", s.fixture.requests());
}

/// An element below the fold is scrolled into view and clicked.
#[tokio::test]
async fn an_element_below_the_fold_is_scrolled_to_and_clicked() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/fold",
        r#"<!doctype html><title>Fold</title><div style="height:3000px"></div><a href="/lesson/2">Next</a>"#,
    );
    let session = s.open("profile-1", "/lesson/fold", 50).await.unwrap();
    let o = s.observe(&session).await;
    let mut act = click(&session, &o, node(&o, "Next").0);
    s.grant(&mut act, task_constraint());
    act.wait_for = rt::WaitFor::Navigation as i32;
    let reply = s.act(act).await.unwrap();
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    assert!(s.fixture.requests().iter().any(|r| r.path() == "/lesson/2"));
}
