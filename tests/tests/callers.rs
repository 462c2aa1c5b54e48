//! Hostile callers over the real socket, against the authorizer on PostgreSQL and the runtime:
//! every field of every request message refused when it breaks its limit (the cases generated
//! from the descriptors), headers past their bounds, bodies of unauthenticated callers never
//! read, another owner's browser profile, and a flood of idle connections.

use std::sync::Arc;
use std::time::Duration;

use authorizer::Authority;
use authorizer::PgGrants;
use authorizer::policy::Policy;
use authorizer::service::AuthorizerService;
use credentials::{Credentials, Role, new_token};
use prost::Message;
use prost::bytes::{Buf, BufMut};
use prost_reflect::{Kind, MessageDescriptor};
use proto::checked::Checker;
use proto::limits::{Allowed, rule};
use proto::v1 as pb;
use tests::TestDb;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

const TENANT: &str = "tenant-1";

struct Stack {
    db: TestDb,
    authorizer: Channel,
    authorizer_port: u16,
    ca: String,
    runtime: Channel,
    runtime_port: u16,
    worker_a: String,
    worker_b: String,
    gateway: String,
    profiles: String,
    runtime_token: String,
    _stops: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl Stack {
    async fn start() -> Self {
        let db = TestDb::new().await;
        let credentials = Credentials::postgres(db.pool(4));
        let (worker_a, worker_b, gateway, profiles, runtime_token) =
            (new_token(), new_token(), new_token(), new_token(), new_token());
        for (t, role, principal) in [
            (&worker_a, Role::Worker, Some("owner-a")),
            (&worker_b, Role::Worker, Some("owner-b")),
            (&gateway, Role::Gateway, None),
            (&profiles, Role::Profiles, None),
            (&runtime_token, Role::Runtime, Some("owner-a")),
        ] {
            credentials.register(t, TENANT, role, principal, None).await.unwrap();
        }
        let tenant = ledger::TenantId::new(TENANT).unwrap();
        let authority = Arc::new(Authority::new(PgGrants::new(db.store(8)), Policy::empty(), tenant));
        let pki = ops::tls::DevPki::generate().unwrap();
        let tls = transport::tls_config(pki.server_cert.as_bytes(), pki.server_key.as_bytes()).unwrap();
        let mut stops = Vec::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authorizer_port = listener.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        stops.push(stop);
        let service =
            AuthorizerService::new(authority, credentials.clone(), tests::ticket_keys()).accepting_unsealed_facts();
        tokio::spawn(authorizer::service::serve(listener, service, Some(tls), async {
            let _ = stopped.await;
        }));

        let records = std::env::temp_dir().join(format!("callers-{}", uuid::Uuid::new_v4().simple()));
        let env = [
            ("TASK_RECORDS_DIR", records.display().to_string()),
            (proto::ticket::KEYS_FILE_VAR, tests::ticket_keys_file(&records).display().to_string()),
        ];
        let config = browser_runtime::config::RuntimeConfig::parse(|k| {
            env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        })
        .unwrap();
        let redeemer = browser_runtime::service::AuthorizerRedeemer::new(None).unwrap();
        let runtime = Arc::new(browser_runtime::service::BrowserRuntime::new(config, credentials, redeemer));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let runtime_port = listener.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        stops.push(stop);
        tokio::spawn(browser_runtime::service::serve(listener, runtime, None, async {
            let _ = stopped.await;
        }));
        let runtime =
            Channel::from_shared(format!("http://127.0.0.1:{runtime_port}")).unwrap().connect().await.unwrap();
        let ca = pki.ca_cert.clone();
        let authorizer = connect(authorizer_port, &ca).await;
        Self {
            db,
            authorizer,
            authorizer_port,
            ca,
            runtime,
            runtime_port,
            worker_a,
            worker_b,
            gateway,
            profiles,
            runtime_token,
            _stops: stops,
        }
    }

    async fn events(&self) -> i64 {
        self.db.client().await.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get(0)
    }

    fn client(&self) -> pb::authorizer_client::AuthorizerClient<Channel> {
        pb::authorizer_client::AuthorizerClient::new(self.authorizer.clone())
    }

    /// The token of the role that makes the call at `path`, and whether it speaks for an owner.
    fn token_for(&self, path: &str) -> (&str, bool) {
        match authorizer::auth::Rpc::route(path).map(|(roles, _)| roles[0]) {
            Some(Role::Gateway) => (&self.gateway, true),
            Some(Role::Profiles) => (&self.profiles, false),
            Some(Role::Runtime) => (&self.runtime_token, false),
            _ => (&self.worker_a, false),
        }
    }
}

async fn connect(port: u16, ca: &str) -> Channel {
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)).domain_name("localhost");
    Channel::from_shared(format!("https://localhost:{port}")).unwrap().tls_config(tls).unwrap().connect().await.unwrap()
}

