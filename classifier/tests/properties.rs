//! Property tests: monotonicity and evasion resistance.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // positions picked from small random seeds

use classifier::vocabulary::all_forms;
use classifier::{Action, ElementFacts, Grant, Named, PageFacts, TaskScope, classify_detailed, covers};
use proptest::prelude::*;

fn page() -> PageFacts {
    PageFacts { url: "https://www.lesson.test/lesson/1".into() }
}

fn task() -> Grant {
    Grant::Task(TaskScope {
        origin: "https://www.lesson.test".into(),
        path_prefix: "/lesson".into(),
        chars_remaining: 4096,
    })
}

/// Benign lesson-ish words in several scripts.
const BENIGN: &[&str] = &[
    "el",
    "gato",
    "la",
    "manzana",
    "Ich",
    "bin",
    "das",
    "Brot",
    "Bonjour",
    "je",
    "suis",
    "water",
    "the",
    "boy",
    "私は",
    "学生",
    "мальчик",
    "شكرا",
    "नमस्ते",
    "Continue",
    "Next",
    "apple",
    "green",
    "house",
    "quickly",
    "she",
    "reads",
];

fn benign_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(BENIGN), 0..5).prop_map(|w| w.join(" "))
}

fn single_forms() -> Vec<(Named, String)> {
    all_forms().into_iter().filter(|(_, f)| !f.contains(' ')).collect()
}

/// An element with random benign label sources.
fn element() -> impl Strategy<Value = ElementFacts> {
    (
        benign_text(),
        prop::option::of(benign_text()),
        prop::option::of(benign_text()),
        prop::collection::vec(benign_text(), 0..2),
    )
        .prop_map(|(name, aria, title, labels)| ElementFacts {
            role: "button".into(),
            name: Some(if name.is_empty() { "Next".into() } else { name.clone() }),
            visible_text: Some(name),
            aria_label: aria,
            title,
            labels,
            ..ElementFacts::default()
        })
}

/// Puts `word` as its own token at `at` (a fraction of the token count) in label source `which`.
fn insert_word(e: &mut ElementFacts, which: usize, at: f64, word: &str) {
    let slot: &mut Option<String> = match which % 5 {
        0 => &mut e.name,
        1 => &mut e.aria_label,
        2 => &mut e.title,
        3 => &mut e.visible_text,
        _ => &mut e.placeholder,
    };
    let text = slot.take().unwrap_or_default();
    let mut tokens: Vec<&str> = text.split(' ').filter(|t| !t.is_empty()).collect();
    let i = ((tokens.len() as f64) * at) as usize;
    tokens.insert(i.min(tokens.len()), word);
    *slot = Some(tokens.join(" "));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn inserting_an_excluded_word_never_makes_an_action_covered(
        e in element(),
        form in prop::sample::select(all_forms()),
        which in 0usize..5,
        at in 0.0f64..=1.0,
    ) {
        let mut with = e.clone();
        insert_word(&mut with, which, at, &form.1);
        let got = classify_detailed(&with);
        prop_assert!(got.matches.iter().any(|m| m.named == form.0), "{:?} in {with:?} gave {got:?}", form.1);
        prop_assert!(covers(&task(), &Action::Click, &with, &page()).is_err());
        prop_assert!(covers(&Grant::Standing, &Action::Click, &with, &page()).is_err());
    }

    #[test]
    fn adding_a_label_source_never_removes_a_consequence(e in element(), extra in benign_text(), form in prop::sample::select(all_forms())) {
        let mut base = e;
        base.labelledby.push(form.1.clone());
        let before = classify_detailed(&base);
        let mut more = base.clone();
        more.labels.push(extra);
        let after = classify_detailed(&more);
        for m in &before.matches {
            prop_assert!(after.matches.contains(m), "{m:?} lost after adding a label source");
        }
        prop_assert_eq!(before.consequence, after.consequence);
    }
}

