//! The readings of one text. Each is a string of lowercase tokens joined by single spaces, ready
//! for whole-token matching. Readings only ever add matches: a text is excluded when any reading
//! of it matches, so every extra reading is deny-biased.
//!
//! - as written, with format characters (zero-width, bidi controls, soft hyphen, variation
//!   selectors, tags) and combining marks removed, after NFKC (fullwidth, math letters, ligatures);
//! - split on everything that is not a letter (punctuation, digits, spaces) and on camelCase;
//!   also unsplit on camelCase, since `PAYnow` splits badly;
//! - runs of one- and two-letter tokens joined (`P a y`, `Pa-y`);
//! - lookalike letters folded to Latin (Cyrillic, Greek, Armenian, Cherokee, small capitals,
//!   IPA, and the digits 0 and 1), only inside tokens that hold a real Latin letter or consist
//!   wholly of lookalikes, so words of other scripts are not turned into Latin words;
//! - the bidi display order under both base directions, with a token boundary wherever the
//!   embedding level changes.

use unicode_bidi::{BidiInfo, Level};
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

use crate::fold_table::FOLD;

/// How many digit 1s get every l/i assignment tried (2^n readings). No vocabulary form has more
/// than this many l and i letters; a test keeps it so.
pub const MAX_ONES: usize = 4;

/// Characters that render as nothing or only steer rendering.
pub(crate) fn is_format(c: char) -> bool {
    matches!(c.general_category(), GeneralCategory::Format)
        || matches!(c, '\u{034F}' | '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' | '\u{180B}'..='\u{180F}')
        || ('\u{FE00}'..='\u{FE0F}').contains(&c)
        || ('\u{E0100}'..='\u{E01EF}').contains(&c)
}

/// Right-to-left letters or explicit bidi controls: the display order may differ.
fn has_bidi(text: &str) -> bool {
    text.chars().any(|c| {
        matches!(c as u32,
            0x0590..=0x08FF | 0xFB1D..=0xFDFF | 0xFE70..=0xFEFF | 0x10800..=0x10FFF | 0x1E800..=0x1EFFF
            | 0x202A..=0x202E | 0x2066..=0x2069 | 0x200F)
    })
}

fn fold_char(c: char) -> Option<&'static str> {
    FOLD.binary_search_by_key(&c, |(k, _)| *k).ok().map(|i| FOLD[i].1)
}

/// Letters only, with format characters and combining marks gone, after NFKC and NFD.
fn clean(text: &str) -> String {
    text.chars().filter(|c| !is_format(*c)).nfkc().nfd().filter(|c| !is_combining_mark(*c)).collect()
}

/// Splits into letter runs; with `camel`, also at `aB` and at `ABc` (before the `B`).
fn tokenize(text: &str, camel: bool) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphabetic() {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
            continue;
        }
        if camel && !current.is_empty() && c.is_uppercase() {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if prev.is_lowercase() || (prev.is_uppercase() && next_lower) {
                tokens.push(std::mem::take(&mut current));
            }
        }
        current.push(c);
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens.into_iter().map(|t| t.to_lowercase()).collect()
}

/// Runs of three or more one-letter tokens, joined: letter-spaced text, whose word boundaries
/// are lost, so it is matched anywhere rather than token by token.
fn spaced_runs(tokens: &[String], out: &mut Vec<String>) {
    let mut run = String::new();
    let mut n = 0;
    for t in tokens.iter().map(String::as_str).chain([""]) {
        if t.chars().count() == 1 {
            run.push_str(t);
            n += 1;
        } else {
            if n >= 3 && !out.contains(&run) {
                out.push(run.clone());
            }
            run.clear();
            n = 0;
        }
    }
}

/// Joins runs of two or more tokens of at most two letters: `p a y` → `pay`.
fn join_short_runs(tokens: &[String]) -> Option<Vec<String>> {
    let short = |t: &String| t.chars().count() <= 2;
    let mut out = Vec::with_capacity(tokens.len());
    let mut changed = false;
    let mut i = 0;
    while i < tokens.len() {
        let mut j = i;
        while j < tokens.len() && short(&tokens[j]) {
            j += 1;
        }
        if j - i >= 2 {
            out.push(tokens[i..j].concat());
            changed = true;
            i = j;
        } else {
            out.push(tokens[i].clone());
            i += 1;
        }
    }
    changed.then_some(out)
}

/// Folds lookalikes inside one raw (un-lowercased) letters-and-digits run, if the script rule
/// allows. The k-th digit 1 of the text reads as `i` when bit k of `ones` is set, else `l`.
fn fold_run(run: &str, ones: u32, seen: &mut u32) -> Option<String> {
    let has_latin = run.chars().any(|c| c.is_ascii_alphabetic());
    let letters_all_foldable =
        run.chars().filter(|c| c.is_alphabetic()).all(|c| c.is_ascii_alphabetic() || fold_char(c).is_some());
    let has_letter = run.chars().any(char::is_alphabetic);
    // A lone 0 or 1 may be a spaced-out letter: "a 1 i p a y".
    let lone_digit = run == "0" || run == "1";
    if !(has_latin || lone_digit || (has_letter && letters_all_foldable)) {
        return None;
    }
    let mut out = String::with_capacity(run.len());
    let mut changed = false;
    for c in run.chars() {
        match c {
            '0' => {
                out.push('o');
                changed = true;
            }
            '1' => {
                out.push(if (ones >> (*seen).min(31)) & 1 == 1 { 'i' } else { 'l' });
                *seen += 1;
                changed = true;
            }
            c if c.is_ascii() => out.push(c),
            c => match fold_char(c) {
                Some(latin) => {
                    out.push_str(latin);
                    changed = true;
                }
                None => out.push(c),
            },
        }
    }
    changed.then_some(out)
}

