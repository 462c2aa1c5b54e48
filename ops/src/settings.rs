//! Every environment variable `grantctl` and `scripts/run` read, in one table. The table is the
//! reference: `docs/configuration.md` is rendered from it, and a test holds the page to it and
//! it to what the parsers ask for. Each service reads its variables once, at start-up, through
//! [`env`].

/// One variable: its name, who reads it, its default, and what it means.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    pub name: &'static str,
    pub read_by: Reader,
    /// `None`: unset means off, or the variable is required (said in `meaning`).
    pub default: Option<&'static str>,
    pub meaning: &'static str,
}

/// Who reads a variable: one section of the page each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reader {
    Every,
    Authorizer,
    Settings,
    Runtime,
    Gateway,
    Projections,
    Checkpoints,
    Mcp,
    Agent,
    Worker,
    Script,
}

impl Reader {
    const ALL: [Reader; 11] = [
        Reader::Every,
        Reader::Authorizer,
        Reader::Settings,
        Reader::Runtime,
        Reader::Gateway,
        Reader::Projections,
        Reader::Checkpoints,
        Reader::Mcp,
        Reader::Agent,
        Reader::Worker,
        Reader::Script,
    ];

    fn intro(self) -> Option<&'static str> {
        match self {
            Reader::Settings => Some(
                "These are recorded in the ledger for a tenant, so every replica serves the same ones. \
                 The authorizer refuses to start with any of them in its environment.",
            ),
            _ => None,
        }
    }

    fn heading(self) -> &'static str {
        match self {
            Reader::Every => "Every command",
            Reader::Authorizer => "The authorizer (`grantctl serve authorizer`)",
            Reader::Settings => "A tenant's recorded settings (`grantctl settings apply --tenant T`)",
            Reader::Runtime => "The browser runtime (`grantctl serve runtime`)",
            Reader::Gateway => "The owner's gateway (`grantctl serve gateway`)",
            Reader::Projections => "The projection workers (`grantctl serve projections`)",
            Reader::Checkpoints => "The checkpoint service (`grantctl serve checkpoints`)",
            Reader::Mcp => "The MCP server (`grantctl serve mcp`, `grantctl mcp stdio`)",
            Reader::Agent => "The agent harness (`grantctl agent run`, `grantctl demo run`)",
            Reader::Worker => {
                "The task worker (`grantctl serve worker`; also AGENT_AUTHORIZER_URL, AGENT_RUNTIME_URL, AGENT_CA and the AGENT_MODEL_* settings)"
            }
            Reader::Script => "`scripts/run`",
        }
    }
}

use Reader::{Agent, Authorizer, Checkpoints, Every, Gateway, Mcp, Projections, Runtime, Script, Settings, Worker};

const fn s(name: &'static str, read_by: Reader, default: Option<&'static str>, meaning: &'static str) -> Setting {
    Setting { name, read_by, default, meaning }
}

