//! The wire and the session's types, both ways: each request field checked on the way in, and
//! each snapshot's nodes and facts, sealed for the authorizer, on the way out.

use classifier::coverage::MAX_LABEL_CHARS;
use proto::ids::Id;
use proto::limits::{MAX_ALERT_CHARS, MAX_ALERTS};
use proto::runtime as pb;
use proto::v1 as gl;
use time::OffsetDateTime;
use tonic::Status;

use crate::page::{NodeRead, Role as NodeRole};
use crate::session::{ActAction, ActInput, Code, Observation, SessionError, WaitFor};

use proto::limits::MAX_NAME_CHARS;

pub(super) fn invalid(field: &str, rule: &str) -> Status {
    proto::checked::invalid_argument(field, rule)
}

/// A failure as a gRPC status. One the tool contract names (a dialog, a browser restarted, a
/// page that moved or broke the read) carries its code and whether the agent may go on, in the
/// `contract-code` and `recoverable` metadata, so a caller need not read the message.
pub(super) fn session_status(e: SessionError) -> Status {
    let named = e.contract_code();
    let mut status = plain_status(e);
    if let Some((code, recoverable)) = named {
        let m = status.metadata_mut();
        m.insert(proto::CONTRACT_CODE_HEADER, tonic::metadata::MetadataValue::from_static(code.name()));
        m.insert(
            proto::RECOVERABLE_HEADER,
            tonic::metadata::MetadataValue::from_static(if recoverable { "true" } else { "false" }),
        );
    }
    status
}

fn plain_status(e: SessionError) -> Status {
    match e {
        SessionError::Invalid(m) => Status::invalid_argument(m),
        SessionError::Crashed(m) | SessionError::Unavailable(m) => Status::unavailable(m),
        SessionError::Dialog(m) => Status::failed_precondition(format!("a browser dialog is open: {m}")),
        SessionError::Stale(m) => Status::failed_precondition(m),
        e @ SessionError::PageRefused(_) => Status::failed_precondition(e.to_string()),
        e @ SessionError::Replayed(_) => Status::already_exists(e.to_string()),
        e @ SessionError::OutOfOrder(_) => Status::failed_precondition(e.to_string()),
        SessionError::Older(m) => {
            tracing::error!(error = %m, "a service runs an older release");
            Status::failed_precondition(m)
        }
        SessionError::Internal(m) => {
            tracing::error!(error = %m, "the runtime cannot act");
            Status::internal(m)
        }
    }
}

/// An `https://host[:port]` origin, written exactly as its serialization.
pub(super) fn origin(field: &str, s: &str) -> Result<String, Status> {
    let u = url::Url::parse(s).map_err(|_| invalid(field, "is not a URL"))?;
    let o = u.origin().ascii_serialization();
    if u.scheme() != "https" || o != s {
        return Err(invalid(field, "is an https origin like https://host[:port], with nothing after it"));
    }
    Ok(o)
}

/// The ledger's one rule for entity ids, so an id this service takes is never refused by the
/// authorizer it redeems tokens at.
pub(super) fn id(field: &'static str, s: &str) -> Result<String, Status> {
    ledger::check_entity_id(field, s).map_err(|e| invalid(field, &e.reason))?;
    Ok(s.to_owned())
}

pub(super) fn node_role(r: NodeRole) -> pb::Role {
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
        NodeRole::SpinButton => pb::Role::Spinbutton,
        NodeRole::Slider => pb::Role::Slider,
    }
}

pub(super) fn role_from_pb(r: i32) -> Result<NodeRole, Status> {
    let r = pb::Role::try_from(r).map_err(|_| invalid("expected_role", "is not a role of the closed set"))?;
    NodeRole::ALL.into_iter().find(|n| node_role(*n) == r).ok_or_else(|| invalid("expected_role", "is required"))
}

/// A page's text with each NUL shown as U+FFFD: no request field holds a NUL (the field table),
/// and a page must not make its own elements impossible to authorize with one. NUL is no letter,
/// so the classifier reads the same words either way.
pub(super) fn without_nul(s: &str) -> String {
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
pub(super) struct Reader<'a> {
    pub keys: &'a proto::ticket::Keyring,
    pub tenant: &'a str,
    pub principal: &'a str,
    pub profile: &'a str,
}

pub(super) fn observation_pb(o: Observation, by: &Reader<'_>) -> pb::ObserveReply {
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
    // Page text: no control character, bounded (the read bounds them too).
    let alerts = o
        .alerts
        .iter()
        .take(MAX_ALERTS)
        .map(|a| without_nul(a).chars().filter(|c| !c.is_control()).take(MAX_ALERT_CHARS).collect())
        .collect();
    pb::ObserveReply { snapshot_id: o.snapshot_id, url: o.page.url, title, nodes, facts, texts: Vec::new(), alerts }
}

/// The act the request describes, or the first field that is not well formed.
pub fn act_input(req: pb::ActRequest) -> Result<ActInput, Status> {
    Id::SnapshotId.check(&req.snapshot_id).map_err(|why| invalid("snapshot_id", &why))?;
    Id::Ref.check(&req.r#ref).map_err(|why| invalid("ref", &why))?;
    let n = req.expected_name.chars().count();
    if n == 0 || n > MAX_NAME_CHARS {
        return Err(invalid("expected_name", &format!("is 1-{MAX_NAME_CHARS} characters")));
    }
    let expected_role = role_from_pb(req.expected_role)?;
    let approval_token = match req.approval_token.as_str() {
        "" => None,
        t => {
            Id::ApprovalToken.check(t).map_err(|why| invalid("approval_token", &why))?;
            Some(t.to_owned())
        }
    };
    let wait_for = match pb::WaitFor::try_from(req.wait_for) {
        Ok(pb::WaitFor::Unspecified | pb::WaitFor::Settle) => WaitFor::Settle,
        Ok(pb::WaitFor::Navigation) => WaitFor::Navigation,
        Ok(pb::WaitFor::Dialog) => WaitFor::Dialog,
        Ok(pb::WaitFor::None) => WaitFor::None,
        Err(_) => return Err(invalid("wait_for", "is settle, navigation, dialog or none")),
    };
    use pb::act_request::Action as A;
    let action = req.action.ok_or_else(|| invalid("action", "is required"))?;
    if !expected_role.actionable() && !matches!(action, A::Scroll(_)) {
        return Err(invalid("expected_role", "no tool acts on a slider"));
    }
    let action = match action {
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

pub(super) fn code_pb(c: Code) -> pb::ActCode {
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
