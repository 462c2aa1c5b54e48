//! Whether a grant covers an action: decision 6 of the task-grant record. Every refusal has a
//! stable code.

use crate::consequence::Consequence;
use crate::facts::{Action, ElementFacts, FieldKind, Grant, PageFacts, TaskScope, choosable};
use crate::paths::{first_sensitive, inside, location};
use crate::reason::{NotCovered, Reason};
use crate::text_shape;

/// The runtime reads at most this much of one label source; an unread tail could hold anything.
pub const MAX_LABEL_CHARS: usize = 1_024;
/// An observation's facts carry at most this much of one label source, marking the facts as not
/// whole when a source was cut: the worker then covers nothing on them.
pub const CARRIED_LABEL_CHARS: usize = 256;
/// The scroll distances an act may take (negative: up). A free number would reach the page as a
/// value the model chose, so the runtime sends only these and a grant covers only these.
pub const SCROLL_STEPS: [i32; 8] = [-1200, -600, -300, -100, 100, 300, 600, 1200];
/// A select with more options is refused outright.
pub const MAX_OPTIONS: usize = 4_096;
/// A selection that could choose more options than this is refused.
pub const MAX_CHOOSABLE: usize = 64;

/// Keys a task grant may press: named navigation and editing keys. Never a letter, a digit or a
/// chord.
pub const KEYS: &[&str] = &[
    "Enter",
    "Tab",
    "Escape",
    "Backspace",
    "Delete",
    "ArrowUp",
    "ArrowDown",
    "ArrowLeft",
    "ArrowRight",
    "Home",
    "End",
    "PageUp",
    "PageDown",
    "Space",
    " ",
];

fn refuse(reason: Reason, detail: impl Into<String>) -> Result<(), NotCovered> {
    Err(NotCovered { reason, detail: detail.into() })
}

/// Keys whose press on a control activates it as a click does.
pub const ACTIVATION_KEYS: &[&str] = &["Enter", "Space", " "];

/// Whether pressing `key` on a control of `kind` activates it as a click would: an activation
/// key on anything that takes no text and is not a select (a button, a link, a choice). Such a
/// press reaches what a click reaches without the click's read-back, so the runtime refuses it.
pub fn activates(kind: FieldKind, key: &str) -> bool {
    ACTIVATION_KEYS.contains(&key) && !takes_text(kind) && kind != FieldKind::Select
}

/// Whether the runtime refuses pressing `key` on `element` whatever allowed it: an activation key
/// on a control (see [`activates`]), or Enter in a one-line field of a form, which submits it
/// past the read-back its button's click would show. The runtime decides the second from the
/// live element (`input` with a form owner); the facts say it as a one-line field kind with
/// `submits_form`.
pub fn key_refused(element: &ElementFacts, key: &str) -> bool {
    let one_line = !matches!(element.field_kind, FieldKind::TextArea | FieldKind::EditableRegion | FieldKind::Select);
    activates(element.field_kind, key) || (key == "Enter" && element.submits_form && one_line)
}

/// Field kinds that take typed text.
pub fn takes_text(kind: FieldKind) -> bool {
    matches!(
        kind,
        FieldKind::Text
            | FieldKind::Search
            | FieldKind::TextArea
            | FieldKind::EditableRegion
            | FieldKind::Identity
            | FieldKind::Other
            | FieldKind::Password
            | FieldKind::OneTimeCode
            | FieldKind::Payment
    )
}

/// Fields no task grant covers whatever the action: sensitive fields and file inputs. An
/// approval on one offers no grant, since the grant could never apply there.
pub fn field_never_covered(kind: FieldKind) -> bool {
    kind.is_sensitive() || kind == FieldKind::File
}

/// Does `grant` cover `action` on `element` in `page`? The first rule that refuses answers.
pub fn covers(grant: &Grant, action: &Action, element: &ElementFacts, page: &PageFacts) -> Result<(), NotCovered> {
    if element.facts_missing {
        // An absent fact means no coverage: what was not carried could be what refuses.
        return refuse(Reason::FactsMissing, "a fact the coverage rules read was not carried");
    }
    // Every grant acts on HTTPS pages only.
    let Ok(here) = location(&page.url) else {
        return refuse(Reason::PageUnparseable, "the page URL is not an https URL");
    };
    if let Grant::Task(scope) = grant {
        if !inside(&here, &scope.origin, &scope.path_prefix) {
            return refuse(
                Reason::PageOutsideScope,
                format!("the page is outside {}{}", scope.origin, scope.path_prefix),
            );
        }
        if let Some((segment, named)) = first_sensitive(&here) {
            return refuse(
                Reason::PageSensitiveSegment,
                format!("page path segment {segment:?} reads as {}", named.code()),
            );
        }
    }
    if let Action::Scroll { by } = action {
        if !SCROLL_STEPS.contains(by) {
            return refuse(Reason::ScrollNotAStep, format!("a scroll of {by} pixels is not one of the fixed steps"));
        }
        return Ok(());
    }
    if element.disabled {
        return refuse(Reason::Disabled, "the element is disabled");
    }
    if element.name.as_deref().is_none_or(|n| n.trim().is_empty()) {
        return refuse(Reason::Unnamed, "the element has no accessible name");
    }
    let too_long = element.label_sources().any(|(_, t)| t.chars().count() > MAX_LABEL_CHARS);
    if element.truncated || too_long {
        return refuse(Reason::LabelTruncated, "a label source was not read whole");
    }

    if let Action::Select { option } = action {
        select_fits(element, option)?;
    }
    let classification = crate::classify_for(element, Some(action));
    if let Consequence::Named(named) = classification.consequence {
        let source = classification.matches.first().map_or("the field kind", |m| m.source_name());
        return refuse(Reason::NamedConsequence(named), format!("{} reads as {}", source, named.code()));
    }

    let Grant::Task(scope) = grant else {
        return match (action, classification.consequence) {
            (Action::Click, Consequence::Routine)
                if element.role.eq_ignore_ascii_case("button") && !element.download =>
            {
                Ok(())
            }
            _ => refuse(Reason::NotRoutine, "a standing grant covers only a routine click on a button or a scroll"),
        };
    };

    task_action_fits(action, element, scope)?;
    if element.field_kind == FieldKind::File {
        return refuse(Reason::FileInput, "file inputs are never covered");
    }
    if element.field_kind.is_sensitive() {
        return refuse(Reason::FieldKindNotCovered, "sensitive fields are never covered");
    }
    if !matches!(action, Action::Type { .. }) {
        if element.download {
            return refuse(Reason::Download, "download links are never covered");
        }
        targets_inside(element, scope)?;
    }
    Ok(())
}

