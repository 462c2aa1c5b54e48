//! `grantctl`'s command line: every subcommand, its arguments and their documentation, which
//! `--help` prints.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "grantctl", about = "Operate the grant ledger")]
pub(crate) struct Cli {
    /// The PostgreSQL server; unset, commands that need one start the local cluster in `.pgdata/main`.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Apply pending migrations (idempotent; concurrent runs serialise).
    Migrate,
    /// Start local PostgreSQL if needed, migrate, and check the ledger: the main job.
    Up,
    /// Check the ledger: migrations applied, the paged global read against count(*), and every
    /// stream's hash chain.
    Check {
        /// Events per page of the global read.
        #[arg(long, default_value_t = ledger::READ_PAGE as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        page_size: u64,
    },
    /// Classify elements: JSON lines on stdin, one JSON line per input on stdout.
    Classify,
    /// What an operator opens first: each service's health (from the metrics addresses the
    /// services read, AUTHORIZER_METRICS_LISTEN and the rest), each projection's lag, active
    /// grants and pending cards per tenant, and the errors each service has answered.
    Status,
    /// Run a service.
    Serve {
        #[command(subcommand)]
        service: ServeCmd,
    },
    /// The guarded browser for one MCP client that spawns its server.
    Mcp {
        #[command(subcommand)]
        command: McpCmd,
    },
    /// The read side: projections' status and verification against the log.
    Projections {
        #[command(subcommand)]
        command: ProjectionsCmd,
    },
    /// What an auditor runs: replay stories from the log, verify chains and views.
    Audit {
        #[command(subcommand)]
        command: AuditCmd,
    },
    /// A tenant's deployment settings: the one truth every authorizer replica serves.
    Settings {
        #[command(subcommand)]
        command: SettingsCmd,
    },
    /// Browser profiles as the authorizer holds them.
    Profiles {
        #[command(subcommand)]
        command: ProfilesCmd,
    },
    /// The browser task agent's harness.
    Agent {
        #[command(subcommand)]
        command: AgentCmd,
    },
    /// The lesson a newcomer watches (`scripts/run --demo`).
    Demo {
        #[command(subcommand)]
        command: DemoCmd,
    },
    /// Owners' credentials at the gateway: API tokens and one-time sign-in links.
    Owners {
        #[command(subcommand)]
        command: OwnersCmd,
    },
    /// Credentials of the services that call the authorizer.
    Credentials {
        #[command(subcommand)]
        command: CredentialsCmd,
    },
    /// The dispatch-ticket keyring the authorizer and the runtime share (TICKET_KEYS_FILE).
    Tickets {
        #[command(subcommand)]
        command: TicketsCmd,
    },
    /// Certificates for TLS on loopback.
    Tls {
        #[command(subcommand)]
        command: TlsCmd,
    },
    /// Manage a local throwaway cluster.
    Db {
        #[command(subcommand)]
        command: DbCmd,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ServeCmd {
    /// The authorizer gRPC service, for every tenant. Its settings (AUTHORIZER_*, POLICY_FILE, …)
    /// are in docs/configuration.md; a tenant's are recorded with `grantctl settings apply`.
    Authorizer {
        /// Serve plaintext on a loopback address instead of TLS: local development only.
        #[arg(long)]
        insecure_loopback: bool,
    },
    /// A worker per async projection (audit_log) until Ctrl-C, with metrics and health on
    /// PROJECTIONS_METRICS_LISTEN (default 127.0.0.1:9404).
    Projections,
    /// The browser runtime gRPC service. Its settings (RUNTIME_*, BROWSER_*, TASK_RECORDS_DIR,
    /// TICKET_KEYS_FILE) are in docs/configuration.md; callers' credentials are in DATABASE_URL.
    Runtime {
        /// Serve plaintext on a loopback address instead of TLS: local development only.
        #[arg(long)]
        insecure_loopback: bool,
    },
    /// Keeps the Merkle tree over the log and signs checkpoints with KEY (from `audit keygen`)
    /// whenever --every-events new events joined the tree, or --every-seconds passed and any did;
    /// into the database and, with --file, a file opened for appending that the operator ships
    /// where a database administrator cannot reach it. Any number may run: they take turns.
    Checkpoints {
        #[arg(long)]
        key: PathBuf,
        #[arg(long, default_value_t = 1000)]
        every_events: u64,
        #[arg(long, default_value_t = 60)]
        every_seconds: u64,
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// The owner's HTTP gateway. Its settings (GATEWAY_*) are in docs/configuration.md; owner
    /// tokens are in DATABASE_URL.
    Gateway {
        /// Serve plaintext on a loopback address instead of TLS: local development only.
        #[arg(long)]
        insecure_loopback: bool,
    },
    /// Runs the tasks owners start in the console, through the agent harness, until Ctrl-C. Any
    /// number may run: each task is taken by one at a time. Its settings (WORKER_*, AGENT_*) are
    /// in docs/configuration.md.
    Worker,
    /// The guarded browser for MCP clients, over Streamable HTTP at /mcp. Its settings (MCP_*)
    /// are in docs/configuration.md; each client brings the key its owner made on the console.
    Mcp {
        /// Serve plaintext on a loopback address instead of TLS: local development only.
        #[arg(long)]
        insecure_loopback: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum McpCmd {
    /// Serve one MCP client over stdin and stdout (for clients that spawn their server), with
    /// the key from MCP_KEY or MCP_KEY_FILE.
    Stdio,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AgentCmd {
    /// Print the tools a model is given, as a JSON array of {name, description, input_schema}.
    Tools,
    /// Run one task end to end against a runtime and an authorizer, with a written plan
    /// (--script) or a hosted model (--provider openai|anthropic and --model; the key in
    /// AGENT_MODEL_KEY or the file AGENT_MODEL_KEY_FILE). Reaches them by AGENT_RUNTIME_URL,
    /// AGENT_AUTHORIZER_URL, AGENT_CA (PEM, for https) and AGENT_WORKER_TOKEN (a worker
    /// credential of the owner).
    Run {
        #[arg(long)]
        task: PathBuf,
        #[arg(long, conflicts_with_all = ["model_url", "model", "provider"])]
        script: Option<PathBuf>,
        /// `openai` (chat completions, and any endpoint that speaks it) or `anthropic` (Messages).
        #[arg(long, default_value = "openai")]
        provider: String,
        /// The provider's base URL (`https://…/v1`); its own address when absent. Plain http is
        /// taken on loopback only.
        #[arg(long, requires = "model")]
        model_url: Option<String>,
        #[arg(long)]
        model: Option<String>,
        /// Write the run's trace here as JSON lines (and each screenshot beside it as
        /// FILE.<digest>.png).
        #[arg(long)]
        trace: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum DemoCmd {
    /// Serve the demo lesson on loopback until Ctrl-C; writes DIR/browser-args.json and
    /// DIR/fixture-ca.pem for the runtime (BROWSER_EXTRA_ARGS, BROWSER_CA_BUNDLE), and the
    /// lesson's plan and task record (DIR/plan.jsonl, DIR/record.json) for the worker.
    Site {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Start the lesson as OWNER's task in chat `demo` of the running stack (the worker plays
    /// it, asking OWNER on the console). Needs AGENT_AUTHORIZER_URL, AGENT_CA,
    /// AGENT_WORKER_TOKEN, DEMO_PROFILES_TOKEN and DEMO_GATEWAY_TOKEN.
    Run {
        #[arg(long, default_value = "owner")]
        owner: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum OwnersCmd {
    /// API tokens.
    Token {
        #[command(subcommand)]
        command: OwnerTokenCmd,
    },
    /// Print a one-time sign-in link for a token's owner (valid ten minutes, used once); the
    /// browser it opens in stays signed in for twelve hours, or until the token is revoked.
    Link {
        /// The token's tenant (not needed when TOKEN is the token itself).
        #[arg(long)]
        tenant: Option<String>,
        /// The token's id, or the token itself as `owners token create` printed it.
        token: String,
        /// The gateway's address as the owner's browser reaches it.
        #[arg(long, default_value = "https://localhost:8443")]
        base: String,
        /// The chat session whose page the link lands on.
        #[arg(long)]
        session: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum OwnerTokenCmd {
    /// Make an owner token and print its id and its secret; the secret is shown only this once.
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        principal: String,
        /// Comma-separated: approval.resolve, browser.grant.read, browser.grant.write.
        #[arg(long)]
        scopes: String,
        #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(1..=366))]
        expires_in_days: u32,
    },
    /// Revoke a token, and every link and browser session made from it, from the next request.
    Revoke {
        #[arg(long)]
        tenant: String,
        token_id: uuid::Uuid,
    },
    /// A tenant's owner tokens (never their secrets).
    List {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SettingsCmd {
    /// Records the tenant's settings from BROWSER_TASK_GRANTS_ENABLED, BROWSER_TASK_GRANT_SCOPES,
    /// BROWSER_GRANT_ID and BROWSER_PROFILE_ID (unset: off, no scopes, no pin). Grants whose scope
    /// is gone, or every grant once the flag is off, end with the change; every replica serves
    /// it from the next request.
    Apply {
        #[arg(long)]
        tenant: String,
    },
    /// Prints the tenant's recorded task-grant settings.
    Show {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ProjectionsCmd {
    /// Each projection's version, checkpoint and lag.
    Status,
    /// Builds NAME's next generation from position zero beside the live one, then swaps it in
    /// (and records this build's version): what an operator runs after a migration.
    Rebuild { name: String },
    /// Replays the log in memory and diffs NAME (every view when unset, the inline
    /// active_task_grants included) against it; prints the first differing row.
    Verify { name: Option<String> },
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCmd {
    /// A story from the log itself, in order.
    Replay {
        #[arg(long)]
        tenant: Option<String>,
        /// A session's story (ids are a tenant's own: needs --tenant).
        #[arg(long, conflicts_with = "grant", requires = "tenant")]
        session: Option<String>,
        /// A grant's story: the approval that created it, its uses and its end (needs --tenant).
        #[arg(long, requires = "tenant")]
        grant: Option<uuid::Uuid>,
        /// RFC 3339: only events recorded at or after it.
        #[arg(long)]
        since: Option<String>,
        #[arg(long, default_value = "text", value_parser = ["text", "jsonl"])]
        format: String,
    },
    /// Every stream's hash chain and every projection against the log; with --export, an
    /// export file against its manifest and against the log. With --public-key, the log (or the
    /// export, offline) against the signed checkpoints: every event, every root, every proof.
    Verify {
        #[arg(long)]
        export: Option<PathBuf>,
        /// The log's public key (`name+id+key`, or a file holding it).
        #[arg(long)]
        public_key: Option<String>,
        /// A witness's public key: its cosignatures are checked and counted.
        #[arg(long, requires = "public_key")]
        witness_key: Vec<String>,
        /// The auditor's own copy of the checkpoints (the file the service appends to); without
        /// it, the database's table (or, with --export, the export's own). The log must reach
        /// the newest checkpoint in it.
        #[arg(long, requires = "public_key")]
        checkpoints: Option<PathBuf>,
    },
    /// A new signing key for the log's checkpoints (or a witness's): the private key goes to
    /// OUT, the public key is printed for auditors.
    Keygen {
        /// The key's name: the log's origin, e.g. `ledger.example.com/audit`.
        #[arg(long)]
        name: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// Brings the Merkle tree up to the log and signs a checkpoint of it now.
    Checkpoint {
        /// The private key file.
        #[arg(long)]
        key: PathBuf,
        /// Also append the checkpoint to this file.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// A witness cosigns every checkpoint of a checkpoints file (the service's --file), after
    /// checking the whole file is the log's: signatures, one root per size, the heads. Writes the
    /// cosigned copy to OUT (replacing it). The witness keeps no state between runs.
    Cosign {
        #[arg(long)]
        public_key: String,
        /// The witness's private key file.
        #[arg(long)]
        key: PathBuf,
        #[arg(long)]
        checkpoints: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// Hands the log to a new key with a note signed by the old one and the new: checkpoints of
    /// the tree's size now stay the old key's, every larger one must be the new key's. Then
    /// restart the checkpoint service with the new key; auditors keep the first public key.
    Rotate {
        #[arg(long)]
        old_key: PathBuf,
        #[arg(long)]
        new_key: PathBuf,
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Every past use by a standing or task grant, judged again from the facts it recorded
    /// through the current classifier and POLICY; lists each that would now be refused or asked.
    /// Writes nothing.
    Rejudge {
        /// A policy rules file (the authorizer's POLICY_FILE format).
        #[arg(long)]
        policy: PathBuf,
        /// RFC 3339: only decisions recorded at or after it.
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long, default_value = "text", value_parser = ["text", "jsonl"])]
        format: String,
    },
    /// An inclusion proof for an event, or a consistency proof between two checkpoints, as JSON.
    Prove {
        /// The event's id (a UUID: `audit replay --format jsonl` and the export's evidence show them).
        #[arg(long, conflicts_with_all = ["from", "to"], required_unless_present_all = ["from", "to"])]
        event: Option<uuid::Uuid>,
        /// The older checkpoint's tree size.
        #[arg(long, requires = "to")]
        from: Option<u64>,
        /// The newer checkpoint's tree size.
        #[arg(long, requires = "from")]
        to: Option<u64>,
    },
    /// The audit rows replayed from the log as JSON lines in OUT, with OUT.manifest.json beside
    /// it (count, first and last position, SHA-256 of the file) and OUT.evidence.jsonl: every
    /// event whole, the signed checkpoints and the proofs, so that `audit verify --public-key K
    /// --export OUT` checks it with no database.
    Export {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TicketsCmd {
    /// Print a keyring line for a new random key: `<id> <64 hex digits>`. To rotate, add the new
    /// line second in every service's file and roll them (all verify it), move it first and roll
    /// again (services seal with it), then drop the old line ten minutes later and roll.
    Keygen {
        #[arg(long, default_value = "k1")]
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TlsCmd {
    /// Make a throwaway CA and a loopback server certificate in DIR (ca.pem, server.pem,
    /// server-key.pem), unless they are there already.
    Init {
        #[arg(long, default_value = ".pgdata/tls")]
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ProfilesCmd {
    /// Profiles recorded before profiles had owners, with the sessions bound to them: nothing
    /// binds them or acts through them until the profiles service reports each for its owner.
    Unclaimed {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum CredentialsCmd {
    /// Make a credential and print its id and its token; the token is shown only this once.
    Create {
        /// worker, runtime, gateway, profiles or operator.
        #[arg(long)]
        role: String,
        #[arg(long)]
        tenant: String,
        /// The owner a worker or runtime credential acts as.
        #[arg(long)]
        principal: Option<String>,
        /// Hours until it expires; unset, it lasts until revoked.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        expires_in_hours: Option<u32>,
    },
    /// Revoke a credential: calls made with it are refused from now on.
    Revoke {
        #[arg(long)]
        tenant: String,
        credential_id: uuid::Uuid,
    },
    /// List a tenant's credentials (never their tokens).
    List {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum DbCmd {
    /// Start (or reuse) the cluster in DIR and print its URL.
    Start {
        #[arg(long, default_value = ".pgdata/main")]
        dir: PathBuf,
        /// fsync off, and wiped at its next start: for test clusters only.
        #[arg(long)]
        throwaway: bool,
    },
    /// Stop the cluster in DIR.
    Stop {
        #[arg(long, default_value = ".pgdata/main")]
        dir: PathBuf,
    },
    /// Print the URL of the running cluster in DIR.
    Url {
        #[arg(long, default_value = ".pgdata/main")]
        dir: PathBuf,
    },
}
