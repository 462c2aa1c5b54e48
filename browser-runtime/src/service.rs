//! The gRPC service: authenticates each caller as a `worker` of one tenant, validates the
//! request, and runs it on the caller's own session. Sessions live with the Chromium they drive,
//! so a session belongs to one runtime process; every rule it enforces is re-read from the live
//! page, not from what the process remembers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use classifier::coverage::MAX_LABEL_CHARS;
use credentials::{Caller, Credentials, Role};
use proto::runtime as pb;
use proto::v1 as gl;
use time::OffsetDateTime;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Response, Status};

use crate::config::{AuthorizerLink, RuntimeConfig};
use crate::page::{NodeRead, Role as NodeRole};
use crate::records::RecordStore;
use crate::session::{
    ActAction, ActInput, Allow, Code, Observation, Redeem, RedeemError, Redemption, Session, SessionError, WaitFor,
};

/// The longest expected name the contract allows.
pub const MAX_NAME_CHARS: usize = 120;
const MAX_STEPS: u32 = 10_000;

/// Redeems approval tokens at the authorizer with the runtime's own credential.
#[derive(Debug, Clone)]
pub struct AuthorizerRedeemer {
    client: Option<gl::authorizer_client::AuthorizerClient<Channel>>,
    bearer: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl AuthorizerRedeemer {
    pub fn new(link: Option<&AuthorizerLink>) -> Result<Self, String> {
        let Some(link) = link else { return Ok(Self { client: None, bearer: None }) };
        let mut endpoint =
            Endpoint::from_shared(link.url.clone()).map_err(|e| format!("RUNTIME_AUTHORIZER_URL: {e}"))?;
        if link.url.starts_with("https://") {
            let mut tls = ClientTlsConfig::new().with_enabled_roots();
            if let Some(ca) = &link.ca_pem {
                tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(ca));
            }
            endpoint = endpoint.tls_config(tls).map_err(|e| format!("RUNTIME_AUTHORIZER_CA: {e}"))?;
        }
        let bearer = format!("Bearer {}", link.token)
            .parse()
            .map_err(|_| "RUNTIME_AUTHORIZER_TOKEN is not a header value".to_owned())?;
        Ok(Self {
            client: Some(gl::authorizer_client::AuthorizerClient::new(endpoint.connect_lazy())),
            bearer: Some(bearer),
        })
    }
}

impl Redeem for AuthorizerRedeemer {
    async fn redeem(&self, r: Redemption<'_>) -> Result<gl::DispatchTicket, RedeemError> {
        let (Some(client), Some(bearer)) = (&self.client, &self.bearer) else {
            return Err(RedeemError::Unavailable("this runtime has no authorizer to redeem tokens at".into()));
        };
        let text_sha256 = match r.action {
            ActAction::Type { .. } => crate::ticket::ticket_action(r.action, r.text).text_sha256,
            _ => Vec::new(),
        };
        let mut req = Request::new(gl::RedeemTokenRequest {
            approval_token: r.token.to_owned(),
            run_id: r.run_id.to_owned(),
            snapshot_id: r.snapshot_id.to_owned(),
            node_ref: r.node_ref.to_owned(),
            action: Some(action_pb(r.action)),
            text_sha256,
            browser_profile_id: r.profile.to_owned(),
            element_role: r.element_role.to_owned(),
            element_name: r.element_name.to_owned(),
            page_origin: r.page_origin.to_owned(),
        });
        req.metadata_mut().insert("authorization", bearer.clone());
        match client.clone().redeem_token(req).await {
            Ok(reply) => {
                reply.into_inner().ticket.ok_or_else(|| RedeemError::Refused("the authorizer sent no ticket".into()))
            }
            Err(s) => {
                use tonic::Code as C;
                match s.code() {
                    // Not this token: it was never issued, is used or expired, or names another
                    // run, snapshot or ref.
                    C::NotFound | C::FailedPrecondition | C::InvalidArgument | C::AlreadyExists | C::OutOfRange => {
                        Err(RedeemError::Invalid(format!("the authorizer refused the token: {}", s.message())))
                    }
                    // A refusal of the token itself (any reason but the caller's role).
                    C::PermissionDenied if !caller_refused(&s) => {
                        Err(RedeemError::Invalid(format!("the authorizer refused the token: {}", s.message())))
                    }
                    // The runtime's own credential or the authorizer itself is at fault.
                    C::Unauthenticated | C::PermissionDenied | C::Internal | C::Unimplemented | C::DataLoss => {
                        Err(RedeemError::Refused(format!("the authorizer refused the runtime: {}", s.message())))
                    }
                    _ => Err(RedeemError::Unavailable(s.message().to_owned())),
                }
            }
        }
    }
}

