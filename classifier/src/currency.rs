//! Currency amounts, read on the NFKC text before any folding: 💲 and 円 are not `\p{Sc}`, and a
//! fullwidth ＄ is only a `$` after NFKC.

use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// ISO 4217 codes common enough to appear beside a price.
const CODES: &[&str] = &[
    "usd", "eur", "gbp", "jpy", "cny", "rmb", "inr", "aud", "cad", "chf", "sek", "nok", "dkk", "pln", "czk", "huf",
    "rub", "uah", "try", "brl", "mxn", "ars", "clp", "cop", "zar", "ngn", "egp", "sar", "aed", "ils", "krw", "sgd",
    "hkd", "twd", "thb", "myr", "idr", "php", "vnd", "nzd", "btc", "eth",
];

fn is_symbol(c: char) -> bool {
    c.general_category() == GeneralCategory::CurrencySymbol
        || matches!(c, '💲' | '💰' | '💵' | '💶' | '💷' | '💴' | '円' | '元' | '圓' | '圆' | '¤')
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Unit {
    Number,
    Money,
    Other,
}

/// What the text says about money: `Some(true)` for an amount (a symbol or code next to digits),
/// `Some(false)` for a currency sign alone, `None` for nothing.
pub(crate) fn currency(text: &str) -> Option<bool> {
    if text.is_ascii() && !text.contains('$') && !text.bytes().any(|b| b.is_ascii_digit()) {
        return None; // fast path: no symbol and no digits means no amount
    }
    let text: String = text.nfkc().collect();
    let mut units = Vec::new();
    let mut word = String::new();
    let mut any_symbol = false;
    let push_word = |word: &mut String, units: &mut Vec<Unit>| {
        if !word.is_empty() {
            let lower = word.to_lowercase();
            units.push(if CODES.contains(&lower.as_str()) { Unit::Money } else { Unit::Other });
            word.clear();
        }
    };
    for c in text.chars() {
        if c.is_alphabetic() && !is_symbol(c) {
            word.push(c);
            continue;
        }
        push_word(&mut word, &mut units);
        if c.is_ascii_digit() {
            if units.last() != Some(&Unit::Number) {
                units.push(Unit::Number);
            }
        } else if is_symbol(c) {
            any_symbol = true;
            units.push(Unit::Money);
        } else if matches!(c, '.' | ',' | '\'' | '\u{00A0}' | '\u{202F}') && units.last() == Some(&Unit::Number) {
            // A separator inside an amount.
        } else if !c.is_whitespace() {
            units.push(Unit::Other);
        }
    }
    push_word(&mut word, &mut units);
    let amount = units.windows(2).any(|w| matches!(w, [Unit::Money, Unit::Number] | [Unit::Number, Unit::Money]));
    if amount {
        Some(true)
    } else if any_symbol {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::currency;

    #[test]
    fn amounts() {
        for text in [
            "$12.99",
            "Pay $12.99",
            "12,99 €",
            "€5",
            "USD 20",
            "20 usd",
            "¥1,000",
            "1000円",
            "💲5",
            "＄３",
            "₹ 499",
            "£0.99/mo",
            "R$ 10",
        ] {
            assert_eq!(currency(text), Some(true), "{text}");
        }
        assert_eq!(currency("€"), Some(false));
        for text in ["Continue", "Lesson 12", "I have 2 cats", "usda", "2 europeans"] {
            assert_eq!(currency(text), None, "{text}");
        }
        // A code that stands as a word of its own beside a number is an amount, whatever
        // follows: deny-biased, so a split word may ask for approval but a price never slips by.
        for text in ["2 eur opeans", "eur 2 opeans", "2 EUR, please", "EUR2"] {
            assert_eq!(currency(text), Some(true), "{text}");
        }
    }
}
