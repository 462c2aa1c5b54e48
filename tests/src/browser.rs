//! The browser stack for tests: the fixture HTTPS site, an authorizer (memory ledger) and the
//! browser runtime, each served on a loopback socket, the runtime configured through its
//! environment variables alone, and clients that carry each service's credential.

use std::path::PathBuf;
use std::sync::Arc;

use authorizer::domain::Command;
use authorizer::policy::Policy;
use authorizer::scopes::{TaskGrantSettings, parse_scopes};
use authorizer::service::AuthorizerService;
use authorizer::{Authority, Backend, MemoryGrants, PgGrants};
use browser_runtime::fixture::Fixture;
use browser_runtime::service::{AuthorizerRedeemer, BrowserRuntime};
use browser_runtime::ticket::{self, Expected};
use browser_runtime::{RuntimeConfig, service};
use credentials::{Credentials, Role};
use ledger::TenantId;
use proto::runtime as rt;
use proto::v1 as pb;
use tonic::transport::Channel;
use tonic::{Request, Status};

pub const TENANT: &str = "tenant-1";
/// The lesson site, and a site the run may not reach.
pub const LESSON: &str = "www.lesson.test";
pub const ELSEWHERE: &str = "www.elsewhere.test";
pub const LESSON_ORIGIN: &str = "https://www.lesson.test";

pub const WORKER: &str = "glc_00000000000000000000000000000000000000000000000000000000000000a1";
pub const RUNTIME: &str = "glc_00000000000000000000000000000000000000000000000000000000000000a2";
pub const GATEWAY: &str = "glc_00000000000000000000000000000000000000000000000000000000000000a3";
pub const PROFILES: &str = "glc_00000000000000000000000000000000000000000000000000000000000000a5";
/// A worker of another tenant.
pub const STRANGER: &str = "glc_00000000000000000000000000000000000000000000000000000000000000a4";
/// A worker of its own for the chats the tests' own tickets name: not the owner's, so they show
/// in no list of the owner's chats and no Stop everything of the owner's reaches them.
const TICKETS: &str = "glc_00000000000000000000000000000000000000000000000000000000000000a6";

/// A form of three fields: two the task fills (the page upper-cases the city as it is typed),
/// and a page default the agent never touches; it submits to `/lesson/unit-4`.
pub const ENROL: &str = r#"<!doctype html><title>Enrol</title><h1>Enrol</h1>
<form action="/lesson/unit-4" method="get">
<label>Full name <input name="name"></label>
<label>City <input name="city" oninput="this.value = this.value.toUpperCase()"></label>
<label>Excess (voluntary) <input name="excess" value="250.00"></label>
<button>Confirm enrolment</button>
</form>"#;
/// [`ENROL`]'s confirmation.
pub const ENROLLED: &str = "<!doctype html><title>Enrolment confirmed: reference EN-2040</title><p>Thank you.";

/// Fails with how to get Chromium when it is missing.
pub fn need_browser() {
    for (path, package) in [("/usr/bin/chromium", "chromium"), ("/usr/bin/chromedriver", "chromium-driver")] {
        assert!(
            std::path::Path::new(path).exists(),
            "{path} is missing: install Debian's {package} package (apt-get install chromium chromium-driver), \
             or run scripts/test, which installs both"
        );
    }
}

/// `message` with `token` as its bearer credential.
pub fn with<T>(token: &str, message: T) -> Request<T> {
    if token == GATEWAY { crate::as_owner(token, "owner", message) } else { crate::bearer(token, message) }
}

type Serving = tokio::task::JoinHandle<Result<(), tonic::transport::Error>>;