fn bearer<T>(m: T, token: &str, owner: bool) -> Request<T> {
    if owner { tests::as_owner(token, "owner-a", m) } else { tests::bearer(token, m) }
}

/// Sends wire bytes as they are, and reads no reply: a client written against the wire alone.
#[derive(Debug, Clone, Copy, Default)]
struct Raw;
#[derive(Debug, Clone, Copy, Default)]
struct RawCoder;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawCoder;
    type Decoder = RawCoder;
    fn encoder(&mut self) -> RawCoder {
        RawCoder
    }
    fn decoder(&mut self) -> RawCoder {
        RawCoder
    }
}

impl Encoder for RawCoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCoder {
    type Item = ();
    type Error = Status;
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<()>, Status> {
        buf.advance(buf.remaining());
        Ok(Some(()))
    }
}

async fn raw(channel: Channel, path: &str, bytes: Vec<u8>, req: impl FnOnce(Vec<u8>) -> Request<Vec<u8>>) -> Status {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path: http::uri::PathAndQuery = path.parse().unwrap();
    match grpc.unary(req(bytes), path, Raw).await {
        Ok(_) => Status::ok("accepted"),
        Err(s) => s,
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn delimited(number: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(&mut out, u64::from(number) << 3 | 2);
    varint(&mut out, payload.len() as u64);
    out.extend_from_slice(payload);
    out
}

fn number_field(number: u32, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    varint(&mut out, u64::from(number) << 3);
    varint(&mut out, v);
    out
}

/// One generated case: the bytes of the whole request and the field it must be refused for.
struct Case {
    what: String,
    bytes: Vec<u8>,
    field: String,
}

/// Every case for `message`, its fields reached through `chain` (numbers) named `prefix`.
fn cases(message: &MessageDescriptor, chain: &[u32], prefix: &str, depth: usize, out: &mut Vec<Case>) {
    let wrap = |leaf: Vec<u8>| chain.iter().rev().fold(leaf, |inner, n| delimited(*n, &inner));
    for f in message.fields() {
        let r = rule(f.full_name()).expect("every request field has a rule (proto/tests/limits.rs)");
        let name = format!("{prefix}{}", f.name());
        let item = if f.is_list() { format!("{name}[0]") } else { name.clone() };
        let mut case = |what: &str, leaf: Vec<u8>, field: &str| {
            out.push(Case { what: format!("{} {what}", f.full_name()), bytes: wrap(leaf), field: field.to_owned() });
        };
        match f.kind() {
            Kind::String => {
                case("NUL", delimited(f.number(), b"a\0b"), &item);
                case("invalid UTF-8", delimited(f.number(), b"a\xff\xfe"), &item);
                case("overlong", delimited(f.number(), "x".repeat(r.max_len + 1).as_bytes()), &item);
                if let Allowed::Strs(_) = r.allowed {
                    case("outside its set", delimited(f.number(), b"KeyQ"), &item);
                }
                if f.is_list() {
                    let many: Vec<u8> = (0..=r.max_items).flat_map(|_| delimited(f.number(), b"a")).collect();
                    case("too many", many, &name);
                }
            }
            Kind::Enum(_) => case("undeclared", number_field(f.number(), 999), &item),
            Kind::Int32 | Kind::Uint32 | Kind::Uint64 | Kind::Int64 => match r.allowed {
                Allowed::Ints(_) => case("outside its set", number_field(f.number(), 7), &item),
                Allowed::Range(_, hi) => case("out of range", number_field(f.number(), hi + 1), &item),
                _ => {}
            },
            Kind::Message(inner) => {
                if f.is_list() {
                    let many: Vec<u8> = (0..=r.max_items).flat_map(|_| delimited(f.number(), b"")).collect();
                    case("too many", many, &name);
                }
                if depth < 4 {
                    let mut deeper = chain.to_vec();
                    deeper.push(f.number());
                    cases(&inner, &deeper, &format!("{item}."), depth + 1, out);
                }
            }
            _ => {}
        }
    }
    // A field number the message does not have.
    out.push(Case {
        what: format!("{} unknown field", message.full_name()),
        bytes: wrap(number_field(1000, 1)),
        field: format!("{prefix}#1000"),
    });
}

/// Every field of every request message of both services, each broken each way its rule allows,
/// is INVALID_ARGUMENT naming the field, and the ledger is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_of_every_request_is_bounded_and_named() {
    let s = Stack::start().await;
    let before = s.events().await;
    let pool = Checker::get().pool().clone();
    let mut total = 0;
    for service in pool.services() {
        for method in service.methods() {
            let path = format!("/{}/{}", service.full_name(), method.name());
            let mut all = Vec::new();
            cases(&method.input(), &[], "", 0, &mut all);
            let channel = if service.full_name().starts_with("browser_runtime") {
                s.runtime.clone()
            } else {
                s.authorizer.clone()
            };
            let (token, owner) = if service.full_name().starts_with("browser_runtime") {
                // The owner's own calls are the gateway's; every other is the worker's.
                match browser_runtime::service::route(&path).map(|(roles, _)| roles[0]) {
                    Some(Role::Gateway) => (s.gateway.as_str(), true),
                    _ => (s.worker_a.as_str(), false),
                }
            } else {
                s.token_for(&path)
            };
            for c in all {
                let status = raw(channel.clone(), &path, c.bytes, |b| bearer(b, token, owner)).await;
                assert_eq!(status.code(), Code::InvalidArgument, "{path} {}: {status:?}", c.what);
                let named = status.get_details_bad_request().map(|b| b.field_violations[0].field.clone());
                assert_eq!(named.as_deref(), Some(c.field.as_str()), "{path} {}: {}", c.what, status.message());
                total += 1;
            }
        }
    }
    assert!(total >= 250, "{total} cases: the generator lost fields");
    assert_eq!(s.events().await, before, "no refused request wrote anything");
}

/// A body is never read before its caller is known: a malformed body from no one, or from a
/// role the call is not for, is refused as that, not as the body's fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_body_is_never_read() {
    let s = Stack::start().await;
    let path = "/grant_ledger.v1.Authorizer/Authorize";
    let junk = vec![0xff; 64 * 1024];
    let none = raw(s.authorizer.clone(), path, junk.clone(), Request::new).await;
    assert_eq!(none.code(), Code::Unauthenticated, "{none:?}");
    let wrong = raw(s.authorizer.clone(), path, junk.clone(), |b| bearer(b, &s.profiles, false)).await;
    assert_eq!(wrong.code(), Code::PermissionDenied, "{wrong:?}");
    let runtime = raw(s.runtime.clone(), "/browser_runtime.v1.BrowserRuntime/Act", junk, Request::new).await;
    assert_eq!(runtime.code(), Code::Unauthenticated, "{runtime:?}");
    // The largest body the authorizer decodes is bounded well below tonic's default.
    let big = pb::AuthorizeRequest { page_title: "x".repeat(3 * 1024 * 1024), ..Default::default() };
    let too_big = raw(s.authorizer.clone(), path, big.encode_to_vec(), |b| bearer(b, &s.worker_a, false)).await;
    assert!(matches!(too_big.code(), Code::OutOfRange | Code::ResourceExhausted), "{too_big:?}");
}

