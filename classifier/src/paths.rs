//! URLs: origins, decoded path segments, and which segments are sensitive.

use percent_encoding::percent_decode_str;
use url::Url;

use crate::consequence::Named;
use crate::readings::readings;
use crate::vocabulary::match_text;

/// Areas a path segment names that are sensitive although no vocabulary word matches.
const AREAS: &[(Named, &[&str])] = &[
    (
        Named::Administration,
        &[
            "admin",
            "administrator",
            "wp",
            "cpanel",
            "console",
            "dashboard",
            "manage",
            "management",
            "moderation",
            "internal",
            "staff",
            "sudo",
            "root",
            "ops",
        ],
    ),
    (
        Named::Authentication,
        &[
            "login",
            "logon",
            "signin",
            "signup",
            "register",
            "auth",
            "oauth",
            "oauth2",
            "sso",
            "saml",
            "openid",
            "session",
            "sessions",
            "password",
            "passwords",
            "mfa",
            "verify",
            "verification",
            "security",
            "account",
            "accounts",
            "id",
            "identity",
        ],
    ),
    (
        Named::Purchase,
        &[
            "pricing",
            "price",
            "prices",
            "plans",
            "plan",
            "billing",
            "checkout",
            "cart",
            "subscribe",
            "subscription",
            "subscriptions",
            "upgrade",
            "premium",
            "store",
            "shop",
            "payment",
            "payments",
            "pay",
            "purchase",
            "donate",
            "wallet",
            "super",
            "plus",
            "pro",
            "gems",
            "coins",
        ],
    ),
    (
        Named::Message,
        &[
            "messages",
            "message",
            "inbox",
            "chat",
            "chats",
            "mail",
            "dm",
            "dms",
            "conversations",
            "notifications",
            "compose",
            "contact",
            "contacts",
            "friends",
            "invite",
        ],
    ),
    (Named::SettingsChange, &["settings", "preferences", "privacy", "profile", "me", "user", "users"]),
];

/// Why a URL is not an HTTPS location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlProblem {
    Unparseable,
    /// `javascript:`, `http:`, `data:` … : may go anywhere, or leaves the origin.
    NotHttps,
    /// Credentials in the URL.
    Credentials,
}

/// A parsed HTTPS URL: its origin and its decoded path segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// `https://host[:port]`, host in ASCII (punycode) form: what origins are compared on.
    pub origin: String,
    /// The host as a person reads it, punycode decoded (`xn--pypal-4ve.example` → `pаypal.example`).
    pub host_unicode: String,
    pub segments: Vec<String>,
}

pub fn location(url: &str) -> Result<Location, UrlProblem> {
    let parsed = Url::parse(url.trim()).map_err(|_| UrlProblem::Unparseable)?;
    if parsed.scheme() != "https" || parsed.host().is_none() {
        return Err(UrlProblem::NotHttps);
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlProblem::Credentials);
    }
    let mut segments = Vec::new();
    for raw in parsed.path_segments().into_iter().flatten() {
        let decoded = percent_decode_str(raw).decode_utf8_lossy();
        // An encoded slash or backslash hides a segment boundary: read each part, and resolve
        // the dot segments they make as a server that decodes them would (`/lesson/..%2fx` is `/x`).
        for part in decoded.split(['/', '\\']).filter(|s| !s.is_empty()) {
            match part {
                "." => {}
                ".." => {
                    segments.pop();
                }
                _ => segments.push(part.to_owned()),
            }
        }
    }
    let host = parsed.host_str().unwrap_or_default();
    let (host_unicode, _) = idna::domain_to_unicode(host);
    Ok(Location { origin: parsed.origin().ascii_serialization(), host_unicode, segments })
}