/// The stack, its authorizer on `B`'s ledger: the memory one unless a test asks for PostgreSQL.
#[derive(Debug)]
pub struct Stack<B: Backend + 'static = MemoryGrants> {
    pub fixture: Fixture,
    pub runtime: rt::browser_runtime_client::BrowserRuntimeClient<Channel>,
    pub authorizer: pb::authorizer_client::AuthorizerClient<Channel>,
    pub served: Arc<BrowserRuntime<AuthorizerRedeemer>>,
    /// The authorizer as served (its counters are the served one's).
    pub authorizer_service: AuthorizerService<B>,
    pub authorizer_port: u16,
    /// The fault proxy the runtime reaches the authorizer through.
    pub link: crate::fault::Proxy,
    pub runtime_port: u16,
    /// Where the authorizer's and the runtime's metrics are served.
    pub authorizer_metrics: std::net::SocketAddr,
    pub runtime_metrics: std::net::SocketAddr,
    /// Task records: `records/<tenant>/<owner>/<run>.json`.
    pub records: PathBuf,
    /// Each session's last dispatched sequence, so `act` can number the next one.
    applied: std::collections::HashMap<String, u64>,
    /// Each session's browser profile, which its tickets bind.
    profiles: std::collections::HashMap<String, String>,
    /// The chat each runtime session's own tickets name: the runtime reads its Stop before it
    /// dispatches one.
    chats: std::collections::HashMap<String, String>,
    /// The keys the authorizer seals tickets with; the tests seal with them too.
    pub keys: Arc<proto::ticket::Keyring>,
    dir: PathBuf,
    /// Stops the runtime's server (which then closes every browser) and its task.
    runtime_stop: Option<(tokio::sync::oneshot::Sender<()>, Serving)>,
    _stops: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl<B: Backend + 'static> Drop for Stack<B> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Serves `registry` on a loopback port of its own; answers the address.
pub async fn serve_metrics(registry: telemetry::Registry) -> std::net::SocketAddr {
    let listen = telemetry::MetricsListen::At("127.0.0.1:0".parse().unwrap());
    let served = ops::observe::serve_metrics(listen, "test", registry, telemetry::HealthCheck::serving()).await;
    served.expect("a metrics listener").expect("an address")
}

async fn channel(port: u16) -> Channel {
    Channel::from_shared(format!("http://127.0.0.1:{port}")).expect("url").connect().await.expect("loopback")
}

impl Stack {
    /// Every part up, with a pool of `pool` browsers, on the memory ledger.
    pub async fn start(pool: usize) -> Self {
        Self::start_on(pool, MemoryGrants::default(), Credentials::memory()).await
    }

    /// As [`Stack::start`], with sessions closed after `idle_seconds` unused.
    pub async fn start_idle(pool: usize, idle_seconds: u64) -> Self {
        Self::start_with(pool, MemoryGrants::default(), Credentials::memory(), idle_seconds).await
    }
}

impl Stack<PgGrants> {
    /// Every part up on `db`'s ledger and credentials, as production runs it.
    pub async fn start_pg(pool: usize, db: &crate::TestDb) -> Self {
        let store = ledger::PgStore::with_listener(db.pool(8), db.config.clone());
        Self::start_on(pool, PgGrants::new(store), Credentials::postgres(db.pool(4))).await
    }
}

