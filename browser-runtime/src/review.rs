//! A form read back from the live page beside the task record: the approval card's diff before a
//! submit. The runtime renders it from the two sources it trusts differently (the live DOM and
//! the record) and from nothing the worker or the model says.

use classifier::FieldKind;
use classifier::coverage::normalisation as rule;
use proto::v1::{FormRow, FormStatus};

use crate::page::FormField;
use crate::session::ReadBack;

const REDACTED: &str = "[REDACTED]";

/// Kinds whose value is never shown or compared (the page script reads them whole, for the
/// digest; they are redacted here, before anything leaves the runtime).
pub fn sensitive(kind: FieldKind) -> bool {
    kind.is_secret() || kind == FieldKind::Identity
}

/// Why a form with an opaque control (`FormField::opaque`) is never reviewed, nor sent on a
/// decision: what it submits cannot be read.
pub const UNREADABLE_CONTROL: &str =
    "the form holds a control whose value the runtime cannot read, which no card can show";

/// Texts on a card are cut here: the authorizer takes none longer (the digest binds the whole).
const MAX_SHOWN: usize = classifier::coverage::MAX_LABEL_CHARS;

fn cut(s: &str) -> String {
    if s.chars().count() <= MAX_SHOWN { s.to_owned() } else { s.chars().take(MAX_SHOWN - 1).chain(['…']).collect() }
}

/// One row of the diff: `record` is the value, in the reading run's record, of the field the
/// runtime typed into this one (`None` when it never typed into it, or typed for another run or
/// a field this record does not have: then the row is a mismatch). `chosen`: the runtime set this
/// box or list for the reading run.
pub fn row(read: &ReadBack, record: Option<&str>, chosen: bool, record_locale: Option<&str>) -> FormRow {
    let f = &read.field;
    let value = shown_value(f);
    let hidden = sensitive(f.kind)
        || classifier::text_shape::is_credential_shaped(&value)
        || record.is_some_and(classifier::text_shape::is_credential_shaped);
    let base = FormRow {
        label: cut(&f.label),
        kind: proto::v1::FieldKind::from(f.kind) as i32,
        value: if hidden { REDACTED.into() } else { cut(&value) },
        ..Default::default()
    };
    let Some(field_id) = &read.typed_field_id else {
        let status = if chosen { FormStatus::Chosen } else { FormStatus::Untouched };
        return FormRow { status: status as i32, ..base };
    };
    let Some(record) = record else {
        // Typed, but not from this run's record: nothing the owner's record says it should be.
        return FormRow { record_field_id: cut(field_id), status: FormStatus::Mismatch as i32, ..base };
    };
    let shown_record = if hidden { REDACTED.to_owned() } else { cut(record) };
    let row = FormRow { record_field_id: cut(field_id), record_value: shown_record, ..base };
    if sensitive(f.kind) {
        return FormRow { status: FormStatus::Redacted as i32, ..row };
    }
    let record_order = DateOrder::of_language(record_locale.unwrap_or_default(), "your task record's language");
    match compare(&value, record, DateOrder::stated(f, record_locale), &record_order) {
        Compared::Same => FormRow { status: FormStatus::Match as i32, ..row },
        Compared::Normalised(rule) => {
            FormRow { status: FormStatus::MatchNormalised as i32, normalisation: rule, ..row }
        }
        Compared::Differs => FormRow { status: FormStatus::Mismatch as i32, ..row },
    }
}

/// The keyed digest of the form as read: what an approval binds, read again at redemption.
pub fn digest(keys: &proto::ticket::Keyring, tenant: &str, fields: &[ReadBack]) -> Vec<u8> {
    keys.form_digest(
        tenant,
        fields.iter().map(|r| proto::ticket::FormPart {
            label: &r.field.label,
            name: &r.field.name,
            kind: r.field.kind.code(),
            value: &r.field.value,
            checked: r.field.checked,
        }),
    )
}

