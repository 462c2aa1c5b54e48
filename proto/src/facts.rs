//! The element-facts codec, both ways, in one place: the runtime encodes what it read
//! (`carried`), the authorizer decodes what a request carries (`element_facts`). A fact the
//! encoding leaves out decodes as absent, and an absent must-have fact (navigation targets,
//! download, disabled, truncation, the field's kind) marks the facts missing, so nothing is
//! covered by them.

use classifier::{ElementFacts, FieldKind, SelectOption};

use crate::v1 as pb;

impl From<FieldKind> for pb::FieldKind {
    fn from(k: FieldKind) -> Self {
        match k {
            FieldKind::None => Self::None,
            FieldKind::Text => Self::Text,
            FieldKind::Search => Self::Search,
            FieldKind::TextArea => Self::TextArea,
            FieldKind::EditableRegion => Self::EditableRegion,
            FieldKind::Select => Self::Select,
            FieldKind::Checkbox => Self::Checkbox,
            FieldKind::Radio => Self::Radio,
            FieldKind::CustomChoice => Self::CustomChoice,
            FieldKind::Password => Self::Password,
            FieldKind::OneTimeCode => Self::OneTimeCode,
            FieldKind::Payment => Self::Payment,
            FieldKind::Identity => Self::Identity,
            FieldKind::File => Self::File,
            FieldKind::Other => Self::Other,
        }
    }
}

impl From<pb::FieldKind> for FieldKind {
    fn from(k: pb::FieldKind) -> Self {
        match k {
            pb::FieldKind::None => Self::None,
            pb::FieldKind::Text => Self::Text,
            pb::FieldKind::Search => Self::Search,
            pb::FieldKind::TextArea => Self::TextArea,
            pb::FieldKind::EditableRegion => Self::EditableRegion,
            pb::FieldKind::Select => Self::Select,
            pb::FieldKind::Checkbox => Self::Checkbox,
            pb::FieldKind::Radio => Self::Radio,
            pb::FieldKind::CustomChoice => Self::CustomChoice,
            pb::FieldKind::Password => Self::Password,
            pb::FieldKind::OneTimeCode => Self::OneTimeCode,
            pb::FieldKind::Payment => Self::Payment,
            pb::FieldKind::Identity => Self::Identity,
            pb::FieldKind::File => Self::File,
            pb::FieldKind::Other => Self::Other,
        }
    }
}

/// Why carried facts do not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownFieldKind;

