//! `BROWSER_TASK_GRANT_SCOPES`: the site scopes the owner configured, parsed once at start-up.

use crate::catalogue::SiteScope;
use url::{Host, Url};

/// A refused scope entry: which entry, and which rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("BROWSER_TASK_GRANT_SCOPES entry {entry:?}: {rule}")]
pub struct ScopeError {
    pub entry: String,
    pub rule: &'static str,
}

fn refuse(entry: &str, rule: &'static str) -> ScopeError {
    ScopeError { entry: entry.to_owned(), rule }
}

/// Parses one entry: `https://host[:port]/segment`.
pub fn parse_scope(entry: &str) -> Result<SiteScope, ScopeError> {
    let url = Url::parse(entry).map_err(|_| refuse(entry, "is not a URL"))?;
    if url.scheme() != "https" {
        return Err(refuse(entry, "must be https"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse(entry, "may not carry credentials"));
    }
    if url.query().is_some() || entry.contains('?') {
        return Err(refuse(entry, "may not have a query"));
    }
    if url.fragment().is_some() || entry.contains('#') {
        return Err(refuse(entry, "may not have a fragment"));
    }
    match url.host() {
        Some(Host::Domain(d)) => {
            let d = d.trim_end_matches('.');
            let local = ["localhost", "local", "localdomain", "internal", "intranet", "lan", "home", "corp"];
            if !d.contains('.') || local.iter().any(|l| d == *l || d.ends_with(&format!(".{l}"))) {
                return Err(refuse(entry, "must name a public host"));
            }
        }
        Some(Host::Ipv4(_) | Host::Ipv6(_)) => return Err(refuse(entry, "must name a public host, not an IP address")),
        None => return Err(refuse(entry, "has no host")),
    }
    let segments: Vec<&str> = url.path_segments().into_iter().flatten().collect();
    let [segment] = segments.as_slice() else { return Err(refuse(entry, "must have exactly one path segment")) };
    if segment.is_empty() || url.path().ends_with('/') && url.path() != format!("/{segment}") {
        return Err(refuse(entry, "must have exactly one path segment"));
    }
    let decoded = percent_encoding_free(segment)
        .ok_or_else(|| refuse(entry, "path segment may hold only letters, digits, - and _"))?;
    if classifier::paths::sensitive_segment(decoded).is_some() {
        return Err(refuse(entry, "path segment names a sensitive area"));
    }
    Ok(SiteScope { origin: url.origin().ascii_serialization(), path_prefix: format!("/{decoded}") })
}

/// The segment if it needs no decoding: plain letters, digits, `-` and `_`.
fn percent_encoding_free(segment: &str) -> Option<&str> {
    segment.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_').then_some(segment)
}

/// Parses the comma-separated list; empty means no offer is ever made. Duplicates are refused.
pub fn parse_scopes(value: &str) -> Result<Vec<SiteScope>, ScopeError> {
    let mut scopes: Vec<SiteScope> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let scope = parse_scope(entry)?;
        if scopes.contains(&scope) {
            return Err(refuse(entry, "is listed twice"));
        }
        scopes.push(scope);
    }
    Ok(scopes)
}

/// The deployment's task-grant settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TaskGrantSettings {
    pub enabled: bool,
    pub scopes: Vec<SiteScope>,
}

/// Reads `BROWSER_TASK_GRANTS_ENABLED` and `BROWSER_TASK_GRANT_SCOPES` values (passed in, so
/// nothing reads the environment after start-up).
pub fn settings(enabled: Option<&str>, scopes: Option<&str>) -> Result<TaskGrantSettings, ScopeError> {
    let enabled = match enabled.map(str::trim) {
        None | Some("" | "0" | "false" | "off" | "no") => false,
        Some("1" | "true" | "on" | "yes") => true,
        Some(other) => {
            return Err(ScopeError {
                entry: other.to_owned(),
                rule: "BROWSER_TASK_GRANTS_ENABLED must be true or false",
            });
        }
    };
    let scopes = parse_scopes(scopes.unwrap_or(""))?;
    if !enabled && !scopes.is_empty() {
        return Err(ScopeError {
            entry: scopes[0].origin.clone(),
            rule: "BROWSER_TASK_GRANT_SCOPES requires BROWSER_TASK_GRANTS_ENABLED",
        });
    }
    Ok(TaskGrantSettings { enabled, scopes })
}

/// The configured scope a page lies inside (exact origin, inside the prefix), if any.
pub fn scope_for<'a>(scopes: &'a [SiteScope], page_url: &str) -> Option<&'a SiteScope> {
    let here = classifier::paths::location(page_url).ok()?;
    scopes.iter().find(|s| classifier::paths::inside(&here, &s.origin, &s.path_prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted() {
        let s = parse_scope("https://www.example.org/lesson").unwrap();
        assert_eq!((s.origin.as_str(), s.path_prefix.as_str()), ("https://www.example.org", "/lesson"));
        assert_eq!(parse_scope("https://WWW.Example.org:8443/unit_1").unwrap().origin, "https://www.example.org:8443");
        assert_eq!(parse_scopes(" https://a.example/x , https://b.example/y ").unwrap().len(), 2);
        assert!(parse_scopes("").unwrap().is_empty());
    }

    #[test]
    fn refused_with_entry_and_rule() {
        for (entry, rule) in [
            ("http://www.example.org/lesson", "must be https"),
            ("https://www.example.org/lesson?x=1", "may not have a query"),
            ("https://www.example.org/lesson#top", "may not have a fragment"),
            ("https://u:p@www.example.org/lesson", "may not carry credentials"),
            ("https://www.example.org/", "must have exactly one path segment"),
            ("https://www.example.org", "must have exactly one path segment"),
            ("https://www.example.org/a/b", "must have exactly one path segment"),
            ("https://www.example.org/lesson/", "must have exactly one path segment"),
            ("https://www.example.org/checkout", "path segment names a sensitive area"),
            ("https://www.example.org/settings", "path segment names a sensitive area"),
            ("https://www.example.org/admin", "path segment names a sensitive area"),
            ("https://www.example.org/%61dmin", "path segment may hold only letters, digits, - and _"),
            ("https://localhost/lesson", "must name a public host"),
            ("https://intranet/lesson", "must name a public host"),
            ("https://127.0.0.1/lesson", "must name a public host, not an IP address"),
            ("https://[::1]/lesson", "must name a public host, not an IP address"),
            ("not a url", "is not a URL"),
        ] {
            assert_eq!(parse_scope(entry), Err(ScopeError { entry: entry.into(), rule }), "{entry}");
        }
        let dup = parse_scopes("https://a.example/x,https://A.example/x").unwrap_err();
        assert_eq!(dup.rule, "is listed twice");
    }

    #[test]
    fn flag_rules() {
        assert_eq!(settings(None, None).unwrap(), TaskGrantSettings::default());
        assert!(settings(Some("true"), None).unwrap().enabled);
        assert!(settings(Some("false"), Some("https://a.example/x")).is_err(), "scopes require the flag");
        assert!(settings(Some("maybe"), None).is_err());
    }

    #[test]
    fn offer_only_inside_a_configured_scope() {
        let scopes = parse_scopes("https://www.example.org/lesson").unwrap();
        assert!(scope_for(&scopes, "https://www.example.org/lesson/3?x").is_some());
        assert!(scope_for(&scopes, "https://www.example.org/lessons").is_none());
        assert!(
            scope_for(&scopes, "https://other.example/lesson").is_none(),
            "another origin at /lesson gets no offer"
        );
        assert!(scope_for(&[], "https://www.example.org/lesson").is_none(), "no scopes, no offer");
    }
}
