//! What the classifier reads: an element's facts, the page, the action and the grant.

#[cfg(feature = "serde")]
use serde::Deserialize;

/// The closed set of field kinds, following the runtime's act rules: each of these is acted on
/// differently, so each is a kind of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(Deserialize, serde::Serialize), serde(rename_all = "snake_case"))]
pub enum FieldKind {
    /// Not a form field: a button, link, tile.
    #[default]
    None,
    Text,
    Search,
    /// A multi-line `<textarea>`.
    TextArea,
    /// A region the page made editable (`contenteditable`): takes keys, not covered for typing.
    EditableRegion,
    Select,
    /// A native `<input type=checkbox>`.
    Checkbox,
    /// A native `<input type=radio>`.
    Radio,
    /// A choice control the page built from another element (`role=checkbox` on a div).
    CustomChoice,
    Password,
    OneTimeCode,
    Payment,
    Identity,
    File,
    /// Any other input (date, color, range, email, tel, url, number…).
    Other,
}

impl FieldKind {
    /// A field whose kind alone names a consequence (a credential, a one-time code, a payment or
    /// an identity field): shown redacted on a card, and never covered by a grant.
    pub fn is_sensitive(self) -> bool {
        matches!(self, Self::Password | Self::OneTimeCode | Self::Payment | Self::Identity)
    }

    /// A field whose value is a secret: the runtime never types into one and never reads its
    /// value back (`read.js` is given this set).
    pub fn is_secret(self) -> bool {
        matches!(self, Self::Password | Self::OneTimeCode | Self::Payment)
    }

    /// A credential or one-time-code field: the runtime never acts on one at all.
    pub fn is_credential(self) -> bool {
        matches!(self, Self::Password | Self::OneTimeCode)
    }

    /// Every kind, for tables and for the page script's constants.
    pub const ALL: [Self; 15] = [
        Self::None,
        Self::Text,
        Self::Search,
        Self::TextArea,
        Self::EditableRegion,
        Self::Select,
        Self::Checkbox,
        Self::Radio,
        Self::CustomChoice,
        Self::Password,
        Self::OneTimeCode,
        Self::Payment,
        Self::Identity,
        Self::File,
        Self::Other,
    ];

    /// The kind a [`code`](Self::code) names.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.code() == code)
    }

    /// The kind's name as the page script and the wire's JSON spell it.
    pub fn code(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Text => "text",
            Self::Search => "search",
            Self::TextArea => "text_area",
            Self::EditableRegion => "editable_region",
            Self::Select => "select",
            Self::Checkbox => "checkbox",
            Self::Radio => "radio",
            Self::CustomChoice => "custom_choice",
            Self::Password => "password",
            Self::OneTimeCode => "one_time_code",
            Self::Payment => "payment",
            Self::Identity => "identity",
            Self::File => "file",
            Self::Other => "other",
        }
    }
}

/// One `<option>` a selection could choose, with every label it carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(Deserialize, serde::Serialize), serde(default, deny_unknown_fields))]
pub struct SelectOption {
    pub value: String,
    pub label: Option<String>,
    pub text: Option<String>,
    pub name: Option<String>,
    pub title: Option<String>,
    pub group_label: Option<String>,
}

/// The ways a form is sent, as the page's `method` and `formmethod` read once normalised.
pub const SUBMIT_METHODS: [&str; 3] = ["get", "post", "dialog"];

