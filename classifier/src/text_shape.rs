//! The shape typed text must have for a task grant to cover it.

use unicode_normalization::UnicodeNormalization;

use crate::reason::Reason;

/// The per-action typed-text cap.
pub const MAX_TEXT_PER_ACTION: usize = 256;

/// Prefixes of well-known secret formats.
const SECRET_PREFIXES: &[&str] = &[
    "sk-",
    "sk_",
    "pk_",
    "rk_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "github_pat_",
    "xox",
    "akia",
    "asia",
    "eyj",
    "-----begin",
    "aiza",
    "glpat-",
    "npm_",
];

/// Does any whitespace-separated token of `text` look like a secret (a password-like mix, a
/// long key-like run, a well-known secret prefix)?
pub fn is_credential_shaped(text: &str) -> bool {
    text.nfkc().collect::<String>().split_whitespace().any(credential_shaped)
}

fn credential_shaped(token: &str) -> bool {
    let lower = token.to_ascii_lowercase();
    if SECRET_PREFIXES.iter().any(|p| lower.starts_with(p)) && token.len() >= 8 {
        return true;
    }
    let n = token.chars().count();
    let has = |f: fn(char) -> bool| token.chars().any(f);
    let classes = [
        has(|c| c.is_lowercase()),
        has(|c| c.is_uppercase()),
        has(|c| c.is_ascii_digit()),
        has(|c| !c.is_alphanumeric()),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    // A password-like mix, or a long key-like run of letters and digits.
    (n >= 8 && classes >= 3)
        || (n >= 20
            && has(|c| c.is_ascii_digit())
            && has(|c| c.is_alphabetic())
            && token.chars().all(|c| c.is_ascii_alphanumeric() || "_-+/=".contains(c)))
}

/// Four digits in a row, also when single spaces, dashes or dots sit between them.
fn has_digit_run(text: &str) -> bool {
    let mut run = 0;
    let mut gap = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            run += 1;
            gap = false;
            if run >= 4 {
                return true;
            }
        } else if run > 0 && !gap && matches!(c, ' ' | '-' | '.') {
            gap = true;
        } else {
            run = 0;
            gap = false;
        }
    }
    false
}

/// Checks typed text against the shape rules and the grant's remaining characters. `multiline`
/// allows newlines (a textarea); elsewhere a newline can submit a form.
pub fn check(text: &str, multiline: bool, chars_remaining: u32) -> Result<(), Reason> {
    let n = text.chars().count();
    if n > MAX_TEXT_PER_ACTION {
        return Err(Reason::TextTooLong);
    }
    if text.chars().any(|c| c.is_control() && !(multiline && c == '\n')) {
        return Err(Reason::TextControlCharacter);
    }
    let nfkc: String = text.nfkc().collect::<String>().to_lowercase();
    if nfkc.contains('@') || nfkc.contains("://") || nfkc.contains("www.") {
        return Err(Reason::TextAddress);
    }
    if has_digit_run(&nfkc) {
        return Err(Reason::TextDigitRun);
    }
    if is_credential_shaped(text) {
        return Err(Reason::TextCredentialShaped);
    }
    if u32::try_from(n).map_or(true, |n| n > chars_remaining) {
        return Err(Reason::TextExceedsRemaining);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let ok = ["el gato", "Ich bin müde", "私は学生です", "Hello, world!", "", "2 cats and 3 dogs", "Don't stop"];
        for t in ok {
            assert_eq!(check(t, false, 4096), Ok(()), "{t:?}");
        }
        let refused = [
            ("a".repeat(257), Reason::TextTooLong),
            ("me@example.org".into(), Reason::TextAddress),
            ("me＠example.org".into(), Reason::TextAddress),
            ("see https://x".into(), Reason::TextAddress),
            ("WWW.example".into(), Reason::TextAddress),
            ("1234".into(), Reason::TextDigitRun),
            ("4111 1111".into(), Reason::TextDigitRun),
            ("12-34".into(), Reason::TextDigitRun),
            ("１２３４".into(), Reason::TextDigitRun),
            ("Passw0rd!".into(), Reason::TextCredentialShaped),
            ("sk-abcdefgh".into(), Reason::TextCredentialShaped),
            ("eyJhbGciOiJIUzI1NiJ9".into(), Reason::TextCredentialShaped),
            ("a\nb".into(), Reason::TextControlCharacter),
        ];
        for (t, reason) in refused {
            assert_eq!(check(&t, false, 4096), Err(reason), "{t:?}");
        }
        assert_eq!(check("a\nb", true, 4096), Ok(()));
        assert_eq!(check("hello", false, 4), Err(Reason::TextExceedsRemaining));
        assert_eq!(check("hello", false, 5), Ok(()));
        assert_eq!(check("123", false, 5), Ok(()));
    }
}