/// The act as the authorizer names it (no text: the runtime checks the record value itself).
fn action_pb(a: &ActAction) -> gl::Action {
    use gl::ActionKind as K;
    let kind = |k: K| gl::Action { kind: k as i32, ..Default::default() };
    match a {
        ActAction::Click => kind(K::Click),
        ActAction::Type { field_id } => gl::Action { field_id: field_id.clone(), ..kind(K::Type) },
        ActAction::Select { option } => gl::Action { option: option.clone(), ..kind(K::Select) },
        ActAction::Check => kind(K::Check),
        ActAction::Press { key } => gl::Action { key: key.clone(), ..kind(K::Press) },
        ActAction::Scroll { by } => gl::Action { scroll_by: *by, ..kind(K::Scroll) },
    }
}

/// Whether the authorizer refused the caller (the runtime's credential) rather than the token.
fn caller_refused(s: &Status) -> bool {
    use tonic_types::StatusExt;
    s.get_error_details().error_info().is_some_and(|i| i.reason == transport::CALLER_NOT_PERMITTED)
}

type Shared = Arc<tokio::sync::Mutex<Session>>;

/// `$call` on session `$s` within the configured bound; a call that does not come back in time
/// (a renderer stuck in the page's script) restarts the session's browser clean.
macro_rules! bounded {
    ($self:ident, $s:ident, $call:expr) => {
        match tokio::time::timeout($self.config.call_timeout, $call).await {
            Ok(r) => r,
            Err(_) => Err($s.hung(&$self.config.browser).await),
        }
    };
}

/// An open session, with the owner and profile it was opened for (fixed for its life).
#[derive(Debug, Clone)]
struct Entry {
    tenant: String,
    principal: String,
    profile: String,
    session: Shared,
}

/// A pool slot taken for a session being opened: given back on drop unless kept, so a call
/// cancelled while Chromium starts leaks neither the slot nor the profile.
struct Slot<'a> {
    sessions: &'a Mutex<HashMap<String, Entry>>,
    id: String,
    kept: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.id);
        }
    }
}

/// Every open session of this process, by id.
#[derive(Debug)]
pub struct BrowserRuntime<R> {
    config: RuntimeConfig,
    credentials: Credentials,
    records: RecordStore,
    redeemer: R,
    sessions: Mutex<HashMap<String, Entry>>,
}

fn invalid(field: &str, rule: &str) -> Status {
    proto::checked::invalid_argument(field, rule)
}

fn session_status(e: SessionError) -> Status {
    match e {
        SessionError::Invalid(m) => Status::invalid_argument(m),
        SessionError::Crashed(m) | SessionError::Unavailable(m) => Status::unavailable(m),
        SessionError::Dialog(m) => Status::failed_precondition(format!("a browser dialog is open: {m}")),
        SessionError::Stale(m) => Status::failed_precondition(m),
        e @ SessionError::PageRefused(_) => Status::failed_precondition(e.to_string()),
        e @ SessionError::Replayed(_) => Status::already_exists(e.to_string()),
        e @ SessionError::OutOfOrder(_) => Status::failed_precondition(e.to_string()),
        SessionError::Internal(m) => {
            tracing::error!(error = %m, "the runtime cannot act");
            Status::internal(m)
        }
    }
}

/// An `https://host[:port]` origin, written exactly as its serialization.
fn origin(field: &str, s: &str) -> Result<String, Status> {
    let u = url::Url::parse(s).map_err(|_| invalid(field, "is not a URL"))?;
    let o = u.origin().ascii_serialization();
    if u.scheme() != "https" || o != s {
        return Err(invalid(field, "is an https origin like https://host[:port], with nothing after it"));
    }
    Ok(o)
}

/// The ledger's one rule for entity ids, so an id this service takes is never refused by the
/// authorizer it redeems tokens at.
fn id(field: &'static str, s: &str) -> Result<String, Status> {
    ledger::check_entity_id(field, s).map_err(|e| invalid(field, &e.reason))?;
    Ok(s.to_owned())
}

