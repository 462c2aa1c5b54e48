//! The exclusion vocabulary as data, its word forms, and the matcher built from it once.
//!
//! Each concept lists verbs (regular forms generated; irregular forms listed), nouns (plurals
//! generated), exact words (compounds, brands, agent nouns: never generated, since a generated
//! agent noun makes words like "banner" from "ban"), phrases, and the prefixes allowed for that
//! concept alone. Matching is on whole tokens of a reading, never on substrings.

use std::sync::LazyLock;

use regex_automata::meta::Regex;
use regex_automata::{Input, MatchKind, PatternSet};

use crate::consequence::Named;

#[derive(Debug)]
pub(crate) struct Concept {
    pub(crate) named: Named,
    verbs: &'static [&'static str],
    irregular: &'static [&'static str],
    nouns: &'static [&'static str],
    words: &'static [&'static str],
    phrases: &'static [&'static str],
    prefixes: &'static [&'static str],
}

const fn concept(named: Named) -> Concept {
    Concept { named, verbs: &[], irregular: &[], nouns: &[], words: &[], phrases: &[], prefixes: &[] }
}

pub(crate) static CONCEPTS: &[Concept] = &[
    Concept {
        verbs: &["pay", "prepay", "checkout", "charge", "bill", "invoice", "tip", "spend"],
        irregular: &["paid", "prepaid", "repaid", "overpaid", "spent", "overspent"],
        nouns: &["payment", "card", "invoice", "receipt", "wallet", "paywall", "cvv", "cvc", "iban", "billing"],
        words: &[
            "paypal",
            "applepay",
            "gpay",
            "googlepay",
            "venmo",
            "stripe",
            "klarna",
            "alipay",
            "wechatpay",
            "payee",
            "payer",
            "creditcard",
            "debitcard",
        ],
        phrases: &[
            "check out",
            "credit card",
            "debit card",
            "card number",
            "pay now",
            "apple pay",
            "google pay",
            "billing address",
        ],
        prefixes: &["re", "pre", "over"],
        ..concept(Named::Payment)
    },
    Concept {
        nouns: &[
            "currency", "dollar", "euro", "cent", "penny", "yen", "yuan", "rupee", "peso", "franc", "price", "fee",
            "fare", "cost",
        ],
        irregular: &["pence", "pennies", "costs", "costing"],
        words: &[
            "usd",
            "eur",
            "gbp",
            "jpy",
            "cny",
            "inr",
            "btc",
            "bitcoin",
            "crypto",
            "cryptocurrency",
            "pounds",
            "pound",
            "bucks",
        ],
        ..concept(Named::Currency)
    },
    Concept {
        nouns: &["gem", "coin", "diamond", "lingot", "credit", "token", "jewel", "ruby"],
        words: &["gems", "rubies"],
        ..concept(Named::InAppCurrency)
    },
    Concept {
        verbs: &["buy", "purchase", "order", "shop", "sell", "redeem", "unlock", "upgrade", "rent", "reserve"],
        irregular: &["bought", "sold", "rebought", "resold", "oversold"],
        nouns: &[
            "cart",
            "basket",
            "shop",
            "store",
            "checkout",
            "sale",
            "offer",
            "discount",
            "coupon",
            "voucher",
            "gift",
            "bundle",
            "reservation",
            "booking",
        ],
        words: &["buyer", "seller", "shopping", "storefront", "giftcard", "preorder", "preorders", "preordered"],
        phrases: &[
            "add to cart",
            "add to bag",
            "place order",
            "buy now",
            "get it now",
            "free shipping",
            "in app purchase",
        ],
        prefixes: &["re", "pre"],
        ..concept(Named::Purchase)
    },
    Concept {
        verbs: &["subscribe", "renew", "enroll", "cancel"],
        nouns: &["subscription", "trial", "membership", "renewal", "plan", "tier", "premium"],
        words: &[
            "subscriber",
            "autorenew",
            "autorenewal",
            "autorenews",
            "autorenewing",
            "freetrial",
            "premiums",
            "vip",
        ],
        phrases: &["free trial", "start trial", "try free", "try for free", "go premium", "go pro"],
        prefixes: &["un", "re", "auto"],
        ..concept(Named::Subscription)
    },
    Concept {
        verbs: &[
            "transfer",
            "withdraw",
            "deposit",
            "refund",
            "wire",
            "donate",
            "send money",
            "cash",
            "lend",
            "loan",
            "invest",
            "trade",
            "swap",
            "exchange",
        ],
        irregular: &["withdrew", "withdrawn", "lent"],
        nouns: &["transfer", "withdrawal", "deposit", "refund", "donation", "payout", "balance", "loan", "investment"],
        words: &["zelle", "remittance", "cashout", "payouts"],
        phrases: &["send money", "cash out", "wire transfer", "bank transfer", "top up", "add funds"],
        ..concept(Named::MoneyMovement)
    },
    Concept {
        verbs: &["authenticate", "verify", "authorize", "login", "signin", "register", "enrol"],
        nouns: &[
            "password",
            "passcode",
            "passphrase",
            "credential",
            "passkey",
            "otp",
            "pin",
            "captcha",
            "sso",
            "oauth",
            "login",
            "signin",
            "signup",
            "authentication",
            "verification",
            "identity",
        ],
        words: &["mfa", "totp", "logins", "signup", "signups", "loggedin"],
        phrases: &[
            "sign in",
            "sign up",
            "log in",
            "log on",
            "sign on",
            "create account",
            "continue with google",
            "continue with apple",
            "continue with facebook",
            "two factor",
            "one time code",
            "security code",
            "verification code",
        ],
        prefixes: &["re"],
        ..concept(Named::Authentication)
    },
    Concept {
        verbs: &["logout", "signout"],
        words: &["logoff", "signoff"],
        phrases: &["sign out", "log out", "log off", "sign off", "switch account", "switch accounts"],
        ..concept(Named::SignOut)
    },
    Concept {
        verbs: &["recover", "reset", "unlock account"],
        nouns: &["recovery"],
        phrases: &[
            "forgot password",
            "forgot your password",
            "reset password",
            "recover account",
            "account recovery",
            "trouble signing in",
            "forgot username",
        ],
        ..concept(Named::AccountRecovery)
    },
    Concept {
        nouns: &["account", "profile", "email", "username", "avatar"],
        words: &["e-mail", "emails", "myaccount"],
        phrases: &[
            "change email",
            "change password",
            "change username",
            "edit profile",
            "close account",
            "deactivate account",
            "link account",
            "phone number",
            "change phone",
            "change address",
        ],
        verbs: &["deactivate", "reactivate", "link", "unlink", "connect", "disconnect"],
        ..concept(Named::AccountChange)
    },
    Concept {
        verbs: &[
            "change",
            "modify",
            "edit",
            "configure",
            "customize",
            "customise",
            "update",
            "save",
            "apply",
            "enable",
            "disable",
            "toggle",
        ],
        nouns: &["setting", "preference", "option", "configuration", "privacy", "notification"],
        phrases: &["turn on", "turn off", "opt in", "opt out"],
        ..concept(Named::SettingsChange)
    },
    Concept {
        verbs: &["allow", "permit", "grant", "consent", "approve", "authorise", "block", "unblock"],
        nouns: &["permission", "access", "consent", "approval", "cookie", "microphone"],
        phrases: &["give access", "allow access", "grant access"],
        ..concept(Named::Permission)
    },
    Concept {
        verbs: &["accept", "agree", "sign", "acknowledge", "confirm", "certify", "attest"],
        nouns: &["term", "condition", "agreement", "contract", "policy", "waiver", "eula", "tos", "gdpr", "signature"],
        phrases: &["i agree", "terms of service", "terms of use", "privacy policy", "terms and conditions"],
        ..concept(Named::LegalAcceptance)
    },
    Concept {
        verbs: &[
            "send", "message", "reply", "forward", "chat", "dm", "mail", "invite", "call", "ping", "notify", "contact",
            "email",
        ],
        irregular: &["sent", "resent"],
        nouns: &["message", "inbox", "chat", "mail", "invitation", "invite", "sms", "dm", "conversation", "thread"],
        words: &["whatsapp", "messenger", "imessage", "sender", "recipient"],
        prefixes: &["re"],
        ..concept(Named::Message)
    },
    Concept {
        verbs: &[
            "post",
            "publish",
            "share",
            "comment",
            "tweet",
            "retweet",
            "repost",
            "follow",
            "unfollow",
            "broadcast",
            "submit",
        ],
        nouns: &["post", "comment", "follower"],
        words: &["publisher", "poster", "reshare"],
        phrases: &["go live", "write a review", "leave a review", "rate us"],
        prefixes: &["re", "un"],
        ..concept(Named::Publication)
    },
    Concept {
        verbs: &[
            "delete",
            "remove",
            "erase",
            "discard",
            "destroy",
            "wipe",
            "trash",
            "purge",
            "revoke",
            "terminate",
            "uninstall",
            "archive",
        ],
        nouns: &["deletion", "removal", "trash"],
        phrases: &["clear all", "clear history", "empty trash"],
        ..concept(Named::Deletion)
    },
    Concept {
        verbs: &["download", "upload", "attach", "export", "import", "install", "sync", "backup"],
        nouns: &["file", "attachment", "pdf", "backup", "download", "upload"],
        phrases: &["back up", "save as"],
        ..concept(Named::FileTransfer)
    },
    Concept {
        verbs: &["administer", "manage", "moderate", "ban", "unban", "kick", "suspend", "impersonate"],
        nouns: &[
            "admin",
            "administrator",
            "administration",
            "dashboard",
            "console",
            "moderator",
            "organization",
            "organisation",
            "workspace",
        ],
        words: &["sudo", "superuser", "wpadmin", "cpanel", "phpmyadmin"],
        ..concept(Named::Administration)
    },
];