/// Too many or too large headers are RESOURCE_EXHAUSTED, never UNKNOWN or a retryable
/// UNAVAILABLE, and the connection still serves the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_headers_are_a_typed_refusal() {
    let s = Stack::start().await;
    let health = || tonic_health::pb::HealthCheckRequest { service: String::new() };
    for (what, count, size) in
        [("1,000 headers", 1_000, 8), ("10,000 headers", 10_000, 8), ("one 100 KB header", 1, 100_000)]
    {
        let mut req = bearer(pb::ListGrantsRequest::default(), &s.gateway, true);
        for i in 0..count {
            let key: tonic::metadata::MetadataKey<_> = format!("x-pad-{i}").parse().unwrap();
            req.metadata_mut().insert(key, "v".repeat(size).parse().unwrap());
        }
        let status = s.client().list_grants(req).await.unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{what}: {status:?}");
        let mut h = tonic_health::pb::health_client::HealthClient::new(s.authorizer.clone());
        assert_eq!(h.check(health()).await.unwrap().into_inner().status, 1, "{what}: still serving");
    }
}

fn claim(profile: &str, owner: &str) -> pb::ProfileEventRequest {
    pb::ProfileEventRequest {
        profile_id: profile.into(),
        event: pb::ProfileEvent::Created as i32,
        owner_principal_id: owner.into(),
    }
}

