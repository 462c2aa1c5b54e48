//! Who may call what on the authorizer: each call belongs to exactly one role (the credentials
//! themselves are the `credentials` crate's, shared with the browser runtime).

use credentials::{Role, Scope};

/// The calls of the authorizer's API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    CreateSession,
    RecordMessage,
    RecordToolCall,
    RecordRun,
    DeleteSession,
    StopSession,
    StopEverything,
    RecordProfileEvent,
    Authorize,
    ResolveApproval,
    GetApproval,
    ListApprovals,
    AwaitApproval,
    RedeemToken,
    CheckStop,
    GetGrant,
    ListGrants,
    RevokeGrant,
    ConnectAgent,
    ListAgents,
    DisconnectAgent,
    DescribeCaller,
    StartTask,
    ContinueTask,
    ListChats,
    ClaimTask,
    RenewTask,
}

impl Rpc {
    pub const ALL: [Self; 27] = [
        Self::CreateSession,
        Self::RecordMessage,
        Self::RecordToolCall,
        Self::RecordRun,
        Self::DeleteSession,
        Self::StopSession,
        Self::StopEverything,
        Self::RecordProfileEvent,
        Self::Authorize,
        Self::ResolveApproval,
        Self::GetApproval,
        Self::ListApprovals,
        Self::AwaitApproval,
        Self::RedeemToken,
        Self::CheckStop,
        Self::GetGrant,
        Self::ListGrants,
        Self::RevokeGrant,
        Self::ConnectAgent,
        Self::ListAgents,
        Self::DisconnectAgent,
        Self::DescribeCaller,
        Self::StartTask,
        Self::ContinueTask,
        Self::ListChats,
        Self::ClaimTask,
        Self::RenewTask,
    ];

    /// The call's method name on the wire (`/grant_ledger.v1.Authorizer/<name>`).
    pub fn method(self) -> &'static str {
        match self {
            Self::CreateSession => "CreateSession",
            Self::RecordMessage => "RecordMessage",
            Self::RecordToolCall => "RecordToolCall",
            Self::RecordRun => "RecordRun",
            Self::DeleteSession => "DeleteSession",
            Self::StopSession => "StopSession",
            Self::StopEverything => "StopEverything",
            Self::RecordProfileEvent => "RecordProfileEvent",
            Self::Authorize => "Authorize",
            Self::ResolveApproval => "ResolveApproval",
            Self::GetApproval => "GetApproval",
            Self::ListApprovals => "ListApprovals",
            Self::AwaitApproval => "AwaitApproval",
            Self::RedeemToken => "RedeemToken",
            Self::CheckStop => "CheckStop",
            Self::GetGrant => "GetGrant",
            Self::ListGrants => "ListGrants",
            Self::RevokeGrant => "RevokeGrant",
            Self::ConnectAgent => "ConnectAgent",
            Self::ListAgents => "ListAgents",
            Self::DisconnectAgent => "DisconnectAgent",
            Self::DescribeCaller => "DescribeCaller",
            Self::StartTask => "StartTask",
            Self::ContinueTask => "ContinueTask",
            Self::ListChats => "ListChats",
            Self::ClaimTask => "ClaimTask",
            Self::RenewTask => "RenewTask",
        }
    }

    /// The call a request path names, for the gate that authenticates before the body is read.
    pub fn route(path: &str) -> Option<(&'static [Role], &'static [Scope])> {
        let method = path.strip_prefix("/grant_ledger.v1.Authorizer/")?;
        Self::ALL.into_iter().find(|r| r.method() == method).map(|r| (r.roles(), r.scopes()))
    }

    /// The roles that may make this call. `RecordMessage` has two: the worker records messages
    /// from others, and only the gateway, for the owner it authenticated, records the owner's own
    /// (the turn a task grant checks starts there). `CheckStop` reads a Stop for either.
    pub fn roles(self) -> &'static [Role] {
        match self {
            Self::CreateSession
            | Self::RecordToolCall
            | Self::RecordRun
            | Self::Authorize
            | Self::AwaitApproval
            | Self::DescribeCaller
            | Self::ClaimTask
            | Self::RenewTask => &[Role::Worker],
            Self::RecordMessage => &[Role::Worker, Role::Gateway],
            Self::RedeemToken => &[Role::Runtime],
            // The runtime before each dispatch, the worker before each read.
            Self::CheckStop => &[Role::Runtime, Role::Worker],
            // Deleting a chat is the owner's act, made through the owner's client.
            Self::DeleteSession
            | Self::StopSession
            | Self::StopEverything
            | Self::ResolveApproval
            | Self::GetApproval
            | Self::ListApprovals
            | Self::GetGrant
            | Self::ListGrants
            | Self::RevokeGrant
            | Self::ConnectAgent
            | Self::ListAgents
            | Self::DisconnectAgent
            // The owner's words start and continue tasks: never the worker's.
            | Self::StartTask
            | Self::ContinueTask
            | Self::ListChats => &[Role::Gateway],
            Self::RecordProfileEvent => &[Role::Profiles],
        }
    }

    /// The owner's scopes the gateway must carry for this call. Resolving with
    /// `approve_for_task` needs `browser.grant.write` as well, checked where the resolution is read.
    pub fn scopes(self) -> &'static [Scope] {
        match self {
            // Stopping only takes authority away: any owner who answers cards may.
            Self::ResolveApproval
            | Self::GetApproval
            | Self::ListApprovals
            | Self::StopSession
            | Self::StopEverything
            // Connecting an agent lends it no authority the owner's cards do not grant.
            | Self::ConnectAgent
            | Self::ListAgents
            | Self::DisconnectAgent
            // A task lends the agent no authority: each act is still decided and carded.
            | Self::StartTask
            | Self::ContinueTask
            | Self::ListChats => &[Scope::ApprovalResolve],
            Self::GetGrant | Self::ListGrants => &[Scope::GrantRead],
            Self::RevokeGrant => &[Scope::GrantWrite],
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_resolves_nothing() {
        let worker: Vec<_> = Rpc::ALL.into_iter().filter(|r| r.roles().contains(&Role::Worker)).collect();
        assert_eq!(
            worker,
            [
                Rpc::CreateSession,
                Rpc::RecordMessage,
                Rpc::RecordToolCall,
                Rpc::RecordRun,
                Rpc::Authorize,
                Rpc::AwaitApproval,
                Rpc::CheckStop,
                Rpc::DescribeCaller,
                Rpc::ClaimTask,
                Rpc::RenewTask
            ]
        );
        assert_eq!(Rpc::ResolveApproval.roles(), [Role::Gateway]);
        assert_eq!(Rpc::RedeemToken.roles(), [Role::Runtime]);
    }
}