/// A consonant-vowel-consonant ending that may double before -ed/-ing (stop → stopped).
fn may_double(word: &str) -> bool {
    let b = word.as_bytes();
    let vowel = |c: u8| b"aeiou".contains(&c);
    b.len() >= 3
        && !vowel(b[b.len() - 1])
        && !b"wxy".contains(&b[b.len() - 1])
        && vowel(b[b.len() - 2])
        && !vowel(b[b.len() - 3])
}

fn plural(word: &str) -> Vec<String> {
    if word.ends_with(['s', 'x', 'z']) || word.ends_with("ch") || word.ends_with("sh") {
        vec![format!("{word}es")]
    } else if word.ends_with('y') && !word.ends_with("ay") && !word.ends_with("ey") && !word.ends_with("oy") {
        vec![format!("{}ies", &word[..word.len() - 1])]
    } else {
        vec![format!("{word}s")]
    }
}

/// Regular verb forms. Doubling is generated alongside the plain form where it may apply
/// (submit → submitted, visit → visited), since an extra form only adds matches.
fn verb_forms(base: &str) -> Vec<String> {
    let mut forms = vec![base.to_owned()];
    forms.extend(plural(base));
    let stem_e = base.strip_suffix('e');
    if let Some(stem) = stem_e {
        forms.push(format!("{base}d"));
        forms.push(format!("{stem}ing"));
    } else if base.ends_with('y') && !base.ends_with("ay") && !base.ends_with("ey") && !base.ends_with("oy") {
        forms.push(format!("{}ied", &base[..base.len() - 1]));
        forms.push(format!("{base}ing"));
    } else {
        forms.push(format!("{base}ed"));
        forms.push(format!("{base}ing"));
        if may_double(base) {
            let last = &base[base.len() - 1..];
            forms.push(format!("{base}{last}ed"));
            forms.push(format!("{base}{last}ing"));
        }
    }
    forms
}