impl<B: Backend + 'static> Stack<B> {
    /// Every part up on `backend`, with a pool of `pool` browsers.
    pub async fn start_on(pool: usize, backend: B, credentials: Credentials) -> Self {
        Self::start_with(pool, backend, credentials, 1800).await
    }

    /// Every part up on `backend`, with a pool of `pool` browsers closed after `idle_seconds`
    /// unused.
    pub async fn start_with(pool: usize, backend: B, credentials: Credentials, idle_seconds: u64) -> Self {
        need_browser();
        let dir =
            std::env::temp_dir().join(format!("grant-ledger-browser-test-{}", hex::encode(rand::random::<[u8; 8]>())));
        let fixture = Fixture::start(&[LESSON, ELSEWHERE], &dir).await.expect("fixture site");

        for (token, tenant, role, principal) in [
            (WORKER, TENANT, Role::Worker, Some("owner")),
            (RUNTIME, TENANT, Role::Runtime, Some("owner")),
            (GATEWAY, TENANT, Role::Gateway, None),
            (PROFILES, TENANT, Role::Profiles, None),
            (STRANGER, "tenant-2", Role::Worker, Some("someone")),
            (TICKETS, TENANT, Role::Worker, Some("tests-tickets")),
        ] {
            credentials.register(token, tenant, role, principal, None).await.expect("credential");
        }
        // Each service's metrics on a listener of its own, as `grantctl serve` runs them.
        let mut registry = telemetry::Registry::default();
        let metrics = authorizer::AuthorizerMetrics::new(&mut registry);
        let gate = ops::observe::gate_metrics(&mut registry, "grant_ledger.v1.Authorizer");
        let authorizer_metrics = serve_metrics(registry).await;
        let authority = Arc::new(Authority::metered(backend, Policy::empty(), TenantId::new(TENANT).unwrap(), metrics));
        let settings =
            TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/lesson").unwrap() };
        authority.execute(Command::ChangeSettings(settings), "operator").await.expect("settings");
        let mut stops = Vec::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let authorizer_port = listener.local_addr().expect("addr").port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        stops.push(stop);
        let authorizer_service =
            AuthorizerService::new(authority, credentials.clone(), crate::ticket_keys()).with_gate_metrics(gate);
        tokio::spawn(authorizer::service::serve(listener, authorizer_service.clone(), None, async {
            let _ = stopped.await;
        }));

        // The runtime's calls to the authorizer pass the kit's fault proxy (passing all by default).
        let link = crate::fault::Proxy::start(([127, 0, 0, 1], authorizer_port).into()).await;
        let records = dir.join("records");
        let extra = serde_json::to_string(&[fixture.resolver_rule()]).expect("json");
        let env = [
            ("BROWSER_EXTRA_ARGS", extra),
            ("BROWSER_CA_BUNDLE", fixture.ca_bundle.display().to_string()),
            ("BROWSER_POOL_SIZE", pool.to_string()),
            ("RUNTIME_AUTHORIZER_URL", format!("http://127.0.0.1:{}", link.port)),
            ("RUNTIME_AUTHORIZER_TOKEN", RUNTIME.to_owned()),
            ("TASK_RECORDS_DIR", records.display().to_string()),
            ("BROWSER_CALL_TIMEOUT_SECONDS", "8".to_owned()),
            ("BROWSER_IDLE_SECONDS", idle_seconds.to_string()),
            (proto::ticket::KEYS_FILE_VAR, crate::ticket_keys_file(&dir).display().to_string()),
        ];
        let config =
            RuntimeConfig::parse(|k| env.iter().find(|(name, _)| *name == k).map(|(_, v)| v.clone())).expect("config");
        let redeemer = AuthorizerRedeemer::new(config.authorizer.as_ref()).expect("redeemer");
        let mut registry = telemetry::Registry::default();
        browser_runtime::metrics::register(&mut registry);
        let gate = ops::observe::gate_metrics(&mut registry, "browser_runtime.v1.BrowserRuntime");
        let runtime_metrics = serve_metrics(registry).await;
        let served = Arc::new(BrowserRuntime::new(config, credentials, redeemer).with_gate_metrics(gate));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let runtime_port = listener.local_addr().expect("addr").port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(service::serve(listener, Arc::clone(&served), None, async {
            let _ = stopped.await;
        }));
        Self {
            fixture,
            runtime: rt::browser_runtime_client::BrowserRuntimeClient::new(channel(runtime_port).await),
            authorizer: pb::authorizer_client::AuthorizerClient::new(channel(authorizer_port).await),
            served,
            authorizer_service,
            authorizer_port,
            link,
            runtime_port,
            authorizer_metrics,
            runtime_metrics,
            records,
            applied: std::collections::HashMap::new(),
            profiles: std::collections::HashMap::new(),
            chats: std::collections::HashMap::new(),
            keys: crate::ticket_keys(),
            dir,
            runtime_stop: Some((stop, serving)),
            _stops: stops,
        }
    }

    /// Shuts the runtime down as Ctrl-C would, and waits until it has closed its browsers.
    pub async fn shutdown_runtime(&mut self) {
        if let Some((stop, serving)) = self.runtime_stop.take() {
            let _ = stop.send(());
            serving.await.expect("the runtime's task").expect("the runtime served");
        }
    }

    /// Records `profile` as the owner's, as the profiles service does when it makes one.
    pub async fn claim(&mut self, profile: &str) {
        let created = pb::ProfileEventRequest {
            profile_id: profile.into(),
            event: pb::ProfileEvent::Created as i32,
            owner_principal_id: "owner".into(),
        };
        self.authorizer.record_profile_event(with(PROFILES, created)).await.expect("the profile is recorded");
    }

    /// The owner's chat `session` on `profile` (claimed first), with the owner's message that
    /// opens a turn.
    pub async fn chat(&mut self, session: &str, profile: &str) {
        self.claim(profile).await;
        let chat = pb::CreateSessionRequest {
            session_id: session.into(),
            browser_profile_id: profile.into(),
            surface: pb::Surface::Interactive as i32,
            ..Default::default()
        };
        self.authorizer.create_session(with(WORKER, chat)).await.expect("the chat is created");
        self.owner_says(session).await;
    }

    /// The owner's message in `session`, recorded through the gateway: a new turn.
    pub async fn owner_says(&mut self, session: &str) {
        let said = pb::RecordMessageRequest { session_id: session.into(), message_id: "m1".into(), from_owner: true };
        self.authorizer.record_message(with(GATEWAY, said)).await.expect("the owner's message is recorded");
    }

    /// Writes the task record of `run`.
    pub fn record(&self, run: &str, fields: &[(&str, &str)]) {
        let dir = self.records.join(TENANT).join("owner");
        std::fs::create_dir_all(&dir).expect("records dir");
        let map: std::collections::HashMap<_, _> = fields.iter().cloned().collect();
        std::fs::write(dir.join(format!("{run}.json")), serde_json::to_vec(&map).expect("json")).expect("record");
    }

    /// Opens a session on the lesson site at `path`.
    pub async fn open(&mut self, profile: &str, path: &str, max_steps: u32) -> Result<String, Status> {
        let req = rt::OpenSessionRequest {
            browser_profile_id: profile.into(),
            allowed_origins: vec![LESSON_ORIGIN.into()],
            start_url: format!("{LESSON_ORIGIN}{path}"),
            max_steps,
        };
        let session = self.runtime.open_session(with(WORKER, req)).await?.into_inner().session_id;
        self.profiles.insert(session.clone(), profile.to_owned());
        // The chat the tests' own tickets for this session name (on no profile, not the owner's:
        // it is read only for a Stop).
        let chat = format!("tickets-{session}");
        let create = pb::CreateSessionRequest {
            session_id: chat.clone(),
            surface: pb::Surface::Interactive as i32,
            ..Default::default()
        };
        self.authorizer.create_session(crate::bearer(TICKETS, create)).await?;
        self.chats.insert(session.clone(), chat);
        Ok(session)
    }

    /// A snapshot with the run's record values sealed beside it.
    pub async fn observe_run(&mut self, session: &str, run: &str) -> rt::ObserveReply {
        let req = rt::ObserveRequest { session_id: session.into(), run_id: run.into() };
        let o = self.runtime.observe(with(WORKER, req)).await.expect("observe").into_inner();
        self.agrees(session, &o).await;
        o
    }

    /// An observe as the agent makes it, on a page between documents (which may answer that the
    /// page broke the read): not held to the tree, which Chromium rebuilds while a document
    /// comes and goes (seen around a refused speculative load).
    pub async fn try_observe(&mut self, session: &str) -> Result<rt::ObserveReply, Status> {
        let req = rt::ObserveRequest { session_id: session.into(), run_id: String::new() };
        Ok(self.runtime.observe(with(WORKER, req)).await?.into_inner())
    }

    /// Every snapshot the suite takes is held to the browser's own accessibility tree, read
    /// right after it.
    pub async fn observe(&mut self, session: &str) -> rt::ObserveReply {
        self.observe_run(session, "").await
    }

    /// The snapshot against the page's tree as Chromium reports it (`platform::agree`).
    pub async fn agrees(&self, session: &str, o: &rt::ObserveReply) {
        // The browser's own error page is no site's; a capped read lists only the first nodes.
        if !o.url.starts_with("https://") || o.nodes.len() >= browser_runtime::page::MAX_NODES {
            return;
        }
        let h = self.served.devtools(session).await.expect("a running browser");
        let Some(tree) = crate::platform::read(&h).await else { return };
        if let Err(e) = crate::platform::agree(&tree, o) {
            panic!("the snapshot of {} disagrees with the accessibility tree: {e}", o.url);
        }
    }

    /// Sends `req`, numbered as the session's next act unless it carries a sequence, with a
    /// ticket the owner's approval of exactly this act would have given, unless it carries a
    /// ticket or a token already.
    pub async fn act(&mut self, mut req: rt::ActRequest) -> Result<rt::ActReply, Status> {
        // A malformed act goes as it is, for the runtime to refuse.
        if req.ticket.is_none() && req.approval_token.is_empty() && parsed(&req).is_ok() {
            req.ticket = Some(self.ticket(&req, None));
        }
        self.act_bare(req).await
    }

    /// Sends `req` as it is: without a ticket unless it carries one.
    pub async fn act_bare(&mut self, mut req: rt::ActRequest) -> Result<rt::ActReply, Status> {
        let applied = self.applied.get(&req.session_id).copied().unwrap_or(0);
        if req.sequence == 0 {
            req.sequence = applied + 1;
        }
        let reply = self.runtime.act(with(WORKER, req.clone())).await?.into_inner();
        if reply.dispatched {
            self.applied.insert(req.session_id, req.sequence);
        }
        Ok(reply)
    }

    /// Puts on `req` the ticket of a grant allow under `constraint`.
    pub fn grant(&self, req: &mut rt::ActRequest, constraint: pb::DispatchConstraint) {
        req.ticket = Some(self.ticket(req, Some(constraint)));
    }

    /// Puts on `req` the ticket of a grant allow under `constraint` for a click that submits a
    /// form: it binds the form as the page holds it now, read back as the harness reads it.
    pub async fn grant_submit(&mut self, req: &mut rt::ActRequest, constraint: pb::DispatchConstraint) {
        let digest = self.form_digest(req).await;
        self.grant_form(req, constraint, digest);
    }

    /// The keyed digest of the form `req`'s click could submit, read back now beside its run's
    /// record.
    pub async fn form_digest(&mut self, req: &rt::ActRequest) -> Vec<u8> {
        let read = rt::ReadFormRequest {
            session_id: req.session_id.clone(),
            snapshot_id: req.snapshot_id.clone(),
            r#ref: req.r#ref.clone(),
            run_id: req.run_id.clone(),
        };
        let form = self.runtime.read_form(with(WORKER, read)).await.expect("read form").into_inner();
        form.review.expect("a form beside the run's record").digest
    }

    /// Puts on `req` a grant's ticket under `constraint` that binds the form digest `digest`.
    pub fn grant_form(&self, req: &mut rt::ActRequest, constraint: pb::DispatchConstraint, digest: Vec<u8>) {
        let ticket = self.ticket(req, Some(constraint));
        let mut body = self.keys.open(TENANT, &ticket).expect("the kit's own ticket");
        body.action.as_mut().expect("an act").form_digest = digest;
        req.ticket = Some(self.keys.seal(&body));
    }

    /// The ticket the authorizer would seal for `req`: an approval's without a constraint, a
    /// grant's with one. It reads the record value a type types, as the authorizer was shown it.
    pub fn ticket(&self, req: &rt::ActRequest, constraint: Option<pb::DispatchConstraint>) -> pb::DispatchTicket {
        let not_after = time::OffsetDateTime::now_utc() + time::Duration::seconds(60);
        self.ticket_until(req, constraint, not_after)
    }

    /// [`Stack::ticket`], valid until `not_after`.
    pub fn ticket_until(
        &self,
        req: &rt::ActRequest,
        constraint: Option<pb::DispatchConstraint>,
        not_after: time::OffsetDateTime,
    ) -> pb::DispatchTicket {
        let input = parsed(&rt::ActRequest { ticket: None, approval_token: String::new(), ..req.clone() })
            .expect("a well-formed act");
        let text = match &input.action {
            browser_runtime::session::ActAction::Type { field_id } => {
                let file = self.records.join(TENANT).join("owner").join(format!("{}.json", input.run_id));
                let record: std::collections::HashMap<String, String> =
                    std::fs::read(&file).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
                record.get(field_id).cloned()
            }
            _ => None,
        };
        let profile = self.profiles.get(&req.session_id).cloned().unwrap_or_default();
        let expected = Expected {
            tenant: TENANT,
            principal: "owner",
            profile: &profile,
            run_id: &input.run_id,
            snapshot_id: &input.snapshot_id,
            node_ref: &input.node_ref,
            action: &input.action,
            text: text.as_deref(),
            // What the decision read: the node the act names, on the lesson site.
            element_role: input.expected_role.code(),
            element_name: &input.expected_name,
            page_origin: LESSON_ORIGIN,
            now: time::OffsetDateTime::now_utc(),
        };
        let id = hex::encode(rand::random::<[u8; 8]>());
        let chat = self.chats.get(&req.session_id).map_or("", String::as_str);
        self.keys.seal(&ticket::body_for(&self.keys, &expected, (&id, chat), constraint, not_after))
    }

    /// The read-back of the form a click on node `name` of snapshot `o` could submit; with a
    /// run, beside its task record and sealed for a card.
    pub async fn read_form(&mut self, session: &str, o: &rt::ObserveReply, name: &str, run: &str) -> rt::ReadFormReply {
        let (n, _) = node(o, name);
        let req = rt::ReadFormRequest {
            session_id: session.into(),
            snapshot_id: o.snapshot_id.clone(),
            r#ref: n.r#ref.clone(),
            run_id: run.into(),
        };
        self.runtime.read_form(with(WORKER, req)).await.expect("read form").into_inner()
    }

    /// chromedriver's pid for the session (its process group holds the session's Chromium).
    pub async fn driver_pid(&self, session: &str) -> u32 {
        self.served.driver_pid(session).await.expect("a running browser")
    }
}

