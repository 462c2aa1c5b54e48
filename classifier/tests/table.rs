//! The table-driven classifier suite: each row is an element, an action and what must come out.

use classifier::vocabulary::all_forms;
use classifier::{
    Action, ElementFacts, FieldKind, Grant, PageFacts, SelectOption, TaskScope, classify, classify_detailed, covers,
};

const ORIGIN: &str = "https://www.lesson.test";

fn page() -> PageFacts {
    PageFacts { url: format!("{ORIGIN}/lesson/unit-3/skill-2?x=1") }
}

fn task() -> Grant {
    Grant::Task(TaskScope { origin: ORIGIN.into(), path_prefix: "/lesson".into(), chars_remaining: 4096 })
}

fn button(name: &str) -> ElementFacts {
    ElementFacts {
        role: "button".into(),
        name: Some(name.into()),
        visible_text: Some(name.into()),
        ..ElementFacts::default()
    }
}

fn field(name: &str, kind: FieldKind) -> ElementFacts {
    ElementFacts { role: "textbox".into(), name: Some(name.into()), field_kind: kind, ..ElementFacts::default() }
}

/// The consequence code and, for a task grant, the refusal code (or "covered").
fn check(element: &ElementFacts, action: &Action, consequence: &str, task_grant: &str) {
    let got_c = classify(element, &page()).code();
    let got_t = match covers(&task(), action, element, &page()) {
        Ok(()) => "covered",
        Err(e) => e.reason.code(),
    };
    assert_eq!((got_c, got_t), (consequence, task_grant), "element {element:?}, action {action:?}");
}

#[test]
fn every_vocabulary_form_is_excluded_in_a_button_name() {
    let forms = all_forms();
    assert!(forms.len() > 800, "vocabulary shrank to {} forms", forms.len());
    for (named, form) in forms {
        let m = classify_detailed(&button(&form));
        assert!(m.matches.iter().any(|x| x.named == named), "{form:?} should read as {}: {m:?}", named.code());
        assert!(covers(&task(), &Action::Click, &button(&form), &page()).is_err(), "{form:?} covered");
    }
}

#[test]
fn irregular_and_inflected_forms() {
    for (word, code) in [
        ("paid", "payment"),
        ("Paying", "payment"),
        ("bought", "purchase"),
        ("sold", "purchase"),
        ("sent", "message"),
        ("spent", "payment"),
        ("deleted", "deletion"),
        ("Subscribed", "subscription"),
        ("unsubscribe", "subscription"),
        ("auto-renew", "subscription"),
        ("resubscribing", "subscription"),
        ("withdrew", "money_movement"),
        ("Coins", "in_app_currency"),
        ("gems", "in_app_currency"),
        ("Posted", "publication"),
        ("uploading", "file_transfer"),
        ("Agreed", "legal_acceptance"),
        ("Settings", "settings_change"),
        ("changed", "settings_change"),
        ("Card", "payment"),
    ] {
        check(&button(word), &Action::Click, code, code);
    }
}

#[test]
fn each_label_source_is_read_separately() {
    type Set = fn(&mut ElementFacts, String);
    let sources: [(&str, Set); 10] = [
        ("aria_label", |e, t| e.aria_label = Some(t)),
        ("labelledby", |e, t| e.labelledby.push(t)),
        ("labels", |e, t| e.labels.push(t)),
        ("title", |e, t| e.title = Some(t)),
        ("placeholder", |e, t| e.placeholder = Some(t)),
        ("alt", |e, t| e.alt = Some(t)),
        ("value", |e, t| e.value = Some(t)),
        ("visible_text", |e, t| e.visible_text = Some(t)),
        ("dialog_name", |e, t| e.dialog_name = Some(t)),
        ("name", |e, t| e.name = Some(t)),
    ];
    for (label, set) in sources {
        let mut e = button("Continue");
        set(&mut e, "Pay".into());
        assert_eq!(classify(&e, &page()).code(), "payment", "\"Pay\" in {label}");
        check(&e, &Action::Click, "payment", "payment");
    }
    // The decision record's own example: assistive technology hears "Continue", the page shows a price.
    let mut e = button("Continue");
    e.aria_label = Some("Continue".into());
    e.visible_text = Some("Pay $12.99".into());
    check(&e, &Action::Click, "payment", "payment");
    // Options of a select are label sources too.
    let mut select = field("Plan", FieldKind::Select);
    select.name = Some("Choose".into());
    select.options =
        vec![SelectOption { value: "a".into(), label: Some("Buy 500 gems".into()), ..SelectOption::default() }];
    check(&select, &Action::Select { option: "a".into() }, "in_app_currency", "in_app_currency");
}

