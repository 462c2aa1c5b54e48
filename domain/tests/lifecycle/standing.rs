//! The operator's standing grant and the deployment record.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

#[test]
fn the_standing_grant_covers_routine_on_its_profile_first() {
    let mut world = given();
    world.apply(&Event::StandingGrantPinned(grant_domain::catalogue::StandingGrantPinned {
        grant_id: "standing-1".into(),
        profile_id: "profile-1".into(),
        expires_at: t0() + Duration::days(30),
    }));
    let grant = allow_for_task(&mut world, t0());
    let out = run(&mut world, &Policy::empty(), &tile("Continue"), t0());
    assert!(matches!(out.decision, Decision::Allow { kind: AuthorizationKind::StandingGrant, .. }));
    assert_eq!(world.grants[&grant].actions_used, 0, "the standing grant answered first");
    assert!(matches!(
        run(&mut world, &Policy::empty(), &tile("el gato"), t0()).decision,
        Decision::Allow { kind: AuthorizationKind::BrowserTaskGrant, .. }
    ));
}

#[test]
fn the_operator_pins_the_standing_grant_once_and_it_covers_only_routine_buttons_and_scrolls_on_https() {
    use grant_domain::model::{STANDING_GRANT_DURATION, StandingPin};
    let pin = || StandingPin { grant_id: "standing-1".into(), profile_id: "profile-1".into() };
    let mut world = given();
    let pinned = when(&mut world, Command::PinStandingGrant { pin: Some(pin()), now: t0() }).unwrap();
    assert!(matches!(&pinned[..], [Event::StandingGrantPinned(p)] if p.expires_at == t0() + STANDING_GRANT_DURATION));
    // A restart with the same pin records nothing, even once it expired: only the operator's new
    // grant id pins anew.
    assert!(when(&mut world, Command::PinStandingGrant { pin: Some(pin()), now: t0() }).unwrap().is_empty());
    let later = t0() + STANDING_GRANT_DURATION + Duration::minutes(1);
    let mut expired = world.clone();
    assert!(when(&mut expired, Command::PinStandingGrant { pin: Some(pin()), now: later }).unwrap().is_empty());
    let renewed = StandingPin { grant_id: "standing-2".into(), ..pin() };
    assert_eq!(when(&mut expired, Command::PinStandingGrant { pin: Some(renewed), now: later }).unwrap().len(), 1);

    let standing = |world: &mut World, req: &AuthorizeRequest| {
        matches!(
            run(world, &Policy::empty(), req, t0()).decision,
            Decision::Allow { kind: AuthorizationKind::StandingGrant, .. }
        )
    };
    assert!(standing(&mut world, &tile("Continue")), "a routine button");
    assert!(standing(&mut world, &act("s1", button("x"), Action::Scroll { by: 300 })), "a scroll");
    let mut link = button("Continue");
    link.role = "link".into();
    assert!(!standing(&mut world, &act("s1", link, Action::Click)), "a link is not a button");
    let mut download = button("Continue");
    download.download = true;
    assert!(!standing(&mut world, &act("s1", download, Action::Click)), "a download is not routine");
    let mut mixed = button("Continue");
    mixed.visible_text = Some("Next".into());
    assert!(!standing(&mut world, &act("s1", mixed, Action::Click)), "label sources read as different words");
    let mut http = tile("Continue");
    http.page.url = "http://www.lesson.test/lesson/unit-3".into();
    assert!(!standing(&mut world, &http), "not on a plain-HTTP page");
    let mut http_scroll = act("s1", button("x"), Action::Scroll { by: 300 });
    http_scroll.page.url = "http://www.lesson.test/lesson/unit-3".into();
    assert!(!standing(&mut world, &http_scroll), "not even a scroll");

    let unpinned = when(&mut world, Command::PinStandingGrant { pin: None, now: t0() }).unwrap();
    assert!(matches!(&unpinned[..], [Event::StandingGrantUnpinned(u)] if u.grant_id == "standing-1"));
    assert!(!standing(&mut world, &tile("Continue")), "unpinned");
    assert!(when(&mut world, Command::PinStandingGrant { pin: None, now: t0() }).unwrap().is_empty());
}

/// The operator's deployment record lands whole: the settings and the pin in one decision, and
/// the same record again records nothing.
#[test]
fn a_deployment_record_applies_settings_and_pin_together_once() {
    use grant_domain::model::StandingPin;
    let mut world = given();
    let settings = TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/unit").unwrap() };
    let apply = || Command::ApplyDeployment {
        settings: settings.clone(),
        pin: Some(StandingPin { grant_id: "standing-1".into(), profile_id: "profile-1".into() }),
        policy_version: Some(Policy::empty().version),
        now: t0(),
    };
    let events = when(&mut world, apply()).unwrap();
    let kinds: Vec<&str> = events.iter().map(Event::event_type).collect();
    assert_eq!(kinds, ["deployment.scopes_changed", "browser.standing_grant.pinned", "deployment.policy_changed"]);
    assert!(when(&mut world, apply()).unwrap().is_empty(), "the record in force records nothing");
}