impl Concept {
    /// Every form this concept matches, lowercase, tokens separated by single spaces.
    pub(crate) fn forms(&self) -> Vec<String> {
        let mut forms = Vec::new();
        for verb in self.verbs {
            // A multi-word verb is inflected on its first word: "send money" → "sent money".
            match verb.split_once(' ') {
                Some((head, rest)) => forms.extend(verb_forms(head).into_iter().map(|f| format!("{f} {rest}"))),
                None => forms.extend(verb_forms(verb)),
            }
        }
        for noun in self.nouns {
            forms.push((*noun).to_owned());
            forms.extend(plural(noun));
        }
        forms.extend(self.irregular.iter().chain(self.words).chain(self.phrases).map(|w| (*w).to_owned()));
        let single: Vec<String> = forms.iter().filter(|f| !f.contains(' ')).cloned().collect();
        for prefix in self.prefixes {
            forms.extend(single.iter().map(|f| format!("{prefix}{f}")));
        }
        // Tokens never hold hyphens or digits except as listed ("2fa"); normalise to the token form.
        let mut forms: Vec<String> = forms.into_iter().map(|f| f.replace('-', " ")).collect();
        forms.sort();
        forms.dedup();
        forms
    }
}

/// One meta regex, one pattern per concept, reporting every concept that matches anywhere; and
/// one without token boundaries for letter-spaced runs.
pub(crate) struct Matcher {
    regex: Regex,
    anywhere: Regex,
}

