//! `grantctl-bench gateway`: the owner's routes through the gateway beside the gRPC call each
//! wraps, in the same run, against one authorizer and one gateway process of their own, both over
//! TLS as in production. Each client holds one keep-alive connection (HTTP/1.1 to the gateway, or
//! its own HTTP/2 channel to the authorizer); the two kinds alternate in short slices so that the
//! machine's noise hits both alike.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use credentials::{Credentials, Role, Scope, new_token};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use pb::authorizer_client::AuthorizerClient;
use proto::v1 as pb;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use uuid::Uuid;

use super::{Samples, Scratch};

const TENANT: &str = "bench";
const OWNER: &str = "owner";
/// Slices per kind per round, so neither kind runs only in the quiet or only in the noisy half.
const SLICES: u32 = 4;

/// One route and the gRPC call it wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    ListGrants,
    ListPending,
    Resolve,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Self::ListGrants => "list grants",
            Self::ListPending => "list pending approvals",
            Self::Resolve => "resolve (approve_once)",
        }
    }
}

#[derive(Clone)]
struct Fixture {
    ca_pem: String,
    gateway_token: String,
    owner_token: String,
    worker: String,
    profiles: String,
    keys: Arc<proto::ticket::Keyring>,
    /// The session whose grant and pending cards the list routes read.
    listed: String,
    /// Pending cards for the resolve rounds, each answered once.
    cards: Arc<Mutex<VecDeque<String>>>,
}

fn bearer<T>(m: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(m);
    r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ascii"));
    r
}

impl Fixture {
    fn as_gateway<T>(&self, m: T) -> tonic::Request<T> {
        let mut r = bearer(m, &self.gateway_token);
        r.metadata_mut().insert("x-principal-id", OWNER.parse().expect("ascii"));
        r.metadata_mut().insert(
            "x-owner-scopes",
            "approval.resolve,browser.grant.read,browser.grant.write".parse().expect("ascii"),
        );
        r
    }

    async fn grpc(&self, endpoint: &str) -> Result<AuthorizerClient<Channel>> {
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem)).domain_name("localhost");
        Ok(AuthorizerClient::new(Channel::from_shared(endpoint.to_owned())?.tls_config(tls)?.connect().await?))
    }

    /// A session with the owner's message recorded, on profile `p`.
    async fn session(&self, c: &mut AuthorizerClient<Channel>) -> Result<String> {
        let session = format!("bench-{}", Uuid::new_v4().simple());
        let create = pb::CreateSessionRequest {
            session_id: session.clone(),
            browser_profile_id: "p".into(),
            surface: pb::Surface::Interactive as i32,
            ..Default::default()
        };
        c.create_session(bearer(create, &self.worker)).await?;
        let said = pb::RecordMessageRequest { session_id: session.clone(), message_id: "m".into(), from_owner: true };
        c.record_message(self.as_gateway(said)).await?;
        Ok(session)
    }

    /// A new pending card in `session`: its id and offer.
    async fn card(&self, c: &mut AuthorizerClient<Channel>, session: &str) -> Result<(String, Option<pb::Offer>)> {
        let mut r = pb::AuthorizeRequest {
            session_id: session.into(),
            run: Some(pb::RunContext { run_id: "run".into(), interactive: true, top_level: true }),
            tool_call_id: format!("call-{}", Uuid::new_v4().simple()),
            turn_tool_calls: vec!["browser.act".into()],
            agent_version: "bench".into(),
            action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
            snapshot_id: "snap_000000000001".into(),
            node_ref: "n1".into(),
            ..Default::default()
        };
        let read_ms =
            i64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or_default();
        r.facts = Some(self.keys.seal_facts(&pb::FactsBody {
            tenant_id: TENANT.into(),
            principal_id: OWNER.into(),
            browser_profile_id: "p".into(),
            snapshot_id: r.snapshot_id.clone(),
            node_ref: r.node_ref.clone(),
            page_url: "https://www.lesson.test/lesson/unit-1".into(),
            page_title: "Unit 1".into(),
            // Named "Next" (a routine button): asks, and is offered the lesson scope.
            element: Some(super::button("Next")),
            read_ms,
        }));
        let reply = c.authorize(bearer(r, &self.worker)).await?.into_inner();
        match reply.decision {
            Some(pb::authorize_reply::Decision::RequireApproval(card)) => Ok((card.approval_id, card.offer)),
            other => bail!("expected a card, got {other:?}"),
        }
    }
}