#[test]
fn disguises_are_read_through() {
    for (text, code) in [
        ("PAY", "payment"),
        ("pAy NoW", "payment"),
        ("Sign-in", "authentication"),
        ("log_out", "sign_out"),
        ("Check-out", "payment"),
        ("BuyNow", "purchase"),
        ("Pa\u{200B}y", "payment"),
        ("De\u{2060}lete", "deletion"),
        ("Pa\u{0301}y", "payment"),
        ("P\u{00AD}ay", "payment"),
        ("D\u{0335}elete", "deletion"),
        ("\u{202E}yaP\u{202C}", "payment"),
        ("\u{202E}eteleD", "deletion"),
        ("Continue \u{202E}tuo gol", "sign_out"),
        ("\u{0420}\u{0430}\u{0443}", "payment"),
        ("\u{0392}u\u{0443}", "purchase"),
        ("\u{03A1}\u{0391}\u{03A5}", "payment"),
        ("L\u{0585}g \u{0585}ut", "sign_out"),
        ("\u{1D18}\u{1D00}\u{028F}", "payment"),
        ("p\u{0251}y", "payment"),
        ("Ｐａｙ", "payment"),
        ("L0g 0ut", "sign_out"),
        ("De1ete", "deletion"),
        ("S1gn 1n", "authentication"),
        ("P a y", "payment"),
        ("D.e.l.e.t.e", "deletion"),
        ("𝐃𝐞𝐥𝐞𝐭𝐞", "deletion"),
    ] {
        check(&button(text), &Action::Click, code, code);
    }
}

#[test]
fn currency_amounts_are_payments() {
    for text in ["$12.99", "Get it for 4,99 €", "USD 5", "1000円", "💲5", "₹499", "＄3"] {
        check(&button(text), &Action::Click, "payment", "payment");
    }
}

#[test]
fn field_kinds() {
    for (kind, code) in [
        (FieldKind::Password, "credential_field"),
        (FieldKind::OneTimeCode, "one_time_code_field"),
        (FieldKind::Payment, "payment_field"),
        (FieldKind::Identity, "identity_field"),
    ] {
        check(&field("Answer", kind), &Action::Type { text: "abc".into() }, code, code);
    }
    let typing = Action::Type { text: "el gato".into() };
    check(&field("Answer", FieldKind::Text), &typing, "unknown", "covered");
    check(&field("Answer", FieldKind::Search), &typing, "unknown", "covered");
    check(&field("Answer", FieldKind::TextArea), &typing, "unknown", "covered");
    check(&field("Answer", FieldKind::EditableRegion), &typing, "unknown", "field_kind_not_covered");
    check(&field("Answer", FieldKind::Other), &typing, "unknown", "field_kind_not_covered");
    check(&field("Answer", FieldKind::CustomChoice), &Action::Check, "unknown", "field_kind_not_covered");
    check(&field("Answer", FieldKind::Checkbox), &Action::Check, "unknown", "covered");
    check(&field("Answer", FieldKind::Radio), &Action::Check, "unknown", "covered");
    check(
        &field("Answer", FieldKind::Text),
        &Action::Select { option: "x".into() },
        "unknown",
        "field_kind_not_covered",
    );
    check(&field("Answer", FieldKind::File), &Action::Click, "unknown", "file_input");
    check(
        &field("Answer", FieldKind::Radio),
        &Action::Press { key: "ArrowDown".into() },
        "unknown",
        "key_on_choice_control",
    );
    check(
        &field("Answer", FieldKind::Select),
        &Action::Press { key: "ArrowDown".into() },
        "unknown",
        "key_on_choice_control",
    );
    check(&field("Answer", FieldKind::Text), &Action::Press { key: "Enter".into() }, "unknown", "covered");
    check(&field("Answer", FieldKind::Text), &Action::Press { key: "Control+a".into() }, "unknown", "key_not_allowed");
}

