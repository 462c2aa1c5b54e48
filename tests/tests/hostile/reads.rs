//! Pages that fight the read: the record's corners, disguised words, cut labels, replaced built-ins.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

#[tokio::test]
async fn every_corner_the_record_lists_comes_to_what_it_must() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "e")]);
    s.fixture.page(LESSON, "/account/x", "<!doctype html><title>Account</title>");
    for (path, body, _, _, _) in corners() {
        s.fixture.page(LESSON, path, &format!("<!doctype html><title>Corner</title>{body}"));
    }
    for (path, _, name, typed, expect) in corners() {
        let session = s.open("profile-1", path, 50).await.unwrap();
        let act_on = |o: &rt::ObserveReply| {
            let mut act = click(&session, o, node(o, name).0);
            if let Some(field) = typed {
                act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: field.into() }));
            }
            act
        };
        // First with no ticket: nothing is dispatched, whatever the page would set off. A
        // refusal of the claim itself (an off-origin target) comes first and voids the snapshot.
        let o = s.observe(&session).await;
        let first = match expect {
            Expect::Refused(code) if code != rt::ActCode::GrantNotApplicable => Some(code),
            _ => None,
        };
        unticketed_dispatches_nothing(&mut s, &act_on(&o), first, path).await;
        let o = s.observe(&session).await;
        let mut act = act_on(&o);
        s.grant(&mut act, task_constraint());
        let reply = s.act(act).await.unwrap();
        match expect {
            Expect::Refused(code) => {
                assert!(!reply.dispatched, "{path}: {reply:?}");
                assert_eq!(rt::ActCode::try_from(reply.code), Ok(code), "{path}: {reply:?}");
            }
            Expect::Fenced => {
                assert!(reply.dispatched && reply.outcome_unknown, "{path}: {reply:?}");
                assert!(reply.detail.contains("fence refused"), "{path}: {reply:?}");
            }
            Expect::Done => assert!(reply.ok && !reply.outcome_unknown, "{path}: {reply:?}"),
        }
        close(&mut s, session).await;
        stayed_inside(&s);
    }
}

/// "Delete" disguised by a zero-width character, a right-to-left override or a lookalike letter,
/// in each label source in turn: each is read through, and the grant does not apply.
#[tokio::test]
async fn a_disguised_excluded_word_in_any_label_source_is_read_through() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "e")]);
    let controls = [
        // (markup, the name the model sees)
        ("<button aria-label=\"De\u{200B}lete\">x</button>", "De\u{200B}lete"),
        (
            "<span id=\"l\">Del\u{202E}ete\u{202C}</span><button aria-labelledby=\"l\">y</button>",
            "Del\u{202E}ete\u{202C}",
        ),
        ("<label for=\"i\">D\u{435}lete</label><input id=\"i\" type=\"checkbox\">", "D\u{435}lete"),
        ("<button title=\"Del\u{435}te\">Next title</button>", "Next title"),
        ("<input aria-label=\"Next placeholder\" placeholder=\"Dele\u{200D}te\">", "Next placeholder"),
        ("<button><img alt=\"Dele\u{200B}te\" width=\"10\" height=\"10\"></button>", "Dele\u{200B}te"),
        ("<input type=\"button\" value=\"D\u{435}l\u{435}te\">", "D\u{435}l\u{435}te"),
        ("<button aria-label=\"Next text\">De\u{AD}lete</button>", "Next text"),
        ("<dialog open aria-label=\"Dele\u{200B}te?\"><button>Next dialog</button></dialog>", "Next dialog"),
    ];
    for (i, (markup, name)) in controls.iter().enumerate() {
        let path = format!("/lesson/disguised-{i}");
        s.fixture.page(LESSON, &path, &format!("<!doctype html><title>Disguised</title>{markup}"));
        let session = s.open("profile-1", &path, 50).await.unwrap();
        let o = s.observe(&session).await;
        let target = node(&o, name).0;
        let mut act = click(&session, &o, target);
        // A field is typed into, never clicked.
        if target.role == rt::Role::Textbox as i32 {
            act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "answer".into() }));
        }
        s.grant(&mut act, task_constraint());
        let reply = s.act(act).await.unwrap();
        assert!(!reply.dispatched, "{markup}: {reply:?}");
        assert_eq!(rt::ActCode::try_from(reply.code), Ok(rt::ActCode::GrantNotApplicable), "{markup}: {reply:?}");
        assert_eq!(reply.reason, "deletion", "{markup}: {reply:?}");
        close(&mut s, session).await;
    }
    stayed_inside(&s);
}

