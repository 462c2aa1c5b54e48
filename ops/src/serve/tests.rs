//! `grantctl serve`'s configuration read from the environment: what is refused, and why.

use super::*;
use std::collections::HashMap;

/// A keyring file for the parses below that need one.
fn keys_file() -> String {
    let file = std::env::temp_dir().join(format!("grantctl-serve-test-keys-{}", std::process::id()));
    std::fs::write(&file, proto::ticket::Keyring::line("k1", [1; 32])).unwrap();
    file.display().to_string()
}

fn parse(vars: &[(&str, &str)]) -> Result<AuthorizerConfig> {
    let mut map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    map.entry(proto::ticket::KEYS_FILE_VAR.into()).or_insert_with(keys_file);
    AuthorizerConfig::parse(|k| map.get(k).cloned(), true)
}

#[test]
fn defaults_and_refusals() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.listen.to_string().as_str(), "127.0.0.1:50051");
    for (vars, says) in [
        (vec![("AUTHORIZER_LISTEN", "nowhere")], "AUTHORIZER_LISTEN"),
        (vec![("GRANT_LEDGER_TENANT", "a")], "grantctl settings apply"),
        (vec![("BROWSER_TASK_GRANT_SCOPES", "https://www.example.org/lesson")], "grantctl settings apply"),
        (vec![("POLICY_FILE", "/nonexistent/policy.json")], "POLICY_FILE"),
        (vec![("SWEEP_INTERVAL_SECONDS", "0")], "between 1 and 3600"),
        (vec![(proto::ticket::KEYS_FILE_VAR, "/nonexistent/keys")], "TICKET_KEYS_FILE"),
        (vec![("SWEEP_INTERVAL_SECONDS", "soon")], "SWEEP_INTERVAL_SECONDS"),
        (vec![("AUTHORIZER_DB_POOL", "0")], "between 1 and 1000"),
        (vec![("AUTHORIZER_LISTEN", "0.0.0.0:50051")], "plaintext on loopback only"),
        (vec![("AUTHORIZER_TLS_CERT", "/x.pem"), ("AUTHORIZER_TLS_KEY", "/y.pem")], "exclude each other"),
    ] {
        let err = format!("{:#}", parse(&vars).unwrap_err());
        assert!(err.contains(says), "{vars:?}: {err}");
    }
}

#[test]
fn settings_parse_and_refusals() {
    let settings = |vars: &[(&str, &str)]| {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        DeploymentSettings::parse(|k| map.get(k).cloned())
    };
    let plain = settings(&[]).unwrap();
    assert!(!plain.settings.enabled);
    // Without POLICY_FILE the recorded policy stays as it is.
    assert_eq!(plain.policy_version, None);
    let dir = std::env::temp_dir().join(format!("grantctl-policy-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("policy.json");
    std::fs::write(&file, br#"{"rules":[]}"#).unwrap();
    let with = settings(&[("POLICY_FILE", file.to_str().unwrap())]).unwrap();
    assert_eq!(with.policy_version, Some(Policy::empty().version));
    std::fs::remove_dir_all(dir).unwrap();
    let c = settings(&[
        ("BROWSER_TASK_GRANTS_ENABLED", "true"),
        ("BROWSER_TASK_GRANT_SCOPES", "https://www.example.org/lesson"),
    ])
    .unwrap();
    assert_eq!(c.settings.scopes.len(), 1);
    for (vars, says) in [
        (vec![("BROWSER_TASK_GRANT_SCOPES", "https://www.example.org/lesson")], "requires BROWSER_TASK_GRANTS_ENABLED"),
        (
            vec![
                ("BROWSER_TASK_GRANTS_ENABLED", "1"),
                ("BROWSER_TASK_GRANT_SCOPES", "https://www.example.org/checkout"),
            ],
            "sensitive",
        ),
        (vec![("BROWSER_GRANT_ID", "g-1")], "together"),
        (vec![("BROWSER_GRANT_ID", "g 1"), ("BROWSER_PROFILE_ID", "p-1")], "BROWSER_GRANT_ID"),
    ] {
        let err = format!("{:#}", settings(&vars).unwrap_err());
        assert!(err.contains(says), "{vars:?}: {err}");
    }
}

#[test]
fn the_gateway_reaches_the_authorizer_over_tls_or_on_loopback_only() {
    let dir = std::env::temp_dir().join(format!("gw-config-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("creds");
    std::fs::write(&file, format!("tenant-1 glc_{}\n", "a".repeat(64))).unwrap();
    let file = file.display().to_string();
    let parse = |url: &str| {
        GatewayConfig::parse(
            |k| match k {
                "GATEWAY_AUTHORIZER_URL" => Some(url.to_owned()),
                "GATEWAY_CREDENTIALS_FILE" => Some(file.clone()),
                _ => None,
            },
            true,
        )
    };
    for ok in ["http://127.0.0.1:50051", "http://[::1]:50051", "https://authorizer.internal:443"] {
        assert!(parse(ok).is_ok(), "{ok}");
    }
    for bad in ["http://127.0.0.1:1@evil.example:50051", "http://evil.example:50051", "ftp://127.0.0.1:1", "x"] {
        assert!(parse(bad).is_err(), "{bad}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tls_is_required_without_the_explicit_flag() {
    let keys = keys_file();
    let tls = |vars: &[(&str, &str)]| {
        let mut map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        map.insert(proto::ticket::KEYS_FILE_VAR.into(), keys.clone());
        AuthorizerConfig::parse(|k| map.get(k).cloned(), false)
    };
    for (vars, says) in [
        (vec![], "AUTHORIZER_TLS_CERT and AUTHORIZER_TLS_KEY are required"),
        (vec![("AUTHORIZER_TLS_CERT", "/x.pem")], "set together"),
        (vec![("AUTHORIZER_TLS_CERT", "/nonexistent.pem"), ("AUTHORIZER_TLS_KEY", "/k.pem")], "cannot be read"),
    ] {
        let err = format!("{:#}", tls(&vars).unwrap_err());
        assert!(err.contains(says), "{vars:?}: {err}");
    }
    let dir = std::env::temp_dir().join(format!("grantctl-tls-{}", uuid::Uuid::new_v4().simple()));
    crate::tls::DevPki::generate().unwrap().write(&dir).unwrap();
    let (_, cert, key) = crate::tls::DevPki::paths(&dir);
    let c =
        tls(&[("AUTHORIZER_TLS_CERT", cert.to_str().unwrap()), ("AUTHORIZER_TLS_KEY", key.to_str().unwrap())]).unwrap();
    assert!(matches!(c.transport, Transport::Tls { .. }));
    std::fs::remove_dir_all(dir).unwrap();
}
