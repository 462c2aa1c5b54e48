//! The owner's side of the stack for tests: two authorizer replicas and two gateway replicas on
//! one database, each on a real loopback socket, with tenant [`ON`] (task grants on, the lesson
//! scope) and tenant [`OFF`] (the flag off), and the worker's calls that make approval cards.

use std::collections::HashMap;
use std::sync::Arc;

use authorizer::policy::Policy;
use authorizer::service::AuthorizerService;
use authorizer::{Authority, PgGrants};
use credentials::{Credentials, Role, Scope, new_token};
use ops::serve::{DeploymentSettings, apply_settings};
use proto::v1 as pb;
use proto::v1::authorize_reply::Decision;
use tonic::transport::Channel;

use crate::TestDb;
use crate::http::Call;

/// The tenant whose task grants are on, over [`SCOPE`].
pub const ON: &str = "tenant-on";
/// The tenant whose task-grant flag is off.
pub const OFF: &str = "tenant-off";
pub const SCOPE: &str = "https://www.lesson.test/lesson";

/// One tenant's service credentials.
#[derive(Debug, Clone)]
pub struct TenantTokens {
    pub tenant: String,
    /// Worker credentials by the owner they act as.
    pub workers: HashMap<String, String>,
    pub gateway: String,
    pub profiles: String,
}

#[derive(Debug)]
pub struct GatewayStack {
    pub db: TestDb,
    /// The two gateway replicas' ports; replica `i` calls authorizer replica `i`.
    pub gateways: [u16; 2],
    pub authorizers: [Channel; 2],
    /// The authorizer replicas' ports.
    pub authorizer_ports: [u16; 2],
    pub tenants: HashMap<String, TenantTokens>,
    _stops: Vec<tokio::sync::oneshot::Sender<()>>,
}

/// Settings with the flag on and the lesson scope, or off.
pub fn settings(on: bool) -> DeploymentSettings {
    let s = if on {
        authorizer::scopes::settings(Some("true"), Some(SCOPE))
    } else {
        authorizer::scopes::settings(None, None)
    };
    DeploymentSettings { settings: s.expect("settings"), standing: None, policy_version: Some(Policy::empty().version) }
}

impl GatewayStack {
    /// The stack, each gateway refusing past `rate_per_minute` requests per token.
    pub async fn start(rate_per_minute: u32) -> Self {
        let db = TestDb::new().await;
        let credentials = Credentials::postgres(db.pool(4));
        let mut tenants = HashMap::new();
        for tenant in [ON, OFF] {
            let t = TenantTokens {
                tenant: tenant.into(),
                workers: ["owner-a", "owner-b"].iter().map(|o| ((*o).to_owned(), new_token())).collect(),
                gateway: new_token(),
                profiles: new_token(),
            };
            for (owner, token) in &t.workers {
                credentials.register(token, tenant, Role::Worker, Some(owner), None).await.unwrap();
            }
            credentials.register(&t.gateway, tenant, Role::Gateway, None, None).await.unwrap();
            credentials.register(&t.profiles, tenant, Role::Profiles, None, None).await.unwrap();
            apply_settings(&db.url(), tenant, settings(tenant == ON)).await.unwrap();
            tenants.insert(tenant.to_owned(), t);
        }
        let mut stops = Vec::new();
        let mut authorizer_ports = Vec::new();
        for _ in 0..2 {
            let store = ledger::PgStore::with_listener(db.pool(8), db.config.clone());
            let tenant = ledger::TenantId::new(ON).unwrap();
            let authority = Arc::new(Authority::new(PgGrants::new(store), Policy::empty(), tenant));
            let service = AuthorizerService::new(authority, credentials.clone(), crate::ticket_keys());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            authorizer_ports.push(listener.local_addr().unwrap().port());
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            stops.push(stop);
            tokio::spawn(authorizer::service::serve(listener, service, None, async {
                let _ = stopped.await;
            }));
        }
        let mut authorizers = Vec::new();
        let mut gateways = Vec::new();
        for port in &authorizer_ports {
            let url = format!("http://127.0.0.1:{port}");
            authorizers.push(Channel::from_shared(url.clone()).unwrap().connect().await.unwrap());
            let link = gateway::AuthorizerLink {
                url,
                ca_pem: None,
                credentials: tenants.values().map(|t| (t.tenant.clone(), t.gateway.clone())).collect(),
            };
            gateways.push(Self::serve_gateway(&db, &link, rate_per_minute, &mut stops).await);
        }
        Self {
            db,
            gateways: [gateways[0], gateways[1]],
            authorizers: [authorizers[0].clone(), authorizers[1].clone()],
            authorizer_ports: [authorizer_ports[0], authorizer_ports[1]],
            tenants,
            _stops: stops,
        }
    }

    /// One more gateway replica on `link`; its port.
    pub async fn serve_gateway(
        db: &TestDb,
        link: &gateway::AuthorizerLink,
        rate_per_minute: u32,
        stops: &mut Vec<tokio::sync::oneshot::Sender<()>>,
    ) -> u16 {
        Self::serve_gateway_with(db, link, None, rate_per_minute, stops).await
    }

