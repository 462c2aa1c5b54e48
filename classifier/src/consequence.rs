//! What an action would do.

use std::fmt;

/// A named consequence: never covered by any grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Named {
    // Fields first: the most specific reading of what the element is.
    CredentialField,
    OneTimeCodeField,
    PaymentField,
    IdentityField,
    Payment,
    Currency,
    InAppCurrency,
    Purchase,
    Subscription,
    MoneyMovement,
    Authentication,
    SignOut,
    AccountRecovery,
    AccountChange,
    SettingsChange,
    Permission,
    LegalAcceptance,
    Message,
    Publication,
    Deletion,
    FileTransfer,
    Administration,
}

impl Named {
    pub const ALL: [Self; 22] = [
        Self::CredentialField,
        Self::OneTimeCodeField,
        Self::PaymentField,
        Self::IdentityField,
        Self::Payment,
        Self::Currency,
        Self::InAppCurrency,
        Self::Purchase,
        Self::Subscription,
        Self::MoneyMovement,
        Self::Authentication,
        Self::SignOut,
        Self::AccountRecovery,
        Self::AccountChange,
        Self::SettingsChange,
        Self::Permission,
        Self::LegalAcceptance,
        Self::Message,
        Self::Publication,
        Self::Deletion,
        Self::FileTransfer,
        Self::Administration,
    ];

    /// What the owner reads for it: why a task permission does not cover the act.
    pub fn owner_words(self) -> &'static str {
        match self {
            Self::Payment | Self::PaymentField | Self::Currency | Self::InAppCurrency | Self::MoneyMovement => {
                "it looks like a payment or moves money"
            }
            Self::Purchase | Self::Subscription => "it looks like a purchase or a subscription",
            Self::Authentication | Self::CredentialField | Self::OneTimeCodeField => {
                "it signs in or asks for a password or code"
            }
            Self::SignOut => "it signs out",
            Self::AccountRecovery | Self::AccountChange => "it changes your account",
            Self::SettingsChange => "it changes settings",
            Self::Permission => "it grants a permission",
            Self::IdentityField => "it asks for personal details",
            Self::LegalAcceptance => "it accepts terms or an agreement",
            Self::Message => "it sends a message",
            Self::Publication => "it publishes or posts something",
            Self::Deletion => "it deletes something",
            Self::FileTransfer => "it uploads or downloads a file",
            Self::Administration => "it is an administrative action",
        }
    }

    /// The stable snake_case code.
    pub fn code(self) -> &'static str {
        match self {
            Self::CredentialField => "credential_field",
            Self::OneTimeCodeField => "one_time_code_field",
            Self::PaymentField => "payment_field",
            Self::IdentityField => "identity_field",
            Self::Payment => "payment",
            Self::Currency => "currency",
            Self::InAppCurrency => "in_app_currency",
            Self::Purchase => "purchase",
            Self::Subscription => "subscription",
            Self::MoneyMovement => "money_movement",
            Self::Authentication => "authentication",
            Self::SignOut => "sign_out",
            Self::AccountRecovery => "account_recovery",
            Self::AccountChange => "account_change",
            Self::SettingsChange => "settings_change",
            Self::Permission => "permission",
            Self::LegalAcceptance => "legal_acceptance",
            Self::Message => "message",
            Self::Publication => "publication",
            Self::Deletion => "deletion",
            Self::FileTransfer => "file_transfer",
            Self::Administration => "administration",
        }
    }

    /// The consequence whose [`Named::code`] is `code`.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|n| n.code() == code)
    }
}

/// The classifier's answer. `Named` is the most specific consequence found (fields first, then
/// the order of [`Named::ALL`]); every match is in [`crate::Classification::matches`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Consequence {
    /// Every label source reads as the same routine word, or a scroll.
    Routine,
    /// Nothing recognised: a task grant may cover it, a standing grant may not.
    Unknown,
    Named(Named),
}

impl Consequence {
    pub fn code(self) -> &'static str {
        match self {
            Self::Routine => "routine",
            Self::Unknown => "unknown",
            Self::Named(n) => n.code(),
        }
    }

    /// The consequence whose [`Consequence::code`] is `code`.
    pub fn from_code(code: &str) -> Option<Self> {
        match code {
            "routine" => Some(Self::Routine),
            "unknown" => Some(Self::Unknown),
            other => Named::from_code(other).map(Self::Named),
        }
    }
}

impl fmt::Display for Consequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}