fn node_role(r: NodeRole) -> pb::Role {
    match r {
        NodeRole::Button => pb::Role::Button,
        NodeRole::Link => pb::Role::Link,
        NodeRole::Checkbox => pb::Role::Checkbox,
        NodeRole::Radio => pb::Role::Radio,
        NodeRole::Option => pb::Role::Option,
        NodeRole::Tab => pb::Role::Tab,
        NodeRole::MenuItem => pb::Role::Menuitem,
        NodeRole::Combobox => pb::Role::Combobox,
        NodeRole::Textbox => pb::Role::Textbox,
        NodeRole::Searchbox => pb::Role::Searchbox,
        NodeRole::Listbox => pb::Role::Listbox,
    }
}

fn role_from_pb(r: i32) -> Result<NodeRole, Status> {
    let r = pb::Role::try_from(r).map_err(|_| invalid("expected_role", "is not a role of the closed set"))?;
    NodeRole::ALL.into_iter().find(|n| node_role(*n) == r).ok_or_else(|| invalid("expected_role", "is required"))
}

/// A page's text with each NUL shown as U+FFFD: no request field holds a NUL (the field table),
/// and a page must not make its own elements impossible to authorize with one. NUL is no letter,
/// so the classifier reads the same words either way.
fn without_nul(s: &str) -> String {
    s.replace('\0', "\u{fffd}")
}

/// The facts the authorizer reads, carried beside the snapshot. A label source that reads
/// exactly as the name is left out; every other fact is carried explicitly.
pub fn facts_pb(n: &NodeRead) -> gl::ElementFacts {
    let f = &n.facts;
    // Each text is carried cut at CARRIED_LABEL_CHARS, and a cut marks the facts not whole.
    let cut_any = std::cell::Cell::new(false);
    let cut = |s: &str| -> String {
        let s = without_nul(s);
        match s.char_indices().nth(classifier::coverage::CARRIED_LABEL_CHARS) {
            Some((at, _)) => {
                cut_any.set(true);
                s[..at].to_owned()
            }
            None => s,
        }
    };
    let mut facts = proto::facts::carried(f, &cut, &without_nul);
    facts.truncated = None;
    // Lists longer than the field table lets through are cut, and the element is then marked
    // cut (a label source) or its targets not carried whole, so it is never covered.
    use proto::limits::{MAX_LABEL_SOURCES, MAX_NAV_TARGETS};
    let long_lists = facts.labelledby.len() > MAX_LABEL_SOURCES || facts.labels.len() > MAX_LABEL_SOURCES;
    facts.labelledby.truncate(MAX_LABEL_SOURCES);
    facts.labels.truncate(MAX_LABEL_SOURCES);
    if facts.nav_targets.len() > MAX_NAV_TARGETS {
        facts.nav_targets.truncate(MAX_NAV_TARGETS);
        facts.nav_targets_carried = false;
    }
    facts.options.truncate(classifier::coverage::MAX_OPTIONS + 1);
    let many_options = n.option_count > classifier::coverage::MAX_OPTIONS;
    // Within the per-field limits a select's options could still reach megabytes: past the
    // budget options go (and then the longest lists), and the facts are marked cut.
    let mut over = false;
    while prost::Message::encoded_len(&facts) > proto::limits::MAX_FACTS_BYTES {
        over = true;
        if !facts.options.is_empty() {
            facts.options.truncate(facts.options.len() / 2);
        } else if !facts.nav_targets.is_empty() {
            facts.nav_targets.truncate(facts.nav_targets.len() / 2);
            facts.nav_targets_carried = false;
        } else if !facts.labels.is_empty() || !facts.labelledby.is_empty() {
            facts.labels.truncate(facts.labels.len() / 2);
            facts.labelledby.truncate(facts.labelledby.len() / 2);
        } else {
            break;
        }
    }
    facts.truncated = Some(f.truncated || many_options || long_lists || over || cut_any.get());
    facts
}

/// Who read a snapshot: its facts are sealed for this tenant, owner and profile.
struct Reader<'a> {
    keys: &'a proto::ticket::Keyring,
    tenant: &'a str,
    principal: &'a str,
    profile: &'a str,
}

