//! A snapshot of the vocabulary's forms that are ordinary English words (from the system word
//! list), so whoever adds an entry sees every everyday word it will now send to the approval card.
//! `REGENERATE=1 cargo test -p classifier --test ordinary_words` rewrites the snapshot.

use std::collections::BTreeSet;

const WORDS: &str = "/usr/share/dict/words";

#[test]
fn ordinary_words_the_vocabulary_excludes() {
    let dict = std::fs::read_to_string(WORDS)
        .unwrap_or_else(|e| panic!("{WORDS}: {e}. Install the word list: apt-get install -y wamerican"));
    let dict: BTreeSet<String> = dict.lines().map(str::to_lowercase).collect();
    let mut lines: Vec<String> = classifier::vocabulary::all_forms()
        .into_iter()
        .filter(|(_, form)| dict.contains(form))
        .map(|(named, form)| format!("{form} {}", named.code()))
        .collect();
    lines.sort();
    lines.dedup();
    let rendered = lines.join("\n") + "\n";
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots/ordinary_words.txt");
    if std::env::var_os("REGENERATE").is_some() {
        std::fs::write(path, &rendered).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == rendered,
        "the vocabulary's ordinary words changed; review the diff, then REGENERATE=1 cargo test -p classifier --test ordinary_words"
    );
}