/// A select's own limits: a select element, few options, and a choice that picks one or few.
fn select_fits(element: &ElementFacts, option: &str) -> Result<(), NotCovered> {
    if element.field_kind != FieldKind::Select {
        return refuse(Reason::FieldKindNotCovered, "select acts only on a select");
    }
    if element.options.len() > MAX_OPTIONS {
        return refuse(Reason::TooManyOptions, format!("more than {MAX_OPTIONS} options"));
    }
    let chosen = choosable(&element.options, option);
    if chosen.is_empty() {
        return refuse(Reason::OptionNotFound, "no option has that value or label");
    }
    if chosen.len() > MAX_CHOOSABLE {
        return refuse(Reason::TooManyChoices, format!("the selection could choose more than {MAX_CHOOSABLE} options"));
    }
    Ok(())
}

/// Under a task grant: a type, check or key fits the field it acts on.
fn task_action_fits(action: &Action, element: &ElementFacts, scope: &TaskScope) -> Result<(), NotCovered> {
    match action {
        Action::Type { text } => {
            if !matches!(element.field_kind, FieldKind::Text | FieldKind::Search | FieldKind::TextArea) {
                return refuse(
                    Reason::FieldKindNotCovered,
                    "typing is covered only into a text, search or multi-line field",
                );
            }
            text_shape::check(text, element.field_kind == FieldKind::TextArea, scope.chars_remaining)
                .or_else(|reason| refuse(reason, "the typed text is outside the covered shape"))
        }
        Action::Check if !matches!(element.field_kind, FieldKind::Checkbox | FieldKind::Radio) => {
            refuse(Reason::FieldKindNotCovered, "check acts only on a native check box or radio")
        }
        Action::Press { key } => {
            if matches!(
                element.field_kind,
                FieldKind::Checkbox | FieldKind::Radio | FieldKind::CustomChoice | FieldKind::Select
            ) {
                return refuse(Reason::KeyOnChoiceControl, "a key on a choice control chooses without a read");
            }
            // Named keys only: a letter or digit, pressed one act at a time, would be literal text
            // reaching the page, which only a task-record field may be.
            if !KEYS.contains(&key.as_str()) {
                return refuse(Reason::KeyNotAllowed, format!("key {key:?} is not a covered key"));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Every place the element could navigate to stays inside the scope, on no sensitive segment.
fn targets_inside(element: &ElementFacts, scope: &TaskScope) -> Result<(), NotCovered> {
    for target in &element.nav_targets {
        let Ok(there) = location(target) else {
            return refuse(Reason::TargetOutsideScope, "a navigation target is not an https URL");
        };
        if !inside(&there, &scope.origin, &scope.path_prefix) {
            return refuse(
                Reason::TargetOutsideScope,
                format!("a navigation target leaves {}{}", scope.origin, scope.path_prefix),
            );
        }
        if let Some((segment, named)) = first_sensitive(&there) {
            return refuse(
                Reason::TargetSensitiveSegment,
                format!("target path segment {segment:?} reads as {}", named.code()),
            );
        }
    }
    Ok(())
}

/// The names of the normalisations a form's read-back may match a field under, one source for
/// the runtime that applies them and the domain that judges them.
pub mod normalisation {
    pub const SPACING: &str = "spacing";
    pub const LETTER_CASE: &str = "letter case";
    pub const NUMBER: &str = "number";
    /// A slashed date only one reading makes a date.
    pub const DAY_FIRST: &str = "DD/MM/YYYY";
    pub const MONTH_FIRST: &str = "MM/DD/YYYY";
    /// The rules that rest on nothing the page says. A date read the way the page or the field
    /// claims to write dates is named with the claim, and a grant never sends it unseen.
    pub const PAGE_FREE: [&str; 5] = [SPACING, LETTER_CASE, NUMBER, DAY_FIRST, MONTH_FIRST];
}