#[test]
fn every_path_segment_of_page_and_target() {
    let at = |path: &str| PageFacts { url: format!("{ORIGIN}{path}") };
    let refused = |p: &PageFacts| covers(&task(), &Action::Click, &button("Next"), p).unwrap_err().reason.code();
    assert_eq!(refused(&at("/lesson/unit-1/settings")), "page_sensitive_segment");
    assert_eq!(refused(&at("/lesson/a/b/c/%63heckout")), "page_sensitive_segment");
    assert_eq!(refused(&at("/lesson%2Fadmin")), "page_sensitive_segment");
    assert_eq!(refused(&at("/lessons")), "page_outside_scope");
    assert_eq!(refused(&at("/shop/lesson")), "page_outside_scope");
    assert_eq!(refused(&PageFacts { url: "https://evil.test/lesson".into() }), "page_outside_scope");
    assert_eq!(refused(&PageFacts { url: "http://www.lesson.test/lesson".into() }), "page_unparseable");

    let link = |target: &str| ElementFacts { role: "link".into(), nav_targets: vec![target.into()], ..button("Next") };
    check(&link(&format!("{ORIGIN}/lesson/unit-4")), &Action::Click, "unknown", "covered");
    check(&link(&format!("{ORIGIN}/lesson/unit-4/pricing")), &Action::Click, "purchase", "purchase");
    check(&link(&format!("{ORIGIN}/lesson/x/y/inbox")), &Action::Click, "message", "message");
    check(&link(&format!("{ORIGIN}/learn")), &Action::Click, "unknown", "target_outside_scope");
    check(&link("https://evil.test/lesson"), &Action::Click, "unknown", "target_outside_scope");
    check(&link("javascript:void(0)"), &Action::Click, "unknown", "target_outside_scope");
    check(&link("http://www.lesson.test/lesson"), &Action::Click, "unknown", "target_outside_scope");
    check(&link("data:text/html,hi"), &Action::Click, "unknown", "target_outside_scope");
    check(&link("/lesson/relative"), &Action::Click, "unknown", "target_outside_scope");
    // A form submission with Enter counts as navigation too.
    let mut input = field("Answer", FieldKind::Text);
    input.nav_targets = vec!["https://evil.test/collect".into()];
    check(&input, &Action::Press { key: "Enter".into() }, "unknown", "target_outside_scope");
    let mut download = link(&format!("{ORIGIN}/lesson/notes"));
    download.download = true;
    check(&download, &Action::Click, "unknown", "download");
}

#[test]
fn typed_text_shapes() {
    let answer = field("Answer", FieldKind::Text);
    for (text, code) in [
        ("el gato", "covered"),
        ("Ich bin müde", "covered"),
        ("私は学生です", "covered"),
        ("I have 2 cats", "covered"),
        ("me@mail.test", "text_address"),
        ("https://evil.test", "text_address"),
        ("go to www.x", "text_address"),
        ("call 5551234", "text_digit_run"),
        ("4111 1111 1111 1111", "text_digit_run"),
        ("Hunter2!x", "text_credential_shaped"),
    ] {
        check(&answer, &Action::Type { text: text.into() }, "unknown", code);
    }
    check(&answer, &Action::Type { text: "x".repeat(257) }, "unknown", "text_too_long");
    let nearly_spent =
        Grant::Task(TaskScope { origin: ORIGIN.into(), path_prefix: "/lesson".into(), chars_remaining: 3 });
    let err = covers(&nearly_spent, &Action::Type { text: "gato".into() }, &answer, &page()).unwrap_err();
    assert_eq!(err.reason.code(), "text_exceeds_remaining");
}