fn opt(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// The facts a request carries, as the rules read them: an absent fact means no coverage.
pub fn element_facts(e: pb::ElementFacts) -> Result<ElementFacts, UnknownFieldKind> {
    let kind = pb::FieldKind::try_from(e.field_kind.unwrap_or_default()).map_err(|_| UnknownFieldKind)?;
    Ok(ElementFacts {
        role: e.role,
        name: opt(&e.name),
        aria_label: opt(&e.aria_label),
        labelledby: e.labelledby,
        labels: e.labels,
        title: opt(&e.title),
        placeholder: opt(&e.placeholder),
        alt: opt(&e.alt),
        value: opt(&e.value),
        visible_text: opt(&e.visible_text),
        dialog_name: opt(&e.dialog_name),
        field_kind: kind.into(),
        options: e
            .options
            .into_iter()
            .map(|o| SelectOption {
                value: o.value,
                label: opt(&o.label),
                text: opt(&o.text),
                name: opt(&o.name),
                title: opt(&o.title),
                group_label: opt(&o.group_label),
            })
            .collect(),
        nav_targets: e.nav_targets,
        download: e.download.unwrap_or(true),
        disabled: e.disabled.unwrap_or(true),
        truncated: e.truncated.unwrap_or(true),
        // Not a coverage fact: absent spares no check, since the runtime reads the form again
        // whenever an approval is spent on a click.
        submits_form: e.submits_form.unwrap_or(false),
        opens_window: e.opens_window,
        submit_method: e.submit_method,
        facts_missing: !e.nav_targets_carried
            || e.field_kind.is_none()
            || e.download.is_none()
            || e.disabled.is_none()
            || e.truncated.is_none(),
    })
}

/// The facts as carried: every text through `cut` (the carrier's bound on a text) and every
/// navigation target through `target`, a label source that reads exactly as the name left out,
/// every other fact explicit. `truncated` is the reader's own mark; the carrier adds its cuts.
pub fn carried(f: &ElementFacts, cut: &dyn Fn(&str) -> String, target: &dyn Fn(&str) -> String) -> pb::ElementFacts {
    let name = f.name.clone().unwrap_or_default();
    let differs = |s: &Option<String>| s.as_deref().filter(|s| *s != name).map(cut).unwrap_or_default();
    let differ_all = |v: &[String]| v.iter().filter(|s| **s != name).map(|s| cut(s)).collect::<Vec<_>>();
    let text = |s: &Option<String>| cut(s.as_deref().unwrap_or_default());
    pb::ElementFacts {
        role: f.role.clone(),
        name: cut(&name),
        aria_label: differs(&f.aria_label),
        labelledby: differ_all(&f.labelledby),
        labels: differ_all(&f.labels),
        title: differs(&f.title),
        placeholder: differs(&f.placeholder),
        alt: differs(&f.alt),
        value: differs(&f.value),
        visible_text: differs(&f.visible_text),
        dialog_name: differs(&f.dialog_name),
        field_kind: Some(pb::FieldKind::from(f.field_kind) as i32),
        options: f
            .options
            .iter()
            .map(|o| pb::SelectOption {
                value: cut(&o.value),
                label: text(&o.label),
                text: text(&o.text),
                name: text(&o.name),
                title: text(&o.title),
                group_label: text(&o.group_label),
            })
            .collect(),
        nav_targets: f.nav_targets.iter().map(|t| target(t)).collect(),
        download: Some(f.download),
        disabled: Some(f.disabled),
        truncated: Some(f.truncated),
        nav_targets_carried: true,
        submits_form: Some(f.submits_form),
        opens_window: f.opens_window,
        submit_method: f.submit_method.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: FieldKind) -> ElementFacts {
        ElementFacts {
            role: "textbox".into(),
            name: Some("Email".into()),
            aria_label: Some("Your email".into()),
            labelledby: vec!["Contact".into()],
            labels: vec!["E-mail address".into()],
            title: Some("where we write".into()),
            placeholder: Some("you@example.test".into()),
            alt: None,
            value: None,
            visible_text: Some("Email field".into()),
            dialog_name: Some("Sign up".into()),
            field_kind: kind,
            options: vec![SelectOption { value: "a".into(), label: Some("A".into()), ..SelectOption::default() }],
            nav_targets: vec!["https://www.lesson.test/lesson/next".into()],
            download: false,
            disabled: false,
            truncated: false,
            submits_form: true,
            opens_window: true,
            submit_method: "post".into(),
            facts_missing: false,
        }
    }

    #[test]
    fn facts_round_trip_for_every_field_kind() {
        for kind in FieldKind::ALL {
            let f = sample(kind);
            assert_eq!(element_facts(carried(&f, &str::to_owned, &str::to_owned)), Ok(f), "{kind:?}");
            assert_eq!(FieldKind::from(pb::FieldKind::from(kind)), kind);
        }
    }

    #[test]
    fn a_source_equal_to_the_name_is_left_out_and_an_absent_must_have_is_missing() {
        let f = ElementFacts { aria_label: Some("Email".into()), ..sample(FieldKind::Text) };
        let pb = carried(&f, &str::to_owned, &str::to_owned);
        assert!(pb.aria_label.is_empty());
        let back = element_facts(pb.clone()).unwrap();
        assert_eq!(back.aria_label, None);
        for strip in [
            |e: &mut pb::ElementFacts| e.download = None,
            |e: &mut pb::ElementFacts| e.disabled = None,
            |e: &mut pb::ElementFacts| e.truncated = None,
            |e: &mut pb::ElementFacts| e.field_kind = None,
            |e: &mut pb::ElementFacts| e.nav_targets_carried = false,
        ] {
            let mut e = pb.clone();
            strip(&mut e);
            assert!(element_facts(e).unwrap().facts_missing);
        }
        assert_eq!(element_facts(pb::ElementFacts { field_kind: Some(99), ..pb }), Err(UnknownFieldKind));
    }
}
