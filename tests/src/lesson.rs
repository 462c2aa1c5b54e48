//! The whole product on one database for a lesson driven through the harness: the authorizer
//! on PostgreSQL, the runtime on the fixture site, the projection workers and the gateway, each
//! service's metrics served as `grantctl serve` serves them.

use std::time::Duration;

use agent::model::Scripted;
use agent::run::{Clients, Task, run};
use authorizer::PgGrants;
use credentials::Scope;

use crate::browser::{GATEWAY, LESSON, Stack, TENANT, WORKER};

/// Every part of the product on one database (the gateway on plain loopback, each service's
/// metrics on a listener of its own), the owner's chat `s1` on profile-1.
#[derive(Debug)]
pub struct Lesson {
    pub db: crate::TestDb,
    pub stack: Stack<PgGrants>,
    pub gateway: u16,
    /// Where the gateway's and the harness's metrics are served.
    pub gateway_metrics: std::net::SocketAddr,
    pub harness_metrics: std::net::SocketAddr,
    /// Each run's step budget (20 unless a test sets it).
    pub max_steps: u32,
    _stops: Vec<tokio::sync::oneshot::Sender<()>>,
    _workers: tokio::sync::watch::Sender<bool>,
}

impl Lesson {
    /// The stack with `pages` (path and HTML) on the lesson's site.
    pub async fn start(pages: &[(&str, &str)]) -> Self {
        let db = crate::TestDb::new().await;
        let mut stack = Stack::start_pg(1, &db).await;
        for (path, html) in pages {
            stack.fixture.page(LESSON, path, html);
        }
        stack.chat("s1", "profile-1").await;
        let link = gateway::AuthorizerLink {
            url: format!("http://127.0.0.1:{}", stack.authorizer_port),
            ca_pem: None,
            credentials: [(TENANT.to_owned(), GATEWAY.to_owned())].into_iter().collect(),
        };
        let mut stops = Vec::new();
        let runtime = gateway::RuntimeLink { url: format!("http://127.0.0.1:{}", stack.runtime_port), ca_pem: None };
        let gateway =
            crate::gateway::GatewayStack::serve_gateway_with(&db, &link, Some(&runtime), 10_000, &mut stops).await;
        // The projection workers, as `grantctl serve projections` runs them: the activity's source.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        for p in projections::Projection::ALL {
            let worker = projections::worker::Worker::new(p, db.config.clone(), db.store(2));
            let mut stopped = stopped.clone();
            tokio::spawn(worker.run(async move {
                let _ = stopped.wait_for(|s| *s).await;
            }));
        }
        let mut registry = telemetry::Registry::default();
        gateway::metrics::register(&mut registry);
        let gateway_metrics = crate::browser::serve_metrics(registry).await;
        let mut registry = telemetry::Registry::default();
        agent::metrics::register(&mut registry);
        let harness_metrics = crate::browser::serve_metrics(registry).await;
        Lesson { db, stack, gateway, gateway_metrics, harness_metrics, max_steps: 20, _stops: stops, _workers: stop }
    }

    /// The owner's one-time sign-in link, landing on chat `s1`.
    pub async fn sign_in_link(&self) -> String {
        let owners = gateway::Owners::new(self.db.pool(2));
        let scopes = [Scope::ApprovalResolve, Scope::GrantRead, Scope::GrantWrite];
        let (token, _) = owners.create(TENANT, "owner", &scopes, Duration::from_secs(3600)).await.unwrap();
        let code = owners.link(TENANT, token.token_id).await.unwrap();
        format!("http://127.0.0.1:{}/sign-in?code={code}&session=s1", self.gateway)
    }

    /// An API token of `principal` that may answer cards.
    pub async fn token(&self, principal: &str) -> String {
        let owners = gateway::Owners::new(self.db.pool(2));
        let (_, secret) =
            owners.create(TENANT, principal, &[Scope::ApprovalResolve], Duration::from_secs(3600)).await.unwrap();
        secret
    }

    /// A run of `model` from `/lesson/1`, in the background.
    pub async fn run(&mut self, run_id: &str, model: Scripted) -> tokio::task::JoinHandle<agent::run::Outcome> {
        self.run_from("/lesson/1", run_id, &[], model).await
    }

    /// A run of `model` from `path` with the task record's `fields`, in the background.
    pub async fn run_from(
        &mut self,
        path: &str,
        run_id: &str,
        fields: &[(&str, &str)],
        model: Scripted,
    ) -> tokio::task::JoinHandle<agent::run::Outcome> {
        self.stack.record(run_id, fields);
        let browser_session = self.stack.open("profile-1", path, 50).await.unwrap();
        let mut clients = Clients {
            runtime: self.stack.runtime.clone(),
            authorizer: self.stack.authorizer.clone(),
            bearer: format!("Bearer {WORKER}").parse().unwrap(),
            request_id: None,
        };
        let task = Task {
            chat_session: "s1".into(),
            browser_session,
            run_id: run_id.into(),
            subgoals: vec!["Finish the lesson".into()],
            field_ids: fields.iter().map(|(id, _)| (*id).to_owned()).collect(),
            max_steps: self.max_steps,
            agent_version: "agent-1".into(),
            approval_wait: Duration::from_secs(60),
            cards: None,
            close_at_end: false,
            goal: "Finish the lesson".into(),
            org_name: "Ada".into(),
            portal_origin: "https://www.lesson.test".into(),
        };
        let mut model = model;
        tokio::spawn(async move {
            let outcome = run(&mut clients, &task, &mut model).await.expect("the run");
            // The pool holds one browser: the next run's needs this one closed.
            let close = proto::runtime::CloseSessionRequest { session_id: task.browser_session.clone() };
            match clients.runtime.close_session(clients.req(close)).await {
                Ok(_) => {}
                // Taken over: the tab is the owner's now, and closes when the owner is done.
                Err(s) if s.code() == tonic::Code::Aborted => {}
                Err(e) => panic!("the run's browser does not close: {e:?}"),
            }
            outcome
        })
    }
}
