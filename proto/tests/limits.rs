//! The field table against the descriptors, and the checker against hand-made wire bytes.

use prost::Message;
use proto::checked::{Checker, Violation};
use proto::limits::FIELDS;
use proto::{runtime as rt, v1 as pb};

#[test]
fn every_field_of_every_request_has_a_limit() {
    let checker = Checker::get();
    let mut missing = Vec::new();
    let mut known = Vec::new();
    for m in checker.request_messages() {
        for f in m.fields() {
            known.push(f.full_name().to_owned());
            if proto::limits::rule(f.full_name()).is_none() {
                missing.push(f.full_name().to_owned());
            }
        }
    }
    assert!(missing.is_empty(), "request fields without a limit in proto::limits::FIELDS: {missing:#?}");
    let stale: Vec<_> = FIELDS.iter().map(|(n, _)| *n).filter(|n| !known.iter().any(|k| k == n)).collect();
    assert!(stale.is_empty(), "limits for fields no request holds: {stale:#?}");
    assert!(checker.is_request("grant_ledger.v1.AuthorizeRequest"));
    assert!(checker.is_request("browser_runtime.v1.ActRequest"));
    assert!(!checker.is_request("grant_ledger.v1.ElementFacts"));
}

fn authorize(f: impl FnOnce(&mut pb::AuthorizeRequest)) -> Vec<u8> {
    let mut r = pb::AuthorizeRequest {
        session_id: "s1".into(),
        page_url: "https://www.lesson.test/lesson/1".into(),
        element: Some(pb::ElementFacts { role: "button".into(), name: "Continue".into(), ..Default::default() }),
        action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
        ..Default::default()
    };
    f(&mut r);
    r.encode_to_vec()
}

fn check(name: &str, bytes: &[u8], expect: Option<(&str, &str)>) {
    let got = Checker::get().check(name, bytes);
    match expect {
        None => assert_eq!(got, Ok(()), "{name}"),
        Some((field, words)) => {
            let Err(Violation { field: f, description }) = got else { panic!("{name}: accepted, wanted {field}") };
            assert_eq!(f, field, "{description}");
            assert!(description.contains(words), "{field}: {description:?} lacks {words:?}");
        }
    }
}

#[test]
fn each_rule_refuses_what_it_should_and_names_the_field() {
    const A: &str = "grant_ledger.v1.AuthorizeRequest";
    let long = "x".repeat(1025);
    check(A, &authorize(|_| {}), None);
    check(
        A,
        &authorize(|r| r.element.as_mut().unwrap().labels = vec!["ok".into(), "a\0b".into()]),
        Some(("element.labels[1]", "NUL")),
    );
    check(A, &authorize(|r| r.element.as_mut().unwrap().name = long.clone()), Some(("element.name", "at most 1024")));
    check(A, &authorize(|r| r.element.as_mut().unwrap().name = "é".repeat(1024)), None);
    check(A, &authorize(|r| r.page_url = "h\0".into()), Some(("page_url", "NUL")));
    check(
        A,
        &authorize(|r| r.turn_tool_calls = vec!["browser.act".into(); 257]),
        Some(("turn_tool_calls", "at most 256 items")),
    );
    check(A, &authorize(|r| r.action.as_mut().unwrap().scroll_by = 7), Some(("action.scroll_by", "one of")));
    check(A, &authorize(|r| r.action.as_mut().unwrap().scroll_by = -1200), None);
    check(A, &authorize(|r| r.action.as_mut().unwrap().key = "a".into()), Some(("action.key", "one of")));
    check(A, &authorize(|r| r.action.as_mut().unwrap().key = "Enter".into()), None);
    check(A, &authorize(|r| r.action.as_mut().unwrap().kind = 99), Some(("action.kind", "declared values")));
    check(
        A,
        &authorize(|r| r.element.as_mut().unwrap().field_kind = Some(77)),
        Some(("element.field_kind", "declared")),
    );
    // Invalid UTF-8, a truncated message, an unknown field, a field sent twice.
    let mut bad = authorize(|r| r.session_id = "ab".into());
    let at = bad.windows(2).position(|w| w == b"ab").unwrap();
    bad[at] = 0xff;
    check(A, &bad, Some(("session_id", "UTF-8")));
    let whole = authorize(|_| {});
    check(A, &whole[..whole.len() - 3], Some(("request", "well-formed")));
    let mut unknown = whole.clone();
    unknown.extend([0xf8, 0x01, 0x00]); // field 31, varint 0
    check(A, &unknown, Some(("#31", "not a field")));
    let mut twice = whole.clone();
    twice.extend(pb::AuthorizeRequest { session_id: "s2".into(), ..Default::default() }.encode_to_vec());
    check(A, &twice, Some(("session_id", "more than once")));
    // Two members of the act's oneof.
    let act = rt::ActRequest { action: Some(rt::act_request::Action::Click(rt::Click {})), ..Default::default() };
    let mut both = act.encode_to_vec();
    both.extend(
        rt::ActRequest { action: Some(rt::act_request::Action::Check(rt::Check {})), ..Default::default() }
            .encode_to_vec(),
    );
    check("browser_runtime.v1.ActRequest", &both, Some(("action", "more than one")));
    let steps = rt::OpenSessionRequest { max_steps: 10_001, ..Default::default() }.encode_to_vec();
    check("browser_runtime.v1.OpenSessionRequest", &steps, Some(("max_steps", "1 to 10000")));
    let press = rt::ActRequest {
        action: Some(rt::act_request::Action::Press(rt::Press { key: "q".into() })),
        ..Default::default()
    };
    check("browser_runtime.v1.ActRequest", &press.encode_to_vec(), Some(("press.key", "one of")));
}

