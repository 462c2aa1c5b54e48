//! Browser sessions: ownership, the pool, crashes, hangs, idle closing and shutdown.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

#[tokio::test]
async fn sessions_are_the_callers_own_and_the_pool_has_a_limit() {
    let mut s = stack().await;
    let a = s.open("profile-a", "/lesson/1", 50).await.unwrap();
    let again = s.open("profile-a", "/lesson/1", 50).await.unwrap_err();
    assert_eq!(again.code(), Code::AlreadyExists, "one Chromium per profile");
    let b = s.open("profile-b", "/lesson/1", 50).await.unwrap();
    let full = s.open("profile-c", "/lesson/1", 50).await.unwrap_err();
    assert_eq!(full.code(), Code::ResourceExhausted);
    assert!(full.message().contains("pool is full"), "{full:?}");

    // Another tenant's worker cannot see the session; no credential is no call.
    let err = s
        .runtime
        .observe(with(STRANGER, rt::ObserveRequest { session_id: a.clone(), run_id: String::new() }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = s
        .runtime
        .observe(tonic::Request::new(rt::ObserveRequest { session_id: a.clone(), run_id: String::new() }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

    // A start page off the allowed origins is refused before any browser starts.
    let off = rt::OpenSessionRequest {
        browser_profile_id: "profile-d".into(),
        allowed_origins: vec![LESSON_ORIGIN.into()],
        start_url: "https://www.elsewhere.test/win".into(),
        max_steps: 5,
    };
    assert_eq!(s.runtime.open_session(with(WORKER, off)).await.unwrap_err().code(), Code::InvalidArgument);

    s.runtime.close_session(with(WORKER, rt::CloseSessionRequest { session_id: b })).await.unwrap();
    s.open("profile-c", "/lesson/1", 50).await.unwrap();
}

#[tokio::test]
async fn a_crashed_browser_is_reported_and_restarts_clean() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let o = s.observe(&session).await;
    let reply = s.act(click(&session, &o, node(&o, "Next question").0)).await.unwrap();
    assert!(reply.ok);
    let driver = s.driver_pid(&session).await;
    let browsers = children(driver);
    assert!(!browsers.is_empty(), "chromedriver started Chromium");
    // Kill the Chromium this test's runtime started, by pid.
    for pid in &browsers {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    let err = s
        .runtime
        .observe(with(WORKER, rt::ObserveRequest { session_id: session.clone(), run_id: String::new() }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("restarted with a clean profile"), "{err:?}");

    // The session goes on in a new browser, at the start page.
    let o = s.observe(&session).await;
    assert_eq!(o.url, format!("{LESSON_ORIGIN}/lesson/1"));
    assert_ne!(s.driver_pid(&session).await, driver);
    let reply = s.act(click(&session, &o, node(&o, "Next question").0)).await.unwrap();
    assert!(reply.ok, "{reply:?}");
}

#[tokio::test]
async fn a_screenshot_is_a_png_and_shutdown_ends_every_browser() {
    let mut s = stack().await;
    let a = s.open("profile-a", "/lesson/1", 50).await.unwrap();
    let b = s.open("profile-b", "/lesson/2", 50).await.unwrap();
    let png = s.runtime.screenshot(with(WORKER, rt::ScreenshotRequest { session_id: a.clone() })).await.unwrap();
    assert!(png.into_inner().png.starts_with(b"\x89PNG\r\n\x1a\n"));
    let drivers = [s.driver_pid(&a).await, s.driver_pid(&b).await];
    let started: Vec<u32> = drivers.iter().flat_map(|d| group(*d)).collect();
    assert!(started.len() > drivers.len(), "Chromium and its helpers run in the drivers' groups: {started:?}");
    s.shutdown_runtime().await;
    // Every process the runtime started, Chromium's helpers too, is gone (or a zombie whose
    // parent has not reaped it yet). The group was sent SIGKILL, which returns before the kernel
    // has torn every process down (a clean-clone CI run caught one still exiting), so the test
    // waits for it, bounded.
    let (five, beat) = (std::time::Duration::from_secs(5), std::time::Duration::from_millis(20));
    tests::poll_until("every driver's process group gone", five, beat, || async {
        drivers.iter().all(|d| group(*d).is_empty()).then_some(())
    })
    .await;
}

/// `<input name=parentNode>` in a form sends chromedriver's own element serialization into an
/// endless loop, so a page can hang the renderer: the call is bounded, and the browser restarts.
#[tokio::test]
async fn a_page_that_hangs_the_browser_gets_it_restarted() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/hang",
        "<!doctype html><title>Hang</title><form><input type=hidden name=parentNode><button>Stuck</button></form>",
    );
    let session = s.open("profile-1", "/lesson/hang", 50).await.unwrap();
    let o = s.observe(&session).await;
    let err = s.act(click(&session, &o, node(&o, "Stuck").0)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("stopped answering"), "{err:?}");
    let o = s.observe(&session).await;
    assert_eq!(o.url, format!("{LESSON_ORIGIN}/lesson/hang"), "restarted at the start page");
}

/// A session no call uses for the idle time is closed and its browser given back to the pool: a
/// worker that never closes it, or an owner who took a tab over and walked away, cannot hold a
/// browser for ever.
#[tokio::test]
async fn an_idle_session_is_closed_and_its_browser_given_back() {
    let mut s = Stack::start_idle(1, 2).await;
    s.fixture.page(LESSON, "/lesson/1", LESSON_2);
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let driver = s.driver_pid(&session).await;
    assert!(!s.observe(&session).await.nodes.is_empty());
    let (twenty, beat) = (std::time::Duration::from_secs(20), std::time::Duration::from_millis(200));
    tests::poll_until("the idle session closed", twenty, beat, || {
        let open = s.served.session_ids();
        async move { open.is_empty().then_some(()) }
    })
    .await;
    let gone = rt::ObserveRequest { session_id: session.clone(), run_id: String::new() };
    let err = s.runtime.observe(with(WORKER, gone)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    // Its browser, Chromium's helpers too, is gone (SIGKILL returns before the kernel is done).
    tests::poll_until("the idle session's browser ended", twenty, beat, || {
        let left = group(driver);
        async move { left.is_empty().then_some(()) }
    })
    .await;
    // The pool's one browser is free again.
    assert!(s.open("profile-1", "/lesson/1", 50).await.is_ok());
}