fn session(id: &str, profile: &str) -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        session_id: id.into(),
        browser_profile_id: profile.into(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    }
}

/// A profile is its owner's: another owner's worker cannot bind it (NOT_FOUND, nothing written),
/// a profile no owner was recorded for binds nowhere, and the profiles service cannot hand it to
/// another owner later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_owner_can_borrow_another_owners_browser_profile() {
    let s = Stack::start().await;
    let mut c = s.client();
    c.record_profile_event(bearer(claim("profile-a", "owner-a"), &s.profiles, false)).await.unwrap();
    let before = s.events().await;
    let borrowed = c.create_session(bearer(session("s-b", "profile-a"), &s.worker_b, false)).await.unwrap_err();
    assert_eq!(borrowed.code(), Code::NotFound, "{borrowed:?}");
    let unknown = c.create_session(bearer(session("s-b", "profile-nobody"), &s.worker_b, false)).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    let handed = c.record_profile_event(bearer(claim("profile-a", "owner-b"), &s.profiles, false)).await.unwrap_err();
    assert_eq!(handed.code(), Code::NotFound, "{handed:?}");
    let signed_in = pb::ProfileEventRequest {
        profile_id: "profile-a".into(),
        event: pb::ProfileEvent::SignInReady as i32,
        owner_principal_id: "owner-b".into(),
    };
    let signed = c.record_profile_event(bearer(signed_in, &s.profiles, false)).await.unwrap_err();
    assert_eq!(signed.code(), Code::NotFound, "{signed:?}");
    assert_eq!(s.events().await, before, "nothing was written");
    // The owner binds it; a repeated claim by the same owner records nothing more.
    c.create_session(bearer(session("s-a", "profile-a"), &s.worker_a, false)).await.unwrap();
    let at = s.events().await;
    c.record_profile_event(bearer(claim("profile-a", "owner-a"), &s.profiles, false)).await.unwrap();
    assert_eq!(s.events().await, at);
    // The operator's list after the upgrade: a profile recorded before owners were (its owner
    // taken off the stored state, as it was then) shows with the session bound to it.
    let db = s.db.client().await;
    assert!(ops::authority::unclaimed_profiles(&db, TENANT).await.unwrap().is_empty());
    db.execute("UPDATE authority_profiles SET state = state - 'owner' WHERE profile_id = 'profile-a'", &[])
        .await
        .unwrap();
    let listed = ops::authority::unclaimed_profiles(&db, TENANT).await.unwrap();
    assert_eq!(listed, [("profile-a".to_owned(), vec!["s-a".to_owned()])]);
}