/// The folded text: each run of letters and digits folded where the script rule allows.
fn fold_text(text: &str, ones: u32) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let mut changed = false;
    let mut seen = 0;
    let mut flush = |run: &mut String, out: &mut String| {
        match fold_run(run, ones, &mut seen) {
            Some(f) => {
                out.push_str(&f);
                changed = true;
            }
            None => out.push_str(run),
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    changed.then_some(out)
}

/// The display order under one base direction: each level run in visual order, right-to-left
/// runs reversed, runs separated by a space so a level change is a token boundary.
fn display(text: &str, base: Level) -> String {
    let info = BidiInfo::new(text, Some(base));
    let mut out = String::with_capacity(text.len() + 8);
    for para in &info.paragraphs {
        let (levels, runs) = info.visual_runs(para, para.range.clone());
        for run in runs {
            let piece = &text[run.clone()];
            if levels[run.start].is_rtl() {
                out.extend(piece.chars().rev());
            } else {
                out.push_str(piece);
            }
            out.push(' ');
        }
    }
    out
}

/// Adds the readings of one cleaned (or display-ordered) text.
fn add_readings(cleaned: &str, out: &mut Readings) {
    let mut push = |tokens: &[String]| {
        if tokens.is_empty() {
            return;
        }
        spaced_runs(tokens, &mut out.spaced);
        let r = tokens.join(" ");
        if !out.tokens.contains(&r) {
            out.tokens.push(r);
        }
    };
    for camel in [true, false] {
        let tokens = tokenize(cleaned, camel);
        push(&tokens);
        if let Some(joined) = join_short_runs(&tokens) {
            push(&joined);
        }
        if !camel && tokens == tokenize(cleaned, true) {
            break;
        }
    }
    if cleaned.is_ascii() && !cleaned.contains(['0', '1']) {
        return; // nothing to fold
    }
    // Each digit 1 may stand for l or for i: try every assignment for up to MAX_ONES of them
    // (past that, the rest follow the last).
    let ones = cleaned.matches('1').count().min(MAX_ONES);
    let last = 1u32 << ones.saturating_sub(1);
    for assignment in 0..(1u32 << ones) {
        let assignment =
            if ones == MAX_ONES && assignment & last != 0 { assignment | !(last * 2 - 1) } else { assignment };
        if let Some(folded) = fold_text(cleaned, assignment) {
            for camel in [true, false] {
                let tokens = tokenize(&folded, camel);
                push(&tokens);
                if let Some(joined) = join_short_runs(&tokens) {
                    push(&joined);
                }
            }
        }
    }
}

/// The readings of one text.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Readings {
    /// Whole-token readings: tokens joined by single spaces.
    pub tokens: Vec<String>,
    /// Letter-spaced runs, joined, to be matched anywhere.
    pub spaced: Vec<String>,
}

/// Every reading of `text`.
pub fn all_readings(text: &str) -> Readings {
    let mut out = Readings::default();
    if text.is_ascii() && !text.bytes().any(|b| b.is_ascii_control()) {
        // ASCII fast path: no format characters, marks, lookalikes (but 0/1) or bidi.
        add_readings(text, &mut out);
        return out;
    }
    add_readings(&clean(text), &mut out);
    if has_bidi(text) {
        for base in [Level::ltr(), Level::rtl()] {
            add_readings(&clean(&display(text, base)), &mut out);
        }
    }
    out
}

/// The whole-token readings of `text`.
pub fn readings(text: &str) -> Vec<String> {
    all_readings(text).tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expect: &str) {
        let got = readings(text);
        assert!(got.iter().any(|r| r == expect), "{text:?}: no reading {expect:?} in {got:?}");
    }

    #[test]
    fn readings_table() {
        for (text, expect) in [
            ("Pay now", "pay now"),
            ("PayNow", "pay now"),
            ("pay_now", "pay now"),
            ("PAYnow", "paynow"),
            ("P a y", "pay"),
            ("P-a-y now", "pay now"),
            ("Pa\u{200B}y", "pay"),
            ("P\u{00AD}ay", "pay"),
            ("Pa\u{0301}y", "pay"),
            ("Ｐａｙ", "pay"),
            ("\u{0420}\u{0430}\u{0443}", "pay"),
            ("P\u{0430}y", "pay"),
            ("\u{1D18}\u{1D00}\u{028F}", "pay"),
            ("De1ete", "delete"),
            ("S1gn 1n", "sign in"),
            ("L0g out", "log out"),
            ("a 1 i p a y", "alipay"),
            ("\u{202E}yaP\u{202C}", "pay"),
            ("\u{202E}won yaP\u{202C}", "pay now"),
            ("Continue \u{202E}yaP", "continue pay"),
            ("𝐏𝐚𝐲", "pay"),
            ("Continue", "continue"),
        ] {
            check(text, expect);
        }
    }

    #[test]
    fn other_scripts_are_not_folded_into_latin() {
        for text in ["мальчик", "Привет", "शुक्रिया", "ありがとう", "شكرا", "谢谢"]
        {
            let got = readings(text);
            assert!(got.iter().all(|r| !r.is_ascii()), "{text:?} became Latin: {got:?}");
        }
    }
}