/// An HTTP/1.1 keep-alive connection to the gateway over TLS.
struct Http {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    port: u16,
    ca_pem: String,
}

impl Http {
    async fn connect(port: u16, ca_pem: &str) -> Result<Self> {
        Ok(Self { sender: Self::open(port, ca_pem).await?, port, ca_pem: ca_pem.to_owned() })
    }

    async fn open(port: u16, ca_pem: &str) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert?)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from("localhost")?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok(sender)
    }

    async fn send(&mut self, method: &str, path: &str, token: &str, body: Option<String>) -> Result<()> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("authorization", format!("Bearer {token}"));
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        // The gateway closes a keep-alive connection left idle (between rounds): open another,
        // as any client does. The warm-up round takes the cost.
        if self.sender.ready().await.is_err() {
            self.sender = Self::open(self.port, &self.ca_pem).await?;
            self.sender.ready().await?;
        }
        let reply = self.sender.send_request(req).await?;
        let status = reply.status();
        let body = reply.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!("the gateway answered {status}: {}", String::from_utf8_lossy(&body));
        }
        Ok(())
    }
}

/// Each client's connection of one kind.
enum Client {
    Grpc(AuthorizerClient<Channel>),
    Http(Http),
}

async fn call(client: &mut Client, route: Route, f: &Fixture) -> Result<()> {
    match (client, route) {
        (Client::Grpc(c), Route::ListGrants) => {
            let req = pb::ListGrantsRequest { session_id: f.listed.clone(), active_only: false, min_position: None };
            c.list_grants(f.as_gateway(req)).await?;
        }
        (Client::Grpc(c), Route::ListPending) => {
            let req = pb::ListApprovalsRequest { session_id: f.listed.clone(), pending_only: true, min_position: None };
            c.list_approvals(f.as_gateway(req)).await?;
        }
        (Client::Grpc(c), Route::Resolve) => {
            let card = f.cards.lock().expect("cards").pop_front().context("out of cards")?;
            let req = pb::ResolveApprovalRequest {
                approval_id: card,
                resolution: pb::Resolution::ApproveOnce as i32,
                ..Default::default()
            };
            c.resolve_approval(f.as_gateway(req)).await?;
        }
        (Client::Http(h), Route::ListGrants) => {
            h.send("GET", &format!("/v1/browser-task-grants?session_id={}", f.listed), &f.owner_token, None).await?;
        }
        (Client::Http(h), Route::ListPending) => {
            let path = format!("/v1/sessions/{}/approvals?pending_only=true", f.listed);
            h.send("GET", &path, &f.owner_token, None).await?;
        }
        (Client::Http(h), Route::Resolve) => {
            let card = f.cards.lock().expect("cards").pop_front().context("out of cards")?;
            let body = r#"{"resolution":"approve_once"}"#.to_owned();
            h.send("POST", &format!("/v1/approvals/{card}/resolve"), &f.owner_token, Some(body)).await?;
        }
    }
    Ok(())
}

/// `clients` connections of each kind, used in turn: slices of `slice` each.
async fn round(
    grpc: &mut [Client],
    http: &mut [Client],
    route: Route,
    f: &Fixture,
    slice: Duration,
) -> Result<(Samples, Samples)> {
    let (mut g, mut h) = (Samples::default(), Samples::default());
    for _ in 0..SLICES {
        g.merge(slice_of(grpc, route, f, slice).await?);
        h.merge(slice_of(http, route, f, slice).await?);
    }
    Ok((g, h))
}

async fn slice_of(clients: &mut [Client], route: Route, f: &Fixture, slice: Duration) -> Result<Samples> {
    let start = Instant::now();
    let deadline = start + slice;
    let results = futures_util::future::join_all(clients.iter_mut().map(|c| async move {
        let mut latencies = Vec::new();
        while Instant::now() < deadline {
            let t = Instant::now();
            call(c, route, f).await?;
            latencies.push(t.elapsed());
        }
        Ok::<_, anyhow::Error>(latencies)
    }))
    .await;
    let mut s = Samples::default();
    for r in results {
        s.latencies.extend(r?);
    }
    s.elapsed = start.elapsed();
    Ok(s)
}