/// The consequence a path segment names, if it is sensitive.
pub fn sensitive_segment(segment: &str) -> Option<Named> {
    if let Some(named) = match_text(segment).into_iter().min() {
        return Some(named);
    }
    for reading in readings(segment) {
        for token in reading.split(' ') {
            if let Some((named, _)) = AREAS.iter().find(|(_, words)| words.contains(&token)) {
                return Some(*named);
            }
        }
    }
    None
}

/// The first sensitive segment of a location, with what it names.
pub fn first_sensitive(location: &Location) -> Option<(&str, Named)> {
    location.segments.iter().find_map(|s| sensitive_segment(s).map(|n| (s.as_str(), n)))
}

/// Whether `location` is on `origin` (`https://host[:port]`), at any path.
pub fn on_origin(location: &Location, origin: &str) -> bool {
    Url::parse(origin).is_ok_and(|scope| location.origin == scope.origin().ascii_serialization())
}

/// Is the location at the scope's exact origin and inside its one-segment prefix?
pub fn inside(location: &Location, origin: &str, path_prefix: &str) -> bool {
    let Ok(scope) = Url::parse(origin) else { return false };
    let prefix = path_prefix.trim_matches('/');
    location.origin == scope.origin().ascii_serialization()
        && !prefix.is_empty()
        && location.segments.first().is_some_and(|s| s == prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_decoded_and_split() {
        let l = location("https://www.example.org/lesson%2Fadmin/x/%61ccount?q=1#f").unwrap();
        assert_eq!(l.origin, "https://www.example.org");
        assert_eq!(l.segments, ["lesson", "admin", "x", "account"]);
        let dots = location("https://www.example.org/lesson/%2e%2e/settings").unwrap();
        assert_eq!(dots.segments, ["settings"]);
        let hidden = location("https://www.example.org/lesson/..%2faccount/./x/.%2F").unwrap();
        assert_eq!(hidden.segments, ["account", "x"]);
        let back = location("https://www.example.org/lesson/a%5C..%5C..%5Cadmin").unwrap();
        assert_eq!(back.segments, ["admin"]);
        assert_eq!(location("javascript:alert(1)"), Err(UrlProblem::NotHttps));
        assert_eq!(location("http://www.example.org/lesson"), Err(UrlProblem::NotHttps));
        assert_eq!(location("https://u:p@www.example.org/lesson"), Err(UrlProblem::Credentials));
        assert_eq!(location("/lesson"), Err(UrlProblem::Unparseable));
    }

    #[test]
    fn scope() {
        let l = location("https://WWW.Example.org:443/lesson/unit-3").unwrap();
        assert!(inside(&l, "https://www.example.org", "/lesson"));
        assert!(!inside(&l, "https://www.example.org", "/less"));
        assert!(!inside(&location("https://www.example.org/lessons").unwrap(), "https://www.example.org", "/lesson"));
        assert!(!inside(&location("https://example.org/lesson").unwrap(), "https://www.example.org", "/lesson"));
        assert!(!inside(
            &location("https://www.example.org:8443/lesson").unwrap(),
            "https://www.example.org",
            "/lesson"
        ));
        let lookalike = location("https://www.еxample.org/lesson").unwrap();
        assert!(!inside(&lookalike, "https://www.example.org", "/lesson"));
        assert!(lookalike.origin.starts_with("https://www.xn--"), "{}", lookalike.origin);
        assert_eq!(lookalike.host_unicode, "www.еxample.org");
    }

    #[test]
    fn sensitive_segments() {
        for (segment, named) in [
            ("checkout", Named::Payment),
            ("sign-in", Named::Authentication),
            ("admin", Named::Administration),
            ("pricing", Named::Purchase),
            ("inbox", Named::Message),
            ("account-settings", Named::AccountChange),
        ] {
            assert_eq!(sensitive_segment(segment), Some(named), "{segment}");
        }
        for segment in ["lesson", "unit-3", "practice", "stories-en", "learn"] {
            assert_eq!(sensitive_segment(segment), None, "{segment}");
        }
    }
}