/// A label source longer than an observation carries (256 characters) reaches the worker cut and
/// marked not whole, so the worker covers nothing on it; one longer than the runtime reads (1,024)
/// is refused by the runtime too.
#[tokio::test]
async fn a_label_source_cut_in_the_facts_is_not_whole() {
    let mut s = stack().await;
    let long = |n: usize| "Next lesson ".repeat(n / 12 + 1).chars().take(n).collect::<String>();
    for (i, chars) in [300usize, 1100].into_iter().enumerate() {
        let path = format!("/lesson/long-{i}");
        s.fixture.page(
            LESSON,
            &path,
            &format!("<!doctype html><title>Long</title><button title=\"{}\">Next</button>", long(chars)),
        );
        let session = s.open("profile-1", &path, 50).await.unwrap();
        let o = s.observe(&session).await;
        let (n, facts) = node(&o, "Next");
        assert_eq!(facts.title.chars().count(), classifier::coverage::CARRIED_LABEL_CHARS, "{chars}");
        assert_eq!(facts.truncated, Some(true), "{chars}");
        let worker_facts = proto::facts::element_facts(facts.clone()).unwrap();
        let grant = classifier::Grant::Task(classifier::TaskScope {
            origin: tests::browser::LESSON_ORIGIN.into(),
            path_prefix: "/lesson".into(),
            chars_remaining: 4096,
        });
        let page = classifier::PageFacts { url: o.url.clone() };
        let worker = classifier::covers(&grant, &classifier::Action::Click, &worker_facts, &page);
        assert_eq!(worker.map_err(|e| e.reason.code()), Err("label_truncated"), "{chars}");

        let mut act = click(&session, &o, n);
        s.grant(&mut act, task_constraint());
        let reply = s.act(act).await.unwrap();
        if chars > classifier::coverage::MAX_LABEL_CHARS {
            assert!(!reply.dispatched, "{reply:?}");
            assert_eq!(reply.reason, "label_truncated", "{reply:?}");
        } else {
            // The runtime reads it whole: had the worker allowed it, the act would go.
            assert!(reply.ok, "{reply:?}");
        }
        close(&mut s, session).await;
    }
    stayed_inside(&s);
}

/// The page's own script replaces the DOM's built-ins to make a control read as something else;
/// the runtime reads in an isolated world, where the built-ins are the browser's.
#[tokio::test]
async fn built_ins_the_page_replaces_do_not_reach_the_read() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/liar",
        r#"<!doctype html><title>Liar</title>
<button id="b">Delete account</button>
<a href="https://www.elsewhere.test/win">Onward</a>
<script>
for (const [proto, name] of [[Node.prototype, 'textContent'], [HTMLElement.prototype, 'innerText']]) {
  const real = Object.getOwnPropertyDescriptor(proto, name);
  Object.defineProperty(proto, name, { get() { return this.id === 'b' ? 'Next' : real.get.call(this); } });
}
Object.defineProperty(HTMLAnchorElement.prototype, 'href', { get() { return 'https://www.lesson.test/lesson/2'; } });
Element.prototype.getAttribute = function (n) { return n === 'href' ? '/lesson/2' : null; };
JSON.stringify = () => '{}';
</script>"#,
    );
    let session = s.open("profile-1", "/lesson/liar", 50).await.unwrap();
    let o = s.observe(&session).await;
    let (button, _) = node(&o, "Delete account");
    let (_, facts) = node(&o, "Onward");
    assert_eq!(facts.nav_targets, vec!["https://www.elsewhere.test/win".to_owned()]);
    let mut act = click(&session, &o, button);
    s.grant(&mut act, task_constraint());
    let reply = s.act(act).await.unwrap();
    assert!(!reply.dispatched && ["account_change", "deletion"].contains(&reply.reason.as_str()), "{reply:?}");
    stayed_inside(&s);
}

/// A document without a root element (one between navigations, or one the page emptied) reads
/// as a page with no nodes, not as a page that broke the read.
#[tokio::test]
async fn a_document_without_a_root_element_reads_as_empty() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/rootless",
        "<!doctype html><title>Rootless</title><script>document.removeChild(document.documentElement)</script>",
    );
    let session = s.open("profile-1", "/lesson/rootless", 50).await.unwrap();
    let o = s.observe(&session).await;
    assert!(o.nodes.is_empty(), "{o:?}");
}

/// A dialog the act opens holds the page: the act reports a change, and a read meanwhile says a
/// dialog is open; the browser is not restarted, so the dialog is still there.
#[tokio::test]
async fn an_open_dialog_is_reported_and_the_browser_kept() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/dialog-open",
        r#"<!doctype html><title>Alert</title><button onclick="alert('Saved')">Next</button>"#,
    );
    let session = s.open("profile-1", "/lesson/dialog-open", 50).await.unwrap();
    let o = s.observe(&session).await;
    let mut act = click(&session, &o, node(&o, "Next").0);
    act.wait_for = rt::WaitFor::Dialog as i32;
    let reply = s.act(act).await.unwrap();
    assert!(reply.ok && reply.changed, "{reply:?}");
    for _ in 0..2 {
        let req = rt::ObserveRequest { session_id: session.clone(), run_id: String::new() };
        let err = s.runtime.observe(tests::browser::with(tests::browser::WORKER, req)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
        assert!(err.message().contains("dialog"), "{err:?}");
    }
}