pub async fn run(url: &str, connections: &[usize], duration: Duration) -> Result<String> {
    let scratch = Scratch::create(url).await?;
    let db_url = format!("{}/{}", url.rsplit_once('/').map_or(url, |(base, _)| base), scratch.name);
    let result = run_on(scratch.config.clone(), &db_url, connections, duration).await;
    scratch.drop_now().await?;
    result
}

async fn run_on(
    config: tokio_postgres::Config,
    db_url: &str,
    connections: &[usize],
    duration: Duration,
) -> Result<String> {
    let stack = Stack::start(config, db_url).await?;
    measure(&stack, connections, duration).await
}

/// The authorizer and gateway serving the bench, the fixture's credentials, and the listed
/// session with its active grant. The children end when it is dropped.
struct Stack {
    fixture: Fixture,
    endpoint: String,
    gateway_port: u16,
    _authorizer: tokio::process::Child,
    _gateway: tokio::process::Child,
}

impl Stack {
    async fn start(config: tokio_postgres::Config, db_url: &str) -> Result<Self> {
        super::lesson_settings(db_url, TENANT).await?;
        let pool = ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?;
        let credentials = Credentials::postgres(pool.clone());
        let (worker, gateway_token, profiles) = (new_token(), new_token(), new_token());
        credentials.register(&worker, TENANT, Role::Worker, Some(OWNER), None).await?;
        credentials.register(&gateway_token, TENANT, Role::Gateway, None, None).await?;
        credentials.register(&profiles, TENANT, Role::Profiles, None, None).await?;
        let scopes = [Scope::ApprovalResolve, Scope::GrantRead, Scope::GrantWrite];
        let (_, owner_token) =
            gateway::Owners::new(pool).create(TENANT, OWNER, &scopes, Duration::from_secs(3600)).await?;

        let super::Pki { dir, ca, cert, key, keys_file, key_line, ca_pem } = super::Pki::new("gateway")?;
        let creds_file = dir.join("gateway-credentials");
        std::fs::write(&creds_file, format!("{TENANT} {gateway_token}\n"))?;
        let free = || -> Result<u16> { Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()) };
        let (authorizer_port, gateway_port) = (free()?, free()?);
        let path = |p: &std::path::Path| p.display().to_string();
        let _authorizer = super::spawn_serving(
            &["serve", "authorizer"],
            &[
                ("DATABASE_URL", db_url.to_owned()),
                ("AUTHORIZER_LISTEN", format!("127.0.0.1:{authorizer_port}")),
                // Ports of their own: a stack already running on this machine holds the defaults.
                ("AUTHORIZER_METRICS_LISTEN", "127.0.0.1:0".into()),
                ("AUTHORIZER_TLS_CERT", path(&cert)),
                ("AUTHORIZER_TLS_KEY", path(&key)),
                (proto::ticket::KEYS_FILE_VAR, path(&keys_file)),
            ],
        )
        .await?;
        let _gateway = super::spawn_serving(
            &["serve", "gateway"],
            &[
                ("DATABASE_URL", db_url.to_owned()),
                ("GATEWAY_LISTEN", format!("127.0.0.1:{gateway_port}")),
                ("GATEWAY_METRICS_LISTEN", "127.0.0.1:0".into()),
                ("GATEWAY_TLS_CERT", path(&cert)),
                ("GATEWAY_TLS_KEY", path(&key)),
                ("GATEWAY_AUTHORIZER_URL", format!("https://localhost:{authorizer_port}")),
                ("GATEWAY_AUTHORIZER_CA", path(&ca)),
                ("GATEWAY_CREDENTIALS_FILE", path(&creds_file)),
                ("GATEWAY_RATE_PER_MINUTE", "1000000".into()),
            ],
        )
        .await?;
        std::fs::remove_dir_all(&dir)?;