fn observation_pb(o: Observation, by: &Reader<'_>) -> pb::ObserveReply {
    let mut nodes = Vec::new();
    let mut facts = Vec::new();
    // The title as the authorizer takes it back (a card shows it): within the field table.
    let title: String = without_nul(&o.page.title).chars().take(MAX_LABEL_CHARS).collect();
    let read_ms = i64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX);
    for (i, n) in o.nodes.iter().enumerate() {
        let Some(role) = n.role else { continue };
        let r = format!("n{i}");
        nodes.push(pb::Node {
            r#ref: r.clone(),
            role: node_role(role) as i32,
            name: n.name.clone(),
            value: n.value.clone(),
            state: Some(pb::NodeState {
                disabled: n.state.disabled,
                checked: n.state.checked,
                expanded: n.state.expanded,
                selected: n.state.selected,
                filled: n.state.filled,
                focused: n.state.focused,
            }),
        });
        let element = facts_pb(n);
        let sealed = by.keys.seal_facts(&gl::FactsBody {
            tenant_id: by.tenant.to_owned(),
            principal_id: by.principal.to_owned(),
            browser_profile_id: by.profile.to_owned(),
            snapshot_id: o.snapshot_id.clone(),
            node_ref: r.clone(),
            page_url: o.page.url.clone(),
            page_title: title.clone(),
            element: Some(element.clone()),
            read_ms,
        });
        facts.push(pb::NodeFacts { r#ref: r, element: Some(element), sealed: Some(sealed) });
    }
    pb::ObserveReply { snapshot_id: o.snapshot_id, url: o.page.url, title, nodes, facts }
}

/// The act the request describes, or the first field that is not well formed.
pub fn act_input(req: pb::ActRequest) -> Result<ActInput, Status> {
    let snapshot_ok = req
        .snapshot_id
        .strip_prefix("snap_")
        .is_some_and(|h| h.len() == 12 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    if !snapshot_ok {
        return Err(invalid("snapshot_id", "is snap_ and 12 lowercase hex digits"));
    }
    let ref_ok = req
        .r#ref
        .strip_prefix('n')
        .is_some_and(|d| (1..=4).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()));
    if !ref_ok {
        return Err(invalid("ref", "is n and 1-4 digits"));
    }
    let n = req.expected_name.chars().count();
    if n == 0 || n > MAX_NAME_CHARS {
        return Err(invalid("expected_name", &format!("is 1-{MAX_NAME_CHARS} characters")));
    }
    let expected_role = role_from_pb(req.expected_role)?;
    let approval_token = match req.approval_token.as_str() {
        "" => None,
        t if proto::limits::is_approval_token(t) => Some(t.to_owned()),
        _ => return Err(invalid("approval_token", &format!("is {}", proto::limits::APPROVAL_TOKEN_FORMAT))),
    };
    let wait_for = match pb::WaitFor::try_from(req.wait_for) {
        Ok(pb::WaitFor::Unspecified | pb::WaitFor::Settle) => WaitFor::Settle,
        Ok(pb::WaitFor::Navigation) => WaitFor::Navigation,
        Ok(pb::WaitFor::Dialog) => WaitFor::Dialog,
        Ok(pb::WaitFor::None) => WaitFor::None,
        Err(_) => return Err(invalid("wait_for", "is settle, navigation, dialog or none")),
    };
    use pb::act_request::Action as A;
    let action = match req.action.ok_or_else(|| invalid("action", "is required"))? {
        A::Click(_) if !expected_role.clickable() => {
            return Err(invalid(
                "expected_role",
                "a click takes a button, link, checkbox, radio, option, tab, menuitem or combobox",
            ));
        }
        A::Click(_) => ActAction::Click,
        A::Type(t) => {
            crate::records::check_field_id(&t.field_id).map_err(|why| invalid("type.field_id", &why))?;
            ActAction::Type { field_id: t.field_id }
        }
        A::Select(s) if s.option.is_empty() || s.option.chars().count() > MAX_LABEL_CHARS => {
            return Err(invalid("select.option", &format!("is 1-{MAX_LABEL_CHARS} characters")));
        }
        A::Select(s) => ActAction::Select { option: s.option },
        A::Check(_) => ActAction::Check,
        A::Press(p) if crate::session::key_text(&p.key).is_none() => {
            let keys: Vec<String> = classifier::coverage::KEYS.iter().map(|k| format!("{k:?}")).collect();
            let keys = keys.join(", ");
            return Err(invalid("press.key", &format!("is a named key: one of {keys}")));
        }
        A::Press(p) => ActAction::Press { key: p.key },
        A::Scroll(s) if !classifier::coverage::SCROLL_STEPS.contains(&s.by) => {
            return Err(invalid("scroll.by", "is one of ±100, ±300, ±600, ±1200 pixels"));
        }
        A::Scroll(s) => ActAction::Scroll { by: s.by },
    };
    if req.ticket.is_some() && approval_token.is_some() {
        return Err(invalid("ticket", "an act carries a dispatch ticket or an approval token, not both"));
    }
    if req.sequence == 0 {
        return Err(invalid("sequence", "is required: one more than the session's last dispatched act"));
    }
    Ok(ActInput {
        sequence: req.sequence,
        run_id: id("run_id", &req.run_id)?,
        snapshot_id: req.snapshot_id,
        node_ref: req.r#ref,
        expected_name: req.expected_name,
        expected_role,
        consequential: req.consequential,
        approval_token,
        wait_for,
        ticket: req.ticket,
        action,
    })
}

fn code_pb(c: Code) -> pb::ActCode {
    match c {
        Code::Ok => pb::ActCode::Ok,
        Code::StaleSnapshot => pb::ActCode::StaleSnapshot,
        Code::RefNotFound => pb::ActCode::RefNotFound,
        Code::NameMismatch => pb::ActCode::NameMismatch,
        Code::RoleMismatch => pb::ActCode::RoleMismatch,
        Code::NodeNotInteractable => pb::ActCode::NodeNotInteractable,
        Code::ApprovalRequired => pb::ActCode::ApprovalRequired,
        Code::ApprovalTokenInvalid => pb::ActCode::ApprovalTokenInvalid,
        Code::OffOriginTarget => pb::ActCode::OffOriginTarget,
        Code::BudgetExceeded => pb::ActCode::BudgetExceeded,
        Code::GrantNotApplicable => pb::ActCode::GrantNotApplicable,
    }
}

impl<R: Redeem + 'static> BrowserRuntime<R> {
    pub fn new(config: RuntimeConfig, credentials: Credentials, redeemer: R) -> Self {
        let records = RecordStore::new(config.records_dir.clone());
        Self { config, credentials, records, redeemer, sessions: Mutex::new(HashMap::new()) }
    }

    /// The caller, as the gate authenticated it from the headers before the body was read, or
    /// authenticated here when the service is called without the gate (in-process).
    async fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        if let Some(c) = req.extensions().get::<Caller>().filter(|c| c.role == Role::Worker) {
            return Ok(c.clone());
        }
        self.credentials
            .authenticate(req.metadata(), &[Role::Worker], &[], OffsetDateTime::now_utc())
            .await
            .map_err(transport::auth_status)
    }

    /// The caller's session, locked: another owner's session is as absent as one that never
    /// existed, and so is one closed while the call waited for it.
    async fn owned(&self, caller: &Caller, session_id: &str) -> Result<tokio::sync::OwnedMutexGuard<Session>, Status> {
        let entry = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(session_id).cloned();
        match entry {
            Some(e) if e.tenant == caller.tenant && e.principal == caller.principal => {
                let guard = e.session.lock_owned().await;
                if guard.closed { Err(Status::not_found("no such session")) } else { Ok(guard) }
            }
            _ => Err(Status::not_found("no such session")),
        }
    }

    /// Closes every session: the shutdown path.
    pub async fn close_all(&self) {
        let all: Vec<Shared> = {
            let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            sessions.drain().map(|(_, e)| e.session).collect()
        };
        for s in all {
            s.lock().await.close().await;
        }
    }

    /// chromedriver's pid for a session, whose process group holds its Chromium (for tests that
    /// kill the browser they started).
    pub async fn driver_pid(&self, session_id: &str) -> Option<u32> {
        let e = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(session_id).cloned()?;
        let guard = e.session.lock().await;
        guard.driver_pid()
    }

    pub fn into_server(self) -> pb::browser_runtime_server::BrowserRuntimeServer<Self> {
        pb::browser_runtime_server::BrowserRuntimeServer::new(self)
    }
}