/// The most a message can take on the wire within the table: every string at its length in
/// four-byte characters, every list at its count, every member of a oneof (an overestimate).
fn max_size(m: &prost_reflect::MessageDescriptor, skip: &[&str]) -> usize {
    use prost_reflect::Kind;
    let mut total = 0;
    for f in m.fields() {
        if skip.contains(&f.full_name()) {
            continue;
        }
        let r = proto::limits::rule(f.full_name()).unwrap();
        let one = match f.kind() {
            Kind::String | Kind::Bytes => 2 + 5 + 4 * r.max_len,
            Kind::Message(inner) => 2 + 5 + max_size(&inner, skip),
            _ => 2 + 10,
        };
        total += one * r.max_items;
    }
    total
}

#[test]
fn the_largest_valid_request_fits_its_decode_limit() {
    use proto::limits::{MAX_AUTHORIZER_REQUEST_BYTES, MAX_FACTS_BYTES, MAX_RUNTIME_REQUEST_BYTES};
    let checker = Checker::get();
    for service in checker.pool().services() {
        for method in service.methods() {
            let input = method.input();
            let (size, limit) = if service.full_name().starts_with("browser_runtime") {
                (max_size(&input, &[]), MAX_RUNTIME_REQUEST_BYTES)
            } else {
                // The facts are held to their own budget by the runtime, and come either plain or
                // sealed, never both.
                let facts = ["grant_ledger.v1.AuthorizeRequest.element", "grant_ledger.v1.AuthorizeRequest.facts"];
                let sealed = proto::limits::MAX_FACTS_BODY_BYTES + 2 * proto::limits::MAC_BYTES + 64;
                (max_size(&input, &facts) + MAX_FACTS_BYTES.max(sealed), MAX_AUTHORIZER_REQUEST_BYTES)
            };
            assert!(size <= limit, "{}: up to {size} bytes, decoded within {limit}", input.full_name());
        }
    }
}

#[test]
fn approval_tokens_have_one_shape() {
    let t = proto::limits::approval_token([0xab; 12]);
    assert_eq!(t, format!("apv_{}", "ab".repeat(12)));
    assert_eq!(t.len(), proto::limits::APPROVAL_TOKEN_LEN);
    assert!(proto::limits::is_approval_token(&t));
    for bad in ["", "apv_", &t.to_uppercase(), &t[..t.len() - 1], &format!("{t}0"), &t.replace("apv_", "apx_")] {
        assert!(!proto::limits::is_approval_token(bad), "{bad}");
    }
}

#[test]
fn the_wire_bound_on_ids_is_the_ledgers() {
    assert_eq!(proto::limits::MAX_ID_CHARS, ledger::MAX_ENTITY_ID_LEN);
}