/// Thousands of silent connections, a client that sends its handshake a byte at a time and
/// clients that finish the handshakes and then send nothing neither stop a connected client's
/// authorizations nor a new client's health check. The
/// latencies are printed for reading, not asserted (figures: `docs/performance.md`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_starves_no_one() {
    use tokio::io::AsyncWriteExt;
    let s = Stack::start().await;
    let mut c = s.client();
    c.record_profile_event(bearer(claim("profile-a", "owner-a"), &s.profiles, false)).await.unwrap();
    c.create_session(bearer(session("s-a", "profile-a"), &s.worker_a, false)).await.unwrap();
    // Each a tool call of its own, decided as a card (the flag is off): a write every call.
    let act = || {
        bearer(
            pb::AuthorizeRequest {
                session_id: "s-a".into(),
                run: Some(pb::RunContext { run_id: "r".into(), interactive: true, top_level: true }),
                tool_call_id: format!("c-{}", uuid::Uuid::new_v4().simple()),
                turn_tool_calls: vec!["browser.act".into()],
                agent_version: "a".into(),
                page_url: "https://www.lesson.test/lesson/1".into(),
                element: Some(pb::ElementFacts { role: "button".into(), name: "Next".into(), ..Default::default() }),
                action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
                ..Default::default()
            },
            &s.worker_a,
            false,
        )
    };
    let sample = async |c: &mut pb::authorizer_client::AuthorizerClient<Channel>| {
        let mut took = Vec::new();
        for _ in 0..100 {
            let t = std::time::Instant::now();
            let decided = c.authorize(act()).await.unwrap().into_inner().decision;
            assert!(matches!(decided, Some(pb::authorize_reply::Decision::RequireApproval(_))), "{decided:?}");
            took.push(t.elapsed());
        }
        took.sort();
        took[98]
    };
    let quiet = sample(&mut c).await;
    let addr = format!("127.0.0.1:{}", s.authorizer_port);
    let mut idle = Vec::new();
    for _ in 0..2_000 {
        match tokio::net::TcpStream::connect(&addr).await {
            Ok(sock) => idle.push(sock),
            // Past the cap the server closes at once; a refused connect is the same answer.
            Err(_) => continue,
        }
    }
    let slow_addr = addr.clone();
    let slow = tokio::spawn(async move {
        let mut sock = tokio::net::TcpStream::connect(&slow_addr).await.unwrap();
        // The first bytes of a TLS ClientHello, one every 200 ms: never a whole handshake.
        for b in [0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03] {
            if sock.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    // And clients that finish TLS and HTTP/2's handshake, then never send a request.
    let mut silent_h2 = Vec::new();
    for _ in 0..50 {
        silent_h2.push(connect(s.authorizer_port, &s.ca).await);
    }
    let flooded = sample(&mut c).await;
    // A client arriving now still gets in and is answered.
    let fresh = connect(s.authorizer_port, &s.ca).await;
    let mut h = tonic_health::pb::health_client::HealthClient::new(fresh);
    let health = tonic_health::pb::HealthCheckRequest { service: String::new() };
    assert_eq!(h.check(health).await.unwrap().into_inner().status, 1);
    println!("p99 quiet {quiet:?}, flooded by {} idle connections {flooded:?}", idle.len());
    // The server, its database pool and the 2,000 client sockets share this process: its peak
    // resident set bounds the server's.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    println!("peak RSS of the test process, server included: {} MiB", peak_kib / 1024);
    assert!(peak_kib < 128 * 1024, "peak RSS {peak_kib} KiB");
    slow.abort();
    drop((idle, silent_h2));
}

/// A scroll of 0 never reaches the wire (proto3 leaves it off), so the service checks the step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scroll_without_one_of_the_steps_is_refused() {
    let s = Stack::start().await;
    let before = s.events().await;
    let scroll = pb::AuthorizeRequest {
        session_id: "s1".into(),
        run: Some(pb::RunContext { run_id: "r".into(), interactive: true, top_level: true }),
        tool_call_id: "c".into(),
        agent_version: "a".into(),
        page_url: "https://www.lesson.test/lesson/1".into(),
        action: Some(pb::Action { kind: pb::ActionKind::Scroll as i32, scroll_by: 0, ..Default::default() }),
        ..Default::default()
    };
    let err = s.client().authorize(bearer(scroll, &s.worker_a, false)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(err.get_details_bad_request().unwrap().field_violations[0].field, "action.scroll_by");
    assert_eq!(s.events().await, before);
}

/// Past the connection cap, silent connections that never made an authenticated call are closed
/// to make room: a worker arriving after a thousand of them is served, and so is a health check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_past_the_cap_make_room_for_a_caller() {
    let s = Stack::start().await;
    let port = s.runtime_port;
    let mut silent = Vec::new();
    for _ in 0..1_100 {
        if let Ok(sock) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            silent.push(sock);
        }
    }
    let fresh = Channel::from_shared(format!("http://127.0.0.1:{port}")).unwrap().connect().await.unwrap();
    let mut runtime = proto::runtime::browser_runtime_client::BrowserRuntimeClient::new(fresh.clone());
    let observe =
        proto::runtime::ObserveRequest { session_id: "bs_000000000000000000000000".into(), run_id: String::new() };
    let answer = runtime.observe(bearer(observe, &s.worker_a, false)).await.unwrap_err();
    assert_eq!(answer.code(), Code::NotFound, "the worker was let in and answered: {answer:?}");
    let mut h = tonic_health::pb::health_client::HealthClient::new(fresh);
    let health = tonic_health::pb::HealthCheckRequest { service: String::new() };
    assert_eq!(h.check(health).await.unwrap().into_inner().status, 1);
    drop(silent);
}
