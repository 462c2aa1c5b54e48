//! The classifier: one deny-biased decision of what an action on an element would do
//! ([`classify`]) and whether a grant may cover it ([`covers`]), shared by the authorizer and the
//! browser runtime so both apply the same rules.
//!
//! Pure functions over facts: no IO, no clock, and no knowledge of PostgreSQL, gRPC or WebDriver.
//! It depends on no other crate of the workspace.

pub mod consequence;
pub mod constraint;
pub mod coverage;
mod currency;
pub mod facts;
mod fold_table;
pub mod paths;
pub mod readings;
mod reason;
pub mod text_shape;
pub mod vocabulary;

pub use consequence::{Consequence, Named};
pub use coverage::covers;
pub use facts::{
    Action, ElementFacts, FieldKind, Grant, LabelSource, PageFacts, SUBMIT_METHODS, SelectOption, TaskScope,
};
pub use reason::{NotCovered, Reason};

/// Every source file of the classifier: its version is their digest.
const SOURCES: [&str; 12] = [
    include_str!("consequence.rs"),
    include_str!("constraint.rs"),
    include_str!("coverage.rs"),
    include_str!("currency.rs"),
    include_str!("facts.rs"),
    include_str!("fold_table.rs"),
    include_str!("lib.rs"),
    include_str!("paths.rs"),
    include_str!("readings.rs"),
    include_str!("reason.rs"),
    include_str!("text_shape.rs"),
    include_str!("vocabulary.rs"),
];

/// The classifier's version, recorded with each decision it took part in: SHA-256 over its own
/// source (vocabulary, fold table and rules alike), so any change to how it reads moves it.
pub fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        for s in SOURCES {
            h.update((s.len() as u64).to_be_bytes());
            h.update(s);
        }
        format!("sha256:{}", hex::encode(h.finalize()))
    })
}

/// The words a standing grant treats as routine when every label source reads as one of them.
pub const ROUTINE_WORDS: [&str; 10] =
    ["continue", "next", "back", "previous", "skip", "check", "ok", "done", "start", "close"];

/// One reason for a named consequence: which label source read as what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    pub source: LabelSource,
    pub named: Named,
}

impl Match {
    pub fn source_name(&self) -> &'static str {
        match self.source {
            LabelSource::Name => "the accessible name",
            LabelSource::AriaLabel => "aria-label",
            LabelSource::LabelledBy => "an aria-labelledby target",
            LabelSource::Label => "a label",
            LabelSource::Title => "the title",
            LabelSource::Placeholder => "the placeholder",
            LabelSource::Alt => "the alt text",
            LabelSource::Value => "the value",
            LabelSource::VisibleText => "the visible text",
            LabelSource::DialogName => "the dialog's name",
            LabelSource::Option => "an option",
            LabelSource::NavTarget => "a navigation target",
            LabelSource::PagePath => "the page path",
        }
    }
}

/// A consequence with every match behind it, most specific first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    pub consequence: Consequence,
    pub matches: Vec<Match>,
}

/// The consequence a field's kind names: exactly the sensitive kinds (a test holds the two to
/// one set).
fn field_consequence(kind: FieldKind) -> Option<Named> {
    match kind {
        FieldKind::Password => Some(Named::CredentialField),
        FieldKind::OneTimeCode => Some(Named::OneTimeCodeField),
        FieldKind::Payment => Some(Named::PaymentField),
        FieldKind::Identity => Some(Named::IdentityField),
        _ => None,
    }
}

/// Classifies each distinct text once: sources often repeat one text (name, visible text and
/// aria-label alike), and the answer depends only on the text.
#[derive(Default)]
struct TextCache<'a> {
    seen: Vec<(&'a str, readings::Readings, Vec<Named>)>,
}

impl<'a> TextCache<'a> {
    fn classify(&mut self, source: LabelSource, text: &'a str, matches: &mut Vec<Match>) {
        let i = match self.seen.iter().position(|(t, _, _)| *t == text) {
            Some(i) => i,
            None => {
                let all = readings::all_readings(text);
                let mut named = vocabulary::match_readings(&all);
                match currency::currency(text) {
                    Some(true) => named.push(Named::Payment),
                    Some(false) => named.push(Named::Currency),
                    None => {}
                }
                self.seen.push((text, all, named));
                self.seen.len() - 1
            }
        };
        matches.extend(self.seen[i].2.iter().map(|&named| Match { source, named }));
    }