pub const SETTINGS: &[Setting] = &[
    s(
        "DATABASE_URL",
        Every,
        None,
        "The PostgreSQL server (also `--database-url`). Unset, `grantctl` starts the local cluster in `.pgdata/main`.",
    ),
    s(
        "PG_BINDIR",
        Every,
        None,
        "Where PostgreSQL's server binaries are, for the local cluster. Unset, `pg_config --bindir`, then Debian's newest `/usr/lib/postgresql/*/bin`.",
    ),
    s(
        "RUST_LOG",
        Every,
        Some("info"),
        "Which log lines are written (read by the log filter). Logs are JSON lines when standard error is not a terminal.",
    ),
    s(
        "METRICS_ALLOW_NON_LOOPBACK",
        Every,
        Some("false"),
        "`true` lets a metrics listener bind an address that is not loopback.",
    ),
    s(
        "TICKET_KEYS_FILE",
        Every,
        None,
        "Required by the authorizer and the runtime: the dispatch-ticket keyring, one line per key, `<key id> <64 hex digits>` (`grantctl tickets keygen --id K`). Mode 0600, never in the database. The first key seals; any listed key verifies. To rotate: add the new key second and restart every service; move it first and restart again; drop the old one ten minutes later.",
    ),
    s("AUTHORIZER_LISTEN", Authorizer, Some("127.0.0.1:50051"), "The gRPC address."),
    s(
        "AUTHORIZER_TLS_CERT",
        Authorizer,
        None,
        "The server certificate (PEM). Required with its key unless `--insecure-loopback`.",
    ),
    s("AUTHORIZER_TLS_KEY", Authorizer, None, "The server certificate's key (PEM)."),
    s("AUTHORIZER_DB_POOL", Authorizer, Some("32"), "Connections to PostgreSQL for deciding."),
    s(
        "AUTHORIZER_METRICS_LISTEN",
        Authorizer,
        Some("127.0.0.1:9401"),
        "Where `/metrics` and `/healthz` are served; `off` turns them off.",
    ),
    s("SWEEP_INTERVAL_SECONDS", Authorizer, Some("30"), "How often cards and grants past their time are ended."),
    s(
        "POLICY_FILE",
        Authorizer,
        None,
        "The operator's policy: JSON rules `{id, effect, actions?, consequences?, origins?}`, effect one of `require_approval`, `advisory_escalation`, `deny`, `hardline`; the strongest match wins; a misspelling stops start-up. Unset: every act asks. `settings apply` records it; a replica running another policy answers UNAVAILABLE.",
    ),
    s(
        "BROWSER_TASK_GRANTS_ENABLED",
        Settings,
        Some("false"),
        "Whether an owner may allow a whole task. Turning it off ends every grant.",
    ),
    s(
        "BROWSER_TASK_GRANT_SCOPES",
        Settings,
        None,
        "The site scopes a task grant may cover: comma-separated `https://host/segment`. A scope removed ends its grants.",
    ),
    s(
        "BROWSER_GRANT_ID",
        Settings,
        None,
        "With `BROWSER_PROFILE_ID`: the operator's standing grant, for 30 days, covering only a routine button click or a scroll on an HTTPS page of that profile.",
    ),
    s("BROWSER_PROFILE_ID", Settings, None, "The browser profile the standing grant is for."),
    s("RUNTIME_LISTEN", Runtime, Some("127.0.0.1:50061"), "The gRPC address."),
    s(
        "RUNTIME_TLS_CERT",
        Runtime,
        None,
        "The server certificate (PEM). Required with its key unless `--insecure-loopback`.",
    ),
    s("RUNTIME_TLS_KEY", Runtime, None, "The server certificate's key (PEM)."),
    s(
        "RUNTIME_METRICS_LISTEN",
        Runtime,
        Some("127.0.0.1:9402"),
        "Where `/metrics` and `/healthz` are served; `off` turns them off.",
    ),
    s(
        "RUNTIME_AUTHORIZER_URL",
        Runtime,
        None,
        "Required: where the runtime reads the owner's Stop before every act and redeems approval tokens: `https://host:port`, or `http://` on loopback only. Set together with `RUNTIME_AUTHORIZER_TOKEN`.",
    ),
    s("RUNTIME_AUTHORIZER_CA", Runtime, None, "The CA (PEM) the authorizer's certificate is checked against."),
    s("RUNTIME_AUTHORIZER_TOKEN", Runtime, None, "The `runtime` credential of the tenant it serves."),
    s("BROWSER_CHROMEDRIVER", Runtime, Some("/usr/bin/chromedriver"), "The chromedriver binary."),
    s("BROWSER_CHROMIUM", Runtime, Some("/usr/bin/chromium"), "The Chromium binary."),
    s(
        "BROWSER_EXTRA_ARGS",
        Runtime,
        None,
        "A JSON array of extra Chromium flags, such as `--host-resolver-rules` or `--proxy-server`. Flags that would undo a guard are refused.",
    ),
    s(
        "BROWSER_CA_BUNDLE",
        Runtime,
        None,
        "Certificates (PEM) to trust, such as an inspecting proxy's. The trusted certificate must be in the chain the server presents.",
    ),
    s(
        "BROWSER_POOL_SIZE",
        Runtime,
        Some("4"),
        "How many Chromiums run at once, 1 to 64: one per open browser session. Past it, opening a session is refused until one closes.",
    ),
    s(
        "BROWSER_CALL_TIMEOUT_SECONDS",
        Runtime,
        Some("30"),
        "The longest one browser call may take before the browser is restarted clean.",
    ),
    s(
        "BROWSER_IDLE_SECONDS",
        Runtime,
        Some("1800"),
        "A session unused this long is closed and its browser given back.",
    ),
    s(
        "TASK_RECORDS_DIR",
        Runtime,
        Some("/var/lib/grant-ledger/records"),
        "Task records, `<tenant>/<owner>/<run id>.json`: field id to value. A session reads only its owner's. \
         Keys beginning with `$` are the record's settings, never fields; an unknown one is ignored. \
         `\"$locale\": \"en-GB\"` (a language tag) reads a form's dates (`03/04/2026`) day first where the \
         field's placeholder and the page's language do not say how the page writes them, and the record's own \
         slashed dates too; the card then says \"DD/MM/YYYY, as your task record's language (en-GB) writes \
         dates\". A language whose regions write dates both ways (`en`) says nothing. Example: \
         `{\"$locale\": \"en-GB\", \"name\": \"Ada Lovelace\", \"start\": \"2026-04-03\"}`.",
    ),
    s("GATEWAY_LISTEN", Gateway, Some("127.0.0.1:8443"), "The HTTPS address of the API and the console."),
    s(
        "GATEWAY_TLS_CERT",
        Gateway,
        None,
        "The server certificate (PEM). Required with its key unless `--insecure-loopback`.",
    ),
    s("GATEWAY_TLS_KEY", Gateway, None, "The server certificate's key (PEM)."),
    s(
        "GATEWAY_METRICS_LISTEN",
        Gateway,
        Some("127.0.0.1:9403"),
        "Where `/metrics` and `/healthz` are served; `off` turns them off.",
    ),
    s(
        "GATEWAY_AUTHORIZER_URL",
        Gateway,
        Some("http://127.0.0.1:50051"),
        "The authorizer: `https://host:port`, or `http://` on loopback only.",
    ),
    s("GATEWAY_AUTHORIZER_CA", Gateway, None, "The CA (PEM) the authorizer's certificate is checked against."),
    s(
        "GATEWAY_RUNTIME_URL",
        Gateway,
        None,
        "The browser runtime, for the live tab behind a pending card. Unset: cards show no picture of the tab, \
         and the owner cannot take it over.",
    ),
    s("GATEWAY_RUNTIME_CA", Gateway, None, "The CA (PEM) the runtime's certificate is checked against."),
    s(
        "GATEWAY_CREDENTIALS_FILE",
        Gateway,
        None,
        "Required: one line per served tenant, `<tenant> <token>`, the token of that tenant's `gateway` credential (`grantctl credentials create`, starting `glc_`).",
    ),
    s("GATEWAY_RATE_PER_MINUTE", Gateway, Some("600"), "Requests per owner token per replica."),
    s(
        "PROJECTIONS_METRICS_LISTEN",
        Projections,
        Some("127.0.0.1:9404"),
        "Where `/metrics` and `/healthz` are served; `off` turns them off.",
    ),
    s(
        "CHECKPOINTS_METRICS_LISTEN",
        Checkpoints,
        Some("127.0.0.1:9405"),
        "Where `/metrics` and `/healthz` are served; `off` turns them off.",
    ),
    s("MCP_LISTEN", Mcp, Some("127.0.0.1:8766"), "The HTTPS address of the MCP endpoint (`/mcp`)."),
    s("MCP_TLS_CERT", Mcp, None, "The server certificate (PEM). Required with its key unless `--insecure-loopback`."),
    s("MCP_TLS_KEY", Mcp, None, "The server certificate's key (PEM)."),
    s(
        "MCP_ALLOWED_HOSTS",
        Mcp,
        Some("localhost,127.0.0.1,::1"),
        "The `Host` names clients may reach the endpoint by (comma-separated): a guard against DNS rebinding. \
         A request that carries an `Origin` (a web page's) is refused.",
    ),
    s(
        "MCP_METRICS_LISTEN",
        Mcp,
        Some("127.0.0.1:9406"),
        "Where `/metrics` and `/healthz` are served; `off` turns them off.",
    ),
    s(
        "MCP_AUTHORIZER_URL",
        Mcp,
        Some("http://127.0.0.1:50051"),
        "The authorizer: `https://host:port`, or `http://` on loopback only.",
    ),
    s("MCP_AUTHORIZER_CA", Mcp, None, "The CA (PEM) the authorizer's certificate is checked against."),
    s("MCP_RUNTIME_URL", Mcp, Some("http://127.0.0.1:50061"), "The browser runtime."),
    s("MCP_RUNTIME_CA", Mcp, None, "The CA (PEM) the runtime's certificate is checked against."),
    s(
        "MCP_CONSOLE_URL",
        Mcp,
        Some("https://localhost:8443"),
        "The owner's console: a call that waits for a card links the client's user there.",
    ),
    s(
        "MCP_APPROVAL_WAIT_SECONDS",
        Mcp,
        Some("600"),
        "How long `request_approval` waits for the owner's answer (at most a card's ten minutes).",
    ),
    s("MCP_IDLE_SECONDS", Mcp, Some("900"), "A run whose client makes no call this long ends, and its browser closes."),
    s("MCP_MAX_STEPS", Mcp, Some("200"), "The step budget of each run (1 to 10000)."),
    s(
        "MCP_KEY",
        Mcp,
        None,
        "`grantctl mcp stdio` only: the key the owner made on the chat's console page (or MCP_KEY_FILE).",
    ),
    s("MCP_KEY_FILE", Mcp, None, "`grantctl mcp stdio` only: a file holding the key."),
    s("AGENT_RUNTIME_URL", Agent, None, "Required: the browser runtime."),
    s("AGENT_AUTHORIZER_URL", Agent, None, "Required: the authorizer."),
    s("AGENT_CA", Agent, None, "The CA (PEM) both services' certificates are checked against."),
    s("AGENT_WORKER_TOKEN", Agent, None, "Required: the `worker` credential the run calls with."),
    s("AGENT_MODEL_KEY", Agent, None, "The model provider's API key, with `--model` (or AGENT_MODEL_KEY_FILE)."),
    s("AGENT_MODEL_KEY_FILE", Agent, None, "A file holding the model provider's API key."),
    s(
        "AGENT_MODEL_CA",
        Agent,
        None,
        "A PEM bundle the model provider's certificate is checked against, instead of the system's roots.",
    ),
    s("AGENT_MODEL_TIMEOUT_SECONDS", Agent, Some("60"), "How long one model request may take (1-600)."),
    s(
        "AGENT_MODEL_RETRIES",
        Agent,
        Some("3"),
        "Further tries after a timeout, a dropped connection, a 429 or a 5xx (0-10).",
    ),
    s("HTTPS_PROXY", Agent, None, "The proxy model requests go through."),
    s("https_proxy", Agent, None, "As HTTPS_PROXY, when that is unset."),
    s("NO_PROXY", Agent, None, "Hosts model requests reach without the proxy (comma-separated)."),
    s("no_proxy", Agent, None, "As NO_PROXY, when that is unset."),
    s("AGENT_METRICS_LISTEN", Agent, Some("off"), "Where a run serves `/metrics`."),
    s(
        "DEMO_PROFILES_TOKEN",
        Agent,
        None,
        "`demo run` only: the tenant's `profiles` credential, to claim the demo profile.",
    ),
    s(
        "DEMO_GATEWAY_TOKEN",
        Agent,
        None,
        "`demo run` only: the tenant's `gateway` credential, to start the lesson as the owner's task.",
    ),
    s(
        "WORKER_CREDENTIALS_FILE",
        Worker,
        None,
        "Required: one `<tenant> <worker token>` line per tenant and owner whose tasks this replica runs (a worker credential acts for one owner).",
    ),
    s("WORKER_NAME", Worker, Some("worker-<host>-<pid>"), "This replica's name in the claims it records."),
    s("WORKER_SCRIPT", Worker, None, "A scripted plan every task plays (the demo and tests); or WORKER_MODEL."),
    s("WORKER_MODEL", Worker, None, "The hosted model's name; its key and address are the harness's AGENT_MODEL_*."),
    s("WORKER_MODEL_PROVIDER", Worker, Some("openai"), "`openai` (chat completions) or `anthropic` (Messages)."),
    s("WORKER_MODEL_URL", Worker, None, "The provider's base URL, when not its public one."),
    s(
        "WORKER_SCRIPT_PACE_MS",
        Worker,
        Some("0"),
        "With WORKER_SCRIPT: how long each scripted turn takes (the demo's pace).",
    ),
    s(
        "WORKER_TASK_RECORD",
        Worker,
        None,
        "The demo only: a JSON object of field ids and values, written as every run's task record (with WORKER_TASK_RECORDS_DIR).",
    ),
    s("WORKER_TASK_RECORDS_DIR", Worker, None, "The runtime's TASK_RECORDS_DIR, where WORKER_TASK_RECORD is written."),
    s("WORKER_MAX_STEPS", Worker, Some("100"), "Each run's step budget."),
    s("WORKER_RUNS", Worker, Some("2"), "Runs at once in this replica (each holds one browser)."),
    s("WORKER_POLL_MS", Worker, Some("1000"), "How long an idle replica waits before asking for a task again."),
    s(
        "GRANT_LEDGER_TENANT",
        Script,
        Some("default"),
        "The tenant `scripts/run` records settings for and makes credentials in. The authorizer refuses to start with it set.",
    ),
    s("GRANT_LEDGER_OWNER", Script, Some("owner"), "The owner `scripts/run` makes a sign-in link for."),
];

