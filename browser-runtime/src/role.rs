//! The closed set of roles a snapshot's node can have, as the browser's accessibility tree
//! spells them.

/// The closed set of roles a node can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Button,
    Link,
    Checkbox,
    Radio,
    Option,
    Tab,
    MenuItem,
    Combobox,
    Textbox,
    Searchbox,
    Listbox,
    /// A number input, as the platform names it: typed into like a text box.
    SpinButton,
    /// A range input: listed, and no tool acts on it.
    Slider,
}

impl Role {
    /// Whether any tool but scroll acts on it: a slider is shown so the page reads as it is, and
    /// no record value or key is meant for one.
    pub fn actionable(self) -> bool {
        self != Self::Slider
    }

    /// The roles the tool contract's click takes: a field is typed into or chosen from, never
    /// clicked.
    pub fn clickable(self) -> bool {
        !matches!(self, Self::Textbox | Self::Searchbox | Self::Listbox | Self::SpinButton | Self::Slider)
    }

    pub const ALL: [Self; 13] = [
        Self::Button,
        Self::Link,
        Self::Checkbox,
        Self::Radio,
        Self::Option,
        Self::Tab,
        Self::MenuItem,
        Self::Combobox,
        Self::Textbox,
        Self::Searchbox,
        Self::Listbox,
        Self::SpinButton,
        Self::Slider,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Self::Button => "button",
            Self::Link => "link",
            Self::Checkbox => "checkbox",
            Self::Radio => "radio",
            Self::Option => "option",
            Self::Tab => "tab",
            Self::MenuItem => "menuitem",
            Self::Combobox => "combobox",
            Self::Textbox => "textbox",
            Self::Searchbox => "searchbox",
            Self::Listbox => "listbox",
            Self::SpinButton => "spinbutton",
            Self::Slider => "slider",
        }
    }

    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }
}