    /// One more gateway replica on `link`, showing live tabs through the runtime at `runtime`;
    /// its port.
    pub async fn serve_gateway_with(
        db: &TestDb,
        link: &gateway::AuthorizerLink,
        runtime: Option<&gateway::RuntimeLink>,
        rate_per_minute: u32,
        stops: &mut Vec<tokio::sync::oneshot::Sender<()>>,
    ) -> u16 {
        let gw = gateway::Gateway::new(db.config.clone(), link, gateway::RateLimit::per_minute(rate_per_minute), false)
            .unwrap();
        let gw = match runtime {
            Some(r) => gw.with_runtime(r).unwrap(),
            None => gw,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        stops.push(stop);
        tokio::spawn(gateway::serve(listener, gw, None, async {
            let _ = stopped.await;
        }));
        port
    }

    /// A gateway replica whose authorizer is at `url` (one that does not answer, say).
    pub async fn gateway_to(&mut self, url: &str) -> u16 {
        let link = gateway::AuthorizerLink {
            url: url.into(),
            ca_pem: None,
            credentials: self.tenants.values().map(|t| (t.tenant.clone(), t.gateway.clone())).collect(),
        };
        Self::serve_gateway(&self.db, &link, 10_000, &mut self._stops).await
    }

    pub fn owners(&self) -> gateway::Owners {
        gateway::Owners::new(self.db.pool(2))
    }

    /// An owner token of `principal` in `tenant` with `scopes`: its id and secret.
    pub async fn token(&self, tenant: &str, principal: &str, scopes: &[Scope]) -> (uuid::Uuid, String) {
        let (t, secret) =
            self.owners().create(tenant, principal, scopes, std::time::Duration::from_secs(3600)).await.unwrap();
        (t.token_id, secret)
    }

    /// A request to gateway replica `replica`.
    pub fn call(&self, replica: usize, method: &str, path: &str) -> Call {
        Call::new(self.gateways[replica], method, path)
    }

    /// The authorizer of `replica`, as a client.
    pub fn client(&self, replica: usize) -> pb::authorizer_client::AuthorizerClient<Channel> {
        pb::authorizer_client::AuthorizerClient::new(self.authorizers[replica].clone())
    }

    /// A chat session of `owner` in `tenant` on its own browser profile, with the owner's message
    /// recorded (so the turn is the owner's).
    pub async fn session(&self, tenant: &str, owner: &str, session: &str) {
        let t = &self.tenants[tenant];
        let mut c = self.client(0);
        let profile = format!("profile-{session}");
        let claim = pb::ProfileEventRequest {
            profile_id: profile.clone(),
            event: pb::ProfileEvent::Created as i32,
            owner_principal_id: owner.into(),
        };
        c.record_profile_event(crate::bearer(&t.profiles, claim)).await.unwrap();
        let create = pb::CreateSessionRequest {
            session_id: session.into(),
            browser_profile_id: profile,
            surface: pb::Surface::Interactive as i32,
            ..Default::default()
        };
        c.create_session(crate::bearer(&t.workers[owner], create)).await.unwrap();
        let said = pb::RecordMessageRequest { session_id: session.into(), message_id: "m1".into(), from_owner: true };
        c.record_message(crate::as_owner(&t.gateway, owner, said)).await.unwrap();
    }

    /// The worker asks to click the lesson's button `name` in `session`: the authorizer's decision.
    pub async fn act(&self, tenant: &str, owner: &str, session: &str, name: &str) -> Decision {
        let t = &self.tenants[tenant];
        let req = pb::AuthorizeRequest {
            session_id: session.into(),
            run: Some(pb::RunContext { run_id: "run".into(), interactive: true, top_level: true }),
            tool_call_id: format!("call-{}", uuid::Uuid::new_v4().simple()),
            turn_tool_calls: vec!["browser.act".into()],
            agent_version: "agent-1".into(),
            element: Some(pb::ElementFacts {
                role: "button".into(),
                name: name.into(),
                visible_text: name.into(),
                field_kind: Some(pb::FieldKind::None as i32),
                download: Some(false),
                disabled: Some(false),
                truncated: Some(false),
                nav_targets_carried: true,
                ..Default::default()
            }),
            page_url: "https://www.lesson.test/lesson/unit-1".into(),
            page_title: "Unit 1".into(),
            action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
            snapshot_id: "snap-1".into(),
            node_ref: "e1".into(),
            ..Default::default()
        };
        let req = crate::sealed(tenant, owner, &format!("profile-{session}"), req);
        let reply = self.client(0).authorize(crate::bearer(&t.workers[owner], req)).await.unwrap();
        reply.into_inner().decision.expect("a decision")
    }

    /// A pending card in `session`: its id and offer.
    pub async fn card(&self, tenant: &str, owner: &str, session: &str) -> (String, Option<pb::Offer>) {
        match self.act(tenant, owner, session, "Next").await {
            Decision::RequireApproval(r) => (r.approval_id, r.offer),
            other => panic!("expected a card, got {other:?}"),
        }
    }

    /// Every event in the ledger.
    pub async fn events(&self) -> i64 {
        self.db.client().await.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get(0)
    }

    /// Brings the audit view up to the log.
    pub async fn project(&self) {
        let worker = projections::worker::Worker::new(
            projections::Projection::AuditLog,
            self.db.config.clone(),
            self.db.store(2),
        );
        let mut client = worker.connect().await.unwrap();
        while worker.step(&mut client).await.unwrap() > 0 {}
    }
}