    fn readings(&self, text: &str) -> Option<&readings::Readings> {
        self.seen.iter().find(|(t, _, _)| *t == text).map(|(_, r, _)| r)
    }
}

/// Classifies an element for an action: a select's options are those the selection could
/// choose; without a select action, every option.
pub(crate) fn classify_for(element: &ElementFacts, action: Option<&Action>) -> Classification {
    let mut matches = Vec::new();
    let mut cache = TextCache::default();
    if let Some(named) = field_consequence(element.field_kind) {
        matches.push(Match { source: LabelSource::Name, named });
    }
    for (source, text) in element.label_sources() {
        cache.classify(source, text, &mut matches);
    }
    let options: Vec<&SelectOption> = match action {
        Some(Action::Select { option }) => facts::choosable(&element.options, option),
        _ => element.options.iter().collect(),
    };
    for o in options {
        let texts = [
            Some(&o.value),
            o.label.as_ref(),
            o.text.as_ref(),
            o.name.as_ref(),
            o.title.as_ref(),
            o.group_label.as_ref(),
        ];
        for text in texts.into_iter().flatten() {
            cache.classify(LabelSource::Option, text, &mut matches);
        }
    }
    for target in &element.nav_targets {
        if let Ok(there) = paths::location(target) {
            for segment in &there.segments {
                if let Some(named) = paths::sensitive_segment(segment) {
                    matches.push(Match { source: LabelSource::NavTarget, named });
                }
            }
        }
    }
    matches.sort_by_key(|m| m.named);
    let consequence = match matches.first() {
        Some(m) => Consequence::Named(m.named),
        None if is_routine(element, &cache) => Consequence::Routine,
        None => Consequence::Unknown,
    };
    Classification { consequence, matches }
}

/// Every label source reads, in every reading, as the same single routine word.
fn is_routine(element: &ElementFacts, cache: &TextCache<'_>) -> bool {
    let mut word: Option<&str> = None;
    let mut any = false;
    for (_, text) in element.label_sources().filter(|(s, _)| *s != LabelSource::DialogName) {
        any = true;
        let Some(all) = cache.readings(text) else { return false };
        if !all.spaced.is_empty() {
            return false;
        }
        let all = &all.tokens;
        let Some(first) = all.first() else { return false };
        if !ROUTINE_WORDS.contains(&first.as_str()) || all.iter().any(|r| r != first) {
            return false;
        }
        match word {
            Some(w) if w != first => return false,
            Some(_) => {}
            None => word = Some(first.as_str()),
        }
    }
    any && element.options.is_empty() && element.nav_targets.is_empty() && element.field_kind == FieldKind::None
}

/// What acting on `element` would do, judged from every label source separately: a match of the
/// exclusion vocabulary in any of them names the consequence.
pub fn classify(element: &ElementFacts, _page: &PageFacts) -> Consequence {
    classify_for(element, None).consequence
}

/// [`classify`] with every match behind the answer.
pub fn classify_detailed(element: &ElementFacts) -> Classification {
    classify_for(element, None)
}

#[cfg(test)]
mod field_kinds {
    use super::*;

    #[test]
    fn the_kinds_that_name_a_consequence_are_the_sensitive_ones() {
        for kind in FieldKind::ALL {
            assert_eq!(field_consequence(kind).is_some(), kind.is_sensitive(), "{kind:?}");
            assert!(!kind.is_secret() || kind.is_sensitive(), "a secret is sensitive: {kind:?}");
            assert!(!kind.is_credential() || kind.is_secret(), "a credential is a secret: {kind:?}");
        }
    }
}

#[cfg(test)]
mod version_tests {
    /// A file added to the crate without joining [`super::SOURCES`] could change a reading
    /// without moving the version.
    #[test]
    fn the_version_covers_every_source_file() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let files = std::fs::read_dir(dir)
            .unwrap()
            .filter(|f| f.as_ref().unwrap().path().extension().is_some_and(|e| e == "rs"));
        assert_eq!(files.count(), super::SOURCES.len());
        assert!(super::version().starts_with("sha256:") && super::version().len() == 71);
    }
}