#[tonic::async_trait]
impl<R: Redeem + 'static> pb::browser_runtime_server::BrowserRuntime for BrowserRuntime<R> {
    async fn open_session(
        &self,
        req: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionReply>, Status> {
        let caller = self.caller(&req).await?;
        let req = req.into_inner();
        let profile = id("browser_profile_id", &req.browser_profile_id)?;
        if req.allowed_origins.is_empty() {
            return Err(invalid("allowed_origins", "names at least one origin"));
        }
        let origins =
            req.allowed_origins.iter().map(|o| origin("allowed_origins", o)).collect::<Result<Vec<_>, _>>()?;
        let start = url::Url::parse(&req.start_url).map_err(|_| invalid("start_url", "is not a URL"))?;
        if !origins.contains(&start.origin().ascii_serialization()) {
            return Err(invalid("start_url", "is on one of the allowed origins"));
        }
        if !(1..=MAX_STEPS).contains(&req.max_steps) {
            return Err(invalid("max_steps", &format!("is between 1 and {MAX_STEPS}")));
        }
        let session_id = format!("bs_{}", hex::encode(rand::random::<[u8; 12]>()));
        let owner = (caller.tenant.clone(), caller.principal.clone(), profile.clone());
        let mut session = Session::new(owner, origins, req.start_url, req.max_steps);
        // The slot is taken before Chromium starts, so the pool limit holds under concurrency.
        let placeholder = (caller.tenant.clone(), caller.principal.clone(), profile.clone());
        let shared: Shared = Arc::new(tokio::sync::Mutex::new(Session::new(placeholder, Vec::new(), String::new(), 0)));
        let mut guard = Arc::clone(&shared).lock_owned().await;
        let mut slot = {
            let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if sessions.len() >= self.config.pool_size {
                return Err(Status::resource_exhausted(format!(
                    "the browser pool is full ({} sessions): close one first",
                    self.config.pool_size
                )));
            }
            // Per owner: another owner naming this profile id must not hold it against its owner.
            // (What a session may do on a profile is the authorizer's to decide: it knows owners.)
            let held = |e: &Entry| e.tenant == caller.tenant && e.principal == caller.principal && e.profile == profile;
            if sessions.values().any(held) {
                return Err(Status::already_exists("this browser profile already has an open session"));
            }
            let entry = Entry {
                tenant: caller.tenant.clone(),
                principal: caller.principal.clone(),
                profile: profile.clone(),
                session: Arc::clone(&shared),
            };
            sessions.insert(session_id.clone(), entry);
            Slot { sessions: &self.sessions, id: session_id.clone(), kept: false }
        };
        if let Err(e) = session.start(&self.config.browser).await {
            session.close().await;
            return Err(session_status(e));
        }
        *guard = session;
        slot.kept = true;
        Ok(Response::new(pb::OpenSessionReply { session_id }))
    }

    async fn observe(&self, req: Request<pb::ObserveRequest>) -> Result<Response<pb::ObserveReply>, Status> {
        let caller = self.caller(&req).await?;
        let mut s = self.owned(&caller, &req.get_ref().session_id).await?;
        let o = bounded!(self, s, s.observe(&self.config.browser)).map_err(session_status)?;
        let by = Reader { keys: &self.config.tickets, tenant: &s.tenant, principal: &s.principal, profile: &s.profile };
        Ok(Response::new(observation_pb(o, &by)))
    }

    async fn act(&self, req: Request<pb::ActRequest>) -> Result<Response<pb::ActReply>, Status> {
        let caller = self.caller(&req).await?;
        let req = req.into_inner();
        let session_id = req.session_id.clone();
        let input = act_input(req)?;
        let mut s = self.owned(&caller, &session_id).await?;
        let now = OffsetDateTime::now_utc();
        let allow = Allow { tickets: &self.config.tickets, redeemer: &self.redeemer };
        let o =
            bounded!(self, s, s.act(input, &self.records, allow, &self.config.browser, now)).map_err(session_status)?;
        if o.code != Code::Ok {
            tracing::info!(code = o.code.name(), detail = %o.detail, session = %session_id, "act refused");
        }
        Ok(Response::new(pb::ActReply {
            ok: o.code == Code::Ok,
            code: code_pb(o.code) as i32,
            code_name: o.code.name().to_owned(),
            detail: o.detail,
            snapshot_id: o.snapshot_id,
            changed: o.changed,
            dispatched: o.dispatched,
            reason: o.reason.unwrap_or_default().to_owned(),
            outcome_unknown: o.outcome_unknown,
            recoverable: o.code != Code::Ok && o.code.recoverable(),
        }))
    }

    async fn screenshot(&self, req: Request<pb::ScreenshotRequest>) -> Result<Response<pb::ScreenshotReply>, Status> {
        let caller = self.caller(&req).await?;
        let mut s = self.owned(&caller, &req.get_ref().session_id).await?;
        let png = bounded!(self, s, s.screenshot(&self.config.browser)).map_err(session_status)?;
        Ok(Response::new(pb::ScreenshotReply { png }))
    }

    async fn read_form(&self, req: Request<pb::ReadFormRequest>) -> Result<Response<pb::ReadFormReply>, Status> {
        let caller = self.caller(&req).await?;
        let req = req.into_inner();
        let mut s = self.owned(&caller, &req.session_id).await?;
        let (url, fields) = bounded!(self, s, s.read_form(&req.snapshot_id, &req.r#ref, &self.config.browser))
            .map_err(session_status)?;
        Ok(Response::new(pb::ReadFormReply {
            url,
            fields: fields
                .into_iter()
                .map(|r| pb::FormField {
                    label: r.field.label,
                    name: r.field.name,
                    kind: gl::FieldKind::from(r.field.kind) as i32,
                    value: r.field.value,
                    checked: r.field.checked,
                    typed_field_id: r.typed_field_id.unwrap_or_default(),
                })
                .collect(),
        }))
    }

    async fn close_session(
        &self,
        req: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionReply>, Status> {
        let caller = self.caller(&req).await?;
        let session_id = req.get_ref().session_id.clone();
        let mut s = self.owned(&caller, &session_id).await?;
        s.close().await;
        s.closed = true;
        drop(s);
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&session_id);
        Ok(Response::new(pb::CloseSessionReply {}))
    }
}

/// Accepted connections without Nagle's delay: a reply larger than one segment otherwise waits
/// for the peer's delayed acknowledgement (tens of milliseconds).
/// Every call of the runtime is the worker's.
fn route(path: &str) -> Option<(&'static [Role], &'static [credentials::Scope])> {
    path.starts_with("/browser_runtime.v1.BrowserRuntime/").then_some((&[Role::Worker][..], &[][..]))
}

/// Open files kept back from connections: each browser's driver, its DevTools sockets, records.
const OPEN_FILE_RESERVE: u64 = 512;

/// Serves `runtime` on `listener` until `shutdown`, then closes every browser it started.
pub async fn serve<R: Redeem + 'static>(
    listener: tokio::net::TcpListener,
    runtime: Arc<BrowserRuntime<R>>,
    tls: Option<Arc<transport::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    // An act's calls are each bounded by the browser-call timeout; the request bound stays well
    // above the longest act (its several calls, a restart, the settle), so it never cuts one.
    let longest_act = runtime.config.call_timeout * 8 + std::time::Duration::from_secs(60);
    let limits = transport::Limits::for_requests_within(longest_act)
        .within_open_files(transport::raise_fd_limit(), OPEN_FILE_RESERVE);
    let server = pb::browser_runtime_server::BrowserRuntimeServer::from_arc(Arc::clone(&runtime))
        .max_decoding_message_size(proto::limits::MAX_RUNTIME_REQUEST_BYTES);
    let registry = transport::Registry::default();
    let (reporter, health) = tonic_health::server::health_reporter();
    let health = health.max_decoding_message_size(transport::MAX_HEALTH_REQUEST_BYTES);
    reporter.set_serving::<pb::browser_runtime_server::BrowserRuntimeServer<BrowserRuntime<R>>>().await;
    let served = transport::server(&limits)
        .add_service(transport::Gate::new(
            health,
            runtime.credentials.clone(),
            transport::open_to_all,
            limits,
            registry.clone(),
        ))
        .add_service(transport::Gate::new(server, runtime.credentials.clone(), route, limits, registry.clone()))
        .serve_with_incoming_shutdown(transport::incoming(listener, tls, limits, registry), shutdown)
        .await;
    runtime.close_all().await;
    served
}