/// Secret-free facts about one element, each label source kept apart.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(Deserialize, serde::Serialize), serde(default, deny_unknown_fields))]
pub struct ElementFacts {
    pub role: String,
    /// The accessible name, as the snapshot printed it.
    pub name: Option<String>,
    pub aria_label: Option<String>,
    /// The text of each `aria-labelledby` target.
    pub labelledby: Vec<String>,
    /// Each associated `<label>` (and, for a click that changes another control, its labels).
    pub labels: Vec<String>,
    pub title: Option<String>,
    pub placeholder: Option<String>,
    pub alt: Option<String>,
    /// A button's `value`.
    pub value: Option<String>,
    pub visible_text: Option<String>,
    /// The accessible name of the enclosing dialog.
    pub dialog_name: Option<String>,
    pub field_kind: FieldKind,
    /// Every `<option>` of a select.
    pub options: Vec<SelectOption>,
    /// Where activating it would navigate or submit: link, form action, `formaction`, label's
    /// control, links and submit controls inside it. Absolute URLs.
    pub nav_targets: Vec<String>,
    pub download: bool,
    pub disabled: bool,
    /// A label source was cut (longer than the facts carry): its unread part could hold anything.
    pub truncated: bool,
    /// A click on it could submit a form (its own, a label's control's, or one inside it): an
    /// approval card for such a click must show the form read back.
    pub submits_form: bool,
    /// Activating it opens a new window or tab (a link's or form's `target`, a `formtarget`, the
    /// page's `<base target>`): shown on the card, never a coverage fact.
    pub opens_window: bool,
    /// How the form a click would submit is sent: one of [`SUBMIT_METHODS`], or empty when the
    /// click submits none. Shown on the card, never a coverage fact.
    pub submit_method: String,
    /// A fact the rules read (navigation targets, download, disabled, truncation) was not
    /// carried by whoever sent these facts: nothing is covered.
    pub facts_missing: bool,
}

impl ElementFacts {
    /// Every label source's text, each separately, with which source it is.
    pub fn label_sources(&self) -> impl Iterator<Item = (LabelSource, &str)> {
        let single = [
            (LabelSource::Name, &self.name),
            (LabelSource::AriaLabel, &self.aria_label),
            (LabelSource::Title, &self.title),
            (LabelSource::Placeholder, &self.placeholder),
            (LabelSource::Alt, &self.alt),
            (LabelSource::Value, &self.value),
            (LabelSource::VisibleText, &self.visible_text),
            (LabelSource::DialogName, &self.dialog_name),
        ];
        single
            .into_iter()
            .filter_map(|(s, t)| t.as_deref().map(|t| (s, t)))
            .chain(self.labelledby.iter().map(|t| (LabelSource::LabelledBy, t.as_str())))
            .chain(self.labels.iter().map(|t| (LabelSource::Label, t.as_str())))
    }
}

/// Which label source a text came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelSource {
    Name,
    AriaLabel,
    LabelledBy,
    Label,
    Title,
    Placeholder,
    Alt,
    Value,
    VisibleText,
    DialogName,
    Option,
    NavTarget,
    PagePath,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(Deserialize, serde::Serialize), serde(default, deny_unknown_fields))]
pub struct PageFacts {
    pub url: String,
}

/// The action the agent asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(Deserialize, serde::Serialize),
    serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum Action {
    Click,
    Type {
        text: String,
    },
    /// Chooses the option(s) whose value, or label with white space collapsed, equals `option`.
    Select {
        option: String,
    },
    Check,
    Press {
        key: String,
    },
    /// Scrolls the page by this many pixels (negative: up).
    Scroll {
        #[cfg_attr(feature = "serde", serde(default))]
        by: i32,
    },
}

impl Action {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Click => "click",
            Self::Type { .. } => "type",
            Self::Select { .. } => "select",
            Self::Check => "check",
            Self::Press { .. } => "press",
            Self::Scroll { .. } => "scroll",
        }
    }
}

/// A task grant's scope and what is left of its typed-character cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskScope {
    /// Exact origin: `https://host[:port]`.
    pub origin: String,
    /// One path segment: `/lesson`.
    pub path_prefix: String,
    pub chars_remaining: u32,
}

/// The kind of grant asked to cover an action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// The pinned standing grant: routine only.
    Standing,
    Task(TaskScope),
}

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The options a selection of `wanted` could choose: by value, or by label or text with white
/// space collapsed, wherever they lie in the list.
pub fn choosable<'a>(options: &'a [SelectOption], wanted: &str) -> Vec<&'a SelectOption> {
    let wanted_c = collapse_ws(wanted);
    options
        .iter()
        .filter(|o| o.value == wanted || [&o.label, &o.text].into_iter().flatten().any(|l| collapse_ws(l) == wanted_c))
        .collect()
}