#[test]
fn never_covered_elements() {
    let mut disabled = button("Next");
    disabled.disabled = true;
    check(&disabled, &Action::Click, "routine", "element_disabled");
    let mut unnamed = button("");
    unnamed.name = None;
    unnamed.visible_text = None;
    check(&unnamed, &Action::Click, "unknown", "element_unnamed");
    let mut cut = button("Next");
    cut.truncated = true;
    check(&cut, &Action::Click, "routine", "label_truncated");
    let mut long = button("Next");
    long.title = Some("a ".repeat(600));
    check(&long, &Action::Click, "unknown", "label_truncated");
}

#[test]
fn selects_read_the_options_a_selection_could_choose() {
    let mut select = field("Answer", FieldKind::Select);
    select.options = vec![
        SelectOption { value: "1".into(), label: Some("el  perro".into()), ..SelectOption::default() },
        SelectOption { value: "2".into(), label: Some("Delete my account".into()), ..SelectOption::default() },
    ];
    check(&select, &Action::Select { option: "el perro".into() }, "account_change", "covered");
    check(&select, &Action::Select { option: "2".into() }, "account_change", "account_change");
    check(&select, &Action::Select { option: "el gato".into() }, "account_change", "option_not_found");
    select.options = (0..65)
        .map(|i| SelectOption { value: format!("v{i}"), label: Some("same".into()), ..SelectOption::default() })
        .collect();
    check(&select, &Action::Select { option: "same".into() }, "unknown", "too_many_choices");
    select.options = (0..4097).map(|i| SelectOption { value: format!("v{i}"), ..SelectOption::default() }).collect();
    check(&select, &Action::Select { option: "v1".into() }, "unknown", "too_many_options");
}

#[test]
fn lesson_words_are_covered() {
    for word in ["Continue", "Check", "Skip", "Next", "CONTINUE", "Done"] {
        check(&button(word), &Action::Click, "routine", "covered");
    }
    for tile in [
        "el gato",
        "la manzana",
        "Ich bin",
        "das Brot",
        "Bonjour",
        "je suis",
        "obrigado",
        "Grazie",
        "leche",
        "water",
        "the boy",
        "私は",
        "ありがとう",
        "学生",
        "мальчик",
        "Привет",
        "شكرا",
        "מים",
        "नमस्ते",
        "안녕하세요",
        "essential",
        "banner",
        "description",
        "cardinal",
        "postpone",
        "passage",
        "Use keyboard",
        "Can't listen now",
    ] {
        check(&button(tile), &Action::Click, "unknown", "covered");
    }
    check(&button("Continue"), &Action::Scroll { by: 600 }, "routine", "covered");
    check(&button("Continue"), &Action::Scroll { by: 12345 }, "routine", "scroll_not_a_step");
}

#[test]
fn standing_grant_covers_routine_only() {
    let standing =
        |action: &Action, e: &ElementFacts| covers(&Grant::Standing, action, e, &page()).map_err(|e| e.reason.code());
    assert_eq!(standing(&Action::Click, &button("Continue")), Ok(()));
    assert_eq!(standing(&Action::Scroll { by: 600 }, &button("x")), Ok(()));
    assert_eq!(standing(&Action::Click, &button("el gato")), Err("not_routine"));
    let mut mixed = button("Continue");
    mixed.aria_label = Some("Next".into());
    assert_eq!(standing(&Action::Click, &mixed), Err("not_routine"), "every source must read as the same word");
    let mut hidden = button("Continue");
    hidden.aria_label = Some("Continue\u{200B}".into());
    assert_eq!(standing(&Action::Click, &hidden), Ok(()));
    let mut normalizes = button("Continue");
    normalizes.title = Some("Continue $".into());
    assert_eq!(standing(&Action::Click, &normalizes), Err("currency"));
    assert_eq!(standing(&Action::Type { text: "a".into() }, &field("A", FieldKind::Text)), Err("not_routine"));
}