impl Matcher {
    fn build() -> Self {
        let patterns: Vec<String> = CONCEPTS
            .iter()
            .map(|c| {
                let alternatives = c.forms();
                // Forms are [a-z ] only, so need no escaping; tokens are bounded by spaces.
                debug_assert!(
                    alternatives
                        .iter()
                        .all(|f| f.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b' '))
                );
                format!("(?:^| )(?:{})(?: |$)", alternatives.join("|"))
            })
            .collect();
        let unbounded: Vec<String> = CONCEPTS
            .iter()
            .map(|c| {
                let forms: Vec<String> = c.forms().iter().map(|f| f.replace(' ', "")).collect();
                format!("(?:{})", forms.join("|"))
            })
            .collect();
        let build = |patterns: &[String]| {
            Regex::builder()
                .configure(Regex::config().match_kind(MatchKind::All))
                .build_many(patterns)
                .expect("the vocabulary compiles")
        };
        Self { regex: build(&patterns), anywhere: build(&unbounded) }
    }

    /// Adds every concept matched in `reading` to `found`.
    pub(crate) fn matches(&self, reading: &str, found: &mut PatternSet) {
        self.regex.which_overlapping_matches(&Input::new(reading), found);
    }

    /// Adds every concept with a form anywhere inside a letter-spaced run.
    pub(crate) fn matches_anywhere(&self, run: &str, found: &mut PatternSet) {
        self.anywhere.which_overlapping_matches(&Input::new(run), found);
    }

    pub(crate) fn new_set(&self) -> PatternSet {
        PatternSet::new(self.regex.pattern_len())
    }
}

pub(crate) static MATCHER: LazyLock<Matcher> = LazyLock::new(Matcher::build);

/// The named consequences `text` reads as, in any of its readings.
pub fn match_text(text: &str) -> Vec<Named> {
    match_readings(&crate::readings::all_readings(text))
}

/// The named consequences of readings already computed.
pub(crate) fn match_readings(all: &crate::readings::Readings) -> Vec<Named> {
    let mut set = MATCHER.new_set();
    for reading in &all.tokens {
        MATCHER.matches(reading, &mut set);
    }
    for run in &all.spaced {
        MATCHER.matches_anywhere(run, &mut set);
    }
    set.iter().map(|p| CONCEPTS[p.as_usize()].named).collect()
}

/// Every generated form with its concept: for the snapshot of forms that are ordinary words.
pub fn all_forms() -> Vec<(Named, String)> {
    CONCEPTS.iter().flat_map(|c| c.forms().into_iter().map(move |f| (c.named, f))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_lowercase_letters_and_single_spaces() {
        // Readings split on digits and punctuation, so a form holding one could never match.
        for (_, form) in all_forms() {
            assert!(form.bytes().all(|b| b.is_ascii_lowercase() || b == b' '), "{form:?}");
            assert!(!form.starts_with(' ') && !form.ends_with(' ') && !form.contains("  "), "{form:?}");
        }
    }

    #[test]
    fn every_form_fits_the_digit_one_readings() {
        for (_, form) in all_forms() {
            let n = form.chars().filter(|c| matches!(c, 'i' | 'l')).count();
            assert!(n <= crate::readings::MAX_ONES, "{form:?} has {n} l/i letters; raise readings::MAX_ONES");
        }
    }

    #[test]
    fn inflections() {
        assert_eq!(verb_forms("pay"), ["pay", "pays", "payed", "paying"]);
        assert_eq!(verb_forms("delete"), ["delete", "deletes", "deleted", "deleting"]);
        assert!(verb_forms("submit").contains(&"submitted".to_owned()));
        assert!(verb_forms("verify").contains(&"verified".to_owned()));
        assert_eq!(plural("coin"), ["coins"]);
        assert_eq!(plural("currency"), ["currencies"]);
    }
}