/// A variable's value, for a service reading its configuration at start-up. In a debug build a
/// variable missing from [`SETTINGS`] stops the program: the reference must name it.
pub fn env(name: &str) -> Option<String> {
    debug_assert!(SETTINGS.iter().any(|s| s.name == name), "{name} is read but not in ops::settings::SETTINGS");
    std::env::var(name).ok()
}

/// `docs/configuration.md`.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration\n\n\
         Every setting is an environment variable, read once when a command starts.\n\
         A bad value stops the service with the variable's name and the rule it breaks.\n\
         This page is made from `ops/src/settings.rs`; a test keeps the two alike.\n\
         For commands and flags, run `grantctl --help`.\n",
    );
    for reader in Reader::ALL {
        out.push_str(&format!("\n## {}\n\n", reader.heading()));
        if let Some(intro) = reader.intro() {
            out.push_str(intro);
            out.push_str("\n\n");
        }
        out.push_str("| variable | default | meaning |\n|---|---|---|\n");
        for s in SETTINGS.iter().filter(|s| s.read_by == reader) {
            let default = s.default.map_or_else(|| "unset".to_owned(), |d| format!("`{d}`"));
            out.push_str(&format!("| `{}` | {default} | {} |\n", s.name, s.meaning));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::{BTreeMap, BTreeSet};

    use super::{SETTINGS, markdown};

    fn root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn the_page_is_the_table() {
        let path = root().join("docs/configuration.md");
        if std::env::var_os("REGENERATE").is_some() {
            std::fs::write(&path, markdown()).unwrap();
        }
        let page = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(page == markdown(), "docs/configuration.md differs from ops/src/settings.rs: run with REGENERATE=1");
        let names: BTreeSet<&str> = SETTINGS.iter().map(|s| s.name).collect();
        assert_eq!(names.len(), SETTINGS.len(), "a variable is in the table twice");
    }

    /// Each parser run with every variable set to a value it takes, and once with none: every
    /// variable it asks for is in the table.
    #[test]
    fn every_variable_a_parser_reads_is_in_the_table() {
        let dir = std::env::temp_dir().join(format!("grantctl-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let keys = dir.join("keys");
        std::fs::write(&keys, proto::ticket::Keyring::line("k1", [7; 32])).unwrap();
        let creds = dir.join("creds");
        std::fs::write(&creds, "acme glc_0123456789abcdef0123456789abcdef\n").unwrap();
        let (ca, ..) = crate::tls::DevPki::paths(&dir);
        crate::tls::DevPki::generate().unwrap().write(&dir).unwrap();
        let plan = dir.join("plan.jsonl");
        std::fs::write(&plan, "{\"tool\": \"snapshot\"}\n").unwrap();
        let record = dir.join("record.json");
        std::fs::write(&record, "{\"answer\": \"hola\"}").unwrap();
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let values: BTreeMap<&str, String> = [
            ("TICKET_KEYS_FILE", path(&keys)),
            ("GATEWAY_CREDENTIALS_FILE", path(&creds)),
            // Only their being files is checked at start-up.
            ("BROWSER_CHROMEDRIVER", path(&keys)),
            ("BROWSER_CHROMIUM", path(&keys)),
            ("RUNTIME_AUTHORIZER_URL", "http://127.0.0.1:50051".into()),
            ("RUNTIME_AUTHORIZER_TOKEN", "glc_0123456789abcdef0123456789abcdef".into()),
            ("RUNTIME_AUTHORIZER_CA", path(&ca)),
            ("GATEWAY_AUTHORIZER_CA", path(&ca)),
            ("GATEWAY_RUNTIME_URL", "http://127.0.0.1:50061".into()),
            ("GATEWAY_RUNTIME_CA", path(&ca)),
            ("WORKER_CREDENTIALS_FILE", path(&creds)),
            ("WORKER_SCRIPT", path(&plan)),
            ("WORKER_TASK_RECORD", path(&record)),
            ("WORKER_TASK_RECORDS_DIR", path(&dir)),
            ("AGENT_AUTHORIZER_URL", "http://127.0.0.1:50051".into()),
            ("AGENT_RUNTIME_URL", "http://127.0.0.1:50061".into()),
            ("AGENT_CA", path(&ca)),
        ]
        .into_iter()
        .collect();
        // The tenant's settings are refused by the services, so set for `settings apply` alone.
        let recorded: BTreeMap<&str, String> = [
            ("BROWSER_TASK_GRANTS_ENABLED", "true".into()),
            ("BROWSER_TASK_GRANT_SCOPES", "https://example.test/lesson".into()),
        ]
        .into_iter()
        .collect();
        let asked = RefCell::new(BTreeSet::new());
        for set in [true, false] {
            let ask = |map: &BTreeMap<&str, String>, k: &str| {
                asked.borrow_mut().insert(k.to_owned());
                if set { map.get(k).cloned() } else { None }
            };
            let get = |k: &str| ask(&values, k);
            let results = [
                crate::serve::AuthorizerConfig::parse(get, true).map(drop),
                crate::serve::RuntimeServeConfig::parse(get, true).map(drop),
                crate::serve::GatewayConfig::parse(get, true).map(drop),
                crate::serve::McpConfig::parse(get, true).map(drop),
                crate::worker::WorkerConfig::parse(get).map(drop),
                crate::serve::DeploymentSettings::parse(|k| ask(&recorded, k)).map(drop),
                telemetry::MetricsListen::parse(get, "PROJECTIONS", crate::observe::PROJECTIONS_METRICS)
                    .map(drop)
                    .map_err(anyhow::Error::from),
                telemetry::MetricsListen::parse(get, "CHECKPOINTS", crate::observe::CHECKPOINTS_METRICS)
                    .map(drop)
                    .map_err(anyhow::Error::from),
                telemetry::MetricsListen::parse(get, "AGENT", "off").map(drop).map_err(anyhow::Error::from),
            ];
            drop(crate::status::services(get));
            if set {
                for r in results {
                    r.unwrap();
                }
            }
        }
        let asked = asked.into_inner();
        let listed: BTreeSet<String> = SETTINGS.iter().map(|s| s.name.to_owned()).collect();
        let missing: Vec<&String> = asked.difference(&listed).collect();
        assert!(missing.is_empty(), "read but not in the table: {missing:?}");
        assert!(asked.len() > 30, "only {} variables were asked for", asked.len());

        // The rest of the table (read by async commands, clap or the script) is named in the
        // code that reads it: a variable no one reads is not in the table.
        let mut sources = String::new();
        for dir in ["ops/src", "ops/src/serve", "scripts"] {
            for entry in std::fs::read_dir(root().join(dir)).unwrap().flatten() {
                let p = entry.path();
                if p.is_file() && !p.ends_with("settings.rs") && !p.ends_with("tests.rs") {
                    sources.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
                }
            }
        }
        for s in SETTINGS.iter().filter(|s| !asked.contains(s.name) && s.name != "RUST_LOG") {
            let named = sources.contains(&format!("\"{}\"", s.name)) || sources.contains(&format!("${{{}", s.name));
            assert!(named, "{} is in the table but nothing reads it", s.name);
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