/// Latin letters and a lookalike the fold table reads back.
const LOOKALIKES: &[(char, char)] = &[
    ('a', '\u{0430}'),
    ('c', '\u{0441}'),
    ('e', '\u{0435}'),
    ('o', '\u{043E}'),
    ('p', '\u{0440}'),
    ('x', '\u{0445}'),
    ('y', '\u{0443}'),
    ('i', '\u{0456}'),
    ('j', '\u{0458}'),
    ('s', '\u{0455}'),
    ('h', '\u{04BB}'),
    ('d', '\u{0501}'),
    ('n', '\u{0578}'),
    ('u', '\u{057D}'),
    ('g', '\u{0261}'),
    ('v', '\u{03BD}'),
    ('w', '\u{051D}'),
    ('t', '\u{1D1B}'),
    ('m', '\u{1D0D}'),
    ('r', '\u{0280}'),
    ('l', '\u{029F}'),
    ('k', '\u{1D0B}'),
    ('b', '\u{0299}'),
    ('f', '\u{A730}'),
    ('z', '\u{1D22}'),
    ('q', '\u{A7AF}'),
];

/// One disguise, steered by `seed`.
fn disguise(kind: u8, word: &str, seed: u64) -> String {
    let chars: Vec<char> = word.chars().collect();
    let pick = |n: usize| if n == 0 { 0 } else { (seed as usize) % n };
    match kind % 10 {
        0 => {
            let zw = ['\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}', '\u{FEFF}', '\u{00AD}'][pick(6)];
            let i = 1 + pick(chars.len().max(2) - 1);
            chars[..i.min(chars.len())].iter().chain([zw].iter()).chain(&chars[i.min(chars.len())..]).collect()
        }
        1 => chars
            .iter()
            .flat_map(|&c| if c.is_alphabetic() && seed.is_multiple_of(3) { vec![c, '\u{0301}'] } else { vec![c] })
            .collect(),
        2 => chars
            .iter()
            .enumerate()
            .map(|(i, c)| if (seed >> (i % 64)) & 1 == 1 { c.to_ascii_uppercase() } else { *c })
            .collect(),
        3 => chars
            .iter()
            .enumerate()
            .map(|(i, &c)| match LOOKALIKES.iter().find(|(l, _)| *l == c) {
                Some((_, look)) if (seed >> (i % 64)) & 1 == 1 => *look,
                _ => c,
            })
            .collect(),
        4 => chars
            .iter()
            .map(|&c| if c.is_ascii_graphic() { char::from_u32(c as u32 + 0xFEE0).unwrap_or(c) } else { c })
            .collect(),
        5 => chars.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" "),
        6 => format!("\u{202E}{}\u{202C}", chars.iter().rev().collect::<String>()),
        // 0 for o everywhere, or 1 for one of l and i (not both: a reader cannot tell which 1 is which).
        7 => {
            let from = ['o', 'l', 'i'][pick(3)];
            let to = if from == 'o' { '0' } else { '1' };
            chars.iter().map(|&c| if c == from { to } else { c }).collect()
        }
        8 => chars
            .iter()
            .map(|&c| if c.is_ascii_lowercase() { char::from_u32(c as u32 - 0x61 + 0x1D41A).unwrap_or(c) } else { c })
            .collect(),
        _ => format!("Continue {}", chars.iter().collect::<String>()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4_000, ..ProptestConfig::default() })]

    #[test]
    fn one_or_two_disguises_still_match(form in prop::sample::select(single_forms()), a in 0u8..10, b in prop::option::of(0u8..10), seed in any::<u64>()) {
        // Letter spacing makes one-letter tokens that a later disguise cannot re-split; apply it last.
        let (first, second) = match b {
            Some(b) if a % 10 == 5 => (b, Some(a)),
            other => (a, other),
        };
        let mut text = disguise(first, &form.1, seed);
        if let Some(k) = second {
            text = disguise(k, &text, seed.rotate_left(17));
        }
        let got = classify_detailed(&ElementFacts { role: "button".into(), name: Some(text.clone()), ..ElementFacts::default() });
        prop_assert!(got.matches.iter().any(|m| m.named == form.0), "{:?} disguised as {text:?} gave {got:?}", form.1);
    }
}