        let endpoint = format!("https://localhost:{authorizer_port}");
        let fixture = Fixture {
            ca_pem,
            gateway_token,
            owner_token,
            worker,
            profiles,
            keys: Arc::new(proto::ticket::Keyring::parse(&key_line).map_err(anyhow::Error::msg)?),
            listed: String::new(),
            cards: Arc::default(),
        };
        let mut setup = fixture.grpc(&endpoint).await?;
        let claim = pb::ProfileEventRequest {
            profile_id: "p".into(),
            event: pb::ProfileEvent::Created as i32,
            owner_principal_id: OWNER.into(),
        };
        setup.record_profile_event(bearer(claim, &fixture.profiles)).await?;
        // The listed session: one active grant, then three pending cards it did not cover.
        let listed = fixture.session(&mut setup).await?;
        let (first, offer) = fixture.card(&mut setup, &listed).await?;
        let offer = offer.context("the lesson scope is offered")?;
        let grant = pb::ResolveApprovalRequest {
            approval_id: first,
            resolution: pb::Resolution::ApproveForTask as i32,
            offered_origin: offer.origin,
            offered_path_prefix: offer.path_prefix,
        };
        setup.resolve_approval(fixture.as_gateway(grant)).await?;
        let fixture = Fixture { listed, ..fixture };
        Ok(Self { fixture, endpoint, gateway_port, _authorizer, _gateway })
    }
}

/// Each route through gRPC and through the gateway, side by side, at each connection count.
async fn measure(stack: &Stack, connections: &[usize], duration: Duration) -> Result<String> {
    let Stack { fixture, endpoint, gateway_port, .. } = stack;
    let (endpoint, gateway_port) = (endpoint.as_str(), *gateway_port);
    let mut setup = fixture.grpc(endpoint).await?;
    let slice = duration / (2 * SLICES);
    let mut out = String::from(
        "| connections | route | gRPC p50 / p99 µs | gateway p50 / p99 µs | gRPC/s | gateway/s | p50 ratio | throughput ratio |\n\
         |---:|---|---|---|---:|---:|---:|---:|\n",
    );
    for &n in connections {
        let mut grpc = Vec::new();
        let mut http = Vec::new();
        for _ in 0..n {
            grpc.push(Client::Grpc(fixture.grpc(endpoint).await?));
            http.push(Client::Http(Http::connect(gateway_port, &fixture.ca_pem).await?));
        }
        let mut list_pace = 0.0_f64;
        for route in [Route::ListGrants, Route::ListPending, Route::Resolve] {
            if route == Route::Resolve {
                // A resolve writes, so it runs no faster than a list read: the faster list's pace
                // over the whole round, and a margin, is enough cards for both kinds.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a positive count
                let want = (list_pace * duration.as_secs_f64() * 1.5) as usize + 200;
                let sessions: Vec<String> = {
                    let mut v = Vec::new();
                    for _ in 0..16 {
                        v.push(fixture.session(&mut setup).await?);
                    }
                    v
                };
                make_cards(fixture, endpoint, &sessions, want).await?;
            }
            // Warm both paths, then measure.
            round(&mut grpc, &mut http, route, fixture, Duration::from_millis(50)).await?;
            let (g, h) = round(&mut grpc, &mut http, route, fixture, slice).await?;
            if route == Route::ListPending {
                list_pace = g.throughput().max(h.throughput());
            }
            let p50 = h.percentile(50).as_secs_f64() / g.percentile(50).as_secs_f64().max(1e-9);
            let tput = h.throughput() / g.throughput().max(1e-9);
            writeln!(
                out,
                "| {n} | {} | {} / {} | {} / {} | {:.0} | {:.0} | {p50:.2}× | {tput:.2}× |",
                route.name(),
                g.percentile(50).as_micros(),
                g.percentile(99).as_micros(),
                h.percentile(50).as_micros(),
                h.percentile(99).as_micros(),
                g.throughput(),
                h.throughput(),
            )?;
        }
    }
    Ok(out)
}

/// `want` pending cards over `sessions`, made by 16 concurrent workers.
async fn make_cards(f: &Fixture, endpoint: &str, sessions: &[String], want: usize) -> Result<()> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, session) in sessions.iter().enumerate() {
        let (f, session, endpoint) = (f.clone(), session.clone(), endpoint.to_owned());
        let share = want / sessions.len() + usize::from(i < want % sessions.len());
        tasks.push(tokio::spawn(async move {
            let mut c = f.grpc(&endpoint).await?;
            for _ in 0..share {
                let (card, _) = f.card(&mut c, &session).await?;
                f.cards.lock().expect("cards").push_back(card);
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    eprintln!("{want} cards made in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