/// `req` as the runtime reads it, numbered as if it were the next act (the stack numbers it
/// when it sends it).
fn parsed(req: &rt::ActRequest) -> Result<browser_runtime::session::ActInput, Status> {
    service::act_input(rt::ActRequest { sequence: req.sequence.max(1), ..req.clone() })
}

/// The runtime's sealed facts of the node named `name` in a snapshot: what an `Authorize` of an
/// act on it carries.
pub fn sealed<'a>(o: &'a rt::ObserveReply, name: &str) -> &'a pb::SealedFacts {
    let (n, _) = node(o, name);
    o.facts.iter().find(|f| f.r#ref == n.r#ref).and_then(|f| f.sealed.as_ref()).expect("sealed facts")
}

/// The runtime's sealed value of record field `field`, observed with its run.
pub fn record_text<'a>(o: &'a rt::ObserveReply, field: &str) -> &'a pb::SealedText {
    o.texts.iter().find(|t| t.field_id == field).and_then(|t| t.sealed.as_ref()).expect("a sealed record text")
}

/// The node named `name` in a snapshot, with its facts.
pub fn node<'a>(o: &'a rt::ObserveReply, name: &str) -> (&'a rt::Node, &'a pb::ElementFacts) {
    let n = o.nodes.iter().find(|n| n.name == name).unwrap_or_else(|| {
        let names: Vec<_> = o.nodes.iter().map(|n| n.name.as_str()).collect();
        panic!("no node named {name:?} in {names:?}")
    });
    let f = o.facts.iter().find(|f| f.r#ref == n.r#ref).and_then(|f| f.element.as_ref()).expect("facts");
    (n, f)
}

/// A click on `node` of snapshot `o` as the model would send it.
pub fn click(session: &str, o: &rt::ObserveReply, node: &rt::Node) -> rt::ActRequest {
    rt::ActRequest {
        session_id: session.into(),
        run_id: "run-1".into(),
        snapshot_id: o.snapshot_id.clone(),
        r#ref: node.r#ref.clone(),
        expected_name: node.name.clone(),
        expected_role: node.role,
        wait_for: rt::WaitFor::Settle as i32,
        action: Some(rt::act_request::Action::Click(rt::Click {})),
        ..Default::default()
    }
}

/// The constraint the authorizer sends with a standing-grant allow on the lesson origin.
pub fn standing_constraint() -> pb::DispatchConstraint {
    pb::DispatchConstraint {
        grant_kind: pb::GrantKind::Standing as i32,
        path_prefix: "/".into(),
        consequence_ceiling: classifier::constraint::GrantKind::Standing.consequence_ceiling().into(),
        max_text_chars: classifier::constraint::GrantKind::Standing.max_text_chars(),
        ..task_constraint()
    }
}

/// The constraint the authorizer sends with a task-grant allow on the lesson scope.
pub fn task_constraint() -> pb::DispatchConstraint {
    let not_after = time::OffsetDateTime::now_utc() + time::Duration::minutes(30);
    pb::DispatchConstraint {
        grant_kind: pb::GrantKind::Task as i32,
        origins: vec![LESSON_ORIGIN.into()],
        path_prefix: "/lesson".into(),
        not_after: not_after.format(&time::format_description::well_known::Rfc3339).expect("time"),
        consequence_ceiling: classifier::constraint::GrantKind::Task.consequence_ceiling().into(),
        max_text_chars: classifier::constraint::GrantKind::Task.max_text_chars(),
    }
}
