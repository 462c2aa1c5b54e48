//! The authorizer, asked with the runtime's own `runtime` credential: approval tokens redeemed
//! for the approved act's dispatch ticket, and each ticket's Stop read just before dispatch.

use proto::v1 as gl;
use std::time::Duration;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use tonic::{Request, Status};

use crate::config::AuthorizerLink;
use crate::session::{ActAction, Redeem, RedeemError, Redemption};

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
            ActAction::Type { .. } => r.text_digest.clone().unwrap_or_default(),
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
            form_digest: r.form_digest.unwrap_or_default(),
            element_name: r.element_name.to_owned(),
            page_origin: r.page_origin.to_owned(),
        });
        req.metadata_mut().insert("authorization", bearer.clone());
        match client.clone().redeem_token(req).await {
            Ok(reply) => {
                reply.into_inner().ticket.ok_or_else(|| RedeemError::Refused("the authorizer sent no ticket".into()))
            }
            Err(s) => Err(refusal(&s, "token")),
        }
    }

    async fn check_stop(&self, ticket: &gl::DispatchTicket) -> Result<Option<Duration>, RedeemError> {
        let (Some(client), Some(bearer)) = (&self.client, &self.bearer) else {
            return Err(RedeemError::Unavailable("this runtime has no authorizer to check its tickets at".into()));
        };
        let mut req = Request::new(gl::CheckStopRequest { session_id: String::new(), ticket: Some(ticket.clone()) });
        req.metadata_mut().insert("authorization", bearer.clone());
        match client.clone().check_stop(req).await {
            Ok(reply) => {
                let reply = reply.into_inner();
                // The window is never longer than this runtime's own: that is what a Stop waits.
                let within = Duration::from_millis(reply.dispatch_within_ms.into()).min(proto::DISPATCH_WINDOW);
                Ok(Some(within).filter(|_| !reply.stopped))
            }
            // An authorizer of the release before: the owner's Stop cannot be read there.
            Err(s) if s.code() == tonic::Code::Unimplemented => Err(RedeemError::Older(
                "the authorizer is of an older release (it cannot tell this runtime of the owner's Stop): \
                 upgrade the authorizers before the runtimes; nothing is dispatched until then"
                    .into(),
            )),
            Err(s) => Err(refusal(&s, "ticket")),
        }
    }
}

/// What an authorizer's error status means for the token or ticket the runtime sent.
fn refusal(s: &Status, what: &str) -> RedeemError {
    use tonic::Code as C;
    match s.code() {
        // Not this token or ticket: never issued, used or expired, or for another run, snapshot
        // or ref.
        C::NotFound | C::FailedPrecondition | C::InvalidArgument | C::AlreadyExists | C::OutOfRange => {
            RedeemError::Invalid(format!("the authorizer refused the {what}: {}", s.message()))
        }
        // A refusal of the token itself (any reason but the caller's role).
        C::PermissionDenied if !caller_refused(s) => {
            RedeemError::Invalid(format!("the authorizer refused the {what}: {}", s.message()))
        }
        // The runtime's own credential or the authorizer itself is at fault.
        C::Unauthenticated | C::PermissionDenied | C::Internal | C::Unimplemented | C::DataLoss => {
            RedeemError::Refused(format!("the authorizer refused the runtime: {}", s.message()))
        }
        _ => RedeemError::Unavailable(s.message().to_owned()),
    }
}

/// The act as the authorizer names it (no text: the runtime checks the record value itself).
pub(super) fn action_pb(a: &ActAction) -> gl::Action {
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
pub(super) fn caller_refused(s: &Status) -> bool {
    use tonic_types::StatusExt;
    s.get_error_details().error_info().is_some_and(|i| i.reason == transport::CALLER_NOT_PERMITTED)
}