/// What the owner reads as the field's value: a box's state in words, otherwise the value.
fn shown_value(f: &FormField) -> String {
    match f.kind {
        FieldKind::Checkbox | FieldKind::Radio => if f.checked { "checked" } else { "not checked" }.into(),
        _ => f.value.clone(),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Compared {
    Same,
    /// Equal under this rule, named for the owner.
    Normalised(String),
    Differs,
}

/// How the page says a date in a field is written, and where it says so.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DateOrder {
    DayFirst(String),
    MonthFirst(String),
    /// Nothing says: a date both ways could read (03/04) matches neither.
    Unstated,
}

impl DateOrder {
    /// The field's placeholder first (`DD/MM/YYYY`), then its language (`lang="en-GB"`), then the
    /// task record's (`$locale`). A language is read only where its whole region writes dates one
    /// way; `en` alone says nothing.
    fn stated(f: &FormField, record_locale: Option<&str>) -> Self {
        let hint: String = f.hint.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_uppercase();
        if hint.contains("DD/MM") {
            return Self::DayFirst("as the field's placeholder asks".into());
        }
        if hint.contains("MM/DD") {
            return Self::MonthFirst("as the field's placeholder asks".into());
        }
        match Self::of_language(&f.lang, "the page's language") {
            Self::Unstated => Self::of_language(record_locale.unwrap_or_default(), "your task record's language"),
            said => said,
        }
    }

    /// How `lang` writes dates, said as `whose` language: day first, month first, or unstated.
    fn of_language(lang: &str, whose: &str) -> Self {
        let shown = lang.trim();
        let lang = shown.to_ascii_lowercase().replace('_', "-");
        let primary = lang.split('-').next().unwrap_or_default();
        let why = format!("as {whose} ({shown}) writes dates");
        const MONTH_FIRST: [&str; 3] = ["en-us", "es-us", "en-ph"];
        const DAY_FIRST_ENGLISH: [&str; 7] = ["en-gb", "en-au", "en-nz", "en-ie", "en-in", "en-za", "en-sg"];
        const DAY_FIRST: [&str; 20] = [
            "fr", "de", "es", "it", "pt", "nl", "ru", "pl", "da", "nb", "nn", "no", "fi", "el", "tr", "cs", "sk", "ro",
            "uk", "id",
        ];
        if MONTH_FIRST.iter().any(|m| lang == *m || lang.starts_with(&format!("{m}-"))) {
            Self::MonthFirst(why)
        } else if DAY_FIRST_ENGLISH.iter().any(|d| lang == *d || lang.starts_with(&format!("{d}-")))
            || DAY_FIRST.contains(&primary)
        {
            Self::DayFirst(why)
        } else {
            Self::Unstated
        }
    }

    /// `NN/NN/YYYY` read this way, when it is a date read so.
    fn read(&self, (a, b, year): (u32, u32, u32)) -> Option<(u32, u32, u32)> {
        let date = match self {
            Self::DayFirst(_) => (year, b, a),
            Self::MonthFirst(_) => (year, a, b),
            Self::Unstated => return None,
        };
        plausible(date).then_some(date)
    }
}

/// A (year, month, day) whose month and day could be a date's.
fn plausible((_, m, d): (u32, u32, u32)) -> bool {
    (1..=12).contains(&m) && (1..=31).contains(&d)
}

/// The page's value against the record's: equal, equal under one named rule, or different.
/// `order` is how the page writes dates; `record_order` how the record does (its `$locale`).
fn compare(page: &str, record: &str, order: DateOrder, record_order: &DateOrder) -> Compared {
    // The same slashed text is two dates where the page and the record read it differently.
    if let Some(d) = slashed_date(page)
        && page == record
        && let (Some(on_page), Some(in_record)) = (order.read(d), record_order.read(d))
        && on_page != in_record
    {
        return Compared::Differs;
    }
    if page == record {
        return Compared::Same;
    }
    let spaced = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    if spaced(page) == spaced(record) {
        return Compared::Normalised(rule::SPACING.into());
    }
    // Letter case only where no digit is: a code with digits may be case-sensitive.
    let has_digit = |s: &str| s.chars().any(|c| c.is_ascii_digit());
    if !has_digit(page) && !has_digit(record) && spaced(page).to_lowercase() == spaced(record).to_lowercase() {
        return Compared::Normalised(rule::LETTER_CASE.into());
    }
    // A slashed date against the record's YYYY-MM-DD: read one way where only one reading is a
    // date or both readings agree, otherwise the way the field or page says it writes dates.
    // A record that writes its dates slashed is read in its own language only.
    let record_date = iso_date(record).or_else(|| slashed_date(record).and_then(|d| record_order.read(d)));
    if let (Some((a, b, year)), Some(r)) = (slashed_date(page), record_date) {
        let day_first = (year, b, a);
        let month_first = (year, a, b);
        let rule = match order {
            _ if !plausible(r) => None,
            _ if a == b && day_first == r => Some(rule::DAY_FIRST.to_owned()),
            _ if day_first == r && !plausible(month_first) => Some(rule::DAY_FIRST.to_owned()),
            _ if month_first == r && !plausible(day_first) => Some(rule::MONTH_FIRST.to_owned()),
            DateOrder::DayFirst(why) if day_first == r => Some(format!("{}, {why}", rule::DAY_FIRST)),
            DateOrder::MonthFirst(why) if month_first == r => Some(format!("{}, {why}", rule::MONTH_FIRST)),
            _ => None,
        };
        return rule.map_or(Compared::Differs, Compared::Normalised);
    }
    if let (Some(p), Some(r)) = (number(page), number(record))
        && p == r
    {
        return Compared::Normalised(rule::NUMBER.into());
    }
    Compared::Differs
}

/// `YYYY-MM-DD` as (year, month, day).
fn iso_date(s: &str) -> Option<(u32, u32, u32)> {
    let [y, m, d] = date_parts(s, '-', [4, 2, 2])?;
    Some((y, m, d))
}

/// `NN/NN/YYYY` as its two leading numbers and the year.
fn slashed_date(s: &str) -> Option<(u32, u32, u32)> {
    let [a, b, y] = date_parts(s, '/', [2, 2, 4])?;
    Some((a, b, y))
}

/// Three numbers split by `sep`, of exactly these widths in digits.
fn date_parts(s: &str, sep: char, widths: [usize; 3]) -> Option<[u32; 3]> {
    let parts: Vec<&str> = s.trim().split(sep).collect();
    let shaped = parts.iter().map(|p| p.len()).eq(widths);
    if !shaped || !parts.iter().all(|p| p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    Some([parts[0].parse().ok()?, parts[1].parse().ok()?, parts[2].parse().ok()?])
}

/// A plain decimal as hundredths, when it has at most two decimals: thousands commas only in
/// groups of three, no leading zero (an account number's zeros are part of it).
fn number(s: &str) -> Option<i128> {
    let s = s.trim();
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    let mut groups = whole.split(',');
    let first = groups.next()?;
    let grouped = groups.all(|g| g.len() == 3 && digits(g));
    let whole: String = whole.chars().filter(|c| *c != ',').collect();
    let leading_zero = whole.len() > 1 && whole.starts_with('0');
    if !grouped
        || !digits(first)
        || first.len() > 30
        || leading_zero
        || frac.len() > 2
        || (!frac.is_empty() && !digits(frac))
    {
        return None;
    }
    let cents: i128 = format!("{frac:0<2}").parse().ok()?;
    Some(whole.parse::<i128>().ok()? * 100 + cents)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(kind: FieldKind, value: &str, typed: Option<&str>) -> ReadBack {
        ReadBack {
            chosen_run: None,
            field: FormField {
                label: "Field".into(),
                name: "f".into(),
                kind,
                value: value.into(),
                checked: false,
                ..FormField::default()
            },
            typed_field_id: typed.map(str::to_owned),
            typed_run: typed.map(|_| "run-1".to_owned()),
        }
    }

    #[test]
    fn each_field_is_a_match_a_named_normalisation_a_mismatch_or_untouched() {
        let status = |value: &str, record: &str| {
            let r = row(&read(FieldKind::Text, value, Some("f")), Some(record), false, None);
            (FormStatus::try_from(r.status).unwrap(), r.normalisation)
        };
        assert_eq!(status("Ada", "Ada"), (FormStatus::Match, String::new()));
        assert_eq!(status("Ada  Lovelace ", "Ada Lovelace"), (FormStatus::MatchNormalised, "spacing".into()));
        assert_eq!(status("ADA@EXAMPLE.TEST", "ada@example.test"), (FormStatus::MatchNormalised, "letter case".into()));
        assert_eq!(status("23/04/2026", "2026-04-23"), (FormStatus::MatchNormalised, "DD/MM/YYYY".into()));
        assert_eq!(status("04/23/2026", "2026-04-23"), (FormStatus::MatchNormalised, "MM/DD/YYYY".into()));
        assert_eq!(status("28,500.00", "28500"), (FormStatus::MatchNormalised, "number".into()));
        for (page, record) in [
            ("04/03/2026", "2026-04-03"),
            // Could be 4 March, and nothing says which: not called a match.
            ("03/04/2026", "2026-04-03"),
            ("13/13/2026", "2026-13-13"),
            ("28500.01", "28500"),
            ("Bob", "Ada"),
            ("1e3", "1000"),
            ("0012345678", "12345678"),
            ("2,85", "285"),
            ("ab12CD", "AB12cd"),
        ] {
            assert_eq!(status(page, record).0, FormStatus::Mismatch, "{page} / {record}");
        }
        // Typed, but the reading run's record has no such value: never a page default.
        let stray = row(&read(FieldKind::Text, "Ada", Some("f")), None, false, None);
        assert_eq!(FormStatus::try_from(stray.status), Ok(FormStatus::Mismatch));
        // A box the runtime ticked for this run is the agent's own choice, not a page default.
        let ticked = row(&read(FieldKind::Checkbox, "on", None), None, true, None);
        assert_eq!(FormStatus::try_from(ticked.status), Ok(FormStatus::Chosen));
        let untouched = row(&read(FieldKind::Text, "250.00", None), None, false, None);
        assert_eq!(FormStatus::try_from(untouched.status), Ok(FormStatus::Untouched));
        assert_eq!((untouched.value.as_str(), untouched.record_value.as_str()), ("250.00", ""));
    }

    /// Where the page says nothing of its dates, the task record's language (`$locale`) reads the
    /// page's; a record that writes its own dates slashed is read in its language; the page's own
    /// word outranks the record's.
    #[test]
    fn a_date_is_read_in_the_records_language_where_the_page_says_nothing() {
        let status = |lang: &str, value: &str, record: &str, locale: Option<&str>| {
            let mut r = read(FieldKind::Text, value, Some("f"));
            r.field.lang = lang.into();
            let row = row(&r, Some(record), false, locale);
            (FormStatus::try_from(row.status).unwrap(), row.normalisation)
        };
        let matched = |rule: &str| (FormStatus::MatchNormalised, rule.to_owned());
        let gb = Some("en-GB");
        assert_eq!(
            status("", "03/04/2026", "2026-04-03", gb),
            matched("DD/MM/YYYY, as your task record's language (en-GB) writes dates")
        );
        assert_eq!(
            status("", "03/04/2026", "03/04/2026", gb),
            (FormStatus::Match, String::new()),
            "the same text is a match"
        );
        assert_eq!(
            status("en-US", "04/03/2026", "03/04/2026", gb),
            matched("MM/DD/YYYY, as the page's language (en-US) writes dates"),
            "the record's 3 April, written its own way, is the US page's 04/03"
        );
        assert_eq!(status("en-US", "03/04/2026", "2026-04-03", gb).0, FormStatus::Mismatch, "the page's word wins");
        assert_eq!(
            status("en-US", "03/04/2026", "03/04/2026", gb).0,
            FormStatus::Mismatch,
            "the same text is 4 March on the page and 3 April in the record"
        );
        assert_eq!(status("en-US", "05/05/2026", "05/05/2026", gb).0, FormStatus::Match, "read either way, one date");
        assert_eq!(status("", "03/04/2026", "2026-04-03", Some("en")).0, FormStatus::Mismatch, "en says nothing");
        assert_eq!(status("", "04/03/2026", "03/04/2026", None).0, FormStatus::Mismatch, "nor does no locale");
    }

    /// The seed's own example: `03/04/2026` on a page that writes dates day first is the record's
    /// `2026-04-03`, and the row says which reading made it so.
    #[test]
    fn an_ambiguous_date_is_read_the_way_the_field_or_page_says() {
        let status = |lang: &str, hint: &str, value: &str| {
            let mut r = read(FieldKind::Text, value, Some("f"));
            (r.field.lang, r.field.hint) = (lang.into(), hint.into());
            let row = row(&r, Some("2026-04-03"), false, None);
            (FormStatus::try_from(row.status).unwrap(), row.normalisation)
        };
        let matched = |rule: &str| (FormStatus::MatchNormalised, rule.to_owned());
        assert_eq!(
            status("en-GB", "", "03/04/2026"),
            matched("DD/MM/YYYY, as the page's language (en-GB) writes dates")
        );
        assert_eq!(status("fr", "", "03/04/2026"), matched("DD/MM/YYYY, as the page's language (fr) writes dates"));
        assert_eq!(status("", "dd / mm / yyyy", "03/04/2026"), matched("DD/MM/YYYY, as the field's placeholder asks"));
        assert_eq!(
            status("en-US", "", "04/03/2026"),
            matched("MM/DD/YYYY, as the page's language (en-US) writes dates")
        );
        // The placeholder outranks the language.
        assert_eq!(status("en-US", "DD/MM/YYYY", "03/04/2026"), matched("DD/MM/YYYY, as the field's placeholder asks"));
        for (lang, hint, value) in [
            ("en-US", "", "03/04/2026"),
            ("en-GB", "", "04/03/2026"),
            ("en", "", "03/04/2026"),
            ("", "", "03/04/2026"),
            ("ja", "", "03/04/2026"),
            ("en-GB", "MM/DD/YYYY", "03/04/2026"),
        ] {
            assert_eq!(status(lang, hint, value).0, FormStatus::Mismatch, "{lang:?} {hint:?} {value}");
        }
    }

    #[test]
    fn a_sensitive_field_or_secret_shaped_value_is_never_shown() {
        let r = row(&read(FieldKind::Password, "hunter2-Secret!", Some("pw")), Some("hunter2-Secret!"), false, None);
        assert_eq!(FormStatus::try_from(r.status), Ok(FormStatus::Redacted));
        assert_eq!((r.value.as_str(), r.record_value.as_str()), (REDACTED, REDACTED));
        let key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc";
        let r = row(&read(FieldKind::Text, key, Some("k")), Some(key), false, None);
        assert_eq!((r.value.as_str(), r.record_value.as_str()), (REDACTED, REDACTED));
        assert_eq!(row(&read(FieldKind::Text, key, None), None, false, None).value, REDACTED);
    }
}
